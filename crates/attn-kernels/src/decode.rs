//! The decode kernel's launch plan (kernels/decode_kernel.cuh): which launches it takes,
//! its row bucket, its split count and grid. Pure functions, tested without a device.
//!
//! A decode step is 1–8 query rows per (batch, KV head) — one token, or the G query heads of
//! a KV head packed as rows (FlashAttention-3's PackGQA, done by the launcher) — against a long
//! cache: a streaming problem the mma.sync tiles (16+ rows per warp) fit badly. The decode
//! kernel runs both GEMMs on tensor cores with the rows as the MMA's N = 8 at head-dim
//! buckets 32/64/128 (kernels/decode_tc.cuh), and dot products on the FMA pipe over key
//! groups of lanes at the others; it reads f16/bf16 or E4M3 caches, dense, packed or paged,
//! and splits the keys until the chip is full.

use attn_ref::reference::emulate::KeyStates;
use attn_ref::{Causal, Problem};

use crate::{
    catalog::{decode_rows_bucket, decode_smem_bytes, tile, Family, UnitKey},
    config::elem_of,
    hopper::Engine,
    launch::{fwd_params, LaunchPlan},
    seqs::{QueryRows, Sequences},
    Dtype, ForwardOptions, KernelError,
};

/// Most key splits a decode launch takes: enough to put two CTAs on each of 132 SMs from 8
/// (batch, head) blocks; the combine reads every split's partial, so more would cost there.
pub const DECODE_MAX_SPLITS: usize = 32;

/// Fewest keys a decode split reads: below this the ring's prologue (three stages) and the
/// combine are a large share of a split's work.
pub const DECODE_MIN_KEYS_PER_SPLIT: usize = 256;

/// The compile unit holding the decode kernels of (arch, dtype, bucket).
pub(crate) fn decode_unit(arch: crate::catalog::Arch, dtype: Dtype, bucket: usize) -> UnitKey {
    UnitKey {
        family: Family::Decode,
        arch,
        elem: elem_of(dtype),
        head_dim: bucket,
    }
}

/// Why a launch cannot run on the decode kernel, or `None` if it can. `problem` is the one
/// the launcher runs (after GQA packing and dropping a single row's bottom-right mask).
pub(crate) fn decode_refusal(
    problem: &Problem,
    planted: bool,
    seqs: Option<&Sequences<'_>>,
) -> Option<String> {
    let s = problem.shape();
    let f = problem.features();
    if planted {
        return Some("tile dumps and planted bugs run on the mma.sync kernel".into());
    }
    if problem.causal() != Causal::None {
        return Some("a causal mask over several query rows".into());
    }
    if decode_rows_bucket(s.q_len()).is_none() {
        return Some(format!(
            "{} query rows per head (the decode kernel takes up to 8, after GQA packing)",
            s.q_len()
        ));
    }
    // The kernel reads row r's sink and ALiBi slope at h·q_len + r, and takes every row as one
    // position: GQA-packed rows (whose problem carries neither; the launcher binds the
    // original's) or one row per head.
    if f.sinks.is_some() && s.q_len() != 1 {
        return Some("attention sinks over several query rows of one head".into());
    }
    if f.alibi.is_some() && s.q_len() != 1 {
        return Some("ALiBi over several query rows of one head".into());
    }
    if f.window.is_some() && s.q_len() != 1 {
        return Some("a sliding window over several query rows".into());
    }
    if seqs.is_some_and(|q| matches!(q.queries, QueryRows::Packed { .. })) {
        return Some("packed (varlen) queries".into());
    }
    None
}

/// The decode row bucket a launch runs in, `None` for the other kernels. `Engine::Auto`
/// takes every launch the kernel can run (`built`: the unit's cubin is in this build);
/// `Engine::Decode` refuses the others with the reason; the other engines never take it.
pub(crate) fn decode_choice(
    problem: &Problem,
    opts: &ForwardOptions,
    planted: bool,
    seqs: Option<&Sequences<'_>>,
    built: bool,
) -> Result<Option<usize>, KernelError> {
    let refusal = decode_refusal(problem, planted, seqs);
    match opts.engine {
        Engine::Decode => {
            if opts.config.is_some() {
                return Err(KernelError::EngineUnavailable(
                    "the decode kernel has no mma.sync configs; leave ForwardOptions::config unset"
                        .into(),
                ));
            }
            if let Some(why) = refusal {
                return Err(KernelError::EngineUnavailable(format!(
                    "the decode kernel does not run {why}; use Engine::Auto"
                )));
            }
            if !built {
                return Err(KernelError::KernelsNotBuilt);
            }
            Ok(decode_rows_bucket(problem.shape().q_len()))
        }
        Engine::Auto if refusal.is_none() && built && opts.config.is_none() => {
            Ok(decode_rows_bucket(problem.shape().q_len()))
        }
        _ => Ok(None),
    }
}

/// Keys per ring stage of a decode entry (`DecodeConfig::kKeys`).
pub fn decode_keys_per_stage(bucket: usize, kv8: bool) -> usize {
    crate::catalog::decode_keys(bucket, kv8)
}

/// How a decode launch spreads a row's keys over online-softmax states, for attn-ref's
/// emulation (the FA3 rule's `emu` must round P in the kernel's frames). The tensor-core
/// stages (kernels/decode_tc.cuh) give each of their warps (four, or two at D ≥ 192) an
/// equal slice of every ring stage of its split, and each warp rounds P (to f16 for an E4M3
/// cache, to the cache's type otherwise) against its own running max.
pub fn decode_key_states(bucket: usize, kv8: bool, splits: usize) -> KeyStates {
    KeyStates::Split {
        tile: decode_keys_per_stage(bucket, kv8),
        splits: splits.max(1),
        workers: crate::catalog::decode_warps(bucket, kv8),
    }
}

/// CTAs per SM the split heuristic aims for: two. Their ~64 KiB in flight per SM already
/// saturate HBM, and longer splits spend less on the ring's prologue and on the combine: on
/// the H100 (run 34, 1 × 32 heads × 8192 keys) 8 splits (2 per SM) took 52.6 µs against
/// 54.6 at 16 (4 per SM) for f16, and 32.2 against 35.5 µs for the E4M3 cache.
pub const SPLIT_CTAS_PER_SM: usize = 2;

/// Key splits for `ctas` (batch × head) blocks of `kv_len` keys: as many as give
/// two CTAs per SM (⌊2 · SMs / ctas⌋; every entry holds at least two per SM),
/// each reading at least [`DECODE_MIN_KEYS_PER_SPLIT`] keys, at most [`DECODE_MAX_SPLITS`].
pub fn decode_splits(ctas: usize, kv_len: usize, sm_count: usize) -> usize {
    let resident = sm_count.max(1) * SPLIT_CTAS_PER_SM;
    (resident / ctas.max(1))
        .min(kv_len / DECODE_MIN_KEYS_PER_SPLIT)
        .clamp(1, DECODE_MAX_SPLITS)
}

/// The launch plan of a decode entry: grid (splits, heads, batch), 128 threads, the ring's
/// shared memory and the scalars. `splits`: the caller's override (`Some(1)`: never split).
/// `kv_len`: the longest key count a sequence may have (the problem's Sk for dense keys, the
/// paged capacity), which sizes the split heuristic.
pub(crate) fn plan_decode(
    problem: &Problem,
    rows: usize,
    kv8: bool,
    splits: Option<usize>,
    kv_len: usize,
    sm_count: usize,
) -> Result<LaunchPlan, KernelError> {
    crate::launch::check_sizes(problem)?;
    let s = problem.shape();
    let bucket = crate::config::bucket_for(s.head_dim())?;
    let ctas = s.batch() * s.q_heads();
    let n_splits = match splits {
        None => decode_splits(ctas, kv_len, sm_count),
        Some(0) => {
            return Err(
                attn_ref::AttnError::InvalidArgument("splits must be at least 1".into()).into(),
            )
        }
        Some(n) => n.min(DECODE_MAX_SPLITS),
    };
    Ok(LaunchPlan {
        // The config a LaunchInfo reports: rows × keys per stage, its warps, 3 stages.
        config: tile(
            rows,
            decode_keys_per_stage(bucket, kv8),
            crate::catalog::decode_warps(bucket, kv8),
            3,
        ),
        grid: (n_splits as u32, s.q_heads() as u32, s.batch() as u32),
        smem_bytes: decode_smem_bytes(bucket, kv8, rows) as u32,
        params: fwd_params(problem, n_splits as i32),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_ref::AttnShape;

    /// Threads per decode CTA (`DecodeConfig::kThreads`).
    const DECODE_THREADS: usize = 128;

    fn decode_problem(b: usize, hq: usize, hkv: usize, sq: usize, sk: usize) -> Problem {
        Problem::new(
            AttnShape::new(b, hq, hkv, sq, sk, 128).unwrap(),
            Causal::None,
        )
    }

    #[test]
    fn the_catalog_has_every_decode_entry_once() {
        use crate::catalog::{
            decode_entry_name, decode_rows_bucket, unit_source, units, Arch, FWD_HEAD_DIM_BUCKETS,
        };
        let decode_units: Vec<_> = units(&[], &[])
            .into_iter()
            .filter(|u| u.family == Family::Decode)
            .collect();
        // Every arch with decode units of its own (sm_89 runs sm_80's), both storage types,
        // every bucket.
        assert_eq!(decode_units.len(), 2 * 2 * FWD_HEAD_DIM_BUCKETS.len());
        assert!(decode_units.iter().all(|u| u.arch != Arch::Sm89));
        for unit in &decode_units {
            let src = unit_source(unit, false).unwrap();
            assert!(unit_source(unit, true).is_none(), "no debug decode cubins");
            for kv8 in [false, true] {
                for rows in crate::catalog::DECODE_ROWS {
                    let name = decode_entry_name(unit, rows, kv8);
                    assert_eq!(src.matches(&format!("({name},")).count(), 1, "{name}");
                }
            }
        }
        assert_eq!(decode_rows_bucket(0), Some(1));
        assert_eq!(decode_rows_bucket(3), Some(4));
        assert_eq!(decode_rows_bucket(8), Some(8));
        assert_eq!(decode_rows_bucket(9), None);
    }

    #[test]
    fn keys_per_stage_mirror_the_kernel() {
        // ~8 KiB of K per stage, a whole number of keys per lane group.
        assert_eq!(decode_keys_per_stage(128, false), 64);
        assert_eq!(decode_keys_per_stage(128, true), 64);
        assert_eq!(decode_keys_per_stage(32, false), 128);
        // Bucket 96 runs the stage of 128 on padded rows.
        assert_eq!(decode_keys_per_stage(96, false), 64);
        assert_eq!(decode_keys_per_stage(96, true), 64);
        // D ≥ 160: f16/bf16 two warps, a 16-key block each (160 on 192, 224 on 256); E4M3
        // caches (160–224 on 256) four warps, 64 keys.
        for bucket in [160, 192, 224, 256] {
            assert_eq!(decode_keys_per_stage(bucket, false), 32);
            assert_eq!(crate::catalog::decode_warps(bucket, false), 2);
            assert_eq!(decode_keys_per_stage(bucket, true), 64);
            assert_eq!(crate::catalog::decode_warps(bucket, true), 4);
            assert_eq!(crate::catalog::decode_ring_head_dim(bucket, true), 256);
        }
        assert_eq!(crate::catalog::decode_ring_head_dim(160, false), 192);
        assert_eq!(
            decode_smem_bytes(256, false, 8),
            96 * 1024,
            "three 32-key stages of 512-byte K and V rows"
        );
        assert_eq!(
            decode_smem_bytes(192, true, 8),
            96 * 1024,
            "three 64-key stages of 256-byte E4M3 K and V rows"
        );
        for bucket in crate::catalog::FWD_HEAD_DIM_BUCKETS {
            for kv8 in [false, true] {
                let keys = decode_keys_per_stage(bucket, kv8);
                let row =
                    crate::catalog::decode_ring_head_dim(bucket, kv8) * if kv8 { 1 } else { 2 };
                // The ring (3 stages of K and V) is what the smem formula holds.
                assert!(decode_smem_bytes(bucket, kv8, 1) >= 3 * 2 * keys * row);
                assert!(decode_smem_bytes(bucket, kv8, 8) <= crate::catalog::SM8X_SMALL_SMEM);
            }
        }
    }

    #[test]
    fn key_states_follow_the_tensor_core_stage() {
        // 64 keys per stage at D = 128 (16 per warp), 128 at 64, 256 at 32.
        for (bucket, tile) in [(128, 64), (64, 128), (32, 256)] {
            assert_eq!(
                decode_key_states(bucket, true, 5),
                KeyStates::Split {
                    tile,
                    splits: 5,
                    workers: 4
                }
            );
        }
        // f16/bf16 caches: 64 keys per stage at D = 128 and 64, 128 at 32.
        for (bucket, tile) in [(128, 64), (64, 64), (32, 128)] {
            assert_eq!(
                decode_key_states(bucket, false, 5),
                KeyStates::Split {
                    tile,
                    splits: 5,
                    workers: 4
                }
            );
        }
        // Bucket 96: the stage of 128 on padded rows.
        for kv8 in [false, true] {
            assert_eq!(
                decode_key_states(96, kv8, 2),
                KeyStates::Split {
                    tile: 64,
                    splits: 2,
                    workers: 4
                }
            );
        }
        // f16/bf16: two warps at D ≥ 160 (160 and 224 padded), 32-key stages; E4M3 (all on
        // rows of 256): four warps, 64-key stages.
        for bucket in [160, 192, 224, 256] {
            for (kv8, tile, workers) in [(false, 32, 2), (true, 64, 4)] {
                assert_eq!(
                    decode_key_states(bucket, kv8, 3),
                    KeyStates::Split {
                        tile,
                        splits: 3,
                        workers
                    }
                );
            }
        }
    }

    #[test]
    fn splits_fill_one_wave_of_resident_ctas() {
        // 1 × 32 heads × 8192 keys: 32 CTAs, 2 per SM on 132 SMs → 8 splits (256 CTAs).
        assert_eq!(decode_splits(32, 8192, 132), 8);
        // Paged decode, 64 × 8 KV heads: the grid fills the chip alone.
        assert_eq!(decode_splits(512, 4096, 132), 1);
        // Short caches split less: ≥ 256 keys per split.
        assert_eq!(decode_splits(8, 1024, 132), 4);
        assert_eq!(decode_splits(8, 100, 132), 1);
        // Tiny grids stop at the cap.
        assert_eq!(decode_splits(1, 1 << 20, 132), DECODE_MAX_SPLITS);
    }

    #[test]
    fn the_decode_kernel_takes_few_unmasked_rows_of_one_position() {
        let p = decode_problem(2, 8, 8, 4, 4096);
        assert_eq!(decode_refusal(&p, false, None), None);
        assert!(decode_refusal(&p, true, None).is_some());
        assert!(decode_refusal(&decode_problem(2, 8, 8, 9, 4096), false, None).is_some());
        let causal = Problem::new(*p.shape(), Causal::TopLeft);
        assert!(decode_refusal(&causal, false, None).is_some());
        // Sinks join the rows' merge (or split 0's partial), one row per head.
        assert!(decode_refusal(&p.with_sinks(vec![0.1; 8]).unwrap(), false, None).is_some());
        let one = decode_problem(2, 8, 8, 1, 4096);
        assert_eq!(
            decode_refusal(&one.with_sinks(vec![0.1; 8]).unwrap(), false, None),
            None
        );
        // ALiBi: a slope per row, one position (the distances of one row per head).
        let alibi = attn_ref::Alibi::PerHead(vec![0.1; 8]);
        assert!(decode_refusal(&p.with_alibi(alibi.clone()).unwrap(), false, None).is_some());
        assert_eq!(
            decode_refusal(&one.with_alibi(alibi).unwrap(), false, None),
            None
        );
        // Softcap is a runtime feature of the kernel; a window only for one row.
        assert_eq!(
            decode_refusal(&p.with_softcap(30.0).unwrap(), false, None),
            None
        );
        assert!(decode_refusal(&p.with_window(64, 0).unwrap(), false, None).is_some());
        let one = decode_problem(2, 8, 8, 1, 4096);
        assert_eq!(
            decode_refusal(&one.with_window(64, 0).unwrap(), false, None),
            None
        );
    }

    #[test]
    fn engines_choose_or_refuse_the_decode_kernel() {
        let p = decode_problem(1, 32, 32, 1, 8192);
        let auto = ForwardOptions::default();
        assert_eq!(
            decode_choice(&p, &auto, false, None, true).unwrap(),
            Some(1)
        );
        // A filtered build without the unit: Auto falls back, Decode says so.
        assert_eq!(decode_choice(&p, &auto, false, None, false).unwrap(), None);
        let forced = ForwardOptions {
            engine: Engine::Decode,
            ..ForwardOptions::default()
        };
        assert!(matches!(
            decode_choice(&p, &forced, false, None, false),
            Err(KernelError::KernelsNotBuilt)
        ));
        let mma = ForwardOptions {
            engine: Engine::MmaSync,
            ..ForwardOptions::default()
        };
        assert_eq!(decode_choice(&p, &mma, false, None, true).unwrap(), None);
        // Rows round up to the bucket; too many rows: Auto passes, Decode refuses.
        let three = decode_problem(1, 8, 8, 3, 8192);
        assert_eq!(
            decode_choice(&three, &auto, false, None, true).unwrap(),
            Some(4)
        );
        let wide = decode_problem(1, 8, 8, 16, 8192);
        assert_eq!(
            decode_choice(&wide, &auto, false, None, true).unwrap(),
            None
        );
        assert!(matches!(
            decode_choice(&wide, &forced, false, None, true),
            Err(KernelError::EngineUnavailable(_))
        ));
    }

    #[test]
    fn plans_have_one_cta_per_split_head_and_batch() {
        let p = decode_problem(2, 8, 8, 4, 4096);
        let plan = plan_decode(&p, 4, false, None, 4096, 132).unwrap();
        let splits = decode_splits(16, 4096, 132);
        assert_eq!(plan.grid, (splits as u32, 8, 2));
        assert_eq!(plan.params.n_splits as usize, splits);
        assert_eq!(plan.config.threads(), DECODE_THREADS);
        assert_eq!(plan.smem_bytes as usize, decode_smem_bytes(128, false, 4));
        assert_eq!(
            plan_decode(&p, 4, true, Some(1), 4096, 132).unwrap().grid.0,
            1
        );
        assert_eq!(
            plan_decode(&p, 4, true, Some(99), 4096, 132)
                .unwrap()
                .grid
                .0 as usize,
            DECODE_MAX_SPLITS
        );
        assert!(plan_decode(&p, 4, true, Some(0), 4096, 132).is_err());
    }
}
