// The Hopper FP8 forward's Vᵀ, built in shared memory by producer warps (FlashAttention-3
// transposes V inside its kernel the same way: ldmatrix.trans, byte permutes, stmatrix;
// hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp).
//
// Source: one V stage as TMA lands it, BN key rows of DK bytes in sub-tiles of kRB-byte rows
// (kRB = min(DK, 128)) in TMA's kRB-byte swizzle. Target: DK rows of BN key bytes in sub-tiles
// of one swizzle span along the keys (`vt_span`: 128, 64 or 32 bytes, the widest that divides
// BN), the K-major B operand of the 8-bit wgmma, with the keys of every 32-key
// group in fp8_prep.cuh's order (slot 16h + 4t + i holds key 16h + 2t + i for i < 2 and
// 16h + 8 + 2t + i − 2 otherwise), so P goes from the S accumulator to the A operand without
// shuffles.
//
// One unit moves 16 keys × 32 bytes of D. ldmatrix.trans on matrices of 8 keys × 16 bytes
// hands lane (c, j) = (lane / 4, lane % 4) the 16-bit column c (bytes 2c, 2c + 1) of keys
// 2j and 2j + 1; the matrix of keys 8.. gives it keys 8 + 2j, 9 + 2j. One byte permute of the
// two makes the four slots 4j .. 4j + 3 of row 2c (another, of row 2c + 1), which is the
// word stmatrix takes from that lane for row c of a matrix whose rows are every second D row.
// ldmatrix reads 8 consecutive keys (conflict-free in either swizzle). A stmatrix matrix of
// 8 rows 2 apart would meet 2-way bank conflicts (the swizzle XORs the 16-byte chunk with the
// row's low bits, and its rows would share the low bit), so lanes 16–31 swap their two
// permutes: matrix 0 holds rows 0, 2, 4, 6, 9, 11, 13, 15 of the 16 and matrix 1 the others,
// 8 distinct chunk positions each (run 189's ncu: 12 % of the shared wavefronts were excess).
#pragma once
#include "ptx.cuh"

namespace attn {

// stmatrix (sm_90): lane l gives the address of row l % 8 of matrix l / 8; matrix i's row r
// is the 32-bit words r[i] of lanes 4r .. 4r + 3.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
#if __CUDA_ARCH__ >= 900
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3])
                 : "memory");
#endif
}

// Byte offset `off` of a tile whose rows are R bytes, in TMA's and wgmma's R-byte swizzle
// (the 16-byte chunk index XORed with the row within an 8-row, 1024-byte atom), for a tile
// on a 1024-byte boundary.
template <int R> __device__ __forceinline__ uint32_t swizzled(uint32_t off) {
    static_assert(R == 32 || R == 64 || R == 128, "TMA swizzle spans");
    return off ^ (((off >> 7) & (R / 16 - 1)) << 4);
}

// Key bytes per Vᵀ sub-tile row: the widest swizzle span (128, 64 or 32 bytes) that divides BN.
__host__ __device__ constexpr int vt_span(int bn) { return bn % 128 == 0 ? 128 : bn % 64 == 0 ? 64 : 32; }

// Transposes one stage: warp W of WARPS takes units W, W + WARPS, .., BATCH at a time (their
// ldmatrix loads in flight together). Every unit's offsets are compile-time constants. They
// share no bits with the lane's part (rows 0–15 of the unit, columns 0/16), and the swizzle's
// XOR reads only the row bits below 8 rows, which only the lane's part has, so an address is
// base + (unit ^ swizzled(lane)): two instructions (run 190's runtime unit indices cost ~45
// instructions per unit, and the transposing warps, not the tensor cores, set the pace).
template <int DK, int BN, int WARPS, int BATCH, int W>
__device__ __forceinline__ void transpose_v_fp8_warp(uint32_t src, uint32_t dst, int lane) {
    constexpr int kRB = DK < 128 ? DK : 128; // source sub-tile row bytes
    constexpr int kDPairs = DK / 32;         // 32-byte column pairs per key block
    constexpr int kUnits = BN / 16 * kDPairs;
    constexpr int kSpan = vt_span(BN);
    static_assert(BN % 32 == 0 && DK % 32 == 0, "whole 32-key groups and 32-byte column pairs");
    const int mat = lane >> 3, r = lane & 7;
    // This lane's ldmatrix row (key r of keys 0–7 or 8–15, columns 0–15 or 16–31 of the pair)
    // and stmatrix row (D row 2r or 2r + 1 of columns 0–15 or 16–31, the unit's 16 key slots).
    const int src_key = (mat & 1) * 8 + r, src_col = (mat >> 1) * 16;
    const int hi = r >= 4; // rows 8–15 of the 16: the lanes that swap their permutes
    const int dst_row = (mat >> 1) * 16 + 2 * r + ((mat & 1) ^ hi);
    const uint32_t even = lane >= 16 ? 0x7531u : 0x6420u, odd = lane >= 16 ? 0x6420u : 0x7531u;
    const uint32_t src_lane = swizzled<kRB>(src_key * kRB + src_col);
    const uint32_t dst_lane = swizzled<kSpan>(dst_row * kSpan);
#pragma unroll
    for (int u0 = W; u0 < kUnits; u0 += BATCH * WARPS) {
        uint32_t x[BATCH][4];
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int u = u0 + i * WARPS;
            if (u < kUnits) {
                const int kb = u / kDPairs * 16, db = u % kDPairs * 32;
                const uint32_t unit = (db / kRB) * (BN * kRB) + kb * kRB + db % kRB;
                ldmatrix_x4_trans(x[i], src + (unit ^ src_lane));
            }
        }
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int u = u0 + i * WARPS;
            if (u < kUnits) {
                const int kb = u / kDPairs * 16, db = u % kDPairs * 32;
                const uint32_t unit = (kb / kSpan) * (DK * kSpan) + db * kSpan + kb % kSpan;
                const uint32_t w[4] = {__byte_perm(x[i][0], x[i][1], even), __byte_perm(x[i][0], x[i][1], odd),
                                       __byte_perm(x[i][2], x[i][3], even), __byte_perm(x[i][2], x[i][3], odd)};
                stmatrix_x4(dst + (unit ^ dst_lane), w);
            }
        }
    }
}

// Transposes one stage on transposing warp `worker` (0, 1 or 2) of three.
template <int DK, int BN, int BATCH>
__device__ __forceinline__ void transpose_v_fp8(uint32_t src, uint32_t dst, int worker, int lane) {
    if (worker == 0) transpose_v_fp8_warp<DK, BN, 3, BATCH, 0>(src, dst, lane);
    else if (worker == 1) transpose_v_fp8_warp<DK, BN, 3, BATCH, 1>(src, dst, lane);
    else transpose_v_fp8_warp<DK, BN, 3, BATCH, 2>(src, dst, lane);
}

} // namespace attn
