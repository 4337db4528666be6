// Appending new K/V rows to a paged KV cache at given slots (vLLM's `reshape_and_cache`,
// csrc/cache_kernels.cu): token t's rows of every KV head go to page slot[t] / page_size,
// row slot[t] % page_size. A negative slot is padding and writes nothing; so does a slot past
// the cache (device-resident slots cannot be checked without a sync, so they are bounded
// here instead). With an E4M3 cache the rows are quantized on the way: code = RNE-satfinite(x /
// scale), the scale per KV head or one per tensor, bit for bit attn-quant's encoding (IEEE
// division, not fast-math's).
#pragma once
#include <cuda_fp8.h>
#include "common.cuh"

namespace attn {

// Strides in elements; source `[tokens, Hkv, D]`, cache `[pages, page_size, Hkv, D]` views
// (page, head and row strides for each of K and V).
struct KvAppendParams {
    int64_t src_head[2], src_row[2];
    int64_t cache_page[2], cache_head[2], cache_row[2];
    int tokens, kv_heads, head_dim, page_size, num_slots;
    int scale_per_head; // E4M3 caches: scales [Hkv] (1) or [1] (0)
};

// One CTA per token, its threads over (tensor, head, 8-element chunk).
template <typename T, bool E4M3>
__device__ __forceinline__ void kv_append(const T* __restrict__ k, const T* __restrict__ v, void* __restrict__ k_cache,
                                          void* __restrict__ v_cache, const int* __restrict__ slots,
                                          const float* __restrict__ k_scale, const float* __restrict__ v_scale,
                                          const KvAppendParams& p) {
    const int t = blockIdx.x;
    const int slot = slots[t];
    if (slot < 0 || slot >= p.num_slots) return; // padding, or an index outside the cache
    const int page = slot / p.page_size;
    const int row = slot - page * p.page_size;
    const int chunks = p.head_dim >> 3;
    const int per_tensor = p.kv_heads * chunks;
    for (int i = threadIdx.x; i < 2 * per_tensor; i += blockDim.x) {
        const int which = i >= per_tensor; // 0: K, 1: V
        const int j = i - which * per_tensor;
        const int h = j / chunks;
        const int c = (j - h * chunks) * 8;
        // Parameter arrays indexed by selects, not by `which` (a dynamic index would copy the
        // parameters to a stack frame).
        const int64_t src_row = which ? p.src_row[1] : p.src_row[0];
        const int64_t src_head = which ? p.src_head[1] : p.src_head[0];
        const int64_t cache_page = which ? p.cache_page[1] : p.cache_page[0];
        const int64_t cache_head = which ? p.cache_head[1] : p.cache_head[0];
        const int64_t cache_row = which ? p.cache_row[1] : p.cache_row[0];
        const T* src = (which ? v : k) + t * src_row + h * src_head + c;
        const int64_t dst = page * cache_page + h * cache_head + row * cache_row + c;
        const uint4 x = *reinterpret_cast<const uint4*>(src);
        if constexpr (E4M3) {
            const float* scales = which ? v_scale : k_scale;
            const float s = scales[p.scale_per_head ? h : 0];
            const uint32_t words[4] = {x.x, x.y, x.z, x.w};
            uint16_t c2[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float2 f = StorageTraits<T>::unpack(words[q]); // elements 2q (x), 2q + 1 (y)
                c2[q] = __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(f.x, s), __fdiv_rn(f.y, s)), __NV_SATFINITE,
                                                 __NV_E4M3);
            }
            const uint2 codes = make_uint2(c2[0] | (static_cast<uint32_t>(c2[1]) << 16),
                                           c2[2] | (static_cast<uint32_t>(c2[3]) << 16));
            *reinterpret_cast<uint2*>(static_cast<uint8_t*>(which ? v_cache : k_cache) + dst) = codes;
        } else {
            *reinterpret_cast<uint4*>(static_cast<T*>(which ? v_cache : k_cache) + dst) = x;
        }
    }
}

} // namespace attn

#define ATTN_KV_APPEND_ENTRY(NAME, T, E4M3)                                                                          \
    extern "C" __global__ void __launch_bounds__(128)                                                              \
        NAME(const T* __restrict__ k, const T* __restrict__ v, void* __restrict__ k_cache, void* __restrict__ v_cache, \
             const int* __restrict__ slots, const float* __restrict__ k_scale, const float* __restrict__ v_scale,  \
             const attn::KvAppendParams p) {                                                                       \
        attn::kv_append<T, E4M3>(k, v, k_cache, v_cache, slots, k_scale, v_scale, p);                              \
    }
