//! Incoherent processing: a random orthogonal rotation of the head dimension applied to Q and
//! K before quantization (FlashAttention-3, Shah et al. 2024, §3.3, after QuIP's randomized
//! Hadamard transform).
//!
//! `M = H · diag(s) / √D` with `H` the Sylvester Hadamard matrix and `s` random signs is
//! orthogonal, so `(M q) · (M k) = q · k`: rotating both Q and K leaves attention unchanged,
//! while an outlier coordinate is spread over all `D` coordinates, which shrinks the amax a
//! quantization scale must cover. V is not rotated (it would need the inverse on O).

use rand::{rngs::StdRng, Rng, SeedableRng};
use rayon::prelude::*;

use crate::QuantizeError;

/// A random ±1 diagonal followed by a normalized Hadamard transform over the head dim.
#[derive(Debug, Clone, PartialEq)]
pub struct HadamardRotation {
    signs: Vec<f32>,
}

impl HadamardRotation {
    /// A rotation of `head_dim` (a power of two) with signs drawn from `seed`: the same seed
    /// gives the same rotation, which Q and K must share.
    pub fn new(head_dim: usize, seed: u64) -> Result<Self, QuantizeError> {
        if !head_dim.is_power_of_two() {
            return Err(QuantizeError::RotationHeadDim { head_dim });
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let signs = (0..head_dim)
            .map(|_| if rng.random::<bool>() { 1.0 } else { -1.0 })
            .collect();
        Ok(Self { signs })
    }

    /// The head dim it rotates.
    pub fn head_dim(&self) -> usize {
        self.signs.len()
    }

    /// Rotates every row of `x` (rows of `head_dim` values, e.g. a `[B, H, S, D]` tensor) in
    /// place: `x ← H · diag(s) · x / √D`.
    pub fn apply(&self, x: &mut [f32]) -> Result<(), QuantizeError> {
        self.check_len(x.len())?;
        let d = self.head_dim();
        let norm = 1.0 / (d as f32).sqrt();
        x.par_chunks_mut(d).for_each(|row| {
            row.iter_mut().zip(&self.signs).for_each(|(v, s)| *v *= s);
            walsh_hadamard(row);
            row.iter_mut().for_each(|v| *v *= norm);
        });
        Ok(())
    }

    /// The inverse of [`HadamardRotation::apply`]: `x ← diag(s) · H · x / √D` (`H` is
    /// symmetric and `H · H = D · I`).
    pub fn invert(&self, x: &mut [f32]) -> Result<(), QuantizeError> {
        self.check_len(x.len())?;
        let d = self.head_dim();
        let norm = 1.0 / (d as f32).sqrt();
        x.par_chunks_mut(d).for_each(|row| {
            walsh_hadamard(row);
            row.iter_mut()
                .zip(&self.signs)
                .for_each(|(v, s)| *v *= s * norm);
        });
        Ok(())
    }

    fn check_len(&self, len: usize) -> Result<(), QuantizeError> {
        let d = self.head_dim();
        if len % d != 0 {
            return Err(QuantizeError::LengthMismatch {
                buffer: "input",
                got: len,
                expected: len.next_multiple_of(d),
                needs: format!("a rotation over head_dim {d} (whole rows)"),
            });
        }
        Ok(())
    }
}

/// In-place unnormalized fast Walsh–Hadamard transform (Sylvester order) of a power-of-two
/// length slice: `log2(n)` butterfly passes.
fn walsh_hadamard(x: &mut [f32]) {
    let n = x.len();
    let mut h = 1;
    while h < n {
        for block in x.chunks_mut(2 * h) {
            let (a, b) = block.split_at_mut(h);
            for (u, v) in a.iter_mut().zip(b.iter_mut()) {
                let (s, t) = (*u + *v, *u - *v);
                *u = s;
                *v = t;
            }
        }
        h *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_distr::StandardNormal;

    fn randn(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n).map(|_| rng.sample(StandardNormal)).collect()
    }

    fn dot(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
    }

    #[test]
    fn preserves_dot_products_and_inverts() {
        let r = HadamardRotation::new(128, 7).unwrap();
        let (q, k) = (randn(4 * 128, 1), randn(4 * 128, 2));
        let (mut qr, mut kr) = (q.clone(), k.clone());
        r.apply(&mut qr).unwrap();
        r.apply(&mut kr).unwrap();
        for row in 0..4 {
            let s = row * 128..(row + 1) * 128;
            let (before, after) = (
                dot(&q[s.clone()], &k[s.clone()]),
                dot(&qr[s.clone()], &kr[s]),
            );
            assert!(
                (before - after).abs() < 1e-4 * (1.0 + before.abs()),
                "{before} vs {after}"
            );
        }
        assert_ne!(q, qr, "the rotation must change the coordinates");
        r.invert(&mut qr).unwrap();
        for (a, b) in q.iter().zip(&qr) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    #[test]
    fn spreads_an_outlier_over_the_row() {
        let r = HadamardRotation::new(64, 3).unwrap();
        let mut x = vec![0.0f32; 64];
        x[5] = 100.0;
        r.apply(&mut x).unwrap();
        for v in &x {
            assert!((v.abs() - 12.5).abs() < 1e-4, "{v}"); // 100 / √64
        }
    }

    #[test]
    fn same_seed_same_rotation_different_seed_different() {
        let a = HadamardRotation::new(64, 11).unwrap();
        assert_eq!(a, HadamardRotation::new(64, 11).unwrap());
        assert_ne!(a, HadamardRotation::new(64, 12).unwrap());
    }

    #[test]
    fn rejects_bad_head_dims_and_ragged_rows() {
        assert!(matches!(
            HadamardRotation::new(96, 0),
            Err(QuantizeError::RotationHeadDim { head_dim: 96 })
        ));
        let r = HadamardRotation::new(64, 0).unwrap();
        let mut x = vec![1.0f32; 100];
        let err = r.apply(&mut x).unwrap_err();
        assert!(err.to_string().contains("head_dim 64"), "{err}");
        assert!(x.iter().all(|&v| v == 1.0), "nothing is written on error");
    }
}
