//! The workspace's tolerance rule (docs/ARCHITECTURE.md): the primary FlashAttention-3 rule
//! `max|out − ref| ≤ 2·max|emu − ref| + 1e-5`, where `emu` is the reference run with the
//! kernel's rounding points, plus fixed sanity caps per storage type.

use std::fmt;

use serde::Serialize;

use crate::compare::sci;
use crate::OracleReport;

/// The storage type of Q, K, V (and O) in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// FP8 E4M3 with per-head scales.
    Fp8E4m3,
}

impl Storage {
    /// Parses `f16`, `bf16` or `e4m3`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "f16" | "fp16" => Some(Storage::F16),
            "bf16" => Some(Storage::Bf16),
            "e4m3" | "fp8" => Some(Storage::Fp8E4m3),
            _ => None,
        }
    }
    /// Unit roundoff of the storage type (half an ulp at 1): 2⁻¹¹ for f16, 2⁻⁸ for bf16,
    /// 2⁻⁴ for E4M3.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            Storage::F16 => 2f64.powi(-11),
            Storage::Bf16 => 2f64.powi(-8),
            Storage::Fp8E4m3 => 2f64.powi(-4),
        }
    }

    /// The spacing of the storage type's values at `x` (one ulp): `2^(e − m)` with `e` the
    /// binary exponent of `|x|` (clamped to the smallest normal's, so subnormals share its
    /// spacing) and `m` the mantissa bits (10, 7, 3).
    pub fn ulp(self, x: f64) -> f64 {
        let (mantissa, min_exp) = match self {
            Storage::F16 => (10, -14),
            Storage::Bf16 => (7, -126),
            Storage::Fp8E4m3 => (3, -6),
        };
        let e = if x == 0.0 || !x.is_finite() {
            min_exp
        } else {
            (x.abs().log2().floor() as i32).max(min_exp)
        };
        2f64.powi(e - mantissa)
    }

    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Storage::F16 => "f16",
            Storage::Bf16 => "bf16",
            Storage::Fp8E4m3 => "e4m3",
        }
    }
}

impl From<attn_ref::Dtype> for Storage {
    fn from(s: attn_ref::Dtype) -> Self {
        match s {
            attn_ref::Dtype::F16 => Storage::F16,
            attn_ref::Dtype::Bf16 => Storage::Bf16,
        }
    }
}

/// Sanity caps of the tolerance rule (kernel vs the f64 reference).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Caps {
    /// Max abs error of O; `None` where the table has no entry (FP8).
    pub max_abs: Option<f64>,
    /// `‖out − ref‖ / ‖ref‖` of O.
    pub rel_l2: f64,
    /// Max abs error of LSE.
    pub lse_abs: f64,
    /// `‖out − ref‖ / ‖ref‖` of each gradient (dQ, dK, dV), on top of the primary rule.
    pub grad_rel_l2: f64,
}

impl Caps {
    /// The table's row for a storage type.
    pub fn for_storage(storage: Storage) -> Self {
        match storage {
            Storage::F16 => Caps {
                max_abs: Some(4e-3),
                rel_l2: 1e-3,
                lse_abs: 1e-3,
                grad_rel_l2: 2e-3,
            },
            Storage::Bf16 => Caps {
                max_abs: Some(3e-2),
                rel_l2: 8e-3,
                lse_abs: 1e-3,
                grad_rel_l2: 1e-2,
            },
            Storage::Fp8E4m3 => Caps {
                max_abs: None,
                rel_l2: 3e-2,
                lse_abs: 2e-2,
                grad_rel_l2: f64::INFINITY,
            },
        }
    }
}

/// The rule: `max|out − ref| ≤ emu_factor·max|emu − ref| + floor`, and the caps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ToleranceRule {
    /// The storage type the caps are for.
    pub storage: Storage,
    /// Multiplier of the emulation's error (2).
    pub emu_factor: f64,
    /// Absolute floor (1e-5), so that an emulation exact by luck does not demand exactness.
    pub floor: f64,
    /// Sanity caps.
    pub caps: Caps,
}

impl ToleranceRule {
    /// The tolerance rule for a storage type.
    pub fn for_storage(storage: Storage) -> Self {
        Self {
            storage,
            emu_factor: 2.0,
            floor: 1e-5,
            caps: Caps::for_storage(storage),
        }
    }

    /// The primary bound on `max|out − ref|` given the emulation's `max|emu − ref|`.
    pub fn bound(&self, emu_max_abs: f64) -> f64 {
        self.emu_factor * emu_max_abs + self.floor
    }

    /// Checks the kernel's O (and LSE when given) against the rule. `out` and `emu` are the
    /// kernel's and the emulation's comparisons with the same f64 reference. Any unexpected
    /// NaN/Inf fails, whatever the numbers.
    pub fn check(
        &self,
        out: &OracleReport,
        emu: &OracleReport,
        lse: Option<&OracleReport>,
    ) -> Verdict {
        let bound = self.bound(emu.max_abs);
        let mut reasons = Vec::new();
        let nonfinite = out.nonfinite_faults();
        if nonfinite > 0 {
            reasons.push(format!(
                "O has {nonfinite} NaN/Inf values the reference does not have"
            ));
        }
        if emu.nonfinite_faults() > 0 {
            reasons.push(format!(
                "the emulation itself has {} NaN/Inf values the reference does not have: the bound is meaningless",
                emu.nonfinite_faults()
            ));
        }
        if out.max_abs > bound {
            reasons.push(format!(
                "max|out − ref| = {} > {}·max|emu − ref| + {} = {}",
                sci(out.max_abs),
                self.emu_factor,
                sci(self.floor),
                sci(bound)
            ));
        }
        if let Some(cap) = self.caps.max_abs {
            if out.max_abs > cap {
                reasons.push(format!(
                    "max abs {} > the {} cap {}",
                    sci(out.max_abs),
                    self.storage.as_str(),
                    sci(cap)
                ));
            }
        }
        if out.rel_l2 > self.caps.rel_l2 {
            reasons.push(format!(
                "rel L2 {} > the {} cap {}",
                sci(out.rel_l2),
                self.storage.as_str(),
                sci(self.caps.rel_l2)
            ));
        }
        let mut lse_max_abs = None;
        if let Some(l) = lse {
            lse_max_abs = Some(l.max_abs);
            if l.nonfinite_faults() > 0 {
                reasons.push(format!(
                    "LSE has {} NaN/Inf values the reference does not have",
                    l.nonfinite_faults()
                ));
            }
            if l.max_abs > self.caps.lse_abs {
                reasons.push(format!(
                    "LSE max abs {} > the cap {}",
                    sci(l.max_abs),
                    sci(self.caps.lse_abs)
                ));
            }
        }
        Verdict {
            pass: reasons.is_empty(),
            reasons,
            bound,
            out_max_abs: out.max_abs,
            emu_max_abs: emu.max_abs,
            out_rel_l2: out.rel_l2,
            lse_max_abs,
            worst: None,
        }
    }
}

impl ToleranceRule {
    /// The rule for one gradient (dQ, dK or dV) against the f64 reference: no NaN/Inf the
    /// reference lacks, `max|out − ref| ≤ 2·max|emu − ref| + 1e-5` with `emu` the backward
    /// rounding emulation, and the gradient rel-L2 cap of the storage type.
    pub fn check_gradient(&self, out: &[f32], emu: &[f32], reference: &[f64]) -> Verdict {
        let stats = |x: &[f32]| {
            let (mut max_abs, mut err2, mut bad) = (0.0f64, 0.0f64, 0usize);
            for (&a, &r) in x.iter().zip(reference) {
                let a = f64::from(a);
                if !a.is_finite() && r.is_finite() {
                    bad += 1;
                    continue;
                }
                let e = (a - r).abs();
                max_abs = max_abs.max(e);
                err2 += e * e;
            }
            (max_abs, err2.sqrt(), bad)
        };
        let ref_norm = reference.iter().map(|r| r * r).sum::<f64>().sqrt();
        let (out_max, out_l2, out_bad) = stats(out);
        let (emu_max, _, emu_bad) = stats(emu);
        let rel = if ref_norm > 0.0 {
            out_l2 / ref_norm
        } else {
            out_l2
        };
        let bound = self.bound(emu_max);
        let worst = self.worst_element(out, emu, reference);
        let mut reasons = Vec::new();
        if out.len() != reference.len() || emu.len() != reference.len() {
            reasons.push(format!(
                "lengths differ: out {}, emu {}, reference {}",
                out.len(),
                emu.len(),
                reference.len()
            ));
        }
        if out_bad > 0 {
            reasons.push(format!(
                "{out_bad} NaN/Inf values the reference does not have"
            ));
        }
        if emu_bad > 0 {
            reasons.push(format!(
                "the emulation has {emu_bad} NaN/Inf values: the bound is meaningless"
            ));
        }
        if out_max > bound {
            reasons.push(format!(
                "max|out − ref| = {} > {}·max|emu − ref| + {} = {}",
                sci(out_max),
                self.emu_factor,
                sci(self.floor),
                sci(bound)
            ));
        }
        if rel > self.caps.grad_rel_l2 {
            reasons.push(format!(
                "rel L2 {} > the {} gradient cap {}",
                sci(rel),
                self.storage.as_str(),
                sci(self.caps.grad_rel_l2)
            ));
        }
        Verdict {
            pass: reasons.is_empty(),
            reasons,
            bound,
            out_max_abs: out_max,
            emu_max_abs: emu_max,
            out_rel_l2: rel,
            lse_max_abs: None,
            worst,
        }
    }

    /// Where `out` is furthest from the reference, and how far `out` and the emulation are
    /// apart in the storage type's ulps: the evidence that tells an unlucky rounding (out
    /// and emu one ulp apart where the true value sits near a rounding boundary) from an
    /// error source the emulation does not model (several ulps apart).
    fn worst_element(&self, out: &[f32], emu: &[f32], reference: &[f64]) -> Option<GradientWorst> {
        let mut worst: Option<(usize, f64)> = None;
        let (mut ulps, mut ulps_at, mut differ) = (0.0f64, 0usize, 0usize);
        // Ulps at the tensor's largest magnitude, the scale of the rule's max-abs bound: a
        // rounding flip of one term shows as about one, an unmodelled error as many.
        let top = reference
            .iter()
            .filter(|r| r.is_finite())
            .fold(0.0f64, |m, r| m.max(r.abs()));
        let unit = self.storage.ulp(top);
        for (i, ((&o, &e), &r)) in out.iter().zip(emu).zip(reference).enumerate() {
            let (o, e) = (f64::from(o), f64::from(e));
            if !(o.is_finite() && e.is_finite() && r.is_finite()) {
                continue;
            }
            let err = (o - r).abs();
            if worst.is_none_or(|(_, w)| err > w) {
                worst = Some((i, err));
            }
            if o != e {
                differ += 1;
                let apart = (o - e).abs() / unit;
                if apart > ulps {
                    (ulps, ulps_at) = (apart, i);
                }
            }
        }
        let (index, _) = worst?;
        Some(GradientWorst {
            index,
            out: f64::from(out[index]),
            emu: f64::from(emu[index]),
            reference: reference[index],
            out_emu_differ: differ,
            out_emu_max_ulps: ulps,
            out_emu_max_ulps_index: ulps_at,
        })
    }
}

/// The element of a gradient furthest from the reference, and how the kernel's output
/// differs from the emulation's overall (see [`Verdict::worst`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GradientWorst {
    /// Flat index of `max|out − ref|`.
    pub index: usize,
    /// The kernel's value there.
    pub out: f64,
    /// The emulation's value there.
    pub emu: f64,
    /// The f64 reference there.
    pub reference: f64,
    /// How many elements the kernel and the emulation disagree on.
    pub out_emu_differ: usize,
    /// The largest `|out − emu|` in ulps of the storage type at the reference's largest
    /// magnitude.
    pub out_emu_max_ulps: f64,
    /// Where that largest disagreement is.
    pub out_emu_max_ulps_index: usize,
}

/// Standard deviations of rounding noise that [`ToleranceRule::check_row_sum_gradient`]
/// allows.
pub const ROW_SUM_SIGMAS: f64 = 8.0;

impl ToleranceRule {
    /// The rule for a gradient that is a weighted sum over query rows of `Δ_i = dO_i·O_i`,
    /// such as the sink logits' gradient `dsink_h = −Σ_i w_i·Δ_i` (`w_i = exp(sink_h −
    /// LSE_i)`). Each output is a sum of hundreds of terms, so the element-wise FA3 rule
    /// (2× the emulation's max error) is a coin toss on a handful of outputs: the kernel's Δ
    /// uses its own O, which differs from the emulation's by independent roundings. Instead
    /// each term is given the noise of rounding O to the storage type, about
    /// `u·|dO_id·O_id|` per element with `u` the unit roundoff, and the output passes when
    ///
    /// `|out − ref| ≤ 8·u·spread + floor`, with `spread = sqrt(Σ_i w_i² Σ_d (dO_id·O_id)²)`
    ///
    /// computed by the caller from the reference's O and LSE. Eight standard deviations
    /// cover O's own error (within a few roundings by the forward rule) with margin, and are
    /// still far below a wrong sign, a missing row or a wrong head, which are of the order of
    /// the output. NaN/Inf the reference lacks fail.
    pub fn check_row_sum_gradient(
        &self,
        out: &[f32],
        reference: &[f64],
        spread: &[f64],
    ) -> Verdict {
        let u = self.storage.unit_roundoff();
        let mut reasons = Vec::new();
        if out.len() != reference.len() || spread.len() != reference.len() {
            reasons.push(format!(
                "lengths differ: out {}, reference {}, spread {}",
                out.len(),
                reference.len(),
                spread.len()
            ));
        }
        let (mut max_abs, mut err2, mut worst_bound) = (0.0f64, 0.0f64, 0.0f64);
        for (i, ((&o, &r), &w)) in out.iter().zip(reference).zip(spread).enumerate() {
            let o = f64::from(o);
            if !o.is_finite() && r.is_finite() {
                reasons.push(format!("output {i} is {o}, the reference {}", sci(r)));
                continue;
            }
            let e = (o - r).abs();
            let bound = ROW_SUM_SIGMAS * u * w + self.floor;
            if e > bound {
                reasons.push(format!(
                    "output {i}: |out − ref| = {} > {ROW_SUM_SIGMAS}·u·spread + {} = {}",
                    sci(e),
                    sci(self.floor),
                    sci(bound)
                ));
            }
            max_abs = max_abs.max(e);
            err2 += e * e;
            worst_bound = worst_bound.max(bound);
        }
        let ref_norm = reference.iter().map(|r| r * r).sum::<f64>().sqrt();
        Verdict {
            pass: reasons.is_empty(),
            reasons,
            bound: worst_bound,
            out_max_abs: max_abs,
            emu_max_abs: f64::NAN,
            out_rel_l2: if ref_norm > 0.0 {
                err2.sqrt() / ref_norm
            } else {
                err2.sqrt()
            },
            lse_max_abs: None,
            worst: None,
        }
    }
}

/// The outcome of [`ToleranceRule::check`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// Whether every check holds.
    pub pass: bool,
    /// One line per failed check (empty when `pass`).
    pub reasons: Vec<String>,
    /// The primary bound `2·max|emu − ref| + 1e-5`.
    pub bound: f64,
    /// `max|out − ref|`.
    pub out_max_abs: f64,
    /// `max|emu − ref|`.
    pub emu_max_abs: f64,
    /// `‖out − ref‖ / ‖ref‖`.
    pub out_rel_l2: f64,
    /// LSE max abs, when checked.
    pub lse_max_abs: Option<f64>,
    /// For gradients ([`ToleranceRule::check_gradient`]): the worst element and the kernel's
    /// distance from the emulation; `None` for the other checks.
    pub worst: Option<GradientWorst>,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "tolerance: {} (max|out − ref| {} vs bound {}, emu {}, rel L2 {})",
            if self.pass { "PASS" } else { "FAIL" },
            sci(self.out_max_abs),
            sci(self.bound),
            sci(self.emu_max_abs),
            sci(self.out_rel_l2)
        )?;
        for r in &self.reasons {
            writeln!(f, "  - {r}")?;
        }
        if let (false, Some(w)) = (self.pass, &self.worst) {
            writeln!(
                f,
                "  - worst at [{}]: out {}, emu {}, ref {}; out and emu differ at {} elements, by at most {:.2} ulps of the largest |ref| (at [{}])",
                w.index,
                sci(w.out),
                sci(w.emu),
                sci(w.reference),
                w.out_emu_differ,
                w.out_emu_max_ulps,
                w.out_emu_max_ulps_index
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod row_sum_tests {
    use super::*;

    #[test]
    fn the_row_sum_rule_scales_with_the_spread_and_catches_gross_errors() {
        let rule = ToleranceRule::for_storage(Storage::Bf16);
        let reference = [-12.0, 3.5, 0.0];
        let spread = [4.0, 2.0, 0.0];
        // 8·2⁻⁸·4 = 0.125 and 8·2⁻⁸·2 = 0.0625; the third output must be exact to 1e-5.
        assert!(
            rule.check_row_sum_gradient(&[-12.1, 3.44, 0.0], &reference, &spread)
                .pass
        );
        let v = rule.check_row_sum_gradient(&[-12.2, 3.5, 0.0], &reference, &spread);
        assert!(!v.pass && v.reasons[0].starts_with("output 0"), "{v}");
        // A wrong sign or a dropped term is far outside.
        assert!(
            !rule
                .check_row_sum_gradient(&[12.0, 3.5, 0.0], &reference, &spread)
                .pass
        );
        assert!(
            !rule
                .check_row_sum_gradient(&[-12.0, 3.5, 1e-3], &reference, &spread)
                .pass
        );
        // f16's bound is 8× tighter.
        let f16 = ToleranceRule::for_storage(Storage::F16);
        assert!(
            !f16.check_row_sum_gradient(&[-12.1, 3.5, 0.0], &reference, &spread)
                .pass
        );
        // NaN and length mismatches fail.
        assert!(
            !rule
                .check_row_sum_gradient(&[f32::NAN, 3.5, 0.0], &reference, &spread)
                .pass
        );
        assert!(
            !rule
                .check_row_sum_gradient(&[-12.0, 3.5], &reference, &spread)
                .pass
        );
    }
}

#[cfg(test)]
mod gradient_tests {
    use super::*;

    #[test]
    fn a_gradient_passes_within_twice_the_emulation_and_fails_beyond_it() {
        let rule = ToleranceRule::for_storage(Storage::F16);
        let reference = vec![1.0f64, -2.0, 0.5, 4.0];
        let emu: Vec<f32> = reference.iter().map(|&r| (r + 1e-4) as f32).collect();
        let good: Vec<f32> = reference.iter().map(|&r| (r - 1.5e-4) as f32).collect();
        assert!(rule.check_gradient(&good, &emu, &reference).pass);
        let bad: Vec<f32> = reference.iter().map(|&r| (r + 5e-4) as f32).collect();
        let v = rule.check_gradient(&bad, &emu, &reference);
        assert!(!v.pass, "{v}");
        let mut nan = good.clone();
        nan[2] = f32::NAN;
        assert!(!rule.check_gradient(&nan, &emu, &reference).pass);
    }

    #[test]
    fn a_failed_gradient_names_its_worst_element_and_the_ulps_between_out_and_emu() {
        let rule = ToleranceRule::for_storage(Storage::F16);
        // f16 spacing is 2⁻¹⁰ in [1, 2) and 2⁻⁸ in [4, 8).
        assert_eq!(Storage::F16.ulp(1.5), 2f64.powi(-10));
        assert_eq!(Storage::F16.ulp(-5.0), 2f64.powi(-8));
        assert_eq!(Storage::F16.ulp(1e-7), 2f64.powi(-24));
        assert_eq!(Storage::Bf16.ulp(3.0), 2f64.powi(-6));
        let reference = vec![1.0f64, 2.5, 4.5];
        let emu = vec![1.0f32, 2.5, 4.5];
        // In ulps at the largest magnitude (4.5: 2⁻⁸), element 1 is off by 2 (4·2⁻⁹) and
        // element 2 by one.
        let out = vec![1.0f32, 2.5 + 4.0 * 2f32.powi(-9), 4.5 + 2f32.powi(-8)];
        let v = rule.check_gradient(&out, &emu, &reference);
        assert!(!v.pass, "{v}");
        let w = v
            .worst
            .as_ref()
            .expect("a gradient verdict has its worst element");
        assert_eq!(
            (w.index, w.out_emu_differ, w.out_emu_max_ulps_index),
            (1, 2, 1)
        );
        assert!((w.out_emu_max_ulps - 2.0).abs() < 1e-9, "{w:?}");
        assert!(v.to_string().contains("worst at [1]"), "{v}");
    }

    #[test]
    fn the_gradient_rel_l2_cap_applies_even_when_the_emulation_is_loose() {
        let rule = ToleranceRule::for_storage(Storage::Bf16);
        let reference = vec![1.0f64; 100];
        let emu = vec![1.2f32; 100]; // a loose emulation makes the primary bound loose
        let out = vec![1.05f32; 100]; // 5 % off: over the 1e-2 cap
        let v = rule.check_gradient(&out, &emu, &reference);
        assert!(
            !v.pass && v.reasons.iter().any(|r| r.contains("gradient cap")),
            "{v}"
        );
    }
}
