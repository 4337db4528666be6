//! A CPU model of `exp2_fma` (kernels/softmax.cuh), the polynomial 2^x that the Hopper
//! kernel's softcap entries run on the FMA pipe for half the softmax's exponentials. The
//! coefficients are read from the kernel source, so these tests check what the GPU runs:
//! the relative error bound the source's comment states, over floats all through
//! [-127, 0]; exact powers of two at integers; 0 below 2^-126 and at -inf; NaN kept.
//! The model follows the kernel's steps in f32 with fused multiply-adds (`mul_add`, as
//! FFMA); the one step it cannot take literally is the add rounding toward -inf, which it
//! writes as what that add yields here (1.5 · 2^23 + floor(x), exact in f32 for |x| < 2^22).

const SOFTMAX_CUH: &str = include_str!("../kernels/softmax.cuh");

/// Parses a C hex float literal such as `0x1.63e63cp-1f` (the kernel's coefficients).
fn parse_hex_float(lit: &str) -> Option<f64> {
    let body = lit.trim_end_matches('f').strip_prefix("0x")?;
    let (mantissa, exp) = body.split_once('p')?;
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut value = u64::from_str_radix(int, 16).ok()? as f64;
    let mut weight = 1.0 / 16.0;
    for c in frac.chars() {
        value += f64::from(c.to_digit(16)?) * weight;
        weight /= 16.0;
    }
    Some(value * 2f64.powi(exp.parse().ok()?))
}

/// The coefficients of `exp2_fma<degree>` as the kernel's Horner line lists them (highest
/// degree first, the constant 1 left out).
fn coefficients(degree: usize) -> Vec<f32> {
    let marker = format!("DEGREE == {degree}) {{");
    let start = SOFTMAX_CUH
        .find(&marker)
        .unwrap_or_else(|| panic!("softmax.cuh: no `{marker}` branch in exp2_fma"));
    let line = SOFTMAX_CUH[start..]
        .lines()
        .nth(1)
        .expect("the Horner line after the branch");
    let coeffs: Vec<f32> = line
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-'))
        .filter(|tok| tok.starts_with("0x"))
        .map(|tok| parse_hex_float(tok).expect("a hex float literal") as f32)
        .collect();
    assert_eq!(coeffs.len(), degree, "softmax.cuh: {line}");
    coeffs
}

/// exp2_fma's steps in f32.
fn exp2_fma(x: f32, coeffs: &[f32]) -> f32 {
    const SHIFT: f32 = 12_582_912.0; // 1.5 · 2^23
    let xc = if x.is_nan() { x } else { x.max(-127.0) }; // max.NaN.f32
    let t = SHIFT + xc.floor(); // add.rm.f32 xc, SHIFT (NaN stays NaN)
    let f = xc - (t - SHIFT);
    let q = coeffs[1..].iter().fold(coeffs[0], |q, &c| q.mul_add(f, c));
    let poly = q.mul_add(f, 1.0);
    let pow_j = f32::from_bits((t.to_bits() << 23).wrapping_add(0x3f80_0000));
    poly * pow_j
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bounds softmax.cuh's comment states, per degree.
    const BOUNDS: [(usize, f64); 2] = [(3, 8.7e-5), (4, 3.0e-6)];

    #[test]
    fn hex_float_literals_parse() {
        assert_eq!(parse_hex_float("0x1.8p1f"), Some(3.0));
        assert_eq!(parse_hex_float("0x1.0p-1"), Some(0.5));
        assert_eq!(
            parse_hex_float("0x1.63e63cp-1f"),
            Some(0.695_115_923_881_530_8)
        );
        assert_eq!(parse_hex_float("1.5"), None);
    }

    #[test]
    fn relative_error_within_the_stated_bound_over_minus_127_to_0() {
        for (degree, bound) in BOUNDS {
            let c = coefficients(degree);
            let mut worst = (0.0f64, 0.0f32);
            // Every 61st float of [-126, 0] (about 18 million, all exponents and fractions).
            let top = (-126.0f32).to_bits();
            let mut bits = 0x8000_0000u32;
            while bits <= top {
                let x = f32::from_bits(bits);
                let got = f64::from(exp2_fma(x, &c));
                let want = f64::from(x).exp2();
                let rel = (got - want).abs() / want;
                if rel > worst.0 {
                    worst = (rel, x);
                }
                bits += 61;
            }
            assert!(
                worst.0 <= bound,
                "degree {degree}: relative error {:.3e} at x = {} exceeds {bound:.1e}",
                worst.0,
                worst.1
            );
            // The bound is the fit's, not slack: the worst case comes within 10 % of it.
            assert!(
                worst.0 > 0.9 * bound,
                "degree {degree}: worst {:.3e}",
                worst.0
            );
        }
    }

    #[test]
    fn integers_give_exact_powers_of_two_and_the_ends_are_zero_or_nan() {
        for (degree, _) in BOUNDS {
            let c = coefficients(degree);
            for j in -126..=0 {
                assert_eq!(
                    exp2_fma(j as f32, &c),
                    (j as f32).exp2(),
                    "degree {degree}, x = {j}"
                );
            }
            for x in [-126.5f32, -127.0, -1000.0, f32::MIN, f32::NEG_INFINITY] {
                assert_eq!(exp2_fma(x, &c), 0.0, "degree {degree}, x = {x}");
            }
            assert!(exp2_fma(f32::NAN, &c).is_nan());
            assert_eq!(exp2_fma(-0.0, &c), 1.0);
            // Just below an integer, f = x − floor(x) rounds up to 1: 2^1 · 2^-1 by the
            // polynomial's value at 1, within the bound.
            let tiny = f64::from(exp2_fma(-1e-30, &c));
            assert!(
                tiny <= 1.0 && 1.0 - tiny <= BOUNDS[degree - 3].1,
                "degree {degree}: {tiny}"
            );
        }
    }
}
