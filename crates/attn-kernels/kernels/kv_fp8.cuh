// An E4M3 KV cache (vLLM's `kv_cache_dtype="fp8"`, FlashInfer's FP8 decode): K and V are
// stored as one-byte codes with a dequantization scale per KV head (or one per tensor), and
// Q, O stay f16/bf16. The kernel streams the codes (half the bytes of an f16 cache) through
// its cp.async ring into byte stages, then widens one stage per key tile into the f16/bf16
// tile layout the unchanged MMA code reads (load.cuh's swizzle). Widening goes through
// fp8.cuh's integer trick, exact, with every value scaled by 2^-8; the kernel multiplies the
// scores by 2^8 · k_scale and the output by 2^8 · v_scale, so no rounding is added beyond
// the cache's own quantization.
#pragma once
#include "fp8.cuh"
#include "load.cuh"

namespace attn {

// Rows [row0, row0 + ROWS) of a [len, ·] code matrix (row stride in bytes) into a byte stage
// of ROWS × DK bytes, unswizzled (each thread later reads back whole 16-byte chunks); rows
// >= len and chunks >= d_chunks (D / 16) are zero-filled without being read.
template <int DK, int ROWS, int NTHREADS>
__device__ __forceinline__ void load_codes_async(uint8_t* stage, const uint8_t* __restrict__ src, int row0,
                                                 int len, int64_t row_stride, int d_chunks, int tid) {
    constexpr int kChunksPerRow = DK / 16;
#pragma unroll
    for (int i = tid; i < ROWS * kChunksPerRow; i += NTHREADS) {
        const int r = i / kChunksPerRow;
        const int c = i % kChunksPerRow;
        const int g = row0 + r;
        const bool in_bounds = g < len && c < d_chunks;
        const uint8_t* s = src + (in_bounds ? static_cast<int64_t>(g) * row_stride + c * 16 : 0);
        cp_async_16(smem_addr(stage + r * DK + c * 16), s, in_bounds);
    }
}

// The same from a paged cache: key g lives in page table[g / page_size], row g % page_size.
// Table entries are clamped into the cache (load.cuh's page_of), so a corrupt device-resident
// table reads wrong keys but never outside the allocation. `pages` are the thread's rows'
// pages of this tile, fetched one tile ahead (PageRows<DK / 2, ...>: 16-byte chunks of codes
// per row are half those of f16).
template <int DK, int ROWS, int NTHREADS>
__device__ __forceinline__ void load_codes_paged(uint8_t* stage, const uint8_t* __restrict__ base,
                                                 const PageRows<DK / 2, ROWS, NTHREADS>& pages,
                                                 const int* __restrict__ table, int row0, int len,
                                                 const PageDiv& div, int num_blocks, int64_t page_stride,
                                                 int64_t row_stride, int d_chunks, int tid) {
    using Rows = PageRows<DK / 2, ROWS, NTHREADS>;
    constexpr int kChunksPerRow = DK / 16;
    auto src = [&](int page, int row, int c) {
        return base + static_cast<int64_t>(page) * page_stride + static_cast<int64_t>(row) * row_stride + c * 16;
    };
    if constexpr (Rows::kColumn) {
        const int c = tid % kChunksPerRow;
        const bool col_in = c < d_chunks;
#pragma unroll
        for (int i = 0; i < Rows::kCount; ++i) {
            const int r = tid / kChunksPerRow + i * Rows::kRowStep;
            if (ROWS % Rows::kRowStep != 0 && r >= ROWS) break;
            const bool in_bounds = col_in && row0 + r < len;
            cp_async_16(smem_addr(stage + r * DK + c * 16), in_bounds ? src(pages.page[i], pages.row[i], c) : base,
                        in_bounds);
        }
    } else {
#pragma unroll
        for (int i = tid; i < ROWS * kChunksPerRow; i += NTHREADS) {
            const int r = i / kChunksPerRow;
            const int c = i % kChunksPerRow;
            const int g = row0 + r;
            const bool in_bounds = g < len && c < d_chunks;
            const int slot = div.slot(g);
            cp_async_16(smem_addr(stage + r * DK + c * 16),
                        in_bounds ? src(page_of(table, slot, num_blocks), g - slot * div.size, c) : base, in_bounds);
        }
    }
}

// f16x2 (from the widening trick) → T x2: identity for f16; for bf16 through f32, exact
// (the values carry at most 4 significant bits and sit well inside bf16's range).
template <typename T> __device__ __forceinline__ uint32_t f16x2_to(uint32_t h);
template <> __device__ __forceinline__ uint32_t f16x2_to<__half>(uint32_t h) { return h; }
template <> __device__ __forceinline__ uint32_t f16x2_to<__nv_bfloat16>(uint32_t h) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    return StorageTraits<__nv_bfloat16>::pack(f.x, f.y);
}

// Widens a ROWS × DK byte stage into a swizzled T tile (load.cuh's layout): each 16-byte
// chunk of codes becomes two 16-byte chunks of T. Every chunk of the bucket is written (zero
// codes → zeros), so columns past D read as zeros like load_tile_async's zero-fill.
template <typename T, int DK, int ROWS, int NTHREADS>
__device__ __forceinline__ void widen_codes(T* tile, const uint8_t* stage, int tid) {
    constexpr int kChunksPerRow = DK / 16;
#pragma unroll
    for (int i = tid; i < ROWS * kChunksPerRow; i += NTHREADS) {
        const int r = i / kChunksPerRow;
        const int c = i % kChunksPerRow;
        const uint4 codes = *reinterpret_cast<const uint4*>(stage + r * DK + c * 16);
        uint4 lo, hi;
        lo.x = f16x2_to<T>(cvt_lo(codes.x));
        lo.y = f16x2_to<T>(cvt_hi(codes.x));
        lo.z = f16x2_to<T>(cvt_lo(codes.y));
        lo.w = f16x2_to<T>(cvt_hi(codes.y));
        hi.x = f16x2_to<T>(cvt_lo(codes.z));
        hi.y = f16x2_to<T>(cvt_hi(codes.z));
        hi.z = f16x2_to<T>(cvt_lo(codes.w));
        hi.w = f16x2_to<T>(cvt_hi(codes.w));
        *reinterpret_cast<uint4*>(tile + swz<smem_pitch<DK>()>(r, 2 * c)) = lo;
        *reinterpret_cast<uint4*>(tile + swz<smem_pitch<DK>()>(r, 2 * c + 1)) = hi;
    }
}

// The dequantization factor of KV head kvh: 2^8 (the widening's loss) times its scale.
__device__ __forceinline__ float kv_descale(const float* __restrict__ scales, int per_head, int kvh) {
    return kCvtScale * __ldg(scales + (per_head ? kvh : 0));
}

} // namespace attn
