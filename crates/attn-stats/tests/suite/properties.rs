//! Invariants that must hold for any data (proptest), and reproducibility of the bootstrap.

use attn_stats::{
    bootstrap_ci, compare, hedges_g, mean_ci, median_ci, ratio_of_means_ci, samples_from_csv,
    trim_outliers_mad, BootstrapConfig, BootstrapMethod, CompareOptions, Decision, Summary,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal, StandardNormal};

fn normal(n: usize, mean: f64, sd: f64, seed: u64) -> Vec<f64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let z: f64 = StandardNormal.sample(&mut rng);
            mean + sd * z
        })
        .collect()
}

fn config(method: BootstrapMethod, resamples: usize, seed: u64) -> BootstrapConfig {
    BootstrapConfig {
        method,
        resamples,
        seed,
        ..Default::default()
    }
}

fn sample() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(-1e3f64..1e3, 2..60)
}

fn method() -> impl Strategy<Value = BootstrapMethod> {
    prop_oneof![
        Just(BootstrapMethod::Percentile),
        Just(BootstrapMethod::Bca)
    ]
}

proptest! {
    // Regressions in `properties.proptest-regressions` next to this file: proptest's default
    // (`SourceParallel`) would look in `tests/proptest-regressions/properties.txt` instead, as
    // it stops at the `main.rs` beside this module.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions"
        ))),
        ..ProptestConfig::with_cases(64)
    })]

    #[test]
    fn summary_is_ordered(x in sample()) {
        let s = Summary::new(&x).unwrap();
        let q = s.quantiles;
        let chain = [s.min, q.p01, q.p05, q.p25, s.median, q.p75, q.p95, q.p99, s.max];
        prop_assert!(chain.windows(2).all(|w| w[0] <= w[1]), "{chain:?}");
        prop_assert!(s.min <= s.mean && s.mean <= s.max);
        prop_assert!(s.std >= 0.0 && s.mad >= 0.0 && s.mad <= s.max - s.min);
    }

    #[test]
    fn percentile_ci_of_the_mean_lies_within_the_data(x in sample(), seed in any::<u64>()) {
        let ci = mean_ci(&x, &config(BootstrapMethod::Percentile, 200, seed)).unwrap();
        let s = Summary::new(&x).unwrap();
        // A resample of copies of the maximum can average an ulp above it: allow rounding.
        let ulps = 8.0 * f64::EPSILON * s.min.abs().max(s.max.abs());
        prop_assert!(s.min - ulps <= ci.low && ci.low <= ci.high && ci.high <= s.max + ulps);
    }

    #[test]
    fn intervals_are_affine_equivariant(
        n in 5usize..40,
        data_seed in any::<u64>(),
        scale in 0.01f64..100.0,
        shift in -100f64..100.0,
        method in method(),
        seed in any::<u64>(),
    ) {
        // Resampling indices depend only on the seed and n, and z0, a are invariant under
        // x ↦ scale·x + shift, so the interval must map the same way (up to rounding).
        // Continuous data: with exact ties (e.g. many zeros) BCa's z0 counts replicates equal
        // to the estimate, and rounding after the map can break such ties legitimately.
        let x = normal(n, 0.0, 3.0, data_seed);
        let y: Vec<f64> = x.iter().map(|v| scale * v + shift).collect();
        let cfg = config(method, 300, seed);
        let (cx, cy) = (mean_ci(&x, &cfg), mean_ci(&y, &cfg));
        // BCa may be undefined for degenerate draws (the estimate outside every replicate);
        // then it must be undefined for both.
        prop_assert_eq!(cx.is_ok(), cy.is_ok());
        if let (Ok(cx), Ok(cy)) = (cx, cy) {
            let tol = 1e-9 * (scale * 10.0 + shift.abs());
            prop_assert!((scale * cx.low + shift - cy.low).abs() <= tol, "{cx:?} {cy:?}");
            prop_assert!((scale * cx.high + shift - cy.high).abs() <= tol, "{cx:?} {cy:?}");
        }
    }

    #[test]
    fn hedges_g_is_antisymmetric_and_scale_free(
        a in sample(), b in sample(), scale in 0.01f64..100.0,
    ) {
        if let Ok(g) = hedges_g(&a, &b) {
            let back = hedges_g(&b, &a).unwrap();
            prop_assert!((g + back).abs() <= 1e-9 * (1.0 + g.abs()));
            let sa: Vec<f64> = a.iter().map(|v| v * scale).collect();
            let sb: Vec<f64> = b.iter().map(|v| v * scale).collect();
            let scaled = hedges_g(&sa, &sb).unwrap();
            prop_assert!((g - scaled).abs() <= 1e-9 * (1.0 + g.abs()));
        }
    }

    #[test]
    fn trimming_keeps_a_subset_inside_the_fences(x in sample(), k in 0.7f64..6.0) {
        let t = trim_outliers_mad(&x, k).unwrap();
        prop_assert_eq!(t.kept.len() + t.dropped, x.len());
        prop_assert!(t.kept.iter().all(|v| t.lower_fence <= *v && *v <= t.upper_fence));
        let outside = x.iter().filter(|v| **v < t.lower_fence || **v > t.upper_fence).count();
        prop_assert_eq!(outside, t.dropped);
        // At least half of the values lie within one MAD of the median, and the fence is
        // k·1.4826 ≥ 1 MAD away for k ≥ 0.7: at most half can be dropped.
        prop_assert!(t.dropped * 2 <= x.len());
    }

    #[test]
    fn csv_round_trips(x in prop::collection::vec(-1e6f64..1e6, 1..50)) {
        let text: String = x.iter().map(|v| format!("{v}\n")).collect();
        prop_assert_eq!(samples_from_csv(&text).unwrap(), x.clone());
        let with_header = format!(
            "run,latency_us\n{}",
            x.iter().enumerate().map(|(i, v)| format!("{i},{v}\n")).collect::<String>()
        );
        prop_assert_eq!(samples_from_csv(&with_header).unwrap(), x);
    }
}

#[test]
fn same_seed_same_interval_on_any_thread_count() {
    let x = normal(300, 5.0, 1.0, 11);
    let cfg = config(BootstrapMethod::Bca, 5_000, 1234);
    let run = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool")
            .install(|| mean_ci(&x, &cfg).expect("interval"))
    };
    let one = run(1);
    assert_eq!(one, run(2));
    assert_eq!(one, run(3));
    assert_eq!(one, mean_ci(&x, &cfg).expect("interval"));
    let other_seed = mean_ci(&x, &BootstrapConfig { seed: 1235, ..cfg }).expect("interval");
    assert_ne!((one.low, one.high), (other_seed.low, other_seed.high));
}

#[test]
fn fast_paths_agree_with_the_generic_closure_path() {
    // The built-in statistics use allocation-free resampling and O(n) jackknife formulas;
    // the closure path materializes each resample and deletes values one by one. Both draw
    // the same indices from the same seed, so the intervals must agree to rounding.
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let b = normal(80, 10.0, 1.0, 30);
    let c = normal(120, 9.0, 1.5, 31);
    for method in [BootstrapMethod::Percentile, BootstrapMethod::Bca] {
        let cfg = config(method, 2_000, 3);
        let close = |x: &attn_stats::ConfidenceInterval, y: &attn_stats::ConfidenceInterval| {
            let tol = 1e-9 * (1.0 + y.estimate.abs());
            (x.low - y.low).abs() < tol
                && (x.high - y.high).abs() < tol
                && (x.estimate - y.estimate).abs() < tol
        };
        let fast = mean_ci(&b, &cfg).unwrap();
        let slow = bootstrap_ci(&b, mean, &cfg).unwrap();
        assert!(close(&fast, &slow), "mean {method}: {fast:?} vs {slow:?}");
        let fast = ratio_of_means_ci(&b, &c, &cfg).unwrap();
        let slow =
            attn_stats::bootstrap_ci_two_sample(&b, &c, |b, c| mean(c) / mean(b), &cfg).unwrap();
        assert!(close(&fast, &slow), "ratio {method}: {fast:?} vs {slow:?}");
        let fast = attn_stats::hedges_g_ci(&b, &c, &cfg).unwrap();
        let slow = attn_stats::bootstrap_ci_two_sample(
            &b,
            &c,
            |b, c| hedges_g(b, c).unwrap_or(f64::NAN),
            &cfg,
        )
        .unwrap();
        assert!(close(&fast, &slow), "g {method}: {fast:?} vs {slow:?}");
        let fast = median_ci(&b, &cfg).unwrap();
        let slow = bootstrap_ci(&b, |s| attn_stats::median(s).unwrap_or(f64::NAN), &cfg).unwrap();
        assert!(close(&fast, &slow), "median {method}: {fast:?} vs {slow:?}");
    }
}

#[test]
fn more_resamples_shrink_the_monte_carlo_noise() {
    // Endpoint spread over seeds falls like 1/√B: from 250 to 16 000 resamples (×64) it
    // should shrink ≈ 8× ; demand at least 4× so the test is robust.
    let x = normal(60, 0.0, 1.0, 12);
    let spread = |b: usize| {
        let lows: Vec<f64> = (0..24)
            .map(|s| {
                mean_ci(&x, &config(BootstrapMethod::Percentile, b, s))
                    .unwrap()
                    .low
            })
            .collect();
        Summary::new(&lows).unwrap().std
    };
    let (coarse, fine) = (spread(250), spread(16_000));
    assert!(
        coarse > 4.0 * fine,
        "sd at B=250: {coarse}, at B=16000: {fine}"
    );
}

#[test]
fn median_ci_brackets_the_median_and_custom_statistics_work() {
    let x = normal(101, 3.0, 1.0, 13);
    let cfg = config(BootstrapMethod::Bca, 4_000, 5);
    let med = median_ci(&x, &cfg).expect("median");
    assert!(med.low < med.estimate && med.estimate < med.high);
    // A closure statistic: the 90th percentile, via the public quantile helper.
    let p90 = bootstrap_ci(
        &x,
        |s| attn_stats::quantile(s, 0.9).unwrap_or(f64::NAN),
        &cfg,
    )
    .expect("p90");
    assert!(p90.low > med.high, "{p90:?} vs {med:?}");
    // The standard error of the mean's replicates matches s/√n within 5 %.
    let mean = mean_ci(&x, &cfg).expect("mean");
    let s = Summary::new(&x).expect("summary");
    let expected = s.std * ((x.len() - 1) as f64 / x.len() as f64).sqrt() / (x.len() as f64).sqrt();
    assert!(
        (mean.std_error / expected - 1.0).abs() < 0.05,
        "{} vs {expected}",
        mean.std_error
    );
}

#[test]
fn ratio_ci_brackets_a_known_speedup() {
    // Candidate 20 % faster in distribution (log-normal latencies, sd of log 0.05).
    let mut rng = rand::rngs::StdRng::seed_from_u64(14);
    let base = LogNormal::new(0.262f64.ln(), 0.05).expect("log-normal");
    let cand = LogNormal::new((0.8 * 0.262f64).ln(), 0.05).expect("log-normal");
    let b: Vec<f64> = (0..200).map(|_| base.sample(&mut rng)).collect();
    let c: Vec<f64> = (0..200).map(|_| cand.sample(&mut rng)).collect();
    let ci = ratio_of_means_ci(&b, &c, &config(BootstrapMethod::Bca, 4_000, 6)).expect("ratio");
    assert!(ci.low < 0.8 && 0.8 < ci.high, "{ci:?}");
    assert!(
        ci.high - ci.low < 0.03,
        "a 200-sample ratio should be tight: {ci:?}"
    );
}

#[test]
fn decisions_follow_the_gates() {
    let base = normal(200, 0.262, 0.004, 15);
    let opts = |target_mean| CompareOptions {
        bootstrap: config(BootstrapMethod::Bca, 2_000, 7),
        target_mean,
        ..Default::default()
    };
    // Clearly faster (g ≈ −3): promote; with an unmet target: inconclusive.
    let fast = normal(200, 0.250, 0.004, 16);
    let c = compare(&base, &fast, &opts(None)).expect("compare");
    assert_eq!(c.decision, Decision::Promote, "{:?}", c.reasons);
    assert!(c.gates.faster && c.gates.cis_disjoint && c.gates.large_effect == Some(true));
    assert!(c.ratio_ci_high < 1.0 && c.hedges_g.is_some_and(|g| g < -2.0));
    assert!(c.hedges_g_ci_low.unwrap() < c.hedges_g.unwrap());
    assert!(c.hedges_g.unwrap() < c.hedges_g_ci_high.unwrap());
    let missed = compare(&base, &fast, &opts(Some(0.245))).expect("compare");
    assert_eq!(missed.gates.meets_target, Some(false));
    assert_eq!(missed.decision, Decision::Inconclusive);
    let met = compare(&base, &fast, &opts(Some(0.255))).expect("compare");
    assert_eq!(met.decision, Decision::Promote);
    // Clearly slower: regress (the target does not matter).
    let c = compare(&fast, &base, &opts(Some(0.255))).expect("compare");
    assert_eq!(c.decision, Decision::Regress, "{:?}", c.reasons);
    // Same distribution: inconclusive.
    let same = normal(200, 0.262, 0.004, 17);
    let c = compare(&base, &same, &opts(None)).expect("compare");
    assert_eq!(c.decision, Decision::Inconclusive, "{:?}", c.reasons);
    // Disjoint CIs but a small effect (large n, tiny shift: |g| ≈ 0.25): inconclusive.
    let big_base = normal(2_000, 0.262, 0.004, 18);
    let small_shift = normal(2_000, 0.261, 0.004, 19);
    let c = compare(&big_base, &small_shift, &opts(None)).expect("compare");
    assert!(c.gates.faster && c.gates.cis_disjoint, "{:?}", c.reasons);
    assert_eq!(c.gates.large_effect, Some(false));
    assert_eq!(c.decision, Decision::Inconclusive);
}

#[test]
fn trimming_in_compare_reports_the_dropped_count() {
    let mut base = normal(100, 0.262, 0.002, 20);
    base.extend([0.9, 1.4, 2.0]); // preempted runs
    let cand = normal(100, 0.250, 0.002, 21);
    let opts = CompareOptions {
        bootstrap: config(BootstrapMethod::Bca, 1_000, 8),
        trim_mad: Some(3.5),
        ..Default::default()
    };
    let c = compare(&base, &cand, &opts).expect("compare");
    assert!(c.baseline.outliers_dropped >= 3);
    assert_eq!(c.baseline.n + c.baseline.outliers_dropped, 103);
    assert!(c.baseline.max < 0.3);
    assert_eq!(c.decision, Decision::Promote);
    // Untrimmed, the stragglers inflate the baseline's spread and its mean.
    let raw = compare(
        &base,
        &cand,
        &CompareOptions {
            trim_mad: None,
            ..opts
        },
    )
    .expect("compare");
    assert!(raw.baseline.std > 5.0 * c.baseline.std);
}

#[test]
fn comparison_json_has_the_contract_keys() {
    let c = compare(
        &normal(50, 1.0, 0.1, 22),
        &normal(50, 0.9, 0.1, 23),
        &CompareOptions {
            bootstrap: config(BootstrapMethod::Percentile, 1_000, 9),
            ..Default::default()
        },
    )
    .expect("compare");
    let json = serde_json::to_value(&c).expect("serialize");
    for key in [
        "baseline",
        "candidate",
        "hedges_g",
        "ratio",
        "ratio_ci_low",
        "ratio_ci_high",
        "decision",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    for side in ["baseline", "candidate"] {
        for key in ["n", "mean", "median", "std", "ci_low", "ci_high"] {
            assert!(json[side][key].is_number(), "missing {side}.{key}");
        }
    }
    assert_eq!(json["decision"], "promote");
    assert_eq!(json["method"], "percentile");
    let g = json["hedges_g"].as_f64().expect("g");
    let j = 1.0 - 3.0 / (4.0 * 100.0 - 9.0);
    let d = json["cohens_d"].as_f64().expect("d");
    assert!((g - j * d).abs() < 1e-12);
    let ratio = json["ratio"].as_f64().expect("ratio");
    let means = (
        json["candidate"]["mean"].as_f64(),
        json["baseline"]["mean"].as_f64(),
    );
    assert!((ratio - means.0.unwrap_or(0.0) / means.1.unwrap_or(1.0)).abs() < 1e-15);
}
