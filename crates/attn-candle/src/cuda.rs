//! The CUDA path (`cuda` feature): `attn-kernels` launched on candle's stream over candle's
//! own buffers.
//!
//! - The launcher is [`FlashAttention::on_stream`] with the device's stream
//!   ([`CudaDevice::cuda_stream`]), so the launch is ordered with everything candle queued
//!   before it and after it, on whichever stream the device was made with.
//! - Q, K and V are [`attn_kernels::Tensor`]s over the inputs' `CudaSlice`s, starting at the
//!   layout's start offset, with candle's strides: a `(b, s, h, d)` layout becomes dims
//!   `[b, h, s, d]` with strides (batch, head, row) = (`stride[0]`, `stride[2]`, `stride[1]`).
//!   Contiguous tensors, `transpose(1, 2)` views of `(b, h, s, d)` and `narrow`s all run
//!   without a copy; only the head dim must be contiguous.
//! - The output (and the LSE when asked) is allocated through candle's device, so candle owns
//!   and frees it like any other tensor.
//! - The backward (`bwd`) recomputes the forward's O and LSE on the same stream, then runs
//!   `FlashAttention::backward` over the same buffers; the gradients are allocated through
//!   candle's device like the output.
//! - Each device's [`KernelCache`] (loaded cubins) is made once per process and shared by
//!   every launch on that device.

use std::{
    cell::RefCell,
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use attn_kernels::{
    Backward, BackwardExtras, BackwardOptions, FlashAttention, Forward, ForwardKvFp8,
    ForwardOptions, Fp8Forward, Fp8Options, Fp8Scales, Indices, KernelCache, KernelError, KeyRows,
    KvScales, Layout as KLayout, QueryRows, Sequences, StorageType, Strides, Tensor as KTensor,
    TensorMut,
};
use attn_ref::AttnShape;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaStream, CudaView, DevicePtr, DeviceRepr, ValidAsZeroBits,
};
use candle_core::cuda_backend::CudaDType;
use candle_core::op::BackpropOp;
use candle_core::{bail, CudaDevice, CudaStorage, DType, Layout, Result, Shape, Storage, Tensor};
use half::{bf16, f16};

use crate::{check_dims, err, Dims, FlashAttn, LseValue};

/// What the last CUDA launch on this thread was handed: the device addresses of Q, K, V (the
/// first element each view names), of O and of the LSE, the stream and the kernel. For a
/// backward, `o` and `lse` are the recomputed forward's (inputs of the backward kernel) and
/// `kernel` the backward's main entry point. For tests (no copies, the right stream); not a
/// stable API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaLaunchRecord {
    /// Address of Q's first element as passed to the kernel.
    pub q: u64,
    /// Address of K's first element.
    pub k: u64,
    /// Address of V's first element.
    pub v: u64,
    /// Address of the output buffer.
    pub o: u64,
    /// Address of the LSE buffer, when one was written.
    pub lse: Option<u64>,
    /// The `CUstream` the kernel was launched on, as an integer.
    pub stream: usize,
    /// The kernel's entry point.
    pub kernel: String,
}

thread_local! {
    static LAST_LAUNCH: RefCell<Option<CudaLaunchRecord>> = const { RefCell::new(None) };
}

/// The [`CudaLaunchRecord`] of the last launch this thread made, if any.
pub fn last_cuda_launch() -> Option<CudaLaunchRecord> {
    LAST_LAUNCH.with(|l| l.borrow().clone())
}

/// An LSE computed on the device, waiting to become a candle tensor.
pub(crate) struct DeviceLse {
    slice: CudaSlice<f32>,
    dev: CudaDevice,
}

impl DeviceLse {
    /// The LSE as an f32 candle tensor of `shape` on its device (no copy).
    pub(crate) fn into_tensor(self, shape: (usize, usize, usize)) -> Tensor {
        let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(self.slice, self.dev));
        Tensor::from_storage(storage, shape, BackpropOp::none(), false)
    }
}

/// A [`KernelError`] as a candle error. A feature the kernels lack names the feature and
/// where it runs instead.
pub(crate) fn kernel_error(e: KernelError) -> candle_core::Error {
    match e {
        KernelError::UnsupportedFeature(what) => err(format!(
            "the CUDA kernels do not implement {what} yet, so this op cannot run on a CUDA device; run it on the CPU device (attn-ref's reference implements it)"
        )),
        other => err(format!("CUDA path: {other}")),
    }
}

/// Keeps what a launch was handed for [`last_cuda_launch`].
fn record_launch(record: CudaLaunchRecord) {
    LAST_LAUNCH.with(|l| *l.borrow_mut() = Some(record));
}

/// A launcher on the device's stream over the device's shared kernel cache (every op's).
fn launcher(dev: &CudaDevice) -> Result<(Arc<CudaStream>, FlashAttention)> {
    let stream = dev.cuda_stream();
    let gpu = FlashAttention::on_stream(kernel_cache(&stream)?, stream.clone());
    Ok((stream, gpu))
}

/// The kernel cache of the stream's device, made on first use. Keyed by ordinal and context:
/// candle's devices of one ordinal share the primary context, and so the cache.
fn kernel_cache(stream: &Arc<CudaStream>) -> Result<Arc<KernelCache>> {
    type Caches = Mutex<HashMap<(usize, usize), Arc<KernelCache>>>;
    static CACHES: OnceLock<Caches> = OnceLock::new();
    let ctx = stream.context();
    let key = (ctx.ordinal(), ctx.cu_ctx() as usize);
    let mut caches = CACHES
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| err("the kernel-cache lock was poisoned"))?;
    if let Some(c) = caches.get(&key) {
        return Ok(c.clone());
    }
    let cache = KernelCache::new(ctx.clone()).map_err(kernel_error)?;
    caches.insert(key, cache.clone());
    Ok(cache)
}

/// An input `(b, s, h, d)` over candle's buffer: dims `[b, h, s, d]`, candle's strides, from
/// the layout's start offset. No copy.
fn input<'a, T>(name: &str, slice: &'a CudaSlice<T>, l: &Layout) -> Result<KTensor<'a, T>> {
    input_view(name, slice.as_view(), l)
}

/// [`input`] over a view (an E4M3 cache's codes as bytes).
fn input_view<'a, T>(name: &str, slice: CudaView<'a, T>, l: &Layout) -> Result<KTensor<'a, T>> {
    let (dims, st) = (l.dims(), l.stride());
    if dims[3] > 1 && st[3] != 1 {
        bail!(
            "attn-candle: {name}'s head dim (the last) must be contiguous on CUDA (stride 1), got strides {st:?} for shape {dims:?}; call .contiguous() on it first"
        );
    }
    let start = l.start_offset();
    if start > slice.len() {
        bail!(
            "attn-candle: {name}'s layout starts at element {start} of a {}-element buffer",
            slice.len()
        );
    }
    Ok(KTensor::new(
        slice.slice(start..),
        [dims[0], dims[2], dims[1], dims[3]],
        Strides {
            batch: st[0],
            head: st[2],
            row: st[1],
        },
    ))
}

/// The storage type of q, k and v if the kernels take it (f16 or bf16, the same for all
/// three); the dtype dispatch of every op.
fn storage_dtype(q: &CudaStorage, k: &CudaStorage, v: &CudaStorage) -> Result<DType> {
    match (q.dtype(), k.dtype(), v.dtype()) {
        (DType::F16, DType::F16, DType::F16) => Ok(DType::F16),
        (DType::BF16, DType::BF16, DType::BF16) => Ok(DType::BF16),
        (qt, kt, vt) if qt != kt || qt != vt => Err(err(format!(
            "q, k and v must have the same dtype, got {qt:?}, {kt:?}, {vt:?}"
        ))),
        (dt, _, _) => Err(err(format!(
            "unsupported dtype {dt:?} on CUDA: the kernels take f16 or bf16 (convert with to_dtype; the CPU device also takes f32 and f64)"
        ))),
    }
}

/// An `F8E4M3` storage's codes as bytes, in place.
fn codes<'a>(name: &str, s: &'a CudaStorage) -> Result<CudaView<'a, u8>> {
    let slice = s.as_cuda_slice::<float8::F8E4M3>()?;
    // SAFETY: F8E4M3 is `#[repr(transparent)]` over its one-byte code, so the buffer holds
    // exactly `len` valid u8s.
    unsafe { slice.transmute::<u8>(slice.len()) }
        .ok_or_else(|| err(format!("{name}'s buffer could not be viewed as bytes")))
}

/// A scale tensor's f32s on the device: contiguous, no copy.
fn scale_view<'a>(name: &str, storage: &'a Storage, l: &Layout) -> Result<CudaView<'a, f32>> {
    let Storage::Cuda(s) = storage else {
        bail!("attn-candle: {name} must be on the CUDA device, like q");
    };
    let n = l.shape().elem_count();
    if !l.is_contiguous() {
        bail!(
            "attn-candle: {name} must be contiguous, got strides {:?}",
            l.stride()
        );
    }
    let slice = s.as_cuda_slice::<f32>()?;
    let start = l.start_offset();
    slice.try_slice(start..start + n).ok_or_else(|| {
        err(format!(
            "{name}'s layout reaches past its {}-element buffer",
            slice.len()
        ))
    })
}

/// Q's type for an E4M3 cache on CUDA.
fn kv_fp8_query_dtype(q: &CudaStorage) -> Result<DType> {
    match q.dtype() {
        dt @ (DType::F16 | DType::BF16) => Ok(dt),
        dt => Err(err(format!(
            "an E4M3 KV cache takes q in f16 or bf16 on CUDA, got {dt:?} (convert with to_dtype)"
        ))),
    }
}

fn address<T>(view: &CudaView<'_, T>, stream: &CudaStream) -> u64 {
    view.device_ptr(stream).0
}

impl FlashAttn {
    /// `cuda_fwd`: the dtype dispatch (f16, bf16).
    pub(crate) fn cuda(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        if self.kv_fp8(k.dtype(), v.dtype())? {
            return match kv_fp8_query_dtype(q)? {
                DType::F16 => self.cuda_typed::<f16, true>(q, ql, k, kl, v, vl),
                _ => self.cuda_typed::<bf16, true>(q, ql, k, kl, v, vl),
            };
        }
        match storage_dtype(q, k, v)? {
            DType::F16 => self.cuda_typed::<f16, false>(q, ql, k, kl, v, vl),
            _ => self.cuda_typed::<bf16, false>(q, ql, k, kl, v, vl),
        }
    }

    /// KV_FP8: K and V are an E4M3 cache (`forward_kv_fp8`, the op's scales).
    fn cuda_typed<T, const KV_FP8: bool>(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> Result<(CudaStorage, Shape)>
    where
        T: StorageType + CudaDType + DeviceRepr + ValidAsZeroBits,
    {
        let Dims {
            b,
            sq,
            sk,
            hq,
            hkv,
            d,
        } = check_dims(ql, kl, vl)?;
        let dev = q.device().clone();
        let out_shape = Shape::from((b, sq, hq, d));
        let lse_len = b * hq * sq;
        if b == 0 || sq == 0 || hq == 0 || d == 0 || sk == 0 {
            // Nothing to compute, or rows that see no key: O = 0, LSE = −∞ (as on the CPU).
            self.check_scale()?;
            if self.wants_lse() {
                let lse = dev.clone_htod(&vec![f32::NEG_INFINITY; lse_len])?;
                self.store_lse_value(LseValue::Device(DeviceLse {
                    slice: lse,
                    dev: dev.clone(),
                }))?;
            }
            let o = dev.alloc_zeros::<T>(out_shape.elem_count())?;
            return Ok((CudaStorage::wrap_cuda_slice(o, dev), out_shape));
        }
        let shape = AttnShape::new(b, hq, hkv, sq, sk, d).map_err(err)?;
        let problem = self.problem(shape, sk)?;
        let (stream, gpu) = launcher(&dev)?;

        let qt = input("q", q.as_cuda_slice::<T>()?, ql)?;
        let mut o = dev.alloc_zeros::<T>(out_shape.elem_count())?;
        let mut lse = if self.wants_lse() {
            Some(dev.alloc_zeros::<f32>(lse_len)?)
        } else {
            None
        };
        let mut record = CudaLaunchRecord {
            q: address(qt.view(), &stream),
            k: 0,
            v: 0,
            o: o.device_ptr(&stream).0,
            lse: lse.as_ref().map(|l| l.device_ptr(&stream).0),
            stream: stream.cu_stream() as usize,
            kernel: String::new(),
        };
        // (b, s, h, d) contiguous, like candle-flash-attn's output.
        let ot = TensorMut::contiguous(o.as_view_mut(), [b, hq, sq, d], KLayout::Bshd);
        let lse_view = lse.as_mut().map(|l| l.as_view_mut());
        let info = if KV_FP8 {
            let (kt, vt) = (
                input_view("k", codes("k", k)?, kl)?,
                input_view("v", codes("v", v)?, vl)?,
            );
            (record.k, record.v) = (address(kt.view(), &stream), address(vt.view(), &stream));
            let scales = self
                .kv_scales
                .as_ref()
                .ok_or_else(|| err(crate::KV_FP8_NEEDS_SCALES))?;
            let (kg, vg) = (scales.k.storage_and_layout(), scales.v.storage_and_layout());
            gpu.forward_kv_fp8(
                ForwardKvFp8 {
                    problem: &problem,
                    q: qt,
                    k: kt,
                    v: vt,
                    scales: KvScales {
                        k: scale_view("k_scale", &kg.0, kg.1)?,
                        v: scale_view("v_scale", &vg.0, vg.1)?,
                    },
                    o: ot,
                    lse: lse_view,
                    options: ForwardOptions::default(),
                },
                None,
            )
        } else {
            let (kt, vt) = (
                input("k", k.as_cuda_slice::<T>()?, kl)?,
                input("v", v.as_cuda_slice::<T>()?, vl)?,
            );
            (record.k, record.v) = (address(kt.view(), &stream), address(vt.view(), &stream));
            gpu.forward(Forward {
                problem: &problem,
                q: qt,
                k: kt,
                v: vt,
                o: ot,
                lse: lse_view,
                options: ForwardOptions::default(),
            })
        }
        .map_err(kernel_error)?;
        record.kernel = info.kernel;
        record_launch(record);
        if let Some(lse) = lse {
            self.store_lse_value(LseValue::Device(DeviceLse {
                slice: lse,
                dev: dev.clone(),
            }))?;
        }
        Ok((CudaStorage::wrap_cuda_slice(o, dev), out_shape))
    }
}

/// A packed `(total, h, d)` input over candle's buffer: dims `[1, h, total, d]` (the packed
/// layout of `attn_kernels::seqs`), candle's strides, from the layout's start offset. No copy.
fn packed_input<'a, T>(name: &str, slice: &'a CudaSlice<T>, l: &Layout) -> Result<KTensor<'a, T>> {
    let (dims, st) = (l.dims(), l.stride());
    if dims[2] > 1 && st[2] != 1 {
        bail!(
            "attn-candle: {name}'s head dim (the last) must be contiguous on CUDA (stride 1), got strides {st:?} for shape {dims:?}; call .contiguous() on it first"
        );
    }
    let start = l.start_offset();
    if start > slice.len() {
        bail!(
            "attn-candle: {name}'s layout starts at element {start} of a {}-element buffer",
            slice.len()
        );
    }
    Ok(KTensor::new(
        slice.slice(start..),
        [1, dims[1], dims[0], dims[2]],
        Strides {
            batch: st[0] * dims[0].max(1),
            head: st[1],
            row: st[0],
        },
    ))
}

impl crate::FlashAttnVarLen {
    /// `cuda_fwd`: packed sequences through `FlashAttention::forward_sequences` on candle's
    /// stream, over candle's buffers (no copies of q, k, v; the prefix sums, already read to
    /// the host, are uploaded as int32 and validated there too).
    pub(crate) fn cuda(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        match storage_dtype(q, k, v)? {
            DType::F16 => self.cuda_typed::<f16>(q, ql, k, kl, v, vl),
            _ => self.cuda_typed::<bf16>(q, ql, k, kl, v, vl),
        }
    }

    fn cuda_typed<T>(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> Result<(CudaStorage, Shape)>
    where
        T: StorageType + CudaDType + DeviceRepr + ValidAsZeroBits,
    {
        let (total_q, hq, d, _, hkv) = self.dims(ql, kl, vl)?;
        let dev = q.device().clone();
        let out_shape = Shape::from((total_q, hq, d));
        let batch = self.cu_q.len() - 1;
        let (max_q, max_k) = (
            crate::longest_sequence(&self.cu_q),
            crate::longest_sequence(&self.cu_k),
        );
        if batch == 0 || total_q == 0 || hq == 0 || d == 0 || max_k == 0 {
            // Nothing to compute, or rows that see no key: O = 0 (as on the CPU).
            let o = dev.alloc_zeros::<T>(out_shape.elem_count())?;
            return Ok((CudaStorage::wrap_cuda_slice(o, dev), out_shape));
        }
        let shape = AttnShape::new(batch, hq, hkv, max_q.max(1), max_k, d).map_err(err)?;
        let problem = self.attn.problem(shape, self.max_seqlen_k)?;
        let (stream, gpu) = launcher(&dev)?;
        let (qs, ks, vs) = (
            q.as_cuda_slice::<T>()?,
            k.as_cuda_slice::<T>()?,
            v.as_cuda_slice::<T>()?,
        );
        let (qt, kt, vt) = (
            packed_input("q", qs, ql)?,
            packed_input("k", ks, kl)?,
            packed_input("v", vs, vl)?,
        );
        let (qa, ka, va) = (
            address(qt.view(), &stream),
            address(kt.view(), &stream),
            address(vt.view(), &stream),
        );
        let cu_q = dev.clone_htod(&self.cu_q)?;
        let cu_k = dev.clone_htod(&self.cu_k)?;
        let mut o = dev.alloc_zeros::<T>(out_shape.elem_count())?;
        let od = [1, hq, total_q, d];
        let info = gpu
            .forward_sequences(
                Forward {
                    problem: &problem,
                    q: qt,
                    k: kt,
                    v: vt,
                    // (total_q, hq, d) contiguous, like candle-flash-attn's output.
                    o: TensorMut::contiguous(o.as_view_mut(), od, KLayout::Bshd),
                    lse: None,
                    options: ForwardOptions::default(),
                },
                Sequences {
                    queries: QueryRows::Packed {
                        cu_seqlens: Indices::new(cu_q.as_view()).with_host(&self.cu_q),
                    },
                    keys: KeyRows::Packed {
                        cu_seqlens: Indices::new(cu_k.as_view()).with_host(&self.cu_k),
                    },
                    seqused_k: None,
                },
            )
            .map_err(kernel_error)?;
        record_launch(CudaLaunchRecord {
            q: qa,
            k: ka,
            v: va,
            o: o.device_ptr(&stream).0,
            lse: None,
            stream: stream.cu_stream() as usize,
            kernel: info.kernel,
        });
        Ok((CudaStorage::wrap_cuda_slice(o, dev), out_shape))
    }
}

impl crate::FlashAttnVarLenPaged {
    /// `cuda_fwd`: packed queries against the paged caches through
    /// `FlashAttention::forward_sequences` on candle's stream, over candle's buffers (the caches
    /// are read in place: `(num_blocks, page_size, Hkv, D)` is the `[B, S, H, D]` stride set
    /// with B = pages, S = page rows). The indices, already on the host, are uploaded as int32
    /// and their host copies validated again by attn-kernels.
    pub(crate) fn cuda(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        if self.attn.kv_fp8(k.dtype(), v.dtype())? {
            return match kv_fp8_query_dtype(q)? {
                DType::F16 => self.cuda_typed::<f16, true>(q, ql, k, kl, v, vl),
                _ => self.cuda_typed::<bf16, true>(q, ql, k, kl, v, vl),
            };
        }
        match storage_dtype(q, k, v)? {
            DType::F16 => self.cuda_typed::<f16, false>(q, ql, k, kl, v, vl),
            _ => self.cuda_typed::<bf16, false>(q, ql, k, kl, v, vl),
        }
    }

    /// KV_FP8: the caches are E4M3 (`forward_kv_fp8`, the op's scales).
    fn cuda_typed<T, const KV_FP8: bool>(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> Result<(CudaStorage, Shape)>
    where
        T: StorageType + CudaDType + DeviceRepr + ValidAsZeroBits,
    {
        let (total_q, hq, d, _, _, hkv) = self.dims(ql, kl, vl)?;
        let dev = q.device().clone();
        let out_shape = Shape::from((total_q, hq, d));
        let batch = self.cu_q.len() - 1;
        let max_q = self
            .cu_q
            .windows(2)
            .map(|w| (w[1] - w[0]).max(0) as usize)
            .max()
            .unwrap_or(0);
        if total_q == 0 || hq == 0 || d == 0 {
            let o = dev.alloc_zeros::<T>(out_shape.elem_count())?;
            return Ok((CudaStorage::wrap_cuda_slice(o, dev), out_shape));
        }
        let shape = AttnShape::new(batch, hq, hkv, max_q.max(1), self.max_seqlen_k.max(1), d)
            .map_err(err)?;
        let problem = self.attn.problem(shape, self.max_seqlen_k)?;
        let (stream, gpu) = launcher(&dev)?;
        let qt = packed_input("q", q.as_cuda_slice::<T>()?, ql)?;
        let qa = address(qt.view(), &stream);
        let cu_q = dev.clone_htod(&self.cu_q)?;
        let table = dev.clone_htod(&self.block_table)?;
        let used = dev.clone_htod(&self.seqused_k)?;
        let mut o = dev.alloc_zeros::<T>(out_shape.elem_count())?;
        let ot = TensorMut::contiguous(o.as_view_mut(), [1, hq, total_q, d], KLayout::Bshd);
        let seqs = Sequences {
            queries: QueryRows::Packed {
                cu_seqlens: Indices::new(cu_q.as_view()).with_host(&self.cu_q),
            },
            keys: KeyRows::Paged {
                block_table: Indices::new(table.as_view()).with_host(&self.block_table),
            },
            seqused_k: Some(Indices::new(used.as_view()).with_host(&self.seqused_k)),
        };
        let (ka, va);
        let info = if KV_FP8 {
            let (kt, vt) = (
                input_view("k_cache", codes("k_cache", k)?, kl)?,
                input_view("v_cache", codes("v_cache", v)?, vl)?,
            );
            (ka, va) = (address(kt.view(), &stream), address(vt.view(), &stream));
            let scales =
                (self.attn.kv_scales.as_ref()).ok_or_else(|| err(crate::KV_FP8_NEEDS_SCALES))?;
            let (kg, vg) = (scales.k.storage_and_layout(), scales.v.storage_and_layout());
            gpu.forward_kv_fp8(
                ForwardKvFp8 {
                    problem: &problem,
                    q: qt,
                    k: kt,
                    v: vt,
                    scales: KvScales {
                        k: scale_view("k_scale", &kg.0, kg.1)?,
                        v: scale_view("v_scale", &vg.0, vg.1)?,
                    },
                    o: ot,
                    lse: None,
                    options: ForwardOptions::default(),
                },
                Some(seqs),
            )
        } else {
            let (kt, vt) = (
                input("k_cache", k.as_cuda_slice::<T>()?, kl)?,
                input("v_cache", v.as_cuda_slice::<T>()?, vl)?,
            );
            (ka, va) = (address(kt.view(), &stream), address(vt.view(), &stream));
            gpu.forward_sequences(
                Forward {
                    problem: &problem,
                    q: qt,
                    k: kt,
                    v: vt,
                    o: ot,
                    lse: None,
                    options: ForwardOptions::default(),
                },
                seqs,
            )
        }
        .map_err(kernel_error)?;
        record_launch(CudaLaunchRecord {
            q: qa,
            k: ka,
            v: va,
            o: o.device_ptr(&stream).0,
            lse: None,
            stream: stream.cu_stream() as usize,
            kernel: info.kernel,
        });
        Ok((CudaStorage::wrap_cuda_slice(o, dev), out_shape))
    }
}

/// A `(b, s, h, d)` tensor's storage as a kernel input (no copy); an error if it is not on a
/// CUDA device.
fn cuda_input<'a, T: CudaDType>(
    name: &str,
    storage: &'a Storage,
    l: &Layout,
) -> Result<KTensor<'a, T>> {
    match storage {
        Storage::Cuda(s) => input(name, s.as_cuda_slice::<T>()?, l),
        _ => Err(err(format!("{name} must be on the CUDA device, like q"))),
    }
}

impl FlashAttn {
    /// The backward on candle's stream: dQ, dK, dV through `FlashAttention::backward`, over
    /// candle's buffers with candle's strides (no copies of q, k, v), the gradients allocated
    /// through candle's device, `(b, s, h, d)` contiguous. `problem` carries the op's
    /// features (window, softcap, ALiBi), which the backward kernels differentiate.
    ///
    /// The forward's LSE is **recomputed**: the forward runs again here with its LSE output
    /// (one more forward, about a quarter of the backward's work). Keeping it from the
    /// forward pass would hold an LSE buffer alive for every op of the graph, backward or
    /// not, and make the op stateful; the recomputed O and LSE are also consistent with each
    /// other by construction.
    pub(crate) fn cuda_backward(
        &self,
        problem: &attn_ref::Problem,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        d_o: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        // Detached: the recomputation must not grow the graph being differentiated.
        let (q, k, v) = (q.detach(), k.detach(), v.detach());
        let (o, lse) = self.forward_with_lse(&q, &k, &v)?;
        // The kernels read dO with its strides when its head dim is contiguous and no stride
        // is 0; candle's gradients of a sum are broadcasts (stride 0), made contiguous here.
        let d_o = if d_o.stride().iter().all(|&s| s != 0) && d_o.stride().last() == Some(&1) {
            d_o.detach()
        } else {
            d_o.contiguous()?
        };
        match q.dtype() {
            DType::F16 => backward_typed::<f16>(problem, [&q, &k, &v, &o, &d_o], &lse),
            DType::BF16 => backward_typed::<bf16>(problem, [&q, &k, &v, &o, &d_o], &lse),
            dt => Err(err(format!(
                "unsupported dtype {dt:?} on CUDA: the kernels take f16 or bf16"
            ))),
        }
    }
}

/// The typed backward: `tensors` are q, k, v, o, dO, each `(b, s, h, d)` on one CUDA device.
fn backward_typed<T>(
    problem: &attn_ref::Problem,
    tensors: [&Tensor; 5],
    lse: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)>
where
    T: StorageType + CudaDType + DeviceRepr + ValidAsZeroBits,
{
    let s = problem.shape();
    let (b, hq, hkv, sq, sk, d) = (
        s.batch(),
        s.q_heads(),
        s.kv_heads(),
        s.q_len(),
        s.kv_len(),
        s.head_dim(),
    );
    let candle_core::Device::Cuda(dev) = tensors[0].device() else {
        bail!("attn-candle: the CUDA backward needs q on a CUDA device");
    };
    let dev = dev.clone();
    let [qg, kg, vg, og, dog] = tensors.map(|t| t.storage_and_layout());
    let qt = cuda_input::<T>("q", &qg.0, qg.1)?;
    let kt = cuda_input::<T>("k", &kg.0, kg.1)?;
    let vt = cuda_input::<T>("v", &vg.0, vg.1)?;
    let ot = cuda_input::<T>("o", &og.0, og.1)?;
    let dot = cuda_input::<T>("the output gradient", &dog.0, dog.1)?;
    let (lg, ll) = lse.storage_and_layout();
    let Storage::Cuda(ls) = &*lg else {
        bail!("attn-candle: the recomputed LSE is not on the CUDA device");
    };
    let lse_view = ls.as_cuda_slice::<f32>()?.slice(ll.start_offset()..);

    let (stream, gpu) = launcher(&dev)?;
    let mut dq = dev.alloc_zeros::<T>(b * sq * hq * d)?;
    let mut dk = dev.alloc_zeros::<T>(b * sk * hkv * d)?;
    let mut dv = dev.alloc_zeros::<T>(b * sk * hkv * d)?;
    let mut record = CudaLaunchRecord {
        q: address(qt.view(), &stream),
        k: address(kt.view(), &stream),
        v: address(vt.view(), &stream),
        o: address(ot.view(), &stream),
        lse: Some(address(&lse_view, &stream)),
        stream: stream.cu_stream() as usize,
        kernel: String::new(),
    };
    let info = gpu
        .backward(Backward {
            problem,
            q: qt,
            k: kt,
            v: vt,
            o: ot,
            lse: lse_view,
            d_o: dot,
            // (b, s, h, d) contiguous, like the inputs candle-flash-attn takes.
            dq: TensorMut::contiguous(dq.as_view_mut(), [b, hq, sq, d], KLayout::Bshd),
            dk: TensorMut::contiguous(dk.as_view_mut(), [b, hkv, sk, d], KLayout::Bshd),
            dv: TensorMut::contiguous(dv.as_view_mut(), [b, hkv, sk, d], KLayout::Bshd),
            options: BackwardOptions::default(),
        })
        .map_err(kernel_error)?;
    record.kernel = info.kernel;
    record_launch(record);
    let wrap = |slice: CudaSlice<T>, shape: (usize, usize, usize, usize)| {
        let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev.clone()));
        Tensor::from_storage(storage, shape, BackpropOp::none(), false)
    };
    Ok((
        wrap(dq, (b, sq, hq, d)),
        wrap(dk, (b, sk, hkv, d)),
        wrap(dv, (b, sk, hkv, d)),
    ))
}

impl crate::fp8::FlashAttnFp8 {
    /// `cuda_fwd` with the output type chosen: `FlashAttention::forward_fp8` on candle's
    /// stream over the codes and scales in place; the output from candle's device,
    /// `(b, s, h, d)` contiguous. The caller checked the dtypes and the scales' shapes.
    pub(crate) fn cuda_typed<T>(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> Result<(CudaStorage, Shape)>
    where
        T: StorageType + CudaDType + DeviceRepr + ValidAsZeroBits,
    {
        let Dims {
            b,
            sq,
            sk,
            hq,
            hkv,
            d,
        } = check_dims(ql, kl, vl)?;
        let dev = q.device().clone();
        let out_shape = Shape::from((b, sq, hq, d));
        if b == 0 || sq == 0 || hq == 0 || d == 0 || sk == 0 {
            self.attn.check_scale()?;
            let o = dev.alloc_zeros::<T>(out_shape.elem_count())?;
            return Ok((CudaStorage::wrap_cuda_slice(o, dev), out_shape));
        }
        let shape = AttnShape::new(b, hq, hkv, sq, sk, d).map_err(err)?;
        let problem = self.attn.problem(shape, sk)?;
        let (stream, gpu) = launcher(&dev)?;
        let (qt, kt, vt) = (
            input_view("q", codes("q", q)?, ql)?,
            input_view("k", codes("k", k)?, kl)?,
            input_view("v", codes("v", v)?, vl)?,
        );
        let [qg, kg, vg] = self.scales.each_ref().map(|t| t.storage_and_layout());
        let scales = Fp8Scales {
            q: scale_view("q_scale", &qg.0, qg.1)?,
            k: scale_view("k_scale", &kg.0, kg.1)?,
            v: scale_view("v_scale", &vg.0, vg.1)?,
        };
        let mut o = dev.alloc_zeros::<T>(out_shape.elem_count())?;
        let mut record = CudaLaunchRecord {
            q: address(qt.view(), &stream),
            k: address(kt.view(), &stream),
            v: address(vt.view(), &stream),
            o: o.device_ptr(&stream).0,
            lse: None,
            stream: stream.cu_stream() as usize,
            kernel: String::new(),
        };
        let info = gpu
            .forward_fp8(Fp8Forward {
                problem: &problem,
                q: qt,
                k: kt,
                v: vt,
                scales,
                o: TensorMut::contiguous(o.as_view_mut(), [b, hq, sq, d], KLayout::Bshd),
                lse: None,
                options: Fp8Options::default(),
            })
            .map_err(kernel_error)?;
        record.kernel = info.kernel;
        record_launch(record);
        Ok((CudaStorage::wrap_cuda_slice(o, dev), out_shape))
    }
}

/// A packed `(total, h, d)` tensor's storage as a kernel input (no copy).
fn cuda_packed_input<'a, T: CudaDType>(
    name: &str,
    storage: &'a Storage,
    l: &Layout,
) -> Result<KTensor<'a, T>> {
    match storage {
        Storage::Cuda(s) => packed_input(name, s.as_cuda_slice::<T>()?, l),
        _ => Err(err(format!("{name} must be on the CUDA device, like q"))),
    }
}

impl crate::FlashAttnVarLen {
    /// The varlen backward on candle's stream: the forward recomputed with its LSE
    /// (`[Hq, total_q]`) through `FlashAttention::forward_sequences`, then
    /// `FlashAttention::backward_with` over the same packed sequences; dQ `(total_q, Hq, D)`,
    /// dK and dV `(total_k, Hkv, D)`, contiguous, from candle's device. `problem` is the
    /// batch template (the longest sequences, the op's features); the prefix sums travel with
    /// their host copies, which attn-kernels validates.
    pub(crate) fn cuda_backward(
        &self,
        problem: &attn_ref::Problem,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        d_o: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (q, k, v) = (q.detach(), k.detach(), v.detach());
        let d_o = d_o.contiguous()?.detach();
        match q.dtype() {
            DType::F16 => self.backward_typed::<f16>(problem, [&q, &k, &v, &d_o]),
            DType::BF16 => self.backward_typed::<bf16>(problem, [&q, &k, &v, &d_o]),
            dt => Err(err(format!(
                "unsupported dtype {dt:?} on CUDA: the kernels take f16 or bf16"
            ))),
        }
    }

    fn backward_typed<T>(
        &self,
        problem: &attn_ref::Problem,
        tensors: [&Tensor; 4],
    ) -> Result<(Tensor, Tensor, Tensor)>
    where
        T: StorageType + CudaDType + DeviceRepr + ValidAsZeroBits,
    {
        let s = problem.shape();
        let (hq, hkv, d) = (s.q_heads(), s.kv_heads(), s.head_dim());
        let candle_core::Device::Cuda(dev) = tensors[0].device() else {
            bail!("attn-candle: the CUDA backward needs q on a CUDA device");
        };
        let dev = dev.clone();
        let [qg, kg, vg, dog] = tensors.map(|t| t.storage_and_layout());
        let qt = cuda_packed_input::<T>("q", &qg.0, qg.1)?;
        let kt = cuda_packed_input::<T>("k", &kg.0, kg.1)?;
        let vt = cuda_packed_input::<T>("v", &vg.0, vg.1)?;
        let dot = cuda_packed_input::<T>("the output gradient", &dog.0, dog.1)?;
        let total_q = tensors[0].dim(0)?;
        let total_k = tensors[1].dim(0)?;
        let (stream, gpu) = launcher(&dev)?;
        let cu_q = dev.clone_htod(&self.cu_q)?;
        let cu_k = dev.clone_htod(&self.cu_k)?;
        let seqs = || Sequences {
            queries: QueryRows::Packed {
                cu_seqlens: Indices::new(cu_q.as_view()).with_host(&self.cu_q),
            },
            keys: KeyRows::Packed {
                cu_seqlens: Indices::new(cu_k.as_view()).with_host(&self.cu_k),
            },
            seqused_k: None,
        };
        let (qd, kd) = ([1, hq, total_q, d], [1, hkv, total_k, d]);
        let mut o = dev.alloc_zeros::<T>(total_q * hq * d)?;
        let mut lse = dev.alloc_zeros::<f32>(hq * total_q)?;
        let mut record = CudaLaunchRecord {
            q: address(qt.view(), &stream),
            k: address(kt.view(), &stream),
            v: address(vt.view(), &stream),
            o: 0,
            lse: None,
            stream: stream.cu_stream() as usize,
            kernel: String::new(),
        };
        gpu.forward_sequences(
            Forward {
                problem,
                q: qt,
                k: kt,
                v: vt,
                o: TensorMut::contiguous(o.as_view_mut(), qd, KLayout::Bshd),
                lse: Some(lse.as_view_mut()),
                options: ForwardOptions::default(),
            },
            seqs(),
        )
        .map_err(kernel_error)?;
        record.o = o.device_ptr(&stream).0;
        record.lse = Some(lse.device_ptr(&stream).0);
        let mut dq = dev.alloc_zeros::<T>(total_q * hq * d)?;
        let mut dk = dev.alloc_zeros::<T>(total_k * hkv * d)?;
        let mut dv = dev.alloc_zeros::<T>(total_k * hkv * d)?;
        // The forward consumed its views; the backward reads q, k, v through fresh ones.
        let qt = cuda_packed_input::<T>("q", &qg.0, qg.1)?;
        let kt = cuda_packed_input::<T>("k", &kg.0, kg.1)?;
        let vt = cuda_packed_input::<T>("v", &vg.0, vg.1)?;
        let info = gpu
            .backward_with(
                Backward {
                    problem,
                    q: qt,
                    k: kt,
                    v: vt,
                    o: KTensor::contiguous(o.as_view(), qd, KLayout::Bshd),
                    lse: lse.as_view(),
                    d_o: dot,
                    dq: TensorMut::contiguous(dq.as_view_mut(), qd, KLayout::Bshd),
                    dk: TensorMut::contiguous(dk.as_view_mut(), kd, KLayout::Bshd),
                    dv: TensorMut::contiguous(dv.as_view_mut(), kd, KLayout::Bshd),
                    options: BackwardOptions::default(),
                },
                BackwardExtras {
                    seqs: seqs(),
                    dsinks: None,
                },
            )
            .map_err(kernel_error)?;
        record.kernel = info.kernel;
        record_launch(record);
        let wrap = |slice: CudaSlice<T>, shape: (usize, usize, usize)| {
            let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev.clone()));
            Tensor::from_storage(storage, shape, BackpropOp::none(), false)
        };
        Ok((
            wrap(dq, (total_q, hq, d)),
            wrap(dk, (total_k, hkv, d)),
            wrap(dv, (total_k, hkv, d)),
        ))
    }
}
