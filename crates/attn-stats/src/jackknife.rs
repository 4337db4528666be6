//! Leave-one-out (jackknife) values of the built-in statistics in O(n) or O(n log n), instead
//! of n re-evaluations (O(n²)), so BCa stays cheap for the 10⁴–10⁵-sample latency files a
//! benchmark writes. Each is checked against the brute-force deletion in the tests below.

use crate::summary::{mean_of, sum_sq_dev};

/// Means with value i deleted: (n·m − xᵢ)/(n − 1), written as m + (m − xᵢ)/(n − 1) so that
/// no large sum is differenced. Needs n ≥ 2.
pub(crate) fn means(x: &[f64]) -> Vec<f64> {
    let m = mean_of(x);
    let scale = 1.0 / (x.len() as f64 - 1.0);
    x.iter().map(|xi| m + (m - xi) * scale).collect()
}

/// (mean, sum of squared deviations) with value i deleted, by Welford's downdate
/// SS₋ᵢ = SS − (xᵢ − m)(xᵢ − m₋ᵢ). Needs n ≥ 2.
pub(crate) fn means_and_ss(x: &[f64]) -> Vec<(f64, f64)> {
    let m = mean_of(x);
    let ss = sum_sq_dev(x, m);
    let scale = 1.0 / (x.len() as f64 - 1.0);
    x.iter()
        .map(|xi| {
            let m_i = m + (m - xi) * scale;
            // Rounding can push a tiny SS just below zero.
            (m_i, (ss - (xi - m) * (xi - m_i)).max(0.0))
        })
        .collect()
}

/// Medians with value i deleted: sort once; deleting the value of rank r leaves the order
/// statistics s₀..s_{r−1}, s_{r+1}..s_{n−1}, whose median is read off by index. Tied values
/// give the same remaining multiset whichever copy is deleted. Needs n ≥ 2.
pub(crate) fn medians(x: &[f64]) -> Vec<f64> {
    let n = x.len();
    if n < 2 {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by(|&a, &b| x[a].total_cmp(&x[b]));
    let sorted: Vec<f64> = order.iter().map(|&i| x[i]).collect();
    let mut out = vec![0.0; n];
    let m = n - 1; // size after deletion
    for (rank, &original) in order.iter().enumerate() {
        // The k-th order statistic of the remaining values.
        let kth = |k: usize| sorted[if k < rank { k } else { k + 1 }];
        out[original] = if m % 2 == 1 {
            kth(m / 2)
        } else {
            0.5 * (kth(m / 2 - 1) + kth(m / 2))
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::quantile_sorted;
    use rand::{Rng, SeedableRng};

    fn brute<F: Fn(&[f64]) -> f64>(x: &[f64], f: F) -> Vec<f64> {
        (0..x.len())
            .map(|i| {
                let rest: Vec<f64> = x
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, v)| *v)
                    .collect();
                f(&rest)
            })
            .collect()
    }

    fn median(x: &[f64]) -> f64 {
        let mut v = x.to_vec();
        v.sort_unstable_by(f64::total_cmp);
        quantile_sorted(&v, 0.5)
    }

    #[test]
    fn downdates_match_brute_force_deletion() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for n in [2usize, 3, 4, 7, 10, 51] {
            let mut x: Vec<f64> = (0..n).map(|_| 1e3 + rng.random::<f64>()).collect();
            // Ties matter for the median.
            if n > 3 {
                x[1] = x[0];
                x[3] = x[0];
            }
            let close = |a: &[f64], b: &[f64], what: &str| {
                for (i, (p, q)) in a.iter().zip(b).enumerate() {
                    assert!(
                        (p - q).abs() <= 1e-9 * (1.0 + q.abs()),
                        "{what} n={n} i={i}: {p} vs {q}"
                    );
                }
            };
            close(&means(&x), &brute(&x, mean_of), "mean");
            close(&medians(&x), &brute(&x, median), "median");
            let ss: Vec<f64> = means_and_ss(&x).iter().map(|p| p.1).collect();
            close(&ss, &brute(&x, |r| sum_sq_dev(r, mean_of(r))), "ss");
        }
    }
}
