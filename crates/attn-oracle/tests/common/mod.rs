//! Shared test support: seeded N(0,1) inputs and an attention with an arbitrary mask, used to
//! plant faults that `Problem`'s causal modes cannot express (a diagonal shifted by one, a
//! dropped key tile).

#![allow(dead_code)]

use attn_ref::{reference, AttnShape, Problem};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;

/// Fresh N(0,1) values from a seeded generator (the seed is in every test's name of the data).
pub fn randn(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| rng.sample::<f32, _>(StandardNormal))
        .collect()
}

/// Q, K, V for a shape, rounded to f16 so that every backend sees the same values.
pub fn qkv(shape: &AttnShape, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let round = |x: Vec<f32>| -> Vec<f32> {
        x.into_iter()
            .map(|v| half::f16::from_f32(v).to_f32())
            .collect()
    };
    (
        round(randn(shape.q_elems(), seed)),
        round(randn(shape.kv_elems(), seed + 1)),
        round(randn(shape.kv_elems(), seed + 2)),
    )
}

/// The f64 reference of `attn_ref`.
pub fn reference(p: &Problem, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f64> {
    reference::forward(p, q, k, v).expect("valid problem").o
}

/// Textbook attention in f64 where `visible(i, j)` says whether key `j` is visible to query
/// `i`; a row with no visible key is 0.
pub fn masked_attention(
    shape: &AttnShape,
    scale: f64,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    visible: impl Fn(usize, usize) -> bool,
) -> Vec<f64> {
    let d = shape.head_dim();
    let mut o = vec![0.0; shape.o_elems()];
    for b in 0..shape.batch() {
        for h in 0..shape.q_heads() {
            let kvh = shape.kv_head_of(h);
            for i in 0..shape.q_len() {
                let qi = &q[shape.q_offset(b, h, i)..][..d];
                let scores: Vec<Option<f64>> = (0..shape.kv_len())
                    .map(|j| {
                        visible(i, j).then(|| {
                            let kj = &k[shape.kv_offset(b, kvh, j)..][..d];
                            scale
                                * qi.iter()
                                    .zip(kj)
                                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                                    .sum::<f64>()
                        })
                    })
                    .collect();
                let m = scores
                    .iter()
                    .flatten()
                    .fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                if m == f64::NEG_INFINITY {
                    continue;
                }
                let out = &mut o[shape.q_offset(b, h, i)..][..d];
                let mut l = 0.0;
                for (j, s) in scores.iter().enumerate() {
                    let Some(s) = s else { continue };
                    let e = (s - m).exp();
                    l += e;
                    let vj = &v[shape.kv_offset(b, kvh, j)..][..d];
                    for (od, &vd) in out.iter_mut().zip(vj) {
                        *od += e * f64::from(vd);
                    }
                }
                out.iter_mut().for_each(|x| *x /= l);
            }
        }
    }
    o
}

/// The reference narrowed to f32, as a kernel's output would be.
pub fn as_f32(x: &[f64]) -> Vec<f32> {
    x.iter().map(|&v| v as f32).collect()
}
