// The decode kernel: a few query rows (one token per sequence, or the G query heads of one
// KV head packed as rows) against a long KV cache, which is a pure streaming problem — every
// K/V byte is read once and feeds ROWS·2 FMAs per element. A 64-row MMA tile would waste
// 60+ of its rows; this kernel instead follows FlashInfer's decode (Ye et al. 2025,
// "FlashInfer: Efficient and Customizable Attention Engine for LLM Inference Serving") and
// Flash-Decoding (Dao et al. 2023): keys are spread over groups of lanes, each group
// computes whole dot products on the FMA pipe (8 columns per lane, a shuffle reduction),
// keeps its own online-softmax state, and the groups' states are merged once at the end.
// K/V stream through a 3-stage cp.async ring of ~16 KiB stages, so each CTA keeps ~32 KiB in
// flight; four CTAs per SM (128 threads, 48 KiB of shared memory, ≤ 128 registers up to 4
// rows) keep ~128 KiB per SM in flight, several times what hides DRAM latency. The f16/bf16
// tensor-core entries at D ≥ 96 take 24–32 KiB stages instead, two CTAs per SM, the same
// ~128 KiB per SM in flight.
//
// The per-stage math is a policy: decode_tc.cuh's tensor-core stages — both GEMMs on
// mma.sync — for every bucket of an f16/bf16 cache (DecodeTc16; 96, 160 and 224 on rows
// padded to 128, 192 and 256) and for E4M3 caches at D ≤ 128 (DecodeTc), or DecodeFma below
// (E4M3 caches above 128). The FMA stage was issue-bound on GQA groups (docs/PERF.md).
//
// KV8: K/V are E4M3 codes (an FP8 KV cache, kv_fp8.cuh's format): half the bytes per stage,
// widened exactly in registers (sm_89+'s cvt.f16x2.e4m3x2; fp8.cuh's integer trick on
// sm_80), the scales folded into the scores and O. One code layout for dense, packed (cu_seqlens_k) and paged caches, `seqused_k` and
// split-KV: all runtime values (p.seqs, p.n_splits), so the catalog instantiates one entry
// per (type, cache type, head-dim bucket, ROWS bucket). Softcap, ALiBi, attention sinks and
// the sliding window are runtime features. A launch's rows are one position (one row per
// head, or the GQA-packed query heads of one token: the launcher's rule), so they share the
// window and ALiBi's distances. Row r's sink and ALiBi slope are query head h·q_len + r's:
// GQA-packed rows are the query heads of KV head h. The sink is added once: by the
// unsplit merge, or by split 0's partial, which sees a key whenever the row does (a launch's
// rows share their visible keys, and split 0 takes the first visible tile).
#pragma once
#include "decode_tc.cuh"
#include "kv_fp8.cuh"
#include "score_mod.cuh"
#include "seqs.cuh"
#include "split_combine.cuh"

namespace attn {

template <typename T, bool KV8, int DK, int ROWS>
struct DecodeConfig {
    using KV = std::conditional_t<KV8, uint8_t, T>;
    // The ring's head dim: the bucket, except where a tensor-core stage runs on rows padded
    // with zero columns (the copies zero-fill them, so they cost no DRAM bytes): bucket 96 on
    // the stage of 128 (the FMA stage read 96-column rows at 2.8 TB/s where this reads them
    // at 3.2, H200, docs/PERF.md run 187), and for f16/bf16 caches 160 on 192, 224 on 256.
    static constexpr int kRingDk = DK == 96 ? 128 : !KV8 && DK == 160 ? 192 : !KV8 && DK == 224 ? 256 : DK;
    // The tensor-core stages (decode_tc.cuh): D = 32/64/128 for both cache types, and
    // 192/256 for f16/bf16 caches. Each warp takes whole 16-key blocks of a stage and its ring
    // rows are chunk-swizzled.
    static constexpr bool kTensorCores =
        kRingDk == 32 || kRingDk == 64 || kRingDk == 128 || (!KV8 && (kRingDk == 192 || kRingDk == 256));
    // Four warps, except the tensor-core stage at D ≥ 192, which takes two: a stage of 32
    // keys (16 per warp) then keeps three stages within 96 KiB at D = 256, which sm_86/89's
    // 99 KiB per CTA allows; with four warps a stage would be 64 KiB.
    static constexpr int kWarps = kTensorCores && kRingDk >= 192 ? 2 : 4;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kVec = 8;              // columns of a key per lane
    static constexpr int kActive = DK / kVec;   // lanes that hold columns
    // Lanes per key: a power of two (so the xor reduction stays inside the group); D = 96,
    // 160, 192, 224 leave the top lanes of each group idle.
    static constexpr int kLanes = kActive <= 4 ? 4 : kActive <= 8 ? 8 : kActive <= 16 ? 16 : 32;
    static constexpr int kGroups = kThreads / kLanes; // keys computed side by side
    static constexpr int kRowBytes = kRingDk * static_cast<int>(sizeof(KV));
    static constexpr int kChunks = kRowBytes / 16;    // 16-byte chunks per key row
    // ~16 KiB of K and V per stage (8 KiB each), a whole number of keys per group.
    static constexpr int kKeysPerGroupRaw = 8192 / kRowBytes / kGroups;
    static constexpr int kKeysPerGroup = kKeysPerGroupRaw < 1 ? 1 : kKeysPerGroupRaw;
    // The tensor-core stages take at least a 16-key block per warp: 64 keys (32 KiB of f16 K
    // and V at D = 128), or 32 at D ≥ 192.
    static constexpr int kKeys =
        kTensorCores && kKeysPerGroup * kGroups < 16 * kWarps ? 16 * kWarps : kKeysPerGroup * kGroups;
    static constexpr int kStages = 3;
    static constexpr int kStageBytes = 2 * kKeys * kRowBytes;
    // The copies of one stage's K (or V) tile per thread.
    static constexpr int kCopies = (kKeys * kChunks + kThreads - 1) / kThreads;
    // The merge of the groups' states reuses the ring: O [groups][ROWS][kRingDk], then (m, l) and
    // the groups' weights.
    static constexpr int kMergeBytes = (kGroups * ROWS * kRingDk + 3 * kGroups * ROWS) * 4;
    static constexpr int kSmemBytes =
        kStages * kStageBytes > kMergeBytes ? kStages * kStageBytes : kMergeBytes;
    static constexpr int kSwizzle = kTensorCores ? (kChunks < 8 ? kChunks : 8) - 1 : 0; // DecodeTc's, DecodeTc16's
    static_assert(!kTensorCores || kKeys % (16 * kWarps) == 0, "whole 16-key blocks per warp");
    static_assert(kSmemBytes <= 99 * 1024, "fits sm_86/89's shared memory per CTA");
    // CTAs per SM the launch bounds promise: four (128 registers), except the FMA stage's
    // eight-row entries, whose Q and O alone are 128 f32 registers, and the f16/bf16
    // tensor-core entries at D ≥ 128, whose 72–96 KiB rings let only two fit anyway (at 128
    // registers the D = 128 copies' page lookups spilled) (catalog.rs mirrors this).
    static constexpr int kMinBlocks = kTensorCores ? (!KV8 && kRingDk >= 128 ? 2 : 4) : ROWS <= 4 ? 4 : 2;
    static_assert(DK % 32 == 0 && DK <= 256, "head-dim buckets");
    static_assert(ROWS >= 1 && ROWS <= 8, "decode rows");
    static_assert(!KV8 || DK % 16 == 0, "E4M3 rows are read in 16-byte chunks");
};

// Eight columns of one key row (16 bytes of T, or 8 bytes of E4M3 codes) as f32.
template <typename T, bool KV8>
__device__ __forceinline__ void load_row8(float (&x)[8], const void* src) {
    if constexpr (KV8) {
        const uint2 c = *reinterpret_cast<const uint2*>(src);
        const uint32_t h[4] = {e4m3x2_to_f16x2(c.x, false), e4m3x2_to_f16x2(c.x, true),
                               e4m3x2_to_f16x2(c.y, false), e4m3x2_to_f16x2(c.y, true)};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[i]));
            x[2 * i] = f.x;
            x[2 * i + 1] = f.y;
        }
    } else {
        const uint4 u = *reinterpret_cast<const uint4*>(src);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = StorageTraits<T>::unpack(w[i]);
            x[2 * i] = f.x;
            x[2 * i + 1] = f.y;
        }
    }
}

// The FMA stage: keys spread over groups of kLanes lanes, each lane holding 8 columns of a
// key; whole dot products by a shuffle reduction inside the group; each group keeps its own
// online-softmax state for all ROWS rows (the same on every lane of the group).
template <typename T, bool KV8, int DK, int ROWS> struct DecodeFma {
    using Cfg = DecodeConfig<T, KV8, DK, ROWS>;
    static constexpr int kGroups = Cfg::kGroups;
    // The key group thread tid belongs to (also its slot in the merge).
    static __device__ __forceinline__ int group_of(int tid) { return tid / Cfg::kLanes; }

    float qf[ROWS][8];
    float m[ROWS], l[ROWS], acc[ROWS][8];

    // Q rows in f32 registers (rows past q_len and columns past head_dim are zero); the
    // scores need no correction (returns 1).
    __device__ __forceinline__ float load_q(const T* q_head, int64_t row_stride, int q_len, int head_dim, int tid) {
        const int lane = tid % Cfg::kLanes;
        const bool active = lane < Cfg::kActive;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            if (r < q_len && active && lane < (head_dim >> 3)) {
                const uint4 u = *reinterpret_cast<const uint4*>(q_head + static_cast<int64_t>(r) * row_stride + lane * 8);
                const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float2 f = StorageTraits<T>::unpack(w[i]);
                    qf[r][2 * i] = f.x;
                    qf[r][2 * i + 1] = f.y;
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; ++i) qf[r][i] = 0.f;
            }
            m[r] = -INFINITY;
            l[r] = 0.f;
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[r][i] = 0.f;
        }
        return 1.f;
    }

    // One ring stage: this group's keys are group, group + kGroups, … of the stage, whose
    // first key is key0.
    __device__ __forceinline__ void stage(const unsigned char* sk, const unsigned char* sv, int key0,
                                          const DecodeScores& sc, int tid) {
        constexpr int KPG = Cfg::kKeysPerGroup;
        constexpr int kLanes = Cfg::kLanes;
        const int lane = tid % kLanes;
        const int group = group_of(tid);
        const bool active = lane < Cfg::kActive;
        float s[ROWS][KPG];
#pragma unroll
        for (int kk = 0; kk < KPG; ++kk) {
            float kf[8];
            if (active) {
                load_row8<T, KV8>(kf, sk + (group + kk * kGroups) * Cfg::kRowBytes + lane * 8 * sizeof(typename Cfg::KV));
            } else {
#pragma unroll
                for (int i = 0; i < 8; ++i) kf[i] = 0.f;
            }
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                float d = 0.f;
#pragma unroll
                for (int i = 0; i < 8; ++i) d = fmaf(qf[r][i], kf[i], d);
                s[r][kk] = d;
            }
        }
#pragma unroll
        for (int off = kLanes / 2; off > 0; off >>= 1)
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int kk = 0; kk < KPG; ++kk) s[r][kk] += __shfl_xor_sync(0xffffffffu, s[r][kk], off);
        // Softcap, scale, ALiBi, the tail mask (DecodeScores), then the online softmax per row.
        // The softcap and ALiBi are their own uniform branches over the whole fragment: inside
        // the loop below, ptxas if-converts the (one-instruction) tanh and the 4-row entries
        // spill 60+ bytes more.
        if (sc.softcap_in != 0.f) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int kk = 0; kk < KPG; ++kk) s[r][kk] = softcap_tanh(s[r][kk] * sc.softcap_in);
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int kk = 0; kk < KPG; ++kk) s[r][kk] *= sc.score_mul;
        if (sc.alibi != nullptr) {
            const float dist0 = static_cast<float>(sc.diag - key0 - group); // this group's first key
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const float slope = sc.alibi[r];
#pragma unroll
                for (int kk = 0; kk < KPG; ++kk)
                    s[r][kk] = fmaf(-slope, fabsf(dist0 - static_cast<float>(kk * kGroups)), s[r][kk]);
            }
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            float mx = m[r];
#pragma unroll
            for (int kk = 0; kk < KPG; ++kk) {
                float x = s[r][kk];
                if (key0 + group + kk * kGroups >= sc.key_hi) x = -INFINITY;
                s[r][kk] = x;
                mx = fmaxf(mx, x);
            }
            const float m_use = mx == -INFINITY ? 0.f : mx;
            const float corr = exp2f(m[r] - m_use);
            m[r] = mx;
            float sum = 0.f;
#pragma unroll
            for (int kk = 0; kk < KPG; ++kk) {
                s[r][kk] = exp2f(s[r][kk] - m_use);
                sum += s[r][kk];
            }
            l[r] = l[r] * corr + sum;
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[r][i] *= corr;
        }
        // O += P·V.
        if (active) {
#pragma unroll
            for (int kk = 0; kk < KPG; ++kk) {
                float vf[8];
                load_row8<T, KV8>(vf, sv + (group + kk * kGroups) * Cfg::kRowBytes + lane * 8 * sizeof(typename Cfg::KV));
#pragma unroll
                for (int r = 0; r < ROWS; ++r)
#pragma unroll
                    for (int i = 0; i < 8; ++i) acc[r][i] = fmaf(s[r][kk], vf[i], acc[r][i]);
            }
        }
    }

    // This group's state for the merge: O rows into o_rows [ROWS][DK], (m, l) per row.
    __device__ __forceinline__ void finish(float* o_rows, float* m_rows, float* l_rows, int tid) {
        const int lane = tid % Cfg::kLanes;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            if (lane < Cfg::kActive) {
#pragma unroll
                for (int i = 0; i < 8; i += 4)
                    *reinterpret_cast<float4*>(o_rows + r * DK + lane * 8 + i) =
                        make_float4(acc[r][i], acc[r][i + 1], acc[r][i + 2], acc[r][i + 3]);
            }
            if (lane == 0) {
                m_rows[r] = m[r];
                l_rows[r] = l[r];
            }
        }
    }
};

// A tensor-core stage (decode_tc.cuh: DecodeTc, or DecodeTc16) behind DecodeFma's interface:
// one group per warp, 16-key blocks.
template <typename T, bool KV8, int DK, int ROWS>
struct DecodeTcStage : std::conditional_t<KV8, DecodeTc<T, DecodeConfig<T, KV8, DK, ROWS>::kRingDk, ROWS>,
                                          DecodeTc16<T, DecodeConfig<T, KV8, DK, ROWS>::kRingDk, ROWS>> {
    using Base = std::conditional_t<KV8, DecodeTc<T, DecodeConfig<T, KV8, DK, ROWS>::kRingDk, ROWS>,
                                    DecodeTc16<T, DecodeConfig<T, KV8, DK, ROWS>::kRingDk, ROWS>>;
    static constexpr int kGroups = DecodeConfig<T, KV8, DK, ROWS>::kWarps; // one per warp
    static constexpr int kBlocks = DecodeConfig<T, KV8, DK, ROWS>::kKeys / (16 * kGroups);
    static_assert(Base::kSwizzle == DecodeConfig<T, KV8, DK, ROWS>::kSwizzle, "the ring's swizzle");
    static __device__ __forceinline__ int group_of(int tid) { return tid / 32; }

    __device__ __forceinline__ float load_q(const T* q_head, int64_t row_stride, int q_len, int head_dim, int tid) {
        return Base::load_q(q_head, row_stride, q_len, head_dim, tid % 32);
    }
    __device__ __forceinline__ void stage(const unsigned char* sk, const unsigned char* sv, int key0,
                                          const DecodeScores& sc, int tid) {
        const int row0 = (tid / 32) * 16 * kBlocks;
        Base::template stage<kBlocks>(sk, sv, row0, key0 + row0, sc, tid % 32);
    }
    __device__ __forceinline__ void finish(float* o_rows, float* m_rows, float* l_rows, int tid) {
        Base::finish(o_rows, m_rows, l_rows, tid % 32);
    }
};

template <typename T, bool KV8, int DK, int ROWS>
__device__ __forceinline__ void decode_kernel(const T* __restrict__ q,
                                              const std::conditional_t<KV8, uint8_t, T>* __restrict__ k,
                                              const std::conditional_t<KV8, uint8_t, T>* __restrict__ v,
                                              T* __restrict__ o, float* __restrict__ lse, float* __restrict__ ws_o,
                                              float* __restrict__ ws_ml, unsigned int* __restrict__ counters,
                                              const FwdParams& launch_p) {
    using Cfg = DecodeConfig<T, KV8, DK, ROWS>;
    using KV = typename Cfg::KV;
    using Stage = std::conditional_t<Cfg::kTensorCores, DecodeTcStage<T, KV8, DK, ROWS>, DecodeFma<T, KV8, DK, ROWS>>;
    constexpr int kGroups = Stage::kGroups;
    constexpr int kKeys = Cfg::kKeys;
    constexpr int kStages = Cfg::kStages;
    extern __shared__ __align__(128) unsigned char smem_raw[];

    const int split = blockIdx.x;
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    const int tid = threadIdx.x;
    const int group = Stage::group_of(tid);

    // This sequence's lengths (dense queries; packed or paged keys, seqused_k).
    FwdParams p = launch_p;
    const SeqRows seq_rows = resolve_sequence(p, b);
    const bool paged = p.seqs.block_table != nullptr;
    const int kvh = h / p.group;
    const T* q_head = head_ptr(q, p.q_stride, b, h);
    T* o_head = head_ptr(o, p.o_stride, b, h);
    float* lse_head = lse == nullptr ? nullptr : lse + static_cast<int64_t>(b * p.q_heads + h) * launch_p.q_len;
    const KV* k_head;
    const KV* v_head;
    if (paged) { // the batch stride is the page stride; rows come from the table
        k_head = k + static_cast<int64_t>(kvh) * p.k_stride[1];
        v_head = v + static_cast<int64_t>(kvh) * p.v_stride[1];
    } else {
        k_head = head_ptr(k, p.k_stride, b, kvh) + static_cast<int64_t>(seq_rows.k_row0) * p.k_stride[2];
        v_head = head_ptr(v, p.v_stride, b, kvh) + static_cast<int64_t>(seq_rows.k_row0) * p.v_stride[2];
        if (p.seqs.cu_k != nullptr) { // packed K/V: no batch stride
            k_head = k + static_cast<int64_t>(seq_rows.k_row0) * p.k_stride[2] + static_cast<int64_t>(kvh) * p.k_stride[1];
            v_head = v + static_cast<int64_t>(seq_rows.k_row0) * p.v_stride[2] + static_cast<int64_t>(kvh) * p.v_stride[1];
        }
    }

    // The keys this split reads: an equal share of the visible key tiles (the window's for
    // one row; every key otherwise). The last row's: GQA-packed rows are one position, whose
    // diagonal (kv_len − 1) is the last row's here; unpacked launches with a window have one row.
    const KeyRange visible = row_key_range<false>(p.q_len - 1, p);
    const int key_lo = visible.lo;
    const int key_hi = visible.hi > visible.lo ? visible.hi : visible.lo;
    const int n_tiles = (key_hi - key_lo + kKeys - 1) / kKeys;
    const int per = (n_tiles + p.n_splits - 1) / p.n_splits;
    const int t_first = min(n_tiles, split * per);
    const int t_count = min(n_tiles, t_first + per) - t_first;
    const int key_begin = key_lo + t_first * kKeys;

    Stage st;
    const float q_unscale = st.load_q(q_head, p.q_stride[2], p.q_len, p.head_dim, tid);
    // Scores in log2 units: s·k_scale·scale_log2, or through the softcap first.
    const float k_desc =
        (KV8 ? kv_descale(p.feat.k_descale, p.feat.descale_per_head, kvh) * kDecodeWidenGain : 1.f) * q_unscale;
    // ALiBi: row r's slope (query head h·q_len + r's, as the sinks) in log2 units: the raw-score
    // slope times the softmax scale, whatever the softcap or the cache's scales.
    __shared__ float row_alibi[8];
    const bool alibi = p.feat.alibi != nullptr;
    if (alibi && tid < 8) row_alibi[tid] = tid < p.q_len ? alibi_slope(b, h * p.q_len + tid, p) * p.scale_log2 : 0.f;
    const DecodeScores scores{p.feat.softcap_in * k_desc,
                              p.feat.softcap_in != 0.f ? p.scale_log2 : p.scale_log2 * k_desc, key_hi,
                              p.kv_len - 1, alibi ? row_alibi : nullptr};

    // The ring: stage s holds K then V rows of kKeys keys, each kRowBytes (16-byte chunks
    // XOR-swizzled by the row for the tensor-core stage; a key group of the FMA stage reads
    // one whole row, conflict-free unswizzled).
    const int* table = paged ? p.seqs.block_table + static_cast<int64_t>(b) * p.seqs.max_blocks : nullptr;
    const PageDiv div{p.seqs.page_size, p.seqs.page_mul, p.seqs.page_shift};
    const int code_chunks = KV8 ? p.head_dim >> 4 : p.head_dim >> 3; // 16-byte chunks of a row of D
    // The (page, row in page) of each copy's key, looked up one stage ahead (the table read
    // is then off the path that issues the copies).
    int pg[Cfg::kCopies], pr[Cfg::kCopies];
    auto locate = [&](int key0) {
#pragma unroll
        for (int j = 0; j < Cfg::kCopies; ++j) {
            const int i = tid + j * Cfg::kThreads;
            const int g = key0 + i / Cfg::kChunks;
            if (paged) {
                const int slot = div.slot(g);
                pg[j] = g < key_hi && i < kKeys * Cfg::kChunks ? page_of(table, slot, p.seqs.num_blocks) : 0;
                pr[j] = g - slot * div.size;
            } else {
                pg[j] = 0;
                pr[j] = g;
            }
        }
    };
    auto issue = [&](int stage, int key0) {
        unsigned char* sk = smem_raw + stage * Cfg::kStageBytes;
        unsigned char* sv = sk + kKeys * Cfg::kRowBytes;
#pragma unroll
        for (int j = 0; j < Cfg::kCopies; ++j) {
            const int i = tid + j * Cfg::kThreads;
            if (Cfg::kCopies * Cfg::kThreads != kKeys * Cfg::kChunks && i >= kKeys * Cfg::kChunks) break;
            const int r = i / Cfg::kChunks;
            const int c = i % Cfg::kChunks;
            const bool in = key0 + r < key_hi && c < code_chunks;
            const int64_t ko = static_cast<int64_t>(pg[j]) * p.k_stride[0] + static_cast<int64_t>(pr[j]) * p.k_stride[2];
            const int64_t vo = static_cast<int64_t>(pg[j]) * p.v_stride[0] + static_cast<int64_t>(pr[j]) * p.v_stride[2];
            const int cb = c * 16 / static_cast<int>(sizeof(KV)); // the chunk's first element
            const int dst = r * Cfg::kRowBytes + ((c ^ (r & Cfg::kSwizzle)) << 4);
            cp_async_16(smem_addr(sk + dst), in ? k_head + ko + cb : k_head, in);
            cp_async_16(smem_addr(sv + dst), in ? v_head + vo + cb : v_head, in);
        }
    };

    // Prologue: kStages - 1 stages in flight, one commit group each (possibly empty).
    locate(key_begin);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < t_count) {
            issue(s, key_begin + s * kKeys);
            locate(key_begin + (s + 1) * kKeys);
        }
        cp_async_commit();
    }
    for (int t = 0; t < t_count; ++t) {
        cp_async_wait<kStages - 2>();
        __syncthreads(); // stage t landed for every thread; stage t-1's buffer is free
        const int next = t + kStages - 1;
        if (next < t_count) {
            issue(next % kStages, key_begin + next * kKeys);
            locate(key_begin + (next + 1) * kKeys);
        }
        cp_async_commit();
        const unsigned char* sk = smem_raw + (t % kStages) * Cfg::kStageBytes;
        st.stage(sk, sk + kKeys * Cfg::kRowBytes, key_begin + t * kKeys, scores, tid); // row_alibi: after a sync
    }
    cp_async_wait<0>();
    __syncthreads(); // the ring is free for the merge

    // Merge the groups' states: (m, l) and O per (group, row) through shared memory.
    constexpr int RDK = Cfg::kRingDk; // the stages' O rows (columns past DK hold zeros)
    static_assert(Cfg::kSmemBytes >= (kGroups * ROWS * RDK + 3 * kGroups * ROWS) * 4, "the merge fits the ring");
    float* sm_o = reinterpret_cast<float*>(smem_raw);          // [groups][ROWS][RDK]
    float* sm_m = sm_o + kGroups * ROWS * RDK;                  // [groups][ROWS]
    float* sm_l = sm_m + kGroups * ROWS;                        // [groups][ROWS]
    float* sm_w = sm_l + kGroups * ROWS;                        // [groups][ROWS] weights
    st.finish(sm_o + group * ROWS * RDK, sm_m + group * ROWS, sm_l + group * ROWS, tid);
    __syncthreads();
    // One thread per row: the merged max and denominator (lse_merge.cuh's rule; an empty row
    // — no key seen — keeps O = 0 and LSE = -inf). The weights fold in 1/L (unsplit) or the
    // V scale alone (split: the combine normalizes).
    __shared__ float row_m[ROWS], row_l[ROWS];
    const float v_desc = KV8 ? kv_descale(p.feat.v_descale, p.feat.descale_per_head, kvh) * kDecodeWidenGain : 1.f;
    const bool split_kv = p.n_splits > 1;
    if (tid < ROWS) {
        const float sink = split == 0 && tid < p.q_len ? sink_log2(h * p.q_len + tid, p) : -INFINITY;
        const RowMerge mr = merge_row(
            kGroups, [&](int g) { return make_float2(sm_m[g * ROWS + tid], sm_l[g * ROWS + tid]); }, sink);
        for (int g = 0; g < kGroups; ++g)
            sm_w[g * ROWS + tid] = exp2f(sm_m[g * ROWS + tid] - mr.m_use) * (split_kv ? v_desc : mr.inv_l * v_desc);
        // The partial's frame and denominator (the sink's included in split 0's).
        row_m[tid] = mr.inv_l == 0.f ? -INFINITY : mr.m_use;
        row_l[tid] = mr.inv_l == 0.f ? 0.f : 1.f / mr.inv_l;
        if (!split_kv && lse_head != nullptr && tid < p.q_len) lse_head[tid] = mr.lse;
    }
    __syncthreads();
    if (!split_kv) {
        for (int i = tid; i < ROWS * (DK / 2); i += Cfg::kThreads) {
            const int r = i / (DK / 2);
            const int d = 2 * (i % (DK / 2));
            if (r >= p.q_len || d >= p.head_dim) continue;
            float a0 = 0.f, a1 = 0.f;
#pragma unroll
            for (int g = 0; g < kGroups; ++g) {
                const float w = sm_w[g * ROWS + r];
                const float2 x = *reinterpret_cast<const float2*>(sm_o + (g * ROWS + r) * RDK + d);
                a0 = fmaf(w, x.x, a0);
                a1 = fmaf(w, x.y, a1);
            }
            *reinterpret_cast<uint32_t*>(o_head + static_cast<int64_t>(r) * p.o_stride[2] + d) =
                StorageTraits<T>::pack(a0, a1);
        }
        return;
    }
    // Split-KV: this split's unnormalized O and (m, l), then the last split of the block
    // merges them all (split_combine.cuh).
    const int64_t block = static_cast<int64_t>(b) * p.q_heads + h;
    float* my_o = ws_o + (block * p.n_splits + split) * (ROWS * DK);
    float* my_ml = ws_ml + (block * p.n_splits + split) * (ROWS * 2);
    for (int i = tid; i < ROWS * DK; i += Cfg::kThreads) {
        const int r = i / DK;
        const int d = i % DK;
        float a = 0.f;
#pragma unroll
        for (int g = 0; g < kGroups; ++g) a = fmaf(sm_w[g * ROWS + r], sm_o[(g * ROWS + r) * RDK + d], a);
        __stcg(my_o + i, a);
    }
    if (tid < ROWS) {
        // (m, l) of the split in the weights' frame: l was merged at m_use.
        const float mx = row_m[tid];
        __stcg(my_ml + 2 * tid, mx == -INFINITY ? -INFINITY : mx);
        __stcg(my_ml + 2 * tid + 1, row_l[tid]);
    }
    split_combine<T, DK, ROWS, Cfg::kThreads>(ws_o + block * p.n_splits * (ROWS * DK),
                                              ws_ml + block * p.n_splits * (ROWS * 2), counters + block,
                                              p.n_splits, o_head, lse_head, 0, p.q_len, p.o_stride[2],
                                              p.head_dim, tid);
}

} // namespace attn

// One entry per (type, cache type, head-dim bucket, rows bucket), with the forward entries'
// argument list (src/launch.rs binds both alike).
#define ATTN_DECODE_ENTRY(NAME, T, KV8, DK, ROWS)                                                  \
    extern "C" __global__ void __launch_bounds__((attn::DecodeConfig<T, KV8, DK, ROWS>::kThreads),                 \
                                                 (attn::DecodeConfig<T, KV8, DK, ROWS>::kMinBlocks))               \
        NAME(const T* __restrict__ q, const std::conditional_t<KV8, uint8_t, T>* __restrict__ k,   \
             const std::conditional_t<KV8, uint8_t, T>* __restrict__ v, T* __restrict__ o,         \
             float* __restrict__ lse, float* __restrict__ ws_o, float* __restrict__ ws_ml,         \
             unsigned int* __restrict__ counters, const attn::FwdParams p) {                       \
        attn::decode_kernel<T, KV8, DK, ROWS>(q, k, v, o, lse, ws_o, ws_ml, counters, p);          \
    }
