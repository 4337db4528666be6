//! Known values: effect sizes of published worked examples, and summaries that can be
//! checked by hand.
//!
//! Effect-size sources (the numbers in the papers are rounded; the fixture holds the same
//! quantities recomputed at full precision with numpy by
//! `tests/fixtures/make_bootstrap_fixtures.py`):
//! - Lakens, D. (2013). Calculating and reporting effect sizes to facilitate cumulative
//!   science: a practical primer for t-tests and ANOVAs. Frontiers in Psychology 4:863,
//!   Table 1 (movie ratings, two independent groups of 10): d_s = 1.13, g_s = 1.08.
//! - Borenstein, M., Hedges, L. V., Higgins, J. P. T., Rothstein, H. R. (2009). Introduction
//!   to Meta-Analysis, ch. 4 worked example (means 103 vs 100, SD 5.5 vs 4.5, n = 50 each):
//!   d = 0.5970, V_d = 0.0418, J = 0.9923, g = 0.5924. (V_g = J²·V_d is checked against the
//!   unrounded numpy value only: chaining the book's rounded J and V_d moves its 4th decimal.)

use attn_stats::{
    cohens_d, hedges_correction, hedges_g, mad, median, quantile, std_dev, EffectSize, Summary,
};
use serde_json::Value;

fn fixture() -> Value {
    serde_json::from_str(include_str!("../fixtures/bootstrap_fixtures.json")).expect("fixture JSON")
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

fn close(got: f64, want: f64, tol: f64, what: &str) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, want {want} ± {tol}"
    );
}

#[test]
fn lakens_2013_table1() {
    let fx = &fixture()["effect_sizes"]["lakens_2013_table1"];
    let (movie_2, movie_1) = (numbers(&fx["baseline"]), numbers(&fx["candidate"]));
    let es = EffectSize::from_samples(&movie_2, &movie_1).expect("effect size");
    // As printed in the paper (two decimals).
    close(es.cohens_d, 1.13, 0.005, "d_s (paper)");
    close(es.hedges_g, 1.08, 0.005, "g_s (paper)");
    close(es.mean_difference, 1.0, 1e-12, "8.7 - 7.7");
    // Full precision, recomputed independently with numpy.
    close(
        es.cohens_d,
        fx["cohens_d"].as_f64().unwrap_or(f64::NAN),
        1e-12,
        "d (numpy)",
    );
    close(
        es.hedges_g,
        fx["hedges_g"].as_f64().unwrap_or(f64::NAN),
        1e-12,
        "g (numpy)",
    );
    close(es.correction, 1.0 - 3.0 / 71.0, 1e-15, "J for n = 10 + 10");
    // The free functions agree, and swapping the roles flips the sign.
    close(
        cohens_d(&movie_2, &movie_1).expect("d"),
        es.cohens_d,
        0.0,
        "cohens_d()",
    );
    close(
        hedges_g(&movie_1, &movie_2).expect("g"),
        -es.hedges_g,
        1e-15,
        "antisymmetry",
    );
}

#[test]
fn borenstein_2009_chapter4() {
    let fx = &fixture()["effect_sizes"]["borenstein_2009_ch4"];
    let es = EffectSize::from_moments((100.0, 4.5, 50), (103.0, 5.5, 50)).expect("effect size");
    close(es.cohens_d, 0.5970, 5e-5, "d (book)");
    close(es.correction, 0.9923, 5e-5, "J (book)");
    close(es.hedges_g, 0.5924, 5e-5, "g (book)");
    let var_g = es.hedges_g_std_error().powi(2);
    close(var_g / es.correction.powi(2), 0.0418, 5e-5, "V_d (book)");
    close(
        var_g,
        fx["var_g"].as_f64().unwrap_or(f64::NAN),
        1e-12,
        "V_g (numpy)",
    );
    close(
        es.hedges_g,
        fx["hedges_g"].as_f64().unwrap_or(f64::NAN),
        1e-12,
        "g (numpy)",
    );
    // The 95 % normal-approximation interval is g ± 1.96·SE.
    let (lo, hi) = es.hedges_g_normal_ci(0.95).expect("ci");
    close(
        hi - es.hedges_g,
        1.959_963_984_540_054 * var_g.sqrt(),
        1e-12,
        "half width",
    );
    close(es.hedges_g - lo, hi - es.hedges_g, 1e-12, "symmetric");
}

#[test]
fn approximate_correction_is_close_to_the_exact_gamma_form() {
    // The documented claim: J = 1 − 3/(4·df − 1) is within 5e-4 of
    // Γ(df/2)/(√(df/2)·Γ((df−1)/2)) for df ≥ 10 (exact values from scipy's gammaln).
    let fx = fixture();
    let exact = fx["effect_sizes"]["exact_j_by_df"]
        .as_object()
        .expect("exact_j_by_df");
    assert_eq!(exact.len(), 4);
    for (df, j_exact) in exact {
        let df: usize = df.parse().expect("df");
        let j_exact = j_exact.as_f64().expect("J");
        // n_b + n_c − 2 = df; any split gives the same J.
        let j = hedges_correction(df / 2 + 1, df - df / 2 + 1);
        assert!(j > j_exact, "the approximation overestimates J slightly");
        close(j, j_exact, 5e-4, &format!("J at df = {df}"));
    }
}

#[test]
fn summary_of_a_hand_checked_sample() {
    // Sorted: 2 4 4 4 5 5 7 9. Σ = 40, Σ(x − 5)² = 32.
    let x = [4.0, 9.0, 2.0, 4.0, 5.0, 7.0, 4.0, 5.0];
    let s = Summary::new(&x).expect("summary");
    assert_eq!(s.n, 8);
    close(s.mean, 5.0, 0.0, "mean");
    close(s.std, (32.0f64 / 7.0).sqrt(), 1e-15, "std (n − 1)");
    close(s.median, 4.5, 0.0, "median");
    // |x − 4.5| sorted: .5 .5 .5 .5 .5 2.5 2.5 4.5 → median .5
    close(s.mad, 0.5, 0.0, "MAD");
    assert_eq!((s.min, s.max), (2.0, 9.0));
    // Type-7 quantiles: h = 7p, x[⌊h⌋] + frac(h)·(x[⌊h⌋+1] − x[⌊h⌋]), as numpy.percentile.
    close(s.quantiles.p25, 4.0, 1e-15, "p25");
    close(s.quantiles.p75, 5.5, 1e-15, "p75");
    close(s.quantiles.p01, 2.14, 1e-12, "p01");
    close(s.quantiles.p99, 8.86, 1e-12, "p99");
    close(s.quantiles.p05, 2.0 + 0.35 * 2.0, 1e-12, "p05");
    close(s.quantiles.p95, 7.0 + 0.65 * 2.0, 1e-12, "p95");
    // The free functions agree with the summary.
    close(median(&x).expect("median"), s.median, 0.0, "median()");
    close(mad(&x).expect("mad"), s.mad, 0.0, "mad()");
    close(std_dev(&x).expect("std"), s.std, 0.0, "std_dev()");
    close(quantile(&x, 0.0).expect("q0"), 2.0, 0.0, "quantile(0)");
    close(quantile(&x, 1.0).expect("q1"), 9.0, 0.0, "quantile(1)");
}

#[test]
fn hedges_g_of_latency_like_samples_has_the_documented_sign() {
    // Candidate 10 % faster: g < 0 (the candidate's mean is lower).
    let baseline = [0.262, 0.259, 0.266, 0.261, 0.263, 0.260, 0.264, 0.262];
    let candidate: Vec<f64> = baseline.iter().map(|x| 0.9 * x).collect();
    let es = EffectSize::from_samples(&baseline, &candidate).expect("g");
    assert!(es.hedges_g < -0.8 && es.cohens_d < es.hedges_g);
    // |g| < |d| always, by exactly J.
    close(
        es.hedges_g / es.cohens_d,
        hedges_correction(8, 8),
        1e-15,
        "g/d = J",
    );
}
