//! Variable-length batches (FlashAttention's `flash_attn_varlen_func`): sequences of
//! different lengths packed back to back, described by prefix sums.
//!
//! Q is `[total_q, Hq, D]`, K and V are `[total_k, Hkv, D]`; `cu_seqlens_q` and
//! `cu_seqlens_k` hold `B + 1` non-decreasing int32 prefix sums starting at 0, so sequence
//! `b` owns query rows `cu_q[b]..cu_q[b+1]` and keys `cu_k[b]..cu_k[b+1]`. Each sequence is an
//! independent problem of lengths `(cu_q[b+1] − cu_q[b], cu_k[b+1] − cu_k[b])`, with causal
//! and window alignment computed per sequence: [`forward_varlen`] builds it
//! ([`Problem::sequence`]) and runs the dense [`forward`] on it, so there is
//! one definition of attention. A sequence with no query rows produces nothing; one with
//! query rows but no keys gives O = 0 and LSE = −∞ for its rows. [`backward_varlen`] is the
//! backward pass the same way: each sequence's dense [`backward()`].
//!
//! ```
//! use attn_ref::{AttnShape, Causal, Problem};
//! use attn_ref::reference::{forward, varlen::forward_varlen};
//!
//! // Two sequences: (Sq, Sk) = (2, 3) and (1, 1); Hq = Hkv = 1, D = 2.
//! let template = Problem::new(AttnShape::new(2, 1, 1, 1, 1, 2)?, Causal::BottomRight);
//! let (cu_q, cu_k) = ([0, 2, 3], [0, 3, 4]);
//! let q: Vec<f64> = (0..6).map(|i| (i as f64 * 0.3).sin()).collect();
//! let k: Vec<f64> = (0..8).map(|i| (i as f64 * 0.7).cos()).collect();
//! let out = forward_varlen(&template, &cu_q, &cu_k, &q, &k, &k)?;
//! assert_eq!((out.o.len(), out.lse.len()), (6, 3)); // O [3, 1, 2], LSE [1, 3]
//! // Sequence 1 alone is the dense problem on its rows.
//! let one = Problem::new(AttnShape::new(1, 1, 1, 1, 1, 2)?, Causal::BottomRight);
//! let dense = forward(&one, &q[4..6], &k[6..8], &k[6..8])?;
//! assert_eq!(&out.o[4..6], &dense.o[..]);
//! # Ok::<(), attn_ref::AttnError>(())
//! ```

use super::{backward, forward, RefGrads, RefOutput};
use crate::{check_len, AttnError, Element, Problem};

/// Validates one `cu_seqlens` array for `batch` sequences and returns it as offsets.
pub fn check_cu_seqlens(
    name: &'static str,
    cu: &[i32],
    batch: usize,
) -> Result<Vec<usize>, AttnError> {
    if cu.len() != batch + 1 {
        return Err(AttnError::CuSeqlensLength {
            name,
            expected: batch + 1,
            got: cu.len(),
        });
    }
    let mut previous = 0i64;
    for (index, &value) in cu.iter().enumerate() {
        let value = i64::from(value);
        if (index == 0 && value != 0) || value < previous {
            return Err(AttnError::CuSeqlensNotMonotone {
                name,
                index,
                value,
                previous,
            });
        }
        previous = value;
    }
    Ok(cu.iter().map(|&x| x as usize).collect())
}

/// A varlen batch's dimensions and checked offsets (both passes' validation).
struct Packed {
    batch: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    cu_q: Vec<usize>,
    cu_k: Vec<usize>,
    total_q: usize,
    total_k: usize,
}

impl Packed {
    /// Checks the prefix sums and that Q, K, V hold `total × H × D` elements.
    fn check(
        template: &Problem,
        cu_seqlens_q: &[i32],
        cu_seqlens_k: &[i32],
        [q_len, k_len, v_len]: [usize; 3],
    ) -> Result<Self, AttnError> {
        let shape = template.shape();
        let (batch, hq, hkv, d) = (
            shape.batch(),
            shape.q_heads(),
            shape.kv_heads(),
            shape.head_dim(),
        );
        let cu_q = check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, batch)?;
        let cu_k = check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, batch)?;
        let (total_q, total_k) = (cu_q[batch], cu_k[batch]);
        let p = Self {
            batch,
            hq,
            hkv,
            d,
            cu_q,
            cu_k,
            total_q,
            total_k,
        };
        check_len("Q", p.elems(total_q, hq)?, q_len)?;
        check_len("K", p.elems(total_k, hkv)?, k_len)?;
        check_len("V", p.elems(total_k, hkv)?, v_len)?;
        Ok(p)
    }

    /// `rows × heads × D`, or TooLarge.
    fn elems(&self, rows: usize, heads: usize) -> Result<usize, AttnError> {
        rows.checked_mul(heads)
            .and_then(|x| x.checked_mul(self.d))
            .ok_or(AttnError::TooLarge)
    }
}

/// The reference on a variable-length batch (see the module documentation).
///
/// `template` gives the heads (Hq, Hkv), head dim, causal mode, scale and features; its
/// batch must be the number of sequences (`cu_seqlens_*.len() − 1`, which also sizes
/// per-(batch, head) ALiBi slopes); its `q_len` and `kv_len` are not used.
///
/// Returns O `[total_q, Hq, D]` and LSE `[Hq, total_q]` (FlashAttention's varlen layouts).
/// Errors: malformed `cu_seqlens` (wrong length, not starting at 0, decreasing) and Q, K, V
/// whose lengths are not `total × H × D`.
pub fn forward_varlen<T: Element>(
    template: &Problem,
    cu_seqlens_q: &[i32],
    cu_seqlens_k: &[i32],
    q: &[T],
    k: &[T],
    v: &[T],
) -> Result<RefOutput, AttnError> {
    let Packed {
        batch,
        hq,
        hkv,
        d,
        cu_q,
        cu_k,
        total_q,
        ..
    } = Packed::check(
        template,
        cu_seqlens_q,
        cu_seqlens_k,
        [q.len(), k.len(), v.len()],
    )?;

    let mut o = vec![0.0; total_q * hq * d];
    let mut lse = vec![f64::NEG_INFINITY; hq * total_q];
    for b in 0..batch {
        let (q0, sq) = (cu_q[b], cu_q[b + 1] - cu_q[b]);
        let (k0, sk) = (cu_k[b], cu_k[b + 1] - cu_k[b]);
        if sq == 0 || sk == 0 {
            continue; // no rows, or rows that see no key: O = 0, LSE = −∞ as initialized
        }
        let p = template.sequence(b, sq, sk)?;
        let out = forward(
            &p,
            &packed_to_bhsd(q, q0, sq, hq, d),
            &packed_to_bhsd(k, k0, sk, hkv, d),
            &packed_to_bhsd(v, k0, sk, hkv, d),
        )?;
        bhsd_to_packed(&out.o, &mut o, q0, sq, hq, d);
        for h in 0..hq {
            for s in 0..sq {
                lse[h * total_q + q0 + s] = out.lse[h * sq + s];
            }
        }
    }
    Ok(RefOutput { o, lse })
}

/// `[S, H, D]` rows `s0..s0 + len` of a packed tensor as `[1, H, S, D]`.
fn packed_to_bhsd<T: Copy>(x: &[T], s0: usize, len: usize, heads: usize, d: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(heads * len * d);
    for h in 0..heads {
        for s in 0..len {
            out.extend_from_slice(&x[((s0 + s) * heads + h) * d..][..d]);
        }
    }
    out
}

/// `[1, H, S, D]` back into rows `s0..` of a packed `[total, H, D]` tensor.
fn bhsd_to_packed(src: &[f64], dst: &mut [f64], s0: usize, len: usize, heads: usize, d: usize) {
    for h in 0..heads {
        for s in 0..len {
            dst[((s0 + s) * heads + h) * d..][..d].copy_from_slice(&src[(h * len + s) * d..][..d]);
        }
    }
}

/// The backward pass of a variable-length batch: each sequence's dense [`backward()`] (so every
/// feature, causal alignment and GQA as there), with `d_o` packed like Q (`[total_q, Hq, D]`).
///
/// Returns dQ and O `[total_q, Hq, D]`, dK and dV `[total_k, Hkv, D]`, LSE `[Hq, total_q]`
/// and, with sinks, dsinks `[Hq]` summed over the sequences. A sequence without query rows or
/// keys contributes zeros. Errors as [`forward_varlen`], and for a dO of the wrong length.
pub fn backward_varlen<T: Element>(
    template: &Problem,
    cu_seqlens_q: &[i32],
    cu_seqlens_k: &[i32],
    q: &[T],
    k: &[T],
    v: &[T],
    d_o: &[T],
) -> Result<RefGrads, AttnError> {
    let Packed {
        batch,
        hq,
        hkv,
        d,
        cu_q,
        cu_k,
        total_q,
        total_k,
    } = Packed::check(
        template,
        cu_seqlens_q,
        cu_seqlens_k,
        [q.len(), k.len(), v.len()],
    )?;
    let d_o_len = total_q
        .checked_mul(hq)
        .and_then(|x| x.checked_mul(d))
        .ok_or(AttnError::TooLarge)?;
    check_len("dO", d_o_len, d_o.len())?;

    let mut g = RefGrads {
        dq: vec![0.0; total_q * hq * d],
        dk: vec![0.0; total_k * hkv * d],
        dv: vec![0.0; total_k * hkv * d],
        o: vec![0.0; total_q * hq * d],
        lse: vec![f64::NEG_INFINITY; hq * total_q],
        dsinks: template.features().sinks.as_ref().map(|_| vec![0.0; hq]),
        ties: None,
    };
    for b in 0..batch {
        let (q0, sq) = (cu_q[b], cu_q[b + 1] - cu_q[b]);
        let (k0, sk) = (cu_k[b], cu_k[b + 1] - cu_k[b]);
        if sq == 0 || sk == 0 {
            continue; // nothing to differentiate: zero gradients, O = 0, LSE = −∞
        }
        let p = template.sequence(b, sq, sk)?;
        let one = backward(
            &p,
            &packed_to_bhsd(q, q0, sq, hq, d),
            &packed_to_bhsd(k, k0, sk, hkv, d),
            &packed_to_bhsd(v, k0, sk, hkv, d),
            &packed_to_bhsd(d_o, q0, sq, hq, d),
        )?;
        bhsd_to_packed(&one.dq, &mut g.dq, q0, sq, hq, d);
        bhsd_to_packed(&one.o, &mut g.o, q0, sq, hq, d);
        bhsd_to_packed(&one.dk, &mut g.dk, k0, sk, hkv, d);
        bhsd_to_packed(&one.dv, &mut g.dv, k0, sk, hkv, d);
        for h in 0..hq {
            for s in 0..sq {
                g.lse[h * total_q + q0 + s] = one.lse[h * sq + s];
            }
        }
        if let (Some(total), Some(part)) = (g.dsinks.as_mut(), one.dsinks.as_ref()) {
            for (t, x) in total.iter_mut().zip(part) {
                *t += x;
            }
        }
    }
    Ok(g)
}
