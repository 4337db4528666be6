//! The Hopper engine's persistent launches (`TileSchedule`, kernels/fwd_hopper_kernel.cuh
//! `HopperSched`): a few CTAs, each walking many work items, must give what one CTA per item
//! gives, bit for bit (the items' arithmetic is the same), and pass the reference. The small
//! CTA counts make every CTA run many items, so the K/V ring's phases and the Q tile's
//! full/empty barriers carry across items with odd and even key-tile counts. The stream-K
//! tail (`TileSchedule::StreamK`) shares the last partial round's items by key tiles: its
//! pieces must merge to what the reference gives, the same bits every run.

use attn_kernels::{
    catalog, Dtype, Engine, FlashAttention, Forward, ForwardOptions, Fp8Options, Fp8Variant,
    KernelError, TileSchedule,
};
use attn_ref::Causal;
use half::{bf16, f16};
use rand::{rngs::StdRng, SeedableRng};

use crate::{case, check_case, fresh_seed, gpu, problem, randn, run_gpu, Dims, DTYPES};

fn is_hopper(gpu: &FlashAttention) -> bool {
    gpu.compute_capability() == (9, 0)
}

/// The D = 128 tiles whose dense non-causal entries walk items.
fn walking_tiles() -> Vec<attn_kernels::HopperTile> {
    catalog::hopper_tiles(128)
        .iter()
        .copied()
        .filter(|t| catalog::hopper_persistent(128, t, false, catalog::HopperVariant::Dense, false))
        .collect()
}

/// Shapes: odd and even key-tile counts (700 keys = 4 tiles of 176, 500 = 3), a tail block,
/// GQA, a head dim below the bucket, a single key tile.
const SHAPES: [Dims; 4] = [
    (2, 4, 2, 700, 500, 128),
    (1, 6, 3, 300, 700, 128),
    (3, 2, 2, 129, 100, 120),
    (1, 3, 1, 1000, 64, 128),
];

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_persistent_walks_match_one_cta_per_item() {
    let gpu = gpu();
    if !is_hopper(&gpu) {
        return;
    }
    let tiles = walking_tiles();
    assert!(!tiles.is_empty(), "no D = 128 tile walks items");
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut runs = 0;
    for tile in &tiles {
        for dims in SHAPES {
            for dt in DTYPES {
                for ctas in [1, 3, 7, 132] {
                    // Against the reference and the emulation.
                    let mut c = case(dims, Causal::None, dt);
                    c.engine = Engine::Hopper(Some(*tile));
                    c.schedule = TileSchedule::Persistent(Some(ctas));
                    check_case(&gpu, &c).unwrap_or_else(|e| {
                        panic!("{} {ctas} CTAs {dims:?} {dt:?}: {e}", tile.name())
                    });
                    runs += 1;
                }
                // Bitwise against one CTA per item, on the same inputs.
                let p = problem(dims, Causal::None);
                let opts = |schedule| ForwardOptions {
                    engine: Engine::Hopper(Some(*tile)),
                    schedule,
                    ..Default::default()
                };
                let (grid, walk) = (TileSchedule::Grid, TileSchedule::Persistent(Some(5)));
                let same = match dt {
                    Dtype::F16 => same_bits::<f16>(&gpu, &p, &mut rng, &opts, grid, walk),
                    Dtype::Bf16 => same_bits::<bf16>(&gpu, &p, &mut rng, &opts, grid, walk),
                };
                assert!(
                    same,
                    "{} {dims:?} {dt:?} seed {seed}: persistent != grid",
                    tile.name()
                );
            }
        }
    }
    assert_eq!(runs, tiles.len() * SHAPES.len() * 2 * 4);
}

/// CTA counts that leave a partial round on SHAPES (48, 18, 12 and 24 items): 5, 7 and 11, where
/// the first shape's 4 tail items of 3 key tiles (176 keys) are each shared by about three
/// CTAs; and 47, whose one tail item has fewer key tiles than CTAs, so it stays whole.
const STREAM_K_CTAS: [usize; 4] = [5, 7, 11, 47];

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_stream_k_tails_match_the_reference_and_repeat_bitwise() {
    let gpu = gpu();
    if !is_hopper(&gpu) {
        return;
    }
    let tiles = walking_tiles();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut shared = 0;
    for tile in &tiles {
        for dims in SHAPES {
            for dt in DTYPES {
                for ctas in STREAM_K_CTAS {
                    let mut c = case(dims, Causal::None, dt);
                    c.engine = Engine::Hopper(Some(*tile));
                    c.schedule = TileSchedule::StreamK(Some(ctas));
                    check_case(&gpu, &c).unwrap_or_else(|e| {
                        panic!("{} stream-K {ctas} CTAs {dims:?} {dt:?}: {e}", tile.name())
                    });
                    let items = dims.3.div_ceil(tile.block_m()) * dims.1 * dims.0;
                    let tail_tiles = items % ctas * dims.4.div_ceil(tile.block_n);
                    shared += usize::from(items > ctas && tail_tiles >= ctas);
                }
                // Twice on the same inputs: the same bits (the pieces merge in key order
                // whichever CTA finishes last, and the tickets are reset for the next launch).
                let p = problem(dims, Causal::None);
                let opts = |schedule| ForwardOptions {
                    engine: Engine::Hopper(Some(*tile)),
                    schedule,
                    ..Default::default()
                };
                let s = TileSchedule::StreamK(Some(7));
                let same = match dt {
                    Dtype::F16 => same_bits::<f16>(&gpu, &p, &mut rng, &opts, s, s),
                    Dtype::Bf16 => same_bits::<bf16>(&gpu, &p, &mut rng, &opts, s, s),
                };
                assert!(
                    same,
                    "{} {dims:?} {dt:?} seed {seed}: two stream-K runs differ",
                    tile.name()
                );
            }
        }
    }
    assert!(
        shared >= tiles.len() * 8,
        "only {shared} launches shared a tail"
    );
}

/// Two schedules on the same fresh inputs: equal bit for bit.
fn same_bits<T: attn_kernels::StorageType>(
    gpu: &FlashAttention,
    p: &attn_ref::Problem,
    rng: &mut StdRng,
    opts: &dyn Fn(TileSchedule) -> ForwardOptions,
    first: TileSchedule,
    second: TileSchedule,
) -> bool {
    let s = p.shape();
    let (q, k, v) = (
        randn::<T>(rng, s.q_elems()),
        randn::<T>(rng, s.kv_elems()),
        randn::<T>(rng, s.kv_elems()),
    );
    let a = run_gpu(gpu, p, &q, &k, &v, &opts(first));
    let b = run_gpu(gpu, p, &q, &k, &v, &opts(second));
    bits_equal(&a, &b)
}

fn bits_equal<T: attn_kernels::StorageType>(
    a: &(Vec<T>, Vec<f32>),
    b: &(Vec<T>, Vec<f32>),
) -> bool {
    let widen = |x: &[T]| x.iter().map(|v| v.to_f32()).collect::<Vec<_>>();
    f32_bits_equal(&widen(&a.0), &widen(&b.0)) && f32_bits_equal(&a.1, &b.1)
}

/// Equal lengths and equal bits (NaN payloads included).
fn f32_bits_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// FP8 on the Hopper engine: the walking tiles (D ≤ 128, non-causal) give the grid's bits.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_fp8_persistent_walks_match_one_cta_per_item() {
    let gpu = gpu();
    if !is_hopper(&gpu) {
        return;
    }
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut runs = 0;
    for d in [64, 128] {
        for tile in catalog::hopper_fp8_tiles(d) {
            if !catalog::hopper_persistent(d, tile, false, catalog::HopperVariant::Dense, true) {
                continue;
            }
            let p = crate::fp8::fp8_problem((2, 4, 2, 600, 700, d), Causal::None);
            let x = crate::fp8::inputs(&p, &mut rng, false);
            let z = crate::fp8::quantize_all(&p, &x);
            let opts = |schedule| Fp8Options {
                splits: None,
                variant: Some(Fp8Variant::Hopper),
                hopper: Some(*tile),
                config: None,
                schedule,
            };
            let grid = crate::fp8::run(&gpu, &p, &z, Dtype::F16, &opts(TileSchedule::Grid));
            for ctas in [1, 3, 132] {
                let walk = crate::fp8::run(
                    &gpu,
                    &p,
                    &z,
                    Dtype::F16,
                    &opts(TileSchedule::Persistent(Some(ctas))),
                );
                assert!(
                    f32_bits_equal(&grid.0, &walk.0) && f32_bits_equal(&grid.1, &walk.1),
                    "{} D {d}, {ctas} CTAs, seed {seed}: persistent != grid",
                    tile.name()
                );
                runs += 1;
            }
            // The stream-K tail (40 items of 128 rows: 7 and 11 CTAs leave 5 and 7 over): the
            // FP8 checks, and the same bits twice.
            for ctas in [7, 11] {
                let s = opts(TileSchedule::StreamK(Some(ctas)));
                crate::fp8::check(&gpu, &p, &x, Dtype::F16, &s).unwrap_or_else(|e| {
                    panic!(
                        "{} D {d} stream-K {ctas} CTAs seed {seed}: {e}",
                        tile.name()
                    )
                });
                let a = crate::fp8::run(&gpu, &p, &z, Dtype::F16, &s);
                let b = crate::fp8::run(&gpu, &p, &z, Dtype::F16, &s);
                assert!(
                    f32_bits_equal(&a.0, &b.0) && f32_bits_equal(&a.1, &b.1),
                    "{} D {d} stream-K {ctas} CTAs seed {seed}: two runs differ",
                    tile.name()
                );
            }
            // And the grid run itself passes the FP8 checks.
            crate::fp8::check(
                &gpu,
                &p,
                &x,
                Dtype::F16,
                &opts(TileSchedule::Persistent(Some(3))),
            )
            .unwrap_or_else(|e| panic!("{} D {d} seed {seed}: {e}", tile.name()));
        }
    }
    assert!(runs >= 3, "only {runs} FP8 runs walked items");
}

/// A persistent launch of an entry that runs one item per CTA is refused with a typed error,
/// and nothing is written.
#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_persistent_refused_where_entries_do_not_walk() {
    let gpu = gpu();
    if !is_hopper(&gpu) {
        return;
    }
    let stream = gpu.stream();
    for (d, causal) in [(64, Causal::None), (128, Causal::BottomRight)] {
        let p = problem((1, 2, 2, 256, 256, d), causal);
        let s = p.shape();
        let q = stream.clone_htod(&vec![f16::ONE; s.q_elems()]).unwrap();
        let k = stream.clone_htod(&vec![f16::ONE; s.kv_elems()]).unwrap();
        let v = stream.clone_htod(&vec![f16::ONE; s.kv_elems()]).unwrap();
        let mut o = stream.clone_htod(&vec![f16::NAN; s.o_elems()]).unwrap();
        let opts = ForwardOptions {
            engine: Engine::Hopper(None),
            schedule: TileSchedule::Persistent(None),
            ..Default::default()
        };
        let err = gpu
            .forward(Forward::bhsd(&p, &q, &k, &v, &mut o, None).with_options(opts))
            .expect_err("these entries run one item per CTA");
        assert!(
            matches!(&err, KernelError::EngineUnavailable(m) if m.contains("one work item per CTA")),
            "D {d} {causal:?}: {err}"
        );
        let after = stream.clone_dtoh(&o).unwrap();
        assert!(
            after.iter().all(|x| x.is_nan()),
            "D {d} {causal:?}: O was written"
        );
    }
}
