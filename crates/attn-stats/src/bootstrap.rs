//! Bootstrap confidence intervals: percentile and BCa, one sample or two.
//!
//! The BCa interval follows Efron & Tibshirani, *An Introduction to the Bootstrap* (1993),
//! §14.3: bias correction z0 from the share of replicates below the observed statistic and
//! acceleration a from the jackknife (their eq. 14.15). For two independent samples the
//! acceleration adds the jackknife terms of each sample, as `scipy.stats.bootstrap` does, so
//! intervals can be checked against it.

use std::fmt;
use std::str::FromStr;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::Serialize;

use crate::jackknife;
use crate::normal;
use crate::resample::{Centered, Generic, Mean, Resampler, TwoSampleMoments};
use crate::summary::{check_sample, mean_of, quantile_sorted, sum_sq_dev};
use crate::StatsError;

/// The seed [`BootstrapConfig::default`] uses, so that unconfigured runs are reproducible.
pub const DEFAULT_SEED: u64 = 0x5EED_A77E;

/// Resamples drawn from one RNG stream. Each chunk gets its own stream
/// (`ChaCha8Rng::set_stream(chunk index)`), so the replicates depend only on the seed and not
/// on how rayon schedules the chunks.
const RESAMPLES_PER_CHUNK: usize = 128;

/// How the interval is read off the bootstrap distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BootstrapMethod {
    /// The α/2 and 1 − α/2 quantiles of the replicates (Efron & Tibshirani §13.3).
    Percentile,
    /// Bias-corrected and accelerated (Efron & Tibshirani §14.3): quantiles shifted by the
    /// bias correction z0 and the jackknife acceleration a. Second-order accurate, so it
    /// covers better than the percentile interval for skewed statistics such as latencies.
    Bca,
}

impl fmt::Display for BootstrapMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BootstrapMethod::Percentile => "percentile",
            BootstrapMethod::Bca => "bca",
        })
    }
}

impl FromStr for BootstrapMethod {
    type Err = StatsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "percentile" => Ok(BootstrapMethod::Percentile),
            "bca" => Ok(BootstrapMethod::Bca),
            _ => Err(StatsError::InvalidOption(format!(
                "unknown bootstrap method `{s}`: expected bca or percentile"
            ))),
        }
    }
}

/// Options of a bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BootstrapConfig {
    /// Percentile or BCa (the default).
    pub method: BootstrapMethod,
    /// Two-sided confidence level in (0, 1); default 0.95.
    pub confidence: f64,
    /// Number of bootstrap resamples; default 10 000.
    pub resamples: usize,
    /// RNG seed: the same seed, data and options give the same interval, on any number of
    /// threads; default [`DEFAULT_SEED`].
    pub seed: u64,
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        BootstrapConfig {
            method: BootstrapMethod::Bca,
            confidence: 0.95,
            resamples: 10_000,
            seed: DEFAULT_SEED,
        }
    }
}

impl BootstrapConfig {
    /// Checks the options.
    ///
    /// # Errors
    /// [`StatsError::InvalidConfidence`] unless 0 < confidence < 1;
    /// [`StatsError::ZeroResamples`] for `resamples == 0`.
    pub fn validate(&self) -> Result<(), StatsError> {
        if !(self.confidence > 0.0 && self.confidence < 1.0) {
            return Err(StatsError::InvalidConfidence(self.confidence));
        }
        if self.resamples == 0 {
            return Err(StatsError::ZeroResamples);
        }
        Ok(())
    }
}

/// A bootstrap confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ConfidenceInterval {
    /// The statistic on the original data.
    pub estimate: f64,
    /// Lower end.
    pub low: f64,
    /// Upper end.
    pub high: f64,
    /// Confidence level the interval was built for.
    pub confidence: f64,
    /// How it was built.
    pub method: BootstrapMethod,
    /// Number of resamples.
    pub resamples: usize,
    /// Bootstrap standard error: the standard deviation (n − 1) of the replicates.
    pub std_error: f64,
    /// BCa bias correction z0 (`None` for the percentile method).
    pub bias_correction: Option<f64>,
    /// BCa acceleration a (`None` for the percentile method).
    pub acceleration: Option<f64>,
}

impl ConfidenceInterval {
    /// Whether `x` lies in [low, high].
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }

    /// Whether the two closed intervals share no point.
    pub fn is_disjoint_from(&self, other: &ConfidenceInterval) -> bool {
        self.high < other.low || other.high < self.low
    }
}

/// Bootstrap CI of any statistic of one sample.
///
/// The statistic sees each resample as a slice of length n (drawn with replacement). It
/// must be finite on the data, every resample and, for BCa, every leave-one-out sample.
///
/// ```
/// use attn_stats::{bootstrap_ci, BootstrapConfig, BootstrapMethod};
/// let x = [3.1, 2.9, 3.4, 3.0, 3.3, 2.8, 3.2, 3.6, 3.0, 3.1];
/// let config = BootstrapConfig { method: BootstrapMethod::Percentile, ..Default::default() };
/// let max_ci = bootstrap_ci(&x, |s| s.iter().cloned().fold(f64::MIN, f64::max), &config).unwrap();
/// assert!(max_ci.low <= max_ci.high && max_ci.high == 3.6);
/// ```
///
/// # Errors
/// Invalid options (see [`BootstrapConfig::validate`]), an empty or non-finite sample,
/// [`StatsError::NonFiniteStatistic`], and [`StatsError::BcaUndefined`] when the BCa
/// correction cannot be formed.
pub fn bootstrap_ci<F>(
    data: &[f64],
    statistic: F,
    config: &BootstrapConfig,
) -> Result<ConfidenceInterval, StatsError>
where
    F: Fn(&[f64]) -> f64 + Sync,
{
    config.validate()?;
    check_sample(data, 1, "a bootstrap")?;
    let on_samples = |s: &[&[f64]]| s.first().map_or(f64::NAN, |x| statistic(x));
    let samples = [data];
    bootstrap_samples(
        on_samples(&samples),
        &[data.len()],
        &Generic::new(&samples, &on_samples)?,
        |j| leave_one_out_generic(&samples, &on_samples, j),
        config,
    )
}

/// Bootstrap CI of the mean (the [`BootstrapConfig::default`] gives a 95 % BCa interval from
/// 10 000 resamples).
///
/// ```
/// let x = [10.2, 9.8, 10.5, 10.1, 9.9, 10.4, 10.0, 10.3];
/// let ci = attn_stats::mean_ci(&x, &Default::default()).unwrap();
/// assert!(ci.low < ci.estimate && ci.estimate < ci.high);
/// assert!((ci.estimate - 10.15).abs() < 1e-12);
/// ```
///
/// # Errors
/// As [`bootstrap_ci`].
pub fn mean_ci(data: &[f64], config: &BootstrapConfig) -> Result<ConfidenceInterval, StatsError> {
    config.validate()?;
    check_sample(data, 1, "a bootstrap")?;
    bootstrap_samples(
        mean_of(data),
        &[data.len()],
        &Mean(Centered::new(data)?),
        |_| jackknife::means(data),
        config,
    )
}

/// Bootstrap CI of the median. The median's bootstrap distribution is lumpy (it takes only
/// values of order statistics and their midpoints), so prefer n ≳ 30.
///
/// # Errors
/// As [`bootstrap_ci`].
pub fn median_ci(data: &[f64], config: &BootstrapConfig) -> Result<ConfidenceInterval, StatsError> {
    config.validate()?;
    check_sample(data, 1, "a bootstrap")?;
    let on_samples = |s: &[&[f64]]| {
        s.first().map_or(f64::NAN, |x| {
            let mut v = x.to_vec();
            v.sort_unstable_by(f64::total_cmp);
            quantile_sorted(&v, 0.5)
        })
    };
    let samples = [data];
    bootstrap_samples(
        on_samples(&samples),
        &[data.len()],
        &Generic::new(&samples, on_samples)?,
        |_| jackknife::medians(data),
        config,
    )
}

/// Bootstrap CI of a statistic of two independent samples, each resampled on its own
/// (unpaired). `statistic(a, b)` sees resamples of `a` and `b` of their original lengths.
///
/// # Errors
/// As [`bootstrap_ci`], with sample errors naming sample `a` or `b`.
pub fn bootstrap_ci_two_sample<F>(
    a: &[f64],
    b: &[f64],
    statistic: F,
    config: &BootstrapConfig,
) -> Result<ConfidenceInterval, StatsError>
where
    F: Fn(&[f64], &[f64]) -> f64 + Sync,
{
    config.validate()?;
    check_sample(a, 1, "a bootstrap").map_err(|e| e.in_sample("a"))?;
    check_sample(b, 1, "a bootstrap").map_err(|e| e.in_sample("b"))?;
    let on_samples = |s: &[&[f64]]| match s {
        [x, y] => statistic(x, y),
        _ => f64::NAN,
    };
    let samples = [a, b];
    bootstrap_samples(
        on_samples(&samples),
        &[a.len(), b.len()],
        &Generic::new(&samples, &on_samples)?,
        |j| leave_one_out_generic(&samples, &on_samples, j),
        config,
    )
}

/// Bootstrap CI of `mean(candidate) / mean(baseline)`, the speedup factor of a latency
/// comparison (below 1: the candidate is faster). The two samples are resampled
/// independently.
///
/// ```
/// let baseline = [1.00, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.00];
/// let candidate = [0.80, 0.82, 0.79, 0.81, 0.78, 0.83, 0.80, 0.81];
/// let ci = attn_stats::ratio_of_means_ci(&baseline, &candidate, &Default::default()).unwrap();
/// assert!(ci.high < 1.0); // faster, with 95 % confidence
/// ```
///
/// # Errors
/// As [`bootstrap_ci_two_sample`] (samples named `baseline` and `candidate`), and
/// [`StatsError::InvalidOption`] when the baseline mean is 0.
pub fn ratio_of_means_ci(
    baseline: &[f64],
    candidate: &[f64],
    config: &BootstrapConfig,
) -> Result<ConfidenceInterval, StatsError> {
    config.validate()?;
    check_sample(baseline, 1, "a ratio of means").map_err(|e| e.in_sample("baseline"))?;
    check_sample(candidate, 1, "a ratio of means").map_err(|e| e.in_sample("candidate"))?;
    if mean_of(baseline) == 0.0 {
        return Err(StatsError::InvalidOption(
            "the ratio of means is undefined: the baseline mean is 0".into(),
        ));
    }
    let (mean_b, mean_c) = (mean_of(baseline), mean_of(candidate));
    let resampler = TwoSampleMoments {
        baseline: Centered::new(baseline)?,
        candidate: Centered::new(candidate)?,
        combine: |b: (f64, f64, usize), c: (f64, f64, usize)| c.0 / b.0,
    };
    bootstrap_samples(
        mean_c / mean_b,
        &[baseline.len(), candidate.len()],
        &resampler,
        |j| match j {
            0 => jackknife::means(baseline)
                .iter()
                .map(|m| mean_c / m)
                .collect(),
            _ => jackknife::means(candidate)
                .iter()
                .map(|m| m / mean_b)
                .collect(),
        },
        config,
    )
}

/// The engine: replicates, then the percentile or BCa interval. Samples are validated;
/// `estimate` is the statistic on them and `sizes` their lengths.
///
/// `leave_one_out(j)` gives the statistic with each value of sample `j` deleted in turn (the
/// jackknife values BCa needs); built-in statistics pass O(n) downdating formulas, closures
/// get [`leave_one_out_generic`], which costs n evaluations.
pub(crate) fn bootstrap_samples<R, J>(
    estimate: f64,
    sizes: &[usize],
    resampler: &R,
    leave_one_out: J,
    config: &BootstrapConfig,
) -> Result<ConfidenceInterval, StatsError>
where
    R: Resampler,
    J: Fn(usize) -> Vec<f64>,
{
    if !estimate.is_finite() {
        return Err(StatsError::NonFiniteStatistic {
            on: "the data",
            value: estimate,
        });
    }
    let mut replicates = replicates(resampler, config.resamples, config.seed);
    if let Some(&value) = replicates.iter().find(|v| !v.is_finite()) {
        return Err(StatsError::NonFiniteStatistic {
            on: "a resample",
            value,
        });
    }
    replicates.sort_unstable_by(f64::total_cmp);
    let b = replicates.len();
    let std_error = if b > 1 {
        (sum_sq_dev(&replicates, mean_of(&replicates)) / (b - 1) as f64).sqrt()
    } else {
        0.0
    };
    let alpha = (1.0 - config.confidence) / 2.0;
    let (p_low, p_high, bias_correction, acceleration) = match config.method {
        BootstrapMethod::Percentile => (alpha, 1.0 - alpha, None, None),
        BootstrapMethod::Bca => {
            let z0 = bias_correction(&replicates, estimate, std_error)?;
            let a = jackknife_acceleration(sizes, leave_one_out)?;
            let adjust = |z_alpha: f64| -> Result<f64, StatsError> {
                let shifted = z0 + z_alpha;
                let denominator = 1.0 - a * shifted;
                if denominator <= 0.0 {
                    return Err(StatsError::BcaUndefined(format!(
                        "the acceleration a = {a:.3} is too large for this confidence level \
                         (1 − a·(z0 + z_α) ≤ 0)"
                    )));
                }
                Ok(normal::cdf(z0 + shifted / denominator))
            };
            (
                adjust(normal::inverse_cdf(alpha))?,
                adjust(normal::inverse_cdf(1.0 - alpha))?,
                Some(z0),
                Some(a),
            )
        }
    };
    Ok(ConfidenceInterval {
        estimate,
        low: quantile_sorted(&replicates, p_low),
        high: quantile_sorted(&replicates, p_high),
        confidence: config.confidence,
        method: config.method,
        resamples: config.resamples,
        std_error,
        bias_correction,
        acceleration,
    })
}

/// `resamples` values of the statistic on resamples with replacement of every sample.
fn replicates<R: Resampler>(resampler: &R, resamples: usize, seed: u64) -> Vec<f64> {
    let mut out = vec![0.0; resamples];
    out.par_chunks_mut(RESAMPLES_PER_CHUNK)
        .enumerate()
        .for_each(|(chunk, slots)| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(chunk as u64);
            let mut scratch = resampler.scratch();
            for slot in slots {
                *slot = resampler.replicate(&mut rng, &mut scratch);
            }
        });
    out
}

/// z0 = Φ⁻¹(share of replicates below the estimate), counting ties as half (mid-rank, as
/// scipy does), so a discrete statistic such as the median is not biased by ties.
///
/// A tie is a replicate within 1e−12·(|θ̂| + SE) of θ̂, not only a bit-equal one: a resample
/// that is a permutation of the data (3.8 % of them for n = 5) has the statistic's exact value
/// mathematically, but summing in another order can move it by an ulp to either side, which
/// would make z0 depend on rounding.
fn bias_correction(
    sorted_replicates: &[f64],
    estimate: f64,
    std_error: f64,
) -> Result<f64, StatsError> {
    let tie = 1e-12 * (estimate.abs() + std_error);
    let below = sorted_replicates.partition_point(|&v| v < estimate - tie);
    let at_or_below = sorted_replicates.partition_point(|&v| v <= estimate + tie);
    let share = (below + at_or_below) as f64 / (2 * sorted_replicates.len()) as f64;
    if share <= 0.0 || share >= 1.0 {
        return Err(StatsError::BcaUndefined(format!(
            "the observed statistic {estimate} lies {} every bootstrap replicate, so the bias \
             correction z0 is infinite",
            if share <= 0.0 { "above" } else { "below" }
        )));
    }
    Ok(normal::inverse_cdf(share))
}

/// Jackknife acceleration. For one sample it is Efron & Tibshirani's eq. 14.15,
/// a = Σ(θ̄ − θ₍ᵢ₎)³ / (6 [Σ(θ̄ − θ₍ᵢ₎)²]^{3/2}); for several independent samples the
/// per-sample sums of Uᵢ = (nⱼ − 1)(θ̄ − θ₍ᵢ₎), scaled by nⱼ⁻³ and nⱼ⁻², are added (the
/// multi-sample form `scipy.stats.bootstrap` uses). A statistic that no single deletion
/// changes (e.g. constant data) has no skewness to correct: a = 0.
fn jackknife_acceleration<J>(sizes: &[usize], leave_one_out: J) -> Result<f64, StatsError>
where
    J: Fn(usize) -> Vec<f64>,
{
    let (mut third, mut second) = (0.0, 0.0);
    for (j, &n) in sizes.iter().enumerate() {
        if n < 2 {
            // Deleting the only value leaves nothing to evaluate: no information on skewness.
            continue;
        }
        let values = leave_one_out(j);
        if let Some(&value) = values.iter().find(|v| !v.is_finite()) {
            return Err(StatsError::NonFiniteStatistic {
                on: "a jackknife (leave-one-out) sample",
                value,
            });
        }
        let theta_dot = mean_of(&values);
        let scale = (n - 1) as f64;
        let nf = n as f64;
        let (cubes, squares) = values.iter().fold((0.0, 0.0), |(c, s), &t| {
            let u = scale * (theta_dot - t);
            (c + u * u * u, s + u * u)
        });
        third += cubes / (nf * nf * nf);
        second += squares / (nf * nf);
    }
    if second == 0.0 {
        return Ok(0.0);
    }
    Ok(third / (6.0 * second.powf(1.5)))
}

/// Leave-one-out values of any statistic for sample `j`: n evaluations on copies with one
/// value deleted, in parallel.
pub(crate) fn leave_one_out_generic<S>(samples: &[&[f64]], statistic: &S, j: usize) -> Vec<f64>
where
    S: Fn(&[&[f64]]) -> f64 + Sync,
{
    let Some(sample) = samples.get(j) else {
        return Vec::new();
    };
    let n = sample.len();
    (0..n)
        .into_par_iter()
        .map_init(
            || Vec::with_capacity(n.saturating_sub(1)),
            |buffer: &mut Vec<f64>, i| {
                buffer.clear();
                buffer.extend(sample.iter().take(i));
                buffer.extend(sample.iter().skip(i + 1));
                let mut views: Vec<&[f64]> = samples.to_vec();
                if let Some(view) = views.get_mut(j) {
                    *view = buffer.as_slice();
                }
                statistic(&views)
            },
        )
        .collect()
}
