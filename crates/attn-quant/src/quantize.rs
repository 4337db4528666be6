//! Quantization (amax pass + convert pass) and dequantization, parallel with rayon.

use std::ops::Range;

use rayon::prelude::*;

use crate::{
    format::encode_non_nan,
    granularity::{position, Groups},
    Fp8Format, Granularity, QuantizeError,
};

/// Elements per rayon work item when one group is large (tensor/head granularity): big
/// enough to amortize scheduling, small enough to spread a single group over every core.
const CHUNK: usize = 1 << 16;

mod private {
    /// Seals [`QuantInput`](super::QuantInput) and hides the bit-level helpers.
    pub trait Sealed: Copy + Send + Sync + 'static {
        /// The largest magnitude in `xs`, or `None` if any element is NaN or ±∞.
        fn abs_max(xs: &[Self]) -> Option<f64>;
        /// The value as f32 (exact for f16/bf16/f32, rounded to nearest for f64).
        fn to_f32(self) -> f32;
    }
}

/// An element type that can be quantized: `f32`, `half::f16`, `half::bf16` (and `f64`,
/// whose values are rounded to f32 before the division by their scale, and must stay within
/// f32's range for the scales to exist).
pub trait QuantInput: private::Sealed {
    /// Exact widening to f64.
    fn to_f64(self) -> f64;
}

// For IEEE-style floats the magnitude ordering of non-negative values equals the integer
// ordering of their bit patterns, and NaN/∞ have the largest patterns. One integer max
// over `bits & !sign` therefore gives both the amax and the finiteness check, and it
// vectorizes (no NaN-aware float max in the loop).
macro_rules! quant_input {
    ($t:ty, $bits:ty, $abs_mask:expr, $inf_bits:expr, $to_bits:expr, $from_bits:expr, $to_f32:expr) => {
        impl private::Sealed for $t {
            fn abs_max(xs: &[Self]) -> Option<f64> {
                let to_bits: fn(Self) -> $bits = $to_bits;
                let from_bits: fn($bits) -> Self = $from_bits;
                let max_bits = xs
                    .iter()
                    .map(|&v| to_bits(v) & $abs_mask)
                    .fold(0, <$bits>::max);
                (max_bits < $inf_bits).then(|| QuantInput::to_f64(from_bits(max_bits)))
            }
            #[inline]
            fn to_f32(self) -> f32 {
                let to_f32: fn(Self) -> f32 = $to_f32;
                to_f32(self)
            }
        }
        impl QuantInput for $t {
            #[inline]
            fn to_f64(self) -> f64 {
                f64::from(self)
            }
        }
    };
}

quant_input!(
    f32,
    u32,
    0x7fff_ffff,
    0x7f80_0000,
    f32::to_bits,
    f32::from_bits,
    |v| v
);
quant_input!(
    f64,
    u64,
    0x7fff_ffff_ffff_ffff,
    0x7ff0_0000_0000_0000,
    f64::to_bits,
    f64::from_bits,
    |v| v as f32
);
quant_input!(
    half::f16,
    u16,
    0x7fff,
    0x7c00,
    half::f16::to_bits,
    half::f16::from_bits,
    half::f16::to_f32
);
quant_input!(
    half::bf16,
    u16,
    0x7fff,
    0x7f80,
    half::bf16::to_bits,
    half::bf16::from_bits,
    half::bf16::to_f32
);

/// Options of [`quantize_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuantOptions {
    /// Power-of-two headroom: scales are `amax · 2^margin / max`, so values up to
    /// `2^margin · amax` fit without saturating (Transformer Engine's `DelayedScaling`
    /// recipe has the same knob). Each step of margin costs one bit of resolution.
    pub margin: u32,
}

/// An FP8-quantized `[B, H, S, D]` tensor: `x[i] ≈ decode(codes[i]) · scales[group(i)]`.
///
/// Byte layout, ready for upload: `codes` is one contiguous buffer, one byte per element, in
/// the input's `[B, H, S, D]` order (`bytemuck`-castable to `float8::F8E4M3`/`F8E5M2`);
/// `scales` is f32 in the order documented on [`Granularity`].
///
/// The fields are public so that buffers from elsewhere (a file, a GPU) can be wrapped;
/// [`dequantize`] re-validates them.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Tensor {
    /// One FP8 code per element, `[B, H, S, D]`.
    pub codes: Vec<u8>,
    /// One f32 scale per group, in the layout of [`Granularity::scales_shape`].
    pub scales: Vec<f32>,
    /// `[B, H, S, D]`.
    pub shape: [usize; 4],
    /// How the codes are encoded.
    pub format: Fp8Format,
    /// Which elements share a scale.
    pub granularity: Granularity,
}

impl Fp8Tensor {
    /// The shape of `scales` (`[1]`, `[B, H]`, `[B, H, S]` or `[B, H, ⌈S/N⌉]`).
    pub fn scales_shape(&self) -> Result<Vec<usize>, QuantizeError> {
        self.granularity.scales_shape(self.shape)
    }

    /// The scales as raw bytes (native-endian f32), for upload.
    pub fn scales_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.scales)
    }

    /// Dequantizes to f32; see [`dequantize`].
    pub fn dequantize(&self) -> Result<Vec<f32>, QuantizeError> {
        dequantize(self)
    }
}

/// The scale for a group whose largest magnitude is `amax`: `amax · 2^margin / max`,
/// rounded *up* to f32 so that `amax / scale ≤ max` exactly (the group's own values never
/// saturate), and at least `f32::MIN_POSITIVE`.
///
/// - `amax == 0` gives 1.0 (an all-zero group must not get a meaningless tiny scale).
/// - A subnormal or tiny `amax` gives `f32::MIN_POSITIVE` rather than a subnormal scale: GPU
///   code built with flush-to-zero (`-ftz=true`, implied by `--use_fast_math`) would read a
///   subnormal scale as 0. Such groups keep the resolution FP8 has at `amax / MIN_POSITIVE`.
/// - `None` when `amax` is negative or not finite, or when the scale (or `max · scale`, the
///   largest dequantized magnitude) would overflow f32.
pub fn scale_from_amax(amax: f64, format: Fp8Format, margin: u32) -> Option<f32> {
    if !(amax.is_finite() && amax >= 0.0) {
        return None;
    }
    if amax == 0.0 {
        return Some(1.0);
    }
    let max = f64::from(format.max());
    // 2^margin as an exact power of two (inf beyond f64's range, caught below).
    let target = amax * 2f64.powi(margin.min(4096) as i32);
    let wanted = target / max;
    if wanted > f64::from(f32::MAX) {
        return None;
    }
    let mut scale = (wanted as f32).max(f32::MIN_POSITIVE);
    // `scale · max` is exact in f64 (24 × 4 significant bits), so this comparison is exact.
    while f64::from(scale) * max < target {
        scale = next_up(scale);
    }
    (scale * format.max()).is_finite().then_some(scale)
}

/// The next f32 above a positive finite `x` (`f32::next_up` needs Rust 1.86).
fn next_up(x: f32) -> f32 {
    f32::from_bits(x.to_bits() + 1)
}

/// Quantizes `x` (`[B, H, S, D]`, C order) with scales from each group's amax.
///
/// Errors: a zero or overflowing dimension, `x.len()` not `B·H·S·D`, `block:0`, a non-finite
/// element (the error names the first one), or a scale that would overflow f32. Nothing is
/// returned on error.
///
/// ```
/// use attn_quant::{quantize, Fp8Format, Granularity};
/// let x = [0.5f32, -1.0, 2.0, 0.0, 0.0, 0.0];
/// let q = quantize(&x, [1, 2, 1, 3], Fp8Format::E4M3, Granularity::Head).unwrap();
/// assert_eq!(q.scales, [2.0 / 448.0, 1.0]); // second head is all zeros
/// assert_eq!(q.dequantize().unwrap(), x);
/// ```
pub fn quantize<T: QuantInput>(
    x: &[T],
    shape: [usize; 4],
    format: Fp8Format,
    granularity: Granularity,
) -> Result<Fp8Tensor, QuantizeError> {
    quantize_with(x, shape, format, granularity, &QuantOptions::default())
}

/// [`quantize`] with options (a power-of-two `margin`).
pub fn quantize_with<T: QuantInput>(
    x: &[T],
    shape: [usize; 4],
    format: Fp8Format,
    granularity: Granularity,
    options: &QuantOptions,
) -> Result<Fp8Tensor, QuantizeError> {
    let mut out = Fp8Tensor {
        codes: Vec::new(),
        scales: Vec::new(),
        shape,
        format,
        granularity,
    };
    quantize_into(x, shape, format, granularity, options, &mut out)?;
    Ok(out)
}

/// [`quantize_with`] into an existing [`Fp8Tensor`], reusing its buffers' memory (their
/// lengths are adjusted). Worth it in loops over large tensors: freshly allocated memory
/// costs a page fault per 4 KiB on first touch. On error `out` is left unchanged.
pub fn quantize_into<T: QuantInput>(
    x: &[T],
    shape: [usize; 4],
    format: Fp8Format,
    granularity: Granularity,
    options: &QuantOptions,
    out: &mut Fp8Tensor,
) -> Result<(), QuantizeError> {
    let scales = compute_scales(x, shape, format, granularity, options)?;
    let groups = Groups::new(shape, granularity)?;
    out.codes.resize(x.len(), 0);
    encode_all(x, &groups, &scales, format, &mut out.codes);
    out.scales = scales;
    out.shape = shape;
    out.format = format;
    out.granularity = granularity;
    Ok(())
}

/// The amax pass alone: the scales [`quantize_with`] would use, in scales order. Useful to
/// calibrate once and quantize later with [`quantize_with_scales`] (delayed scaling).
pub fn compute_scales<T: QuantInput>(
    x: &[T],
    shape: [usize; 4],
    format: Fp8Format,
    granularity: Granularity,
    options: &QuantOptions,
) -> Result<Vec<f32>, QuantizeError> {
    let groups = Groups::new(shape, granularity)?;
    check_len("input", x.len(), groups.elements(), || {
        format!("shape {shape:?}")
    })?;
    // Per group: Ok(amax) or Err(first non-finite flat index). Large groups are split so
    // that one tensor-wide group still uses every core.
    let amaxes: Vec<Result<f64, usize>> = map_groups(
        &groups,
        |range| match T::abs_max(&x[range.clone()]) {
            Some(a) => Ok(a),
            None => Err(range.start + first_non_finite(&x[range])),
        },
        |a, b| match (a, b) {
            (Ok(a), Ok(b)) => Ok(a.max(b)),
            (Err(i), _) | (Ok(_), Err(i)) => Err(i),
        },
    );
    amaxes
        .into_iter()
        .enumerate()
        .map(|(group, amax)| match amax {
            Ok(amax) => {
                scale_from_amax(amax, format, options.margin).ok_or(QuantizeError::ScaleOverflow {
                    group,
                    amax,
                    margin: options.margin,
                })
            }
            Err(index) => Err(QuantizeError::NonFiniteInput {
                index,
                position: position(shape, index),
                value: x[index].to_f64(),
            }),
        })
        .collect()
}

/// Quantizes with caller-supplied scales (static or delayed scaling). Values beyond
/// `±max · scale` saturate to `±max`; [`error_report`](crate::error_report) counts them.
pub fn quantize_with_scales<T: QuantInput>(
    x: &[T],
    shape: [usize; 4],
    format: Fp8Format,
    granularity: Granularity,
    scales: &[f32],
) -> Result<Fp8Tensor, QuantizeError> {
    let groups = Groups::new(shape, granularity)?;
    check_len("input", x.len(), groups.elements(), || {
        format!("shape {shape:?}")
    })?;
    check_scales(&groups, scales)?;
    if let Some(i) = first_non_finite_par(x) {
        return Err(QuantizeError::NonFiniteInput {
            index: i,
            position: position(shape, i),
            value: x[i].to_f64(),
        });
    }
    let mut codes = vec![0u8; x.len()];
    encode_all(x, &groups, scales, format, &mut codes);
    Ok(Fp8Tensor {
        codes,
        scales: scales.to_vec(),
        shape,
        format,
        granularity,
    })
}

/// Dequantizes an [`Fp8Tensor`] to f32 (`decode(code) · scale`, one f32 multiply, as a
/// kernel does). Validates the buffers first; see [`dequantize_parts`].
pub fn dequantize(t: &Fp8Tensor) -> Result<Vec<f32>, QuantizeError> {
    dequantize_parts(&t.codes, &t.scales, t.shape, t.format, t.granularity)
}

/// Dequantizes raw buffers (e.g. read from files). Errors: a bad shape or `block:0`, codes or
/// scales of the wrong length, a scale that is not finite and positive, a code that decodes
/// to NaN or ±∞ (the first one is named), or a product that overflows f32.
pub fn dequantize_parts(
    codes: &[u8],
    scales: &[f32],
    shape: [usize; 4],
    format: Fp8Format,
    granularity: Granularity,
) -> Result<Vec<f32>, QuantizeError> {
    let mut out = vec![0.0f32; codes.len()];
    dequantize_into(codes, scales, shape, format, granularity, &mut out)?;
    Ok(out)
}

/// [`dequantize_parts`] into a caller's buffer (which must hold `B·H·S·D` values), to reuse
/// memory across calls. On error `out` holds unspecified values.
pub fn dequantize_into(
    codes: &[u8],
    scales: &[f32],
    shape: [usize; 4],
    format: Fp8Format,
    granularity: Granularity,
    out: &mut [f32],
) -> Result<(), QuantizeError> {
    let groups = Groups::new(shape, granularity)?;
    let needs = || format!("shape {shape:?}");
    check_len("codes", codes.len(), groups.elements(), needs)?;
    check_len("output", out.len(), groups.elements(), needs)?;
    check_scales(&groups, scales)?;
    let row_len = groups.row_len;
    let rows_per_chunk = (CHUNK / row_len).max(1);
    let all_valid = out
        .par_chunks_mut(rows_per_chunk * row_len)
        .zip(codes.par_chunks(rows_per_chunk * row_len))
        .enumerate()
        .map(|(chunk, (out, codes))| {
            let first_row = chunk * rows_per_chunk;
            // One match per chunk: a concrete, vectorizable decoder in the loop.
            match format {
                Fp8Format::E4M3 => decode_rows(out, codes, &groups, scales, first_row, |c| {
                    (
                        Fp8Format::E4M3.decode_finite(c),
                        Fp8Format::E4M3.is_finite_code(c),
                    )
                }),
                Fp8Format::E5M2 => decode_rows(out, codes, &groups, scales, first_row, |c| {
                    (
                        Fp8Format::E5M2.decode_finite(c),
                        Fp8Format::E5M2.is_finite_code(c),
                    )
                }),
            }
        })
        .reduce(|| true, |a, b| a && b);
    if all_valid {
        return Ok(());
    }
    // Slow path, only on bad data: name the first offending element.
    let index = codes
        .iter()
        .zip(out.iter())
        .position(|(&c, v)| !format.is_finite_code(c) || !v.is_finite())
        .unwrap_or(0);
    let code = codes[index];
    if format.is_finite_code(code) {
        return Err(QuantizeError::DequantizeOverflow {
            index,
            position: position(shape, index),
            code,
            scale: scales[groups.group_of_row(index / row_len)],
        });
    }
    Err(QuantizeError::NonFiniteCode {
        index,
        position: position(shape, index),
        code,
        format,
        decoded: format.decode(code),
    })
}

/// `out = decode(code) · scale` over whole rows; false if any code is NaN/∞ or any product
/// overflows.
#[inline(always)]
fn decode_rows(
    out: &mut [f32],
    codes: &[u8],
    groups: &Groups,
    scales: &[f32],
    first_row: usize,
    decode: impl Fn(u8) -> (f32, bool),
) -> bool {
    let row_len = groups.row_len;
    let mut valid = true;
    for (r, (out, codes)) in out
        .chunks_mut(row_len)
        .zip(codes.chunks(row_len))
        .enumerate()
    {
        let scale = scales[groups.group_of_row(first_row + r)];
        for (o, &c) in out.iter_mut().zip(codes) {
            let (value, finite_code) = decode(c);
            *o = value * scale;
            valid &= finite_code & o.is_finite();
        }
    }
    valid
}

/// The convert pass: `codes[i] = encode_f32(x[i] / scale)` (an f32 division, correctly
/// rounded, as a GPU kernel's `__fdiv_rn` + `__nv_cvt_float_to_fp8` would compute it), in
/// parallel over chunks of rows.
fn encode_all<T: QuantInput>(
    x: &[T],
    groups: &Groups,
    scales: &[f32],
    format: Fp8Format,
    codes: &mut [u8],
) {
    let row_len = groups.row_len;
    let rows_per_chunk = (CHUNK / row_len).max(1);
    codes
        .par_chunks_mut(rows_per_chunk * row_len)
        .zip(x.par_chunks(rows_per_chunk * row_len))
        .enumerate()
        .for_each(|(chunk, (codes, x))| {
            let first_row = chunk * rows_per_chunk;
            // One match per chunk so that the inner loop is one concrete, vectorizable
            // conversion.
            match format {
                Fp8Format::E4M3 => encode_rows(codes, x, groups, scales, first_row, |q| {
                    encode_non_nan(Fp8Format::E4M3, q)
                }),
                Fp8Format::E5M2 => encode_rows(codes, x, groups, scales, first_row, |q| {
                    encode_non_nan(Fp8Format::E5M2, q)
                }),
            }
        });
}

#[inline(always)]
fn encode_rows<T: QuantInput>(
    codes: &mut [u8],
    x: &[T],
    groups: &Groups,
    scales: &[f32],
    first_row: usize,
    encode: impl Fn(f32) -> u8,
) {
    let row_len = groups.row_len;
    for (r, (codes, x)) in codes.chunks_mut(row_len).zip(x.chunks(row_len)).enumerate() {
        let scale = scales[groups.group_of_row(first_row + r)];
        for (c, &v) in codes.iter_mut().zip(x) {
            // x and the scale are finite, so the quotient is never NaN; values beyond
            // ±max·scale (only with caller-supplied scales) saturate explicitly to ±max.
            *c = encode(v.to_f32() / scale);
        }
    }
}

/// Applies `leaf` to every group's element range (splitting large groups into chunks whose
/// results `merge` combines left to right) and returns one result per group, in order.
pub(crate) fn map_groups<R: Send>(
    groups: &Groups,
    leaf: impl Fn(Range<usize>) -> R + Sync,
    merge: impl Fn(R, R) -> R + Sync,
) -> Vec<R> {
    (0..groups.len())
        .into_par_iter()
        .with_min_len(64)
        .map(|g| {
            let range = groups.elements_of(g);
            if range.len() <= CHUNK {
                return leaf(range);
            }
            let chunks = range.len().div_ceil(CHUNK);
            (0..chunks)
                .into_par_iter()
                .map(|c| {
                    let start = range.start + c * CHUNK;
                    leaf(start..(start + CHUNK).min(range.end))
                })
                .reduce_with(&merge)
                .unwrap_or_else(|| leaf(range.start..range.start))
        })
        .collect()
}

/// Offset of the first non-finite element of `xs` (`xs.len()` if none).
fn first_non_finite<T: QuantInput>(xs: &[T]) -> usize {
    xs.iter()
        .position(|v| !v.to_f64().is_finite())
        .unwrap_or(xs.len())
}

/// Index of the first non-finite element of `xs`, scanning in parallel.
fn first_non_finite_par<T: QuantInput>(xs: &[T]) -> Option<usize> {
    xs.par_chunks(CHUNK)
        .enumerate()
        .filter_map(|(c, chunk)| {
            T::abs_max(chunk)
                .is_none()
                .then(|| c * CHUNK + first_non_finite(chunk))
        })
        .min()
}

pub(crate) fn check_len(
    buffer: &'static str,
    got: usize,
    expected: usize,
    needs: impl FnOnce() -> String,
) -> Result<(), QuantizeError> {
    if got == expected {
        Ok(())
    } else {
        Err(QuantizeError::LengthMismatch {
            buffer,
            got,
            expected,
            needs: needs(),
        })
    }
}

/// Checks the scales' length against the groups and that every scale is finite and > 0.
pub(crate) fn check_scales(groups: &Groups, scales: &[f32]) -> Result<(), QuantizeError> {
    check_len("scales", scales.len(), groups.len(), || groups.describe())?;
    match scales.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
        None => Ok(()),
        Some(group) => Err(QuantizeError::InvalidScale {
            group,
            granularity: groups.granularity,
            value: scales[group],
        }),
    }
}
