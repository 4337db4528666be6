//! The backward pass (`kernels/bwd_kernel.cuh`): dQ, dK, dV from the forward's O and LSE and
//! the output gradient dO, for f16/bf16, every head dim of the catalog (D ≤ 128 on sm_89),
//! both causal alignments, GQA (dK/dV summed over each group) and any strides.
//!
//! Three launches on the launcher's stream: Δ = rowsum(dO∘O); the K/V-block-major main
//! kernel (dK, dV in registers, dQ added in f32 into a workspace); the conversion of dQ to
//! the storage type. [`BackwardOptions::deterministic`] makes the dQ additions take turns in a
//! fixed order, so two runs are bitwise equal.
//!
//! Two engines ([`BackwardEngine`]): the mma.sync kernel (every arch, every bucket) and, on
//! sm_90a at head-dim buckets 64, 128 and 256, the wgmma kernel (`kernels/bwd_hopper_kernel.cuh`:
//! 128-key CTAs of two consumer warpgroups and a producer warpgroup that issues the TMA loads
//! and adds each dQ tile with one bulk reduction; at D = 256, 64-key CTAs whose warpgroups
//! split the head dim and add dQ in 2 KiB bulk reductions per warp), which [`BackwardEngine::Auto`] takes
//! wherever it can run. Its Δ pass also writes LSE·log2e padded to whole 64-row blocks.
//!
//! The forward's features (sliding window, softcap, ALiBi; sinks, whose gradient is an extra
//! pass) run in each engine's general (`_feat`) entries, which mask and modify the scores
//! with the forward's own code (kernels/score_mod.cuh), and so do packed variable-length
//! batches ([`BackwardExtras::seqs`]), except that the wgmma kernel runs packed batches
//! without features in its sequences-only (`_seqs`) entry unless the launch is deterministic
//! ([`catalog::BwdHopperVariant`]).

use attn_ref::{AttnError, Causal, Problem};
use cudarc::driver::{
    CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig,
    PushKernelArg,
};

use crate::catalog::{self, Arch, Family, UnitKey};
use crate::config::elem_of;
use crate::launch::{
    bind_features, check_buffer, driver, fwd_features, softmax_scale, BwdWorkspace, FlashAttention,
    FwdFeatures, FwdSeqs, StorageType,
};
use crate::seqs::{bind_indices, plan_sequences, Expected, IndexLens, Sequences};
use crate::tensor::{check_tensor, ranges_overlap, Strides, Tensor, TensorMut};
use crate::KernelError;

/// Options of one backward.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackwardOptions {
    /// Add the dQ contributions of the key blocks in a fixed order (bitwise reproducible;
    /// somewhat slower).
    pub deterministic: bool,
    /// Which kernel runs it.
    pub engine: BackwardEngine,
    /// How the wgmma kernel covers its grid's last, partial round of CTAs.
    pub schedule: BackwardSchedule,
}

/// How the wgmma backward covers the last round of its grid, whose one CTA per (key block, KV
/// head, batch) runs one per SM: where the items are not a multiple of the SMs, the last round
/// leaves SMs idle while it runs. The tail's items can be cut into query-range pieces, one CTA
/// each, whose dK/dV partials the last piece adds (kernels/bwd_hopper_kernel.cuh
/// `bwd_tail_item`). Splits only plain (no features, dense) non-causal launches. dQ is added
/// as without a split (in deterministic mode, in the same turns), and dK/dV's pieces add in a
/// fixed order, so deterministic launches stay bitwise reproducible.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BackwardSchedule {
    /// Split the tail where a model of the round says it ends sooner (the crate's
    /// `backward::bwd_tail_split`); deterministic launches only where their dQ turns go in
    /// key order (a head with more key blocks than the GPU holds CTAs), where the split
    /// measured faster.
    #[default]
    Auto,
    /// One CTA per item, never split, and not persistent (the grid as it was before
    /// persistent launches: for comparisons).
    Grid,
    /// Split the last `items mod ctas` items into `pieces` pieces each (2..=8, at most the
    /// item's query blocks × group), as if the GPU held `ctas` CTAs at once (default-mode
    /// launches run persistent on that many): for tests and tuning. A launch that cannot
    /// split gets [`KernelError::EngineUnavailable`].
    TailPieces {
        /// CTAs resident at once (the SM count on the real GPU).
        ctas: usize,
        /// Pieces per tail item.
        pieces: usize,
    },
    /// Run persistent on `ctas` CTAs (at least 1) whatever the GPU's SM count, without a split
    /// tail: for tests and tuning. `Auto` runs persistent on one CTA per SM where a launch has
    /// more items than SMs. Only the wgmma kernel's plain entries run persistent, and only in
    /// the default mode; elsewhere this gets [`KernelError::EngineUnavailable`].
    Persistent {
        /// CTAs launched; each takes items until none is left.
        ctas: usize,
    },
}

/// The most pieces a tail item is cut into.
pub const TAIL_MAX_PIECES: usize = 8;

/// A piece's fixed cost in the model of [`bwd_tail_split`], in query-block iterations: its
/// K/V load and pipeline fill, the partial's write and, for the last, the read of the item's
/// slots. A model's margin, not a timed figure.
const TAIL_PIECE_OVERHEAD: usize = 2;

/// The iterations a split must save to be used ([`bwd_tail_split`]).
const TAIL_MIN_SAVED: usize = 4;

/// A split tail: items from `first` on (`items` of them) run as `pieces` CTAs each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TailSplit {
    pub first: usize,
    pub items: usize,
    pub pieces: usize,
}

impl TailSplit {
    /// CTAs of the split launch's 1-D grid.
    pub fn ctas(&self) -> usize {
        self.first + self.items * self.pieces
    }
}

/// The split of a launch of `items` equal items of `iters` query-block iterations each on
/// `ctas` CTA slots, or `None`. The tail is `items mod ctas` (every item when they fit in
/// one round). Unsplit, it keeps the SMs it runs on `iters` iterations longer than the rest;
/// cut into k pieces, ⌈T·k / G⌉ rounds of ⌈iters / k⌉ + TAIL_PIECE_OVERHEAD iterations. The
/// k (2..=TAIL_MAX_PIECES, k ≤ iters, at most two rounds of pieces, which bounds the
/// partials' workspace) that ends soonest is taken where it saves TAIL_MIN_SAVED iterations.
/// At 4,16,4096,128 on 132 SMs: 2048 items, T = 68, 64 iterations: k = 3 ends after 48.
/// Deterministic launches (`det_key_blocks`: Some(key blocks per head)) add each query block's
/// split key blocks one after another, so a piece lasts at least as many iterations as a head
/// has split key blocks, min(T, key blocks).
pub(crate) fn bwd_tail_split(
    items: usize,
    ctas: usize,
    iters: usize,
    det_key_blocks: Option<usize>,
) -> Option<TailSplit> {
    let ctas = ctas.max(1);
    let tail = items % ctas;
    if tail == 0 {
        return None;
    }
    let mut best: Option<(usize, usize)> = None;
    for k in 2..=TAIL_MAX_PIECES.min(iters) {
        if tail * k > 2 * ctas {
            break;
        }
        let chain = det_key_blocks.map_or(0, |kb| tail.min(kb));
        let t = (tail * k).div_ceil(ctas) * (iters.div_ceil(k).max(chain) + TAIL_PIECE_OVERHEAD);
        if t + TAIL_MIN_SAVED <= iters && best.is_none_or(|(bt, _)| t < bt) {
            best = Some((t, k));
        }
    }
    best.map(|(_, pieces)| TailSplit {
        first: items - tail,
        items: tail,
        pieces,
    })
}

/// The tail split a launch takes under `schedule`: `splittable` says whether the launch can
/// split (the wgmma kernel's plain non-causal entry); `items`, `iters` and `det_key_blocks`
/// as [`bwd_tail_split`], on `sm_count` SMs.
pub(crate) fn tail_for(
    schedule: BackwardSchedule,
    splittable: bool,
    items: usize,
    iters: usize,
    det_key_blocks: Option<usize>,
    sm_count: usize,
) -> Result<Option<TailSplit>, KernelError> {
    match schedule {
        BackwardSchedule::Grid | BackwardSchedule::Persistent { .. } => Ok(None),
        // The kernel decodes a split grid's CTA index in 32-bit ints.
        BackwardSchedule::Auto if splittable => {
            Ok(bwd_tail_split(items, sm_count, iters, det_key_blocks)
                .filter(|t| t.ctas() <= i32::MAX as usize))
        }
        BackwardSchedule::Auto => Ok(None),
        BackwardSchedule::TailPieces { ctas, pieces } => {
            if !splittable {
                return Err(KernelError::EngineUnavailable(
                    "a split tail runs on the wgmma backward's plain non-causal entry (sm_90a, buckets \
                     64, 128 and 256; no features, dense tensors); use BackwardSchedule::Auto or Grid"
                        .into(),
                ));
            }
            if !(2..=TAIL_MAX_PIECES.min(iters)).contains(&pieces) || ctas == 0 {
                return Err(AttnError::InvalidArgument(format!(
                    "BackwardSchedule::TailPieces: pieces must be 2..={} (and at most the item's \
                     {iters} query-block iterations), ctas at least 1; got pieces {pieces}, ctas {ctas}",
                    TAIL_MAX_PIECES
                ))
                .into());
            }
            let tail = items % ctas;
            let split = (tail > 0).then_some(TailSplit {
                first: items - tail,
                items: tail,
                pieces,
            });
            if split.is_some_and(|t| t.ctas() > i32::MAX as usize) {
                return Err(KernelError::IndexOverflow(
                    "the backward's split grid (CTAs)",
                ));
            }
            Ok(split)
        }
    }
}

/// The kernel family of a backward.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BackwardEngine {
    /// The wgmma kernel where it runs (sm_90a, head-dim buckets 64, 128 and 256), else
    /// mma.sync.
    #[default]
    Auto,
    /// The mma.sync kernel (sm_80+, every bucket): the fallback, selectable on Hopper too.
    MmaSync,
    /// The wgmma kernel; refused with [`KernelError::EngineUnavailable`] where it cannot run.
    Hopper,
}

/// Whether a backward runs the wgmma kernel: `engine` on a device whose cubin arch is `arch`,
/// at head-dim bucket `bucket`, with `smem` bytes of shared memory per block (`Auto` takes the
/// mma.sync kernel where the wgmma one's does not fit; a forced `Hopper` is refused later, by
/// the shared-memory check).
pub(crate) fn runs_hopper_backward(
    engine: BackwardEngine,
    arch: Arch,
    bucket: usize,
    smem: usize,
) -> Result<bool, KernelError> {
    let can = catalog::bwd_hopper_bucket(arch, bucket);
    match engine {
        BackwardEngine::Auto => Ok(can && catalog::bwd_hopper_smem_bytes(bucket) <= smem),
        BackwardEngine::MmaSync => Ok(false),
        BackwardEngine::Hopper if can => Ok(true),
        BackwardEngine::Hopper => Err(KernelError::EngineUnavailable(format!(
            "the wgmma backward runs on sm_90a at head dims 33-64, 97-128 and 225-256 (buckets 64, 128, 256); \
             this is sm_{} at bucket {bucket}: use BackwardEngine::Auto or MmaSync",
            arch.nvcc_name()
        ))),
    }
}

/// One backward pass, described whole. Q `[B, Hq, Sq, D]`, K/V `[B, Hkv, Sk, D]`, O and dO
/// like Q, LSE `[B, Hq, Sq]` (the forward's, natural log); the gradients dQ like Q and dK, dV
/// like K. Every tensor may have any strides ([`Tensor`]).
#[derive(Debug)]
pub struct Backward<'a, T> {
    /// The forward's problem.
    pub problem: &'a Problem,
    /// Queries.
    pub q: Tensor<'a, T>,
    /// Keys.
    pub k: Tensor<'a, T>,
    /// Values.
    pub v: Tensor<'a, T>,
    /// The forward's output.
    pub o: Tensor<'a, T>,
    /// The forward's LSE, `[B, Hq, Sq]` contiguous.
    pub lse: CudaView<'a, f32>,
    /// The gradient of the loss with respect to O.
    pub d_o: Tensor<'a, T>,
    /// dQ (written).
    pub dq: TensorMut<'a, T>,
    /// dK (written).
    pub dk: TensorMut<'a, T>,
    /// dV (written).
    pub dv: TensorMut<'a, T>,
    /// Options.
    pub options: BackwardOptions,
}

/// What a backward takes beyond [`Backward`]'s dense tensors, for
/// [`FlashAttention::backward_with`].
#[derive(Debug, Default)]
pub struct BackwardExtras<'a> {
    /// Packed variable-length sequences, as the forward's [`Sequences`]: `cu_seqlens_q` with
    /// Q, O, dO and dQ `[1, Hq, total_q, D]` and LSE `[Hq, total_q]`, and/or `cu_seqlens_k`
    /// with K, V, dK and dV `[1, Hkv, total_k, D]`. The problem's `q_len` and `kv_len` are
    /// the longest sequences (they size the grids: rows past them get no gradient). Paged
    /// caches and `seqused_k` are refused.
    pub seqs: Sequences<'a>,
    /// The gradient of the sink logits, `[Hq]` f32 (written, summed over the batch and the
    /// rows), for a problem with attention sinks; `None` skips it.
    pub dsinks: Option<CudaViewMut<'a, f32>>,
}

/// The debug backward's dump buffer and the `(b, h, q_tile)` list it dumps
/// (kernels/debug_dump.cuh's backward layout).
pub(crate) struct BwdDump<'a> {
    pub buffer: &'a mut CudaSlice<f32>,
    pub tiles: &'a CudaSlice<i32>,
    pub count: i32,
}

/// What a backward ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackwardInfo {
    /// The main kernel's entry point.
    pub kernel: String,
    /// The cubin arch it came from.
    pub arch: &'static str,
    /// Its grid: (key blocks, KV heads, batch), or (CTAs, 1, 1) with a split tail or when
    /// persistent.
    pub grid: (u32, u32, u32),
    /// Its dynamic shared memory.
    pub smem_bytes: usize,
    /// Whether dQ was accumulated in a fixed order.
    pub deterministic: bool,
    /// The split tail ([`BackwardSchedule`]): (first split item, items split, pieces each);
    /// `None` for a classic grid.
    pub tail: Option<(usize, usize, usize)>,
    /// A persistent launch's items, which its `grid.0` CTAs took in turn
    /// ([`BackwardSchedule::Persistent`]); `None`: one CTA per item.
    pub persistent_items: Option<usize>,
}

/// Whether a wgmma backward launch of `items` CTAs runs persistent: `(items, CTAs)`.
/// Plain entries (no features, dense) in the default mode, with more items than SMs under
/// [`BackwardSchedule::Auto`], on the CTAs [`BackwardSchedule::Persistent`] or a forced split
/// ([`BackwardSchedule::TailPieces`]) names. [`BackwardSchedule::Grid`] keeps one CTA per
/// item. Deterministic launches keep theirs: a CTA waits for other items' dQ turns, which the
/// rotated walk takes from CTAs launched after it; a persistent CTA holding a later item of
/// its own could not start them. The kernel numbers items in 32-bit ints.
pub(crate) fn persistent_items(
    options: &BackwardOptions,
    variant: catalog::BwdHopperVariant,
    items: usize,
    sm_count: usize,
) -> Option<(i32, u32)> {
    if options.deterministic || variant != catalog::BwdHopperVariant::Plain {
        return None;
    }
    let ctas = match options.schedule {
        BackwardSchedule::Grid => return None,
        // A forced split runs as if the GPU held `ctas` CTAs: on that many.
        BackwardSchedule::Persistent { ctas } | BackwardSchedule::TailPieces { ctas, .. } => {
            ctas.clamp(1, items.max(1))
        }
        BackwardSchedule::Auto if items > sm_count => sm_count,
        BackwardSchedule::Auto => return None,
    };
    Some((i32::try_from(items).ok()?, u32::try_from(ctas).ok()?))
}

/// Kernel parameters; the layout of `attn::BwdParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BwdParams {
    batch: i32,
    q_heads: i32,
    kv_heads: i32,
    q_len: i32,
    kv_len: i32,
    group: i32,
    diag_offset: i32,
    causal: i32,
    head_dim: i32,
    dq_pitch: i32,
    q_blocks: i32,
    deterministic: i32,
    det_rotated: i32,
    scale_log2: f32,
    scale: f32,
    q_stride: [i64; 3],
    k_stride: [i64; 3],
    v_stride: [i64; 3],
    o_stride: [i64; 3],
    do_stride: [i64; 3],
    dq_stride: [i64; 3],
    dk_stride: [i64; 3],
    dv_stride: [i64; 3],
    feat: FwdFeatures,
    seqs: FwdSeqs,
    tail_first: i32,
    tail_pieces: i32,
    /// The wgmma kernel's persistent launches: the items of its grid (0: one CTA per item).
    persistent_items: i32,
    /// Where in the tickets' array the persistent launch's item counter is.
    sched_slot: i32,
}

// SAFETY: plain-old-data with the C layout of `attn::BwdParams`: thirteen 4-byte ints and two
// floats (60 bytes, so both languages pad the 8-byte strides to offset 64); then the
// forward's FwdFeatures and FwdSeqs (mirrors checked in src/launch.rs) at 8-byte-aligned
// offsets 256 and 312; then four ints, which end the struct on an 8-byte multiple (the unit
// test `a_valid_backward_plans_its_bucket_tile_and_strides` pins these offsets).
unsafe impl DeviceRepr for BwdParams {}

/// What [`plan_backward`] derives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BwdPlan {
    pub bucket: usize,
    pub tile: catalog::Tile,
    pub params: BwdParams,
    /// Runs a general entry: features or packed sequences (the wgmma kernel's `_seqs` or
    /// `_feat`, the mma.sync kernel's `_feat`).
    pub general: bool,
    /// A packed sequence layout (the Hopper engine runs those without features in its
    /// `_seqs` entry).
    pub packed: bool,
    /// Rows of LSE, Δ and the dQ workspace: B·Hq·Sq, or Hq·total_q for packed queries.
    pub rows: usize,
}

/// Whether a deterministic Hopper backward walks its query blocks rotated
/// (kernels/bwd_hopper_kernel.cuh `bwd_rotated_turn`): non-causal launches of the plain entry
/// whose `head_ctas` per head (its key blocks, [`head_ctas`]) all fit on the GPU's `sm_count`
/// SMs at once (one CTA per SM).
/// Rotated, the first adder on a query block can be a key block the grid launches after the
/// one that waits for it, so a head whose CTAs cannot all be resident would hang (a
/// non-causal S > 16 896 at D ≤ 128 on an H100's 132 SMs, S > 8 448 at D = 256); those launches
/// take the turns in key-block order, where every CTA waits only for ones launched before it
/// (a split tail's pieces come after every whole item, in item order, so that holds for them
/// too). The heads launch one after another, so a head whose CTAs fit finds its slots once
/// the heads before it, whose waits are all on resident CTAs, have finished.
pub(crate) fn rotated_turns(
    deterministic: bool,
    causal: bool,
    variant: catalog::BwdHopperVariant,
    head_ctas: usize,
    sm_count: usize,
) -> bool {
    deterministic && !causal && variant == catalog::BwdHopperVariant::Plain && head_ctas <= sm_count
}

/// The most CTAs one (KV head, batch) runs: its `key_blocks`, and with a split tail the
/// pieces of its tail items in place of them (the tail is the grid's last items, so the last
/// heads hold it; a head holds at most `key_blocks` of them).
pub(crate) fn head_ctas(key_blocks: usize, tail: Option<TailSplit>) -> usize {
    key_blocks + tail.map_or(0, |t| (t.pieces - 1) * t.items.min(key_blocks))
}

/// The backward workspace's new (f32, u32) capacities when the kept one, `have`, cannot hold
/// `need`: each the larger of the two, so neither shrinks; `None` when `have` holds it.
fn workspace_growth(have: Option<(usize, usize)>, need: (usize, usize)) -> Option<(usize, usize)> {
    match have {
        Some((f, u)) if f >= need.0 && u >= need.1 => None,
        Some((f, u)) => Some((f.max(need.0), u.max(need.1))),
        None => Some(need),
    }
}

/// Query rows per CTA of both engines' Δ passes: 8 warps of `kDeltaRows` (4) rows each
/// (kernels/bwd_kernel.cuh); the grids are sized by it. A divisor of the wgmma engine's
/// 64-row blocks.
const DELTA_ROWS_PER_CTA: usize = 32;

/// Where LSE₂, Δ and the dQ accumulator sit in the backward's f32 workspace, as (start, len)
/// in floats, and the length they need together. Each region starts 16-byte aligned: the
/// mma.sync kernel adds `float2` pairs into the accumulator on sm_90 (8-byte atomics), and Δ's
/// length there is B·Hq·Sq, odd for some shapes; packed back to back, an odd length put the
/// accumulator on a 4-byte boundary and the kernel failed with CUDA_ERROR_MISALIGNED_ADDRESS.
/// Δ keeps at least one float (an empty launch still binds it).
/// The fourth region holds the wgmma kernel's tail partials (`tail_len`, at least one float:
/// every launch binds it).
fn bwd_f32_regions(
    lse2_len: usize,
    delta_len: usize,
    dq_len: usize,
    tail_len: usize,
) -> ([(usize, usize); 4], usize) {
    let span = |len: usize| len.next_multiple_of(4);
    let lse2 = (0, lse2_len);
    let delta = (span(lse2_len), delta_len.max(1));
    let dq = (delta.0 + span(delta.1), dq_len);
    let tail = (dq.0 + span(dq_len), tail_len.max(1));
    ([lse2, delta, dq, tail], tail.0 + tail.1)
}

fn st(s: Strides) -> [i64; 3] {
    [s.batch as i64, s.head as i64, s.row as i64]
}

/// One tensor's description for the pure checks: dims, strides, view length, address.
type Desc = ([usize; 4], Strides, usize, u64);

/// `BwdParams::q_blocks` of a launch: query blocks of the mma.sync tile's `block_m` rows, or
/// of the wgmma kernel's own 64 (`catalog::BWD_HOPPER_BLOCK_M`), by which that kernel's
/// workspaces, Δ pass and semaphores are laid out whatever the mma.sync tile is (run 314 hung
/// a 128-query mma.sync tile at D = 64 when both engines took the tile's).
pub(crate) fn engine_q_blocks(hopper: bool, q_len: usize, tile: &catalog::Tile) -> i32 {
    let rows = if hopper {
        catalog::BWD_HOPPER_BLOCK_M
    } else {
        tile.block_m
    };
    q_len.div_ceil(rows) as i32
}

/// The bucket, tile and parameters of a backward, after every check that needs no device:
/// features, head dim, tensor dims/extents/alignment, LSE length, and that no output overlaps
/// an input or another output.
///
/// `idx` is the sequence layout (packed Q and/or K; [`IndexLens::default`] for dense
/// tensors). With packed keys the problem's `kv_len` is the longest key sequence
/// (`max_seqlen_k`), which sizes the grid, as `q_len` is `max_seqlen_q`. `arch` is the
/// cubin's and `smem` the device's (or the launcher's) shared memory per block: the mma.sync
/// tile is the first of the unit's that fits it ([`catalog::bwd_tile_within`]).
#[allow(clippy::too_many_arguments)] // flattened descriptions, for testing without a device
pub(crate) fn plan_backward(
    problem: &Problem,
    arch: Arch,
    smem: usize,
    elem_bytes: usize,
    inputs: [Desc; 5], // q, k, v, o, dO
    lse: (usize, u64),
    outputs: [Desc; 3], // dQ, dK, dV
    deterministic: bool,
    idx: &IndexLens<'_>,
) -> Result<BwdPlan, KernelError> {
    let s = problem.shape();
    if idx.block_table.is_some() || idx.seqused_k.is_some() {
        return Err(KernelError::UnsupportedFeature(
            "a paged KV cache or seqused_k in the backward pass (training batches are dense or \
             packed with cu_seqlens_q/k)"
                .into(),
        ));
    }
    let packed = idx.cu_q.is_some() || idx.cu_k.is_some();
    let (expected, seqs) = if packed {
        let plan = plan_sequences(problem, idx, inputs[0].0, inputs[1].0)?;
        if let Some((_, Some(cu))) = idx.cu_k {
            let longest = cu.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
            if longest > 0 && longest as usize > s.kv_len() {
                return Err(AttnError::InvalidArgument(format!(
                    "a sequence has {longest} keys but the problem's kv_len (max_seqlen_k, \
                     which sizes the backward's grid) is {}; pass the longest length",
                    s.kv_len()
                ))
                .into());
            }
        }
        (plan.expected, plan.seqs)
    } else {
        (Expected::dense(s), FwdSeqs::default())
    };
    let general = packed || !problem.features().is_empty();
    let d = s.head_dim();
    let bucket = catalog::fwd_bucket(d).ok_or(KernelError::UnsupportedHeadDim {
        head_dim: d,
        supported: "D % 8 == 0, 8 ≤ D ≤ 256",
    })?;
    let tile = catalog::bwd_tile_within(arch, bucket, smem).ok_or(KernelError::UnsupportedHeadDim {
        head_dim: d,
        supported: "D ≤ 256 for the backward with at least 96.5 KiB of shared memory per block (every sm_80+ part)",
    })?;
    let (qd, kd) = (expected.q, expected.kv);
    let names = ["Q", "K", "V", "O", "dO"];
    let want = [qd, kd, kd, qd, qd];
    let mut in_ranges = Vec::new();
    for ((name, dims), (got, strides, len, addr)) in names.iter().zip(want).zip(inputs) {
        let c = check_tensor(name, dims, got, strides, len, elem_bytes, addr, false)?;
        in_ranges.push((*name, addr, (c.extent * elem_bytes) as u64));
    }
    check_buffer("LSE", expected.lse, lse.0)?;
    in_ranges.push(("LSE", lse.1, (expected.lse * 4) as u64));
    let out_names = ["dQ", "dK", "dV"];
    let mut out_ranges: Vec<(&'static str, u64, u64)> = Vec::new();
    for ((name, dims), (got, strides, len, addr)) in out_names.iter().zip([qd, kd, kd]).zip(outputs)
    {
        let c = check_tensor(name, dims, got, strides, len, elem_bytes, addr, true)?;
        let bytes = (c.extent * elem_bytes) as u64;
        for &(other, a, l) in in_ranges.iter().chain(out_ranges.iter()) {
            if ranges_overlap(addr, bytes, a, l) {
                return Err(KernelError::Overlap {
                    output: name,
                    input: other,
                });
            }
        }
        out_ranges.push((name, addr, bytes));
    }
    let i32_ok = [s.q_len(), s.kv_len(), s.batch(), s.q_heads()]
        .iter()
        .all(|&x| x <= i32::MAX as usize);
    if !i32_ok || s.batch() > 65535 || s.q_heads() > 65535 {
        return Err(KernelError::IndexOverflow(
            "backward grid (lengths, heads, batch)",
        ));
    }
    let diag_offset = match problem.causal() {
        Causal::None | Causal::TopLeft => 0i64,
        Causal::BottomRight => s.kv_len() as i64 - s.q_len() as i64,
    };
    let [sq, sk, sv, so, sdo] = inputs.map(|x| st(x.1));
    let [sdq, sdk, sdv] = outputs.map(|x| st(x.1));
    let params = BwdParams {
        batch: s.batch() as i32,
        q_heads: s.q_heads() as i32,
        kv_heads: s.kv_heads() as i32,
        q_len: s.q_len() as i32,
        kv_len: s.kv_len() as i32,
        group: s.group_size() as i32,
        diag_offset: diag_offset as i32,
        causal: i32::from(problem.causal() != Causal::None),
        head_dim: d as i32,
        dq_pitch: bucket as i32,
        q_blocks: s.q_len().div_ceil(tile.block_m) as i32,
        deterministic: i32::from(deterministic),
        // The Hopper launch decides (`rotated_turns`); the mma.sync kernel ignores it.
        det_rotated: 0,
        // The softmax runs at the forward's scale (the softcap c when there is one).
        scale_log2: (softmax_scale(problem) * std::f64::consts::LOG2_E) as f32,
        // dQ and dK's final factor: the softmax scale, or c with a softcap, whose scale/c
        // the kernels fold into dS before rounding it (FlashAttention-2's order).
        scale: softmax_scale(problem) as f32,
        q_stride: sq,
        k_stride: sk,
        v_stride: sv,
        o_stride: so,
        do_stride: sdo,
        dq_stride: sdq,
        dk_stride: sdk,
        dv_stride: sdv,
        feat: fwd_features(problem),
        seqs,
        // The Hopper launch decides (`tail_for`); the mma.sync kernel ignores them.
        tail_first: 0,
        tail_pieces: 0,
        persistent_items: 0,
        sched_slot: 0,
    };
    Ok(BwdPlan {
        bucket,
        tile,
        params,
        general,
        packed,
        rows: expected.lse,
    })
}

fn desc_of<T>(t: &Tensor<'_, T>, addr: u64) -> Desc {
    (t.dims(), t.strides(), t.view().len(), addr)
}

impl FlashAttention {
    /// Runs the backward pass on this launcher's stream. Everything is validated before the
    /// first launch; on error nothing is written. Every feature of the problem (sliding
    /// window, softcap, ALiBi, sinks) is differentiated as the forward applied it; for packed
    /// sequences or the sinks' gradient, see [`FlashAttention::backward_with`].
    pub fn backward<T: StorageType>(
        &self,
        args: Backward<'_, T>,
    ) -> Result<BackwardInfo, KernelError> {
        self.backward_with(args, BackwardExtras::default())
    }

    /// [`FlashAttention::backward`] with packed variable-length sequences and/or the sinks'
    /// gradient ([`BackwardExtras`]). Features and packed sequences run the engines' general
    /// (`_feat`) entries: the wgmma kernel's where [`BackwardEngine::Auto`] takes it (sm_90a,
    /// buckets 64, 128 and 256), else the mma.sync kernel's. On the wgmma kernel, packed sequences
    /// without features and outside deterministic mode run its `_seqs` entry instead, the plain
    /// entry's loop plus each sequence's offsets and key mask (1.22–1.25× faster on 16 packed
    /// sequences, docs/PERF.md run 95). The wgmma kernel's workspaces are padded per sequence
    /// to the longest one (B·Hq·⌈max_seqlen_q/64⌉·64 rows).
    pub fn backward_with<T: StorageType>(
        &self,
        args: Backward<'_, T>,
        extras: BackwardExtras<'_>,
    ) -> Result<BackwardInfo, KernelError> {
        self.backward_dumping(args, extras, None)
    }

    /// The arch whose backward cubins run on this device for `unit` (bucket and dtype): the
    /// embedded cubin the device takes, else the newest arch it runs.
    pub(crate) fn backward_arch(&self, unit: &UnitKey) -> Result<Arch, KernelError> {
        let (major, minor) = self.compute_capability();
        crate::cubin::select(unit, false, major, minor)
            .and_then(|c| Arch::parse(c.arch))
            .or_else(|| {
                Arch::ALL
                    .iter()
                    .rev()
                    .copied()
                    .find(|a| a.runs_on(major, minor))
            })
            .ok_or_else(|| KernelError::NoCubinForArch {
                device: format!("{major}.{minor}"),
                available: "sm_80, sm_89, sm_90a".into(),
            })
    }

    /// [`FlashAttention::backward_with`], and with `dump` the mma.sync kernel's debug entry
    /// writing its tile dumps (`crate::debug`, feature `debug-kernels`).
    pub(crate) fn backward_dumping<T: StorageType>(
        &self,
        args: Backward<'_, T>,
        extras: BackwardExtras<'_>,
        mut dump: Option<BwdDump<'_>>,
    ) -> Result<BackwardInfo, KernelError> {
        let Backward {
            problem,
            q,
            k,
            v,
            o,
            lse,
            d_o,
            mut dq,
            mut dk,
            mut dv,
            options,
        } = args;
        let stream = self.stream();
        let s = problem.shape();
        let elem = elem_of(T::DTYPE);
        let unit0 = UnitKey {
            family: Family::Bwd,
            arch: Arch::Sm80,
            elem,
            head_dim: catalog::fwd_bucket(s.head_dim()).unwrap_or(0),
        };
        let arch = self.backward_arch(&unit0)?;
        let (qp, gq) = q.view().device_ptr(stream);
        let (kp, gk) = k.view().device_ptr(stream);
        let (vp, gv) = v.view().device_ptr(stream);
        let (op, go) = o.view().device_ptr(stream);
        let (dop, gdo) = d_o.view().device_ptr(stream);
        let (lp, gl) = lse.device_ptr(stream);
        let dq_desc = (dq.dims(), dq.strides(), dq.view_len(), 0u64);
        let dk_desc = (dk.dims(), dk.strides(), dk.view_len(), 0u64);
        let dv_desc = (dv.dims(), dv.strides(), dv.view_len(), 0u64);
        let (dqp, gdq) = dq.view_mut().device_ptr_mut(stream);
        let (dkp, gdk) = dk.view_mut().device_ptr_mut(stream);
        let (dvp, gdv) = dv.view_mut().device_ptr_mut(stream);
        let guards = [gq, gk, gv, go, gdo, gl, gdq, gdk, gdv];
        let BackwardExtras { seqs, dsinks } = extras;
        let idx = IndexLens::of(&seqs);
        let BwdPlan {
            bucket,
            tile,
            mut params,
            general,
            packed,
            rows,
        } = plan_backward(
            problem,
            arch,
            self.max_smem_per_block(),
            std::mem::size_of::<T>(),
            [
                desc_of(&q, qp),
                desc_of(&k, kp),
                desc_of(&v, vp),
                desc_of(&o, op),
                desc_of(&d_o, dop),
            ],
            (lse.len(), lp),
            [
                (dq_desc.0, dq_desc.1, dq_desc.2, dqp),
                (dk_desc.0, dk_desc.1, dk_desc.2, dkp),
                (dv_desc.0, dv_desc.1, dv_desc.2, dvp),
            ],
            options.deterministic,
            &idx,
        )?;
        let mut dsinks = dsinks;
        if let Some(ds) = &dsinks {
            if problem.features().sinks.is_none() {
                return Err(AttnError::InvalidArgument(
                    "dsinks was given but the problem has no attention sinks".into(),
                )
                .into());
            }
            check_buffer("dsinks", s.q_heads(), ds.len())?;
        }
        // The cubin's arch, which the entry names of its tiles are relative to.
        let unit = UnitKey {
            head_dim: bucket,
            arch,
            ..unit0
        };
        let hopper = runs_hopper_backward(options.engine, arch, bucket, self.max_smem_per_block())?;
        params.q_blocks = engine_q_blocks(hopper, s.q_len(), &tile);
        if dump.is_some() && (hopper || general || !catalog::BWD_DEBUG_HEAD_DIMS.contains(&bucket))
        {
            return Err(KernelError::EngineUnavailable(format!(
                "backward tile dumps come from the mma.sync kernel's plain entries at head dims \
                 {:?} (no features or packed sequences); this launch needs {}",
                catalog::BWD_DEBUG_HEAD_DIMS,
                if hopper {
                    "the wgmma kernel"
                } else if general {
                    "a general entry"
                } else {
                    "another bucket"
                }
            )));
        }
        let smem = if hopper {
            catalog::bwd_hopper_smem_bytes(bucket)
        } else {
            catalog::bwd_smem_bytes(&tile, bucket)
        };
        if smem > self.max_smem_per_block() {
            return Err(KernelError::ConfigTooLarge {
                config: format!("backward d{bucket}"),
                smem,
                limit: self.max_smem_per_block(),
            });
        }
        let causal = problem.causal() != Causal::None;
        // The features' arrays (ALiBi slopes, sinks) and the sequences' index arrays; their
        // guards keep cudarc's stream ordering until the launches are queued.
        let mut feature_bufs = self.features.lock().map_err(|_| KernelError::Poisoned)?;
        let feature_guard = bind_features(stream, &mut feature_bufs, problem, &mut params.feat)?;
        let index_guards = bind_indices(stream, &seqs, &mut params.seqs);
        let sem_len = if options.deterministic {
            s.batch() * s.q_heads() * params.q_blocks as usize
        } else {
            1
        };
        // The wgmma kernel's split tail (`BackwardSchedule`): its plain non-causal entry; items
        // are its grid's (key block, KV head, batch), each walking every query block of its
        // GQA group.
        let variant = catalog::BwdHopperVariant::pick(
            !problem.features().is_empty(),
            packed,
            options.deterministic,
        );
        if let BackwardSchedule::Persistent { ctas } = options.schedule {
            if !(hopper && variant == catalog::BwdHopperVariant::Plain && !options.deterministic) {
                return Err(KernelError::EngineUnavailable(
                    "a persistent backward runs on the wgmma kernel's plain entries (sm_90a, \
                     buckets 64, 128 and 256; no features, dense tensors) in the default mode; \
                     use BackwardSchedule::Auto or Grid"
                        .into(),
                ));
            }
            if ctas == 0 {
                return Err(AttnError::InvalidArgument(
                    "BackwardSchedule::Persistent: ctas must be at least 1".into(),
                )
                .into());
            }
        }
        let block_n = catalog::bwd_hopper_block_n(bucket);
        let key_blocks = s.kv_len().div_ceil(block_n);
        let mut tail = tail_for(
            options.schedule,
            hopper && variant == catalog::BwdHopperVariant::Plain && !causal,
            key_blocks * s.kv_heads() * s.batch(),
            s.q_len().div_ceil(catalog::BWD_HOPPER_BLOCK_M) * s.group_size(),
            options.deterministic.then_some(key_blocks),
            self.sm_count(),
        )?;
        // Deterministic turns rotated need every CTA of a head resident at once (`rotated_turns`);
        // a split head has more of them, and where they do not fit a (forced) split takes its
        // turns in key order.
        let rotated = |tail: Option<TailSplit>| {
            rotated_turns(
                options.deterministic,
                causal,
                variant,
                head_ctas(key_blocks, tail),
                self.sm_count(),
            )
        };
        // Auto splits deterministic launches only where their turns go in key order (heads
        // with more CTAs than the GPU holds): every key block walks its query blocks in the
        // same order, so the pieces of one range follow the split block before them a step
        // behind, and the last round does end on the tail (runs 293 and 296, 2,16,8192,256:
        // 0.95× the unsplit time in 8 pieces). Rotated launches keep their grid: no split
        // measured faster there (runs 293 and 296, 4,16,4096,256: 1.00–1.03×; runs 285–286,
        // 1.00–1.10×), as a model of the whole grid's turns predicts (docs/PERF.md).
        if options.schedule == BackwardSchedule::Auto && options.deterministic && rotated(tail) {
            tail = None;
        }
        // Per tail item and piece, dK and dV in f32 (block_n keys × the bucket's columns each);
        // one ticket per item, after the semaphores (zeroed with them), then a persistent
        // launch's item counter.
        let tail_len = tail.map_or(0, |t| t.items * t.pieces * 2 * block_n * bucket);
        let tickets = tail.map_or(1, |t| t.items);
        let sem_len = sem_len + tickets + 1;
        // LSE₂ (wgmma only), Δ and the f32 dQ accumulator: B·Hq·q_blocks·64 floats each for the
        // wgmma kernel's padded tiles (the accumulator that many rows of the bucket's width),
        // `rows` for the mma.sync kernel's Δ and accumulator rows. Carved from the launcher's
        // kept workspace (`BwdWorkspace`, grown here) and zeroed in stream order (by a memset,
        // or by the wgmma engine's Δ pass).
        let padded_rows =
            s.batch() * s.q_heads() * params.q_blocks as usize * catalog::BWD_HOPPER_BLOCK_M;
        let (lse2_len, delta_len) = if hopper {
            (padded_rows, padded_rows)
        } else {
            (0, rows)
        };
        let (regions, f32_len) = bwd_f32_regions(lse2_len, delta_len, delta_len * bucket, tail_len);
        let mut ws_guard = self
            .bwd_workspace
            .lock()
            .map_err(|_| KernelError::Poisoned)?;
        let kept = ws_guard.take();
        let have = kept.as_ref().map(|w| (w.f32s.len(), w.u32s.len()));
        let ws = match (kept, workspace_growth(have, (f32_len, sem_len))) {
            (Some(w), None) => ws_guard.insert(w),
            (kept, growth) => {
                let (f32_cap, u32_cap) = growth.unwrap_or((f32_len, sem_len));
                drop(kept); // the old buffers are freed first, in stream order
                let ws = BwdWorkspace {
                    f32s: stream
                        .alloc_zeros::<f32>(f32_cap)
                        .map_err(driver("allocating the backward workspace"))?,
                    u32s: stream
                        .alloc_zeros::<u32>(u32_cap)
                        .map_err(driver("allocating the backward semaphores"))?,
                };
                ws_guard.insert(ws)
            }
        };
        let [lse2_at, delta_at, dq_at, tail_at] = regions;
        let (mut lse2_span, mut rest) = ws.f32s.split_at_mut(delta_at.0);
        let (mut lse2, _) = lse2_span.split_at_mut(lse2_at.1);
        let (mut delta_span, mut rest) = rest.split_at_mut(dq_at.0 - delta_at.0);
        let (mut delta, _) = delta_span.split_at_mut(delta_at.1);
        let (mut dq_span, mut rest) = rest.split_at_mut(tail_at.0 - dq_at.0);
        let (mut dq_acc, _) = dq_span.split_at_mut(dq_at.1);
        let (mut tail_part, _) = rest.split_at_mut(tail_at.1);
        let mut sems_all = ws.u32s.slice_mut(..sem_len);
        // The wgmma engine's Δ pass writes every padded row of LSE₂ and Δ and zeroes the
        // accumulator's, so only the mma.sync engine's workspace is zeroed here.
        if !hopper {
            for region in [&mut lse2, &mut delta, &mut dq_acc] {
                stream
                    .memset_zeros(region)
                    .map_err(driver("zeroing the backward workspace"))?;
            }
        }
        stream
            .memset_zeros(&mut sems_all)
            .map_err(driver("zeroing the backward semaphores"))?;
        let (mut sems, mut tail_cnt) = sems_all.split_at_mut(sem_len - tickets - 1);
        let row_grid = (
            s.q_len().div_ceil(8) as u32,
            s.q_heads() as u32,
            s.batch() as u32,
        );

        let (name, grid, arch_str, post, post_grid, mut dq_acc, mut delta, delta_pitch) = if hopper
        {
            use crate::hopper::{encode_tma, tma_geometry, TmaElem};
            let name = catalog::bwd_hopper_entry_name(&unit, causal, variant);
            let (main, arch_str) = self.function(&unit, &name, false, smem)?;
            let (pre_name, post_name) = catalog::bwd_hopper_prep_entry_names(&unit);
            let (pre, _) = self.function(&unit, &pre_name, false, 0)?;
            let (post, _) = self.function(&unit, &post_name, false, 0)?;
            let elem_t = TmaElem::from(elem);
            let tma = |t: &Tensor<'_, T>, addr: u64, rows: usize| {
                encode_tma(
                    &tma_geometry(t.dims(), t.strides(), 2, 64, rows)?,
                    addr,
                    elem_t,
                )
            };
            let (tq, tk, tv, tdo) = (
                tma(&q, qp, catalog::BWD_HOPPER_BLOCK_M)?,
                tma(&k, kp, block_n)?,
                tma(&v, vp, block_n)?,
                tma(&d_o, dop, catalog::BWD_HOPPER_BLOCK_M)?,
            );
            let q_pad = params.q_blocks as usize * catalog::BWD_HOPPER_BLOCK_M;
            let grid = (
                s.kv_len().div_ceil(block_n) as u32,
                s.kv_heads() as u32,
                s.batch() as u32,
            );
            params.det_rotated = i32::from(rotated(tail));
            // A split tail runs a 1-D grid (kernels/bwd_hopper_kernel.cuh `bwd_tail_item`).
            let grid = match tail {
                Some(t) => {
                    params.tail_first = t.first as i32;
                    params.tail_pieces = t.pieces as i32;
                    // At most i32::MAX CTAs (`tail_for`).
                    (t.ctas() as u32, 1, 1)
                }
                None => grid,
            };
            // Persistent: one CTA per SM takes the grid's items in order
            // (kernels/bwd_hopper_kernel.cuh `BwdItemQueue`).
            let items = grid.0 as usize * grid.1 as usize * grid.2 as usize;
            let persistent = persistent_items(&options, variant, items, self.sm_count());
            let grid = match persistent {
                Some((n, ctas)) => {
                    params.persistent_items = n;
                    params.sched_slot = tickets as i32;
                    (ctas, 1, 1)
                }
                None => grid,
            };

            let mut b = stream.launch_builder(&pre);
            b.arg(&op)
                .arg(&dop)
                .arg(&lp)
                .arg(&mut lse2)
                .arg(&mut delta)
                .arg(&mut dq_acc)
                .arg(&params);
            // SAFETY: matches ATTN_BWD_HOPPER_PREP_ENTRY's first kernel (o, d_o, lse, lse2,
            // delta, dq_acc, BwdParams). `plan_backward` proved O and dO hold every (b, h,
            // row < Sq, col < D) their strides name, 16-byte aligned chunks, and LSE B·Hq·Sq
            // floats; lse2 and delta hold B·Hq·q_blocks·64 floats and dq_acc that many rows of
            // the bucket's width (16-byte aligned, `bwd_f32_regions`), DELTA_ROWS_PER_CTA padded
            // rows per CTA of the grid (q_blocks·64 / DELTA_ROWS_PER_CTA, Hq, B), so every
            // padded row of the three.
            unsafe {
                b.launch(LaunchConfig {
                    grid_dim: (
                        (q_pad / DELTA_ROWS_PER_CTA) as u32,
                        s.q_heads() as u32,
                        s.batch() as u32,
                    ),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })
            }
            .map_err(driver("launching the backward's Δ pass"))?;

            let mut b = stream.launch_builder(&main);
            b.arg(&tq)
                .arg(&tk)
                .arg(&tv)
                .arg(&tdo)
                .arg(&mut lse2)
                .arg(&mut delta)
                .arg(&mut dq_acc)
                .arg(&dkp)
                .arg(&dvp)
                .arg(&mut sems)
                .arg(&mut tail_part)
                .arg(&mut tail_cnt)
                .arg(&params);
            // SAFETY: matches ATTN_BWD_HOPPER_ENTRY (four TMA descriptors by value, lse2,
            // delta, dq_acc, dk, dv, sems, tail_part, tail_cnt, BwdParams). The descriptors
            // describe Q, K, V and dO with the dims and strides `plan_backward` checked against
            // their views (TMA bounds every read by those dims); lse2/delta hold
            // B·Hq·q_blocks·64 floats and dq_acc that many rows of the bucket's width, the
            // kernel's tiles of 64 rows; sems as in the mma.sync launch. A split tail's grid
            // is tail_first + items·pieces CTAs, each decoding one (key block, KV head, batch)
            // of the 3-D grid's; tail_part holds items·pieces slots of 2·block_n·bucket floats
            // and tail_cnt `items` zeroed tickets (read only when tail_pieces > 1) and, after
            // them, the zeroed counter a persistent launch (persistent_items > 0, a 1-D grid of
            // at most that many CTAs) takes items < persistent_items from. dK/dV rows
            // and columns are bounded by Sk and D. The dynamic shared memory was raised on the
            // function and fits.
            unsafe {
                b.launch(LaunchConfig {
                    grid_dim: grid,
                    block_dim: (384, 1, 1),
                    shared_mem_bytes: smem as u32,
                })
            }
            .map_err(driver("launching the backward kernel"))?;
            // The dQ pass: one CTA per 64-row tile of the workspace.
            let post_grid = (params.q_blocks as u32, s.q_heads() as u32, s.batch() as u32);
            (name, grid, arch_str, post, post_grid, dq_acc, delta, q_pad)
        } else {
            let name = catalog::bwd_entry_name(&unit, &tile, causal, general);
            let (main, arch_str) = self.function(&unit, &name, dump.is_some(), smem)?;
            let (pre_name, post_name) = catalog::bwd_prep_entry_names(&unit);
            let (pre, _) = self.function(&unit, &pre_name, false, 0)?;
            let (post, _) = self.function(&unit, &post_name, false, 0)?;
            let grid = (
                s.kv_len().div_ceil(tile.block_n) as u32,
                s.kv_heads() as u32,
                s.batch() as u32,
            );
            let threads = (tile.warps * 32) as u32;

            let mut b = stream.launch_builder(&pre);
            b.arg(&op).arg(&dop).arg(&mut delta).arg(&params);
            // SAFETY: matches ATTN_BWD_PREP_ENTRY's first kernel (o, d_o, delta, BwdParams).
            // `plan_backward` proved O and dO hold every (b, h, row < Sq, col < D) their strides
            // name (packed: every row < total_q), 16-byte aligned; delta holds `rows` floats
            // (B·Hq·Sq, or Hq·total_q); the grid (ceil(Sq / DELTA_ROWS_PER_CTA), Hq, B) covers
            // every row and the kernel bounds rows by the sequence's length, whose packed
            // offsets it clamps into 0..=total_q.
            unsafe {
                b.launch(LaunchConfig {
                    grid_dim: (
                        s.q_len().div_ceil(DELTA_ROWS_PER_CTA) as u32,
                        s.q_heads() as u32,
                        s.batch() as u32,
                    ),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })
            }
            .map_err(driver("launching the backward's Δ pass"))?;

            let mut b = stream.launch_builder(&main);
            b.arg(&qp)
                .arg(&kp)
                .arg(&vp)
                .arg(&dop)
                .arg(&lp)
                .arg(&mut delta)
                .arg(&mut dq_acc)
                .arg(&dkp)
                .arg(&dvp)
                .arg(&mut sems)
                .arg(&params);
            if let Some(d) = dump.as_mut() {
                b.arg(&mut *d.buffer).arg(d.tiles).arg(&d.count);
            }
            // SAFETY: matches ATTN_BWD_ENTRY (q, k, v, d_o, lse, delta, dq_acc, dk, dv, sems,
            // BwdParams; a debug entry then takes the dump buffer, its tile list and the list's
            // length: `crate::debug` sizes the buffer for every listed block times this grid's
            // key blocks, and the kernel writes only listed blocks' slots). Every tensor was
            // checked by `plan_backward` (dims, extents inside their
            // views, 16-byte alignment, outputs distinct and not overlapping any input); dq_acc
            // holds `rows` rows of the bucket's width, 16-byte aligned (`bwd_f32_regions`: the
            // kernel's float2 atomics on sm_90), and sems B·Hq·ceil(Sq/BM) zeroed counters
            // in deterministic mode (the kernel reads them only then). The grid covers every key
            // block of every KV head and batch; the kernel bounds rows and columns by the
            // lengths and D, clamping packed offsets into the host-checked totals (seqs.cuh).
            // The feature and index arrays are bound above and outlive the launch. The dynamic
            // shared memory was raised on the function and fits.
            unsafe {
                b.launch(LaunchConfig {
                    grid_dim: grid,
                    block_dim: (threads, 1, 1),
                    shared_mem_bytes: smem as u32,
                })
            }
            .map_err(driver("launching the backward kernel"))?;
            // Δ's rows per (batch, head): 0 when packed like LSE.
            let pitch = if idx.cu_q.is_some() { 0 } else { s.q_len() };
            (name, grid, arch_str, post, row_grid, dq_acc, delta, pitch)
        };

        if let Some(ds) = dsinks.as_mut() {
            let (dsp, gds) = ds.device_ptr_mut(stream);
            let (sinks_fn, _) = self.function(&unit, catalog::BWD_DSINKS_ENTRY, false, 0)?;
            let pitch = delta_pitch as i32;
            let mut b = stream.launch_builder(&sinks_fn);
            b.arg(&lp)
                .arg(&mut delta)
                .arg(&dsp)
                .arg(&pitch)
                .arg(&params);
            // SAFETY: matches ATTN_BWD_DSINKS_ENTRY (lse, delta, dsinks, delta_pitch,
            // BwdParams): LSE holds `rows` floats, read at the rows of each sequence; delta is
            // the engine's Δ, `rows` floats (mma.sync: pitch Sq, or packed like LSE) or
            // B·Hq·q_blocks·64 (wgmma: pitch q_blocks·64), read at rows below each sequence's
            // length; dsinks holds Hq floats (checked), one CTA per head; the sinks' array was
            // bound into params.feat (the problem has sinks: checked).
            unsafe {
                b.launch(LaunchConfig {
                    grid_dim: (s.q_heads() as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })
            }
            .map_err(driver("launching the backward's sink-gradient pass"))?;
            drop(gds);
        }

        // dQ in the storage type, from either engine's workspace.
        let mut b = stream.launch_builder(&post);
        b.arg(&mut dq_acc).arg(&dqp).arg(&params);
        // SAFETY: matches the second kernel of ATTN_BWD_PREP_ENTRY or ATTN_BWD_HOPPER_PREP_ENTRY
        // (dq_acc, dq, BwdParams), the one of the engine that filled dq_acc: its workspace
        // (B·Hq·Sq rows of the bucket's width, or B·Hq·q_blocks tiles of 64 such rows) holds
        // every row < Sq the pass reads; dQ was checked like the other outputs. mma.sync: one
        // warp per row, bounded by q_len; wgmma: one CTA per tile of the grid (q_blocks, Hq,
        // B), rows bounded by the sequence's length, columns by D.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: post_grid,
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(driver("launching the backward's dQ pass"))?;
        drop(guards);
        drop(index_guards);
        drop(feature_guard);
        drop(feature_bufs);
        // The workspace views end here; the launcher keeps the buffers for the next call (their
        // reuse is ordered after these launches by the stream).
        drop(ws_guard);
        Ok(BackwardInfo {
            kernel: name,
            arch: arch_str,
            grid,
            smem_bytes: smem,
            deterministic: options.deterministic,
            tail: tail.map(|t| (t.first, t.items, t.pieces)),
            persistent_items: (params.persistent_items > 0)
                .then_some(params.persistent_items as usize),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{dims_kv, dims_q, Layout};
    use attn_ref::AttnShape;

    /// [`plan_backward`] for an sm_80 device with all of its shared memory, 2-byte elements.
    #[allow(clippy::too_many_arguments)]
    fn plan_sm80(
        p: &Problem,
        inputs: [Desc; 5],
        lse: (usize, u64),
        outputs: [Desc; 3],
        deterministic: bool,
        idx: &IndexLens<'_>,
    ) -> Result<BwdPlan, KernelError> {
        let smem = Arch::Sm80.max_smem();
        plan_backward(
            p,
            Arch::Sm80,
            smem,
            2,
            inputs,
            lse,
            outputs,
            deterministic,
            idx,
        )
    }

    const DENSE: IndexLens<'static> = IndexLens {
        cu_q: None,
        cu_k: None,
        block_table: None,
        seqused_k: None,
    };

    fn descs(shape: &AttnShape, base: u64) -> ([Desc; 5], [Desc; 3]) {
        let (qd, kd) = (dims_q(shape), dims_kv(shape));
        let d = |dims: [usize; 4], i: u64| -> Desc {
            (
                dims,
                Layout::Bshd.strides(dims),
                dims.iter().product(),
                base + (i << 28),
            )
        };
        (
            [d(qd, 0), d(kd, 1), d(kd, 2), d(qd, 3), d(qd, 4)],
            [d(qd, 5), d(kd, 6), d(kd, 7)],
        )
    }

    #[test]
    fn a_valid_backward_plans_its_bucket_tile_and_strides() {
        let shape = AttnShape::new(2, 8, 2, 300, 500, 72).unwrap();
        let p = Problem::new(shape, Causal::BottomRight);
        let (ins, outs) = descs(&shape, 0);
        let plan = plan_backward(
            &p,
            Arch::Sm90a,
            Arch::Sm90a.max_smem(),
            2,
            ins,
            (2 * 8 * 300, 1 << 40),
            outs,
            true,
            &DENSE,
        )
        .unwrap();
        assert_eq!(plan.bucket, 96);
        assert_eq!(plan.tile.stages, 2);
        assert_eq!(plan.params.diag_offset, 200);
        assert_eq!(plan.params.q_blocks, 5);
        assert_eq!(plan.params.dq_stride, [300 * 8 * 72, 72, 8 * 72]);
        // The mma.sync kernel's interior dQ additions take the bucket as the workspace's row
        // pitch (kernels/bwd_kernel.cuh: immediate offsets); a different pitch would misplace
        // them.
        assert_eq!(plan.params.dq_pitch, plan.bucket as i32);
        assert!(!plan.general);
        assert_eq!(plan.rows, 2 * 8 * 300);
        assert_eq!(plan.params.feat, FwdFeatures::OFF);
        assert_eq!(
            std::mem::size_of::<BwdParams>(),
            // 13 ints and 2 floats, padded to the strides' 8-byte alignment; the last 4 ints.
            64 + 8 * 24 + std::mem::size_of::<FwdFeatures>() + std::mem::size_of::<FwdSeqs>() + 16
        );
        assert_eq!(std::mem::offset_of!(BwdParams, q_stride), 64);
        assert_eq!(std::mem::offset_of!(BwdParams, feat), 256);
        assert_eq!(std::mem::offset_of!(BwdParams, seqs), 312);
    }

    #[test]
    fn packed_batches_without_features_take_the_seqs_entry_unless_deterministic() {
        use catalog::BwdHopperVariant as V;
        assert_eq!(V::pick(false, false, false), V::Plain);
        assert_eq!(V::pick(false, false, true), V::Plain);
        assert_eq!(V::pick(false, true, false), V::Seqs);
        // The plain turn order counts the grid's key blocks, not the sequence's.
        assert_eq!(V::pick(false, true, true), V::Features);
        assert_eq!(V::pick(true, false, false), V::Features);
        assert_eq!(V::pick(true, true, false), V::Features);
    }

    #[test]
    fn features_plan_the_general_entry_at_the_forward_scale() {
        let shape = AttnShape::new(1, 4, 2, 64, 96, 64).unwrap();
        let p = Problem::new(shape, Causal::BottomRight)
            .with_window(8, 0)
            .unwrap()
            .with_softcap(30.0)
            .unwrap();
        let (ins, outs) = descs(&shape, 0);
        let plan = plan_sm80(&p, ins, (4 * 64, 1 << 40), outs, false, &DENSE).unwrap();
        assert!(plan.general);
        assert_eq!(plan.params.feat.window_left, 8);
        assert_eq!(plan.params.feat.window_right, 0);
        // The softmax runs at c (FlashAttention-2's folding); dS carries scale/c, so dQ/dK's
        // final factor is c too.
        assert_eq!(
            plan.params.scale_log2,
            (30.0 * std::f64::consts::LOG2_E) as f32
        );
        assert_eq!(plan.params.scale, 30.0);
        assert_eq!(plan.params.feat.softcap_in, (p.scale() / 30.0) as f32);
    }

    #[test]
    fn packed_sequences_plan_packed_dims_and_refuse_caches() {
        // Three sequences: 5, 0 and 7 query rows; 9, 4 and 0 keys.
        let shape = AttnShape::new(3, 4, 2, 7, 9, 64).unwrap();
        let p = Problem::new(shape, Causal::TopLeft);
        let (tq, tk) = (12usize, 13usize);
        let packed = |dims: [usize; 4], i: u64| -> Desc {
            (
                dims,
                Layout::Bshd.strides(dims),
                dims.iter().product(),
                i << 28,
            )
        };
        let (qd, kd) = ([1, 4, tq, 64], [1, 2, tk, 64]);
        let ins = [
            packed(qd, 0),
            packed(kd, 1),
            packed(kd, 2),
            packed(qd, 3),
            packed(qd, 4),
        ];
        let outs = [packed(qd, 5), packed(kd, 6), packed(kd, 7)];
        let (cu_q, cu_k) = ([0, 5, 5, 12], [0, 9, 13, 13]);
        let idx = IndexLens {
            cu_q: Some((4, Some(&cu_q))),
            cu_k: Some((4, Some(&cu_k))),
            ..DENSE
        };
        let lse = (4 * tq, 1 << 40);
        let plan = plan_sm80(&p, ins, lse, outs, true, &idx).unwrap();
        assert!(plan.general);
        assert_eq!(plan.rows, 4 * tq);
        assert_eq!(
            (plan.params.seqs.total_q, plan.params.seqs.total_k),
            (12, 13)
        );
        assert_eq!(plan.params.q_blocks, 1);
        // LSE is [Hq, total_q]: one short is refused.
        assert!(plan_sm80(&p, ins, (4 * tq - 1, 1 << 40), outs, true, &idx).is_err());
        // Dense-shaped Q with cu_seqlens_q is refused.
        let (dense_ins, dense_outs) = descs(&shape, 0);
        assert!(plan_sm80(&p, dense_ins, lse, dense_outs, true, &idx).is_err());
        // A key sequence longer than kv_len (max_seqlen_k sizes the grid).
        let short = Problem::new(AttnShape::new(3, 4, 2, 7, 8, 64).unwrap(), Causal::TopLeft);
        assert!(matches!(
            plan_sm80(&short, ins, lse, outs, true, &idx),
            Err(KernelError::Problem(AttnError::InvalidArgument(_)))
        ));
        // A malformed cu_seqlens_k.
        let bad_k = [0, 9, 8, 13];
        let bad = IndexLens {
            cu_k: Some((4, Some(&bad_k))),
            ..idx
        };
        assert!(plan_sm80(&p, ins, lse, outs, true, &bad).is_err());
        // Paged caches and seqused_k are forward-only.
        for idx in [
            IndexLens {
                seqused_k: Some((3, None)),
                ..idx
            },
            IndexLens {
                cu_k: None,
                block_table: Some((3, None)),
                ..idx
            },
        ] {
            assert!(matches!(
                plan_sm80(&p, ins, lse, outs, true, &idx),
                Err(KernelError::UnsupportedFeature(_))
            ));
        }
    }

    #[test]
    fn refusals_are_typed() {
        let shape = AttnShape::new(1, 4, 4, 64, 64, 64).unwrap();
        let p = Problem::new(shape, Causal::None);
        let (ins, outs) = descs(&shape, 0);
        let lse = (4 * 64, 1 << 40);
        // D = 256 with 96 KiB per block: no room (99 KiB parts run the 32-key tile).
        let big = AttnShape::new(1, 4, 4, 64, 64, 256).unwrap();
        let (bi, bo) = descs(&big, 0);
        assert!(matches!(
            plan_backward(
                &Problem::new(big, Causal::None),
                Arch::Sm80,
                96 * 1024,
                2,
                bi,
                lse,
                bo,
                false,
                &DENSE
            ),
            Err(KernelError::UnsupportedHeadDim { .. })
        ));
        // The sm_80 plan of `p` with these outputs and LSE.
        let plan = |outs, lse| {
            let smem = Arch::Sm80.max_smem();
            plan_backward(&p, Arch::Sm80, smem, 2, ins, lse, outs, false, &DENSE)
        };
        // dK overlapping V.
        let mut bad = outs;
        bad[1].3 = ins[2].3;
        assert!(matches!(
            plan(bad, lse),
            Err(KernelError::Overlap { output: "dK", .. })
        ));
        // dV overlapping dK.
        let mut bad = outs;
        bad[2].3 = outs[1].3;
        assert!(matches!(
            plan(bad, lse),
            Err(KernelError::Overlap {
                output: "dV",
                input: "dK"
            })
        ));
        // A short LSE.
        assert!(plan(outs, (4 * 64 - 1, 1 << 40)).is_err());
    }

    #[test]
    fn auto_takes_the_wgmma_backward_on_sm90a_at_buckets_64_128_and_256_only() {
        for arch in Arch::ALL {
            for d in catalog::FWD_HEAD_DIM_BUCKETS {
                let can = arch == Arch::Sm90a && matches!(d, 64 | 128 | 256);
                assert_eq!(
                    runs_hopper_backward(BackwardEngine::Auto, arch, d, arch.max_smem()).unwrap(),
                    can
                );
                assert!(
                    !runs_hopper_backward(BackwardEngine::MmaSync, arch, d, arch.max_smem())
                        .unwrap()
                );
                match runs_hopper_backward(BackwardEngine::Hopper, arch, d, arch.max_smem()) {
                    Ok(yes) => assert!(can && yes, "{arch:?} d{d}"),
                    Err(e) => {
                        assert!(!can, "{arch:?} d{d}");
                        assert!(matches!(e, KernelError::EngineUnavailable(_)));
                    }
                }
            }
        }
    }

    #[test]
    fn debug_backward_units_carry_the_plain_mma_sync_entries_at_64_and_128_only() {
        for arch in Arch::ALL {
            for d in catalog::FWD_HEAD_DIM_BUCKETS {
                let unit = UnitKey {
                    family: Family::Bwd,
                    arch,
                    elem: catalog::Elem::F16,
                    head_dim: d,
                };
                let src = catalog::unit_source(&unit, true);
                if !catalog::BWD_DEBUG_HEAD_DIMS.contains(&d)
                    || catalog::bwd_tile(arch, d).is_none()
                {
                    assert!(src.is_none(), "{arch:?} D={d}");
                    continue;
                }
                let src = src.unwrap();
                let tiles = catalog::bwd_tiles(arch, d);
                for causal in [false, true] {
                    let name = |t, features| catalog::bwd_entry_name(&unit, t, causal, features);
                    assert!(src.contains(&name(&tiles[0], false)));
                    assert!(!src.contains(&name(&tiles[0], true)));
                    // The 99 KiB tile has release entries only.
                    for t in &tiles[1..] {
                        assert!(!src.contains(&name(t, false)));
                    }
                }
                // The other passes run their release code; no wgmma entries in -G units.
                assert!(!src.contains("ATTN_BWD_PREP_ENTRY") && !src.contains("attn_bwd_wg_"));
            }
        }
    }

    #[test]
    fn the_wgmma_backward_units_carry_their_entries_and_fit() {
        for elem in [catalog::Elem::F16, catalog::Elem::Bf16] {
            for d in [64, 128, 256] {
                let unit = UnitKey {
                    family: Family::Bwd,
                    arch: Arch::Sm90a,
                    elem,
                    head_dim: d,
                };
                let src = catalog::unit_source(&unit, false).unwrap();
                for causal in [false, true] {
                    for variant in catalog::BwdHopperVariant::ALL {
                        let name = catalog::bwd_hopper_entry_name(&unit, causal, variant);
                        assert!(src.contains(&format!("ATTN_BWD_HOPPER_ENTRY({name},")));
                    }
                }
                let (pre, post) = catalog::bwd_hopper_prep_entry_names(&unit);
                assert!(src.contains(&pre) && src.contains(&post));
                assert!(catalog::bwd_hopper_smem_bytes(d) <= Arch::Sm90a.max_smem());
                let other = UnitKey {
                    arch: Arch::Sm80,
                    ..unit
                };
                assert!(!catalog::unit_source(&other, false)
                    .unwrap()
                    .contains("attn_bwd_wg_"));
            }
        }
    }

    #[test]
    fn the_wgmma_kernel_counts_its_own_query_blocks_whatever_the_mma_sync_tile() {
        let tall = catalog::tile(128, 128, 8, 2);
        assert_eq!(engine_q_blocks(false, 200, &tall), 2);
        assert_eq!(engine_q_blocks(true, 200, &tall), 4);
        for arch in [Arch::Sm80, Arch::Sm90a] {
            for d in catalog::FWD_HEAD_DIM_BUCKETS {
                let t = catalog::bwd_tile(arch, d).unwrap();
                assert_eq!(
                    engine_q_blocks(false, 4097, &t),
                    4097usize.div_ceil(t.block_m) as i32
                );
                assert_eq!(engine_q_blocks(true, 4097, &t), 65);
            }
        }
    }

    #[test]
    fn parts_with_99_kib_run_a_smaller_tile_of_the_sm80_cubin_at_every_head_dim() {
        use catalog::SM8X_SMALL_SMEM as SMALL;
        let shape = |d| AttnShape::new(1, 4, 4, 64, 64, d).unwrap();
        for arch in [Arch::Sm80, Arch::Sm90a] {
            for d in catalog::FWD_HEAD_DIM_BUCKETS {
                let tiles = catalog::bwd_tiles(arch, d);
                let small = catalog::bwd_tile_within(arch, d, SMALL);
                // The preferred tile where the device holds it, and a 99 KiB one at every
                // bucket: 64 keys up to D = 128, 32 above (V sharing its room above 192).
                assert_eq!(
                    catalog::bwd_tile_within(arch, d, arch.max_smem()),
                    Some(tiles[0])
                );
                let t = small.unwrap_or_else(|| panic!("{arch:?} d{d}: no 99 KiB tile"));
                assert!(catalog::bwd_smem_bytes(&t, d) <= SMALL);
                let keys = match d {
                    ..=64 => tiles[0].block_n,
                    65..=128 => 64,
                    _ => 32,
                };
                assert_eq!(t.block_n, keys, "{arch:?} d{d}");
                assert_eq!(catalog::bwd_v_shared(&t, d), d > 192, "{arch:?} d{d}");
                assert_eq!(tiles.len() == 1, t == tiles[0], "{arch:?} d{d}");
                // The unit instantiates every entry of that tile.
                let unit = UnitKey {
                    family: Family::Bwd,
                    arch,
                    elem: catalog::Elem::Bf16,
                    head_dim: d,
                };
                let src = catalog::unit_source(&unit, false).unwrap();
                for causal in [false, true] {
                    for features in [false, true] {
                        let name = catalog::bwd_entry_name(&unit, &t, causal, features);
                        assert_eq!(src.matches(&format!("ATTN_BWD_ENTRY({name},")).count(), 1);
                    }
                }
                // The plan takes it, and the Auto engine leaves the wgmma kernel (over 99 KiB).
                let (ins, outs) = descs(&shape(d), 0);
                let p = Problem::new(shape(d), Causal::None);
                let plan =
                    plan_backward(&p, arch, SMALL, 2, ins, (256, 1 << 40), outs, false, &DENSE)
                        .unwrap();
                assert_eq!(plan.tile, t);
                assert!(!runs_hopper_backward(BackwardEngine::Auto, arch, d, SMALL).unwrap());
            }
        }
        // D = 96 to 256 need the smaller tile. Without V sharing its room the 32-key tile
        // misses 99 KiB at D = 256; the shared one needs 96.5 KiB, and less than that is
        // refused.
        assert_eq!(catalog::bwd_tiles(Arch::Sm80, 128).len(), 2);
        assert_eq!(catalog::bwd_tiles(Arch::Sm80, 256).len(), 2);
        // D = 64: FlashAttention-2's 128-query tile (162 KiB), then the 64-query one; D = 32
        // has the 64-query tile only.
        let tiles = catalog::bwd_tiles(Arch::Sm80, 64);
        assert_eq!(
            (tiles.len(), tiles[0].block_m, tiles[1].block_m),
            (2, 128, 64)
        );
        assert!(catalog::bwd_smem_bytes(&tiles[1], 64) <= SMALL);
        assert_eq!(catalog::bwd_tiles(Arch::Sm80, 32).len(), 1);
        assert_eq!(catalog::bwd_tiles(Arch::Sm80, 32)[0].block_m, 64);
        let t32 = catalog::tile(64, 32, 8, 1);
        assert_eq!(catalog::bwd_smem_bytes(&t32, 256), 98_816);
        assert!(catalog::bwd_smem_bytes(&t32, 256) + 2 * 2 * 32 * 64 > SMALL);
        let (ins, outs) = descs(&shape(256), 0);
        let p = Problem::new(shape(256), Causal::None);
        let refused = plan_backward(
            &p,
            Arch::Sm80,
            96 * 1024,
            2,
            ins,
            (256, 1 << 40),
            outs,
            false,
            &DENSE,
        );
        assert!(matches!(
            refused,
            Err(KernelError::UnsupportedHeadDim { head_dim: 256, .. })
        ));
        // sm_89 has no backward units of its own: it runs sm_80's.
        assert!(catalog::units(&[Arch::Sm89], &[])
            .iter()
            .all(|u| u.family != Family::Bwd));
    }

    #[test]
    fn every_bucket_has_a_backward_tile_that_fits_every_arch() {
        for d in catalog::FWD_HEAD_DIM_BUCKETS {
            for arch in Arch::ALL {
                let t = catalog::bwd_tile(arch, d);
                let t = t.unwrap_or_else(|| panic!("{arch:?} d{d}: no backward tile"));
                assert!(catalog::bwd_smem_bytes(&t, d) <= arch.max_smem());
            }
        }
    }

    /// kernels/bwd_hopper_kernel.cuh's `bwd_rotated_turn`, mirrored: key block n's turn on
    /// query block q when `n_blocks` rotated key blocks walk `q_blocks` query blocks.
    fn rotated_turn(n: usize, q: usize, n_blocks: usize, q_blocks: usize) -> usize {
        let step = (q + n) % q_blocks;
        let below = |r: usize| (n_blocks / q_blocks) * r + r.min(n_blocks % q_blocks);
        let a = (q_blocks - q) % q_blocks;
        let earlier = if a + step <= q_blocks {
            below(a + step) - below(a)
        } else {
            n_blocks - below(a) + below(a + step - q_blocks)
        };
        earlier + n / q_blocks
    }

    /// Runs one head's deterministic walk with `resident` CTA slots filled in launch order, each
    /// CTA adding when the query block's count reaches its turn; false if it stalls for good.
    fn walk_completes(n_blocks: usize, q_blocks: usize, resident: usize) -> bool {
        let mut added = vec![0usize; q_blocks];
        let mut running: Vec<(usize, usize)> = Vec::new(); // (key block, step)
        let (mut next, mut done) = (0, 0);
        while next < n_blocks && running.len() < resident {
            running.push((next, 0));
            next += 1;
        }
        while done < n_blocks {
            let mut progress = false;
            let mut i = 0;
            while i < running.len() {
                let (n, step) = running[i];
                let q = (step + q_blocks - n % q_blocks) % q_blocks;
                if added[q] == rotated_turn(n, q, n_blocks, q_blocks) {
                    added[q] += 1;
                    progress = true;
                    if step + 1 == q_blocks {
                        running.swap_remove(i);
                        done += 1;
                        if next < n_blocks {
                            running.push((next, 0));
                            next += 1;
                        }
                        continue;
                    }
                    running[i].1 += 1;
                }
                i += 1;
            }
            if !progress {
                return false;
            }
        }
        true
    }

    /// One head's deterministic walk in key order with a split tail, as
    /// kernels/bwd_hopper_kernel.cuh walks it where the turns do not rotate: `n_whole` whole
    /// key blocks, then `n_blocks − n_whole` split ones of `pieces` CTAs each, every CTA
    /// walking its query blocks (`iters` of them for a whole item) in the same order, key
    /// block n adding n-th on each. The whole items run first (they are earlier in the grid);
    /// every tail CTA is resident from then on. Returns the lock-step rounds the tail takes
    /// (each CTA adds at most one block per round, when the block's count reaches its turn),
    /// or None if it stalls.
    fn key_order_tail_rounds(
        n_blocks: usize,
        n_whole: usize,
        pieces: usize,
        iters: usize,
    ) -> Option<usize> {
        let whole: Vec<Vec<(usize, usize)>> = (0..n_whole)
            .map(|n| (0..iters).map(|q| (q, n)).collect())
            .collect();
        let mut split = Vec::new();
        for n in n_whole..n_blocks {
            for piece in 0..pieces {
                let (it0, it1) = (piece * iters / pieces, (piece + 1) * iters / pieces);
                split.push((it0..it1).map(|q| (q, n)).collect::<Vec<_>>());
            }
        }
        let mut added = vec![0usize; iters];
        let mut run = |walks: &[Vec<(usize, usize)>]| -> Option<usize> {
            let mut pos = vec![0usize; walks.len()];
            let mut rounds = 0;
            while pos.iter().zip(walks).any(|(&p, w)| p < w.len()) {
                let ready: Vec<usize> = (0..walks.len())
                    .filter(|&i| {
                        pos[i] < walks[i].len() && added[walks[i][pos[i]].0] == walks[i][pos[i]].1
                    })
                    .collect();
                if ready.is_empty() {
                    return None;
                }
                for i in ready {
                    added[walks[i][pos[i]].0] += 1;
                    pos[i] += 1;
                }
                rounds += 1;
            }
            Some(rounds)
        };
        run(&whole)?;
        let rounds = run(&split);
        assert!(added.iter().all(|&a| a == n_blocks));
        rounds
    }

    #[test]
    fn only_default_mode_plain_launches_larger_than_the_gpu_run_persistent() {
        use catalog::BwdHopperVariant::{Features, Plain, Seqs};
        let opts = |deterministic, schedule| BackwardOptions {
            deterministic,
            schedule,
            ..BackwardOptions::default()
        };
        let auto = opts(false, BackwardSchedule::Auto);
        assert_eq!(persistent_items(&auto, Plain, 2048, 132), Some((2048, 132)));
        let forced = |ctas| BackwardSchedule::TailPieces { ctas, pieces: 4 };
        assert_eq!(
            persistent_items(&opts(false, forced(132)), Plain, 2300, 132),
            Some((2300, 132))
        );
        assert_eq!(
            persistent_items(&opts(false, forced(5)), Plain, 23, 132),
            Some((23, 5))
        );
        // One round or less: nothing to take after the first item.
        assert_eq!(persistent_items(&auto, Plain, 132, 132), None);
        assert_eq!(persistent_items(&auto, Plain, 64, 132), None);
        // Asked for: any CTA count, at most one per item.
        let on = |ctas| opts(false, BackwardSchedule::Persistent { ctas });
        assert_eq!(persistent_items(&on(3), Plain, 64, 132), Some((64, 3)));
        assert_eq!(persistent_items(&on(500), Plain, 64, 132), Some((64, 64)));
        // The general entries run one item per CTA, and so does the classic grid.
        assert_eq!(persistent_items(&auto, Features, 2048, 132), None);
        assert_eq!(persistent_items(&on(3), Seqs, 2048, 132), None);
        assert_eq!(
            persistent_items(&opts(false, BackwardSchedule::Grid), Plain, 2048, 132),
            None
        );
        // Deterministic CTAs wait on each other's turns.
        assert_eq!(
            persistent_items(&opts(true, BackwardSchedule::Auto), Plain, 2048, 132),
            None
        );
        // The kernel numbers items in 32-bit ints.
        assert_eq!(persistent_items(&auto, Plain, 1 << 31, 132), None);
    }

    #[test]
    fn deterministic_key_order_tails_split_into_pipelined_pieces() {
        // 2,16,8192,256 on 132 SMs (128 key blocks per head: key order): the last head's
        // last 4 blocks, 8 pieces of 8 iterations: 11 rounds (a piece, and 3 for the split
        // blocks' chain) instead of 64 + 3.
        assert_eq!(key_order_tail_rounds(128, 124, 1, 64), Some(67));
        assert_eq!(key_order_tail_rounds(128, 124, 8, 64), Some(11));
        // Every mix completes within a piece plus the chain of split blocks.
        for n_blocks in 1..=12 {
            for n_whole in 0..n_blocks {
                for pieces in 1..=4 {
                    for iters in [4, 9, 15] {
                        let rounds = key_order_tail_rounds(n_blocks, n_whole, pieces, iters);
                        let bound = iters.div_ceil(pieces) + n_blocks - n_whole - 1;
                        assert!(
                            rounds.is_some_and(|r| r <= bound),
                            "{n_blocks} {n_whole} {pieces} {iters}: {rounds:?} > {bound}"
                        );
                    }
                }
            }
        }
        // The model of the split's length counts that chain.
        let split = |items: usize, pieces| TailSplit {
            first: items - items % 132,
            items: items % 132,
            pieces,
        };
        assert_eq!(
            bwd_tail_split(4096, 132, 64, Some(128)),
            Some(split(4096, 8))
        );
        // 68 tail items need two rounds of pieces, each of 32 iterations or more at 32 key
        // blocks per head: no split pays in the model.
        assert_eq!(bwd_tail_split(2048, 132, 64, Some(32)), None);
    }

    /// The Δ passes' grids count `DELTA_ROWS_PER_CTA` rows per CTA: the kernels' eight warps of
    /// `kDeltaRows` rows. The wgmma pass must cover every padded row, so it divides 64.
    #[test]
    fn delta_rows_per_cta_matches_the_kernels() {
        let src = include_str!("../kernels/bwd_kernel.cuh");
        let rows: usize = src
            .lines()
            .find_map(|l| l.trim().strip_prefix("constexpr int kDeltaRows = "))
            .and_then(|r| r.trim_end_matches(';').parse().ok())
            .expect("kDeltaRows in kernels/bwd_kernel.cuh");
        assert_eq!(8 * rows, DELTA_ROWS_PER_CTA);
        assert_eq!(64 % DELTA_ROWS_PER_CTA, 0);
    }

    #[test]
    fn workspace_regions_start_16_byte_aligned_and_do_not_overlap() {
        // The mma.sync engine (no LSE₂; Δ of B·Hq·Sq floats, odd or even), the wgmma engine
        // (padded tiles), and an empty launch.
        for (lse2, delta, dq, tail) in [
            (0, 51, 51 * 96, 0),
            (0, 1, 96, 0),
            (0, 102, 102 * 128, 0),
            (0, 0, 0, 0),
            (640, 640, 640 * 128, 0),
            (640, 640, 640 * 128 + 3, 3 * 32768),
        ] {
            let (regions, total) = bwd_f32_regions(lse2, delta, dq, tail);
            let mut end = 0;
            for (k, (start, len)) in regions.into_iter().enumerate() {
                assert_eq!(
                    start % 4,
                    0,
                    "region {k} of {:?} starts at float {start}",
                    (lse2, delta, dq, tail)
                );
                assert!(start >= end, "region {k} overlaps the one before it");
                end = start + len;
            }
            assert_eq!(regions[0].1, lse2);
            assert_eq!(regions[1].1, delta.max(1));
            assert_eq!(regions[2].1, dq);
            assert_eq!(regions[3].1, tail.max(1));
            assert_eq!(total, end);
        }
    }

    #[test]
    fn the_tail_splits_where_the_round_model_saves_iterations() {
        let split = |items: usize, pieces| TailSplit {
            first: items - items % 132,
            items: items % 132,
            pieces,
        };
        // 4,16,4096,128 on 132 SMs: 68 tail items of 64 iterations; k = 3 ends after 2
        // rounds of 22 + 2 (48 < 64), k = 2 after 2 of 32 + 2, k = 4 after 3 of 16 + 2.
        assert_eq!(bwd_tail_split(2048, 132, 64, None), Some(split(2048, 3)));
        // D = 256's 64-key blocks: 4096 items, a tail of 4 split 8 ways.
        assert_eq!(bwd_tail_split(4096, 132, 64, None), Some(split(4096, 8)));
        // One partial round: 64 items of 32 iterations in halves (18 < 32); 16 items 8 ways.
        assert_eq!(bwd_tail_split(64, 132, 32, None), Some(split(64, 2)));
        assert_eq!(bwd_tail_split(16, 132, 32, None), Some(split(16, 8)));
        // Whole rounds; a tail too wide for two rounds of pieces to pay; walks too short.
        assert_eq!(bwd_tail_split(132 * 16, 132, 64, None), None);
        assert_eq!(bwd_tail_split(132 * 15 + 130, 132, 64, None), None);
        assert_eq!(bwd_tail_split(16, 132, 3, None), None);
        // A head's CTAs with the split: 32 key blocks, 32 of them in the tail, 3 pieces each.
        assert_eq!(head_ctas(32, None), 32);
        assert_eq!(head_ctas(32, bwd_tail_split(2048, 132, 64, None)), 96);
        assert_eq!(
            head_ctas(64, bwd_tail_split(4096, 132, 64, None)),
            64 + 7 * 4
        );
        for items in 1..700 {
            for iters in [1, 2, 5, 16, 64, 256] {
                if let Some(t) = bwd_tail_split(items, 132, iters, None) {
                    assert!(t.first + t.items == items && t.first % 132 == 0);
                    assert!((2..=TAIL_MAX_PIECES.min(iters)).contains(&t.pieces));
                    assert!(t.items * t.pieces <= 2 * 132);
                    assert!(t.ctas() > items);
                }
            }
        }
    }

    #[test]
    fn a_forced_split_is_refused_where_it_cannot_run() {
        let forced = BackwardSchedule::TailPieces { ctas: 5, pieces: 3 };
        assert_eq!(
            tail_for(forced, true, 24, 5, None, 132).unwrap(),
            Some(TailSplit {
                first: 20,
                items: 4,
                pieces: 3
            })
        );
        assert_eq!(tail_for(forced, true, 25, 5, None, 132).unwrap(), None);
        assert!(matches!(
            tail_for(forced, false, 24, 5, None, 132),
            Err(KernelError::EngineUnavailable(_))
        ));
        for (ctas, pieces) in [(5, 1), (5, 9), (5, 6), (0, 3)] {
            let schedule = BackwardSchedule::TailPieces { ctas, pieces };
            assert!(matches!(
                tail_for(schedule, true, 24, 5, None, 132),
                Err(KernelError::Problem(_))
            ));
        }
        assert_eq!(
            tail_for(BackwardSchedule::Grid, true, 2048, 64, None, 132).unwrap(),
            None
        );
        // Grids past the kernel's 32-bit CTA index: Auto keeps the 3-D grid, a forced split
        // is refused.
        let huge = i32::MAX as usize - 10;
        assert_eq!(
            tail_for(BackwardSchedule::Auto, true, huge, 64, None, 132).unwrap(),
            None
        );
        let forced_huge = BackwardSchedule::TailPieces {
            ctas: 132,
            pieces: 8,
        };
        assert!(matches!(
            tail_for(forced_huge, true, huge, 64, None, 132),
            Err(KernelError::IndexOverflow(_))
        ));
        assert_eq!(
            tail_for(BackwardSchedule::Auto, false, 2048, 64, None, 132).unwrap(),
            None
        );
        assert!(tail_for(BackwardSchedule::Auto, true, 2048, 64, None, 132)
            .unwrap()
            .is_some());
    }

    #[test]
    fn the_kept_workspace_grows_and_never_shrinks() {
        assert_eq!(workspace_growth(None, (10, 2)), Some((10, 2)));
        assert_eq!(workspace_growth(Some((10, 2)), (10, 2)), None);
        assert_eq!(workspace_growth(Some((10, 2)), (4, 1)), None);
        // A larger semaphore count keeps the larger f32 buffer.
        assert_eq!(workspace_growth(Some((100, 2)), (4, 8)), Some((100, 8)));
        assert_eq!(workspace_growth(Some((10, 8)), (40, 1)), Some((40, 8)));
    }

    #[test]
    fn rotated_turns_are_a_bijection_and_need_the_whole_head_resident() {
        for n_blocks in 1..=24 {
            for q_blocks in 1..=40 {
                // Every query block's turns are 0..n_blocks, each once.
                for q in 0..q_blocks {
                    let mut turns: Vec<usize> = (0..n_blocks)
                        .map(|n| rotated_turn(n, q, n_blocks, q_blocks))
                        .collect();
                    turns.sort_unstable();
                    assert!(
                        turns.iter().copied().eq(0..n_blocks),
                        "{n_blocks} {q_blocks} {q}"
                    );
                }
                // All resident: the walk completes.
                assert!(
                    walk_completes(n_blocks, q_blocks, n_blocks),
                    "{n_blocks} {q_blocks}"
                );
            }
        }
        assert!(walk_completes(132, 264, 132));
        // More key blocks than slots: the rotated walk hangs, so the host does not rotate.
        assert!(!walk_completes(133, 266, 132));
        assert!(!walk_completes(256, 256, 132));
        assert!(!walk_completes(313, 16, 132));
        use catalog::BwdHopperVariant as V;
        assert!(rotated_turns(true, false, V::Plain, 132, 132));
        assert!(!rotated_turns(true, false, V::Plain, 133, 132));
        assert!(!rotated_turns(true, true, V::Plain, 8, 132));
        assert!(!rotated_turns(true, false, V::Features, 8, 132));
        assert!(!rotated_turns(false, false, V::Plain, 8, 132));
    }
}
