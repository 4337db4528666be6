//! Standardized mean differences: Cohen's d and Hedges' g.
//!
//! Both are `(mean_candidate − mean_baseline) / s_pooled` with the pooled standard deviation
//! `s_pooled = √(((n_b − 1)·s_b² + (n_c − 1)·s_c²) / (n_b + n_c − 2))`. Cohen's d is biased
//! away from 0 in small samples; Hedges' g multiplies it by the small-sample correction
//! `J = 1 − 3 / (4(n_b + n_c) − 9)`, i.e. `1 − 3/(4·df − 1)` with `df = n_b + n_c − 2`
//! (Hedges 1981; Hedges & Olkin 1985, eq. 5.10; Borenstein et al. 2009, eq. 4.22), an
//! approximation of the exact `Γ(df/2) / (√(df/2)·Γ((df − 1)/2))` within 0.0005 for df ≥ 10.
//!
//! Sign: negative when the candidate's mean is lower (for latencies, faster).

use serde::Serialize;

use crate::bootstrap::{bootstrap_samples, BootstrapConfig, ConfidenceInterval};
use crate::jackknife;
use crate::normal;
use crate::resample::{Centered, TwoSampleMoments};
use crate::summary::{check_sample, mean_of, sum_sq_dev};
use crate::StatsError;

/// Hedges' small-sample correction `J = 1 − 3 / (4(n_b + n_c) − 9)`.
///
/// ```
/// assert!((attn_stats::hedges_correction(10, 10) - (1.0 - 3.0 / 71.0)).abs() < 1e-15);
/// ```
pub fn hedges_correction(n_baseline: usize, n_candidate: usize) -> f64 {
    1.0 - 3.0 / (4.0 * (n_baseline + n_candidate) as f64 - 9.0)
}

/// Effect size of a candidate against a baseline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EffectSize {
    /// `mean_candidate − mean_baseline`.
    pub mean_difference: f64,
    /// Pooled standard deviation (n − 1 weighting), > 0.
    pub pooled_std: f64,
    /// Cohen's d = mean difference / pooled std.
    pub cohens_d: f64,
    /// Hedges' small-sample correction J (see [`hedges_correction`]).
    pub correction: f64,
    /// Hedges' g = J · d.
    pub hedges_g: f64,
    /// Baseline sample size.
    pub n_baseline: usize,
    /// Candidate sample size.
    pub n_candidate: usize,
}

impl EffectSize {
    /// Effect size from raw samples.
    ///
    /// ```
    /// // Lakens (2013), Table 1: movie ratings of two groups of 10.
    /// let movie_1 = [9., 7., 8., 9., 8., 9., 9., 10., 9., 9.];
    /// let movie_2 = [9., 6., 7., 8., 7., 9., 8., 8., 8., 7.];
    /// let es = attn_stats::EffectSize::from_samples(&movie_2, &movie_1).unwrap();
    /// assert!((es.cohens_d - 1.13).abs() < 0.005 && (es.hedges_g - 1.08).abs() < 0.005);
    /// ```
    ///
    /// # Errors
    /// A sample that is empty, has n = 1 or holds a non-finite value (named `baseline` or
    /// `candidate`); [`StatsError::ZeroVariance`] when both samples are constant.
    pub fn from_samples(baseline: &[f64], candidate: &[f64]) -> Result<Self, StatsError> {
        const WHAT: &str = "an effect size (its standard deviation uses n - 1)";
        check_sample(baseline, 2, WHAT).map_err(|e| e.in_sample("baseline"))?;
        check_sample(candidate, 2, WHAT).map_err(|e| e.in_sample("candidate"))?;
        effect_of_samples(baseline, candidate)
    }

    /// Effect size from summary statistics (mean, standard deviation with n − 1, size), as
    /// published papers report them.
    ///
    /// ```
    /// // Borenstein et al. (2009), Introduction to Meta-Analysis, §4: d = 0.5970, g = 0.5924.
    /// let es = attn_stats::EffectSize::from_moments((100.0, 4.5, 50), (103.0, 5.5, 50)).unwrap();
    /// assert!((es.cohens_d - 0.5970).abs() < 5e-5 && (es.hedges_g - 0.5924).abs() < 5e-5);
    /// ```
    ///
    /// # Errors
    /// [`StatsError::TooFewSamples`] for a size below 2, [`StatsError::InvalidOption`] for a
    /// non-finite mean or a negative or non-finite standard deviation, and
    /// [`StatsError::ZeroVariance`] when both standard deviations are 0.
    pub fn from_moments(
        baseline: (f64, f64, usize),
        candidate: (f64, f64, usize),
    ) -> Result<Self, StatsError> {
        for (name, (mean, std, n)) in [("baseline", baseline), ("candidate", candidate)] {
            if n < 2 {
                return Err(StatsError::TooFewSamples {
                    n,
                    needed: 2,
                    what: "an effect size",
                }
                .in_sample(name));
            }
            if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
                return Err(StatsError::InvalidOption(format!(
                    "{name}: mean must be finite and standard deviation finite and >= 0, got \
                     mean {mean}, std {std}"
                )));
            }
        }
        let ((mean_b, std_b, n_b), (mean_c, std_c, n_c)) = (baseline, candidate);
        let pooled_var = ((n_b - 1) as f64 * std_b * std_b + (n_c - 1) as f64 * std_c * std_c)
            / (n_b + n_c - 2) as f64;
        Self::from_parts(mean_c - mean_b, pooled_var, n_b, n_c)
    }

    fn from_parts(
        mean_difference: f64,
        pooled_var: f64,
        n_baseline: usize,
        n_candidate: usize,
    ) -> Result<Self, StatsError> {
        if pooled_var <= 0.0 {
            return Err(StatsError::ZeroVariance);
        }
        let pooled_std = pooled_var.sqrt();
        let cohens_d = mean_difference / pooled_std;
        let correction = hedges_correction(n_baseline, n_candidate);
        Ok(EffectSize {
            mean_difference,
            pooled_std,
            cohens_d,
            correction,
            hedges_g: correction * cohens_d,
            n_baseline,
            n_candidate,
        })
    }

    /// Large-sample standard error of g: `J·√((n_b + n_c)/(n_b·n_c) + d²/(2(n_b + n_c)))`
    /// (Hedges & Olkin 1985; Borenstein et al. 2009, eqs. 4.20 and 4.24).
    pub fn hedges_g_std_error(&self) -> f64 {
        let (nb, nc) = (self.n_baseline as f64, self.n_candidate as f64);
        let var_d = (nb + nc) / (nb * nc) + self.cohens_d * self.cohens_d / (2.0 * (nb + nc));
        self.correction * var_d.sqrt()
    }

    /// Normal-approximation CI of g: `g ± z·SE(g)` with [`EffectSize::hedges_g_std_error`].
    /// Cheap and deterministic; [`hedges_g_ci`] bootstraps it instead.
    ///
    /// # Errors
    /// [`StatsError::InvalidConfidence`] unless 0 < confidence < 1.
    pub fn hedges_g_normal_ci(&self, confidence: f64) -> Result<(f64, f64), StatsError> {
        if !(confidence > 0.0 && confidence < 1.0) {
            return Err(StatsError::InvalidConfidence(confidence));
        }
        let half = normal::inverse_cdf(0.5 + confidence / 2.0) * self.hedges_g_std_error();
        Ok((self.hedges_g - half, self.hedges_g + half))
    }
}

/// Samples already checked (n ≥ 2, finite).
fn effect_of_samples(baseline: &[f64], candidate: &[f64]) -> Result<EffectSize, StatsError> {
    let (mean_b, mean_c) = (mean_of(baseline), mean_of(candidate));
    let (n_b, n_c) = (baseline.len(), candidate.len());
    let pooled_var =
        (sum_sq_dev(baseline, mean_b) + sum_sq_dev(candidate, mean_c)) / (n_b + n_c - 2) as f64;
    EffectSize::from_parts(mean_c - mean_b, pooled_var, n_b, n_c)
}

/// Hedges' g from (mean, sum of squared deviations, n) of each side; NaN when the pooled
/// variance is 0 or there are fewer than 3 values in all (the bootstrap reports NaN as a
/// typed error).
fn hedges_g_of_moments(b: (f64, f64, usize), c: (f64, f64, usize)) -> f64 {
    let ((mean_b, ss_b, n_b), (mean_c, ss_c, n_c)) = (b, c);
    if n_b + n_c < 3 {
        return f64::NAN;
    }
    let pooled_var = (ss_b + ss_c) / (n_b + n_c - 2) as f64;
    if pooled_var > 0.0 {
        hedges_correction(n_b, n_c) * (mean_c - mean_b) / pooled_var.sqrt()
    } else {
        f64::NAN
    }
}

fn moments(x: &[f64]) -> (f64, f64, usize) {
    let m = mean_of(x);
    (m, sum_sq_dev(x, m), x.len())
}

/// Cohen's d of `candidate` against `baseline`; see [`EffectSize::from_samples`].
///
/// # Errors
/// As [`EffectSize::from_samples`].
pub fn cohens_d(baseline: &[f64], candidate: &[f64]) -> Result<f64, StatsError> {
    Ok(EffectSize::from_samples(baseline, candidate)?.cohens_d)
}

/// Hedges' g of `candidate` against `baseline`; see [`EffectSize::from_samples`].
///
/// # Errors
/// As [`EffectSize::from_samples`].
pub fn hedges_g(baseline: &[f64], candidate: &[f64]) -> Result<f64, StatsError> {
    Ok(EffectSize::from_samples(baseline, candidate)?.hedges_g)
}

/// Bootstrap CI of Hedges' g (both samples resampled independently; BCa or percentile per
/// `config`).
///
/// # Errors
/// As [`EffectSize::from_samples`] and [`crate::bootstrap_ci`]; a resample in which both
/// samples are constant (possible with few distinct values) gives
/// [`StatsError::NonFiniteStatistic`].
pub fn hedges_g_ci(
    baseline: &[f64],
    candidate: &[f64],
    config: &BootstrapConfig,
) -> Result<ConfidenceInterval, StatsError> {
    config.validate()?;
    EffectSize::from_samples(baseline, candidate)?;
    let (whole_b, whole_c) = (moments(baseline), moments(candidate));
    let resampler = TwoSampleMoments {
        baseline: Centered::new(baseline)?,
        candidate: Centered::new(candidate)?,
        combine: hedges_g_of_moments,
    };
    bootstrap_samples(
        hedges_g_of_moments(whole_b, whole_c),
        &[baseline.len(), candidate.len()],
        &resampler,
        |j| {
            let (sample, n) = if j == 0 {
                (baseline, baseline.len() - 1)
            } else {
                (candidate, candidate.len() - 1)
            };
            jackknife::means_and_ss(sample)
                .into_iter()
                .map(|(m, ss)| match j {
                    0 => hedges_g_of_moments((m, ss, n), whole_c),
                    _ => hedges_g_of_moments(whole_b, (m, ss, n)),
                })
                .collect()
        },
        config,
    )
}
