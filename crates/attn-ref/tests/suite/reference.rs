//! Deterministic tests of the reference, its tiled twin and the emulation: hand-computed
//! cases, masking, GQA, scale, odd sizes, NaN propagation and every error path.

use crate::common::{assert_close, max_abs_diff, normal_f32, qkv};
use attn_ref::reference::emulate::{forward_emulated, Storage};
use attn_ref::reference::tiled::forward_tiled;
use attn_ref::reference::{
    attention_weights, forward, forward_naive, forward_rows, RefOutput, RowSelection,
};
use attn_ref::{Attention, AttnError, AttnShape, Causal, Problem, ReferenceBackend};

const E: f64 = std::f64::consts::E;

/// Every implementation on the same inputs: (name, output).
fn all_impls(p: &Problem, q: &[f64], k: &[f64], v: &[f64]) -> Vec<(&'static str, RefOutput)> {
    vec![
        ("forward", forward(p, q, k, v).unwrap()),
        ("naive", forward_naive(p, q, k, v).unwrap()),
        ("tiled 1x1", forward_tiled(p, q, k, v, 1, 1, &[]).unwrap().0),
        (
            "tiled 64x128",
            forward_tiled(p, q, k, v, 64, 128, &[]).unwrap().0,
        ),
    ]
}

#[test]
fn two_by_two_by_hand() {
    let shape = AttnShape::self_attention(1, 1, 2, 2).unwrap();
    let p = Problem::new(shape, Causal::None).with_scale(1.0).unwrap();
    let q = [1.0, 0.0, 0.0, 2.0];
    let k = [1.0, 0.0, 0.0, 1.0];
    let v = [1.0, 2.0, 3.0, 4.0];
    // Row 0: scores (1, 0) → weights (e, 1)/(e+1). Row 1: scores (0, 2) → (1, e²)/(1+e²).
    let (w0, w1) = (E / (E + 1.0), 1.0 / (E + 1.0));
    let (u0, u1) = (1.0 / (1.0 + E * E), E * E / (1.0 + E * E));
    let o = [
        w0 + 3.0 * w1,
        2.0 * w0 + 4.0 * w1,
        u0 + 3.0 * u1,
        2.0 * u0 + 4.0 * u1,
    ];
    let lse = [(E + 1.0).ln(), (1.0 + E * E).ln()];
    for (name, out) in all_impls(&p, &q, &k, &v) {
        assert_close(&format!("{name} O"), &out.o, &o, 1e-15);
        assert_close(&format!("{name} LSE"), &out.lse, &lse, 1e-15);
    }
}

#[test]
fn one_visible_key_copies_its_value_row() {
    let shape = AttnShape::new(1, 1, 1, 3, 5, 8).unwrap();
    let p = Problem::new(shape, Causal::TopLeft);
    let (q, k, v) = qkv(&shape, 11);
    for (name, out) in all_impls(&p, &q, &k, &v) {
        // Row 0 sees key 0 only: weight exactly 1, so O = V[0] and LSE = the score.
        assert_eq!(&out.o[..8], &v[..8], "{name}");
        let score: f64 = q[..8].iter().zip(&k[..8]).map(|(a, b)| a * b).sum::<f64>() * p.scale();
        assert!(
            (out.lse[0] - score).abs() <= 1e-15 * score.abs().max(1.0),
            "{name}"
        );
    }
}

#[test]
fn fully_masked_rows_are_zero_with_lse_minus_infinity() {
    // Bottom-right with Sq = 5 > Sk = 3: rows 0 and 1 see no key, row 2 sees key 0.
    let shape = AttnShape::new(2, 2, 1, 5, 3, 4).unwrap();
    let p = Problem::new(shape, Causal::BottomRight);
    assert_eq!(
        (p.visible_keys(0), p.visible_keys(1), p.visible_keys(2)),
        (0, 0, 1)
    );
    let (q, k, v) = qkv(&shape, 12);
    let mut outs = all_impls(&p, &q, &k, &v);
    let q32: Vec<f32> = q.iter().map(|&x| x as f32).collect();
    let k32: Vec<f32> = k.iter().map(|&x| x as f32).collect();
    let v32: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    outs.push((
        "emulated",
        forward_emulated(&p, &q32, &k32, &v32, Storage::F16).unwrap(),
    ));
    for (name, out) in outs {
        for b in 0..2 {
            for h in 0..2 {
                for i in 0..5 {
                    let row = &out.o[shape.q_offset(b, h, i)..][..4];
                    let lse = out.lse[shape.lse_offset(b, h, i)];
                    if i < 2 {
                        assert!(row.iter().all(|&x| x == 0.0), "{name} row {i}: {row:?}");
                        assert_eq!(lse, f64::NEG_INFINITY, "{name} row {i}");
                    } else {
                        assert!(
                            row.iter().all(|x| x.is_finite()) && lse.is_finite(),
                            "{name}"
                        );
                    }
                }
            }
        }
    }
    let rows = forward_rows(&p, &q, &k, &v, &RowSelection::Rows(vec![0, 4])).unwrap();
    assert_eq!(rows.lse_at(1, 1, 0), f64::NEG_INFINITY);
    assert!(rows.o_row(1, 1, 0).iter().all(|&x| x == 0.0));
    assert!(rows.lse_at(1, 1, 1).is_finite());
}

/// Attention with an explicit mask written from the definitions, independent of `Causal`.
fn masked_by_definition(
    shape: &AttnShape,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    bottom_right: bool,
) -> Vec<f64> {
    let (sq, sk, d) = (
        shape.q_len() as i64,
        shape.kv_len() as i64,
        shape.head_dim(),
    );
    let scale = 1.0 / (d as f64).sqrt();
    let mut o = vec![0.0; shape.o_elems()];
    for h in 0..shape.q_heads() {
        for i in 0..sq {
            let limit = if bottom_right { i + sk - sq } else { i };
            let keys: Vec<usize> = (0..sk)
                .filter(|&j| j <= limit)
                .map(|j| j as usize)
                .collect();
            let qi = &q[shape.q_offset(0, h, i as usize)..][..d];
            let s: Vec<f64> = keys
                .iter()
                .map(|&j| {
                    let kj = &k[shape.kv_offset(0, shape.kv_head_of(h), j)..][..d];
                    scale * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>()
                })
                .collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let l: f64 = s.iter().map(|x| (x - m).exp()).sum();
            for (&j, sj) in keys.iter().zip(&s) {
                let vj = &v[shape.kv_offset(0, shape.kv_head_of(h), j)..][..d];
                for dd in 0..d {
                    o[shape.q_offset(0, h, i as usize) + dd] += (sj - m).exp() / l * vj[dd];
                }
            }
        }
    }
    o
}

#[test]
fn causal_alignments_with_unequal_lengths() {
    for (sq, sk) in [(5, 9), (9, 5), (1, 7), (7, 1), (6, 6)] {
        let shape = AttnShape::new(1, 2, 2, sq, sk, 8).unwrap();
        let (q, k, v) = qkv(&shape, 20 + sq as u64 * 31 + sk as u64);
        for (causal, bottom_right) in [(Causal::TopLeft, false), (Causal::BottomRight, true)] {
            let p = Problem::new(shape, causal);
            let expected = masked_by_definition(&shape, &q, &k, &v, bottom_right);
            for (name, out) in all_impls(&p, &q, &k, &v) {
                assert_close(
                    &format!("{name} {causal} {sq}x{sk}"),
                    &out.o,
                    &expected,
                    1e-13,
                );
            }
        }
        if sq != sk {
            let tl = forward(&Problem::new(shape, Causal::TopLeft), &q, &k, &v).unwrap();
            let br = forward(&Problem::new(shape, Causal::BottomRight), &q, &k, &v).unwrap();
            assert!(
                max_abs_diff(&tl.o, &br.o) > 1e-3,
                "alignments must differ at {sq}x{sk}"
            );
        }
    }
}

#[test]
fn gqa_equals_explicitly_repeated_kv_heads() {
    let gqa = AttnShape::new(2, 6, 2, 13, 17, 8).unwrap();
    let mha = AttnShape::new(2, 6, 6, 13, 17, 8).unwrap();
    let (q, k, v) = qkv(&gqa, 30);
    let repeat = |x: &[f64]| -> Vec<f64> {
        let mut out = Vec::with_capacity(mha.kv_elems());
        for b in 0..2 {
            for h in 0..6 {
                out.extend_from_slice(&x[gqa.kv_offset(b, gqa.kv_head_of(h), 0)..][..17 * 8]);
            }
        }
        out
    };
    let (k6, v6) = (repeat(&k), repeat(&v));
    for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
        let a = forward(&Problem::new(gqa, causal), &q, &k, &v).unwrap();
        let b = forward(&Problem::new(mha, causal), &q, &k6, &v6).unwrap();
        assert_eq!(a, b, "{causal}");
        let t = forward_tiled(&Problem::new(gqa, causal), &q, &k, &v, 5, 3, &[])
            .unwrap()
            .0;
        assert_close("tiled gqa", &t.o, &b.o, 1e-12);
    }
}

#[test]
fn scale_multiplies_the_scores() {
    let shape = AttnShape::new(1, 2, 1, 9, 11, 16).unwrap();
    let (q, k, v) = qkv(&shape, 40);
    let q2: Vec<f64> = q.iter().map(|x| 2.0 * x).collect();
    let p = Problem::new(shape, Causal::None);
    // scale·(2q)·k == (2·scale)·q·k exactly: doubling is exact in binary floating point.
    let a = forward(&p.with_scale(0.25).unwrap(), &q2, &k, &v).unwrap();
    let b = forward(&p.with_scale(0.5).unwrap(), &q, &k, &v).unwrap();
    assert_eq!(a, b);
    let default = forward(&p, &q, &k, &v).unwrap();
    assert!(max_abs_diff(&default.o, &b.o) > 1e-3, "scale must matter");
    // A huge scale turns softmax into argmax: O is the value row of the best key.
    let hard = forward(&p.with_scale(1e7).unwrap(), &q, &k, &v).unwrap();
    for i in 0..9 {
        let qi = &q[shape.q_offset(0, 0, i)..][..16];
        let best = (0..11)
            .max_by(|&a, &b| {
                let dot = |j: usize| -> f64 {
                    qi.iter()
                        .zip(&k[shape.kv_offset(0, 0, j)..][..16])
                        .map(|(x, y)| x * y)
                        .sum()
                };
                dot(a).total_cmp(&dot(b))
            })
            .unwrap();
        let got = &hard.o[shape.q_offset(0, 0, i)..][..16];
        let want = &v[shape.kv_offset(0, 0, best)..][..16];
        assert_close(&format!("argmax row {i}"), got, want, 1e-9);
    }
}

#[test]
fn lengths_that_are_not_tile_multiples() {
    for (sq, sk, causal) in [
        (131, 131, Causal::TopLeft),
        (67, 131, Causal::BottomRight),
        (131, 67, Causal::None),
    ] {
        let shape = AttnShape::new(1, 2, 1, sq, sk, 24).unwrap();
        let (q, k, v) = qkv(&shape, 50 + sq as u64);
        let p = Problem::new(shape, causal);
        let naive = forward_naive(&p, &q, &k, &v).unwrap();
        assert_close(
            "forward",
            &forward(&p, &q, &k, &v).unwrap().o,
            &naive.o,
            1e-13,
        );
        for (bm, bn) in [(64, 128), (17, 29), (128, 64), (200, 200)] {
            let t = forward_tiled(&p, &q, &k, &v, bm, bn, &[]).unwrap().0;
            assert_close(&format!("tiled {bm}x{bn} O"), &t.o, &naive.o, 1e-12);
            assert_close(&format!("tiled {bm}x{bn} LSE"), &t.lse, &naive.lse, 1e-12);
        }
    }
}

#[test]
fn head_dims_one_and_256() {
    for d in [1, 256] {
        let shape = AttnShape::new(1, 2, 2, 37, 45, d).unwrap();
        let (q, k, v) = qkv(&shape, 60 + d as u64);
        for causal in [Causal::None, Causal::BottomRight] {
            let p = Problem::new(shape, causal);
            let naive = forward_naive(&p, &q, &k, &v).unwrap();
            for (name, out) in all_impls(&p, &q, &k, &v) {
                assert_close(&format!("{name} D={d} O"), &out.o, &naive.o, 1e-12);
                assert_close(&format!("{name} D={d} LSE"), &out.lse, &naive.lse, 1e-12);
            }
        }
    }
}

#[test]
fn input_types_widen_exactly() {
    let shape = AttnShape::new(1, 2, 1, 7, 9, 8).unwrap();
    let p = Problem::new(shape, Causal::TopLeft);
    let (q, k, v) = qkv(&shape, 70);
    let h16 = |x: &[f64]| {
        x.iter()
            .map(|&y| half::f16::from_f64(y))
            .collect::<Vec<_>>()
    };
    let b16 = |x: &[f64]| {
        x.iter()
            .map(|&y| half::bf16::from_f64(y))
            .collect::<Vec<_>>()
    };
    let (qh, kh, vh) = (h16(&q), h16(&k), h16(&v));
    let widened = |x: &[half::f16]| x.iter().map(|y| y.to_f64()).collect::<Vec<_>>();
    assert_eq!(
        forward(&p, &qh, &kh, &vh).unwrap(),
        forward(&p, &widened(&qh), &widened(&kh), &widened(&vh)).unwrap()
    );
    let (qb, kb, vb) = (b16(&q), b16(&k), b16(&v));
    let wb = |x: &[half::bf16]| x.iter().map(|y| y.to_f64()).collect::<Vec<_>>();
    assert_eq!(
        forward(&p, &qb, &kb, &vb).unwrap(),
        forward(&p, &wb(&qb), &wb(&kb), &wb(&vb)).unwrap()
    );
}

#[test]
fn nan_and_inf_propagate_to_the_rows_that_see_them() {
    let shape = AttnShape::self_attention(1, 1, 12, 4).unwrap();
    let p = Problem::new(shape, Causal::TopLeft);
    let (mut q, mut k, mut v) = qkv(&shape, 80);
    q[shape.q_offset(0, 0, 2)] = f64::NAN; // row 2 only
    v[shape.kv_offset(0, 0, 7) + 1] = f64::NAN; // rows ≥ 7 see key 7
    k[shape.kv_offset(0, 0, 9) + 3] = f64::INFINITY; // rows ≥ 9: score +∞ → inf − inf = NaN
    for i in 9..12 {
        q[shape.q_offset(0, 0, i) + 3] = 1.0; // make the infinite score +∞, not −∞
    }
    let q32: Vec<f32> = q.iter().map(|&x| x as f32).collect();
    let k32: Vec<f32> = k.iter().map(|&x| x as f32).collect();
    let v32: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    let mut outs = all_impls(&p, &q, &k, &v);
    outs.push((
        "emulated",
        forward_emulated(&p, &q32, &k32, &v32, Storage::Bf16).unwrap(),
    ));
    for (name, out) in outs {
        for i in 0..12 {
            let row = &out.o[i * 4..][..4];
            match i {
                2 | 9.. => assert!(row.iter().all(|x| x.is_nan()), "{name} row {i}: {row:?}"),
                7 | 8 => {
                    // Only column 1 of V is NaN; the others stay finite.
                    assert!(
                        row[1].is_nan() && row[0].is_finite(),
                        "{name} row {i}: {row:?}"
                    )
                }
                _ => assert!(row.iter().all(|x| x.is_finite()), "{name} row {i}: {row:?}"),
            }
        }
        assert!(
            out.lse[2].is_nan() && out.lse[9].is_nan() && out.lse[7].is_finite(),
            "{name}"
        );
    }
    // A −∞ score is not an error: that key just gets weight 0.
    k[shape.kv_offset(0, 0, 9) + 3] = f64::NEG_INFINITY;
    for (name, out) in all_impls(&p, &q, &k, &v) {
        assert!(
            out.o[9 * 4..]
                .iter()
                .enumerate()
                .all(|(c, x)| x.is_finite() == (c % 4 != 1)),
            "{name}"
        );
    }
}

#[test]
fn scores_that_are_all_minus_infinity_give_nan_not_a_masked_row() {
    let shape = AttnShape::self_attention(1, 1, 3, 2).unwrap();
    let p = Problem::new(shape, Causal::TopLeft);
    let q = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0];
    let k = [f64::NEG_INFINITY, 0.0, 1.0, 0.0, 2.0, 0.0];
    let v = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0];
    let k32: Vec<f32> = k.iter().map(|&x| x as f32).collect();
    let to32 = |x: &[f64]| x.iter().map(|&y| y as f32).collect::<Vec<_>>();
    let mut outs = all_impls(&p, &q, &k, &v);
    outs.push((
        "emulated",
        forward_emulated(&p, &to32(&q), &k32, &to32(&v), Storage::F16).unwrap(),
    ));
    for (name, out) in outs {
        // Row 0's only score is −∞ (an Inf input), unlike a masked row: NaN.
        assert!(
            out.o[0].is_nan() && out.lse[0].is_nan(),
            "{name}: {:?}",
            out.o
        );
        // Row 1 also has a finite score: the −∞ one just gets weight 0.
        assert!((out.o[2] - 2.0).abs() < 1e-3, "{name}: {:?}", out.o);
    }
}

#[test]
fn a_masked_nan_never_reaches_the_row() {
    let shape = AttnShape::self_attention(1, 1, 70, 3).unwrap();
    let p = Problem::new(shape, Causal::TopLeft);
    let (q, mut k, mut v) = qkv(&shape, 81);
    k[shape.kv_offset(0, 0, 69)] = f64::NAN;
    v[shape.kv_offset(0, 0, 69)] = f64::NAN;
    for (name, out) in all_impls(&p, &q, &k, &v) {
        assert!(out.o[..69 * 3].iter().all(|x| x.is_finite()), "{name}");
        assert!(out.o[69 * 3..].iter().all(|x| x.is_nan()), "{name}");
    }
}

#[test]
fn row_selections() {
    assert_eq!(RowSelection::All.resolve(4).unwrap(), vec![0, 1, 2, 3]);
    assert_eq!(
        RowSelection::Rows(vec![3, 1, 3]).resolve(4).unwrap(),
        vec![1, 3]
    );
    assert_eq!(
        RowSelection::Evenly { count: 3 }.resolve(9).unwrap(),
        vec![0, 4, 8]
    );
    assert_eq!(
        RowSelection::Evenly { count: 1 }.resolve(9).unwrap(),
        vec![8]
    );
    assert_eq!(
        RowSelection::Evenly { count: 50 }.resolve(5).unwrap(),
        vec![0, 1, 2, 3, 4]
    );
    let evenly = RowSelection::Evenly { count: 64 }.resolve(16384).unwrap();
    assert_eq!((evenly.len(), evenly[0], evenly[63]), (64, 0, 16383));
    assert!(evenly.windows(2).all(|w| w[0] < w[1]));
    let a = RowSelection::Sample { count: 10, seed: 5 }
        .resolve(1000)
        .unwrap();
    let b = RowSelection::Sample { count: 10, seed: 5 }
        .resolve(1000)
        .unwrap();
    let c = RowSelection::Sample { count: 10, seed: 6 }
        .resolve(1000)
        .unwrap();
    assert_eq!(a, b, "a seed replays its sample");
    assert_ne!(a, c);
    assert!(a.len() == 10 && a.windows(2).all(|w| w[0] < w[1]) && a[9] < 1000);
    for bad in [
        RowSelection::Rows(vec![]),
        RowSelection::Rows(vec![0, 4]),
        RowSelection::Evenly { count: 0 },
        RowSelection::Sample { count: 0, seed: 1 },
    ] {
        assert!(
            matches!(bad.resolve(4), Err(AttnError::InvalidArgument(_))),
            "{bad:?}"
        );
    }
    let msg = RowSelection::Rows(vec![7])
        .resolve(4)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("row 7") && msg.contains("4 query rows"),
        "{msg}"
    );
}

#[test]
fn selected_rows_equal_the_full_forward_exactly() {
    let shape = AttnShape::new(2, 4, 2, 100, 77, 12).unwrap();
    let (q, k, v) = qkv(&shape, 90);
    for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
        let p = Problem::new(shape, causal);
        let full = forward(&p, &q, &k, &v).unwrap();
        for sel in [
            RowSelection::Sample { count: 37, seed: 3 },
            RowSelection::Evenly { count: 5 },
            RowSelection::All,
        ] {
            let part = forward_rows(&p, &q, &k, &v, &sel).unwrap();
            assert_eq!(part.shape(), &shape);
            for b in 0..2 {
                for h in 0..4 {
                    for (idx, &i) in part.rows.iter().enumerate() {
                        assert_eq!(
                            part.o_row(b, h, idx),
                            &full.o[shape.q_offset(b, h, i)..][..12]
                        );
                        assert_eq!(
                            part.lse_at(b, h, idx).to_bits(),
                            full.lse[shape.lse_offset(b, h, i)].to_bits()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn tiles_expose_the_online_softmax_state() {
    // Top-left, Sq = Sk = 10, 4×3 tiles. Query tile 1 (rows 4..8) sees keys ≤ 7: key tiles
    // 0, 1, 2 are processed (tile 2 partly masked), tile 3 (keys 9..10) is skipped.
    let shape = AttnShape::self_attention(1, 2, 10, 5).unwrap();
    let p = Problem::new(shape, Causal::TopLeft);
    let (q, k, v) = qkv(&shape, 100);
    let (out, tiles) = forward_tiled(&p, &q, &k, &v, 4, 3, &[(0, 1, 1), (0, 0, 2)]).unwrap();
    let ids: Vec<(usize, usize, usize)> = tiles
        .iter()
        .map(|t| (t.id.h, t.id.q_tile, t.id.k_tile))
        .collect();
    assert_eq!(
        ids,
        vec![
            (0, 2, 0),
            (0, 2, 1),
            (0, 2, 2),
            (0, 2, 3),
            (1, 1, 0),
            (1, 1, 1),
            (1, 1, 2)
        ]
    );
    let last_of_tile = |h: usize, qt: usize| {
        tiles
            .iter()
            .rfind(|t| t.id.h == h && t.id.q_tile == qt)
            .unwrap()
    };
    for t in &tiles {
        assert_eq!(t.cols, if t.id.k_tile == 3 { 1 } else { 3 });
        assert_eq!(t.rows, if t.id.q_tile == 2 { 2 } else { 4 });
        for r in 0..t.rows {
            let i = t.id.q_tile * 4 + r;
            for c in 0..t.cols {
                let j = t.id.k_tile * 3 + c;
                let (s, pv) = (t.s[r * t.cols + c], t.p[r * t.cols + c]);
                if j > i {
                    assert_eq!((s, pv), (f64::NEG_INFINITY, 0.0), "masked ({i},{j})");
                } else {
                    let qi = &q[shape.q_offset(0, t.id.h, i)..][..5];
                    let kj = &k[shape.kv_offset(0, t.id.h, j)..][..5];
                    let want = p.scale() * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>();
                    assert!((s - want).abs() < 1e-14, "s({i},{j})");
                    assert!((pv - (s - t.m[r]).exp()).abs() < 1e-15, "p({i},{j})");
                    assert!(pv <= 1.0 && t.l[r] >= 1.0);
                }
            }
        }
    }
    for (h, qt) in [(1, 1), (0, 2)] {
        let t = last_of_tile(h, qt);
        for r in 0..t.rows {
            let lse = out.lse[shape.lse_offset(0, h, qt * 4 + r)];
            assert!((t.m[r] + t.l[r].ln() - lse).abs() < 1e-14);
        }
    }
    // Running max never decreases, running sum never drops below 1 once a key was seen.
    let h1: Vec<_> = tiles.iter().filter(|t| t.id.h == 1).collect();
    for w in h1.windows(2) {
        assert!(w[0].m.iter().zip(&w[1].m).all(|(a, b)| a <= b));
    }
}

#[test]
fn a_tile_may_hold_rows_that_see_nothing_yet() {
    // Bottom-right, Sq = 6 > Sk = 3: rows 0..3 see nothing, row 3 sees key 0.
    let shape = AttnShape::new(1, 1, 1, 6, 3, 2).unwrap();
    let p = Problem::new(shape, Causal::BottomRight);
    let (q, k, v) = qkv(&shape, 101);
    let (out, tiles) = forward_tiled(&p, &q, &k, &v, 4, 2, &[(0, 0, 0)]).unwrap();
    assert_eq!(
        tiles.len(),
        1,
        "key tile 1 is masked for rows 0..4: skipped"
    );
    let t = &tiles[0];
    for r in 0..3 {
        assert_eq!((t.m[r], t.l[r]), (f64::NEG_INFINITY, 0.0));
        assert_eq!(&t.p[r * 2..][..2], &[0.0, 0.0]);
    }
    assert_eq!((t.m[3], t.l[3], t.p[6], t.p[7]), (t.s[6], 1.0, 1.0, 0.0));
    assert_eq!(&out.o[6..8], &v[0..2]);
}

#[test]
fn emulation_is_within_design_caps() {
    // The tolerance rule's sanity caps: max abs fp16 4e-3, bf16 3e-2; rel L2 fp16 1e-3, bf16 8e-3; LSE 1e-3.
    // The reference runs on the inputs already rounded to the storage type (what a kernel
    // actually receives), so the error measured is the kernel's own: P and O rounding and
    // f32 arithmetic. (Against unrounded inputs, bf16's input rounding alone moves LSE by
    // about 2e-3 at D = 64, beyond the 1e-3 cap.)
    let cases = [
        (AttnShape::new(1, 2, 2, 70, 70, 64).unwrap(), Causal::None),
        (
            AttnShape::new(2, 4, 2, 33, 150, 128).unwrap(),
            Causal::BottomRight,
        ),
        (
            AttnShape::new(1, 2, 1, 129, 129, 32).unwrap(),
            Causal::TopLeft,
        ),
    ];
    for (n, (shape, causal)) in cases.into_iter().enumerate() {
        let p = Problem::new(shape, causal);
        let seed = 200 + 3 * n as u64;
        let (q, k, v) = (
            normal_f32(shape.q_elems(), seed),
            normal_f32(shape.kv_elems(), seed + 1),
            normal_f32(shape.kv_elems(), seed + 2),
        );
        let mut errs = Vec::new();
        for (storage, cap_abs, cap_rel) in [(Storage::F16, 4e-3, 1e-3), (Storage::Bf16, 3e-2, 8e-3)]
        {
            let round = |x: &[f32]| x.iter().map(|&y| storage.round(y)).collect::<Vec<_>>();
            let (q, k, v) = (round(&q), round(&k), round(&v));
            let exact = forward(&p, &q, &k, &v).unwrap();
            let emu = forward_emulated(&p, &q, &k, &v, storage).unwrap();
            let err = max_abs_diff(&emu.o, &exact.o);
            let num: f64 = emu
                .o
                .iter()
                .zip(&exact.o)
                .map(|(a, b)| (a - b) * (a - b))
                .sum();
            let den: f64 = exact.o.iter().map(|b| b * b).sum();
            let rel = (num / den).sqrt();
            let lse_err = max_abs_diff(&emu.lse, &exact.lse);
            assert!(
                err > 0.0 && err <= cap_abs,
                "{storage} case {n}: max abs {err:e}"
            );
            assert!(rel <= cap_rel, "{storage} case {n}: rel L2 {rel:e}");
            assert!(lse_err <= 1e-3, "{storage} case {n}: LSE {lse_err:e}");
            // O is stored in the storage type.
            assert!(emu
                .o
                .iter()
                .all(|&x| f64::from(storage.round(x as f32)) == x));
            errs.push(err);
        }
        assert!(
            errs[1] > errs[0],
            "bf16 (8-bit mantissa) must err more than fp16: {errs:?}"
        );
    }
}

#[test]
fn emulation_rounds_inputs_and_p() {
    // With inputs exactly representable and one visible key, p = 1 is exact: O = V[0]
    // exactly and LSE = the score up to f32 rounding.
    let shape = AttnShape::self_attention(1, 1, 2, 4).unwrap();
    let p = Problem::new(shape, Causal::TopLeft);
    let q = [0.5f32, -1.0, 0.25, 2.0, 1.0, 1.0, 1.0, 1.0];
    let k = [1.0f32, 0.5, -0.5, 0.125, 0.0, 1.0, 0.0, 1.0];
    let v = [0.1f32, 0.2, 0.3, 0.4, 1.0, 2.0, 3.0, 4.0].map(|x| Storage::F16.round(x));
    let emu = forward_emulated(&p, &q, &k, &v, Storage::F16).unwrap();
    for (x, want) in emu.o[..4].iter().zip(&v[..4]) {
        assert_eq!(*x, f64::from(*want), "O row 0 is V[0]");
    }
    let score = (0.5 - 0.5 - 0.125 + 0.25) * 0.5;
    assert!((emu.lse[0] - score).abs() < 1e-6);
    // Inputs that are not f16 values are rounded before use: a relative nudge of 1e-5 is
    // far below half an f16 ulp (2^-12 relative), so it rounds back to the same values.
    let v_off: Vec<f32> = v.iter().map(|x| x * (1.0 + 1e-5)).collect();
    assert_ne!(v_off, v);
    let emu2 = forward_emulated(&p, &q, &k, &v_off, Storage::F16).unwrap();
    assert_eq!(emu.o[..4], emu2.o[..4]);
}

#[test]
fn reference_backend_runs_the_reference() {
    let shape = AttnShape::new(1, 4, 2, 9, 13, 8).unwrap();
    let p = Problem::new(shape, Causal::BottomRight);
    let (q, k, v) = (
        normal_f32(shape.q_elems(), 300),
        normal_f32(shape.kv_elems(), 301),
        normal_f32(shape.kv_elems(), 302),
    );
    let backend = ReferenceBackend;
    assert_eq!(backend.name(), "reference-f64");
    let out = backend.forward(&p, &q, &k, &v).unwrap();
    assert_eq!(out, forward(&p, &q, &k, &v).unwrap().to_f32());
    let err = backend.forward(&p, &q[1..], &k, &v).unwrap_err();
    assert!(err.to_string().contains("Q has"), "{err}");
}

#[test]
fn shape_constructor_errors() {
    let names = [
        "batch", "q_heads", "kv_heads", "q_len", "kv_len", "head_dim",
    ];
    for (pos, name) in names.iter().enumerate() {
        let mut dims = [1usize; 6];
        dims[pos] = 0;
        let err = AttnShape::new(dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]).unwrap_err();
        assert_eq!(err, AttnError::ZeroSize { name }, "{name}");
        assert!(err.to_string().contains(name));
    }
    assert_eq!(
        AttnShape::new(1, 6, 4, 1, 1, 1).unwrap_err(),
        AttnError::HeadsNotDivisible {
            q_heads: 6,
            kv_heads: 4
        }
    );
    assert_eq!(
        AttnShape::new(1, usize::MAX, 1, 2, 1, 1).unwrap_err(),
        AttnError::TooLarge
    );
    assert_eq!(
        AttnShape::new(1, 1, 1, 1, usize::MAX / 2, 4).unwrap_err(),
        AttnError::TooLarge
    );
    assert_eq!(
        AttnShape::self_attention(1, 0, 4, 4).unwrap_err(),
        AttnError::ZeroSize { name: "q_heads" }
    );
    assert!(AttnShape::new(3, 8, 1, 5, 7, 64).is_ok(), "MQA is valid");
}

#[test]
fn problem_and_causal_errors() {
    let p = Problem::new(
        AttnShape::self_attention(1, 1, 4, 16).unwrap(),
        Causal::None,
    );
    assert_eq!(p.scale(), 0.25);
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        match p.with_scale(bad) {
            Err(AttnError::InvalidScale(x)) => assert!(x.is_nan() || x == bad),
            other => panic!("scale {bad}: {other:?}"),
        }
    }
    assert_eq!(p.with_scale(3.0).unwrap().scale(), 3.0);
    for c in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
        assert_eq!(Causal::parse(c.as_str()).unwrap(), c);
        assert_eq!(c.to_string(), c.as_str());
    }
    let err = Causal::parse("causal").unwrap_err();
    assert_eq!(err, AttnError::UnknownCausal("causal".to_string()));
    assert!(err.to_string().contains("top-left"));
}

#[test]
fn length_mismatches_are_reported_per_tensor() {
    let shape = AttnShape::new(1, 2, 1, 3, 4, 2).unwrap();
    let p = Problem::new(shape, Causal::None);
    let (q, k, v) = (vec![0.5f32; 12], vec![0.5f32; 8], vec![0.5f32; 8]);
    let want = |tensor, expected, got| AttnError::LengthMismatch {
        tensor,
        expected,
        got,
    };
    assert_eq!(
        shape.check_qkv_lens(11, 8, 8).unwrap_err(),
        want("Q", 12, 11)
    );
    assert_eq!(shape.check_qkv_lens(12, 9, 8).unwrap_err(), want("K", 8, 9));
    assert_eq!(shape.check_qkv_lens(12, 8, 0).unwrap_err(), want("V", 8, 0));
    assert_eq!(
        forward(&p, &q[..11], &k, &v).unwrap_err(),
        want("Q", 12, 11)
    );
    assert_eq!(
        forward_naive(&p, &q, &k[..7], &v).unwrap_err(),
        want("K", 8, 7)
    );
    assert_eq!(
        forward_rows(&p, &q, &k, &v[..1], &RowSelection::All).unwrap_err(),
        want("V", 8, 1)
    );
    assert_eq!(
        forward_tiled(&p, &q, &k[..7], &v, 2, 2, &[]).unwrap_err(),
        want("K", 8, 7)
    );
    assert_eq!(
        forward_emulated(&p, &q, &k, &v[..7], Storage::F16).unwrap_err(),
        want("V", 8, 7)
    );
    assert_eq!(
        attention_weights(&p, &q, &k[..2], 0, 0, 0).unwrap_err(),
        want("K", 8, 2)
    );
    let msg = want("V", 8, 7).to_string();
    assert_eq!(msg, "V has 7 elements but the shape needs 8");
}

#[test]
fn invalid_tile_arguments() {
    let shape = AttnShape::self_attention(1, 2, 10, 2).unwrap();
    let p = Problem::new(shape, Causal::None);
    let x = vec![0.25f64; shape.q_elems()];
    for (bm, bn) in [(0, 4), (4, 0)] {
        let err = forward_tiled(&p, &x, &x, &x, bm, bn, &[]).unwrap_err();
        assert!(
            matches!(err, AttnError::InvalidArgument(ref m) if m.contains("at least 1")),
            "{err}"
        );
    }
    // 10 rows in tiles of 4: query tiles 0, 1, 2.
    assert!(forward_tiled(&p, &x, &x, &x, 4, 4, &[(0, 1, 2)]).is_ok());
    for bad in [(1, 0, 0), (0, 2, 0), (0, 0, 3)] {
        let err = forward_tiled(&p, &x, &x, &x, 4, 4, &[bad]).unwrap_err();
        assert!(
            matches!(err, AttnError::InvalidArgument(ref m) if m.contains("capture")),
            "{err}"
        );
    }
    let err = attention_weights(&p, &x, &x, 0, 0, 10).unwrap_err();
    assert!(matches!(err, AttnError::InvalidArgument(_)), "{err}");
}

#[test]
fn fp8_p_rounding_and_spec() {
    use attn_ref::reference::emulate::{forward_emulated_spec, EmuSpec, PRounding, Storage};
    let e4 = PRounding::E4m3 { log2_gain: 8 };
    // 1.0·2⁸ = 256 is an E4M3 value; 0.3·256 = 76.8 rounds to 80 (3 mantissa bits).
    assert_eq!(e4.round(1.0), 1.0);
    let r = e4.round(0.3);
    assert!(r != 0.3 && (r - 0.3).abs() <= 0.3 / 16.0, "{r}");
    // Below 2⁻¹⁸ the scaled value is under half E4M3's smallest subnormal (2⁻⁹): it flushes.
    assert_eq!(e4.round(1e-7), 0.0);
    let shape = attn_ref::AttnShape::self_attention(1, 2, 40, 16).unwrap();
    let p = attn_ref::Problem::new(shape, attn_ref::Causal::None);
    let x: Vec<f32> = (0..shape.q_elems())
        .map(|i| (i as f32 * 0.37).sin())
        .collect();
    let exact = attn_ref::reference::forward(&p, &x, &x, &x).unwrap();
    let f16 = forward_emulated_spec(&p, &x, &x, &x, &EmuSpec::storage(Storage::F16)).unwrap();
    let spec = EmuSpec {
        inputs: None,
        p: e4,
        out: Storage::F16,
        block_n: 128,
        states: attn_ref::reference::emulate::KeyStates::One,
    };
    let fp8 = forward_emulated_spec(&p, &x, &x, &x, &spec).unwrap();
    let err = |o: &[f64]| {
        o.iter()
            .zip(&exact.o)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max)
    };
    assert!(
        err(&fp8.o) > err(&f16.o),
        "FP8 P must be coarser than f16 P"
    );
    assert!(err(&fp8.o) < 0.05, "{}", err(&fp8.o));
    let zero = EmuSpec { block_n: 0, ..spec };
    assert!(forward_emulated_spec(&p, &x, &x, &x, &zero).is_err());
}

/// `KeyStates::Split`: one split of one worker is the single state over the same tiles, bit
/// for bit; several splits and workers round P in other frames (a different result) that is
/// as close to the f64 reference; empty states (more splits than tiles) add nothing; a tile
/// that the workers cannot share is refused.
#[test]
fn split_key_states() {
    use attn_ref::reference::emulate::{forward_emulated_spec, EmuSpec, KeyStates};
    let shape = AttnShape::new(2, 4, 2, 3, 333, 64).unwrap();
    let p = Problem::new(shape, Causal::BottomRight);
    let q = normal_f32(shape.q_elems(), 11);
    let k = normal_f32(shape.kv_elems(), 12);
    let v = normal_f32(shape.kv_elems(), 13);
    let exact = attn_ref::reference::forward(&p, &q, &k, &v).unwrap();
    let one = EmuSpec {
        block_n: 64,
        ..EmuSpec::storage(Storage::F16)
    };
    let split = |tile, splits, workers| EmuSpec {
        states: KeyStates::Split {
            tile,
            splits,
            workers,
        },
        ..one
    };
    let base = forward_emulated_spec(&p, &q, &k, &v, &one).unwrap();
    let same = forward_emulated_spec(&p, &q, &k, &v, &split(64, 1, 1)).unwrap();
    assert!(base
        .o
        .iter()
        .zip(&same.o)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    assert!(base
        .lse
        .iter()
        .zip(&same.lse)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    let err = |o: &[f64]| max_abs_diff(o, &exact.o);
    for (tile, splits, workers) in [(64, 5, 4), (128, 3, 4), (64, 40, 2)] {
        let other = forward_emulated_spec(&p, &q, &k, &v, &split(tile, splits, workers)).unwrap();
        assert!(
            other.o != base.o,
            "({tile}, {splits}, {workers}) rounds in other frames"
        );
        assert!(
            err(&other.o) < 2.0 * err(&base.o) + 1e-5,
            "{} vs {}",
            err(&other.o),
            err(&base.o)
        );
        // The merge moves LSE only at f32 level (the inputs' f16 rounding moves it ~1e-4).
        assert!(max_abs_diff(&other.lse, &base.lse) < 1e-5);
    }
    assert!(forward_emulated_spec(&p, &q, &k, &v, &split(64, 2, 3)).is_err());
    assert!(forward_emulated_spec(&p, &q, &k, &v, &split(64, 0, 4)).is_err());
}
