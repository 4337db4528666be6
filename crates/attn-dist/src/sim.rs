//! The ring on the CPU, in f64: every rank's schedule run through attn-ref's reference and
//! merged by LSE. It is the specification of what the GPU ring computes (and the test that the
//! schedule and the merge are exact: its unsharded result equals the reference on the whole
//! sequence to rounding).

use attn_ref::reference;
use attn_ref::{AttnShape, Causal, Element, Problem};

use crate::schedule::ring_steps;
use crate::shard::ShardPlan;
use crate::DistError;

/// One rank's result: O `[B, Hq, L, D]` and LSE `[B, Hq, L]`, local row order.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOutput {
    /// Output rows.
    pub o: Vec<f64>,
    /// Natural-log LSE per row (−inf for a row that sees no key).
    pub lse: Vec<f64>,
}

/// Merges a normalized part `(o_p, λ_p)` into `(o, λ)` in place: `λ' = ln(e^λ + e^λ_p)`,
/// `o' = e^{λ−λ'}·o + e^{λ_p−λ'}·o_p`; empty sides (λ = −inf) weigh 0.
pub fn merge_row(o: &mut [f64], lse: &mut f64, o_p: &[f64], lse_p: f64) {
    let m = lse.max(lse_p);
    if m == f64::NEG_INFINITY {
        return;
    }
    let new = m + ((*lse - m).exp() + (lse_p - m).exp()).ln();
    let (wa, wb) = ((*lse - new).exp(), (lse_p - new).exp());
    for (x, &y) in o.iter_mut().zip(o_p) {
        *x = wa * *x + wb * y;
    }
    *lse = new;
}

/// Rows `rows` of a `[B, H, S, D]` tensor, as `[B, H, rows.len(), D]`.
fn take_rows<T: Copy>(x: &[T], dims: [usize; 4], rows: std::ops::Range<usize>) -> Vec<T> {
    let [b, h, s, d] = dims;
    let mut out = Vec::with_capacity(b * h * rows.len() * d);
    for bh in 0..b * h {
        out.extend_from_slice(&x[(bh * s + rows.start) * d..(bh * s + rows.end) * d]);
    }
    out
}

/// Runs `rank`'s ring on the CPU. `q` is its shard `[B, Hq, L, D]`; `kv[j]` is rank `j`'s
/// (K, V) shard `[B, Hkv, L, D]`. `problem` is the global problem (its scale is used; its
/// causal flag says whether the mask is on).
pub fn simulate_rank<T: Element>(
    problem: &Problem,
    plan: &ShardPlan,
    rank: usize,
    q: &[T],
    kv: &[(Vec<T>, Vec<T>)],
) -> Result<SimOutput, DistError> {
    let g = problem.shape();
    let l = plan.local_len();
    let (b, hq, hkv, d) = (g.batch(), g.q_heads(), g.kv_heads(), g.head_dim());
    let causal = problem.causal() != Causal::None;
    let mut o = vec![0.0; b * hq * l * d];
    let mut lse = vec![f64::NEG_INFINITY; b * hq * l];
    for step in ring_steps(plan, rank, causal) {
        let Some(blk) = step.block else { continue };
        let (m, n) = (blk.q_rows.len(), blk.kv_rows.len());
        let shape = AttnShape::new(b, hq, hkv, m, n, d)?;
        let mask = if blk.causal {
            Causal::TopLeft
        } else {
            Causal::None
        };
        let p = Problem::new(shape, mask).with_scale(problem.scale())?;
        let (k, v) = &kv[step.kv_rank];
        let part = reference::forward(
            &p,
            &take_rows(q, [b, hq, l, d], blk.q_rows.clone()),
            &take_rows(k, [b, hkv, l, d], blk.kv_rows.clone()),
            &take_rows(v, [b, hkv, l, d], blk.kv_rows.clone()),
        )?;
        for bh in 0..b * hq {
            for (pi, i) in blk.q_rows.clone().enumerate() {
                let row = bh * l + i;
                merge_row(
                    &mut o[row * d..(row + 1) * d],
                    &mut lse[row],
                    &part.o[(bh * m + pi) * d..(bh * m + pi + 1) * d],
                    part.lse[bh * m + pi],
                );
            }
        }
    }
    Ok(SimOutput { o, lse })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::Sharding;
    use rand::{Rng, SeedableRng};

    #[test]
    fn the_ring_equals_the_reference_on_the_whole_sequence() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for (world, sharding, causal, hkv) in [
            (1, Sharding::Zigzag, Causal::BottomRight, 2),
            (2, Sharding::Zigzag, Causal::TopLeft, 2),
            (3, Sharding::Zigzag, Causal::BottomRight, 1),
            (3, Sharding::Contiguous, Causal::TopLeft, 2),
            (4, Sharding::Contiguous, Causal::None, 1),
            (2, Sharding::Zigzag, Causal::None, 2),
        ] {
            let s = 12 * world;
            let shape = AttnShape::new(2, 4, hkv, s, s, 16).unwrap();
            let problem = Problem::new(shape, causal);
            let mut draw =
                |n: usize| -> Vec<f64> { (0..n).map(|_| rng.random_range(-2.0..2.0)).collect() };
            let (q, k, v) = (
                draw(shape.q_elems()),
                draw(shape.kv_elems()),
                draw(shape.kv_elems()),
            );
            let want = reference::forward(&problem, &q, &k, &v).unwrap();
            let plan = ShardPlan::new(s, world, sharding).unwrap();
            let (qd, kd) = ([2, 4, s, 16], [2, hkv, s, 16]);
            let kv: Vec<_> = (0..world)
                .map(|r| (plan.shard_bhsd(&k, kd, r), plan.shard_bhsd(&v, kd, r)))
                .collect();
            let outs: Vec<_> = (0..world)
                .map(|r| {
                    simulate_rank(&problem, &plan, r, &plan.shard_bhsd(&q, qd, r), &kv).unwrap()
                })
                .collect();
            let o = plan.unshard_bhsd(&outs.iter().map(|x| x.o.clone()).collect::<Vec<_>>(), qd);
            let lse = plan.unshard_bhsd(
                &outs.iter().map(|x| x.lse.clone()).collect::<Vec<_>>(),
                [2, 4, s, 1],
            );
            let err = o
                .iter()
                .zip(&want.o)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            let lerr = lse
                .iter()
                .zip(&want.lse)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(
                err < 1e-12 && lerr < 1e-12,
                "N={world} {sharding:?} {causal:?}: {err} {lerr}"
            );
        }
    }

    #[test]
    fn merging_with_an_empty_side_is_the_other_side() {
        let mut o = vec![0.0; 2];
        let mut lse = f64::NEG_INFINITY;
        merge_row(&mut o, &mut lse, &[1.0, 2.0], 0.5);
        assert_eq!((o.clone(), lse), (vec![1.0, 2.0], 0.5));
        merge_row(&mut o, &mut lse, &[9.0, 9.0], f64::NEG_INFINITY);
        assert_eq!((o, lse), (vec![1.0, 2.0], 0.5));
    }
}
