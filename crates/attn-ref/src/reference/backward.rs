//! The f64 CPU reference of the attention **backward pass**: the specification that GPU
//! backward kernels are checked against.
//!
//! With `P = softmax(scale·Q·Kᵀ + mask)` row by row and `O = P·V`, and dO the gradient of a
//! loss with respect to O, FlashAttention's formulation (Dao et al., "FlashAttention", 2022,
//! Appendix B) gives, per (batch, query head) and query row `i`:
//!
//! ```text
//! P_ij  = exp(scale · q_i·k_j − LSE_i)          for the visible keys j < n(i)
//! D_i   = Σ_d dO_id · O_id
//! dP_ij = dO_i · v_j
//! dS_ij = P_ij · (dP_ij − D_i)
//! dQ_i  = scale · Σ_j dS_ij · k_j
//! dK_j  = scale · Σ_i dS_ij · q_i
//! dV_j  = Σ_i P_ij · dO_i
//! ```
//!
//! everything accumulated in f64. With grouped-query attention, dK and dV of a KV head are
//! the sums over the query heads that read it (in head order, then row order).
//!
//! Conventions, those of [`super::forward`]:
//! - a fully masked row (no visible key) contributes nothing: its dQ row is exactly 0 and
//!   it adds nothing to dK or dV, whatever O and LSE say for it (O = 0, LSE = −∞);
//! - a key masked for a row never touches that row's terms, so NaN in a masked K or V row
//!   does not reach any gradient through that row;
//! - NaN or ±Inf reaching a visible term propagates.
//!
//! [`backward`] recomputes O and LSE with [`super::forward`]; [`backward_with`] takes them
//! from a forward pass, as a backward kernel does. [`backward_emulated`] applies the
//! kernel's rounding points (the `emu` of the tolerance rule).
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
/// P is recomputed as `exp(scale·q·k − LSE)` and `D = rowsum(dO ∘ O)`, so with O and LSE
/// from [`forward`] this is exactly [`backward`]. Rows with no visible key are skipped
/// (zero gradient) whatever their O and LSE. Errors if a slice's length does not match.
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
    let head = HeadInputs {
        p,
        q,
        k,
        v,
        o: &o,
        lse: &lse,
        d_o,
    };
    // The query heads of KV head `kvh` are `kvh·group ..`, so their dQ is one chunk.
    dq.par_chunks_mut(group * sq * d)
        .zip(dk.par_chunks_mut(sk * d))
        .zip(dv.par_chunks_mut(sk * d))
        .enumerate()
        .for_each(|(bkv, ((dq_group, dk_head), dv_head))| {
            let (b, kvh) = (bkv / shape.kv_heads(), bkv % shape.kv_heads());
            let parts: Vec<(Vec<f64>, Vec<f64>)> = dq_group
                .par_chunks_mut(sq * d)
                .enumerate()
                .map(|(gi, dq_head)| head.grads(b, kvh * group + gi, dq_head))
                .collect();
            for (pk, pv) in parts {
                dk_head.iter_mut().zip(&pk).for_each(|(a, x)| *a += x);
                dv_head.iter_mut().zip(&pv).for_each(|(a, x)| *a += x);
            }
            dk_head.iter_mut().for_each(|x| *x *= scale);
        });
    Ok(RefGrads { dq, dk, dv, o, lse })
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
    /// Writes dQ of query head `(b, h)` into `dq_head` (`Sq × D`) and returns this head's
    /// contributions to dK (before the factor `scale`) and dV of its KV head (`Sk × D` each).
    fn grads(&self, b: usize, h: usize, dq_head: &mut [f64]) -> (Vec<f64>, Vec<f64>) {
        let shape = self.p.shape();
        let (sk, d, scale) = (shape.kv_len(), shape.head_dim(), self.p.scale());
        let kvh = shape.kv_head_of(h);
        let base = shape.kv_offset(b, kvh, 0);
        let k = widen(&self.k[base..][..sk * d]);
        let v = widen(&self.v[base..][..sk * d]);
        let mut dk = vec![0.0; sk * d];
        let mut dv = vec![0.0; sk * d];
        for (i, dq_row) in dq_head.chunks_exact_mut(d).enumerate() {
            let n = self.p.visible_keys(i);
            if n == 0 {
                continue; // fully masked: zero gradient
            }
            let off = shape.q_offset(b, h, i);
            let qi = widen(&self.q[off..][..d]);
            let doi = widen(&self.d_o[off..][..d]);
            let di = dot(&doi, &self.o[off..][..d]);
            let lse_i = self.lse[shape.lse_offset(b, h, i)];
            for j in 0..n {
                let (kj, vj) = (&k[j * d..][..d], &v[j * d..][..d]);
                let pij = (dot(&qi, kj) * scale - lse_i).exp();
                let ds = pij * (dot(&doi, vj) - di);
                dq_row.iter_mut().zip(kj).for_each(|(a, x)| *a += ds * x);
                let dk_j = &mut dk[j * d..][..d];
                dk_j.iter_mut().zip(&qi).for_each(|(a, x)| *a += ds * x);
                let dv_j = &mut dv[j * d..][..d];
                dv_j.iter_mut().zip(&doi).for_each(|(a, x)| *a += pij * x);
            }
            dq_row.iter_mut().for_each(|x| *x *= scale);
        }
        (dk, dv)
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
/// Not emulated: `ex2.approx`, the tensor cores' and atomics' summation order (f32-level
/// effects, far below the storage-type rounding of P, dS and the outputs).
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
    check_len("dO", shape.o_elems(), d_o.len())?;
    let fwd = forward_emulated(p, q, k, v, storage)?;
    let round_all = |x: &[f32]| -> Vec<f32> { x.par_iter().map(|&y| storage.round(y)).collect() };
    let (q, k, v, d_o) = (round_all(q), round_all(k), round_all(v), round_all(d_o));
    // O holds storage-type values and LSE f32 values: both narrow exactly.
    let o: Vec<f32> = fwd.o.iter().map(|&x| x as f32).collect();
    let lse2: Vec<f32> = fwd.lse.iter().map(|&x| x as f32 * LOG2_E).collect();
    let (sq, sk, d) = (shape.q_len(), shape.kv_len(), shape.head_dim());
    let group = shape.group_size();
    let delta: Vec<f32> = o
        .par_chunks(d)
        .zip(d_o.par_chunks(d))
        .map(|(oi, doi)| dot_f32(doi, oi))
        .collect();
    let scale = p.scale() as f32;
    let scale_log2 = (p.scale() * std::f64::consts::LOG2_E) as f32;

    let mut dq = vec![0.0; shape.q_elems()];
    let mut dk = vec![0.0; shape.kv_elems()];
    let mut dv = vec![0.0; shape.kv_elems()];
    dq.par_chunks_mut(group * sq * d)
        .zip(dk.par_chunks_mut(sk * d))
        .zip(dv.par_chunks_mut(sk * d))
        .enumerate()
        .for_each(|(bkv, ((dq_group, dk_head), dv_head))| {
            let (b, kvh) = (bkv / shape.kv_heads(), bkv % shape.kv_heads());
            let kv_base = shape.kv_offset(b, kvh, 0);
            let mut dq_acc = vec![0.0f32; group * sq * d];
            let mut dk_acc = vec![0.0f32; sk * d];
            let mut dv_acc = vec![0.0f32; sk * d];
            let mut dq_part = vec![0.0f32; d];
            for c0 in (0..sk).step_by(EMU_BLOCK_N) {
                let cols = EMU_BLOCK_N.min(sk - c0);
                for gi in 0..group {
                    let h = kvh * group + gi;
                    for i in 0..sq {
                        let vis = p.visible_keys(i).saturating_sub(c0).min(cols);
                        if vis == 0 {
                            continue; // tile masked for this row (or the row fully masked)
                        }
                        let off = shape.q_offset(b, h, i);
                        let (qi, doi) = (&q[off..][..d], &d_o[off..][..d]);
                        let li = shape.lse_offset(b, h, i);
                        let (lse_i, d_i) = (lse2[li], delta[li]);
                        dq_part.fill(0.0);
                        for j in c0..c0 + vis {
                            let kj = &k[kv_base + j * d..][..d];
                            let vj = &v[kv_base + j * d..][..d];
                            let pf = dot_f32(qi, kj).mul_add(scale_log2, -lse_i).exp2();
                            let ds = pf * (dot_f32(doi, vj) - d_i);
                            let (pr, dsr) = (storage.round(pf), storage.round(ds));
                            let dv_j = &mut dv_acc[j * d..][..d];
                            dv_j.iter_mut().zip(doi).for_each(|(a, x)| *a += pr * x);
                            let dk_j = &mut dk_acc[j * d..][..d];
                            dk_j.iter_mut().zip(qi).for_each(|(a, x)| *a += dsr * x);
                            dq_part.iter_mut().zip(kj).for_each(|(a, x)| *a += dsr * x);
                        }
                        let acc = &mut dq_acc[(gi * sq + i) * d..][..d];
                        acc.iter_mut().zip(&dq_part).for_each(|(a, x)| *a += x);
                    }
                }
            }
            let out = |dst: &mut [f64], src: &[f32], factor: f32| {
                for (y, &x) in dst.iter_mut().zip(src) {
                    *y = f64::from(storage.round(x * factor));
                }
            };
            out(dq_group, &dq_acc, scale);
            out(dk_head, &dk_acc, scale);
            out(dv_head, &dv_acc, 1.0);
        });
    Ok(RefGrads {
        dq,
        dk,
        dv,
        o: fwd.o,
        lse: fwd.lse,
    })
}

/// f32 dot product, accumulated in order (the emulated MMA; products of storage-type values
/// are exact in f32, only the order of the additions is a choice).
fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0, |s, (x, y)| x.mul_add(*y, s))
}
