//! Paged KV cache (vLLM's PagedAttention layout, FlashAttention's `block_table`): keys and
//! values live in fixed-size pages of a shared cache, and each sequence lists its pages.
//!
//! The caches are `[num_blocks, page_size, Hkv, D]`; `block_table` is int32
//! `[B, max_blocks_per_seq]`; `seqused_k` is int32 `[B]`, the number of valid keys of each
//! sequence. Key `j` of sequence `b` is `cache[block_table[b][j / page_size]][j % page_size]`.
//! Only the table entries a sequence uses (`j < seqused_k[b]`) are read or checked. Q is
//! dense `[B, Hq, Sq, D]`; sequence `b` is the problem of lengths `(Sq, seqused_k[b])` with
//! causal and window alignment computed for those lengths. [`forward_paged`] gathers each
//! sequence's keys and runs the dense [`forward`], so there is one definition
//! of attention; a sequence with no keys gives O = 0 and LSE = −∞.
//!
//! ```
//! use attn_ref::{AttnShape, Causal, Problem};
//! use attn_ref::reference::{forward, paged::{forward_paged, PagedKv}};
//!
//! // One sequence of 20 keys over two pages of 16, stored in blocks 1 then 0.
//! let template = Problem::new(AttnShape::new(1, 1, 1, 2, 20, 4)?, Causal::BottomRight);
//! let cache: Vec<f64> = (0..2 * 16 * 4).map(|i| (i as f64 * 0.1).sin()).collect();
//! let q = vec![0.5f64; 8];
//! let kv = PagedKv { k_cache: &cache, v_cache: &cache, page_size: 16, block_table: &[1, 0], seqused_k: &[20] };
//! let out = forward_paged(&template, &q, &kv)?;
//! let gathered: Vec<f64> = cache[64..].iter().chain(&cache[..16]).copied().collect();
//! let dense = forward(&template, &q, &gathered, &gathered)?;
//! assert_eq!(out, dense);
//! # Ok::<(), attn_ref::AttnError>(())
//! ```

use super::{forward, RefOutput};
use crate::{check_len, AttnError, Element, Problem};

/// A paged KV cache and the tables that map each sequence's keys into it.
#[derive(Debug, Clone, Copy)]
pub struct PagedKv<'a, T> {
    /// Keys, `[num_blocks, page_size, Hkv, D]`.
    pub k_cache: &'a [T],
    /// Values, shaped like `k_cache`.
    pub v_cache: &'a [T],
    /// Keys per page; a positive multiple of 16.
    pub page_size: usize,
    /// `[B, max_blocks_per_seq]` block indices into the caches.
    pub block_table: &'a [i32],
    /// `[B]` valid keys per sequence, each in `0..=max_blocks_per_seq · page_size`.
    pub seqused_k: &'a [i32],
}

/// The validated geometry of a [`PagedKv`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagedLayout {
    /// Blocks in the cache.
    pub num_blocks: usize,
    /// Table entries per sequence.
    pub max_blocks_per_seq: usize,
    /// Valid keys per sequence.
    pub seqused_k: Vec<usize>,
}

impl<T> PagedKv<'_, T> {
    /// Checks the caches and tables against `template`'s batch, Hkv and D.
    pub fn validate(&self, template: &Problem) -> Result<PagedLayout, AttnError> {
        let shape = template.shape();
        let (batch, hkv, d) = (shape.batch(), shape.kv_heads(), shape.head_dim());
        if self.page_size == 0 || self.page_size % 16 != 0 {
            return Err(AttnError::InvalidPageSize(self.page_size));
        }
        let page_elems = self
            .page_size
            .checked_mul(hkv)
            .and_then(|x| x.checked_mul(d))
            .ok_or(AttnError::TooLarge)?;
        if self.k_cache.len() % page_elems != 0 {
            return Err(AttnError::PagedCacheShape {
                tensor: "K",
                got: self.k_cache.len(),
                page_elems,
            });
        }
        check_len("V", self.k_cache.len(), self.v_cache.len())?;
        let num_blocks = self.k_cache.len() / page_elems;
        check_len("seqused_k", batch, self.seqused_k.len())?;
        let len = self.block_table.len();
        if len == 0 || len % batch != 0 {
            return Err(AttnError::BlockTableShape { len, batch });
        }
        let max_blocks_per_seq = len / batch;
        let capacity = max_blocks_per_seq * self.page_size;
        let mut seqused_k = Vec::with_capacity(batch);
        for (b, &used) in self.seqused_k.iter().enumerate() {
            if used < 0 || used as usize > capacity {
                return Err(AttnError::SequsedOutOfRange {
                    batch: b,
                    seqused: i64::from(used),
                    capacity,
                });
            }
            let used = used as usize;
            let row = &self.block_table[b * max_blocks_per_seq..][..max_blocks_per_seq];
            for (slot, &index) in row.iter().enumerate().take(used.div_ceil(self.page_size)) {
                if index < 0 || index as usize >= num_blocks {
                    return Err(AttnError::BlockIndexOutOfRange {
                        batch: b,
                        slot,
                        index: i64::from(index),
                        num_blocks,
                    });
                }
            }
            seqused_k.push(used);
        }
        Ok(PagedLayout {
            num_blocks,
            max_blocks_per_seq,
            seqused_k,
        })
    }
}

/// The reference on a paged KV cache (see the module documentation).
///
/// `template` gives B, Hq, Hkv, Sq, D, the causal mode, scale and features; its `kv_len` is
/// not used (each sequence has `seqused_k[b]` keys). Q is `[B, Hq, Sq, D]`; returns O
/// `[B, Hq, Sq, D]` and LSE `[B, Hq, Sq]`. Errors: see [`PagedKv::validate`], and a Q of the
/// wrong length.
pub fn forward_paged<T: Element>(
    template: &Problem,
    q: &[T],
    kv: &PagedKv<'_, T>,
) -> Result<RefOutput, AttnError> {
    let shape = template.shape();
    check_len("Q", shape.q_elems(), q.len())?;
    let layout = kv.validate(template)?;
    let (hq, hkv, sq, d) = (
        shape.q_heads(),
        shape.kv_heads(),
        shape.q_len(),
        shape.head_dim(),
    );
    let mut o = vec![0.0; shape.o_elems()];
    let mut lse = vec![f64::NEG_INFINITY; shape.lse_elems()];
    let head_q = sq * d;
    for (b, &sk) in layout.seqused_k.iter().enumerate() {
        if sk == 0 {
            continue; // no keys: O = 0, LSE = −∞ as initialized
        }
        let p = template.sequence(b, sq, sk)?;
        let table = &kv.block_table[b * layout.max_blocks_per_seq..][..layout.max_blocks_per_seq];
        // Gather [1, Hkv, sk, D] from the pages.
        let gather = |cache: &[T]| -> Vec<T> {
            let mut out = Vec::with_capacity(hkv * sk * d);
            for h in 0..hkv {
                for j in 0..sk {
                    let block = table[j / kv.page_size] as usize;
                    let row = block * kv.page_size + j % kv.page_size;
                    out.extend_from_slice(&cache[(row * hkv + h) * d..][..d]);
                }
            }
            out
        };
        let qb = &q[b * hq * head_q..][..hq * head_q];
        let out = forward(&p, qb, &gather(kv.k_cache), &gather(kv.v_cache))?;
        o[b * hq * head_q..][..hq * head_q].copy_from_slice(&out.o);
        lse[b * hq * sq..][..hq * sq].copy_from_slice(&out.lse);
    }
    Ok(RefOutput { o, lse })
}
