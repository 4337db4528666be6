//! Tests of the backward reference: central finite differences of `L = Σ O ∘ G` with respect
//! to every element of Q, K and V (with `dO = G`), GQA sums, fully masked rows, the
//! `backward_with` variant, error paths and the kernel-rounding emulation.

use crate::common::{assert_close, max_abs, max_abs_diff, normal, normal_f32, qkv};
use attn_ref::reference::backward::backward_emulated;
use attn_ref::reference::emulate::Storage;
use attn_ref::reference::tiled::forward_tiled;
use attn_ref::reference::{backward, backward_with, forward, forward_naive, RefGrads};
use attn_ref::{Attention, AttnError, AttnShape, Causal, Problem, ReferenceBackend};
use proptest::prelude::*;

/// Step of the central differences.
const H: f64 = 1e-5;
/// Allowed `|fd − analytic| / max(|analytic|, FLOOR)`.
const REL_TOL: f64 = 1e-6;
/// Below this magnitude a gradient is compared absolutely (`REL_TOL · FLOOR`).
const FLOOR: f64 = 1e-2;

const CAUSALS: [Causal; 3] = [Causal::None, Causal::TopLeft, Causal::BottomRight];

/// `L = Σ O ∘ G`, O from the naive loop (an implementation independent of the backward).
fn loss(p: &Problem, q: &[f64], k: &[f64], v: &[f64], g: &[f64]) -> f64 {
    let o = forward_naive(p, q, k, v).unwrap().o;
    o.iter().zip(g).map(|(a, b)| a * b).sum()
}

/// Agreement of one gradient with central differences: (max relative error as defined by
/// [`REL_TOL`]/[`FLOOR`], max absolute error).
#[derive(Debug, Clone, Copy, Default)]
struct FdError {
    rel: f64,
    abs: f64,
}

impl FdError {
    fn merge(self, o: FdError) -> FdError {
        FdError {
            rel: self.rel.max(o.rel),
            abs: self.abs.max(o.abs),
        }
    }
}

/// Compares the analytic gradients of `L = Σ O ∘ G` with central differences over every
/// element of Q, K and V; returns the worst disagreement.
fn fd_check(p: &Problem, q: &[f64], k: &[f64], v: &[f64], g: &[f64], grads: &RefGrads) -> FdError {
    let mut worst = FdError::default();
    for which in 0..3 {
        let (x, an) = match which {
            0 => (q, &grads.dq),
            1 => (k, &grads.dk),
            _ => (v, &grads.dv),
        };
        let mut xp = x.to_vec();
        for idx in 0..x.len() {
            xp[idx] = x[idx] + H;
            let up = eval(p, which, q, k, v, &xp, g);
            xp[idx] = x[idx] - H;
            let down = eval(p, which, q, k, v, &xp, g);
            xp[idx] = x[idx];
            let fd = (up - down) / (2.0 * H);
            let abs = (fd - an[idx]).abs();
            let rel = abs / an[idx].abs().max(FLOOR);
            worst = worst.merge(FdError { rel, abs });
        }
    }
    worst
}

/// The loss with tensor `which` (0 = Q, 1 = K, 2 = V) replaced by `x`.
fn eval(p: &Problem, which: usize, q: &[f64], k: &[f64], v: &[f64], x: &[f64], g: &[f64]) -> f64 {
    match which {
        0 => loss(p, x, k, v, g),
        1 => loss(p, q, x, v, g),
        _ => loss(p, q, k, x, g),
    }
}

/// Runs the finite-difference check on fresh N(0,1) data and asserts the tolerance.
fn check_problem(p: &Problem, seed: u64) -> FdError {
    let shape = p.shape();
    let (q, k, v) = qkv(shape, seed);
    let g = normal(shape.o_elems(), seed ^ 0xd0);
    let grads = backward(p, &q, &k, &v, &g).unwrap();
    assert!(
        grads
            .dq
            .iter()
            .chain(&grads.dk)
            .chain(&grads.dv)
            .all(|x| x.is_finite()),
        "non-finite gradient for {shape:?} {}",
        p.causal()
    );
    let err = fd_check(p, &q, &k, &v, &g, &grads);
    assert!(
        err.rel <= REL_TOL,
        "{shape:?} {} scale {}: finite differences disagree, {err:?}",
        p.causal(),
        p.scale()
    );
    err
}

#[test]
fn gradients_match_finite_differences() {
    // (B, Hq, Hkv, Sq, Sk, D): GQA 2:1 and MHA, Sq < Sk, Sq > Sk (fully masked rows with
    // bottom-right alignment), single key, single query.
    let shapes = [
        (1, 2, 1, 1, 1, 4),
        (2, 2, 1, 3, 5, 8),
        (1, 2, 1, 7, 3, 6),
        (1, 2, 2, 5, 7, 5),
        (2, 2, 1, 7, 7, 4),
        (1, 2, 1, 5, 1, 7),
        (1, 2, 1, 1, 7, 8),
    ];
    let mut worst = FdError::default();
    let mut cases = 0;
    for (n, &(b, hq, hkv, sq, sk, d)) in shapes.iter().enumerate() {
        let shape = AttnShape::new(b, hq, hkv, sq, sk, d).unwrap();
        for causal in CAUSALS {
            for scale in [None, Some(0.3), Some(1.7)] {
                let mut p = Problem::new(shape, causal);
                if let Some(s) = scale {
                    p = p.with_scale(s).unwrap();
                }
                worst = worst.merge(check_problem(&p, 100 + n as u64));
                cases += 1;
            }
        }
    }
    eprintln!("finite differences, {cases} problems: worst {worst:?}");
}

#[test]
fn fully_masked_rows_have_exactly_zero_finite_gradients() {
    // Bottom-right with Sq = 7 > Sk = 3: rows 0..4 see no key.
    let shape = AttnShape::new(2, 2, 1, 7, 3, 5).unwrap();
    let p = Problem::new(shape, Causal::BottomRight);
    let (q, k, v) = qkv(&shape, 7);
    let d_o = normal(shape.o_elems(), 8);
    let g = backward(&p, &q, &k, &v, &d_o).unwrap();
    let d = shape.head_dim();
    let mut masked = 0;
    for b in 0..shape.batch() {
        for h in 0..shape.q_heads() {
            for i in 0..shape.q_len() {
                let row = &g.dq[shape.q_offset(b, h, i)..][..d];
                if p.visible_keys(i) == 0 {
                    masked += 1;
                    assert!(row.iter().all(|&x| x == 0.0), "dQ row {i}: {row:?}");
                    assert_eq!(g.lse[shape.lse_offset(b, h, i)], f64::NEG_INFINITY);
                } else if p.visible_keys(i) >= 2 {
                    // (With one visible key P = 1 and dS = 0: dQ = 0 is right there.)
                    assert!(row.iter().any(|&x| x != 0.0), "visible row {i} has dQ = 0");
                }
            }
        }
    }
    assert_eq!(masked, 2 * 2 * 4);
    for x in g.dq.iter().chain(&g.dk).chain(&g.dv) {
        assert!(x.is_finite());
    }
    // The masked rows' dO does not matter: changing it changes nothing.
    let mut d_o2 = d_o.clone();
    for b in 0..shape.batch() {
        for h in 0..shape.q_heads() {
            for i in 0..4 {
                d_o2[shape.q_offset(b, h, i)..][..d].fill(1e6);
            }
        }
    }
    let g2 = backward(&p, &q, &k, &v, &d_o2).unwrap();
    assert_eq!((&g2.dq, &g2.dk, &g2.dv), (&g.dq, &g.dk, &g.dv));
}

#[test]
fn a_single_visible_key_gives_zero_dq_dk_and_passes_do_to_dv() {
    // Sq = 5 > Sk = 1, bottom-right: rows 0..4 see nothing, row 4 sees key 0 alone.
    let shape = AttnShape::new(1, 1, 1, 5, 1, 3).unwrap();
    let p = Problem::new(shape, Causal::BottomRight);
    let (q, k, v) = qkv(&shape, 3);
    let d_o = normal(shape.o_elems(), 4);
    let g = backward(&p, &q, &k, &v, &d_o).unwrap();
    // One visible key: P = 1, so dS = 0 and dQ = dK = 0 exactly; dV = dO of the last row.
    assert!(g.dq.iter().chain(&g.dk).all(|&x| x == 0.0));
    assert_close("dV", &g.dv, &d_o[4 * 3..], 1e-15);
}

#[test]
fn nan_in_keys_masked_for_every_row_does_not_reach_any_gradient() {
    // Top-left with Sk = 6 > Sq = 3: keys 3.. are masked for every row.
    let shape = AttnShape::new(1, 2, 1, 3, 6, 4).unwrap();
    let p = Problem::new(shape, Causal::TopLeft);
    let (q, mut k, mut v) = qkv(&shape, 11);
    let d = shape.head_dim();
    for j in 3..6 {
        k[shape.kv_offset(0, 0, j)..][..d].fill(f64::NAN);
        v[shape.kv_offset(0, 0, j)..][..d].fill(f64::NAN);
    }
    let d_o = normal(shape.o_elems(), 12);
    let g = backward(&p, &q, &k, &v, &d_o).unwrap();
    assert!(g.dq.iter().all(|x| x.is_finite()));
    assert!(g.dk[..3 * d]
        .iter()
        .chain(&g.dv[..3 * d])
        .all(|x| x.is_finite()));
    assert!(g.dk[3 * d..]
        .iter()
        .chain(&g.dv[3 * d..])
        .all(|&x| x == 0.0));
    // NaN in a visible key propagates.
    k[0] = f64::NAN;
    let g = backward(&p, &q, &k, &v, &d_o).unwrap();
    assert!(g.dq[..d].iter().all(|x| x.is_nan()));
}

#[test]
fn gqa_gradients_are_the_sums_over_the_group() {
    // Hq = 6 reading Hkv = 2 equals MHA with each KV head repeated 3 times, dK/dV summed.
    let gqa = AttnShape::new(2, 6, 2, 5, 7, 8).unwrap();
    let mha = AttnShape::new(2, 6, 6, 5, 7, 8).unwrap();
    let (q, k, v) = qkv(&gqa, 21);
    let d_o = normal(gqa.o_elems(), 22);
    let d = gqa.head_dim();
    let repeat = |x: &[f64]| {
        let mut out = vec![0.0; mha.kv_elems()];
        for b in 0..2 {
            for h in 0..6 {
                let src = &x[gqa.kv_offset(b, gqa.kv_head_of(h), 0)..][..7 * d];
                out[mha.kv_offset(b, h, 0)..][..7 * d].copy_from_slice(src);
            }
        }
        out
    };
    for causal in CAUSALS {
        let g = backward(&Problem::new(gqa, causal), &q, &k, &v, &d_o).unwrap();
        let m = backward(
            &Problem::new(mha, causal),
            &q,
            &repeat(&k),
            &repeat(&v),
            &d_o,
        )
        .unwrap();
        assert_eq!(
            g.dq, m.dq,
            "{causal}: dQ does not depend on how K/V are shared"
        );
        let sum = |x: &[f64]| {
            let mut out = vec![0.0; gqa.kv_elems()];
            for b in 0..2 {
                for h in 0..6 {
                    let dst = &mut out[gqa.kv_offset(b, gqa.kv_head_of(h), 0)..][..7 * d];
                    let src = &x[mha.kv_offset(b, h, 0)..][..7 * d];
                    dst.iter_mut().zip(src).for_each(|(a, s)| *a += s);
                }
            }
            out
        };
        assert_close("dK", &g.dk, &sum(&m.dk), 1e-13);
        assert_close("dV", &g.dv, &sum(&m.dv), 1e-13);
        assert!(max_abs(&g.dk) > 0.1 && max_abs(&g.dv) > 0.1);
    }
}

#[test]
fn backward_with_agrees_with_backward() {
    let shape = AttnShape::new(2, 4, 2, 9, 6, 8).unwrap();
    let (q, k, v) = qkv(&shape, 31);
    let d_o = normal(shape.o_elems(), 32);
    for causal in CAUSALS {
        let p = Problem::new(shape, causal).with_scale(0.6).unwrap();
        let full = backward(&p, &q, &k, &v, &d_o).unwrap();
        // The forward's own O and LSE: the same computation, bit for bit.
        let fwd = forward(&p, &q, &k, &v).unwrap();
        assert_eq!(full.o, fwd.o);
        assert_eq!(full.lse, fwd.lse);
        let with = backward_with(&p, &q, &k, &v, &fwd.o, &fwd.lse, &d_o).unwrap();
        assert_eq!(with, full);
        // The tiled twin's O and LSE (equal to 1e-12): gradients equal to about as much.
        let (tiled, _) = forward_tiled(&p, &q, &k, &v, 4, 3, &[]).unwrap();
        let with = backward_with(&p, &q, &k, &v, &tiled.o, &tiled.lse, &d_o).unwrap();
        for (name, a, b) in [
            ("dQ", &with.dq, &full.dq),
            ("dK", &with.dk, &full.dk),
            ("dV", &with.dv, &full.dv),
        ] {
            assert_close(name, a, b, 1e-11);
        }
        // f32 O and LSE, as a kernel writes them: agreement at the f32 level.
        let q32: Vec<f32> = q.iter().map(|&x| x as f32).collect();
        let k32: Vec<f32> = k.iter().map(|&x| x as f32).collect();
        let v32: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        let out = ReferenceBackend.forward(&p, &q32, &k32, &v32).unwrap();
        let with = backward_with(&p, &q, &k, &v, &out.o, &out.lse, &d_o).unwrap();
        for (name, a, b) in [
            ("dQ", &with.dq, &full.dq),
            ("dK", &with.dk, &full.dk),
            ("dV", &with.dv, &full.dv),
        ] {
            let err = max_abs_diff(a, b);
            assert!(err < 1e-5 * max_abs(b).max(1.0), "{causal} {name}: {err:e}");
        }
    }
}

#[test]
fn wrong_lengths_are_typed_errors() {
    let shape = AttnShape::new(1, 2, 1, 3, 4, 2).unwrap();
    let p = Problem::new(shape, Causal::None);
    let (q, k, v) = qkv(&shape, 1);
    let d_o = normal(shape.o_elems(), 2);
    let out = forward(&p, &q, &k, &v).unwrap();
    let short = |x: &[f64]| x[..x.len() - 1].to_vec();
    let mismatch = |tensor: &'static str, expected: usize| AttnError::LengthMismatch {
        tensor,
        expected,
        got: expected - 1,
    };
    let (nq, nkv) = (shape.q_elems(), shape.kv_elems());
    assert_eq!(
        backward(&p, &short(&q), &k, &v, &d_o),
        Err(mismatch("Q", nq))
    );
    assert_eq!(
        backward(&p, &q, &short(&k), &v, &d_o),
        Err(mismatch("K", nkv))
    );
    assert_eq!(
        backward(&p, &q, &k, &short(&v), &d_o),
        Err(mismatch("V", nkv))
    );
    assert_eq!(
        backward(&p, &q, &k, &v, &short(&d_o)),
        Err(mismatch("dO", nq))
    );
    let with = |o: &[f64], lse: &[f64], d_o: &[f64]| backward_with(&p, &q, &k, &v, o, lse, d_o);
    assert_eq!(with(&short(&out.o), &out.lse, &d_o), Err(mismatch("O", nq)));
    let nl = shape.lse_elems();
    assert_eq!(
        with(&out.o, &short(&out.lse), &d_o),
        Err(mismatch("LSE", nl))
    );
    assert_eq!(
        with(&out.o, &out.lse, &short(&d_o)),
        Err(mismatch("dO", nq))
    );
    let f = |x: &[f64]| x.iter().map(|&y| y as f32).collect::<Vec<f32>>();
    let e = backward_emulated(&p, &f(&q), &f(&k), &f(&v), &f(&short(&d_o)), Storage::F16);
    assert_eq!(e, Err(mismatch("dO", nq)));
}

#[test]
fn narrow_inputs_are_widened_exactly() {
    let shape = AttnShape::new(1, 2, 1, 5, 6, 8).unwrap();
    let p = Problem::new(shape, Causal::TopLeft);
    let (q, k, v) = qkv(&shape, 41);
    let d_o = normal(shape.o_elems(), 42);
    let h16 = |x: &[f64]| {
        x.iter()
            .map(|&y| half::f16::from_f64(y))
            .collect::<Vec<_>>()
    };
    let back = |x: &[half::f16]| x.iter().map(|y| y.to_f64()).collect::<Vec<_>>();
    let (q16, k16, v16, do16) = (h16(&q), h16(&k), h16(&v), h16(&d_o));
    let a = backward(&p, &q16, &k16, &v16, &do16).unwrap();
    let b = backward(&p, &back(&q16), &back(&k16), &back(&v16), &back(&do16)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let shape = AttnShape::new(2, 6, 2, 33, 17, 8).unwrap();
    let p = Problem::new(shape, Causal::BottomRight);
    let (q, k, v) = qkv(&shape, 51);
    let d_o = normal(shape.o_elems(), 52);
    let many = backward(&p, &q, &k, &v, &d_o).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let one = pool.install(|| backward(&p, &q, &k, &v, &d_o).unwrap());
    assert_eq!(one, many);
}

/// Emulated-vs-f64 error of each gradient, relative to the gradient's largest magnitude.
fn emu_errors(p: &Problem, storage: Storage, seed: u64) -> [f64; 3] {
    let shape = p.shape();
    // Inputs representable in f16 (and so the f64 reference sees the f16 kernel's inputs).
    let f16 = |n: usize, s: u64| -> Vec<f32> {
        normal_f32(n, s)
            .into_iter()
            .map(|x| half::f16::from_f32(x).to_f32())
            .collect()
    };
    let (q, k, v) = (
        f16(shape.q_elems(), seed),
        f16(shape.kv_elems(), seed + 1),
        f16(shape.kv_elems(), seed + 2),
    );
    let d_o = f16(shape.o_elems(), seed + 3);
    let exact = backward(p, &q, &k, &v, &d_o).unwrap();
    let emu = backward_emulated(p, &q, &k, &v, &d_o, storage).unwrap();
    assert!(emu
        .dq
        .iter()
        .chain(&emu.dk)
        .chain(&emu.dv)
        .all(|x| x.is_finite()));
    [
        (&emu.dq, &exact.dq),
        (&emu.dk, &exact.dk),
        (&emu.dv, &exact.dv),
    ]
    .map(|(a, b)| max_abs_diff(a, b) / max_abs(b))
}

#[test]
fn emulation_error_is_small_nonzero_and_follows_the_storage_precision() {
    // Sk = 150 spans three key tiles of EMU_BLOCK_N = 64; GQA 4:2; bottom-right with
    // Sq > Sk would mask rows, so take Sq = 90 < Sk.
    let shape = AttnShape::new(1, 4, 2, 90, 150, 32).unwrap();
    for causal in CAUSALS {
        let p = Problem::new(shape, causal);
        let e16 = emu_errors(&p, Storage::F16, 61);
        let ebf = emu_errors(&p, Storage::Bf16, 61);
        let fmt = |e: [f64; 3]| e.map(|x| format!("{x:.2e}")).join(", ");
        eprintln!(
            "{causal}: relative error (dQ, dK, dV): f16 {}; bf16 {}",
            fmt(e16),
            fmt(ebf)
        );
        for (name, (a, b)) in ["dQ", "dK", "dV"].iter().zip(e16.iter().zip(&ebf)) {
            assert!(*a > 0.0 && *a < 2e-3, "{causal} f16 {name}: {a:e}");
            assert!(
                *b > 4.0 * a && *b < 3e-2,
                "{causal} bf16 {name}: {b:e} vs f16 {a:e}"
            );
        }
    }
}

#[test]
fn emulation_keeps_fully_masked_rows_at_zero() {
    let shape = AttnShape::new(1, 2, 1, 9, 4, 8).unwrap();
    let p = Problem::new(shape, Causal::BottomRight);
    let x = |n: usize, s: u64| normal_f32(n, s);
    let (q, k, v, d_o) = (
        x(shape.q_elems(), 1),
        x(shape.kv_elems(), 2),
        x(shape.kv_elems(), 3),
        x(shape.o_elems(), 4),
    );
    let g = backward_emulated(&p, &q, &k, &v, &d_o, Storage::Bf16).unwrap();
    let d = shape.head_dim();
    for h in 0..2 {
        for i in 0..9 {
            let row = &g.dq[shape.q_offset(0, h, i)..][..d];
            // Rows 0..5 see no key; row 5 sees one (dS ≈ 0); rows 6.. see several.
            if i < 5 {
                assert!(row.iter().all(|&x| x == 0.0), "row {i}");
            } else if i > 5 {
                assert!(row.iter().any(|&x| x != 0.0), "row {i}");
            }
        }
    }
    assert!(g.dk.iter().chain(&g.dv).all(|x| x.is_finite()));
    assert!(g.lse[..5].iter().all(|&x| x == f64::NEG_INFINITY));
}

fn causal() -> impl Strategy<Value = Causal> {
    prop_oneof![
        Just(Causal::None),
        Just(Causal::TopLeft),
        Just(Causal::BottomRight)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn random_small_problems_match_finite_differences(
        b in 1usize..=2,
        hkv in 1usize..=2,
        group in 1usize..=2,
        sq in 1usize..=7,
        sk in 1usize..=7,
        d in 1usize..=8,
        scale in 0.1f64..2.0,
        causal in causal(),
        seed in any::<u64>(),
    ) {
        let shape = AttnShape::new(b, hkv * group, hkv, sq, sk, d).unwrap();
        let p = Problem::new(shape, causal).with_scale(scale).unwrap();
        check_problem(&p, seed);
    }

    #[test]
    fn dk_sums_to_zero_over_keys(
        sq in 1usize..=20,
        sk in 1usize..=20,
        d in 1usize..=8,
        causal in causal(),
        seed in any::<u64>(),
    ) {
        // Σ_j dS_ij = 0 (softmax is shift-invariant), so Σ_j dK_j = scale·Σ_i q_i·Σ_j dS_ij = 0.
        let shape = AttnShape::new(1, 2, 1, sq, sk, d).unwrap();
        let p = Problem::new(shape, causal);
        let (q, k, v) = qkv(&shape, seed);
        let d_o = normal(shape.o_elems(), seed ^ 1);
        let g = backward(&p, &q, &k, &v, &d_o).unwrap();
        let scale_of_terms = max_abs(&g.dk).max(1.0);
        for col in 0..d {
            let s: f64 = g.dk.iter().skip(col).step_by(d).sum();
            prop_assert!(s.abs() < 1e-12 * scale_of_terms * sk as f64, "column {}: {}", col, s);
        }
    }
}

/// The backward tiles of every query block rebuild the reference gradients: dQ = scale·dS·K
/// summed over each block's tiles, dK = scale·dSᵀ·Q and dV = Pᵀ·dO summed over the query heads
/// of each KV head; a key tile the walk skips (no visible pair) would have added only zeros.
/// GQA, tails in both lengths, all three masks.
#[test]
fn backward_tiles_rebuild_the_gradients() {
    use attn_ref::reference::bwd_tiles::backward_tiles;
    for causal in CAUSALS {
        let shape = AttnShape::new(2, 4, 2, 37, 53, 8).unwrap();
        let p = Problem::new(shape, causal);
        let (q, k, v) = qkv(&shape, 11);
        let d_o = normal(shape.o_elems(), 12);
        let (bm, bn) = (16, 8);
        let blocks: Vec<_> = (0..2)
            .flat_map(|b| {
                (0..4).flat_map(move |h| (0..37usize.div_ceil(bm)).map(move |t| (b, h, t)))
            })
            .collect();
        let tiles = backward_tiles(&p, &q, &k, &v, &d_o, bm, bn, &blocks).unwrap();
        let d = shape.head_dim();
        let (mut dq, mut dk, mut dv) = (
            vec![0.0; shape.q_elems()],
            vec![0.0; shape.kv_elems()],
            vec![0.0; shape.kv_elems()],
        );
        for t in &tiles {
            let (b, h) = (t.id.b, t.id.h);
            let kvh = shape.kv_head_of(h);
            for r in 0..t.rows {
                let i = t.id.q_tile * bm + r;
                for c in 0..t.cols {
                    let j = t.id.k_tile * bn + c;
                    let (ds, pr) = (t.ds[r * t.cols + c], t.p[r * t.cols + c]);
                    for x in 0..d {
                        let (qo, ko) =
                            (shape.q_offset(b, h, i) + x, shape.kv_offset(b, kvh, j) + x);
                        dq[qo] += p.scale() * ds * k[ko];
                        dk[ko] += p.scale() * ds * q[qo];
                        dv[ko] += pr * d_o[qo];
                    }
                }
            }
        }
        let want = backward(&p, &q, &k, &v, &d_o).unwrap();
        assert_close(&format!("{causal:?} dQ"), &dq, &want.dq, 1e-12);
        assert_close(&format!("{causal:?} dK"), &dk, &want.dk, 1e-12);
        assert_close(&format!("{causal:?} dV"), &dv, &want.dv, 1e-12);
        // Δ is dO·O per row.
        let o = forward(&p, &q, &k, &v).unwrap().o;
        for t in tiles
            .iter()
            .filter(|t| t.id.k_tile == 0 && t.id.q_tile == 1)
        {
            for r in 0..t.rows {
                let at = shape.q_offset(t.id.b, t.id.h, bm + r);
                let want: f64 = (0..d).map(|x| d_o[at + x] * o[at + x]).sum();
                assert!((t.delta[r] - want).abs() < 1e-12, "Δ {causal:?}");
            }
        }
    }
    // Features are refused with a typed error.
    let shape = AttnShape::new(1, 1, 1, 8, 8, 8).unwrap();
    let p = Problem::new(shape, Causal::None).with_softcap(5.0).unwrap();
    let x = normal(64, 1);
    assert!(matches!(
        backward_tiles(&p, &x, &x, &x, &x, 4, 4, &[(0, 0, 0)]),
        Err(AttnError::InvalidArgument(_))
    ));
}
