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
    /// saturation to ±[`max`](Self::max); NaN maps to a NaN code. Bit-exact with CUDA's
    /// `__NV_SATFINITE` conversion (via `float8`).
    #[inline]
    pub fn encode(self, v: f64) -> u8 {
        match self {
            Fp8Format::E4M3 => F8E4M3::from_f64(v).to_bits(),
            Fp8Format::E5M2 => F8E5M2::from_f64(v).to_bits(),
        }
    }

    /// Decodes a code to f32 (exact: every FP8 value is an f32).
    #[inline]
    pub fn decode(self, code: u8) -> f32 {
        self.decode_table()[usize::from(code)]
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
