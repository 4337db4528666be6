//! `attn-kernels`: the attention kernel family, compiled by nvcc into cubins for sm_80, sm_89
//! and sm_90a at build time ([`catalog`] decides which; sm_89 runs sm_80's cubins but the FP8
//! forward's), embedded in the crate and launched
//! through `cudarc` behind a safe API that validates every argument before a launch:
//! - on Hopper, a FlashAttention-3-style forward ([`hopper`]: TMA loads, a producer
//!   warpgroup, two `wgmma` consumer warpgroups, intra-warpgroup overlap and ping-pong
//!   variants) for FP16, BF16 and FP8 (E4M3), whose dense non-causal launches of the walking
//!   tiles are persistent, the last partial round shared out by key tiles (stream-K,
//!   [`TileSchedule`]);
//! - everywhere, a FlashAttention-2-style forward (`mma.sync.m16n8k16`, `ldmatrix`, a
//!   `cp.async` K/V pipeline, split-KV for decode) and the FP8 `mma.sync`/`wgmma` variants;
//! - every head dim `D % 8 == 0` up to 256 for FP16/BF16 (64 and 128 for FP8, and 256 on the
//!   Hopper engine);
//! - on both FP16/BF16 engines, the serving features of [`attn_ref::Features`]: sliding
//!   windows (the key tiles a window masks are skipped), softcap, ALiBi and attention sinks
//!   (the FP8 forward refuses them with [`KernelError::UnsupportedFeature`]);
//! - the backward pass ([`backward`]: dQ, dK, dV on wgmma on sm_90a at buckets 64/128/256 and on
//!   `mma.sync` elsewhere; the same serving features, packed varlen batches and the sinks'
//!   gradient; a deterministic mode) and the LSE merge of partial results ([`merge`], which
//!   ring attention in attn-dist uses).
//!
//! [`Engine::Auto`] runs decode steps (at most 8 unmasked query rows per KV head after GQA
//! packing; with sinks, ALiBi or a window, one position per head) on the decode kernel
//! ([`decode`], every arch), and otherwise
//! picks the Hopper kernel on sm_90 unless the problem wants split-KV.
//!
//! Problems are described with [`attn_ref`]'s types; tensors are cudarc views with dims and
//! strides ([`Tensor`], [`TensorMut`]), so `[B,H,S,D]`, `[B,S,H,D]` and views into a larger KV
//! cache all run without copies. [`GpuBackend`] implements [`attn_ref::Attention`], the same
//! trait as the CPU reference, so tests and the release gate can run either on the same
//! inputs.
//!
//! ```no_run
//! use attn_kernels::FlashAttention;
//! use attn_ref::{AttnShape, Causal, Problem};
//! use half::f16;
//!
//! let shape = AttnShape::self_attention(1, 8, 512, 64)?;
//! let problem = Problem::new(shape, Causal::TopLeft);
//! let q = vec![f16::from_f32(0.1); shape.q_elems()];
//! let kv = vec![f16::from_f32(0.2); shape.kv_elems()];
//! let gpu = FlashAttention::new(0)?; // a typed error, not a panic, without a driver
//! let out = gpu.forward_host(&problem, &q, &kv, &kv)?;
//! assert_eq!(out.o.len(), shape.o_elems());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Device buffers in `[B, S, H, D]`, K and V inside a cache with room for 4096 positions:
//!
//! ```no_run
//! use attn_kernels::{dims_kv, dims_q, FlashAttention, Forward, ForwardOptions, Layout, Tensor, TensorMut};
//! use attn_ref::{AttnShape, Causal, Problem};
//! use half::f16;
//!
//! let shape = AttnShape::new(2, 8, 2, 1024, 1024, 96)?;
//! let problem = Problem::new(shape, Causal::BottomRight);
//! let gpu = FlashAttention::new(0)?;
//! let s = gpu.stream();
//! let q = s.alloc_zeros::<f16>(shape.q_elems())?;
//! let mut o = s.alloc_zeros::<f16>(shape.o_elems())?;
//! let cache_dims = [2, 2, 4096, 96];
//! let k_cache = s.alloc_zeros::<f16>(cache_dims.iter().product())?;
//! let v_cache = s.alloc_zeros::<f16>(cache_dims.iter().product())?;
//! let cache = Layout::Bshd.strides(cache_dims);
//! let (qd, kd) = (dims_q(&shape), dims_kv(&shape));
//! let info = gpu.forward(Forward {
//!     problem: &problem,
//!     q: Tensor::contiguous(q.as_view(), qd, Layout::Bshd),
//!     k: Tensor::new(k_cache.as_view(), kd, cache),
//!     v: Tensor::new(v_cache.as_view(), kd, cache),
//!     o: TensorMut::contiguous(o.as_view_mut(), qd, Layout::Bshd),
//!     lse: None,
//!     options: ForwardOptions::default(),
//! })?;
//! println!("ran {}", info.kernel);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Without nvcc at build time the crate still compiles; every launch then returns
//! [`KernelError::KernelsNotBuilt`].

#![warn(missing_docs)]

pub mod backward;
pub mod catalog;
pub mod config;
pub mod cubin;
#[cfg(feature = "debug-kernels")]
pub mod debug;
pub mod decode;
pub mod elite;
pub mod fp8;
pub mod hopper;
pub mod kv_append;
pub mod kv_fp8;
mod launch;
pub mod merge;
pub mod seqs;
pub mod tensor;
pub mod timeline;

use std::sync::Arc;

use attn_ref::{Attention, AttnError, AttnOutput, BackendError, Problem};

pub use backward::{
    Backward, BackwardEngine, BackwardExtras, BackwardInfo, BackwardOptions, BackwardSchedule,
};
pub use catalog::HopperTile;
pub use catalog::{FP8_HEAD_DIMS, FP8_TILES as FP8_CONFIGS, FWD_HEAD_DIM_BUCKETS};
pub use config::{bucket_for, configs_for, Dtype, KernelConfig, KernelMode};
pub use fp8::{Fp8Forward, Fp8Options, Fp8Scales, Fp8Variant};
pub use hopper::{hopper_configs_for, Engine, TileSchedule};
pub use kv_append::{AppendKv, KvCache};
pub use kv_fp8::{ForwardKvFp8, KvScales};
pub use launch::{
    dims_kv, dims_q, driver_available, FlashAttention, Forward, ForwardOptions, FunctionResources,
    KernelCache, LaunchInfo, StorageType,
};
pub use merge::{LseAccumulator, Merge};
pub use seqs::{HostSequences, HostTensor, Indices, KeyRows, QueryRows, Sequences};
pub use tensor::{Layout, Strides, Tensor, TensorMut};

/// Everything that can go wrong before or during a launch.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// libcuda could not be loaded.
    #[error(
        "the CUDA driver (libcuda.so) was not found: this machine has no usable NVIDIA GPU driver"
    )]
    DriverMissing,
    /// The crate was built without nvcc.
    #[error("kernels not built: install nvcc or run `cargo xtask setup-cuda`, then rebuild")]
    KernelsNotBuilt,
    /// A timeline was asked for, but no loaded kernel module has one.
    #[error("no timeline: rebuild with ATTN_TIMELINE=1 (a profiling build of the Hopper forward) and launch a Hopper forward first")]
    TimelineNotBuilt,
    /// Debug kernels were requested but the `debug-kernels` feature was off at build time.
    #[error("debug kernels not built: enable the `debug-kernels` feature of attn-kernels")]
    DebugKernelsNotBuilt,
    /// No embedded cubin runs on this device.
    #[error("no cubin for compute capability {device} (built: {available}); rebuild with ATTN_CUDA_ARCHS including this arch")]
    NoCubinForArch {
        /// The device's compute capability.
        device: String,
        /// Archs that were built.
        available: String,
    },
    /// The device's arch was built but not this unit (a build filtered by ATTN_HEAD_DIMS).
    #[error("kernel unit `{0}` was not built: rebuild without the ATTN_HEAD_DIMS filter (or include this head dim's bucket)")]
    UnitNotBuilt(String),
    /// The cubin lacks an expected entry point (a stale build).
    #[error("kernel `{0}` is not in the cubin; the build is stale or the config list changed")]
    MissingKernel(String),
    /// A head dim no kernel takes.
    #[error("head_dim {head_dim} is not supported; supported: {supported}")]
    UnsupportedHeadDim {
        /// The head dim asked for.
        head_dim: usize,
        /// The supported set, in words.
        supported: &'static str,
    },
    /// A problem feature (window, softcap, ALiBi, sinks) the chosen kernel does not implement
    /// (the FP8 forward, or an mma.sync config without the features' entry points): refused,
    /// never silently dropped.
    #[error(
        "{0}: not implemented by this kernel (the f16/bf16 forward and the f64 reference have it)"
    )]
    UnsupportedFeature(String),
    /// A tensor whose dims, strides or extent do not fit the problem or its view.
    #[error("{tensor}: {reason}")]
    InvalidTensor {
        /// Which tensor.
        tensor: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A tensor that breaks the kernels' 16-byte vector-load alignment.
    #[error("{tensor} is misaligned: {reason}")]
    Misaligned {
        /// Which tensor.
        tensor: &'static str,
        /// What is misaligned and how to fix it.
        reason: String,
    },
    /// An output shares memory with an input (or with the other output).
    #[error("{output} overlaps {input} in device memory: outputs must not alias inputs")]
    Overlap {
        /// The output.
        output: &'static str,
        /// The tensor it overlaps.
        input: &'static str,
    },
    /// An unknown config name.
    #[error("unknown kernel config `{name}`; known: {known}")]
    UnknownConfig {
        /// The name given.
        name: String,
        /// The valid names.
        known: String,
    },
    /// A config needs more shared memory than the device offers.
    #[error("config {config} needs {smem} bytes of shared memory; this device allows {limit}")]
    ConfigTooLarge {
        /// Config name.
        config: String,
        /// Bytes needed.
        smem: usize,
        /// Device limit.
        limit: usize,
    },
    /// A device or host buffer's length does not match the shape.
    #[error("{tensor} buffer has {got} elements but the shape needs {expected}")]
    BufferLength {
        /// Which buffer.
        tensor: &'static str,
        /// Elements the shape implies.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// The engine asked for cannot run here (wrong device, or an option it lacks).
    #[error("{0}")]
    EngineUnavailable(String),
    /// A size exceeds what the kernel's 32-bit indexing or the grid can address.
    #[error("{0} exceeds the kernel's 32-bit index / grid limits")]
    IndexOverflow(&'static str),
    /// The problem itself is invalid.
    #[error(transparent)]
    Problem(#[from] AttnError),
    /// A CUDA driver call failed.
    #[error("CUDA driver error while {context}: {source}")]
    Driver {
        /// What was being done.
        context: &'static str,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
    /// An FP8 input the kernels cannot take (format, granularity, shape, scales).
    #[error("FP8 {tensor}: {reason}")]
    Fp8Input {
        /// Which input.
        tensor: &'static str,
        /// What is wrong, and what to do instead.
        reason: String,
    },
    /// An FP8 kernel variant needs instructions this device lacks.
    #[error("FP8 variant `{variant}` needs {needs}; this device is {device}: use the `{instead}` variant (its default)")]
    VariantUnavailable {
        /// The variant asked for.
        variant: &'static str,
        /// What the variant needs (`Fp8Variant::requirement`).
        needs: &'static str,
        /// The device's compute capability.
        device: String,
        /// The variant this device runs by default.
        instead: &'static str,
    },
    /// A lock was poisoned by a panic in another thread.
    #[error("internal lock poisoned by a panic in another thread")]
    Poisoned,
}

/// Host-side result of [`FlashAttention::forward_host`].
#[derive(Debug, Clone, PartialEq)]
pub struct HostOutput<T> {
    /// O `[B, Hq, Sq, D]`.
    pub o: Vec<T>,
    /// LSE `[B, Hq, Sq]` (natural log; −∞ for fully masked rows).
    pub lse: Vec<f32>,
    /// What ran.
    pub launch: LaunchInfo,
}

impl FlashAttention {
    /// Host convenience: uploads contiguous `[B, H, S, D]` `q`, `k`, `v`, runs
    /// [`FlashAttention::forward`] with the default config into a NaN-poisoned O, and
    /// downloads O and LSE (synchronizing the stream).
    pub fn forward_host<T: StorageType>(
        &self,
        problem: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
    ) -> Result<HostOutput<T>, KernelError> {
        self.forward_host_with(problem, q, k, v, &ForwardOptions::default())
    }

    /// [`FlashAttention::forward_host`] with options (config override).
    pub fn forward_host_with<T: StorageType>(
        &self,
        problem: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        opts: &ForwardOptions,
    ) -> Result<HostOutput<T>, KernelError> {
        self.forward_host_layout(problem, q, k, v, Layout::Bhsd, opts)
    }

    /// Host convenience for buffers in `layout` (`[B,H,S,D]` or `[B,S,H,D]`): the kernel
    /// reads and writes that layout directly (strided, no permutation on either side), and
    /// O comes back in it. LSE is `[B, Hq, Sq]`.
    pub fn forward_host_layout<T: StorageType>(
        &self,
        problem: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        layout: Layout,
        opts: &ForwardOptions,
    ) -> Result<HostOutput<T>, KernelError> {
        let shape = problem.shape();
        shape.check_qkv_lens(q.len(), k.len(), v.len())?;
        let s = self.stream();
        let err = |context| move |source| KernelError::Driver { context, source };
        let dq = s.clone_htod(q).map_err(err("uploading Q"))?;
        let dk = s.clone_htod(k).map_err(err("uploading K"))?;
        let dv = s.clone_htod(v).map_err(err("uploading V"))?;
        // Poisoned, so that anything the kernel fails to write shows as NaN.
        let mut o = s
            .clone_htod(&vec![T::from_f32(f32::NAN); shape.o_elems()])
            .map_err(err("allocating O"))?;
        let mut lse = s
            .clone_htod(&vec![f32::NAN; shape.lse_elems()])
            .map_err(err("allocating LSE"))?;
        let (qd, kd) = (dims_q(shape), dims_kv(shape));
        let launch = self.forward(Forward {
            problem,
            q: Tensor::contiguous(dq.as_view(), qd, layout),
            k: Tensor::contiguous(dk.as_view(), kd, layout),
            v: Tensor::contiguous(dv.as_view(), kd, layout),
            o: TensorMut::contiguous(o.as_view_mut(), qd, layout),
            lse: Some(lse.as_view_mut()),
            options: opts.clone(),
        })?;
        let o = s.clone_dtoh(&o).map_err(err("downloading O"))?;
        let lse = s.clone_dtoh(&lse).map_err(err("downloading LSE"))?;
        Ok(HostOutput { o, lse, launch })
    }
}

/// A GPU kernel as an [`Attention`] backend: f32 host inputs are rounded to `dtype`, the
/// output is widened back to f32.
pub struct GpuBackend {
    gpu: Arc<FlashAttention>,
    dtype: Dtype,
    opts: ForwardOptions,
}

impl GpuBackend {
    /// A backend over an opened device.
    pub fn new(gpu: Arc<FlashAttention>, dtype: Dtype, opts: ForwardOptions) -> Self {
        Self { gpu, dtype, opts }
    }

    fn run<T: StorageType>(
        &self,
        problem: &Problem,
        q: &[f32],
        k: &[f32],
        v: &[f32],
    ) -> Result<AttnOutput, KernelError> {
        let cvt = |x: &[f32]| x.iter().map(|&e| T::from_f32(e)).collect::<Vec<T>>();
        let out = self
            .gpu
            .forward_host_with(problem, &cvt(q), &cvt(k), &cvt(v), &self.opts)?;
        Ok(AttnOutput {
            o: out.o.iter().map(|e| e.to_f32()).collect(),
            lse: out.lse,
        })
    }
}

impl Attention for GpuBackend {
    fn name(&self) -> String {
        let (ma, mi) = self.gpu.compute_capability();
        format!("fa2-{}-sm{ma}{mi}", self.dtype)
    }

    fn forward(
        &self,
        problem: &Problem,
        q: &[f32],
        k: &[f32],
        v: &[f32],
    ) -> Result<AttnOutput, BackendError> {
        let r = match self.dtype {
            Dtype::F16 => self.run::<half::f16>(problem, q, k, v),
            Dtype::Bf16 => self.run::<half::bf16>(problem, q, k, v),
        };
        r.map_err(|e| Box::new(e) as BackendError)
    }
}

/// The FP8 kernel as an [`Attention`] backend: f32 host inputs are quantized to E4M3 with
/// per-head scales by [`attn_quant`] (so quantization error is part of what it returns),
/// O comes back in `out` and is widened to f32.
pub struct Fp8Backend {
    gpu: Arc<FlashAttention>,
    out: Dtype,
    opts: Fp8Options,
}

impl Fp8Backend {
    /// A backend over an opened device writing O in `out`.
    pub fn new(gpu: Arc<FlashAttention>, out: Dtype, opts: Fp8Options) -> Self {
        Self { gpu, out, opts }
    }

    fn run<T: StorageType>(
        &self,
        problem: &Problem,
        q: &[f32],
        k: &[f32],
        v: &[f32],
    ) -> Result<AttnOutput, BackendError> {
        use attn_quant::{quantize, Fp8Format, Granularity};
        let shape = problem.shape();
        shape.check_qkv_lens(q.len(), k.len(), v.len())?;
        let (qd, kd) = (attn_quant::q_dims(shape), attn_quant::kv_dims(shape));
        let qq = quantize(q, qd, Fp8Format::E4M3, Granularity::Head)?;
        let kq = quantize(k, kd, Fp8Format::E4M3, Granularity::Head)?;
        let vq = quantize(v, kd, Fp8Format::E4M3, Granularity::Head)?;
        let out = self
            .gpu
            .forward_fp8_host::<T>(problem, &qq, &kq, &vq, &self.opts)?;
        Ok(AttnOutput {
            o: out.o.iter().map(|e| e.to_f32()).collect(),
            lse: out.lse,
        })
    }
}

impl Attention for Fp8Backend {
    fn name(&self) -> String {
        let (ma, mi) = self.gpu.compute_capability();
        let variant = self
            .opts
            .variant
            .unwrap_or_else(|| self.gpu.fp8_default_variant());
        format!("fp8-e4m3-{variant}-{}-sm{ma}{mi}", self.out)
    }

    fn forward(
        &self,
        problem: &Problem,
        q: &[f32],
        k: &[f32],
        v: &[f32],
    ) -> Result<AttnOutput, BackendError> {
        match self.out {
            Dtype::F16 => self.run::<half::f16>(problem, q, k, v),
            Dtype::Bf16 => self.run::<half::bf16>(problem, q, k, v),
        }
    }
}
