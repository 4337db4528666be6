//! All-E4M3 attention (`flash_attn_fp8`): Q, K and V as candle `F8E4M3` codes with f32
//! scales per (batch, head), the output in f16 or bf16 (f32 too on the CPU). On CUDA it runs
//! attn-kernels' FP8 forward (`FlashAttention::forward_fp8`; on Hopper the TMA + wgmma
//! engine, FlashAttention-3's FP8 recipe: scales folded into the softmax scale and the output,
//! P cast to E4M3 after a 2⁸ gain); the CPU path decodes the codes exactly (attn-quant) and
//! runs the f64 reference, so the two differ by the kernel's rounding of P (attn-oracle's FP8
//! rounding model), not by the inputs.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Layout, Result, Shape, Tensor};

use crate::{dequantize, err, narrow_storage, FlashAttn, Storage, BACKWARD_UNSUPPORTED};

/// The all-E4M3 op: the attention settings (scale, causal), the three scale tensors and the
/// output dtype.
#[derive(Debug, Clone)]
pub(crate) struct FlashAttnFp8 {
    pub(crate) attn: FlashAttn,
    /// `(b, heads_q)`, `(b, heads_kv)`, `(b, heads_kv)`, f32.
    pub(crate) scales: [Tensor; 3],
    pub(crate) out: DType,
}

impl FlashAttnFp8 {
    /// Checks the scales against `(b, hq, hkv)`.
    fn check_scales(&self, b: usize, hq: usize, hkv: usize) -> Result<()> {
        for (t, name, h) in [
            (&self.scales[0], "q_scale", hq),
            (&self.scales[1], "k_scale", hkv),
            (&self.scales[2], "v_scale", hkv),
        ] {
            if t.dtype() != DType::F32 || t.dims() != [b, h] {
                return Err(err(format!(
                    "{name} must be f32 (batch = {b}, heads = {h}), got {:?} of shape {:?}",
                    t.dtype(),
                    t.dims()
                )));
            }
        }
        Ok(())
    }

    fn cpu_typed<T: Storage>(
        &self,
        codes: [(&[float8::F8E4M3], &Layout); 3],
    ) -> Result<(CpuStorage, Shape)> {
        let [(q, ql), (k, kl), (v, vl)] = codes;
        let crate::Dims { b, hq, hkv, .. } = crate::check_dims(ql, kl, vl)?;
        self.check_scales(b, hq, hkv)?;
        let host = |t: &Tensor| -> Result<Vec<f32>> { t.flatten_all()?.to_vec1::<f32>() };
        let (q, ql) = dequantize("q", q, ql, &host(&self.scales[0])?)?;
        let (k, kl) = dequantize("k", k, kl, &host(&self.scales[1])?)?;
        let (v, vl) = dequantize("v", v, vl, &host(&self.scales[2])?)?;
        let (out, shape) = self.attn.cpu_typed::<f64>(&q, &ql, &k, &kl, &v, &vl)?;
        Ok((narrow_storage::<T>(out)?, shape))
    }
}

impl candle_core::CustomOp3 for FlashAttnFp8 {
    fn name(&self) -> &'static str {
        "attn-candle-flash-attn-fp8"
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
        let (S::F8E4M3(q), S::F8E4M3(k), S::F8E4M3(v)) = (q, k, v) else {
            return Err(dtype_error(q.dtype(), k.dtype(), v.dtype()));
        };
        let codes = [(q.as_slice(), ql), (k.as_slice(), kl), (v.as_slice(), vl)];
        match self.out {
            DType::F32 => self.cpu_typed::<f32>(codes),
            DType::F16 => self.cpu_typed::<half::f16>(codes),
            DType::BF16 => self.cpu_typed::<half::bf16>(codes),
            dt => Err(out_dtype_error(dt)),
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
        #[cfg(feature = "cuda")]
        {
            if (q.dtype(), k.dtype(), v.dtype()) != (DType::F8E4M3, DType::F8E4M3, DType::F8E4M3) {
                return Err(dtype_error(q.dtype(), k.dtype(), v.dtype()));
            }
            let crate::Dims { b, hq, hkv, .. } = crate::check_dims(ql, kl, vl)?;
            self.check_scales(b, hq, hkv)?;
            match self.out {
                DType::F16 => self.cuda_typed::<half::f16>(q, ql, k, kl, v, vl),
                DType::BF16 => self.cuda_typed::<half::bf16>(q, ql, k, kl, v, vl),
                dt => Err(out_dtype_error(dt)),
            }
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (q, ql, k, kl, v, vl);
            candle_core::bail!("{}", crate::CUDA_FEATURE_DISABLED)
        }
    }

    fn bwd(
        &self,
        _: &Tensor,
        _: &Tensor,
        _: &Tensor,
        _: &Tensor,
        _: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        Err(err(format!(
            "{BACKWARD_UNSUPPORTED} all-E4M3 attention (flash_attn_fp8): it is an inference format; train with f16/bf16 inputs"
        )))
    }
}

fn dtype_error(q: DType, k: DType, v: DType) -> candle_core::Error {
    err(format!(
        "flash_attn_fp8 takes q, k and v as F8E4M3 codes, got {q:?}, {k:?}, {v:?} (an E4M3 KV cache with f16/bf16 q is flash_attn_kv_fp8)"
    ))
}

fn out_dtype_error(dt: DType) -> candle_core::Error {
    err(format!(
        "flash_attn_fp8 writes f16 or bf16 (f32 too on the CPU), not {dt:?}"
    ))
}

/// Attention with Q, K and V all E4M3 (FlashAttention-3's FP8 forward): `q`, `k`, `v` are
/// `F8E4M3` tensors `(batch, seq, heads, head_dim)` of codes, element = `code · scale` with
/// f32 scales `q_scale` `(batch, heads_q)` and `k_scale`, `v_scale` `(batch, heads_kv)`;
/// the output is `(batch, seq_q, heads_q, head_dim)` in `out_dtype` (f16 or bf16; f32 too on
/// the CPU). Causal is bottom-right aligned; GQA as in [`crate::flash_attn`]. The CUDA
/// path runs attn-kernels' FP8 forward on Hopper (head dims of its FP8 catalog, any strides
/// with a contiguous head dim; elsewhere it is an error, since those FP8 kernels write a
/// contiguous `(b, h, s, d)` output and candle's is `(b, s, h, d)`); its P is rounded to E4M3, so it differs from the CPU path (exact f64 on the decoded
/// inputs) by that rounding. No backward.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_fp8(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    q_scale: &Tensor,
    k_scale: &Tensor,
    v_scale: &Tensor,
    softmax_scale: f32,
    causal: bool,
    out_dtype: DType,
) -> Result<Tensor> {
    let right = if causal { Some(0) } else { None };
    let op = FlashAttnFp8 {
        attn: FlashAttn::new(softmax_scale).window(None, right),
        scales: [q_scale.clone(), k_scale.clone(), v_scale.clone()],
        out: out_dtype,
    };
    q.apply_op3(k, v, op)
}
