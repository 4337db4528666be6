//! The backward reference with serving features (sliding window, softcap, ALiBi, attention
//! sinks), alone and combined, with both causal alignments and GQA: central finite
//! differences of `L = Σ O ∘ G` (O from `forward_naive`, which applies the features
//! independently of the backward) with respect to every element of Q, K, V and every sink
//! logit, and the kernel-rounding emulation against the f64 backward.

use crate::common::{max_abs, max_abs_diff, normal, normal_f32, qkv};
use attn_ref::reference::backward::backward_emulated;
use attn_ref::reference::emulate::Storage;
use attn_ref::reference::{backward, backward_with, forward, forward_naive, RefGrads};
use attn_ref::{Alibi, AttnShape, Causal, Features, Problem};
use proptest::prelude::*;

/// Step of the central differences for Q, K, V.
const H: f64 = 1e-5;
/// Step for the sink logits: a power of two, so that `sink ± H_SINK` is exact in f32 (the
/// problem stores sinks as f32) for the |sink| < 64 drawn here.
const H_SINK: f64 = 1.0 / 131072.0; // 2^-17
/// Allowed `|fd − analytic| / max(|analytic|, FLOOR)`.
const REL_TOL: f64 = 1e-6;
/// Below this magnitude a gradient is compared absolutely (`REL_TOL · FLOOR`).
const FLOOR: f64 = 1e-2;

const ALIGNMENTS: [Causal; 3] = [Causal::None, Causal::TopLeft, Causal::BottomRight];

/// One named set of features; slopes and sinks are drawn for the shape at hand.
#[derive(Debug, Clone, Copy)]
struct FeatureSet {
    name: &'static str,
    window: Option<(i64, i64)>,
    softcap: Option<f64>,
    /// `Some(per_batch)`.
    alibi: Option<bool>,
    sinks: bool,
}

const NONE: FeatureSet = FeatureSet {
    name: "none",
    window: None,
    softcap: None,
    alibi: None,
    sinks: false,
};

/// Each feature alone (the windows' left bounds exclude early keys), then all together.
const SETS: [FeatureSet; 8] = [
    FeatureSet {
        name: "window (2, -1)",
        window: Some((2, -1)),
        ..NONE
    },
    FeatureSet {
        name: "window (1, 2)",
        window: Some((1, 2)),
        ..NONE
    },
    FeatureSet {
        name: "softcap 1.5",
        softcap: Some(1.5),
        ..NONE
    },
    FeatureSet {
        name: "ALiBi per head",
        alibi: Some(false),
        ..NONE
    },
    FeatureSet {
        name: "ALiBi per (batch, head)",
        alibi: Some(true),
        ..NONE
    },
    FeatureSet {
        name: "sinks",
        sinks: true,
        ..NONE
    },
    FeatureSet {
        name: "all: window (2, 1), softcap 2, ALiBi, sinks",
        window: Some((2, 1)),
        softcap: Some(2.0),
        alibi: Some(true),
        sinks: true,
    },
    FeatureSet {
        name: "all: window (3, -1), softcap 0.8, ALiBi per head, sinks",
        window: Some((3, -1)),
        softcap: Some(0.8),
        alibi: Some(false),
        sinks: true,
    },
];

impl FeatureSet {
    fn features(&self, shape: &AttnShape, seed: u64) -> Features {
        let hq = shape.q_heads();
        Features {
            window: self.window,
            softcap: self.softcap,
            alibi: self.alibi.map(|per_batch| {
                // Slopes in (0.05, 1): large enough to move P, small enough to keep every
                // visible key in play.
                let n = if per_batch { shape.batch() * hq } else { hq };
                let s: Vec<f32> = normal_f32(n, seed ^ 0xa1)
                    .iter()
                    .map(|x| 0.05 + 0.9 * (x.abs() / (1.0 + x.abs())))
                    .collect();
                if per_batch {
                    Alibi::PerBatchHead(s)
                } else {
                    Alibi::PerHead(s)
                }
            }),
            sinks: self.sinks.then(|| normal_f32(hq, seed ^ 0x51)),
        }
    }
}

/// `L = Σ O ∘ G`, O from the naive loop.
fn loss(p: &Problem, q: &[f64], k: &[f64], v: &[f64], g: &[f64]) -> f64 {
    let o = forward_naive(p, q, k, v).unwrap().o;
    o.iter().zip(g).map(|(a, b)| a * b).sum()
}

/// Worst `|fd − analytic| / max(|analytic|, FLOOR)` of one element so far.
fn rel_err(fd: f64, an: f64) -> f64 {
    (fd - an).abs() / an.abs().max(FLOOR)
}

/// Checks every gradient of `grads` (dQ, dK, dV and, with sinks, dsinks) against central
/// differences of the loss; returns the worst relative error.
fn fd_check(p: &Problem, q: &[f64], k: &[f64], v: &[f64], g: &[f64], grads: &RefGrads) -> f64 {
    let mut worst: f64 = 0.0;
    for (which, x, an) in [(0, q, &grads.dq), (1, k, &grads.dk), (2, v, &grads.dv)] {
        let mut xp = x.to_vec();
        let eval = |xp: &[f64]| match which {
            0 => loss(p, xp, k, v, g),
            1 => loss(p, q, xp, v, g),
            _ => loss(p, q, k, xp, g),
        };
        for idx in 0..x.len() {
            xp[idx] = x[idx] + H;
            let up = eval(&xp);
            xp[idx] = x[idx] - H;
            let down = eval(&xp);
            xp[idx] = x[idx];
            worst = worst.max(rel_err((up - down) / (2.0 * H), an[idx]));
        }
    }
    match (&p.features().sinks, &grads.dsinks) {
        (None, None) => {}
        (Some(sinks), Some(ds)) => {
            assert_eq!(ds.len(), sinks.len());
            for h in 0..sinks.len() {
                let at = |delta: f64| {
                    let mut s = sinks.clone();
                    let x = f64::from(s[h]) + delta;
                    assert_eq!(f64::from(x as f32), x, "sink step is not exact in f32");
                    s[h] = x as f32;
                    loss(&p.with_sinks(s).unwrap(), q, k, v, g)
                };
                let fd = (at(H_SINK) - at(-H_SINK)) / (2.0 * H_SINK);
                worst = worst.max(rel_err(fd, ds[h]));
            }
        }
        (a, b) => panic!("sinks {a:?} but dsinks {b:?}"),
    }
    worst
}

/// Builds the problem, runs the backward on fresh N(0,1) data, checks it against finite
/// differences and against `backward_with` on the forward's O and LSE; returns the worst
/// relative error.
fn check(
    dims: (usize, usize, usize, usize, usize, usize),
    causal: Causal,
    scale: f64,
    set: &FeatureSet,
    seed: u64,
) -> f64 {
    let (b, hq, hkv, sq, sk, d) = dims;
    let shape = AttnShape::new(b, hq, hkv, sq, sk, d).unwrap();
    let p = Problem::new(shape, causal)
        .with_scale(scale)
        .unwrap()
        .with_features(set.features(&shape, seed))
        .unwrap();
    let (q, k, v) = qkv(&shape, seed);
    let g = normal(shape.o_elems(), seed ^ 0xd0);
    let grads = backward(&p, &q, &k, &v, &g).unwrap();
    let all = || grads.dq.iter().chain(&grads.dk).chain(&grads.dv);
    assert!(
        all().all(|x| x.is_finite()),
        "{}: non-finite gradient",
        set.name
    );
    if (0..sq).any(|i| !p.visible_range(i).is_empty()) {
        assert!(all().any(|&x| x != 0.0), "{}: all gradients zero", set.name);
    }
    let err = fd_check(&p, &q, &k, &v, &g, &grads);
    assert!(
        err <= REL_TOL,
        "{} {causal} {dims:?} scale {scale}: finite differences disagree, rel {err:e}",
        set.name
    );
    let fwd = forward(&p, &q, &k, &v).unwrap();
    let with = backward_with(&p, &q, &k, &v, &fwd.o, &fwd.lse, &g).unwrap();
    assert_eq!(
        with, grads,
        "{}: backward_with differs from backward",
        set.name
    );
    err
}

/// (B, Hq, Hkv, Sq, Sk, D): GQA 2:1 with Sq < Sk, GQA with Sq > Sk (rows fully masked
/// under bottom-right alignment or by the window), MHA with Sq = Sk.
const SHAPES: [(usize, usize, usize, usize, usize, usize); 3] =
    [(2, 4, 2, 5, 7, 4), (1, 2, 1, 7, 4, 3), (1, 2, 2, 6, 6, 5)];

#[test]
fn each_feature_and_all_combined_match_finite_differences() {
    let mut worst: f64 = 0.0;
    let mut cases = 0;
    for (n, set) in SETS.iter().enumerate() {
        for (m, &dims) in SHAPES.iter().enumerate() {
            for causal in ALIGNMENTS {
                // A scale of 1.7 pushes scores into the softcap's curved part.
                let seed = 1000 + 10 * n as u64 + m as u64;
                worst = worst.max(check(dims, causal, 1.7, set, seed));
                cases += 1;
            }
        }
    }
    eprintln!("finite differences with features, {cases} problems: worst rel {worst:e}");
}

#[test]
fn the_windows_tested_exclude_early_keys() {
    // Guards the point of the window cases: for every window and alignment, some tested row
    // sees two or more keys and not key 0 (the old backward walked keys 0..n and got such
    // rows wrong).
    for set in SETS.iter().filter(|s| s.window.is_some()) {
        for causal in ALIGNMENTS {
            let covered = SHAPES.iter().any(|&(b, hq, hkv, sq, sk, d)| {
                let shape = AttnShape::new(b, hq, hkv, sq, sk, d).unwrap();
                let p = Problem::new(shape, causal)
                    .with_features(set.features(&shape, 0))
                    .unwrap();
                (0..sq).any(|i| {
                    let r = p.visible_range(i);
                    r.start > 0 && r.len() >= 2
                })
            });
            assert!(covered, "{} {causal}", set.name);
        }
    }
}

#[test]
fn keys_left_of_every_window_get_zero_gradients_and_nan_there_stays_out() {
    // Sq = 3 < Sk = 8, bottom-right, window (1, 0): row i sees keys i+4, i+5, so keys 0..4
    // are masked for every row.
    let shape = AttnShape::new(1, 2, 1, 3, 8, 4).unwrap();
    let p = Problem::new(shape, Causal::BottomRight)
        .with_window(1, 0)
        .unwrap()
        .with_softcap(2.0)
        .unwrap()
        .with_sinks(vec![0.3, -0.4])
        .unwrap();
    let (q, mut k, mut v) = qkv(&shape, 77);
    let d = shape.head_dim();
    for j in 0..4 {
        k[shape.kv_offset(0, 0, j)..][..d].fill(f64::NAN);
        v[shape.kv_offset(0, 0, j)..][..d].fill(f64::NAN);
    }
    let d_o = normal(shape.o_elems(), 78);
    let g = backward(&p, &q, &k, &v, &d_o).unwrap();
    assert!(g.dq.iter().all(|x| x.is_finite()));
    assert!(g.dk[..4 * d]
        .iter()
        .chain(&g.dv[..4 * d])
        .all(|&x| x == 0.0));
    assert!(g.dk[4 * d..].iter().all(|x| x.is_finite()));
    assert!(g.dv[4 * d..].iter().any(|&x| x != 0.0));
    let ds = g.dsinks.as_ref().unwrap();
    assert!(ds.iter().all(|x| x.is_finite() && *x != 0.0), "{ds:?}");
    let e = |x: &[f64]| x.iter().map(|&y| y as f32).collect::<Vec<f32>>();
    let emu = backward_emulated(&p, &e(&q), &e(&k), &e(&v), &e(&d_o), Storage::F16).unwrap();
    assert!(emu.dq.iter().all(|x| x.is_finite()));
    assert!(emu.dk[..4 * d]
        .iter()
        .chain(&emu.dv[..4 * d])
        .all(|&x| x == 0.0));
}

#[test]
fn fully_masked_rows_add_nothing_to_the_sink_gradient() {
    // Bottom-right with Sq = 6 > Sk = 3: rows 0..3 see no key (O = 0, LSE = −∞ even with a
    // sink); their dO must not matter anywhere, the sink gradient included.
    let shape = AttnShape::new(1, 2, 1, 6, 3, 4).unwrap();
    let p = Problem::new(shape, Causal::BottomRight)
        .with_sinks(vec![0.5, 1.5])
        .unwrap();
    let (q, k, v) = qkv(&shape, 5);
    let d_o = normal(shape.o_elems(), 6);
    let g = backward(&p, &q, &k, &v, &d_o).unwrap();
    let mut d_o2 = d_o.clone();
    for h in 0..2 {
        d_o2[shape.q_offset(0, h, 0)..][..3 * 4].fill(1e6);
    }
    let g2 = backward(&p, &q, &k, &v, &d_o2).unwrap();
    assert_eq!(g, g2);
    assert!(g.dsinks.unwrap().iter().all(|&x| x != 0.0));
}

#[test]
fn dsinks_is_none_without_sinks() {
    let shape = AttnShape::new(1, 2, 1, 3, 4, 4).unwrap();
    let p = Problem::new(shape, Causal::None).with_softcap(3.0).unwrap();
    let (q, k, v) = qkv(&shape, 9);
    let d_o = normal(shape.o_elems(), 10);
    assert_eq!(backward(&p, &q, &k, &v, &d_o).unwrap().dsinks, None);
    let e = |x: &[f64]| x.iter().map(|&y| y as f32).collect::<Vec<f32>>();
    let emu = backward_emulated(&p, &e(&q), &e(&k), &e(&v), &e(&d_o), Storage::Bf16).unwrap();
    assert_eq!(emu.dsinks, None);
}

/// (emulated vs f64 with the features, emulated vs f64 *without* them), each the worst of
/// dQ, dK, dV relative to the gradient's largest magnitude; and the sinks' relative error.
fn emu_errors(p: &Problem, storage: Storage, seed: u64) -> (f64, f64, f64) {
    let shape = p.shape();
    // Inputs representable in f16, so that the f64 reference sees the kernel's inputs.
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
    let plain = Problem::new(*shape, p.causal())
        .with_scale(p.scale())
        .unwrap();
    let plain = backward(&plain, &q, &k, &v, &d_o).unwrap();
    let emu = backward_emulated(p, &q, &k, &v, &d_o, storage).unwrap();
    let rel = |r: &RefGrads| {
        [(&emu.dq, &r.dq), (&emu.dk, &r.dk), (&emu.dv, &r.dv)]
            .iter()
            .map(|(a, b)| max_abs_diff(a, b) / max_abs(b))
            .fold(0.0, f64::max)
    };
    let sinks = match (&emu.dsinks, &exact.dsinks) {
        (Some(a), Some(b)) => max_abs_diff(a, b) / max_abs(b),
        (None, None) => 0.0,
        (a, b) => panic!("emulated dsinks {a:?}, f64 dsinks {b:?}"),
    };
    (rel(&exact), rel(&plain), sinks)
}

#[test]
fn emulated_backward_with_features_is_close_to_the_f64_one() {
    // Sk = 150 spans three key tiles of 64; the window (70, 20) starts rows' keys inside
    // the first or second tile (row i sees keys from i − 20 on), so tiles are partly masked
    // on both sides. GQA 4:2.
    let shape = AttnShape::new(1, 4, 2, 100, 150, 32).unwrap();
    let windowed = |c: Causal| Problem::new(shape, c).with_window(70, 20).unwrap();
    for causal in [Causal::TopLeft, Causal::BottomRight, Causal::None] {
        let slopes = vec![0.02, 0.05, 0.1, 0.2];
        let sets: Vec<(&str, Problem)> = vec![
            ("window", windowed(causal)),
            (
                "softcap",
                Problem::new(shape, causal)
                    .with_scale(0.4)
                    .unwrap()
                    .with_softcap(1.5)
                    .unwrap(),
            ),
            (
                "ALiBi",
                Problem::new(shape, causal)
                    .with_alibi(Alibi::PerHead(slopes.clone()))
                    .unwrap(),
            ),
            (
                "sinks",
                Problem::new(shape, causal)
                    .with_sinks(vec![1.0, 2.5, -0.5, 3.0])
                    .unwrap(),
            ),
            (
                "all",
                windowed(causal)
                    .with_scale(0.4)
                    .unwrap()
                    .with_softcap(1.5)
                    .unwrap()
                    .with_alibi(Alibi::PerHead(slopes))
                    .unwrap()
                    .with_sinks(vec![1.0, 2.5, -0.5, 3.0])
                    .unwrap(),
            ),
        ];
        for (name, p) in &sets {
            let (e16, plain16, s16) = emu_errors(p, Storage::F16, 300);
            let (ebf, plainbf, sbf) = emu_errors(p, Storage::Bf16, 300);
            eprintln!(
                "{causal} {name}: rel error f16 {e16:.2e} (sinks {s16:.1e}), bf16 {ebf:.2e} \
                 (sinks {sbf:.1e}); vs the plain problem {plain16:.2e}/{plainbf:.2e}"
            );
            assert!(e16 > 0.0 && e16 < 2e-3, "{causal} {name} f16: {e16:e}");
            assert!(
                ebf > 2.0 * e16 && ebf < 3e-2,
                "{causal} {name} bf16: {ebf:e} vs {e16:e}"
            );
            // The emulation applies the features: it is far closer to the f64 backward of
            // the problem than to that of the same problem without features.
            assert!(
                plain16 > 10.0 * e16,
                "{causal} {name}: {plain16:e} vs {e16:e}"
            );
            assert!(
                plainbf > 3.0 * ebf,
                "{causal} {name}: {plainbf:e} vs {ebf:e}"
            );
            if p.features().sinks.is_some() {
                assert!(
                    s16 < 1e-2 && sbf < 5e-2,
                    "{causal} {name}: dsinks {s16:e} {sbf:e}"
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

fn side() -> impl Strategy<Value = i64> {
    prop_oneof![Just(-1i64), 0i64..=4]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn random_small_problems_with_features_match_finite_differences(
        b in 1usize..=2,
        hkv in 1usize..=2,
        group in 1usize..=2,
        sq in 1usize..=6,
        sk in 1usize..=6,
        d in 1usize..=5,
        scale in 0.1f64..2.0,
        causal in causal(),
        window in proptest::option::of((side(), side())),
        softcap in proptest::option::of(0.5f64..4.0),
        alibi in proptest::option::of(any::<bool>()),
        sinks in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let set = FeatureSet { name: "random", window, softcap, alibi, sinks };
        check((b, hkv * group, hkv, sq, sk, d), causal, scale, &set, seed);
    }
}

/// `[B, H, S, D]` → packed `[B·S, H, D]` (every sequence of length `s`).
fn bhsd_to_packed(x: &[f64], b: usize, h: usize, s: usize, d: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                let from = ((bi * h + hi) * s + si) * d;
                let to = ((bi * s + si) * h + hi) * d;
                out[to..to + d].copy_from_slice(&x[from..from + d]);
            }
        }
    }
    out
}

#[test]
fn varlen_backward_is_the_dense_backward_of_each_sequence() {
    use attn_ref::reference::varlen::backward_varlen;
    // Two sequences of equal lengths are the dense batch B = 2: the same gradients, with
    // per-(batch, head) ALiBi slopes, sinks (dsinks summed over the sequences), a window and
    // GQA.
    let (b, hq, hkv, sq, sk, d) = (2, 4, 2, 5, 7, 3);
    let shape = AttnShape::new(b, hq, hkv, sq, sk, d).unwrap();
    let p = Problem::new(shape, Causal::BottomRight)
        .with_window(4, 0)
        .unwrap()
        .with_softcap(2.5)
        .unwrap()
        .with_alibi(Alibi::PerBatchHead(
            normal_f32(b * hq, 81).iter().map(|x| x.abs()).collect(),
        ))
        .unwrap()
        .with_sinks(normal_f32(hq, 82))
        .unwrap();
    let (q, k, v) = qkv(&shape, 83);
    let g = normal(shape.o_elems(), 84);
    let dense = backward(&p, &q, &k, &v, &g).unwrap();
    let pack_q = |x: &[f64]| bhsd_to_packed(x, b, hq, sq, d);
    let pack_k = |x: &[f64]| bhsd_to_packed(x, b, hkv, sk, d);
    let cu_q = [0, sq as i32, 2 * sq as i32];
    let cu_k = [0, sk as i32, 2 * sk as i32];
    let var = backward_varlen(
        &p,
        &cu_q,
        &cu_k,
        &pack_q(&q),
        &pack_k(&k),
        &pack_k(&v),
        &pack_q(&g),
    )
    .unwrap();
    assert!(max_abs_diff(&var.dq, &pack_q(&dense.dq)) < 1e-12);
    assert!(max_abs_diff(&var.dk, &pack_k(&dense.dk)) < 1e-12);
    assert!(max_abs_diff(&var.dv, &pack_k(&dense.dv)) < 1e-12);
    assert!(max_abs_diff(&var.o, &pack_q(&dense.o)) < 1e-12);
    let (vs, ds) = (var.dsinks.unwrap(), dense.dsinks.unwrap());
    assert!(max_abs_diff(&vs, &ds) < 1e-12 && max_abs(&ds) > 0.0);

    // An empty sequence and one without keys: zero gradients there, the others unchanged.
    let cu_q = [0, sq as i32, sq as i32, 2 * sq as i32];
    let cu_k = [0, sk as i32, 2 * sk as i32, 2 * sk as i32];
    let p3 = Problem::new(
        AttnShape::new(3, hq, hkv, 1, 1, d).unwrap(),
        Causal::BottomRight,
    );
    let plain = Problem::new(
        AttnShape::new(1, hq, hkv, sq, sk, d).unwrap(),
        Causal::BottomRight,
    );
    let q3: Vec<f64> = pack_q(&q);
    let (k3, v3, g3) = (pack_k(&k), pack_k(&v), pack_q(&g));
    let var = backward_varlen(&p3, &cu_q, &cu_k, &q3, &k3, &v3, &g3).unwrap();
    let first = backward(
        &plain,
        &q[..hq * sq * d],
        &k[..hkv * sk * d],
        &v[..hkv * sk * d],
        &g[..hq * sq * d],
    )
    .unwrap();
    let first_dq = bhsd_to_packed(&first.dq, 1, hq, sq, d);
    assert!(max_abs_diff(&var.dq[..sq * hq * d], &first_dq) < 1e-12);
    assert!(
        var.dq[sq * hq * d..].iter().all(|&x| x == 0.0),
        "rows without keys: dQ = 0"
    );
    assert!(
        var.dk[sk * hkv * d..].iter().all(|&x| x == 0.0),
        "keys without rows: dK = 0"
    );
    assert!(var.dsinks.is_none());
    // A dO of the wrong length is an error.
    assert!(backward_varlen(&p3, &cu_q, &cu_k, &q3, &k3, &v3, &g3[1..]).is_err());
}
