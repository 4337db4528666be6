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

// 2^x for x <= 0 (the softmax's exponents; -inf gives 0, NaN stays NaN) on the FMA pipe,
// after FlashAttention-4's polynomial exp2 (Zadouri, Dao et al. 2025): the MUFU unit gives 16
// results per clock per SM, and with softcap's tanh that pipe takes as long as the tensor
// cores at D = 128, so part of the exponentials move to the FMA pipe (128 per clock).
// x = j + f with j = floor(x) (one add rounding toward -inf against 1.5 * 2^23, whose low
// mantissa bits then hold j), 2^f on [0, 1) by a polynomial with p(0) = 1, 2^j from j's
// bits. The coefficients are minimax fits of the relative error (Lawson's iteration on a
// dense grid): degree 3 errs by at most 8.7e-5 (2^-13.5, for bf16's P, whose rounding is
// 2^-9), degree 4 by 3.0e-6 (f16's P, rounding 2^-12). Below 2^-126 the result is 0, as
// ex2.approx.ftz's. About ten FMA/ALU instructions replace one MUFU op.
// The coefficients and the steps are mirrored by `exp2_fma_model` in src/softmax_model.rs,
// whose tests bound the error over every float in [-127, 0].
template <int DEGREE> __device__ __forceinline__ float exp2_fma(float x) {
    static_assert(DEGREE == 3 || DEGREE == 4, "exp2_fma: degree 3 or 4");
    float xc; // max(x, -127), NaN kept (a plain fmaxf would turn NaN into -127)
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(xc) : "f"(x), "f"(-127.f));
    constexpr float kShift = 12582912.f;          // 1.5 * 2^23
    const float t = __fadd_rd(xc, kShift);        // kShift + floor(xc), exactly
    const float f = xc - (t - kShift);            // [0, 1]: 1 only for x just below an integer
    float q;
    if constexpr (DEGREE == 3) {
        q = fmaf(fmaf(0x1.3ba710p-4f, f, 0x1.d2397ep-3f), f, 0x1.63e63cp-1f);
    } else if constexpr (DEGREE == 4) {
        q = fmaf(fmaf(fmaf(0x1.b7f1b6p-7f, f, 0x1.abfa9cp-5f), f, 0x1.ee2410p-3f), f, 0x1.62d6c8p-1f);
    }
    const float poly = fmaf(q, f, 1.f); // 2^f
    // (t's bits << 23) leaves j in the exponent field (kShift's own bits shift out); adding
    // 127 there gives 2^j, and 0 at j = -127.
    const float pow_j = __int_as_float((__float_as_int(t) << 23) + 0x3f800000);
    return poly * pow_j;
}

// Where the online softmax computes its exponentials. Exp2Mufu: all on ex2.approx (MUFU).
struct Exp2Mufu {
    static __device__ __forceinline__ float at(int /*n_tile*/, float x) { return exp2f(x); }
};

// n-tiles n with n % DEN < NUM on exp2_fma<DEGREE>, the others on MUFU: NUM/DEN of the
// exponentials move to the FMA pipe (n is a constant once the softmax's loops unroll).
template <int NUM, int DEN, int DEGREE> struct Exp2Split {
    static_assert(0 < NUM && NUM <= DEN, "Exp2Split: 0 < NUM <= DEN");
    static __device__ __forceinline__ float at(int n_tile, float x) {
        return n_tile % DEN < NUM ? exp2_fma<DEGREE>(x) : exp2f(x);
    }
};

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
    template <bool BREAK_RESCALE, class Exp2 = Exp2Mufu>
    __device__ __forceinline__ void update(float (&s)[NT][4], float (&o)[NO][4], float scale_log2, float log2_gain,
                                           const float (&off)[2]) {
        float corr[2];
        update_scores<BREAK_RESCALE, Exp2>(s, corr, scale_log2, log2_gain, off);
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
    // instead of once per score. m stays the true running max. Exp2: where the exponentials
    // run (Exp2Mufu, Exp2Split).
    template <bool BREAK_RESCALE, class Exp2 = Exp2Mufu>
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
                    const float p = Exp2::at(n, fmaf(s[n][2 * r + e], scale_log2, bias));
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
