//! The f64 CPU reference of scaled-dot-product attention.
//!
//! For every query row `i` of every (batch, query head):
//!
//! ```text
//! s_j  = score(scale · q_i · k_j)      for the visible keys j ∈ visible_range(i)
//! m    = max(max_j s_j, sink)
//! l    = Σ_j exp(s_j − m) + exp(sink − m)
//! o_i  = Σ_j exp(s_j − m) · v_j / l
//! lse  = m + ln l
//! ```
//!
//! everything accumulated in f64. `score` is the softcap then ALiBi ([`Problem::score`]),
//! `visible_range` the causal mask intersected with the sliding window
//! ([`Problem::visible_range`]), and the sink terms are there only when the problem has
//! attention sinks ([`crate::Features`]). Variable-length batches ([`varlen`]) and paged KV
//! caches ([`paged`]) are defined by running this on each sequence. This is the plain (two-pass, max-subtracted) softmax, not
//! the online one: [`tiled`] is the online-softmax twin and the two are checked against each
//! other, so a mistake in either shows up as a disagreement.
//!
//! Conventions (docs/ARCHITECTURE.md):
//! - a row with no visible key (possible with [`Causal::BottomRight`](crate::Causal) when
//!   `Sq > Sk`, or with a sliding window) has O = 0 and LSE = −∞, as FlashAttention does,
//!   even when the problem has an attention sink;
//! - NaN or ±Inf reaching a visible score, or NaN/Inf in a visible V row, propagates to the
//!   row's output (a NaN score gives a NaN row; an infinite score gives `inf − inf = NaN`);
//! - a key that is masked for a row never touches that row: NaN in a masked K or V row does
//!   not reach it (the kernel skips fully masked tiles, so this is the only rule both can
//!   keep).
//!
//! Speed: work is split over (batch, head, block of [`BLOCK_M`] query rows) with rayon; in a
//! task, K and V are packed block by block ([`BLOCK_N`] keys) and reused by every row of the
//! query block through a register-blocked 4×4 micro-kernel, the layout of a BLIS-style GEMM
//! (Van Zee & van de Geijn, "BLIS", ACM TOMS 2015). Each output element is still a plain
//! sequential f64 sum over keys, so results do not depend on the thread count, and
//! [`forward_rows`] returns exactly the values [`forward`] gives for the same rows.
//!
//! ```
//! use attn_ref::{AttnShape, Causal, Problem};
//! use attn_ref::reference::{forward, forward_rows, RowSelection};
//!
//! let shape = AttnShape::new(1, 2, 1, 5, 7, 4)?;
//! let problem = Problem::new(shape, Causal::BottomRight);
//! let q: Vec<f32> = (0..shape.q_elems()).map(|i| (i as f32 * 0.37).sin()).collect();
//! let k: Vec<f32> = (0..shape.kv_elems()).map(|i| (i as f32 * 0.71).cos()).collect();
//! let v: Vec<f32> = (0..shape.kv_elems()).map(|i| (i as f32 * 0.13).sin()).collect();
//!
//! let full = forward(&problem, &q, &k, &v)?;
//! assert_eq!(full.o.len(), shape.o_elems());
//! let some = forward_rows(&problem, &q, &k, &v, &RowSelection::Rows(vec![4, 1]))?;
//! assert_eq!(some.rows, vec![1, 4]);
//! assert_eq!(some.o_row(0, 1, 1), &full.o[shape.q_offset(0, 1, 4)..][..4]);
//! # Ok::<(), attn_ref::AttnError>(())
//! ```

pub mod backward;
pub mod bwd_tiles;
pub mod emulate;
pub mod paged;
pub mod tiled;
pub mod varlen;

pub use backward::{backward, backward_with, RefGrads};

use rand::{rngs::StdRng, SeedableRng};
use rayon::prelude::*;

use crate::{AttnError, AttnShape, Element, Problem};

/// Query rows per parallel task of [`forward`]; K/V blocks are reused across these rows.
pub const BLOCK_M: usize = 128;
/// Keys per packed K/V block in [`forward`].
pub const BLOCK_N: usize = 64;

/// Rows of the register-blocked micro-kernel.
const MR: usize = 6;
/// Columns of the register-blocked micro-kernel.
const NR: usize = 8;

/// The reference's output: O `[B,Hq,Sq,D]` and LSE `[B,Hq,Sq]` (natural log, −∞ for fully
/// masked rows, whose O is 0).
#[derive(Debug, Clone, PartialEq)]
pub struct RefOutput {
    /// Attention output, `[B, Hq, Sq, D]`.
    pub o: Vec<f64>,
    /// Log-sum-exp of the scaled scores per query row, `[B, Hq, Sq]`.
    pub lse: Vec<f64>,
}

impl RefOutput {
    /// The output narrowed to f32 (what [`crate::Attention`] backends return).
    pub fn to_f32(&self) -> crate::AttnOutput {
        crate::AttnOutput {
            o: self.o.iter().map(|&x| x as f32).collect(),
            lse: self.lse.iter().map(|&x| x as f32).collect(),
        }
    }
}

/// Which query rows [`forward_rows`] computes. The same rows are taken in every
/// (batch, query head).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowSelection {
    /// Every row `0..Sq`.
    All,
    /// These rows (any order, duplicates ignored); each must be `< Sq`.
    Rows(Vec<usize>),
    /// `count` rows spread evenly over `0..Sq`, first and last row included (the last row
    /// alone when `count == 1`, since under a causal mask it sees the most keys). Every row
    /// when `count >= Sq`.
    Evenly {
        /// How many rows.
        count: usize,
    },
    /// `count` distinct rows drawn uniformly at random with a seeded generator (rand's
    /// `StdRng`), so a failing sample can be replayed. Every row when `count >= Sq`.
    Sample {
        /// How many rows.
        count: usize,
        /// Seed of the generator.
        seed: u64,
    },
}

impl RowSelection {
    /// The selected rows of a problem with `q_len` rows, sorted and distinct.
    pub fn resolve(&self, q_len: usize) -> Result<Vec<usize>, AttnError> {
        let rows = match self {
            RowSelection::All => (0..q_len).collect(),
            RowSelection::Rows(rows) => {
                if rows.is_empty() {
                    return Err(AttnError::InvalidArgument(
                        "row selection is empty".to_string(),
                    ));
                }
                if let Some(&bad) = rows.iter().find(|&&r| r >= q_len) {
                    return Err(AttnError::InvalidArgument(format!(
                        "selected row {bad} is out of range: the problem has {q_len} query rows"
                    )));
                }
                let mut rows = rows.clone();
                rows.sort_unstable();
                rows.dedup();
                rows
            }
            RowSelection::Evenly { count } => {
                let count = Self::check_count(*count)?;
                if count >= q_len {
                    (0..q_len).collect()
                } else if count == 1 {
                    vec![q_len - 1]
                } else {
                    // k·(Sq−1)/(count−1) is strictly increasing in k because count ≤ Sq.
                    (0..count).map(|k| k * (q_len - 1) / (count - 1)).collect()
                }
            }
            RowSelection::Sample { count, seed } => {
                let count = Self::check_count(*count)?;
                if count >= q_len {
                    (0..q_len).collect()
                } else {
                    let mut rng = StdRng::seed_from_u64(*seed);
                    let mut rows = rand::seq::index::sample(&mut rng, q_len, count).into_vec();
                    rows.sort_unstable();
                    rows
                }
            }
        };
        Ok(rows)
    }

    fn check_count(count: usize) -> Result<usize, AttnError> {
        if count == 0 {
            Err(AttnError::InvalidArgument(
                "a row sample needs at least one row".to_string(),
            ))
        } else {
            Ok(count)
        }
    }
}

/// Output of [`forward_rows`]: the selected rows of every (batch, query head).
#[derive(Debug, Clone, PartialEq)]
pub struct RowsOutput {
    /// The selected query rows, sorted and distinct; the same in every (batch, head).
    pub rows: Vec<usize>,
    /// O of the selected rows, `[B, Hq, rows.len(), D]`.
    pub o: Vec<f64>,
    /// LSE of the selected rows, `[B, Hq, rows.len()]`.
    pub lse: Vec<f64>,
    shape: AttnShape,
}

impl RowsOutput {
    /// The problem shape these rows come from.
    pub fn shape(&self) -> &AttnShape {
        &self.shape
    }

    /// O of the `k`-th selected row (query row `self.rows[k]`) of `(b, h)`, `D` values.
    ///
    /// # Panics
    /// If `b`, `h` or `k` is out of range.
    pub fn o_row(&self, b: usize, h: usize, k: usize) -> &[f64] {
        let d = self.shape.head_dim();
        let start = self.lse_index(b, h, k) * d;
        &self.o[start..start + d]
    }

    /// LSE of the `k`-th selected row of `(b, h)`.
    ///
    /// # Panics
    /// If `b`, `h` or `k` is out of range.
    pub fn lse_at(&self, b: usize, h: usize, k: usize) -> f64 {
        self.lse[self.lse_index(b, h, k)]
    }

    fn lse_index(&self, b: usize, h: usize, k: usize) -> usize {
        assert!(
            b < self.shape.batch() && h < self.shape.q_heads() && k < self.rows.len(),
            "RowsOutput index (b={b}, h={h}, k={k}) out of range"
        );
        (b * self.shape.q_heads() + h) * self.rows.len() + k
    }
}

/// The full reference forward pass: O `[B,Hq,Sq,D]` and LSE `[B,Hq,Sq]` in f64.
///
/// Inputs may be `f16`, `bf16`, `f32` or `f64`; they are widened exactly to f64. Errors if a
/// slice's length does not match the problem's shape.
pub fn forward<T: Element>(p: &Problem, q: &[T], k: &[T], v: &[T]) -> Result<RefOutput, AttnError> {
    let shape = *p.shape();
    shape.check_qkv_lens(q.len(), k.len(), v.len())?;
    let (sq, d) = (shape.q_len(), shape.head_dim());
    let mut o = vec![0.0; shape.o_elems()];
    let mut lse = vec![0.0; shape.lse_elems()];
    let inputs = Inputs {
        p,
        q,
        k,
        v,
        portable: false,
    };
    o.par_chunks_mut(sq * d)
        .zip(lse.par_chunks_mut(sq))
        .enumerate()
        .for_each(|(bh, (o_head, lse_head))| {
            let (b, h) = (bh / shape.q_heads(), bh % shape.q_heads());
            o_head
                .par_chunks_mut(BLOCK_M * d)
                .zip(lse_head.par_chunks_mut(BLOCK_M))
                .enumerate()
                .for_each_init(Workspace::default, |ws, (blk, (o_blk, lse_blk))| {
                    ws.rows.clear();
                    ws.rows
                        .extend(blk * BLOCK_M..(blk * BLOCK_M + lse_blk.len()));
                    inputs.block(ws, b, h, o_blk, lse_blk);
                });
        });
    Ok(RefOutput { o, lse })
}

/// The reference on a selection of query rows only (the same rows in every batch and
/// head), so that a long sequence can be checked on a sample of rows in seconds. The values
/// are exactly those [`forward`] computes for these rows.
pub fn forward_rows<T: Element>(
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    selection: &RowSelection,
) -> Result<RowsOutput, AttnError> {
    let shape = *p.shape();
    shape.check_qkv_lens(q.len(), k.len(), v.len())?;
    let rows = selection.resolve(shape.q_len())?;
    let (n, d) = (rows.len(), shape.head_dim());
    let heads = shape.batch() * shape.q_heads();
    let mut o = vec![0.0; heads * n * d];
    let mut lse = vec![0.0; heads * n];
    let inputs = Inputs {
        p,
        q,
        k,
        v,
        portable: false,
    };
    o.par_chunks_mut(n * d)
        .zip(lse.par_chunks_mut(n))
        .enumerate()
        .for_each(|(bh, (o_head, lse_head))| {
            let (b, h) = (bh / shape.q_heads(), bh % shape.q_heads());
            o_head
                .par_chunks_mut(BLOCK_M * d)
                .zip(lse_head.par_chunks_mut(BLOCK_M))
                .zip(rows.par_chunks(BLOCK_M))
                .for_each_init(Workspace::default, |ws, ((o_blk, lse_blk), blk_rows)| {
                    ws.rows.clear();
                    ws.rows.extend_from_slice(blk_rows);
                    inputs.block(ws, b, h, o_blk, lse_blk);
                });
        });
    Ok(RowsOutput {
        rows,
        o,
        lse,
        shape,
    })
}

/// The softmax weights of one query row: `Sk` values, 0 for masked keys, summing to 1 (all
/// zero for a fully masked row; less than 1 with an attention sink, which takes the rest). The same formula as [`forward`], exposed for tests and for
/// explaining a row: `o = Σ_j w_j · v_j`.
pub fn attention_weights<T: Element>(
    p: &Problem,
    q: &[T],
    k: &[T],
    b: usize,
    h: usize,
    row: usize,
) -> Result<Vec<f64>, AttnError> {
    let shape = p.shape();
    crate::check_len("Q", shape.q_elems(), q.len())?;
    crate::check_len("K", shape.kv_elems(), k.len())?;
    if b >= shape.batch() || h >= shape.q_heads() || row >= shape.q_len() {
        return Err(AttnError::InvalidArgument(format!(
            "row (b={b}, h={h}, i={row}) is outside the shape B={}, Hq={}, Sq={}",
            shape.batch(),
            shape.q_heads(),
            shape.q_len()
        )));
    }
    let mut w = vec![0.0; shape.kv_len()];
    let range = p.visible_range(row);
    if range.is_empty() {
        return Ok(w);
    }
    let scores = naive_scores(p, q, k, b, h, row);
    let m = with_sink(max_propagating_nan(&scores), p.sink(h));
    let visible = &mut w[range];
    for (wj, s) in visible.iter_mut().zip(&scores) {
        *wj = (s - m).exp();
    }
    let mut l: f64 = visible.iter().sum();
    if let Some(sink) = p.sink(h) {
        l += (sink - m).exp();
    }
    w.iter_mut().for_each(|x| *x /= l);
    Ok(w)
}

/// The textbook loop nest (rows × keys × head dim), single-threaded, with no blocking: the
/// benchmark baseline, and a third independent implementation for tests.
pub fn forward_naive<T: Element>(
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
) -> Result<RefOutput, AttnError> {
    let shape = *p.shape();
    shape.check_qkv_lens(q.len(), k.len(), v.len())?;
    let d = shape.head_dim();
    let mut o = vec![0.0; shape.o_elems()];
    let mut lse = vec![0.0; shape.lse_elems()];
    for b in 0..shape.batch() {
        for h in 0..shape.q_heads() {
            let kvh = shape.kv_head_of(h);
            for i in 0..shape.q_len() {
                let li = shape.lse_offset(b, h, i);
                let range = p.visible_range(i);
                if range.is_empty() {
                    lse[li] = f64::NEG_INFINITY;
                    continue;
                }
                let scores = naive_scores(p, q, k, b, h, i);
                let m = with_sink(max_propagating_nan(&scores), p.sink(h));
                let mut l = 0.0;
                let out = &mut o[shape.q_offset(b, h, i)..][..d];
                for (j, s) in range.zip(&scores) {
                    let e = (s - m).exp();
                    l += e;
                    let vj = &v[shape.kv_offset(b, kvh, j)..][..d];
                    for (od, vd) in out.iter_mut().zip(vj) {
                        *od += e * vd.to_f64();
                    }
                }
                if let Some(sink) = p.sink(h) {
                    l += (sink - m).exp();
                }
                out.iter_mut().for_each(|x| *x /= l);
                lse[li] = m + l.ln();
            }
        }
    }
    Ok(RefOutput { o, lse })
}

/// Scores of the visible keys ([`Problem::visible_range`]) of one row: each a sequential
/// f64 dot product, scaled, then softcapped and ALiBi-shifted ([`Problem::score`]).
fn naive_scores<T: Element>(
    p: &Problem,
    q: &[T],
    k: &[T],
    b: usize,
    h: usize,
    i: usize,
) -> Vec<f64> {
    let shape = p.shape();
    let d = shape.head_dim();
    let kvh = shape.kv_head_of(h);
    let qi = &q[shape.q_offset(b, h, i)..][..d];
    p.visible_range(i)
        .map(|j| {
            let kj = &k[shape.kv_offset(b, kvh, j)..][..d];
            let dot: f64 = qi
                .iter()
                .zip(kj)
                .map(|(a, c)| a.to_f64() * c.to_f64())
                .sum();
            p.score(b, h, i, j, dot * p.scale())
        })
        .collect()
}

/// The softmax's subtracted maximum once the sink logit joins the row's scores (NaN stays
/// NaN). Every implementation subtracts this, adds `exp(sink − m)` to the denominator last,
/// and lets the sink contribute no value.
pub(crate) fn with_sink(m: f64, sink: Option<f64>) -> f64 {
    match sink {
        Some(s) => max_propagating_nan(&[m, s]),
        None => m,
    }
}

/// (min start, max end) of the non-empty ranges `lo[r]..hi[r]`; `(0, 0)` if all are empty.
fn span(lo: &[usize], hi: &[usize]) -> (usize, usize) {
    let mut out: Option<(usize, usize)> = None;
    for (&a, &e) in lo.iter().zip(hi) {
        if a < e {
            out = Some(out.map_or((a, e), |(x, y)| (x.min(a), y.max(e))));
        }
    }
    out.unwrap_or((0, 0))
}

/// (max start, min end) of the non-empty ranges: the keys every non-empty row sees (empty
/// when start ≥ end); `(0, 0)` if all are empty.
fn common(lo: &[usize], hi: &[usize]) -> (usize, usize) {
    let mut out: Option<(usize, usize)> = None;
    for (&a, &e) in lo.iter().zip(hi) {
        if a < e {
            out = Some(out.map_or((a, e), |(x, y)| (x.max(a), y.min(e))));
        }
    }
    out.unwrap_or((0, 0))
}

/// `acc_row += Σ_{j ∈ a..e} p_j · v_j` in key order, one row, from the packed V block of
/// `cols` keys starting at key `j0` (`s_row` indexed by absolute key).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn add_keys<const FMA: bool>(
    acc_row: &mut [f64],
    s_row: &[f64],
    v_pack: &[f64],
    cols: usize,
    j0: usize,
    a: usize,
    e: usize,
) {
    for j in a..e {
        let pv = s_row[j];
        let panels = v_pack.chunks_exact(cols * NR);
        for (acc_part, panel) in acc_row.chunks_exact_mut(NR).zip(panels) {
            for (acc, &x) in acc_part.iter_mut().zip(&panel[(j - j0) * NR..][..NR]) {
                *acc = mul_add::<FMA>(pv, x, *acc);
            }
        }
    }
}

/// The maximum of `xs`, NaN if any element is NaN (`f64::max` would drop it), −∞ if empty.
pub(crate) fn max_propagating_nan(xs: &[f64]) -> f64 {
    let mut m = f64::NEG_INFINITY;
    for &x in xs {
        if x.is_nan() {
            return f64::NAN;
        }
        if x > m {
            m = x;
        }
    }
    m
}

/// The borrowed problem and inputs one parallel task reads.
struct Inputs<'a, T> {
    p: &'a Problem,
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
    /// Take the portable path even where AVX2+FMA is available (for testing it).
    portable: bool,
}

/// Per-thread scratch buffers, reused across tasks.
#[derive(Default)]
struct Workspace {
    /// Query rows of the current block.
    rows: Vec<usize>,
    /// First visible key of each (padded) row.
    lo: Vec<usize>,
    /// One past the last visible key of each (padded) row (`lo == hi`: fully masked).
    hi: Vec<usize>,
    /// Q of the block, packed per MR-row group as `[d][r]`.
    q_pack: Vec<f64>,
    /// One K block, packed per NR-key panel as `[d][n]`.
    k_pack: Vec<f64>,
    /// One V block, packed per NR-column panel as `[key][n]`.
    v_pack: Vec<f64>,
    /// P of one MR-row group over one key block, packed as `[key][r]`.
    p_pack: Vec<f64>,
    /// Scores, then probabilities, row-major `rows_padded × s_stride`.
    s: Vec<f64>,
    /// Unnormalized output rows, row-major `rows_padded × d_padded`.
    acc: Vec<f64>,
    /// Softmax denominator of each row.
    l: Vec<f64>,
}

/// `x·y + z`: one fused multiply-add when `FMA` (the AVX2+FMA build), else a multiply and
/// an add. Every accumulation of [`Inputs::block`] goes through this, so a run is
/// self-consistent whichever path the CPU takes.
#[inline(always)]
fn mul_add<const FMA: bool>(x: f64, y: f64, z: f64) -> f64 {
    if FMA {
        x.mul_add(y, z)
    } else {
        x * y + z
    }
}

/// `c += a · b` over `kdim` steps: `a` packed `[kdim][MR]`, `b` packed `[kdim][NR]`. Each
/// element of `c` is a sequential sum in step order.
#[inline(always)]
fn micro_kernel<const FMA: bool>(kdim: usize, a: &[f64], b: &[f64], c: &mut [[f64; NR]; MR]) {
    for (av, bv) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(kdim) {
        for r in 0..MR {
            for n in 0..NR {
                c[r][n] = mul_add::<FMA>(av[r], bv[n], c[r][n]);
            }
        }
    }
}

fn round_up(x: usize, m: usize) -> usize {
    x.div_ceil(m) * m
}

impl<T: Element> Inputs<'_, T> {
    /// Computes the rows `ws.rows` (at most BLOCK_M, sorted) of head `(b, h)` into `o_out`
    /// (`rows × D`) and `lse_out` (`rows`), on the AVX2+FMA path when the CPU has it.
    fn block(
        &self,
        ws: &mut Workspace,
        b: usize,
        h: usize,
        o_out: &mut [f64],
        lse_out: &mut [f64],
    ) {
        #[cfg(target_arch = "x86_64")]
        if !self.portable
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports the features `block_avx2_fma` is compiled for.
            unsafe { self.block_avx2_fma(ws, b, h, o_out, lse_out) };
            return;
        }
        self.block_impl::<false>(ws, b, h, o_out, lse_out);
    }

    /// [`Self::block_impl`] compiled for AVX2 and FMA (4-wide f64 vectors, fused
    /// multiply-add), which the default x86_64 target does not assume.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn block_avx2_fma(
        &self,
        ws: &mut Workspace,
        b: usize,
        h: usize,
        o_out: &mut [f64],
        lse_out: &mut [f64],
    ) {
        self.block_impl::<true>(ws, b, h, o_out, lse_out);
    }

    #[inline(always)]
    fn block_impl<const FMA: bool>(
        &self,
        ws: &mut Workspace,
        b: usize,
        h: usize,
        o_out: &mut [f64],
        lse_out: &mut [f64],
    ) {
        let shape = self.p.shape();
        let (d, kvh, scale) = (shape.head_dim(), shape.kv_head_of(h), self.p.scale());
        let rows = ws.rows.len();
        let rows_pad = round_up(rows, MR);
        let d_pad = round_up(d, NR);

        ws.lo.clear();
        ws.hi.clear();
        for &i in &ws.rows {
            let range = self.p.visible_range(i);
            ws.lo.push(range.start);
            ws.hi.push(range.end);
        }
        ws.lo.resize(rows_pad, 0); // padding rows see nothing
        ws.hi.resize(rows_pad, 0);
        let (k_lo, n_max) = span(&ws.lo, &ws.hi);
        let s_stride = round_up(n_max.max(1), NR);
        // Key blocks that end at or before k_lo are masked for every row of the block.
        let j_first = k_lo / BLOCK_N * BLOCK_N;

        // Pack Q: group g holds rows g·MR.. as [d][r].
        ws.q_pack.clear();
        ws.q_pack.resize(rows_pad * d, 0.0);
        for (r, &i) in ws.rows.iter().enumerate() {
            let qi = &self.q[shape.q_offset(b, h, i)..][..d];
            let group = &mut ws.q_pack[(r / MR) * d * MR..][..d * MR];
            for (dd, x) in qi.iter().enumerate() {
                group[dd * MR + r % MR] = x.to_f64();
            }
        }

        // S = scale · Q Kᵀ over the keys some row of the block can see.
        // S is not cleared: every entry the softmax reads is written below (a row's visible
        // keys lie in key blocks its group does not skip) and the rest are zero-filled there.
        if ws.s.len() < rows_pad * s_stride {
            ws.s.resize(rows_pad * s_stride, 0.0);
        }
        for j0 in (j_first..n_max).step_by(BLOCK_N) {
            let cols = BLOCK_N.min(n_max - j0);
            let cols_pad = round_up(cols, NR);
            ws.k_pack.clear();
            ws.k_pack.resize(cols_pad * d, 0.0);
            for jj in 0..cols {
                let kj = &self.k[shape.kv_offset(b, kvh, j0 + jj)..][..d];
                let panel = &mut ws.k_pack[(jj / NR) * d * NR..][..d * NR];
                for (slot, x) in panel.chunks_exact_mut(NR).zip(kj) {
                    slot[jj % NR] = x.to_f64();
                }
            }
            for g in 0..rows_pad / MR {
                let (g_lo, g_hi) = span(&ws.lo[g * MR..][..MR], &ws.hi[g * MR..][..MR]);
                if g_hi <= j0 || g_lo >= j0 + cols {
                    continue; // this key block is masked for every row of the group
                }
                let a = &ws.q_pack[g * d * MR..][..d * MR];
                for pn in 0..cols_pad / NR {
                    let mut c = [[0.0; NR]; MR];
                    micro_kernel::<FMA>(d, a, &ws.k_pack[pn * d * NR..][..d * NR], &mut c);
                    for (r, c_row) in c.iter().enumerate() {
                        let s_row = &mut ws.s[(g * MR + r) * s_stride + j0 + pn * NR..][..NR];
                        for (s, x) in s_row.iter_mut().zip(c_row) {
                            *s = x * scale;
                        }
                    }
                }
            }
        }

        // Softcap and ALiBi on the visible scores.
        if self.p.features().transforms_scores() {
            for (r, &i) in ws.rows.iter().enumerate() {
                let (lo, hi) = (ws.lo[r], ws.hi[r]);
                let s_row = &mut ws.s[r * s_stride..][lo..hi];
                for (j, s) in (lo..hi).zip(s_row) {
                    *s = self.p.score(b, h, i, j, *s);
                }
            }
        }

        // Softmax per row, in place: S becomes exp(s − m) on visible keys, 0 elsewhere.
        let sink = self.p.sink(h);
        ws.l.clear();
        ws.l.resize(rows_pad, 0.0);
        // Padding rows (r ≥ rows) have an empty range and no LSE slot.
        let s_rows = ws.s.chunks_exact_mut(s_stride);
        let ranges = ws.lo.iter().zip(&ws.hi);
        for (r, ((s_row, (&lo, &hi)), l_slot)) in s_rows.zip(ranges).zip(&mut ws.l).enumerate() {
            let lse_slot = lse_out.get_mut(r);
            if lo == hi {
                s_row.fill(0.0);
                if let Some(slot) = lse_slot {
                    *slot = f64::NEG_INFINITY;
                }
                continue;
            }
            let m = with_sink(max_propagating_nan(&s_row[lo..hi]), sink);
            let mut l = 0.0;
            for s in &mut s_row[lo..hi] {
                *s = (*s - m).exp();
                l += *s;
            }
            if let Some(sink) = sink {
                l += (sink - m).exp();
            }
            s_row[..lo].fill(0.0);
            s_row[hi..].fill(0.0);
            *l_slot = l;
            if let Some(slot) = lse_slot {
                *slot = m + l.ln();
            }
        }

        // acc = P · V. Within a row group, keys every row sees go through the micro-kernel;
        // the few keys only some rows see (the causal staircase, the window's edges) are
        // added row by row, before and after, so that each row still sums in key order and
        // a masked V row never reaches a row (0 · NaN would).
        ws.acc.clear();
        ws.acc.resize(rows_pad * d_pad, 0.0);
        for j0 in (j_first..n_max).step_by(BLOCK_N) {
            let cols = BLOCK_N.min(n_max - j0);
            ws.v_pack.clear();
            ws.v_pack.resize(cols * d_pad, 0.0);
            // Panel p holds columns p·NR.. as [key][n]; a V row scatters into every panel.
            for jj in 0..cols {
                let vj = &self.v[shape.kv_offset(b, kvh, j0 + jj)..][..d];
                for (panel, src) in ws.v_pack.chunks_exact_mut(cols * NR).zip(vj.chunks(NR)) {
                    for (dst, x) in panel[jj * NR..][..NR].iter_mut().zip(src) {
                        *dst = x.to_f64();
                    }
                }
            }
            let j_end = j0 + cols;
            for g in 0..rows_pad / MR {
                let (lo, hi) = (&ws.lo[g * MR..][..MR], &ws.hi[g * MR..][..MR]);
                let (g_lo, g_hi) = span(lo, hi);
                if g_hi <= j0 || g_lo >= j_end {
                    continue;
                }
                // Fully masked rows (and padding) contribute nothing and do not limit the
                // common part; their P is 0 and their output is overwritten with 0.
                let (c_lo, c_hi) = common(lo, hi);
                let (ks, ke) = (c_lo.max(j0), c_hi.min(j_end));
                let has_common = ks < ke;
                for r in 0..MR {
                    let row = g * MR + r;
                    if lo[r] < hi[r] {
                        let end = if has_common { ks } else { hi[r].min(j_end) };
                        add_keys::<FMA>(
                            &mut ws.acc[row * d_pad..][..d_pad],
                            &ws.s[row * s_stride..][..s_stride],
                            &ws.v_pack,
                            cols,
                            j0,
                            lo[r].max(j0),
                            end,
                        );
                    }
                }
                if has_common {
                    let kc = ke - ks;
                    ws.p_pack.clear();
                    ws.p_pack.resize(kc * MR, 0.0);
                    for r in 0..MR {
                        let s_row = &ws.s[(g * MR + r) * s_stride + ks..][..kc];
                        for (jj, &pv) in s_row.iter().enumerate() {
                            ws.p_pack[jj * MR + r] = pv;
                        }
                    }
                    for pn in 0..d_pad / NR {
                        let mut c = [[0.0; NR]; MR];
                        for (r, c_row) in c.iter_mut().enumerate() {
                            c_row.copy_from_slice(&ws.acc[(g * MR + r) * d_pad + pn * NR..][..NR]);
                        }
                        micro_kernel::<FMA>(
                            kc,
                            &ws.p_pack,
                            &ws.v_pack[pn * cols * NR + (ks - j0) * NR..][..kc * NR],
                            &mut c,
                        );
                        for (r, c_row) in c.iter().enumerate() {
                            ws.acc[(g * MR + r) * d_pad + pn * NR..][..NR].copy_from_slice(c_row);
                        }
                    }
                    for r in 0..MR {
                        let row = g * MR + r;
                        if lo[r] < hi[r] {
                            add_keys::<FMA>(
                                &mut ws.acc[row * d_pad..][..d_pad],
                                &ws.s[row * s_stride..][..s_stride],
                                &ws.v_pack,
                                cols,
                                j0,
                                ke,
                                hi[r].min(j_end),
                            );
                        }
                    }
                }
            }
        }

        // O = acc / l.
        for r in 0..rows {
            let out = &mut o_out[r * d..][..d];
            if ws.lo[r] == ws.hi[r] {
                out.fill(0.0);
                continue;
            }
            let l = ws.l[r];
            for (od, a) in out.iter_mut().zip(&ws.acc[r * d_pad..][..d]) {
                *od = a / l;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Causal;

    /// The portable (multiply, then add) path, which CPUs with AVX2+FMA never take.
    fn forward_portable(p: &Problem, q: &[f64], k: &[f64], v: &[f64]) -> RefOutput {
        let shape = *p.shape();
        let d = shape.head_dim();
        let mut o = vec![0.0; shape.o_elems()];
        let mut lse = vec![0.0; shape.lse_elems()];
        let inputs = Inputs {
            p,
            q,
            k,
            v,
            portable: true,
        };
        let mut ws = Workspace::default();
        for b in 0..shape.batch() {
            for h in 0..shape.q_heads() {
                for i0 in (0..shape.q_len()).step_by(BLOCK_M) {
                    let rows = BLOCK_M.min(shape.q_len() - i0);
                    ws.rows.clear();
                    ws.rows.extend(i0..i0 + rows);
                    let o_blk = &mut o[shape.q_offset(b, h, i0)..][..rows * d];
                    let lse_blk = &mut lse[shape.lse_offset(b, h, i0)..][..rows];
                    inputs.block(&mut ws, b, h, o_blk, lse_blk);
                }
            }
        }
        RefOutput { o, lse }
    }

    #[test]
    fn portable_path_matches_the_naive_loop() {
        // Sq = 150 spans two query blocks; Sk = 77 a partial key block; D = 13 a partial panel.
        let shape = AttnShape::new(1, 2, 1, 150, 77, 13).expect("valid shape");
        let gen = |n: usize, f: f64| {
            (0..n)
                .map(|i| (i as f64 * f).sin() * 2.0)
                .collect::<Vec<_>>()
        };
        let (q, k, v) = (
            gen(shape.q_elems(), 0.37),
            gen(shape.kv_elems(), 0.71),
            gen(shape.kv_elems(), 0.13),
        );
        for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
            let p = Problem::new(shape, causal);
            let portable = forward_portable(&p, &q, &k, &v);
            let naive = forward_naive(&p, &q, &k, &v).expect("lengths match");
            let fast = forward(&p, &q, &k, &v).expect("lengths match");
            for (name, out) in [("portable", &portable), ("dispatched", &fast)] {
                for (a, b) in out
                    .o
                    .iter()
                    .zip(&naive.o)
                    .chain(out.lse.iter().zip(&naive.lse))
                {
                    assert!(
                        a == b || (a - b).abs() <= 1e-12 * b.abs().max(1.0),
                        "{name} {causal}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
