//! The serving features (sliding window, softcap, ALiBi, attention sinks) and the varlen and
//! paged-KV entry points, against a direct formula written here from the definitions (no
//! code shared with the crate's mask or score functions), on fresh N(0,1) inputs.

use crate::common::{assert_close, max_abs_diff, normal, normal_f32, qkv};
use attn_ref::reference::emulate::{forward_emulated, Storage};
use attn_ref::reference::paged::{forward_paged, PagedKv};
use attn_ref::reference::tiled::forward_tiled;
use attn_ref::reference::varlen::forward_varlen;
use attn_ref::reference::{
    attention_weights, forward, forward_naive, forward_rows, RefOutput, RowSelection,
};
use attn_ref::{Alibi, AttnError, AttnShape, Causal, Features, Problem};
use proptest::prelude::*;
use rand::{rngs::StdRng, seq::SliceRandom, SeedableRng};

/// Everything the direct formula needs, spelled out.
#[derive(Debug, Clone)]
struct Spec {
    dims: (usize, usize, usize, usize, usize, usize), // B, Hq, Hkv, Sq, Sk, D
    causal: Causal,
    scale: f64,
    window: Option<(i64, i64)>,
    softcap: Option<f64>,
    /// Slopes per (b, h), as given: `[Hq]` (per_batch = false) or `[B, Hq]`.
    alibi: Option<(Vec<f32>, bool)>,
    sinks: Option<Vec<f32>>,
}

impl Spec {
    fn plain(dims: (usize, usize, usize, usize, usize, usize), causal: Causal) -> Self {
        Spec {
            dims,
            causal,
            scale: 1.0 / (dims.5 as f64).sqrt(),
            window: None,
            softcap: None,
            alibi: None,
            sinks: None,
        }
    }

    fn problem(&self) -> Problem {
        let (b, hq, hkv, sq, sk, d) = self.dims;
        let mut p = Problem::new(AttnShape::new(b, hq, hkv, sq, sk, d).unwrap(), self.causal)
            .with_scale(self.scale)
            .unwrap();
        if let Some((l, r)) = self.window {
            p = p.with_window(l, r).unwrap();
        }
        if let Some(c) = self.softcap {
            p = p.with_softcap(c).unwrap();
        }
        if let Some((s, per_batch)) = &self.alibi {
            let a = if *per_batch {
                Alibi::PerBatchHead(s.clone())
            } else {
                Alibi::PerHead(s.clone())
            };
            p = p.with_alibi(a).unwrap();
        }
        if let Some(s) = &self.sinks {
            p = p.with_sinks(s.clone()).unwrap();
        }
        p
    }

    /// Key j visible to query i, straight from the definitions.
    fn visible(&self, i: usize, j: usize) -> bool {
        let (_, _, _, sq, sk, _) = self.dims;
        let (i, j, sq, sk) = (i as i64, j as i64, sq as i64, sk as i64);
        let causal = match self.causal {
            Causal::None => true,
            Causal::TopLeft => j <= i,
            Causal::BottomRight => j <= i + sk - sq,
        };
        let window = match self.window {
            None => true,
            Some((l, r)) => (l < 0 || i + sk - sq - l <= j) && (r < 0 || j <= i + sk - sq + r),
        };
        causal && window
    }

    /// O `[B,Hq,Sq,D]` and LSE by the textbook formula, one (b, h, i) at a time.
    fn direct(&self, q: &[f64], k: &[f64], v: &[f64]) -> RefOutput {
        let (nb, hq, hkv, sq, sk, d) = self.dims;
        let mut o = vec![0.0; nb * hq * sq * d];
        let mut lse = vec![0.0; nb * hq * sq];
        for b in 0..nb {
            for h in 0..hq {
                let kvh = h / (hq / hkv);
                for i in 0..sq {
                    let qi = &q[((b * hq + h) * sq + i) * d..][..d];
                    let mut logits = Vec::new(); // (j, s)
                    for j in 0..sk {
                        if !self.visible(i, j) {
                            continue;
                        }
                        let kj = &k[((b * hkv + kvh) * sk + j) * d..][..d];
                        let mut s = self.scale * qi.iter().zip(kj).map(|(x, y)| x * y).sum::<f64>();
                        if let Some(c) = self.softcap {
                            s = c * (s / c).tanh();
                        }
                        if let Some((slopes, per_batch)) = &self.alibi {
                            let slope = f64::from(if *per_batch {
                                slopes[b * hq + h]
                            } else {
                                slopes[h]
                            });
                            let dist = (i as f64 + sk as f64 - sq as f64 - j as f64).abs();
                            s -= slope * dist;
                        }
                        logits.push((j, s));
                    }
                    let row = (b * hq + h) * sq + i;
                    if logits.is_empty() {
                        lse[row] = f64::NEG_INFINITY;
                        continue;
                    }
                    let sink = self.sinks.as_ref().map(|s| f64::from(s[h]));
                    let m = logits
                        .iter()
                        .map(|x| x.1)
                        .chain(sink)
                        .fold(f64::NEG_INFINITY, f64::max);
                    let denom: f64 = logits.iter().map(|x| (x.1 - m).exp()).sum::<f64>()
                        + sink.map_or(0.0, |s| (s - m).exp());
                    for &(j, s) in &logits {
                        let w = (s - m).exp() / denom;
                        let vj = &v[((b * hkv + kvh) * sk + j) * d..][..d];
                        for (od, x) in o[row * d..][..d].iter_mut().zip(vj) {
                            *od += w * x;
                        }
                    }
                    lse[row] = m + denom.ln();
                }
            }
        }
        RefOutput { o, lse }
    }
}

/// Every f64 implementation on the same inputs.
fn all_impls(
    p: &Problem,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    bm: usize,
    bn: usize,
) -> Vec<(String, RefOutput)> {
    vec![
        ("forward".into(), forward(p, q, k, v).unwrap()),
        ("naive".into(), forward_naive(p, q, k, v).unwrap()),
        (
            format!("tiled {bm}x{bn}"),
            forward_tiled(p, q, k, v, bm, bn, &[]).unwrap().0,
        ),
    ]
}

fn check_all(spec: &Spec, seed: u64, bm: usize, bn: usize) {
    let p = spec.problem();
    let (q, k, v) = qkv(p.shape(), seed);
    let want = spec.direct(&q, &k, &v);
    for (name, got) in all_impls(&p, &q, &k, &v, bm, bn) {
        assert_close(&format!("{name} O {spec:?}"), &got.o, &want.o, 1e-12);
        assert_close(&format!("{name} LSE {spec:?}"), &got.lse, &want.lse, 1e-12);
        // Masked rows exactly: LSE −∞ where and only where the direct formula says so.
        for (a, b) in got.lse.iter().zip(&want.lse) {
            assert_eq!(
                *a == f64::NEG_INFINITY,
                *b == f64::NEG_INFINITY,
                "{name} {spec:?}"
            );
        }
    }
    // Selected rows are exactly the full forward's.
    let full = forward(&p, &q, &k, &v).unwrap();
    let sel = forward_rows(&p, &q, &k, &v, &RowSelection::Sample { count: 5, seed }).unwrap();
    let shape = p.shape();
    for b in 0..shape.batch() {
        for h in 0..shape.q_heads() {
            for (n, &i) in sel.rows.iter().enumerate() {
                let at = shape.q_offset(b, h, i);
                assert_eq!(sel.o_row(b, h, n), &full.o[at..at + shape.head_dim()]);
                assert_eq!(
                    sel.lse_at(b, h, n).to_bits(),
                    full.lse[shape.lse_offset(b, h, i)].to_bits()
                );
            }
        }
    }
}

fn causal() -> impl Strategy<Value = Causal> {
    prop_oneof![
        Just(Causal::None),
        Just(Causal::TopLeft),
        Just(Causal::BottomRight)
    ]
}

/// A window side: unbounded, small, or larger than any sequence here.
fn side() -> impl Strategy<Value = i64> {
    prop_oneof![Just(-1i64), 0i64..8, Just(1000i64)]
}

prop_compose! {
    fn spec()(
        b in 1usize..=2, hkv in 1usize..=2, group in 1usize..=3,
        sq in 1usize..=40, sk in 1usize..=40, d in 1usize..=16,
        causal in causal(),
        scale in 0.05f64..2.0,
        window in proptest::option::of((side(), side())),
        softcap in proptest::option::of(0.3f64..20.0),
        alibi in proptest::option::of((any::<bool>(), any::<u64>())),
        sinks in proptest::option::of(any::<u64>()),
    ) -> Spec {
        let hq = hkv * group;
        let alibi = alibi.map(|(per_batch, seed)| {
            let n = if per_batch { b * hq } else { hq };
            let slopes = normal_f32(n, seed).into_iter().map(|x| x.abs() * 0.5).collect();
            (slopes, per_batch)
        });
        let sinks = sinks.map(|seed| normal_f32(hq, seed).into_iter().map(|x| 2.0 * x).collect());
        Spec { dims: (b, hq, hkv, sq, sk, d), causal, scale, window, softcap, alibi, sinks }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_implementation_equals_the_direct_formula(
        spec in spec(),
        seed in any::<u64>(),
        bm in 1usize..=20,
        bn in 1usize..=20,
    ) {
        check_all(&spec, seed, bm, bn);
    }
}

#[test]
fn each_feature_alone_with_both_alignments_and_gqa() {
    // Sq ≠ Sk both ways, GQA 6:2, and the rows span several 6-row groups and 64-key blocks.
    for (n, dims) in [
        (2, 6, 2, 37, 90, 8),
        (1, 6, 2, 90, 37, 5),
        (1, 2, 1, 130, 130, 16),
    ]
    .into_iter()
    .enumerate()
    {
        for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
            let hq = dims.1;
            let base = Spec::plain(dims, causal);
            let variants = [
                Spec {
                    window: Some((5, 3)),
                    ..base.clone()
                },
                Spec {
                    window: Some((-1, 0)),
                    ..base.clone()
                },
                Spec {
                    window: Some((20, -1)),
                    ..base.clone()
                },
                Spec {
                    softcap: Some(0.7),
                    scale: 2.0,
                    ..base.clone()
                },
                Spec {
                    alibi: Some((normal_f32(hq, 7).iter().map(|x| x.abs()).collect(), false)),
                    ..base.clone()
                },
                Spec {
                    alibi: Some((
                        normal_f32(dims.0 * hq, 8).iter().map(|x| x.abs()).collect(),
                        true,
                    )),
                    ..base.clone()
                },
                Spec {
                    sinks: Some(normal_f32(hq, 9).iter().map(|x| 3.0 * x).collect()),
                    ..base.clone()
                },
                Spec {
                    window: Some((9, 2)),
                    softcap: Some(5.0),
                    alibi: Some((vec![0.25; hq], false)),
                    sinks: Some(vec![1.5; hq]),
                    ..base.clone()
                },
            ];
            for (m, spec) in variants.iter().enumerate() {
                check_all(spec, 1000 + (n * 100 + m) as u64, 16, 24);
            }
        }
    }
}

#[test]
fn each_feature_changes_the_output() {
    // Guards against a feature being silently ignored: the result must move.
    let base = Spec::plain((1, 2, 1, 20, 30, 8), Causal::None);
    let p0 = base.problem();
    let (q, k, v) = qkv(p0.shape(), 77);
    let plain = forward(&p0, &q, &k, &v).unwrap();
    for spec in [
        Spec {
            window: Some((3, 3)),
            ..base.clone()
        },
        Spec {
            softcap: Some(0.5),
            ..base.clone()
        },
        Spec {
            alibi: Some((vec![0.3, 0.6], false)),
            ..base.clone()
        },
        Spec {
            sinks: Some(vec![0.5, -0.5]),
            ..base.clone()
        },
    ] {
        let out = forward(&spec.problem(), &q, &k, &v).unwrap();
        assert!(max_abs_diff(&out.o, &plain.o) > 1e-3, "{spec:?}");
    }
}

#[test]
fn window_edges_by_hand() {
    // Sq = 3, Sk = 5: the diagonal of row i is key i + 2.
    let p = |causal, l, r| {
        Problem::new(AttnShape::new(1, 1, 1, 3, 5, 4).unwrap(), causal)
            .with_window(l, r)
            .unwrap()
    };
    let ranges = |p: &Problem| (0..3).map(|i| p.visible_range(i)).collect::<Vec<_>>();
    assert_eq!(ranges(&p(Causal::None, 1, 0)), vec![1..3, 2..4, 3..5]);
    assert_eq!(ranges(&p(Causal::None, 0, 1)), vec![2..4, 3..5, 4..5]);
    assert_eq!(ranges(&p(Causal::None, -1, 0)), vec![0..3, 0..4, 0..5]);
    assert_eq!(ranges(&p(Causal::None, 1, -1)), vec![1..5, 2..5, 3..5]);
    // Top-left causal (j ≤ i) intersected with a window around the bottom-right diagonal.
    assert_eq!(ranges(&p(Causal::TopLeft, 2, -1)), vec![0..1, 1..2, 2..3]);
    assert_eq!(ranges(&p(Causal::TopLeft, 1, -1)), vec![0..0, 0..0, 0..0]);
    assert_eq!(
        ranges(&p(Causal::BottomRight, 1, 5)),
        vec![1..3, 2..4, 3..5]
    );
    assert_eq!(p(Causal::None, 1, 0).visible_keys(0), 2);
    assert!(p(Causal::None, 1, 0).is_visible(0, 2) && !p(Causal::None, 1, 0).is_visible(0, 0));
}

#[test]
fn window_minus_one_zero_is_bottom_right_causal_and_huge_windows_are_no_mask() {
    let shape = AttnShape::new(2, 4, 2, 45, 70, 8).unwrap();
    let (q, k, v) = qkv(&shape, 5);
    let causal = forward(&Problem::new(shape, Causal::BottomRight), &q, &k, &v).unwrap();
    let window = Problem::new(shape, Causal::None)
        .with_window(-1, 0)
        .unwrap();
    assert_eq!(forward(&window, &q, &k, &v).unwrap(), causal);
    for causal_mode in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
        let plain = forward(&Problem::new(shape, causal_mode), &q, &k, &v).unwrap();
        for (l, r) in [(-1, -1), (1000, 1000), (70, 70), (i64::MAX, i64::MAX)] {
            let p = Problem::new(shape, causal_mode).with_window(l, r).unwrap();
            assert_eq!(
                forward(&p, &q, &k, &v).unwrap(),
                plain,
                "{causal_mode} ({l},{r})"
            );
            let (tiled, _) = forward_tiled(&p, &q, &k, &v, 7, 9, &[]).unwrap();
            assert_close("tiled", &tiled.o, &plain.o, 1e-12);
        }
    }
}

#[test]
fn fully_masked_rows_are_zero_with_lse_minus_infinity_even_with_sinks() {
    // Sq = 6, Sk = 3, window (0, 0): row i sees only key i − 3, so rows 0..3 see nothing.
    let shape = AttnShape::new(1, 2, 1, 6, 3, 4).unwrap();
    let (q, k, v) = qkv(&shape, 11);
    let p = Problem::new(shape, Causal::None)
        .with_window(0, 0)
        .unwrap()
        .with_sinks(vec![0.5, -1.0])
        .unwrap();
    let qf: Vec<f32> = q.iter().map(|&x| x as f32).collect();
    let (kf, vf): (Vec<f32>, Vec<f32>) = (
        k.iter().map(|&x| x as f32).collect(),
        v.iter().map(|&x| x as f32).collect(),
    );
    let mut outs = all_impls(&p, &q, &k, &v, 4, 2);
    outs.push((
        "emulated".into(),
        forward_emulated(&p, &qf, &kf, &vf, Storage::F16).unwrap(),
    ));
    for (name, out) in outs {
        for h in 0..2 {
            for i in 0..6 {
                let row = &out.o[shape.q_offset(0, h, i)..][..4];
                let lse = out.lse[shape.lse_offset(0, h, i)];
                if i < 3 {
                    assert!(row.iter().all(|&x| x == 0.0), "{name} row {i}");
                    assert_eq!(lse, f64::NEG_INFINITY, "{name} row {i}");
                } else {
                    // One key with logit s plus the sink: O = v · e^s / (e^s + e^sink).
                    let s = p.scale()
                        * (0..4)
                            .map(|x| q[shape.q_offset(0, h, i) + x] * k[(i - 3) * 4 + x])
                            .sum::<f64>();
                    let sink = [0.5, -1.0][h];
                    let w = s.exp() / (s.exp() + f64::exp(sink));
                    let tol = if name == "emulated" { 5e-3 } else { 1e-12 };
                    for (x, vx) in row.iter().zip(&v[(i - 3) * 4..][..4]) {
                        assert!(
                            (x - w * vx).abs() <= tol,
                            "{name} row {i}: {x} vs {}",
                            w * vx
                        );
                    }
                    let want = (s.exp() + f64::exp(sink)).ln();
                    assert!(
                        (lse - want).abs() <= tol,
                        "{name} LSE row {i}: {lse} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn sinks_take_the_missing_weight() {
    let shape = AttnShape::new(1, 3, 3, 9, 11, 6).unwrap();
    let (q, k, v) = qkv(&shape, 12);
    let sinks = vec![-2.0f32, 0.0, 4.0];
    let p = Problem::new(shape, Causal::TopLeft)
        .with_sinks(sinks.clone())
        .unwrap();
    let out = forward(&p, &q, &k, &v).unwrap();
    for (h, &sink) in sinks.iter().enumerate() {
        for i in 0..9 {
            let w = attention_weights(&p, &q, &k, 0, h, i).unwrap();
            let total: f64 = w.iter().sum();
            let lse = out.lse[shape.lse_offset(0, h, i)];
            let sink_share = (f64::from(sink) - lse).exp();
            assert!((total + sink_share - 1.0).abs() < 1e-12, "h {h} row {i}");
            assert!(w[i + 1..].iter().all(|&x| x == 0.0));
        }
    }
    // A −∞ sink is no sink.
    let none = Problem::new(shape, Causal::TopLeft)
        .with_sinks(vec![f32::NEG_INFINITY; 3])
        .unwrap();
    let plain = forward(&Problem::new(shape, Causal::TopLeft), &q, &k, &v).unwrap();
    assert_close(
        "−∞ sink O",
        &forward(&none, &q, &k, &v).unwrap().o,
        &plain.o,
        1e-15,
    );
}

#[test]
fn softcap_bounds_the_scores() {
    // With a huge scale every score saturates at ±c; LSE ≤ c + ln(visible keys).
    let shape = AttnShape::new(1, 1, 1, 5, 8, 4).unwrap();
    let (q, k, v) = qkv(&shape, 13);
    let p = Problem::new(shape, Causal::None)
        .with_scale(1e6)
        .unwrap()
        .with_softcap(2.0)
        .unwrap();
    let out = forward(&p, &q, &k, &v).unwrap();
    for &lse in &out.lse {
        assert!(
            lse <= 2.0 + 8f64.ln() + 1e-12 && lse >= -2.0 + 8f64.ln() - 1e-12,
            "{lse}"
        );
    }
}

#[test]
fn nan_in_a_window_masked_key_never_reaches_the_row() {
    let shape = AttnShape::new(1, 1, 1, 8, 8, 4).unwrap();
    let (q, mut k, mut v) = qkv(&shape, 14);
    // Key 0 is outside row 7's window (7 − 2 ≤ j ≤ 7).
    k[..4].fill(f64::NAN);
    v[..4].fill(f64::NAN);
    let p = Problem::new(shape, Causal::None).with_window(2, 0).unwrap();
    for (name, out) in all_impls(&p, &q, &k, &v, 3, 2) {
        assert!(out.o[28..32].iter().all(|x| x.is_finite()), "{name}");
        assert!(
            out.o[..4].iter().all(|x| x.is_nan()),
            "{name}: row 0 sees key 0"
        );
    }
}

#[test]
fn emulation_honours_every_feature() {
    // The emulation with a feature stays within the f16 cap of the reference with the same
    // feature, and far from the reference without it.
    let shape = AttnShape::new(2, 4, 2, 70, 150, 32).unwrap();
    let round = |x: Vec<f32>| {
        x.into_iter()
            .map(|y| Storage::F16.round(y))
            .collect::<Vec<_>>()
    };
    let (q, k, v) = (
        round(normal_f32(shape.q_elems(), 21)),
        round(normal_f32(shape.kv_elems(), 22)),
        round(normal_f32(shape.kv_elems(), 23)),
    );
    let base = Problem::new(shape, Causal::BottomRight);
    let variants = [
        ("window", base.clone().with_window(40, 3).unwrap()),
        ("softcap", base.clone().with_softcap(0.4).unwrap()),
        (
            "alibi",
            base.clone()
                .with_alibi(Alibi::PerBatchHead(vec![
                    0.05, 0.1, 0.2, 0.4, 0.5, 0.25, 0.125, 0.0625,
                ]))
                .unwrap(),
        ),
        (
            "sinks",
            base.clone().with_sinks(vec![3.0, -1.0, 2.0, 5.0]).unwrap(),
        ),
    ];
    let plain = forward(&base, &q, &k, &v).unwrap();
    for (name, p) in variants {
        let exact = forward(&p, &q, &k, &v).unwrap();
        let emu = forward_emulated(&p, &q, &k, &v, Storage::F16).unwrap();
        let err = max_abs_diff(&emu.o, &exact.o);
        let lse_err = max_abs_diff(&emu.lse, &exact.lse);
        assert!(err > 0.0 && err <= 4e-3, "{name}: max abs {err:e}");
        assert!(lse_err <= 1e-3, "{name}: LSE {lse_err:e}");
        let moved = max_abs_diff(&exact.o, &plain.o);
        assert!(
            moved > 100.0 * err,
            "{name}: the feature moves O by only {moved:e}"
        );
        let bf = forward_emulated(&p, &q, &k, &v, Storage::Bf16).unwrap();
        assert!(max_abs_diff(&bf.o, &exact.o) <= 3e-2, "{name} bf16");
    }
}

#[test]
fn feature_validation_errors() {
    let shape = AttnShape::new(2, 4, 2, 3, 3, 8).unwrap();
    let p = Problem::new(shape, Causal::None);
    for c in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err = p.clone().with_softcap(c).unwrap_err();
        assert!(matches!(err, AttnError::InvalidSoftcap(_)), "{c}: {err}");
    }
    for (l, r) in [(-2, 0), (0, -2), (i64::MIN, -1)] {
        assert_eq!(
            p.clone().with_window(l, r).unwrap_err(),
            AttnError::InvalidWindow { left: l, right: r }
        );
    }
    assert_eq!(
        p.clone()
            .with_alibi(Alibi::PerHead(vec![0.1; 5]))
            .unwrap_err(),
        AttnError::FeatureLength {
            feature: "ALiBi slopes",
            expected: 4,
            got: 5
        }
    );
    assert_eq!(
        p.clone()
            .with_alibi(Alibi::PerBatchHead(vec![0.1; 4]))
            .unwrap_err(),
        AttnError::FeatureLength {
            feature: "ALiBi slopes",
            expected: 8,
            got: 4
        }
    );
    assert!(matches!(
        p.clone()
            .with_alibi(Alibi::PerHead(vec![0.1, f32::NAN, 0.0, 0.0]))
            .unwrap_err(),
        AttnError::NonFiniteFeature {
            feature: "ALiBi slopes",
            index: 1,
            ..
        }
    ));
    assert_eq!(
        p.clone().with_sinks(vec![0.0; 2]).unwrap_err(),
        AttnError::FeatureLength {
            feature: "sinks",
            expected: 4,
            got: 2
        }
    );
    for bad in [f32::NAN, f32::INFINITY] {
        assert!(matches!(
            p.clone().with_sinks(vec![0.0, 0.0, 0.0, bad]).unwrap_err(),
            AttnError::NonFiniteFeature {
                feature: "sinks",
                index: 3,
                ..
            }
        ));
    }
    // Valid values are kept, and a later builder keeps the earlier features.
    let ok = p
        .clone()
        .with_window(-1, 0)
        .unwrap()
        .with_softcap(30.0)
        .unwrap()
        .with_sinks(vec![f32::NEG_INFINITY, 0.0, 1.0, 2.0])
        .unwrap();
    assert_eq!(ok.features().window, Some((-1, 0)));
    assert_eq!(ok.features().softcap, Some(30.0));
    assert!(ok.features().sinks.is_some() && ok.features().alibi.is_none());
    assert!(!ok.features().is_empty() && p.features().is_empty());
    // with_features validates too.
    let bad = Features {
        softcap: Some(-3.0),
        ..Features::default()
    };
    assert!(p.clone().with_features(bad).is_err());
    // A per-(batch, head) slope table must follow a batch change.
    let alibi = p
        .clone()
        .with_alibi(Alibi::PerBatchHead(vec![0.1; 8]))
        .unwrap();
    let one = AttnShape::new(1, 4, 2, 3, 3, 8).unwrap();
    assert!(matches!(
        alibi.with_shape(one),
        Err(AttnError::FeatureLength { .. })
    ));
}

/// (sq, sk) per sequence → cu_seqlens.
fn cu(lens: &[usize]) -> Vec<i32> {
    let mut out = vec![0i32];
    for &l in lens {
        out.push(out.last().unwrap() + l as i32);
    }
    out
}

#[test]
fn varlen_equals_each_sequence_alone_including_empty_ones() {
    // (Sq, Sk): equal, Sq > Sk, empty Q, empty K, long, and Sq < Sk.
    let lens = [(5, 5), (9, 4), (0, 6), (3, 0), (70, 130), (2, 17)];
    let (hq, hkv, d) = (4, 2, 8);
    let b = lens.len();
    let cu_q = cu(&lens.map(|x| x.0));
    let cu_k = cu(&lens.map(|x| x.1));
    let (tq, tk) = (
        *cu_q.last().unwrap() as usize,
        *cu_k.last().unwrap() as usize,
    );
    let q = normal(tq * hq * d, 31);
    let k = normal(tk * hkv * d, 32);
    let v = normal(tk * hkv * d, 33);
    let slopes: Vec<f32> = normal_f32(b * hq, 34).iter().map(|x| x.abs()).collect();
    for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
        let spec_for = |sq: usize, sk: usize, bi: usize| Spec {
            window: Some((6, 1)),
            softcap: Some(3.0),
            alibi: Some((slopes[bi * hq..][..hq].to_vec(), false)),
            sinks: Some(vec![0.5, -0.5, 1.0, 0.0]),
            ..Spec::plain((1, hq, hkv, sq, sk, d), causal)
        };
        let template = Problem::new(AttnShape::new(b, hq, hkv, 1, 1, d).unwrap(), causal)
            .with_window(6, 1)
            .unwrap()
            .with_softcap(3.0)
            .unwrap()
            .with_alibi(Alibi::PerBatchHead(slopes.clone()))
            .unwrap()
            .with_sinks(vec![0.5, -0.5, 1.0, 0.0])
            .unwrap();
        let out = forward_varlen(&template, &cu_q, &cu_k, &q, &k, &v).unwrap();
        assert_eq!((out.o.len(), out.lse.len()), (tq * hq * d, hq * tq));
        for (bi, &(sq, sk)) in lens.iter().enumerate() {
            let (q0, k0) = (cu_q[bi] as usize, cu_k[bi] as usize);
            // [S, H, D] → [1, H, S, D], by hand.
            let bhsd = |x: &[f64], s0: usize, len: usize, heads: usize| {
                let mut out = vec![0.0; heads * len * d];
                for s in 0..len {
                    for h in 0..heads {
                        for e in 0..d {
                            out[(h * len + s) * d + e] = x[((s0 + s) * heads + h) * d + e];
                        }
                    }
                }
                out
            };
            let want = if sk == 0 {
                RefOutput {
                    o: vec![0.0; hq * sq * d],
                    lse: vec![f64::NEG_INFINITY; hq * sq],
                }
            } else {
                spec_for(sq, sk, bi).direct(
                    &bhsd(&q, q0, sq, hq),
                    &bhsd(&k, k0, sk, hkv),
                    &bhsd(&v, k0, sk, hkv),
                )
            };
            for h in 0..hq {
                for s in 0..sq {
                    let got = &out.o[((q0 + s) * hq + h) * d..][..d];
                    assert_close(
                        &format!("{causal} seq {bi} h {h} row {s}"),
                        got,
                        &want.o[(h * sq + s) * d..][..d],
                        1e-12,
                    );
                    let (a, w) = (out.lse[h * tq + q0 + s], want.lse[h * sq + s]);
                    assert!(
                        a == w || (a - w).abs() < 1e-12,
                        "{causal} seq {bi} LSE {a} vs {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn varlen_errors() {
    let template = Problem::new(AttnShape::new(2, 2, 1, 1, 1, 4).unwrap(), Causal::None);
    let (cu_q, cu_k) = (vec![0, 2, 5], vec![0, 3, 3]);
    let q = vec![0.5f64; 5 * 2 * 4];
    let kv = vec![0.25f64; 3 * 4];
    assert!(forward_varlen(&template, &cu_q, &cu_k, &q, &kv, &kv).is_ok());
    let err = |cq: &[i32], ck: &[i32], q: &[f64], k: &[f64], v: &[f64]| {
        forward_varlen(&template, cq, ck, q, k, v).unwrap_err()
    };
    assert_eq!(
        err(&[0, 2], &cu_k, &q, &kv, &kv),
        AttnError::CuSeqlensLength {
            name: "cu_seqlens_q",
            expected: 3,
            got: 2
        }
    );
    assert_eq!(
        err(&cu_q, &[0, 3, 2], &q, &kv, &kv),
        AttnError::CuSeqlensNotMonotone {
            name: "cu_seqlens_k",
            index: 2,
            value: 2,
            previous: 3
        }
    );
    assert_eq!(
        err(&[1, 2, 5], &cu_k, &q, &kv, &kv),
        AttnError::CuSeqlensNotMonotone {
            name: "cu_seqlens_q",
            index: 0,
            value: 1,
            previous: 0
        }
    );
    assert!(matches!(
        err(&[0, -1, 5], &cu_k, &q, &kv, &kv),
        AttnError::CuSeqlensNotMonotone {
            index: 1,
            value: -1,
            ..
        }
    ));
    assert_eq!(
        err(&[0, 2, 6], &cu_k, &q, &kv, &kv),
        AttnError::LengthMismatch {
            tensor: "Q",
            expected: 48,
            got: 40
        }
    );
    assert!(matches!(
        err(&cu_q, &cu_k, &q, &kv[1..], &kv),
        AttnError::LengthMismatch { tensor: "K", .. }
    ));
    assert!(matches!(
        err(&cu_q, &cu_k, &q, &kv, &kv[1..]),
        AttnError::LengthMismatch { tensor: "V", .. }
    ));
}

/// A shuffled paged cache holding `lens[b]` keys per sequence, with garbage (NaN) in every
/// block no sequence uses and in the unused tail of each last page; returns
/// (k_cache, v_cache, block_table, max_blocks, dense K and V per sequence `[1, Hkv, Sk, D]`).
#[allow(clippy::type_complexity)]
fn paged_cache(
    lens: &[usize],
    page: usize,
    hkv: usize,
    d: usize,
    seed: u64,
) -> (Vec<f64>, Vec<f64>, Vec<i32>, Vec<(Vec<f64>, Vec<f64>)>) {
    let pages: Vec<usize> = lens.iter().map(|l| l.div_ceil(page)).collect();
    let max_blocks = pages.iter().copied().max().unwrap().max(1) + 1; // a spare slot
    let num_blocks = pages.iter().sum::<usize>() + 3; // three blocks nobody uses
    let mut order: Vec<usize> = (0..num_blocks).collect();
    order.shuffle(&mut StdRng::seed_from_u64(seed));
    let row = page * hkv * d;
    let mut kc = vec![f64::NAN; num_blocks * row];
    let mut vc = vec![f64::NAN; num_blocks * row];
    let mut table = vec![-1i32; lens.len() * max_blocks];
    let mut next = order.into_iter();
    let mut dense = Vec::new();
    for (b, &len) in lens.iter().enumerate() {
        let k = normal(hkv * len * d, seed + 10 + b as u64);
        let v = normal(hkv * len * d, seed + 50 + b as u64);
        for slot in 0..pages[b] {
            let block = next.next().unwrap();
            table[b * max_blocks + slot] = block as i32;
            for j in slot * page..((slot + 1) * page).min(len) {
                for h in 0..hkv {
                    let at = ((block * page + j % page) * hkv + h) * d;
                    kc[at..at + d].copy_from_slice(&k[(h * len + j) * d..][..d]);
                    vc[at..at + d].copy_from_slice(&v[(h * len + j) * d..][..d]);
                }
            }
        }
        dense.push((k, v));
    }
    (kc, vc, table, dense)
}

#[test]
fn paged_kv_equals_the_dense_reference_on_the_gathered_cache() {
    // Page boundaries mid-sequence (37, 17), exactly one page, an empty sequence.
    let lens = [37usize, 16, 0, 17, 1];
    let (hq, hkv, d, sq, page) = (4, 2, 8, 5, 16);
    let (kc, vc, table, dense) = paged_cache(&lens, page, hkv, d, 40);
    let b = lens.len();
    let q = normal(b * hq * sq * d, 41);
    let seqused: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
    for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
        for with_features in [false, true] {
            let mut template = Problem::new(AttnShape::new(b, hq, hkv, sq, 1, d).unwrap(), causal);
            if with_features {
                template = template
                    .with_window(9, -1)
                    .unwrap()
                    .with_alibi(Alibi::PerHead(vec![0.1, 0.2, 0.3, 0.4]))
                    .unwrap()
                    .with_sinks(vec![1.0; 4])
                    .unwrap();
            }
            let kv = PagedKv {
                k_cache: &kc,
                v_cache: &vc,
                page_size: page,
                block_table: &table,
                seqused_k: &seqused,
            };
            let out = forward_paged(&template, &q, &kv).unwrap();
            assert!(out.o.iter().all(|x| x.is_finite()), "a NaN page leaked in");
            let head = hq * sq * d;
            for (bi, &sk) in lens.iter().enumerate() {
                let (got_o, got_lse) = (
                    &out.o[bi * head..][..head],
                    &out.lse[bi * hq * sq..][..hq * sq],
                );
                if sk == 0 {
                    assert!(got_o.iter().all(|&x| x == 0.0));
                    assert!(got_lse.iter().all(|&x| x == f64::NEG_INFINITY));
                    continue;
                }
                let mut spec = Spec::plain((1, hq, hkv, sq, sk, d), causal);
                if with_features {
                    spec.window = Some((9, -1));
                    spec.alibi = Some((vec![0.1, 0.2, 0.3, 0.4], false));
                    spec.sinks = Some(vec![1.0; 4]);
                }
                let qb = &q[bi * head..][..head];
                let dense_out = forward(&spec.problem(), qb, &dense[bi].0, &dense[bi].1).unwrap();
                assert_eq!(got_o, &dense_out.o[..], "{causal} seq {bi}");
                assert_eq!(got_lse, &dense_out.lse[..], "{causal} seq {bi}");
                let want = spec.direct(qb, &dense[bi].0, &dense[bi].1);
                assert_close("paged vs direct", got_o, &want.o, 1e-12);
            }
        }
    }
}

#[test]
fn paged_kv_errors() {
    let (hq, hkv, d, sq, page) = (2, 1, 4, 3, 16);
    let template = Problem::new(AttnShape::new(2, hq, hkv, sq, 1, d).unwrap(), Causal::None);
    let q = vec![0.1f64; 2 * hq * sq * d];
    let cache = vec![0.2f64; 3 * page * hkv * d]; // 3 blocks
    let table = [0i32, 1, 2, -1]; // max_blocks_per_seq = 2; sequence 1 uses block 2 only
    let seqused = [20i32, 16];
    let run = |page_size: usize, k: &[f64], v: &[f64], table: &[i32], seqused: &[i32]| {
        forward_paged(
            &template,
            &q,
            &PagedKv {
                k_cache: k,
                v_cache: v,
                page_size,
                block_table: table,
                seqused_k: seqused,
            },
        )
    };
    assert!(
        run(page, &cache, &cache, &table, &seqused).is_ok(),
        "unused -1 entry is fine"
    );
    assert_eq!(
        run(8, &cache, &cache, &table, &seqused).unwrap_err(),
        AttnError::InvalidPageSize(8)
    );
    assert_eq!(
        run(0, &cache, &cache, &table, &seqused).unwrap_err(),
        AttnError::InvalidPageSize(0)
    );
    assert!(matches!(
        run(page, &cache[1..], &cache[1..], &table, &seqused).unwrap_err(),
        AttnError::PagedCacheShape { tensor: "K", .. }
    ));
    assert!(matches!(
        run(page, &cache, &cache[64..], &table, &seqused).unwrap_err(),
        AttnError::LengthMismatch { tensor: "V", .. }
    ));
    assert_eq!(
        run(page, &cache, &cache, &table[..3], &seqused).unwrap_err(),
        AttnError::BlockTableShape { len: 3, batch: 2 }
    );
    assert_eq!(
        run(page, &cache, &cache, &[0, 1, 3, 0], &seqused).unwrap_err(),
        AttnError::BlockIndexOutOfRange {
            batch: 1,
            slot: 0,
            index: 3,
            num_blocks: 3
        }
    );
    assert_eq!(
        run(page, &cache, &cache, &[0, -1, 2, 0], &seqused).unwrap_err(),
        AttnError::BlockIndexOutOfRange {
            batch: 0,
            slot: 1,
            index: -1,
            num_blocks: 3
        }
    );
    assert_eq!(
        run(page, &cache, &cache, &table, &[33, 16]).unwrap_err(),
        AttnError::SequsedOutOfRange {
            batch: 0,
            seqused: 33,
            capacity: 32
        }
    );
    assert_eq!(
        run(page, &cache, &cache, &table, &[20, -1]).unwrap_err(),
        AttnError::SequsedOutOfRange {
            batch: 1,
            seqused: -1,
            capacity: 32
        }
    );
    assert!(matches!(
        run(page, &cache, &cache, &table, &[20]).unwrap_err(),
        AttnError::LengthMismatch {
            tensor: "seqused_k",
            ..
        }
    ));
    assert!(matches!(
        forward_paged(
            &template,
            &q[1..],
            &PagedKv {
                k_cache: &cache,
                v_cache: &cache,
                page_size: page,
                block_table: &table,
                seqused_k: &seqused
            },
        )
        .unwrap_err(),
        AttnError::LengthMismatch { tensor: "Q", .. }
    ));
}
