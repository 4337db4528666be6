//! Attention over an E4M3 KV cache: K and V stored as one-byte E4M3 codes with a
//! dequantization scale per KV head (or one for the whole cache), Q and O in f16/bf16 — the
//! cache format vLLM calls `kv_cache_dtype="fp8"` and that [`FlashAttention::append_kv`]
//! writes with [`crate::KvCache::E4m3`]. Half the bytes of an f16 cache, so a decode step,
//! which only streams the cache, takes about half the time.
//!
//! The general mma.sync entries read it (kernels/kv_fp8.cuh): the codes travel through the
//! cp.async ring, each key tile is widened to the query type in shared memory (exactly), and
//! the scales are folded into the scores (`k_scale`) and the output (`v_scale`). Everything
//! those entries run composes with it: dense, packed (varlen) and paged caches,
//! `seqused_k`, both causal alignments, GQA (and GQA-packed decode), the window, softcap,
//! ALiBi and sinks, and split-KV for unmasked launches.
//!
//! The reference semantics: the f64 reference on `decode(code) · scale` of every element
//! (attn-quant's decoding), so the kernel adds no error beyond the cache's quantization.

use cudarc::driver::{CudaStream, CudaView, CudaViewMut, DevicePtr, SyncOnDrop};

use attn_ref::Problem;

use crate::{
    launch::{FwdFeatures, LaunchExtras},
    seqs::Sequences,
    tensor::{Tensor, TensorMut},
    FlashAttention, ForwardOptions, KernelError, LaunchInfo, StorageType,
};

/// The dequantization scales of an E4M3 KV cache: element ≈ decode(code) · scale. Each is
/// `[Hkv]` (per KV head) or `[1]` (one for the cache); both the same length. The values are
/// device-resident and not checked (a non-finite or zero scale gives non-finite or zero
/// outputs, never an out-of-bounds access).
#[derive(Debug)]
pub struct KvScales<'a> {
    /// Key scales.
    pub k: CudaView<'a, f32>,
    /// Value scales.
    pub v: CudaView<'a, f32>,
}

/// One forward over an E4M3 KV cache, described whole like [`crate::Forward`]: Q in `T`, K
/// and V as E4M3 codes (any strides, 16-byte aligned rows; dense `[B, Hkv, Sk, D]`, or the
/// packed and paged layouts of [`FlashAttention::forward_kv_fp8`]'s `seqs`), their scales, O
/// in `T` and the optional LSE.
#[derive(Debug)]
pub struct ForwardKvFp8<'a, T> {
    /// Shapes, mask, softmax scale and features.
    pub problem: &'a Problem,
    /// Queries.
    pub q: Tensor<'a, T>,
    /// Key codes.
    pub k: Tensor<'a, u8>,
    /// Value codes.
    pub v: Tensor<'a, u8>,
    /// The cache's scales.
    pub scales: KvScales<'a>,
    /// Output (written).
    pub o: TensorMut<'a, T>,
    /// Row log-sum-exp `[B, Hq, Sq]` (`[Hq, total_q]` packed), when wanted.
    pub lse: Option<CudaViewMut<'a, f32>>,
    /// Config and split overrides (the mma.sync engine's general config only).
    pub options: ForwardOptions,
}

/// Whether the scales are per KV head (`Ok(true)`) or one per cache (`Ok(false)`).
pub(crate) fn scale_layout(
    k_len: usize,
    v_len: usize,
    kv_heads: usize,
) -> Result<bool, KernelError> {
    let bad = |reason: String| KernelError::InvalidTensor {
        tensor: "KV scales",
        reason,
    };
    if k_len != v_len {
        return Err(bad(format!(
            "{k_len} key scales but {v_len} value scales: give both per KV head or both per cache"
        )));
    }
    match k_len {
        n if n == kv_heads => Ok(true),
        1 => Ok(false),
        n => Err(bad(format!(
            "{n} scales: expected {kv_heads} (one per KV head) or 1 (one for the cache)"
        ))),
    }
}

/// Checks the scales against the KV heads and writes their addresses into the launch's
/// features. The guards order the launch after pending writes to the scales.
pub(crate) fn bind_kv_scales<'a>(
    stream: &'a CudaStream,
    scales: &'a KvScales<'_>,
    kv_heads: usize,
    feat: &mut FwdFeatures,
) -> Result<Vec<SyncOnDrop<'a>>, KernelError> {
    let per_head = scale_layout(scales.k.len(), scales.v.len(), kv_heads)?;
    let (k, gk) = scales.k.device_ptr(stream);
    let (v, gv) = scales.v.device_ptr(stream);
    feat.k_descale = k;
    feat.v_descale = v;
    feat.descale_per_head = i32::from(per_head);
    Ok(vec![gk, gv])
}

impl FlashAttention {
    /// The forward over an E4M3 KV cache: `o = softmax(scale · q·(k·sₖ)ᵀ + mask) · (v·sᵥ)`
    /// with K and V decoded from their codes, on the mma.sync engine's general entries. With
    /// `seqs`, K/V may be packed (varlen) or a paged cache and the queries packed, exactly as
    /// in [`FlashAttention::forward_sequences`]. Decode (one query row) with GQA packs the
    /// query heads of a KV head into one CTA, and unmasked launches split the keys when the
    /// grid is small, as the f16 kernels do.
    ///
    /// Validated before anything is launched (tensors, layout, scale lengths, head dim a
    /// multiple of 16, options); on error nothing is written.
    pub fn forward_kv_fp8<T: StorageType>(
        &self,
        args: ForwardKvFp8<'_, T>,
        seqs: Option<Sequences<'_>>,
    ) -> Result<LaunchInfo, KernelError> {
        let ForwardKvFp8 {
            problem,
            q,
            k,
            v,
            scales,
            o,
            lse,
            options,
        } = args;
        scale_layout(scales.k.len(), scales.v.len(), problem.shape().kv_heads())?;
        self.launch(
            crate::Forward {
                problem,
                q,
                k,
                v,
                o,
                lse,
                options,
            },
            LaunchExtras {
                seqs,
                kv_scales: Some(scales),
                ..LaunchExtras::default()
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_are_per_head_or_per_cache() {
        assert!(scale_layout(8, 8, 8).unwrap());
        assert!(!scale_layout(1, 1, 8).unwrap());
        assert!(matches!(
            scale_layout(4, 4, 8),
            Err(KernelError::InvalidTensor { .. })
        ));
        assert!(matches!(
            scale_layout(8, 1, 8),
            Err(KernelError::InvalidTensor { .. })
        ));
    }
}
