//! The Hopper engine (TMA + warp-specialized wgmma): every tile of every bucket on every head
//! dim against the reference, that `Engine::Auto` runs it on sm_90 (so the FA matrix in
//! `family` checks it), and what it refuses. On other GPUs the engine must refuse with a
//! typed error, which is what runs there.

use attn_kernels::{hopper_configs_for, Engine, Forward, ForwardOptions, KernelError, Layout};
use attn_ref::Causal;
use half::f16;

use crate::{case, check_case, gpu, problem, DTYPES};

fn is_hopper() -> bool {
    gpu().compute_capability() == (9, 0)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_hopper_every_tile_every_head_dim() {
    if !is_hopper() {
        return refuses_off_hopper();
    }
    let gpu = gpu();
    let mut failures = Vec::new();
    let mut runs = 0;
    for d in (8..=256).step_by(8) {
        let tiles = hopper_configs_for(d);
        assert!(!tiles.is_empty(), "D = {d} has no Hopper tile");
        // Dense launches: every tile with dense entries (D = 256's paged tile has none; the
        // paged tests of seqs.rs run it).
        let bucket = attn_kernels::bucket_for(d).expect("a catalog head dim");
        let dense = attn_kernels::catalog::HopperVariant::Dense;
        for tile in tiles.into_iter().filter(|t| dense.is_built(bucket, t)) {
            for (dims, causal, dt) in [
                ((1, 4, 2, 77, 200, d), Causal::BottomRight, DTYPES[0]),
                ((1, 4, 2, 77, 200, d), Causal::None, DTYPES[1]),
                ((2, 3, 1, 300, 129, d), Causal::TopLeft, DTYPES[0]),
                ((1, 2, 2, 129, 700, d), Causal::None, DTYPES[0]),
            ] {
                let mut c = case(dims, causal, dt);
                c.engine = Engine::Hopper(Some(tile));
                runs += 1;
                if let Err(e) = check_case(&gpu, &c) {
                    failures.push(format!("{}: {e}", tile.name()));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // 32 head dims, every tile of each one's bucket (one to three: the tiles a launch can
    // select, catalog::hopper_tiles), 4 shapes each.
    assert!(runs >= 32 * 4, "only {runs} runs");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_hopper_long_rows_and_gqa() {
    if !is_hopper() {
        return refuses_off_hopper();
    }
    let mut cases = Vec::new();
    for dt in DTYPES {
        for d in [64, 128, 256] {
            for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
                let mut c = case((2, 8, 2, 1000, 2500, d), causal, dt);
                c.engine = Engine::Hopper(None);
                cases.push(c);
            }
        }
    }
    crate::run_all(&cases);
}

/// Split-KV on the Hopper engine for dense launches without features (they run in the
/// sequence and feature entries): a few query blocks over long keys, pinned to 3 splits and
/// unpinned (the heuristic's), and 16 rows under Auto, every causal mode, GQA, D 64 / 128 /
/// 256, against the reference.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_hopper_dense_split() {
    if !is_hopper() {
        return refuses_off_hopper();
    }
    let mut cases = Vec::new();
    for dt in DTYPES {
        for d in [64, 128, 256] {
            for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
                for splits in [Some(3), None] {
                    let mut c = case((1, 8, 2, 200, 3000, d), causal, dt);
                    c.engine = Engine::Hopper(None);
                    c.splits = splits;
                    cases.push(c);
                }
                // 16 rows: causal ones split on the Hopper engine under Auto.
                cases.push(case((1, 8, 2, 16, 3000, d), causal, dt));
            }
        }
    }
    crate::run_all(&cases);
}

/// On sm_90 the default options run the Hopper kernel for prefill shapes, split the keys of
/// a few query blocks over a long cache there, and run decode shapes on the decode kernel.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_auto_engine_choice() {
    let gpu = gpu();
    let run_masked = |dims, causal| {
        let p = problem(dims, causal);
        let s = p.shape();
        let q = vec![f16::from_f32(0.5); s.q_elems()];
        let kv = vec![f16::from_f32(0.25); s.kv_elems()];
        gpu.forward_host_layout(&p, &q, &kv, &kv, Layout::Bhsd, &ForwardOptions::default())
            .unwrap()
            .launch
    };
    let run = |dims| run_masked(dims, Causal::None);
    let prefill = run((2, 16, 16, 2048, 2048, 128));
    let decode = run((1, 32, 8, 1, 8192, 128));
    if is_hopper() {
        assert!(
            prefill.kernel.starts_with("attn_fwdh_"),
            "{}",
            prefill.kernel
        );
        // 128 new tokens over 32 heads against 16384 keys: 32 CTAs unsplit.
        let chunk = run((1, 32, 8, 128, 16384, 128));
        assert!(
            chunk.kernel.starts_with("attn_fwdh_") && chunk.splits == 4,
            "{chunk:?}"
        );
        // 16 causal rows (a speculative verify step) split there too; unmasked, they stay
        // on the mma.sync split entries.
        let verify = run_masked((1, 32, 8, 16, 16384, 128), Causal::BottomRight);
        assert!(
            verify.kernel.starts_with("attn_fwdh_") && verify.splits == 4,
            "{verify:?}"
        );
        let unmasked = run((1, 32, 8, 16, 16384, 128));
        assert!(
            unmasked.kernel.starts_with("attn_fwd_") && unmasked.splits > 1,
            "{unmasked:?}"
        );
    } else {
        assert!(
            prefill.kernel.starts_with("attn_fwd_"),
            "{}",
            prefill.kernel
        );
    }
    // Decode runs on the decode kernel (every arch).
    assert!(decode.kernel.starts_with("attn_dec_"), "{}", decode.kernel);
    assert!(decode.splits > 1, "decode should split: {decode:?}");
    // GQA decode packs the 4 query heads of each KV head into the rows of one CTA.
    assert_eq!(decode.grid.1, 8, "{decode:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_hopper_engine_refusals() {
    if !is_hopper() {
        return refuses_off_hopper();
    }
    let gpu = gpu();
    let p = problem((1, 2, 2, 64, 64, 64), Causal::None);
    let s = p.shape();
    let x = vec![f16::from_f32(1.0); s.q_elems()];
    // Split-KV in a tile with dense entries only (the sequence and feature entries split).
    let dense_only = hopper_configs_for(64)
        .into_iter()
        .find(|t| {
            use attn_kernels::catalog::HopperVariant;
            !HopperVariant::Seqs.is_built(64, t) && !HopperVariant::Features.is_built(64, t)
        })
        .expect("a D = 64 tile with dense entries only");
    for opts in [
        ForwardOptions {
            engine: Engine::Hopper(Some(dense_only)),
            splits: Some(2),
            ..Default::default()
        },
        ForwardOptions {
            engine: Engine::Hopper(None),
            config: attn_kernels::configs_for(64).first().copied(),
            ..Default::default()
        },
    ] {
        let err = gpu
            .forward_host_layout(&p, &x, &x, &x, Layout::Bhsd, &opts)
            .unwrap_err();
        assert!(matches!(err, KernelError::EngineUnavailable(_)), "{err}");
    }
    // A tile of another bucket is an unknown config, named with the valid ones.
    let wide = hopper_configs_for(256)[0];
    let err = gpu
        .forward_host_layout(
            &p,
            &x,
            &x,
            &x,
            Layout::Bhsd,
            &ForwardOptions {
                engine: Engine::Hopper(Some(wide)),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(err, KernelError::UnknownConfig { .. }), "{err}");
}

/// Off Hopper, asking for the engine is a typed error and nothing runs.
fn refuses_off_hopper() {
    let gpu = gpu();
    let p = problem((1, 2, 2, 64, 64, 64), Causal::None);
    let s = p.shape();
    let x = vec![f16::from_f32(1.0); s.q_elems()];
    let q = gpu.stream().clone_htod(&x).unwrap();
    let mut o = gpu.stream().clone_htod(&x).unwrap();
    let err = gpu
        .forward(
            Forward::bhsd(&p, &q, &q, &q, &mut o, None).with_options(ForwardOptions {
                engine: Engine::Hopper(None),
                ..Default::default()
            }),
        )
        .unwrap_err();
    assert!(matches!(err, KernelError::EngineUnavailable(_)), "{err}");
}
