//! Which elements share a scale, and the order of the scales buffer.

use std::{fmt, ops::Range, str::FromStr};

use crate::QuantizeError;

/// Which elements of a `[B, H, S, D]` tensor share one scale.
///
/// The scales buffer is f32, C order, with this shape (the FP8 kernel reads it so):
///
/// | granularity | scales shape | scale of element `(b, h, s, d)` |
/// |---|---|---|
/// | `Tensor` | `[1]` | `0` |
/// | `Head` | `[B, H]` | `b·H + h` |
/// | `Token` | `[B, H, S]` | `(b·H + h)·S + s` |
/// | `Block(N)` | `[B, H, ⌈S/N⌉]` | `(b·H + h)·⌈S/N⌉ + ⌊s/N⌋` |
///
/// Every group is a contiguous range of the `[B, H, S, D]` buffer, and groups follow each
/// other in scales order. The last block of each head holds `S mod N` tokens when `N`
/// does not divide `S`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Granularity {
    /// One scale for the whole tensor.
    Tensor,
    /// One scale per (batch, head).
    Head,
    /// One scale per (batch, head, token): one row of `D` values.
    Token,
    /// One scale per `N` consecutive tokens of one (batch, head).
    Block(usize),
}

impl Granularity {
    /// Parses `tensor`, `head`, `token` or `block:N` (the CLI spelling).
    pub fn parse(s: &str) -> Result<Self, QuantizeError> {
        match s {
            "tensor" => Ok(Granularity::Tensor),
            "head" => Ok(Granularity::Head),
            "token" => Ok(Granularity::Token),
            _ => {
                let n = s
                    .strip_prefix("block:")
                    .and_then(|n| n.parse::<usize>().ok())
                    .ok_or_else(|| QuantizeError::UnknownGranularity(s.to_string()))?;
                if n == 0 {
                    return Err(QuantizeError::ZeroBlockSize);
                }
                Ok(Granularity::Block(n))
            }
        }
    }

    /// The shape of the scales buffer for a `[B, H, S, D]` tensor (see the type's table).
    pub fn scales_shape(self, shape: [usize; 4]) -> Result<Vec<usize>, QuantizeError> {
        let groups = Groups::new(shape, self)?;
        let [b, h, s, _] = shape;
        Ok(match self {
            Granularity::Tensor => vec![1],
            Granularity::Head => vec![b, h],
            Granularity::Token => vec![b, h, s],
            Granularity::Block(_) => vec![b, h, groups.blocks_per_head],
        })
    }

    /// The number of scales for a `[B, H, S, D]` tensor.
    pub fn num_scales(self, shape: [usize; 4]) -> Result<usize, QuantizeError> {
        Ok(Groups::new(shape, self)?.len())
    }

    /// The index into the scales buffer of token `(b, h, s)` (all of its `D` values share it).
    /// Indices beyond the shape give indices beyond the buffer; the caller checks bounds.
    pub fn scale_index(self, shape: [usize; 4], b: usize, h: usize, s: usize) -> usize {
        let [_, heads, seq, _] = shape;
        let head = b * heads + h;
        match self {
            Granularity::Tensor => 0,
            Granularity::Head => head,
            Granularity::Token => head * seq + s,
            Granularity::Block(n) => head * seq.div_ceil(n.max(1)) + s / n.max(1),
        }
    }
}

impl fmt::Display for Granularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Granularity::Tensor => f.write_str("tensor"),
            Granularity::Head => f.write_str("head"),
            Granularity::Token => f.write_str("token"),
            Granularity::Block(n) => write!(f, "block:{n}"),
        }
    }
}

impl FromStr for Granularity {
    type Err = QuantizeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// The `[B, H, S, D]` flat offset of `(b, h, s, d)` inverted: flat index → position.
pub(crate) fn position(shape: [usize; 4], index: usize) -> [usize; 4] {
    let [_, h, s, d] = shape;
    [
        index / (d * s * h),
        index / (d * s) % h,
        index / d % s,
        index % d,
    ]
}

/// The groups of a validated (shape, granularity) pair, in rows of `D` elements (one row is
/// one token of one head).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Groups {
    pub(crate) shape: [usize; 4],
    pub(crate) granularity: Granularity,
    /// Tokens per head (S).
    seq: usize,
    /// Rows in the tensor (B·H·S).
    rows: usize,
    /// Elements per row (D).
    pub(crate) row_len: usize,
    /// ⌈S/N⌉ for blocks, unused otherwise.
    blocks_per_head: usize,
}

impl Groups {
    /// Validates the shape (no zero dimension, element count fits) and the block size.
    pub(crate) fn new(shape: [usize; 4], granularity: Granularity) -> Result<Self, QuantizeError> {
        if shape.contains(&0) {
            return Err(QuantizeError::ZeroDimension { shape });
        }
        let elements = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or(QuantizeError::ShapeOverflow { shape })?;
        let [_, _, seq, row_len] = shape;
        let blocks_per_head = match granularity {
            Granularity::Block(0) => return Err(QuantizeError::ZeroBlockSize),
            Granularity::Block(n) => seq.div_ceil(n),
            _ => 1,
        };
        Ok(Self {
            shape,
            granularity,
            seq,
            rows: elements / row_len,
            row_len,
            blocks_per_head,
        })
    }

    /// Total elements (B·H·S·D).
    pub(crate) fn elements(&self) -> usize {
        self.rows * self.row_len
    }

    /// Number of groups (= scales).
    pub(crate) fn len(&self) -> usize {
        let heads = self.rows / self.seq;
        match self.granularity {
            Granularity::Tensor => 1,
            Granularity::Head => heads,
            Granularity::Token => self.rows,
            Granularity::Block(_) => heads * self.blocks_per_head,
        }
    }

    /// The group of row `row` (a flat token index `(b·H + h)·S + s`).
    #[inline]
    pub(crate) fn group_of_row(&self, row: usize) -> usize {
        match self.granularity {
            Granularity::Tensor => 0,
            Granularity::Head => row / self.seq,
            Granularity::Token => row,
            Granularity::Block(n) => (row / self.seq) * self.blocks_per_head + (row % self.seq) / n,
        }
    }

    /// The elements of group `g`, as a range of the flat buffer.
    pub(crate) fn elements_of(&self, g: usize) -> Range<usize> {
        let rows = match self.granularity {
            Granularity::Tensor => 0..self.rows,
            Granularity::Head => g * self.seq..(g + 1) * self.seq,
            Granularity::Token => g..g + 1,
            Granularity::Block(n) => {
                let head = g / self.blocks_per_head;
                let block = g % self.blocks_per_head;
                let start = block * n;
                let end = (start + n).min(self.seq);
                head * self.seq + start..head * self.seq + end
            }
        };
        rows.start * self.row_len..rows.end * self.row_len
    }

    /// A human description for length errors.
    pub(crate) fn describe(&self) -> String {
        format!(
            "granularity {} over shape {:?} (scales {:?})",
            self.granularity,
            self.shape,
            self.granularity
                .scales_shape(self.shape)
                .unwrap_or_default()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for g in [
            Granularity::Tensor,
            Granularity::Head,
            Granularity::Token,
            Granularity::Block(1),
            Granularity::Block(128),
        ] {
            assert_eq!(Granularity::parse(&g.to_string()), Ok(g));
            assert_eq!(g.to_string().parse::<Granularity>(), Ok(g));
        }
        assert_eq!(
            Granularity::parse("block:0"),
            Err(QuantizeError::ZeroBlockSize)
        );
        for bad in [
            "", "Head", "block", "block:", "block:-1", "block:x", "channel",
        ] {
            assert_eq!(
                Granularity::parse(bad),
                Err(QuantizeError::UnknownGranularity(bad.to_string())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn scales_shapes_follow_the_documented_layout() {
        let shape = [2, 3, 10, 4];
        assert_eq!(Granularity::Tensor.scales_shape(shape), Ok(vec![1]));
        assert_eq!(Granularity::Head.scales_shape(shape), Ok(vec![2, 3]));
        assert_eq!(Granularity::Token.scales_shape(shape), Ok(vec![2, 3, 10]));
        assert_eq!(Granularity::Block(4).scales_shape(shape), Ok(vec![2, 3, 3]));
        assert_eq!(
            Granularity::Block(10).scales_shape(shape),
            Ok(vec![2, 3, 1])
        );
        assert_eq!(
            Granularity::Block(99).scales_shape(shape),
            Ok(vec![2, 3, 1])
        );
        assert_eq!(
            Granularity::Block(0).scales_shape(shape),
            Err(QuantizeError::ZeroBlockSize)
        );
        assert_eq!(
            Granularity::Head.scales_shape([2, 0, 3, 4]),
            Err(QuantizeError::ZeroDimension {
                shape: [2, 0, 3, 4]
            })
        );
        assert_eq!(
            Granularity::Head.num_scales([usize::MAX, 2, 1, 1]),
            Err(QuantizeError::ShapeOverflow {
                shape: [usize::MAX, 2, 1, 1]
            })
        );
    }

    /// Groups tile the buffer in scales order, and every element's group agrees with
    /// `scale_index` and with `elements_of`.
    #[test]
    fn groups_partition_the_buffer_in_scales_order() {
        let shape = [2, 3, 10, 4];
        for g in [
            Granularity::Tensor,
            Granularity::Head,
            Granularity::Token,
            Granularity::Block(1),
            Granularity::Block(3),
            Granularity::Block(10),
            Granularity::Block(11),
        ] {
            let groups = Groups::new(shape, g).unwrap();
            assert_eq!(groups.len(), g.num_scales(shape).unwrap());
            let mut next = 0;
            for k in 0..groups.len() {
                let r = groups.elements_of(k);
                assert_eq!(r.start, next, "{g} group {k}");
                assert!(r.end > r.start, "{g} group {k} empty");
                for i in r.clone() {
                    let [b, h, s, _] = position(shape, i);
                    assert_eq!(groups.group_of_row(i / shape[3]), k);
                    assert_eq!(g.scale_index(shape, b, h, s), k);
                }
                next = r.end;
            }
            assert_eq!(next, groups.elements(), "{g}");
        }
    }

    #[test]
    fn position_inverts_the_flat_offset() {
        let shape = [2, 3, 5, 7];
        let mut i = 0;
        for b in 0..2 {
            for h in 0..3 {
                for s in 0..5 {
                    for d in 0..7 {
                        assert_eq!(position(shape, i), [b, h, s, d]);
                        i += 1;
                    }
                }
            }
        }
    }
}
