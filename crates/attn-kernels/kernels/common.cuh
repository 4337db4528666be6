// Types shared by every kernel unit: the launch parameters (mirrored by `FwdParams` in
// src/launch.rs — keep the two in the same order) and the storage-type traits.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <type_traits>

namespace attn {

// The score-modifying features (score_mod.cuh), read only by the FEATURES entry points; the
// launcher writes their "off" values for every other kernel. The two arrays live in the
// launcher's device memory (src/launch.rs `FeatureBuffers`).
struct FwdFeatures {
    const float* alibi;     // ALiBi slopes / softmax scale (raw-score units); null: off
    const float* sinks;     // sink logits · log2(e), [Hq]; null: off
    int window_left;        // keys j >= i + Sk - Sq - left are visible; -1: unbounded
    int window_right;       // keys j <= i + Sk - Sq + right are visible; -1: unbounded
    int alibi_batch_stride; // 0 (slopes [Hq]) or Hq (slopes [B, Hq])
    float softcap_in;       // scale / c: raw scores become tanh(s · scale / c); 0: off
    const float* k_descale; // E4M3 KV cache (KV_FP8 entries): key scales, [Hkv] or [1]
    const float* v_descale; // value scales, likewise
    int descale_per_head;   // 1: scales [Hkv]; 0: one scale for every head
};

// The sequences of a batch whose entries differ in length (read only by the FEATURES entry
// points, seqs.cuh; all null/zero elsewhere): FlashAttention's varlen (`cu_seqlens`), its KV
// cache lengths (`seqused_k`) and a paged KV cache (`block_table`, vLLM's PagedAttention
// layout). Every device-resident index is clamped to the launch's host-checked sizes before
// it addresses memory, so a corrupt index gives wrong rows, never an out-of-bounds access.
struct FwdSeqs {
    const int* cu_q;        // [B + 1] row offsets of packed Q/O (and of LSE [Hq, total_q]); null: dense
    const int* cu_k;        // [B + 1] row offsets of packed K/V; null: dense or paged
    const int* seqused_k;   // [B] keys each sequence uses; null: all (kv_len, or cu_k's lengths)
    const int* block_table; // [B, max_blocks] pages of each sequence (PAGED entries only)
    int total_q;            // rows of packed Q/O: the bound of cu_q's entries
    int total_k;            // rows of packed K/V: the bound of cu_k's entries
    int max_blocks;         // block-table entries per sequence
    int page_size;          // keys per page, a multiple of 16
    int num_blocks;         // pages in the cache: the bound of block-table entries
    int bottom_right;       // causal alignment per sequence: diag_offset = Sk_b − Sq_b (1) or 0
    unsigned page_mul;      // g / page_size = umulhi(g, page_mul) >> page_shift for 0 <= g < 2^31
    int page_shift;         //   (magic-number division, FlashAttention's use of cutlass::FastDivmod)
    int flat_block_m;       // packed Q on a flat grid: its query-block rows (0: grid.z is the batch)
    int reserved;           // keeps the struct's size a multiple of 8 (the Rust mirror's)
};

// Scalars of one forward launch. Pointers are passed as separate kernel arguments so that
// the Rust side keeps cudarc's per-buffer stream tracking.
struct FwdParams {
    int batch;
    int q_heads;
    int kv_heads;
    int q_len;
    int kv_len;
    int group;        // q_heads / kv_heads: query head h reads KV head h / group
    int diag_offset;  // causal: key j is visible to query i iff j <= i + diag_offset
    int dump_count;   // (b, h, q_tile) triples in dump_tiles (debug kernels only)
    float scale_log2; // softmax scale * log2(e): the softmax runs in base 2 (exp2 is one MUFU op)
    float scale;      // softmax scale, for debug dumps in the natural-log domain
    int n_splits;     // split-KV kernels: key splits per query block (grid.x = q_tiles * n_splits)
    int head_dim;     // the problem's D; the kernel's bucket may be larger (columns past D are
                      // zero-filled on load and skipped on store)
    // Element strides (batch, head, row) of each tensor; the last dim is contiguous. Any
    // layout: [B,H,S,D], [B,S,H,D], views into a larger KV cache.
    int64_t q_stride[3];
    int64_t k_stride[3];
    int64_t v_stride[3];
    int64_t o_stride[3];
    FwdFeatures feat;
    FwdSeqs seqs;
};

// Start of head h of batch b in a tensor with strides `st` (batch, head, row).
template <typename T>
__device__ __forceinline__ T* head_ptr(T* base, const int64_t (&st)[3], int b, int h) {
    return base + static_cast<int64_t>(b) * st[0] + static_cast<int64_t>(h) * st[1];
}

constexpr float kLn2 = 0.693147180559945309f;

// A compile-time flag passed by value, so that a generic lambda can be instantiated for
// both values of a runtime test and the test taken once, outside it.
template <bool V> struct BoolTag {
    static constexpr bool value = V;
};

template <typename T> struct StorageTraits;

template <> struct StorageTraits<__half> {
    // Two f32 values rounded to nearest-even and packed into one 32-bit register.
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&h);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t x) {
        return __half22float2(*reinterpret_cast<__half2*>(&x));
    }
};

template <> struct StorageTraits<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&h);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t x) {
        return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&x));
    }
};

} // namespace attn
