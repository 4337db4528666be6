//! Benchmark inputs: N(0, 1) samples drawn on every core.
//!
//! A decode cache of 64 × 8 heads × 4096 keys × D = 256 is 537 M values. Drawn one at a time
//! (8.4 ns per f16 sample on one core of the build machine) that is 4.5 s per cache and dtype,
//! in every `bench` process on the GPU host, whose time is the device's: run 188's A/B step
//! ran out of its 600 s (docs/PERF.md). On two cores this draws them 2.4× faster. Chunks of [`CHUNK`] samples draw from their own
//! generator, seeded by (seed, chunk index), so the values depend on the seed alone, not on
//! how many threads rayon runs.

use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;
use rayon::prelude::*;

/// Samples per independently seeded chunk.
pub const CHUNK: usize = 1 << 18;

/// `n` samples of N(0, 1), each mapped by `map` (a rounding to the storage type), drawn in
/// parallel; the same `seed` gives the same values.
pub fn normal_samples<T, F>(n: usize, seed: u64, map: F) -> Vec<T>
where
    T: Copy + Default + Send,
    F: Fn(f32) -> T + Sync,
{
    let mut out = vec![T::default(); n];
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(chunk, slice)| {
            // Distinct, well-mixed seeds per chunk (the golden-ratio increment of SplitMix64);
            // StdRng::seed_from_u64 expands each into a full ChaCha key.
            let mut rng = StdRng::seed_from_u64(
                seed.wrapping_add((chunk as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            );
            for x in slice {
                *x = map(rng.sample::<f32, _>(StandardNormal));
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_alone_fixes_the_values() {
        let n = 3 * CHUNK + 17;
        let all_cores = normal_samples(n, 7, |x| x);
        let one_thread = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| normal_samples(n, 7, |x| x));
        assert_eq!(all_cores.len(), n);
        assert_eq!(all_cores, one_thread);
        assert_ne!(all_cores, normal_samples(n, 8, |x| x));
        // Chunks are not copies of each other.
        assert_ne!(all_cores[..CHUNK], all_cores[CHUNK..2 * CHUNK]);
    }

    #[test]
    fn samples_are_standard_normal() {
        let x = normal_samples(4 * CHUNK, 1, f64::from);
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        // 1M samples: the mean's standard error is 1e-3, the variance's 1.4e-3.
        assert!(mean.abs() < 6e-3, "mean {mean}");
        assert!((var - 1.0).abs() < 1e-2, "variance {var}");
        let beyond_3 = x.iter().filter(|v| v.abs() > 3.0).count() as f64 / n;
        assert!((beyond_3 - 0.0027).abs() < 5e-4, "P(|x| > 3) = {beyond_3}");
    }

    #[test]
    fn the_map_applies_and_empty_is_empty() {
        let x = normal_samples(1000, 3, half::f16::from_f32);
        let y = normal_samples(1000, 3, |v| v);
        assert!(x.iter().zip(&y).all(|(a, b)| *a == half::f16::from_f32(*b)));
        assert!(normal_samples(0, 3, |v| v).is_empty());
    }
}
