//! How much a quantization lost: per group and overall.

use std::fmt;

use crate::{
    granularity::{position, Groups},
    quantize::{check_len, check_scales, map_groups},
    Fp8Tensor, QuantInput, QuantizeError,
};

/// Error statistics of one group (or of the whole tensor) of a quantization, computed in f64
/// between the input `x` and its dequantized value `x̂ = decode(code) · scale` (f32 product).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QuantErrorStats {
    /// Elements covered.
    pub elements: usize,
    /// `max |x − x̂|`.
    pub max_abs: f64,
    /// `Σ x²`.
    pub signal_energy: f64,
    /// `Σ (x − x̂)²`.
    pub error_energy: f64,
    /// Elements with `|x| > max · scale`: clipped to ±max rather than rounded. Zero for
    /// scales from [`quantize`](crate::quantize) (they are rounded up so that the group's
    /// amax fits); non-zero with [`quantize_with_scales`](crate::quantize_with_scales) when the
    /// data outgrew the scales.
    pub saturated: usize,
}

impl QuantErrorStats {
    /// Relative L2 error `‖x − x̂‖ / ‖x‖`; 0 when both are zero, ∞ when only `x` is.
    pub fn rel_l2(&self) -> f64 {
        if self.error_energy == 0.0 {
            0.0
        } else {
            (self.error_energy / self.signal_energy).sqrt()
        }
    }

    /// Signal-to-noise ratio `10 · log10(Σx² / Σ(x − x̂)²)` in dB; +∞ when the error is zero.
    pub fn snr_db(&self) -> f64 {
        if self.error_energy == 0.0 {
            f64::INFINITY
        } else {
            10.0 * (self.signal_energy / self.error_energy).log10()
        }
    }

    /// Root-mean-square error.
    pub fn rmse(&self) -> f64 {
        if self.elements == 0 {
            0.0
        } else {
            (self.error_energy / self.elements as f64).sqrt()
        }
    }

    /// The statistics of the union of two disjoint sets of elements.
    pub fn merge(self, other: Self) -> Self {
        Self {
            elements: self.elements + other.elements,
            max_abs: self.max_abs.max(other.max_abs),
            signal_energy: self.signal_energy + other.signal_energy,
            error_energy: self.error_energy + other.error_energy,
            saturated: self.saturated + other.saturated,
        }
    }
}

/// The error of a quantization, per group (in scales order) and overall.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantErrorReport {
    /// The whole tensor.
    pub overall: QuantErrorStats,
    /// One entry per scale, in the scales buffer's order.
    pub groups: Vec<QuantErrorStats>,
}

impl QuantErrorReport {
    /// The group with the largest relative L2 error, if any group has a non-zero error.
    pub fn worst_group(&self) -> Option<(usize, &QuantErrorStats)> {
        self.groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.error_energy > 0.0)
            .max_by(|a, b| a.1.rel_l2().total_cmp(&b.1.rel_l2()))
    }
}

impl fmt::Display for QuantErrorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.overall;
        write!(
            f,
            "{} elements in {} groups: max abs error {:.3e}, rel L2 {:.3e}, SNR {:.2} dB, \
             {} saturated",
            o.elements,
            self.groups.len(),
            o.max_abs,
            o.rel_l2(),
            o.snr_db(),
            o.saturated
        )?;
        if let Some((g, worst)) = self.worst_group() {
            write!(f, "; worst group {g}: rel L2 {:.3e}", worst.rel_l2())?;
        }
        Ok(())
    }
}

/// Measures how far `q` is from `x` (the tensor it was quantized from), per group and overall.
///
/// Errors: `x`, the codes or the scales of the wrong length, an invalid scale, a non-finite
/// input, or a code that decodes to NaN/±∞.
pub fn error_report<T: QuantInput>(
    x: &[T],
    q: &Fp8Tensor,
) -> Result<QuantErrorReport, QuantizeError> {
    let groups = Groups::new(q.shape, q.granularity)?;
    let shape = q.shape;
    let needs = || format!("shape {shape:?}");
    check_len("input", x.len(), groups.elements(), needs)?;
    check_len("codes", q.codes.len(), groups.elements(), needs)?;
    check_scales(&groups, &q.scales)?;
    let table = q.format.decode_table();
    let max = f64::from(q.format.max());
    let row_len = groups.row_len;
    let stats: Vec<Result<QuantErrorStats, QuantizeError>> = map_groups(
        &groups,
        |range| {
            let scale = q.scales[groups.group_of_row(range.start / row_len)];
            let clip = max * f64::from(scale);
            let mut s = QuantErrorStats {
                elements: range.len(),
                ..QuantErrorStats::default()
            };
            for i in range {
                let (v, code) = (x[i].to_f64(), q.codes[i]);
                let approx = table[usize::from(code)] * scale;
                if !v.is_finite() {
                    return Err(QuantizeError::NonFiniteInput {
                        index: i,
                        position: position(shape, i),
                        value: v,
                    });
                }
                if !q.format.is_finite_code(code) {
                    return Err(QuantizeError::NonFiniteCode {
                        index: i,
                        position: position(shape, i),
                        code,
                        format: q.format,
                        decoded: table[usize::from(code)],
                    });
                }
                let err = (v - f64::from(approx)).abs();
                s.max_abs = s.max_abs.max(err);
                s.signal_energy += v * v;
                s.error_energy += err * err;
                s.saturated += usize::from(v.abs() > clip);
            }
            Ok(s)
        },
        |a, b| Ok(a?.merge(b?)),
    );
    let groups = stats.into_iter().collect::<Result<Vec<_>, _>>()?;
    let overall = groups
        .iter()
        .fold(QuantErrorStats::default(), |acc, g| acc.merge(*g));
    Ok(QuantErrorReport { overall, groups })
}
