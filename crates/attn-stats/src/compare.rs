//! Baseline-vs-candidate comparison of latency samples and the promote/regress decision.

use std::fmt;

use serde::Serialize;

use crate::bootstrap::{mean_ci, ratio_of_means_ci, BootstrapConfig, BootstrapMethod};
use crate::effect::{hedges_g_ci, EffectSize};
use crate::summary::{trim_outliers_mad, Summary};
use crate::StatsError;

/// Default threshold on |Hedges' g| for a "large" effect (Cohen's convention).
pub const DEFAULT_MIN_EFFECT: f64 = 0.8;

/// Options of [`compare`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CompareOptions {
    /// Bootstrap options shared by every interval.
    pub bootstrap: BootstrapConfig,
    /// The effect-size gate: |g| must reach this; default [`DEFAULT_MIN_EFFECT`] (0.8).
    pub min_effect: f64,
    /// Optional absolute gate for promotion: the candidate's mean must be ≤ this (in the
    /// samples' unit, e.g. 0.255 for "mean ≤ 0.255 ms").
    pub target_mean: Option<f64>,
    /// Optional MAD trimming of both samples before anything else, with this threshold in
    /// robust standard deviations (see [`crate::trim_outliers_mad`]; 3.5 is usual).
    pub trim_mad: Option<f64>,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            bootstrap: BootstrapConfig::default(),
            min_effect: DEFAULT_MIN_EFFECT,
            target_mean: None,
            trim_mad: None,
        }
    }
}

/// The verdict on a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Faster, CIs of the means disjoint, |g| ≥ threshold, and the target (if any) met.
    Promote,
    /// Slower, CIs of the means disjoint, |g| ≥ threshold.
    Regress,
    /// Anything else: the data cannot tell the two apart well enough.
    Inconclusive,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Decision::Promote => "promote",
            Decision::Regress => "regress",
            Decision::Inconclusive => "inconclusive",
        })
    }
}

/// Which gates held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Gates {
    /// The candidate's mean is below the baseline's.
    pub faster: bool,
    /// The candidate's mean is above the baseline's.
    pub slower: bool,
    /// The two CIs of the mean share no point.
    pub cis_disjoint: bool,
    /// |g| ≥ the threshold; `None` when g is undefined (both samples constant).
    pub large_effect: Option<bool>,
    /// The candidate's mean is ≤ the target; `None` without a target.
    pub meets_target: Option<bool>,
}

impl Gates {
    /// The decision these gates imply.
    pub fn decision(&self) -> Decision {
        let large = self.large_effect == Some(true);
        if self.faster && self.cis_disjoint && large && self.meets_target != Some(false) {
            Decision::Promote
        } else if self.slower && self.cis_disjoint && large {
            Decision::Regress
        } else {
            Decision::Inconclusive
        }
    }
}

/// One sample's part of a [`Comparison`]; the first six fields are the JSON contract of
/// `cargo xtask compare`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SampleReport {
    /// Size after trimming.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// Standard deviation (n − 1).
    pub std: f64,
    /// Lower end of the bootstrap CI of the mean.
    pub ci_low: f64,
    /// Upper end of the bootstrap CI of the mean.
    pub ci_high: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Median absolute deviation (unscaled).
    pub mad: f64,
    /// Values removed by MAD trimming (0 without trimming).
    pub outliers_dropped: usize,
}

/// Everything `cargo xtask compare --json` prints. The keys `baseline`, `candidate`,
/// `hedges_g`, `ratio`, `ratio_ci_low`, `ratio_ci_high` and `decision` are its JSON
/// contract (docs/ARCHITECTURE.md); the others explain them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The baseline sample.
    pub baseline: SampleReport,
    /// The candidate sample.
    pub candidate: SampleReport,
    /// Hedges' g = J·(mean_c − mean_b)/s_pooled; `None` (JSON null) when both samples are
    /// constant, with the reason in `reasons`.
    pub hedges_g: Option<f64>,
    /// Lower end of the bootstrap CI of g (`None` when it could not be formed; see `reasons`).
    pub hedges_g_ci_low: Option<f64>,
    /// Upper end of the bootstrap CI of g.
    pub hedges_g_ci_high: Option<f64>,
    /// Cohen's d (g before the small-sample correction).
    pub cohens_d: Option<f64>,
    /// mean_c / mean_b (below 1: the candidate is faster).
    pub ratio: f64,
    /// Lower end of the bootstrap CI of the ratio.
    pub ratio_ci_low: f64,
    /// Upper end of the bootstrap CI of the ratio.
    pub ratio_ci_high: f64,
    /// The verdict.
    pub decision: Decision,
    /// Which gates held.
    pub gates: Gates,
    /// One line per gate (and per undefined quantity) saying why.
    pub reasons: Vec<String>,
    /// Interval method.
    pub method: BootstrapMethod,
    /// Confidence level of every interval.
    pub confidence: f64,
    /// Bootstrap resamples per interval.
    pub resamples: usize,
    /// Seed of the baseline's interval; the candidate, ratio and g intervals use seed + 1,
    /// + 2, + 3 so that their resampling noise is independent.
    pub seed: u64,
    /// The |g| threshold.
    pub min_effect: f64,
    /// The absolute target on the candidate's mean, if any.
    pub target_mean: Option<f64>,
}

/// Compares a candidate's latency sample with a baseline's: summaries, bootstrap CIs of both
/// means, the ratio of means with its CI, Hedges' g with its CI, the gates and the decision.
///
/// ```
/// use attn_stats::{compare, CompareOptions, Decision};
/// let baseline: Vec<f64> = (0..40).map(|i| 0.262 + 0.001 * ((i * 7 % 11) as f64 - 5.0)).collect();
/// let candidate: Vec<f64> = baseline.iter().map(|x| x - 0.012).collect();
/// let options = CompareOptions { target_mean: Some(0.255), ..Default::default() };
/// let c = compare(&baseline, &candidate, &options).unwrap();
/// assert_eq!(c.decision, Decision::Promote);
/// assert!(c.ratio < 1.0 && c.hedges_g.unwrap() < -0.8);
/// ```
///
/// # Errors
/// Invalid options; a sample that is empty, has n = 1 or holds a non-finite value (the
/// error names it); a baseline mean of 0; [`StatsError::BcaUndefined`] for a BCa interval of
/// a mean or the ratio that cannot be formed. An undefined g (both samples constant) is not
/// an error: `hedges_g` is `None` and the decision inconclusive.
pub fn compare(
    baseline: &[f64],
    candidate: &[f64],
    options: &CompareOptions,
) -> Result<Comparison, StatsError> {
    let config = options.bootstrap;
    config.validate()?;
    if !(options.min_effect.is_finite() && options.min_effect >= 0.0) {
        return Err(StatsError::InvalidOption(format!(
            "the effect-size threshold must be finite and >= 0 (0.8 is usual), got {}",
            options.min_effect
        )));
    }
    if let Some(t) = options.target_mean.filter(|t| !t.is_finite()) {
        return Err(StatsError::InvalidOption(format!(
            "the target mean must be finite, got {t}"
        )));
    }
    let prepare = |data: &[f64], name: &'static str| -> Result<(Vec<f64>, usize), StatsError> {
        let result = match options.trim_mad {
            Some(k) => trim_outliers_mad(data, k).map(|t| (t.kept, t.dropped)),
            None => Ok((data.to_vec(), 0)),
        };
        result.map_err(|e| match e {
            e @ StatsError::InvalidOption(_) => e,
            e => e.in_sample(name),
        })
    };
    let (base, base_dropped) = prepare(baseline, "baseline")?;
    let (cand, cand_dropped) = prepare(candidate, "candidate")?;

    let with_seed = |offset: u64| BootstrapConfig {
        seed: config.seed.wrapping_add(offset),
        ..config
    };
    let report = |data: &[f64], dropped: usize, offset: u64, name: &'static str| {
        let summary = Summary::new(data).map_err(|e| e.in_sample(name))?;
        let ci = mean_ci(data, &with_seed(offset)).map_err(|e| e.in_sample(name))?;
        Ok::<_, StatsError>((
            SampleReport {
                n: summary.n,
                mean: summary.mean,
                median: summary.median,
                std: summary.std,
                ci_low: ci.low,
                ci_high: ci.high,
                min: summary.min,
                max: summary.max,
                mad: summary.mad,
                outliers_dropped: dropped,
            },
            ci,
        ))
    };
    let (b, b_ci) = report(&base, base_dropped, 0, "baseline")?;
    let (c, c_ci) = report(&cand, cand_dropped, 1, "candidate")?;
    let ratio = ratio_of_means_ci(&base, &cand, &with_seed(2))?;

    let mut reasons = Vec::new();
    let effect = match EffectSize::from_samples(&base, &cand) {
        Ok(e) => Some(e),
        Err(e @ StatsError::ZeroVariance) => {
            reasons.push(format!("Hedges' g undefined: {e}"));
            None
        }
        Err(e) => return Err(e),
    };
    let g_ci = match effect {
        Some(_) => match hedges_g_ci(&base, &cand, &with_seed(3)) {
            Ok(ci) => Some(ci),
            Err(e) => {
                reasons.push(format!("no CI for Hedges' g: {e}"));
                None
            }
        },
        None => None,
    };

    let gates = Gates {
        faster: c.mean < b.mean,
        slower: c.mean > b.mean,
        cis_disjoint: b_ci.is_disjoint_from(&c_ci),
        large_effect: effect.map(|e| e.hedges_g.abs() >= options.min_effect),
        meets_target: options.target_mean.map(|t| c.mean <= t),
    };
    let notes = reasons;
    let mut reasons = gate_reasons(&b, &c, ratio.estimate, &gates, effect, options);
    reasons.extend(notes);

    Ok(Comparison {
        baseline: b,
        candidate: c,
        hedges_g: effect.map(|e| e.hedges_g),
        hedges_g_ci_low: g_ci.map(|ci| ci.low),
        hedges_g_ci_high: g_ci.map(|ci| ci.high),
        cohens_d: effect.map(|e| e.cohens_d),
        ratio: ratio.estimate,
        ratio_ci_low: ratio.low,
        ratio_ci_high: ratio.high,
        decision: gates.decision(),
        gates,
        reasons,
        method: config.method,
        confidence: config.confidence,
        resamples: config.resamples,
        seed: config.seed,
        min_effect: options.min_effect,
        target_mean: options.target_mean,
    })
}

/// `x` with 6 significant digits (reasons are read by people; the JSON keeps full precision).
fn sig(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return x.to_string();
    }
    let decimals = (5 - x.abs().log10().floor() as i64).clamp(0, 17) as usize;
    format!("{x:.decimals$}")
}

fn gate_reasons(
    b: &SampleReport,
    c: &SampleReport,
    ratio: f64,
    gates: &Gates,
    effect: Option<EffectSize>,
    options: &CompareOptions,
) -> Vec<String> {
    let (mean_b, mean_c) = (sig(b.mean), sig(c.mean));
    let mut reasons = vec![if gates.faster {
        format!("faster: candidate mean {mean_c} < baseline mean {mean_b} (ratio {ratio:.4})")
    } else if gates.slower {
        format!("slower: candidate mean {mean_c} > baseline mean {mean_b} (ratio {ratio:.4})")
    } else {
        format!("equal means: {mean_c}")
    }];
    reasons.push(format!(
        "{}% CIs of the means {}: candidate [{}, {}], baseline [{}, {}]",
        options.bootstrap.confidence * 100.0,
        if gates.cis_disjoint {
            "disjoint"
        } else {
            "overlap"
        },
        sig(c.ci_low),
        sig(c.ci_high),
        sig(b.ci_low),
        sig(b.ci_high)
    ));
    if let Some(e) = effect {
        let cmp = if e.hedges_g.abs() >= options.min_effect {
            ">="
        } else {
            "<"
        };
        reasons.push(format!(
            "|g| = {} {cmp} {}",
            sig(e.hedges_g.abs()),
            options.min_effect
        ));
    }
    if let (Some(t), Some(met)) = (options.target_mean, gates.meets_target) {
        reasons.push(format!(
            "target: candidate mean {mean_c} {} {t}",
            if met { "<=" } else { ">" }
        ));
    }
    reasons
}
