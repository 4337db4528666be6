// Hopper warpgroup MMA (wgmma, sm_90a only): shared-memory matrix descriptors, the E4M3
// m64nNk32 instructions the FP8 kernel uses (N ∈ {64, 128}), and the declaration of the
// f16/bf16 m64nNk16 instructions, whose per-N operand lists src/catalog.rs generates into the
// units that use them (`Wgmma16`).
//
// Operand layouts (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
// - The f32 accumulator of a warpgroup's 64×N tile gives warp w rows 16w..16w+15, and in
//   them exactly the mma.m16n8 accumulator layout repeated over N/8 n-tiles, so
//   `float acc[N / 8][4]` is the same array the mma.sync kernels use (softmax.cuh, mask.cuh,
//   epilogue.cuh apply unchanged).
// - An A operand in registers (k32, 8-bit) is mma.m16n8k32's A fragment, per warp: four
//   32-bit registers of four codes each, (row g, k 4t..4t+3), (g+8, ...), (g, 16+4t...),
//   (g+8, 16+4t...). fp8_prep.cuh's key permutation makes P's accumulators that operand.
// - B (and A from shared memory) must be "K-major" for 8-bit types (no transpose): the K
//   tile is keys × head-dim bytes, row per key, and the Vᵀ tile is head-dim × keys bytes.
//   Both are stored as fp8.cuh's swizzled byte tiles, whose XOR pattern is the hardware's
//   128-byte (rows of 128 bytes) or 64-byte (rows of 64 bytes) swizzle once the tile starts
//   on a 1024-byte boundary.
#pragma once
#include "common.cuh"

namespace attn {

// Shared-memory matrix descriptor of a K-major, swizzled tile whose rows are exactly one
// swizzle span (ROW_BYTES = 64 or 128): 8-row core-matrix groups ROW_BYTES·8 apart (the
// stride byte offset); the leading byte offset is unused for swizzled K-major layouts.
// Advancing k by 32 bytes inside the span adds 2 to the descriptor (addresses are in 16-byte
// units): the hardware applies the swizzle to the computed address.
template <int ROW_BYTES> __device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_byte_addr) {
    static_assert(ROW_BYTES == 32 || ROW_BYTES == 64 || ROW_BYTES == 128, "rows of one swizzle span");
    constexpr uint64_t kSwizzle = ROW_BYTES == 128 ? 1 : ROW_BYTES == 64 ? 2 : 3; // bits 62-63: 1 = 128B, 2 = 64B, 3 = 32B
    uint64_t d = static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
    d |= static_cast<uint64_t>(1) << 16;                        // leading byte offset (unused)
    d |= static_cast<uint64_t>((8 * ROW_BYTES) >> 4) << 32;     // stride byte offset
    d |= kSwizzle << 62;
    return d;
}

// Descriptor of an MN-major ("transposed") 16-bit operand stored as 128-byte-swizzled rows
// of 64 elements along MN, one row per k: CUTLASS's canonical MN-major SW128 layout
// ((8,n),(8,k)):((1,LBO),(8,SBO)) in 16-byte units (cute/atom/mma_traits_sm90_gmma.hpp).
// The leading byte offset steps between 64-element MN blocks (`mn_block_bytes`, the size of
// one 64-column sub-tile), the stride byte offset between groups of 8 k rows (1024 bytes).
// A k-step of 16 rows advances the start address by 2048 bytes (+128 in the descriptor).
__device__ __forceinline__ uint64_t wgmma_desc_mn128(uint32_t smem_byte_addr, uint32_t mn_block_bytes) {
    uint64_t d = static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
    d |= static_cast<uint64_t>((mn_block_bytes >> 4) & 0x3FFF) << 16; // leading byte offset
    d |= static_cast<uint64_t>(1024 >> 4) << 32;                       // stride byte offset
    d |= static_cast<uint64_t>(1) << 62;                               // 128-byte swizzle
    return d;
}

__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int N> __device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// Ends the basic block once `x` is computed, so that ptxas cannot schedule the next
// wgmma_wait above the code that computes it. Without it ptxas's list scheduler places
// `wgmma.wait_group 0` (SASS WARPGROUP.DEPBAR) at the top of the block that follows the
// last branch before it: in the Hopper forward's intra-warpgroup overlap that is before the
// softmax, so the softmax waited for the previous tile's P·V instead of overlapping it (seen
// in the SASS of CUDA 13.0's ptxas, 2026-11-26). The branch tests a NaN payload no
// arithmetic produces (GPUs return the canonical NaN), so it is never taken; it costs a
// compare and a branch per call.
__device__ __forceinline__ void schedule_after(float x) {
    if (__float_as_uint(x) == 0x7fbadbadu) __nanosleep(32);
}

// Writes by cp.async (the generic proxy) become visible to wgmma's operand reads (the async
// proxy) only after this fence, executed by the writing threads before the barrier.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Keeps the compiler from moving accumulator reads/writes across the asynchronous MMAs.
template <int NT> __device__ __forceinline__ void wgmma_fence_operands(float (&acc)[NT][4]) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(acc[n][e])::"memory");
    }
}

// Accumulator operand lists: two n-tiles (8 registers), eight n-tiles (32 registers).
#define ATTN_WG_ACC2(d, i)                                                                    \
    "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3]), "+f"(d[i + 1][0]),            \
        "+f"(d[i + 1][1]), "+f"(d[i + 1][2]), "+f"(d[i + 1][3])
#define ATTN_WG_ACC8(d, i) \
    ATTN_WG_ACC2(d, i), ATTN_WG_ACC2(d, i + 2), ATTN_WG_ACC2(d, i + 4), ATTN_WG_ACC2(d, i + 6)

#define ATTN_WG_REGS32                                                                        \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "  \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define ATTN_WG_REGS64                                                                        \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "  \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "   \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "   \
    "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

#define ATTN_WG_REGS48 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"

#define ATTN_WG_REGS96 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"

#define ATTN_WG_REGS112 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111}"

#define ATTN_WG_REGS128 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// D (+)= A·B, A and B from shared memory (descriptors), 64×N×32, E4M3 in, f32 out.
// `accumulate` false overwrites D (the first k-slice of a tile).
template <int N>
__device__ __forceinline__ void wgmma_e4m3_ss(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b,
                                              bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const int scale_d = accumulate ? 1 : 0;
    if constexpr (N == 64) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " ATTN_WG_REGS32
                     ", %32, %33, p, 1, 1;\n}\n"
                     : ATTN_WG_ACC8(d, 0)
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    } else if constexpr (N == 96) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 " ATTN_WG_REGS48
                     ", %48, %49, p, 1, 1;\n}\n"
                     : ATTN_WG_ACC8(d, 0), ATTN_WG_ACC2(d, 8), ATTN_WG_ACC2(d, 10)
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    } else if constexpr (N == 128) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " ATTN_WG_REGS64
                     ", %64, %65, p, 1, 1;\n}\n"
                     : ATTN_WG_ACC8(d, 0), ATTN_WG_ACC8(d, 8)
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    } else if constexpr (N == 192) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 " ATTN_WG_REGS96
                     ", %96, %97, p, 1, 1;\n}\n"
                     : ATTN_WG_ACC8(d, 0), ATTN_WG_ACC8(d, 8), ATTN_WG_ACC8(d, 16)
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    } else {
        static_assert(N == 224, "N = 64, 96, 128, 192 or 224");
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %114, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n224k32.f32.e4m3.e4m3 " ATTN_WG_REGS112
                     ", %112, %113, p, 1, 1;\n}\n"
                     : ATTN_WG_ACC8(d, 0), ATTN_WG_ACC8(d, 8), ATTN_WG_ACC8(d, 16), ATTN_WG_ACC2(d, 24),
                       ATTN_WG_ACC2(d, 26)
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    }
#else
    __trap(); // only instantiated for sm_90a (the `wgmma` entry points)
#endif
}

// D += A·B with A in registers (the k32 fragment above), B from shared memory; N = 256 is the
// Hopper engine's FP8 P·V at D = 256.
template <int N>
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (N == 64) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " ATTN_WG_REGS32
                     ", {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                     : ATTN_WG_ACC8(d, 0)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
    } else if constexpr (N == 128) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " ATTN_WG_REGS64
                     ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                     : ATTN_WG_ACC8(d, 0), ATTN_WG_ACC8(d, 8)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
    } else {
        static_assert(N == 256, "N = 64, 128 or 256");
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " ATTN_WG_REGS128
                     ", {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
                     : ATTN_WG_ACC8(d, 0), ATTN_WG_ACC8(d, 8), ATTN_WG_ACC8(d, 16), ATTN_WG_ACC8(d, 24)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
    }
#else
    __trap();
#endif
}

// f16/bf16 m64nNk16, f32 accumulation: `ss` reads A (K-major) and B (K-major) through
// descriptors, D = A·B (+ D when `accumulate`); `rs` takes A from registers (the mma.m16n8k16
// A fragment per warp) and B MN-major (transposed), D += A·B. Specialized per (T, N) by the
// generated units: an asm operand list cannot be written generically over N.
template <typename T, int N> struct Wgmma16;

#undef ATTN_WG_REGS32
#undef ATTN_WG_REGS64
#undef ATTN_WG_REGS48
#undef ATTN_WG_REGS96
#undef ATTN_WG_REGS112
#undef ATTN_WG_REGS128
#undef ATTN_WG_ACC8
#undef ATTN_WG_ACC2

} // namespace attn
