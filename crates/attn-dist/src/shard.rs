//! How a sequence is split over ranks.
//!
//! - [`Sharding::Contiguous`]: rank `r` holds rows `[r·L, (r+1)·L)`, `L = S/N`. Fine without a
//!   causal mask; with one, rank `N−1` does `N` times the work of rank 0.
//! - [`Sharding::Zigzag`]: the sequence is cut into `2N` chunks and rank `r` holds chunks `r`
//!   and `2N−1−r`, in that order, so every rank has the same share of a causal mask's work
//!   (the "zigzag" of ring-flash-attention, zhuzilin/ring-flash-attention, and of Transformer
//!   Engine's context parallelism).
//!
//! A rank's local tensors hold its rows in that order: local row `i` is global row
//! [`ShardPlan::global_row`]`(rank, i)`.

use std::ops::Range;

use crate::DistError;

/// How rows are assigned to ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sharding {
    /// One contiguous block per rank.
    Contiguous,
    /// Chunks `r` and `2N−1−r` on rank `r` (balanced under a causal mask).
    Zigzag,
}

impl Sharding {
    /// `contiguous` / `zigzag`.
    pub fn as_str(self) -> &'static str {
        match self {
            Sharding::Contiguous => "contiguous",
            Sharding::Zigzag => "zigzag",
        }
    }

    /// Parses [`Self::as_str`]'s names.
    pub fn parse(s: &str) -> Result<Self, DistError> {
        match s {
            "contiguous" => Ok(Sharding::Contiguous),
            "zigzag" => Ok(Sharding::Zigzag),
            _ => Err(DistError::InvalidArgument(format!(
                "unknown sharding `{s}`; known: contiguous, zigzag"
            ))),
        }
    }

    pub(crate) fn code(self) -> u64 {
        match self {
            Sharding::Contiguous => 1,
            Sharding::Zigzag => 2,
        }
    }
}

/// A global sequence length split over `world` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardPlan {
    seq_len: usize,
    world: usize,
    sharding: Sharding,
}

impl ShardPlan {
    /// Checks that `seq_len` divides over `world` ranks (a multiple of `N`, or of `2N` for
    /// zigzag).
    pub fn new(seq_len: usize, world: usize, sharding: Sharding) -> Result<Self, DistError> {
        if world == 0 {
            return Err(DistError::InvalidArgument(
                "world size must be at least 1".into(),
            ));
        }
        let multiple = match sharding {
            Sharding::Contiguous => world,
            Sharding::Zigzag => 2 * world,
        };
        if seq_len == 0 || seq_len % multiple != 0 {
            return Err(DistError::Indivisible {
                seq_len,
                world,
                sharding: sharding.as_str(),
                multiple,
            });
        }
        Ok(Self {
            seq_len,
            world,
            sharding,
        })
    }

    /// The plan whose ranks each hold `local_len` rows.
    pub fn from_local(
        local_len: usize,
        world: usize,
        sharding: Sharding,
    ) -> Result<Self, DistError> {
        let seq_len = local_len
            .checked_mul(world)
            .ok_or_else(|| DistError::InvalidArgument("sequence length overflows".into()))?;
        Self::new(seq_len, world, sharding)
    }

    /// The global sequence length S.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// Ranks N.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The scheme.
    pub fn sharding(&self) -> Sharding {
        self.sharding
    }

    /// Rows per rank, `S/N`.
    pub fn local_len(&self) -> usize {
        self.seq_len / self.world
    }

    /// Zigzag chunk length `S/(2N)` (the local length for contiguous sharding).
    pub fn chunk_len(&self) -> usize {
        match self.sharding {
            Sharding::Contiguous => self.local_len(),
            Sharding::Zigzag => self.seq_len / (2 * self.world),
        }
    }

    /// The global row ranges `rank` holds, in local order.
    pub fn global_ranges(&self, rank: usize) -> Vec<Range<usize>> {
        match self.sharding {
            Sharding::Contiguous => {
                let l = self.local_len();
                std::iter::once(rank * l..(rank + 1) * l).collect()
            }
            Sharding::Zigzag => {
                let c = self.chunk_len();
                let hi = 2 * self.world - 1 - rank;
                vec![rank * c..(rank + 1) * c, hi * c..(hi + 1) * c]
            }
        }
    }

    /// The global row of `rank`'s local row `i`.
    pub fn global_row(&self, rank: usize, i: usize) -> usize {
        let mut i = i;
        for r in self.global_ranges(rank) {
            if i < r.len() {
                return r.start + i;
            }
            i -= r.len();
        }
        usize::MAX
    }

    /// `rank`'s shard of a host tensor `[B, H, S, D]` (contiguous) as `[B, H, S/N, D]`.
    pub fn shard_bhsd<T: Copy>(&self, x: &[T], dims: [usize; 4], rank: usize) -> Vec<T> {
        let [b, h, s, d] = dims;
        debug_assert_eq!(s, self.seq_len);
        let mut out = Vec::with_capacity(b * h * self.local_len() * d);
        for bh in 0..b * h {
            for r in self.global_ranges(rank) {
                out.extend_from_slice(&x[(bh * s + r.start) * d..(bh * s + r.end) * d]);
            }
        }
        out
    }

    /// The inverse of [`Self::shard_bhsd`]: the ranks' shards `[B, H, S/N, D]` back into one
    /// `[B, H, S, D]` tensor (`d = 1` for LSE `[B, H, S]`).
    pub fn unshard_bhsd<T: Copy + Default>(&self, shards: &[Vec<T>], dims: [usize; 4]) -> Vec<T> {
        let [b, h, s, d] = dims;
        let l = self.local_len();
        let mut out = vec![T::default(); b * h * s * d];
        for (rank, shard) in shards.iter().enumerate() {
            for bh in 0..b * h {
                let mut local = 0;
                for r in self.global_ranges(rank) {
                    let n = r.len() * d;
                    let src = (bh * l) * d + local;
                    out[(bh * s + r.start) * d..(bh * s + r.start) * d + n]
                        .copy_from_slice(&shard[src..src + n]);
                    local += n;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_pairs_chunk_r_with_chunk_2n_minus_1_minus_r() {
        let p = ShardPlan::new(16, 2, Sharding::Zigzag).unwrap();
        assert_eq!(p.global_ranges(0), vec![0..4, 12..16]);
        assert_eq!(p.global_ranges(1), vec![4..8, 8..12]);
        assert_eq!(p.global_row(0, 5), 13);
        let c = ShardPlan::new(16, 4, Sharding::Contiguous).unwrap();
        assert_eq!(c.global_ranges(3), vec![12..16]);
    }

    #[test]
    fn indivisible_lengths_are_typed_errors() {
        assert!(matches!(
            ShardPlan::new(10, 4, Sharding::Zigzag),
            Err(DistError::Indivisible { multiple: 8, .. })
        ));
        assert!(ShardPlan::new(12, 4, Sharding::Contiguous).is_ok());
        assert!(ShardPlan::new(12, 0, Sharding::Contiguous).is_err());
    }

    #[test]
    fn every_global_row_has_exactly_one_owner_and_shards_round_trip() {
        for world in 1..=5 {
            for sharding in [Sharding::Contiguous, Sharding::Zigzag] {
                let s = 2 * world * 3;
                let p = ShardPlan::new(s, world, sharding).unwrap();
                let mut seen = vec![0; s];
                for r in 0..world {
                    for i in 0..p.local_len() {
                        seen[p.global_row(r, i)] += 1;
                    }
                }
                assert!(seen.iter().all(|&n| n == 1), "{sharding:?} N={world}");
                let dims = [2, 3, s, 4];
                let x: Vec<u32> = (0..dims.iter().product::<usize>() as u32).collect();
                let shards: Vec<_> = (0..world).map(|r| p.shard_bhsd(&x, dims, r)).collect();
                assert_eq!(p.unshard_bhsd(&shards, dims), x);
            }
        }
    }
}
