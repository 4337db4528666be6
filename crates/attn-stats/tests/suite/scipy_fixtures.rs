//! Bootstrap intervals against scipy.stats.bootstrap (fixtures written by
//! `tests/fixtures/make_bootstrap_fixtures.py`, scipy 1.17, 400 000 resamples).
//!
//! Both sides are Monte Carlo estimates of the same ideal interval (B → ∞), so they can only
//! agree to within their resampling noise. The fixture records, per interval end, the
//! standard deviation `sd` of that end over 40 scipy runs at the resample count used here
//! (20 000); scipy's own noise at 400 000 resamples is `sd·√(20 000/400 000)`. We accept
//! `|rust − scipy| ≤ 4·√(sd² + sd²·20 000/400 000)` — a 4σ band, so a correct implementation
//! fails one of these 24 checks with probability ≈ 24 × 6e−5 ≈ 0.2 % (and never for this
//! fixed seed once it passes, the run being deterministic). The median's bootstrap
//! distribution is lumpy: where an end sits on one atom in all 40 runs `sd` is 0 and the
//! band collapses to exact agreement (up to 1e−12), which is what the test then demands.

use attn_stats::{
    bootstrap_ci_two_sample, mean_ci, median_ci, BootstrapConfig, BootstrapMethod,
    ConfidenceInterval,
};
use serde_json::Value;

fn fixture() -> Value {
    let text = include_str!("../fixtures/bootstrap_fixtures.json");
    serde_json::from_str(text).expect("fixture JSON parses")
}

fn as_f64(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("fixture key {key} missing"))
}

fn samples(dataset: &Value) -> Vec<Vec<f64>> {
    dataset["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| {
            s.as_array()
                .expect("sample")
                .iter()
                .map(|x| x.as_f64().expect("number"))
                .collect()
        })
        .collect()
}

#[test]
fn intervals_match_scipy_within_resampling_noise() {
    let fx = fixture();
    let rust_resamples = fx["rust_resamples"].as_u64().expect("rust_resamples") as usize;
    let scipy_resamples = fx["scipy_resamples"].as_u64().expect("scipy_resamples") as f64;
    let confidence = as_f64(&fx, "confidence");
    let mut checked = 0;
    let mut report = Vec::new();
    for dataset in fx["datasets"].as_array().expect("datasets") {
        let data = samples(dataset);
        for case in dataset["cases"].as_array().expect("cases") {
            let method = match case["method"].as_str() {
                Some("bca") => BootstrapMethod::Bca,
                Some("percentile") => BootstrapMethod::Percentile,
                other => panic!("unknown method {other:?}"),
            };
            let config = BootstrapConfig {
                method,
                confidence,
                resamples: rust_resamples,
                seed: 7 + checked as u64,
            };
            let stat = case["statistic"].as_str().expect("statistic");
            let ci: ConfidenceInterval = match (stat, data.as_slice()) {
                ("mean", [x]) => mean_ci(x, &config),
                ("median", [x]) => median_ci(x, &config),
                ("ratio_of_means", [b, c]) => {
                    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
                    bootstrap_ci_two_sample(b, c, |b, c| mean(c) / mean(b), &config)
                }
                _ => panic!("unexpected case {stat}"),
            }
            .expect("interval");
            assert!(
                (ci.estimate - as_f64(case, "estimate")).abs() <= 1e-12 * ci.estimate.abs(),
                "estimate"
            );
            for (end, ours, key) in [("low", ci.low, "low"), ("high", ci.high, "high")] {
                let theirs = as_f64(case, key);
                let sd = as_f64(case, &format!("noise_sd_{end}_at_rust_resamples"));
                let combined = (sd * sd * (1.0 + rust_resamples as f64 / scipy_resamples)).sqrt();
                let tolerance = (4.0 * combined).max(1e-12 * theirs.abs());
                let line = format!(
                    "{} {stat} {method}: {end} rust {ours:.6} scipy {theirs:.6} diff {:.2e} tol {tolerance:.2e}",
                    dataset["name"].as_str().unwrap_or("?"),
                    (ours - theirs).abs()
                );
                eprintln!("{line}");
                if (ours - theirs).abs() > tolerance {
                    report.push(line);
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 24, "every fixture case was checked");
    assert!(
        report.is_empty(),
        "outside the noise band:\n{}",
        report.join("\n")
    );
}

#[test]
fn bca_and_percentile_differ_on_skewed_data_like_scipy() {
    // On the exponential sample scipy's BCa interval sits right of the percentile one
    // (positive skew); ours must move the same way, by more than the noise.
    let fx = fixture();
    let dataset = fx["datasets"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == "exponential_n40"))
        .expect("exponential dataset");
    let x = &samples(dataset)[0];
    let config = |method| BootstrapConfig {
        method,
        resamples: 20_000,
        ..Default::default()
    };
    let pct = mean_ci(x, &config(BootstrapMethod::Percentile)).expect("percentile");
    let bca = mean_ci(x, &config(BootstrapMethod::Bca)).expect("bca");
    assert!(
        bca.low > pct.low + 0.02 && bca.high > pct.high + 0.04,
        "{pct:?} vs {bca:?}"
    );
    let a = bca.acceleration.expect("BCa reports a");
    assert!(
        a > 0.0,
        "positive skew gives positive acceleration, got {a}"
    );
}
