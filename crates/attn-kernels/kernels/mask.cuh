// Causal masking. A query row i sees keys [0, limit(i)); limit is non-decreasing in i, so a
// query block's first row bounds where masking is needed and its last row bounds how many
// key tiles exist at all (tiles past it are skipped, not computed).
#pragma once
#include "common.cuh"

namespace attn {

// P: FwdParams or BwdParams (fields q_len, kv_len, diag_offset).
template <bool CAUSAL, class P>
__device__ __forceinline__ int visible_keys(int row, const P& p) {
    if (!CAUSAL) return p.kv_len;
    const int lim = row + 1 + p.diag_offset;
    return lim < 0 ? 0 : (lim > p.kv_len ? p.kv_len : lim);
}

// Number of key tiles a query block [m0, m0 + BM) must process.
template <bool CAUSAL, int BM, int BN>
__device__ __forceinline__ int key_tiles_for_block(int m0, const FwdParams& p) {
    int last_row = m0 + BM - 1;
    if (last_row > p.q_len - 1) last_row = p.q_len - 1;
    const int keys = visible_keys<CAUSAL>(last_row, p);
    return (keys + BN - 1) / BN;
}

// Sets masked scores of a warp's S fragment to -inf. Thread holds rows g and g+8 of the
// warp's 16 rows, columns 8*n + 2*t + {0,1} of n-tile n (mma.m16n8 accumulator layout).
template <int NT>
__device__ __forceinline__ void apply_mask(float (&s)[NT][4], int key0, int lim_lo, int lim_hi,
                                           int t) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int key = key0 + n * 8 + 2 * t + e;
            if (key >= lim_lo) s[n][e] = -INFINITY;
            if (key >= lim_hi) s[n][2 + e] = -INFINITY;
        }
    }
}

} // namespace attn
