// The score-modifying features of the f16/bf16 forward (sliding window, softcap, ALiBi,
// attention sinks), shared by the mma.sync kernel (fwd_kernel.cuh) and the Hopper kernel
// (fwd_hopper_kernel.cuh). They are compiled into one extra entry per (tile, causal) with the
// FEATURES template flag, where every feature is a runtime value of FwdParams::feat (off =
// null pointer / -1 / 0), instead of one kernel per combination of features.
//
// Per score, in attn-ref's order (`Features`), which is FlashAttention's:
// 1. softcap on the raw f32 score, with the softmax scale folded in as FlashAttention-2 does
//    (`apply_softcap` in csrc/flash_attn/src/softmax.h): s ← tanh(s · scale/c) and the
//    softmax then runs with scale c (the launcher sets scale_log2 = c·log2 e), so softcap is
//    applied before masking and before the row max, as FA2/FA3 do;
// 2. ALiBi: s ← s − slope'·|i + Sk − Sq − j|, slope' = slope / softmax scale (the raw-score
//    unit; the launcher uploads the divided slopes);
// 3. the mask: causal ∩ window, per row an interval [lo, hi) of keys;
// 4. the sink joins the row's max and denominator in the epilogue (epilogue.cuh).
// Key tiles outside the union of a block's intervals are never loaded or computed, and
// tiles inside every row's interval skip the mask: FlashAttention-3's local-window n-block
// range (hopper/block.h `get_n_block_min_max`, hopper/mask.h).
#pragma once
#include "mask.cuh"

namespace attn {

// Keys visible to query row `row`: [lo, hi), empty when hi <= lo. The window is aligned
// bottom-right (diagonal i + Sk − Sq) whatever the causal alignment; lo and hi are
// non-decreasing in the row.
struct KeyRange {
    int lo;
    int hi;
};

// P: FwdParams or BwdParams (fields q_len, kv_len, diag_offset and feat), so the backward
// masks exactly the keys the forward did.
template <bool CAUSAL, class P>
__device__ __forceinline__ KeyRange row_key_range(int row, const P& p) {
    int hi = visible_keys<CAUSAL>(row, p);
    int lo = 0;
    const long long diag = static_cast<long long>(row) + p.kv_len - p.q_len;
    if (p.feat.window_left >= 0) {
        const long long x = diag - p.feat.window_left;
        lo = x < 0 ? 0 : (x > p.kv_len ? p.kv_len : static_cast<int>(x));
    }
    if (p.feat.window_right >= 0) {
        const long long x = diag + p.feat.window_right + 1;
        hi = x < 0 ? 0 : (x < hi ? static_cast<int>(x) : hi);
    }
    return {lo, hi};
}

// The key tiles a query block [m0, m0 + BM) needs, [t_begin, t_begin + n_tiles), and the keys
// every row of the block sees, [all_lo, all_hi) (tiles inside it need no mask). Mirrored by
// `key_tile_range` in src/launch.rs, whose unit tests check it against attn-ref.
template <bool CAUSAL, int BM, int BN>
__device__ __forceinline__ void key_tile_range(int m0, const FwdParams& p, int& t_begin, int& n_tiles,
                                               int& all_lo, int& all_hi) {
    int last_row = m0 + BM - 1;
    if (last_row > p.q_len - 1) last_row = p.q_len - 1;
    const KeyRange first = row_key_range<CAUSAL>(m0, p);
    const KeyRange last = row_key_range<CAUSAL>(last_row, p);
    t_begin = first.lo / BN;
    n_tiles = last.hi > first.lo ? (last.hi + BN - 1) / BN - t_begin : 0;
    all_lo = last.lo;
    all_hi = first.hi;
}

// Whether key tile [key0, key0 + BN) needs the mask for some row of the block.
template <int BN>
__device__ __forceinline__ bool tile_needs_mask(int key0, int all_lo, int all_hi) {
    return key0 < all_lo || key0 + BN > all_hi;
}

// Sets the scores outside [lo_r, hi_r) to -inf for the thread's rows g (r = 0) and g + 8
// (r = 1) of a warp's S fragment (mma.m16n8 accumulator layout, as apply_mask).
template <int NT>
__device__ __forceinline__ void apply_mask_range(float (&s)[NT][4], int key0, const KeyRange (&rows)[2], int t) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int key = key0 + n * 8 + 2 * t + e;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                if (key < rows[r].lo || key >= rows[r].hi) s[n][2 * r + e] = -INFINITY;
            }
        }
    }
}

// tanh(x) = 1 − 2 / (e^{2x} + 1) on ex2.approx and a fast division: an absolute error of a
// few 1e-7, which the softcap c multiplies into the logit. (tanh.approx.f32, which
// FlashAttention uses through cutlass::fast_tanh, has a relative error of 2^-11: 0.015 in
// the logit at c = 30, far above the f16 rounding the tolerance rule allows.) ±inf and large
// |x| saturate to ±1; NaN stays NaN. Two MUFU ops (ex2, rcp) per score on top of the
// softmax's ex2 make softcap MUFU-bound (1.66× plain at D = 128); a reciprocal by Newton's
// iteration on the FMA pipe instead (one MUFU op) was slower still, 2.11× (run 60,
// docs/PERF.md): the feature entries are issue-bound too.
__device__ __forceinline__ float softcap_tanh(float x) {
    const float e = exp2f(x * 2.885390081777926815f); // 2·log2(e)
    return 1.f - __fdividef(2.f, e + 1.f);
}

// Softcap and ALiBi on the raw scores of one S fragment: rows row0 (g) and row0 + 8, keys
// key0 + 8n + 2t + e. `slope` is ALiBi's slope in raw-score units (0: off).
template <int NT>
__device__ __forceinline__ void apply_score_mod(float (&s)[NT][4], int key0, int row0, float slope,
                                                const FwdParams& p, int t) {
    if (p.feat.softcap_in != 0.f) {
        const float f = p.feat.softcap_in;
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) s[n][i] = softcap_tanh(s[n][i] * f);
    }
    if (slope != 0.f) {
        // |i + Sk − Sq − j|: the distance from the bottom-right diagonal, in float from one
        // conversion per tile: an int → float conversion per score runs on the same
        // quarter-rate pipe as ex2 (train-bench: 1.2–1.3× plain with it). Exact below 2^24.
        const float diag0 = static_cast<float>(row0 + p.kv_len - p.q_len - key0 - 2 * t);
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float dist = diag0 + static_cast<float>(8 * r - n * 8 - e);
                    s[n][2 * r + e] -= slope * fabsf(dist);
                }
    }
}

// ALiBi's slope of query head h of batch b in raw-score units (0: off).
template <class P>
__device__ __forceinline__ float alibi_slope(int b, int h, const P& p) {
    return p.feat.alibi == nullptr ? 0.f : p.feat.alibi[b * p.feat.alibi_batch_stride + h];
}

// The sink logit of query head h times log2(e) (-inf: off; a -inf sink adds nothing). Read
// at the epilogue, so it holds no register through the mainloop.
template <class P>
__device__ __forceinline__ float sink_log2(int h, const P& p) {
    return p.feat.sinks == nullptr ? -INFINITY : p.feat.sinks[h];
}

// Scores of one warp's S fragment (rows row0 = g and row0 + 8, keys key0..) through softcap,
// ALiBi and the mask: what both engines run between Q·Kᵀ and the online softmax when
// FEATURES is on. The rows' key intervals are recomputed for the tiles that need the mask
// (the block's edge tiles), which keeps them out of the mainloop's live registers.
template <int NT, bool CAUSAL, int BN>
__device__ __forceinline__ void features_and_mask(float (&s)[NT][4], int key0, int row0, int all_lo, int all_hi,
                                                  float slope, const FwdParams& p, int t) {
    apply_score_mod<NT>(s, key0, row0, slope, p, t);
    if (tile_needs_mask<BN>(key0, all_lo, all_hi)) {
        const KeyRange rows[2] = {row_key_range<CAUSAL>(row0, p), row_key_range<CAUSAL>(row0 + 8, p)};
        apply_mask_range<NT>(s, key0, rows, t);
    }
}

} // namespace attn
