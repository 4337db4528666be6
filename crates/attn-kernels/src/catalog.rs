//! The kernel catalog: the single source of which kernels exist.
//!
//! A kernel is named by a [`UnitKey`] (family, arch, storage type, head-dim bucket) plus a
//! tile config and an entry mode ([`FwdMode`], [`Fp8Mma`]). The tile table below (the role of
//! FlashAttention-3's `hopper/tile_size.h`, here in Rust) decides which configs each unit
//! instantiates. `build.rs` includes this file (`#[path]`), generates one CUDA compile unit
//! per [`UnitKey`] from it — compiled only for that unit's arch — and the launcher looks
//! kernels up by the same names. Nothing about which kernels exist is written twice.
//!
//! This module has no dependencies (build scripts include it verbatim): errors and device
//! logic live in `config.rs` and `launch.rs`.

use std::fmt::Write as _;

/// A GPU architecture the kernels are compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    /// Ampere (A100): `mma.sync`, `cp.async`; the cubin also runs on sm_86/87.
    Sm80,
    /// Ada (L4, L40): adds FP8 `mma.sync`; 99 KiB of shared memory per block.
    Sm89,
    /// Hopper with its arch-specific features (`wgmma`, TMA, `setmaxnreg`).
    Sm90a,
}

impl Arch {
    /// Every arch, oldest first.
    pub const ALL: [Arch; 3] = [Arch::Sm80, Arch::Sm89, Arch::Sm90a];

    /// As given to nvcc and in `ATTN_CUDA_ARCHS`: `80`, `89`, `90a`.
    pub fn nvcc_name(self) -> &'static str {
        match self {
            Arch::Sm80 => "80",
            Arch::Sm89 => "89",
            Arch::Sm90a => "90a",
        }
    }

    /// Parses `80`, `sm_89`, `90a`.
    pub fn parse(s: &str) -> Option<Arch> {
        match s.trim().trim_start_matches("sm_") {
            "80" => Some(Arch::Sm80),
            "89" => Some(Arch::Sm89),
            "90a" => Some(Arch::Sm90a),
            _ => None,
        }
    }

    /// Largest dynamic shared memory one block may opt into on the arch's flagship part
    /// (A100 163 KiB, Ada 99 KiB, H100 227 KiB). Configs above it are not instantiated; the
    /// launcher still checks the device's own limit (an sm_86 part runs the sm_80 cubin
    /// with 99 KiB).
    pub fn max_smem(self) -> usize {
        match self {
            Arch::Sm80 => 166_912,
            Arch::Sm89 => SM8X_SMALL_SMEM,
            Arch::Sm90a => 232_448,
        }
    }

    /// Whether a device of compute capability (major, minor) runs this arch's cubin: the
    /// same major and an equal or older minor (SASS is compatible within a major), and an
    /// arch-specific `a` build only on exactly its own arch.
    pub fn runs_on(self, major: i32, minor: i32) -> bool {
        match self {
            Arch::Sm80 => major == 8 && minor >= 0,
            Arch::Sm89 => major == 8 && minor >= 9,
            Arch::Sm90a => major == 9 && minor == 0,
        }
    }
}

/// A family of kernels sharing one mainloop source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// The f16/bf16 forward (`kernels/fwd_kernel.cuh`, `mma.sync`).
    Fwd,
    /// The FP8 E4M3 forward writing f16/bf16 (`kernels/fwd_fp8_kernel.cuh`).
    Fp8Fwd,
    /// The FP8 forward's Vᵀ pass (`kernels/fp8_prep.cuh`).
    Fp8Prep,
    /// The Hopper f16/bf16 forward (`kernels/fwd_hopper_kernel.cuh`: TMA, warp-specialized
    /// wgmma), sm_90a only.
    FwdHopper,
    /// Merging partial results by their LSE (`kernels/lse_merge.cuh`): ring attention and
    /// cascade attention. One unit per arch holding both storage types.
    Merge,
    /// The f16/bf16 backward (`kernels/bwd_kernel.cuh`, `mma.sync`): the main K/V-block
    /// kernel plus the Δ = rowsum(dO∘O) and dQ conversion passes, per head-dim bucket.
    Bwd,
    /// Appending K/V rows to a paged cache, f16/bf16 or quantized to E4M3
    /// (`kernels/kv_append.cuh`). One unit per arch.
    KvAppend,
    /// The decode kernel (`kernels/decode_kernel.cuh`): 1–8 query rows against a long KV
    /// cache on the FMA pipe (E4M3 K/V at buckets 32/64/128: tensor cores,
    /// `kernels/decode_tc.cuh`), f16/bf16 or E4M3 K/V, per head-dim bucket.
    Decode,
}

/// Storage type of Q, K, V and O (of O only, for [`Family::Fp8Fwd`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Elem {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

impl Elem {
    /// `f16` / `bf16`.
    pub fn as_str(self) -> &'static str {
        match self {
            Elem::F16 => "f16",
            Elem::Bf16 => "bf16",
        }
    }
    fn cuda_type(self) -> &'static str {
        match self {
            Elem::F16 => "__half",
            Elem::Bf16 => "__nv_bfloat16",
        }
    }
}

/// One compile unit: everything of one (family, arch, storage type, head-dim bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UnitKey {
    /// The family.
    pub family: Family,
    /// The arch it is compiled for (and only for).
    pub arch: Arch,
    /// Storage type (output type for FP8; f16 for the prep unit, which ignores it).
    pub elem: Elem,
    /// Head-dim bucket the kernels are specialized for (0 for the prep unit, which holds
    /// every FP8 head dim).
    pub head_dim: usize,
}

impl UnitKey {
    /// The unit's name, also the cubin's: `fwd_sm90a_f16_d128`, `fp8_sm90a_bf16_d64`,
    /// `fp8prep_sm89`.
    pub fn name(&self) -> String {
        match self.family {
            Family::Fwd => format!(
                "fwd_sm{}_{}_d{}",
                self.arch.nvcc_name(),
                self.elem.as_str(),
                self.head_dim
            ),
            Family::Fp8Fwd => format!(
                "fp8_sm{}_{}_d{}",
                self.arch.nvcc_name(),
                self.elem.as_str(),
                self.head_dim
            ),
            Family::Fp8Prep => format!("fp8prep_sm{}", self.arch.nvcc_name()),
            Family::Merge => format!("merge_sm{}", self.arch.nvcc_name()),
            Family::KvAppend => format!("kvappend_sm{}", self.arch.nvcc_name()),
            Family::Decode => format!(
                "dec_sm{}_{}_d{}",
                self.arch.nvcc_name(),
                self.elem.as_str(),
                self.head_dim
            ),
            Family::Bwd => format!(
                "bwd_sm{}_{}_d{}",
                self.arch.nvcc_name(),
                self.elem.as_str(),
                self.head_dim
            ),
            Family::FwdHopper => format!(
                "fwdh_sm{}_{}_d{}",
                self.arch.nvcc_name(),
                self.elem.as_str(),
                self.head_dim
            ),
        }
    }
}

/// One tile configuration: (BLOCK_M, BLOCK_N, warps, stages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tile {
    /// Query rows per CTA.
    pub block_m: usize,
    /// Keys per pipeline tile.
    pub block_n: usize,
    /// Warps per CTA.
    pub warps: usize,
    /// Depth of the K/V ring.
    pub stages: usize,
}

/// Shorthand for the tables.
pub const fn tile(block_m: usize, block_n: usize, warps: usize, stages: usize) -> Tile {
    Tile {
        block_m,
        block_n,
        warps,
        stages,
    }
}

impl Tile {
    /// `{block_m}_{block_n}_{warps}_s{stages}` (e.g. `64_64_4_s2`).
    pub fn name(&self) -> String {
        format!(
            "{}_{}_{}_s{}",
            self.block_m, self.block_n, self.warps, self.stages
        )
    }
    /// `bm64_bn64_w4_s2`, the part of an entry name.
    fn entry_part(&self) -> String {
        format!(
            "bm{}_bn{}_w{}_s{}",
            self.block_m, self.block_n, self.warps, self.stages
        )
    }
}

/// Head-dim buckets of the f16/bf16 forward: the kernels are specialized for these; any
/// other `D % 8 == 0, 8 ≤ D ≤ 256` runs the next bucket's kernel with the missing columns
/// zero-filled on load and skipped on store (FlashAttention-2's set of head dims).
pub const FWD_HEAD_DIM_BUCKETS: [usize; 8] = [32, 64, 96, 128, 160, 192, 224, 256];

/// Head dims of the FP8 forward (exact, no padding: the FP8 swizzle needs 64-byte rows), on
/// every arch; the one-warpgroup `wgmma` variant stops at 128 ([`Fp8Mma::supports_head_dim`]).
pub const FP8_HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// Head dims of the Hopper engine's FP8 forward: 64, 128 and 256 (Q and K rows of two
/// 128-byte swizzle spans, P·V on `wgmma.m64n256k32`).
pub const HOPPER_FP8_HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// The bucket a head dim runs in, or `None` if the f16/bf16 forward cannot take it.
pub fn fwd_bucket(head_dim: usize) -> Option<usize> {
    if head_dim % 8 != 0 || head_dim < 8 {
        return None;
    }
    FWD_HEAD_DIM_BUCKETS
        .iter()
        .copied()
        .find(|&b| b >= head_dim)
}

/// Shared-memory row pitch (elements) of a bucket: the XOR swizzle (`kernels/load.cuh`)
/// permutes 16-byte chunks in groups of 8, so rows are padded to a multiple of 64 elements.
/// The padding chunks are never read.
pub const fn smem_pitch(bucket: usize) -> usize {
    bucket.div_ceil(64) * 64
}

/// Dynamic shared memory of an f16/bf16 forward CTA: the Q tile and `stages` K and V tiles.
pub const fn fwd_smem_bytes(tile: &Tile, bucket: usize) -> usize {
    (tile.block_m + 2 * tile.stages * tile.block_n) * smem_pitch(bucket) * 2
}

/// Dynamic shared memory of a forward CTA reading an E4M3 KV cache ([`FwdMode::kv_fp8`]
/// entries, kernels/kv_fp8.cuh): the Q tile, one widened K and V tile, and
/// [`kv_fp8_stages`] byte stages of K and V codes.
pub const fn fwd_kv_fp8_smem_bytes(tile: &Tile, bucket: usize) -> usize {
    kv_fp8_smem_with(tile, bucket, kv_fp8_stages(tile, bucket))
}

const fn kv_fp8_smem_with(tile: &Tile, bucket: usize, stages: usize) -> usize {
    (tile.block_m + 2 * tile.block_n) * smem_pitch(bucket) * 2 + 2 * stages * tile.block_n * bucket
}

/// The cp.async ring depth of the E4M3-cache entries of `tile`: the deeper of 3 and 2
/// stages that fits sm_89's shared memory (the feature tile's own rule). A code tile is half
/// an f16 tile, so two stages keep half the f16 ring's bytes in flight; three were tried
/// against two at D = 128 (runs 27, 28: 1 % faster, docs/PERF.md); a fourth would add shared
/// memory for nothing measured, so the ring stops at three. (A few D = 32/64/96/256 entries
/// spill a few scalars with three stages or four alike: ptxas-budget.json says which.)
pub const fn kv_fp8_stages(tile: &Tile, bucket: usize) -> usize {
    let mut stages = 3;
    while stages > 2 && kv_fp8_smem_with(tile, bucket, stages) > SM8X_SMALL_SMEM {
        stages -= 1;
    }
    stages
}

/// What one tile config of the f16/bf16 forward is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FwdTileEntry {
    /// The config.
    pub tile: Tile,
    /// Also in the debug build (`-G`, tile dumps): debug cubins are ~15× larger, so only
    /// one config per rows-per-warp kind.
    pub debug: bool,
    /// Also has split-KV entry points (flash-decoding) for grids too small for the chip.
    pub split: bool,
}

const fn e(tile: Tile, debug: bool, split: bool) -> FwdTileEntry {
    FwdTileEntry { tile, debug, split }
}

/// The tile table of the f16/bf16 forward per head-dim bucket, before the per-arch
/// shared-memory filter. D = 64 and 128 keep every config the sweep measured (elite.tsv);
/// the other buckets carry FlashAttention-2's choices for that head dim (128×64 or 128×32
/// blocks, 4–8 warps) plus the small split-KV configs. D = 128 has no 32-rows-per-warp
/// config with BLOCK_N = 64: it needs more than 255 registers and spills; from D = 160 on,
/// Q is re-read from shared memory each k-step (kernels/fwd_kernel.cuh) and every config has
/// 16 rows per warp.
pub fn fwd_tiles(bucket: usize) -> &'static [FwdTileEntry] {
    const D32: [FwdTileEntry; 5] = [
        e(tile(32, 64, 2, 2), false, true),
        e(tile(64, 64, 4, 2), false, true),
        e(tile(128, 64, 4, 2), false, false),
        e(tile(128, 128, 8, 2), false, false),
        e(tile(128, 128, 4, 2), false, false),
    ];
    const D64: [FwdTileEntry; 8] = [
        e(tile(32, 64, 2, 2), false, true),
        e(tile(64, 64, 4, 2), true, true),
        e(tile(128, 64, 8, 2), false, false),
        e(tile(64, 64, 4, 3), false, false),
        e(tile(128, 64, 4, 2), false, false),
        e(tile(128, 32, 4, 2), true, false),
        e(tile(64, 64, 2, 2), false, false),
        e(tile(128, 128, 8, 2), false, false),
    ];
    const D96: [FwdTileEntry; 5] = [
        e(tile(32, 64, 2, 2), false, true),
        e(tile(64, 64, 4, 2), false, true),
        e(tile(128, 64, 8, 2), false, false),
        e(tile(128, 32, 4, 2), false, false),
        e(tile(128, 128, 8, 2), false, false),
    ];
    const D128: [FwdTileEntry; 6] = [
        e(tile(32, 64, 2, 2), false, true),
        e(tile(64, 64, 4, 2), true, true),
        e(tile(128, 64, 8, 2), false, false),
        e(tile(64, 64, 4, 3), false, false),
        e(tile(128, 32, 4, 2), true, false),
        e(tile(128, 128, 8, 2), false, false),
    ];
    const D160_256: [FwdTileEntry; 5] = [
        e(tile(32, 64, 2, 2), false, true),
        e(tile(64, 64, 4, 2), false, true),
        e(tile(128, 64, 8, 2), false, false),
        e(tile(128, 32, 8, 2), false, false),
        e(tile(64, 32, 4, 2), false, false),
    ];
    match bucket {
        32 => &D32,
        64 => &D64,
        96 => &D96,
        128 => &D128,
        160 | 192 | 224 | 256 => &D160_256,
        _ => &[],
    }
}

/// The one mma.sync config per bucket that has the score-modifying features' entry points
/// ([`FwdMode::FullFeatures`], [`FwdMode::CausalFeatures`]: sliding window, softcap, ALiBi and
/// sinks as runtime values), the same on every arch: 64×64 with 4 warps up to D = 128, 64×32
/// above (the first of those that fits sm_89's 99 KiB). One config rather than every one
/// keeps the build's cost of the features to four entries per unit: full and causal, each
/// with dense/packed K/V and with a paged cache ([`FwdMode::FullFeaturesPaged`],
/// [`FwdMode::CausalFeaturesPaged`]). Varlen batches and per-sequence key counts run in the
/// same entries (runtime pointers, kernels/seqs.cuh).
pub fn fwd_feature_tile(bucket: usize) -> Option<Tile> {
    const PREFERENCE: [Tile; 2] = [tile(64, 64, 4, 2), tile(64, 32, 4, 2)];
    PREFERENCE.into_iter().find(|t| {
        fwd_tiles(bucket).iter().any(|e| e.tile == *t)
            && fwd_smem_bytes(t, bucket) <= Arch::Sm89.max_smem()
    })
}

/// The Hopper tile with the features' entry points (also the varlen / KV-cache launches)
/// that runs every mask: the bucket's default, ping-pong with intra-warpgroup overlap
/// wherever the bucket has it. At D ≤ 64 the 192-row tile (run 122: the feature entry with no
/// feature arithmetic went from 1.12–1.14× the plain launch on the three-stage tile to
/// 1.07–1.10× at 4,16,4096,64, and to 1.02–1.05× once the V-tail check left the steady-state
/// loop, run 126); at D = 128 the 128-key tile (run 132, 4,16,4096,128 bf16 against the
/// 128-key overlap tile without ping-pong: causal window 178–185 → 166 µs, causal ALiBi
/// 530–539 → 513–519 µs, the causal entry with no feature arithmetic 501–511 → 493–495 µs,
/// non-causal window 224 → 210 µs, softcap unchanged); at D = 160 / 192 the 96-key tile
/// (run 257) and above D = 192 the 80-key tile (run 254, 4,16,4096,256 bf16, against the
/// 64-key overlap tile without ping-pong that ran them before: the entry with no feature
/// arithmetic 1.10–1.12× → 1.03× plain, ALiBi 1.13–1.14× → 1.08–1.09×, softcap 1.20× →
/// 1.13–1.14×; causal windows 0.295× → 0.32× plain, as 80-key tiles skip less of a window).
/// Before, D = 160 / 192 ran them on the 96-key overlap tile without ping-pong, and D > 192 on
/// the 64-key one because the 80-key tile spilled 8 bytes with the features' state (CUDA
/// 13.0); of the default tiles' feature entries only D = 256's non-causal one spills now (24
/// bytes, a budget rule). (A third stage at D = 128 did not win back the paged prefill's
/// loss to the overlap fix: run 57, docs/PERF.md.) [`hopper_seq_tile`] is the other tile that
/// runs sequence layouts.
pub fn hopper_feature_tile(bucket: usize) -> Option<HopperTile> {
    hopper_tiles(bucket).first().copied()
}

/// The Hopper tile of `bucket` with entries for sequence layouts alone (`_seq`: varlen
/// batches and KV caches without window, softcap, ALiBi or sinks; the kernel's `SEQS`): at
/// D = 128 the dense default's wide tile ([`HOPPER_D128_WIDE`]), so that a varlen launch runs
/// what the same dense launch runs (issue 16's target is the one's time against the
/// other's). It also has `_feat` entries: since the V-tail check left the steady-state loop
/// (run 126) the features' state no longer spills in it (it spilled 52 bytes before, CUDA
/// 13.0), and a non-causal feature launch then runs the tile its dense twin runs. Other
/// buckets run sequence layouts in their feature tile's `_feat` entries: `_seq` entries on
/// D = 256's default tile ran a varlen prefill no faster (runs 264–265, docs/PERF.md).
pub fn hopper_seq_tile(bucket: usize) -> Option<HopperTile> {
    (bucket == 128 && hopper_tiles(bucket).contains(&HOPPER_D128_WIDE)).then_some(HOPPER_D128_WIDE)
}

/// Rows of one K/V TMA box of the Hopper forward over a paged cache: gcd(BN, page size), so
/// that every box of a key tile lies inside one page (pages hold a multiple of 16 keys, so
/// boxes keep TMA's swizzle atoms whole). The kernel computes the same gcd.
pub const fn paged_box_rows(block_n: usize, page_size: usize) -> usize {
    let (mut a, mut b) = (block_n, page_size);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The tile an unpinned launch with a sequence layout, ALiBi or sinks runs (softcap and
/// windows always take [`hopper_feature_tile`]; `hopper::plan_hopper` says why): without a
/// mask the wide D = 128 tile, where the dense default would take it (`dense`: every sequence
/// has `kv_len` keys; [`hopper_wide_pays`]) or, for sequences of mixed lengths, from
/// [`HOPPER_WIDE_MIN_KEYS`] keys in the longest one; else [`hopper_feature_tile`]. The waste of
/// the last key tile, which decides the dense launch since runs 222–223, differs by sequence
/// in a varlen batch; those launches were not re-timed, so they keep the earlier rule.
///
/// A paged cache (`page_size`) arrives in TMA boxes of gcd(BN, page size) rows
/// ([`paged_box_rows`]). The wide tile's 176 keys cut every power-of-two page into
/// 16-row boxes, so a paged launch takes it only where its boxes are no smaller than the
/// feature tile's: with pages of 64 and 256 keys the 128-key tile (boxes of 64 and 128 rows)
/// ran a varlen prefill 1.07–1.08× faster (run 206, docs/PERF.md: 1090–1101 µs against
/// 1179–1180). At D = 256 a paged launch takes [`HOPPER_D256_PAGED`] where its boxes are
/// taller than the feature tile's (pages of 32 keys and more).
pub fn hopper_seq_default_tile(
    bucket: usize,
    kv_len: usize,
    causal: bool,
    page_size: Option<usize>,
    dense: bool,
) -> Option<HopperTile> {
    let feature = hopper_feature_tile(bucket);
    let boxes_ok = |wide: HopperTile| {
        page_size.is_none_or(|page| {
            feature.is_none_or(|f| {
                paged_box_rows(wide.block_n, page) >= paged_box_rows(f.block_n, page)
            })
        })
    };
    let long = if dense {
        hopper_wide_pays(kv_len)
    } else {
        kv_len >= HOPPER_WIDE_MIN_KEYS
    };
    if !causal
        && long
        && hopper_seq_tile(bucket) == Some(HOPPER_D128_WIDE)
        && boxes_ok(HOPPER_D128_WIDE)
    {
        return Some(HOPPER_D128_WIDE);
    }
    if let (Some(page), Some(paged), Some(f)) = (page_size, hopper_paged_tile(bucket), feature) {
        if paged_box_rows(paged.block_n, page) > paged_box_rows(f.block_n, page) {
            return Some(paged);
        }
    }
    feature
}

/// What a Hopper forward entry runs beyond the dense problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HopperVariant {
    /// Dense `[B, H, S, D]` tensors (any strides), the causal mask or none.
    Dense,
    /// Also sequence layouts (varlen, KV-cache lengths, paged caches): `_seq`.
    Seqs,
    /// Also the score-modifying features (window, softcap, ALiBi, sinks) with the sequence
    /// layouts: `_feat`.
    Features,
}

impl HopperVariant {
    /// The entry name's suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            HopperVariant::Dense => "",
            HopperVariant::Seqs => "_seq",
            HopperVariant::Features => "_feat",
        }
    }

    /// Every variant, in entry order.
    pub const ALL: [HopperVariant; 3] = [
        HopperVariant::Dense,
        HopperVariant::Seqs,
        HopperVariant::Features,
    ];

    /// Whether `tile` of `bucket` is compiled in this variant.
    pub fn is_built(self, bucket: usize, tile: &HopperTile) -> bool {
        match self {
            // The paged caches' tile runs paged launches only (`_feat`).
            HopperVariant::Dense => hopper_paged_tile(bucket) != Some(*tile),
            HopperVariant::Seqs => hopper_seq_tile(bucket) == Some(*tile),
            HopperVariant::Features => {
                hopper_feature_tile(bucket) == Some(*tile)
                    || hopper_seq_tile(bucket) == Some(*tile)
                    || hopper_paged_tile(bucket) == Some(*tile)
            }
        }
    }
}

/// The configs of `bucket` instantiated for `arch` (those that fit its shared memory).
pub fn fwd_tiles_for(arch: Arch, bucket: usize) -> Vec<FwdTileEntry> {
    fwd_tiles(bucket)
        .iter()
        .copied()
        .filter(|t| fwd_smem_bytes(&t.tile, bucket) <= arch.max_smem())
        .collect()
}

/// One config of the Hopper forward (`kernels/fwd_hopper_kernel.cuh`): 64 query rows per
/// consumer warpgroup (two or three of them) plus a producer warpgroup; `block_n` keys per K/V
/// stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HopperTile {
    /// Keys per pipeline stage (the N of Q·Kᵀ's wgmma).
    pub block_n: usize,
    /// Depth of the TMA K/V ring.
    pub stages: usize,
    /// The two consumers' GEMMs alternate (FlashAttention-3's ping-pong schedule).
    pub pingpong: bool,
    /// Intra-warpgroup overlap: the softmax of key tile j+1 runs while P·V of tile j is
    /// still in the tensor cores (FlashAttention-3 §3.2).
    pub intra: bool,
    /// Consumer warpgroups of 64 query rows: 2, or 3 where their accumulators fit 160
    /// registers (FlashAttention-3's 192-row blocks at D ≤ 64).
    pub consumers: usize,
    /// The two consumers share one block of 64 query rows and split its key tiles, merging
    /// their softmax states at the end (`KVSPLIT` in kernels/fwd_hopper_kernel.cuh): half the
    /// chain of dependent tiles per CTA and twice the CTAs, for grids that leave SMs idle.
    pub kv_split: bool,
}

const fn ht(block_n: usize, stages: usize, pingpong: bool, intra: bool) -> HopperTile {
    HopperTile {
        block_n,
        stages,
        pingpong,
        intra,
        consumers: 2,
        kv_split: false,
    }
}

/// A key-split tile (`HopperTile::kv_split`): two consumers, intra-warpgroup overlap, no
/// ping-pong.
const fn htkv(block_n: usize, stages: usize) -> HopperTile {
    HopperTile {
        kv_split: true,
        ..ht(block_n, stages, false, true)
    }
}

/// A tile of three consumer warpgroups (192 query rows).
const fn ht3(block_n: usize, stages: usize, pingpong: bool, intra: bool) -> HopperTile {
    HopperTile {
        consumers: 3,
        ..ht(block_n, stages, pingpong, intra)
    }
}

impl HopperTile {
    /// Query rows per CTA: 64 per consumer warpgroup (64 in all for a key-split tile).
    pub const fn block_m(&self) -> usize {
        if self.kv_split {
            64
        } else {
            64 * self.consumers
        }
    }

    /// Threads per CTA: the producer warpgroup and the consumers.
    pub const fn threads(&self) -> usize {
        128 * (self.consumers + 1)
    }

    /// `wg{block_m}_{block_n}_s{stages}` plus `_pp` for ping-pong, `_ia` for
    /// intra-warpgroup overlap and `_kv` for a key split (e.g. `wg128_128_s2_pp_ia`,
    /// `wg192_128_s3`, `wg64_128_s4_ia_kv`).
    pub fn name(&self) -> String {
        format!(
            "wg{}_{}_s{}{}{}{}",
            self.block_m(),
            self.block_n,
            self.stages,
            if self.pingpong { "_pp" } else { "" },
            if self.intra { "_ia" } else { "" },
            if self.kv_split { "_kv" } else { "" }
        )
    }
}

/// Whether a Hopper entry walks several work items per CTA (a persistent launch,
/// kernels/fwd_hopper_kernel.cuh `HopperSched`) rather than one: dense, non-causal entries
/// whose producer runs the item loop in its 24 registers without spilling (ptxas, CUDA 13.0):
/// the 176-key f16/bf16 tiles at D = 128 and the FP8 tiles up to D = 128. The 128-key tiles,
/// D = 128's dense default below 8192 keys, do not: walking cost them 2–8 % per item against
/// their one-item entries (ncu, runs 228–235: the walking producer's wait for a free stage
/// retries eight times as often), more than the stream-K tail gives back. The D = 256 tiles
/// (four sub-tiles per row) and the three-consumer D = 64 tiles spilled 4–64 bytes with it,
/// and a sequence resolved per item 200+. Causal entries keep one item per CTA: their blocks
/// are uneven, and the hardware hands the next block to the first SM that frees, longest
/// first. The build emits this flag into each entry and launches read it from here, so the
/// two cannot disagree.
pub fn hopper_persistent(
    bucket: usize,
    tile: &HopperTile,
    causal: bool,
    variant: HopperVariant,
    fp8: bool,
) -> bool {
    if causal || variant != HopperVariant::Dense || tile.consumers != 2 || tile.kv_split {
        return false;
    }
    if fp8 {
        bucket <= 128
    } else {
        bucket == 128 && tile.block_n == 176
    }
}

/// The Hopper forward's configs per head-dim bucket, the default first. Shared memory holds
/// the Q tile and `stages` K and V tiles in 64-column sub-tiles ([`hopper_smem_bytes`]).
/// Each bucket builds only the tiles a launch can select: the default ([`hopper_default_tile`],
/// the H100 and H200 sweeps' winners, docs/PERF.md from 2026-11-23 on), the feature and
/// sequence tiles ([`hopper_feature_tile`], [`hopper_seq_tile`]) and the key-split tile of
/// small grids. D ≤ 64: three consumer warpgroups (192 rows) with ping-pong and overlap, and
/// [`HOPPER_128_PINGPONG`] for grids where 192-row blocks leave SMs idle; D = 96: 128 keys with
/// intra-warpgroup overlap; D = 128: [`HOPPER_128_PINGPONG`] and, without a mask over long key
/// ranges, [`HOPPER_D128_WIDE`]; D ≤ 192: 96 keys with ping-pong and overlap; D ≤ 256: 80 keys
/// with ping-pong and overlap, and at D = 256 [`HOPPER_D256_PAGED`] for paged caches. Each
/// bucket's default also runs its features.
/// The variants the sweeps measured slower than these (a third stage, no overlap or no
/// ping-pong, 176 keys without both at D ≤ 128, 112 keys at D ≤ 192, 64 keys at D ≤ 256 for
/// anything but paged caches) are
/// no longer built: no launch selected them, and they cost CI's 2-core build about a minute
/// (`git log -S "ht3(128, 3"` finds the list, to restore them for a sweep).
/// A wgmma's N must be a multiple of 8, P·V's k-steps take 16 keys.
pub fn hopper_tiles(bucket: usize) -> &'static [HopperTile] {
    // The last: the key-split tile for grids of at most half the SMs (`hopper_default_tile`);
    // four stages, so that a block of 512 keys loads all its tiles at once.
    const UP_TO_64: [HopperTile; 3] = [
        ht3(128, 2, true, true),
        HOPPER_128_PINGPONG,
        HOPPER_KV_SPLIT_64,
    ];
    const D96: [HopperTile; 1] = [ht(128, 2, false, true)];
    // The last: the key-split tile (`hopper_default_tile`'s small grids), 64 keys in four
    // stages: 128 keys fit only two, one per consumer, and each tile's load then waited for
    // that consumer's previous tile (run 167: 1,8,1024,128 21.9 µs against 13.6).
    const D128: [HopperTile; 3] = [HOPPER_128_PINGPONG, HOPPER_D128_WIDE, HOPPER_KV_SPLIT_128];
    // D = 160 / 192: the 96-key ping-pong tile (run 136, bf16, against the same tile without
    // ping-pong: 4,16,4096,192 1359–1360 → 1304–1313 µs, causal 745–768 → 704–715, 2,8,512,192
    // 16.5 → 15.4, 2,16,4096,160 591–593 → 561–578), which also runs the features
    // (`hopper_feature_tile`, run 257).
    const UP_TO_192: [HopperTile; 1] = [ht(96, 2, true, true)];
    // D = 224 / 256: one tile, which also runs the features (`hopper_feature_tile`); at
    // D = 256 also the paged caches' 64-key tile ([`HOPPER_D256_PAGED`]).
    const D224: [HopperTile; 1] = [ht(80, 2, true, true)];
    const D256: [HopperTile; 2] = [ht(80, 2, true, true), HOPPER_D256_PAGED];
    match bucket {
        32 | 64 => &UP_TO_64,
        96 => &D96,
        128 => &D128,
        160 | 192 => &UP_TO_192,
        224 => &D224,
        256 => &D256,
        _ => &[],
    }
}

/// D = 256's tile for paged KV caches: 64 keys per stage with ping-pong and intra-warpgroup
/// overlap, built with `_feat` entries only. The default 80-key tile reads every power-of-two
/// page in 16-row TMA boxes (gcd(80, page), [`paged_box_rows`]), and a paged prefill paid
/// 15–19 % over the same packed K/V for it; 64 keys read pages of 64 keys and more in 64-row
/// boxes. Run 275 (H200, `serve-bench --only varlen --varlen-head-dim 256`, 16 sequences of
/// 248–3903 tokens, f16, µs, 80 → 64 keys): pages of 64 keys 2311–2314 → 2147–2149 (causal
/// 1360–1365 → 1249–1255), pages of 256 2317–2320 → 2136–2145 (causal 1355 → 1250–1257);
/// pages of 16 (16-row boxes either way) 2337–2343 → 2416–2421, and packed K/V 1974–1976 →
/// 2069–2090: where the boxes do not grow, 80 keys stay faster ([`hopper_seq_default_tile`]
/// decides). With both tiles built (run 276) pages of 64 and 256 cost 1.07× the 80-key packed
/// launch, against 1.15–1.19× before.
pub const HOPPER_D256_PAGED: HopperTile = ht(64, 2, true, true);

/// The bucket's tile for paged KV caches, if it has one besides its feature tile (D = 256:
/// [`HOPPER_D256_PAGED`]).
pub fn hopper_paged_tile(bucket: usize) -> Option<HopperTile> {
    (bucket == 256 && hopper_tiles(bucket).contains(&HOPPER_D256_PAGED))
        .then_some(HOPPER_D256_PAGED)
}

/// The Hopper tile whose dense entries the debug build (feature `debug-kernels`) also has,
/// with tile dumps (kernels/debug_dump.cuh): [`HOPPER_128_PINGPONG`] at D = 64 and 128, the
/// buckets with mma.sync debug configs (a tile both buckets build; `FlashAttention::
/// forward_debug` on the Hopper engine runs it).
pub fn hopper_debug_tile(bucket: usize) -> Option<HopperTile> {
    matches!(bucket, 64 | 128)
        .then_some(HOPPER_128_PINGPONG)
        .filter(|t| hopper_tiles(bucket).contains(t))
}

/// Per-row speed of the 192-row ping-pong tile over the 128-row small-grid tile at D = 64, for
/// the grid model of [`hopper_default_tile`]: measured against the three-stage tile (H100,
/// 4,16,4096,64 f16: 537 vs 621–635 µs, docs/PERF.md run 23), rounded down. The small-grid
/// tile is now the 128-row ping-pong tile, 5–9 % faster than the three-stage one; with 1.15
/// the model still picks the faster tile on every shape run 138 timed (the seed shapes and
/// 8,16,1024,64, where 192 rows win: 96.8 against 104.8 µs). Under the grid model's causal
/// makespans 1.15 put 1,16,4096,64 and 2,8,4096,64 causal a hair on the 128-row side (1.003),
/// where run 331 (H200, f16, µs, 192 / 128 rows) timed 95.5–95.9 / 97.0–97.2 and 95.7–96.1 /
/// 96.2–97.1; 1.2 picks 192 there and no other timed shape moves. Run 331's causal shapes
/// where both models pick 128 rows: 8,16,1024 81.8 / 74.4–75.0, 4,16,1024 47.1–47.4 /
/// 42.5–42.7, 16,32,1024 295.6–295.9 / 266.7–266.9, 1,16,1536 27.4 / 22.4–22.5 (the wave model
/// kept 192 on all four).
const HOPPER_192_ROW_SPEEDUP: f64 = 1.2;

/// The non-causal D = 128 default above [`HOPPER_WIDE_MIN_KEYS`] keys: 176 keys per stage,
/// ping-pong and intra-warpgroup overlap.
pub const HOPPER_D128_WIDE: HopperTile = ht(176, 2, true, true);

/// 128 keys per stage, two consumer warpgroups, ping-pong and intra-warpgroup overlap: D =
/// 128's default wherever the wide tile is not (causal launches, fewer than
/// [`HOPPER_WIDE_MIN_KEYS`] keys) and its feature tile, and D ≤ 64's small-grid tile
/// ([`hopper_default_tile`]). Against the same tile without ping-pong, bf16: causal (three
/// rounds each, run 134) 1,16,16384,128 1809 → 1752 µs, 2,16,8192,128 988–1010 → 977–979,
/// 8,16,2048,128 296–307 → 276–287 (f16 alike); non-causal (two rounds, run 135) 2,8,512,128
/// 12.3–12.5 → 11.2, 8,16,512,128 49.6 → 46.9–47.2, 4,16,1000,128 73.2–73.4 → 69.4–69.6;
/// never slower. Features on it: [`hopper_feature_tile`].
pub const HOPPER_128_PINGPONG: HopperTile = ht(128, 2, true, true);

/// The key-split tile of D ≤ 64 ([`HopperTile::kv_split`]): 128 keys in four stages. Against
/// the 128-row ping-pong tile (H100, f16, CUDA graphs, run 166): 1,8,512,64 8.08 → 5.72 µs
/// (0.87–0.89× → 0.62× cuDNN's time), causal 8.48 → 6.19; 2,8,512,64 8.21 → 6.23, causal
/// 8.82 → 6.98; 1,8,1024,64 13.1 → 8.8 (run 167). Past the rule's bound it loses:
/// 4,8,512,64 (128 blocks of 128 rows) 9.6 → 12.7.
pub const HOPPER_KV_SPLIT_64: HopperTile = htkv(128, 4);

/// The key-split tile of D = 128: 64 keys in four stages (run 167, CUDA graphs: 1,8,512,128
/// 7.9–8.1 µs, 0.66–0.69× cuDNN's time; 2,8,512,128 9.4–9.6, 0.71–0.76×; 1,8,1024,128 13.6;
/// the 128-key two-stage key split took 9.0, 10.9 and 21.9).
pub const HOPPER_KV_SPLIT_128: HopperTile = htkv(64, 4);

/// The bucket's key-split tile, if it has one (buckets 32, 64 and 128).
pub fn hopper_kv_split_tile(bucket: usize) -> Option<HopperTile> {
    hopper_tiles(bucket).iter().copied().find(|t| t.kv_split)
}

/// Keys below which a 176-key tile wastes too much of its last tile (S = 512: 3 tiles of 176
/// for 512 keys) to be the default; the 128-key tile stays there (not timed below 2048).
pub const HOPPER_WIDE_MIN_KEYS: usize = 1024;

/// How much faster per computed key the 176-key tile runs than [`HOPPER_128_PINGPONG`] at
/// D = 128 without a mask, at sustained clocks (runs 222–223, H200: 1–3 % at 1,16,16384,128,
/// whose last key tile is 93 % full).
const HOPPER_WIDE_SPEEDUP: f64 = 1.02;

/// Whether a dense launch without a mask over `kv_len` keys runs faster on the 176-key tile
/// than on the 128-key one. Each tile computes its last key tile in full: at 4096 keys 176
/// keys waste 3 % (24 tiles for 23.3 tiles of keys) and lose (runs 222–223, µs, 176 against
/// 128 keys: 4,16,4096,128 f16 967–971 / 954, bf16 932–933 / 916–918; 8,16,2048,128 f16 518 /
/// 504–510), at 16384 keys 1 % and win (1,16,16384,128 f16 3616–3689 / 3726–3727); at 8192
/// (1 %) the two were within 1 % either way. The earlier rule (176 keys from 1024 keys on)
/// came from runs with bimodal samples, against an older 128-key tile.
pub fn hopper_wide_pays(kv_len: usize) -> bool {
    let padded = |block_n: usize| (kv_len.div_ceil(block_n) * block_n) as f64;
    kv_len >= HOPPER_WIDE_MIN_KEYS
        && padded(HOPPER_D128_WIDE.block_n) / HOPPER_WIDE_SPEEDUP
            < padded(HOPPER_128_PINGPONG.block_n)
}

/// Whether a launch of `q_len` query rows in `batch_heads` blocks of rows on `sm_count` SMs
/// runs faster on a key-split tile ([`HopperTile::kv_split`]): a grid of 128-row blocks that
/// fills at most half the SMs leaves each block's chain of key tiles as the launch's critical
/// path; the key-split tile halves the chain and doubles the CTAs (runs 166–167; past this
/// bound it lost, 4,8,512,64 9.6 → 12.7 µs).
fn kv_split_pays(q_len: usize, batch_heads: usize, sm_count: usize) -> bool {
    2 * q_len.div_ceil(HOPPER_128_PINGPONG.block_m()) * batch_heads <= sm_count.max(1)
}

/// The grid model's terms for the key-split tile of a causal launch, against a 128-row tile:
/// the key split's per-row speed (its consumers share 64 rows, without ping-pong) and each
/// tile's fixed cost per CTA (prologue, pipeline fill, epilogue: the key split's merge), in
/// the model's units of rows × keys. Least-squares fits of [`grid_cost`]'s makespan ratio to
/// 15 causal grids each (H200, runs 336–338, docs/PERF.md: 4 to 48 heads, S = 512–4096, from a
/// quarter to 1.2 waves of 128-row blocks), which the fits order right but for one 3 % case
/// (FP8 D = 128, 1,24,640); without a mask [`kv_split_pays`] decides (runs 166–167 timed no
/// causal grid).
#[derive(Debug, Clone, Copy, PartialEq)]
struct KvSplitModel {
    speed: f64,
    kv_cta: f64,
    rows128_cta: f64,
}

/// [`KvSplitModel`] per engine and head-dim bucket: f16/bf16 at D ≤ 64, FP8 at 64 and 128.
/// None for f16/bf16 at D = 128, whose key split is slow on causal grids (fitted 0.52 per
/// row; every causal grid of one wave timed 1.1–1.3× slower, runs 336–337): it keeps the key
/// split where half the SMs would idle ([`kv_split_pays`]), which its fit agrees with.
const fn kv_split_model(bucket: usize, fp8: bool) -> Option<KvSplitModel> {
    let (speed, kv_cta, rows128_cta) = match (fp8, bucket) {
        (false, ..=64) => (0.88, 61_440.0, 73_728.0),
        (false, _) => return None,
        (true, ..=64) => (0.96, 53_248.0, 65_536.0),
        (true, _) => (0.60, 28_672.0, 49_152.0),
    };
    Some(KvSplitModel {
        speed,
        kv_cta,
        rows128_cta,
    })
}

/// Whether a launch takes its bucket's key-split tile `kv` rather than a 128-row one: without a
/// mask, where 128-row blocks would leave half the SMs idle ([`kv_split_pays`]); with one,
/// where [`grid_cost`] with [`KvSplitModel`]'s terms says its grid finishes first. Causal
/// grids of up to about one wave of 128-row blocks gain (H200, µs, 128-row → key split,
/// f16 / FP8): 1,4,4096,64 46.3 → 31.2 / 44.0 → 29.1; 1,8,2048,64 27.0 → 21.8 / 25.6 → 16.8;
/// 1,16,768,64 11.7 → 10.5 / 11.1 → 9.0; FP8 2,8,1024,128 20.7 → 16.1 (runs 336–337); S = 512
/// at 128 blocks and grids past one wave lose (1,32,512,64 9.7 → 11.7).
#[allow(clippy::too_many_arguments)] // the launch's grid, as grid_cost
fn kv_split_chosen(
    kv: &HopperTile,
    bucket: usize,
    fp8: bool,
    q_len: usize,
    kv_len: usize,
    causal: bool,
    batch_heads: usize,
    sm: usize,
) -> bool {
    let model = kv_split_model(bucket, fp8);
    let (true, Some(m)) = (causal, model) else {
        return kv_split_pays(q_len, batch_heads, sm);
    };
    let split = grid_cost_with(kv, q_len, kv_len, true, batch_heads, sm, m.speed, m.kv_cta);
    let rows128 = grid_cost_with(
        &HOPPER_128_PINGPONG,
        q_len,
        kv_len,
        true,
        batch_heads,
        sm,
        1.0,
        m.rows128_cta,
    );
    split < rows128
}

/// The Hopper tile an unpinned launch of `bucket` runs for `q_len` query rows in
/// `batch_heads` (batch × query heads) blocks of rows on `sm_count` SMs: the bucket's key-split
/// tile ([`hopper_kv_split_tile`], D ≤ 64 and D = 128) when a grid of 128-row blocks would
/// fill at most half the SMs (run 166–167; past that bound it lost, 4,8,512,64 9.6 → 12.7 µs),
/// or, causal, where the key split's grid model says it finishes first (`kv_split_chosen`:
/// up to about one wave of 128-row blocks over 640+ keys at D ≤ 64, runs 336–338);
/// else the bucket's default, except that at D ≤ 64 the 192-row default gives way to the
/// 128-row ping-pong tile when a grid model (`grid_cost`: waves without a mask, longest-first
/// scheduling of the diagonal's blocks with one) says its grid finishes first (the three-stage tile until run 138, f16, µs:
/// 1,8,512,64 8.7–8.8 → 8.2, causal 9.3–9.4 → 8.4–8.5, 2,8,2048,64 52.5 → 49.8–50.0, causal
/// 47.3–47.4 → 43.3–43.7). One CTA runs per SM for both (registers), so without a mask
/// time ∝ waves × rows per CTA ÷ per-row speed (with one, `grid_cost`'s makespan); small grids (S = 512, or 2×8×2048) lose to
/// wave quantization with 192 rows (run 24: 1.03× cuDNN's time at S = 512 against 0.88×
/// with 128 rows in run 5).
///
/// At D = 128 a launch without a mask runs 176 keys per stage with ping-pong
/// ([`HOPPER_D128_WIDE`], FlashAttention-3's `tile_size_fwd_sm90` choice for non-causal
/// D = 128) where [`hopper_wide_pays`]: where its last key tile is nearly full. With a causal
/// mask both took 1.02–1.03× cuDNN's time (run 56), so causal launches keep 128 keys. Every
/// other D = 128 launch runs [`HOPPER_128_PINGPONG`] (128 keys with ping-pong, runs 134–135).
pub fn hopper_default_tile(
    bucket: usize,
    q_len: usize,
    kv_len: usize,
    causal: bool,
    batch_heads: usize,
    sm_count: usize,
) -> Option<HopperTile> {
    let tiles = hopper_tiles(bucket);
    let first = *tiles.first()?;
    let sm = sm_count.max(1);
    if let Some(kv) = hopper_kv_split_tile(bucket) {
        if kv_split_chosen(&kv, bucket, false, q_len, kv_len, causal, batch_heads, sm) {
            return Some(kv);
        }
    }
    if bucket == 128 && !causal && hopper_wide_pays(kv_len) && tiles.contains(&HOPPER_D128_WIDE) {
        return Some(HOPPER_D128_WIDE);
    }
    if bucket == 128 && tiles.contains(&HOPPER_128_PINGPONG) {
        return Some(HOPPER_128_PINGPONG);
    }
    let narrow = tiles
        .contains(&HOPPER_128_PINGPONG)
        .then_some(HOPPER_128_PINGPONG);
    let (Some(narrow), 3) = (narrow, first.consumers) else {
        return Some(first);
    };
    let cost =
        |t: &HopperTile, speed: f64| grid_cost(t, q_len, kv_len, causal, batch_heads, sm, speed);
    Some(
        if cost(&narrow, 1.0) <= cost(&first, HOPPER_192_ROW_SPEEDUP) {
            narrow
        } else {
            first
        },
    )
}

/// The grid model of [`hopper_default_tile`] and [`hopper_fp8_default_tile`]: one CTA per SM,
/// a CTA's time ∝ its rows × the keys it visits ÷ the tile's per-row `speed`, and CTAs taken
/// longest first by whichever SM frees first (the causal launches' order, `causal_lpt_heads`),
/// so a launch's time is that greedy schedule's makespan. Without a mask every CTA is alike
/// and this is waves × rows ÷ speed, the wave model it replaced; with one it also counts that
/// the diagonal's short blocks fill the last wave's gaps, where the wave model counted each
/// block as a whole one (it kept 192 rows at FP8 8,16,1024,64 causal, 9 % slower, run 325).
fn grid_cost(
    t: &HopperTile,
    q_len: usize,
    kv_len: usize,
    causal: bool,
    batch_heads: usize,
    sm: usize,
    speed: f64,
) -> f64 {
    grid_cost_with(t, q_len, kv_len, causal, batch_heads, sm, speed, 0.0)
}

/// [`grid_cost`] with a fixed cost per CTA (`per_cta`, in rows × keys), which decides between
/// grids of different block sizes when chains are short ([`KvSplitModel`]).
#[allow(clippy::too_many_arguments)] // grid_cost's grid and the CTA's fixed cost
fn grid_cost_with(
    t: &HopperTile,
    q_len: usize,
    kv_len: usize,
    causal: bool,
    batch_heads: usize,
    sm: usize,
    speed: f64,
    per_cta: f64,
) -> f64 {
    let bm = t.block_m();
    let blocks = q_len.div_ceil(bm);
    // Block i's keys, bottom-right aligned (the top-left alignment's are as many or fewer
    // per block, in the same order), longest first: block i of `blocks` has batch_heads CTAs.
    let keys = |i: usize| {
        if causal {
            (kv_len + (i + 1) * bm).saturating_sub(q_len).min(kv_len)
        } else {
            kv_len
        }
    };
    lpt_makespan(
        (0..blocks)
            .rev()
            .map(|i| (per_cta + (bm * keys(i)) as f64 / speed, batch_heads)),
        sm.max(1),
    )
}

/// The makespan of greedy longest-first list scheduling (Graham 1969) of `groups` — (length,
/// count) in non-increasing length — on `machines` identical machines. Machines are kept as
/// load levels (load, how many), so a group costs one step per level it fills, not one per item:
/// 3–27 µs for the shapes run 331 timed and up to 4096 × 4096 causal, 0.26 ms for 1024 pairs of
/// 128k rows (release build, this machine), once per launch plan of a D ≤ 64 grid.
fn lpt_makespan(groups: impl Iterator<Item = (f64, usize)>, machines: usize) -> f64 {
    let mut levels: Vec<(f64, usize)> = vec![(0.0, machines)];
    for (len, mut n) in groups {
        while n > 0 {
            let (load, free) = levels[0];
            let k = free.min(n);
            if k == free {
                levels.remove(0);
            } else {
                levels[0].1 -= k;
            }
            let to = load + len;
            let at = levels.partition_point(|l| l.0 < to);
            match levels.get_mut(at) {
                Some(l) if l.0 == to => l.1 += k,
                _ => levels.insert(at, (to, k)),
            }
            n -= k;
        }
    }
    levels.last().map_or(0.0, |l| l.0)
}

/// Dynamic shared memory of a Hopper CTA: 1 KiB alignment slack, the Q tile, the K and V
/// rings (64-column sub-tiles of 128-byte rows) and the mbarriers; mirrors
/// `HopperFwdLayout::kSmemBytes` (the generated units assert that they agree).
pub const fn hopper_smem_bytes(tile: &HopperTile, bucket: usize) -> usize {
    let sub_tiles = bucket.div_ceil(64);
    let q = tile.block_m() * sub_tiles * 128;
    let kv = tile.block_n * sub_tiles * 128;
    // A key split's exchange buffer: O (bucket / 2 floats) and m, l per consumer thread.
    let exchange = if tile.kv_split {
        (bucket / 2 + 4) * 128 * 4
    } else {
        0
    };
    1024 + q + 2 * tile.stages * kv + exchange + 8 * (2 + 4 * tile.stages)
}

/// The Hopper engine's FP8 (E4M3 in, f16/bf16 out) configs for head dim 64, 128 or 256, the
/// default first ([`hopper_fp8_default_tile`]): three consumer warpgroups (192 rows) of 128
/// keys at D = 64, 192 keys at D = 128 (Vᵀ sub-tiles of 64-byte swizzle spans,
/// kernels/fp8_vt_smem.cuh), and the same with ping-pong for causal launches there; 96 keys
/// with ping-pong at D = 256 (32-byte spans); at D = 64 also [`HOPPER_FP8_D64_NARROW`] (128
/// rows), and at D = 64 and 128 the f16/bf16 key-split tiles, which small grids take. Only
/// the tiles a launch selects are built: the sweeps' losers (128 keys with and without overlap, ping-pong or a third stage, 192 keys on
/// two warpgroups at D = 64, FlashAttention-3's 224 at D = 128, 64 keys and 96 without
/// ping-pong at D = 256; runs 191–195 and 222, docs/PERF.md) cost CI's 2-core build about a
/// minute and a half and no launch ran them (`git log -S "ht(224, 2, false, true)"` finds the
/// list, to restore them for a sweep).
pub fn hopper_fp8_tiles(head_dim: usize) -> &'static [HopperTile] {
    // The last of D = 64 and 128: the key-split tile of small grids
    // ([`hopper_fp8_default_tile`]), the f16/bf16 key split's keys and stages
    // ([`HOPPER_KV_SPLIT_64`], [`HOPPER_KV_SPLIT_128`]).
    const TILES: [HopperTile; 3] = [
        ht(192, 2, false, true),
        ht(192, 2, true, true),
        HOPPER_KV_SPLIT_128,
    ];
    // D = 64: three consumer warpgroups (O 32 and S 64 registers fit 160).
    // Then the 128-row tile of grids whose 192-row blocks leave SMs idle (the grid model of
    // `hopper_fp8_default_tile`), and the key-split tile.
    const D64: [HopperTile; 3] = [
        ht3(128, 2, false, true),
        HOPPER_FP8_D64_NARROW,
        HOPPER_KV_SPLIT_64,
    ];
    // D = 256: the O accumulator alone is 128 registers per thread; 96 keys (Vᵀ in 32-byte
    // spans) keep S at 48; 128 keys spill 20–48 bytes at 232 registers.
    const D256: [HopperTile; 1] = [ht(96, 2, true, true)];
    match head_dim {
        64 => &D64,
        128 => &TILES,
        256 => &D256,
        _ => &[],
    }
}

/// The Hopper FP8 tile a launch takes unless it names one: the head dim's first, but for a
/// causal launch at D = 128 the 192-key tile with ping-pong. H200 (V transposed in the
/// kernel; docs/PERF.md, runs 191–195): 4,16,4096,128 192 keys 651–661 µs against 731 for 128
/// keys without a mask, causal 393–395 µs with ping-pong against 411 without and 428 for 128
/// keys; 4,16,4096,64 three consumers 501–507 against 531–535 for two with 192 keys (causal
/// 317–321 against 336–339); 4,16,4096,256 96 keys with ping-pong 1193–1205 against 1332–1345
/// (64 keys).
///
/// Grids of 128-row blocks that fill at most half the SMs run the head dim's key-split tile
/// (D = 64 and 128), as the f16/bf16 default does ([`hopper_default_tile`]). Without it the
/// FP8 forward was slower than the f16 one at S = 512; run 323 (H200, CUDA graphs, µs, before
/// → after, our f16 in the same run): 1,8,512,64 10.21 → 5.49 (f16 5.51), causal 10.41 →
/// 5.62 (6.05); 2,8,512,64 10.26 → 5.60 (5.85); 1,8,512,128 11.55 → 7.44 (7.66), causal
/// 9.88 → 7.44 (7.96); 2,8,512,128 11.92 → 7.88 (9.04), causal 10.29 → 7.73 (9.18).
/// D = 64 grids whose 192-row blocks would leave SMs idle run [`HOPPER_FP8_D64_NARROW`] (the
/// f16/bf16 default's grid model, `grid_cost`).
pub fn hopper_fp8_default_tile(
    head_dim: usize,
    q_len: usize,
    kv_len: usize,
    causal: bool,
    batch_heads: usize,
    sm_count: usize,
) -> Option<HopperTile> {
    let tiles = hopper_fp8_tiles(head_dim);
    if let Some(kv) = tiles.iter().find(|t| t.kv_split) {
        if kv_split_chosen(
            kv,
            head_dim,
            true,
            q_len,
            kv_len,
            causal,
            batch_heads,
            sm_count,
        ) {
            return Some(*kv);
        }
    }
    if head_dim == 128 && causal {
        return Some(ht(192, 2, true, true));
    }
    let first = *tiles.first()?;
    if tiles.contains(&HOPPER_FP8_D64_NARROW) {
        let cost = |t: &HopperTile, speed: f64| {
            grid_cost(t, q_len, kv_len, causal, batch_heads, sm_count, speed)
        };
        if cost(&HOPPER_FP8_D64_NARROW, 1.0) <= cost(&first, HOPPER_FP8_192_ROW_SPEEDUP) {
            return Some(HOPPER_FP8_D64_NARROW);
        }
    }
    Some(first)
}

/// FP8's 128-row tile at D = 64 (two consumers, 128 keys, ping-pong and intra-warpgroup
/// overlap), for grids whose 192-row blocks leave SMs idle. Run 324 (H200, µs, 192 rows /
/// this / the same without ping-pong): 2,8,2048,64 54.8 / **46.3–46.7** / 47.7–47.8 (our f16:
/// 49.7); 2,8,1024,64 16.4 / **14.0** / 14.1–14.2; where 192-row blocks fill their waves they
/// win: 4,16,4096,64 499.8–501.7 / 594–597 / 534–538, 4,8,2048,64 79.9–80.0 / 86.5–86.6,
/// 1,16,8192,64 518.6–521.3 / 582–585. Causal (run 325, grouped longest-first order, 192 rows
/// / this): 2,8,2048,64 30.8 / **30.3–30.4**, 2,8,1024,64 17.2–17.3 / **13.4**, 4,16,4096,64
/// **300.6–300.9** / 344.4, 1,16,8192,64 **254.8–255.4** / 312.7–314.5; the wave model missed
/// 8,16,1024,64 (78.3–78.4 / 71.7–71.9), where the wave model kept 192 rows and the grid
/// model (`grid_cost`) takes 128.
pub const HOPPER_FP8_D64_NARROW: HopperTile = ht(128, 2, true, true);

/// Per-row speed of FP8's 192-row tile over [`HOPPER_FP8_D64_NARROW`] at D = 64, for the grid
/// model of [`hopper_fp8_default_tile`]: run 324's 4,16,4096,64 (11 waves of 192-row blocks in
/// 500.8 µs, 16 of 128 rows in 595.8) gives 1.23, rounded down. It picks the faster tile on
/// every shape runs 324, 325 and 331 timed.
const HOPPER_FP8_192_ROW_SPEEDUP: f64 = 1.2;

/// Dynamic shared memory of a Hopper FP8 CTA: slack, the Q tile, the K and Vᵀ rings and V's
/// landing stages (four, or two where four do not fit), which the producer transposes into the
/// Vᵀ ring (one byte per element), the mbarriers; mirrors `HopperFwdLayout<…, FP8>::kSmemBytes`
/// (the generated units assert that they agree).
pub const fn hopper_fp8_smem_bytes(tile: &HopperTile, head_dim: usize) -> usize {
    let four = fp8_smem_with_landing(tile, head_dim, 4);
    if four <= 232_448 {
        four
    } else {
        fp8_smem_with_landing(tile, head_dim, 2)
    }
}

const fn fp8_smem_with_landing(tile: &HopperTile, head_dim: usize, landing: usize) -> usize {
    // A key split's exchange buffer, as the f16/bf16 tile's ([`hopper_smem_bytes`]).
    let exchange = if tile.kv_split {
        (head_dim / 2 + 4) * 128 * 4
    } else {
        0
    };
    1024 + tile.block_m() * head_dim
        + (2 * tile.stages + landing) * tile.block_n * head_dim
        + exchange
        + 8 * (2 + 4 * tile.stages + 2 * landing)
}

/// The Hopper FP8 tile whose `_seq` entries split a dense launch's keys across CTAs (grid.y,
/// merged by the item's last CTA as the f16/bf16 split entries are): chunked prefill and
/// decode grids, whose few query blocks against long keys would leave most SMs idle. One
/// tile per head dim keeps the build small: at D = 64 the 128-row tile
/// ([`HOPPER_FP8_D64_NARROW`]; 192-row blocks waste more rows of short query chunks), at
/// D = 128 the default's 192 keys without ping-pong, at D = 256 its only tile. FP8 sequence
/// layouts (varlen, paged) are not built: these entries see dense keys only.
pub fn hopper_fp8_seq_tile(head_dim: usize) -> Option<HopperTile> {
    match head_dim {
        64 => Some(HOPPER_FP8_D64_NARROW),
        128 => Some(ht(192, 2, false, true)),
        256 => Some(ht(96, 2, true, true)),
        _ => None,
    }
    .filter(|t| hopper_fp8_tiles(head_dim).contains(t))
}

/// The extern "C" name of a Hopper FP8 forward entry (in the `FwdHopper` unit of its output
/// type and head dim): `split` names the `_seq` entry of [`hopper_fp8_seq_tile`].
pub fn hopper_fp8_entry_name(
    unit: &UnitKey,
    tile: &HopperTile,
    causal: bool,
    split: bool,
) -> String {
    format!(
        "attn_fwdh8_{}_d{}_{}_{}{}",
        unit.elem.as_str(),
        unit.head_dim,
        tile.name(),
        if causal { "causal" } else { "full" },
        if split {
            HopperVariant::Seqs.suffix()
        } else {
            ""
        }
    )
}

/// The extern "C" name of a Hopper forward entry of `variant`.
pub fn hopper_entry_name(
    unit: &UnitKey,
    tile: &HopperTile,
    causal: bool,
    variant: HopperVariant,
) -> String {
    format!(
        "attn_fwdh_{}_d{}_{}_{}{}",
        unit.elem.as_str(),
        unit.head_dim,
        tile.name(),
        if causal { "causal" } else { "full" },
        variant.suffix()
    )
}

/// The f16/bf16 `wgmma` instructions of one N (`kernels/wgmma.cuh`'s `Wgmma16`), written
/// out: inline asm needs one literal operand list per N.
fn wgmma16_source(elem: Elem, n: usize) -> String {
    let ty = elem.cuda_type();
    let ptx_ty = elem.as_str();
    let regs = n / 2; // f32 accumulators per thread
    let list = |from: usize, count: usize| {
        (from..from + count)
            .map(|i| format!("%{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let acc = (0..regs)
        .map(|i| format!("\"+f\"(d[{}][{}])", i / 4, i % 4))
        .collect::<Vec<_>>()
        .join(", ");
    // D = A·B (+ D when `accumulate`), A and B from shared memory; `trans` is the PTX
    // transpose pair: "0, 0" both K-major, "1, 1" both MN-major.
    let ss = |s: &mut String, name: &str, trans: &str| {
        let _ = writeln!(
            s,
            "    static __device__ __forceinline__ void {name}(float (&d)[{}][4], uint64_t a, uint64_t b, bool accumulate) {{",
            n / 8
        );
        let _ = writeln!(
            s,
            "        asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{}, 0;\\n\"\n            \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_ty}.{ptx_ty} {{{}}}, %{}, %{}, p, 1, 1, {trans};\\n}}\\n\"",
            regs + 2,
            list(0, regs),
            regs,
            regs + 1
        );
        let _ = writeln!(
            s,
            "            : {acc}\n            : \"l\"(a), \"l\"(b), \"r\"(static_cast<int>(accumulate)));"
        );
        let _ = writeln!(s, "    }}");
    };
    let mut s = String::new();
    let _ = writeln!(s, "template <> struct Wgmma16<{ty}, {n}> {{");
    ss(&mut s, "ss", "0, 0");
    let _ = writeln!(
        s,
        "    static __device__ __forceinline__ void rs(float (&d)[{}][4], const uint32_t (&a)[4], uint64_t b) {{",
        n / 8
    );
    let _ = writeln!(
        s,
        "        asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n\"\n            \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_ty}.{ptx_ty} {{{}}}, {{{}}}, %{}, p, 1, 1, 1;\\n}}\\n\"",
        list(0, regs),
        list(regs, 4),
        regs + 4
    );
    let _ = writeln!(
        s,
        "            : {acc}\n            : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b));"
    );
    let _ = writeln!(s, "    }}");
    // Both operands MN-major (transposed), from shared memory: the backward's dQ = dS·K.
    ss(&mut s, "ss_tt", "1, 1");
    let _ = writeln!(s, "}};");
    s
}

/// Configs of the FP8 forward (16 query rows per warp) at D = 64 and 128.
pub const FP8_TILES: [Tile; 4] = [
    tile(128, 128, 8, 2),
    tile(128, 128, 8, 3),
    tile(64, 128, 4, 2),
    tile(128, 64, 8, 2),
];

/// Configs of the FP8 mma.sync forward at D = 256: 64 keys per stage, because O's 16 × 256
/// f32 accumulator already holds 128 registers per thread (and the sm_80 path's f16-widened
/// Q fragments 64 more); 64 and 128 query rows, both within sm_89's 99 KiB of shared memory.
pub const FP8_D256_TILES: [Tile; 2] = [tile(64, 64, 4, 2), tile(128, 64, 8, 2)];

/// The FP8 mma.sync/wgmma configs of a head dim ([`FP8_TILES`] up to 128, [`FP8_D256_TILES`]
/// at 256; empty for head dims the FP8 forward lacks).
pub fn fp8_tiles(head_dim: usize) -> &'static [Tile] {
    match head_dim {
        64 | 128 => &FP8_TILES,
        256 => &FP8_D256_TILES,
        _ => &[],
    }
}

/// Which entry point of an f16/bf16 forward config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FwdMode {
    /// No mask.
    Full,
    /// Causal mask (either alignment: the diagonal offset is a runtime scalar).
    Causal,
    /// Debug builds only: `Full` without the online-softmax rescale, a planted bug for the
    /// oracle's tests.
    BrokenRescale,
    /// No causal mask, with the score-modifying features (window, softcap, ALiBi, sinks as
    /// runtime values); only in [`fwd_feature_tile`]'s config.
    FullFeatures,
    /// Causal (either alignment) with the features.
    CausalFeatures,
    /// [`FwdMode::FullFeatures`] reading K/V from a paged cache through a block table.
    FullFeaturesPaged,
    /// [`FwdMode::CausalFeatures`] reading K/V from a paged cache.
    CausalFeaturesPaged,
    /// [`FwdMode::FullFeatures`] over an E4M3 KV cache (codes + per-head scales; Q and O
    /// in the unit's type).
    FullFeaturesKvFp8,
    /// [`FwdMode::CausalFeatures`] over an E4M3 KV cache.
    CausalFeaturesKvFp8,
    /// [`FwdMode::FullFeaturesPaged`] over an E4M3 paged cache.
    FullFeaturesPagedKvFp8,
    /// [`FwdMode::CausalFeaturesPaged`] over an E4M3 paged cache.
    CausalFeaturesPagedKvFp8,
}

impl FwdMode {
    fn suffix(self) -> &'static str {
        match self {
            FwdMode::Full => "full",
            FwdMode::Causal => "causal",
            FwdMode::BrokenRescale => "broken_rescale",
            FwdMode::FullFeatures => "full_feat",
            FwdMode::CausalFeatures => "causal_feat",
            FwdMode::FullFeaturesPaged => "full_feat_paged",
            FwdMode::CausalFeaturesPaged => "causal_feat_paged",
            FwdMode::FullFeaturesKvFp8 => "full_feat_kv8",
            FwdMode::CausalFeaturesKvFp8 => "causal_feat_kv8",
            FwdMode::FullFeaturesPagedKvFp8 => "full_feat_paged_kv8",
            FwdMode::CausalFeaturesPagedKvFp8 => "causal_feat_paged_kv8",
        }
    }

    /// The general (features) entry of a mask, paging and KV cache type.
    pub fn general(causal: bool, paged: bool, kv_fp8: bool) -> FwdMode {
        match (causal, paged, kv_fp8) {
            (false, false, false) => FwdMode::FullFeatures,
            (true, false, false) => FwdMode::CausalFeatures,
            (false, true, false) => FwdMode::FullFeaturesPaged,
            (true, true, false) => FwdMode::CausalFeaturesPaged,
            (false, false, true) => FwdMode::FullFeaturesKvFp8,
            (true, false, true) => FwdMode::CausalFeaturesKvFp8,
            (false, true, true) => FwdMode::FullFeaturesPagedKvFp8,
            (true, true, true) => FwdMode::CausalFeaturesPagedKvFp8,
        }
    }

    /// Every general entry ([`FwdMode::general`]'s eight), in the catalog's order.
    pub const GENERAL: [FwdMode; 8] = [
        FwdMode::FullFeatures,
        FwdMode::CausalFeatures,
        FwdMode::FullFeaturesPaged,
        FwdMode::CausalFeaturesPaged,
        FwdMode::FullFeaturesKvFp8,
        FwdMode::CausalFeaturesKvFp8,
        FwdMode::FullFeaturesPagedKvFp8,
        FwdMode::CausalFeaturesPagedKvFp8,
    ];

    /// Whether the entry reads an E4M3 KV cache.
    pub fn kv_fp8(self) -> bool {
        matches!(
            self,
            FwdMode::FullFeaturesKvFp8
                | FwdMode::CausalFeaturesKvFp8
                | FwdMode::FullFeaturesPagedKvFp8
                | FwdMode::CausalFeaturesPagedKvFp8
        )
    }

    /// Whether a general entry also has a split-KV twin: the unmasked ones, which is what
    /// decode runs (a single query row's bottom-right causal mask hides nothing, so the
    /// launcher runs it unmasked).
    pub fn general_split(self) -> bool {
        self.features() && !self.causal()
    }

    /// Dynamic shared memory of this entry in `tile` at `bucket`.
    pub fn smem_bytes(self, tile: &Tile, bucket: usize) -> usize {
        if self.kv_fp8() {
            fwd_kv_fp8_smem_bytes(tile, bucket)
        } else {
            fwd_smem_bytes(tile, bucket)
        }
    }

    /// Whether the entry has a causal mask.
    pub fn causal(self) -> bool {
        matches!(
            self,
            FwdMode::Causal
                | FwdMode::CausalFeatures
                | FwdMode::CausalFeaturesPaged
                | FwdMode::CausalFeaturesKvFp8
                | FwdMode::CausalFeaturesPagedKvFp8
        )
    }

    /// Whether the entry runs the score-modifying features (and with them varlen batches and
    /// per-sequence key counts).
    pub fn features(self) -> bool {
        matches!(
            self,
            FwdMode::FullFeatures
                | FwdMode::CausalFeatures
                | FwdMode::FullFeaturesPaged
                | FwdMode::CausalFeaturesPaged
        ) || self.kv_fp8()
    }

    /// Whether the entry reads K/V through a block table.
    pub fn paged(self) -> bool {
        matches!(
            self,
            FwdMode::FullFeaturesPaged
                | FwdMode::CausalFeaturesPaged
                | FwdMode::FullFeaturesPagedKvFp8
                | FwdMode::CausalFeaturesPagedKvFp8
        )
    }
}

/// The variant of an FP8 forward entry (how its two MMAs run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8Mma {
    /// Both on FP8 `mma.sync` (sm_89+).
    Fp8,
    /// Q·Kᵀ on FP8 `mma.sync`, P·V in f16.
    P16,
    /// Operands widened to f16 in registers (the sm_80 path).
    Cvt,
    /// Both on Hopper's FP8 `wgmma` (sm_90a).
    Wgmma,
}

impl Fp8Mma {
    /// The entry-name suffix and CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Fp8Mma::Fp8 => "fp8",
            Fp8Mma::P16 => "p16",
            Fp8Mma::Cvt => "cvt",
            Fp8Mma::Wgmma => "wgmma",
        }
    }

    /// Whether the variant exists at `head_dim` (the one-warpgroup `wgmma` kernel keeps the
    /// whole 64 × D accumulator of O in 128 threads and stops at 128).
    pub fn supports_head_dim(self, head_dim: usize) -> bool {
        self != Fp8Mma::Wgmma || head_dim <= 128
    }

    /// Whether `arch`'s cubin holds this variant.
    pub fn compiled_for(self, arch: Arch) -> bool {
        match self {
            Fp8Mma::Cvt => true,
            Fp8Mma::Fp8 | Fp8Mma::P16 => arch >= Arch::Sm89,
            Fp8Mma::Wgmma => arch == Arch::Sm90a,
        }
    }
}

/// The extern "C" name of an f16/bf16 forward entry.
pub fn fwd_entry_name(unit: &UnitKey, tile: &Tile, mode: FwdMode, split: bool) -> String {
    // The E4M3-cache entries run their own ring depth; the name says which.
    let tile = if mode.kv_fp8() {
        Tile {
            stages: kv_fp8_stages(tile, unit.head_dim),
            ..*tile
        }
    } else {
        *tile
    };
    format!(
        "attn_fwd_{}_d{}_{}_{}{}",
        unit.elem.as_str(),
        unit.head_dim,
        tile.entry_part(),
        mode.suffix(),
        if split { "_split" } else { "" }
    )
}

/// The extern "C" name of an FP8 forward entry.
pub fn fp8_entry_name(unit: &UnitKey, tile: &Tile, causal: bool, mma: Fp8Mma) -> String {
    format!(
        "attn_fp8_{}_d{}_{}_{}_{}",
        unit.elem.as_str(),
        unit.head_dim,
        tile.entry_part(),
        if causal { "causal" } else { "full" },
        mma.as_str()
    )
}

/// The extern "C" name of the FP8 Vᵀ pass for a head dim.
pub fn fp8_transpose_entry_name(head_dim: usize) -> String {
    format!("attn_fp8_v_transpose_d{head_dim}")
}

/// Whether `family` has compile units of its own for `arch`. sm_89 has them only for the FP8
/// forward (FP8 `mma.sync` exists from sm_89). The others' sm_89 units held the same source as
/// sm_80's, less the tiles over 99 KiB (the backward's 99 KiB tile is in sm_80's units,
/// [`bwd_tiles`]), and an sm_80 cubin runs on every sm_8x part ([`Arch::runs_on`];
/// FlashAttention-2 ships sm_80 SASS for Ada the same way), so [`crate::cubin::select`] gives
/// an sm_89 device the sm_80 cubin and the launchers' shared-memory checks keep it to the
/// tiles that fit. Not compiling them takes about three minutes off CI's two-core build.
pub fn has_own_unit(family: Family, arch: Arch) -> bool {
    arch != Arch::Sm89 || family == Family::Fp8Fwd
}

/// Every compile unit of the catalog for `archs` (every arch when empty), optionally only
/// the given head dims (a development filter; an empty filter keeps all).
pub fn units(archs: &[Arch], head_dims: &[usize]) -> Vec<UnitKey> {
    let keep_d = |d: usize| head_dims.is_empty() || head_dims.contains(&d);
    let mut out = Vec::new();
    for &arch in &Arch::ALL {
        if !archs.is_empty() && !archs.contains(&arch) {
            continue;
        }
        for elem in [Elem::F16, Elem::Bf16] {
            for &d in FWD_HEAD_DIM_BUCKETS
                .iter()
                .filter(|&&d| keep_d(d) && has_own_unit(Family::Fwd, arch))
            {
                out.push(UnitKey {
                    family: Family::Fwd,
                    arch,
                    elem,
                    head_dim: d,
                });
            }
            if arch == Arch::Sm90a {
                for &d in FWD_HEAD_DIM_BUCKETS.iter().filter(|&&d| keep_d(d)) {
                    out.push(UnitKey {
                        family: Family::FwdHopper,
                        arch,
                        elem,
                        head_dim: d,
                    });
                }
            }
            for &d in FP8_HEAD_DIMS.iter().filter(|&&d| keep_d(d)) {
                out.push(UnitKey {
                    family: Family::Fp8Fwd,
                    arch,
                    elem,
                    head_dim: d,
                });
            }
        }
        for family in [Family::Fp8Prep, Family::Merge, Family::KvAppend] {
            if has_own_unit(family, arch) {
                out.push(UnitKey {
                    family,
                    arch,
                    elem: Elem::F16,
                    head_dim: 0,
                });
            }
        }
        for elem in [Elem::F16, Elem::Bf16] {
            for &d in FWD_HEAD_DIM_BUCKETS
                .iter()
                .filter(|&&d| keep_d(d) && has_own_unit(Family::Decode, arch))
            {
                out.push(UnitKey {
                    family: Family::Decode,
                    arch,
                    elem,
                    head_dim: d,
                });
            }
        }
        for elem in [Elem::F16, Elem::Bf16] {
            for &d in FWD_HEAD_DIM_BUCKETS.iter().filter(|&&d| {
                keep_d(d) && has_own_unit(Family::Bwd, arch) && bwd_tile(arch, d).is_some()
            }) {
                out.push(UnitKey {
                    family: Family::Bwd,
                    arch,
                    elem,
                    head_dim: d,
                });
            }
        }
    }
    out
}

/// The backward's tile for an arch and head-dim bucket: (BLOCK_M queries per inner step,
/// BLOCK_N keys per CTA, 8 warps, Q/dO stages). At D = 64, 128 queries per step where they
/// fit, else 64. Up to D = 128, 128 keys per CTA where two stages fit (FlashAttention-2's
/// 128-key blocks: half the dQ atomics of 64 keys, which were what limited this kernel;
/// 1.28–1.39× faster on the H100, docs/PERF.md runs 114–115); else 64 keys with two stages,
/// else one, else (above D = 128) 32 keys with one stage; `None` where even that does not
/// fit. Above D = 128 the dK/dV accumulators (DK floats per thread at 64 keys) leave no
/// registers for 128. The same head-dim buckets as the forward: any D % 8 == 0 up to 256
/// runs in the next bucket.
pub fn bwd_tile(arch: Arch, bucket: usize) -> Option<Tile> {
    bwd_tile_fitting(bucket, arch.max_smem())
}

/// [`bwd_tile`]'s choice for `smem` bytes of shared memory per block. 128 keys only up to
/// D = 128 (the dK/dV accumulators); 32 keys only above it, where no 64-key tile fits 99 KiB
/// (FlashAttention-2 runs 64 × 32 blocks on those parts too). 128 queries per step only up to
/// D = 64 exactly, as FlashAttention-2's `Flash_bwd_kernel_traits<64, 128, 128, 8, …>`: half the
/// query steps per CTA, so half of each step's fixed cost (10 % faster at 4,16,4096,64 on the
/// H200, docs/PERF.md run 317); it needs 162 KiB, so 99 KiB parts keep 64. At D = 32 its
/// general entry spilled 40 bytes on sm_80, and it was not timed: D = 32 keeps 64 queries.
fn bwd_tile_fitting(bucket: usize, smem: usize) -> Option<Tile> {
    [
        (128, 128, 2),
        (64, 128, 2),
        (64, 64, 2),
        (64, 64, 1),
        (64, 32, 1),
    ]
    .into_iter()
    .map(|(m, n, stages)| tile(m, n, 8, stages))
    .filter(|t| match (t.block_m, t.block_n) {
        (128, _) => bucket == 64,
        (_, 128) => bucket <= 128,
        (_, 32) => bucket > 128,
        _ => true,
    })
    .find(|t| bwd_smem_bytes(t, bucket) <= smem)
}

/// Dynamic shared memory per block of the sm_8x parts other than the A100 and A30 (sm_86,
/// sm_87, sm_89: 99 KiB), which run sm_80's cubins.
/// The one definition of that limit: `Arch::Sm89.max_smem()` and the E4M3 cache ring use it.
pub const SM8X_SMALL_SMEM: usize = 101_376;

/// Every backward tile a unit of `arch` instantiates, the preferred first: [`bwd_tile`]'s,
/// then, where that one needs more than [`SM8X_SMALL_SMEM`], the tile a 99 KiB part runs
/// (D = 96 and 128: 64 keys, one stage; D = 160 to 256: 32 keys, one stage, with V sharing
/// its room above D = 192, [`bwd_v_shared`]). sm_86/87/89 run the sm_80 cubin, so without it
/// they had no backward above D = 64; sm_90a carries it too, so that a launcher limited to
/// 99 KiB ([`crate::FlashAttention::with_shared_memory_limit`]) runs it on an H100 in the GPU
/// tests.
pub fn bwd_tiles(arch: Arch, bucket: usize) -> Vec<Tile> {
    let Some(primary) = bwd_tile(arch, bucket) else {
        return Vec::new();
    };
    let mut tiles = vec![primary];
    if bwd_smem_bytes(&primary, bucket) > SM8X_SMALL_SMEM {
        tiles.extend(bwd_tile_fitting(bucket, SM8X_SMALL_SMEM));
    }
    tiles
}

/// The backward tile a device with `smem` bytes of shared memory per block runs from `arch`'s
/// cubin: the first of [`bwd_tiles`] that fits.
pub fn bwd_tile_within(arch: Arch, bucket: usize, smem: usize) -> Option<Tile> {
    bwd_tiles(arch, bucket)
        .into_iter()
        .find(|t| bwd_smem_bytes(t, bucket) <= smem)
}

/// Shared memory of the backward tile for a bucket: K, V, the Q/dO stages, the Pᵀ/dSᵀ tiles
/// (inside V's where [`bwd_v_shared`]) and the LSE/Δ rows (kernels/bwd_kernel.cuh's
/// `BwdConfig::kSmemBytes`).
pub fn bwd_smem_bytes(t: &Tile, head_dim: usize) -> usize {
    let pitch = head_dim.div_ceil(64) * 64;
    let p_tiles = if bwd_v_shared(t, head_dim) {
        0
    } else {
        2 * t.block_n * t.block_m
    };
    let elems = 2 * t.block_n * pitch + t.stages * 2 * t.block_m * pitch + p_tiles;
    elems * 2 + t.stages * 2 * t.block_m * 4
}

/// Whether the backward tile keeps its Pᵀ/dSᵀ tiles in V's room and loads V again with every
/// query block: the 32-key tile above D = 192, which otherwise misses 99 KiB by 5.5 KiB
/// (kernels/bwd_kernel.cuh `BwdConfig::kVShared`, the same rule).
pub fn bwd_v_shared(t: &Tile, bucket: usize) -> bool {
    t.block_n == 32 && bucket > 192
}

/// The extern "C" names of a backward unit's main kernel: causal or not, and the general
/// entry (`_feat`: the forward's score-modifying features and packed sequences, as runtime
/// values) or the plain one.
pub fn bwd_entry_name(unit: &UnitKey, tile: &Tile, causal: bool, features: bool) -> String {
    // The unit's preferred tile keeps the short name; the 99 KiB one names its tile.
    let tile_part = if bwd_tile(unit.arch, unit.head_dim) == Some(*tile) {
        String::new()
    } else {
        format!("_{}", tile.entry_part())
    };
    format!(
        "attn_bwd_{}_d{}{tile_part}_{}{}",
        unit.elem.as_str(),
        unit.head_dim,
        if causal { "causal" } else { "full" },
        if features { "_feat" } else { "" }
    )
}

/// Head-dim buckets whose backward units have debug entries (tile dumps of the mma.sync
/// backward's plain entries, `FlashAttention::backward_debug`).
pub const BWD_DEBUG_HEAD_DIMS: [usize; 2] = [64, 128];

/// The sinks' gradient pass of a backward unit (type-independent).
pub const BWD_DSINKS_ENTRY: &str = "attn_bwd_dsinks";

/// Whether a backward unit carries the Hopper (wgmma) backward: sm_90a, buckets 64, 128 and
/// 256 (`kernels/bwd_hopper_kernel.cuh`); other buckets run the mma.sync backward everywhere.
pub fn bwd_hopper_bucket(arch: Arch, bucket: usize) -> bool {
    arch == Arch::Sm90a && matches!(bucket, 64 | 128 | 256)
}

/// Query rows per step of the Hopper backward (`HopperBwdLayout::kBM`, checked by a
/// `static_assert` in each unit): its LSE₂/Δ/dQ workspaces, Δ pass and semaphores are laid out
/// in blocks of these rows, whatever the mma.sync tile's `block_m` is.
pub const BWD_HOPPER_BLOCK_M: usize = 64;

/// Keys per CTA of the Hopper backward (`HopperBwdLayout::kBN`): 128 (64 per consumer
/// warpgroup), or 64 at D = 256, where both warpgroups share the keys and split the head dim.
pub const fn bwd_hopper_block_n(bucket: usize) -> usize {
    if bucket == 256 {
        64
    } else {
        128
    }
}

/// Shared memory of the Hopper backward (`HopperBwdLayout::kSmemBytes`): K and V
/// ([`bwd_hopper_block_n`] keys), and per stage (three at D = 64, two above): Q and dO
/// (64 rows), a dSᵀ tile, an f32 dQ staging buffer (at D = 256 instead 2 KiB per consumer
/// warp, outside the stages), the LSE₂ and Δ rows; one mbarrier plus four per stage; and
/// 1024 bytes to align the swizzled tiles.
pub const fn bwd_hopper_smem_bytes(bucket: usize) -> usize {
    let block_n = bwd_hopper_block_n(bucket);
    let k = block_n * bucket * 2;
    let q = 64 * bucket * 2;
    // A dQ tile per stage, or (D = 256, the split-column CTAs) 2 KiB per consumer warp.
    let (dq, dq_warps) = if bucket == 256 {
        (0, 8 * 2048)
    } else {
        (64 * bucket * 4, 0)
    };
    let stages = if bucket == 64 { 3 } else { 2 };
    1024 + 2 * k
        + stages * (2 * q + block_n * 128 + dq + 2 * 64 * 4)
        + dq_warps
        + (7 + 4 * stages) * 8
        + 32
        + 2 * stages * 16
}

/// Which main entry of the Hopper backward a launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwdHopperVariant {
    /// Dense problems without features.
    Plain,
    /// Packed sequences without features (`_seqs`): the plain entry's walk and P, plus each
    /// CTA's sequence and a key mask on its last key block (kernels/bwd_hopper_kernel.cuh).
    /// Not for deterministic launches.
    Seqs,
    /// The general entry (`_feat`): window, softcap, ALiBi, and packed sequences with them or
    /// in deterministic mode.
    Features,
}

impl BwdHopperVariant {
    /// Every variant, in the order the units emit them.
    pub const ALL: [BwdHopperVariant; 3] = [Self::Plain, Self::Seqs, Self::Features];

    /// The variant for a launch: `features` (the problem has any), `packed` (a sequence
    /// layout), `deterministic`.
    pub fn pick(features: bool, packed: bool, deterministic: bool) -> Self {
        if features || (packed && deterministic) {
            Self::Features
        } else if packed {
            Self::Seqs
        } else {
            Self::Plain
        }
    }
}

/// The Hopper backward's main entry of a unit for `variant`.
pub fn bwd_hopper_entry_name(unit: &UnitKey, causal: bool, variant: BwdHopperVariant) -> String {
    format!(
        "attn_bwd_wg_{}_d{}_{}{}",
        unit.elem.as_str(),
        unit.head_dim,
        if causal { "causal" } else { "full" },
        match variant {
            BwdHopperVariant::Plain => "",
            BwdHopperVariant::Seqs => "_seqs",
            BwdHopperVariant::Features => "_feat",
        }
    )
}

/// The Hopper backward's preprocessing (Δ and the padded LSE₂) and dQ conversion entries.
pub fn bwd_hopper_prep_entry_names(unit: &UnitKey) -> (String, String) {
    (
        format!("attn_bwd_wg_prep_{}", unit.elem.as_str()),
        format!("attn_bwd_wg_dq_{}", unit.elem.as_str()),
    )
}

/// The Δ = rowsum(dO∘O) pass and the dQ conversion pass of a backward unit.
pub fn bwd_prep_entry_names(unit: &UnitKey) -> (String, String) {
    (
        format!("attn_bwd_delta_{}", unit.elem.as_str()),
        format!("attn_bwd_dq_{}", unit.elem.as_str()),
    )
}

/// The extern "C" name of the LSE merge kernel for a storage type.
pub fn lse_merge_entry_name(elem: Elem) -> String {
    format!("attn_lse_merge_{}", elem.as_str())
}

/// The extern "C" name of the KV-append kernel for `elem` rows into an `elem` cache, or into
/// an E4M3 cache (`e4m3`).
pub fn kv_append_entry_name(elem: Elem, e4m3: bool) -> String {
    format!(
        "attn_kv_append_{}{}",
        elem.as_str(),
        if e4m3 { "_e4m3" } else { "" }
    )
}

/// Query-row buckets of the decode kernel: a launch of `rows` query rows (after GQA packing)
/// runs the smallest bucket that holds them.
pub const DECODE_ROWS: [usize; 4] = [1, 2, 4, 8];

/// The decode kernel's row bucket for `rows` query rows, `None` above the largest.
pub fn decode_rows_bucket(rows: usize) -> Option<usize> {
    DECODE_ROWS.iter().copied().find(|&r| r >= rows.max(1))
}

/// Dynamic shared memory of a decode CTA (`DecodeConfig::kSmemBytes` in
/// kernels/decode_kernel.cuh, which this mirrors): three ring stages of K and V rows
/// ([`decode_keys`] each), or the merge of the warps' states if larger.
pub const fn decode_smem_bytes(bucket: usize, kv8: bool, rows: usize) -> usize {
    let warps = decode_warps(bucket, kv8);
    let ring = 3 * 2 * decode_keys(bucket, kv8) * decode_row_bytes(bucket, kv8);
    let merge = (warps * rows * decode_ring_head_dim(bucket, kv8) + 3 * warps * rows) * 4;
    if ring > merge {
        ring
    } else {
        merge
    }
}

/// The head dim of a decode entry's ring rows (`DecodeConfig::kRingDk`): the bucket, except
/// where the tensor-core stage runs on rows padded with zero columns: bucket 96 on the stage
/// of 128, for f16/bf16 caches 160 on 192 and 224 on 256, and for E4M3 caches 160–224 on 256
/// (the stage's XOR swizzle wants a power-of-two count of 16-byte chunks per row).
pub const fn decode_ring_head_dim(bucket: usize, kv8: bool) -> usize {
    match (bucket, kv8) {
        (96, _) => 128,
        (b, _) if b <= 128 => b,
        (_, true) => 256,
        (b, false) if b <= 192 => 192,
        _ => 256,
    }
}

/// Warps of a decode CTA (`DecodeConfig::kWarps`): four, or two on f16/bf16 rows of 192 or
/// 256, whose 32-key stages keep the ring within 96 KiB (E4M3 rows of 256 keep four warps and
/// 64-key stages in the same 96 KiB).
pub const fn decode_warps(bucket: usize, kv8: bool) -> usize {
    if !kv8 && decode_ring_head_dim(bucket, kv8) >= 192 {
        2
    } else {
        4
    }
}

const fn decode_row_bytes(bucket: usize, kv8: bool) -> usize {
    decode_ring_head_dim(bucket, kv8) * if kv8 { 1 } else { 2 }
}

/// Keys per ring stage of a decode entry (`DecodeConfig::kKeys`): ~8 KiB of K (and of V), at
/// least a 16-key block per warp — 64 keys (32 KiB of f16 K and V) at D = 128, 32 for f16/bf16
/// at D ≥ 192, 64 for E4M3 at D ≥ 160.
pub const fn decode_keys(bucket: usize, kv8: bool) -> usize {
    let fit = 8192 / decode_row_bytes(bucket, kv8);
    let least = 16 * decode_warps(bucket, kv8);
    if fit > least {
        fit
    } else {
        least
    }
}

/// The extern "C" name of a decode entry: `attn_dec_f16_d128_r4`, `attn_dec_bf16_d64_r1_kv8`.
pub fn decode_entry_name(unit: &UnitKey, rows: usize, kv8: bool) -> String {
    format!(
        "attn_dec_{}_d{}_r{rows}{}",
        unit.elem.as_str(),
        unit.head_dim,
        if kv8 { "_kv8" } else { "" }
    )
}

/// The CUDA source of one unit's cubin, release (`debug == false`) or debug. The debug
/// build holds only the f16/bf16 forward's debug configs (with tile dumps and the planted
/// bug); `None` means the unit has no debug cubin.
pub fn unit_source(unit: &UnitKey, debug: bool) -> Option<String> {
    let mut s = format!(
        "// Generated by attn-kernels' build.rs from src/catalog.rs ({}, sm_{}, {}): do not edit.\n",
        unit.name(),
        unit.arch.nvcc_name(),
        if debug { "debug" } else { "release" }
    );
    match unit.family {
        Family::Fwd => {
            s.push_str("#include \"fwd_kernel.cuh\"\n\n");
            let ty = unit.elem.cuda_type();
            let d = unit.head_dim;
            let mut any = false;
            for t in fwd_tiles_for(unit.arch, d) {
                if debug && !t.debug {
                    continue;
                }
                any = true;
                let c = &t.tile;
                let mut modes = vec![(FwdMode::Full, false), (FwdMode::Causal, false)];
                if debug {
                    modes.push((FwdMode::BrokenRescale, false));
                } else if t.split {
                    modes.push((FwdMode::Full, true));
                    modes.push((FwdMode::Causal, true));
                }
                if !debug && fwd_feature_tile(d) == Some(*c) {
                    for mode in FwdMode::GENERAL {
                        modes.push((mode, false));
                        if mode.general_split() {
                            modes.push((mode, true));
                        }
                    }
                }
                for (mode, split) in modes {
                    let stages = if mode.kv_fp8() {
                        kv_fp8_stages(c, d)
                    } else {
                        c.stages
                    };
                    let _ = writeln!(
                        s,
                        "ATTN_FWD_ENTRY({}, {ty}, {d}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                        fwd_entry_name(unit, c, mode, split),
                        c.block_m,
                        c.block_n,
                        stages,
                        c.warps,
                        mode.causal(),
                        mode == FwdMode::BrokenRescale,
                        split,
                        mode.features(),
                        mode.paged(),
                        mode.kv_fp8()
                    );
                }
            }
            any.then_some(s)
        }
        Family::Fp8Fwd => {
            if debug {
                return None;
            }
            s.push_str("#include \"fwd_fp8_kernel.cuh\"\n\n");
            let ty = unit.elem.cuda_type();
            let d = unit.head_dim;
            for c in fp8_tiles(d) {
                for mma in [Fp8Mma::Fp8, Fp8Mma::P16, Fp8Mma::Cvt, Fp8Mma::Wgmma] {
                    if !mma.compiled_for(unit.arch) || !mma.supports_head_dim(d) {
                        continue;
                    }
                    for causal in [false, true] {
                        let _ = writeln!(
                            s,
                            "ATTN_FP8_ENTRY_{}({}, {ty}, {d}, {}, {}, {}, {}, {causal})",
                            mma.as_str().to_uppercase(),
                            fp8_entry_name(unit, c, causal, mma),
                            c.block_m,
                            c.block_n,
                            c.stages,
                            c.warps,
                        );
                    }
                }
            }
            Some(s)
        }
        Family::FwdHopper => {
            s.push_str("#include \"fwd_hopper_kernel.cuh\"\n\nnamespace attn {\n");
            let d = unit.head_dim;
            let tiles: Vec<HopperTile> = if debug {
                hopper_debug_tile(d).into_iter().collect()
            } else {
                hopper_tiles(d).to_vec()
            };
            if debug && tiles.is_empty() {
                return None;
            }
            let mut ns: Vec<usize> = tiles.iter().map(|t| t.block_n).collect();
            ns.push(d);
            ns.sort_unstable();
            ns.dedup();
            for n in ns {
                s.push_str(&wgmma16_source(unit.elem, n));
            }
            s.push_str("} // namespace attn\n\n");
            let ty = unit.elem.cuda_type();
            for t in &tiles {
                // The launcher sizes shared memory from the catalog's mirror of the layout.
                let _ = writeln!(
                    s,
                    "static_assert(attn::HopperFwdLayout<{d}, {}, {}, false, {}, {}>::kSmemBytes == {}, \"src/catalog.rs hopper_smem_bytes\");",
                    t.block_n,
                    t.stages,
                    t.consumers,
                    t.kv_split,
                    hopper_smem_bytes(t, d)
                );
                // The debug unit: the dense entries of its one tile, with tile dumps.
                let variants = if debug {
                    vec![HopperVariant::Dense]
                } else {
                    HopperVariant::ALL
                        .into_iter()
                        .filter(|v| v.is_built(d, t))
                        .collect()
                };
                for variant in variants {
                    let features = variant == HopperVariant::Features;
                    let seqs = variant == HopperVariant::Seqs;
                    for causal in [false, true] {
                        let _ = writeln!(
                            s,
                            "ATTN_FWD_HOPPER_ENTRY({}, {ty}, {d}, {}, {}, {causal}, {}, {}, {features}, {}, {seqs}, {}, {})",
                            hopper_entry_name(unit, t, causal, variant),
                            t.block_n,
                            t.stages,
                            t.pingpong,
                            t.intra,
                            t.consumers,
                            hopper_persistent(d, t, causal, variant, false),
                            t.kv_split
                        );
                    }
                }
            }
            if debug {
                return Some(s);
            }
            // FP8 (E4M3 in, this unit's type out) where the head dim is an FP8 one.
            for t in hopper_fp8_tiles(d) {
                let _ = writeln!(
                    s,
                    "static_assert(attn::HopperFwdLayout<{d}, {}, {}, true, {}, {}>::kSmemBytes == {}, \"src/catalog.rs hopper_fp8_smem_bytes\");",
                    t.block_n,
                    t.stages,
                    t.consumers,
                    t.kv_split,
                    hopper_fp8_smem_bytes(t, d)
                );
                let splits: &[bool] = if hopper_fp8_seq_tile(d) == Some(*t) {
                    &[false, true]
                } else {
                    &[false]
                };
                for &split in splits {
                    let variant = if split {
                        HopperVariant::Seqs
                    } else {
                        HopperVariant::Dense
                    };
                    for causal in [false, true] {
                        let _ = writeln!(
                            s,
                            "ATTN_FWD_HOPPER_FP8_ENTRY({}, {ty}, {d}, {}, {}, {causal}, {}, {}, {}, {split}, {}, {})",
                            hopper_fp8_entry_name(unit, t, causal, split),
                            t.block_n,
                            t.stages,
                            t.pingpong,
                            t.intra,
                            t.consumers,
                            hopper_persistent(d, t, causal, variant, true),
                            t.kv_split
                        );
                    }
                }
            }
            Some(s)
        }
        Family::Bwd => {
            s.push_str("#include \"bwd_kernel.cuh\"\n\n");
            let ty = unit.elem.cuda_type();
            let d = unit.head_dim;
            let tiles = bwd_tiles(unit.arch, d);
            if tiles.is_empty() {
                return None;
            }
            // Debug units: tile dumps (P, dP, dS, Δ) from the plain entries of the preferred
            // tile alone, at the buckets the forward's debug build covers; the other passes run
            // release code.
            if debug && !BWD_DEBUG_HEAD_DIMS.contains(&d) {
                return None;
            }
            let feature_variants: &[bool] = if debug { &[false] } else { &[false, true] };
            for t in &tiles[..if debug { 1 } else { tiles.len() }] {
                for causal in [false, true] {
                    for &features in feature_variants {
                        let _ = writeln!(
                            s,
                            "ATTN_BWD_ENTRY({}, {ty}, {d}, {}, {}, {}, {}, {causal}, {features})",
                            bwd_entry_name(unit, t, causal, features),
                            t.block_m,
                            t.block_n,
                            t.warps,
                            t.stages
                        );
                    }
                }
            }
            if debug {
                return Some(s);
            }
            let (pre, post) = bwd_prep_entry_names(unit);
            let _ = writeln!(s, "ATTN_BWD_PREP_ENTRY({pre}, {post}, {ty})");
            let _ = writeln!(s, "ATTN_BWD_DSINKS_ENTRY({BWD_DSINKS_ENTRY})");
            if bwd_hopper_bucket(unit.arch, d) {
                s.push_str("\n#include \"bwd_hopper_kernel.cuh\"\n\nnamespace attn {\n");
                // Sᵀ/dPᵀ (64 queries), dK/dV (the warpgroup's columns), dQ (half the columns;
                // D = 256: 64-column chunks).
                let mut ns = if d == 256 {
                    vec![64, 128]
                } else {
                    vec![64, d, d / 2]
                };
                ns.sort_unstable();
                ns.dedup();
                for n in ns {
                    s.push_str(&wgmma16_source(unit.elem, n));
                }
                s.push_str("} // namespace attn\n\n");
                let _ = writeln!(
                    s,
                    "static_assert(attn::HopperBwdLayout<{d}>::kSmemBytes == {}, \"src/catalog.rs bwd_hopper_smem_bytes\");",
                    bwd_hopper_smem_bytes(d)
                );
                let _ = writeln!(
                    s,
                    "static_assert(attn::HopperBwdLayout<{d}>::kBM == {BWD_HOPPER_BLOCK_M}, \"src/catalog.rs BWD_HOPPER_BLOCK_M\");"
                );
                for causal in [false, true] {
                    for variant in BwdHopperVariant::ALL {
                        let _ = writeln!(
                            s,
                            "ATTN_BWD_HOPPER_ENTRY({}, {ty}, {d}, {causal}, {}, {})",
                            bwd_hopper_entry_name(unit, causal, variant),
                            variant == BwdHopperVariant::Features,
                            variant == BwdHopperVariant::Seqs
                        );
                    }
                }
                let (pre, post) = bwd_hopper_prep_entry_names(unit);
                let _ = writeln!(s, "ATTN_BWD_HOPPER_PREP_ENTRY({pre}, {post}, {ty})");
            }
            Some(s)
        }
        Family::Merge => {
            if debug {
                return None;
            }
            s.push_str("#include \"lse_merge.cuh\"\n\n");
            for elem in [Elem::F16, Elem::Bf16] {
                let _ = writeln!(
                    s,
                    "ATTN_LSE_MERGE_ENTRY({}, {})",
                    lse_merge_entry_name(elem),
                    elem.cuda_type()
                );
            }
            Some(s)
        }
        Family::KvAppend => {
            if debug {
                return None;
            }
            s.push_str("#include \"kv_append.cuh\"\n\n");
            for elem in [Elem::F16, Elem::Bf16] {
                for e4m3 in [false, true] {
                    let _ = writeln!(
                        s,
                        "ATTN_KV_APPEND_ENTRY({}, {}, {e4m3})",
                        kv_append_entry_name(elem, e4m3),
                        elem.cuda_type()
                    );
                }
            }
            Some(s)
        }
        Family::Decode => {
            if debug {
                return None;
            }
            s.push_str("#include \"decode_kernel.cuh\"\n\n");
            let ty = unit.elem.cuda_type();
            let d = unit.head_dim;
            for kv8 in [false, true] {
                for rows in DECODE_ROWS {
                    let _ = writeln!(
                        s,
                        "ATTN_DECODE_ENTRY({}, {ty}, {kv8}, {d}, {rows})",
                        decode_entry_name(unit, rows, kv8)
                    );
                }
            }
            Some(s)
        }
        Family::Fp8Prep => {
            if debug {
                return None;
            }
            s.push_str("#include \"fp8_prep.cuh\"\n\n");
            for d in HOPPER_FP8_HEAD_DIMS {
                let _ = writeln!(
                    s,
                    "ATTN_FP8_V_TRANSPOSE_ENTRY({}, {d})",
                    fp8_transpose_entry_name(d)
                );
            }
            Some(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_cost_is_the_wave_model_without_a_mask_and_counts_the_diagonal_with_one() {
        let t = HOPPER_128_PINGPONG;
        // 4 × 16 × 32 blocks of 128 rows on 132 SMs: 16 waves.
        assert_eq!(
            grid_cost(&t, 4096, 4096, false, 64, 132, 1.0),
            (16 * 128 * 4096) as f64
        );
        // Causal, one pair of 32 blocks on 132 SMs: every block has its own SM, so the
        // longest (all 4096 keys) sets the time.
        assert_eq!(
            grid_cost(&t, 4096, 4096, true, 1, 132, 1.0),
            (128 * 4096) as f64
        );
        // Two SMs, lengths 4, 3, 2, 1: longest first gives {4, 1} and {3, 2}, makespan 5.
        let groups = [(4.0, 1), (3.0, 1), (2.0, 1), (1.0, 1)];
        assert_eq!(lpt_makespan(groups.into_iter(), 2), 5.0);
        // Equal items fill level by level: 5 items of 1 on 2 machines end at 3.
        assert_eq!(lpt_makespan([(1.0, 5)].into_iter(), 2), 3.0);
        assert_eq!(lpt_makespan(std::iter::empty(), 4), 0.0);
    }

    proptest::proptest! {
        /// The level walk is greedy longest-first scheduling: the same makespan as assigning
        /// each item in turn to a least-loaded machine (integer lengths, so loads compare
        /// exactly).
        #[test]
        fn lpt_makespan_matches_item_by_item_scheduling(
            machines in 1usize..20,
            mut groups in proptest::collection::vec((0u32..50, 1usize..40), 0..12),
        ) {
            groups.sort_by_key(|g| std::cmp::Reverse(g.0));
            let mut loads = vec![0u64; machines];
            for &(len, n) in &groups {
                for _ in 0..n {
                    let least = (0..machines).min_by_key(|&m| loads[m]).unwrap_or(0);
                    loads[least] += u64::from(len);
                }
            }
            let want = loads.iter().copied().max().unwrap_or(0) as f64;
            let got = lpt_makespan(groups.iter().map(|&(len, n)| (f64::from(len), n)), machines);
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn d64_default_takes_the_tile_run_331_timed_faster() {
        // (batch, heads, S, causal, rows of the faster tile); f16, 132 SMs.
        for (b, h, s, causal, rows) in [
            (8, 16, 1024, true, 128),
            (4, 16, 1024, true, 128),
            (16, 32, 1024, true, 128),
            (1, 16, 1536, true, 128),
            (1, 16, 4096, true, 192),
            (2, 8, 4096, true, 192),
            (4, 16, 4096, true, 192),
            // Run 138: 96.8 against 104.8 µs without a mask.
            (8, 16, 1024, false, 192),
            (4, 16, 4096, false, 192),
        ] {
            let t = hopper_default_tile(64, s, s, causal, b * h, 132).unwrap();
            assert_eq!(
                t.block_m(),
                rows,
                "{b},{h},{s},64 causal {causal}: {}",
                t.name()
            );
        }
    }
}
