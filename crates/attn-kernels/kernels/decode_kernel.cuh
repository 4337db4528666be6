// The decode kernel: a few query rows (one token per sequence, or the G query heads of one
// KV head packed as rows) against a long KV cache, which is a pure streaming problem — every
// K/V byte is read once and feeds ROWS·2 FMAs per element. A 64-row MMA tile would waste
// 60+ of its rows; this kernel instead follows Flash-Decoding (Dao et al. 2023) and
// FlashInfer's decode (Ye et al. 2025, "FlashInfer: Efficient and Customizable Attention
// Engine for LLM Inference Serving"): the keys are spread over the CTA's warps, each warp
// keeps its own online-softmax state, and the warps' states are merged once at the end.
// K/V stream through a 3-stage cp.async ring of ~16 KiB stages, so each CTA keeps ~32 KiB in
// flight; four CTAs per SM (48 KiB of shared memory each) keep ~128 KiB per SM in flight,
// several times what hides DRAM latency. The f16/bf16 entries at D ≥ 96 and the E4M3 ones at
// D ≥ 160 take 24–32 KiB stages instead, two CTAs per SM, the same ~128 KiB per SM in flight.
//
// Each warp's math is decode_tc.cuh's tensor-core stage — both GEMMs on mma.sync with the
// query rows as the MMA's N — for every bucket: DecodeTc16 for f16/bf16 caches (96, 160 and
// 224 on rows padded to 128, 192 and 256), DecodeTc for E4M3 caches (96 on 128, 160–224 on
// 256). It replaced an FMA-pipe stage (FlashInfer's layout: lane groups computing whole dot
// products), which was issue-bound on GQA groups (docs/PERF.md).
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
    // The ring's head dim: the bucket, except where the tensor-core stage runs on rows padded
    // with zero columns (the copies zero-fill them, so they cost no DRAM bytes): bucket 96 on
    // the stage of 128 (the FMA stage read 96-column rows at 2.8 TB/s where this reads them
    // at 3.2, H200, docs/PERF.md run 187), for f16/bf16 caches 160 on 192 and 224 on 256, and
    // for E4M3 caches 160–224 on 256 (DecodeTc's XOR swizzle wants a power-of-two count of
    // 16-byte chunks per row: 192 codes are 12).
    static constexpr int kRingDk = DK == 96 ? 128 : DK <= 128 ? DK : KV8 || DK > 192 ? 256 : 192;
    // The tensor-core stages (decode_tc.cuh) run every bucket: D = 32/64/128/256 for both
    // cache types, and 192 for f16/bf16 caches. Each warp takes whole 16-key blocks of a stage
    // and its ring rows are chunk-swizzled. (The FMA stage that ran E4M3 caches above 128
    // until 2026-11-29 spilled up to 464 bytes there: docs/PERF.md.)
    static constexpr bool kTensorCores =
        kRingDk == 32 || kRingDk == 64 || kRingDk == 128 || kRingDk == 256 || (!KV8 && kRingDk == 192);
    static_assert(kTensorCores, "every bucket runs a tensor-core stage");
    // Four warps, except f16/bf16 rows of 192 or 256, which take two: a stage of 32 keys (16
    // per warp) then keeps three stages within 96 KiB at D = 256, which sm_86/89's 99 KiB per
    // CTA allows; with four warps a stage would be 64 KiB. E4M3 rows of 256 keep four warps
    // and 64-key stages (the same 96 KiB): with two warps, the 256 CTAs of a 16/8-head decode
    // left ~4 warps per SM and ran 1.16x the FMA stage's time (run 204).
    static constexpr int kWarps = !KV8 && kRingDk >= 192 ? 2 : 4;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kRowBytes = kRingDk * static_cast<int>(sizeof(KV));
    static constexpr int kChunks = kRowBytes / 16; // 16-byte chunks per key row
    // ~8 KiB of K (and of V) per stage, at least a 16-key block per warp: 64 keys (32 KiB of
    // f16 K and V) at D = 128, 32 for f16/bf16 at D ≥ 192, 64 for E4M3 at D ≥ 160.
    static constexpr int kKeys = 8192 / kRowBytes > 16 * kWarps ? 8192 / kRowBytes : 16 * kWarps;
    static constexpr int kStages = 3;
    static constexpr int kStageBytes = 2 * kKeys * kRowBytes;
    // The copies of one stage's K (or V) tile per thread.
    static constexpr int kCopies = (kKeys * kChunks + kThreads - 1) / kThreads;
    // The merge of the warps' states reuses the ring: O [warps][ROWS][kRingDk], then (m, l) and
    // the warps' weights.
    static constexpr int kMergeBytes = (kWarps * ROWS * kRingDk + 3 * kWarps * ROWS) * 4;
    static constexpr int kSmemBytes =
        kStages * kStageBytes > kMergeBytes ? kStages * kStageBytes : kMergeBytes;
    static constexpr int kSwizzle = (kChunks < 8 ? kChunks : 8) - 1; // DecodeTc's, DecodeTc16's
    static_assert(kKeys % (16 * kWarps) == 0, "whole 16-key blocks per warp");
    static_assert(kSmemBytes <= 99 * 1024, "fits sm_86/89's shared memory per CTA");
    // CTAs per SM the launch bounds promise: four (128 registers), except the f16/bf16 entries
    // at D ≥ 128 and the E4M3 ones at 256, whose 72–96 KiB rings let only two fit anyway (at
    // 128 registers the D = 128 copies' page lookups spilled; E4M3 at 256 needs ~212).
    static constexpr int kMinBlocks = (!KV8 && kRingDk >= 128) || kRingDk == 256 ? 2 : 4;
    static_assert(DK % 32 == 0 && DK <= 256, "head-dim buckets");
    static_assert(ROWS >= 1 && ROWS <= 8, "decode rows");
    static_assert(!KV8 || DK % 16 == 0, "E4M3 rows are read in 16-byte chunks");
};

// The tensor-core stage (decode_tc.cuh: DecodeTc for E4M3 caches, DecodeTc16 for f16/bf16)
// of a CTA: one key group per warp, 16-key blocks.
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
    using Stage = DecodeTcStage<T, KV8, DK, ROWS>;
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
    // XOR-swizzled by the row: the tensor-core stage's fragment loads are conflict-free).
    const int* table = paged ? p.seqs.block_table + static_cast<int64_t>(b) * p.seqs.max_blocks : nullptr;
    const PageDiv div{p.seqs.page_size, p.seqs.page_mul, p.seqs.page_shift};
    const int code_chunks = KV8 ? p.head_dim >> 4 : p.head_dim >> 3; // 16-byte chunks of a row of D
    // The (page, row in page) of each copy's key, looked up one stage ahead (the table read
    // is then off the path that issues the copies). The entry is clamped where the copy is
    // issued, a stage later, so nothing waits on the table read before the stage's math.
    int pg[Cfg::kCopies], pr[Cfg::kCopies];
    auto locate = [&](int key0) {
#pragma unroll
        for (int j = 0; j < Cfg::kCopies; ++j) {
            const int i = tid + j * Cfg::kThreads;
            const int g = key0 + i / Cfg::kChunks;
            if (paged) {
                const int slot = div.slot(g);
                pg[j] = g < key_hi && i < kKeys * Cfg::kChunks ? __ldg(table + slot) : 0;
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
            // load.cuh's page_of clamp: a corrupt entry reads inside the cache.
            const int64_t page = paged ? min(max(pg[j], 0), p.seqs.num_blocks - 1) : 0;
            const int64_t ko = page * p.k_stride[0] + static_cast<int64_t>(pr[j]) * p.k_stride[2];
            const int64_t vo = page * p.v_stride[0] + static_cast<int64_t>(pr[j]) * p.v_stride[2];
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
