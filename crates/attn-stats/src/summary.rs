//! Descriptive statistics of one sample and MAD-based outlier trimming.

use serde::Serialize;

use crate::StatsError;

/// Scale factor that turns a median absolute deviation into a consistent estimator of the
/// standard deviation for normal data: 1 / Φ⁻¹(3/4).
pub const MAD_TO_SIGMA: f64 = 1.482_602_218_505_602;

/// Checks that `data` is non-empty and finite.
pub(crate) fn check_sample(
    data: &[f64],
    needed: usize,
    what: &'static str,
) -> Result<(), StatsError> {
    if data.is_empty() {
        return Err(StatsError::EmptySample { needed });
    }
    if let Some((index, &value)) = data.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(StatsError::NonFinite { index, value });
    }
    if data.len() < needed {
        return Err(StatsError::TooFewSamples {
            n: data.len(),
            needed,
            what,
        });
    }
    Ok(())
}

/// Mean without checks; the caller guarantees a non-empty slice.
///
/// Sum-then-divide, refined by one pass of the residual mean Σ(x − m)/n, which cancels most
/// of the summation's rounding error; in particular a constant sample's mean is exactly
/// that constant (0.3 × 20 sums to 5.999…, and 5.999…/20 ≠ 0.3), so its squared deviations
/// are exactly 0 and an undefined effect size is detected instead of dividing by 1e−17.
pub(crate) fn mean_of(data: &[f64]) -> f64 {
    let n = data.len() as f64;
    let rough = data.iter().sum::<f64>() / n;
    rough + data.iter().map(|x| x - rough).sum::<f64>() / n
}

/// Sum of squared deviations from `mean` (two-pass, so no catastrophic cancellation).
pub(crate) fn sum_sq_dev(data: &[f64], mean: f64) -> f64 {
    data.iter().map(|x| (x - mean) * (x - mean)).sum()
}

/// Quantile of an already sorted, non-empty slice by linear interpolation between order
/// statistics (Hyndman & Fan 1996 type 7, numpy's default `linear` method).
pub(crate) fn quantile_sorted(sorted: &[f64], p: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    let (Some(&a), Some(&b)) = (sorted.get(lo), sorted.get(hi)) else {
        // Unreachable for p in [0, 1] and a non-empty slice; return the maximum rather than
        // panic if a caller ever gets here.
        return sorted.last().copied().unwrap_or(f64::NAN);
    };
    a + (h - lo as f64) * (b - a)
}

fn sorted_copy(data: &[f64]) -> Vec<f64> {
    let mut sorted = data.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    sorted
}

/// Arithmetic mean.
///
/// # Errors
/// [`StatsError::EmptySample`] or [`StatsError::NonFinite`].
pub fn mean(data: &[f64]) -> Result<f64, StatsError> {
    check_sample(data, 1, "a mean")?;
    Ok(mean_of(data))
}

/// Sample standard deviation with Bessel's correction (divides by n − 1).
///
/// # Errors
/// [`StatsError::TooFewSamples`] for n = 1, plus those of [`mean`].
pub fn std_dev(data: &[f64]) -> Result<f64, StatsError> {
    check_sample(data, 2, "a standard deviation (n - 1 in the denominator)")?;
    let m = mean_of(data);
    Ok((sum_sq_dev(data, m) / (data.len() - 1) as f64).sqrt())
}

/// Median (the mean of the two middle values when n is even).
///
/// # Errors
/// Those of [`mean`].
pub fn median(data: &[f64]) -> Result<f64, StatsError> {
    quantile(data, 0.5)
}

/// Quantile `p ∈ [0, 1]` by linear interpolation between order statistics (Hyndman & Fan
/// type 7, numpy's default), so `quantile(x, 0.5)` is the median.
///
/// # Errors
/// [`StatsError::InvalidProbability`], plus those of [`mean`].
pub fn quantile(data: &[f64], p: f64) -> Result<f64, StatsError> {
    if !(0.0..=1.0).contains(&p) {
        return Err(StatsError::InvalidProbability(p));
    }
    check_sample(data, 1, "a quantile")?;
    Ok(quantile_sorted(&sorted_copy(data), p))
}

/// Median absolute deviation from the median, unscaled: `median(|x − median(x)|)`.
/// Multiply by [`MAD_TO_SIGMA`] for a robust estimate of the standard deviation.
///
/// # Errors
/// Those of [`mean`].
pub fn mad(data: &[f64]) -> Result<f64, StatsError> {
    check_sample(data, 1, "a median absolute deviation")?;
    let sorted = sorted_copy(data);
    Ok(mad_of_sorted(&sorted).1)
}

/// (median, MAD) of a sorted non-empty slice.
fn mad_of_sorted(sorted: &[f64]) -> (f64, f64) {
    let med = quantile_sorted(sorted, 0.5);
    let mut dev: Vec<f64> = sorted.iter().map(|x| (x - med).abs()).collect();
    dev.sort_unstable_by(f64::total_cmp);
    (med, quantile_sorted(&dev, 0.5))
}

/// A few fixed quantiles of a sample (type 7 interpolation).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quantiles {
    /// 1st percentile.
    pub p01: f64,
    /// 5th percentile.
    pub p05: f64,
    /// First quartile.
    pub p25: f64,
    /// Third quartile.
    pub p75: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Descriptive statistics of one sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// Standard deviation with Bessel's correction (n − 1).
    pub std: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Median absolute deviation from the median, unscaled (see [`MAD_TO_SIGMA`]).
    pub mad: f64,
    /// Selected quantiles.
    pub quantiles: Quantiles,
}

impl Summary {
    /// Summarizes `data`.
    ///
    /// ```
    /// let s = attn_stats::Summary::new(&[1.0, 2.0, 3.0, 4.0, 100.0]).unwrap();
    /// assert_eq!((s.n, s.median, s.mad, s.max), (5, 3.0, 1.0, 100.0));
    /// assert_eq!(s.mean, 22.0);
    /// ```
    ///
    /// # Errors
    /// [`StatsError::EmptySample`], [`StatsError::NonFinite`], and
    /// [`StatsError::TooFewSamples`] for n = 1 (the standard deviation needs two values).
    pub fn new(data: &[f64]) -> Result<Self, StatsError> {
        check_sample(data, 2, "a summary (its standard deviation uses n - 1)")?;
        let sorted = sorted_copy(data);
        let mean = mean_of(data);
        let (median, mad) = mad_of_sorted(&sorted);
        let q = |p| quantile_sorted(&sorted, p);
        Ok(Summary {
            n: data.len(),
            mean,
            median,
            std: (sum_sq_dev(data, mean) / (data.len() - 1) as f64).sqrt(),
            min: q(0.0),
            max: q(1.0),
            mad,
            quantiles: Quantiles {
                p01: q(0.01),
                p05: q(0.05),
                p25: q(0.25),
                p75: q(0.75),
                p95: q(0.95),
                p99: q(0.99),
            },
        })
    }
}

/// The result of [`trim_outliers_mad`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trimmed {
    /// The values kept, in their original order.
    pub kept: Vec<f64>,
    /// How many values were dropped.
    pub dropped: usize,
    /// Smallest value kept by the rule (median − k·σ̂).
    pub lower_fence: f64,
    /// Largest value kept by the rule (median + k·σ̂).
    pub upper_fence: f64,
}

/// Drops values farther than `k` robust standard deviations from the median, where the
/// robust standard deviation is σ̂ = [`MAD_TO_SIGMA`]·MAD (Hampel's identifier; k = 3.5 is
/// the cut-off Iglewicz & Hoaglin (1993) recommend for their modified z-score).
///
/// Latency samples have a long right tail (preemption, clock changes); this removes the
/// stragglers without the mean or standard deviation they would inflate. When MAD = 0 (more
/// than half of the values are identical, e.g. a coarse timer) the scale is unknown and
/// nothing is dropped.
///
/// ```
/// let t = attn_stats::trim_outliers_mad(&[10.0, 10.2, 9.9, 10.1, 10.0, 55.0], 3.5).unwrap();
/// assert_eq!(t.dropped, 1);
/// assert_eq!(t.kept.len(), 5);
/// ```
///
/// # Errors
/// [`StatsError::InvalidOption`] unless `k` is finite and > 0, plus those of [`mean`].
pub fn trim_outliers_mad(data: &[f64], k: f64) -> Result<Trimmed, StatsError> {
    if !(k.is_finite() && k > 0.0) {
        return Err(StatsError::InvalidOption(format!(
            "the MAD trimming threshold must be finite and > 0 (3.5 is usual), got {k}"
        )));
    }
    check_sample(data, 1, "outlier trimming")?;
    let (med, mad) = mad_of_sorted(&sorted_copy(data));
    if mad == 0.0 {
        return Ok(Trimmed {
            kept: data.to_vec(),
            dropped: 0,
            lower_fence: f64::NEG_INFINITY,
            upper_fence: f64::INFINITY,
        });
    }
    let half_width = k * MAD_TO_SIGMA * mad;
    let (lower_fence, upper_fence) = (med - half_width, med + half_width);
    let kept: Vec<f64> = data
        .iter()
        .copied()
        .filter(|x| (lower_fence..=upper_fence).contains(x))
        .collect();
    Ok(Trimmed {
        dropped: data.len() - kept.len(),
        kept,
        lower_fence,
        upper_fence,
    })
}
