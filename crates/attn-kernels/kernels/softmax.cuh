// Online softmax (Milakov & Gimelshein 2018; FlashAttention-2, Dao 2023) for the two rows a
// thread holds in the mma accumulator layout. Runs in base 2 with log2(e) folded into the
// scale, keeps per-thread partial row sums (reduced across the quad only at the end), and
// rescales O only by the factor exp2(m_old - m_new).
#pragma once
#include "common.cuh"

namespace attn {

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return x;
}

__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

template <int NT, int NO> struct OnlineSoftmax {
    float m[2];       // running max of scale_log2 * s, per row (base-2 domain)
    float l[2];       // this thread's partial running sum of p, per row

    __device__ __forceinline__ void init() {
        m[0] = m[1] = -INFINITY;
        l[0] = l[1] = 0.f;
    }

    // Turns scores s into unnormalized probabilities p = exp2(s*scale_log2 - m_new + log2_gain)
    // in place and rescales the output accumulator o. log2_gain scales every p (and so l) by
    // 2^log2_gain, which cancels in O = acc / l: the FP8 kernel uses 8 so that P lands in
    // E4M3's normal range before its cast (FlashAttention-3's 2^8). BREAK_RESCALE (debug
    // builds only) skips the rescale so the oracle's tests can check that the P stage
    // catches it.
    template <bool BREAK_RESCALE>
    __device__ __forceinline__ void update(float (&s)[NT][4], float (&o)[NO][4], float scale_log2,
                                           float log2_gain = 0.f) {
        float corr[2];
        update_scores<BREAK_RESCALE>(s, corr, scale_log2, log2_gain);
        rescale(o, corr);
    }

    // update() for scores with row offsets (see update_scores).
    template <bool BREAK_RESCALE>
    __device__ __forceinline__ void update(float (&s)[NT][4], float (&o)[NO][4], float scale_log2, float log2_gain,
                                           const float (&off)[2]) {
        float corr[2];
        update_scores<BREAK_RESCALE>(s, corr, scale_log2, log2_gain, off);
        rescale(o, corr);
    }

    // The score half of update(): new row maxima, p in place, row sums; `corr` receives the
    // factors O must be multiplied by, applied by rescale() once O is free (the Hopper kernel
    // runs this while the previous tile's P·V still accumulates into O).
    template <bool BREAK_RESCALE>
    __device__ __forceinline__ void update_scores(float (&s)[NT][4], float (&corr)[2], float scale_log2,
                                                  float log2_gain = 0.f) {
        const float no_offsets[2] = {0.f, 0.f};
        update_scores<BREAK_RESCALE>(s, corr, scale_log2, log2_gain, no_offsets);
    }

    // update_scores() for scores that are s + off[r] (per row of this thread; the lanes of a
    // row may differ): ALiBi's row term (score_mod.cuh, ROW_OFFSETS), added here once per row
    // instead of once per score. m stays the true running max.
    template <bool BREAK_RESCALE>
    __device__ __forceinline__ void update_scores(float (&s)[NT][4], float (&corr)[2], float scale_log2,
                                                  float log2_gain, const float (&off)[2]) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
            mx = quad_max(mx + off[r]);
            const float m_new = fmaxf(m[r], mx * scale_log2);
            // A row with every key masked so far keeps m = -inf; subtract 0 instead so that
            // exp2(-inf - (-inf)) never produces NaN.
            const float m_use = m_new == -INFINITY ? 0.f : m_new;
            corr[r] = BREAK_RESCALE ? 1.f : exp2f(m[r] - m_use);
            const float bias = fmaf(off[r], scale_log2, log2_gain - m_use);
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < NT; ++n) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float p = exp2f(fmaf(s[n][2 * r + e], scale_log2, bias));
                    s[n][2 * r + e] = p;
                    sum += p;
                }
            }
            l[r] = l[r] * corr[r] + sum;
            m[r] = m_new;
        }
    }

    static __device__ __forceinline__ void rescale(float (&o)[NO][4], const float (&corr)[2]) {
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            o[n][0] *= corr[0];
            o[n][1] *= corr[0];
            o[n][2] *= corr[1];
            o[n][3] *= corr[1];
        }
    }
};

} // namespace attn
