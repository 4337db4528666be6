//! The crate's error type.

use crate::{Fp8Format, Granularity};

/// Everything that can go wrong when quantizing, dequantizing or measuring the error.
///
/// Every variant names what was wrong and where (flat index and `(b, h, s, d)` position for
/// element errors, group index for scale errors), so that a caller can fix the input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantizeError {
    /// A dimension of the `[B, H, S, D]` shape is zero.
    #[error("shape {shape:?} has a zero dimension; every one of [B, H, S, D] must be at least 1")]
    ZeroDimension {
        /// The shape given.
        shape: [usize; 4],
    },
    /// The element count of the shape overflows `usize`.
    #[error("shape {shape:?} is too large: its element count overflows usize")]
    ShapeOverflow {
        /// The shape given.
        shape: [usize; 4],
    },
    /// A buffer's length does not match what the shape (and granularity) imply.
    #[error("{buffer} has {got} elements but {needs} needs {expected}")]
    LengthMismatch {
        /// Which buffer (`"input"`, `"codes"`, `"scales"`).
        buffer: &'static str,
        /// Elements given.
        got: usize,
        /// Elements expected.
        expected: usize,
        /// What implies the expected length, e.g. `shape [2, 8, 512, 64]` or
        /// `granularity head over shape [2, 8, 512, 64] (scales [2, 8])`.
        needs: String,
    },
    /// `block:0` (or a zero block size built directly).
    #[error("block size must be at least 1 token (got block:0)")]
    ZeroBlockSize,
    /// A granularity string that is not `tensor`, `head`, `token` or `block:N`.
    #[error("unknown granularity `{0}`: expected tensor, head, token or block:N (N ≥ 1 tokens)")]
    UnknownGranularity(String),
    /// A format string that is not `e4m3` or `e5m2`.
    #[error("unknown FP8 format `{0}`: expected e4m3 or e5m2")]
    UnknownFormat(String),
    /// The input holds a NaN or an infinity; FP8 scales computed from it would lie.
    #[error(
        "input element {index} at [b, h, s, d] = {position:?} is {value}; \
         FP8 quantization needs finite inputs"
    )]
    NonFiniteInput {
        /// Flat index of the first non-finite element.
        index: usize,
        /// Its `[b, h, s, d]` position.
        position: [usize; 4],
        /// The value (NaN, inf or -inf).
        value: f64,
    },
    /// A code that decodes to NaN (or, for E5M2, to ±∞): no satfinite quantizer produces it.
    #[error(
        "code {index} at [b, h, s, d] = {position:?} is 0x{code:02x}, which {format} decodes \
         to {decoded}; valid codes decode to finite values"
    )]
    NonFiniteCode {
        /// Flat index of the first bad code.
        index: usize,
        /// Its `[b, h, s, d]` position.
        position: [usize; 4],
        /// The byte.
        code: u8,
        /// The format it was read as.
        format: Fp8Format,
        /// What it decodes to (NaN, inf or -inf).
        decoded: f32,
    },
    /// `decode(code) · scale` overflows f32 (a caller-supplied scale too large for the codes).
    #[error(
        "code {index} at [b, h, s, d] = {position:?} (0x{code:02x}) times its scale {scale:e} \
         overflows f32"
    )]
    DequantizeOverflow {
        /// Flat index of the first overflowing element.
        index: usize,
        /// Its `[b, h, s, d]` position.
        position: [usize; 4],
        /// The byte.
        code: u8,
        /// Its scale.
        scale: f32,
    },
    /// A scale that is not finite and positive.
    #[error(
        "scale {group} (of granularity {granularity}) is {value}; scales must be finite and > 0"
    )]
    InvalidScale {
        /// Index of the scale in the scales buffer.
        group: usize,
        /// The granularity the scales belong to.
        granularity: Granularity,
        /// The value found.
        value: f32,
    },
    /// Incoherent processing ([`crate::HadamardRotation`]) needs a power-of-two head dim.
    #[error(
        "head dim {head_dim} is not a power of two; the Hadamard rotation of incoherent \
         processing needs one (64 and 128 are)"
    )]
    RotationHeadDim {
        /// The head dim asked for.
        head_dim: usize,
    },
    /// `amax · 2^margin / max` does not fit in an f32 scale.
    #[error(
        "group {group}: amax {amax:e} with margin {margin} needs a scale above f32::MAX; \
         lower the margin or the input's magnitude"
    )]
    ScaleOverflow {
        /// Index of the group.
        group: usize,
        /// The group's largest magnitude.
        amax: f64,
        /// The margin asked for.
        margin: u32,
    },
}
