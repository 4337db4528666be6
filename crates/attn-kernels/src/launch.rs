//! The safe launcher: validation, the per-device kernel cache, per-stream launchers and the
//! one `unsafe` launch.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use attn_ref::{AttnError, Causal, Problem};
use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaViewMut, DevicePtr,
    DevicePtrMut, DeviceRepr, LaunchConfig, PushKernelArg, SyncOnDrop,
};

use crate::{
    catalog::{fwd_entry_name, hopper_entry_name, HopperTile, UnitKey},
    config::{
        choose_config, choose_splits, has_split, unit_key, Arch, KernelConfig, KernelMode,
        MAX_SPLITS,
    },
    cubin,
    hopper::{auto_prefers_hopper, encode_tma, plan_hopper, tma_geometry, Engine, TMA_BOX_COLS},
    seqs::{bind_indices, plan_sequences, Expected, IndexLens, Sequences},
    tensor::{check_tensor, ranges_overlap, Strides, Tensor, TensorMut},
    Dtype, KernelError,
};

/// The score-modifying features of one launch, mirrored from `attn::FwdFeatures` in
/// kernels/common.cuh (two device pointers, four 4-byte fields, two device pointers, one
/// 4-byte field and padding: 56 bytes). Read only by the features' entry points;
/// [`FwdFeatures::OFF`] everywhere else.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FwdFeatures {
    /// Device address of the ALiBi slopes divided by the softmax scale (0: off).
    pub alibi: u64,
    /// Device address of the sink logits times log2(e), `[Hq]` (0: off).
    pub sinks: u64,
    /// Window left bound, −1 unbounded; clamped to `Sq + Sk` (a larger one masks nothing).
    pub window_left: i32,
    /// Window right bound, −1 unbounded; clamped to `Sq + Sk`.
    pub window_right: i32,
    /// 0 for slopes `[Hq]`, Hq for `[B, Hq]`.
    pub alibi_batch_stride: i32,
    /// `scale / c` with a softcap c, 0 without.
    pub softcap_in: f32,
    /// E4M3 KV cache: device address of the key scales (0 elsewhere).
    pub k_descale: u64,
    /// E4M3 KV cache: device address of the value scales.
    pub v_descale: u64,
    /// 1 for scales `[Hkv]`, 0 for one scale `[1]`.
    pub descale_per_head: i32,
    /// Pads the C struct's tail to its 8-byte alignment.
    pub _pad: i32,
}

impl FwdFeatures {
    /// Every feature off.
    pub const OFF: FwdFeatures = FwdFeatures {
        alibi: 0,
        sinks: 0,
        window_left: -1,
        window_right: -1,
        alibi_batch_stride: 0,
        softcap_in: 0.0,
        k_descale: 0,
        v_descale: 0,
        descale_per_head: 0,
        _pad: 0,
    };
}

impl Default for FwdFeatures {
    fn default() -> Self {
        Self::OFF
    }
}

/// The sequence layout of a varlen / KV-cache / paged launch, mirrored from `attn::FwdSeqs`
/// in kernels/common.cuh (four device pointers, then eight 4-byte fields); all zero except in
/// [`FlashAttention::forward_sequences`]'s launches ([`crate::seqs`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct FwdSeqs {
    /// `cu_seqlens_q` (0: dense queries).
    pub cu_q: u64,
    /// `cu_seqlens_k` (0: dense or paged keys).
    pub cu_k: u64,
    /// `seqused_k` (0: every key).
    pub seqused_k: u64,
    /// `block_table` (paged entries only).
    pub block_table: u64,
    /// Rows of packed Q/O.
    pub total_q: i32,
    /// Rows of packed K/V.
    pub total_k: i32,
    /// Block-table entries per sequence.
    pub max_blocks: i32,
    /// Keys per page.
    pub page_size: i32,
    /// Pages in the cache.
    pub num_blocks: i32,
    /// 1 when the causal mask is aligned bottom-right (per-sequence diagonal).
    pub bottom_right: i32,
    /// Magic multiplier of the division by `page_size` ([`crate::seqs::page_divisor`]).
    pub page_mul: u32,
    /// Its shift.
    pub page_shift: i32,
    /// Packed queries on a flat grid ([`crate::hopper::flat_grid_x`]): the query block's rows;
    /// 0 when grid.z is the batch.
    pub flat_block_m: i32,
    /// Padding, as in kernels/common.cuh.
    pub reserved: i32,
}

/// Scalars of one launch, mirrored from `attn::FwdParams` in kernels/common.cuh (same field
/// order: twelve 4-byte fields, twelve 8-byte strides, the features, the sequence layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FwdParams {
    pub batch: i32,
    pub q_heads: i32,
    pub kv_heads: i32,
    pub q_len: i32,
    pub kv_len: i32,
    pub group: i32,
    pub diag_offset: i32,
    pub dump_count: i32,
    pub scale_log2: f32,
    pub scale: f32,
    pub n_splits: i32,
    pub head_dim: i32,
    pub q_stride: [i64; 3],
    pub k_stride: [i64; 3],
    pub v_stride: [i64; 3],
    pub o_stride: [i64; 3],
    pub feat: FwdFeatures,
    pub seqs: FwdSeqs,
}

// SAFETY: plain-old-data with the C layout of `attn::FwdParams` (twelve 4-byte fields, so the
// 8-byte strides start 8-byte aligned at offset 48 in both languages; `FwdFeatures` starts at
// 144, 56 bytes in both (its pointers at 0, 8, 32, 40; the tail padded to 8); `FwdSeqs` at
// 200 with four 8-byte pointers and eight 4-byte fields, 64 bytes in both: 264 in all).
unsafe impl DeviceRepr for FwdParams {}

impl FwdParams {
    /// Sets the element strides of the four tensors.
    pub(crate) fn with_strides(mut self, q: Strides, k: Strides, v: Strides, o: Strides) -> Self {
        let st = |s: Strides| [s.batch as i64, s.head as i64, s.row as i64];
        self.q_stride = st(q);
        self.k_stride = st(k);
        self.v_stride = st(v);
        self.o_stride = st(o);
        self
    }
}

/// Element types the kernels store: [`half::f16`] and [`half::bf16`].
pub trait StorageType:
    DeviceRepr
    + cudarc::driver::ValidAsZeroBits
    + Copy
    + Default
    + Send
    + Sync
    + 'static
    + sealed::Sealed
{
    /// The matching [`Dtype`].
    const DTYPE: Dtype;
    /// Rounds an f32 to this type (nearest-even).
    fn from_f32(x: f32) -> Self;
    /// Widens to f32.
    fn to_f32(self) -> f32;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

impl StorageType for half::f16 {
    const DTYPE: Dtype = Dtype::F16;
    fn from_f32(x: f32) -> Self {
        half::f16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
}

impl StorageType for half::bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
    fn from_f32(x: f32) -> Self {
        half::bf16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
}

/// How to run one forward: the config (default: [`choose_config`]) and the key splits.
#[derive(Debug, Clone, Default)]
pub struct ForwardOptions {
    /// Overrides the default config (for sweeps and tests).
    pub config: Option<KernelConfig>,
    /// Key splits per query block: `None` = the heuristic
    /// ([`crate::config::choose_splits`]; on the Hopper engine, one wave of one CTA per SM),
    /// `Some(1)` = never split. Values above 1 need a config with split-KV entry points
    /// ([`crate::config::has_split`]), or on the Hopper engine a sequence layout or a feature
    /// (its `_seq` / `_feat` entries split; its dense ones refuse).
    pub splits: Option<usize>,
    /// Which mainloop runs it: the Hopper kernel or mma.sync ([`Engine::Auto`] picks).
    pub engine: Engine,
    /// How a Hopper launch covers its work items (persistent CTAs or one per item).
    pub schedule: crate::hopper::TileSchedule,
}

impl ForwardOptions {
    /// Options from a config name, as the CLI takes them: an mma.sync config
    /// (`128_64_8_s2`, [`KernelConfig::by_name`]), a Hopper config (`wg128_128_s2_pp`,
    /// [`HopperTile::by_name`]), or an engine with its default config (`mma`, `hopper`,
    /// `decode`).
    pub fn from_config_name(name: &str) -> Result<Self, KernelError> {
        let engine = match name {
            "mma" => Engine::MmaSync,
            "hopper" => Engine::Hopper(None),
            "decode" => Engine::Decode,
            n if n.starts_with("wg") => Engine::Hopper(Some(HopperTile::by_name(n)?)),
            n => {
                return Ok(Self {
                    config: Some(KernelConfig::by_name(n)?),
                    ..Self::default()
                })
            }
        };
        Ok(Self {
            engine,
            ..Self::default()
        })
    }
}

/// What ran: the kernel name and its launch geometry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchInfo {
    /// The kernel's entry point.
    pub kernel: String,
    /// The cubin's arch (`90a`).
    pub arch: &'static str,
    /// The config.
    pub config: KernelConfig,
    /// Grid (q tiles × splits, heads, batch).
    pub grid: (u32, u32, u32),
    /// Key splits per query block (1: no split-KV).
    pub splits: usize,
    /// Dynamic shared memory in bytes.
    pub smem_bytes: u32,
}

/// Registers and static shared memory the driver reports for a loaded kernel (for the
/// cross-check against the ptxas report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionResources {
    /// Registers per thread.
    pub registers: i32,
    /// Static shared memory in bytes.
    pub static_smem: i32,
}

/// The kernels of one device: its properties and every module and function loaded so far.
/// Shared (`Arc`) by all [`FlashAttention`] launchers of the device, so each cubin is loaded
/// once however many streams launch from it.
pub struct KernelCache {
    ctx: Arc<CudaContext>,
    major: i32,
    minor: i32,
    sm_count: usize,
    max_smem_optin: usize,
    modules: Mutex<HashMap<(String, bool), Arc<CudaModule>>>,
    functions: Mutex<FunctionCache>,
}

/// Loaded kernels by (entry point, debug build), with their shared-memory limit raised.
type FunctionCache = HashMap<(String, bool), CudaFunction>;

impl std::fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelCache")
            .field("compute_capability", &(self.major, self.minor))
            .field("sm_count", &self.sm_count)
            .finish_non_exhaustive()
    }
}

impl KernelCache {
    /// The modules loaded so far, by unit name (release and debug alike).
    pub(crate) fn loaded_modules(&self) -> Result<Vec<(String, Arc<CudaModule>)>, KernelError> {
        let modules = self.modules.lock().map_err(|_| KernelError::Poisoned)?;
        Ok(modules
            .iter()
            .map(|((unit, _), m)| (unit.clone(), m.clone()))
            .collect())
    }

    /// The cache of a context's device (nothing is loaded until a kernel is first used).
    pub fn new(ctx: Arc<CudaContext>) -> Result<Arc<Self>, KernelError> {
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver("reading the compute capability"))?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver("reading the SM count"))? as usize;
        let max_smem_optin =
            ctx.attribute(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )
            .map_err(driver("reading the shared-memory limit"))? as usize;
        Ok(Arc::new(Self {
            ctx,
            major,
            minor,
            sm_count,
            max_smem_optin,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
        }))
    }

    /// Loads (once) the kernel `name` of `unit` (any arch: the device's is chosen) and
    /// raises its dynamic shared-memory limit. Returns the function and the cubin's arch.
    pub(crate) fn function(
        &self,
        unit: &UnitKey,
        name: &str,
        debug: bool,
        smem: usize,
    ) -> Result<(CudaFunction, &'static str), KernelError> {
        let image = cubin::select(unit, debug, self.major, self.minor).ok_or_else(|| {
            if cubin::embedded().is_empty() {
                KernelError::KernelsNotBuilt
            } else if debug && !cubin::embedded().iter().any(|c| c.debug) {
                KernelError::DebugKernelsNotBuilt
            } else if cubin::embedded().iter().any(|c| {
                cubin::parse_arch_runs_on(c.arch, self.major, self.minor) && c.debug == debug
            }) {
                KernelError::UnitNotBuilt(unit.name())
            } else {
                let stem = UnitKey {
                    arch: Arch::Sm80,
                    ..*unit
                }
                .name();
                let family = stem.split("_sm").next().unwrap_or("");
                KernelError::NoCubinForArch {
                    device: format!("{}.{}", self.major, self.minor),
                    available: cubin::embedded()
                        .iter()
                        .filter(|c| c.unit.starts_with(family) && c.debug == debug)
                        .map(|c| format!("sm_{}", c.arch))
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            }
        })?;
        let key = (name.to_string(), debug);
        let mut functions = self.functions.lock().map_err(|_| KernelError::Poisoned)?;
        if let Some(f) = functions.get(&key) {
            return Ok((f.clone(), image.arch));
        }
        let module = {
            let mut modules = self.modules.lock().map_err(|_| KernelError::Poisoned)?;
            match modules.get(&(image.unit.to_string(), debug)) {
                Some(m) => m.clone(),
                None => {
                    let m = self
                        .ctx
                        .load_module(cudarc::nvrtc::Ptx::from_binary(image.image.to_vec()))
                        .map_err(driver("loading the cubin"))?;
                    modules.insert((image.unit.to_string(), debug), m.clone());
                    m
                }
            }
        };
        let f = module
            .load_function(name)
            .map_err(|_| KernelError::MissingKernel(name.to_string()))?;
        f.set_attribute(
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem as i32,
        )
        .map_err(driver("raising the dynamic shared-memory limit"))?;
        functions.insert(key, f.clone());
        Ok((f, image.arch))
    }
}

/// A launcher: a device's [`KernelCache`] and one stream. Cheap to make ([`Self::fork`],
/// [`Self::on_stream`]); one launcher may also be shared by many threads (every method takes
/// `&self`; launches from several threads are queued on its stream in some order).
pub struct FlashAttention {
    cache: Arc<KernelCache>,
    stream: Arc<CudaStream>,
    pub(crate) workspace: Mutex<Option<SplitWorkspace>>,
    /// The FP8 forward's Vᵀ buffer (src/fp8.rs), grown on demand.
    pub(crate) fp8_vt: Mutex<Option<CudaSlice<u8>>>,
    /// Device copies of ALiBi slopes and sinks ([`FeatureBuffers`]).
    pub(crate) features: Mutex<FeatureBuffers>,
    /// The backward's workspaces (src/backward.rs), grown on demand.
    pub(crate) bwd_workspace: Mutex<Option<BwdWorkspace>>,
    /// A shared-memory limit below the device's ([`FlashAttention::with_shared_memory_limit`]).
    smem_limit: Option<usize>,
}

/// Device memory of the backward, kept between calls and grown on demand: LSE₂, Δ and the f32
/// dQ accumulator carved from `f32s`, the deterministic mode's semaphores from `u32s`, zeroed
/// per call. A fresh allocation from CUDA's default pool, which returns its memory to the
/// system at every synchronization, cost ~1.3 µs per MB of the launch's time on an H200
/// (docs/PERF.md, run 173): ~350 µs for the 134 MB dQ accumulator of 4 × 16 × 4096 at D = 128,
/// paid by every training step that synchronizes. [`FlashAttention::release_workspaces`]
/// frees it.
pub(crate) struct BwdWorkspace {
    pub(crate) f32s: CudaSlice<f32>,
    pub(crate) u32s: CudaSlice<u32>,
}

/// Device memory of the split-KV epilogue: partial O, (m, l) per split row, and one ticket
/// counter per query block (zeroed at allocation, reset by the kernel after each use).
pub(crate) struct SplitWorkspace {
    o: CudaSlice<f32>,
    ml: CudaSlice<f32>,
    counters: CudaSlice<u32>,
}

/// The split-KV workspace in `slot`, reallocated (zeroed) when it holds fewer than `rows`
/// partial rows of `width` floats, their (m, l), or `blocks` tickets.
fn split_workspace<'a>(
    stream: &Arc<CudaStream>,
    slot: &'a mut Option<SplitWorkspace>,
    rows: usize,
    width: usize,
    blocks: usize,
) -> Result<&'a mut SplitWorkspace, KernelError> {
    let fits = slot.as_ref().is_some_and(|w| {
        w.o.len() >= rows * width && w.ml.len() >= rows * 2 && w.counters.len() >= blocks
    });
    if !fits {
        let alloc = |what| {
            move |source| KernelError::Driver {
                context: what,
                source,
            }
        };
        *slot = None; // free the old workspace first
        *slot = Some(SplitWorkspace {
            o: stream
                .alloc_zeros(rows * width)
                .map_err(alloc("allocating the split-KV workspace"))?,
            ml: stream
                .alloc_zeros(rows * 2)
                .map_err(alloc("allocating the split-KV workspace"))?,
            counters: stream
                .alloc_zeros(blocks)
                .map_err(alloc("allocating the split-KV counters"))?,
        });
    }
    slot.as_mut().ok_or(KernelError::Poisoned)
}

/// The split-KV workspace in `slot` ([`split_workspace`]) bound to a Hopper launch's
/// `HopperSched` pointers; the guards keep cudarc's stream ordering until after the launch.
pub(crate) fn bind_split_workspace<'a>(
    stream: &'a Arc<CudaStream>,
    slot: &'a mut Option<SplitWorkspace>,
    rows: usize,
    width: usize,
    tickets: usize,
    sched: &mut crate::hopper::HopperSched,
) -> Result<Vec<SyncOnDrop<'a>>, KernelError> {
    let w = split_workspace(stream, slot, rows, width, tickets)?;
    let (o_ptr, g_o) = w.o.device_ptr_mut(stream);
    let (ml_ptr, g_ml) = w.ml.device_ptr_mut(stream);
    let (c_ptr, g_c) = w.counters.device_ptr_mut(stream);
    (sched.ws_o, sched.ws_ml, sched.counters) = (o_ptr, ml_ptr, c_ptr);
    Ok(vec![g_o, g_ml, g_c])
}

impl std::fmt::Debug for FlashAttention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlashAttention")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

pub(crate) fn driver(
    context: &'static str,
) -> impl FnOnce(cudarc::driver::DriverError) -> KernelError {
    move |source| KernelError::Driver { context, source }
}

/// Probes for libcuda without panicking (cudarc's context constructor panics without it).
/// Under the `dynamic-linking` feature libcuda was linked at build time, so it is present
/// whenever the process runs (a stub libcuda answers every call with an error instead).
pub fn driver_available() -> bool {
    culib_present()
}

#[cfg(feature = "dynamic-loading")]
fn culib_present() -> bool {
    // SAFETY: only tries to dlopen the driver library; no CUDA call is made.
    unsafe { sys::is_culib_present() }
}

/// Linked at build time: present whenever the process runs.
#[cfg(not(feature = "dynamic-loading"))]
fn culib_present() -> bool {
    true
}

/// One forward pass, described whole: the problem, the device tensors and the options.
/// Q `[B, Hq, Sq, D]`, K and V `[B, Hkv, Sk, D]`, O like Q, each with any strides
/// ([`Tensor`]); LSE `[B, Hq, Sq]` contiguous f32 when wanted.
#[derive(Debug)]
pub struct Forward<'a, T, K = T> {
    /// Shapes, mask and softmax scale.
    pub problem: &'a Problem,
    /// Queries.
    pub q: Tensor<'a, T>,
    /// Keys (in `T`; E4M3 codes `u8` through [`FlashAttention::forward_kv_fp8`]).
    pub k: Tensor<'a, K>,
    /// Values, like the keys.
    pub v: Tensor<'a, K>,
    /// Output (written).
    pub o: TensorMut<'a, T>,
    /// Row log-sum-exp (natural log), `[B, Hq, Sq]`, when wanted.
    pub lse: Option<CudaViewMut<'a, f32>>,
    /// Config and split overrides.
    pub options: ForwardOptions,
}

impl<'a, T> Forward<'a, T> {
    /// Whole contiguous `[B, H, S, D]` buffers, default options.
    pub fn bhsd(
        problem: &'a Problem,
        q: &'a CudaSlice<T>,
        k: &'a CudaSlice<T>,
        v: &'a CudaSlice<T>,
        o: &'a mut CudaSlice<T>,
        lse: Option<&'a mut CudaSlice<f32>>,
    ) -> Self {
        let s = problem.shape();
        let (qd, kd) = (dims_q(s), dims_kv(s));
        Self {
            problem,
            q: Tensor::bhsd(q, qd),
            k: Tensor::bhsd(k, kd),
            v: Tensor::bhsd(v, kd),
            o: TensorMut::bhsd(o, qd),
            lse: lse.map(|l| l.as_view_mut()),
            options: ForwardOptions::default(),
        }
    }

    /// The same with `options`.
    pub fn with_options(mut self, options: ForwardOptions) -> Self {
        self.options = options;
        self
    }
}

/// `[B, Hq, Sq, D]`.
pub fn dims_q(s: &attn_ref::AttnShape) -> [usize; 4] {
    [s.batch(), s.q_heads(), s.q_len(), s.head_dim()]
}

/// `[B, Hkv, Sk, D]`.
pub fn dims_kv(s: &attn_ref::AttnShape) -> [usize; 4] {
    [s.batch(), s.kv_heads(), s.kv_len(), s.head_dim()]
}

/// Device pointers of a launch's tensors, after validation. The guards make cudarc order the
/// launch after pending writes to each buffer and record its reads/writes when dropped, so
/// a `BoundTensors` lives until after the launch.
pub(crate) struct BoundTensors<'a> {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    /// 0 when no LSE is written (the kernels test for null).
    pub lse: u64,
    _guards: Vec<SyncOnDrop<'a>>,
}

/// Takes the device pointers of Q, K, V, O (and LSE) on `stream` and validates them
/// ([`check_tensors`]); the one place the f16/bf16 and FP8 launchers bind their tensors.
pub(crate) fn bind_tensors<'a, T, K, U>(
    stream: &'a CudaStream,
    expected: &Expected,
    q: &'a Tensor<'_, T>,
    k: &'a Tensor<'_, K>,
    v: &'a Tensor<'_, K>,
    o: &'a mut TensorMut<'_, U>,
    lse: Option<&'a mut CudaViewMut<'_, f32>>,
) -> Result<BoundTensors<'a>, KernelError> {
    let (q_ptr, gq) = q.view.device_ptr(stream);
    let (k_ptr, gk) = k.view.device_ptr(stream);
    let (v_ptr, gv) = v.view.device_ptr(stream);
    let (o_dims, o_strides, o_len) = (o.dims, o.strides, o.view.len());
    let (o_ptr, go) = o.view.device_ptr_mut(stream);
    let mut guards = vec![gq, gk, gv, go];
    let lse = match lse {
        Some(l) => {
            let len = l.len();
            let (p, g) = l.device_ptr_mut(stream);
            guards.push(g);
            Some((len, p))
        }
        None => None,
    };
    check_tensors(
        expected,
        [
            std::mem::size_of::<T>(),
            std::mem::size_of::<K>(),
            std::mem::size_of::<U>(),
        ],
        (q.dims, q.strides, q.view.len(), q_ptr),
        (k.dims, k.strides, k.view.len(), k_ptr),
        (v.dims, v.strides, v.view.len(), v_ptr),
        (o_dims, o_strides, o_len, o_ptr),
        lse,
    )?;
    Ok(BoundTensors {
        q: q_ptr,
        k: k_ptr,
        v: v_ptr,
        o: o_ptr,
        lse: lse.map_or(0, |(_, p)| p),
        _guards: guards,
    })
}

/// Validates Q, K, V, O (and LSE) against the expected dims (the problem's, [`Expected::dense`],
/// or a sequence layout's) and each other. Pure over addresses and lengths, so it is testable
/// without a device.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_tensors(
    expected: &Expected,
    elem_bytes: [usize; 3],
    q: ([usize; 4], Strides, usize, u64),
    k: ([usize; 4], Strides, usize, u64),
    v: ([usize; 4], Strides, usize, u64),
    o: ([usize; 4], Strides, usize, u64),
    lse: Option<(usize, u64)>,
) -> Result<(), KernelError> {
    let [q_bytes, kv_bytes, out_bytes] = elem_bytes;
    let (qd, kd) = (expected.q, expected.kv);
    let cq = check_tensor("Q", qd, q.0, q.1, q.2, q_bytes, q.3, false)?;
    let ck = check_tensor("K", kd, k.0, k.1, k.2, kv_bytes, k.3, false)?;
    let cv = check_tensor("V", kd, v.0, v.1, v.2, kv_bytes, v.3, false)?;
    let co = check_tensor("O", qd, o.0, o.1, o.2, out_bytes, o.3, true)?;
    let o_range = (o.3, (co.extent * out_bytes) as u64);
    let inputs = [
        ("Q", q.3, (cq.extent * q_bytes) as u64),
        ("K", k.3, (ck.extent * kv_bytes) as u64),
        ("V", v.3, (cv.extent * kv_bytes) as u64),
    ];
    for (name, addr, len) in inputs {
        if ranges_overlap(o_range.0, o_range.1, addr, len) {
            return Err(KernelError::Overlap {
                output: "O",
                input: name,
            });
        }
    }
    if let Some((len, addr)) = lse {
        check_buffer("LSE", expected.lse, len)?;
        let bytes = (expected.lse * 4) as u64;
        for (name, a, l) in inputs.into_iter().chain([("O", o_range.0, o_range.1)]) {
            if ranges_overlap(addr, bytes, a, l) {
                return Err(KernelError::Overlap {
                    output: "LSE",
                    input: name,
                });
            }
        }
    }
    Ok(())
}

impl FlashAttention {
    /// Opens device `ordinal` with a new stream of its own (not the legacy default stream,
    /// which cannot be captured into a CUDA graph and serializes with all other work).
    pub fn new(ordinal: usize) -> Result<Self, KernelError> {
        if !driver_available() {
            return Err(KernelError::DriverMissing);
        }
        let ctx = CudaContext::new(ordinal).map_err(driver("creating the CUDA context"))?;
        let stream = ctx.new_stream().map_err(driver("creating a stream"))?;
        Self::with_stream(stream)
    }

    /// Uses an existing stream (and its context) with a new kernel cache.
    pub fn with_stream(stream: Arc<CudaStream>) -> Result<Self, KernelError> {
        let cache = KernelCache::new(stream.context().clone())?;
        Ok(Self::on_stream(cache, stream))
    }

    /// A launcher on `stream` sharing an existing cache (of the stream's device).
    pub fn on_stream(cache: Arc<KernelCache>, stream: Arc<CudaStream>) -> Self {
        Self {
            cache,
            stream,
            workspace: Mutex::new(None),
            fp8_vt: Mutex::new(None),
            features: Mutex::new(FeatureBuffers::default()),
            bwd_workspace: Mutex::new(None),
            smem_limit: None,
        }
    }

    /// This launcher with at most `bytes` of dynamic shared memory per block (never more than
    /// the device's), as on a smaller part of the same arch: an H100 or A100 launcher limited
    /// to [`crate::catalog::SM8X_SMALL_SMEM`] (99 KiB) chooses the tiles an sm_86/87/89 part
    /// runs. Where a choice is left (mma.sync configs, the backward's tile, and the engine
    /// under `Auto`: the Hopper forward and the wgmma backward, whose tiles need more than
    /// 99 KiB, give way to the mma.sync kernels), only what fits is chosen; a launch that
    /// needs more (a pinned config or engine) is refused with [`KernelError::ConfigTooLarge`].
    /// For testing, and for sharing an SM's shared memory with other work.
    pub fn with_shared_memory_limit(mut self, bytes: usize) -> Self {
        self.smem_limit = Some(bytes);
        self
    }

    /// Frees the device memory this launcher keeps between calls: the split-KV and backward
    /// workspaces and the FP8 forward's Vᵀ buffer (the next call that needs one allocates it
    /// again). In stream order: launches already queued keep theirs until they complete.
    pub fn release_workspaces(&self) -> Result<(), KernelError> {
        *self.workspace.lock().map_err(|_| KernelError::Poisoned)? = None;
        *self.fp8_vt.lock().map_err(|_| KernelError::Poisoned)? = None;
        *self
            .bwd_workspace
            .lock()
            .map_err(|_| KernelError::Poisoned)? = None;
        Ok(())
    }

    /// A second launcher on the same device and kernel cache with its own new stream (for
    /// concurrent launches), and this one's shared-memory limit.
    pub fn fork(&self) -> Result<Self, KernelError> {
        let stream = self
            .cache
            .ctx
            .new_stream()
            .map_err(driver("creating a stream"))?;
        Ok(Self {
            smem_limit: self.smem_limit,
            ..Self::on_stream(self.cache.clone(), stream)
        })
    }

    /// The device's kernel cache.
    pub fn cache(&self) -> &Arc<KernelCache> {
        &self.cache
    }
    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.cache.ctx
    }
    /// The stream launches go to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        (self.cache.major, self.cache.minor)
    }
    /// Number of SMs.
    pub fn sm_count(&self) -> usize {
        self.cache.sm_count
    }
    /// Largest dynamic shared memory one CTA may opt into: the device's, or this launcher's
    /// limit if lower ([`FlashAttention::with_shared_memory_limit`]).
    pub fn max_smem_per_block(&self) -> usize {
        self.smem_limit.map_or(self.cache.max_smem_optin, |l| {
            l.min(self.cache.max_smem_optin)
        })
    }

    /// The config [`FlashAttention::forward`] uses for `problem` by default.
    pub fn default_config(&self, problem: &Problem) -> KernelConfig {
        let s = problem.shape();
        crate::elite::lookup(problem, &self.arch_label())
            .filter(|c| c.smem_bytes(s.head_dim()) <= self.max_smem_per_block())
            .unwrap_or_else(|| {
                choose_config(
                    s.batch(),
                    s.q_heads(),
                    s.q_len(),
                    s.head_dim(),
                    self.sm_count(),
                    self.max_smem_per_block(),
                )
            })
    }

    fn arch_label(&self) -> String {
        let (ma, mi) = self.compute_capability();
        format!("sm_{ma}{mi}")
    }

    /// The kernel `name` of `unit`, for a launch with `smem` bytes of dynamic shared memory:
    /// refused with [`KernelError::ConfigTooLarge`] above [`FlashAttention::max_smem_per_block`]
    /// (the launchers check their plans before this; it is the one guard every launch passes).
    pub(crate) fn function(
        &self,
        unit: &UnitKey,
        name: &str,
        debug: bool,
        smem: usize,
    ) -> Result<(CudaFunction, &'static str), KernelError> {
        if smem > self.max_smem_per_block() {
            return Err(KernelError::ConfigTooLarge {
                config: name.to_string(),
                smem,
                limit: self.max_smem_per_block(),
            });
        }
        self.cache.function(unit, name, debug, smem)
    }

    /// Registers and static shared memory of one kernel as the driver loaded it.
    pub fn resources(
        &self,
        dtype: Dtype,
        head_dim: usize,
        config: &KernelConfig,
        causal: bool,
    ) -> Result<FunctionResources, KernelError> {
        let mode = if causal {
            KernelMode::Causal
        } else {
            KernelMode::Full
        };
        let unit = unit_key(Arch::Sm80, dtype, head_dim)?;
        let name = fwd_entry_name(&unit, config, mode, false);
        let (f, _) = self.function(&unit, &name, false, config.smem_bytes(head_dim))?;
        function_resources(&f)
    }

    /// Runs the forward pass: `o = softmax(scale · q·kᵀ + mask) · v`, and the row LSE into
    /// `lse` when given. Everything is validated before the launch; on error nothing is
    /// launched and nothing is written. The launch is asynchronous on [`Self::stream`].
    pub fn forward<T: StorageType>(&self, args: Forward<'_, T>) -> Result<LaunchInfo, KernelError> {
        self.launch(args, LaunchExtras::default())
    }

    pub(crate) fn launch<T: StorageType, K>(
        &self,
        args: Forward<'_, T, K>,
        extras: LaunchExtras<'_>,
    ) -> Result<LaunchInfo, KernelError> {
        let Forward {
            problem,
            mut q,
            k,
            v,
            mut o,
            mut lse,
            options: opts,
        } = args;
        // Decode with GQA: the query heads of one KV head become the rows of one problem.
        let planted_any = extras.dump.is_some() || extras.mode.is_some();
        let dense_q = !matches!(
            extras.seqs.as_ref().map(|s| &s.queries),
            Some(crate::seqs::QueryRows::Packed { .. })
        );
        // Tensors whose dims do not match the problem keep them, for the usual error below.
        let want = dims_q(problem.shape());
        let original = problem;
        // Whether `unit`'s decode entries are in this build (a filtered build may lack them).
        let decode_built = |d: usize| {
            crate::config::bucket_for(d).is_ok_and(|bucket| {
                let dunit = crate::decode::decode_unit(Arch::Sm80, T::DTYPE, bucket);
                cubin::select(&dunit, false, self.cache.major, self.cache.minor).is_some()
            })
        };
        let packed_problem = if planted_any || !dense_q || q.dims != want || o.dims != want {
            None
        } else {
            gqa_packed_decode(problem)
        };
        // Packed rows with sinks, ALiBi or a window: only if the decode kernel takes the packed
        // launch (the others read one sink and slope per head, and a window per row);
        // otherwise the heads stay unpacked.
        let of = original.features();
        let per_head = of.sinks.is_some() || of.alibi.is_some() || of.window.is_some();
        let packed_problem = packed_problem.filter(|packed| {
            !per_head
                || matches!(
                    crate::decode::decode_choice(
                        packed,
                        &opts,
                        false,
                        extras.seqs.as_ref(),
                        decode_built(packed.shape().head_dim())
                    ),
                    Ok(Some(_))
                )
        });
        let per_head_packed = per_head && packed_problem.is_some();
        let problem = match &packed_problem {
            Some(packed) => {
                let group = problem.shape().group_size();
                (q.dims, q.strides) = pack_query_heads(q.dims, q.strides, group);
                (o.dims, o.strides) = pack_query_heads(o.dims, o.strides, group);
                packed
            }
            None => problem,
        };
        // One query row per sequence: a bottom-right causal mask hides no key, so the
        // unmasked entries (which have split-KV twins) run it.
        let unmasked = if planted_any {
            None
        } else {
            single_row_unmasked(problem)
        };
        let problem = unmasked.as_ref().unwrap_or(problem);
        // An E4M3 KV cache (`forward_kv_fp8`): K and V are one-byte codes.
        let kv_fp8 = extras.kv_scales.is_some();
        if kv_fp8 != (std::mem::size_of::<K>() == 1) {
            return Err(KernelError::InvalidTensor {
                tensor: "K",
                reason: "E4M3 codes go through forward_kv_fp8, with their scales".into(),
            });
        }
        let shape = problem.shape();
        let d = shape.head_dim();
        let debug = extras.dump.is_some();
        let unit = unit_key(Arch::Sm80, T::DTYPE, d)?;
        let planted = debug || extras.mode.is_some();
        let features = !problem.features().is_empty();
        if kv_fp8 && planted {
            return Err(KernelError::UnsupportedFeature(
                "an E4M3 KV cache in a debug launch (tile dumps, planted bugs)".into(),
            ));
        }
        if kv_fp8 && d % 16 != 0 {
            return Err(KernelError::UnsupportedFeature(format!(
                "an E4M3 KV cache at head_dim {d} (rows are read in 16-byte chunks of codes: D must be a multiple of 16)"
            )));
        }
        if features && planted {
            return Err(KernelError::UnsupportedFeature(format!(
                "{} in a debug launch (tile dumps, planted bugs)",
                feature_names(problem)
            )));
        }
        // A varlen / KV-cache / paged launch: checked against the tensors before anything else.
        let seq_plan = match &extras.seqs {
            Some(seqs) => {
                if planted {
                    return Err(KernelError::UnsupportedFeature(
                        "varlen or paged KV in a debug launch (tile dumps, planted bugs)".into(),
                    ));
                }
                Some(plan_sequences(
                    problem,
                    &IndexLens::of(seqs),
                    q.dims,
                    k.dims,
                )?)
            }
            None => None,
        };
        // The general entry points: features, any sequence layout, an E4M3 KV cache.
        let general = features || seq_plan.is_some() || kv_fp8;
        if kv_fp8 && matches!(opts.engine, Engine::Hopper(_)) {
            return Err(KernelError::EngineUnavailable(
                "the Hopper engine does not read E4M3 KV caches yet; use Engine::Auto or Engine::MmaSync".into(),
            ));
        }
        // Decode-shaped launches (1–8 rows after packing) run the decode kernel.
        let decode_rows = crate::decode::decode_choice(
            problem,
            &opts,
            planted,
            extras.seqs.as_ref(),
            decode_built(d),
        )?;
        let hopper = if kv_fp8 || decode_rows.is_some() {
            None
        } else {
            let dumps_only = debug && extras.mode.is_none();
            self.hopper_choice(
                problem,
                T::DTYPE,
                &opts,
                planted,
                dumps_only,
                seq_plan.as_ref(),
            )?
        };
        if let Some(tile) = hopper {
            let seqs = seq_plan.zip(extras.seqs.as_ref());
            return self.launch_hopper(
                problem,
                &q,
                &k,
                &v,
                &mut o,
                lse.as_mut(),
                tile,
                seqs,
                opts.schedule,
                opts.splits,
                extras.dump,
            );
        }
        let (unit, name, plan) = match decode_rows {
            Some(rows) => {
                let dunit = crate::decode::decode_unit(Arch::Sm80, T::DTYPE, unit.head_dim);
                // Paged and dense caches: their capacity; packed keys: the problem's Sk; at most
                // a window's left span + 1 (the decode kernel's rows are one position, the last
                // key's), so a short window does not split into empty splits (run 201: 32
                // splits for a 128-key window took 2.2× one row per head's time).
                let kv_len = seq_plan
                    .map(|s| s.kv_len)
                    .filter(|&n| n > 0)
                    .unwrap_or(shape.kv_len());
                let kv_len = decode_keys_bound(original, kv_len);
                let plan = crate::decode::plan_decode(
                    problem,
                    rows,
                    kv_fp8,
                    opts.splits,
                    kv_len,
                    self.sm_count(),
                )?;
                let name = crate::catalog::decode_entry_name(&dunit, rows, kv_fp8);
                (dunit, name, plan)
            }
            None => {
                let config = match opts.config {
                    Some(c) => c,
                    None if general => feature_config(d)?,
                    None => self.default_config(problem),
                };
                // The general entries split unmasked launches (sinks join once, in
                // split_combine's merge).
                let general_split = general && problem.causal() == Causal::None;
                if general && !features {
                    let want = feature_config(d)?;
                    if config != want {
                        return Err(KernelError::UnsupportedFeature(format!(
                        "varlen, paged or E4M3 KV with config {} (these launches run in config {} only)",
                        config.name(),
                        want.name()
                    )));
                    }
                    if !general_split && opts.splits.is_some_and(|n| n != 1) {
                        return Err(KernelError::UnsupportedFeature(
                        "varlen, paged or E4M3 KV with split-KV under a causal mask (use 1 or the default)".into(),
                    ));
                    }
                }
                // Debug launches never split: dumps are per query block.
                let splits = if planted { Some(1) } else { opts.splits };
                let entry = GeneralEntry {
                    general,
                    split: general_split,
                    kv_fp8,
                };
                let plan = plan_launch_entry(problem, config, splits, self.sm_count(), entry)?;
                let cfg = plan.config;
                if plan.smem_bytes as usize > self.max_smem_per_block() {
                    return Err(KernelError::ConfigTooLarge {
                        config: cfg.name(),
                        smem: plan.smem_bytes as usize,
                        limit: self.max_smem_per_block(),
                    });
                }
                let paged = seq_plan.is_some_and(|s| s.paged);
                let causal = problem.causal() != Causal::None;
                let mode = match (extras.mode, general) {
                    (Some(m), _) => m,
                    (None, false) if causal => KernelMode::Causal,
                    (None, false) => KernelMode::Full,
                    (None, true) => KernelMode::general(causal, paged, kv_fp8),
                };
                let split = plan.params.n_splits > 1;
                let name = fwd_entry_name(&unit, &cfg, mode, split);
                (unit, name, plan)
            }
        };
        let cfg = plan.config;
        let split = plan.params.n_splits > 1;
        let (func, arch) = self.function(&unit, &name, debug, plan.smem_bytes as usize)?;
        let stream = &self.stream;
        let o_strides = o.strides;
        let expected = seq_plan.map_or_else(|| Expected::dense(shape), |s| s.expected);
        let ptrs = bind_tensors(stream, &expected, &q, &k, &v, &mut o, lse.as_mut())?;
        let mut params = plan
            .params
            .with_strides(q.strides, k.strides, v.strides, o_strides);
        params.dump_count = extras.dump.as_ref().map_or(0, |d| d.count);
        let mut index_guards = Vec::new();
        if let (Some(sp), Some(seqs)) = (seq_plan, extras.seqs.as_ref()) {
            params.seqs = sp.seqs;
            params.kv_len = sp.kv_len as i32; // i32-checked by plan_sequences
            index_guards = bind_indices(stream, seqs, &mut params.seqs);
        }
        let mut feature_bufs = self.features.lock().map_err(|_| KernelError::Poisoned)?;
        // Packed rows with sinks, ALiBi or a window take the original problem's.
        let arrays_of = if per_head_packed {
            packed_decode_features(original, &mut params.feat);
            original
        } else {
            problem
        };
        let feature_guard = bind_features(stream, &mut feature_bufs, arrays_of, &mut params.feat)?;
        let scale_guards = match &extras.kv_scales {
            Some(scales) => {
                crate::kv_fp8::bind_kv_scales(stream, scales, shape.kv_heads(), &mut params.feat)?
            }
            None => Vec::new(),
        };
        let launch_cfg = LaunchConfig {
            grid_dim: plan.grid,
            block_dim: (cfg.threads() as u32, 1, 1),
            shared_mem_bytes: plan.smem_bytes,
        };
        let null: u64 = 0;
        let mut ws_guard = self.workspace.lock().map_err(|_| KernelError::Poisoned)?;
        if split {
            let blocks = plan.grid.0 as usize / plan.params.n_splits as usize
                * plan.grid.1 as usize
                * plan.grid.2 as usize;
            let rows = blocks * plan.params.n_splits as usize * cfg.block_m;
            split_workspace(stream, &mut ws_guard, rows, unit.head_dim, blocks)?;
        }
        let mut builder = stream.launch_builder(&func);
        builder
            .arg(&ptrs.q)
            .arg(&ptrs.k)
            .arg(&ptrs.v)
            .arg(&ptrs.o)
            .arg(&ptrs.lse);
        match ws_guard.as_mut().filter(|_| split) {
            Some(w) => builder.arg(&mut w.o).arg(&mut w.ml).arg(&mut w.counters),
            None => builder.arg(&null).arg(&null).arg(&null),
        };
        builder.arg(&params);
        if let Some(d) = extras.dump {
            builder.arg(d.buffer).arg(d.tiles);
        }
        // SAFETY: the argument list matches ATTN_FWD_ENTRY (q, k, v, o, lse, ws_o, ws_ml,
        // counters, FwdParams by value, and in debug cubins dump, dump_tiles), and
        // ATTN_DECODE_ENTRY's is the same without the debug pair (decode launches are never
        // debug launches: `decode_refusal`). Every tensor
        // was checked above: its dims are the problem's, every element its strides name lies
        // inside its view, views start 16-byte aligned with 16-byte-multiple strides (the
        // kernel's vector loads), O names no element twice and overlaps no input, and LSE
        // holds B·Hq·Sq floats. The guards keep cudarc's stream ordering for the raw pointers
        // until after the launch. The grid covers ceil(Sq/BM)·splits × Hq × B blocks whose
        // reads and writes the kernel bounds by q_len/kv_len/head_dim; the split workspace
        // holds blocks·splits·BM rows of the bucket's width and one counter per block (zeroed,
        // reset by the kernel); 32-bit index ranges were checked in `plan_launch`; null
        // pointers are passed only where the kernel does not read them (lse is tested for
        // null; the workspace only in split entry points; the feature arrays only in feature
        // entry points, which test them for null and index them by (b, h) < the lengths
        // `Features::validate` checked); in sequence launches (general entries only) Q/O/K/V
        // were checked against the layout's dims (packed rows, pages) and the index arrays'
        // lengths against the batch, and the kernel clamps every device-resident index into
        // those checked sizes before addressing memory (kernels/seqs.cuh, load_tile_paged);
        // a decode grid is splits × heads × batch CTAs of at most 8 rows (its row bucket,
        // the workspace's block_m), bounded by q_len/kv_len/head_dim the same way and
        // clamping the same indices (decode_kernel.cuh);
        // the dynamic shared-memory size was raised on the function and fits the device.
        unsafe { builder.launch(launch_cfg) }.map_err(driver("launching the kernel"))?;
        drop(ptrs);
        drop(feature_guard);
        drop(scale_guards);
        drop(index_guards);
        Ok(LaunchInfo {
            kernel: name,
            arch,
            config: cfg,
            grid: plan.grid,
            splits: plan.params.n_splits as usize,
            smem_bytes: plan.smem_bytes,
        })
    }
}

/// FlashAttention-3's PackGQA for decode (hopper/pack_gqa.h; FlashInfer does the same): with
/// one query row per head and G query heads per KV head, the G heads of a KV head become the
/// G rows of one head of a problem with Hq = Hkv, so one CTA reads each K/V tile once for all
/// of them instead of G CTAs reading it G times. Rows and heads swap places in the Q/O views
/// ([`pack_query_heads`]) and the LSE `[B, Hq, 1]` is already `[B, Hkv, G]` in memory.
///
/// Only where the packed problem is the same computation: one query row (any number of
/// keys), no causal mask that a single row would feel (`TopLeft` shows row 0 key 0 only;
/// `BottomRight` shows it every key, like no mask); the softcap and the scale carry over.
/// Sinks and ALiBi slopes (one per query head) and a window (the packed rows are one
/// position, not G) do not carry over: only the decode kernel runs packed rows with them — it
/// reads row r of packed head h's sink and slope at h·G + r of the original problem's arrays,
/// and takes the window and ALiBi distances of one position, the original row's — so the
/// launcher packs such a problem only when that kernel takes it, and binds the original's
/// arrays and window ([`packed_decode_features`]).
pub(crate) fn gqa_packed_decode(problem: &Problem) -> Option<Problem> {
    let s = problem.shape();
    let f = problem.features();
    let group = s.group_size();
    if s.q_len() != 1 || group < 2 || problem.causal() == Causal::TopLeft {
        return None;
    }
    let shape = attn_ref::AttnShape::new(
        s.batch(),
        s.kv_heads(),
        s.kv_heads(),
        group,
        s.kv_len(),
        s.head_dim(),
    )
    .ok()?;
    let packed = Problem::new(shape, Causal::None)
        .with_scale(problem.scale())
        .ok()?;
    match f.softcap {
        Some(c) => packed.with_softcap(c).ok(),
        None => Some(packed),
    }
}

/// The features a GQA-packed decode launch takes from the original problem (one query row per
/// head), which its packed problem cannot carry ([`gqa_packed_decode`]): the window, which the
/// decode kernel applies from the last packed row's diagonal (the original row's), and the
/// ALiBi slopes' batch stride (the original's query heads). The sinks' and slopes' array is
/// bound from the original problem by the launcher.
pub(crate) fn packed_decode_features(original: &Problem, feat: &mut FwdFeatures) {
    let f = fwd_features(original);
    feat.window_left = f.window_left;
    feat.window_right = f.window_right;
    feat.alibi_batch_stride = f.alibi_batch_stride;
}

/// The keys a decode launch's rows can see, for its split count: `kv_len`, or fewer under a
/// window with a left bound (one position sees at most `left + 1` keys: itself and those
/// before it; the right bound adds none past the last key).
pub(crate) fn decode_keys_bound(original: &Problem, kv_len: usize) -> usize {
    match original.features().window {
        Some((left, _)) if left >= 0 => kv_len.min(
            usize::try_from(left)
                .unwrap_or(usize::MAX)
                .saturating_add(1),
        ),
        _ => kv_len,
    }
}

/// The `[B, Hq, 1, D]` query (or output) view as `[B, Hkv, G, D]`: element `(b, h, g)` is
/// query head `h·G + g`, so the head stride grows G-fold and the row stride becomes the
/// old head stride.
pub(crate) fn pack_query_heads(
    dims: [usize; 4],
    strides: Strides,
    group: usize,
) -> ([usize; 4], Strides) {
    (
        [dims[0], dims[1] / group, group, dims[3]],
        Strides {
            batch: strides.batch,
            head: strides.head * group,
            row: strides.head,
        },
    )
}

impl FlashAttention {
    /// Whether this device runs sm_90a cubins (Hopper's wgmma, TMA).
    fn is_hopper(&self) -> bool {
        Arch::Sm90a.runs_on(self.cache.major, self.cache.minor)
    }

    /// The Hopper tile a launch runs with (`Some(None)`: the bucket's default), or `None` for
    /// the mma.sync kernel (see [`Engine`]). `planted`: a debug launch (tile dumps, planted
    /// bugs), which `Auto` gives the mma.sync kernel; `dumps_only`: one with tile dumps and no
    /// planted bug, which [`Engine::Hopper`] also runs (the debug build's Hopper tile,
    /// [`crate::catalog::hopper_debug_tile`]). `seqs`: a sequence layout's plan; the
    /// Hopper engine runs varlen batches, KV-cache lengths and paged caches, and `Auto`
    /// gives it only launches whose longest query sequence fills more than the mma.sync
    /// general config's 64-row block (decode-like launches waste less there).
    fn hopper_choice(
        &self,
        problem: &Problem,
        dtype: Dtype,
        opts: &ForwardOptions,
        planted: bool,
        dumps_only: bool,
        seqs: Option<&crate::seqs::SeqPlan>,
    ) -> Result<Option<Option<HopperTile>>, KernelError> {
        match opts.engine {
            // Engine::Decode was taken (or refused) by the decode kernel before this.
            Engine::MmaSync | Engine::Decode => Ok(None),
            Engine::Hopper(tile) => {
                if !self.is_hopper() {
                    return Err(KernelError::EngineUnavailable(format!(
                        "the Hopper engine needs an sm_90 device; this one is sm_{}{}",
                        self.cache.major, self.cache.minor
                    )));
                }
                // Split counts are checked by `plan_hopper`: the sequence and feature entries
                // split keys, the dense ones do not.
                if (planted && !dumps_only) || opts.config.is_some() {
                    return Err(KernelError::EngineUnavailable(
                        "the Hopper engine has no planted bugs or mma.sync configs; use Engine::MmaSync or Engine::Auto for those".into(),
                    ));
                }
                Ok(Some(tile))
            }
            Engine::Auto => {
                if planted || !self.is_hopper() {
                    return Ok(None);
                }
                if let Some(sp) = seqs.filter(|_| problem.shape().q_len() <= 64) {
                    // The mma.sync general entries' 64-row blocks fit these launches, but they
                    // split unmasked launches only: a causal one whose grid the Hopper
                    // entries would split (speculative decoding's verify step, a small chunk
                    // against a long cache) takes those.
                    let s = problem.shape();
                    if !crate::hopper::short_causal_split(
                        problem.causal() != Causal::None,
                        s.batch() * s.q_heads(),
                        sp.keys_bound(),
                        self.sm_count(),
                    ) {
                        return Ok(None);
                    }
                }
                let Ok(bucket) = crate::config::bucket_for(problem.shape().head_dim()) else {
                    return Ok(None); // the mma.sync path reports the head dim
                };
                let unit = hopper_unit(dtype, bucket);
                if cubin::select(&unit, false, self.cache.major, self.cache.minor).is_none() {
                    return Ok(None); // a filtered build without this unit
                }
                // A launcher limited below any of the bucket's Hopper tiles
                // (`with_shared_memory_limit`; without a limit every tile fits sm_90) runs the
                // mma.sync kernel, as the 99 KiB parts do: the tile the plan would pick might
                // not fit, and a refusal is no choice.
                if crate::catalog::hopper_tiles(bucket).iter().any(|t| {
                    crate::catalog::hopper_smem_bytes(t, bucket) > self.max_smem_per_block()
                }) {
                    return Ok(None);
                }
                if seqs.is_some() {
                    // The sequence entries split keys themselves (chunked prefill's small
                    // grids), causal launches included, which the mma.sync general entries
                    // cannot.
                    return Ok(Some(None));
                }
                let mma = self.default_config(problem);
                Ok(auto_prefers_hopper(
                    problem,
                    &mma,
                    opts.config.is_some(),
                    opts.splits,
                    self.sm_count(),
                )
                .then_some(None))
            }
        }
    }

    /// Validates and launches the Hopper kernel (the rest of [`FlashAttention::forward`]).
    #[allow(clippy::too_many_arguments)]
    fn launch_hopper<T: StorageType, K>(
        &self,
        problem: &Problem,
        q: &Tensor<'_, T>,
        k: &Tensor<'_, K>,
        v: &Tensor<'_, K>,
        o: &mut TensorMut<'_, T>,
        lse: Option<&mut CudaViewMut<'_, f32>>,
        tile: Option<HopperTile>,
        seqs: Option<(crate::seqs::SeqPlan, &Sequences<'_>)>,
        schedule: crate::hopper::TileSchedule,
        splits: Option<usize>,
        dump: Option<DumpArgs<'_>>,
    ) -> Result<LaunchInfo, KernelError> {
        let seq_launch = seqs.map(|(sp, layout)| crate::hopper::SeqLaunch {
            packed_total_q: matches!(layout.queries, crate::seqs::QueryRows::Packed { .. })
                .then_some(sp.seqs.total_q as usize),
            page_size: sp.paged.then_some(sp.seqs.page_size as usize),
            keys_bound: sp.keys_bound(),
        });
        let mut plan = plan_hopper(
            problem,
            tile,
            self.max_smem_per_block(),
            seq_launch,
            self.sm_count(),
            schedule,
            splits,
        )?;
        let unit = hopper_unit(T::DTYPE, plan.bucket);
        let causal = problem.causal() != Causal::None;
        if dump.is_some() {
            // The debug cubin has one tile's dense entries (`hopper_debug_tile`); a dump is
            // per query block, so neither a split nor a walk (items of several blocks per CTA).
            let debug_tile = crate::catalog::hopper_debug_tile(plan.bucket);
            if debug_tile != Some(plan.tile)
                || plan.variant != crate::catalog::HopperVariant::Dense
                || plan.sched.splits > 1
                || plan.sched.tail_items != 0
            {
                return Err(KernelError::EngineUnavailable(format!(
                    "the Hopper engine dumps tiles from the dense entries of {} at head dim {} only, without splits or walks",
                    debug_tile.map_or_else(|| "no tile".into(), |t| t.name()),
                    plan.bucket
                )));
            }
        }
        // Sequence layouts run in the `_seq` or `_feat` entries (kernels/seqs.cuh).
        let name = hopper_entry_name(&unit, &plan.tile, causal, plan.variant);
        let (func, arch) = self.function(&unit, &name, dump.is_some(), plan.smem_bytes as usize)?;
        let stream = &self.stream;
        let o_strides = o.strides;
        let expected = seqs.map_or_else(|| Expected::dense(problem.shape()), |(sp, _)| sp.expected);
        let ptrs = bind_tensors(stream, &expected, q, k, v, o, lse)?;
        let mut params = plan
            .params
            .with_strides(q.strides, k.strides, v.strides, o_strides);
        params.dump_count = dump.as_ref().map_or(0, |d| d.count);
        let mut index_guards = Vec::new();
        let grid = plan.launch_grid;
        if let Some((sp, layout)) = seqs {
            params.seqs = sp.seqs;
            params.kv_len = sp.kv_len as i32; // i32-checked by plan_sequences
            index_guards = bind_indices(stream, layout, &mut params.seqs);
            params.seqs.flat_block_m = plan.flat_block_m;
        }
        let mut feature_bufs = self.features.lock().map_err(|_| KernelError::Poisoned)?;
        let elem = crate::config::elem_of(T::DTYPE).into();
        // A paged cache arrives in boxes inside one page (kernels/fwd_hopper_kernel.cuh).
        let rows_kv = match seqs {
            Some((sp, _)) if sp.paged => {
                crate::catalog::paged_box_rows(plan.tile.block_n, sp.seqs.page_size as usize)
            }
            _ => plan.tile.block_n,
        };
        let geometry = |dims, strides, rows| tma_geometry(dims, strides, 2, TMA_BOX_COLS, rows);
        let tma_q = encode_tma(
            &geometry(q.dims, q.strides, plan.tile.block_m())?,
            ptrs.q,
            elem,
        )?;
        let tma_k = encode_tma(&geometry(k.dims, k.strides, rows_kv)?, ptrs.k, elem)?;
        let tma_v = encode_tma(&geometry(v.dims, v.strides, rows_kv)?, ptrs.v, elem)?;
        let feature_guard = bind_features(stream, &mut feature_bufs, problem, &mut params.feat)?;
        // Split-KV and the stream-K tail: the workspace the mma.sync kernel's split entries
        // use, grown on demand (locked only by launches that split or share a tail).
        let n_splits = plan.sched.splits.max(1) as usize;
        let tail = plan.sched.tail_items.max(0) as usize;
        let mut ws_guard = if n_splits > 1 || tail > 0 {
            Some(self.workspace.lock().map_err(|_| KernelError::Poisoned)?)
        } else {
            None
        };
        let mut ws_ptrs = Vec::new();
        if let Some(guard) = ws_guard.as_mut() {
            let items = plan.sched.items as usize;
            let (rows, tickets) = if tail > 0 {
                crate::hopper::tail_workspace(
                    grid.0 as usize,
                    tail,
                    plan.tile.block_m(),
                    plan.tile.consumers,
                )
            } else {
                (items * n_splits * plan.tile.block_m(), items)
            };
            ws_ptrs =
                bind_split_workspace(stream, guard, rows, plan.bucket, tickets, &mut plan.sched)?;
        }
        let launch_cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: (plan.tile.threads() as u32, 1, 1),
            shared_mem_bytes: plan.smem_bytes,
        };
        let mut builder = stream.launch_builder(&func);
        builder
            .arg(&ptrs.o)
            .arg(&ptrs.lse)
            .arg(&tma_q)
            .arg(&tma_k)
            .arg(&tma_v)
            .arg(&params)
            .arg(&plan.sched);
        if let Some(d) = dump {
            builder.arg(d.buffer).arg(d.tiles);
        }
        // SAFETY: the argument list matches ATTN_FWD_HOPPER_ENTRY (o, lse, three TMA
        // descriptors by value, FwdParams and HopperSched by value, and in debug cubins the
        // dump buffer and its tile list, which `forward_debug` sized for `dump_count` blocks
        // of the plan's key tiles of BM × BN, the block size the kernel indexes). The item walk covers
        // exactly the classic grid's blocks (`hopper_schedule`; the causal longest-first order
        // is a permutation of them, checked by hopper.rs's `item_order` test), and an entry that runs one
        // item per CTA gets one CTA per item. Every tensor was checked by
        // `bind_tensors` (dims, extent inside its view, 16-byte alignment of starts and
        // strides, O names no element twice and overlaps no input, LSE holds B·Hq·Sq floats)
        // and the descriptors were encoded from the same dims and strides, so TMA reads stay
        // inside Q, K and V (out-of-range boxes are zero-filled, not read). The kernel bounds
        // its O and LSE writes by q_len and head_dim. The guards keep cudarc's stream
        // ordering for the raw pointers until after the launch; sizes were checked against
        // 32-bit indexing and the grid limits in `plan_hopper`; the feature arrays are read
        // only by feature entries, which test them for null and index them by (b, h) within
        // the lengths `Features::validate` checked; in sequence launches (feature entries
        // only) the tensors were checked against the layout's dims (packed rows), the index
        // arrays' lengths against the batch, and the kernel clamps every device-resident
        // index into those sizes before it forms a TMA coordinate or an O/LSE address
        // (kernels/seqs.cuh); the dynamic shared memory was raised on the function and fits
        // the device. A split launch (grid.y = splits, sequence and feature entries only) has
        // a workspace of items · splits · BM rows of the bucket's width, (m, l) per row and
        // a zeroed ticket per item, which the kernel leaves zeroed. A walking launch with a
        // stream-K tail has (grid.x + tail items) · BM such rows, the slots CTA + tail item
        // that `walk_items` writes (distinct, below that count: hopper.rs's walk test), and a
        // zeroed ticket per (tail item, consumer warp), left zeroed too.
        unsafe { builder.launch(launch_cfg) }.map_err(driver("launching the Hopper kernel"))?;
        drop(ptrs);
        drop(feature_guard);
        drop(index_guards);
        drop(ws_ptrs);
        drop(ws_guard);
        Ok(LaunchInfo {
            kernel: name,
            arch,
            config: plan.tile.as_config(),
            grid,
            splits: n_splits,
            smem_bytes: plan.smem_bytes,
        })
    }
}

/// The Hopper forward's compile unit of (dtype, bucket).
pub(crate) fn hopper_unit(dtype: Dtype, bucket: usize) -> UnitKey {
    UnitKey {
        family: crate::catalog::Family::FwdHopper,
        arch: Arch::Sm90a,
        elem: crate::config::elem_of(dtype),
        head_dim: bucket,
    }
}

/// What the driver reports for a loaded kernel.
pub(crate) fn function_resources(f: &CudaFunction) -> Result<FunctionResources, KernelError> {
    Ok(FunctionResources {
        registers: f.num_regs().map_err(driver("reading num_regs"))?,
        static_smem: f
            .shared_size_bytes()
            .map_err(driver("reading shared_size_bytes"))?,
    })
}

pub(crate) fn check_buffer(
    tensor: &'static str,
    expected: usize,
    got: usize,
) -> Result<(), KernelError> {
    if expected == got {
        Ok(())
    } else {
        Err(KernelError::BufferLength {
            tensor,
            expected,
            got,
        })
    }
}

/// Debug-kernel extras: a dump buffer and its (b, h, q_tile) list, or a planted-bug mode.
#[derive(Default)]
pub(crate) struct LaunchExtras<'a> {
    pub mode: Option<KernelMode>,
    pub dump: Option<DumpArgs<'a>>,
    /// A varlen / KV-cache / paged launch ([`FlashAttention::forward_sequences`]).
    pub seqs: Option<Sequences<'a>>,
    /// The scales of an E4M3 KV cache ([`FlashAttention::forward_kv_fp8`]).
    pub kv_scales: Option<crate::kv_fp8::KvScales<'a>>,
}

pub(crate) struct DumpArgs<'a> {
    pub buffer: &'a mut CudaSlice<f32>,
    pub tiles: &'a CudaSlice<i32>,
    pub count: i32,
}

/// A validated launch: geometry and scalars. Pure, so the validation is testable without a
/// device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LaunchPlan {
    pub config: KernelConfig,
    pub grid: (u32, u32, u32),
    pub smem_bytes: u32,
    pub params: FwdParams,
}

/// Which general entry a launch runs ([`FwdMode::general`]), for [`plan_launch_entry`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GeneralEntry {
    /// The launch runs a general entry (features, a sequence layout or an E4M3 KV cache).
    pub general: bool,
    /// That entry has a split-KV twin ([`FwdMode::general_split`]) and the problem may split.
    pub split: bool,
    /// The E4M3 KV cache's entry (its shared memory differs).
    pub kv_fp8: bool,
}

/// [`plan_launch_entry`] for a launch whose entry follows from the problem alone (the unit
/// tests' shorthand).
#[cfg(test)]
pub(crate) fn plan_launch(
    problem: &Problem,
    config: KernelConfig,
    splits: Option<usize>,
    sm_count: usize,
) -> Result<LaunchPlan, KernelError> {
    // As the launcher: feature entries have split twins for unmasked launches.
    let features = !problem.features().is_empty();
    let general = GeneralEntry {
        general: features,
        split: features && problem.causal() == Causal::None,
        ..GeneralEntry::default()
    };
    plan_launch_entry(problem, config, splits, sm_count, general)
}

pub(crate) fn plan_launch_entry(
    problem: &Problem,
    config: KernelConfig,
    splits: Option<usize>,
    sm_count: usize,
    entry: GeneralEntry,
) -> Result<LaunchPlan, KernelError> {
    let s = problem.shape();
    let d = s.head_dim();
    check_sizes(problem)?;
    config.check_head_dim(d)?;
    let features = !problem.features().is_empty();
    if features {
        let want = feature_config(d)?;
        if config != want {
            return Err(KernelError::UnsupportedFeature(format!(
                "{} with config {} (the mma.sync kernel runs features in config {} only)",
                feature_names(problem),
                config.name(),
                want.name()
            )));
        }
    }
    let q_tiles = s.q_len().div_ceil(config.block_m);
    let key_tiles = s.kv_len().div_ceil(config.block_n);
    let n_splits = match splits {
        // The general entries split only where they have a split twin (unmasked).
        None if entry.general && entry.split => crate::config::one_wave_splits(
            q_tiles * s.batch() * s.q_heads(),
            key_tiles,
            sm_count,
        ),
        None if entry.general => 1,
        None => choose_splits(
            &config,
            d,
            q_tiles * s.batch() * s.q_heads(),
            key_tiles,
            sm_count,
        ),
        Some(0) => {
            return Err(AttnError::InvalidArgument("splits must be at least 1".into()).into())
        }
        Some(1) => 1,
        Some(n) if entry.general && entry.split => n.min(MAX_SPLITS),
        Some(n) if entry.general => {
            return Err(KernelError::UnsupportedFeature(format!(
                "{} with split-KV ({n} splits asked; the general entries split only unmasked launches: use 1 or the default)",
                feature_names(problem)
            )))
        }
        Some(n) if !has_split(&config, d) => {
            return Err(AttnError::InvalidArgument(format!(
                "config {} has no split-KV kernels ({n} splits asked)",
                config.name()
            ))
            .into())
        }
        Some(n) => n.min(MAX_SPLITS),
    };
    if q_tiles
        .checked_mul(n_splits)
        .is_none_or(|x| x > i32::MAX as usize)
    {
        return Err(KernelError::IndexOverflow("q tiles · splits (grid.x)"));
    }
    Ok(LaunchPlan {
        config,
        grid: (
            (q_tiles * n_splits) as u32,
            s.q_heads() as u32,
            s.batch() as u32,
        ),
        smem_bytes: if entry.kv_fp8 {
            crate::catalog::fwd_kv_fp8_smem_bytes(&config, crate::config::bucket_for(d)?)
        } else {
            config.smem_bytes(d)
        } as u32,
        params: fwd_params(problem, n_splits as i32),
    })
}

/// `problem` without its causal mask when that mask hides nothing: one query row aligned
/// bottom-right sees every key (the window is aligned bottom-right either way). `None` when
/// the problem stays as it is.
pub(crate) fn single_row_unmasked(problem: &Problem) -> Option<Problem> {
    if problem.causal() != Causal::BottomRight || problem.shape().q_len() != 1 {
        return None;
    }
    Problem::new(*problem.shape(), Causal::None)
        .with_scale(problem.scale())
        .ok()?
        .with_features(problem.features().clone())
        .ok()
}

/// The checks every forward launcher makes first: valid features (attn-ref's
/// [`attn_ref::Features::validate`]), a supported head dim, and sizes inside 32-bit indexing
/// and the grid limits. The FP8 launcher refuses features itself ([`check_no_features`]).
pub(crate) fn check_sizes(problem: &Problem) -> Result<(), KernelError> {
    let s = problem.shape();
    problem.features().validate(s)?;
    crate::config::bucket_for(s.head_dim())?;
    let i32_max = i32::MAX as usize;
    let overflow = |what: &'static str, v: Option<usize>, limit: usize| match v {
        Some(x) if x <= limit => Ok(()),
        _ => Err(KernelError::IndexOverflow(what)),
    };
    overflow(
        "batch · q_heads",
        s.batch().checked_mul(s.q_heads()),
        i32_max,
    )?;
    overflow("kv_len + q_len", s.kv_len().checked_add(s.q_len()), i32_max)?;
    overflow("q_heads (grid.y)", Some(s.q_heads()), 65_535)?;
    overflow("batch (grid.z)", Some(s.batch()), 65_535)?;
    Ok(())
}

/// Refuses problems carrying features a kernel does not implement (the FP8 forward's; a
/// wrong result would be worse than an error).
pub(crate) fn check_no_features(problem: &Problem) -> Result<(), KernelError> {
    if problem.features().is_empty() {
        Ok(())
    } else {
        Err(KernelError::UnsupportedFeature(feature_names(problem)))
    }
}

/// The problem's features in words (`sliding windows, softcap`).
pub(crate) fn feature_names(problem: &Problem) -> String {
    let f = problem.features();
    let mut names = Vec::new();
    if f.window.is_some() {
        names.push("sliding windows");
    }
    if f.softcap.is_some() {
        names.push("softcap");
    }
    if f.alibi.is_some() {
        names.push("ALiBi");
    }
    if f.sinks.is_some() {
        names.push("attention sinks");
    }
    names.join(", ")
}

/// The mma.sync config with the features' entry points for `head_dim`
/// ([`crate::catalog::fwd_feature_tile`]).
pub(crate) fn feature_config(head_dim: usize) -> Result<KernelConfig, KernelError> {
    let bucket = crate::config::bucket_for(head_dim)?;
    crate::catalog::fwd_feature_tile(bucket)
        .ok_or_else(|| KernelError::UnsupportedFeature(format!("features at head_dim {head_dim}")))
}

/// The scalar part of the features (`FwdParams::feat` without its two pointers, which the
/// launcher sets once the arrays are on the device).
pub(crate) fn fwd_features(problem: &Problem) -> FwdFeatures {
    let s = problem.shape();
    let f = problem.features();
    // A bound past Sq + Sk masks nothing; clamping keeps it in i32 (sizes were checked).
    let reach = (s.q_len() + s.kv_len()) as i64;
    let bound = |x: i64| if x < 0 { -1 } else { x.min(reach) as i32 };
    let (window_left, window_right) = f.window.map_or((-1, -1), |(l, r)| (bound(l), bound(r)));
    FwdFeatures {
        alibi: 0,
        sinks: 0,
        window_left,
        window_right,
        alibi_batch_stride: match f.alibi {
            Some(attn_ref::Alibi::PerBatchHead(_)) => s.q_heads() as i32,
            _ => 0,
        },
        softcap_in: f.softcap.map_or(0.0, |c| (problem.scale() / c) as f32),
        ..FwdFeatures::OFF
    }
}

/// The softmax scale the kernels run with: the problem's, or the softcap c, into which
/// FlashAttention-2 folds the scale (raw scores become `tanh(s · scale/c)`).
pub(crate) fn softmax_scale(problem: &Problem) -> f64 {
    problem.features().softcap.unwrap_or(problem.scale())
}

/// The features' per-head arrays as the kernels read them, packed into one buffer: ALiBi
/// slopes divided by the softmax scale (raw-score units, rounded once from f64 as attn-ref's
/// emulation does) at `alibi`, sink logits times log2(e) at `sinks`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FeatureArrays {
    pub values: Vec<f32>,
    pub alibi: Option<usize>,
    pub sinks: Option<usize>,
}

pub(crate) fn feature_arrays(problem: &Problem) -> Option<FeatureArrays> {
    let f = problem.features();
    if f.alibi.is_none() && f.sinks.is_none() {
        return None;
    }
    let scale = softmax_scale(problem);
    let mut values = Vec::new();
    let alibi = f.alibi.as_ref().map(|a| {
        values.extend(a.slopes().iter().map(|&x| (f64::from(x) / scale) as f32));
        0
    });
    let sinks = f.sinks.as_ref().map(|sinks| {
        let at = values.len();
        values.extend(
            sinks
                .iter()
                .map(|&x| (f64::from(x) * std::f64::consts::LOG2_E) as f32),
        );
        at
    });
    Some(FeatureArrays {
        values,
        alibi,
        sinks,
    })
}

/// Device copies of the features' arrays, owned by a launcher and keyed by content: the first
/// launch with given slopes/sinks uploads them (on the launcher's stream, so the kernel sees
/// them), later launches with the same values reuse the copy — no allocation, no copy, so a
/// CUDA graph can capture them once warmed up. At most [`MAX_FEATURE_BUFFERS`] distinct
/// arrays are kept (a model's layers each have their own sinks); beyond, the cache restarts.
#[derive(Default)]
pub(crate) struct FeatureBuffers {
    by_content: HashMap<Vec<u32>, CudaSlice<f32>>,
}

/// Distinct feature arrays one launcher keeps on the device.
pub(crate) const MAX_FEATURE_BUFFERS: usize = 256;

impl FeatureBuffers {
    /// The device copy of `values`, uploaded on `stream` if new.
    fn get(
        &mut self,
        stream: &Arc<CudaStream>,
        values: &[f32],
    ) -> Result<&CudaSlice<f32>, KernelError> {
        let key: Vec<u32> = values.iter().map(|x| x.to_bits()).collect();
        if !self.by_content.contains_key(&key) {
            if self.by_content.len() >= MAX_FEATURE_BUFFERS {
                self.by_content.clear();
            }
            let slice = stream
                .clone_htod(values)
                .map_err(driver("uploading ALiBi slopes / sinks"))?;
            self.by_content.insert(key.clone(), slice);
        }
        Ok(&self.by_content[&key])
    }
}

/// Uploads (once) the problem's feature arrays and points `feat` at them. The guard keeps
/// cudarc's stream ordering for the buffer until it is dropped after the launch.
pub(crate) fn bind_features<'a>(
    stream: &'a Arc<CudaStream>,
    buffers: &'a mut FeatureBuffers,
    problem: &Problem,
    feat: &mut FwdFeatures,
) -> Result<Option<SyncOnDrop<'a>>, KernelError> {
    let Some(arrays) = feature_arrays(problem) else {
        return Ok(None);
    };
    let slice = buffers.get(stream, &arrays.values)?;
    let (base, guard) = slice.device_ptr(stream);
    let at = |i: usize| base + (i * std::mem::size_of::<f32>()) as u64;
    feat.alibi = arrays.alibi.map_or(0, at);
    feat.sinks = arrays.sinks.map_or(0, at);
    Ok(Some(guard))
}

#[cfg(test)]
/// Host mirror of score_mod.cuh's `row_key_range`: the keys `[lo, hi)` row `row` sees under
/// the causal mask and the window of `p` (empty when `hi <= lo`).
pub(crate) fn row_key_range(p: &FwdParams, causal: bool, row: i64) -> (i64, i64) {
    let kv = i64::from(p.kv_len);
    let mut hi = if causal {
        (row + 1 + i64::from(p.diag_offset)).clamp(0, kv)
    } else {
        kv
    };
    let mut lo = 0;
    let diag = row + kv - i64::from(p.q_len);
    if p.feat.window_left >= 0 {
        lo = (diag - i64::from(p.feat.window_left)).clamp(0, kv);
    }
    if p.feat.window_right >= 0 {
        hi = (diag + i64::from(p.feat.window_right) + 1).clamp(0, hi);
    }
    (lo, hi)
}

#[cfg(test)]
/// Host mirror of score_mod.cuh's `key_tile_range`: for the query block starting at `m0`
/// (`bm` rows, tiles of `bn` keys), the key tiles `[t_begin, t_begin + n_tiles)` it loads and
/// the keys `[all_lo, all_hi)` every row sees (tiles inside need no mask).
pub(crate) fn key_tile_range(
    p: &FwdParams,
    causal: bool,
    m0: i64,
    bm: i64,
    bn: i64,
) -> (i64, i64, i64, i64) {
    let last_row = (m0 + bm - 1).min(i64::from(p.q_len) - 1);
    let first = row_key_range(p, causal, m0);
    let last = row_key_range(p, causal, last_row);
    let t_begin = first.0 / bn;
    let n_tiles = if last.1 > first.0 {
        (last.1 + bn - 1) / bn - t_begin
    } else {
        0
    };
    (t_begin, n_tiles, last.0, first.1)
}

/// The scalars of one forward (shared by the f16/bf16 and FP8 launchers); sizes were checked
/// against i32 by the caller.
pub(crate) fn fwd_params(problem: &Problem, n_splits: i32) -> FwdParams {
    let s = problem.shape();
    let diag_offset = match problem.causal() {
        Causal::None | Causal::TopLeft => 0i64,
        Causal::BottomRight => s.kv_len() as i64 - s.q_len() as i64,
    };
    let scale = problem.scale();
    FwdParams {
        feat: fwd_features(problem),
        seqs: FwdSeqs::default(),
        batch: s.batch() as i32,
        q_heads: s.q_heads() as i32,
        kv_heads: s.kv_heads() as i32,
        q_len: s.q_len() as i32,
        kv_len: s.kv_len() as i32,
        group: s.group_size() as i32,
        diag_offset: diag_offset as i32,
        dump_count: 0,
        scale_log2: (softmax_scale(problem) * std::f64::consts::LOG2_E) as f32,
        scale: scale as f32,
        n_splits,
        head_dim: s.head_dim() as i32,
        // Contiguous [B, H, S, D] until the launcher sets the tensors' own strides.
        q_stride: [
            (s.q_heads() * s.q_len() * s.head_dim()) as i64,
            (s.q_len() * s.head_dim()) as i64,
            s.head_dim() as i64,
        ],
        k_stride: [
            (s.kv_heads() * s.kv_len() * s.head_dim()) as i64,
            (s.kv_len() * s.head_dim()) as i64,
            s.head_dim() as i64,
        ],
        v_stride: [
            (s.kv_heads() * s.kv_len() * s.head_dim()) as i64,
            (s.kv_len() * s.head_dim()) as i64,
            s.head_dim() as i64,
        ],
        o_stride: [
            (s.q_heads() * s.q_len() * s.head_dim()) as i64,
            (s.q_len() * s.head_dim()) as i64,
            s.head_dim() as i64,
        ],
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn gqa_decode_packs_heads_into_rows_only_where_it_is_the_same_problem() {
        use attn_ref::{AttnShape, Features};
        let shape = AttnShape::new(2, 32, 8, 1, 4096, 128).unwrap();
        let p = Problem::new(shape, Causal::BottomRight)
            .with_scale(0.1)
            .unwrap()
            .with_softcap(30.0)
            .unwrap();
        let packed = super::gqa_packed_decode(&p).unwrap();
        let s = packed.shape();
        assert_eq!(
            (s.batch(), s.q_heads(), s.kv_heads(), s.q_len(), s.kv_len()),
            (2, 8, 8, 4, 4096)
        );
        assert_eq!(packed.causal(), Causal::None);
        assert_eq!(packed.scale(), 0.1);
        assert_eq!(packed.features().softcap, Some(30.0));
        // Not the same problem, or nothing to gain.
        let no = |p: Problem| super::gqa_packed_decode(&p).is_none();
        assert!(no(Problem::new(shape, Causal::TopLeft)));
        assert!(no(Problem::new(
            AttnShape::new(2, 32, 8, 2, 4096, 128).unwrap(),
            Causal::None
        )));
        assert!(no(Problem::new(
            AttnShape::new(2, 8, 8, 1, 4096, 128).unwrap(),
            Causal::None
        )));
        // Sinks do not carry over (the launcher binds the original's for the decode kernel).
        let sinks = super::gqa_packed_decode(
            &Problem::new(shape, Causal::None)
                .with_sinks(vec![0.0; 32])
                .unwrap(),
        )
        .unwrap();
        assert_eq!(sinks.shape().q_len(), 4);
        assert!(sinks.features().sinks.is_none());
        // Nor does a window; the launch takes the original's, clamped as its own would be.
        let windowed = Problem::new(shape, Causal::BottomRight)
            .with_window(100, 0)
            .unwrap();
        let packed = super::gqa_packed_decode(&windowed).unwrap();
        assert!(packed.features().window.is_none());
        let mut feat = super::fwd_features(&packed);
        assert_eq!((feat.window_left, feat.window_right), (-1, -1));
        super::packed_decode_features(&windowed, &mut feat);
        assert_eq!((feat.window_left, feat.window_right), (100, 0));
        // Its split count sizes for the window's keys, not the cache's.
        assert_eq!(super::decode_keys_bound(&windowed, 4096), 101);
        assert_eq!(super::decode_keys_bound(&windowed, 50), 50);
        let right_only = Problem::new(shape, Causal::None)
            .with_window(-1, 7)
            .unwrap();
        assert_eq!(super::decode_keys_bound(&right_only, 4096), 4096);
        // Nor do ALiBi's slopes; the launch takes the original's batch stride ([B, Hq] slopes).
        let alibi = Problem::new(shape, Causal::None)
            .with_features(Features {
                alibi: Some(attn_ref::Alibi::PerBatchHead(vec![0.5; 2 * 32])),
                ..Features::default()
            })
            .unwrap();
        let packed = super::gqa_packed_decode(&alibi).unwrap();
        assert!(packed.features().alibi.is_none());
        let mut feat = super::fwd_features(&packed);
        assert_eq!(feat.alibi_batch_stride, 0);
        super::packed_decode_features(&alibi, &mut feat);
        assert_eq!(feat.alibi_batch_stride, 32);
        // Views: query head h·G + g of batch b is row g of packed head h.
        let bshd = crate::Layout::Bshd.strides([2, 32, 1, 128]);
        let (dims, st) = super::pack_query_heads([2, 32, 1, 128], bshd, 4);
        assert_eq!(dims, [2, 8, 4, 128]);
        for (b, h, g) in [(0, 0, 0), (1, 7, 3), (1, 2, 1)] {
            let packed_at = b * st.batch + h * st.head + g * st.row;
            let original_at = b * bshd.batch + (h * 4 + g) * bshd.head;
            assert_eq!(packed_at, original_at);
        }
    }

    use super::*;
    use attn_ref::AttnShape;

    fn problem(sq: usize, sk: usize, d: usize, causal: Causal) -> Problem {
        Problem::new(AttnShape::new(2, 8, 2, sq, sk, d).unwrap(), causal)
    }

    #[test]
    fn general_entries_split_unmasked_launches_sinks_included() {
        let cfg = crate::config::cfg(64, 64, 4, 2);
        // Decode: 2 · 8 = 16 CTAs on 132 SMs, 8192 keys = 128 tiles; a sink per head joins
        // once, in the combine, so the launch splits as without it.
        let p = problem(1, 8192, 128, Causal::None)
            .with_window(500, 0)
            .unwrap()
            .with_sinks(vec![0.5; 8])
            .unwrap();
        let split = GeneralEntry {
            general: true,
            split: true,
            kv_fp8: false,
        };
        let plan = plan_launch_entry(&p, cfg, None, 132, split).unwrap();
        assert_eq!(plan.params.n_splits, 16); // min(264 / 16 → 17, 128 / 8 = 16)
        assert_eq!(plan.grid, (16, 8, 2));
        // No split twin (a causal mask): one split, and asking for more is refused.
        let single = GeneralEntry {
            split: false,
            ..split
        };
        assert_eq!(
            plan_launch_entry(&p, cfg, None, 132, single)
                .unwrap()
                .params
                .n_splits,
            1
        );
        assert!(matches!(
            plan_launch_entry(&p, cfg, Some(4), 132, single),
            Err(KernelError::UnsupportedFeature(_))
        ));
        assert_eq!(
            plan_launch_entry(&p, cfg, Some(4), 132, split)
                .unwrap()
                .params
                .n_splits,
            4
        );
        // A full grid does not split.
        let big = problem(4096, 8192, 128, Causal::None);
        let entry = GeneralEntry {
            general: true,
            split: true,
            kv_fp8: false,
        };
        assert_eq!(
            plan_launch_entry(&big, cfg, None, 132, entry)
                .unwrap()
                .params
                .n_splits,
            1
        );
    }

    #[test]
    fn e4m3_cache_entries_take_their_own_shared_memory() {
        let cfg = crate::config::cfg(64, 64, 4, 2);
        let p = problem(1, 1000, 128, Causal::None);
        let entry = GeneralEntry {
            general: true,
            split: true,
            kv_fp8: true,
        };
        let plan = plan_launch_entry(&p, cfg, Some(1), 132, entry).unwrap();
        // Q 64 rows + one K and one V tile of 64 rows at pitch 128 (f16), + 3 stages of
        // 64 × 128 codes for K and V (the ring's depth; 2 where 3 would not fit 99 KiB).
        assert_eq!(crate::catalog::kv_fp8_stages(&cfg, 128), 3);
        assert_eq!(crate::catalog::kv_fp8_stages(&cfg, 64), 3);
        assert_eq!(
            plan.smem_bytes as usize,
            (64 + 128) * 128 * 2 + 2 * 3 * 64 * 128
        );
    }

    #[test]
    fn a_single_bottom_right_row_runs_unmasked() {
        let p = problem(1, 300, 64, Causal::BottomRight)
            .with_window(40, 0)
            .unwrap();
        let u = single_row_unmasked(&p).expect("one bottom-right row");
        assert_eq!(u.causal(), Causal::None);
        assert_eq!(u.features(), p.features());
        assert_eq!(u.scale(), p.scale());
        // Every key stays visible to the row, as in the masked problem.
        for j in 0..300 {
            assert_eq!(
                Causal::BottomRight.is_visible(0, j, 1, 300),
                Causal::None.is_visible(0, j, 1, 300)
            );
        }
        assert!(single_row_unmasked(&problem(1, 300, 64, Causal::TopLeft)).is_none());
        assert!(single_row_unmasked(&problem(2, 300, 64, Causal::BottomRight)).is_none());
    }

    #[test]
    fn plan_geometry_and_scalars() {
        let cfg = crate::config::cfg(64, 64, 4, 2);
        let p = problem(100, 300, 64, Causal::BottomRight);
        let plan = plan_launch(&p, cfg, Some(1), 132).unwrap();
        assert_eq!(plan.grid, (2, 8, 2));
        assert_eq!(plan.params.group, 4);
        assert_eq!(plan.params.diag_offset, 200);
        assert_eq!(plan.smem_bytes as usize, (64 * 64 + 2 * 2 * 64 * 64) * 2);
        let expect = (1.0 / 8.0f64 * std::f64::consts::LOG2_E) as f32;
        assert_eq!(plan.params.scale_log2, expect);
        let p = problem(300, 100, 64, Causal::BottomRight);
        assert_eq!(
            plan_launch(&p, cfg, Some(1), 132)
                .unwrap()
                .params
                .diag_offset,
            -200
        );
        let p = problem(300, 100, 64, Causal::TopLeft);
        assert_eq!(
            plan_launch(&p, cfg, Some(1), 132)
                .unwrap()
                .params
                .diag_offset,
            0
        );
    }

    #[test]
    fn split_plans() {
        let cfg = crate::config::cfg(64, 64, 4, 2);
        let p = Problem::new(
            AttnShape::self_attention(1, 8, 512, 64).unwrap(),
            Causal::None,
        );
        assert_eq!(plan_launch(&p, cfg, None, 132).unwrap().params.n_splits, 1);
        let plan = plan_launch(&p, cfg, Some(4), 132).unwrap();
        assert_eq!(plan.params.n_splits, 4);
        assert_eq!(plan.grid, (8 * 4, 8, 1));
        assert_eq!(plan_launch(&p, cfg, Some(1), 132).unwrap().grid, (8, 8, 1));
        assert!(plan_launch(&p, cfg, Some(0), 132).is_err());
        assert!(plan_launch(&p, crate::config::cfg(128, 64, 8, 2), Some(2), 132).is_err());
    }

    #[test]
    fn unsupported_head_dims_are_typed_errors() {
        for d in [1, 4, 59, 111, 264] {
            let err = plan_launch(
                &problem(8, 8, d, Causal::None),
                crate::config::cfg(32, 64, 2, 2),
                None,
                132,
            )
            .unwrap_err();
            assert!(
                matches!(err, KernelError::UnsupportedHeadDim { head_dim, .. } if head_dim == d),
                "{err}"
            );
        }
        // Every D % 8 == 0 up to 256 plans, in its bucket's configs.
        for d in (8..=256).step_by(8) {
            let plan = plan_launch(
                &problem(8, 8, d, Causal::None),
                crate::config::cfg(64, 64, 4, 2),
                None,
                132,
            )
            .unwrap();
            assert_eq!(plan.params.head_dim, d as i32);
        }
    }

    #[test]
    fn features_run_in_the_feature_config_and_fp8_refuses_them() {
        let feat = crate::config::cfg(64, 64, 4, 2);
        let p = problem(8, 8, 64, Causal::None).with_softcap(30.0).unwrap();
        let plan = plan_launch(&p, feat, None, 132).unwrap();
        assert_eq!(plan.params.n_splits, 1);
        // Another config has no feature entries: a typed error naming the one that has.
        let e = plan_launch(&p, crate::config::cfg(128, 64, 8, 2), None, 132).unwrap_err();
        assert!(
            matches!(&e, KernelError::UnsupportedFeature(f) if f.contains("softcap") && f.contains("64_64_4_s2")),
            "{e}"
        );
        // A decode shape splits, with sinks too (they join once, in the combine); under a
        // causal mask a feature launch has no split twin, and asking for splits is refused.
        let decode = Problem::new(
            AttnShape::new(1, 32, 8, 1, 8192, 128).unwrap(),
            Causal::None,
        );
        assert!(
            plan_launch(&decode, feat, None, 132)
                .unwrap()
                .params
                .n_splits
                > 1
        );
        let decode = decode.with_sinks(vec![0.5; 32]).unwrap();
        assert!(
            plan_launch(&decode, feat, None, 132)
                .unwrap()
                .params
                .n_splits
                > 1
        );
        assert_eq!(
            plan_launch(&decode, feat, Some(4), 132)
                .unwrap()
                .params
                .n_splits,
            4
        );
        let masked = Problem::new(*decode.shape(), Causal::BottomRight)
            .with_sinks(vec![0.5; 32])
            .unwrap();
        assert_eq!(
            plan_launch(&masked, feat, None, 132)
                .unwrap()
                .params
                .n_splits,
            1
        );
        assert!(matches!(
            plan_launch(&masked, feat, Some(4), 132),
            Err(KernelError::UnsupportedFeature(_))
        ));
        assert!(plan_launch(&masked, feat, Some(1), 132).is_ok());
        // D > 128 runs features in 64×32 tiles (they fit sm_89's 99 KiB).
        assert_eq!(
            feature_config(200).unwrap(),
            crate::config::cfg(64, 32, 4, 2)
        );
        assert_eq!(feature_config(40).unwrap(), feat);
        let p = problem(8, 8, 64, Causal::None).with_window(4, 0).unwrap();
        assert!(plan_launch(&p, feat, None, 132).is_ok());
        let p = problem(8, 8, 64, Causal::None)
            .with_sinks(vec![0.5; 8])
            .unwrap();
        let e =
            crate::fp8::plan_fp8(&p, crate::FP8_CONFIGS[0], crate::Fp8Variant::Fp8).unwrap_err();
        assert!(
            matches!(&e, KernelError::UnsupportedFeature(f) if f == "attention sinks"),
            "{e}"
        );
    }

    #[test]
    fn feature_params_are_packed_as_the_kernels_read_them() {
        let base = problem(100, 300, 64, Causal::BottomRight);
        let plain = plan_launch(&base, crate::config::cfg(64, 64, 4, 2), Some(1), 132).unwrap();
        assert_eq!(plain.params.feat, FwdFeatures::OFF);
        assert!(feature_arrays(&base).is_none());
        // Softcap: the scale folds into tanh and the softmax runs with scale c.
        let p = base.with_softcap(30.0).unwrap();
        let f = fwd_params(&p, 1);
        assert_eq!(f.feat.softcap_in, (0.125 / 30.0) as f32);
        assert_eq!(f.scale_log2, (30.0 * std::f64::consts::LOG2_E) as f32);
        assert_eq!(f.scale, 0.125);
        // Windows: -1 stays unbounded, bounds past Sq + Sk are clamped (they mask nothing).
        let p = base.with_window(-1, 1 << 40).unwrap();
        let f = fwd_params(&p, 1).feat;
        assert_eq!((f.window_left, f.window_right), (-1, 400));
        let p = base.with_window(7, 0).unwrap();
        let f = fwd_params(&p, 1).feat;
        assert_eq!((f.window_left, f.window_right), (7, 0));
        // ALiBi [B, Hq] and sinks in one buffer: slopes / softmax scale, sinks · log2(e).
        let slopes: Vec<f32> = (0..16).map(|i| 0.5f32.powi(i % 8 + 1)).collect();
        let p = base
            .with_softcap(20.0)
            .unwrap()
            .with_alibi(attn_ref::Alibi::PerBatchHead(slopes.clone()))
            .unwrap()
            .with_sinks(vec![f32::NEG_INFINITY, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
            .unwrap();
        let f = fwd_params(&p, 1).feat;
        assert_eq!(f.alibi_batch_stride, 8);
        let a = feature_arrays(&p).unwrap();
        assert_eq!((a.alibi, a.sinks), (Some(0), Some(16)));
        assert_eq!(a.values.len(), 24);
        assert_eq!(a.values[3], (f64::from(slopes[3]) / 20.0) as f32);
        assert_eq!(a.values[16], f32::NEG_INFINITY);
        assert_eq!(a.values[18], std::f64::consts::LOG2_E as f32);
        let p = base
            .with_alibi(attn_ref::Alibi::PerHead(vec![0.25; 8]))
            .unwrap();
        assert_eq!(fwd_params(&p, 1).feat.alibi_batch_stride, 0);
        let a = feature_arrays(&p).unwrap();
        assert_eq!((a.alibi, a.sinks), (Some(0), None));
        assert_eq!(a.values, vec![2.0; 8]); // 0.25 / (1/8)
    }

    /// The tile range and the no-mask test of score_mod.cuh (mirrored on the host) against
    /// attn-ref's `visible_range`, over windows, causal alignments and lengths: every visible
    /// key of every row lies in the loaded tiles, the first and last loaded tiles hold a
    /// visible key, and a tile inside [all_lo, all_hi) is visible to every row.
    #[test]
    fn window_tile_skipping_matches_the_reference() {
        let windows = [
            None,
            Some((-1, -1)),
            Some((0, 0)),
            Some((3, 0)),
            Some((16, -1)),
            Some((-1, 5)),
            Some((70, 10)),
            Some((200, 200)),
            Some((1 << 40, 1 << 40)),
        ];
        let mut checked = 0;
        for (sq, sk) in [
            (1, 300),
            (100, 300),
            (300, 100),
            (129, 129),
            (64, 1),
            (257, 77),
        ] {
            for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
                for w in windows {
                    let mut p = Problem::new(AttnShape::new(1, 1, 1, sq, sk, 64).unwrap(), causal);
                    if let Some((l, r)) = w {
                        p = p.with_window(l, r).unwrap();
                    }
                    let params = fwd_params(&p, 1);
                    let c = causal != Causal::None;
                    for i in 0..sq {
                        let (lo, hi) = row_key_range(&params, c, i as i64);
                        let want = p.visible_range(i);
                        let got = if hi > lo {
                            lo as usize..hi as usize
                        } else {
                            0..0
                        };
                        assert_eq!(got, want, "{sq}x{sk} {causal} {w:?} row {i}");
                    }
                    for (bm, bn) in [(64, 64), (128, 128), (64, 32), (128, 80)] {
                        for m0 in (0..sq).step_by(bm) {
                            let (t0, n, all_lo, all_hi) =
                                key_tile_range(&params, c, m0 as i64, bm as i64, bn as i64);
                            let rows = m0..(m0 + bm).min(sq);
                            let keys = (t0 * bn as i64) as usize..((t0 + n) * bn as i64) as usize;
                            let mut first_used = n == 0;
                            let mut last_used = n == 0;
                            for i in rows.clone() {
                                let r = p.visible_range(i);
                                if r.is_empty() {
                                    continue;
                                }
                                assert!(
                                    keys.start <= r.start && r.end <= keys.end,
                                    "{sq}x{sk} {causal} {w:?} block {m0}: row {i} {r:?} outside {keys:?}"
                                );
                                let first = keys.start..keys.start + bn;
                                let last = keys.end - bn..keys.end;
                                first_used |= r.start < first.end && first.start < r.end;
                                last_used |= r.start < last.end && last.start < r.end;
                            }
                            assert!(
                                first_used && last_used,
                                "{sq}x{sk} {causal} {w:?} block {m0}: a wasted tile"
                            );
                            for t in t0..t0 + n {
                                let key0 = t * bn as i64;
                                if key0 >= all_lo && key0 + bn as i64 <= all_hi {
                                    for i in rows.clone() {
                                        let r = p.visible_range(i);
                                        assert!(
                                            r.start as i64 <= key0 && key0 + bn as i64 <= r.end as i64,
                                            "{sq}x{sk} {causal} {w:?}: tile {t} skips the mask of row {i}"
                                        );
                                    }
                                }
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 1000, "{checked}");
        // A window skips tiles: 4096 keys, window 256 left: a 128-row block loads 3 tiles
        // of 128 (not 32), and the blocks' ranges move with the diagonal.
        let p = Problem::new(
            AttnShape::self_attention(1, 1, 4096, 64).unwrap(),
            Causal::BottomRight,
        )
        .with_window(256, 0)
        .unwrap();
        let params = fwd_params(&p, 1);
        assert_eq!(key_tile_range(&params, true, 2048, 128, 128).0, 14);
        assert_eq!(key_tile_range(&params, true, 2048, 128, 128).1, 3);
    }

    #[test]
    fn index_overflow_is_rejected_before_launch() {
        let p = Problem::new(
            AttnShape::new(1, 1, 1, 2_000_000_000, 200_000_000, 128).unwrap(),
            Causal::None,
        );
        let err = plan_launch(&p, crate::config::cfg(32, 64, 2, 2), None, 132).unwrap_err();
        assert!(matches!(err, KernelError::IndexOverflow(_)), "{err}");
        let p = Problem::new(
            AttnShape::new(1, 70_000, 1, 8, 8, 64).unwrap(),
            Causal::None,
        );
        assert!(matches!(
            plan_launch(&p, crate::config::cfg(32, 64, 2, 2), None, 132),
            Err(KernelError::IndexOverflow(_))
        ));
    }

    #[test]
    fn tensors_are_checked_against_the_problem_and_each_other() {
        use crate::tensor::Layout;
        let p = problem(100, 300, 64, Causal::None);
        let s = p.shape();
        let (qd, kd) = (dims_q(s), dims_kv(s));
        let (qn, kn) = (s.q_elems(), s.kv_elems());
        let t = |dims: [usize; 4], layout: Layout, len: usize, addr: u64| {
            (dims, layout.strides(dims), len, addr)
        };
        // Separate buffers, both layouts: fine.
        for layout in [Layout::Bhsd, Layout::Bshd] {
            let ok = check_tensors(
                &Expected::dense(s),
                [2, 2, 2],
                t(qd, layout, qn, 0x10000),
                t(kd, layout, kn, 0x100000),
                t(kd, layout, kn, 0x200000),
                t(qd, layout, qn, 0x300000),
                Some((s.lse_elems(), 0x400000)),
            );
            assert!(ok.is_ok(), "{layout}: {ok:?}");
        }
        // O over Q: an overlap error naming both.
        let e = check_tensors(
            &Expected::dense(s),
            [2, 2, 2],
            t(qd, Layout::Bhsd, qn, 0x10000),
            t(kd, Layout::Bhsd, kn, 0x100000),
            t(kd, Layout::Bhsd, kn, 0x200000),
            t(qd, Layout::Bhsd, qn, 0x10000 + 64),
            None,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Overlap {
                    output: "O",
                    input: "Q"
                }
            ),
            "{e}"
        );
        // LSE inside V.
        let e = check_tensors(
            &Expected::dense(s),
            [2, 2, 2],
            t(qd, Layout::Bhsd, qn, 0x10000),
            t(kd, Layout::Bhsd, kn, 0x100000),
            t(kd, Layout::Bhsd, kn, 0x200000),
            t(qd, Layout::Bhsd, qn, 0x300000),
            Some((s.lse_elems(), 0x200000 + 16)),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Overlap {
                    output: "LSE",
                    input: "V"
                }
            ),
            "{e}"
        );
        // K given Q's dims; a short LSE.
        assert!(matches!(
            check_tensors(
                &Expected::dense(s),
                [2, 2, 2],
                t(qd, Layout::Bhsd, qn, 0x10000),
                t(qd, Layout::Bhsd, qn, 0x100000),
                t(kd, Layout::Bhsd, kn, 0x200000),
                t(qd, Layout::Bhsd, qn, 0x300000),
                None,
            ),
            Err(KernelError::InvalidTensor { tensor: "K", .. })
        ));
        assert!(matches!(
            check_tensors(
                &Expected::dense(s),
                [2, 2, 2],
                t(qd, Layout::Bhsd, qn, 0x10000),
                t(kd, Layout::Bhsd, kn, 0x100000),
                t(kd, Layout::Bhsd, kn, 0x200000),
                t(qd, Layout::Bhsd, qn, 0x300000),
                Some((s.lse_elems() - 1, 0x400000)),
            ),
            Err(KernelError::BufferLength { .. })
        ));
    }

    #[test]
    fn strides_reach_the_params() {
        use crate::tensor::Layout;
        let p = problem(100, 300, 64, Causal::None);
        let s = p.shape();
        let plan = plan_launch(&p, crate::config::cfg(64, 64, 4, 2), Some(1), 132).unwrap();
        // The default params are contiguous [B, H, S, D].
        assert_eq!(plan.params.q_stride, [8 * 100 * 64, 100 * 64, 64]);
        let st = Layout::Bshd.strides(dims_kv(s));
        let params = plan.params.with_strides(st, st, st, st);
        assert_eq!(params.k_stride, [300 * 2 * 64, 64, 2 * 64]);
        assert_eq!(std::mem::size_of::<FwdParams>(), 48 + 12 * 8 + 56 + 72);
        assert_eq!(std::mem::size_of::<FwdSeqs>(), 72);
        assert_eq!(std::mem::size_of::<FwdFeatures>(), 56);
    }

    #[test]
    fn no_driver_is_a_typed_error_not_a_panic() {
        match FlashAttention::new(0) {
            Err(KernelError::DriverMissing) => assert!(!driver_available()),
            // A machine with a driver: either a device opens or the driver says why not.
            Ok(_) | Err(KernelError::Driver { .. }) => assert!(driver_available()),
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
}
