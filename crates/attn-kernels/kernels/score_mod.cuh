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

// tanh on the MUFU unit's tanh.approx.f32, FlashAttention's choice (cutlass::fast_tanh in
// FA2's softmax.h and FA3's hopper/): one MUFU op and no other instruction per score. PTX
// documents a relative error of about 2^-11; on the H100 it measured within 1.1e-5 (2^-16.5)
// over x in [−10, 10] (docs/PERF.md run 161), and attn-ref's emulation takes f32 tanh.
// ±inf saturate to ±1; NaN stays NaN.
// Why not an exact tanh: 1 − 2/(e^{2x} + 1) on ex2 and rcp (the code before run 121) is two
// MUFU ops per score besides the softmax's ex2, three in all, and the MUFU pipe (16 per clock
// per SM) then takes 1.5× the tensor cores' time at D = 128: softcap cost 1.66–1.76× the
// plain forward. A reciprocal by Newton's iteration on the FMA pipe was slower still (2.11×,
// run 60): the feature entries are issue-bound too. docs/PERF.md has the figures.
__device__ __forceinline__ float softcap_tanh(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The softcap's derivative for the backward, 1 − tanh²(x) = 4u / (1 + u)² with u = e^{−2|x|}:
// accurate to f32 level on ex2 and rcp. The backward takes P from softcap_tanh, as the forward
// did (so P matches the forward's LSE), but not this factor: 1 − t² from tanh.approx's t
// loses its relative accuracy where t nears ±1 (at t = 0.99, 2^-11 in t is 5 % of 1 − t²),
// which failed the FA3 rule on dQ (run 122). ±inf give 0; NaN stays NaN.
__device__ __forceinline__ float softcap_dtanh(float x) {
    const float u = exp2f(-2.885390081777926815f * fabsf(x)); // e^{−2|x|}, in (0, 1]
    const float r = __fdividef(1.f, 1.f + u);
    return 4.f * u * r * r;
}

// Softcap and ALiBi on the raw scores of one S fragment: rows row0 (g) and row0 + 8, keys
// key0 + 8n + 2t + e. `slope` is ALiBi's slope in raw-score units (0: off).
//
// ROW_OFFSETS (the Hopper kernel): ALiBi may leave part of its bias in `off`, per row of this
// thread, for the online softmax to add (OnlineSoftmax::update_scores): the true score is
// s + off[r]. On a tile whose keys all lie on one side of every diagonal of the warp's 16
// rows, −slope·|i + Sk − Sq − j| splits into a key term, ±slope·(8n + e) — one FFMA per
// score with an immediate — and a per-thread row term, ∓slope·(diag − key0 − 2t), which the
// softmax adds once per row: one instruction per score instead of two (a FADD for the
// distance and an FFMA). Only the tiles the diagonal crosses take the general path. Without
// ROW_OFFSETS, or when ALiBi is off, `off` is 0.
template <int NT, bool ROW_OFFSETS = false>
__device__ __forceinline__ void apply_score_mod(float (&s)[NT][4], int key0, int row0, float slope,
                                                const FwdParams& p, int t, float (&off)[2]) {
    off[0] = off[1] = 0.f;
    if (p.feat.softcap_in != 0.f) {
        const float f = p.feat.softcap_in;
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) s[n][i] = softcap_tanh(s[n][i] * f);
    }
    if (slope != 0.f) {
        // The distance of row g from key0 + 2t along the bottom-right diagonal.
        const int diag = row0 + p.kv_len - p.q_len - key0 - 2 * t;
        if constexpr (ROW_OFFSETS) {
            // The warp's smallest diagonal (row g = 0, t = 0) relative to key0: warp-uniform.
            const int g = (threadIdx.x & 31) >> 2;
            const int warp_diag = diag + 2 * t - g;
            // +1: every key of the tile at or left of every row's diagonal (dist ≥ 0);
            // −1: every key right of it; 0: the diagonal crosses the tile.
            const int side = warp_diag >= NT * 8 - 1 ? 1 : (warp_diag + 15 < 0 ? -1 : 0);
            if (side != 0) {
                // dist = diag + 8r − 8n − e; −slope·|dist| = −ss·(diag + 8r) + ss·(8n + e).
                const float ss = side > 0 ? slope : -slope;
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int r = 0; r < 2; ++r)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            s[n][2 * r + e] = fmaf(ss, static_cast<float>(8 * n + e), s[n][2 * r + e]);
                off[0] = -ss * static_cast<float>(diag);
                off[1] = -ss * static_cast<float>(diag + 8);
                return;
            }
        }
        // |i + Sk − Sq − j|: the distance from the bottom-right diagonal, in float from one
        // conversion per tile: an int → float conversion per score runs on the same
        // quarter-rate pipe as ex2 (train-bench: 1.2–1.3× plain with it). Exact below 2^24.
        const float diag0 = static_cast<float>(diag);
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
// (the block's edge tiles), which keeps them out of the mainloop's live registers. `off`:
// the row offsets of apply_score_mod (ROW_OFFSETS), for the softmax.
template <int NT, bool CAUSAL, int BN, bool ROW_OFFSETS = false>
__device__ __forceinline__ void features_and_mask(float (&s)[NT][4], int key0, int row0, int all_lo, int all_hi,
                                                  float slope, const FwdParams& p, int t, float (&off)[2]) {
    apply_score_mod<NT, ROW_OFFSETS>(s, key0, row0, slope, p, t, off);
    if (tile_needs_mask<BN>(key0, all_lo, all_hi)) {
        const KeyRange rows[2] = {row_key_range<CAUSAL>(row0, p), row_key_range<CAUSAL>(row0 + 8, p)};
        apply_mask_range<NT>(s, key0, rows, t);
    }
}

} // namespace attn
