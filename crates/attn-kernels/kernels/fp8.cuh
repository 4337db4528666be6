// FP8 (E4M3) building blocks: the m16n8k32 tensor-core MMA, packing f32 pairs to E4M3,
// widening E4M3 to f16 (with FP8 hardware on sm_89+, without it on sm_80), and the byte-row
// shared-memory layout.
#pragma once
#include "ptx.cuh"

namespace attn {

// D += A·B on E4M3 operands, f32 accumulation (sm_89+). Operand layouts are those of
// m16n8k16 read at byte granularity: a 32-byte k-slice of a row is what a 16-byte-per-row
// ldmatrix of the same shared-memory tile returns, so the fp16 kernel's addressing carries
// over unchanged.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 890
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap(); // never instantiated below sm_89: the launcher picks the converting variant
#endif
}

// m16n8k16 on f16 operands (the converting path).
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    Mma<__half>::run(d, a, b0, b1);
}

// Four f32 → four E4M3 codes in one register, x0 in the lowest byte. Round to nearest even,
// saturating to ±448 (satfinite), as attn-quant does.
__device__ __forceinline__ uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
#if __CUDA_ARCH__ >= 890
    uint16_t lo, hi;
    // cvt puts its first source in the upper byte.
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(x1), "f"(x0));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(x3), "f"(x2));
    return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
#else
    __trap();
    return 0;
#endif
}

// P of 32 keys (accumulator n-tiles 4kk..4kk+3) as one k32 A operand of E4M3 codes. Vᵀ's key
// permutation (fp8_prep.cuh) makes the values a thread already holds the operand it needs, so
// this is a pure cast, no shuffle; the wgmma and the Hopper FP8 kernels share it.
template <int NT>
__device__ __forceinline__ void pack_p_e4m3_k32(uint32_t (&a)[4], const float (&s)[NT][4], int kk) {
    const float(&s0)[4] = s[4 * kk];
    const float(&s1)[4] = s[4 * kk + 1];
    const float(&s2)[4] = s[4 * kk + 2];
    const float(&s3)[4] = s[4 * kk + 3];
    a[0] = pack_e4m3x4(s0[0], s0[1], s1[0], s1[1]);
    a[1] = pack_e4m3x4(s0[2], s0[3], s1[2], s1[3]);
    a[2] = pack_e4m3x4(s2[0], s2[1], s3[0], s3[1]);
    a[3] = pack_e4m3x4(s2[2], s2[3], s3[2], s3[3]);
}

// Two E4M3 codes → f16x2 holding code_value · 2^-8, exactly, with integer ops only (no FP8
// hardware needed). E4M3's exponent and mantissa bits placed under f16's sign are an f16
// whose exponent bias is 15 instead of 7, so every value, subnormals included, comes out
// scaled by 2^(7-15); callers fold 2^8 back into their scales. E4M3's NaN (S.1111.111) would
// land on a finite f16 (1.875, magnitude bits 0x3F80, the only code that reaches them), so
// adding 0x80 to the magnitude carries into bit 14 for it alone, and OR-ing that bit in makes
// 0x7F80, an f16 NaN (DESIGN §2: NaN inputs propagate). Every other code is unchanged
// (checked for all 256 against the E4M3 definition). SEL picks the bytes: 0x1404 → bytes
// 0,1; 0x3424 → bytes 2,3.
template <uint32_t SEL> __device__ __forceinline__ uint32_t e4m3x2_to_f16x2_scaled(uint32_t codes) {
    const uint32_t t = __byte_perm(codes, 0u, SEL); // [0, b_lo, 0, b_hi]
    const uint32_t mag = (t >> 1) & 0x3F803F80u;       // below 0x3F80 except for NaN's 0x3F80
    return mag | (t & 0x80008000u) | ((mag + 0x00800080u) & 0x40004000u);
}
__device__ __forceinline__ uint32_t cvt_lo(uint32_t codes) { return e4m3x2_to_f16x2_scaled<0x1404u>(codes); }
__device__ __forceinline__ uint32_t cvt_hi(uint32_t codes) { return e4m3x2_to_f16x2_scaled<0x3424u>(codes); }
constexpr float kCvtScale = 256.f; // 2^8: what one converted operand lost

// Two E4M3 codes (byte 0 → the low half) → f16x2. sm_89+ converts in one instruction,
// exactly; older archs use the integer trick above, which scales by 2^-8 (kDecodeWidenGain
// says which, so the kernel's scales undo exactly what the widening did).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t word, bool high) {
#if __CUDA_ARCH__ >= 890
    const uint16_t pair = static_cast<uint16_t>(high ? word >> 16 : word & 0xFFFFu);
    uint32_t h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(pair));
    return h;
#else
    return high ? cvt_hi(word) : cvt_lo(word);
#endif
}

// What kv_descale's factor must be multiplied by for this arch's widening: kv_descale folds
// in 2^8 for the integer trick; the hardware conversion loses nothing.
#if __CUDA_ARCH__ >= 890
constexpr float kDecodeWidenGain = 1.f / kCvtScale;
#else
constexpr float kDecodeWidenGain = 1.f;
#endif

// Byte tiles: ROWS rows of ROW_BYTES bytes, 16-byte chunks XOR-swizzled so that the 8 rows
// an ldmatrix phase reads land in distinct bank groups. With 128-byte rows (8 chunks) this is
// load.cuh's swizzle; 64-byte rows hold two rows per 128-byte line, so the XOR key is
// (row / 2) mod 4.
template <int ROW_BYTES> __device__ __forceinline__ int swz_bytes(int row, int chunk) {
    constexpr int kChunks = ROW_BYTES / 16;
    static_assert(kChunks == 4 || kChunks % 8 == 0, "rows of 64 or 128·n bytes");
    if constexpr (kChunks == 4) {
        return row * ROW_BYTES + ((chunk ^ ((row >> 1) & 3)) << 4);
    } else {
        return row * ROW_BYTES + ((chunk ^ (row & 7)) << 4);
    }
}

// Copies ROWS rows of ROW_BYTES bytes (row r at src + r·stride) into a swizzled tile; rows
// >= valid are zero-filled without being read.
template <int ROW_BYTES, int ROWS, int NTHREADS>
__device__ __forceinline__ void load_bytes_async(uint8_t* tile, const uint8_t* __restrict__ src,
                                                 int64_t stride, int valid, int tid) {
    constexpr int kChunksPerRow = ROW_BYTES / 16;
    constexpr int kChunks = ROWS * kChunksPerRow;
#pragma unroll
    for (int i = tid; i < kChunks; i += NTHREADS) {
        const int r = i / kChunksPerRow;
        const int c = i % kChunksPerRow;
        const bool in_bounds = r < valid;
        const uint8_t* s = src + (in_bounds ? r * stride : 0) + c * 16;
        cp_async_16(smem_addr(tile + swz_bytes<ROW_BYTES>(r, c)), s, in_bounds);
    }
}

} // namespace attn
