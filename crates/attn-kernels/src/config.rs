//! Kernel configs over the catalog (`src/catalog.rs`): head-dim buckets, config lookup by
//! name, split-KV eligibility, and the default chooser.

pub use crate::catalog::{Arch, Family, FwdMode, Tile, UnitKey};
use crate::{catalog, KernelError};

/// Storage type of Q, K, V and O: the workspace's one dtype enum, from attn-ref.
pub use attn_ref::Dtype;

/// The catalog's storage type of a dtype.
pub fn elem_of(dtype: Dtype) -> catalog::Elem {
    match dtype {
        Dtype::F16 => catalog::Elem::F16,
        Dtype::Bf16 => catalog::Elem::Bf16,
    }
}

/// The rounding model of the f16/bf16 forward: inputs, P and O rounded to `dtype`, the
/// online softmax over key tiles (attn-ref's emulation; the FA3 rule's `emu`).
pub fn fwd_rounding_model(dtype: Dtype) -> attn_ref::reference::emulate::EmuSpec {
    attn_ref::reference::emulate::EmuSpec::storage(dtype)
}

/// The head dims the f16/bf16 forward takes, as words for error messages.
pub const SUPPORTED_HEAD_DIMS_TEXT: &str =
    "every D with D % 8 == 0 and 8 <= D <= 256 (kernels for 32, 64, 96, 128, 160, 192, 224, 256; others run the next one, padded)";

/// One tile configuration of the forward kernels (the catalog's [`Tile`]).
pub type KernelConfig = Tile;

pub(crate) const fn cfg(block_m: usize, block_n: usize, warps: usize, stages: usize) -> Tile {
    catalog::tile(block_m, block_n, warps, stages)
}

/// The head-dim bucket whose kernels run `head_dim`, or the typed error naming the set.
pub fn bucket_for(head_dim: usize) -> Result<usize, KernelError> {
    catalog::fwd_bucket(head_dim).ok_or(KernelError::UnsupportedHeadDim {
        head_dim,
        supported: SUPPORTED_HEAD_DIMS_TEXT,
    })
}

/// Most key splits one query block is divided into.
pub const MAX_SPLITS: usize = 16;

/// Fewest key tiles one split processes. Measured (H200, 2026-11-21): splitting the 8 key
/// tiles of (1,8,512,64) four ways made it slower (10.0 → 14.9 µs): each split CTA still pays
/// the prologue latency, and the last CTA's merge is a serial tail. Splits pay off for long
/// key ranges (decode, 1×8192 keys: 226 → 55 µs).
pub const MIN_TILES_PER_SPLIT: usize = 8;

/// Whether `config` of `head_dim`'s bucket has split-KV entry points.
pub fn has_split(config: &KernelConfig, head_dim: usize) -> bool {
    catalog::fwd_bucket(head_dim).is_some_and(|b| {
        catalog::fwd_tiles(b)
            .iter()
            .any(|e| e.split && e.tile == *config)
    })
}

/// Key splits for a launch of `config` (1 = no split): only for configs with split entry
/// points, only when the grid (`ctas`) leaves SMs idle, and each split keeps at least
/// [`MIN_TILES_PER_SPLIT`] key tiles (`key_tiles` of the longest row). Aims at two CTAs per SM.
pub fn choose_splits(
    config: &KernelConfig,
    head_dim: usize,
    ctas: usize,
    key_tiles: usize,
    sm_count: usize,
) -> usize {
    if !has_split(config, head_dim) {
        return 1;
    }
    one_wave_splits(ctas, key_tiles, sm_count)
}

/// The split count that fills one wave of two CTAs per SM without spilling into a second:
/// `⌊2·SMs / ctas⌋`, at most [`MAX_SPLITS`], each split keeping [`MIN_TILES_PER_SPLIT`] key
/// tiles; 1 when the grid already covers the SMs. Rounding up instead (9 splits of 32 decode
/// CTAs on 132 SMs: 288 CTAs for 264 slots) left a 24-CTA second wave that cost 17 % (run
/// 28: 67.4 µs against 57.7 at 8 splits, docs/PERF.md).
pub fn one_wave_splits(ctas: usize, key_tiles: usize, sm_count: usize) -> usize {
    wave_splits(ctas, key_tiles, sm_count, 2)
}

/// The split count that fills one wave of `ctas_per_sm` CTAs per SM (⌊ctas_per_sm · SMs /
/// ctas⌋), each split keeping [`MIN_TILES_PER_SPLIT`] key tiles, at most [`MAX_SPLITS`]; 1
/// when the grid already covers the SMs. [`one_wave_splits`] is the mma.sync kernels' (two
/// CTAs per SM); the Hopper kernel's CTAs take a whole SM (`hopper::hopper_seq_splits`).
pub(crate) fn wave_splits(
    ctas: usize,
    key_tiles: usize,
    sm_count: usize,
    ctas_per_sm: usize,
) -> usize {
    if ctas >= sm_count {
        return 1;
    }
    ((ctas_per_sm * sm_count) / ctas.max(1))
        .min(key_tiles / MIN_TILES_PER_SPLIT)
        .clamp(1, MAX_SPLITS)
}

/// The configs compiled for `head_dim`'s bucket (empty for unsupported head dims), before
/// the per-arch shared-memory filter (the launcher checks the device's limit).
pub fn configs_for(head_dim: usize) -> Vec<KernelConfig> {
    catalog::fwd_bucket(head_dim)
        .map(|b| catalog::fwd_tiles(b).iter().map(|e| e.tile).collect())
        .unwrap_or_default()
}

/// The configs the debug build (feature `debug-kernels`) compiles for `head_dim`.
pub fn debug_configs_for(head_dim: usize) -> Vec<KernelConfig> {
    catalog::fwd_bucket(head_dim)
        .map(|b| {
            catalog::fwd_tiles(b)
                .iter()
                .filter(|e| e.debug)
                .map(|e| e.tile)
                .collect()
        })
        .unwrap_or_default()
}

impl Tile {
    /// Looks a config up by [`Tile::name`] among every bucket's configs (the `_s2` suffix
    /// may be omitted: `64_64_4` is `64_64_4_s2`). Whether it exists for a given head dim is
    /// checked at launch ([`Tile::check_head_dim`]).
    pub fn by_name(name: &str) -> Result<Self, KernelError> {
        all_configs()
            .into_iter()
            .find(|c| c.name() == name || format!("{name}_s2") == c.name())
            .ok_or_else(|| KernelError::UnknownConfig {
                name: name.to_string(),
                known: all_configs()
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Errors unless this config is compiled for `head_dim`'s bucket.
    pub fn check_head_dim(&self, head_dim: usize) -> Result<(), KernelError> {
        let configs = configs_for(head_dim);
        if configs.contains(self) {
            Ok(())
        } else {
            Err(KernelError::UnknownConfig {
                name: format!("{} (head_dim {head_dim})", self.name()),
                known: configs
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
    }

    /// Query rows each warp owns (16 or 32).
    pub fn rows_per_warp(&self) -> usize {
        self.block_m / self.warps
    }

    /// Dynamic shared memory of one f16/bf16 forward CTA for `head_dim` (its bucket's
    /// padded row pitch): the Q tile plus `stages` K and V tiles.
    pub fn smem_bytes(&self, head_dim: usize) -> usize {
        let bucket = catalog::fwd_bucket(head_dim).unwrap_or(head_dim);
        catalog::fwd_smem_bytes(self, bucket)
    }

    /// Threads per CTA.
    pub fn threads(&self) -> usize {
        self.warps * 32
    }
}

fn all_configs() -> Vec<KernelConfig> {
    let mut all: Vec<KernelConfig> = catalog::FWD_HEAD_DIM_BUCKETS
        .iter()
        .flat_map(|&b| catalog::fwd_tiles(b).iter().map(|e| e.tile))
        .collect();
    all.sort();
    all.dedup();
    all
}

/// Which entry point of a config (the catalog's [`FwdMode`]).
pub type KernelMode = FwdMode;

/// The compile unit holding the f16/bf16 forward kernels of (arch, dtype, head dim).
pub fn unit_key(arch: Arch, dtype: Dtype, head_dim: usize) -> Result<UnitKey, KernelError> {
    Ok(UnitKey {
        family: Family::Fwd,
        arch,
        elem: elem_of(dtype),
        head_dim: bucket_for(head_dim)?,
    })
}

/// The default config for a problem: the largest BLOCK_M that still gives at least two CTAs
/// per SM (enough to hide latency); small problems get small blocks so the grid fills the
/// chip. `max_smem` filters configs the device cannot hold.
pub fn choose_config(
    batch: usize,
    q_heads: usize,
    q_len: usize,
    head_dim: usize,
    sm_count: usize,
    max_smem: usize,
) -> KernelConfig {
    let fits = |c: &KernelConfig| c.smem_bytes(head_dim) <= max_smem && c.stages == 2;
    let ctas = |c: &KernelConfig| q_len.div_ceil(c.block_m) * batch * q_heads;
    let mut by_size: Vec<KernelConfig> = configs_for(head_dim).into_iter().filter(fits).collect();
    // Largest blocks first; among equal BLOCK_M, more warps and larger key tiles first (the
    // sweep's winners at D ≥ 160 on Hopper).
    by_size.sort_by_key(|c| std::cmp::Reverse((c.block_m, c.warps, c.block_n)));
    by_size
        .iter()
        .find(|c| ctas(c) >= 2 * sm_count)
        .or_else(|| by_size.last())
        .copied()
        .unwrap_or(cfg(32, 64, 2, 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_head_dim_maps_to_a_bucket_or_a_typed_error() {
        for d in (8..=256).step_by(8) {
            let b = bucket_for(d).unwrap();
            assert!(b >= d && b - d < 32, "D={d} runs in bucket {b}");
            assert!(!configs_for(d).is_empty(), "D={d}");
        }
        for d in [0, 4, 59, 111, 257, 264, 512] {
            let e = bucket_for(d).unwrap_err();
            assert!(
                matches!(e, KernelError::UnsupportedHeadDim { head_dim, .. } if head_dim == d),
                "{e}"
            );
            assert!(e.to_string().contains("D % 8 == 0"), "{e}");
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_fail() {
        for d in catalog::FWD_HEAD_DIM_BUCKETS {
            for c in configs_for(d) {
                assert_eq!(KernelConfig::by_name(&c.name()).unwrap(), c);
                assert!(c.check_head_dim(d).is_ok());
                assert!(
                    matches!(c.rows_per_warp(), 16 | 32),
                    "{}: 16 or 32 rows per warp",
                    c.name()
                );
                if d > 128 {
                    assert_eq!(c.rows_per_warp(), 16, "D={d} {}: spills", c.name());
                }
            }
        }
        assert_eq!(KernelConfig::by_name("64_64_4").unwrap(), cfg(64, 64, 4, 2));
        let err = KernelConfig::by_name("32_64_4").unwrap_err().to_string();
        assert!(err.contains("64_64_4_s2"), "{err}");
        // 128_64_4 exists for D=64 only (it would spill at D=128).
        let c = KernelConfig::by_name("128_64_4_s2").unwrap();
        assert!(c.check_head_dim(64).is_ok());
        assert!(c.check_head_dim(128).is_err());
    }

    #[test]
    fn smem_uses_the_padded_pitch() {
        let c = cfg(64, 64, 4, 2);
        assert_eq!(c.smem_bytes(64), (64 + 4 * 64) * 64 * 2);
        // D = 96 and 80 run the 96 bucket, stored with a 128-element pitch.
        assert_eq!(c.smem_bytes(96), (64 + 4 * 64) * 128 * 2);
        assert_eq!(c.smem_bytes(80), c.smem_bytes(96));
        assert_eq!(c.smem_bytes(40), (64 + 4 * 64) * 64 * 2);
    }

    #[test]
    fn splits_only_for_small_grids_with_enough_keys() {
        let small = cfg(64, 64, 4, 2);
        // (1,8,512,64): 64 CTAs on 132 SMs but only 8 key tiles: no split (measured slower).
        assert_eq!(choose_splits(&small, 64, 64, 8, 132), 1);
        // Decode (1,32,1→8192): 32 CTAs, 128 key tiles → 8 splits (one wave of two CTAs
        // per SM: 256 of 264 slots; 9 would spill 24 CTAs into a second wave).
        assert_eq!(choose_splits(&cfg(32, 64, 2, 2), 128, 32, 128, 132), 8);
        assert_eq!(one_wave_splits(100, 128, 132), 2);
        assert_eq!(
            choose_splits(&cfg(32, 64, 2, 2), 256, 1, 1024, 132),
            MAX_SPLITS
        );
        assert_eq!(choose_splits(&small, 64, 64, 32, 132), 4);
        // Enough CTAs, too few keys, or a config without split entry points: no split.
        assert_eq!(choose_splits(&small, 64, 512, 32, 132), 1);
        assert_eq!(choose_splits(&small, 64, 64, 15, 132), 1);
        assert_eq!(choose_splits(&cfg(128, 64, 8, 2), 64, 16, 64, 132), 1);
        // Every bucket has split configs (decode at any head dim).
        for d in catalog::FWD_HEAD_DIM_BUCKETS {
            assert!(has_split(&cfg(32, 64, 2, 2), d), "D={d}");
        }
    }

    #[test]
    fn chooser_fills_the_chip() {
        // (1,8,512,64): 128-row blocks give 32 CTAs on 132 SMs; the chooser goes smaller.
        let c = choose_config(1, 8, 512, 64, 132, 227 * 1024);
        assert_eq!(c.block_m, 32);
        // (4,16,4096,128): plenty of CTAs with 128-row blocks.
        let c = choose_config(4, 16, 4096, 128, 132, 227 * 1024);
        assert_eq!(c.block_m, 128);
        // sm_89 holds 99 KiB: every choice must fit, at every head dim.
        for d in (8..=256).step_by(8) {
            let c = choose_config(4, 16, 4096, d, 128, crate::catalog::SM8X_SMALL_SMEM);
            assert!(
                c.smem_bytes(d) <= crate::catalog::SM8X_SMALL_SMEM,
                "D={d}: {}",
                c.name()
            );
            assert!(configs_for(d).contains(&c));
        }
    }
}
