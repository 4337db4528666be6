//! Helpers shared by the test modules.

use attn_ref::AttnShape;
use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

/// `n` fresh N(0,1) samples from a seeded generator.
pub fn normal(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| StandardNormal.sample(&mut rng)).collect()
}

/// `n` fresh N(0,1) samples as f32.
pub fn normal_f32(n: usize, seed: u64) -> Vec<f32> {
    normal(n, seed).into_iter().map(|x| x as f32).collect()
}

/// Random Q, K, V for a shape.
pub fn qkv(shape: &AttnShape, seed: u64) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    (
        normal(shape.q_elems(), seed),
        normal(shape.kv_elems(), seed.wrapping_add(1)),
        normal(shape.kv_elems(), seed.wrapping_add(2)),
    )
}

/// Largest |a − b|, treating two equal infinities (LSE of masked rows) as equal.
pub fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() })
        .fold(0.0, f64::max)
}

/// Largest |x|, ignoring infinities (LSE of masked rows).
pub fn max_abs(a: &[f64]) -> f64 {
    a.iter()
        .filter(|x| x.is_finite())
        .map(|x| x.abs())
        .fold(0.0, f64::max)
}

/// Asserts ‖a − b‖∞ ≤ tol · max(‖b‖∞, 1).
pub fn assert_close(what: &str, a: &[f64], b: &[f64], tol: f64) {
    let err = max_abs_diff(a, b);
    let bound = tol * max_abs(b).max(1.0);
    assert!(err <= bound, "{what}: max |a-b| = {err:e} > {bound:e}");
}
