// Global→shared tile loads (cp.async pipeline) and the swizzled shared-memory layout.
//
// A tile is ROWS × D elements of 2 bytes, stored as 16-byte chunks. Chunk c of row r lives
// at chunk slot c ^ (r & 7): the 8 rows an ldmatrix phase reads then fall in 8 different
// bank groups, so neither the cp.async writes nor the ldmatrix reads conflict (the XOR
// swizzle of CUTLASS/FlashAttention-2, needs a row pitch of at least 8 chunks: buckets that
// are not a multiple of 64 elements are stored with their pitch rounded up, and the padding
// chunks are never read).
#pragma once
#include "ptx.cuh"

namespace attn {

// Shared-memory row pitch (elements) of a head-dim bucket DK: a multiple of 64.
template <int DK> __host__ __device__ constexpr int smem_pitch() { return (DK + 63) / 64 * 64; }

template <int PITCH> __device__ __forceinline__ int swz(int row, int chunk) {
    static_assert(PITCH % 64 == 0, "the swizzle needs at least 8 chunks of 16 bytes per row");
    return row * PITCH + ((chunk ^ (row & 7)) << 3);
}

// Copies rows [row0, row0 + ROWS) and the first DK columns of a [len, ·] matrix with row
// stride `row_stride` into a swizzled tile; rows >= len and 16-byte chunks >= d_chunks (the
// problem's D / 8) are zero-filled without being read.
template <typename T, int DK, int ROWS, int NTHREADS>
__device__ __forceinline__ void load_tile_async(T* tile, const T* __restrict__ src, int row0, int len,
                                                int64_t row_stride, int d_chunks, int tid) {
    constexpr int kChunksPerRow = DK / 8;
    constexpr int kChunks = ROWS * kChunksPerRow;
    // The running-pointer walk fully unrolls and keeps a 64-bit pointer and step live; it
    // spilled where registers were already at the edge (ptxas: the D = 256 two-warp kernels,
    // 32 rows per thread; the D = 128 128×32 four-warp kernels; the D = 32 kernels), so it
    // is used for tiles of 64+ rows, 8+ chunks per row and at most 8 rows per thread — which
    // covers the measured D = 64/128 defaults — and the rest keep the indexed loop.
    constexpr bool kWalk = NTHREADS % kChunksPerRow == 0 && kChunksPerRow >= 8 && ROWS >= 64 &&
                           ROWS / (NTHREADS / kChunksPerRow) <= 8;
    if constexpr (kWalk) {
        // Each thread keeps one chunk column and walks its rows with a running pointer: the
        // column predicate is loop-invariant and each step is one 64-bit add, where indexing
        // every chunk afresh cost a 64-bit multiply-add and a divide by the chunk count per
        // 16-byte copy (~10% more instructions in the D = 64/128 kernels, docs/PERF.md).
        constexpr int kRowStep = NTHREADS / kChunksPerRow;
        const int c = tid % kChunksPerRow;
        const int r0 = tid / kChunksPerRow;
        const bool col_in = c < d_chunks;
        const T* s = src + static_cast<int64_t>(row0 + r0) * row_stride + (col_in ? c * 8 : 0);
        const int64_t step = static_cast<int64_t>(kRowStep) * row_stride;
#pragma unroll
        for (int i = 0; i < (ROWS + kRowStep - 1) / kRowStep; ++i) {
            const int r = r0 + i * kRowStep;
            if (ROWS % kRowStep != 0 && r >= ROWS) break;
            const bool in_bounds = col_in && row0 + r < len;
            // Out-of-range chunks read nothing (src-size 0); point them at the tensor start.
            cp_async_16(smem_addr(tile + swz<smem_pitch<DK>()>(r, c)), in_bounds ? s : src, in_bounds);
            s += step;
        }
    } else {
#pragma unroll
        for (int i = tid; i < kChunks; i += NTHREADS) {
            const int r = i / kChunksPerRow;
            const int c = i % kChunksPerRow;
            const int g = row0 + r;
            const bool in_bounds = g < len && c < d_chunks;
            const T* s = src + (static_cast<int64_t>(g < len ? g : 0) * row_stride + (in_bounds ? c * 8 : 0));
            cp_async_16(smem_addr(tile + swz<smem_pitch<DK>()>(r, c)), s, in_bounds);
        }
    }
}

// A paged K/V cache (vLLM's PagedAttention layout, FlashAttention's `block_table`): key g of
// the sequence lives in page table[g / page_size], row g % page_size, so a tile may straddle
// pages and pages may lie anywhere in the cache. A table entry outside [0, num_blocks) is
// clamped into the cache: a corrupt device-resident table reads the wrong keys but never
// outside the allocation (the launcher checked num_blocks pages).
// Key g's page slot and its row in the page, without a runtime division (a 32-bit division
// by a runtime value is ~20 instructions; per row of every tile it tripled the paged
// decode's instruction count, ncu in docs/PERF.md): q = umulhi(g, mul) >> shift, exact for
// 0 <= g < 2^31 with the host's `page_divisor` constants.
struct PageDiv {
    int size;
    unsigned mul;
    int shift;
    __device__ __forceinline__ int slot(int g) const { return static_cast<int>(__umulhi(static_cast<unsigned>(g), mul) >> shift); }
};

__device__ __forceinline__ int page_of(const int* __restrict__ table, int slot, int num_blocks) {
    return min(max(__ldg(table + slot), 0), num_blocks - 1);
}

// The pages of one thread's rows of a ROWS-key tile, where the chunk count divides the block
// (each thread keeps one chunk column, rows kRowStep apart). The kernel fetches them one
// tile ahead (`fetch` right after issuing a tile's copies), so the table lookup's latency is
// not on the path that issues the next tile's cp.async: measured 2.6× the dense cache's time
// when looked up in line (docs/PERF.md, "varlen and paged KV").
template <int DK, int ROWS, int NTHREADS>
struct PageRows {
    static constexpr int kChunksPerRow = DK / 8;
    static constexpr bool kColumn = NTHREADS % kChunksPerRow == 0;
    static constexpr int kRowStep = kColumn ? NTHREADS / kChunksPerRow : NTHREADS;
    static constexpr int kCount = kColumn ? (ROWS + kRowStep - 1) / kRowStep : 1;
    int page[kCount];
    int row[kCount]; // the key's row inside its page

    __device__ __forceinline__ void fetch(const int* __restrict__ table, int row0, int len, const PageDiv& div,
                                          int num_blocks, int tid) {
        if constexpr (kColumn) {
#pragma unroll
            for (int i = 0; i < kCount; ++i) {
                const int r = tid / kChunksPerRow + i * kRowStep;
                const int g = row0 + r;
                const int slot = div.slot(g);
                page[i] = r < ROWS && g < len ? page_of(table, slot, num_blocks) : 0;
                row[i] = g - slot * div.size;
            }
        }
    }
};

// load_tile_async for a paged cache: rows [row0, row0 + ROWS) of the sequence, `pages` the
// thread's rows' pages of this tile (PageRows::fetch). Buckets whose chunk count does not
// divide the block (D = 160, 192, 224) look pages up chunk by chunk instead (the chunks of a
// row hit the same table entry in L1).
template <typename T, int DK, int ROWS, int NTHREADS>
__device__ __forceinline__ void load_tile_paged(T* tile, const T* __restrict__ base,
                                                const PageRows<DK, ROWS, NTHREADS>& pages,
                                                const int* __restrict__ table, int row0, int len, const PageDiv& div,
                                                int num_blocks, int64_t page_stride, int64_t row_stride, int d_chunks,
                                                int tid) {
    using Rows = PageRows<DK, ROWS, NTHREADS>;
    constexpr int kChunksPerRow = DK / 8;
    auto src = [&](int page, int row, int c) {
        return base + static_cast<int64_t>(page) * page_stride + static_cast<int64_t>(row) * row_stride + c * 8;
    };
    if constexpr (Rows::kColumn) {
        const int c = tid % kChunksPerRow;
        const bool col_in = c < d_chunks;
#pragma unroll
        for (int i = 0; i < Rows::kCount; ++i) {
            const int r = tid / kChunksPerRow + i * Rows::kRowStep;
            if (ROWS % Rows::kRowStep != 0 && r >= ROWS) break;
            const bool in_bounds = col_in && row0 + r < len;
            cp_async_16(smem_addr(tile + swz<smem_pitch<DK>()>(r, c)),
                        in_bounds ? src(pages.page[i], pages.row[i], c) : base, in_bounds);
        }
    } else {
#pragma unroll
        for (int i = tid; i < ROWS * kChunksPerRow; i += NTHREADS) {
            const int r = i / kChunksPerRow;
            const int c = i % kChunksPerRow;
            const int g = row0 + r;
            const bool in_bounds = g < len && c < d_chunks;
            const int slot = div.slot(g);
            cp_async_16(smem_addr(tile + swz<smem_pitch<DK>()>(r, c)),
                        in_bounds ? src(page_of(table, slot, num_blocks), g - slot * div.size, c) : base,
                        in_bounds);
        }
    }
}

} // namespace attn
