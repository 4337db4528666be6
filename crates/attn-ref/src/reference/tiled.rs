//! The online-softmax twin of [`forward`](super::forward): FlashAttention-2's forward
//! algorithm (Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
//! Partitioning", 2023, Algorithm 1) over `block_m × block_n` tiles, in f64, exposing each
//! tile's values as a [`Tile`] so that a kernel's debug dumps can be compared tile by tile.
//!
//! For a query block, key tiles are visited in order. For each visited tile, per row:
//!
//! ```text
//! s        = scale · q·k, softcapped and ALiBi-shifted (Problem::score); −∞ where masked
//! m_new    = max(m, max_c s)
//! p        = exp(s − m_new)     (0 where masked, and on a row whose m_new is still −∞)
//! l        = exp(m − m_new) · l + Σ_c p
//! acc      = exp(m − m_new) · acc + Σ_c p · v_c
//! ```
//!
//! and at the end, with an attention sink, `m_new = max(m, sink)`, `α = exp(m − m_new)`,
//! `l = α·l + exp(sink − m_new)`, `acc = α·acc`, `m = m_new`; then `O = acc / l`,
//! `LSE = m + ln l` (O = 0, LSE = −∞ for a row with no visible key; NaN for a row whose
//! visible scores are all −∞ and which has no sink, as in `forward`). The `l` and `m` of a
//! captured [`Tile`] are the running values before the sink joins.
//!
//! A key tile that is masked for *every* row of the query block is skipped — no Tile, no
//! update — exactly as a causal kernel never loads it; a tile that is masked for only some
//! entries is processed with those entries at s = −∞, p = 0. Masked entries never enter
//! `acc`, so NaN in a masked V row does not reach the row (the rule of [`super`]).
//!
//! ```
//! use attn_ref::{AttnShape, Causal, Problem};
//! use attn_ref::reference::{forward, tiled::forward_tiled};
//!
//! let shape = AttnShape::self_attention(1, 1, 10, 4)?;
//! let problem = Problem::new(shape, Causal::TopLeft);
//! let q: Vec<f64> = (0..40).map(|i| (i as f64 * 0.3).sin()).collect();
//! let k: Vec<f64> = (0..40).map(|i| (i as f64 * 0.7).cos()).collect();
//! let v = q.clone();
//! // Query tile 1 holds rows 4..8; with causal masking it visits key tiles 0 and 1 only.
//! let (out, tiles) = forward_tiled(&problem, &q, &k, &v, 4, 4, &[(0, 0, 1)])?;
//! assert_eq!(tiles.len(), 2);
//! assert_eq!((tiles[1].rows, tiles[1].cols), (4, 4));
//! let plain = forward(&problem, &q, &k, &v)?;
//! assert!(out.o.iter().zip(&plain.o).all(|(a, b)| (a - b).abs() < 1e-12));
//! # Ok::<(), attn_ref::AttnError>(())
//! ```

use rayon::prelude::*;

use super::{max_propagating_nan, with_sink, RefOutput};
use crate::{AttnError, Element, Problem, Tile, TileId};

/// Runs the online-softmax algorithm over `block_m × block_n` tiles and returns the output
/// together with every processed tile of the captured query blocks.
///
/// `capture` lists `(b, h, q_tile)` triples (query head `h`, rows `q_tile·block_m ..`); the
/// tiles come back sorted by [`TileId`]. Errors: zero block sizes, an out-of-range capture
/// entry, or slice lengths that do not match the shape.
pub fn forward_tiled<T: Element>(
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    block_m: usize,
    block_n: usize,
    capture: &[(usize, usize, usize)],
) -> Result<(RefOutput, Vec<Tile>), AttnError> {
    let shape = *p.shape();
    shape.check_qkv_lens(q.len(), k.len(), v.len())?;
    check_capture(&shape, block_m, block_n, capture)?;

    let (sq, d) = (shape.q_len(), shape.head_dim());
    let mut o = vec![0.0; shape.o_elems()];
    let mut lse = vec![0.0; shape.lse_elems()];
    let mut tiles: Vec<Tile> = o
        .par_chunks_mut(sq * d)
        .zip(lse.par_chunks_mut(sq))
        .enumerate()
        .flat_map_iter(|(bh, (o_head, lse_head))| {
            let (b, h) = (bh / shape.q_heads(), bh % shape.q_heads());
            o_head
                .chunks_mut(block_m * d)
                .zip(lse_head.chunks_mut(block_m))
                .enumerate()
                .flat_map(|(t, (o_blk, lse_blk))| {
                    let keep = capture.contains(&(b, h, t));
                    let ctx = QueryBlock {
                        p,
                        q,
                        k,
                        v,
                        b,
                        h,
                        q_tile: t,
                        block_m,
                        block_n,
                    };
                    ctx.run(o_blk, lse_blk, keep)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    tiles.sort_by_key(|t| t.id);
    Ok((RefOutput { o, lse }, tiles))
}

/// Checks the tiling (non-zero blocks) and that every captured `(b, h, q_tile)` lies inside
/// the shape; shared with [`super::bwd_tiles`].
pub(crate) fn check_capture(
    shape: &crate::AttnShape,
    block_m: usize,
    block_n: usize,
    capture: &[(usize, usize, usize)],
) -> Result<(), AttnError> {
    if block_m == 0 || block_n == 0 {
        return Err(AttnError::InvalidArgument(format!(
            "tile sizes must be at least 1, got block_m={block_m}, block_n={block_n}"
        )));
    }
    let q_tiles = shape.q_len().div_ceil(block_m);
    for &(b, h, t) in capture {
        if b >= shape.batch() || h >= shape.q_heads() || t >= q_tiles {
            return Err(AttnError::InvalidArgument(format!(
                "capture (b={b}, h={h}, q_tile={t}) is outside B={}, Hq={}, query tiles={q_tiles} \
                 (Sq={}, block_m={block_m})",
                shape.batch(),
                shape.q_heads(),
                shape.q_len()
            )));
        }
    }
    Ok(())
}

/// One query block of one (batch, head).
struct QueryBlock<'a, T> {
    p: &'a Problem,
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
    b: usize,
    h: usize,
    q_tile: usize,
    block_m: usize,
    block_n: usize,
}

impl<T: Element> QueryBlock<'_, T> {
    /// Runs the block, writing O (`rows × D`) and LSE (`rows`); returns the processed tiles
    /// when `keep` is set.
    fn run(&self, o_blk: &mut [f64], lse_blk: &mut [f64], keep: bool) -> Vec<Tile> {
        let shape = self.p.shape();
        let (d, kvh, scale) = (shape.head_dim(), shape.kv_head_of(self.h), self.p.scale());
        let rows = lse_blk.len();
        let row0 = self.q_tile * self.block_m;
        let ranges: Vec<std::ops::Range<usize>> =
            (0..rows).map(|r| self.p.visible_range(row0 + r)).collect();
        let n_max = ranges.iter().map(|x| x.end).max().unwrap_or(0);
        let q_rows: Vec<Vec<f64>> = (0..rows)
            .map(|r| {
                self.q[shape.q_offset(self.b, self.h, row0 + r)..][..d]
                    .iter()
                    .map(|x| x.to_f64())
                    .collect()
            })
            .collect();

        let mut m = vec![f64::NEG_INFINITY; rows];
        let mut l = vec![0.0; rows];
        // Whether a row met a visible key: a row whose visible scores are all −∞ (from ±Inf
        // inputs) ends with l = 0 like a fully masked row, but must come out NaN as in
        // `forward`, since Inf inputs propagate.
        let mut seen = vec![false; rows];
        let mut acc = vec![0.0; rows * d];
        let mut tiles = Vec::new();
        let mut v_row = vec![0.0; d];
        // Tiles from n_max on, and tiles no row's range meets, are masked for every row of
        // the block: skipped.
        for k_tile in 0..n_max.div_ceil(self.block_n) {
            let c0 = k_tile * self.block_n;
            let cols = self.block_n.min(shape.kv_len() - c0);
            // Visible columns of each row in this tile, `a..e` relative to c0.
            let cut = |x: &std::ops::Range<usize>| {
                let a = x.start.clamp(c0, c0 + cols) - c0;
                let e = x.end.clamp(c0, c0 + cols) - c0;
                a..e.max(a)
            };
            if ranges.iter().all(|x| cut(x).is_empty()) {
                continue;
            }
            let k_rows: Vec<Vec<f64>> = (0..cols)
                .map(|c| {
                    self.k[shape.kv_offset(self.b, kvh, c0 + c)..][..d]
                        .iter()
                        .map(|x| x.to_f64())
                        .collect()
                })
                .collect();
            let mut s = vec![f64::NEG_INFINITY; rows * cols];
            let mut pt = vec![0.0; rows * cols];
            for r in 0..rows {
                let vis = cut(&ranges[r]);
                let s_row = &mut s[r * cols..][..cols];
                for c in vis.clone() {
                    let dot: f64 = q_rows[r].iter().zip(&k_rows[c]).map(|(a, b)| a * b).sum();
                    s_row[c] = self.p.score(self.b, self.h, row0 + r, c0 + c, scale * dot);
                }
                seen[r] |= !vis.is_empty();
                let m_new = max_propagating_nan(&[m[r], max_propagating_nan(&s_row[vis.clone()])]);
                if m_new == f64::NEG_INFINITY {
                    continue; // nothing visible yet: p = 0, l and acc stay 0
                }
                // exp(−∞ − finite) = 0 on the first visible tile, as it should.
                let alpha = (m[r] - m_new).exp();
                let p_row = &mut pt[r * cols..][..cols];
                let mut tile_sum = 0.0;
                for (pv, sv) in p_row[vis.clone()].iter_mut().zip(&s_row[vis.clone()]) {
                    *pv = (sv - m_new).exp();
                    tile_sum += *pv;
                }
                l[r] = alpha * l[r] + tile_sum;
                let acc_row = &mut acc[r * d..][..d];
                acc_row.iter_mut().for_each(|a| *a *= alpha);
                for (c, pv) in vis.clone().zip(&p_row[vis.clone()]) {
                    let src = &self.v[shape.kv_offset(self.b, kvh, c0 + c)..][..d];
                    v_row.iter_mut().zip(src).for_each(|(x, y)| *x = y.to_f64());
                    acc_row
                        .iter_mut()
                        .zip(&v_row)
                        .for_each(|(a, x)| *a += pv * x);
                }
                m[r] = m_new;
            }
            if keep {
                tiles.push(Tile {
                    id: TileId {
                        b: self.b,
                        h: self.h,
                        q_tile: self.q_tile,
                        k_tile,
                    },
                    rows,
                    cols,
                    s,
                    p: pt,
                    m: m.clone(),
                    l: l.clone(),
                });
            }
        }

        let sink = self.p.sink(self.h);
        for r in 0..rows {
            let out = &mut o_blk[r * d..][..d];
            if !seen[r] {
                out.fill(0.0);
                lse_blk[r] = f64::NEG_INFINITY;
                continue;
            }
            let acc_row = &mut acc[r * d..][..d];
            if let Some(sink) = sink {
                // The sink joins the running max and the denominator after the last tile.
                let m_new = with_sink(m[r], Some(sink));
                let alpha = (m[r] - m_new).exp();
                l[r] = alpha * l[r] + (sink - m_new).exp();
                acc_row.iter_mut().for_each(|a| *a *= alpha);
                m[r] = m_new;
            }
            if l[r] == 0.0 && m[r] == f64::NEG_INFINITY {
                out.fill(f64::NAN);
                lse_blk[r] = f64::NAN;
            } else {
                out.iter_mut()
                    .zip(acc_row.iter())
                    .for_each(|(o, a)| *o = a / l[r]);
                lse_blk[r] = m[r] + l[r].ln();
            }
        }
        tiles
    }
}
