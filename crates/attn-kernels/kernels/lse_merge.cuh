// Merging partial attention results computed over disjoint key sets, by their log-sum-exp.
//
// A partial is described in base 2 by (m, l): m is the largest scaled score it saw (log2
// units) and l = Σ exp2(s − m) its softmax denominator. An unnormalized partial O (split-KV's
// workspace) weighs exp2(m − M)/L in the merge; a normalized partial with natural LSE λ is
// (λ·log2 e, 1) and weighs the same expression. `merge_row` is the one place both the split-KV
// epilogue (split_combine.cuh) and the LSE merge kernel below compute M, 1/L and the LSE, so
// empty rows (no partial saw a key: every m = −inf) are handled once: O = 0, LSE = −inf.
//
// The LSE merge kernel is what ring attention (attn-dist; Liu et al. 2023, "Ring Attention with
// Blockwise Transformers") and cascade attention need: an f32 accumulator [B, H, S, D] with its
// LSE [B, H, S], a partial (O in the storage type, any strides, and its LSE) merged into rows
// [row0, row0 + rows), and optionally the final result written to the output in the storage
// type instead of back to the accumulator.
#pragma once
#include "common.cuh"

namespace attn {

struct RowMerge {
    float m_use; // merged max; 0 for an empty row, so every weight is exp2(−inf) = 0, not NaN
    float inv_l; // 1 / merged denominator; 0 for an empty row
    float lse;   // natural log-sum-exp; −inf for an empty row
    __device__ __forceinline__ float weight(float m) const { return exp2f(m - m_use) * inv_l; }
};

// `ml_at(s)` returns partial s's (m, l) as a float2. `sink_log2`: an attention sink's logit in
// base 2 (-inf: none), which joins the merged max and denominator but adds no value, as in
// epilogue.cuh's `write_output`: the split-KV combine adds it once for all splits. A row no
// partial saw a key of stays empty even then.
template <typename MlAt>
__device__ __forceinline__ RowMerge merge_row(int n, MlAt ml_at, float sink_log2 = -INFINITY) {
    // Unrolled so that several partials' loads are in flight at once (the order of the sum
    // is unchanged).
    float mx = -INFINITY;
#pragma unroll 4
    for (int s = 0; s < n; ++s) mx = fmaxf(mx, ml_at(s).x);
    float m_use = mx == -INFINITY ? 0.f : mx;
    float l = 0.f;
#pragma unroll 4
    for (int s = 0; s < n; ++s) {
        const float2 ml = ml_at(s);
        l += ml.y * exp2f(ml.x - m_use);
    }
    if (sink_log2 != -INFINITY && l != 0.f) {
        const float m_new = fmaxf(m_use, sink_log2);
        l = l * exp2f(m_use - m_new) + exp2f(sink_log2 - m_new);
        m_use = mx = m_new;
    }
    return RowMerge{m_use, l == 0.f ? 0.f : 1.f / l, l == 0.f ? -INFINITY : (mx + log2f(l)) * kLn2};
}

constexpr float kLog2e = 1.4426950408889634f;

struct LseMergeParams {
    float* acc_o;          // [B, H, acc_rows, head_dim] f32, contiguous
    float* acc_lse;        // [B, H, acc_rows]
    const void* part_o;    // [B, H, rows, head_dim] storage type, strides below; null: no partial
    const float* part_lse; // [B, H, rows], contiguous
    void* out;             // null: merge into the accumulator; else the final O (strides below)
    float* out_lse;        // with `out`: [B, H, acc_rows] (null: not wanted)
    int64_t part_stride[3]; // batch, head, row (elements)
    int64_t out_stride[3];
    int heads, rows, acc_rows, row0, head_dim;
    int acc_empty; // the accumulator's rows [row0, row0 + rows) hold nothing yet
};

// One warp per row; lanes take column pairs. Grid: (ceil(rows / 8), heads, batch), 256 threads.
template <typename T>
__device__ __forceinline__ void lse_merge(const LseMergeParams& p) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * 8 + warp;
    if (r >= p.rows) return;
    const int h = blockIdx.y, b = blockIdx.z;
    const int64_t acc_row = (static_cast<int64_t>(b) * p.heads + h) * p.acc_rows + p.row0 + r;
    const float* part_lse = p.part_lse + (static_cast<int64_t>(b) * p.heads + h) * p.rows + r;
    const float acc_m = p.acc_empty ? -INFINITY : p.acc_lse[acc_row] * kLog2e;
    const float part_m = p.part_o == nullptr ? -INFINITY : *part_lse * kLog2e;
    const RowMerge mr = merge_row(2, [&](int s) { return make_float2(s == 0 ? acc_m : part_m, 1.f); });
    const float wa = mr.weight(acc_m), wp = mr.weight(part_m);
    float* acc = p.acc_o + acc_row * p.head_dim;
    const T* part = static_cast<const T*>(p.part_o) + b * p.part_stride[0] + h * p.part_stride[1] +
                    r * p.part_stride[2];
    T* out = static_cast<T*>(p.out) + b * p.out_stride[0] + h * p.out_stride[1] +
             (p.row0 + r) * p.out_stride[2];
    for (int d = 2 * lane; d < p.head_dim; d += 64) {
        float2 x = make_float2(0.f, 0.f);
        if (wa != 0.f) {
            const float2 a = *reinterpret_cast<const float2*>(acc + d);
            x.x = wa * a.x;
            x.y = wa * a.y;
        }
        if (wp != 0.f) {
            const uint32_t packed = *reinterpret_cast<const uint32_t*>(part + d);
            const float2 y = StorageTraits<T>::unpack(packed);
            x.x += wp * y.x;
            x.y += wp * y.y;
        }
        if (p.out != nullptr)
            *reinterpret_cast<uint32_t*>(out + d) = StorageTraits<T>::pack(x.x, x.y);
        else
            *reinterpret_cast<float2*>(acc + d) = x;
    }
    if (lane == 0) {
        if (p.out == nullptr)
            p.acc_lse[acc_row] = mr.lse;
        else if (p.out_lse != nullptr)
            p.out_lse[acc_row] = mr.lse;
    }
}

} // namespace attn

#define ATTN_LSE_MERGE_ENTRY(NAME, T)                                                              \
    extern "C" __global__ void __launch_bounds__(256) NAME(const attn::LseMergeParams p) {        \
        attn::lse_merge<T>(p);                                                                     \
    }
