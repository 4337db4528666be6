//! `cargo xtask compare`: two latency CSVs in, bootstrap CIs, Hedges' g and the
//! promote/regress decision out. All statistics live in attn-stats; this
//! module reads the files, wires the options and prints.

use std::path::{Path, PathBuf};

use anyhow::Context;
use attn_stats::{
    compare, samples_from_csv, BootstrapConfig, BootstrapMethod, CompareOptions, Comparison,
    SampleReport, DEFAULT_MIN_EFFECT, DEFAULT_SEED,
};

/// Interval method on the command line.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Method {
    /// Bias-corrected and accelerated bootstrap (default).
    Bca,
    /// Percentile bootstrap.
    Percentile,
}

/// Arguments of `cargo xtask compare`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Baseline latencies: CSV with one sample per line, or a header with a `latency_*` column.
    #[arg(long)]
    pub baseline: PathBuf,
    /// Candidate latencies, same format.
    #[arg(long)]
    pub candidate: PathBuf,
    /// Bootstrap interval method.
    #[arg(long, value_enum, default_value_t = Method::Bca)]
    pub method: Method,
    /// Two-sided confidence level of every interval, in (0, 1).
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    /// Bootstrap resamples per interval.
    #[arg(long, default_value_t = 10_000)]
    pub resamples: usize,
    /// RNG seed (same seed and data: same intervals).
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Print the comparison as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Promote only if the candidate's mean is at most this (same unit as the CSVs).
    #[arg(long)]
    pub target_mean: Option<f64>,
    /// |Hedges' g| needed for promote/regress.
    #[arg(long, default_value_t = DEFAULT_MIN_EFFECT)]
    pub min_effect: f64,
    /// Drop values more than K robust standard deviations (1.4826·MAD) from the median first.
    #[arg(long, value_name = "K")]
    pub trim_mad: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let baseline = read_samples(&args.baseline)?;
    let candidate = read_samples(&args.candidate)?;
    let options = CompareOptions {
        bootstrap: BootstrapConfig {
            method: match args.method {
                Method::Bca => BootstrapMethod::Bca,
                Method::Percentile => BootstrapMethod::Percentile,
            },
            confidence: args.confidence,
            resamples: args.resamples,
            seed: args.seed,
        },
        min_effect: args.min_effect,
        target_mean: args.target_mean,
        trim_mad: args.trim_mad,
    };
    let comparison = compare(&baseline, &candidate, &options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        print!("{}", table(&comparison));
    }
    Ok(())
}

fn read_samples(path: &Path) -> anyhow::Result<Vec<f64>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    samples_from_csv(&text).with_context(|| format!("{}", path.display()))
}

fn table(c: &Comparison) -> String {
    let pct = c.confidence * 100.0;
    let row = |name: &str, s: &SampleReport| {
        let trimmed = if s.outliers_dropped > 0 {
            format!("  ({} outliers dropped)", s.outliers_dropped)
        } else {
            String::new()
        };
        format!(
            "{name:<10} {:>6} {:>12.6} {:>12.6} {:>12.6}  [{:.6}, {:.6}]{trimmed}\n",
            s.n, s.mean, s.median, s.std, s.ci_low, s.ci_high
        )
    };
    let optional =
        |v: Option<f64>| v.map_or_else(|| "undefined".to_string(), |v| format!("{v:.3}"));
    let mut out = format!(
        "{:<10} {:>6} {:>12} {:>12} {:>12}  {pct}% CI of the mean ({}, {} resamples)\n",
        "sample", "n", "mean", "median", "std", c.method, c.resamples
    );
    out += &row("baseline", &c.baseline);
    out += &row("candidate", &c.candidate);
    out += &format!(
        "\nratio (candidate/baseline) {:.4}  [{:.4}, {:.4}]\n",
        c.ratio, c.ratio_ci_low, c.ratio_ci_high
    );
    let g_ci = match (c.hedges_g_ci_low, c.hedges_g_ci_high) {
        (Some(lo), Some(hi)) => format!("  [{lo:.3}, {hi:.3}]"),
        _ => String::new(),
    };
    out += &format!(
        "Hedges' g {}{g_ci}   Cohen's d {}\n",
        optional(c.hedges_g),
        optional(c.cohens_d)
    );
    out += &format!("\ndecision: {}\n", c.decision.to_string().to_uppercase());
    for reason in &c.reasons {
        out += &format!("  - {reason}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `text` to a fresh file under the system temp dir and returns its path.
    fn csv(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("attn-xtask-compare-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write csv");
        path
    }

    fn args(baseline: PathBuf, candidate: PathBuf) -> Args {
        Args {
            baseline,
            candidate,
            method: Method::Bca,
            confidence: 0.95,
            resamples: 500,
            seed: 1,
            json: true,
            target_mean: None,
            min_effect: DEFAULT_MIN_EFFECT,
            trim_mad: None,
        }
    }

    fn latencies(center: f64) -> String {
        (0..40)
            .map(|i| format!("{}\n", center + 0.001 * f64::from((i * 7) % 11)))
            .collect()
    }

    #[test]
    fn bad_csvs_are_errors_naming_file_and_line() {
        let good = csv("good.csv", &latencies(0.25));
        let cases = [
            ("nan.csv", "0.25\nNaN\n", "line 2"),
            ("inf.csv", "latency_ms\n0.25\ninf\n", "line 3"),
            ("nocol.csv", "shape,tflops\na,1\n", "latency_"),
            ("empty.csv", "", "no samples"),
            ("one.csv", "0.25\n", "at least 2"),
        ];
        for (name, text, needle) in cases {
            let bad = csv(name, text);
            let err = run(args(bad.clone(), good.clone())).expect_err(name);
            let msg = format!("{err:#}");
            assert!(msg.contains(needle), "{name}: {msg}");
            if name != "one.csv" {
                assert!(
                    msg.contains(name),
                    "{name}: the message names the file: {msg}"
                );
            }
        }
        let missing = good.with_file_name("does-not-exist.csv");
        let msg = format!(
            "{:#}",
            run(args(missing, good.clone())).expect_err("missing")
        );
        assert!(
            msg.contains("cannot read") && msg.contains("does-not-exist.csv"),
            "{msg}"
        );
        let mut bad_confidence = args(good.clone(), good);
        bad_confidence.confidence = 1.0;
        assert!(
            format!("{:#}", run(bad_confidence).expect_err("confidence"))
                .contains("between 0 and 1")
        );
    }

    #[test]
    fn table_shows_the_numbers_and_the_decision() {
        let b = samples_from_csv(&latencies(0.262)).expect("baseline");
        let c = samples_from_csv(&latencies(0.250)).expect("candidate");
        let options = CompareOptions {
            bootstrap: BootstrapConfig {
                resamples: 500,
                ..Default::default()
            },
            ..Default::default()
        };
        let comparison = compare(&b, &c, &options).expect("compare");
        let text = table(&comparison);
        assert!(text.contains("decision: PROMOTE"), "{text}");
        assert!(
            text.contains("baseline") && text.contains("candidate") && text.contains("Hedges' g")
        );
        assert!(text.contains(&format!("{:.4}", comparison.ratio)), "{text}");
        let ok = run(args(
            csv("b.csv", &latencies(0.262)),
            csv("c.csv", &latencies(0.250)),
        ));
        assert!(ok.is_ok());
    }
}
