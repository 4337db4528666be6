// Global→shared tile loads (cp.async pipeline) and the swizzled shared-memory layout.
//
// A tile is ROWS × D elements of 2 bytes, stored as 16-byte chunks. Chunk c of row r lives
// at chunk slot c ^ (r & 7): the 8 rows an ldmatrix phase reads then fall in 8 different
// bank groups, so neither the cp.async writes nor the ldmatrix reads conflict (the XOR
// swizzle of CUTLASS/FlashAttention-2, needs D/8 >= 8 chunks per row, i.e. D >= 64).
#pragma once
#include "ptx.cuh"

namespace attn {

template <int D> __device__ __forceinline__ int swz(int row, int chunk) {
    static_assert(D % 64 == 0, "the swizzle needs at least 8 chunks of 16 bytes per row");
    return row * D + ((chunk ^ (row & 7)) << 3);
}

// Copies rows [row0, row0 + ROWS) of a [len, D] matrix into a swizzled tile; rows >= len are
// zero-filled without being read.
template <typename T, int D, int ROWS, int NTHREADS>
__device__ __forceinline__ void load_tile_async(T* tile, const T* __restrict__ src, int row0, int len,
                                                int tid) {
    constexpr int kChunksPerRow = D / 8;
    constexpr int kChunks = ROWS * kChunksPerRow;
#pragma unroll
    for (int i = tid; i < kChunks; i += NTHREADS) {
        const int r = i / kChunksPerRow;
        const int c = i % kChunksPerRow;
        const int g = row0 + r;
        const bool in_bounds = g < len;
        const T* s = src + (static_cast<int64_t>(in_bounds ? g : 0) * D + c * 8);
        cp_async_16(smem_addr(tile + swz<D>(r, c)), s, in_bounds);
    }
}

} // namespace attn
