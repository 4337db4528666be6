// V for the FP8 kernels: Vᵀ with the keys of every 32-key group permuted.
//
// FP8 MMAs take B "column-major" at byte granularity, and ldmatrix can only transpose 16-bit
// elements, so P·V needs V with keys contiguous: Vᵀ, [B, H, D, S_pad]. For the mma.sync
// kernels it is one memory-bound pass (read V once, write Vᵀ once) before the attention
// kernel, on the same stream; the Hopper forward transposes each key tile in shared memory
// instead (`fp8_vt_tile`, as FlashAttention-3 does).
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
#include "ptx.cuh"

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

// Byte offset `off` of a tile whose rows are one SPAN-byte swizzle span (64 or 128), placed
// where TMA's and wgmma's swizzle puts it: the 16-byte chunk index XOR the row bits above it
// (CUTLASS's Swizzle<3,4,3> for 128 bytes, Swizzle<2,4,3> for 64), from a 1024-aligned base.
template <int SPAN> __device__ __forceinline__ int swizzled(int off) {
    static_assert(SPAN == 64 || SPAN == 128, "the kernels' swizzle spans");
    constexpr int kMask = SPAN == 128 ? 0x70 : 0x30;
    return off ^ ((off >> 3) & kMask);
}

// The Hopper FP8 forward's in-kernel Vᵀ (FlashAttention-3 transposes V in its producer
// warpgroup with ldmatrix, byte permutes and stmatrix: hopper/utils.h and
// mainloop_fwd_sm90_tma_gmma_ws.hpp): one key tile of V as TMA left it (BN rows of DK codes,
// in sub-tiles of ROW_BYTES-byte swizzled rows) into the Vᵀ tile the P·V wgmma reads (DK rows
// of BN key bytes, swizzled by BN), with the key permutation above, by NWARPS warps (`warp`
// is this one's index among them); FEW_REGS for a producer of 32 registers.
//
// A unit of work is 16 keys × 32 head-dim bytes per warp. ldmatrix.trans reads it as four
// 8×8 b16 matrices (keys 0-7 and 8-15 of the half, head-dim bytes 0-15 and 16-31), so that
// lane l holds, for the head-dim byte pair 2j, 2j+1 (j = l / 4), bytes of keys 2t and 2t+1
// (t = l % 4) from the first matrix and keys 2t+8, 2t+9 from the second. Two byte permutes
// make the words of stored positions 4t..4t+3 (keys 2t, 2t+1, 2t+8, 2t+9: the permutation)
// for head-dim rows 2j and 2j+1, which is exactly how stmatrix distributes the 16-byte Vᵀ
// row pieces [2j][16h..16h+15] and [2j+1][…] over the lanes. The loads do not conflict on
// banks; the stores are 2-way (each stored matrix's 8 rows are every other head-dim row).
//
// The transposing warps are the kernel's limiter unless their address arithmetic is nearly free
// (run 85: busy 90 % of the time and 1.35× the Vᵀ-pass build's time; run 86, with the lane's
// swizzle terms hoisted: still 1.13×). So each warp takes a fixed set of one index (the 16-key
// halves kh = warp, warp + NWARPS, …, or at BN = 64, where there are only four halves, the
// 32-byte head-dim blocks) and runs the other one unrolled: every address is a per-thread base
// plus an immediate, and a unit costs ldmatrix, four byte permutes and stmatrix.
template <int DK, int BN, int ROW_BYTES, int NWARPS, bool FEW_REGS = false>
__device__ __forceinline__ void fp8_vt_tile(const unsigned char* v, unsigned char* vt, uint32_t warp, uint32_t lane) {
    static_assert(BN % 16 == 0 && DK % 32 == 0, "16-key halves and 32-byte units");
    constexpr uint32_t kHalves = BN / 16; // 16-key halves of the permutation groups
    constexpr uint32_t kBlocks = DK / 32; // 32-byte head-dim blocks
    const uint32_t row = lane & 7;
    const uint32_t mat = lane >> 3;              // the matrix whose row this lane addresses
    const uint32_t col16 = 16 * (mat >> 1);      // its head-dim bytes: +0 or +16 in the unit
    const uint32_t key_lo = 8 * (mat & 1) + row; // its key within the unit's 16
    const uint32_t key_off = key_lo * ROW_BYTES;
    const uint32_t xor_in = swizzled<ROW_BYTES>(static_cast<int>(key_off)) ^ key_off;
    const uint32_t d_lo = col16 + 2 * row + (mat & 1); // its Vᵀ row within the unit's 32
    const uint32_t xor_out = swizzled<BN>(static_cast<int>(d_lo * BN)) ^ (d_lo * BN);
    const uint32_t v_base = smem_addr(v) + key_off;
    const uint32_t vt_base = smem_addr(vt) + d_lo * BN;
    // The load address of head-dim block m (without the half's 16·kh·ROW_BYTES), and the
    // store address's half term.
    auto in_block = [&](uint32_t m) {
        const uint32_t d_in = 32 * m + col16;
        return v_base + (d_in / ROW_BYTES) * (BN * ROW_BYTES) + ((d_in % ROW_BYTES) ^ xor_in);
    };
    auto out_half = [&](uint32_t kh) { return vt_base + ((16 * kh) ^ xor_out); };
    // A unit's store: the byte permutes turn the transposed b16 pairs into permuted Vᵀ words.
    auto store = [&](uint32_t out_addr, const uint32_t (&r)[4]) {
        stmatrix_x4(out_addr, __byte_perm(r[0], r[1], 0x6420u), __byte_perm(r[0], r[1], 0x7531u),
                    __byte_perm(r[2], r[3], 0x6420u), __byte_perm(r[2], r[3], 0x7531u));
    };
    // The loads of a group of units go out before its stores, so their latencies overlap (the
    // stores' memory clobber keeps the compiler from hoisting a later load above them).
    if constexpr (kHalves >= 2 * NWARPS) {
        // This warp's halves kh = warp + NWARPS·i; every head-dim block m, unrolled.
        constexpr uint32_t kMine = (kHalves + NWARPS - 1) / NWARPS;
        uint32_t out[kMine];
#pragma unroll
        for (uint32_t i = 0; i < kMine; ++i) out[i] = out_half(warp + NWARPS * i);
        const bool last = warp + NWARPS * (kMine - 1) < kHalves; // uniform over the warp
#pragma unroll
        for (uint32_t m = 0; m < kBlocks; ++m) {
            const uint32_t in = in_block(m) + warp * (16 * ROW_BYTES);
            // FEW_REGS (a 32-register producer): one unit at a time (a group spilled).
            constexpr uint32_t kGroup = FEW_REGS ? 1 : kMine;
#pragma unroll
            for (uint32_t i0 = 0; i0 < kMine; i0 += kGroup) {
                uint32_t r[kGroup][4];
#pragma unroll
                for (uint32_t i = i0; i < i0 + kGroup; ++i) {
                    if (i + 1 < kMine || last) ldmatrix_x4_trans(r[i - i0], in + i * (NWARPS * 16 * ROW_BYTES));
                }
#pragma unroll
                for (uint32_t i = i0; i < i0 + kGroup; ++i) {
                    if (i + 1 < kMine || last) store(out[i] + m * (32 * BN), r[i - i0]);
                }
            }
        }
    } else {
        // This warp's head-dim blocks m = warp + NWARPS·i; every half kh, unrolled.
#pragma unroll 1
        for (uint32_t m = warp; m < kBlocks; m += NWARPS) {
            const uint32_t in = in_block(m);
            const uint32_t out = m * (32 * BN);
            uint32_t r[kHalves][4];
#pragma unroll
            for (uint32_t kh = 0; kh < kHalves; ++kh) ldmatrix_x4_trans(r[kh], in + kh * (16 * ROW_BYTES));
#pragma unroll
            for (uint32_t kh = 0; kh < kHalves; ++kh) store(out_half(kh) + out, r[kh]);
        }
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
