// What both FP8 forward kernels (mma.sync: fwd_fp8_kernel.cuh, wgmma:
// fwd_fp8_wgmma_kernel.cuh) share: the tile geometry of a config, and one CTA's view of the
// problem — which (batch, head, query block) it owns, its heads' base pointers, and the
// cp.async loads of the Q tile and of one K/Vᵀ ring stage. Q, K and O are contiguous
// [B, H, S, D] (the launcher refuses other strides): compile-time row strides keep the
// one-warpgroup wgmma kernel within its 168-register budget.
#pragma once
#include "fp8.cuh"
#include "mask.cuh"

namespace attn {

template <int D, int BM, int BN, int STAGES, int WARPS> struct Fp8Config {
    static constexpr int kThreads = WARPS * 32;
    static constexpr int kNT = BN / 8;  // n-tiles of S
    static constexpr int kNO = D / 8;   // n-tiles of O
    static constexpr int kKQ = D / 32;  // 32-byte k-slices of Q·Kᵀ
    static constexpr int kKP = BN / 32; // 32-key k-slices of P·V
    static constexpr int kSmemBytes = BM * D + 2 * STAGES * BN * D;
    static_assert(BM == 16 * WARPS, "each warp owns 16 rows");
    static_assert(BN % 64 == 0 && D % 64 == 0, "tile sizes");
    static_assert(STAGES >= 2, "the K/V ring needs at least two stages");
    // The epilogue stages O (2-byte elements) over the Q and K buffers.
    static_assert(BM * D * 2 <= kSmemBytes, "epilogue staging fits");
};

// One CTA's query block (grid: x = query tile, y = query head, z = batch) and its loads. The
// shared-memory tiles are sQ (BM rows of D bytes), then STAGES K tiles (BN rows of D bytes),
// then STAGES Vᵀ tiles (D rows of BN bytes).
template <typename OutT, int D, int BM, int BN, int STAGES, int WARPS> struct Fp8Block {
    using Cfg = Fp8Config<D, BM, BN, STAGES, WARPS>;
    // Only what the main loop needs is kept; the output pointers are derived at the end
    // (o_head, lse_head), so that they do not hold registers through the loop.
    uint8_t* sQ;
    int m0; // first query row of the block
    int qh; // flat (batch, query head): indexes q_scale
    int kh; // flat (batch, KV head): indexes k_scale and v_scale
    const uint8_t* q_head;
    const uint8_t* k_head;
    const uint8_t* vt_head;
    int vt_stride;

    __device__ __forceinline__ Fp8Block(uint8_t* smem, const uint8_t* q, const uint8_t* k, const uint8_t* vt,
                                        const FwdParams& p, int vt_stride_)
        : sQ(smem), vt_stride(vt_stride_) {
        m0 = blockIdx.x * BM;
        qh = blockIdx.z * p.q_heads + blockIdx.y;
        kh = blockIdx.z * p.kv_heads + blockIdx.y / p.group;
        q_head = q + static_cast<int64_t>(qh) * p.q_len * D;
        k_head = k + static_cast<int64_t>(kh) * p.kv_len * D;
        vt_head = vt + static_cast<int64_t>(kh) * D * vt_stride;
    }

    __device__ __forceinline__ uint8_t* k_tile(int buf) const { return sQ + BM * D + buf * BN * D; }
    __device__ __forceinline__ uint8_t* v_tile(int buf) const {
        return sQ + BM * D + STAGES * BN * D + buf * BN * D;
    }
    __device__ __forceinline__ OutT* o_head(OutT* o, const FwdParams& p) const {
        return o + static_cast<int64_t>(qh) * p.q_len * D;
    }
    // Null when no LSE is written.
    __device__ __forceinline__ float* lse_head(float* lse, const FwdParams& p) const {
        return lse == nullptr ? nullptr : lse + static_cast<int64_t>(qh) * p.q_len;
    }

    // K rows past kv_len are zero-filled; Vᵀ is padded to a multiple of BN keys, so every
    // one of its rows is in bounds.
    __device__ __forceinline__ void load_kv(int tile, int buf, const FwdParams& p, int tid) const {
        const int key0 = tile * BN;
        load_bytes_async<D, BN, Cfg::kThreads>(k_tile(buf), k_head + static_cast<int64_t>(key0) * D, D,
                                               p.kv_len - key0, tid);
        load_bytes_async<BN, D, Cfg::kThreads>(v_tile(buf), vt_head + key0, vt_stride, D, tid);
    }

    // Issues the Q tile and the first STAGES - 1 K/Vᵀ tiles, one cp.async group per stage
    // (the Q tile rides in the first).
    __device__ __forceinline__ void start(int n_tiles, const FwdParams& p, int tid) const {
        load_bytes_async<D, BM, Cfg::kThreads>(sQ, q_head + static_cast<int64_t>(m0) * D, D, p.q_len - m0, tid);
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < n_tiles) load_kv(s, s, p, tid);
            cp_async_commit();
        }
    }
};

} // namespace attn
