//! Bad input gets a typed error (never a panic, never a silent NaN).

use attn_stats::{
    bootstrap_ci, compare, hedges_g, hedges_g_ci, mean, mean_ci, median_ci, quantile,
    ratio_of_means_ci, samples_from_csv, std_dev, trim_outliers_mad, BootstrapConfig,
    BootstrapMethod, CompareOptions, Decision, EffectSize, StatsError, Summary,
};

fn normal_sample(n: usize, seed: u64) -> Vec<f64> {
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let z: f64 = StandardNormal.sample(&mut rng);
            10.0 + z
        })
        .collect()
}

fn quick() -> BootstrapConfig {
    BootstrapConfig {
        resamples: 500,
        ..Default::default()
    }
}

fn in_sample(err: StatsError) -> (&'static str, StatsError) {
    match err {
        StatsError::InSample { sample, error } => (sample, *error),
        other => panic!("expected an error naming the sample, got {other:?}"),
    }
}

#[test]
fn empty_sample() {
    let empty: [f64; 0] = [];
    let want = StatsError::EmptySample { needed: 1 };
    assert_eq!(mean(&empty), Err(want.clone()));
    assert_eq!(mean_ci(&empty, &quick()), Err(want.clone()));
    assert_eq!(median_ci(&empty, &quick()), Err(want));
    assert!(matches!(
        Summary::new(&empty),
        Err(StatsError::EmptySample { needed: 2 })
    ));
    let x = normal_sample(20, 1);
    let (which, err) = in_sample(compare(&empty, &x, &CompareOptions::default()).unwrap_err());
    assert_eq!(which, "baseline");
    assert!(matches!(err, StatsError::EmptySample { .. }));
    let (which, _) = in_sample(ratio_of_means_ci(&x, &empty, &quick()).unwrap_err());
    assert_eq!(which, "candidate");
}

#[test]
fn single_value_has_no_standard_deviation() {
    let one = [0.25];
    assert!(matches!(
        std_dev(&one),
        Err(StatsError::TooFewSamples {
            n: 1,
            needed: 2,
            ..
        })
    ));
    assert!(matches!(
        Summary::new(&one),
        Err(StatsError::TooFewSamples { n: 1, .. })
    ));
    let x = normal_sample(20, 2);
    let (which, err) = in_sample(hedges_g(&one, &x).unwrap_err());
    assert_eq!(which, "baseline");
    assert!(matches!(err, StatsError::TooFewSamples { n: 1, .. }));
    let (which, _) = in_sample(compare(&x, &one, &CompareOptions::default()).unwrap_err());
    assert_eq!(which, "candidate");
    let msg = compare(&x, &one, &CompareOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("candidate sample:") && msg.contains("at least 2"),
        "{msg}"
    );
    // The mean of one value is defined; so is its (degenerate) bootstrap interval.
    assert_eq!(mean(&one), Ok(0.25));
    let ci = mean_ci(&one, &quick()).expect("one-point bootstrap");
    assert_eq!((ci.low, ci.high), (0.25, 0.25));
}

#[test]
fn all_equal_samples_make_g_undefined_not_a_division_by_zero() {
    let a = [0.25; 30];
    let b = [0.30; 30];
    assert_eq!(hedges_g(&a, &b), Err(StatsError::ZeroVariance));
    assert_eq!(hedges_g_ci(&a, &b, &quick()), Err(StatsError::ZeroVariance));
    assert_eq!(
        EffectSize::from_moments((1.0, 0.0, 10), (2.0, 0.0, 10)),
        Err(StatsError::ZeroVariance)
    );
    // compare() reports it instead of failing: g is null, the decision inconclusive.
    let c = compare(&a, &b, &CompareOptions::default()).expect("comparison");
    assert_eq!(c.hedges_g, None);
    assert_eq!(c.cohens_d, None);
    assert_eq!(c.gates.large_effect, None);
    assert!(c.gates.slower && c.gates.cis_disjoint);
    assert_eq!(c.decision, Decision::Inconclusive);
    assert!(
        c.reasons
            .iter()
            .any(|r| r.contains("Hedges' g undefined") && r.contains("zero variance")),
        "{:?}",
        c.reasons
    );
    assert_eq!((c.baseline.ci_low, c.baseline.ci_high), (0.25, 0.25));
    assert!((c.ratio - 1.2).abs() < 1e-12 && c.ratio_ci_low == c.ratio_ci_high);
    let json = serde_json::to_value(&c).expect("serializes");
    assert!(json["hedges_g"].is_null());
    // One constant sample is fine: the other's variance defines the scale.
    assert!(hedges_g(&a, &normal_sample(30, 3)).is_ok());
}

#[test]
fn constant_samples_are_exactly_constant_whatever_the_rounding() {
    // Naive sum-then-divide gives mean(0.3 × 20) = 0.29999999999999993 and a pooled
    // standard deviation of ~1e-17, i.e. g ≈ 1e15 instead of "undefined".
    for c in [0.1, 0.3, 0.7, 1.1, 0.262, 12.1, 1e-7, 3.3e5] {
        for n in 2..=64 {
            let x = vec![c; n];
            let s = Summary::new(&x).expect("summary");
            assert_eq!((s.mean, s.std, s.mad), (c, 0.0, 0.0), "c={c} n={n}");
            let y = vec![c * 1.5; n + 1];
            assert_eq!(
                hedges_g(&x, &y),
                Err(StatsError::ZeroVariance),
                "c={c} n={n}"
            );
        }
    }
}

#[test]
fn non_finite_values() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let x = [1.0, 2.0, bad, 4.0];
        assert!(
            matches!(
                mean_ci(&x, &quick()),
                Err(StatsError::NonFinite { index: 2, .. })
            ),
            "{bad}"
        );
        assert!(matches!(
            Summary::new(&x),
            Err(StatsError::NonFinite { index: 2, .. })
        ));
        let (which, _) =
            in_sample(compare(&[1.0, 2.0, 3.0], &x, &CompareOptions::default()).unwrap_err());
        assert_eq!(which, "candidate");
    }
}

#[test]
fn confidence_outside_the_open_unit_interval() {
    let x = normal_sample(20, 4);
    for confidence in [0.0, 1.0, -0.5, 1.5, 95.0, f64::NAN, f64::INFINITY] {
        let config = BootstrapConfig {
            confidence,
            ..quick()
        };
        let err = mean_ci(&x, &config).unwrap_err();
        assert!(
            matches!(err, StatsError::InvalidConfidence(_)),
            "{confidence}: {err:?}"
        );
        let options = CompareOptions {
            bootstrap: config,
            ..Default::default()
        };
        assert!(matches!(
            compare(&x, &x, &options),
            Err(StatsError::InvalidConfidence(_))
        ));
    }
    let es = EffectSize::from_samples(&x, &normal_sample(20, 5)).expect("g");
    assert!(matches!(
        es.hedges_g_normal_ci(1.0),
        Err(StatsError::InvalidConfidence(_))
    ));
}

#[test]
fn zero_resamples() {
    let config = BootstrapConfig {
        resamples: 0,
        ..Default::default()
    };
    assert_eq!(
        mean_ci(&[1.0, 2.0], &config),
        Err(StatsError::ZeroResamples)
    );
}

#[test]
fn other_invalid_options() {
    let x = normal_sample(20, 6);
    assert_eq!(quantile(&x, 1.5), Err(StatsError::InvalidProbability(1.5)));
    assert!(matches!(
        quantile(&x, f64::NAN),
        Err(StatsError::InvalidProbability(_))
    ));
    for k in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            trim_outliers_mad(&x, k),
            Err(StatsError::InvalidOption(_))
        ));
    }
    let bad_target = CompareOptions {
        target_mean: Some(f64::NAN),
        ..Default::default()
    };
    assert!(matches!(
        compare(&x, &x, &bad_target),
        Err(StatsError::InvalidOption(_))
    ));
    let bad_effect = CompareOptions {
        min_effect: -0.8,
        ..Default::default()
    };
    assert!(matches!(
        compare(&x, &x, &bad_effect),
        Err(StatsError::InvalidOption(_))
    ));
    assert!("jackknife".parse::<BootstrapMethod>().is_err());
    assert_eq!("BCa".parse::<BootstrapMethod>(), Ok(BootstrapMethod::Bca));
    // A zero baseline mean makes the ratio meaningless.
    let err = ratio_of_means_ci(&[-1.0, 1.0], &x, &quick()).unwrap_err();
    assert!(err.to_string().contains("baseline mean is 0"), "{err}");
}

#[test]
fn statistic_that_is_not_finite() {
    let x = normal_sample(20, 7);
    let err = bootstrap_ci(&x, |_| f64::NAN, &quick()).unwrap_err();
    assert!(matches!(
        err,
        StatsError::NonFiniteStatistic { on: "the data", .. }
    ));
    // Finite on the data (1/1), infinite on the ~36 % of resamples that miss x[0] (1/0).
    let first = x[0];
    let inverse_count_of_first = |s: &[f64]| 1.0 / s.iter().filter(|&&v| v == first).count() as f64;
    let err = bootstrap_ci(&x, inverse_count_of_first, &quick()).unwrap_err();
    assert!(
        matches!(
            err,
            StatsError::NonFiniteStatistic {
                on: "a resample",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn bca_undefined_when_the_estimate_lies_outside_every_replicate() {
    // The number of distinct values is n on the data and < n on (almost) every resample:
    // z0 = Φ⁻¹(1) = ∞. The percentile interval still exists.
    let x = normal_sample(25, 8);
    let distinct = |s: &[f64]| {
        let mut v = s.to_vec();
        v.sort_unstable_by(f64::total_cmp);
        v.dedup();
        v.len() as f64
    };
    let err = bootstrap_ci(&x, distinct, &quick()).unwrap_err();
    assert!(matches!(err, StatsError::BcaUndefined(_)), "{err:?}");
    assert!(
        err.to_string().contains("percentile"),
        "the message says what to do: {err}"
    );
    let percentile = BootstrapConfig {
        method: BootstrapMethod::Percentile,
        ..quick()
    };
    let ci = bootstrap_ci(&x, distinct, &percentile).expect("percentile interval");
    assert!(ci.high < 25.0);
}

#[test]
fn csv_errors_name_the_line() {
    let cases: [(&str, StatsError); 9] = [
        ("", StatsError::CsvEmpty),
        ("\n\n# only a comment\n", StatsError::CsvEmpty),
        ("latency_ms\n", StatsError::CsvEmpty),
        (
            "shape,tflops\na,1.0\n",
            StatsError::CsvNoLatencyColumn {
                header: "shape,tflops".into(),
            },
        ),
        (
            "0.25\nNaN\n",
            StatsError::CsvNonFinite {
                line: 2,
                text: "NaN".into(),
            },
        ),
        (
            "latency_us\n12.1\ninf\n",
            StatsError::CsvNonFinite {
                line: 3,
                text: "inf".into(),
            },
        ),
        (
            "latency_ms,run\n0.25,1\nfast,2\n",
            StatsError::CsvNotNumber {
                line: 3,
                text: "fast".into(),
            },
        ),
        (
            "latency_ms,run\n0.25,1\n0.26\n",
            StatsError::CsvFieldCount {
                line: 3,
                expected: 2,
                found: 1,
            },
        ),
        (
            "0.25,0.26\n",
            StatsError::CsvFieldCount {
                line: 1,
                expected: 1,
                found: 2,
            },
        ),
    ];
    for (text, want) in cases {
        assert_eq!(samples_from_csv(text), Err(want), "{text:?}");
    }
}

#[test]
fn csv_layouts_that_are_accepted() {
    assert_eq!(
        samples_from_csv("\u{feff}0.25\r\n0.5\r\n\r\n1e-1\r\n").unwrap(),
        vec![0.25, 0.5, 0.1]
    );
    let csv = "# bench output\nshape,causal,\"Latency_Ms\",latency_us\n\"2x8x2048x64\",no,\"0.0455\",45.5\nx,yes,0.0405,40.5\n";
    assert_eq!(samples_from_csv(csv).unwrap(), vec![0.0455, 0.0405]);
}
