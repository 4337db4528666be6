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
// P: FwdParams or BwdParams (the backward's varlen launches).
template <class P>
__device__ __forceinline__ SeqRows resolve_sequence(P& p, int b) {
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

// A flat grid over packed queries (p.seqs.flat_block_m != 0): grid.x enumerates the query
// blocks of every sequence in order, so no CTA is launched for a block past its sequence's
// end (a grid over the longest sequence launches B · ceil(max_len / BM) CTAs, most of which
// exit at once on a batch of mixed lengths). Finds CTA x's sequence `b`, its block index
// `local` in that sequence and the sequence's block count, by a warp-wide prefix sum over
// the per-sequence block counts, 32 sequences per step (the search of FlashAttention-3's
// varlen tile scheduler, hopper/tile_scheduler.hpp). Every warp runs it (no barrier); the
// counts use the same clamped lengths as resolve_sequence, capped by the grid's q_len (a
// longer sequence's rows past it are not computed, as on the batch grid). False: x is past
// the last block (the grid is sized by an upper bound). Call with the whole warp converged.
__device__ __forceinline__ bool flat_query_block(const FwdParams& p, int x, int& b, int& local, int& count) {
    const int lane = threadIdx.x & 31;
    const int bm = p.seqs.flat_block_m;
    int base = 0; // blocks of the sequences before this step's
    for (int c = 0; c < p.batch; c += 32) {
        const int i = c + lane;
        int n = 0;
        if (i < p.batch) {
            const int a = clamp_index(p.seqs.cu_q[i], 0, p.seqs.total_q);
            const int len = clamp_index(p.seqs.cu_q[i + 1], a, p.seqs.total_q) - a;
            n = ((len < p.q_len ? len : p.q_len) + bm - 1) / bm;
        }
        int incl = n; // inclusive scan of the counts over the lanes
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += y;
        }
        const unsigned hit = __ballot_sync(0xffffffffu, base + incl > x);
        if (hit != 0u) {
            const int l = __ffs(hit) - 1;
            const int before = __shfl_sync(0xffffffffu, incl - n, l);
            count = __shfl_sync(0xffffffffu, n, l);
            b = c + l;
            local = x - base - before;
            return true;
        }
        base += __shfl_sync(0xffffffffu, incl, 31);
    }
    return false;
}

} // namespace attn
