// The decode kernel's tensor-core stage for an E4M3 KV cache (every head-dim bucket, on rows
// of 32, 64, 128 or 256 codes: decode_kernel.cuh). The FMA stage it replaced spent ~111 warp
// instructions per key on a 4-row GQA group (ncu, docs/PERF.md run 34): dot products, a shuffle reduction and the
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
//
// DecodeTc16 is the same stage for f16/bf16 caches: the same two MMAs in the cache's type,
// with K's A fragments by `ldmatrix` and Vᵀ's by `ldmatrix.trans` (no permutation of D, no
// widening, no Q scale). The FMA stage spent ~75 warp instructions per key of a 4-row GQA
// group there, and the H200 ran it at 3.3 TB/s against cuDNN's 4.4 (docs/PERF.md, run 170).
// DecodeTc16 also runs D = 192 and 256 (two warps per CTA there: decode_kernel.cuh), where
// the FMA stage ran 4-row GQA groups at 1.13–1.24× and 1.55× SDPA's time (run 187).
// Both stages share DecodeTcSoftmax: the online softmax of the Sᵀ fragments and Pᵀ's B
// fragments.
#pragma once
#include "fp8.cuh"
#include "score_mod.cuh"

namespace attn {

// What a decode stage does to its raw scores before the online softmax, in score_mod.cuh's
// order: the softcap's tanh(s · softcap_in) (0: off), the scale into log2 units (score_mul),
// ALiBi's −slope·|diag − key| with the row's slope in log2 units (`alibi`: the launch's rows'
// slopes in shared memory, nullptr: off), then the mask of keys at or past key_hi. Every row
// of a decode launch is one position — one row per head, or the GQA-packed query heads of
// one token — whose diagonal is the last key, diag = kv_len − 1.
struct DecodeScores {
    float softcap_in;
    float score_mul;
    int key_hi;
    int diag;
    const float* alibi;
};

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

// The online-softmax state both tensor-core stages keep per warp: Oᵀ accumulators (kMmas
// m16 tiles of D × the 8 query rows) and (m, l) of rows 2c and 2c+1 (c = lane % 4).
template <int kMmas> struct DecodeTcSoftmax {
    float acc[kMmas][4]; // Oᵀ tile j: [16 rows of D][rows 2c, 2c+1]
    float m[2], l[2];    // rows 2c, 2c+1; l is this lane's partial sum until finish_rows()

    __device__ __forceinline__ void init() {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            m[r] = -INFINITY;
            l[r] = 0.f;
        }
#pragma unroll
        for (int j = 0; j < kMmas; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;
    }

    // Sᵀ fragments s[b][i] (key 16b + g + 8·(i >> 1), row 2c + (i & 1)) of BLOCKS 16-key blocks
    // from key0 through DecodeScores (softcap, scale, ALiBi, tail mask); the running max and the
    // rescale of l and O. Returns the max to subtract in m_use (0 for a row with no key yet).
    template <int BLOCKS>
    __device__ __forceinline__ void update(float (&s)[BLOCKS][4], int key0, const DecodeScores& sc, float (&m_use)[2],
                                           int lane) {
        const int g = lane >> 2, c = lane & 3;
        float mx[2] = {m[0], m[1]};
        // ALiBi: rows 2c, 2c+1's slopes; the distance of key key0 + g from the diagonal.
        const bool alibi = sc.alibi != nullptr;
        const float slope[2] = {alibi ? sc.alibi[2 * c] : 0.f, alibi ? sc.alibi[2 * c + 1] : 0.f};
        const float dist0 = static_cast<float>(sc.diag - key0 - g);
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float x = s[b][i];
                if (sc.softcap_in != 0.f) x = softcap_tanh(x * sc.softcap_in);
                x *= sc.score_mul;
                if (alibi) x = fmaf(-slope[i & 1], fabsf(dist0 - static_cast<float>(16 * b + 8 * (i >> 1))), x);
                if (key0 + 16 * b + g + 8 * (i >> 1) >= sc.key_hi) x = -INFINITY;
                s[b][i] = x;
                mx[i & 1] = fmaxf(mx[i & 1], x);
            }
        float corr[2];
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
    }

    // Pᵀ of one block as the B fragments of Oᵀ += Vᵀ·Pᵀ, rounded to P (the MMA's type): the
    // C layout [key][rows 2c, 2c+1] turned into [row][keys] by `movmatrix.trans`.
    template <typename P>
    __device__ __forceinline__ void p_frags(const float (&s)[4], const float (&m_use)[2], uint32_t& b0, uint32_t& b1) {
        float p[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            p[i] = exp2f(s[i] - m_use[i & 1]);
            l[i & 1] += p[i];
        }
        b0 = movmatrix_trans(StorageTraits<P>::pack(p[0], p[1])); // [key g][rows 2c, 2c+1]
        b1 = movmatrix_trans(StorageTraits<P>::pack(p[2], p[3])); // [key g+8][rows 2c, 2c+1]
    }

    // Writes this warp's state for the groups' merge: l summed over the eight lanes that
    // share a row, then for each of the lane's rows 2c + r below ROWS, `store_o(row, r)`
    // writes that row of O (each stage keeps its own order of D) and lane g = 0 its (m, l).
    template <int ROWS, class StoreO>
    __device__ __forceinline__ void finish_rows(float* m_rows, float* l_rows, int lane, StoreO store_o) {
        const int g = lane >> 2, c = lane & 3;
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int off = 4; off < 32; off <<= 1) l[r] += __shfl_xor_sync(0xffffffffu, l[r], off);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = 2 * c + r;
            if (row >= ROWS) continue;
            store_o(row, r);
            if (g == 0) {
                m_rows[row] = m[r];
                l_rows[row] = l[r];
            }
        }
    }
};

// The tensor-core decode state of one warp for an E4M3 cache: Q in B-fragment form and the
// shared softmax state.
template <typename T, int DK, int ROWS> struct DecodeTc : DecodeTcSoftmax<DK / 16> {
    using Softmax = DecodeTcSoftmax<DK / 16>;
    using Softmax::acc;
    using Softmax::l;
    using Softmax::m;
    static_assert(DK == 32 || DK == 64 || DK == 128 || DK == 256, "tensor-core decode buckets");
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
    // acc: Oᵀ tile j holds D rows g·D/8 + 2j (+1 for registers 2, 3), a permutation of D.

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
        Softmax::init();
        return __int_as_float((127 - e) << 23);
    }

    // One ring stage's share of this warp: BLOCKS blocks of 16 keys from stage row `row0`,
    // whose first key is `key0`; its scores go through `sc` (DecodeScores) into the softmax.
    template <int BLOCKS>
    __device__ __forceinline__ void stage(const unsigned char* sk, const unsigned char* sv, int row0, int key0,
                                          const DecodeScores& sc, int lane) {
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
        float m_use[2];
        Softmax::template update<BLOCKS>(s, key0, sc, m_use, lane);
        // Oᵀ += Vᵀ·Pᵀ per block.
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
            uint32_t b0, b1;
            Softmax::template p_frags<__half>(s[b], m_use, b0, b1);
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
    // and (m, l) per row.
    __device__ __forceinline__ void finish(float* o_rows, float* m_rows, float* l_rows, int lane) {
        const int g = lane >> 2;
        Softmax::template finish_rows<ROWS>(m_rows, l_rows, lane, [&](int row, int r) {
#pragma unroll
            for (int j = 0; j < kMmas; ++j)
                *reinterpret_cast<float2*>(o_rows + row * DK + g * kVBytes + 2 * j) = make_float2(acc[j][r], acc[j][2 + r]);
        });
    }
};

// The tensor-core stage for an f16/bf16 cache: DecodeTc's two MMAs in T,
//   Sᵀ[16 keys × 8 rows] = K[16 keys × D] · Qᵀ      (K by ldmatrix: rows are keys)
//   Oᵀ[D × 8 rows]      += Vᵀ[D × 16 keys] · Pᵀ     (Vᵀ by ldmatrix.trans of V's rows)
// with P rounded to T; O keeps D's own order.
template <typename T, int DK, int ROWS> struct DecodeTc16 : DecodeTcSoftmax<DK / 16> {
    using Softmax = DecodeTcSoftmax<DK / 16>;
    using Softmax::acc;
    using Softmax::l;
    using Softmax::m;
    static_assert(DK == 32 || DK == 64 || DK == 128 || DK == 192 || DK == 256, "tensor-core decode buckets");
    static_assert(ROWS <= 8, "the query rows are the MMA's N = 8");
    static constexpr int kRowBytes = 2 * DK;
    static constexpr int kChunks = DK / 8; // 16-byte chunks per row
    static constexpr int kSwizzle = (kChunks < 8 ? kChunks : 8) - 1;
    static constexpr int kMmas = DK / 16; // k16 steps of Sᵀ, and m16 tiles of Oᵀ

    uint32_t q[kMmas][2]; // Q[row g][16j + 2c, +1] and [16j + 8 + 2c, +1]: Sᵀ's B fragments

    // Shared-memory address of 16-byte chunk `chunk` of stage row `row` (XOR-swizzled).
    static __device__ __forceinline__ uint32_t chunk_addr(uint32_t base, int row, int chunk) {
        return base + row * kRowBytes + ((chunk ^ (row & kSwizzle)) << 4);
    }

    // Loads the query rows (rows past q_len and columns past head_dim are zero); the scores
    // need no correction (returns 1).
    __device__ __forceinline__ float load_q(const T* q_head, int64_t row_stride, int q_len, int head_dim, int lane) {
        const int g = lane >> 2, c = lane & 3;
#pragma unroll
        for (int j = 0; j < kMmas; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int col = 16 * j + 8 * h + 2 * c;
                q[j][h] = g < ROWS && g < q_len && col < head_dim
                              ? *reinterpret_cast<const uint32_t*>(q_head + static_cast<int64_t>(g) * row_stride + col)
                              : 0u;
            }
        Softmax::init();
        return 1.f;
    }

    // One ring stage's share of this warp, as DecodeTc::stage.
    template <int BLOCKS>
    __device__ __forceinline__ void stage(const unsigned char* sk, const unsigned char* sv, int row0, int key0,
                                          const DecodeScores& sc, int lane) {
        const uint32_t k_base = smem_addr(sk), v_base = smem_addr(sv);
        float s[BLOCKS][4];
        // Sᵀ = K·Qᵀ: matrices (keys 0–7 | 8–15) × (columns 16j.. | 16j + 8..), lanes 8i.. address
        // matrix i, so the registers come out as the A fragment's a0..a3.
        const int k_row = (lane & 7) + ((lane >> 3) & 1) * 8, k_chunk = lane >> 4;
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
#pragma unroll
            for (int i = 0; i < 4; ++i) s[b][i] = 0.f;
#pragma unroll
            for (int j = 0; j < kMmas; ++j) {
                uint32_t a[4];
                ldmatrix_x4(a, chunk_addr(k_base, row0 + 16 * b + k_row, 2 * j + k_chunk));
                Mma<T>::run(s[b], a, q[j][0], q[j][1]);
            }
        }
        float m_use[2];
        Softmax::template update<BLOCKS>(s, key0, sc, m_use, lane);
        // Oᵀ += Vᵀ·Pᵀ: transposed matrices (keys 0–7 | 8–15) × (columns 16j.. | 16j + 8..) give
        // a0 = [D rows 16j..][keys 0–7], a1 = [16j + 8..][0–7], a2 = [16j..][8–15], a3.
        const int v_row = (lane & 7) + (lane >> 4) * 8, v_chunk = (lane >> 3) & 1;
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
            uint32_t b0, b1;
            Softmax::template p_frags<T>(s[b], m_use, b0, b1);
#pragma unroll
            for (int j = 0; j < kMmas; ++j) {
                uint32_t a[4];
                ldmatrix_x4_trans(a, chunk_addr(v_base, row0 + 16 * b + v_row, 2 * j + v_chunk));
                Mma<T>::run(acc[j], a, b0, b1);
            }
        }
    }

    // Writes this warp's state for the groups' merge: O[row][D] into o_rows and (m, l) per row.
    __device__ __forceinline__ void finish(float* o_rows, float* m_rows, float* l_rows, int lane) {
        const int g = lane >> 2;
        Softmax::template finish_rows<ROWS>(m_rows, l_rows, lane, [&](int row, int r) {
#pragma unroll
            for (int j = 0; j < kMmas; ++j) {
                o_rows[row * DK + 16 * j + g] = acc[j][r];
                o_rows[row * DK + 16 * j + g + 8] = acc[j][2 + r];
            }
        });
    }
};

} // namespace attn
