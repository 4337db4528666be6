//! Gradients of the attention ops (`CustomOp3::bwd`), so `Tensor::backward` runs through them.
//!
//! - CPU: attn-ref's f64 reference backward ([`attn_ref::reference::backward()`], which
//!   recomputes O and LSE in f64), read through candle's own strided copies and narrowed to
//!   the inputs' dtype once at the end.
//! - CUDA (`cuda` feature): attn-kernels' backward kernels on candle's stream (`cuda.rs`).
//! - Both implement attention with causal masks (both alignments), GQA, sliding windows,
//!   softcap and ALiBi: attn-ref's backward applies every forward feature, and so do the
//!   CUDA backward kernels' general entries (the mma.sync kernel's `_feat` entries).
//! - Varlen: per-sequence reference backward on the CPU; on CUDA the backward kernels' packed
//!   sequences (`FlashAttention::backward_with`). The paged op: an error on both (a
//!   decode-time op).

use attn_ref::reference::backward as reference_backward;
use attn_ref::{AttnShape, Problem};
use candle_core::{DType, Device, Result, Tensor};

use crate::{
    check_dims, err, Dims, FlashAttn, FlashAttnVarLen, FlashAttnVarLenPaged, BACKWARD_UNSUPPORTED,
};

/// The three gradients of an op, shaped like its inputs.
type Grads = (Tensor, Tensor, Tensor);

fn check_grad_shape(d_o: &Tensor, q: &Tensor) -> Result<()> {
    if d_o.dims() != q.dims() {
        return Err(err(format!(
            "the output gradient {:?} must be shaped like q {:?}",
            d_o.dims(),
            q.dims()
        )));
    }
    Ok(())
}

/// Gradients that nothing reaches (an empty problem, or rows that see no key): zeros.
fn zeros(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Grads> {
    Ok((q.zeros_like()?, k.zeros_like()?, v.zeros_like()?))
}

/// The dtypes the CPU path reads (as the forward).
fn check_cpu_dtype(dt: DType) -> Result<()> {
    match dt {
        DType::F32 | DType::F16 | DType::BF16 | DType::F64 => Ok(()),
        dt => Err(err(format!(
            "unsupported dtype {dt:?}: the CPU path takes f32, f16, bf16 or f64"
        ))),
    }
}

/// A tensor's values widened to f64 (exact for every dtype the CPU path takes) in its
/// logical order, through candle's strided copy.
fn host_f64(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64)?
        .contiguous()?
        .flatten_all()?
        .to_vec1::<f64>()
}

impl FlashAttn {
    /// dQ, dK, dV of the dense op for output gradient `d_o`, all `(b, s, h, d)`, each
    /// contiguous and in the inputs' dtype and device.
    pub(crate) fn backward(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        d_o: &Tensor,
    ) -> Result<Grads> {
        let Dims {
            b,
            sq,
            sk,
            hq,
            hkv,
            d,
        } = check_dims(q.layout(), k.layout(), v.layout())?;
        check_grad_shape(d_o, q)?;
        if self.kv_scales.is_some() {
            return Err(err(format!(
                "{BACKWARD_UNSUPPORTED} an E4M3 KV cache (flash_attn_kv_fp8): it is an inference format; train with f16/bf16 k and v"
            )));
        }
        if b == 0 || sq == 0 || hq == 0 || d == 0 || sk == 0 {
            return zeros(q, k, v);
        }
        let shape = AttnShape::new(b, hq, hkv, sq, sk, d).map_err(err)?;
        let problem = self.problem(shape, sk)?;
        match q.device() {
            Device::Cpu => cpu_dense(&problem, q, k, v, d_o),
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => self.cuda_backward(&problem, q, k, v, d_o),
            dev => Err(err(format!(
                "backward on {:?} is not supported (the CPU device, or CUDA with the `cuda` feature)",
                dev.location()
            ))),
        }
    }
}

/// The dense CPU backward: `(b, s, h, d)` → attn-ref's `[B, H, S, D]` and back.
fn cpu_dense(p: &Problem, q: &Tensor, k: &Tensor, v: &Tensor, d_o: &Tensor) -> Result<Grads> {
    let dt = q.dtype();
    check_cpu_dtype(dt)?;
    let bhsd = |t: &Tensor| host_f64(&t.transpose(1, 2)?);
    let g = reference_backward(p, &bhsd(q)?, &bhsd(k)?, &bhsd(v)?, &bhsd(d_o)?).map_err(err)?;
    let s = p.shape();
    let (b, d) = (s.batch(), s.head_dim());
    let back = |x: Vec<f64>, h: usize, len: usize| -> Result<Tensor> {
        Tensor::from_vec(x, (b, h, len, d), &Device::Cpu)?
            .transpose(1, 2)?
            .to_dtype(dt)?
            .contiguous()
    };
    Ok((
        back(g.dq, s.q_heads(), s.q_len())?,
        back(g.dk, s.kv_heads(), s.kv_len())?,
        back(g.dv, s.kv_heads(), s.kv_len())?,
    ))
}

/// Rows `start..start + len` of a packed `[total, h, d]` buffer as `[h, len, d]`.
fn rows_to_heads(x: &[f64], start: usize, len: usize, h: usize, d: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(h * len * d);
    for hi in 0..h {
        for r in start..start + len {
            out.extend_from_slice(&x[(r * h + hi) * d..][..d]);
        }
    }
    out
}

/// Writes `[h, len, d]` back into rows `start..start + len` of a packed `[total, h, d]` buffer.
fn heads_to_rows(src: &[f64], dst: &mut [f64], start: usize, len: usize, h: usize, d: usize) {
    for hi in 0..h {
        for i in 0..len {
            let from = &src[(hi * len + i) * d..][..d];
            dst[((start + i) * h + hi) * d..][..d].copy_from_slice(from);
        }
    }
}

impl FlashAttnVarLen {
    /// dQ `(total_q, Hq, D)`, dK and dV `(total_k, Hkv, D)`: on the CPU, each sequence's
    /// reference backward (the sequences are independent problems, as in the forward).
    pub(crate) fn backward(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        d_o: &Tensor,
    ) -> Result<Grads> {
        let (total_q, hq, d, total_k, hkv) = self.dims(q.layout(), k.layout(), v.layout())?;
        check_grad_shape(d_o, q)?;
        let batch = self.cu_q.len() - 1;
        if batch == 0 || total_q == 0 || total_k == 0 || hq == 0 || d == 0 {
            return zeros(q, k, v);
        }
        let template = AttnShape::new(batch, hq, hkv, 1, 1, d).map_err(err)?;
        let problem = self.attn.problem(template, self.max_seqlen_k)?;
        match q.device() {
            Device::Cpu => {}
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => {
                // The kernels' batch template: the longest sequences (as the forward's).
                let (max_q, max_k) = (
                    crate::longest_sequence(&self.cu_q),
                    crate::longest_sequence(&self.cu_k),
                );
                if max_q == 0 || max_k == 0 {
                    return zeros(q, k, v);
                }
                let shape = AttnShape::new(batch, hq, hkv, max_q, max_k, d).map_err(err)?;
                let problem = self.attn.problem(shape, self.max_seqlen_k)?;
                return self.cuda_backward(&problem, q, k, v, d_o);
            }
            dev => {
                return Err(err(format!(
                    "backward on {:?} is not supported (the CPU device, or CUDA with the `cuda` feature)",
                    dev.location()
                )))
            }
        }
        let dt = q.dtype();
        check_cpu_dtype(dt)?;
        let (qh, kh, vh, doh) = (host_f64(q)?, host_f64(k)?, host_f64(v)?, host_f64(d_o)?);
        let mut dq = vec![0.0; qh.len()];
        let mut dk = vec![0.0; kh.len()];
        let mut dv = vec![0.0; vh.len()];
        for bi in 0..batch {
            let (q0, k0) = (self.cu_q[bi] as usize, self.cu_k[bi] as usize);
            let lq = self.cu_q[bi + 1] as usize - q0;
            let lk = self.cu_k[bi + 1] as usize - k0;
            if lq == 0 || lk == 0 {
                continue; // no rows, or rows that see no key: zero gradients
            }
            let p = problem.sequence(bi, lq, lk).map_err(err)?;
            let g = reference_backward(
                &p,
                &rows_to_heads(&qh, q0, lq, hq, d),
                &rows_to_heads(&kh, k0, lk, hkv, d),
                &rows_to_heads(&vh, k0, lk, hkv, d),
                &rows_to_heads(&doh, q0, lq, hq, d),
            )
            .map_err(err)?;
            heads_to_rows(&g.dq, &mut dq, q0, lq, hq, d);
            heads_to_rows(&g.dk, &mut dk, k0, lk, hkv, d);
            heads_to_rows(&g.dv, &mut dv, k0, lk, hkv, d);
        }
        let back = |x: Vec<f64>, rows: usize, h: usize| -> Result<Tensor> {
            Tensor::from_vec(x, (rows, h, d), &Device::Cpu)?.to_dtype(dt)
        };
        Ok((
            back(dq, total_q, hq)?,
            back(dk, total_k, hkv)?,
            back(dv, total_k, hkv)?,
        ))
    }
}

impl FlashAttnVarLenPaged {
    /// The paged op is the decode step of a serving engine: gradients into a page cache are
    /// not provided (train through the dense or varlen op).
    pub(crate) fn backward(&self, _: &Tensor, _: &Tensor, _: &Tensor, _: &Tensor) -> Result<Grads> {
        Err(err(format!(
            "{BACKWARD_UNSUPPORTED} the paged KV cache (flash_attn_varlen_paged_windowed), on any device; train through flash_attn or flash_attn_varlen"
        )))
    }
}
