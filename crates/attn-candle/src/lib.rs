//! `attn-candle` puts this workspace's attention behind [candle](https://github.com/huggingface/candle)'s
//! API, with the function names and signatures of `candle-flash-attn`, so that a candle model
//! switches with one `use` line:
//!
//! ```text
//! // use candle_flash_attn::{flash_attn, flash_attn_windowed};
//! use attn_candle::{flash_attn, flash_attn_windowed};
//! ```
//!
//! Every entry point is a candle [`CustomOp3`](candle_core::CustomOp3) over `(q, k, v)`. On the
//! CPU device it runs `attn-ref`'s f64 reference ([`attn_ref::reference::forward`]) on f32,
//! f16, bf16 (and f64) storage of any strides, and returns the output in the input dtype. With
//! the `cuda` feature, on a CUDA device it launches `attn-kernels` on candle's stream
//! (`CudaDevice::cuda_stream()`) over candle's own buffers and strides (no
//! copies), f16 and bf16, with windows, softcap, ALiBi and varlen batches; anything the kernels
//! lack is a candle error naming it.
//!
//! FP8: [`flash_attn_kv_fp8`] and [`flash_attn_varlen_paged_kv_fp8`] read an E4M3 KV cache
//! (candle `F8E4M3` codes with f32 scales per KV head or per cache; Q and the output f16/bf16),
//! and [`flash_attn_fp8`] takes Q, K and V all as E4M3 with scales per (batch, head). The CPU
//! path decodes the codes exactly and runs the reference; CUDA reads them in place.
//!
//! `Tensor::backward` runs through the ops (`CustomOp3::bwd`): on the CPU through attn-ref's
//! f64 reference backward ([`attn_ref::reference::backward()`]), gradients in the inputs'
//! dtype; on CUDA through attn-kernels' backward kernels on candle's stream, after
//! recomputing the forward's LSE. Either causal alignment, GQA, sliding windows, softcap,
//! ALiBi and varlen batches have gradients on both devices; the paged op and E4M3 KV caches
//! (inference formats) are a candle error whose text contains [`BACKWARD_UNSUPPORTED`]
//! followed by the feature's name.
//!
//! Layouts are `candle-flash-attn`'s: Q `(batch, seq_q, heads_q, head_dim)`, K and V
//! `(batch, seq_k, heads_kv, head_dim)` with `heads_kv` dividing `heads_q` (GQA/MQA), and the
//! output shaped like Q. [`sdpa_bhsd`] takes candle-nn's `(batch, heads, seq, head_dim)`.
//! Causal masks are bottom-right aligned (FlashAttention's convention: key `j` is visible to
//! query `i` iff `j <= i + Sk - Sq`); [`flash_attn_causal_top_left`] and [`Causal::TopLeft`]
//! give PyTorch's top-left alignment.
//!
//! ```
//! use attn_candle::{flash_attn, flash_attn_with_lse};
//! use candle_core::{DType, Device, Tensor};
//!
//! let dev = Device::Cpu;
//! // (batch, seq, heads, head_dim); GQA: 4 query heads over 2 KV heads.
//! let q = Tensor::randn(0f32, 1.0, (1, 5, 4, 16), &dev)?;
//! let k = Tensor::randn(0f32, 1.0, (1, 7, 2, 16), &dev)?;
//! let v = Tensor::randn(0f32, 1.0, (1, 7, 2, 16), &dev)?;
//! let scale = 1.0 / (16f32).sqrt();
//!
//! let out = flash_attn(&q.to_dtype(DType::BF16)?, &k.to_dtype(DType::BF16)?,
//!                      &v.to_dtype(DType::BF16)?, scale, true)?;
//! assert_eq!(out.dims(), &[1, 5, 4, 16]);
//! assert_eq!(out.dtype(), DType::BF16);
//!
//! let (out, lse) = flash_attn_with_lse(&q, &k, &v, scale, true)?;
//! assert_eq!(out.dims(), &[1, 5, 4, 16]);
//! assert_eq!(lse.dims(), &[1, 4, 5]); // (batch, heads, seq), f32
//! # Ok::<(), candle_core::Error>(())
//! ```
//!
//! Gradients:
//!
//! ```
//! use attn_candle::flash_attn;
//! use candle_core::{Device, Var};
//!
//! let dev = Device::Cpu;
//! let q = Var::randn(0f32, 1.0, (1, 5, 4, 16), &dev)?;
//! let k = Var::randn(0f32, 1.0, (1, 7, 2, 16), &dev)?;
//! let v = Var::randn(0f32, 1.0, (1, 7, 2, 16), &dev)?;
//! let out = flash_attn(q.as_tensor(), k.as_tensor(), v.as_tensor(), 0.25, true)?;
//! let grads = out.sqr()?.sum_all()?.backward()?;
//! let dk = grads.get(k.as_tensor()).expect("k has a gradient");
//! assert_eq!(dk.dims(), &[1, 7, 2, 16]); // summed over the query heads of each KV head
//! # Ok::<(), candle_core::Error>(())
//! ```

#![warn(missing_docs)]

use std::sync::{Arc, Mutex};

use attn_ref::reference::{forward, varlen::forward_varlen, RefOutput};
use attn_ref::{Alibi, AttnShape, Element, Problem};
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Layout, Result, Shape, Tensor};
use half::{bf16, f16};

pub use attn_ref::Causal;

mod backward;
#[cfg(feature = "cuda")]
mod cuda;
mod fp8;

#[cfg(feature = "cuda")]
#[doc(hidden)]
pub use cuda::{last_cuda_launch, CudaLaunchRecord};
pub use fp8::flash_attn_fp8;

/// The error `cuda_fwd` returns when the crate was built without its `cuda` feature.
pub const CUDA_FEATURE_DISABLED: &str =
    "attn-candle was built without the `cuda` feature: enable it (README: the build story) or use the CPU device";

/// The error for E4M3 K/V given without scales.
const KV_FP8_NEEDS_SCALES: &str =
    "k and v are F8E4M3 codes but the op has no scales: use flash_attn_kv_fp8 or FlashAttn::kv_fp8_scales";

/// In the error `bwd` returns for what no backward implements (the paged op, E4M3 KV
/// caches), after the `attn-candle: ` prefix; the message goes on to name the feature.
pub const BACKWARD_UNSUPPORTED: &str = "backward is not implemented for";

/// The longest sequence of a prefix-sum array (`cu_seqlens`); 0 for none.
#[cfg(feature = "cuda")]
fn longest_sequence(cu: &[i32]) -> usize {
    cu.windows(2)
        .map(|w| (w[1] - w[0]).max(0) as usize)
        .max()
        .unwrap_or(0)
}

fn err(msg: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(format!("attn-candle: {msg}"))
}

/// The LSE an op computed: on the host (CPU path) or in a device buffer (CUDA path).
enum LseValue {
    Host(Vec<f32>),
    #[cfg(feature = "cuda")]
    Device(cuda::DeviceLse),
}

impl std::fmt::Debug for LseValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LseValue::Host(v) => write!(f, "LseValue::Host({} values)", v.len()),
            #[cfg(feature = "cuda")]
            LseValue::Device(_) => f.write_str("LseValue::Device"),
        }
    }
}

/// Where a [`FlashAttn`] op writes the LSE it computed (`flash_attn_with_lse`).
type LseSlot = Arc<Mutex<Option<LseValue>>>;

/// The attention op: softmax scale, causal mode, sliding window, softcap and ALiBi slopes.
///
/// Build one with [`FlashAttn::new`] and the builder methods, then run it with
/// [`FlashAttn::forward`] (`(b, s, h, d)`), [`FlashAttn::forward_with_lse`] or
/// [`FlashAttn::forward_bhsd`]. It is also a [`candle_core::CustomOp3`], so
/// `q.apply_op3(&k, &v, op)` works.
///
/// Score of key `j` for query `i` (FlashAttention's order): `s = scale·q·k`, then softcap
/// `c·tanh(s/c)`, then ALiBi `− slope·|i + Sk − Sq − j|`; keys outside causal ∩ window are
/// masked. A row with no visible key has output 0 and LSE −∞.
#[derive(Debug, Clone)]
pub struct FlashAttn {
    softmax_scale: f32,
    causal: Causal,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: Option<f32>,
    alibi: Option<Alibi>,
    kv_scales: Option<KvFp8Scales>,
    lse: Option<LseSlot>,
}

/// The dequantization scales of an E4M3 KV cache ([`FlashAttn::kv_fp8_scales`]): f32
/// tensors `(heads_kv,)` (per KV head) or `(1,)` (one for the cache), on the inputs' device.
#[derive(Debug, Clone)]
struct KvFp8Scales {
    k: Tensor,
    v: Tensor,
}

impl FlashAttn {
    /// Plain attention with this softmax scale (finite and > 0), no mask.
    pub fn new(softmax_scale: f32) -> Self {
        Self {
            softmax_scale,
            causal: Causal::None,
            window_size_left: None,
            window_size_right: None,
            softcap: None,
            alibi: None,
            kv_scales: None,
            lse: None,
        }
    }

    /// Causal mask and its alignment ([`Causal::BottomRight`] is FlashAttention's).
    pub fn causal(mut self, causal: Causal) -> Self {
        self.causal = causal;
        self
    }

    /// Sliding window in candle-flash-attn's convention: `None` is unbounded on that side, and
    /// a size larger than Sk is too. Bottom-right aligned: key `j` is visible to query `i`
    /// iff `i + Sk − Sq − left ≤ j ≤ i + Sk − Sq + right`. `(None, Some(0))` is the
    /// bottom-right causal mask.
    pub fn window(mut self, left: Option<usize>, right: Option<usize>) -> Self {
        self.window_size_left = left;
        self.window_size_right = right;
        self
    }

    /// Softcap `c`: `s ← c·tanh(s/c)`. `0.0` means none (FlashAttention's convention); a
    /// negative or non-finite value is an error when the op runs.
    pub fn softcap(mut self, softcap: f32) -> Self {
        self.softcap = if softcap == 0.0 { None } else { Some(softcap) };
        self
    }

    /// ALiBi slopes: an f32 tensor `[Hq]` (one slope per query head) or `[B, Hq]` (per batch
    /// entry and head). Errors on another dtype or rank; lengths are checked when the op runs.
    pub fn alibi(mut self, slopes: &Tensor) -> Result<Self> {
        if slopes.dtype() != DType::F32 {
            return Err(err(format!(
                "ALiBi slopes must be f32, got {:?}",
                slopes.dtype()
            )));
        }
        self.alibi = Some(match slopes.rank() {
            1 => Alibi::PerHead(slopes.to_vec1::<f32>()?),
            2 => Alibi::PerBatchHead(slopes.flatten_all()?.to_vec1::<f32>()?),
            r => {
                return Err(err(format!(
                    "ALiBi slopes must be [Hq] or [B, Hq], got rank {r} shape {:?}",
                    slopes.dims()
                )))
            }
        });
        Ok(self)
    }

    /// An E4M3 KV cache: K and V are candle `F8E4M3` tensors holding codes, element =
    /// `code · scale` with `k_scale` / `v_scale` f32 tensors `(heads_kv,)` (one scale per KV
    /// head) or `(1,)` (one per cache), like vLLM's `kv_cache_dtype="fp8"`. Q and the output
    /// stay f16/bf16 (f32 too on the CPU). On CUDA the kernels read the codes in place (half
    /// the bytes of an f16 cache) and fold the scales into the scores and the output; the CPU
    /// path dequantizes exactly (attn-quant's decoding) and runs the f64 reference. Composes
    /// with causal masks, windows, softcap, ALiBi, GQA and the paged op; no backward. The
    /// scale values are not checked (a zero or non-finite scale gives zero or non-finite
    /// outputs). Errors on another dtype or rank; lengths are checked when the op runs.
    pub fn kv_fp8_scales(mut self, k_scale: &Tensor, v_scale: &Tensor) -> Result<Self> {
        for (name, t) in [("k_scale", k_scale), ("v_scale", v_scale)] {
            if t.dtype() != DType::F32 || t.rank() != 1 {
                return Err(err(format!(
                    "{name} must be an f32 tensor (heads_kv,) or (1,), got {:?} of shape {:?}",
                    t.dtype(),
                    t.dims()
                )));
            }
        }
        if k_scale.dims() != v_scale.dims() {
            return Err(err(format!(
                "k_scale {:?} and v_scale {:?} must have the same length (both per KV head or both per cache)",
                k_scale.dims(),
                v_scale.dims()
            )));
        }
        self.kv_scales = Some(KvFp8Scales {
            k: k_scale.clone(),
            v: v_scale.clone(),
        });
        Ok(self)
    }

    /// The softmax scale's own check, for the empty problems that never reach attn-ref's
    /// validation (the same rule: finite and > 0).
    fn check_scale(&self) -> Result<()> {
        if !self.softmax_scale.is_finite() || self.softmax_scale <= 0.0 {
            return Err(err(format!(
                "softmax scale must be finite and > 0, got {}",
                self.softmax_scale
            )));
        }
        Ok(())
    }

    /// Whether K and V are an E4M3 cache (`F8E4M3` codes, with scales); an error when the
    /// codes and the scales do not come together.
    fn kv_fp8(&self, k: DType, v: DType) -> Result<bool> {
        let codes = (k == DType::F8E4M3, v == DType::F8E4M3);
        match (codes, self.kv_scales.is_some()) {
            ((true, true), true) => Ok(true),
            ((false, false), false) => Ok(false),
            ((true, true), false) => Err(err(KV_FP8_NEEDS_SCALES)),
            ((false, false), true) => Err(err(format!(
                "the op has E4M3 KV scales but k and v are {k:?}: scales go with F8E4M3 k and v"
            ))),
            _ => Err(err(format!(
                "k is {k:?} and v is {v:?}: an E4M3 KV cache has both as F8E4M3"
            ))),
        }
    }

    /// The E4M3 cache's scales on the host, checked against `heads_kv` (the CPU path).
    fn host_kv_scales(&self, heads_kv: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let s = self
            .kv_scales
            .as_ref()
            .ok_or_else(|| err(KV_FP8_NEEDS_SCALES))?;
        let (k, v) = (s.k.to_vec1::<f32>()?, s.v.to_vec1::<f32>()?);
        if k.len() != heads_kv && k.len() != 1 {
            return Err(err(format!(
                "the KV scales have {} entries: give one per KV head ({heads_kv}) or one for the cache",
                k.len()
            )));
        }
        Ok((k, v))
    }

    /// Runs the op on `(b, s, h, d)` tensors; the output is `(b, seq_q, heads_q, d)`.
    pub fn forward(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let mut op = self.clone();
        op.lse = None;
        q.apply_op3(k, v, op)
    }

    /// Runs the op and also returns the log-sum-exp of the scaled scores, f32
    /// `(b, heads_q, seq_q)` (natural log; −∞ for rows that see no key).
    pub fn forward_with_lse(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let slot: LseSlot = Arc::new(Mutex::new(None));
        let mut op = self.clone();
        op.lse = Some(slot.clone());
        let out = q.apply_op3(k, v, op)?;
        let lse = slot
            .lock()
            .map_err(|_| err("the LSE slot was poisoned"))?
            .take()
            .ok_or_else(|| err("the op produced no LSE"))?;
        let (b, sq, hq, _) = out.dims4()?;
        let lse = match lse {
            LseValue::Host(v) => Tensor::from_vec(v, (b, hq, sq), out.device())?,
            #[cfg(feature = "cuda")]
            LseValue::Device(d) => d.into_tensor((b, hq, sq)),
        };
        Ok((out, lse))
    }

    /// Runs the op on candle-nn's `(b, h, s, d)` layout; the output is `(b, heads_q, seq_q, d)`,
    /// contiguous. The inputs are read through transposed views (no copy).
    pub fn forward_bhsd(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        for (name, t) in [("q", q), ("k", k), ("v", v)] {
            if t.rank() != 4 {
                return Err(err(format!(
                    "{name} must be (batch, heads, seq, head_dim), got shape {:?}",
                    t.dims()
                )));
            }
        }
        let out = self.forward(
            &q.transpose(1, 2)?,
            &k.transpose(1, 2)?,
            &v.transpose(1, 2)?,
        )?;
        out.transpose(1, 2)?.contiguous()
    }

    /// The problem for one shape: FlashAttention's window filter (a size above `max_k` is
    /// unbounded), `(None, Some(0))` as the bottom-right causal mask, then attn-ref's
    /// validation of scale, window, softcap and ALiBi.
    fn problem(&self, shape: AttnShape, max_k: usize) -> Result<Problem> {
        let side = |w: Option<usize>| match w {
            Some(w) if w <= max_k => w as i64,
            _ => -1,
        };
        let (left, right) = (side(self.window_size_left), side(self.window_size_right));
        let mut causal = self.causal;
        let mut window = None;
        if left < 0 && right == 0 && causal == Causal::None {
            causal = Causal::BottomRight;
        } else if left >= 0 || right >= 0 {
            window = Some((left, right));
        }
        let mut p = Problem::new(shape, causal)
            .with_scale(f64::from(self.softmax_scale))
            .map_err(err)?;
        if let Some((l, r)) = window {
            p = p.with_window(l, r).map_err(err)?;
        }
        if let Some(c) = self.softcap {
            p = p.with_softcap(f64::from(c)).map_err(err)?;
        }
        if let Some(a) = &self.alibi {
            p = p.with_alibi(a.clone()).map_err(|e| {
                err(format!(
                    "{e} (ALiBi slopes must be [Hq = {}] or [B = {}, Hq = {}])",
                    shape.q_heads(),
                    shape.batch(),
                    shape.q_heads()
                ))
            })?;
        }
        Ok(p)
    }

    fn store_lse(&self, lse: Vec<f32>) -> Result<()> {
        self.store_lse_value(LseValue::Host(lse))
    }

    fn store_lse_value(&self, lse: LseValue) -> Result<()> {
        if let Some(slot) = &self.lse {
            *slot.lock().map_err(|_| err("the LSE slot was poisoned"))? = Some(lse);
        }
        Ok(())
    }

    /// Whether the caller asked for the LSE (`forward_with_lse`).
    #[cfg(feature = "cuda")]
    fn wants_lse(&self) -> bool {
        self.lse.is_some()
    }
}

/// An element type the CPU path reads and writes.
trait Storage: Element {
    fn from_f64(x: f64) -> Self;
    fn wrap(v: Vec<Self>) -> CpuStorage;
}

impl Storage for f32 {
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn wrap(v: Vec<Self>) -> CpuStorage {
        CpuStorage::F32(v)
    }
}
impl Storage for f64 {
    fn from_f64(x: f64) -> Self {
        x
    }
    fn wrap(v: Vec<Self>) -> CpuStorage {
        CpuStorage::F64(v)
    }
}
impl Storage for f16 {
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn wrap(v: Vec<Self>) -> CpuStorage {
        CpuStorage::F16(v)
    }
}
impl Storage for bf16 {
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn wrap(v: Vec<Self>) -> CpuStorage {
        CpuStorage::BF16(v)
    }
}

/// Copies a strided tensor into a contiguous buffer whose dims are `dims` permuted by
/// `order` (`out[i_order[0]][i_order[1]]…`), reading `data` through the layout's strides and
/// start offset. Errors instead of panicking if the layout reaches outside `data`.
fn gather<T: Copy>(name: &str, data: &[T], layout: &Layout, order: &[usize]) -> Result<Vec<T>> {
    let dims = layout.dims();
    let stride = layout.stride();
    let n: usize = dims.iter().product();
    if n == 0 {
        return Ok(Vec::new());
    }
    let last: usize = layout.start_offset()
        + dims
            .iter()
            .zip(stride)
            .map(|(&d, &s)| (d - 1) * s)
            .sum::<usize>();
    if last >= data.len() {
        return Err(err(format!(
            "{name}'s layout (dims {dims:?}, strides {stride:?}, offset {}) reaches element {last} of a {}-element storage",
            layout.start_offset(),
            data.len()
        )));
    }
    let pdims: Vec<usize> = order.iter().map(|&a| dims[a]).collect();
    let pstride: Vec<usize> = order.iter().map(|&a| stride[a]).collect();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; pdims.len()];
    let rank = pdims.len();
    // The innermost dim is walked with its stride; the outer ones with an odometer.
    let (inner_n, inner_s) = (pdims[rank - 1], pstride[rank - 1]);
    loop {
        let base = layout.start_offset()
            + idx[..rank - 1]
                .iter()
                .zip(&pstride)
                .map(|(&i, &s)| i * s)
                .sum::<usize>();
        out.extend((0..inner_n).map(|t| data[base + t * inner_s]));
        let mut a = rank - 1;
        loop {
            if a == 0 {
                return Ok(out);
            }
            a -= 1;
            idx[a] += 1;
            if idx[a] < pdims[a] {
                break;
            }
            idx[a] = 0;
        }
    }
}

/// `(b, s, h, d)` dims of Q, K, V after the checks candle-flash-attn makes.
struct Dims {
    b: usize,
    sq: usize,
    sk: usize,
    hq: usize,
    hkv: usize,
    d: usize,
}

fn check_dims(ql: &Layout, kl: &Layout, vl: &Layout) -> Result<Dims> {
    let (qd, kd, vd) = (ql.dims(), kl.dims(), vl.dims());
    if qd.len() != 4 || kd.len() != 4 || vd.len() != 4 {
        return Err(err(format!(
            "q, k and v must be rank 4 (batch, seq, heads, head_dim), got shapes q {qd:?}, k {kd:?}, v {vd:?}"
        )));
    }
    if kd != vd {
        return Err(err(format!(
            "k {kd:?} and v {vd:?} must have the same shape"
        )));
    }
    if qd[0] != kd[0] || qd[3] != kd[3] {
        return Err(err(format!(
            "q {qd:?} and k {kd:?} must agree on batch (dim 0) and head_dim (dim 3)"
        )));
    }
    let dims = Dims {
        b: qd[0],
        sq: qd[1],
        sk: kd[1],
        hq: qd[2],
        hkv: kd[2],
        d: qd[3],
    };
    check_heads(dims.hq, dims.hkv)?;
    Ok(dims)
}

fn check_heads(hq: usize, hkv: usize) -> Result<()> {
    if hkv == 0 || hq % hkv != 0 {
        return Err(err(format!(
            "the number of k/v heads ({hkv}) must divide the number of query heads ({hq})"
        )));
    }
    Ok(())
}

/// Narrows the f64 reference output `[.., D]` into the storage type.
fn narrow<T: Storage>(o: &[f64]) -> Vec<T> {
    o.iter().map(|&x| T::from_f64(x)).collect()
}

impl FlashAttn {
    fn cpu_typed<T: Storage>(
        &self,
        q: &[T],
        ql: &Layout,
        k: &[T],
        kl: &Layout,
        v: &[T],
        vl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let Dims {
            b,
            sq,
            sk,
            hq,
            hkv,
            d,
        } = check_dims(ql, kl, vl)?;
        let out_shape = Shape::from((b, sq, hq, d));
        if b == 0 || sq == 0 || hq == 0 || d == 0 || sk == 0 {
            // Nothing to compute, or rows that see no key: O = 0, LSE = −∞.
            self.check_scale()?;
            self.store_lse(vec![f32::NEG_INFINITY; b * hq * sq])?;
            let zeros = vec![T::from_f64(0.0); out_shape.elem_count()];
            return Ok((T::wrap(zeros), out_shape));
        }
        let shape = AttnShape::new(b, hq, hkv, sq, sk, d).map_err(err)?;
        let problem = self.problem(shape, sk)?;
        // (b, s, h, d) → [B, H, S, D].
        let order = [0, 2, 1, 3];
        let qh = gather("q", q, ql, &order)?;
        let kh = gather("k", k, kl, &order)?;
        let vh = gather("v", v, vl, &order)?;
        let RefOutput { o, lse } = forward(&problem, &qh, &kh, &vh).map_err(err)?;
        // [B, H, S, D] → (b, s, h, d).
        let mut out = Vec::with_capacity(o.len());
        for bi in 0..b {
            for s in 0..sq {
                for h in 0..hq {
                    out.extend(narrow::<T>(&o[shape.q_offset(bi, h, s)..][..d]));
                }
            }
        }
        self.store_lse(lse.iter().map(|&x| x as f32).collect())?;
        Ok((T::wrap(out), out_shape))
    }
}

/// E4M3 codes dequantized exactly to f64 (attn-quant's decoding times a scale), contiguous in
/// the layout's dims; returns them with their contiguous layout. `scales` holds one value,
/// one per head (the axis before the last), or one per (batch, head) of a rank-4 tensor.
fn dequantize(
    name: &str,
    codes: &[float8::F8E4M3],
    layout: &Layout,
    scales: &[f32],
) -> Result<(Vec<f64>, Layout)> {
    let dims = layout.dims();
    let order: Vec<usize> = (0..dims.len()).collect();
    let codes = gather(name, codes, layout, &order)?;
    let (heads, d) = (dims[dims.len() - 2].max(1), dims[dims.len() - 1].max(1));
    // Elements per batch entry (rank 4: seq · heads · d).
    let per_batch = dims[1..].iter().product::<usize>().max(1);
    let table = attn_quant::Fp8Format::E4M3.decode_table();
    let index = |i: usize| {
        match scales.len() {
        1 => Ok(0),
        n if n == heads => Ok((i / d) % heads),
        n if dims.len() == 4 && n == dims[0] * heads => Ok((i / per_batch) * heads + (i / d) % heads),
        n => Err(err(format!(
            "{name}'s scales have {n} entries for dims {dims:?}: one, one per head or one per (batch, head)"
        ))),
    }
    };
    let out = codes
        .iter()
        .enumerate()
        .map(|(i, c)| Ok(f64::from(table[usize::from(c.to_bits())]) * f64::from(scales[index(i)?])))
        .collect::<Result<Vec<f64>>>()?;
    Ok((out, Layout::contiguous(dims)))
}

/// The f64 output storage of the CPU reference narrowed to `T`.
fn narrow_storage<T: Storage>(out: CpuStorage) -> Result<CpuStorage> {
    match out {
        CpuStorage::F64(o) => Ok(T::wrap(narrow(&o))),
        other => Err(err(format!(
            "internal: the f64 reference returned {:?}",
            other.dtype()
        ))),
    }
}

fn dtype_error(q: &CpuStorage, k: &CpuStorage, v: &CpuStorage) -> candle_core::Error {
    let (qt, kt, vt) = (q.dtype(), k.dtype(), v.dtype());
    if kt == DType::F8E4M3 && vt == DType::F8E4M3 {
        err(format!(
            "an E4M3 KV cache takes q in f32, f16 or bf16 on the CPU, got {qt:?}"
        ))
    } else if qt != kt || qt != vt {
        err(format!(
            "q, k and v must have the same dtype, got {qt:?}, {kt:?}, {vt:?}"
        ))
    } else {
        err(format!(
            "unsupported dtype {qt:?}: the CPU path takes f32, f16, bf16 or f64"
        ))
    }
}

/// The `CustomOp3` of an op with a generic `cpu_typed`, a `cuda` and a `backward`: the dtype
/// dispatch on CPU, the CUDA path, and the gradients. One definition for every op.
macro_rules! attention_op {
    ($op:ty, $name:literal) => {
        impl candle_core::CustomOp3 for $op {
            fn name(&self) -> &'static str {
                $name
            }

            fn cpu_fwd(
                &self,
                q: &CpuStorage,
                ql: &Layout,
                k: &CpuStorage,
                kl: &Layout,
                v: &CpuStorage,
                vl: &Layout,
            ) -> Result<(CpuStorage, Shape)> {
                use CpuStorage as S;
                self.attn().kv_fp8(k.dtype(), v.dtype())?;
                match (q, k, v) {
                    (S::F32(q), S::F32(k), S::F32(v)) => self.cpu_typed(q, ql, k, kl, v, vl),
                    (S::F16(q), S::F16(k), S::F16(v)) => self.cpu_typed(q, ql, k, kl, v, vl),
                    (S::BF16(q), S::BF16(k), S::BF16(v)) => self.cpu_typed(q, ql, k, kl, v, vl),
                    (S::F64(q), S::F64(k), S::F64(v)) => self.cpu_typed(q, ql, k, kl, v, vl),
                    (S::F32(q), S::F8E4M3(k), S::F8E4M3(v)) => self.cpu_kv_fp8(q, ql, k, kl, v, vl),
                    (S::F16(q), S::F8E4M3(k), S::F8E4M3(v)) => self.cpu_kv_fp8(q, ql, k, kl, v, vl),
                    (S::BF16(q), S::F8E4M3(k), S::F8E4M3(v)) => {
                        self.cpu_kv_fp8(q, ql, k, kl, v, vl)
                    }
                    _ => Err(dtype_error(q, k, v)),
                }
            }

            fn cuda_fwd(
                &self,
                q: &candle_core::CudaStorage,
                ql: &Layout,
                k: &candle_core::CudaStorage,
                kl: &Layout,
                v: &candle_core::CudaStorage,
                vl: &Layout,
            ) -> Result<(candle_core::CudaStorage, Shape)> {
                self.cuda(q, ql, k, kl, v, vl)
            }

            fn bwd(
                &self,
                q: &Tensor,
                k: &Tensor,
                v: &Tensor,
                _out: &Tensor,
                d_o: &Tensor,
            ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
                let (dq, dk, dv) = self.backward(q, k, v, d_o)?;
                Ok((Some(dq), Some(dk), Some(dv)))
            }
        }

        impl $op {
            /// The CPU path over an E4M3 KV cache: K and V dequantized exactly to f64, Q
            /// widened to f64, the f64 reference, the output narrowed to Q's type.
            fn cpu_kv_fp8<T: Storage>(
                &self,
                q: &[T],
                ql: &Layout,
                k: &[float8::F8E4M3],
                kl: &Layout,
                v: &[float8::F8E4M3],
                vl: &Layout,
            ) -> Result<(CpuStorage, Shape)> {
                let kd = kl.dims();
                let heads_kv = kd.get(kd.len().wrapping_sub(2)).copied().unwrap_or(0);
                let (k_scales, v_scales) = self.attn().host_kv_scales(heads_kv)?;
                let (k, kl) = dequantize("k", k, kl, &k_scales)?;
                let (v, vl) = dequantize("v", v, vl, &v_scales)?;
                let q: Vec<f64> = q.iter().map(|&x| x.to_f64()).collect();
                let (out, shape) = self.cpu_typed::<f64>(&q, ql, &k, &kl, &v, &vl)?;
                Ok((narrow_storage::<T>(out)?, shape))
            }
        }
    };
}

attention_op!(FlashAttn, "attn-candle-flash-attn");

impl FlashAttn {
    /// The attention settings every op carries.
    fn attn(&self) -> &FlashAttn {
        self
    }
}

#[cfg(not(feature = "cuda"))]
impl FlashAttn {
    /// Without the `cuda` feature no candle tensor lives on a GPU; this answers a direct call.
    fn cuda(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        candle_core::bail!("{CUDA_FEATURE_DISABLED}")
    }
}

/// The variable-length op: Q `(total_q, Hq, D)`, K and V `(total_k, Hkv, D)`, sequences
/// given by prefix sums.
#[derive(Debug, Clone)]
struct FlashAttnVarLen {
    attn: FlashAttn,
    cu_q: Vec<i32>,
    cu_k: Vec<i32>,
    max_seqlen_k: usize,
}

impl FlashAttnVarLen {
    /// The attention settings every op carries.
    fn attn(&self) -> &FlashAttn {
        &self.attn
    }

    /// `(total_q, Hq, D, total_k, Hkv)` of rank-3 q, k, v, checked against each other and the
    /// prefix sums (both paths).
    fn dims(
        &self,
        ql: &Layout,
        kl: &Layout,
        vl: &Layout,
    ) -> Result<(usize, usize, usize, usize, usize)> {
        let (qd, kd, vd) = (ql.dims(), kl.dims(), vl.dims());
        if qd.len() != 3 || kd.len() != 3 || vd.len() != 3 {
            return Err(err(format!(
                "varlen q, k and v must be rank 3 (total, heads, head_dim), got shapes q {qd:?}, k {kd:?}, v {vd:?}"
            )));
        }
        if kd != vd {
            return Err(err(format!(
                "k {kd:?} and v {vd:?} must have the same shape"
            )));
        }
        if qd[2] != kd[2] {
            return Err(err(format!(
                "q {qd:?} and k {kd:?} must have the same head_dim"
            )));
        }
        let (total_q, hq, d) = (qd[0], qd[1], qd[2]);
        let (total_k, hkv) = (kd[0], kd[1]);
        check_heads(hq, hkv)?;
        let batch = self.cu_q.len() - 1;
        let (last_q, last_k) = (self.cu_q[batch] as usize, self.cu_k[batch] as usize);
        if last_q != total_q || last_k != total_k {
            return Err(err(format!(
                "seqlens_q ends at {last_q} and seqlens_k at {last_k}, but q has {total_q} rows and k has {total_k}"
            )));
        }
        Ok((total_q, hq, d, total_k, hkv))
    }

    fn cpu_typed<T: Storage>(
        &self,
        q: &[T],
        ql: &Layout,
        k: &[T],
        kl: &Layout,
        v: &[T],
        vl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (total_q, hq, d, _, hkv) = self.dims(ql, kl, vl)?;
        let batch = self.cu_q.len() - 1;
        let out_shape = Shape::from((total_q, hq, d));
        if batch == 0 || hq == 0 || d == 0 {
            self.attn.store_lse(vec![f32::NEG_INFINITY; hq * total_q])?;
            let zeros = vec![T::from_f64(0.0); out_shape.elem_count()];
            return Ok((T::wrap(zeros), out_shape));
        }
        // Lengths of the template are unused by forward_varlen; heads, D and batch count.
        let shape = AttnShape::new(batch, hq, hkv, 1, 1, d).map_err(err)?;
        let problem = self.attn.problem(shape, self.max_seqlen_k)?;
        let order = [0, 1, 2];
        let qc = gather("q", q, ql, &order)?;
        let kc = gather("k", k, kl, &order)?;
        let vc = gather("v", v, vl, &order)?;
        let RefOutput { o, lse } =
            forward_varlen(&problem, &self.cu_q, &self.cu_k, &qc, &kc, &vc).map_err(err)?;
        self.attn
            .store_lse(lse.iter().map(|&x| x as f32).collect())?;
        Ok((T::wrap(narrow(&o)), out_shape))
    }
}

#[cfg(not(feature = "cuda"))]
impl FlashAttnVarLen {
    /// Without the `cuda` feature no candle tensor lives on a GPU; this answers a direct call.
    fn cuda(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        candle_core::bail!("{CUDA_FEATURE_DISABLED}")
    }
}

attention_op!(FlashAttnVarLen, "attn-candle-flash-attn-varlen");

/// The paged op: Q `(total_q, Hq, D)` packed by prefix sums, K and V paged caches
/// `(num_blocks, page_size, Hkv, D)` read through a block table (vLLM's PagedAttention
/// layout, FlashAttention's `block_table`); sequence b has `seqused_k[b]` keys.
#[derive(Debug, Clone)]
struct FlashAttnVarLenPaged {
    attn: FlashAttn,
    cu_q: Vec<i32>,
    /// Row-major `[B, max_blocks]`.
    block_table: Vec<i32>,
    seqused_k: Vec<i32>,
    max_seqlen_k: usize,
}

/// `(total_q, Hq, D, num_blocks, page_size, Hkv)` of the paged op's tensors.
type PagedDims = (usize, usize, usize, usize, usize, usize);

impl FlashAttnVarLenPaged {
    /// The attention settings every op carries.
    fn attn(&self) -> &FlashAttn {
        &self.attn
    }

    /// Checks q, the caches, the table and the lengths against each other (both paths).
    fn dims(&self, ql: &Layout, kl: &Layout, vl: &Layout) -> Result<PagedDims> {
        let (qd, kd, vd) = (ql.dims(), kl.dims(), vl.dims());
        if qd.len() != 3 || kd.len() != 4 || kd != vd {
            return Err(err(format!(
                "paged attention takes q (total_q, heads, head_dim) and k/v caches (num_blocks, page_size, kv_heads, head_dim) of one shape, got q {qd:?}, k {kd:?}, v {vd:?}"
            )));
        }
        let (total_q, hq, d) = (qd[0], qd[1], qd[2]);
        let (num_blocks, page_size, hkv) = (kd[0], kd[1], kd[2]);
        if kd[3] != d {
            return Err(err(format!(
                "q {qd:?} and the caches {kd:?} must have the same head_dim"
            )));
        }
        check_heads(hq, hkv)?;
        if page_size == 0 || page_size % 16 != 0 {
            return Err(err(format!(
                "page_size {page_size} must be a positive multiple of 16"
            )));
        }
        let batch = self.cu_q.len() - 1;
        if self.cu_q[batch] as usize != total_q {
            return Err(err(format!(
                "seqlens_q ends at {} but q has {total_q} rows",
                self.cu_q[batch]
            )));
        }
        if self.seqused_k.len() != batch {
            return Err(err(format!(
                "seqused_k has {} entries but seqlens_q describes {batch} sequences",
                self.seqused_k.len()
            )));
        }
        if batch == 0 || self.block_table.len() % batch != 0 || self.block_table.is_empty() {
            return Err(err(format!(
                "block_table has {} entries, not (batch = {batch}, max_blocks_per_seq ≥ 1)",
                self.block_table.len()
            )));
        }
        let max_blocks = self.block_table.len() / batch;
        for (b, &used) in self.seqused_k.iter().enumerate() {
            let used = usize::try_from(used).unwrap_or(usize::MAX);
            if used > self.max_seqlen_k {
                return Err(err(format!(
                    "seqused_k[{b}] = {} exceeds max_seqlen_k {}",
                    self.seqused_k[b], self.max_seqlen_k
                )));
            }
            if used > max_blocks * page_size {
                return Err(err(format!(
                    "seqused_k[{b}] = {} exceeds the {max_blocks} pages of {page_size} keys its table row holds",
                    self.seqused_k[b]
                )));
            }
            let row = &self.block_table[b * max_blocks..][..max_blocks];
            for (slot, &page) in row.iter().enumerate().take(used.div_ceil(page_size)) {
                if page < 0 || page as usize >= num_blocks {
                    return Err(err(format!(
                        "block_table[{b}][{slot}] = {page} is outside the cache's {num_blocks} pages"
                    )));
                }
            }
        }
        Ok((total_q, hq, d, num_blocks, page_size, hkv))
    }

    /// The CPU path: each sequence's keys gathered from its pages into a packed varlen batch,
    /// then the varlen reference (so paged attention has one definition).
    fn cpu_typed<T: Storage>(
        &self,
        q: &[T],
        ql: &Layout,
        k: &[T],
        kl: &Layout,
        v: &[T],
        vl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (total_q, hq, d, _, page_size, hkv) = self.dims(ql, kl, vl)?;
        let batch = self.cu_q.len() - 1;
        let max_blocks = self.block_table.len() / batch;
        let (kc, vc) = (
            gather("k_cache", k, kl, &[0, 1, 2, 3])?,
            gather("v_cache", v, vl, &[0, 1, 2, 3])?,
        );
        let mut cu_k = vec![0i32];
        let (mut kp, mut vp) = (Vec::new(), Vec::new());
        for (b, &used) in self.seqused_k.iter().enumerate() {
            for j in 0..used as usize {
                let page = self.block_table[b * max_blocks + j / page_size] as usize;
                let row = (page * page_size + j % page_size) * hkv * d;
                kp.extend_from_slice(&kc[row..row + hkv * d]);
                vp.extend_from_slice(&vc[row..row + hkv * d]);
            }
            cu_k.push(cu_k[b] + used);
        }
        let out_shape = Shape::from((total_q, hq, d));
        if hq == 0 || d == 0 {
            return Ok((T::wrap(Vec::new()), out_shape));
        }
        let shape = AttnShape::new(batch, hq, hkv, 1, 1, d).map_err(err)?;
        let problem = self.attn.problem(shape, self.max_seqlen_k)?;
        let qc = gather("q", q, ql, &[0, 1, 2])?;
        let RefOutput { o, .. } =
            forward_varlen(&problem, &self.cu_q, &cu_k, &qc, &kp, &vp).map_err(err)?;
        Ok((T::wrap(narrow(&o)), out_shape))
    }
}

#[cfg(not(feature = "cuda"))]
impl FlashAttnVarLenPaged {
    /// Without the `cuda` feature no candle tensor lives on a GPU; this answers a direct call.
    fn cuda(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        candle_core::bail!("{CUDA_FEATURE_DISABLED}")
    }
}

attention_op!(FlashAttnVarLenPaged, "attn-candle-flash-attn-varlen-paged");

/// Reads an index tensor (u32, i32 or i64) of `rank` to the host as i32.
fn read_indices(name: &str, t: &Tensor, rank: usize) -> Result<Vec<i32>> {
    if t.rank() != rank {
        return Err(err(format!(
            "{name} must be rank {rank}, got shape {:?}",
            t.dims()
        )));
    }
    let raw: Vec<i64> = match t.dtype() {
        DType::U32 | DType::I32 | DType::I64 => t
            .to_device(&candle_core::Device::Cpu)?
            .to_dtype(DType::I64)?
            .flatten_all()?
            .to_vec1::<i64>()?,
        dt => return Err(err(format!("{name} must be u32, i32 or i64, got {dt:?}"))),
    };
    raw.iter()
        .enumerate()
        .map(|(i, &x)| {
            i32::try_from(x).map_err(|_| err(format!("{name}[{i}] = {x} overflows i32")))
        })
        .collect()
}

/// Reads a `seqlens` tensor (`B + 1` prefix sums, u32 as candle-flash-attn takes; i32 and
/// i64 accepted) and checks it against `max_seqlen`.
fn read_seqlens(name: &str, t: &Tensor, max_seqlen: usize) -> Result<Vec<i32>> {
    if t.rank() != 1 {
        return Err(err(format!(
            "{name} must be rank 1 (batch + 1 prefix sums), got shape {:?}",
            t.dims()
        )));
    }
    // Read on the host: the prefix sums are small, and candle's CUDA backend need not cast.
    let raw: Vec<i64> = match t.dtype() {
        DType::U32 | DType::I32 | DType::I64 => t
            .to_device(&candle_core::Device::Cpu)?
            .to_dtype(DType::I64)?
            .to_vec1::<i64>()?,
        dt => return Err(err(format!("{name} must be u32, i32 or i64, got {dt:?}"))),
    };
    if raw.is_empty() {
        return Err(err(format!(
            "{name} is empty: it needs batch + 1 prefix sums"
        )));
    }
    let mut out = Vec::with_capacity(raw.len());
    for (i, &x) in raw.iter().enumerate() {
        let prev = if i == 0 { 0 } else { raw[i - 1] };
        if (i == 0 && x != 0) || x < prev {
            return Err(err(format!(
                "{name}[{i}] = {x}: prefix sums start at 0 and never decrease (previous {prev})"
            )));
        }
        if (x - prev) as u64 > max_seqlen as u64 {
            return Err(err(format!(
                "{name}: sequence {} has length {} > max_seqlen {max_seqlen}",
                i - 1,
                x - prev
            )));
        }
        out.push(i32::try_from(x).map_err(|_| err(format!("{name}[{i}] = {x} overflows i32")))?);
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn varlen(
    attn: FlashAttn,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
) -> Result<Tensor> {
    let cu_q = read_seqlens("seqlens_q", seqlens_q, max_seqlen_q)?;
    let cu_k = read_seqlens("seqlens_k", seqlens_k, max_seqlen_k)?;
    if cu_q.len() != cu_k.len() {
        return Err(err(format!(
            "seqlens_q has {} entries and seqlens_k {}: both must be batch + 1",
            cu_q.len(),
            cu_k.len()
        )));
    }
    let op = FlashAttnVarLen {
        attn,
        cu_q,
        cu_k,
        max_seqlen_k,
    };
    q.apply_op3(k, v, op)
}

/// Variable-length queries against a paged KV cache (the decode and chunked-prefill step of
/// a serving engine; vLLM's PagedAttention layout, FlashAttention's `block_table`): q
/// `(total_q, Hq, D)` packed by `seqlens_q` (`B + 1` prefix sums), `k_cache` and `v_cache`
/// `(num_blocks, page_size, Hkv, D)` with `page_size` a multiple of 16, `block_table`
/// `(B, max_blocks_per_seq)` naming each sequence's pages in order, and `seqused_k` `(B,)`
/// the keys each sequence has. Indices may be u32, i32 or i64 (read to the host, checked).
/// Causal and windows as in [`flash_attn_varlen_windowed`] (`window_size_right = Some(0)` is
/// causal, aligned bottom-right per sequence). Returns `(total_q, Hq, D)`.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_paged_windowed(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    block_table: &Tensor,
    seqlens_q: &Tensor,
    seqused_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let attn = FlashAttn::new(softmax_scale).window(window_size_left, window_size_right);
    let indices = [block_table, seqlens_q, seqused_k];
    paged(
        attn,
        q,
        k_cache,
        v_cache,
        indices,
        max_seqlen_q,
        max_seqlen_k,
    )
}

/// The paged op with `attn`'s settings: reads and checks the indices (`[block_table,
/// seqlens_q, seqused_k]`) on the host, then runs it on `(q, k_cache, v_cache)`.
fn paged(
    attn: FlashAttn,
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    [block_table, seqlens_q, seqused_k]: [&Tensor; 3],
    max_seqlen_q: usize,
    max_seqlen_k: usize,
) -> Result<Tensor> {
    let op = FlashAttnVarLenPaged {
        attn,
        cu_q: read_seqlens("seqlens_q", seqlens_q, max_seqlen_q)?,
        block_table: read_indices("block_table", block_table, 2)?,
        seqused_k: read_indices("seqused_k", seqused_k, 1)?,
        max_seqlen_k,
    };
    q.apply_op3(k_cache, v_cache, op)
}

/// [`flash_attn`] over an E4M3 KV cache: `k` and `v` are `F8E4M3` tensors
/// `(batch, seq_k, heads_kv, head_dim)` of codes, `k_scale` and `v_scale` f32 `(heads_kv,)` or
/// `(1,)` ([`FlashAttn::kv_fp8_scales`]); q f16 or bf16 (f32 too on the CPU), the output in
/// q's dtype. No backward.
pub fn flash_attn_kv_fp8(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    k_scale: &Tensor,
    v_scale: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let right = if causal { Some(0) } else { None };
    FlashAttn::new(softmax_scale)
        .window(None, right)
        .kv_fp8_scales(k_scale, v_scale)?
        .forward(q, k, v)
}

/// [`flash_attn_varlen_paged_windowed`] over an E4M3 paged cache: `k_cache` and `v_cache`
/// `F8E4M3` `(num_blocks, page_size, Hkv, D)`, with `k_scale` and `v_scale` as in
/// [`flash_attn_kv_fp8`] (the cache [`FlashAttn::kv_fp8_scales`] describes; attn-kernels'
/// `append_kv` writes it on CUDA).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_paged_kv_fp8(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    k_scale: &Tensor,
    v_scale: &Tensor,
    block_table: &Tensor,
    seqlens_q: &Tensor,
    seqused_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let attn = FlashAttn::new(softmax_scale)
        .window(window_size_left, window_size_right)
        .kv_fp8_scales(k_scale, v_scale)?;
    let indices = [block_table, seqlens_q, seqused_k];
    paged(
        attn,
        q,
        k_cache,
        v_cache,
        indices,
        max_seqlen_q,
        max_seqlen_k,
    )
}

/// Attention on `(batch, seq, heads, head_dim)` tensors: `softmax(Q·Kᵀ·softmax_scale)·V`,
/// causal (bottom-right aligned) when `causal`. GQA/MQA when K and V have fewer heads,
/// which must divide Q's. The output is `(batch, seq_q, heads_q, head_dim)` in Q's dtype.
pub fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let right = if causal { Some(0) } else { None };
    FlashAttn::new(softmax_scale)
        .window(None, right)
        .forward(q, k, v)
}

/// [`flash_attn`] with a top-left aligned causal mask (PyTorch's `is_causal`: key `j` is
/// visible to query `i` iff `j <= i`). Equal to [`flash_attn`] with `causal` when Sq = Sk.
pub fn flash_attn_causal_top_left(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
) -> Result<Tensor> {
    FlashAttn::new(softmax_scale)
        .causal(Causal::TopLeft)
        .forward(q, k, v)
}

/// [`flash_attn`] that also returns the log-sum-exp of the scaled scores, f32
/// `(batch, heads_q, seq_q)` (natural log; −∞ for a row that sees no key).
pub fn flash_attn_with_lse(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<(Tensor, Tensor)> {
    let causal = if causal {
        Causal::BottomRight
    } else {
        Causal::None
    };
    FlashAttn::new(softmax_scale)
        .causal(causal)
        .forward_with_lse(q, k, v)
}

/// Sliding-window attention (candle-flash-attn's convention): `None` is unbounded on that
/// side; `window_size_left = None, window_size_right = Some(0)` is the causal mask.
pub fn flash_attn_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    FlashAttn::new(softmax_scale)
        .window(window_size_left, window_size_right)
        .forward(q, k, v)
}

/// [`flash_attn`] with ALiBi: `alibi_slopes` is f32 `[Hq]` or `[B, Hq]`.
pub fn flash_attn_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let right = if causal { Some(0) } else { None };
    FlashAttn::new(softmax_scale)
        .window(None, right)
        .alibi(alibi_slopes)?
        .forward(q, k, v)
}

/// [`flash_attn_windowed`] with ALiBi slopes (f32 `[Hq]` or `[B, Hq]`).
pub fn flash_attn_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    FlashAttn::new(softmax_scale)
        .window(window_size_left, window_size_right)
        .alibi(alibi_slopes)?
        .forward(q, k, v)
}

/// [`flash_attn_alibi_windowed`] with optional slopes and a softcap (`0.0` = none;
/// `s ← softcap·tanh(s/softcap)` before ALiBi and the mask).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let mut op = FlashAttn::new(softmax_scale)
        .window(window_size_left, window_size_right)
        .softcap(softcap);
    if let Some(slopes) = alibi_slopes {
        op = op.alibi(slopes)?;
    }
    op.forward(q, k, v)
}

/// Variable-length attention: Q `(total_q, heads_q, head_dim)`, K and V
/// `(total_k, heads_kv, head_dim)`; `seqlens_q`/`seqlens_k` are `batch + 1` prefix sums (u32,
/// as candle-flash-attn takes them), so sequence `b` owns rows `seqlens_q[b]..seqlens_q[b+1]`.
/// Causal and windows align per sequence. A sequence with no keys gives zeros. The output is
/// `(total_q, heads_q, head_dim)`. Sequences longer than `max_seqlen_*` are an error.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    flash_attn_varlen_windowed(
        q,
        k,
        v,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale,
        None,
        causal.then_some(0),
    )
}

/// [`flash_attn_varlen`] with a sliding window (see [`flash_attn_windowed`]).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let attn = FlashAttn::new(softmax_scale).window(window_size_left, window_size_right);
    varlen(
        attn,
        q,
        k,
        v,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
    )
}

/// [`flash_attn_varlen_windowed`] with optional ALiBi slopes (f32 `[Hq]` or `[B, Hq]`) and a
/// softcap (`0.0` = none).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let mut attn = FlashAttn::new(softmax_scale)
        .window(window_size_left, window_size_right)
        .softcap(softcap);
    if let Some(slopes) = alibi_slopes {
        attn = attn.alibi(slopes)?;
    }
    varlen(
        attn,
        q,
        k,
        v,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
    )
}

/// Attention on candle-nn's `(batch, heads, seq, head_dim)` layout, output
/// `(batch, heads_q, seq_q, head_dim)` contiguous. `causal` picks the mask and its alignment.
pub fn sdpa_bhsd(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: Causal,
) -> Result<Tensor> {
    FlashAttn::new(softmax_scale)
        .causal(causal)
        .forward_bhsd(q, k, v)
}
