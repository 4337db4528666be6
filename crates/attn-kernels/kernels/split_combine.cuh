// Split-KV epilogue: each split writes its unnormalized O and its (m, l) to a workspace; the
// CTA that finishes last (an atomic ticket per query block, the "threadfence reduction"
// pattern of the CUDA samples) merges the splits in split order (lse_merge.cuh's `merge_row`)
// — so the result does not depend on which CTA came last — writes O and LSE, and resets the
// ticket for the next launch. `sink_log2`: the head's attention sink (base 2; -inf: none),
// added once in the merge (lse_merge.cuh `merge_row`), never by the splits themselves.
#pragma once
#include "lse_merge.cuh"
#include "softmax.cuh"

namespace attn {

// Stores this thread's O accumulator (unnormalized) and the rows' (m, l) of one m-tile.
template <int D, int NO>
__device__ __forceinline__ void write_partial(const float (&o)[NO][4], const float (&m)[2],
                                              const float (&l_partial)[2], float* ws_o, float* ws_ml,
                                              int warp_row0, int lane) {
    const int g = lane >> 2;
    const int t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = warp_row0 + g + 8 * r;
        const float l = quad_sum(l_partial[r]);
        if (t == 0) {
            ws_ml[2 * row] = m[r];
            ws_ml[2 * row + 1] = l;
        }
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            __stcg(reinterpret_cast<float2*>(ws_o + row * D + n * 8 + 2 * t),
                   make_float2(o[n][2 * r], o[n][2 * r + 1]));
        }
    }
}

template <typename T, int D, int BM, int NTHREADS>
__device__ __forceinline__ void split_combine(const float* ws_o, const float* ws_ml,
                                              unsigned int* counter, int n_splits,
                                              T* __restrict__ o_head, float* __restrict__ lse_head,
                                              int m0, int q_len, int64_t o_row_stride, int head_dim, int tid,
                                              float sink_log2 = -INFINITY) {
    __shared__ unsigned int is_last;
    __threadfence(); // this split's partials are visible device-wide before the ticket
    __syncthreads();
    if (tid == 0) {
        const unsigned int ticket = atomicAdd(counter, 1u);
        is_last = ticket == static_cast<unsigned int>(n_splits - 1);
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    // Rows first: the merged max, weights and denominator per row, kept in shared memory.
    __shared__ float row_max[BM];
    __shared__ float row_inv[BM];
    for (int row = tid; row < BM; row += NTHREADS) {
        const RowMerge mr = merge_row(n_splits, [&](int s) {
            return make_float2(__ldcg(ws_ml + s * BM * 2 + 2 * row), __ldcg(ws_ml + s * BM * 2 + 2 * row + 1));
        }, sink_log2);
        row_max[row] = mr.m_use;
        row_inv[row] = mr.inv_l;
        if (lse_head != nullptr && m0 + row < q_len) lse_head[m0 + row] = mr.lse;
    }
    __syncthreads();
    for (int i = tid; i < BM * D / 2; i += NTHREADS) {
        const int row = (2 * i) / D;
        const int d = (2 * i) % D;
        if (m0 + row >= q_len || d >= head_dim) continue;
        float a0 = 0.f, a1 = 0.f;
        for (int s = 0; s < n_splits; ++s) {
            const float w = exp2f(__ldcg(ws_ml + s * BM * 2 + 2 * row) - row_max[row]);
            const float2 x = __ldcg(reinterpret_cast<const float2*>(ws_o + s * BM * D + row * D + d));
            a0 += w * x.x;
            a1 += w * x.y;
        }
        const uint32_t packed = StorageTraits<T>::pack(a0 * row_inv[row], a1 * row_inv[row]);
        *reinterpret_cast<uint32_t*>(o_head + static_cast<int64_t>(m0 + row) * o_row_stride + d) = packed;
    }
    if (tid == 0) *counter = 0u; // ready for the next launch
}

} // namespace attn
