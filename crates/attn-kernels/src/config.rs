//! Kernel configs: (BLOCK_M, BLOCK_N, warps, stages) per (dtype, head dim, arch), the named
//! set compiled into every unit (kernels/configs.cuh), and the default chooser.

use crate::KernelError;

/// Storage type of Q, K, V and O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    /// `f16` / `bf16`, as in kernel names and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }

    /// Parses `f16` or `bf16`.
    pub fn parse(s: &str) -> Result<Self, KernelError> {
        match s {
            "f16" | "fp16" => Ok(Dtype::F16),
            "bf16" => Ok(Dtype::Bf16),
            other => Err(KernelError::UnknownDtype(other.to_string())),
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Head dims the kernels are compiled for.
pub const SUPPORTED_HEAD_DIMS: [usize; 2] = [64, 128];

/// One tile configuration of the forward kernel. `warps = block_m / 16`: each warp owns 16
/// whole query rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelConfig {
    /// Query rows per CTA.
    pub block_m: usize,
    /// Keys per pipeline tile.
    pub block_n: usize,
    /// Warps per CTA.
    pub warps: usize,
    /// Depth of the cp.async K/V ring.
    pub stages: usize,
}

pub(crate) const fn cfg(
    block_m: usize,
    block_n: usize,
    warps: usize,
    stages: usize,
) -> KernelConfig {
    KernelConfig {
        block_m,
        block_n,
        warps,
        stages,
    }
}

/// The named configs for head dim 64, in the order of kernels/configs.cuh.
pub const CONFIGS_D64: [KernelConfig; 8] = [
    cfg(32, 64, 2, 2),
    cfg(64, 64, 4, 2),
    cfg(128, 64, 8, 2),
    cfg(64, 64, 4, 3),
    cfg(128, 64, 4, 2),
    cfg(128, 32, 4, 2),
    cfg(64, 64, 2, 2),
    cfg(128, 128, 8, 2),
];

/// The named configs for head dim 128, in the order of kernels/configs.cuh.
pub const CONFIGS_D128: [KernelConfig; 6] = [
    cfg(32, 64, 2, 2),
    cfg(64, 64, 4, 2),
    cfg(128, 64, 8, 2),
    cfg(64, 64, 4, 3),
    cfg(128, 32, 4, 2),
    cfg(128, 128, 8, 2),
];

/// The configs the debug build (feature `debug-kernels`) also compiles: one with 16 and one
/// with 32 query rows per warp (debug cubins are ~15x larger than release ones).
pub const DEBUG_CONFIGS: [KernelConfig; 2] = [cfg(64, 64, 4, 2), cfg(128, 32, 4, 2)];

/// Configs that also have split-KV entry points (release build), for grids too small to
/// fill the chip; kernels/configs.cuh `ATTN_FWD_SPLIT_CONFIGS`.
pub const SPLIT_CONFIGS: [KernelConfig; 2] = [cfg(32, 64, 2, 2), cfg(64, 64, 4, 2)];

/// Most key splits one query block is divided into.
pub const MAX_SPLITS: usize = 16;

/// Fewest key tiles one split processes. Measured (H200, 2026-11-21): splitting the 8 key
/// tiles of (1,8,512,64) four ways made it slower (10.0 → 14.9 µs): each split CTA still pays
/// the prologue latency, and the last CTA's merge is a serial tail. Splits pay off for long
/// key ranges (decode, 1×8192 keys: 226 → 55 µs).
pub const MIN_TILES_PER_SPLIT: usize = 8;

/// Key splits for a launch of `config` (1 = no split): only for configs with split entry
/// points, only when the grid (`ctas`) leaves SMs idle, and each split keeps at least
/// [`MIN_TILES_PER_SPLIT`] key tiles (`key_tiles` of the longest row). Aims at two CTAs per SM.
pub fn choose_splits(
    config: &KernelConfig,
    ctas: usize,
    key_tiles: usize,
    sm_count: usize,
) -> usize {
    if !SPLIT_CONFIGS.contains(config) || ctas >= sm_count {
        return 1;
    }
    (2 * sm_count)
        .div_ceil(ctas.max(1))
        .min(key_tiles / MIN_TILES_PER_SPLIT)
        .clamp(1, MAX_SPLITS)
}

/// The configs compiled for `head_dim` (empty for unsupported head dims).
pub fn configs_for(head_dim: usize) -> &'static [KernelConfig] {
    match head_dim {
        64 => &CONFIGS_D64,
        128 => &CONFIGS_D128,
        _ => &[],
    }
}

impl KernelConfig {
    /// The config's name: `{block_m}_{block_n}_{warps}_s{stages}` (e.g. `64_64_4_s2`).
    pub fn name(&self) -> String {
        format!(
            "{}_{}_{}_s{}",
            self.block_m, self.block_n, self.warps, self.stages
        )
    }

    /// Looks a config up by [`KernelConfig::name`] among every head dim's configs (the
    /// `_s2` suffix may be omitted: `64_64_4` is `64_64_4_s2`). Whether it exists for a
    /// given head dim is checked at launch ([`KernelConfig::check_head_dim`]).
    pub fn by_name(name: &str) -> Result<Self, KernelError> {
        CONFIGS_D64
            .iter()
            .chain(CONFIGS_D128.iter())
            .find(|c| c.name() == name || format!("{name}_s2") == c.name())
            .copied()
            .ok_or_else(|| KernelError::UnknownConfig {
                name: name.to_string(),
                known: all_names(),
            })
    }

    /// Errors unless this config is compiled for `head_dim`.
    pub fn check_head_dim(&self, head_dim: usize) -> Result<(), KernelError> {
        if configs_for(head_dim).contains(self) {
            Ok(())
        } else {
            Err(KernelError::UnknownConfig {
                name: format!("{} (head_dim {head_dim})", self.name()),
                known: configs_for(head_dim)
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

    /// Dynamic shared memory of one CTA: Q tile plus `stages` K and V tiles, 2-byte elements.
    pub fn smem_bytes(&self, head_dim: usize) -> usize {
        (self.block_m * head_dim + 2 * self.stages * self.block_n * head_dim) * 2
    }

    /// Threads per CTA.
    pub fn threads(&self) -> usize {
        self.warps * 32
    }
}

fn all_names() -> String {
    let mut names: Vec<String> = CONFIGS_D64
        .iter()
        .chain(CONFIGS_D128.iter())
        .map(|c| c.name())
        .collect();
    names.dedup();
    names.sort();
    names.dedup();
    names.join(", ")
}

/// Which entry point of a config: no mask, causal mask (both alignments), or the debug-only
/// variant that drops the online-softmax rescale (for the oracle's tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelMode {
    /// `Causal::None`.
    Full,
    /// `Causal::TopLeft` or `Causal::BottomRight` (the alignment is a runtime offset).
    Causal,
    /// Debug builds only: `Full` without the O/l rescale, a planted bug.
    BrokenRescale,
}

impl KernelMode {
    fn suffix(self) -> &'static str {
        match self {
            KernelMode::Full => "full",
            KernelMode::Causal => "causal",
            KernelMode::BrokenRescale => "broken_rescale",
        }
    }
}

/// The compile unit holding the kernels of (dtype, head dim): `fwd_{dtype}_d{D}`.
pub fn unit_name(dtype: Dtype, head_dim: usize) -> String {
    format!("fwd_{}_d{head_dim}", dtype.as_str())
}

/// The extern "C" name of one kernel (the `ATTN_FWD_ENTRY` macro in kernels/fwd_kernel.cuh).
pub fn kernel_name(dtype: Dtype, head_dim: usize, cfg: &KernelConfig, mode: KernelMode) -> String {
    kernel_name_split(dtype, head_dim, cfg, mode, false)
}

/// [`kernel_name`] of the split-KV entry point when `split` (`…_full_split`).
pub fn kernel_name_split(
    dtype: Dtype,
    head_dim: usize,
    cfg: &KernelConfig,
    mode: KernelMode,
    split: bool,
) -> String {
    format!(
        "attn_fwd_{}_d{head_dim}_bm{}_bn{}_w{}_s{}_{}{}",
        dtype.as_str(),
        cfg.block_m,
        cfg.block_n,
        cfg.warps,
        cfg.stages,
        mode.suffix(),
        if split { "_split" } else { "" }
    )
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
    let mut by_size: Vec<KernelConfig> =
        configs_for(head_dim).iter().copied().filter(fits).collect();
    by_size.sort_by_key(|c| std::cmp::Reverse(c.block_m));
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
    fn configs_match_the_cuda_instantiation_list() {
        let src = include_str!("../kernels/configs.cuh");
        let listed = |d: usize| -> Vec<KernelConfig> {
            let prefix = format!("ATTN_FWD_CONFIG(TNAME, T, {d}, ");
            src.lines()
                .filter_map(|l| l.trim().strip_prefix(prefix.as_str()))
                .map(|rest| {
                    let n: Vec<usize> = rest
                        .trim_end_matches('\\')
                        .trim()
                        .trim_end_matches(')')
                        .split(',')
                        .map(|x| x.trim().parse().expect("numeric config field"))
                        .collect();
                    let c = cfg(n[0], n[1], n[3], n[2]);
                    assert_eq!(
                        n[4] == 1,
                        DEBUG_CONFIGS.contains(&c),
                        "{}: debug flag",
                        c.name()
                    );
                    c
                })
                .collect()
        };
        assert_eq!(listed(64), CONFIGS_D64.to_vec(), "D=64 lists disagree");
        assert_eq!(listed(128), CONFIGS_D128.to_vec(), "D=128 lists disagree");
        for c in CONFIGS_D64.iter().chain(&CONFIGS_D128) {
            assert!(
                matches!(c.rows_per_warp(), 16 | 32),
                "{}: 16 or 32 rows per warp",
                c.name()
            );
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_fail() {
        for c in CONFIGS_D64.iter().chain(&CONFIGS_D128) {
            assert_eq!(KernelConfig::by_name(&c.name()).unwrap(), *c);
        }
        assert_eq!(KernelConfig::by_name("64_64_4").unwrap(), CONFIGS_D64[1]);
        let err = KernelConfig::by_name("32_64_4").unwrap_err().to_string();
        assert!(err.contains("64_64_4_s2"), "{err}");
        // 128_64_4 exists for D=64 only (it would spill at D=128).
        let c = KernelConfig::by_name("128_64_4_s2").unwrap();
        assert!(c.check_head_dim(64).is_ok());
        assert!(c.check_head_dim(128).is_err());
    }

    #[test]
    fn kernel_names_follow_the_macro() {
        let n = kernel_name(Dtype::Bf16, 128, &CONFIGS_D128[2], KernelMode::Causal);
        assert_eq!(n, "attn_fwd_bf16_d128_bm128_bn64_w8_s2_causal");
        assert_eq!(unit_name(Dtype::F16, 64), "fwd_f16_d64");
    }

    #[test]
    fn splits_only_for_small_grids_with_enough_keys() {
        let small = CONFIGS_D64[1]; // 64_64_4_s2
                                    // (1,8,512,64): 64 CTAs on 132 SMs but only 8 key tiles: no split (measured slower).
        assert_eq!(choose_splits(&small, 64, 8, 132), 1);
        // Decode (1,32,1→8192): 32 CTAs, 128 key tiles → 9 splits (two CTAs per SM).
        assert_eq!(choose_splits(&CONFIGS_D64[0], 32, 128, 132), 9);
        assert_eq!(choose_splits(&CONFIGS_D64[0], 1, 1024, 132), MAX_SPLITS);
        assert_eq!(choose_splits(&small, 64, 32, 132), 4);
        // Enough CTAs, too few keys, or a config without split entry points: no split.
        assert_eq!(choose_splits(&small, 512, 32, 132), 1);
        assert_eq!(choose_splits(&small, 64, 15, 132), 1);
        assert_eq!(choose_splits(&CONFIGS_D64[2], 16, 64, 132), 1);
    }

    #[test]
    fn split_configs_match_the_cuda_list() {
        let src = include_str!("../kernels/configs.cuh");
        let listed: Vec<KernelConfig> = src
            .lines()
            .filter_map(|l| l.trim().strip_prefix("ATTN_FWD_SPLIT_CONFIG(TNAME, T, D, "))
            .map(|rest| {
                let n: Vec<usize> = rest
                    .trim_end_matches('\\')
                    .trim()
                    .trim_end_matches(')')
                    .split(',')
                    .map(|x| x.trim().parse().expect("numeric"))
                    .collect();
                cfg(n[0], n[1], n[3], n[2])
            })
            .collect();
        assert_eq!(listed, SPLIT_CONFIGS.to_vec());
        for c in SPLIT_CONFIGS {
            assert!(CONFIGS_D64.contains(&c) && CONFIGS_D128.contains(&c));
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
        // sm_89 holds 99 KiB: every choice must fit.
        let c = choose_config(4, 16, 4096, 128, 128, 99 * 1024);
        assert!(c.smem_bytes(128) <= 99 * 1024);
    }
}
