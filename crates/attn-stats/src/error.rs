//! The crate's error type.

/// Everything that can go wrong when summarizing, bootstrapping or comparing samples.
///
/// Every variant is a problem with the caller's data or options, described so that the
/// caller can fix it; none is an internal failure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StatsError {
    /// The sample holds no values.
    #[error("the sample is empty: at least {needed} value(s) are needed")]
    EmptySample {
        /// How many values the operation needs.
        needed: usize,
    },
    /// The sample is too small for the operation (e.g. a standard deviation needs n ≥ 2).
    #[error("the sample has {n} value(s) but {what} needs at least {needed}")]
    TooFewSamples {
        /// Values given.
        n: usize,
        /// Values needed.
        needed: usize,
        /// The operation that needs them.
        what: &'static str,
    },
    /// A value is NaN or infinite.
    #[error(
        "value #{index} is {value}: samples must be finite (drop failed runs before summarizing)"
    )]
    NonFinite {
        /// Zero-based position in the sample.
        index: usize,
        /// The offending value.
        value: f64,
    },
    /// A confidence level outside the open interval (0, 1).
    #[error("confidence must lie strictly between 0 and 1 (e.g. 0.95), got {0}")]
    InvalidConfidence(f64),
    /// A bootstrap with no resamples.
    #[error("the bootstrap needs at least 1 resample (10 000 is the default)")]
    ZeroResamples,
    /// A quantile probability outside [0, 1].
    #[error("a quantile probability must lie in [0, 1], got {0}")]
    InvalidProbability(f64),
    /// Both samples have zero variance, so the pooled standard deviation is 0 and Cohen's d
    /// and Hedges' g are undefined (a difference of means over a zero scale).
    #[error("effect size undefined: both samples have zero variance (all values equal within each sample), so the pooled standard deviation is 0")]
    ZeroVariance,
    /// The statistic being bootstrapped returned NaN or ±∞ on the data or a resample.
    #[error(
        "the bootstrapped statistic returned {value} on {on}; it must be finite on every resample"
    )]
    NonFiniteStatistic {
        /// What it was evaluated on ("the data", "a resample", "a jackknife sample").
        on: &'static str,
        /// The value it returned.
        value: f64,
    },
    /// The BCa interval cannot be formed, e.g. the observed statistic lies outside every
    /// bootstrap replicate, so the bias correction z0 is infinite.
    #[error("BCa interval undefined: {0}; use the percentile method or more data")]
    BcaUndefined(String),
    /// An option is out of range (a negative trimming threshold, a non-finite target...).
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// An error in one of two named samples (`baseline` or `candidate`). The message
    /// includes the inner error's, so it is not also exposed as `source()` (which would
    /// print it twice in an error chain).
    #[error("{sample} sample: {error}")]
    InSample {
        /// Which sample.
        sample: &'static str,
        /// What is wrong with it.
        error: Box<StatsError>,
    },
    /// A CSV holds no samples.
    #[error("the CSV holds no samples (expected one number per line, or a header with a `latency_*` column)")]
    CsvEmpty,
    /// A CSV has a header but no `latency_*` column.
    #[error("the CSV header `{header}` has no `latency_*` column (and is not a number), so no numeric column to read")]
    CsvNoLatencyColumn {
        /// The header line.
        header: String,
    },
    /// A CSV line has the wrong number of fields.
    #[error("CSV line {line}: expected {expected} field(s), found {found}")]
    CsvFieldCount {
        /// One-based line number.
        line: usize,
        /// Fields the header (or one-value-per-line format) implies.
        expected: usize,
        /// Fields found.
        found: usize,
    },
    /// A CSV field is not a number.
    #[error("CSV line {line}: `{text}` is not a number")]
    CsvNotNumber {
        /// One-based line number.
        line: usize,
        /// The field's text.
        text: String,
    },
    /// A CSV field is NaN or infinite.
    #[error("CSV line {line}: `{text}` is not finite; samples must be finite numbers")]
    CsvNonFinite {
        /// One-based line number.
        line: usize,
        /// The field's text.
        text: String,
    },
}

impl StatsError {
    /// Wraps `self` with the name of the sample it concerns.
    pub fn in_sample(self, sample: &'static str) -> Self {
        StatsError::InSample {
            sample,
            error: Box::new(self),
        }
    }
}
