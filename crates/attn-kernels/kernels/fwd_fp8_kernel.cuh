// The FP8 (E4M3) forward kernel: fwd_kernel.cuh's structure (one CTA per query block, each
// warp owning 16 whole query rows, a cp.async K/Vᵀ ring, P reused from registers) on
// 8-bit operands.
//
// Scales (FlashAttention-3, Shah et al. 2024, §3.3): Q, K, V arrive as E4M3 codes with one
// f32 scale per head. The MMAs run on raw codes; q_scale·k_scale folds into the softmax
// scale and v_scale into the output normalization, so dequantization costs nothing per
// element.
//
// Variants (template flags, one entry point each):
// - QK_FP8: S = Q·Kᵀ on mma.m16n8k32.e4m3 (sm_89+). Otherwise the codes are widened to
//   f16 in registers (fp8.cuh, exact, scaled 2^-8) and fed to mma.m16n8k16: the sm_80 path.
// - PV_FP8: P is cast to E4M3 for O += P·V on the FP8 MMA, multiplied by 2^8 first (as
//   FlashAttention-3 does) so that P ∈ (0, 1] lands in E4M3's normal range; the factor
//   cancels in O = acc / l. Otherwise P stays f16 and V is widened to f16.
// On Hopper FP8 mma.sync is not native (ptxas emulates it with f16 HMMA); the `wgmma`
// entry points below use fwd_fp8_wgmma_kernel.cuh instead, which shares this file's data flow.
#pragma once
#include "softmax.cuh" // before epilogue.cuh, which uses quad_sum
#include "epilogue.cuh"
#include "fp8_block.cuh"
#include "fp8_prep.cuh"
#include "fwd_fp8_wgmma_kernel.cuh"

namespace attn {

template <typename OutT, int D, int BM, int BN, int STAGES, int WARPS, bool CAUSAL, bool QK_FP8,
          bool PV_FP8>
__device__ __forceinline__ void fwd_fp8_kernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ k,
                                               const uint8_t* __restrict__ vt,
                                               const float* __restrict__ q_scale,
                                               const float* __restrict__ k_scale,
                                               const float* __restrict__ v_scale, OutT* __restrict__ o,
                                               float* __restrict__ lse, const FwdParams& p, int vt_stride) {
    using Cfg = Fp8Config<D, BM, BN, STAGES, WARPS>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const Fp8Block<OutT, D, BM, BN, STAGES, WARPS> blk(smem_raw, q, k, vt, p, vt_stride);
    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int m0 = blk.m0;
    const int warp_row0 = warp * 16;

    // Descales. Converted operands carry 2^-8 each (fp8.cuh).
    const float qk_descale = q_scale[blk.qh] * k_scale[blk.kh] * (QK_FP8 ? 1.f : kCvtScale * kCvtScale);
    const float scale_log2 = p.scale_log2 * qk_descale;
    constexpr float kLog2Gain = PV_FP8 ? 8.f : 0.f;
    const float out_scale = v_scale[blk.kh] * (PV_FP8 ? 1.f : kCvtScale);

    const int n_tiles = key_tiles_for_block<CAUSAL, BM, BN>(m0, p);
    const int lim_lo = visible_keys<CAUSAL>(m0 + warp_row0 + g, p);
    const int lim_hi = visible_keys<CAUSAL>(m0 + warp_row0 + g + 8, p);
    const int lim_block = visible_keys<CAUSAL>(m0, p);
    blk.start(n_tiles, p, tid);

    // Q fragments: raw codes (k32 A layout) or widened to f16 (two k16 A operands per 32-byte
    // slice). Kept in registers up to D = 128; at D = 256 O's accumulator alone takes 128
    // registers per thread and Q's 32–64 more spilled (ptxas), so Q is re-read from shared
    // memory per k-slice there, as the f16/bf16 kernel does above D = 128.
    constexpr bool kQInRegs = D <= 128;
    constexpr int kQRegs = QK_FP8 ? 4 : 8;
    auto load_q = [&](uint32_t (&dst)[kQRegs], int kk) {
        uint32_t r[4];
        ldmatrix_x4(r, smem_addr(blk.sQ + swz_bytes<D>(warp_row0 + (lane & 15), 2 * kk + (lane >> 4))));
        if constexpr (QK_FP8) {
#pragma unroll
            for (int i = 0; i < 4; ++i) dst[i] = r[i];
        } else {
            // k16 A operand: regs (row g, k 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8) ↔
            // bytes 4t..4t+1 and 4t+2..4t+3 of the slice's halves: the same k order
            // as the K fragments below, so the dot products are unchanged.
            dst[0] = cvt_lo(r[0]);
            dst[1] = cvt_lo(r[1]);
            dst[2] = cvt_hi(r[0]);
            dst[3] = cvt_hi(r[1]);
            dst[4] = cvt_lo(r[2]);
            dst[5] = cvt_lo(r[3]);
            dst[6] = cvt_hi(r[2]);
            dst[7] = cvt_hi(r[3]);
        }
    };
    uint32_t qf[kQInRegs ? Cfg::kKQ : 1][kQRegs];
    float acc_o[Cfg::kNO][4];
#pragma unroll
    for (int n = 0; n < Cfg::kNO; ++n) acc_o[n][0] = acc_o[n][1] = acc_o[n][2] = acc_o[n][3] = 0.f;
    OnlineSoftmax<Cfg::kNT, Cfg::kNO> softmax;
    softmax.init();

    for (int j = 0; j < n_tiles; ++j) {
        const int jn = j + STAGES - 1;
        if (jn < n_tiles) blk.load_kv(jn, jn % STAGES, p, tid);
        cp_async_commit();
        cp_async_wait<STAGES - 1>();
        __syncthreads();

        if (kQInRegs && j == 0) {
#pragma unroll
            for (int kk = 0; kk < Cfg::kKQ; ++kk) load_q(qf[kQInRegs ? kk : 0], kk);
        }

        const uint8_t* tK = blk.k_tile(j % STAGES);
        const uint8_t* tV = blk.v_tile(j % STAGES);
        const int mi = lane >> 3;

        float acc_s[Cfg::kNT][4];
#pragma unroll
        for (int n = 0; n < Cfg::kNT; ++n) acc_s[n][0] = acc_s[n][1] = acc_s[n][2] = acc_s[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < Cfg::kKQ; ++kk) {
            uint32_t qa[kQRegs];
            if constexpr (kQInRegs) {
#pragma unroll
                for (int i = 0; i < kQRegs; ++i) qa[i] = qf[kk][i];
            } else {
                load_q(qa, kk);
            }
#pragma unroll
            for (int n = 0; n < Cfg::kNT; n += 2) {
                // Matrices: (n, chunk 2kk), (n, 2kk+1), (n+1, 2kk), (n+1, 2kk+1).
                const int key = (n + (mi >> 1)) * 8 + (lane & 7);
                uint32_t bk[4];
                ldmatrix_x4(bk, smem_addr(tK + swz_bytes<D>(key, 2 * kk + (mi & 1))));
                if constexpr (QK_FP8) {
                    mma_e4m3(acc_s[n], qa, bk[0], bk[1]);
                    mma_e4m3(acc_s[n + 1], qa, bk[2], bk[3]);
                } else {
                    const uint32_t(&a0)[4] = *reinterpret_cast<const uint32_t(*)[4]>(&qa[0]);
                    const uint32_t(&a1)[4] = *reinterpret_cast<const uint32_t(*)[4]>(&qa[4]);
                    mma_f16(acc_s[n], a0, cvt_lo(bk[0]), cvt_hi(bk[0]));
                    mma_f16(acc_s[n], a1, cvt_lo(bk[1]), cvt_hi(bk[1]));
                    mma_f16(acc_s[n + 1], a0, cvt_lo(bk[2]), cvt_hi(bk[2]));
                    mma_f16(acc_s[n + 1], a1, cvt_lo(bk[3]), cvt_hi(bk[3]));
                }
            }
        }

        const int key0 = j * BN;
        if (key0 + BN > lim_block) apply_mask<Cfg::kNT>(acc_s, key0, lim_lo, lim_hi, t);
        softmax.template update<false>(acc_s, acc_o, scale_log2, kLog2Gain);

        // P as MMA A operands, all packed before P·V so that the f32 scores die here (64
        // registers at BN = 128) instead of living through the P·V loop. Vᵀ's key
        // permutation (fp8_prep.cuh) makes the values this thread holds the operand it needs.
        uint32_t pa[Cfg::kKP][PV_FP8 ? 4 : 8];
#pragma unroll
        for (int kk = 0; kk < Cfg::kKP; ++kk) {
            const float(&s0)[4] = acc_s[4 * kk];
            const float(&s1)[4] = acc_s[4 * kk + 1];
            const float(&s2)[4] = acc_s[4 * kk + 2];
            const float(&s3)[4] = acc_s[4 * kk + 3];
            if constexpr (PV_FP8) {
                pa[kk][0] = pack_e4m3x4(s0[0], s0[1], s1[0], s1[1]);
                pa[kk][1] = pack_e4m3x4(s0[2], s0[3], s1[2], s1[3]);
                pa[kk][2] = pack_e4m3x4(s2[0], s2[1], s3[0], s3[1]);
                pa[kk][3] = pack_e4m3x4(s2[2], s2[3], s3[2], s3[3]);
            } else {
                pa[kk][0] = StorageTraits<__half>::pack(s0[0], s0[1]);
                pa[kk][1] = StorageTraits<__half>::pack(s0[2], s0[3]);
                pa[kk][2] = StorageTraits<__half>::pack(s1[0], s1[1]);
                pa[kk][3] = StorageTraits<__half>::pack(s1[2], s1[3]);
                pa[kk][4] = StorageTraits<__half>::pack(s2[0], s2[1]);
                pa[kk][5] = StorageTraits<__half>::pack(s2[2], s2[3]);
                pa[kk][6] = StorageTraits<__half>::pack(s3[0], s3[1]);
                pa[kk][7] = StorageTraits<__half>::pack(s3[2], s3[3]);
            }
        }

        // O += P·V over 32-key slices.
#pragma unroll
        for (int kk = 0; kk < Cfg::kKP; ++kk) {
            const uint32_t(&p0)[4] = *reinterpret_cast<const uint32_t(*)[4]>(&pa[kk][0]);
            const uint32_t(&p1)[4] = *reinterpret_cast<const uint32_t(*)[4]>(&pa[kk][PV_FP8 ? 0 : 4]);
#pragma unroll
            for (int n = 0; n < Cfg::kNO; n += 2) {
                // Matrices: (d rows of n-tile n, key chunk 2kk), (n, 2kk+1), (n+1, 2kk), (n+1, 2kk+1).
                const int drow = (n + (mi >> 1)) * 8 + (lane & 7);
                uint32_t bv[4];
                ldmatrix_x4(bv, smem_addr(tV + swz_bytes<BN>(drow, 2 * kk + (mi & 1))));
                if constexpr (PV_FP8) {
                    mma_e4m3(acc_o[n], p0, bv[0], bv[1]);
                    mma_e4m3(acc_o[n + 1], p0, bv[2], bv[3]);
                } else {
                    mma_f16(acc_o[n], p0, cvt_lo(bv[0]), cvt_hi(bv[0]));
                    mma_f16(acc_o[n], p1, cvt_lo(bv[1]), cvt_hi(bv[1]));
                    mma_f16(acc_o[n + 1], p0, cvt_lo(bv[2]), cvt_hi(bv[2]));
                    mma_f16(acc_o[n + 1], p1, cvt_lo(bv[3]), cvt_hi(bv[3]));
                }
            }
        }
        __syncthreads(); // the next iteration's prefetch overwrites this tile's buffers
    }
    cp_async_wait<0>();
    __syncthreads();

    // LSE is computed from m in the scaled domain; remove the 2^8 gain P carried.
    softmax.m[0] -= kLog2Gain;
    softmax.m[1] -= kLog2Gain;
    write_output<OutT, D, Cfg::kNO>(acc_o, softmax.m, softmax.l, reinterpret_cast<OutT*>(smem_raw), blk.o_head(o, p),
                                    blk.lse_head(lse, p), warp_row0, m0, p.q_len, lane, D, D / 8, out_scale);
}

} // namespace attn

// Entry points, one per (out type, D, config, mask, variant), named by src/catalog.rs (which
// generates the instantiation lines): fp8 (both MMAs FP8 mma.sync), p16 (P·V in f16), cvt
// (no FP8 hardware: the sm_80 path) or wgmma (both MMAs FP8 on Hopper's warpgroup MMA,
// fwd_fp8_wgmma_kernel.cuh). The catalog instantiates each variant only for the archs that
// have its instructions.
#define ATTN_FP8_ENTRY(NAME, BOUNDS, OutT, CALL)                                                 \
    extern "C" __global__ void BOUNDS NAME(                                                      \
        const uint8_t* __restrict__ q, const uint8_t* __restrict__ k,                            \
        const uint8_t* __restrict__ vt, const float* __restrict__ q_scale,                       \
        const float* __restrict__ k_scale, const float* __restrict__ v_scale,                    \
        OutT* __restrict__ o, float* __restrict__ lse, const attn::FwdParams p, int vt_stride) { \
        CALL(q, k, vt, q_scale, k_scale, v_scale, o, lse, p, vt_stride);                         \
    }
#define ATTN_FP8_ENTRY_FP8(NAME, OutT, D, BM, BN, ST, W, CAUSAL) \
    ATTN_FP8_ENTRY(NAME, __launch_bounds__(W * 32), OutT,        \
                   (attn::fwd_fp8_kernel<OutT, D, BM, BN, ST, W, CAUSAL, true, true>))
#define ATTN_FP8_ENTRY_P16(NAME, OutT, D, BM, BN, ST, W, CAUSAL) \
    ATTN_FP8_ENTRY(NAME, __launch_bounds__(W * 32), OutT,        \
                   (attn::fwd_fp8_kernel<OutT, D, BM, BN, ST, W, CAUSAL, true, false>))
#define ATTN_FP8_ENTRY_CVT(NAME, OutT, D, BM, BN, ST, W, CAUSAL) \
    ATTN_FP8_ENTRY(NAME, __launch_bounds__(W * 32), OutT,        \
                   (attn::fwd_fp8_kernel<OutT, D, BM, BN, ST, W, CAUSAL, false, false>))
// The one-warpgroup wgmma CTAs rely on co-resident CTAs to overlap one CTA's softmax with
// another's MMAs, so they are held to 168 registers (3 CTAs of 128 threads per SM:
// 3 · 4 warps · 168 · 32 ≤ 64 Ki); eight-warp CTAs leave ptxas free.
#define ATTN_FP8_WGMMA_BOUNDS_4 __launch_bounds__(128, 3)
#define ATTN_FP8_WGMMA_BOUNDS_8 __launch_bounds__(256)
#define ATTN_FP8_ENTRY_WGMMA(NAME, OutT, D, BM, BN, ST, W, CAUSAL) \
    ATTN_FP8_ENTRY(NAME, ATTN_FP8_WGMMA_BOUNDS_##W, OutT,          \
                   (attn::fwd_fp8_wgmma_kernel<OutT, D, BM, BN, ST, W, CAUSAL>))
