// Hopper's asynchronous data movement and warp-specialization primitives (sm_90a): TMA tile
// loads completing on mbarriers, the mbarrier phase protocol, named barriers and
// `setmaxnreg`. Thin wrappers over the PTX ISA's instructions ("Tensor copy", "mbarrier",
// "bar", "setmaxnreg"), the same set CUTLASS's `cute/arch/copy_sm90_tma.hpp` and
// `cutlass/arch/barrier.h` wrap.
#pragma once
#include "ptx.cuh"

namespace attn {

// A TMA descriptor (`CUtensorMap`, built on the host by cuTensorMapEncodeTiled): 128 opaque
// bytes. Passed as a `__grid_constant__` kernel parameter so its address is a param-space
// address TMA can read; the alignment is CUDA 13's (CUDA 12 asks for 64).
struct alignas(128) TmaDesc {
    uint64_t opaque[16];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_SM90_ONLY(...) __VA_ARGS__
#else
#define ATTN_SM90_ONLY(...) __trap();
#endif

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
    ATTN_SM90_ONLY(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));)
}

// Makes the barrier inits visible to the async proxy (TMA's complete_tx) before first use.
__device__ __forceinline__ void mbar_fence_init() {
    ATTN_SM90_ONLY(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");)
}

// One arrival that also announces `bytes` of TMA traffic the current phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    ATTN_SM90_ONLY(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
                                "r"(bytes)
                                : "memory");)
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    ATTN_SM90_ONLY(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");)
}

// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, and
// waiting for parity 1 ("the phase before") returns at once, which is how a producer's first
// pass over an empty ring needs no special case.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    ATTN_SM90_ONLY(asm volatile("{\n"
                                ".reg .pred done;\n"
                                "WAIT:\n"
                                "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                                "@!done bra WAIT;\n"
                                "}\n" ::"r"(smem_addr(bar)),
                                "r"(parity)
                                : "memory");)
}

__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc* desc) {
    ATTN_SM90_ONLY(asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(desc)) : "memory");)
}

// Loads the box at coordinates (c0 innermost … c3) of a rank-4 tensor into shared memory;
// the bytes complete on `bar`. Out-of-range elements are written as zeros (and counted).
__device__ __forceinline__ void tma_load_4d(void* dst, const TmaDesc* desc, uint64_t* bar, int c0, int c1, int c2,
                                            int c3) {
    ATTN_SM90_ONLY(asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                                " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(smem_addr(dst)),
                                "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
                                "r"(c2), "r"(c3)
                                : "memory");)
}

// Named barriers (ids 1–15; 0 is __syncthreads). `sync` waits until `threads` threads have
// arrived (its own warp counted); `arrive` counts without waiting.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Warpgroup register reallocation (every warp of the warpgroup executes it).
template <int REGS> __device__ __forceinline__ void setmaxnreg_dec() {
    ATTN_SM90_ONLY(asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));)
}

template <int REGS> __device__ __forceinline__ void setmaxnreg_inc() {
    ATTN_SM90_ONLY(asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));)
}

// Bulk (non-tensor) copies, sm_90: `bytes` (a multiple of 16, both addresses 16-byte
// aligned) from global memory into shared memory, completing on `bar` like a TMA load.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    ATTN_SM90_ONLY(asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                                    smem_addr(dst)),
                                "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_addr(bar))
                                : "memory");)
}

// dst[i] += src[i] over `bytes` of f32, shared → global, done by the L2 (one bulk request
// instead of a red per element: FlashAttention-3's dQ accumulation). Completes in the
// thread's bulk group; the shared source must not change before `bulk_wait_read`.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
    ATTN_SM90_ONLY(asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                                    reinterpret_cast<uint64_t>(dst)),
                                "r"(smem_addr(src)), "r"(bytes)
                                : "memory");)
}

__device__ __forceinline__ void bulk_commit() {
    ATTN_SM90_ONLY(asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");)
}

// Waits until at most N of this thread's bulk groups still read their shared sources.
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    ATTN_SM90_ONLY(asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");)
}

// Waits until at most N of this thread's bulk groups are incomplete (their writes done).
template <int N> __device__ __forceinline__ void bulk_wait() {
    ATTN_SM90_ONLY(asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");)
}

// Orders this thread's generic-proxy global accesses against its async-proxy (bulk) ones.
__device__ __forceinline__ void fence_proxy_async_global() {
    ATTN_SM90_ONLY(asm volatile("fence.proxy.async.global;\n" ::: "memory");)
}

#undef ATTN_SM90_ONLY

} // namespace attn
