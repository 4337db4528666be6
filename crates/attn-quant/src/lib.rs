//! `attn-quant` turns f32/f16/bf16 `[B, H, S, D]` tensors into FP8 codes (E4M3 or E5M2) and
//! f32 scales that never lie: `x ≈ decode(code) · scale` with `scale = amax / FP8_MAX` per
//! group (tensor, head, token or block of tokens), an all-zero group gets scale 1.0, tiny
//! groups get a normal (flush-to-zero-safe) scale, and a NaN or ∞ in the input is an error
//! naming its position rather than a silently poisoned scale.
//!
//! Bit conversions are the `float8` crate's, which match CUDA's `__NV_SATFINITE`
//! conversions bit for bit (round to nearest even, saturate to ±max); the format constants
//! are this crate's own ([`Fp8Format::max`]: 448 and 57344). Both passes (amax, convert) run
//! in parallel with rayon. The byte layout is what the FP8 kernel uploads: codes one byte
//! per element in `[B, H, S, D]` order, scales f32 in the order documented on
//! [`Granularity`].
//!
//! ```
//! use attn_quant::{error_report, quantize, Fp8Format, Fp8Tensor, Granularity};
//!
//! // [B, H, S, D] = [1, 2, 4, 2]: head 1 holds an outlier 10⁵ times its neighbours.
//! let shape = [1, 2, 4, 2];
//! let x: Vec<f32> = vec![
//!     0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7, -0.8, // head 0
//!     0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7, 20000.0, // head 1
//! ];
//! let per_head = quantize(&x, shape, Fp8Format::E4M3, Granularity::Head)?;
//! assert_eq!(per_head.scales.len(), 2); // scales layout [B, H]
//! assert!(per_head.scales[1] * 448.0 >= 20000.0);
//! assert!((per_head.dequantize()?[15] - 20000.0).abs() < 1e-2);
//!
//! // Largest relative error in head 0. Per head, E4M3 keeps it under 2⁻⁴; one tensor-wide
//! // scale spends the range on the outlier and pushes head 0 into the subnormals.
//! let head0 = |q: &Fp8Tensor| -> Result<f32, attn_quant::QuantizeError> {
//!     let y = q.dequantize()?;
//!     Ok(x[..8].iter().zip(&y[..8]).map(|(a, b)| ((a - b) / a).abs()).fold(0.0, f32::max))
//! };
//! let per_tensor = quantize(&x, shape, Fp8Format::E4M3, Granularity::Tensor)?;
//! assert!(head0(&per_head)? <= 0.0625);
//! assert!(head0(&per_tensor)? > 0.1);
//!
//! let report = error_report(&x, &per_head)?; // per group (here: per head) and overall
//! assert!(report.groups[0].rel_l2() < 0.04);
//! assert_eq!(report.overall.saturated, 0);
//! # Ok::<(), attn_quant::QuantizeError>(())
//! ```

#![warn(missing_docs)]

mod error;
mod format;
mod granularity;
mod quantize;
mod report;
mod rotate;

pub use error::QuantizeError;
pub use format::Fp8Format;
pub use granularity::Granularity;
pub use quantize::{
    compute_scales, dequantize, dequantize_into, dequantize_parts, quantize, quantize_into,
    quantize_with, quantize_with_scales, scale_from_amax, Fp8Tensor, QuantInput, QuantOptions,
};
pub use report::{error_report, QuantErrorReport, QuantErrorStats};
pub use rotate::HadamardRotation;

/// The `[B, H, S, D]` dimensions of Q (and O) of an attention problem, for [`quantize`].
pub fn q_dims(shape: &attn_ref::AttnShape) -> [usize; 4] {
    [
        shape.batch(),
        shape.q_heads(),
        shape.q_len(),
        shape.head_dim(),
    ]
}

/// The `[B, H, S, D]` dimensions of K and V of an attention problem, for [`quantize`].
pub fn kv_dims(shape: &attn_ref::AttnShape) -> [usize; 4] {
    [
        shape.batch(),
        shape.kv_heads(),
        shape.kv_len(),
        shape.head_dim(),
    ]
}
