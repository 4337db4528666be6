//! The safe launcher: validation, module loading, the one `unsafe` launch.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use attn_ref::{AttnError, Causal, Problem};
use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchConfig,
    PushKernelArg,
};

use crate::{
    config::{
        choose_config, choose_splits, kernel_name, kernel_name_split, unit_name, KernelConfig,
        KernelMode, MAX_SPLITS, SPLIT_CONFIGS, SUPPORTED_HEAD_DIMS,
    },
    cubin, Dtype, KernelError,
};

/// Scalars of one launch, mirrored from `attn::FwdParams` in kernels/common.cuh (same field
/// order, all 4-byte fields).
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
}

// SAFETY: plain-old-data with the C layout of `attn::FwdParams` (eleven 4-byte fields).
unsafe impl DeviceRepr for FwdParams {}

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
    /// ([`crate::config::choose_splits`]), `Some(1)` = never split. Values above 1 need a
    /// config of [`crate::config::SPLIT_CONFIGS`].
    pub splits: Option<usize>,
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

/// A device, a stream and the loaded attention kernels.
pub struct FlashAttention {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    major: i32,
    minor: i32,
    sm_count: usize,
    max_smem_optin: usize,
    modules: Mutex<HashMap<(String, bool), Arc<CudaModule>>>,
    functions: Mutex<FunctionCache>,
    workspace: Mutex<Option<SplitWorkspace>>,
    /// The FP8 forward's Vᵀ buffer (src/fp8.rs), grown on demand.
    pub(crate) fp8_vt: Mutex<Option<CudaSlice<u8>>>,
}

/// Device memory of the split-KV epilogue: partial O, (m, l) per split row, and one ticket
/// counter per query block (zeroed at allocation, reset by the kernel after each use).
struct SplitWorkspace {
    o: CudaSlice<f32>,
    ml: CudaSlice<f32>,
    counters: CudaSlice<u32>,
}

/// Loaded kernels by (entry point, debug build), with their shared-memory limit raised.
type FunctionCache = HashMap<(String, bool), CudaFunction>;

impl std::fmt::Debug for FlashAttention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlashAttention")
            .field("compute_capability", &(self.major, self.minor))
            .field("sm_count", &self.sm_count)
            .finish_non_exhaustive()
    }
}

pub(crate) fn driver(
    context: &'static str,
) -> impl FnOnce(cudarc::driver::DriverError) -> KernelError {
    move |source| KernelError::Driver { context, source }
}

/// Probes for libcuda without panicking (cudarc's context constructor panics without it).
pub fn driver_available() -> bool {
    // SAFETY: only tries to dlopen the driver library; no CUDA call is made.
    unsafe { sys::is_culib_present() }
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

    /// Uses an existing stream (and its context).
    pub fn with_stream(stream: Arc<CudaStream>) -> Result<Self, KernelError> {
        let ctx = stream.context().clone();
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
        Ok(Self {
            ctx,
            stream,
            major,
            minor,
            sm_count,
            max_smem_optin,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            workspace: Mutex::new(None),
            fp8_vt: Mutex::new(None),
        })
    }

    /// A second handle on the same device with its own new stream (for concurrent launches).
    pub fn fork(&self) -> Result<Self, KernelError> {
        let stream = self.ctx.new_stream().map_err(driver("creating a stream"))?;
        Self::with_stream(stream)
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    /// The stream launches go to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        (self.major, self.minor)
    }
    /// Number of SMs.
    pub fn sm_count(&self) -> usize {
        self.sm_count
    }
    /// Largest dynamic shared memory one CTA may opt into.
    pub fn max_smem_per_block(&self) -> usize {
        self.max_smem_optin
    }

    /// The config [`FlashAttention::forward`] uses for `problem` by default.
    pub fn default_config(&self, problem: &Problem) -> KernelConfig {
        let s = problem.shape();
        crate::elite::lookup(problem, &self.arch_label())
            .filter(|c| c.smem_bytes(s.head_dim()) <= self.max_smem_optin)
            .unwrap_or_else(|| {
                choose_config(
                    s.batch(),
                    s.q_heads(),
                    s.q_len(),
                    s.head_dim(),
                    self.sm_count,
                    self.max_smem_optin,
                )
            })
    }

    fn arch_label(&self) -> String {
        format!("sm_{}{}", self.major, self.minor)
    }

    /// Loads (once) the kernel `name` of `unit` and raises its dynamic shared-memory limit.
    pub(crate) fn function(
        &self,
        unit: &str,
        name: &str,
        debug: bool,
        smem: usize,
    ) -> Result<(CudaFunction, &'static str), KernelError> {
        let image = cubin::select(unit, debug, self.major, self.minor).ok_or_else(|| {
            if cubin::embedded().is_empty() {
                KernelError::KernelsNotBuilt
            } else if debug && !cubin::embedded().iter().any(|c| c.debug) {
                KernelError::DebugKernelsNotBuilt
            } else {
                KernelError::NoCubinForArch {
                    device: format!("{}.{}", self.major, self.minor),
                    available: cubin::embedded()
                        .iter()
                        .filter(|c| c.unit == unit)
                        .map(|c| format!("sm_{}", c.arch))
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            }
        })?;
        let key = (name.to_string(), debug);
        if let Some(f) = self.lock_functions()?.get(&key) {
            return Ok((f.clone(), image.arch));
        }
        let module = {
            let mut modules = self.modules.lock().map_err(|_| KernelError::Poisoned)?;
            match modules.get(&(unit.to_string(), debug)) {
                Some(m) => m.clone(),
                None => {
                    let m = self
                        .ctx
                        .load_module(cudarc::nvrtc::Ptx::from_binary(image.image.to_vec()))
                        .map_err(driver("loading the cubin"))?;
                    modules.insert((unit.to_string(), debug), m.clone());
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
        self.lock_functions()?.insert(key, f.clone());
        Ok((f, image.arch))
    }

    fn lock_functions(&self) -> Result<std::sync::MutexGuard<'_, FunctionCache>, KernelError> {
        self.functions.lock().map_err(|_| KernelError::Poisoned)
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
        let name = kernel_name(dtype, head_dim, config, mode);
        let (f, _) = self.function(
            &unit_name(dtype, head_dim),
            &name,
            false,
            config.smem_bytes(head_dim),
        )?;
        function_resources(&f)
    }

    /// Runs the forward pass: `o = softmax(scale · q·kᵀ + mask) · v`, and the row LSE into
    /// `lse` when given. Everything is validated before the launch; on error nothing is
    /// launched and nothing is written. The launch is asynchronous on [`Self::stream`].
    // The argument list is the attention signature itself (Q, K, V in; O, LSE out).
    #[allow(clippy::too_many_arguments)]
    pub fn forward<T: StorageType>(
        &self,
        problem: &Problem,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        o: &mut CudaSlice<T>,
        lse: Option<&mut CudaSlice<f32>>,
        opts: &ForwardOptions,
    ) -> Result<LaunchInfo, KernelError> {
        self.launch(problem, q, k, v, o, lse, opts, LaunchExtras::default())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch<T: StorageType>(
        &self,
        problem: &Problem,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        o: &mut CudaSlice<T>,
        lse: Option<&mut CudaSlice<f32>>,
        opts: &ForwardOptions,
        extras: LaunchExtras<'_>,
    ) -> Result<LaunchInfo, KernelError> {
        let shape = problem.shape();
        let d = shape.head_dim();
        let config = opts.config.unwrap_or_else(|| self.default_config(problem));
        // Debug launches (tile dumps, planted bugs) never split: dumps are per query block.
        let splits = if extras.dump.is_some() || extras.mode.is_some() {
            Some(1)
        } else {
            opts.splits
        };
        let plan = plan_launch(problem, config, splits, self.sm_count)?;
        check_buffer("Q", shape.q_elems(), q.len())?;
        check_buffer("K", shape.kv_elems(), k.len())?;
        check_buffer("V", shape.kv_elems(), v.len())?;
        check_buffer("O", shape.o_elems(), o.len())?;
        if let Some(l) = &lse {
            check_buffer("LSE", shape.lse_elems(), l.len())?;
        }
        let cfg = plan.config;
        if plan.smem_bytes as usize > self.max_smem_optin {
            return Err(KernelError::ConfigTooLarge {
                config: cfg.name(),
                smem: plan.smem_bytes as usize,
                limit: self.max_smem_optin,
            });
        }
        let mode = match (extras.mode, problem.causal()) {
            (Some(m), _) => m,
            (None, Causal::None) => KernelMode::Full,
            (None, _) => KernelMode::Causal,
        };
        let split = plan.params.n_splits > 1;
        let name = kernel_name_split(T::DTYPE, d, &cfg, mode, split);
        let (func, arch) = self.function(
            &unit_name(T::DTYPE, d),
            &name,
            extras.dump.is_some(),
            plan.smem_bytes as usize,
        )?;
        let mut params = plan.params;
        params.dump_count = extras.dump.as_ref().map_or(0, |d| d.count);
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
            let fits = ws_guard.as_ref().is_some_and(|w| {
                w.o.len() >= rows * d && w.ml.len() >= rows * 2 && w.counters.len() >= blocks
            });
            if !fits {
                let alloc = |what| {
                    move |source| KernelError::Driver {
                        context: what,
                        source,
                    }
                };
                *ws_guard = Some(SplitWorkspace {
                    o: self
                        .stream
                        .alloc_zeros(rows * d)
                        .map_err(alloc("allocating the split-KV workspace"))?,
                    ml: self
                        .stream
                        .alloc_zeros(rows * 2)
                        .map_err(alloc("allocating the split-KV workspace"))?,
                    counters: self
                        .stream
                        .alloc_zeros(blocks)
                        .map_err(alloc("allocating the split-KV counters"))?,
                });
            }
        }
        let mut builder = self.stream.launch_builder(&func);
        builder.arg(q).arg(k).arg(v).arg(o);
        match lse {
            Some(l) => builder.arg(l),
            None => builder.arg(&null),
        };
        match extras.dump {
            Some(d) => builder.arg(d.buffer).arg(d.tiles),
            None => builder.arg(&null).arg(&null),
        };
        match ws_guard.as_mut().filter(|_| split) {
            Some(w) => builder.arg(&mut w.o).arg(&mut w.ml).arg(&mut w.counters),
            None => builder.arg(&null).arg(&null).arg(&null),
        };
        builder.arg(&params);
        // SAFETY: the argument list matches ATTN_FWD_ENTRY_IMPL (q, k, v, o, lse, dump,
        // dump_tiles, ws_o, ws_ml, counters, FwdParams by value); every buffer length was
        // checked against the shape above, the grid covers exactly ceil(Sq/BM)·splits × Hq × B
        // blocks whose reads and writes the kernel bounds by q_len/kv_len, the split workspace
        // holds blocks·splits·BM rows and one counter per block (zeroed, and reset by the
        // kernel), 32-bit index ranges were checked in `plan_launch`, null pointers are passed
        // only where the kernel does not read them (lse tested for null; dump and workspace
        // only in debug / split entry points), and the dynamic shared-memory size was raised
        // on the function and fits the device.
        unsafe { builder.launch(launch_cfg) }.map_err(driver("launching the kernel"))?;
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

pub(crate) fn plan_launch(
    problem: &Problem,
    config: KernelConfig,
    splits: Option<usize>,
    sm_count: usize,
) -> Result<LaunchPlan, KernelError> {
    let s = problem.shape();
    let d = s.head_dim();
    if !SUPPORTED_HEAD_DIMS.contains(&d) {
        return Err(KernelError::UnsupportedHeadDim(d));
    }
    let i32_max = i32::MAX as usize;
    // In-kernel offsets inside one head are 32-bit (row · D); head bases are 64-bit.
    let overflow = |what: &'static str, v: Option<usize>, limit: usize| match v {
        Some(x) if x <= limit => Ok(()),
        _ => Err(KernelError::IndexOverflow(what)),
    };
    overflow("q_len · head_dim", s.q_len().checked_mul(d), i32_max)?;
    overflow("kv_len · head_dim", s.kv_len().checked_mul(d), i32_max)?;
    overflow(
        "batch · q_heads",
        s.batch().checked_mul(s.q_heads()),
        i32_max,
    )?;
    overflow("kv_len + q_len", s.kv_len().checked_add(s.q_len()), i32_max)?;
    overflow("q_heads (grid.y)", Some(s.q_heads()), 65_535)?;
    overflow("batch (grid.z)", Some(s.batch()), 65_535)?;
    config.check_head_dim(d)?;
    let q_tiles = s.q_len().div_ceil(config.block_m);
    let key_tiles = s.kv_len().div_ceil(config.block_n);
    let n_splits = match splits {
        None => choose_splits(
            &config,
            q_tiles * s.batch() * s.q_heads(),
            key_tiles,
            sm_count,
        ),
        Some(0) => {
            return Err(AttnError::InvalidArgument("splits must be at least 1".into()).into())
        }
        Some(1) => 1,
        Some(n) if !SPLIT_CONFIGS.contains(&config) => {
            return Err(AttnError::InvalidArgument(format!(
                "config {} has no split-KV kernels ({n} splits asked)",
                config.name()
            ))
            .into())
        }
        Some(n) => n.min(MAX_SPLITS),
    };
    overflow(
        "q tiles · splits (grid.x)",
        q_tiles.checked_mul(n_splits),
        i32_max,
    )?;
    Ok(LaunchPlan {
        config,
        grid: (
            (q_tiles * n_splits) as u32,
            s.q_heads() as u32,
            s.batch() as u32,
        ),
        smem_bytes: config.smem_bytes(d) as u32,
        params: fwd_params(problem, n_splits as i32),
    })
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
        batch: s.batch() as i32,
        q_heads: s.q_heads() as i32,
        kv_heads: s.kv_heads() as i32,
        q_len: s.q_len() as i32,
        kv_len: s.kv_len() as i32,
        group: s.group_size() as i32,
        diag_offset: diag_offset as i32,
        dump_count: 0,
        scale_log2: (scale * std::f64::consts::LOG2_E) as f32,
        scale: scale as f32,
        n_splits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_ref::AttnShape;

    fn problem(sq: usize, sk: usize, d: usize, causal: Causal) -> Problem {
        Problem::new(AttnShape::new(2, 8, 2, sq, sk, d).unwrap(), causal)
    }

    #[test]
    fn plan_geometry_and_scalars() {
        let cfg = crate::CONFIGS_D64[1];
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
        let cfg = crate::CONFIGS_D64[1];
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
        assert!(plan_launch(&p, crate::CONFIGS_D64[2], Some(2), 132).is_err());
    }

    #[test]
    fn unsupported_head_dims_are_typed_errors() {
        for d in [1, 32, 96, 256] {
            let err = plan_launch(
                &problem(8, 8, d, Causal::None),
                crate::CONFIGS_D64[0],
                None,
                132,
            )
            .unwrap_err();
            assert!(matches!(err, KernelError::UnsupportedHeadDim(x) if x == d));
        }
    }

    #[test]
    fn index_overflow_is_rejected_before_launch() {
        let p = Problem::new(
            AttnShape::new(1, 1, 1, 20_000_000, 8, 128).unwrap(),
            Causal::None,
        );
        let err = plan_launch(&p, crate::CONFIGS_D64[0], None, 132).unwrap_err();
        assert!(matches!(err, KernelError::IndexOverflow(_)), "{err}");
        let p = Problem::new(
            AttnShape::new(1, 70_000, 1, 8, 8, 64).unwrap(),
            Causal::None,
        );
        assert!(matches!(
            plan_launch(&p, crate::CONFIGS_D64[0], None, 132),
            Err(KernelError::IndexOverflow(_))
        ));
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
