// Tile dumps for the oracle (debug kernels only: compiled under ATTN_DEBUG, absent from
// release cubins). For each requested (b, h, q_tile) the kernel writes, per processed key
// tile, S (scaled scores), P (unnormalized probabilities), m and l after the tile, all in
// the natural-log domain, into a buffer laid out by the launcher:
//   dump[((slot * key_tiles) + k_tile) * (2*BM*BN + 2*BM) + …]
//   = S[BM][BN], P[BM][BN], m[BM], l[BM]  (f32; untouched entries keep the host's NaN poison)
#pragma once
#include "softmax.cuh"

namespace attn {

#ifdef ATTN_DEBUG
template <int BM, int BN> __device__ __forceinline__ int dump_slot(const FwdParams& p, const int* tiles,
                                                                  int b, int h, int q_tile) {
    for (int i = 0; i < p.dump_count; ++i) {
        if (tiles[3 * i] == b && tiles[3 * i + 1] == h && tiles[3 * i + 2] == q_tile) return i;
    }
    return -1;
}

template <int BM, int BN, int NT>
__device__ __forceinline__ float* dump_tile_base(float* dump, int slot, int k_tile, const FwdParams& p) {
    const int key_tiles = (p.kv_len + BN - 1) / BN;
    return dump + (static_cast<int64_t>(slot) * key_tiles + k_tile) * (2 * BM * BN + 2 * BM);
}

// Writes the scores (before the softmax update) of this thread's elements.
template <int BM, int BN, int NT>
__device__ __forceinline__ void dump_scores(float* base, const float (&s)[NT][4], int warp_row0,
                                            int lane, float scale) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = warp_row0 + g + 8 * (i >> 1);
            const int col = n * 8 + 2 * t + (i & 1);
            base[row * BN + col] = s[n][i] * scale;
        }
}

// Writes P, m and the full (quad-reduced) l after the softmax update.
template <int BM, int BN, int NT>
__device__ __forceinline__ void dump_probs(float* base, const float (&s)[NT][4], const float (&m)[2],
                                           const float (&l)[2], int warp_row0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    float* P = base + BM * BN;
    float* M = base + 2 * BM * BN;
    float* L = M + BM;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = warp_row0 + g + 8 * (i >> 1);
            const int col = n * 8 + 2 * t + (i & 1);
            P[row * BN + col] = s[n][i];
        }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float lr = quad_sum(l[r]);
        if (t == 0) {
            M[warp_row0 + g + 8 * r] = m[r] * kLn2;
            L[warp_row0 + g + 8 * r] = lr;
        }
    }
}
#endif

// Backward tile dumps (the mma.sync backward, kernels/bwd_kernel.cuh): for each listed
// (b, h, q_tile) the kernel writes, per key block, P (normalized), dP = dO·Vᵀ and dS =
// P∘(dP − Δ) at [query][key], and Δ per query row:
//   dump[(slot * key_tiles + k_tile) * (3*BM*BN + BM) + …] = P[BM][BN], dP[BM][BN], dS[BM][BN], Δ[BM]
// Release builds compile both helpers to nothing.
template <int BM, int BN>
__device__ __forceinline__ float* bwd_dump_tile(float* dump, const int* tiles, int count, int b, int h, int q_tile,
                                                int k_tile, int key_tiles) {
#ifdef ATTN_DEBUG
    for (int i = 0; i < count; ++i) {
        if (tiles[3 * i] == b && tiles[3 * i + 1] == h && tiles[3 * i + 2] == q_tile)
            return dump + (static_cast<int64_t>(i) * key_tiles + k_tile) * (3 * BM * BN + BM);
    }
#endif
    return nullptr;
}

template <int BM, int BN>
__device__ __forceinline__ void bwd_dump_scores(float* tile, int row, int key, float p, float dp, float ds,
                                                float delta) {
#ifdef ATTN_DEBUG
    if (tile == nullptr) return;
    tile[row * BN + key] = p;
    tile[BM * BN + row * BN + key] = dp;
    tile[2 * BM * BN + row * BN + key] = ds;
    if (key == 0) tile[3 * BM * BN + row] = delta;
#endif
}

} // namespace attn
