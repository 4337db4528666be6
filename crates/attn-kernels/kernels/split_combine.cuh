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

// Whether this CTA is the last of its block's splits to finish: every one of the threads
// (index `tid`) calls it after writing its partials; `sync()` is a barrier over exactly those
// threads and `flag` one word of shared memory. The last one's threads then see every split's
// partials.
template <typename Sync>
__device__ __forceinline__ bool last_split(unsigned int* counter, int n_splits, int tid, unsigned int* flag,
                                           Sync sync) {
    __threadfence(); // this split's partials are visible device-wide before the ticket
    sync();
    if (tid == 0) *flag = atomicAdd(counter, 1u) == static_cast<unsigned int>(n_splits - 1);
    sync();
    if (*flag == 0u) return false;
    __threadfence();
    return true;
}

// The last split's merge of rows [m0, m0 + BM) of one head: the merged max, weights and
// denominator per row (kept in `row_max` / `row_inv`, BM floats of shared memory each), then
// O and LSE, by `nthreads` threads with `sync()` between the passes; resets the ticket for the
// next launch. Used by the mma.sync and decode kernels (`split_combine`) and by the Hopper
// kernel's split entries, which run it on their consumer warpgroups.
template <typename T, int D, int BM, typename Sync>
__device__ __forceinline__ void merge_splits(const float* ws_o, const float* ws_ml, unsigned int* counter,
                                             int n_splits, T* __restrict__ o_head, float* __restrict__ lse_head,
                                             int m0, int q_len, int64_t o_row_stride, int head_dim, int tid,
                                             int nthreads, float* row_max, float* row_inv, Sync sync,
                                             float sink_log2) {
    for (int row = tid; row < BM; row += nthreads) {
        const RowMerge mr = merge_row(n_splits, [&](int s) {
            return make_float2(__ldcg(ws_ml + s * BM * 2 + 2 * row), __ldcg(ws_ml + s * BM * 2 + 2 * row + 1));
        }, sink_log2);
        row_max[row] = mr.m_use;
        row_inv[row] = mr.inv_l;
        if (lse_head != nullptr && m0 + row < q_len) lse_head[m0 + row] = mr.lse;
    }
    sync();
    // O: each thread takes quads (4 columns of a row, one float4 per split) and issues the
    // loads of up to kBatch splits before it accumulates them. Written plainly (one split and
    // column pair per step) every load was an L2 round trip on the thread's critical path:
    // 8 splits × 32 pairs per thread for a 128 × 128 block, most of a chunked prefill's time
    // (docs/PERF.md, run 344). One quad per step (not two) keeps the mma.sync feature entries
    // in their register budget, and four splits per batch above D = 128 the Hopper D = 256
    // feature entry in its spill allowance (eight spilled one more value, CUDA 13.0). The sums
    // run in split order with the same operations as before, so the bits do not change.
    constexpr int kBatch = D > 128 ? 4 : 8;
    for (int i = tid; i < BM * D / 4; i += nthreads) {
        const int row = (4 * i) / D;
        const int col = (4 * i) % D;
        if (m0 + row >= q_len || col >= head_dim) continue;
        float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
        for (int s0 = 0; s0 < n_splits; s0 += kBatch) {
            float mv[kBatch];
            float4 xv[kBatch];
#pragma unroll
            for (int k = 0; k < kBatch; ++k) {
                if (s0 + k < n_splits) {
                    mv[k] = __ldcg(ws_ml + (s0 + k) * BM * 2 + 2 * row);
                    xv[k] = __ldcg(reinterpret_cast<const float4*>(ws_o + (s0 + k) * BM * D + row * D + col));
                }
            }
#pragma unroll
            for (int k = 0; k < kBatch; ++k) {
                if (s0 + k < n_splits) {
                    const float w = exp2f(mv[k] - row_max[row]);
                    a0 += w * xv[k].x;
                    a1 += w * xv[k].y;
                    a2 += w * xv[k].z;
                    a3 += w * xv[k].w;
                }
            }
        }
        const float inv = row_inv[row];
        const uint2 packed =
            make_uint2(StorageTraits<T>::pack(a0 * inv, a1 * inv), StorageTraits<T>::pack(a2 * inv, a3 * inv));
        *reinterpret_cast<uint2*>(o_head + static_cast<int64_t>(m0 + row) * o_row_stride + col) = packed;
    }
    if (tid == 0) *counter = 0u; // ready for the next launch
}

// The whole block's epilogue of a split: the ticket, then, in the last CTA, the merge.
template <typename T, int D, int BM, int NTHREADS>
__device__ __forceinline__ void split_combine(const float* ws_o, const float* ws_ml,
                                              unsigned int* counter, int n_splits,
                                              T* __restrict__ o_head, float* __restrict__ lse_head,
                                              int m0, int q_len, int64_t o_row_stride, int head_dim, int tid,
                                              float sink_log2 = -INFINITY) {
    __shared__ unsigned int is_last;
    __shared__ float row_max[BM];
    __shared__ float row_inv[BM];
    auto sync = [] { __syncthreads(); };
    if (!last_split(counter, n_splits, tid, &is_last, sync)) return;
    merge_splits<T, D, BM>(ws_o, ws_ml, counter, n_splits, o_head, lse_head, m0, q_len, o_row_stride, head_dim, tid,
                           NTHREADS, row_max, row_inv, sync, sink_log2);
}

} // namespace attn
