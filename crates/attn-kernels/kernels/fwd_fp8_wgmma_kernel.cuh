// The FP8 (E4M3) forward on Hopper's warpgroup MMA (sm_90a): the `wgmma` variant.
//
// Hopper has no FP8 mma.sync (ptxas lowers it to f16 conversions plus HMMA, see
// fwd_fp8_kernel.cuh and docs/PERF.md); its FP8 tensor-core math is wgmma. This kernel keeps
// fwd_fp8_kernel.cuh's data flow — the same cp.async K/Vᵀ ring and swizzled byte tiles, the
// same scale folding, online softmax, masking and epilogue — and replaces the two MMA loops:
// - S = Q·Kᵀ: wgmma.m64n{BN}k32 with Q and K read from shared memory through descriptors
//   (both K-major: rows of head-dim bytes).
// - O += P·V: P, scaled by 2^8 and cast to E4M3 (FlashAttention-3's choice), is the register
//   A operand; Vᵀ (fp8_prep.cuh, keys contiguous and permuted) is the K-major B operand.
// Each warpgroup (4 warps) owns 64 query rows; the accumulators have the mma.sync layout
// (wgmma.cuh), so each warp's 16 rows look exactly as in the mma.sync kernel.
//
// Synchronization per tile: cp.async wait → fence.proxy.async (cp.async writes are
// generic-proxy, wgmma reads are async-proxy) → barrier → wgmma (fence, issue, commit, wait)
// → softmax → wgmma P·V (fence, issue, commit, wait) → barrier before the ring slot is
// refilled. The MMAs and the softmax of one warpgroup do not overlap; the two warpgroups of a
// CTA and co-resident CTAs do (FlashAttention-3's ping-pong scheduling and intra-warpgroup
// pipelining are not implemented).
#pragma once
#include "softmax.cuh" // before epilogue.cuh, which uses quad_sum
#include "epilogue.cuh"
#include "fp8_block.cuh"
#include "wgmma.cuh"

namespace attn {

template <typename OutT, int D, int BM, int BN, int STAGES, int WARPS, bool CAUSAL>
__device__ __forceinline__ void fwd_fp8_wgmma_kernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ k,
                                                     const uint8_t* __restrict__ vt,
                                                     const float* __restrict__ q_scale,
                                                     const float* __restrict__ k_scale,
                                                     const float* __restrict__ v_scale,
                                                     OutT* __restrict__ o, float* __restrict__ lse,
                                                     const FwdParams& p, int vt_stride) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Cfg = Fp8Config<D, BM, BN, STAGES, WARPS>;
    static_assert(WARPS % 4 == 0, "warpgroups of 4 warps, 64 rows each");
    constexpr int kNT = Cfg::kNT;
    constexpr int kNO = Cfg::kNO;

    // wgmma's swizzle is a function of the address: tiles start on 1024-byte boundaries (the
    // launcher allocates 1 KiB of slack; every tile size is a multiple of 1 KiB).
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* base = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    const Fp8Block<OutT, D, BM, BN, STAGES, WARPS> blk(base, q, k, vt, p, vt_stride);
    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int wg = warp >> 2;
    const int m0 = blk.m0;
    const int warp_row0 = warp * 16;

    const float scale_log2 = p.scale_log2 * q_scale[blk.qh] * k_scale[blk.kh];
    constexpr float kLog2Gain = 8.f;
    const float out_scale = v_scale[blk.kh];

    const int n_tiles = key_tiles_for_block<CAUSAL, BM, BN>(m0, p);
    const int lim_block = visible_keys<CAUSAL>(m0, p);
    blk.start(n_tiles, p, tid);

    const uint64_t desc_q = wgmma_desc<D>(smem_addr(blk.sQ + wg * 64 * D));
    float acc_o[kNO][4];
#pragma unroll
    for (int n = 0; n < kNO; ++n) acc_o[n][0] = acc_o[n][1] = acc_o[n][2] = acc_o[n][3] = 0.f;
    OnlineSoftmax<kNT, kNO> softmax;
    softmax.init();

    for (int j = 0; j < n_tiles; ++j) {
        const int jn = j + STAGES - 1;
        if (jn < n_tiles) blk.load_kv(jn, jn % STAGES, p, tid);
        cp_async_commit();
        cp_async_wait<STAGES - 1>();
        fence_proxy_async_smem();
        __syncthreads();

        const uint64_t desc_k = wgmma_desc<D>(smem_addr(blk.k_tile(j % STAGES)));
        const uint64_t desc_v = wgmma_desc<BN>(smem_addr(blk.v_tile(j % STAGES)));

        float acc_s[kNT][4];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Cfg::kKQ; ++kk) wgmma_e4m3_ss<BN>(acc_s, desc_q + 2 * kk, desc_k + 2 * kk, kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(acc_s);

        const int key0 = j * BN;
        if (key0 + BN > lim_block) {
            // Row limits recomputed here (params are in constant memory): keeping them live
            // across the loop cost the 168-register build a spill.
            const int lim_lo = visible_keys<CAUSAL>(m0 + warp_row0 + g, p);
            const int lim_hi = visible_keys<CAUSAL>(m0 + warp_row0 + g + 8, p);
            apply_mask<kNT>(acc_s, key0, lim_lo, lim_hi, t);
        }
        softmax.template update<false>(acc_s, acc_o, scale_log2, kLog2Gain);

        // P as k32 A operands (see fwd_fp8_kernel.cuh: Vᵀ's key permutation makes the values
        // this thread holds the operand it needs).
        uint32_t pa[Cfg::kKP][4];
#pragma unroll
        for (int kk = 0; kk < Cfg::kKP; ++kk) pack_p_e4m3_k32(pa[kk], acc_s, kk);

        wgmma_fence_operands(acc_o);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Cfg::kKP; ++kk) wgmma_e4m3_rs<D>(acc_o, pa[kk], desc_v + 2 * kk);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(acc_o);
        __syncthreads(); // the next iteration's prefetch overwrites this tile's buffers
    }
    cp_async_wait<0>();
    __syncthreads();

    // LSE is computed from m in the scaled domain; remove the 2^8 gain P carried.
    softmax.m[0] -= kLog2Gain;
    softmax.m[1] -= kLog2Gain;
    write_output<OutT, D, kNO>(acc_o, softmax.m, softmax.l, reinterpret_cast<OutT*>(base), blk.o_head(o, p), blk.lse_head(lse, p),
                               warp_row0, m0, p.q_len, lane, D, D / 8, out_scale);
#else
    __trap(); // the `wgmma` entry points exist only in sm_90a cubins
#endif
}

} // namespace attn
