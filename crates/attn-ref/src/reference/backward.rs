//! The f64 CPU reference of the attention **backward pass**: the specification that GPU
//! backward kernels are checked against.
//!
//! With `P = softmax(score + mask)` row by row and `O = P·V`, and dO the gradient of a loss
//! with respect to O, FlashAttention's formulation (Dao et al., "FlashAttention", 2022,
//! Appendix B) gives, per (batch, query head) and query row `i`:
//!
//! ```text
//! x_ij  = scale · q_i·k_j                        for the visible keys j ∈ visible_range(i)
//! P_ij  = exp(score_ij(x_ij) − LSE_i)
//! D_i   = Σ_d dO_id · O_id
//! dP_ij = dO_i · v_j
//! dS_ij = P_ij · (dP_ij − D_i) · score'_ij        (score' = dscore/dx)
//! dQ_i  = scale · Σ_j dS_ij · k_j
//! dK_j  = scale · Σ_i dS_ij · q_i
//! dV_j  = Σ_i P_ij · dO_i
//! ```
//!
//! everything accumulated in f64. With grouped-query attention, dK and dV of a KV head are
//! the sums over the query heads that read it (in head order, then row order).
//!
//! # Features
//!
//! Every feature of the forward reference ([`crate::Features`], applied as in
//! [`super::forward`]) is covered, alone or combined, with every causal alignment and GQA:
//! - **sliding window** (and the causal mask): `j` runs over [`Problem::visible_range`],
//!   which need not start at key 0; masked keys never touch a row's terms;
//! - **softcap** `c`: `score = c·tanh(x/c)` on the scaled score, so
//!   `score' = 1 − tanh²(x/c)` (FlashAttention-2's `calculate_dtanh`, `flash_bwd_kernel.h`);
//! - **ALiBi**: an additive bias, so `score' = 1` (no gradient beyond P, which includes it);
//! - **attention sinks**: the sink is in the softmax denominator, so in LSE and hence in
//!   P; it has no value, so `D_i = dO_i·O_i` and dS keep their form. The gradient of the
//!   sink logits is returned too ([`RefGrads::dsinks`]): the sink is one more logit with
//!   `dP = 0`, so `dsink_h = −Σ_(b,i) exp(sink_h − LSE_i) · D_i` over rows that see a key.
//!
//! Conventions, those of [`super::forward`]:
//! - a fully masked row (no visible key) contributes nothing: its dQ row is exactly 0 and
//!   it adds nothing to dK, dV or the sink gradient, whatever O and LSE say for it
//!   (O = 0, LSE = −∞, even with a sink);
//! - a key masked for a row never touches that row's terms, so NaN in a masked K or V row
//!   does not reach any gradient through that row;
//! - NaN or ±Inf reaching a visible term propagates.
//!
//! [`backward`] recomputes O and LSE with [`super::forward`]; [`backward_with`] takes them
//! from a forward pass, as a backward kernel does. [`backward_emulated`] applies the
//! kernel's rounding points (the `emu` of the tolerance rule), with the same features.
//!
//! Parallelism: rayon over (batch, KV head) and, inside, over the query heads of its group
//! (each query head writes its own dQ and a partial dK/dV that are then summed in head
//! order), so results do not depend on the thread count.
//!
//! ```
//! use attn_ref::{AttnShape, Causal, Problem};
//! use attn_ref::reference::{backward, backward_with};
//!
//! let shape = AttnShape::new(1, 2, 1, 3, 5, 4)?; // GQA 2:1
//! let problem = Problem::new(shape, Causal::BottomRight);
//! let q: Vec<f64> = (0..shape.q_elems()).map(|i| (i as f64 * 0.37).sin()).collect();
//! let k: Vec<f64> = (0..shape.kv_elems()).map(|i| (i as f64 * 0.71).cos()).collect();
//! let v: Vec<f64> = (0..shape.kv_elems()).map(|i| (i as f64 * 0.13).sin()).collect();
//! let d_o: Vec<f64> = (0..shape.q_elems()).map(|i| (i as f64 * 0.29).cos()).collect();
//!
//! let g = backward(&problem, &q, &k, &v, &d_o)?;
//! assert_eq!((g.dq.len(), g.dk.len(), g.dv.len()), (24, 20, 20));
//! // Softmax is shift-invariant, so the rows of dS sum to 0 and so do dK's rows.
//! let dk_sum: f64 = g.dk.iter().step_by(4).sum();
//! assert!(dk_sum.abs() < 1e-12);
//! let again = backward_with(&problem, &q, &k, &v, &g.o, &g.lse, &d_o)?;
//! assert_eq!(again, g);
//! assert_eq!(g.dsinks, None);
//!
//! // With features: a window that hides the early keys (row i sees keys i+1, i+2), a
//! // softcap and sinks.
//! let featured = problem.with_window(1, 0)?.with_softcap(5.0)?.with_sinks(vec![0.5, -1.0])?;
//! assert_eq!(featured.visible_range(2), 3..5);
//! let g = backward(&featured, &q, &k, &v, &d_o)?;
//! assert_eq!(g.dsinks.map(|s| s.len()), Some(2));
//! # Ok::<(), attn_ref::AttnError>(())
//! ```

use std::f32::consts::LOG2_E;

use rayon::prelude::*;

use super::emulate::{forward_emulated, Storage, EMU_BLOCK_N};
use super::forward;
use crate::{check_len, AttnError, Element, Problem};

/// Gradients of the reference backward pass, with the forward output they used.
#[derive(Debug, Clone, PartialEq)]
pub struct RefGrads {
    /// dL/dQ, `[B, Hq, Sq, D]`.
    pub dq: Vec<f64>,
    /// dL/dK, `[B, Hkv, Sk, D]` (summed over the query heads of each group).
    pub dk: Vec<f64>,
    /// dL/dV, `[B, Hkv, Sk, D]` (summed over the query heads of each group).
    pub dv: Vec<f64>,
    /// The forward output O, `[B, Hq, Sq, D]`, that the gradients used.
    pub o: Vec<f64>,
    /// The forward LSE, `[B, Hq, Sq]` (natural log, −∞ for fully masked rows).
    pub lse: Vec<f64>,
    /// dL/d(sink logit), `[Hq]`, summed over the batch and the rows; `None` when the
    /// problem has no attention sinks.
    pub dsinks: Option<Vec<f64>>,
    /// The emulation's rounding ties ([`backward_emulated_with`]); `None` from the exact
    /// reference.
    pub ties: Option<TieSpread>,
}

/// Where the emulation's dQ, dK and dV can lie when its rounding ties go the other way.
///
/// A value that the emulation rounds to the storage type (P before `dV += Pᵀ·dO`, dS before
/// `dK += dSᵀ·Q` and `dQ += dS·K`) is a *tie* when it lies closer to the midpoint between
/// its two storage neighbours than the f32 error of the arithmetic that produced it: the
/// first-order bound `u·Σ|terms|` (u = 2⁻²⁴, Cauchy–Schwarz for the dot products of S, dP
/// and Δ, and the exponent's error for P). A kernel whose f32 sums run in another order
/// (every tensor-core kernel) may round such a value to the other neighbour, and be as
/// accurate as the emulation: both are half an ulp from the exact value. Where one score
/// dominates an output (a row that sees a few keys, a large softcap gain), that single flip
/// moves the output by up to an ulp of its own, which the FA3 rule's 2× margin over the
/// emulation's lucky draw need not cover (the 99 KiB tile's f16 softcap case of runs 326,
/// 327 and 335: one dS tie at row 91, key 0 reproduces the kernel's dK row exactly).
///
/// `lo` and `hi` are each output's extremes over every resolution of its ties (each tie's
/// alternative added where it lowers, resp. raises, the f32 sum), rounded like the output;
/// the emulation's own value lies between them.
#[derive(Debug, Clone, PartialEq)]
pub struct TieSpread {
    /// dQ's extremes.
    pub dq: Spread,
    /// dK's extremes.
    pub dk: Spread,
    /// dV's extremes.
    pub dv: Spread,
    /// How many of the emulation's P and dS roundings were ties.
    pub ties: usize,
    /// How many P and dS roundings the emulation made.
    pub roundings: usize,
}

/// The lowest and highest values of one output over its rounding ties.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Spread {
    /// Per element, the lowest value.
    pub lo: Vec<f64>,
    /// Per element, the highest value.
    pub hi: Vec<f64>,
}

impl RefGrads {
    /// dQ, dK and dV as the tolerance rule's `emu`: per element, whichever of the emulation's
    /// value and its tie extremes ([`TieSpread`]) lies furthest from `reference`'s, so that
    /// `max|emu − ref|` is the emulation's error under its least lucky resolution of the
    /// ties. Without ties (`None`), the emulation's own values.
    pub fn rule_emulation(&self, reference: &RefGrads) -> [Vec<f32>; 3] {
        let furthest = |emu: &[f64], spread: Option<&Spread>, want: &[f64]| -> Vec<f32> {
            emu.iter()
                .enumerate()
                .map(|(i, &e)| {
                    let Some(s) = spread else { return e as f32 };
                    let r = want.get(i).copied().unwrap_or(e);
                    [e, s.lo[i], s.hi[i]].into_iter().fold(e, |best, x| {
                        if (x - r).abs() > (best - r).abs() {
                            x
                        } else {
                            best
                        }
                    }) as f32
                })
                .collect()
        };
        let t = self.ties.as_ref();
        [
            furthest(&self.dq, t.map(|t| &t.dq), &reference.dq),
            furthest(&self.dk, t.map(|t| &t.dk), &reference.dk),
            furthest(&self.dv, t.map(|t| &t.dv), &reference.dv),
        ]
    }
}

/// The reference backward pass: recomputes O and LSE with [`forward`], then the gradients
/// dQ, dK, dV of a loss whose gradient with respect to O is `d_o` (`[B, Hq, Sq, D]`).
///
/// Inputs may be `f16`, `bf16`, `f32` or `f64`; they are widened exactly to f64. Errors if
/// a slice's length does not match the problem's shape.
pub fn backward<T: Element>(
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    d_o: &[T],
) -> Result<RefGrads, AttnError> {
    let shape = p.shape();
    shape.check_qkv_lens(q.len(), k.len(), v.len())?;
    check_len("dO", shape.o_elems(), d_o.len())?;
    let out = forward(p, q, k, v)?;
    backward_with(p, q, k, v, &out.o, &out.lse, d_o)
}

/// The backward pass from a forward pass's O (`[B, Hq, Sq, D]`) and LSE (`[B, Hq, Sq]`,
/// natural log), as a backward kernel receives them; they may come in another element type
/// than the inputs (f32 from a kernel, f64 from [`forward`]). The returned `o` and `lse` are
/// these, widened to f64.
///
/// P is recomputed as `exp(score − LSE)` (the score with the problem's softcap and ALiBi,
/// the LSE with its sink) and `D = rowsum(dO ∘ O)`, so with O and LSE from [`forward`] this
/// is exactly [`backward`]. Rows with no visible key are skipped (zero gradient) whatever
/// their O and LSE. Errors if a slice's length does not match.
pub fn backward_with<T: Element, U: Element>(
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    o: &[U],
    lse: &[U],
    d_o: &[T],
) -> Result<RefGrads, AttnError> {
    let shape = *p.shape();
    shape.check_qkv_lens(q.len(), k.len(), v.len())?;
    check_len("O", shape.o_elems(), o.len())?;
    check_len("LSE", shape.lse_elems(), lse.len())?;
    check_len("dO", shape.o_elems(), d_o.len())?;
    let o: Vec<f64> = o.par_iter().map(|x| x.to_f64()).collect();
    let lse: Vec<f64> = lse.par_iter().map(|x| x.to_f64()).collect();

    let (sq, sk, d) = (shape.q_len(), shape.kv_len(), shape.head_dim());
    let group = shape.group_size();
    let scale = p.scale();
    let mut dq = vec![0.0; shape.q_elems()];
    let mut dk = vec![0.0; shape.kv_elems()];
    let mut dv = vec![0.0; shape.kv_elems()];
    // dL/d(sink) per (batch, query head), summed over the batch at the end.
    let mut dsink_bh = vec![0.0; shape.batch() * shape.q_heads()];
    let head = HeadInputs {
        p,
        q,
        k,
        v,
        o: &o,
        lse: &lse,
        d_o,
    };
    // The query heads of KV head `kvh` are `kvh·group ..`, so their dQ (and their sink
    // gradients) are one chunk.
    dq.par_chunks_mut(group * sq * d)
        .zip(dk.par_chunks_mut(sk * d))
        .zip(dv.par_chunks_mut(sk * d))
        .zip(dsink_bh.par_chunks_mut(group))
        .enumerate()
        .for_each(|(bkv, (((dq_group, dk_head), dv_head), dsink_group))| {
            let (b, kvh) = (bkv / shape.kv_heads(), bkv % shape.kv_heads());
            let parts: Vec<HeadGrads> = dq_group
                .par_chunks_mut(sq * d)
                .enumerate()
                .map(|(gi, dq_head)| head.grads(b, kvh * group + gi, dq_head))
                .collect();
            for (part, ds) in parts.into_iter().zip(dsink_group.iter_mut()) {
                dk_head.iter_mut().zip(&part.dk).for_each(|(a, x)| *a += x);
                dv_head.iter_mut().zip(&part.dv).for_each(|(a, x)| *a += x);
                *ds = part.dsink;
            }
            dk_head.iter_mut().for_each(|x| *x *= scale);
        });
    let dsinks = p.features().sinks.as_ref().map(|_| {
        let hq = shape.q_heads();
        (0..hq)
            .map(|h| (0..shape.batch()).map(|b| dsink_bh[b * hq + h]).sum())
            .collect()
    });
    Ok(RefGrads {
        dq,
        dk,
        dv,
        o,
        lse,
        dsinks,
        ties: None,
    })
}

/// One query head's share of the gradients: its contributions to dK (before the factor
/// `scale`) and dV of its KV head (`Sk × D` each), and dL/d(its sink logit).
struct HeadGrads {
    dk: Vec<f64>,
    dv: Vec<f64>,
    dsink: f64,
}

/// The borrowed problem and tensors of [`backward_with`].
struct HeadInputs<'a, T> {
    p: &'a Problem,
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
    o: &'a [f64],
    lse: &'a [f64],
    d_o: &'a [T],
}

fn widen<T: Element>(x: &[T]) -> Vec<f64> {
    x.iter().map(|y| y.to_f64()).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl<T: Element> HeadInputs<'_, T> {
    /// Writes dQ of query head `(b, h)` into `dq_head` (`Sq × D`) and returns the head's
    /// dK/dV contributions and sink gradient.
    fn grads(&self, b: usize, h: usize, dq_head: &mut [f64]) -> HeadGrads {
        let p = self.p;
        let shape = p.shape();
        let (sk, d, scale) = (shape.kv_len(), shape.head_dim(), p.scale());
        let softcap = p.features().softcap;
        let sink = p.sink(h);
        let kvh = shape.kv_head_of(h);
        let base = shape.kv_offset(b, kvh, 0);
        let k = widen(&self.k[base..][..sk * d]);
        let v = widen(&self.v[base..][..sk * d]);
        let mut dk = vec![0.0; sk * d];
        let mut dv = vec![0.0; sk * d];
        let mut dsink = 0.0;
        for (i, dq_row) in dq_head.chunks_exact_mut(d).enumerate() {
            let range = p.visible_range(i);
            if range.is_empty() {
                continue; // fully masked: zero gradient
            }
            let off = shape.q_offset(b, h, i);
            let qi = widen(&self.q[off..][..d]);
            let doi = widen(&self.d_o[off..][..d]);
            let di = dot(&doi, &self.o[off..][..d]);
            let lse_i = self.lse[shape.lse_offset(b, h, i)];
            if let Some(sink) = sink {
                // The sink is one more logit of the softmax with no value: its dS is
                // P_sink·(0 − D_i) (the dS formula with dP = 0).
                dsink -= (sink - lse_i).exp() * di;
            }
            for j in range {
                let (kj, vj) = (&k[j * d..][..d], &v[j * d..][..d]);
                let x = dot(&qi, kj) * scale;
                // P from the score the forward used (softcap, then ALiBi); the LSE already
                // holds the sink's share of the denominator.
                let pij = (p.score(b, h, i, j, x) - lse_i).exp();
                let mut ds = pij * (dot(&doi, vj) - di);
                if let Some(c) = softcap {
                    // d/dx c·tanh(x/c) = 1 − tanh²(x/c); ALiBi is additive (derivative 1).
                    let t = (x / c).tanh();
                    ds *= 1.0 - t * t;
                }
                dq_row.iter_mut().zip(kj).for_each(|(a, x)| *a += ds * x);
                let dk_j = &mut dk[j * d..][..d];
                dk_j.iter_mut().zip(&qi).for_each(|(a, x)| *a += ds * x);
                let dv_j = &mut dv[j * d..][..d];
                dv_j.iter_mut().zip(&doi).for_each(|(a, x)| *a += pij * x);
            }
            dq_row.iter_mut().for_each(|x| *x *= scale);
        }
        HeadGrads { dk, dv, dsink }
    }
}

/// The backward pass with a FlashAttention backward kernel's rounding points: the `emu` of
/// the tolerance rule `max|out − ref| ≤ 2·max|emu − ref| + 1e-5` for gradients.
///
/// What is emulated (FlashAttention-2/3's backward kernels):
/// 1. Q, K, V and dO are rounded to the storage type; O and LSE come from
///    [`forward_emulated`] (O in the storage type, LSE in f32), as the kernel receives them
///    from the forward kernel.
/// 2. `D_i = rowsum(dO ∘ O)` in f32 (the preprocessing kernel), `LSE₂ = LSE·log2(e)` in f32.
/// 3. Over key tiles of [`EMU_BLOCK_N`] keys (the kernel's outer loop), for every query head
///    of the KV head's group and every query row: `S = q·k` and `dP = dO·v` in f32,
///    `P = exp2(fma(S, scale·log2 e, −LSE₂))` and `dS = P·(dP − D)` in f32.
/// 4. P and dS are rounded to the storage type before the MMAs that read them:
///    `dV += round(P)ᵀ·dO`, `dK += round(dS)ᵀ·Q` accumulate in f32 over rows; a tile's
///    `round(dS)·K` is summed in f32 and added to an f32 dQ accumulator (the kernel's
///    `dQaccum` atomics).
/// 5. `dQ = round(scale·dQaccum)`, `dK = round(scale·dK)`, `dV = round(dV)` in the storage
///    type.
///
/// Features, as FlashAttention-2's backward (`flash_bwd_kernel.h`) applies them, mirroring
/// [`forward_emulated`]:
/// - window and causal mask: a row's keys are [`Problem::visible_range`] ∩ the tile, so
///   tiles are 0-aligned and may be partly masked on either side;
/// - softcap `c`: the raw score is `t = tanh(S·scale/c)` (f32, as the forward's) and the
///   softmax scale becomes `c`; `dS = P·(dP − D)·(1 − t²)·(scale/c)` in f32 before its
///   rounding (the kernel's `dtanh`), with `1 − t²` of the exact tanh, as the kernels
///   compute it, and the final factor of dQ and dK in step 5 is `c` instead of `scale`;
/// - ALiBi: `(slope / softmax scale)·|i + Sk − Sq − j|` subtracted from the raw f32 score;
/// - sinks: only through LSE (from the emulated forward, which holds the sink); their
///   gradient `−Σ exp2(sink·log2 e − LSE₂)·D` is summed in f32 per head, batch by batch,
///   and not rounded to the storage type (sinks are f32 parameters). How a particular kernel
///   reduces it is not modelled.
///
/// Not emulated: `ex2.approx`, the tensor cores' and atomics' summation order (f32-level
/// effects, far below the storage-type rounding of P, dS and the outputs), except where they
/// decide a rounding: P and dS values within their f32 error of a midpoint are reported as
/// ties, with each output's extremes over them ([`TieSpread`], in [`RefGrads::ties`]; the
/// gradient tests read [`RefGrads::rule_emulation`]). These rounding
/// points are FlashAttention-2's, and the workspace's GPU backward (its `_feat` entries for
/// the features) rounds at the same places.
///
/// The returned `o` and `lse` are the emulated forward's. Fully masked rows give zero
/// gradients.
pub fn backward_emulated(
    p: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_o: &[f32],
    storage: Storage,
) -> Result<RefGrads, AttnError> {
    let shape = *p.shape();
    shape.check_qkv_lens(q.len(), k.len(), v.len())?;
    let fwd = forward_emulated(p, q, k, v, storage)?;
    let o: Vec<f32> = fwd.o.iter().map(|&x| x as f32).collect();
    let lse: Vec<f32> = fwd.lse.iter().map(|&x| x as f32).collect();
    backward_emulated_with(p, q, k, v, &o, &lse, d_o, storage)
}

/// [`backward_emulated`] from a given forward's O (`[B, Hq, Sq, D]`) and LSE (`[B, Hq, Sq]`,
/// natural log), as a backward kernel runs: the emulation of an ideal backward given the
/// forward a kernel actually produced. A GPU test that feeds our backward the O and LSE of
/// our forward compares it with this, so the forward's own error (which the forward's rule
/// allows up to twice the forward emulation's) is in both sides of the gradient rule rather
/// than in the kernel's side only. O is rounded to the storage type first.
#[allow(clippy::too_many_arguments)] // the tensors of a backward, as `backward_with`
pub fn backward_emulated_with(
    p: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &[f32],
    lse: &[f32],
    d_o: &[f32],
    storage: Storage,
) -> Result<RefGrads, AttnError> {
    let shape = *p.shape();
    shape.check_qkv_lens(q.len(), k.len(), v.len())?;
    check_len("dO", shape.o_elems(), d_o.len())?;
    check_len("O", shape.o_elems(), o.len())?;
    check_len("LSE", shape.lse_elems(), lse.len())?;
    let round_all = |x: &[f32]| -> Vec<f32> { x.par_iter().map(|&y| storage.round(y)).collect() };
    let (q, k, v, d_o) = (round_all(q), round_all(k), round_all(v), round_all(d_o));
    let o = round_all(o);
    let lse2: Vec<f32> = lse.iter().map(|&x| x * LOG2_E).collect();
    let (sq, sk, d) = (shape.q_len(), shape.kv_len(), shape.head_dim());
    let group = shape.group_size();
    let delta: Vec<f32> = o
        .par_chunks(d)
        .zip(d_o.par_chunks(d))
        .map(|(oi, doi)| dot_f32(doi, oi))
        .collect();
    // FlashAttention-2's softcap folds the scale into the tanh: raw scores are
    // tanh(q·k · scale/c) and the softmax scale becomes c (flash_api.cpp `params.softcap`,
    // `params.scale_softmax`), as in [`forward_emulated`].
    let features = p.features();
    let (softcap_in, scale_softmax) = match features.softcap {
        Some(c) => (Some((p.scale() / c) as f32), c),
        None => (None, p.scale()),
    };
    let scale_out = scale_softmax as f32;
    let scale_log2 = (scale_softmax * std::f64::consts::LOG2_E) as f32;
    let hq = shape.q_heads();

    // Row norms for the f32 error bounds of the tie test (Cauchy–Schwarz: |Σ a·b| and its
    // rounding error are bounded by u·‖a‖·‖b‖).
    let norms = |x: &[f32]| -> Vec<f32> {
        x.par_chunks(d)
            .map(|r| r.iter().map(|y| y * y).sum::<f32>().sqrt())
            .collect()
    };
    let (nq, nk, nv, ndo, no) = (norms(&q), norms(&k), norms(&v), norms(&d_o), norms(&o));
    let heads: Vec<EmuHead> = (0..shape.batch() * shape.kv_heads())
        .into_par_iter()
        .map(|bkv| {
            let (b, kvh) = (bkv / shape.kv_heads(), bkv % shape.kv_heads());
            let kv_base = shape.kv_offset(b, kvh, 0);
            let mut e = EmuHead::new(group * sq * d, sk * d, group);
            let mut dq_part = vec![0.0f32; d];
            // ALiBi in raw-score units per query head of the group (`slope / scale_softmax`,
            // as the kernel divides it).
            let alibi: Vec<Option<f32>> = (0..group)
                .map(|gi| {
                    features.alibi.as_ref().map(|a| {
                        (f64::from(a.slope(b, kvh * group + gi, hq)) / scale_softmax) as f32
                    })
                })
                .collect();
            for c0 in (0..sk).step_by(EMU_BLOCK_N) {
                let c1 = (c0 + EMU_BLOCK_N).min(sk);
                for (gi, &alibi_h) in alibi.iter().enumerate() {
                    let h = kvh * group + gi;
                    for i in 0..sq {
                        let range = p.visible_range(i);
                        let (lo, hi) = (range.start.max(c0), range.end.min(c1));
                        if lo >= hi {
                            continue; // tile masked for this row (or the row fully masked)
                        }
                        let off = shape.q_offset(b, h, i);
                        let (qi, doi) = (&q[off..][..d], &d_o[off..][..d]);
                        let li = shape.lse_offset(b, h, i);
                        let (lse_i, d_i) = (lse2[li], delta[li]);
                        let row = off / d;
                        let dq_row = (gi * sq + i) * d;
                        dq_part.fill(0.0);
                        for j in lo..hi {
                            let kj = &k[kv_base + j * d..][..d];
                            let vj = &v[kv_base + j * d..][..d];
                            let mut x = dot_f32(qi, kj);
                            // The f32 error of the score as the exponent sees it (the tanh's
                            // slope is at most 1): u·‖q‖‖k‖ from the dot product, times the
                            // softcap's input scale.
                            let mut x_err = F32_U * nq[row] * nk[kv_base / d + j];
                            // FlashAttention-2's `calculate_dtanh`: (1 − t²)·(scale/c), taken
                            // before masking and multiplied into dS before its rounding.
                            let mut dtanh = 1.0f32;
                            if let Some(f) = softcap_in {
                                // P from the forward's tanh; 1 − t² exact, as the kernels'
                                // softcap_dtanh.
                                let sech = 1.0 / f64::from(x * f).cosh();
                                x = (x * f).tanh();
                                x_err *= f;
                                dtanh = (sech * sech) as f32 * f;
                            }
                            if let Some(slope) = alibi_h {
                                x -= slope * p.alibi_distance(i, j) as f32;
                            }
                            let pf = x.mul_add(scale_log2, -lse_i).exp2();
                            let dp = dot_f32(doi, vj);
                            let ds = pf * (dp - d_i) * dtanh;
                            let (pr, dsr) = (storage.round(pf), storage.round(ds));
                            // Ties: P's relative error is ln 2 times its exponent's absolute
                            // error, plus the exp2 and fma roundings; dS adds dP's and Δ's.
                            let arg_err =
                                scale_log2.abs() * (x_err + F32_U * x.abs()) + F32_U * lse_i.abs();
                            let p_rel = std::f32::consts::LN_2 * arg_err + 2.0 * F32_U;
                            let ds_err = ds.abs() * (p_rel + 2.0 * F32_U)
                                + (pf * dtanh).abs()
                                    * F32_U
                                    * ndo[row]
                                    * (nv[kv_base / d + j] + no[row]);
                            let p_tie = tie_alternative(storage, pf, pr, pf * p_rel);
                            let ds_tie = tie_alternative(storage, ds, dsr, ds_err);
                            e.roundings += 2;
                            let dv_j = j * d;
                            e.dv[0][dv_j..][..d]
                                .iter_mut()
                                .zip(doi)
                                .for_each(|(a, x)| *a += pr * x);
                            e.dk[0][dv_j..][..d]
                                .iter_mut()
                                .zip(qi)
                                .for_each(|(a, x)| *a += dsr * x);
                            dq_part.iter_mut().zip(kj).for_each(|(a, x)| *a += dsr * x);
                            if let Some(alt) = p_tie {
                                e.ties += 1;
                                e.widen(Grad::DV, dv_j, alt - pr, doi);
                            }
                            if let Some(alt) = ds_tie {
                                e.ties += 1;
                                e.widen(Grad::DK, dv_j, alt - dsr, qi);
                                e.widen(Grad::DQ, dq_row, alt - dsr, kj);
                            }
                        }
                        e.dq[0][dq_row..][..d]
                            .iter_mut()
                            .zip(&dq_part)
                            .for_each(|(a, x)| *a += x);
                    }
                }
            }
            // Sink gradient in f32 (a kernel reduces it per row): −Σ_i P_sink,i · D_i.
            for (gi, ds) in e.dsinks.iter_mut().enumerate() {
                let h = kvh * group + gi;
                let Some(sink) = p.sink(h) else { continue };
                let sink_log2 = (sink * std::f64::consts::LOG2_E) as f32;
                for i in (0..sq).filter(|&i| !p.visible_range(i).is_empty()) {
                    let li = shape.lse_offset(b, h, i);
                    *ds -= (sink_log2 - lse2[li]).exp2() * delta[li];
                }
            }
            e
        })
        .collect();
    // dQ of KV head bkv's query heads is one chunk of [B, Hq, Sq, D] (heads kvh·group ..).
    let mut dq = vec![0.0; shape.q_elems()];
    let mut dk = vec![0.0; shape.kv_elems()];
    let mut dv = vec![0.0; shape.kv_elems()];
    let mut spread = TieSpread {
        dq: Spread::zeros(shape.q_elems()),
        dk: Spread::zeros(shape.kv_elems()),
        dv: Spread::zeros(shape.kv_elems()),
        ties: 0,
        roundings: 0,
    };
    let mut dsink_bh = vec![0.0f32; shape.batch() * hq];
    for (bkv, e) in heads.iter().enumerate() {
        let (q_at, kv_at) = (bkv * group * sq * d, bkv * sk * d);
        let round_into = |dst: &mut [f64],
                          dlo: &mut [f64],
                          dhi: &mut [f64],
                          acc: &[Vec<f32>; 3],
                          factor: f32| {
            for (i, y) in dst.iter_mut().enumerate() {
                let r = |x: f32| f64::from(storage.round(x * factor));
                *y = r(acc[0][i]);
                dlo[i] = r(acc[0][i] + acc[1][i]);
                dhi[i] = r(acc[0][i] + acc[2][i]);
            }
        };
        let n = group * sq * d;
        round_into(
            &mut dq[q_at..][..n],
            &mut spread.dq.lo[q_at..][..n],
            &mut spread.dq.hi[q_at..][..n],
            &e.dq,
            scale_out,
        );
        round_into(
            &mut dk[kv_at..][..sk * d],
            &mut spread.dk.lo[kv_at..][..sk * d],
            &mut spread.dk.hi[kv_at..][..sk * d],
            &e.dk,
            scale_out,
        );
        round_into(
            &mut dv[kv_at..][..sk * d],
            &mut spread.dv.lo[kv_at..][..sk * d],
            &mut spread.dv.hi[kv_at..][..sk * d],
            &e.dv,
            1.0,
        );
        dsink_bh[bkv * group..][..group].copy_from_slice(&e.dsinks);
        spread.ties += e.ties;
        spread.roundings += e.roundings;
    }
    let dsinks = features.sinks.as_ref().map(|_| {
        (0..hq)
            .map(|h| {
                let s: f32 = (0..shape.batch()).map(|b| dsink_bh[b * hq + h]).sum();
                f64::from(s)
            })
            .collect()
    });
    Ok(RefGrads {
        dq,
        dk,
        dv,
        o: o.iter().map(|&x| f64::from(x)).collect(),
        lse: lse.iter().map(|&x| f64::from(x)).collect(),
        dsinks,
        ties: Some(spread),
    })
}

/// f32's unit roundoff, 2⁻²⁴.
const F32_U: f32 = 1.0 / 16_777_216.0;

/// The storage value on the other side of `y` from its rounding `r`, when `y` lies within
/// `err` of their midpoint: a rounding that `y`'s own f32 error leaves undecided (see
/// [`TieSpread`]). `None` when `y` is decided (or exactly representable).
fn tie_alternative(storage: Storage, y: f32, r: f32, err: f32) -> Option<f32> {
    let alt = storage.round(2.0 * y - r);
    (alt != r && (y - 0.5 * (r + alt)).abs() <= err).then_some(alt)
}

/// Which gradient a tie widens.
#[derive(Clone, Copy)]
enum Grad {
    DQ,
    DK,
    DV,
}

/// One KV head's emulated accumulators (f32, before the final scale and rounding): per
/// gradient `[value, lowest tie shift, highest tie shift]`.
struct EmuHead {
    dq: [Vec<f32>; 3],
    dk: [Vec<f32>; 3],
    dv: [Vec<f32>; 3],
    dsinks: Vec<f32>,
    ties: usize,
    roundings: usize,
}

impl EmuHead {
    fn new(q_elems: usize, kv_elems: usize, group: usize) -> Self {
        let three = |n: usize| [vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]];
        Self {
            dq: three(q_elems),
            dk: three(kv_elems),
            dv: three(kv_elems),
            dsinks: vec![0.0; group],
            ties: 0,
            roundings: 0,
        }
    }

    /// A tie whose alternative changes the rounded operand by `delta`: the row at `at` of
    /// `grad` would gain `delta·x`, added to its lowest or highest shift by sign.
    fn widen(&mut self, grad: Grad, at: usize, delta: f32, x: &[f32]) {
        let acc = match grad {
            Grad::DQ => &mut self.dq,
            Grad::DK => &mut self.dk,
            Grad::DV => &mut self.dv,
        };
        let [_, lo, hi] = acc;
        for ((l, h), &xi) in lo[at..][..x.len()]
            .iter_mut()
            .zip(&mut hi[at..][..x.len()])
            .zip(x)
        {
            let shift = delta * xi;
            if shift < 0.0 {
                *l += shift;
            } else {
                *h += shift;
            }
        }
    }
}

impl Spread {
    fn zeros(n: usize) -> Self {
        Self {
            lo: vec![0.0; n],
            hi: vec![0.0; n],
        }
    }
}

/// f32 dot product, accumulated in order (the emulated MMA; products of storage-type values
/// are exact in f32, only the order of the additions is a choice).
fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0, |s, (x, y)| x.mul_add(*y, s))
}

#[cfg(test)]
mod tie_tests {
    use super::*;

    #[test]
    fn a_value_within_its_error_of_a_rounding_midpoint_is_a_tie() {
        let s = Storage::F16;
        // 1 + 2⁻¹¹ is the midpoint of 1 and 1 + 2⁻¹⁰ (f16 rounds it to even: 1).
        let mid = 1.0 + 2f32.powi(-11);
        assert_eq!(
            tie_alternative(s, mid, s.round(mid), 0.0),
            Some(1.0 + 2f32.powi(-10))
        );
        // 2⁻²⁰ above the midpoint: decided when its error is smaller, a tie when larger.
        let y = mid + 2f32.powi(-20);
        let r = s.round(y);
        assert_eq!(r, 1.0 + 2f32.powi(-10));
        assert_eq!(tie_alternative(s, y, r, 2f32.powi(-22)), None);
        assert_eq!(tie_alternative(s, y, r, 2f32.powi(-19)), Some(1.0));
        // Representable values and values far from a midpoint are never ties.
        assert_eq!(tie_alternative(s, 1.5, 1.5, 1e-3), None);
        assert_eq!(tie_alternative(s, 1.0 + 2f32.powi(-13), 1.0, 1e-6), None);
        // Below a power of two the spacing halves; the alternative is the neighbour below.
        let below = 1.0 - 2f32.powi(-12);
        assert_eq!(
            tie_alternative(s, below, s.round(below), 1e-7),
            Some(1.0 - 2f32.powi(-11))
        );
        // bf16 and negative values.
        let b = Storage::Bf16;
        let neg = -(1.0 + 2f32.powi(-8));
        let r = b.round(neg);
        assert_eq!(
            tie_alternative(b, neg, r, 0.0).map(|a| a + r),
            Some(2.0 * neg)
        );
    }
}
