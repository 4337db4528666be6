//! `attn-stats` turns benchmark samples into decisions: descriptive summaries, bootstrap
//! confidence intervals (percentile and BCa, Efron & Tibshirani 1993) of any statistic, the
//! ratio of two means with its interval, effect sizes (Cohen's d, Hedges' g), and the
//! promote / regress / inconclusive verdict the release gate uses. It knows nothing about
//! attention: samples in, intervals and decisions out.
//!
//! Bootstrap resampling runs in parallel (rayon) and is reproducible: each block of
//! resamples draws from its own seeded ChaCha8 stream, so the same seed gives the same
//! interval on any number of threads.
//!
//! ```
//! use attn_stats::{compare, samples_from_csv, CompareOptions, Decision};
//! let baseline = samples_from_csv("latency_ms\n0.262\n0.259\n0.266\n0.261\n0.263\n0.260\n0.264\n0.262\n")?;
//! let candidate = samples_from_csv("0.248\n0.251\n0.247\n0.250\n0.249\n0.252\n0.246\n0.250\n")?;
//! let result = compare(&baseline, &candidate, &CompareOptions::default())?;
//! assert_eq!(result.decision, Decision::Promote);
//! assert!(result.ratio_ci_high < 1.0);
//! # Ok::<(), attn_stats::StatsError>(())
//! ```

#![warn(missing_docs)]

mod bootstrap;
mod compare;
mod csv;
mod effect;
mod error;
mod jackknife;
mod normal;
mod resample;
mod summary;

pub use bootstrap::{
    bootstrap_ci, bootstrap_ci_two_sample, mean_ci, median_ci, ratio_of_means_ci, BootstrapConfig,
    BootstrapMethod, ConfidenceInterval, DEFAULT_SEED,
};
pub use compare::{
    compare, CompareOptions, Comparison, Decision, Gates, SampleReport, DEFAULT_MIN_EFFECT,
};
pub use csv::samples_from_csv;
pub use effect::{cohens_d, hedges_correction, hedges_g, hedges_g_ci, EffectSize};
pub use error::StatsError;
pub use summary::{
    mad, mean, median, quantile, std_dev, trim_outliers_mad, Quantiles, Summary, Trimmed,
    MAD_TO_SIGMA,
};

/// Φ(x) and Φ⁻¹(p) of the standard normal distribution, as the BCa interval uses them.
pub mod normal_dist {
    pub use crate::normal::{cdf, inverse_cdf};
}
