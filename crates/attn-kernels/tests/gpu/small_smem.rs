//! The parts with 99 KiB of shared memory per block (sm_86, sm_87, sm_89), which run the
//! sm_80 cubins: a launcher limited to that much (`with_shared_memory_limit`) chooses what
//! they would, here on whatever GPU runs the suite. The backward's 99 KiB tile is tested in
//! `backward::correctness_backward_99_kib_tile`; the FP8 forward keeps sm_89 cubins of its own
//! (FP8 `mma.sync`), and its default under the limit is checked here too.

use attn_kernels::{catalog::SM8X_SMALL_SMEM, Dtype, FlashAttention, ForwardOptions};
use attn_ref::{Causal, Features};
use half::{bf16, f16};
use rand::{rngs::StdRng, SeedableRng};

use super::{features::run_checked, fresh_seed, gpu, problem, DTYPES};

/// A launcher on the suite's device and stream, limited to 99 KiB per block.
pub(super) fn small_launcher() -> FlashAttention {
    let full = gpu();
    FlashAttention::on_stream(full.cache().clone(), full.stream().clone())
        .with_shared_memory_limit(SM8X_SMALL_SMEM)
}

/// Every head-dim bucket's forward (prefill, causal, the features' entry) and decode under a
/// 99 KiB limit, against the f64 reference: each launch must fit (the launcher refuses one
/// that does not) and be right.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_small_smem_forward_and_decode() {
    let small = small_launcher();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut failures, mut runs) = (Vec::new(), 0);
    for d in [32, 64, 96, 128, 160, 192, 224, 256] {
        let window_softcap = Features {
            window: Some((96, 0)),
            softcap: Some(20.0),
            ..Features::default()
        };
        let cases = [
            ("prefill", problem((2, 4, 2, 200, 333, d), Causal::None)),
            (
                "causal",
                problem((1, 4, 4, 256, 256, d), Causal::BottomRight),
            ),
            (
                "window + softcap",
                problem((1, 4, 2, 190, 300, d), Causal::TopLeft)
                    .with_features(window_softcap)
                    .unwrap(),
            ),
            ("decode", problem((2, 8, 2, 1, 1000, d), Causal::None)),
        ];
        for (name, p) in &cases {
            for dtype in DTYPES {
                let opts = ForwardOptions::default();
                let run = match dtype {
                    Dtype::F16 => run_checked::<f16>(&small, p, &mut rng, &opts, dtype),
                    Dtype::Bf16 => run_checked::<bf16>(&small, p, &mut rng, &opts, dtype),
                };
                runs += 1;
                let tag = format!("D = {d}, {name}, {dtype:?}");
                match run {
                    Err(e) => failures.push(format!("{tag}: {e}")),
                    Ok((kernel, _, Err(e))) => failures.push(format!("{tag} ({kernel}): {e}")),
                    Ok((kernel, _, Ok(()))) if kernel.starts_with("attn_fwdh") => {
                        failures.push(format!("{tag}: ran the Hopper kernel {kernel}"))
                    }
                    Ok(_) => {}
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "seed {seed}: {} of {runs} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The FP8 forward's default under a 99 KiB limit: not the Hopper engine (its tiles need
/// more), the variant and config an sm_89 part would take; and sm_86's default, `cvt`, with
/// its default config. Against the reference and the rounding model, at every FP8 head dim.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_small_smem_fp8_default() {
    use super::fp8::{check, fp8_problem, inputs};
    use attn_kernels::{Fp8Options, Fp8Variant};
    let small = small_launcher();
    let variant = small.fp8_default_variant();
    // The Hopper tiles need over 99 KiB; wgmma has no D = 256.
    if small.fp8_variant_available(Fp8Variant::Fp8) {
        assert_eq!(variant, Fp8Variant::Fp8);
    }
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for d in attn_kernels::catalog::FP8_HEAD_DIMS {
        for (dims, causal) in [
            ((2, 4, 2, 200, 333, d), Causal::None),
            ((1, 4, 4, 256, 256, d), Causal::BottomRight),
        ] {
            let p = fp8_problem(dims, causal);
            let x = inputs(&p, &mut rng, false);
            let cvt = Fp8Options {
                variant: Some(Fp8Variant::Cvt),
                ..Default::default()
            };
            for (name, opts) in [(variant, Fp8Options::default()), (Fp8Variant::Cvt, cvt)] {
                for out in DTYPES {
                    if let Err(e) = check(&small, &p, &x, out, &opts) {
                        failures.push(format!("{name} D = {d} {causal:?} {out:?}: {e}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}
