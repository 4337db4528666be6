// V for the FP8 kernel: Vᵀ with the keys of every 32-key group permuted.
//
// FP8 MMAs take B "column-major" at byte granularity, and ldmatrix can only transpose 16-bit
// elements, so P·V needs V with keys contiguous: Vᵀ, [B, H, D, S_pad]. FlashAttention-3
// transposes V inside its kernel; here it is one memory-bound pass (read V once, write Vᵀ
// once) before the attention kernel, on the same stream.
//
// The permutation lets P go from the S accumulators to the A operand without shuffles: in
// the m16n8 accumulator a thread holds keys 2t, 2t+1 of each 8-key n-tile, while the k32 A
// operand wants 4 consecutive k indices 4t..4t+3. The k order of a sum is free, so stored
// position j = 16h + 4t + i of a 32-key group holds key 16h + 2t + i (i < 2) or
// 16h + 8 + 2t + (i - 2) (i >= 2) — exactly the keys the thread already holds. The same
// order also makes the converting (f16) path's B fragments line up (see fwd_fp8_kernel.cuh).
// Keys past kv_len are zero.
#pragma once
#include "common.cuh"

namespace attn {

__host__ __device__ constexpr int fp8_key_of_slot(int j) {
    const int h = j >> 4, t = (j >> 2) & 3, i = j & 3;
    return 16 * h + (i < 2 ? 2 * t + i : 8 + 2 * t + (i - 2));
}

constexpr int kVtKeys = 64; // keys per CTA of the transpose

// grid (kv_pad / 64, B·H_kv); 256 threads. v: head (b, h) at b·stride[0] + h·stride[1], rows
// stride[2] apart (any layout); vt: [B·H_kv, D, kv_pad].
template <int D>
__device__ __forceinline__ void fp8_v_transpose(const uint8_t* __restrict__ v, uint8_t* __restrict__ vt,
                                                int kv_len, int kv_pad, int kv_heads, int64_t batch_stride,
                                                int64_t head_stride, int64_t row_stride) {
    __shared__ __align__(16) uint8_t tile[kVtKeys][D + 4];
    const int key0 = blockIdx.x * kVtKeys;
    const int64_t bh = blockIdx.y;
    const uint8_t* src = v + (bh / kv_heads) * batch_stride + (bh % kv_heads) * head_stride;
    constexpr int kChunksPerRow = D / 16;
    for (int i = threadIdx.x; i < kVtKeys * kChunksPerRow; i += blockDim.x) {
        const int r = i / kChunksPerRow, c = i % kChunksPerRow;
        const int key = key0 + r;
        uint4 x = make_uint4(0, 0, 0, 0);
        if (key < kv_len) x = *reinterpret_cast<const uint4*>(src + static_cast<int64_t>(key) * row_stride + c * 16);
        const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) *reinterpret_cast<uint32_t*>(&tile[r][c * 16 + 4 * j]) = w[j];
    }
    __syncthreads();
    uint8_t* dst = vt + bh * D * kv_pad;
    // Each thread writes 4 stored positions (one 32-bit word) of one row d.
    for (int i = threadIdx.x; i < D * (kVtKeys / 4); i += blockDim.x) {
        const int d = i / (kVtKeys / 4), w = i % (kVtKeys / 4);
        uint32_t out = 0;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const int j = 4 * w + b;
            const int key = (j & ~31) + fp8_key_of_slot(j & 31);
            out |= static_cast<uint32_t>(tile[key][d]) << (8 * b);
        }
        *reinterpret_cast<uint32_t*>(dst + static_cast<int64_t>(d) * kv_pad + key0 + 4 * w) = out;
    }
}

} // namespace attn

#define ATTN_FP8_V_TRANSPOSE_ENTRY(NAME, D)                                                         \
    extern "C" __global__ void __launch_bounds__(256)                                               \
        NAME(const uint8_t* __restrict__ v, uint8_t* __restrict__ vt, int kv_len, int kv_pad,       \
             int kv_heads, int64_t batch_stride, int64_t head_stride, int64_t row_stride) {         \
        attn::fp8_v_transpose<D>(v, vt, kv_len, kv_pad, kv_heads, batch_stride, head_stride,        \
                                 row_stride);                                                       \
    }
