//! The FP8 (E4M3) forward: Q, K, V as E4M3 codes with per-head f32 scales (quantized by
//! [`attn_quant`]), O in f16 or bf16, LSE optional.
//!
//! The kernel (kernels/fwd_fp8_kernel.cuh) runs the MMAs on raw codes and folds the scales
//! into the softmax scale (`q_scale·k_scale`) and the output normalization (`v_scale`), as
//! FlashAttention-3 does. 8-bit MMAs need V with keys contiguous (Vᵀ, keys permuted within
//! 32-key groups). The Hopper engine's producer warps build it in shared memory from each V
//! stage (kernels/fp8_vt_smem.cuh, as FlashAttention-3 does); the other variants run a
//! memory-bound pass first (kernels/fp8_prep.cuh) into a workspace the launcher owns, on the
//! same stream, so timing one forward times both.
//!
//! Five variants of the kernel (the default per device:
//! [`FlashAttention::fp8_default_variant`]): [`Fp8Variant::Hopper`] (the Hopper engine's
//! TMA + warp-specialized wgmma mainloop, `kernels/fwd_hopper_kernel.cuh`, the default on
//! sm_90), [`Fp8Variant::Wgmma`] (Hopper: both MMAs on `wgmma.m64nNk32.e4m3`, P cast to E4M3 after a
//! 2⁸ gain), [`Fp8Variant::Fp8`] (the same math on `mma.m16n8k32.e4m3`, native on Ada),
//! [`Fp8Variant::P16`] (P·V in f16) and [`Fp8Variant::Cvt`] (codes widened to f16 in
//! registers, for GPUs without FP8 tensor cores, sm_80).

use attn_quant::{Fp8Format, Fp8Tensor, Granularity};
use attn_ref::{
    reference::emulate::{EmuSpec, PRounding},
    AttnError, Causal, Problem,
};
use cudarc::driver::{CudaView, CudaViewMut, LaunchConfig, PushKernelArg};

pub use crate::catalog::FP8_HEAD_DIMS;
use crate::{
    catalog::{self, Arch, Family, HopperTile, UnitKey},
    config::{Dtype, KernelConfig},
    launch::{bind_tensors, check_buffer, dims_kv, dims_q, driver, fwd_params, FwdParams},
    seqs::Expected,
    tensor::{Layout, Tensor, TensorMut},
    FlashAttention, HostOutput, KernelError, LaunchInfo, StorageType,
};

/// Which FP8 kernel variant runs (the `_fp8` / `_p16` / `_cvt` / `_wgmma` entry points).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8Variant {
    /// Q·Kᵀ and P·V on the E4M3 MMA (`mma.sync.m16n8k32.e4m3`); P is multiplied by 2⁸ and
    /// cast to E4M3. Needs sm_89+.
    Fp8,
    /// Q·Kᵀ on the E4M3 MMA; P stays f16 and V is widened to f16 for P·V. Needs sm_89+.
    P16,
    /// Both operands widened to f16 in registers (exact), MMAs in f16: the path for GPUs
    /// without FP8 tensor cores (sm_80), and runnable everywhere.
    Cvt,
    /// Q·Kᵀ and P·V on Hopper's warpgroup MMA (`wgmma.m64nNk32.e4m3`, Q, K and Vᵀ read from
    /// shared memory by descriptor), P as [`Fp8Variant::Fp8`]. Needs sm_90 (the sm_90a cubin).
    Wgmma,
    /// The Hopper engine's mainloop (`kernels/fwd_hopper_kernel.cuh`: TMA, a producer
    /// warpgroup, two wgmma consumer warpgroups) on E4M3: the same math as
    /// [`Fp8Variant::Wgmma`], with V transposed in shared memory by the producer (no Vᵀ pass);
    /// Q, K, V and O may be strided. Needs sm_90 (the sm_90a cubin).
    Hopper,
}

impl Fp8Variant {
    /// The catalog's entry variant.
    pub fn mma(self) -> catalog::Fp8Mma {
        match self {
            Fp8Variant::Fp8 => catalog::Fp8Mma::Fp8,
            Fp8Variant::P16 => catalog::Fp8Mma::P16,
            Fp8Variant::Cvt => catalog::Fp8Mma::Cvt,
            // The Hopper engine's entries are named by `catalog::hopper_fp8_entry_name`; its
            // MMAs are the wgmma variant's.
            Fp8Variant::Wgmma | Fp8Variant::Hopper => catalog::Fp8Mma::Wgmma,
        }
    }

    /// Every variant.
    pub const ALL: [Fp8Variant; 5] = [
        Fp8Variant::Hopper,
        Fp8Variant::Wgmma,
        Fp8Variant::Fp8,
        Fp8Variant::P16,
        Fp8Variant::Cvt,
    ];

    /// The entry-point suffix (`wgmma`, `fp8`, `p16`, `cvt`).
    pub fn as_str(self) -> &'static str {
        match self {
            Fp8Variant::Fp8 => "fp8",
            Fp8Variant::P16 => "p16",
            Fp8Variant::Cvt => "cvt",
            Fp8Variant::Wgmma => "wgmma",
            Fp8Variant::Hopper => "hopper",
        }
    }

    /// Parses [`Fp8Variant::as_str`]'s spelling.
    pub fn parse(s: &str) -> Result<Self, KernelError> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                AttnError::InvalidArgument(format!(
                    "unknown FP8 variant `{s}`: expected hopper, wgmma, fp8, p16 or cvt"
                ))
                .into()
            })
    }

    /// Whether a device of compute capability (major, minor) has this variant's instructions.
    pub fn runs_on(self, major: i32, minor: i32) -> bool {
        match self {
            Fp8Variant::Cvt => true,
            Fp8Variant::Fp8 | Fp8Variant::P16 => major * 10 + minor >= 89,
            // wgmma is an sm_90a feature, and an `a` cubin loads on exactly its own arch.
            Fp8Variant::Wgmma | Fp8Variant::Hopper => (major, minor) == (9, 0),
        }
    }

    /// What [`Fp8Variant::runs_on`] requires, in words (for error messages).
    pub fn requirement(self) -> &'static str {
        match self {
            Fp8Variant::Cvt => "nothing beyond sm_80",
            Fp8Variant::Fp8 | Fp8Variant::P16 => "FP8 tensor cores (sm_89+)",
            Fp8Variant::Wgmma | Fp8Variant::Hopper => {
                "Hopper's warpgroup MMA (compute capability 9.0, the sm_90a cubin)"
            }
        }
    }

    /// The variant [`FlashAttention::forward_fp8`] uses by default: [`Fp8Variant::Wgmma`] on
    /// Hopper (sm_90), [`Fp8Variant::Fp8`] elsewhere from sm_89 (Ada has FP8 `mma.sync`),
    /// [`Fp8Variant::Cvt`] below. On Hopper FP8 `mma.sync` is executed by a compiler-inserted
    /// conversion to f16, so the `fp8` variant is slower than our f16 kernel there
    /// (docs/PERF.md has the measurements of all four variants).
    pub fn default_for(major: i32, minor: i32) -> Self {
        if Fp8Variant::Hopper.runs_on(major, minor) {
            Fp8Variant::Hopper
        } else if major * 10 + minor >= 89 {
            Fp8Variant::Fp8
        } else {
            Fp8Variant::Cvt
        }
    }
}

impl std::fmt::Display for Fp8Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The FP8 configs (the catalog's [`catalog::FP8_TILES`]). Every warp owns 16 query rows.
pub const FP8_CONFIGS: [KernelConfig; 4] = catalog::FP8_TILES;

/// Keys Vᵀ is padded to a multiple of (the largest BLOCK_N; also a multiple of the
/// transpose's 64-key tile and the 32-key permutation group).
pub const VT_KEY_ALIGN: usize = 128;

/// Dynamic shared memory of an FP8 config: Q tile plus the K and Vᵀ rings, one byte per
/// element; the `wgmma` variant adds 1 KiB of slack to start its tiles on the 1024-byte
/// boundary its swizzled descriptors need.
pub fn fp8_smem_bytes(config: &KernelConfig, head_dim: usize, variant: Fp8Variant) -> usize {
    let tiles = config.block_m * head_dim + 2 * config.stages * config.block_n * head_dim;
    match variant {
        Fp8Variant::Wgmma => tiles + 1024,
        Fp8Variant::Hopper => {
            catalog::hopper_fp8_smem_bytes(&hopper_fp8_tile(config, head_dim), head_dim)
        }
        Fp8Variant::Fp8 | Fp8Variant::P16 | Fp8Variant::Cvt => tiles,
    }
}

/// The compile unit of the FP8 kernels writing `out` (any arch: the device's is chosen).
pub fn fp8_unit(out: Dtype, head_dim: usize) -> Result<UnitKey, KernelError> {
    if !FP8_HEAD_DIMS.contains(&head_dim) {
        return Err(KernelError::UnsupportedHeadDim {
            head_dim,
            supported: FP8_HEAD_DIMS_TEXT,
        });
    }
    Ok(UnitKey {
        family: Family::Fp8Fwd,
        arch: Arch::Sm80,
        elem: crate::config::elem_of(out),
        head_dim,
    })
}

/// The FP8 head dims, in words for errors.
pub const FP8_HEAD_DIMS_TEXT: &str = "64, 128 and 256 (FP8 E4M3; the wgmma variant: 64 and 128)";

/// The extern "C" name of one FP8 kernel.
pub fn fp8_kernel_name(
    out: Dtype,
    head_dim: usize,
    config: &KernelConfig,
    causal: bool,
    variant: Fp8Variant,
) -> String {
    if variant == Fp8Variant::Hopper {
        return catalog::hopper_fp8_entry_name(
            &hopper_fp8_unit(out, head_dim),
            &hopper_fp8_tile(config, head_dim),
            causal,
            false,
        );
    }
    let unit = UnitKey {
        family: Family::Fp8Fwd,
        arch: Arch::Sm80,
        elem: crate::config::elem_of(out),
        head_dim,
    };
    catalog::fp8_entry_name(&unit, config, causal, variant.mma())
}

/// The Hopper engine's unit holding the FP8 entries of (output type, head dim).
pub fn hopper_fp8_unit(out: Dtype, head_dim: usize) -> UnitKey {
    UnitKey {
        family: Family::FwdHopper,
        arch: Arch::Sm90a,
        elem: crate::config::elem_of(out),
        head_dim,
    }
}

/// Checks the per-head scale views hold one f32 per (batch, head).
fn check_scales(problem: &Problem, scales: &Fp8Scales<'_>) -> Result<(), KernelError> {
    let s = problem.shape();
    check_buffer("Q scales", s.batch() * s.q_heads(), scales.q.len())?;
    check_buffer("K scales", s.batch() * s.kv_heads(), scales.k.len())?;
    check_buffer("V scales", s.batch() * s.kv_heads(), scales.v.len())
}

/// Errors unless the Hopper engine has FP8 kernels for `head_dim`.
fn hopper_fp8_head_dim(head_dim: usize) -> Result<(), KernelError> {
    if catalog::HOPPER_FP8_HEAD_DIMS.contains(&head_dim) {
        Ok(())
    } else {
        Err(KernelError::UnsupportedHeadDim {
            head_dim,
            supported: FP8_HEAD_DIMS_TEXT,
        })
    }
}

/// The Hopper FP8 tile with `config`'s geometry (the first such; the default otherwise).
fn hopper_fp8_tile(config: &KernelConfig, head_dim: usize) -> HopperTile {
    let tiles = match catalog::hopper_fp8_tiles(head_dim) {
        [] => catalog::hopper_fp8_tiles(128),
        t => t,
    };
    tiles
        .iter()
        .copied()
        .find(|t| t.as_config() == *config)
        .unwrap_or(tiles[0])
}

/// The compile unit of the Vᵀ pass.
pub const FP8_PREP_UNIT: UnitKey = UnitKey {
    family: Family::Fp8Prep,
    arch: Arch::Sm80,
    elem: catalog::Elem::F16,
    head_dim: 0,
};

/// The rounding model of an FP8 kernel: what attn-ref's emulation rounds, and where, to
/// reproduce the kernel's arithmetic (the FA3 rule's `emu`). Inputs are taken as given (the
/// caller passes dequantized codes, which the MMAs multiply exactly); P is cast to E4M3 after
/// a 2⁸ gain by the `fp8` and `wgmma` variants and rounded to f16 by `p16`/`cvt`; O is rounded
/// to `out`; the online softmax advances `block_n` keys at a time.
pub fn fp8_rounding_model(variant: Fp8Variant, out: Dtype, block_n: usize) -> EmuSpec {
    EmuSpec {
        inputs: None,
        p: match variant {
            Fp8Variant::Fp8 | Fp8Variant::Wgmma | Fp8Variant::Hopper => {
                PRounding::E4m3 { log2_gain: 8 }
            }
            Fp8Variant::P16 | Fp8Variant::Cvt => PRounding::Storage(attn_ref::Dtype::F16),
        },
        out,
        block_n,
        states: attn_ref::reference::emulate::KeyStates::One,
    }
}

/// The default FP8 config for a variant.
///
/// `wgmma`: 64 query rows (one warpgroup) per CTA, always. Its MMAs and softmax do not
/// overlap inside a warpgroup, so independent co-resident CTAs (three per SM: at most 168
/// registers, 73 KiB) are what keeps the tensor cores busy: on the H200 it beat 128-row CTAs
/// by 9 % before, and 14-17 % after, the register cap (docs/PERF.md). The mma.sync variants: 128
/// rows per CTA, unless that leaves most SMs idle.
pub fn choose_fp8_config(problem: &Problem, sm_count: usize, variant: Fp8Variant) -> KernelConfig {
    let s = problem.shape();
    if variant == Fp8Variant::Hopper {
        // No geometry matches the empty tile: the head dim's default.
        return hopper_fp8_tile(&catalog::tile(0, 0, 0, 0), s.head_dim()).as_config();
    }
    let ctas = s.q_len().div_ceil(128) * s.batch() * s.q_heads();
    if s.head_dim() == 256 {
        let [small, large] = catalog::FP8_D256_TILES;
        return if ctas < sm_count { small } else { large };
    }
    if variant == Fp8Variant::Wgmma || ctas < sm_count {
        FP8_CONFIGS[2]
    } else {
        FP8_CONFIGS[0]
    }
}

/// Per-head f32 scales of the three FP8 inputs, `[B, Hq]` for Q and `[B, Hkv]` for K and V,
/// contiguous (element ≈ code value · scale).
#[derive(Debug)]
pub struct Fp8Scales<'a> {
    /// Q scales `[B, Hq]`.
    pub q: CudaView<'a, f32>,
    /// K scales `[B, Hkv]`.
    pub k: CudaView<'a, f32>,
    /// V scales `[B, Hkv]`.
    pub v: CudaView<'a, f32>,
}

/// One FP8 forward, described whole like [`crate::Forward`]: E4M3 codes for Q, K, V (any
/// strides, [`Tensor`]), their per-head scales, O in `T` and the optional LSE.
#[derive(Debug)]
pub struct Fp8Forward<'a, T> {
    /// Shapes, mask and softmax scale.
    pub problem: &'a Problem,
    /// Q codes `[B, Hq, Sq, D]`.
    pub q: Tensor<'a, u8>,
    /// K codes `[B, Hkv, Sk, D]`.
    pub k: Tensor<'a, u8>,
    /// V codes `[B, Hkv, Sk, D]`.
    pub v: Tensor<'a, u8>,
    /// The per-head scales.
    pub scales: Fp8Scales<'a>,
    /// Output (written).
    pub o: TensorMut<'a, T>,
    /// Row log-sum-exp `[B, Hq, Sq]`, when wanted.
    pub lse: Option<CudaViewMut<'a, f32>>,
    /// Variant and config overrides.
    pub options: Fp8Options,
}

/// How to run one FP8 forward.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fp8Options {
    /// Overrides [`choose_fp8_config`]; must be one of [`FP8_CONFIGS`].
    pub config: Option<KernelConfig>,
    /// Overrides [`FlashAttention::fp8_default_variant`].
    pub variant: Option<Fp8Variant>,
    /// The [`Fp8Variant::Hopper`] tile (one of [`catalog::hopper_fp8_tiles`]; default: the
    /// first); `config` is ignored by that variant.
    pub hopper: Option<HopperTile>,
    /// How the [`Fp8Variant::Hopper`] launch covers its work items.
    pub schedule: crate::hopper::TileSchedule,
    /// Key splits per query block of the [`Fp8Variant::Hopper`] launch (1: none; `None`:
    /// [`fp8_hopper_splits`]' wave rule). A split launch runs the `_seq` entries of
    /// [`catalog::hopper_fp8_seq_tile`], so `hopper` must be unset or that tile.
    pub splits: Option<usize>,
}

/// The key splits of a Hopper FP8 launch: `Some((tile, n))` runs `tile`'s `_seq` entries
/// ([`catalog::hopper_fp8_seq_tile`]) with grid.y = `n` CTAs per item, whose partial O and
/// (m, l) the item's last CTA merges in split order (so the result does not depend on which
/// CTA finishes last); `None` runs the dense entries. Unasked, a launch splits where the
/// f16/bf16 one would (`hopper::plan_hopper`'s `dense_split`, FlashAttention's waves rule):
/// its items leave SMs idle over enough keys (`hopper::hopper_seq_splits`), unless
/// the key-split tile's 64-row blocks would fill the GPU (`hopper::key_split_fills`). Unlike
/// f16/bf16, short non-causal launches (decode) split here too: the FP8 engine has no
/// mma.sync decode kernel to fall back on. A pinned tile keeps the dense entries.
pub fn fp8_hopper_splits(
    problem: &Problem,
    pinned: Option<HopperTile>,
    splits: Option<usize>,
    sm_count: usize,
) -> Result<Option<(HopperTile, usize)>, KernelError> {
    let s = problem.shape();
    let d = s.head_dim();
    let seq_tile = catalog::hopper_fp8_seq_tile(d);
    let asked = match crate::hopper::checked_splits(splits)? {
        Some(1) => return Ok(None),
        Some(n) => Some(n),
        None if pinned.is_some() => return Ok(None),
        None => None,
    };
    let Some(tile) = seq_tile else {
        return match asked {
            Some(n) => Err(KernelError::UnsupportedFeature(format!(
                "{n} key splits at head_dim {d} (the Hopper FP8 engine splits keys at 64, 128 and 256)"
            ))),
            None => Ok(None),
        };
    };
    if let Some(n) = asked {
        return match pinned {
            Some(t) if t != tile => Err(KernelError::EngineUnavailable(format!(
                "the Hopper FP8 engine splits keys ({n} asked) only in tile {} (asked: {}); leave the tile unset",
                tile.name(),
                t.name()
            ))),
            _ => Ok(Some((tile, n))),
        };
    }
    let bh = s.batch() * s.q_heads();
    if crate::hopper::key_split_fills(d, s.q_len(), s.kv_len(), bh, sm_count) {
        return Ok(None);
    }
    let items = s.q_len().div_ceil(tile.block_m()) * bh;
    let n = crate::hopper::hopper_seq_splits(items, s.kv_len().div_ceil(tile.block_n), sm_count);
    Ok((n > 1).then_some((tile, n)))
}

/// A validated FP8 launch. Pure, so the validation is testable without a device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fp8Plan {
    pub grid: (u32, u32, u32),
    pub smem_bytes: u32,
    pub params: FwdParams,
    /// Keys of one Vᵀ row (kv_len rounded up to [`VT_KEY_ALIGN`]).
    pub kv_pad: usize,
    pub transpose_grid: (u32, u32, u32),
}

pub(crate) fn plan_fp8(
    problem: &Problem,
    config: KernelConfig,
    variant: Fp8Variant,
) -> Result<Fp8Plan, KernelError> {
    let s = problem.shape();
    let d = s.head_dim();
    crate::launch::check_no_features(problem)?;
    if variant == Fp8Variant::Hopper {
        hopper_fp8_head_dim(d)?;
    } else {
        fp8_unit(Dtype::F16, d)?;
        if !variant.mma().supports_head_dim(d) {
            return Err(KernelError::UnsupportedHeadDim {
                head_dim: d,
                supported: FP8_HEAD_DIMS_TEXT,
            });
        }
    }
    if variant != Fp8Variant::Hopper && !catalog::fp8_tiles(d).contains(&config) {
        return Err(KernelError::UnknownConfig {
            name: format!("{} (FP8, D = {d})", config.name()),
            known: catalog::fp8_tiles(d)
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let i32_max = i32::MAX as usize;
    let overflow = |what: &'static str, v: Option<usize>, limit: usize| match v {
        Some(x) if x <= limit => Ok(()),
        _ => Err(KernelError::IndexOverflow(what)),
    };
    let kv_pad = s
        .kv_len()
        .checked_next_multiple_of(VT_KEY_ALIGN)
        .ok_or(KernelError::IndexOverflow("kv_len"))?;
    overflow("padded kv_len", Some(kv_pad), i32_max)?;
    overflow("kv_len + q_len", s.kv_len().checked_add(s.q_len()), i32_max)?;
    overflow("q_heads (grid.y)", Some(s.q_heads()), 65_535)?;
    overflow("batch (grid.z)", Some(s.batch()), 65_535)?;
    let kv_heads_total = s.batch().checked_mul(s.kv_heads());
    if variant != Fp8Variant::Hopper {
        // The Vᵀ pass's grid (the Hopper engine transposes in its kernel).
        overflow("batch · kv_heads (Vᵀ grid.y)", kv_heads_total, 65_535)?;
    }
    let q_tiles = s.q_len().div_ceil(config.block_m);
    overflow("q tiles (grid.x)", Some(q_tiles), i32_max)?;
    Ok(Fp8Plan {
        grid: (q_tiles as u32, s.q_heads() as u32, s.batch() as u32),
        smem_bytes: fp8_smem_bytes(&config, d, variant) as u32,
        params: fwd_params(problem, 1),
        kv_pad,
        transpose_grid: ((kv_pad / 64) as u32, kv_heads_total.unwrap_or(0) as u32, 1),
    })
}

/// Per-head scales of one quantized input, checked against the shape the problem implies:
/// E4M3 only; per-tensor scales are broadcast to every head; per-token and per-block scales
/// are rejected (the kernel folds one scale per head into its softmax scale).
pub fn per_head_scales(
    tensor: &'static str,
    t: &Fp8Tensor,
    dims: [usize; 4],
) -> Result<Vec<f32>, KernelError> {
    let bad = |reason: String| KernelError::Fp8Input { tensor, reason };
    if t.format != Fp8Format::E4M3 {
        return Err(bad(format!(
            "format {:?}: the FP8 kernels take E4M3 codes (quantize with Fp8Format::E4M3)",
            t.format
        )));
    }
    if t.shape != dims {
        return Err(bad(format!(
            "shape {:?} but the problem needs {dims:?} ([B, H, S, D])",
            t.shape
        )));
    }
    check_buffer(tensor, dims.iter().product(), t.codes.len())?;
    let heads = dims[0] * dims[1];
    let scales = match t.granularity {
        Granularity::Tensor if t.scales.len() == 1 => vec![t.scales[0]; heads],
        Granularity::Head if t.scales.len() == heads => t.scales.clone(),
        Granularity::Tensor | Granularity::Head => {
            return Err(bad(format!(
                "{} scales for granularity {:?}",
                t.scales.len(),
                t.granularity
            )))
        }
        g => {
            return Err(bad(format!(
                "granularity {g:?}: the FP8 kernels take per-tensor or per-head scales"
            )))
        }
    };
    if let Some(i) = scales.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
        return Err(bad(format!(
            "scale {i} is {}; scales must be finite and positive",
            scales[i]
        )));
    }
    Ok(scales)
}

impl FlashAttention {
    /// Whether this device and this build's cubins run `variant`: [`Fp8Variant::runs_on`],
    /// and for `wgmma` also an sm_90a cubin (a build with `ATTN_CUDA_ARCHS=90` has none: the
    /// plain sm_90 target has no wgmma).
    pub fn fp8_variant_available(&self, variant: Fp8Variant) -> bool {
        let (major, minor) = self.compute_capability();
        let unit = match variant {
            Fp8Variant::Wgmma => fp8_unit(Dtype::F16, 128).ok(),
            Fp8Variant::Hopper => Some(hopper_fp8_unit(Dtype::F16, 128)),
            _ => None,
        };
        variant.runs_on(major, minor)
            && unit.is_none_or(|u| {
                crate::cubin::select(&u, false, major, minor).is_some_and(|c| c.arch == "90a")
            })
    }

    /// The variant [`FlashAttention::forward_fp8`] uses by default on this device:
    /// [`Fp8Variant::default_for`], or `fp8` on Hopper when the build lacks the sm_90a cubin.
    /// A launcher limited below the Hopper engine's FP8 tiles
    /// ([`FlashAttention::with_shared_memory_limit`]) takes what an sm_89 part takes, `fp8`
    /// (not `wgmma`, which has no D = 256).
    pub fn fp8_default_variant(&self) -> Fp8Variant {
        let (major, minor) = self.compute_capability();
        let v = Fp8Variant::default_for(major, minor);
        let hopper_fits = catalog::FP8_HEAD_DIMS.iter().all(|&d| {
            catalog::hopper_fp8_tiles(d)
                .iter()
                .all(|t| catalog::hopper_fp8_smem_bytes(t, d) <= self.max_smem_per_block())
        });
        [v, Fp8Variant::Wgmma, Fp8Variant::Fp8]
            .into_iter()
            .find(|&v| {
                self.fp8_variant_available(v)
                    && (hopper_fits || !matches!(v, Fp8Variant::Hopper | Fp8Variant::Wgmma))
            })
            .unwrap_or(Fp8Variant::Cvt)
    }

    /// The config [`FlashAttention::forward_fp8`] uses by default for `variant`.
    pub fn fp8_default_config(&self, problem: &Problem, variant: Fp8Variant) -> KernelConfig {
        choose_fp8_config(problem, self.sm_count(), variant)
    }

    /// Registers and static shared memory of one FP8 kernel as the driver loaded it (for
    /// [`Fp8Variant::Hopper`], the tile with `config`'s geometry).
    pub fn fp8_resources(
        &self,
        out: Dtype,
        head_dim: usize,
        config: &KernelConfig,
        causal: bool,
        variant: Fp8Variant,
    ) -> Result<crate::FunctionResources, KernelError> {
        let name = fp8_kernel_name(out, head_dim, config, causal, variant);
        let unit = if variant == Fp8Variant::Hopper {
            hopper_fp8_head_dim(head_dim)?;
            hopper_fp8_unit(out, head_dim)
        } else {
            fp8_unit(out, head_dim)?
        };
        let (f, _) = self.function(
            &unit,
            &name,
            false,
            fp8_smem_bytes(config, head_dim, variant),
        )?;
        crate::launch::function_resources(&f)
    }

    /// The FP8 forward: `o = softmax(scale · q·kᵀ + mask) · v` on E4M3 inputs with per-head
    /// scales, O in `T` (f16 or bf16), the row LSE into `lse` when given. Validated before
    /// anything is launched; on error nothing is launched or written. Asynchronous on
    /// [`FlashAttention::stream`]: a Vᵀ pass into the handle's workspace, then the kernel
    /// (the Hopper engine: the kernel alone).
    pub fn forward_fp8<T: StorageType>(
        &self,
        args: Fp8Forward<'_, T>,
    ) -> Result<LaunchInfo, KernelError> {
        let Fp8Forward {
            problem,
            q,
            k,
            v,
            scales,
            mut o,
            mut lse,
            options: opts,
        } = args;
        let shape = problem.shape();
        let d = shape.head_dim();
        let (major, minor) = self.compute_capability();
        let variant = opts.variant.unwrap_or_else(|| self.fp8_default_variant());
        if !self.fp8_variant_available(variant) {
            return Err(KernelError::VariantUnavailable {
                variant: variant.as_str(),
                needs: variant.requirement(),
                device: format!("{major}.{minor}"),
                instead: self.fp8_default_variant().as_str(),
            });
        }
        if variant == Fp8Variant::Hopper {
            if let Some(c) = opts.config {
                return Err(KernelError::UnknownConfig {
                    name: format!(
                        "{} (the hopper FP8 variant takes a tile in Fp8Options::hopper)",
                        c.name()
                    ),
                    known: catalog::hopper_fp8_tiles(d)
                        .iter()
                        .map(|t| t.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            return self.forward_fp8_hopper(
                problem,
                (&q, &k, &v),
                &scales,
                &mut o,
                lse.as_mut(),
                opts.hopper,
                opts.schedule,
                opts.splits,
            );
        }
        if let Some(n) = opts.splits.filter(|&n| n != 1) {
            return Err(KernelError::UnsupportedFeature(format!(
                "{n} key splits on the FP8 {} variant (only the hopper variant splits keys)",
                variant.as_str()
            )));
        }
        let config = opts
            .config
            .unwrap_or_else(|| self.fp8_default_config(problem, variant));
        let plan = plan_fp8(problem, config, variant)?;
        check_scales(problem, &scales)?;
        if plan.smem_bytes as usize > self.max_smem_per_block() {
            return Err(KernelError::ConfigTooLarge {
                config: config.name(),
                smem: plan.smem_bytes as usize,
                limit: self.max_smem_per_block(),
            });
        }
        let causal = problem.causal() != Causal::None;
        let name = fp8_kernel_name(T::DTYPE, d, &config, causal, variant);
        let unit = fp8_unit(T::DTYPE, d)?;
        let (func, arch) = self.function(&unit, &name, false, plan.smem_bytes as usize)?;
        // Q, K and O contiguous [B, H, S, D] (kernels/fp8_block.cuh: compile-time row strides
        // hold the wgmma kernel's register budget); V may be strided (the Vᵀ pass reads it).
        for (name, dims, strides) in [
            ("Q", q.dims, q.strides),
            ("K", k.dims, k.strides),
            ("O", o.dims, o.strides),
        ] {
            if strides != Layout::Bhsd.strides(dims) {
                return Err(KernelError::InvalidTensor {
                    tensor: name,
                    reason: "the FP8 kernels take Q, K and O as contiguous [B, H, S, D] (strided FP8 Q/K/O is not implemented yet; V may be strided)".into(),
                });
            }
        }
        let stream = self.stream();
        let o_strides = o.strides;
        let ptrs = bind_tensors(
            stream,
            &Expected::dense(problem.shape()),
            &q,
            &k,
            &v,
            &mut o,
            lse.as_mut(),
        )?;
        let params = plan
            .params
            .with_strides(q.strides, k.strides, v.strides, o_strides);

        let mut vt_guard = self.fp8_transpose_v(problem, ptrs.v, params.v_stride, &plan)?;
        let Some(vt) = vt_guard.as_mut() else {
            return Err(KernelError::Poisoned);
        };
        let kv_pad = plan.kv_pad as i32;
        let mut b = stream.launch_builder(&func);
        b.arg(&ptrs.q)
            .arg(&ptrs.k)
            .arg(&*vt)
            .arg(&scales.q)
            .arg(&scales.k)
            .arg(&scales.v)
            .arg(&ptrs.o)
            .arg(&ptrs.lse);
        b.arg(&params).arg(&kv_pad);
        // SAFETY: matches ATTN_FP8_ENTRY (q, k, vt, q_scale, k_scale, v_scale, o, lse,
        // FwdParams by value, vt_stride). Q, K and O were checked against the problem, their
        // views and each other (in bounds for their strides, 16-byte aligned, O overlapping
        // nothing); scale views hold one f32 per (batch, head); Vᵀ holds B·Hkv·D·kv_pad bytes
        // written by the pass above on the same stream; the grid covers ceil(Sq/BM) × Hq × B
        // blocks whose reads and writes the kernel bounds by q_len/kv_len (K rows past kv_len
        // are zero-filled, not read); lse may be null (the kernel tests it); 32-bit ranges
        // were checked in `plan_fp8`, and the dynamic shared memory was raised and fits.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: plan.grid,
                block_dim: (config.threads() as u32, 1, 1),
                shared_mem_bytes: plan.smem_bytes,
            })
        }
        .map_err(driver("launching the FP8 kernel"))?;
        drop(ptrs);
        Ok(LaunchInfo {
            kernel: name,
            arch,
            config,
            grid: plan.grid,
            splits: 1,
            smem_bytes: plan.smem_bytes,
        })
    }

    /// The Vᵀ pass: V (any strides, at device address `v`) into the launcher's Vᵀ workspace
    /// `[B, Hkv, D, kv_pad]` with the key permutation (kernels/fp8_prep.cuh), on this stream.
    /// Returns the locked workspace, which the caller keeps until its kernel is queued.
    fn fp8_transpose_v(
        &self,
        problem: &Problem,
        v: u64,
        v_stride: [i64; 3],
        plan: &Fp8Plan,
    ) -> Result<std::sync::MutexGuard<'_, Option<cudarc::driver::CudaSlice<u8>>>, KernelError> {
        let shape = problem.shape();
        let d = shape.head_dim();
        let (transpose, _) = self.function(
            &FP8_PREP_UNIT,
            &catalog::fp8_transpose_entry_name(d),
            false,
            0,
        )?;
        let stream = self.stream();
        let vt_len = shape.batch() * shape.kv_heads() * d * plan.kv_pad;
        let mut vt_guard = self.fp8_vt.lock().map_err(|_| KernelError::Poisoned)?;
        if vt_guard.as_ref().is_none_or(|b| b.len() < vt_len) {
            *vt_guard = None; // free the old buffer first
            *vt_guard = Some(
                stream
                    .alloc_zeros::<u8>(vt_len)
                    .map_err(driver("allocating the FP8 Vᵀ workspace"))?,
            );
        }
        let Some(vt) = vt_guard.as_mut() else {
            return Err(KernelError::Poisoned);
        };
        let kv_len = plan.params.kv_len;
        let kv_pad = plan.kv_pad as i32;
        let kv_heads = shape.kv_heads() as i32;
        let [vb, vh, vr] = v_stride;
        let mut b = stream.launch_builder(&transpose);
        b.arg(&v)
            .arg(&mut *vt)
            .arg(&kv_len)
            .arg(&kv_pad)
            .arg(&kv_heads)
            .arg(&vb)
            .arg(&vh)
            .arg(&vr);
        // SAFETY: matches ATTN_FP8_V_TRANSPOSE_ENTRY (v, vt, kv_len, kv_pad, kv_heads, batch,
        // head and row strides). The caller checked V (`bind_tensors`): every (b, h, key <
        // kv_len) row of D codes its strides name lies inside its view, 16-byte aligned; Vᵀ
        // holds at least B·Hkv·D·kv_pad bytes and the grid (kv_pad/64, B·Hkv) writes exactly
        // those.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: plan.transpose_grid,
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(driver("launching the FP8 Vᵀ pass"))?;
        Ok(vt_guard)
    }

    /// [`Fp8Variant::Hopper`]: the Hopper engine's FP8 entry with TMA descriptors for Q, K and
    /// V (any strides TMA takes); its producer transposes V in shared memory.
    #[allow(clippy::too_many_arguments)]
    fn forward_fp8_hopper<T: StorageType>(
        &self,
        problem: &Problem,
        (q, k, v): (&Tensor<'_, u8>, &Tensor<'_, u8>, &Tensor<'_, u8>),
        scales: &Fp8Scales<'_>,
        o: &mut TensorMut<'_, T>,
        lse: Option<&mut CudaViewMut<'_, f32>>,
        tile: Option<HopperTile>,
        schedule: crate::hopper::TileSchedule,
        splits: Option<usize>,
    ) -> Result<LaunchInfo, KernelError> {
        use crate::hopper::{encode_tma, hopper_schedule, tma_geometry, TmaElem};
        let shape = problem.shape();
        let d = shape.head_dim();
        hopper_fp8_head_dim(d)?;
        let causal = problem.causal() != Causal::None;
        if let Some(t) = tile {
            crate::hopper::pick_tile(catalog::hopper_fp8_tiles(d), Some(t), "FP8")?;
        }
        let split = fp8_hopper_splits(problem, tile, splits, self.sm_count())?;
        let tile = match (split, tile) {
            (Some((t, _)), _) => Some(t),
            (None, None) => catalog::hopper_fp8_default_tile(
                d,
                shape.q_len(),
                shape.kv_len(),
                causal,
                shape.batch() * shape.q_heads(),
                self.sm_count(),
            ),
            (None, asked) => asked,
        };
        let tile = crate::hopper::pick_tile(catalog::hopper_fp8_tiles(d), tile, "FP8")?;
        let n_splits = split.map_or(1, |(_, n)| n);
        let variant = if split.is_some() {
            catalog::HopperVariant::Seqs
        } else {
            catalog::HopperVariant::Dense
        };
        let config = tile.as_config();
        let plan = plan_fp8(problem, config, Fp8Variant::Hopper)?;
        check_scales(problem, scales)?;
        let smem = catalog::hopper_fp8_smem_bytes(&tile, d);
        if smem > self.max_smem_per_block() {
            return Err(KernelError::ConfigTooLarge {
                config: tile.name(),
                smem,
                limit: self.max_smem_per_block(),
            });
        }
        let unit = hopper_fp8_unit(T::DTYPE, d);
        let name = catalog::hopper_fp8_entry_name(&unit, &tile, causal, split.is_some());
        let walks = catalog::hopper_persistent(d, &tile, causal, variant, true);
        let (mut launch_grid, mut sched) = hopper_schedule(
            plan.grid,
            walks,
            schedule,
            self.sm_count(),
            shape.kv_len().div_ceil(tile.block_n),
            &tile.name(),
        )?;
        if causal {
            // Longest first across groups of (head, batch) pairs, as the f16/bf16 launch's.
            sched.lpt_heads = crate::hopper::causal_lpt_heads(d, shape.kv_len(), 1);
        }
        let (func, arch) = self.function(&unit, &name, false, smem)?;
        let stream = self.stream();
        if n_splits > 1 {
            sched.splits = n_splits as i32;
            launch_grid.1 = n_splits as u32;
        }
        // The split-KV workspace, which a stream-K tail shares (grown on demand), locked only
        // by launches that split or share a tail.
        let tail = sched.tail_items.max(0) as usize;
        let mut ws_guard = if tail > 0 || n_splits > 1 {
            Some(self.workspace.lock().map_err(|_| KernelError::Poisoned)?)
        } else {
            None
        };
        let mut ws_ptrs = Vec::new();
        if let Some(guard) = ws_guard.as_mut() {
            let (rows, tickets) = if tail > 0 {
                crate::hopper::tail_workspace(
                    launch_grid.0 as usize,
                    tail,
                    tile.block_m(),
                    tile.consumers,
                )
            } else {
                let items = sched.items as usize;
                (items * n_splits * tile.block_m(), items)
            };
            ws_ptrs =
                crate::launch::bind_split_workspace(stream, guard, rows, d, tickets, &mut sched)?;
        }
        let o_strides = o.strides;
        let ptrs = bind_tensors(stream, &Expected::dense(problem.shape()), q, k, v, o, lse)?;
        let params = plan
            .params
            .with_strides(q.strides, k.strides, v.strides, o_strides);
        let tma_q = encode_tma(
            &tma_geometry(q.dims, q.strides, 1, d.min(128), tile.block_m())?,
            ptrs.q,
            TmaElem::E4m3,
        )?;
        let tma_k = encode_tma(
            &tma_geometry(k.dims, k.strides, 1, d.min(128), tile.block_n)?,
            ptrs.k,
            TmaElem::E4m3,
        )?;
        // V as K: the kernel's producer transposes each stage in shared memory.
        let tma_v = encode_tma(
            &tma_geometry(v.dims, v.strides, 1, d.min(128), tile.block_n)?,
            ptrs.v,
            TmaElem::E4m3,
        )?;
        let mut b = stream.launch_builder(&func);
        b.arg(&ptrs.o)
            .arg(&ptrs.lse)
            .arg(&tma_q)
            .arg(&tma_k)
            .arg(&tma_v)
            .arg(&scales.q)
            .arg(&scales.k)
            .arg(&scales.v)
            .arg(&params)
            .arg(&sched);
        // SAFETY: matches ATTN_FWD_HOPPER_FP8_ENTRY (o, lse, TMA descriptors of Q, K and V by
        // value, the three scale pointers, FwdParams and HopperSched by value; the item walk
        // covers the classic grid, `hopper_schedule`). Q, K, V and O were checked
        // against the problem, their views and each other (`bind_tensors`), and the three
        // descriptors were encoded from those dims and strides. Out-of-range boxes are
        // zero-filled, not read.
        // Scale views hold one f32 per (batch, head); lse may be null (the kernel tests it);
        // 32-bit ranges were checked in `plan_fp8`; the dynamic shared memory was raised on
        // the function and fits the device. A stream-K tail has the workspace of
        // (grid.x + tail items) · BM rows of D floats, (m, l) per row and a zeroed ticket per
        // (tail item, consumer warp), which the kernel leaves zeroed (launch.rs's Hopper
        // launch says the same). A split launch (grid.y = splits, `_seq` entries only, which
        // never walk) has items · splits · BM such rows and a zeroed ticket per item, left
        // zeroed too; its FwdParams carry no sequence layout (null index pointers), so the
        // entry resolves every item to the dense rows.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: launch_grid,
                block_dim: (tile.threads() as u32, 1, 1),
                shared_mem_bytes: smem as u32,
            })
        }
        .map_err(driver("launching the Hopper FP8 kernel"))?;
        drop(ptrs);
        drop(ws_ptrs);
        drop(ws_guard);
        Ok(LaunchInfo {
            kernel: name,
            arch,
            config,
            grid: launch_grid,
            splits: n_splits,
            smem_bytes: smem as u32,
        })
    }

    /// Host convenience for the FP8 forward: checks the quantized tensors against the
    /// problem ([`per_head_scales`]), uploads codes and scales, runs
    /// [`FlashAttention::forward_fp8`] into a NaN-poisoned O, and downloads O and LSE.
    pub fn forward_fp8_host<T: StorageType>(
        &self,
        problem: &Problem,
        q: &Fp8Tensor,
        k: &Fp8Tensor,
        v: &Fp8Tensor,
        opts: &Fp8Options,
    ) -> Result<HostOutput<T>, KernelError> {
        let shape = problem.shape();
        let (qd, kd) = (attn_quant::q_dims(shape), attn_quant::kv_dims(shape));
        let qs = per_head_scales("Q", q, qd)?;
        let ks = per_head_scales("K", k, kd)?;
        let vs = per_head_scales("V", v, kd)?;
        let s = self.stream();
        let err = |context| move |source| KernelError::Driver { context, source };
        let dq = s.clone_htod(&q.codes).map_err(err("uploading Q"))?;
        let dk = s.clone_htod(&k.codes).map_err(err("uploading K"))?;
        let dv = s.clone_htod(&v.codes).map_err(err("uploading V"))?;
        let dqs = s.clone_htod(&qs).map_err(err("uploading Q scales"))?;
        let dks = s.clone_htod(&ks).map_err(err("uploading K scales"))?;
        let dvs = s.clone_htod(&vs).map_err(err("uploading V scales"))?;
        let mut o = s
            .clone_htod(&vec![T::from_f32(f32::NAN); shape.o_elems()])
            .map_err(err("allocating O"))?;
        let mut lse = s
            .clone_htod(&vec![f32::NAN; shape.lse_elems()])
            .map_err(err("allocating LSE"))?;
        let (qd, kd) = (dims_q(shape), dims_kv(shape));
        let launch = self.forward_fp8(Fp8Forward {
            problem,
            q: Tensor::bhsd(&dq, qd),
            k: Tensor::bhsd(&dk, kd),
            v: Tensor::bhsd(&dv, kd),
            scales: Fp8Scales {
                q: dqs.as_view(),
                k: dks.as_view(),
                v: dvs.as_view(),
            },
            o: TensorMut::bhsd(&mut o, qd),
            lse: Some(lse.as_view_mut()),
            options: *opts,
        })?;
        let o = s.clone_dtoh(&o).map_err(err("downloading O"))?;
        let lse = s.clone_dtoh(&lse).map_err(err("downloading LSE"))?;
        Ok(HostOutput { o, lse, launch })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_quant::quantize;
    use attn_ref::AttnShape;

    fn problem(sq: usize, sk: usize, d: usize, causal: Causal) -> Problem {
        Problem::new(AttnShape::new(2, 8, 2, sq, sk, d).unwrap(), causal)
    }

    #[test]
    fn names_match_the_entry_macro() {
        assert_eq!(
            fp8_kernel_name(Dtype::Bf16, 128, &FP8_CONFIGS[0], true, Fp8Variant::P16),
            "attn_fp8_bf16_d128_bm128_bn128_w8_s2_causal_p16"
        );
        assert_eq!(fp8_unit(Dtype::F16, 64).unwrap().name(), "fp8_sm80_f16_d64");
        assert!(matches!(
            fp8_unit(Dtype::F16, 96),
            Err(KernelError::UnsupportedHeadDim { head_dim: 96, .. })
        ));
        for v in Fp8Variant::ALL {
            assert_eq!(Fp8Variant::parse(v.as_str()).unwrap(), v);
        }
        assert!(Fp8Variant::parse("e5m2").is_err());
    }

    #[test]
    fn variants_per_arch() {
        assert!(!Fp8Variant::Fp8.runs_on(8, 0));
        assert!(!Fp8Variant::P16.runs_on(8, 6));
        assert!(Fp8Variant::Fp8.runs_on(8, 9));
        assert!(Fp8Variant::Cvt.runs_on(8, 0));
        for (ma, mi) in [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0)] {
            assert!(Fp8Variant::default_for(ma, mi).runs_on(ma, mi));
        }
        assert_eq!(Fp8Variant::default_for(8, 9), Fp8Variant::Fp8);
        assert_eq!(Fp8Variant::default_for(9, 0), Fp8Variant::Hopper);
        assert_eq!(Fp8Variant::default_for(10, 0), Fp8Variant::Fp8);
        for v in [Fp8Variant::Wgmma, Fp8Variant::Hopper] {
            assert!(v.runs_on(9, 0));
            assert!(!v.runs_on(8, 9));
            assert!(!v.runs_on(10, 0));
        }
        assert_eq!(Fp8Variant::default_for(8, 6), Fp8Variant::Cvt);
    }

    #[test]
    fn unavailable_variant_error_names_the_need_and_the_alternative() {
        let (ma, mi) = (8, 9);
        let v = Fp8Variant::Wgmma;
        assert!(!v.runs_on(ma, mi));
        let e = KernelError::VariantUnavailable {
            variant: v.as_str(),
            needs: v.requirement(),
            device: format!("{ma}.{mi}"),
            instead: Fp8Variant::default_for(ma, mi).as_str(),
        }
        .to_string();
        assert!(e.contains("`wgmma` needs Hopper"), "{e}");
        assert!(e.contains("use the `fp8` variant"), "{e}");
    }

    #[test]
    fn config_choice_per_variant() {
        let big = problem(4096, 4096, 128, Causal::None); // 2 · 8 · 32 = 512 CTAs of 128 rows
        let small = problem(256, 4096, 128, Causal::None); // 32 CTAs
        assert_eq!(
            choose_fp8_config(&big, 132, Fp8Variant::Fp8),
            FP8_CONFIGS[0]
        );
        assert_eq!(
            choose_fp8_config(&small, 132, Fp8Variant::Fp8),
            FP8_CONFIGS[2]
        );
        for p in [&big, &small] {
            assert_eq!(choose_fp8_config(p, 132, Fp8Variant::Wgmma), FP8_CONFIGS[2]);
        }
    }

    #[test]
    fn d256_runs_its_own_configs_on_the_mma_sync_variants() {
        let p = problem(300, 500, 256, Causal::BottomRight);
        let [small, large] = catalog::FP8_D256_TILES;
        for v in [Fp8Variant::Fp8, Fp8Variant::P16, Fp8Variant::Cvt] {
            assert!(plan_fp8(&p, small, v).is_ok(), "{v}");
            assert!(plan_fp8(&p, large, v).is_ok(), "{v}");
            assert!(matches!(
                plan_fp8(&p, FP8_CONFIGS[0], v),
                Err(KernelError::UnknownConfig { .. })
            ));
            // 3 query tiles · 4 heads = 12 CTAs on 132 SMs: the 64-row config.
            assert_eq!(choose_fp8_config(&p, 132, v), small);
        }
        assert!(matches!(
            plan_fp8(&p, small, Fp8Variant::Wgmma),
            Err(KernelError::UnsupportedHeadDim { head_dim: 256, .. })
        ));
        // Both D = 256 configs fit sm_89's 99 KiB.
        for c in catalog::FP8_D256_TILES {
            assert!(
                fp8_smem_bytes(&c, 256, Fp8Variant::Fp8) <= catalog::SM8X_SMALL_SMEM,
                "{}",
                c.name()
            );
        }
    }

    #[test]
    fn hopper_default_tiles_fit_and_mirror_the_layout() {
        // D = 128: 192 keys, with ping-pong when causal; both are catalog tiles (so
        // `pick_tile` takes them) and fit Hopper's 227 KiB with their landing stages.
        // 4,16,4096 on 132 SMs: no key split.
        let tile = |d, causal| catalog::hopper_fp8_default_tile(d, 4096, 4096, causal, 64, 132);
        let full = tile(128, false).unwrap();
        let causal = tile(128, true).unwrap();
        assert_eq!(
            (full.block_n, full.pingpong, full.intra),
            (192, false, true)
        );
        assert_eq!(
            (causal.block_n, causal.pingpong, causal.intra),
            (192, true, true)
        );
        // D = 64: three consumers of 128 keys; D = 256: 96 keys with ping-pong (runs 193–195).
        let d64 = tile(64, true).unwrap();
        let d256 = tile(256, false).unwrap();
        assert_eq!((d64.block_n, d64.pingpong, d64.consumers), (128, false, 3));
        assert_eq!((d256.block_n, d256.pingpong), (96, true));
        // Small grids (1,8,512 and 2,8,512: 64 and 128 blocks of 64 rows on 132 SMs) take the
        // key-split tile at D = 64 and 128, causal or not; D = 256 has none; 4,8,512 (256
        // blocks) does not.
        for d in [64, 128] {
            for c in [false, true] {
                for bh in [8, 16] {
                    let t = catalog::hopper_fp8_default_tile(d, 512, 512, c, bh, 132).unwrap();
                    assert!(t.kv_split && t.block_m() == 64, "D {d} {bh}: {}", t.name());
                }
                let t = catalog::hopper_fp8_default_tile(d, 512, 512, c, 32, 132).unwrap();
                assert!(!t.kv_split, "D {d}: {}", t.name());
            }
        }
        let t = catalog::hopper_fp8_default_tile(256, 512, 512, false, 8, 132).unwrap();
        assert!(!t.kv_split, "{}", t.name());
        // D = 64's grid model: the faster tile on every shape runs 324, 325 and 331 timed.
        for (b, h, s, causal, rows) in [
            (2, 8, 2048, false, 128),
            (2, 8, 1024, false, 128),
            (4, 16, 4096, false, 192),
            (4, 8, 2048, false, 192),
            (1, 16, 8192, false, 192),
            (2, 8, 2048, true, 128),
            // Run 337: the key split, 13.5 → 12.3 µs against 128 rows.
            (2, 8, 1024, true, 64),
            (4, 16, 4096, true, 192),
            (1, 16, 8192, true, 192),
            // Run 325: 78.3 µs on 192 rows, 71.8 on 128 (the wave model kept 192).
            (8, 16, 1024, true, 128),
        ] {
            let t = catalog::hopper_fp8_default_tile(64, s, s, causal, b * h, 132).unwrap();
            assert_eq!(
                t.block_m(),
                rows,
                "{b},{h},{s},64 causal {causal}: {}",
                t.name()
            );
            assert!(catalog::hopper_fp8_tiles(64).contains(&t));
        }
        for d in catalog::HOPPER_FP8_HEAD_DIMS {
            for c in [false, true] {
                for (q, bh) in [(4096, 64), (512, 8)] {
                    let t = catalog::hopper_fp8_default_tile(d, q, q, c, bh, 132).unwrap();
                    assert!(catalog::hopper_fp8_tiles(d).contains(&t), "{}", t.name());
                }
            }
            for t in catalog::hopper_fp8_tiles(d) {
                let smem = catalog::hopper_fp8_smem_bytes(t, d);
                assert!(smem <= 232_448, "{} at D = {d}: {smem} bytes", t.name());
            }
        }
        // Q, two K and Vᵀ stages and four V landing stages of 192 × 128 bytes; Q's barriers,
        // four per ring stage and two per landing stage.
        assert_eq!(
            catalog::hopper_fp8_smem_bytes(&full, 128),
            1024 + 128 * 128 + (2 * 2 + 4) * 192 * 128 + 8 * (2 + 8 + 8)
        );
    }

    #[test]
    fn plan_geometry_padding_and_limits() {
        let p = problem(300, 1000, 128, Causal::BottomRight);
        let plan = plan_fp8(&p, FP8_CONFIGS[0], Fp8Variant::Fp8).unwrap();
        assert_eq!(plan.grid, (3, 8, 2));
        assert_eq!(plan.kv_pad, 1024);
        assert_eq!(plan.transpose_grid, (16, 4, 1));
        assert_eq!(plan.params.diag_offset, 700);
        assert_eq!(plan.smem_bytes as usize, 128 * 128 + 2 * 2 * 128 * 128);
        let wg = plan_fp8(&p, FP8_CONFIGS[0], Fp8Variant::Wgmma).unwrap();
        assert_eq!(wg.smem_bytes, plan.smem_bytes + 1024);
        assert!(matches!(
            plan_fp8(
                &problem(8, 8, 96, Causal::None),
                FP8_CONFIGS[0],
                Fp8Variant::Fp8
            ),
            Err(KernelError::UnsupportedHeadDim { head_dim: 96, .. })
        ));
        assert!(matches!(
            plan_fp8(
                &problem(8, 8, 64, Causal::None),
                crate::config::cfg(32, 64, 2, 2),
                Fp8Variant::Fp8
            ),
            Err(KernelError::UnknownConfig { .. })
        ));
        let huge = Problem::new(
            AttnShape::new(1, 1, 1, 8, i32::MAX as usize - 10, 128).unwrap(),
            Causal::None,
        );
        assert!(matches!(
            plan_fp8(&huge, FP8_CONFIGS[0], Fp8Variant::Fp8),
            Err(KernelError::IndexOverflow(_))
        ));
    }

    #[test]
    fn scales_are_checked_and_broadcast() {
        let dims = [1, 2, 4, 8];
        let x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
        let head = quantize(&x, dims, Fp8Format::E4M3, Granularity::Head).unwrap();
        assert_eq!(per_head_scales("Q", &head, dims).unwrap(), head.scales);
        let tensor = quantize(&x, dims, Fp8Format::E4M3, Granularity::Tensor).unwrap();
        assert_eq!(
            per_head_scales("Q", &tensor, dims).unwrap(),
            vec![tensor.scales[0]; 2]
        );
        let e5 = quantize(&x, dims, Fp8Format::E5M2, Granularity::Head).unwrap();
        let err = per_head_scales("K", &e5, dims).unwrap_err().to_string();
        assert!(err.contains("E4M3") && err.contains('K'), "{err}");
        let token = quantize(&x, dims, Fp8Format::E4M3, Granularity::Token).unwrap();
        assert!(per_head_scales("V", &token, dims)
            .unwrap_err()
            .to_string()
            .contains("per-head"));
        assert!(per_head_scales("Q", &head, [1, 2, 8, 4]).is_err());
        let mut broken = head.clone();
        broken.scales[1] = f32::NAN;
        assert!(per_head_scales("Q", &broken, dims)
            .unwrap_err()
            .to_string()
            .contains("finite"));
        broken.codes.pop();
        assert!(per_head_scales("Q", &broken, dims).is_err());
    }

    #[test]
    fn hopper_fp8_launches_split_keys_where_items_leave_sms_idle() {
        let p = |b, h, sq, sk, d, causal| {
            Problem::new(AttnShape::new(b, h, h, sq, sk, d).unwrap(), causal)
        };
        let auto = |p: &Problem| fp8_hopper_splits(p, None, None, 132).unwrap();
        // Chunked prefill: 128 queries × 16384 keys × 16 heads at D = 128 is 16 items of
        // 128 rows on 132 SMs, 86 key tiles of 192: ⌊132 / 16⌋ = 8 splits of ≥ 8 tiles.
        let (t, n) = auto(&p(1, 16, 128, 16384, 128, Causal::None)).unwrap();
        assert_eq!((t, n), (catalog::hopper_fp8_seq_tile(128).unwrap(), 8));
        assert_eq!(
            auto(&p(1, 16, 128, 16384, 128, Causal::BottomRight)).map(|(_, n)| n),
            Some(8)
        );
        // Decode (1 query × 32 heads × 8192 keys): 32 items, 43 key tiles → 4 splits.
        assert_eq!(
            auto(&p(1, 32, 1, 8192, 128, Causal::None)).map(|(_, n)| n),
            Some(4)
        );
        // D = 64 and 256 split in their own `_seq` tile.
        for d in [64, 256] {
            let (t, n) = auto(&p(1, 16, 128, 16384, d, Causal::None)).unwrap();
            assert_eq!(Some(t), catalog::hopper_fp8_seq_tile(d));
            assert!(n > 1, "D {d}: {n}");
            assert!(catalog::hopper_fp8_tiles(d).contains(&t), "D {d}");
        }
        // Grids that fill the GPU, short keys, and the grids whose key-split tile fills more
        // than half the SMs (1,16,1024,128: the key split ran 16.1 µs, run 341) stay whole.
        for shape in [
            p(4, 16, 4096, 4096, 128, Causal::None),
            p(1, 8, 512, 512, 128, Causal::None),
            p(1, 16, 1024, 1024, 128, Causal::BottomRight),
            p(1, 4, 2048, 2048, 64, Causal::None),
        ] {
            assert_eq!(auto(&shape), None, "{:?}", shape.shape());
        }
        // A pinned tile keeps the dense entries unless splits are asked; asked splits run the
        // seq tile, which a pinned other tile cannot.
        let chunk = p(1, 16, 128, 16384, 128, Causal::None);
        let seq = catalog::hopper_fp8_seq_tile(128).unwrap();
        let other = *catalog::hopper_fp8_tiles(128)
            .iter()
            .find(|t| **t != seq)
            .unwrap();
        assert_eq!(
            fp8_hopper_splits(&chunk, Some(seq), None, 132).unwrap(),
            None
        );
        assert_eq!(
            fp8_hopper_splits(&chunk, Some(seq), Some(3), 132).unwrap(),
            Some((seq, 3))
        );
        let small = p(1, 2, 64, 100, 64, Causal::None);
        assert_eq!(
            fp8_hopper_splits(&small, None, Some(5), 132)
                .unwrap()
                .map(|(_, n)| n),
            Some(5)
        );
        assert_eq!(fp8_hopper_splits(&chunk, None, Some(1), 132).unwrap(), None);
        let err = fp8_hopper_splits(&chunk, Some(other), Some(2), 132)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&seq.name()) && err.contains(&other.name()),
            "{err}"
        );
        for bad in [0, crate::config::MAX_SPLITS + 1] {
            assert!(matches!(
                fp8_hopper_splits(&chunk, None, Some(bad), 132),
                Err(KernelError::UnsupportedFeature(_))
            ));
        }
    }

    #[test]
    fn fp8_seq_entries_are_generated_for_the_seq_tile_only() {
        for d in catalog::HOPPER_FP8_HEAD_DIMS {
            let unit = hopper_fp8_unit(Dtype::F16, d);
            let src = catalog::unit_source(&unit, false).unwrap();
            let seq = catalog::hopper_fp8_seq_tile(d).unwrap();
            for causal in [false, true] {
                let name = catalog::hopper_fp8_entry_name(&unit, &seq, causal, true);
                assert!(name.ends_with("_seq"), "{name}");
                assert!(src.contains(&format!("({name},")), "D {d}: {name}");
            }
            let fp8_seq = src
                .lines()
                .filter(|l| l.starts_with("ATTN_FWD_HOPPER_FP8_ENTRY(") && l.contains("_seq,"))
                .count();
            assert_eq!(fp8_seq, 2, "D {d}: one _seq entry per mask");
        }
    }
}
