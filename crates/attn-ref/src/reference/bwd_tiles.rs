//! The backward's tiles (P, dP, dS and Δ) of chosen query blocks, in f64, for comparing a
//! debug backward kernel's dumps tile by tile ([`BwdTile`]). The tiles are those a key-block-major
//! backward (FlashAttention-2/3's, Dao 2023 Algorithm 2) visits: every key tile that holds a
//! visible (row, key) pair of the query block; a tile masked for every row of the block is
//! skipped, as a causal kernel's walk skips it.
//!
//! ```
//! use attn_ref::{AttnShape, Causal, Problem};
//! use attn_ref::reference::{backward, bwd_tiles::backward_tiles};
//!
//! let shape = AttnShape::self_attention(1, 1, 10, 4)?;
//! let problem = Problem::new(shape, Causal::TopLeft);
//! let x: Vec<f64> = (0..40).map(|i| (i as f64 * 0.3).sin()).collect();
//! let y: Vec<f64> = (0..40).map(|i| (i as f64 * 0.7).cos()).collect();
//! // Query block 1 holds rows 4..8; causal, it meets key tiles 0 and 1 only.
//! let tiles = backward_tiles(&problem, &x, &y, &x, &y, 4, 4, &[(0, 0, 1)])?;
//! assert_eq!(tiles.len(), 2);
//! // dQ of row 4 is scale · Σ_c dS[0][c] · K_c over the block's tiles.
//! let grads = backward(&problem, &x, &y, &x, &y)?;
//! let dq4: f64 = tiles.iter().map(|t| {
//!     (0..t.cols).map(|c| t.ds[c] * y[(4 * t.id.k_tile + c) * 4]).sum::<f64>()
//! }).sum::<f64>() * problem.scale();
//! assert!((dq4 - grads.dq[4 * 4]).abs() < 1e-12);
//! # Ok::<(), attn_ref::AttnError>(())
//! ```

use rayon::prelude::*;

use crate::{check_len, AttnError, BwdTile, Element, Problem, TileId};

/// The backward tiles of the `(b, h, q_tile)` query blocks in `capture` (rows
/// `q_tile·block_m ..` of query head `h`), over key tiles of `block_n`, sorted by
/// [`TileId`]. Errors: a problem with a window, softcap, ALiBi or sinks (the tiles cover plain
/// attention), zero block sizes, an out-of-range capture entry, or slice lengths that do not
/// match the shape (`d_o` has O's).
#[allow(clippy::too_many_arguments)] // the problem, four tensors, the tiling and the blocks
pub fn backward_tiles<T: Element>(
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    d_o: &[T],
    block_m: usize,
    block_n: usize,
    capture: &[(usize, usize, usize)],
) -> Result<Vec<BwdTile>, AttnError> {
    let shape = *p.shape();
    shape.check_qkv_lens(q.len(), k.len(), v.len())?;
    check_len("dO", shape.o_elems(), d_o.len())?;
    if !p.features().is_empty() {
        return Err(AttnError::InvalidArgument(
            "backward tiles cover problems without a window, softcap, ALiBi or sinks".into(),
        ));
    }
    super::tiled::check_capture(&shape, block_m, block_n, capture)?;
    let (sq, sk, d) = (shape.q_len(), shape.kv_len(), shape.head_dim());
    let row =
        |x: &[T], at: usize| -> Vec<f64> { x[at..][..d].iter().map(|e| e.to_f64()).collect() };
    let dot = |a: &[f64], b: &[f64]| -> f64 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
    let mut tiles: Vec<BwdTile> = capture
        .par_iter()
        .flat_map_iter(|&(b, h, qt)| {
            let kvh = shape.kv_head_of(h);
            let row0 = qt * block_m;
            let rows = block_m.min(sq - row0);
            let keys: Vec<Vec<f64>> = (0..sk)
                .map(|j| row(k, shape.kv_offset(b, kvh, j)))
                .collect();
            let vals: Vec<Vec<f64>> = (0..sk)
                .map(|j| row(v, shape.kv_offset(b, kvh, j)))
                .collect();
            // Per row: P and dP over every key, and Δ.
            let mut p_rows = vec![vec![0.0; sk]; rows];
            let mut dp_rows = vec![vec![0.0; sk]; rows];
            let mut delta = vec![0.0; rows];
            for r in 0..rows {
                let i = row0 + r;
                let qi = row(q, shape.q_offset(b, h, i));
                let doi = row(d_o, shape.q_offset(b, h, i));
                let vis = p.visible_range(i);
                let z: Vec<f64> = vis
                    .clone()
                    .map(|j| p.scale() * dot(&qi, &keys[j]))
                    .collect();
                let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let lse = m + z.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
                for (j, zj) in vis.zip(&z) {
                    p_rows[r][j] = (zj - lse).exp();
                }
                for j in 0..sk {
                    dp_rows[r][j] = dot(&doi, &vals[j]);
                }
                delta[r] = (0..sk).map(|j| p_rows[r][j] * dp_rows[r][j]).sum();
            }
            let ranges: Vec<_> = (0..rows).map(|r| p.visible_range(row0 + r)).collect();
            (0..sk.div_ceil(block_n))
                .filter_map(|kt| {
                    let c0 = kt * block_n;
                    let cols = block_n.min(sk - c0);
                    if ranges.iter().all(|x| x.end <= c0 || x.start >= c0 + cols) {
                        return None; // no visible pair: the walk skips it
                    }
                    let take = |src: &[Vec<f64>]| -> Vec<f64> {
                        (0..rows)
                            .flat_map(|r| src[r][c0..c0 + cols].to_vec())
                            .collect()
                    };
                    let (pt, dpt) = (take(&p_rows), take(&dp_rows));
                    let ds = (0..rows * cols)
                        .map(|e| pt[e] * (dpt[e] - delta[e / cols]))
                        .collect();
                    Some(BwdTile {
                        id: TileId {
                            b,
                            h,
                            q_tile: qt,
                            k_tile: kt,
                        },
                        rows,
                        cols,
                        p: pt,
                        dp: dpt,
                        ds,
                        delta: delta.clone(),
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect();
    tiles.sort_by_key(|t| t.id);
    Ok(tiles)
}
