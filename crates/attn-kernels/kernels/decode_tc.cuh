// The decode kernel's tensor-core stage for an E4M3 KV cache (decode_kernel.cuh picks it for
// head-dim buckets 32, 64 and 128). The FMA stage spends ~111 warp instructions per key on a
// 4-row GQA group (ncu, docs/PERF.md run 34): dot products, a shuffle reduction and the
// softmax of every score repeated on 16 lanes. Here each warp owns 16-key blocks of the ring
// stage and runs both GEMMs on mma.m16n8k16 with the query rows as the 8-wide N dimension
// (the swapped form FlashAttention-3's backward uses for Sᵀ = K·Qᵀ):
//
//   Sᵀ[16 keys × 8 rows] = K[16 keys × D] · Qᵀ      (K codes are the A operand)
//   Oᵀ[D × 8 rows]      += Vᵀ[D × 16 keys] · Pᵀ     (V codes are the A operand)
//
// so up to eight query rows (a GQA group) fill the MMA with no padding rows, and each lane
// keeps the softmax state of two rows. Operand tricks:
// - Q·Kᵀ sums over D, so any permutation of D applied to both K and Q is free: a lane reads
//   its K codes as whole 32-bit words (4 consecutive columns), whose low and high code pairs
//   become the A fragment's k = (2c, 2c+1) and (2c+8, 2c+9); Q's B fragment is loaded with the
//   same permutation, which makes it a contiguous slice of the row.
// - Pᵀ leaves the first MMA in the C layout ([key][row]); `movmatrix.trans` turns each 8×8
//   half into the B layout ([row][key]) of the second.
// - Vᵀ's A fragment wants one column of four keys per register: each lane loads the same
//   column range from four keys and transposes the 4×4 bytes with `prmt` (V is never
//   transposed in memory). Oᵀ's rows are then a permutation of D that the final store undoes.
// - The codes widen to f16 (`cvt.rn.f16x2.e4m3x2`, or fp8.cuh's integer trick on sm_80), so
//   both MMAs run on f16 whatever the query type: a bf16 Q is scaled by a power of two into
//   f16's range first (exact for every value within 2^-24 of the largest; the scale is undone
//   in the scores).
// The ring's rows are stored with their 16-byte chunks XOR-swizzled by the row (kSwizzle), so
// the eight rows an lds.128 phase reads land in distinct bank groups at D = 128.
#pragma once
#include "fp8.cuh"
#include "score_mod.cuh"

namespace attn {

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
    uint32_t y;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

// Loads BYTES (4, 8 or 16) consecutive bytes from shared memory as 32-bit words.
template <int BYTES> __device__ __forceinline__ void lds_words(uint32_t* w, const unsigned char* src) {
    if constexpr (BYTES == 16) {
        const uint4 u = *reinterpret_cast<const uint4*>(src);
        w[0] = u.x;
        w[1] = u.y;
        w[2] = u.z;
        w[3] = u.w;
    } else if constexpr (BYTES == 8) {
        const uint2 u = *reinterpret_cast<const uint2*>(src);
        w[0] = u.x;
        w[1] = u.y;
    } else {
        static_assert(BYTES == 4, "4, 8 or 16 bytes");
        w[0] = *reinterpret_cast<const uint32_t*>(src);
    }
}

// The tensor-core decode state of one warp: Q in B-fragment form, Oᵀ accumulators and the
// online-softmax state of rows 2c and 2c+1 (c = lane % 4).
template <typename T, int DK, int ROWS> struct DecodeTc {
    static_assert(DK == 32 || DK == 64 || DK == 128, "tensor-core decode buckets");
    static_assert(ROWS <= 8, "the query rows are the MMA's N = 8");
    static constexpr int kRowBytes = DK;          // E4M3 codes
    static constexpr int kChunks = DK / 16;       // 16-byte chunks per row
    static constexpr int kSwizzle = (kChunks < 8 ? kChunks : 8) - 1;
    static constexpr int kMmas = DK / 16;         // k16 steps of Sᵀ, and m16 tiles of Oᵀ
    static constexpr int kKBytes = DK / 4;        // K bytes per lane and key (columns c·D/4…)
    static constexpr int kVBytes = DK / 8;        // V bytes per lane and key (columns g·D/8…)
    static constexpr int kKLoad = kKBytes < 16 ? kKBytes : 16;
    static constexpr int kVLoad = kVBytes < 16 ? kVBytes : 16;

    uint32_t q[DK / 8];      // Q[row g][c·D/4 + 2i, +1] as f16x2 (the B fragments, in order)
    float acc[kMmas][4];     // Oᵀ tile j: [g·D/8 + 2j (+1 for 2,3)][rows 2c, 2c+1]
    float m[2], l[2];        // rows 2c, 2c+1; l is this lane's partial sum until finish()

    // Byte offset of logical byte `off` of stage row `row` (its chunk XOR-swizzled).
    static __device__ __forceinline__ int swz(int row, int off) {
        return row * kRowBytes + (((off >> 4) ^ (row & kSwizzle)) << 4) + (off & 15);
    }

    // Loads the query rows (rows past q_len and columns past head_dim are zero) and returns
    // the factor the scores must be multiplied by to undo Q's power-of-two scale.
    __device__ __forceinline__ float load_q(const T* q_head, int64_t row_stride, int q_len, int head_dim, int lane) {
        const int g = lane >> 2, c = lane & 3;
        float qf[DK / 4];
        float amax = 0.f;
#pragma unroll
        for (int v = 0; v < DK / 32; ++v) { // 8-column vectors
            const int col = c * (DK / 4) + 8 * v;
            uint4 u = make_uint4(0u, 0u, 0u, 0u);
            if (g < ROWS && g < q_len && col < head_dim)
                u = *reinterpret_cast<const uint4*>(q_head + static_cast<int64_t>(g) * row_stride + col);
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 f = StorageTraits<T>::unpack(w[i]);
                qf[8 * v + 2 * i] = f.x;
                qf[8 * v + 2 * i + 1] = f.y;
                amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
            }
        }
        // Scale so that the largest |q| lands in [2^13, 2^14): far from f16's overflow even
        // after the f32 accumulation, and small values keep their bits.
        const uint32_t bits = __reduce_max_sync(0xffffffffu, __float_as_uint(amax));
        const int ex = static_cast<int>((bits >> 23) & 0xFF);
        const int e = bits == 0u ? 0 : max(-100, min(100, 140 - ex));
        const float mul = __int_as_float((127 + e) << 23);
#pragma unroll
        for (int i = 0; i < DK / 8; ++i) {
            const __half2 h = __floats2half2_rn(qf[2 * i] * mul, qf[2 * i + 1] * mul);
            q[i] = *reinterpret_cast<const uint32_t*>(&h);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            m[r] = -INFINITY;
            l[r] = 0.f;
        }
#pragma unroll
        for (int j = 0; j < kMmas; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;
        return __int_as_float((127 - e) << 23);
    }

    // One ring stage's share of this warp: BLOCKS blocks of 16 keys from stage row `row0`,
    // whose first key is `key0`; keys at or past key_hi are masked. Scores are multiplied by
    // `score_mul` (log2 units), through the softcap first when softcap_in != 0.
    template <int BLOCKS>
    __device__ __forceinline__ void stage(const unsigned char* sk, const unsigned char* sv, int row0, int key0,
                                          int key_hi, float softcap_in, float score_mul, int lane) {
        const int g = lane >> 2, c = lane & 3;
        float s[BLOCKS][4];
        // Sᵀ = K·Qᵀ per block: A rows g and g+8 are keys row0 + 16b + g (+8).
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
            uint32_t k0[kKBytes / 4], k1[kKBytes / 4];
            const int r0 = row0 + 16 * b + g;
#pragma unroll
            for (int u = 0; u < kKBytes / kKLoad; ++u) {
                const int off = c * kKBytes + u * kKLoad;
                lds_words<kKLoad>(k0 + u * (kKLoad / 4), sk + swz(r0, off));
                lds_words<kKLoad>(k1 + u * (kKLoad / 4), sk + swz(r0 + 8, off));
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) s[b][i] = 0.f;
#pragma unroll
            for (int j = 0; j < kMmas; ++j) {
                const uint32_t a[4] = {e4m3x2_to_f16x2(k0[j], false), e4m3x2_to_f16x2(k1[j], false),
                                       e4m3x2_to_f16x2(k0[j], true), e4m3x2_to_f16x2(k1[j], true)};
                mma_f16(s[b], a, q[2 * j], q[2 * j + 1]);
            }
        }
        // Softcap, scale and the tail mask; s[b][i]: row 2c + (i & 1), key 16b + g + 8·(i >> 1).
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float x = s[b][i];
                if (softcap_in != 0.f) x = softcap_tanh(x * softcap_in);
                x *= score_mul;
                if (key0 + 16 * b + g + 8 * (i >> 1) >= key_hi) x = -INFINITY;
                s[b][i] = x;
                mx[i & 1] = fmaxf(mx[i & 1], x);
            }
        float corr[2], m_use[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
#pragma unroll
            for (int off = 4; off < 32; off <<= 1) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], off));
            m_use[r] = mx[r] == -INFINITY ? 0.f : mx[r];
            corr[r] = exp2f(m[r] - m_use[r]);
            m[r] = mx[r];
            l[r] *= corr[r];
        }
#pragma unroll
        for (int j = 0; j < kMmas; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[j][i] *= corr[i & 1];
        // Oᵀ += Vᵀ·Pᵀ per block.
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
            float p[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                p[i] = exp2f(s[b][i] - m_use[i & 1]);
                l[i & 1] += p[i];
            }
            const __half2 x0 = __floats2half2_rn(p[0], p[1]); // [key g][rows 2c, 2c+1]
            const __half2 x1 = __floats2half2_rn(p[2], p[3]); // [key g+8][rows 2c, 2c+1]
            const uint32_t b0 = movmatrix_trans(*reinterpret_cast<const uint32_t*>(&x0));
            const uint32_t b1 = movmatrix_trans(*reinterpret_cast<const uint32_t*>(&x1));
            // Columns g·D/8 … of keys 2c, 2c+1, 2c+8, 2c+9, transposed to one word per column
            // holding those four keys' codes (key order = the A fragment's k order).
            const int rk = row0 + 16 * b + 2 * c;
            uint32_t col[kVBytes];
#pragma unroll
            for (int u = 0; u < kVBytes / kVLoad; ++u) {
                constexpr int kW = kVLoad / 4;
                uint32_t x[4][kW];
                const int off = g * kVBytes + u * kVLoad;
                lds_words<kVLoad>(x[0], sv + swz(rk, off));
                lds_words<kVLoad>(x[1], sv + swz(rk + 1, off));
                lds_words<kVLoad>(x[2], sv + swz(rk + 8, off));
                lds_words<kVLoad>(x[3], sv + swz(rk + 9, off));
#pragma unroll
                for (int w = 0; w < kW; ++w) {
                    const uint32_t t0 = __byte_perm(x[0][w], x[1][w], 0x5140);
                    const uint32_t t1 = __byte_perm(x[0][w], x[1][w], 0x7362);
                    const uint32_t t2 = __byte_perm(x[2][w], x[3][w], 0x5140);
                    const uint32_t t3 = __byte_perm(x[2][w], x[3][w], 0x7362);
                    uint32_t* y = col + 4 * (u * kW + w);
                    y[0] = __byte_perm(t0, t2, 0x5410);
                    y[1] = __byte_perm(t0, t2, 0x7632);
                    y[2] = __byte_perm(t1, t3, 0x5410);
                    y[3] = __byte_perm(t1, t3, 0x7632);
                }
            }
#pragma unroll
            for (int j = 0; j < kMmas; ++j) {
                const uint32_t a[4] = {e4m3x2_to_f16x2(col[2 * j], false), e4m3x2_to_f16x2(col[2 * j + 1], false),
                                       e4m3x2_to_f16x2(col[2 * j], true), e4m3x2_to_f16x2(col[2 * j + 1], true)};
                mma_f16(acc[j], a, b0, b1);
            }
        }
    }

    // Writes this warp's state for the groups' merge: O[row][D] (un-permuted) into o_rows,
    // and (m, l) per row; l is summed over the eight lanes that share a row first.
    __device__ __forceinline__ void finish(float* o_rows, float* m_rows, float* l_rows, int lane) {
        const int g = lane >> 2, c = lane & 3;
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int off = 4; off < 32; off <<= 1) l[r] += __shfl_xor_sync(0xffffffffu, l[r], off);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = 2 * c + r;
            if (row >= ROWS) continue;
#pragma unroll
            for (int j = 0; j < kMmas; ++j)
                *reinterpret_cast<float2*>(o_rows + row * DK + g * kVBytes + 2 * j) = make_float2(acc[j][r], acc[j][2 + r]);
            if (g == 0) {
                m_rows[row] = m[r];
                l_rows[row] = l[r];
            }
        }
    }
};

} // namespace attn
