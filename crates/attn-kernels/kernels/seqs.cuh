// One batch entry's geometry in a varlen / KV-cache / paged launch (FwdSeqs in common.cuh):
// FlashAttention-2's `flash_attn_varlen_func` and `flash_attn_with_kvcache` semantics, where
// each sequence is an independent problem of its own lengths, with causal and window
// alignment computed per sequence (attn-ref's reference/varlen.rs and paged.rs).
#pragma once
#include "common.cuh"

namespace attn {

// Where sequence b's rows start in packed Q/O and K/V (0 for dense tensors, whose batch
// stride places them).
struct SeqRows {
    int q_row0;
    int k_row0;
};

__device__ __forceinline__ int clamp_index(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }

// Rewrites p's q_len, kv_len and diag_offset to sequence b's own and returns its row
// offsets. Device-resident indices are clamped to the host-checked sizes (total rows, the
// paged capacity), so malformed ones cannot move an access outside the tensors. A sequence
// longer than the launch's q_len (the grid's max_seqlen_q) keeps its true length for the
// mask; its rows past the grid are not computed (the launcher documents this).
__device__ __forceinline__ SeqRows resolve_sequence(FwdParams& p, int b) {
    const FwdSeqs& s = p.seqs;
    SeqRows rows{0, 0};
    if (s.cu_q != nullptr) {
        const int a = clamp_index(s.cu_q[b], 0, s.total_q);
        rows.q_row0 = a;
        p.q_len = clamp_index(s.cu_q[b + 1], a, s.total_q) - a;
    }
    int cap = p.kv_len; // dense keys: the cache's rows; paged: max_blocks · page_size
    if (s.cu_k != nullptr) {
        const int a = clamp_index(s.cu_k[b], 0, s.total_k);
        rows.k_row0 = a;
        cap = clamp_index(s.cu_k[b + 1], a, s.total_k) - a;
    }
    p.kv_len = s.seqused_k != nullptr ? clamp_index(s.seqused_k[b], 0, cap) : cap;
    if (s.bottom_right) p.diag_offset = p.kv_len - p.q_len;
    return rows;
}

} // namespace attn
