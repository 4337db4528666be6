//! The score-modifying features (sliding window, softcap, ALiBi, attention sinks) on both
//! f16/bf16 engines against the f64 reference with attn-oracle's rule: each feature and their
//! combinations × f16/bf16 × no mask / causal top-left / bottom-right × `[B,H,S,D]` and
//! `[B,S,H,D]` × the mma.sync and (on sm_90) Hopper engines, with tails, Sq ≠ Sk, GQA, windows
//! larger than the sequence and windows that leave rows (or whole problems) without a key.
//! Plus what the launcher refuses, and that a window skips the tiles it masks.

use attn_kernels::{
    dims_kv, dims_q, Dtype, Engine, FlashAttention, Forward, ForwardOptions, KernelError, Layout,
    StorageType, Tensor, TensorMut,
};
use attn_ref::{
    reference::{self, emulate},
    Alibi, Causal, Features, Problem,
};
use half::{bf16, f16};
use rand::{rngs::StdRng, Rng, SeedableRng};

use crate::{
    check_output, emu_spec_for, family::run_layout, fresh_seed, gpu, problem, randn, to_f32s, Dims,
};

const CAUSALS: [Causal; 3] = [Causal::None, Causal::TopLeft, Causal::BottomRight];

/// The engines this device has: mma.sync everywhere, Hopper on sm_90.
fn engines(gpu: &FlashAttention) -> Vec<Engine> {
    let mut e = vec![Engine::MmaSync];
    if gpu.compute_capability() == (9, 0) {
        e.push(Engine::Hopper(None));
    }
    e
}

/// ALiBi's slopes for `heads` heads (Press et al.: 2^(−8(h+1)/H)).
pub(super) fn alibi_slopes(heads: usize) -> Vec<f32> {
    (0..heads)
        .map(|h| 2f32.powf(-8.0 * (h as f32 + 1.0) / heads as f32))
        .collect()
}

/// Sink logits: random N(0, 2), one −∞ (a sink that takes nothing) and one large (a sink that
/// takes most of the mass).
pub(super) fn sinks(rng: &mut StdRng, heads: usize) -> Vec<f32> {
    (0..heads)
        .map(|h| match h {
            0 => f32::NEG_INFINITY,
            1 => 6.0,
            _ => 2.0 * rng.sample::<f32, _>(rand_distr::StandardNormal),
        })
        .collect()
}

/// The feature sets every cell runs: each feature alone, windows of every kind, and
/// combinations. `(batch, q_heads)` size the ALiBi and sink arrays.
pub(super) fn feature_sets(
    rng: &mut StdRng,
    batch: usize,
    hq: usize,
) -> Vec<(&'static str, Features)> {
    let w = |l, r| Features {
        window: Some((l, r)),
        ..Features::default()
    };
    let per_bh: Vec<f32> = (0..batch)
        .flat_map(|_| alibi_slopes(hq))
        .map(|s| s * 0.5)
        .collect();
    vec![
        ("window(32,0)", w(32, 0)),
        ("window(17,9)", w(17, 9)),
        ("window(-1,3)", w(-1, 3)),
        ("window(100,-1)", w(100, -1)),
        ("window(0,0)", w(0, 0)),
        ("window larger than the sequence", w(5000, 5000)),
        (
            "softcap 5",
            Features {
                softcap: Some(5.0),
                ..Features::default()
            },
        ),
        (
            "alibi [Hq]",
            Features {
                alibi: Some(Alibi::PerHead(alibi_slopes(hq))),
                ..Features::default()
            },
        ),
        (
            "alibi [B,Hq]",
            Features {
                alibi: Some(Alibi::PerBatchHead(per_bh.clone())),
                ..Features::default()
            },
        ),
        (
            "sinks",
            Features {
                sinks: Some(sinks(rng, hq)),
                ..Features::default()
            },
        ),
        (
            "window + softcap",
            Features {
                window: Some((48, 16)),
                softcap: Some(8.0),
                ..Features::default()
            },
        ),
        (
            "alibi + sinks",
            Features {
                alibi: Some(Alibi::PerHead(alibi_slopes(hq))),
                sinks: Some(sinks(rng, hq)),
                ..Features::default()
            },
        ),
        (
            "all four",
            Features {
                window: Some((40, 7)),
                softcap: Some(6.0),
                alibi: Some(Alibi::PerBatchHead(per_bh)),
                sinks: Some(sinks(rng, hq)),
            },
        ),
    ]
}

/// Runs `p` on every engine and both layouts against one reference; returns the failures.
/// The Hopper engine's `_feat` entry and the mma.sync one must both be the kernel that ran.
fn check_features<T: StorageType + attn_ref::Element>(
    gpu: &FlashAttention,
    p: &Problem,
    what: &str,
    rng: &mut StdRng,
    seed: u64,
    storage: Dtype,
    layouts: &[Layout],
) -> Vec<String> {
    let s = p.shape();
    let q: Vec<T> = randn(rng, s.q_elems());
    let k: Vec<T> = randn(rng, s.kv_elems());
    let v: Vec<T> = randn(rng, s.kv_elems());
    let tag = |e: &dyn std::fmt::Display| {
        format!("{what} {:?} {} {storage} seed {seed}: {e}", s, p.causal())
    };
    let reference = match reference::forward(p, &q, &k, &v) {
        Ok(r) => r,
        Err(e) => return vec![tag(&e)],
    };
    let emu = match emulate::forward_emulated(p, &to_f32s(&q), &to_f32s(&k), &to_f32s(&v), storage)
    {
        Ok(r) => r,
        Err(e) => return vec![tag(&e)],
    };
    let mut failures = Vec::new();
    for engine in engines(gpu) {
        for &layout in layouts {
            let opts = ForwardOptions {
                engine,
                ..Default::default()
            };
            let out = gpu.forward_host_layout(
                p,
                &layout.from_bhsd(&q, dims_q(s)),
                &layout.from_bhsd(&k, dims_kv(s)),
                &layout.from_bhsd(&v, dims_kv(s)),
                layout,
                &opts,
            );
            let out = match out {
                Ok(o) => o,
                Err(e) => {
                    failures.push(tag(&format!("{engine:?} {layout}: {e}")));
                    continue;
                }
            };
            // `_feat`, or its split-KV twin `_feat_split` (an unmasked mma.sync launch).
            if !out.launch.kernel.contains("_feat") {
                failures.push(tag(&format!(
                    "{engine:?} {layout}: ran {}, not a feature entry",
                    out.launch.kernel
                )));
            }
            let o = layout.to_bhsd(&out.o, dims_q(s));
            if let Err(e) =
                check_output(p, &to_f32s(&o), &out.lse, &reference, &emu, storage.into())
            {
                failures.push(tag(&format!(
                    "{engine:?} {layout} ({}): {e}",
                    out.launch.kernel
                )));
            }
        }
    }
    failures
}

pub(super) fn check_dtype(
    gpu: &FlashAttention,
    p: &Problem,
    what: &str,
    rng: &mut StdRng,
    seed: u64,
    dtype: Dtype,
    layouts: &[Layout],
) -> Vec<String> {
    match dtype {
        Dtype::F16 => check_features::<f16>(gpu, p, what, rng, seed, dtype, layouts),
        Dtype::Bf16 => check_features::<bf16>(gpu, p, what, rng, seed, dtype, layouts),
    }
}

/// The problem of `dims`/`causal` with `features`; softcap cases get a larger scale so the
/// cap bites (scores of a few units, c = 5–8).
fn with_features(dims: Dims, causal: Causal, features: &Features) -> Problem {
    let mut p = problem(dims, causal);
    if features.softcap.is_some() {
        p = p.with_scale(4.0 / (dims.5 as f64).sqrt()).unwrap();
    }
    p.with_features(features.clone()).unwrap()
}

/// The full matrix at one head dim: every feature set × causal alignment × dtype × layout ×
/// engine, on two shapes with tails, Sq ≠ Sk both ways and GQA.
fn feature_matrix(d: usize) {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let mut runs = 0;
    for dims in [(2, 4, 2, 200, 333, d), (1, 3, 1, 301, 130, d)] {
        for (what, features) in feature_sets(&mut rng, dims.0, dims.1) {
            for causal in CAUSALS {
                for dtype in [Dtype::F16, Dtype::Bf16] {
                    let p = with_features(dims, causal, &features);
                    runs += 1;
                    failures.extend(check_dtype(
                        &gpu,
                        &p,
                        what,
                        &mut rng,
                        seed,
                        dtype,
                        &[Layout::Bhsd, Layout::Bshd],
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures over {runs} problems (seed {seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_features_d64() {
    feature_matrix(64);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_features_d128() {
    feature_matrix(128);
}

/// Softcap where it bites hardest on the kernels' `tanh.approx.f32` (2^-11 relative by PTX's
/// bound, 2^-16.5 as measured on the H100; the emulation takes f32 tanh): Gemma 2's c = 50
/// and a c = 30 whose tanh covers its whole range, so logits reach ±c and the softmax is
/// peaked, at D = 64 and 128, both dtypes, with and without a causal mask.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_features_softcap_saturating() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for d in [64, 128] {
        let dims = (2, 4, 2, 300, 517, d);
        // (c, scale·√D): tanh's argument has standard deviation scale·√D / c.
        for (c, scale) in [(30.0, 30.0), (50.0, 20.0), (30.0, 90.0)] {
            for causal in [Causal::None, Causal::BottomRight] {
                for dtype in [Dtype::F16, Dtype::Bf16] {
                    let p = problem(dims, causal)
                        .with_scale(scale / (d as f64).sqrt())
                        .and_then(|p| p.with_softcap(c))
                        .expect("valid softcap problem");
                    failures.extend(check_dtype(
                        &gpu,
                        &p,
                        &format!("softcap {c} scale {scale}/√D"),
                        &mut rng,
                        seed,
                        dtype,
                        &[Layout::Bshd],
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// Without a mask, where the dense default takes it (`catalog::hopper_wide_pays`), a D = 128
/// launch with ALiBi or sinks (no softcap, no window) runs the wide 176-key ping-pong tile
/// (its `_feat` entries): every feature set (the others run the feature tile), both dtypes,
/// against the f64 reference, with a tail (1200 keys = 6 tiles + 144) and GQA.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_features_wide_tile() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let dims = (1, 4, 2, 150, 1200, 128);
    assert!(attn_kernels::catalog::hopper_wide_pays(dims.4));
    if gpu.compute_capability() == (9, 0) {
        let sets = feature_sets(&mut rng, 1, 4);
        let alibi = sets
            .iter()
            .find(|(w, _)| *w == "alibi [Hq]")
            .expect("an ALiBi set");
        let p = with_features(dims, Causal::None, &alibi.1);
        let s = p.shape();
        let x: Vec<f16> = randn(&mut rng, s.q_elems().max(s.kv_elems()));
        let out = gpu
            .forward_host(
                &p,
                &x[..s.q_elems()],
                &x[..s.kv_elems()],
                &x[..s.kv_elems()],
            )
            .expect("launch");
        assert!(
            out.launch.kernel.contains("_176_") && out.launch.kernel.ends_with("_feat"),
            "ran {}",
            out.launch.kernel
        );
    }
    for (what, features) in feature_sets(&mut rng, dims.0, dims.1) {
        for dtype in [Dtype::F16, Dtype::Bf16] {
            let p = with_features(dims, Causal::None, &features);
            failures.extend(check_dtype(
                &gpu,
                &p,
                what,
                &mut rng,
                seed,
                dtype,
                &[Layout::Bshd, Layout::Bhsd],
            ));
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// Every other head-dim bucket (at a padded D, so the zero-filled columns are in play) with
/// all four features and with a window alone, bottom-right and top-left.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_features_every_bucket() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for d in [24, 40, 96, 120, 152, 192, 216, 256] {
        let dims = (1, 4, 2, 150, 267, d);
        let sets = feature_sets(&mut rng, dims.0, dims.1);
        for (what, features) in sets
            .iter()
            .filter(|(w, _)| *w == "all four" || *w == "window(17,9)")
        {
            for causal in [Causal::BottomRight, Causal::TopLeft, Causal::None] {
                for dtype in [Dtype::F16, Dtype::Bf16] {
                    let p = with_features(dims, causal, features);
                    failures.extend(check_dtype(
                        &gpu,
                        &p,
                        what,
                        &mut rng,
                        seed,
                        dtype,
                        &[Layout::Bshd],
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// Windows that leave rows without a key (O = 0, LSE = −∞, even with a sink), a problem where
/// no row sees a key, tiny and single-row problems, and long rows where the window skips
/// most tiles.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_features_empty_rows_and_long_rows() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let hq = 4;
    let cases: Vec<(Dims, Causal, Features, &str)> = vec![
        // Sq > Sk, bottom-right: rows i < Sq − Sk are empty; (0, 0) keeps one key per row.
        (
            (1, hq, 2, 300, 70, 64),
            Causal::BottomRight,
            Features {
                window: Some((0, 0)),
                sinks: Some(sinks(&mut rng, hq)),
                ..Features::default()
            },
            "rows before the diagonal are empty",
        ),
        // A window right of the top-left diagonal: lo = i + 200 − left > i, every row empty.
        (
            (1, hq, 2, 100, 300, 128),
            Causal::TopLeft,
            Features {
                window: Some((50, -1)),
                sinks: Some(sinks(&mut rng, hq)),
                ..Features::default()
            },
            "no row sees a key",
        ),
        // A window right-bounded before key 0 for the first rows: j ≤ i + Sk − Sq + right < 0.
        (
            (2, hq, 1, 257, 129, 64),
            Causal::None,
            Features {
                window: Some((-1, 3)),
                alibi: Some(Alibi::PerHead(alibi_slopes(hq))),
                ..Features::default()
            },
            "rows left of the window are empty",
        ),
        (
            (1, hq, 4, 1, 1, 64),
            Causal::BottomRight,
            Features {
                window: Some((0, 0)),
                softcap: Some(3.0),
                sinks: Some(sinks(&mut rng, hq)),
                ..Features::default()
            },
            "one query, one key",
        ),
        (
            (1, hq, 2, 1, 3000, 128),
            Causal::BottomRight,
            Features {
                window: Some((300, 0)),
                sinks: Some(sinks(&mut rng, hq)),
                ..Features::default()
            },
            "decode with a window",
        ),
        (
            (1, hq, 2, 2048, 2048, 128),
            Causal::BottomRight,
            Features {
                window: Some((255, 0)),
                softcap: Some(8.0),
                alibi: Some(Alibi::PerHead(alibi_slopes(hq))),
                sinks: Some(sinks(&mut rng, hq)),
            },
            "long rows, narrow window",
        ),
    ];
    for (dims, causal, features, what) in cases {
        for dtype in [Dtype::F16, Dtype::Bf16] {
            let p = with_features(dims, causal, &features);
            failures.extend(check_dtype(
                &gpu,
                &p,
                what,
                &mut rng,
                seed,
                dtype,
                &[Layout::Bhsd, Layout::Bshd],
            ));
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// Attention sinks, ALiBi and windows where the keys split: the decode kernel (GQA-packed rows
/// reading one sink and slope each and the original row's window and distances, groups too
/// large to pack, one row per head; split and not) and the mma.sync general entries' split
/// twins, which `Engine::Auto` takes for an unmasked decode with ALiBi or sinks over several
/// rows of one head. The sink must join once: added per split it would count n_splits times,
/// and a packed row must read its own query head's sink and slope. Each case
/// also asserts which kernel ran and how many splits it took, so a case that silently stopped
/// splitting (or packing) fails.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_features_sinks_split_and_decode() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let hq = 8;
    // (dims, causal, extra features, engine, splits asked, kernel prefix, more than one split)
    type Case = (
        Dims,
        Causal,
        Features,
        Engine,
        Option<usize>,
        &'static str,
        bool,
    );
    let window = Features {
        window: Some((1500, 0)),
        ..Features::default()
    };
    let short = Features {
        window: Some((100, 0)),
        ..Features::default()
    };
    let alibi = |heads: usize| Features {
        alibi: Some(Alibi::PerHead(alibi_slopes(heads))),
        ..Features::default()
    };
    // [B, Hq] slopes: each sequence its own.
    let alibi_per_batch = |b: usize, heads: usize| Features {
        alibi: Some(Alibi::PerBatchHead(
            (0..b)
                .flat_map(|i| {
                    alibi_slopes(heads)
                        .into_iter()
                        .map(move |x| x * (i + 2) as f32 / 2.0)
                })
                .collect(),
        )),
        ..Features::default()
    };
    let alibi_window_softcap = Features {
        window: Some((1500, 0)),
        softcap: Some(20.0),
        ..alibi(hq)
    };
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        // GQA groups of 4 and 8: packed rows, each reading its own query head's sink.
        ((1, hq, 2, 1, 3000, 128), Causal::None, Features::default(), Engine::Decode, None, "attn_dec_f16_d128_r4", true),
        ((1, 2 * hq, 2, 1, 3000, 64), Causal::BottomRight, Features::default(), Engine::Auto, None, "attn_dec_f16_d64_r8", true),
        ((2, hq, 4, 1, 777, 64), Causal::None, Features::default(), Engine::Decode, Some(1), "attn_dec_f16_d64_r2", false),
        // A group of 16 does not pack (eight rows at most): one row per head.
        ((1, 4 * hq, 2, 1, 2000, 128), Causal::None, Features::default(), Engine::Auto, None, "attn_dec_f16_d128_r1", true),
        // A window: packed rows take the original row's window (the last packed row's).
        ((1, hq, 2, 1, 4000, 128), Causal::BottomRight, window.clone(), Engine::Auto, None, "attn_dec_f16_d128_r4", true),
        ((2, 2 * hq, 2, 1, 900, 64), Causal::None, short.clone(), Engine::Decode, Some(1), "attn_dec_f16_d64_r8", false),
        // A short window sizes the split count: 101 keys do not split.
        ((1, 2 * hq, 2, 1, 3000, 64), Causal::BottomRight, short, Engine::Auto, None, "attn_dec_f16_d64_r8", false),
        ((1, 4 * hq, 2, 1, 3000, 64), Causal::BottomRight, window, Engine::Auto, None, "attn_dec_f16_d64_r1", true),
        // Several rows of one head: the mma.sync general entries' split twins.
        ((1, hq, 2, 3, 2000, 128), Causal::None, Features::default(), Engine::MmaSync, Some(4), "attn_fwd_", true),
        ((1, hq, 2, 3, 2000, 128), Causal::None, Features::default(), Engine::Auto, None, "attn_fwd_", true),
        // ALiBi: packed rows read their query head's slope; a group of 16 runs one row per head.
        ((1, hq, 2, 1, 5000, 96), Causal::None, alibi(hq), Engine::Auto, None, "attn_dec_f16_d96_r4", true),
        ((2, 2 * hq, 2, 1, 900, 64), Causal::BottomRight, alibi_per_batch(2, 2 * hq), Engine::Decode, Some(1), "attn_dec_f16_d64_r8", false),
        ((1, 4 * hq, 2, 1, 3000, 128), Causal::None, alibi(4 * hq), Engine::Auto, None, "attn_dec_f16_d128_r1", true),
        ((1, hq, 2, 1, 4000, 64), Causal::BottomRight, alibi_window_softcap, Engine::Auto, None, "attn_dec_f16_d64_r4", true),
        // ALiBi over several rows of one head: the split twins.
        ((1, hq, 2, 3, 2000, 128), Causal::None, alibi(hq), Engine::Auto, None, "attn_fwd_", true),
    ];
    for (dims, causal, extra, engine, splits, prefix, split) in cases {
        // Windowed and ALiBi cases also run without sinks (f16 alone): they pack alone too.
        let variants = [(Dtype::F16, true), (Dtype::Bf16, true), (Dtype::F16, false)];
        let runs = if extra.window.is_some() || extra.alibi.is_some() {
            3
        } else {
            2
        };
        for &(dtype, with_sinks) in &variants[..runs] {
            let features = Features {
                sinks: with_sinks.then(|| sinks(&mut rng, dims.1)),
                ..extra.clone()
            };
            // The entry names carry the dtype.
            let prefix = prefix.replace("_f16_", &format!("_{dtype}_"));
            let p = with_features(dims, causal, &features);
            let tag = format!(
                "{:?} {causal:?} {engine:?} {splits:?} {dtype} sinks {with_sinks} seed {seed}",
                p.shape()
            );
            let opts = ForwardOptions {
                engine,
                splits,
                ..Default::default()
            };
            let run = match dtype {
                Dtype::F16 => run_checked::<f16>(&gpu, &p, &mut rng, &opts, dtype),
                Dtype::Bf16 => run_checked::<bf16>(&gpu, &p, &mut rng, &opts, dtype),
            };
            match run {
                Err(e) => failures.push(format!("{tag}: {e}")),
                Ok((kernel, n_splits, check)) => {
                    if !kernel.starts_with(&prefix) || (n_splits > 1) != split {
                        failures.push(format!("{tag}: ran {kernel} with {n_splits} splits"));
                    }
                    if let Err(e) = check {
                        failures.push(format!("{tag} ({kernel}, {n_splits} splits): {e}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// One `[B,H,S,D]` forward of fresh N(0, 1) inputs in `T` against the f64 reference: the
/// kernel's name, its split count and attn-oracle's verdict.
pub(super) fn run_checked<T: StorageType + attn_ref::Element>(
    gpu: &FlashAttention,
    p: &Problem,
    rng: &mut StdRng,
    opts: &ForwardOptions,
    dtype: Dtype,
) -> Result<(String, usize, Result<(), String>), String> {
    let s = p.shape();
    let q: Vec<T> = randn(rng, s.q_elems());
    let k: Vec<T> = randn(rng, s.kv_elems());
    let v: Vec<T> = randn(rng, s.kv_elems());
    let reference = reference::forward(p, &q, &k, &v).map_err(|e| e.to_string())?;
    let out = gpu
        .forward_host_layout(p, &q, &k, &v, Layout::Bhsd, opts)
        .map_err(|e| e.to_string())?;
    let spec = emu_spec_for(&out.launch, s.head_dim(), false, dtype)?;
    let emu = emulate::forward_emulated_spec(p, &to_f32s(&q), &to_f32s(&k), &to_f32s(&v), &spec)
        .map_err(|e| e.to_string())?;
    let check = check_output(
        p,
        &to_f32s(&out.o),
        &out.lse,
        &reference,
        &emu,
        dtype.into(),
    )
    .map_err(|e| e.to_string());
    Ok((out.launch.kernel.clone(), out.launch.splits, check))
}

/// `Engine::Auto` runs a feature entry (the Hopper one on sm_90), and launches with the same
/// sinks reuse the launcher's device copy (the second launch gives the same bits).
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_features_auto_engine_and_repeat_launches() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let p = problem((1, 8, 2, 300, 300, 128), Causal::BottomRight)
        .with_window(64, 0)
        .unwrap()
        .with_sinks(sinks(&mut rng, 8))
        .unwrap();
    let s = p.shape();
    let q: Vec<f16> = randn(&mut rng, s.q_elems());
    let k: Vec<f16> = randn(&mut rng, s.kv_elems());
    let v: Vec<f16> = randn(&mut rng, s.kv_elems());
    let run = || {
        run_layout(
            gpu.as_ref(),
            &p,
            (&q, &k, &v),
            Layout::Bhsd,
            &ForwardOptions::default(),
        )
        .unwrap()
    };
    let a = gpu
        .forward_host_layout(&p, &q, &k, &v, Layout::Bhsd, &ForwardOptions::default())
        .unwrap();
    let prefix = if gpu.compute_capability() == (9, 0) {
        "attn_fwdh_"
    } else {
        "attn_fwd_"
    };
    assert!(
        a.launch.kernel.starts_with(prefix) && a.launch.kernel.ends_with("_feat"),
        "{}",
        a.launch.kernel
    );
    assert_eq!(a.launch.splits, 1);
    let (o1, l1) = run();
    let (o2, l2) = run();
    assert!(o1.iter().zip(&o2).all(|(x, y)| x.to_bits() == y.to_bits()));
    assert!(l1.iter().zip(&l2).all(|(x, y)| x.to_bits() == y.to_bits()));
}

/// What the launcher refuses with features, before anything runs: a Hopper tile without
/// feature entries, an mma.sync config without feature entries, split-KV under a causal mask
/// (the general entries split unmasked launches only). O stays poisoned.
#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_features_refusals_write_nothing() {
    let gpu = gpu();
    let p = problem((1, 2, 2, 100, 100, 128), Causal::BottomRight)
        .with_softcap(10.0)
        .unwrap();
    let s = p.shape();
    let st = gpu.stream();
    let x = st
        .clone_htod(&vec![f16::from_f32(0.5); s.q_elems()])
        .unwrap();
    let mut o = st
        .clone_htod(&vec![f16::from_f32(f32::NAN); s.o_elems()])
        .unwrap();
    let mut attempts = vec![
        ForwardOptions {
            engine: Engine::MmaSync,
            config: attn_kernels::configs_for(128)
                .into_iter()
                .find(|c| c.block_m == 128),
            ..Default::default()
        },
        ForwardOptions {
            engine: Engine::MmaSync,
            splits: Some(4),
            ..Default::default()
        },
    ];
    if gpu.compute_capability() == (9, 0) {
        // A D = 128 tile without `_feat` entries.
        let plain_only = attn_kernels::hopper_configs_for(128)
            .into_iter()
            .find(|t| !attn_kernels::catalog::HopperVariant::Features.is_built(128, t))
            .expect("a D = 128 Hopper tile without feature entries");
        attempts.push(ForwardOptions {
            engine: Engine::Hopper(Some(plain_only)),
            ..Default::default()
        });
    }
    for opts in attempts {
        let (qd, kd) = (dims_q(s), dims_kv(s));
        let err = gpu
            .forward(Forward {
                problem: &p,
                q: Tensor::bhsd(&x, qd),
                k: Tensor::bhsd(&x, kd),
                v: Tensor::bhsd(&x, kd),
                o: TensorMut::bhsd(&mut o, qd),
                lse: None,
                options: opts.clone(),
            })
            .unwrap_err();
        assert!(
            matches!(
                err,
                KernelError::UnsupportedFeature(_) | KernelError::EngineUnavailable(_)
            ),
            "{opts:?}: {err}"
        );
    }
    let back: Vec<f16> = st.clone_dtoh(&o).unwrap();
    assert!(back.iter().all(|x| x.is_nan()), "a refused launch wrote O");
}

/// A window makes the kernel faster: at 4096 keys a 256-key window loads ~3 of 32 key tiles
/// per block, so it must take well under the time of the unwindowed causal problem (without
/// the skip it would take at least as long). Four batches, so that the grid is many waves
/// and the windowed launch is not mostly launch overhead and tail: at two batches it took
/// 0.52× once in three runs (run 61), at four train-bench measures 0.36×. The suite runs
/// tests on parallel threads that share the GPU, so each side is timed five times,
/// alternating, and the fastest of each counts (run 119 measured 0.61× from one sample of
/// each while other tests ran).
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_features_window_skips_tiles() {
    let gpu = gpu();
    let time = |p: &Problem| {
        let s = p.shape();
        let st = gpu.stream();
        let x = st
            .clone_htod(&vec![f16::from_f32(0.01); s.q_elems()])
            .unwrap();
        let mut o = st.alloc_zeros::<f16>(s.o_elems()).unwrap();
        let mut launch = || {
            gpu.forward(Forward::bhsd(p, &x, &x, &x, &mut o, None))
                .unwrap()
        };
        for _ in 0..5 {
            launch();
        }
        st.synchronize().unwrap();
        let t = std::time::Instant::now();
        for _ in 0..20 {
            launch();
        }
        st.synchronize().unwrap();
        t.elapsed().as_secs_f64() / 20.0
    };
    let causal = problem((4, 16, 16, 4096, 4096, 128), Causal::BottomRight);
    let windowed = causal.with_window(255, 0).unwrap();
    let (mut full, mut win) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..5 {
        full = full.min(time(&causal));
        win = win.min(time(&windowed));
    }
    assert!(
        win < 0.5 * full,
        "window (255, 0) took {:.1} µs, causal {:.1} µs",
        win * 1e6,
        full * 1e6
    );
}
