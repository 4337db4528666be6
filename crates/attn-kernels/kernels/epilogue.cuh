// Epilogue: normalize O by the row sums, write LSE, stage O through the warp's own (now
// unused) rows of the Q tile in shared memory, then store 16-byte coalesced rows.
// `out_scale` multiplies O (the FP8 kernel's V descale); `m` is in the base-2 scaled domain.
#pragma once
#include "load.cuh"

namespace attn {

// PITCH: the staging tile's row pitch (elements); NO = DK / 8 n-tiles of the accumulator, of
// which the first d_chunks columns of 8 are stored to rows of stride o_row_stride.
// SINK (the FEATURES kernels): an attention sink of logit sink_log2 (base 2; -inf: none) joins
// each row's max and denominator but contributes no value, as attn-ref defines it; a row
// with no visible key keeps O = 0 and LSE = -inf even then.
// DIRECT: O goes from the registers straight to global memory (4-byte stores, a warp's
// covering 8 rows × 16 bytes each), leaving shared memory alone; q_tile_smem is unused.
template <typename T, int PITCH, int NO, bool SINK = false, bool DIRECT = false>
__device__ __forceinline__ void write_output(float (&o)[NO][4], const float (&m)[2],
                                             const float (&l_partial)[2], T* q_tile_smem,
                                             T* __restrict__ o_head, float* __restrict__ lse_head,
                                             int warp_row0, int q_row0, int q_len, int lane,
                                             int o_row_stride, int d_chunks, float out_scale = 1.f,
                                             float sink_log2 = -INFINITY) {
    const int g = lane >> 2;
    const int t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = quad_sum(l_partial[r]);
        float mr = m[r];
        float gain = out_scale;
        if constexpr (SINK) {
            if (l != 0.f) {
                // max(m, sink) with NaN kept (fmaxf would drop a NaN m).
                const float m_new = mr != mr ? mr : fmaxf(mr, sink_log2);
                const float corr = exp2f(mr - m_new);
                l = l * corr + exp2f(sink_log2 - m_new);
                gain *= corr;
                mr = m_new;
            }
        }
        // l == 0: every key of the row is masked → O = 0 and LSE = -inf (FlashAttention's
        // convention). A NaN l (NaN inputs) stays NaN in both.
        const float inv = l == 0.f ? 0.f : gain / l;
        const int row = warp_row0 + g + 8 * r;
        if (lse_head != nullptr && t == 0 && q_row0 + row < q_len) {
            lse_head[q_row0 + row] = l == 0.f ? -INFINITY : (mr + log2f(l)) * kLn2;
        }
        if constexpr (DIRECT) {
            if (q_row0 + row < q_len) {
                T* dst = o_head + static_cast<int64_t>(q_row0 + row) * o_row_stride + 2 * t;
#pragma unroll
                for (int n = 0; n < NO; ++n) {
                    if (n < d_chunks)
                        *reinterpret_cast<uint32_t*>(dst + 8 * n) =
                            StorageTraits<T>::pack(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
                }
            }
        } else {
#pragma unroll
            for (int n = 0; n < NO; ++n) {
                const uint32_t packed = StorageTraits<T>::pack(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
                *reinterpret_cast<uint32_t*>(q_tile_smem + swz<PITCH>(row, n) + 2 * t) = packed;
            }
        }
    }
    if constexpr (DIRECT) return;
    __syncwarp();
    constexpr int kChunksPerRow = NO;
    if constexpr (32 % kChunksPerRow == 0) {
        // Each lane keeps one chunk column and walks its rows with a running pointer (a
        // runtime row stride would otherwise leave one hoisted offset per unrolled row live).
        constexpr int kRowStep = 32 / kChunksPerRow;
        const int c = lane % kChunksPerRow;
        int row = warp_row0 + lane / kChunksPerRow;
        T* dst = o_head + static_cast<int64_t>(q_row0 + row) * o_row_stride + c * 8;
#pragma unroll
        for (int i = 0; i < 16 / kRowStep; ++i, row += kRowStep, dst += kRowStep * o_row_stride) {
            if (q_row0 + row < q_len && c < d_chunks)
                *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(q_tile_smem + swz<PITCH>(row, c));
        }
    } else {
#pragma unroll
        for (int i = lane; i < 16 * kChunksPerRow; i += 32) {
            const int row = warp_row0 + i / kChunksPerRow;
            const int c = i % kChunksPerRow;
            if (q_row0 + row < q_len && c < d_chunks) {
                const uint4 v = *reinterpret_cast<const uint4*>(q_tile_smem + swz<PITCH>(row, c));
                *reinterpret_cast<uint4*>(o_head + static_cast<int64_t>(q_row0 + row) * o_row_stride + c * 8) = v;
            }
        }
    }
}

} // namespace attn
