//! Which local attention each ring step runs.
//!
//! At step `s` rank `r` holds the K/V shard of rank `(r − s) mod N` and attends to the part of
//! it its queries may see. Sequences are self-attention (`Sq = Sk`), so both causal alignments
//! are the same mask: global query `i` sees keys `j ≤ i`. With the sharding's monotone row
//! maps every visible part is one rectangle, either fully visible or causal on the diagonal:
//! - no mask: every step is all queries × all keys;
//! - contiguous: the own shard is causal, lower ranks' shards are full, higher ranks' are
//!   skipped;
//! - zigzag (ring-flash-attention's schedule): the own shard is causal; from a lower rank `j`
//!   all queries see its first chunk (chunk `j`); from a higher rank, only the second local
//!   chunk (`2N−1−r`) sees both of its chunks.
//!
//! Step 0 always covers every local query row, so the first merge initializes the accumulator.

use std::ops::Range;

use crate::shard::{ShardPlan, Sharding};

/// One local attention call: the local query rows, the rows of the K/V shard it reads, and
/// whether it is causal (top-left, on a square diagonal block).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Local query rows.
    pub q_rows: Range<usize>,
    /// Rows of the K/V shard held at this step.
    pub kv_rows: Range<usize>,
    /// Causal within the block (`q_rows.len() == kv_rows.len()` and the rows map in order).
    pub causal: bool,
}

/// One ring step of one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Step index `s` (`0..N`).
    pub step: usize,
    /// The rank whose K/V shard is held at this step.
    pub kv_rank: usize,
    /// The attention to run, if any part of the shard is visible.
    pub block: Option<Block>,
}

/// The ring schedule of `rank`.
pub fn ring_steps(plan: &ShardPlan, rank: usize, causal: bool) -> Vec<Step> {
    let n = plan.world();
    let l = plan.local_len();
    let c = plan.chunk_len();
    (0..n)
        .map(|s| {
            let j = (rank + n - s) % n;
            let full = |q: Range<usize>, kv: Range<usize>| {
                Some(Block {
                    q_rows: q,
                    kv_rows: kv,
                    causal: false,
                })
            };
            let block = if !causal {
                full(0..l, 0..l)
            } else if j == rank {
                Some(Block {
                    q_rows: 0..l,
                    kv_rows: 0..l,
                    causal: true,
                })
            } else {
                match (plan.sharding(), j < rank) {
                    (Sharding::Contiguous, true) => full(0..l, 0..l),
                    (Sharding::Contiguous, false) => None,
                    (Sharding::Zigzag, true) => full(0..l, 0..c),
                    (Sharding::Zigzag, false) => full(c..l, 0..l),
                }
            };
            Step {
                step: s,
                kv_rank: j,
                block,
            }
        })
        .collect()
}

/// Scores one rank computes over the whole ring (for balance checks): `Σ` block areas, a
/// causal block counted as half its square plus its diagonal.
pub fn rank_work(plan: &ShardPlan, rank: usize, causal: bool) -> usize {
    ring_steps(plan, rank, causal)
        .iter()
        .filter_map(|s| s.block.as_ref())
        .map(|b| {
            let (m, n) = (b.q_rows.len(), b.kv_rows.len());
            if b.causal {
                m * (m + 1) / 2
            } else {
                m * n
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute force: the global keys each local query row sees over the ring, counted.
    fn coverage(plan: &ShardPlan, rank: usize, causal: bool) -> Vec<Vec<u32>> {
        let s = plan.seq_len();
        let mut seen = vec![vec![0u32; s]; plan.local_len()];
        for step in ring_steps(plan, rank, causal) {
            let Some(b) = step.block else { continue };
            for (qi, i) in b.q_rows.clone().enumerate() {
                for (kj, j) in b.kv_rows.clone().enumerate() {
                    if b.causal && kj > qi {
                        continue;
                    }
                    seen[i][plan.global_row(step.kv_rank, j)] += 1;
                }
            }
        }
        seen
    }

    #[test]
    fn every_rank_sees_exactly_the_keys_of_the_global_mask_once() {
        for world in 1..=6 {
            for sharding in [Sharding::Contiguous, Sharding::Zigzag] {
                for causal in [false, true] {
                    let plan = ShardPlan::new(4 * world, world, sharding).unwrap();
                    for rank in 0..world {
                        let seen = coverage(&plan, rank, causal);
                        for (i, row) in seen.iter().enumerate() {
                            let gi = plan.global_row(rank, i);
                            for (gj, &count) in row.iter().enumerate() {
                                let want = u32::from(!causal || gj <= gi);
                                assert_eq!(
                                    count, want,
                                    "N={world} {sharding:?} causal={causal} rank {rank} q {gi} k {gj}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn step_zero_covers_every_local_row() {
        for sharding in [Sharding::Contiguous, Sharding::Zigzag] {
            let plan = ShardPlan::new(48, 4, sharding).unwrap();
            for rank in 0..4 {
                for causal in [false, true] {
                    let s0 = &ring_steps(&plan, rank, causal)[0];
                    assert_eq!(s0.kv_rank, rank);
                    assert_eq!(s0.block.as_ref().unwrap().q_rows, 0..12);
                }
            }
        }
    }

    #[test]
    fn zigzag_balances_causal_work_and_contiguous_does_not() {
        let z = ShardPlan::new(64, 4, Sharding::Zigzag).unwrap();
        let w: Vec<_> = (0..4).map(|r| rank_work(&z, r, true)).collect();
        assert!(w.iter().all(|&x| x == w[0]), "{w:?}");
        let c = ShardPlan::new(64, 4, Sharding::Contiguous).unwrap();
        let w: Vec<_> = (0..4).map(|r| rank_work(&c, r, true)).collect();
        assert!(w[3] > 3 * w[0], "{w:?}");
    }
}
