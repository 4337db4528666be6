//! The two FP8 formats, their constants and their bit conversions.
//!
//! Bit conversions come from the `float8` crate, whose `from_f64`/`to_f32` reproduce CUDA's
//! `__nv_cvt_double_to_fp8(…, __NV_SATFINITE, …)` and `__nv_cvt_fp8_to_halfraw` bit for bit
//! (round to nearest even, saturation to ±max, NaN kept). Its *constants* are not used:
//! in float8 0.7, `F8E4M3::MAX` is 416 and `F8E4M3::INFINITY` is the finite 448, and
//! `F8E5M2::INFINITY`/`is_infinite()` point at 57344 instead of the real infinity code 0x7C.
//! The constants below follow the OCP 8-bit floating point specification (OFP8, rev 1.0,
//! 2023) and Micikevicius et al., "FP8 Formats for Deep Learning" (arXiv:2209.05433).

use std::{fmt, str::FromStr};

use float8::{F8E4M3, F8E5M2};

use crate::QuantizeError;

/// An FP8 encoding.
///
/// | format | bits (s.e.m) | bias | max | smallest subnormal | inf | NaN |
/// |---|---|---|---|---|---|---|
/// | E4M3 (NVIDIA/OCP "E4M3FN") | 1.4.3 | 7 | 448 | 2⁻⁹ | none | `s.1111.111` |
/// | E5M2 | 1.5.2 | 15 | 57344 | 2⁻¹⁶ | `s.11111.00` | `s.11111.{01,10,11}` |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8Format {
    /// 4 exponent bits, 3 mantissa bits: more precision (the usual choice for forward
    /// activations and weights).
    E4M3,
    /// 5 exponent bits, 2 mantissa bits: more range (the usual choice for gradients).
    E5M2,
}

const E4M3_MAX: f32 = 448.0;
const E5M2_MAX: f32 = 57344.0;

// Decode tables built at compile time from float8's (const) decoder, so that decoding is one
// load and the table is the same one the tests check against float8 at run time.
static E4M3_TABLE: [f32; 256] = decode_table_of(Fp8Format::E4M3);
static E5M2_TABLE: [f32; 256] = decode_table_of(Fp8Format::E5M2);

const fn decode_table_of(format: Fp8Format) -> [f32; 256] {
    let mut table = [0.0f32; 256];
    let mut code = 0;
    while code < 256 {
        table[code] = match format {
            Fp8Format::E4M3 => F8E4M3::from_bits(code as u8).to_f32(),
            Fp8Format::E5M2 => F8E5M2::from_bits(code as u8).to_f32(),
        };
        code += 1;
    }
    table
}

impl Fp8Format {
    /// Both formats, for iteration in tests and tools.
    pub const ALL: [Fp8Format; 2] = [Fp8Format::E4M3, Fp8Format::E5M2];

    /// The largest finite magnitude: 448 for E4M3, 57344 for E5M2.
    pub const fn max(self) -> f32 {
        match self {
            Fp8Format::E4M3 => E4M3_MAX,
            Fp8Format::E5M2 => E5M2_MAX,
        }
    }

    /// Mantissa (fraction) bits: 3 for E4M3, 2 for E5M2.
    pub const fn mantissa_bits(self) -> u32 {
        match self {
            Fp8Format::E4M3 => 3,
            Fp8Format::E5M2 => 2,
        }
    }

    /// Exponent of the smallest normal value: 2⁻⁶ for E4M3, 2⁻¹⁴ for E5M2.
    pub const fn min_normal_exponent(self) -> i32 {
        match self {
            Fp8Format::E4M3 => -6,
            Fp8Format::E5M2 => -14,
        }
    }

    /// The smallest positive (subnormal) value: 2⁻⁹ for E4M3, 2⁻¹⁶ for E5M2.
    pub fn min_subnormal(self) -> f32 {
        (2.0f32).powi(self.min_normal_exponent() - self.mantissa_bits() as i32)
    }

    /// The CLI spelling: `e4m3` or `e5m2`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Fp8Format::E4M3 => "e4m3",
            Fp8Format::E5M2 => "e5m2",
        }
    }

    /// Parses `e4m3` or `e5m2` (case-insensitive).
    pub fn parse(s: &str) -> Result<Self, QuantizeError> {
        match s.to_ascii_lowercase().as_str() {
            "e4m3" => Ok(Fp8Format::E4M3),
            "e5m2" => Ok(Fp8Format::E5M2),
            _ => Err(QuantizeError::UnknownFormat(s.to_string())),
        }
    }

    /// Encodes `v` (already divided by its scale) with round-to-nearest-even and
    /// saturation to ±[`max`](Self::max); NaN maps to a NaN code. This is `float8`'s
    /// conversion, bit-exact with CUDA's `__NV_SATFINITE` conversion of an f64.
    #[inline]
    pub fn encode(self, v: f64) -> u8 {
        match self {
            Fp8Format::E4M3 => F8E4M3::from_f64(v).to_bits(),
            Fp8Format::E5M2 => F8E5M2::from_f64(v).to_bits(),
        }
    }

    /// Encodes an f32 like [`encode`](Self::encode) (round to nearest even, ±∞ and values
    /// beyond ±max saturate to ±max; NaN gives the NaN code `0x7f` with its sign), but
    /// branch-free so that the quantizer's loop vectorizes. The tests check it bit for bit
    /// against `float8`'s `from_f32` at every rounding boundary of both formats and on
    /// random bit patterns (and an ignored test sweeps all 2³² inputs).
    #[inline]
    pub fn encode_f32(self, v: f32) -> u8 {
        match self {
            Fp8Format::E4M3 => encode_f32_with::<3, 7>(v, E4M3_MAX),
            Fp8Format::E5M2 => encode_f32_with::<2, 15>(v, E5M2_MAX),
        }
    }

    /// Decodes a code to f32 (exact: every FP8 value is an f32).
    #[inline]
    pub fn decode(self, code: u8) -> f32 {
        self.decode_table()[usize::from(code)]
    }

    /// Decodes like [`decode`](Self::decode) but branch-free, for vectorized loops. Only
    /// meaningful for codes where [`is_finite_code`](Self::is_finite_code) holds (NaN and
    /// infinity codes give finite garbage); the tests check all 256 codes against the table.
    #[inline]
    pub fn decode_finite(self, code: u8) -> f32 {
        match self {
            Fp8Format::E4M3 => decode_with::<3, 7>(code),
            Fp8Format::E5M2 => decode_with::<2, 15>(code),
        }
    }

    /// All 256 decoded values, indexed by code (the lookup table a kernel can upload).
    pub fn decode_table(self) -> &'static [f32; 256] {
        match self {
            Fp8Format::E4M3 => &E4M3_TABLE,
            Fp8Format::E5M2 => &E5M2_TABLE,
        }
    }

    /// Whether `code` is a NaN: `0x7f`/`0xff` for E4M3; exponent all ones with a non-zero
    /// mantissa for E5M2.
    pub const fn is_nan_code(self, code: u8) -> bool {
        match self {
            Fp8Format::E4M3 => code & 0x7f == 0x7f,
            Fp8Format::E5M2 => code & 0x7f > 0x7c,
        }
    }

    /// Whether `code` is ±∞: never for E4M3 (it has no infinities), `0x7c`/`0xfc` for E5M2.
    pub const fn is_inf_code(self, code: u8) -> bool {
        match self {
            Fp8Format::E4M3 => false,
            Fp8Format::E5M2 => code & 0x7f == 0x7c,
        }
    }

    /// Whether `code` decodes to a finite value.
    pub const fn is_finite_code(self, code: u8) -> bool {
        !self.is_nan_code(code) && !self.is_inf_code(code)
    }

    /// The round-to-nearest error bound at magnitude `|v|` in FP8 units: half the spacing of
    /// the representable values in `|v|`'s binade (the subnormal spacing below the normal
    /// range). For `|v| ≤ max`, `|v − decode(encode(v))| ≤ half_ulp(v)`.
    pub fn half_ulp(self, v: f64) -> f64 {
        let mbits = self.mantissa_bits() as i32;
        // The binade's exponent straight from the f64 exponent field (exact, unlike log2);
        // zero and tiny values fall in the subnormal range, whose spacing is the minimum
        // normal binade's.
        let biased = ((v.abs().to_bits() >> 52) & 0x7ff) as i32;
        let exponent = (biased - 1023).max(self.min_normal_exponent());
        0.5 * 2f64.powi(exponent - mbits)
    }
}

/// Branch-free f32 → FP8 with `MBITS` mantissa bits and exponent bias `BIAS`.
///
/// Normal range: round the f32 significand to `MBITS` bits in the integer domain (add just
/// under half an FP8 ulp, plus one if the kept lsb is odd: round to nearest even), then
/// rebias the exponent field. Subnormal range: adding `2^(23 + emin − MBITS)` makes the f32
/// adder itself round to a multiple of the FP8 subnormal spacing, and the difference of the
/// bit patterns is the code. (The same two tricks as PyTorch's `c10/util/Float8_e4m3fn.h`.)
#[inline(always)]
fn encode_f32_with<const MBITS: u32, const BIAS: u32>(v: f32, max: f32) -> u8 {
    let code = encode_non_nan_with::<MBITS, BIAS>(v, max);
    if v.is_nan() {
        0x7f | (code & 0x80)
    } else {
        code
    }
}

/// [`encode_f32_with`] without the NaN patch (a NaN gives an unspecified code): the
/// quantizer's inner loop, whose inputs are checked finite beforehand.
#[inline(always)]
pub(crate) fn encode_non_nan_with<const MBITS: u32, const BIAS: u32>(v: f32, max: f32) -> u8 {
    let sign = (v.to_bits() >> 24) & 0x80;
    // Saturation: |v| beyond max (∞ included) becomes max.
    let a = v.abs().min(max);
    let bits = a.to_bits();
    let shift = 23 - MBITS;
    let lsb = (bits >> shift) & 1;
    let rounded = bits.wrapping_add((1 << (shift - 1)) - 1 + lsb);
    let normal = (rounded >> shift).wrapping_sub((127 - BIAS) << MBITS);
    let emin = 1 - BIAS as i32; // exponent of the smallest normal
    let min_normal = f32::from_bits(((emin + 127) as u32) << 23);
    let magic = f32::from_bits(((23 + emin - MBITS as i32 + 127) as u32) << 23);
    let subnormal = (a + magic).to_bits().wrapping_sub(magic.to_bits());
    let magnitude = if a < min_normal { subnormal } else { normal };
    (magnitude | sign) as u8
}

/// E4M3/E5M2 instances of [`encode_non_nan_with`] for the quantizer.
#[inline(always)]
pub(crate) fn encode_non_nan(format: Fp8Format, v: f32) -> u8 {
    match format {
        Fp8Format::E4M3 => encode_non_nan_with::<3, 7>(v, E4M3_MAX),
        Fp8Format::E5M2 => encode_non_nan_with::<2, 15>(v, E5M2_MAX),
    }
}

/// Branch-free FP8 → f32 for finite codes: rebias the exponent of normal codes; subnormal
/// codes are their mantissa times the smallest subnormal.
#[inline(always)]
fn decode_with<const MBITS: u32, const BIAS: u32>(code: u8) -> f32 {
    let code = u32::from(code);
    let sign = (code & 0x80) << 24;
    let exponent = (code & 0x7f) >> MBITS;
    let mantissa = code & ((1 << MBITS) - 1);
    let normal = f32::from_bits(((exponent + 127 - BIAS) << 23) | (mantissa << (23 - MBITS)));
    // 2^(1 − BIAS − MBITS), the smallest subnormal.
    let tiny = f32::from_bits((128 - BIAS - MBITS) << 23);
    let subnormal = mantissa as f32 * tiny;
    let magnitude = if exponent == 0 { subnormal } else { normal };
    f32::from_bits(magnitude.to_bits() | sign)
}

impl fmt::Display for Fp8Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Fp8Format {
    type Err = QuantizeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_finite_code_round_trips_through_float8() {
        for format in Fp8Format::ALL {
            let mut finite = 0;
            for code in 0..=255u8 {
                let value = format.decode(code);
                if value.is_nan() {
                    assert!(format.is_nan_code(code), "{format} 0x{code:02x}");
                    continue;
                }
                if value.is_infinite() {
                    assert!(format.is_inf_code(code), "{format} 0x{code:02x}");
                    continue;
                }
                assert!(format.is_finite_code(code), "{format} 0x{code:02x}");
                finite += 1;
                assert_eq!(
                    format.encode(f64::from(value)),
                    code,
                    "{format}: 0x{code:02x} decodes to {value} which encodes elsewhere"
                );
            }
            // E4M3: 2 NaN codes; E5M2: 6 NaN and 2 inf codes.
            let expected = match format {
                Fp8Format::E4M3 => 254,
                Fp8Format::E5M2 => 248,
            };
            assert_eq!(finite, expected, "{format}");
        }
    }

    fn assert_encode_f32_matches_float8(v: f32) {
        for format in Fp8Format::ALL {
            let reference = match format {
                Fp8Format::E4M3 => F8E4M3::from_f32(v).to_bits(),
                Fp8Format::E5M2 => F8E5M2::from_f32(v).to_bits(),
            };
            let ours = format.encode_f32(v);
            if v.is_nan() {
                assert!(format.is_nan_code(ours) && format.is_nan_code(reference));
            } else {
                assert_eq!(
                    ours,
                    reference,
                    "{format}: {v:e} (bits 0x{:08x}) -> 0x{ours:02x}, float8 0x{reference:02x}",
                    v.to_bits()
                );
            }
        }
    }

    /// The fast encoder is a monotone step function of |v|, so it equals float8 everywhere
    /// once it equals float8 on both sides of every step. Check ±2048 f32 ulps around every
    /// FP8 value and every midpoint between neighbours (both signs), plus the specials.
    #[test]
    fn encode_f32_matches_float8_at_every_rounding_boundary() {
        let mut points = vec![0.0f32, f32::MIN_POSITIVE, f32::MAX, f32::INFINITY, f32::NAN];
        for format in Fp8Format::ALL {
            let mut values: Vec<f32> = (0..0x80u8)
                .map(|c| format.decode(c))
                .filter(|v| v.is_finite())
                .collect();
            values.sort_by(f32::total_cmp);
            points.extend(
                values
                    .windows(2)
                    .map(|w| ((f64::from(w[0]) + f64::from(w[1])) / 2.0) as f32),
            );
            points.extend(values);
            points.push(format.max() * 1.0625); // RNE tie above max, then beyond
            points.push(format.max() * 2.0);
        }
        for p in points {
            let base = p.to_bits() as i64;
            for delta in -2048i64..=2048 {
                let bits = base + delta;
                if (0..=i64::from(u32::MAX)).contains(&bits) {
                    let v = f32::from_bits(bits as u32);
                    assert_encode_f32_matches_float8(v);
                    assert_encode_f32_matches_float8(-v);
                }
            }
        }
    }

    #[test]
    fn encode_f32_matches_float8_on_random_bit_patterns() {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(0x5eed);
        for _ in 0..1_000_000 {
            assert_encode_f32_matches_float8(f32::from_bits(rng.random()));
        }
        // Uniform in the FP8 ranges, where quantized values live.
        for _ in 0..1_000_000 {
            assert_encode_f32_matches_float8(rng.random_range(-60000.0f32..60000.0));
            assert_encode_f32_matches_float8(rng.random_range(-1.0f32..1.0) * 2f32.powi(-12));
        }
    }

    /// All 2³² f32 bit patterns. Minutes in the dev profile; run with
    /// `cargo test -p attn-quant --release -- --ignored`.
    #[test]
    #[ignore = "exhaustive over 2^32 inputs: run in release with --ignored"]
    fn encode_f32_matches_float8_exhaustively() {
        use rayon::prelude::*;
        (0..=u32::MAX >> 16).into_par_iter().for_each(|hi| {
            for lo in 0..=0xffffu32 {
                assert_encode_f32_matches_float8(f32::from_bits(hi << 16 | lo));
            }
        });
    }

    #[test]
    fn decode_finite_matches_the_table_on_every_finite_code() {
        for format in Fp8Format::ALL {
            for code in (0..=255u8).filter(|&c| format.is_finite_code(c)) {
                assert_eq!(
                    format.decode_finite(code).to_bits(),
                    format.decode(code).to_bits(),
                    "{format} 0x{code:02x}"
                );
            }
        }
    }

    #[test]
    fn table_matches_float8_at_run_time() {
        for code in 0..=255u8 {
            let a = Fp8Format::E4M3.decode(code);
            let b = F8E4M3::from_bits(code).to_f32();
            assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            let a = Fp8Format::E5M2.decode(code);
            let b = F8E5M2::from_bits(code).to_f32();
            assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
        }
    }

    #[test]
    fn max_is_the_largest_finite_value() {
        for format in Fp8Format::ALL {
            let largest = (0..=255u8)
                .map(|c| format.decode(c))
                .filter(|v| v.is_finite())
                .fold(0.0f32, f32::max);
            assert_eq!(format.max(), largest, "{format}");
            let smallest = (0..=255u8)
                .map(|c| format.decode(c))
                .filter(|v| v.is_finite() && *v > 0.0)
                .fold(f32::INFINITY, f32::min);
            assert_eq!(format.min_subnormal(), smallest, "{format}");
        }
        assert_eq!(Fp8Format::E4M3.max(), 448.0);
        assert_eq!(Fp8Format::E5M2.max(), 57344.0);
    }

    /// Documents why float8's own constants are not used: if a float8 upgrade fixes them,
    /// this test fails and the note in the module docs can go.
    #[test]
    fn float8_constants_are_wrong_and_ours_are_right() {
        assert_eq!(F8E4M3::MAX.to_f32(), 416.0);
        assert_eq!(F8E4M3::INFINITY.to_f32(), 448.0); // finite
        assert!(F8E4M3::from_bits(0x7e).is_infinite()); // 448 called infinite
        assert!(!Fp8Format::E4M3.is_inf_code(0x7e));
        assert_eq!(Fp8Format::E4M3.decode(0x7e), 448.0);

        assert_eq!(F8E5M2::MAX.to_f32(), 49152.0);
        assert_eq!(F8E5M2::INFINITY.to_f32(), 57344.0); // finite
        assert!(!F8E5M2::from_bits(0x7c).is_infinite()); // the real infinity
        assert!(!F8E5M2::from_bits(0x7d).is_nan()); // a real NaN
        assert!(Fp8Format::E5M2.is_inf_code(0x7c));
        assert!(Fp8Format::E5M2.is_inf_code(0xfc));
        assert_eq!(Fp8Format::E5M2.decode(0x7c), f32::INFINITY);
        assert_eq!(Fp8Format::E5M2.decode(0xfc), f32::NEG_INFINITY);
        for code in [0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff] {
            assert!(Fp8Format::E5M2.is_nan_code(code));
            assert!(Fp8Format::E5M2.decode(code).is_nan());
        }
        assert!(Fp8Format::E4M3.is_nan_code(0x7f) && Fp8Format::E4M3.is_nan_code(0xff));
    }

    /// float8's conversion saturates (CUDA `__NV_SATFINITE`): beyond max and ±∞ go to ±max,
    /// and round-to-nearest-even decides the half-way point above max.
    #[test]
    fn float8_conversion_saturates_to_finite_max() {
        use Fp8Format::*;
        // E4M3: 448 = 0x7e; the next step would be 480, so 464 is the tie (even: stays 448).
        for v in [
            448.0,
            449.0,
            463.9,
            464.0,
            464.1,
            1e6,
            f64::MAX,
            f64::INFINITY,
        ] {
            assert_eq!(E4M3.encode(v), 0x7e, "{v}");
            assert_eq!(E4M3.encode(-v), 0xfe, "{v}");
        }
        // E5M2: 57344 = 0x7b; next step 65536, tie 61440 rounds to even 65536 → saturates.
        for v in [57344.0, 60000.0, 61440.0, 65536.0, 1e30, f64::INFINITY] {
            assert_eq!(E5M2.encode(v), 0x7b, "{v}");
            assert_eq!(E5M2.encode(-v), 0xfb, "{v}");
        }
        assert!(E4M3.is_nan_code(E4M3.encode(f64::NAN)));
        assert!(E5M2.is_nan_code(E5M2.encode(f64::NAN)));
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        use Fp8Format::*;
        // E4M3 around 1: spacing 1/8. 1 + 1/16 is a tie between 1 (even) and 1.125.
        assert_eq!(E4M3.decode(E4M3.encode(1.0625)), 1.0);
        assert_eq!(E4M3.decode(E4M3.encode(1.0626)), 1.125);
        // 1.1875 is a tie between 1.125 (odd mantissa) and 1.25 (even).
        assert_eq!(E4M3.decode(E4M3.encode(1.1875)), 1.25);
        // E5M2 around 1: spacing 1/4; 1.125 ties to 1, 1.375 ties to 1.5.
        assert_eq!(E5M2.decode(E5M2.encode(1.125)), 1.0);
        assert_eq!(E5M2.decode(E5M2.encode(1.375)), 1.5);
        // Below half the smallest subnormal: zero; just above: the smallest subnormal.
        let tiny = f64::from(E4M3.min_subnormal());
        assert_eq!(E4M3.encode(tiny * 0.5), 0);
        assert_eq!(E4M3.encode(tiny * 0.51), 1);
        assert_eq!(E4M3.encode(-0.0), 0x80);
    }

    #[test]
    fn half_ulp_bounds_every_rounding() {
        for format in Fp8Format::ALL {
            let max = f64::from(format.max());
            // A dense deterministic sweep of [-max, max] including binade edges.
            let steps = 200_000;
            for i in 0..=steps {
                let v = -max + 2.0 * max * (i as f64) / steps as f64;
                let err = (v - f64::from(format.decode(format.encode(v)))).abs();
                assert!(err <= format.half_ulp(v), "{format} {v}: {err}");
            }
            assert_eq!(
                format.half_ulp(1.0),
                0.5 * 2f64.powi(-(format.mantissa_bits() as i32))
            );
            assert_eq!(
                format.half_ulp(0.0),
                0.5 * f64::from(format.min_subnormal())
            );
        }
    }

    #[test]
    fn parse_and_display() {
        for format in Fp8Format::ALL {
            assert_eq!(Fp8Format::parse(format.as_str()), Ok(format));
            assert_eq!(format.to_string().parse::<Fp8Format>(), Ok(format));
        }
        assert_eq!(Fp8Format::parse("E4M3"), Ok(Fp8Format::E4M3));
        assert!(matches!(
            Fp8Format::parse("e3m4"),
            Err(QuantizeError::UnknownFormat(s)) if s == "e3m4"
        ));
    }
}
