//! What `cargo xtask sanitize` runs under compute-sanitizer (memcheck, racecheck, initcheck,
//! synccheck): small shapes with tails, GQA and both causal alignments over every config.
//! xtask selects this module by its path (`sanitize::`).

use attn_kernels::{config::has_split, configs_for, Dtype, FlashAttention, Fp8Options};
use attn_ref::Causal;
use rand::{rngs::StdRng, SeedableRng};

use crate::{case, fp8, fresh_seed, run_all_on, DTYPES};

/// Small shapes with tails and both causal alignments, every config: what compute-sanitizer
/// runs (memcheck, racecheck, initcheck, synccheck).
#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitize_small_shapes_every_config() {
    // Its own handle, dropped at the end, so memcheck's leak check sees every allocation
    // (split workspace, modules) freed; the shared static handle lives until exit.
    let gpu = FlashAttention::new(0).expect("a CUDA device");
    let mut cases = Vec::new();
    for d in [64, 128] {
        for cfg in configs_for(d) {
            if cfg.smem_bytes(d) > gpu.max_smem_per_block() {
                continue;
            }
            for dt in DTYPES {
                for (sq, sk, causal) in [
                    (70, 70, Causal::None),
                    (33, 90, Causal::BottomRight),
                    (90, 33, Causal::TopLeft),
                ] {
                    let mut c = case((1, 2, 1, sq, sk, d), causal, dt);
                    c.config = Some(cfg);
                    cases.push(c);
                }
                // The split-KV entry points and their cross-CTA merge.
                if has_split(&cfg, d) {
                    for (sq, sk, causal, splits) in [
                        (40, 400, Causal::None, 3),
                        (70, 300, Causal::BottomRight, 4),
                    ] {
                        let mut c = case((1, 2, 1, sq, sk, d), causal, dt);
                        c.config = Some(cfg);
                        c.splits = Some(splits);
                        cases.push(c);
                    }
                }
            }
        }
    }
    run_all_on(&gpu, &cases);
    drop(gpu);
}

/// Small shapes (tails, GQA, both alignments) over every FP8 config and variant, for
/// compute-sanitizer.
#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitize_fp8_small_shapes() {
    // Its own handle, dropped at the end, so memcheck's leak check sees the Vᵀ workspace
    // and the modules freed.
    let gpu = FlashAttention::new(0).expect("a CUDA device");
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for (dims, causal) in [
        ((1, 2, 1, 37, 70, 64), Causal::BottomRight),
        ((1, 2, 2, 129, 129, 128), Causal::None),
        ((1, 1, 1, 70, 37, 128), Causal::TopLeft),
    ] {
        let p = fp8::fp8_problem(dims, causal);
        let x = fp8::inputs(&p, &mut rng, false);
        let mut all: Vec<Fp8Options> = Vec::new();
        for c in fp8::fits(&gpu, dims.5) {
            for variant in fp8::variants(&gpu) {
                if variant == attn_kernels::Fp8Variant::Hopper {
                    continue; // takes its tiles below
                }
                all.push(Fp8Options {
                    splits: None,
                    schedule: Default::default(),
                    hopper: None,
                    config: Some(c),
                    variant: Some(variant),
                });
            }
        }
        if gpu.fp8_variant_available(attn_kernels::Fp8Variant::Hopper) {
            for &t in attn_kernels::catalog::hopper_fp8_tiles(dims.5) {
                all.push(Fp8Options {
                    splits: None,
                    schedule: Default::default(),
                    hopper: Some(t),
                    config: None,
                    variant: Some(attn_kernels::Fp8Variant::Hopper),
                });
            }
        }
        for opts in all {
            if let Err(e) = fp8::check(&gpu, &p, &x, Dtype::Bf16, &opts) {
                failures.push(e);
            }
        }
    }
    drop(gpu);
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// Every head-dim bucket at a padded head dim (D below the bucket: the zero-filled columns),
/// in both layouts, with tails and both causal alignments and a split-KV launch: the family's
/// new addressing under compute-sanitizer.
#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitize_head_dims_and_layouts() {
    use attn_kernels::{ForwardOptions, Layout};
    use attn_ref::reference;
    use half::f16;
    let gpu = FlashAttention::new(0).expect("a CUDA device");
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let mut failures = Vec::new();
    for d in [24, 40, 88, 120, 152, 184, 216, 248] {
        for layout in [Layout::Bhsd, Layout::Bshd] {
            for (sq, sk, causal, splits) in [
                (33, 90, Causal::BottomRight, Some(1)),
                (70, 70, Causal::None, Some(1)),
                (20, 700, Causal::None, Some(3)),
            ] {
                let p = crate::problem((2, 4, 2, sq, sk, d), causal);
                let s = p.shape();
                let q: Vec<f16> = crate::randn(&mut rng, s.q_elems());
                let k: Vec<f16> = crate::randn(&mut rng, s.kv_elems());
                let v: Vec<f16> = crate::randn(&mut rng, s.kv_elems());
                let opts = ForwardOptions {
                    config: Some(attn_kernels::KernelConfig::by_name("32_64_2_s2").unwrap()),
                    splits,
                    ..Default::default()
                };
                match crate::family::run_layout(&gpu, &p, (&q, &k, &v), layout, &opts) {
                    Ok((o, _)) => {
                        let worst =
                            max_abs_error(&o, &reference::forward(&p, &q, &k, &v).unwrap().o);
                        if worst.is_nan() || worst >= 1e-2 {
                            failures.push(format!("D={d} {layout} {causal}: max err {worst}"));
                        }
                    }
                    Err(e) => failures.push(format!("D={d} {layout}: {e}")),
                }
            }
        }
    }
    drop(gpu);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The Hopper engine (TMA, mbarriers, warp-specialized wgmma) under compute-sanitizer: every
/// tile of a few buckets at padded and exact head dims, tails, GQA, both causal alignments,
/// both layouts. On other GPUs the engine is refused and this checks the mma.sync path.
#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitize_hopper_engine() {
    use attn_kernels::{hopper_configs_for, Engine, ForwardOptions, Layout};
    use attn_ref::reference;
    use half::bf16;
    let gpu = FlashAttention::new(0).expect("a CUDA device");
    let hopper = gpu.compute_capability() == (9, 0);
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let mut failures = Vec::new();
    for d in [24, 64, 120, 128, 192, 256] {
        let tiles: Vec<Option<attn_kernels::HopperTile>> = if hopper {
            // Dense launches: the tiles with dense entries.
            let bucket = attn_kernels::bucket_for(d).expect("a catalog head dim");
            hopper_configs_for(d)
                .into_iter()
                .filter(|t| attn_kernels::catalog::HopperVariant::Dense.is_built(bucket, t))
                .map(Some)
                .collect()
        } else {
            vec![None]
        };
        for tile in tiles {
            for (dims, causal, layout) in [
                ((1, 2, 1, 37, 70, d), Causal::BottomRight, Layout::Bshd),
                ((2, 2, 2, 129, 129, d), Causal::None, Layout::Bhsd),
                ((1, 2, 2, 70, 37, d), Causal::TopLeft, Layout::Bhsd),
            ] {
                let p = crate::problem(dims, causal);
                let s = p.shape();
                let q: Vec<bf16> = crate::randn(&mut rng, s.q_elems());
                let k: Vec<bf16> = crate::randn(&mut rng, s.kv_elems());
                let v: Vec<bf16> = crate::randn(&mut rng, s.kv_elems());
                let opts = ForwardOptions {
                    engine: if hopper {
                        Engine::Hopper(tile)
                    } else {
                        Engine::Auto
                    },
                    ..Default::default()
                };
                match crate::family::run_layout(&gpu, &p, (&q, &k, &v), layout, &opts) {
                    Ok((o, _)) => {
                        let worst =
                            max_abs_error(&o, &reference::forward(&p, &q, &k, &v).unwrap().o);
                        if worst.is_nan() || worst >= 5e-2 {
                            failures
                                .push(format!("D={d} {tile:?} {layout} {causal}: max err {worst}"));
                        }
                    }
                    Err(e) => failures.push(format!("D={d} {tile:?} {layout}: {e}")),
                }
            }
        }
    }
    drop(gpu);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Largest |out − ref| (NaN if any output is NaN): the sanitize tests' sanity bound, not the
/// tolerance rule (the correctness tests apply that on the same kernels).
fn max_abs_error<T: attn_kernels::StorageType>(out: &[T], reference: &[f64]) -> f64 {
    out.iter()
        .zip(reference)
        .map(|(a, b)| (a.to_f32() as f64 - b).abs())
        .fold(0f64, |m, x| {
            if x.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(x)
            }
        })
}

/// The feature entries of both engines (window with tails and rows left without a key,
/// softcap, ALiBi, sinks) in both layouts, for compute-sanitizer: the tile ranges a window
/// skips to must stay inside K and V.
#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitize_features_window_small_shapes() {
    use attn_kernels::Layout;
    use attn_ref::{Alibi, Features};
    // Its own handle, dropped at the end, so memcheck's leak check sees the feature
    // buffers and the modules freed.
    let gpu = FlashAttention::new(0).expect("a CUDA device");
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for (dims, causal, window) in [
        ((1, 2, 1, 70, 70, 64), Causal::None, (16, 0)),
        ((1, 2, 1, 33, 90, 128), Causal::BottomRight, (8, 8)),
        ((1, 2, 2, 90, 33, 64), Causal::TopLeft, (-1, 2)),
        ((1, 2, 1, 130, 200, 40), Causal::BottomRight, (0, 0)),
    ] {
        let features = Features {
            window: Some(window),
            softcap: Some(10.0),
            alibi: Some(Alibi::PerHead(crate::features::alibi_slopes(2))),
            sinks: Some(crate::features::sinks(&mut rng, 2)),
        };
        let p = crate::problem(dims, causal)
            .with_features(features)
            .unwrap();
        for dt in DTYPES {
            failures.extend(crate::features::check_dtype(
                &gpu,
                &p,
                "sanitize",
                &mut rng,
                seed,
                dt,
                &[Layout::Bhsd, Layout::Bshd],
            ));
        }
    }
    drop(gpu);
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// The Hopper engine's walking launches under compute-sanitizer: persistent CTAs and the
/// stream-K tail (pieces of the last round's items merged through the ticketed workspace),
/// f16 and FP8, one small shape each, so that racecheck finishes (the schedule tests run too
/// many launches for it). 300 query rows × 3 heads are 9 items of 128 rows; 5 CTAs leave 4
/// tail items of 3 key tiles each (500 keys), which the 5 CTAs share. Only on an H100/H200.
#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitize_hopper_walks_and_stream_k_tails() {
    use attn_kernels::{catalog, Engine, ForwardOptions, Fp8Variant, Layout, TileSchedule};
    use attn_ref::reference;
    use half::f16;
    let gpu = FlashAttention::new(0).expect("a CUDA device");
    if gpu.compute_capability() != (9, 0) {
        return;
    }
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let mut failures = Vec::new();
    let mut runs = 0;
    let schedules = [
        TileSchedule::Persistent(Some(3)),
        TileSchedule::StreamK(Some(5)),
    ];
    let dense = catalog::HopperVariant::Dense;
    let tile = catalog::hopper_tiles(128)
        .iter()
        .copied()
        .find(|t| catalog::hopper_persistent(128, t, false, dense, false))
        .expect("a walking D = 128 tile");
    let p = crate::problem((1, 3, 1, 300, 500, 128), Causal::None);
    let s = p.shape();
    let q: Vec<f16> = crate::randn(&mut rng, s.q_elems());
    let k: Vec<f16> = crate::randn(&mut rng, s.kv_elems());
    let v: Vec<f16> = crate::randn(&mut rng, s.kv_elems());
    let exact = reference::forward(&p, &q, &k, &v).unwrap().o;
    for schedule in schedules {
        let opts = ForwardOptions {
            engine: Engine::Hopper(Some(tile)),
            schedule,
            ..Default::default()
        };
        match crate::family::run_layout(&gpu, &p, (&q, &k, &v), Layout::Bhsd, &opts) {
            Ok((o, _)) => {
                let worst = max_abs_error(&o, &exact);
                if worst.is_nan() || worst >= 5e-2 {
                    failures.push(format!("{} {schedule:?}: max err {worst}", tile.name()));
                }
            }
            Err(e) => failures.push(format!("{} {schedule:?}: {e}", tile.name())),
        }
        runs += 1;
    }
    let fp8_tile = catalog::hopper_fp8_tiles(128)
        .iter()
        .copied()
        .find(|t| catalog::hopper_persistent(128, t, false, dense, true))
        .expect("a walking FP8 D = 128 tile");
    let p = fp8::fp8_problem((1, 3, 1, 300, 500, 128), Causal::None);
    let x = fp8::inputs(&p, &mut rng, false);
    for schedule in schedules {
        let opts = Fp8Options {
            splits: None,
            variant: Some(Fp8Variant::Hopper),
            hopper: Some(fp8_tile),
            config: None,
            schedule,
        };
        if let Err(e) = fp8::check(&gpu, &p, &x, Dtype::F16, &opts) {
            failures.push(format!("FP8 {} {schedule:?}: {e}", fp8_tile.name()));
        }
        runs += 1;
    }
    drop(gpu);
    assert_eq!(runs, 4);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
