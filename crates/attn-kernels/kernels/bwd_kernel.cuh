// The FlashAttention-2-style backward pass (Dao 2023, Algorithm 2; the K/V-block-major order
// FlashAttention-3 keeps): one CTA per (key block of BN keys, KV head, batch) holds K_j and
// V_j in shared memory and dK_j, dV_j in registers, and walks the query blocks i of every query
// head of its GQA group (so dK/dV are summed over the group in registers):
//   Sᵀ = K_j·Q_iᵀ, Pᵀ = exp2(Sᵀ·scale·log2e − LSE₂), dPᵀ = V_j·dO_iᵀ, dSᵀ = Pᵀ∘(dPᵀ − Δ_i)
//   dV_j += Pᵀ·dO_i, dK_j += dSᵀ·Q_i, dQ_i += dS·K_j (f32 atomics into dQaccum)
// with Δ = rowsum(dO∘O) from the preprocessing kernel and dQ = scale·dQaccum converted by the
// postprocessing kernel. P and dS are rounded to the storage type before the MMAs that read
// them (attn-ref's `backward_emulated` models exactly these rounding points).
//
// Warp roles (8 warps, BM = BN = 64): phase A (Sᵀ, dPᵀ, P, dS) — warp w owns keys
// 16·(w mod 4).. and queries 32·(w div 4)..; Pᵀ and dSᵀ go to shared memory; phase B (dV, dK)
// — warp w owns keys 16·(w mod 4).. and columns (DK/2)·(w div 4)..; phase C (dQ) — warp w owns
// queries 16·(w mod 4).. and columns (DK/2)·(w div 4)... (With 128 keys, and with 64 keys at
// D = 192 and 256, BwdConfig's 2-D atoms: 32 keys or queries per warp.) A block runs A, then
// C, then B, so that dQ's additions drain while dV's and dK's MMAs run; two barriers per block
// (BwdConfig's QSTAGES = 2).
//
// Features (the FEATURES entries, one per (tile, causal)): the forward's score modifiers
// and sequence layouts as runtime values of BwdParams::feat and ::seqs, shared with the
// forward through score_mod.cuh and seqs.cuh so the backward masks and modifies exactly the
// scores the forward did:
// - varlen (cu_seqlens_q/k): each CTA resolves its sequence (lengths, row offsets, causal
//   alignment); LSE, Δ and dQaccum are [Hq, total_q] like FlashAttention's varlen LSE;
// - sliding window: a key block walks only the query blocks whose rows see one of its keys
//   (`bwd_block_rows`), and each score is masked to its row's [lo, hi);
// - softcap: s = tanh(x·scale/c) as the forward's, and dS gains the factor (1 − tanh²)·scale/c
//   before it is rounded, with dQ and dK then scaled by c (BwdParams::scale) instead of the
//   softmax scale: FlashAttention-2's `calculate_dtanh` order, which attn-ref's emulation
//   rounds at. (Rounding dS without the factor is as accurate, but its rounding errors are
//   then independent of the emulation's, and the FA3 rule's 2× margin fails now and then.)
// - ALiBi: the forward's bias, whose derivative is 1;
// - sinks: in the LSE already, so P is right; their gradient is a separate pass
//   (`bwd_dsinks`): −Σ_rows exp(sink − LSE)·Δ, summed in a fixed order.
//
// Deterministic mode: the CTAs adding into one (batch, head, query block) of dQaccum take turns
// in key-block order through a per-block semaphore (FlashAttention-3's deterministic backward);
// CTAs are dispatched in linear order, so the one a CTA waits for is already running.
#pragma once
#include "common.cuh"
#include "load.cuh"
#include "ptx.cuh"
#include "score_mod.cuh"
#include "seqs.cuh"
#include "debug_dump.cuh"

namespace attn {

// Scalars of one backward launch (mirrored by `BwdParams` in src/backward.rs).
struct BwdParams {
    int batch;
    int q_heads;
    int kv_heads;
    int q_len;
    int kv_len;
    int group;
    int diag_offset;   // causal: key j is visible to query i iff j <= i + diag_offset
    int causal;        // runtime copy of the template flag (for the preprocessing kernels)
    int head_dim;      // the problem's D (≤ the bucket)
    int dq_pitch;      // row pitch of dQaccum (the bucket)
    int q_blocks;      // ceil(q_len / BM): semaphores per (batch, head)
    int deterministic; // take turns on dQaccum
    int det_rotated;   // deterministic Hopper non-causal walk: rotated turns (bwd_rotated_turn); the host
                       // sets it only when a head's key blocks can all be resident at once
    float scale_log2;  // softmax scale · log2 e
    float scale;       // softmax scale
    int64_t q_stride[3];
    int64_t k_stride[3];
    int64_t v_stride[3];
    int64_t o_stride[3];
    int64_t do_stride[3];
    int64_t dq_stride[3];
    int64_t dk_stride[3];
    int64_t dv_stride[3];
    FwdFeatures feat; // the forward's features (FEATURES entries; "off" values elsewhere)
    FwdSeqs seqs;     // packed sequences (FEATURES entries; null elsewhere)
    // The wgmma backward's split tail (plain non-causal entries; bwd_hopper_kernel.cuh
    // `bwd_tail_item`): a 1-D grid whose CTAs from tail_first on are query-range pieces of the
    // last items, tail_pieces per item; tail_pieces ≤ 1: the classic 3-D grid.
    int tail_first;
    int tail_pieces;
    // The wgmma backward's persistent launches (plain entries, default mode; bwd_hopper_kernel.cuh
    // `BwdItemQueue`): > 0, the items of the classic or split grid, which gridDim.x CTAs take
    // in index order, the first by blockIdx.x and the rest from the counter tail_cnt[sched_slot]
    // (zeroed before the launch); 0: one item per CTA, the launch's own grid.
    int persistent_items;
    int sched_slot;
};

// Where query head h's rows of sequence b start in a [B, Hq, Sq] (dense) or [Hq, total_q]
// (packed) array: LSE, Δ, and dQaccum's rows.
__device__ __forceinline__ int64_t bwd_row_base(const BwdParams& p, int b, int h, int q_row0) {
    return p.seqs.cu_q != nullptr ? static_cast<int64_t>(h) * p.seqs.total_q + q_row0
                                  : (static_cast<int64_t>(b) * p.q_heads + h) * p.q_len;
}

// Row `row0` of head h of sequence b in a tensor with strides `st`: packed tensors
// ([1, H, total, D]) have one batch entry, and the sequence starts at row `row0`.
template <typename T>
__device__ __forceinline__ T* seq_head_ptr(T* base, const int64_t (&st)[3], int b, int h, int row0, bool packed) {
    return head_ptr(base, st, packed ? 0 : b, h) + static_cast<int64_t>(row0) * st[2];
}

// Sequence b's query rows in a preprocessing pass: its first packed row (0 when dense) and
// its length, capped by the launch's q_len (the grid's rows).
__device__ __forceinline__ int bwd_seq_rows(const BwdParams& p, int b, int& row0) {
    row0 = 0;
    if (p.seqs.cu_q == nullptr) return p.q_len;
    const int a = clamp_index(p.seqs.cu_q[b], 0, p.seqs.total_q);
    const int len = clamp_index(p.seqs.cu_q[b + 1], a, p.seqs.total_q) - a;
    row0 = a;
    return len < p.q_len ? len : p.q_len;
}

// The query rows [first, last] a key range [key0, key_end) may be visible to under the
// features' mask: the rows whose [lo, hi) (score_mod.cuh `row_key_range`, non-decreasing in
// the row) has hi > key0 and lo < key_end; first > last when there are none. Binary searches
// over the rows, once per CTA (and per query block in deterministic mode). Both ends are
// non-decreasing in key0, which the deterministic turn order relies on.
template <bool CAUSAL>
__device__ __forceinline__ void bwd_block_rows(const BwdParams& p, int key0, int key_end, int& first, int& last) {
    int lo = 0, hi = p.q_len; // first row with hi(row) > key0
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (row_key_range<CAUSAL>(mid, p).hi > key0) hi = mid; else lo = mid + 1;
    }
    first = lo;
    lo = -1;
    hi = p.q_len - 1; // last row with lo(row) < key_end
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (row_key_range<CAUSAL>(mid, p).lo < key_end) lo = mid; else hi = mid - 1;
    }
    last = lo;
}

// The query blocks [begin, end) that key block n (BN keys) walks in a FEATURES launch.
template <bool CAUSAL, int BM, int BN>
__device__ __forceinline__ void bwd_feature_qblocks(const BwdParams& p, int n, int& begin, int& end) {
    int first, last;
    const int key0 = n * BN;
    bwd_block_rows<CAUSAL>(p, key0, min(key0 + BN, p.kv_len), first, last);
    if (first > last) {
        begin = end = 0;
    } else {
        begin = first / BM;
        end = last / BM + 1;
    }
}

// The query blocks [begin, end) that key block n walks, in either engine: every block, the
// causal ones from the diagonal on, or (FEATURES) those its window reaches.
template <bool CAUSAL, bool FEATURES, int BM, int BN>
__device__ __forceinline__ void bwd_walk(const BwdParams& p, int n, int& begin, int& end) {
    begin = 0;
    end = (p.q_len + BM - 1) / BM;
    if (FEATURES) {
        bwd_feature_qblocks<CAUSAL, BM, BN>(p, n, begin, end);
    } else if (CAUSAL) {
        begin = max(0, n * BN - p.diag_offset) / BM;
    }
}

// Deterministic turn of key block n on query block qblk in a FEATURES launch: its rank among
// the key blocks that walk qblk, in key order (reversed: from the last one down). The blocks
// that walk qblk are a contiguous run, since both ends of bwd_feature_qblocks are
// non-decreasing in n; its ends are found by binary search over the sequence's key blocks.
template <bool CAUSAL, int BM, int BN>
__device__ __forceinline__ int bwd_feature_turn(const BwdParams& p, int n, int qblk, bool reversed) {
    const int n_blocks = (p.kv_len + BN - 1) / BN;
    int b0, e0;
    if (!reversed) {
        int lo = 0, hi = n; // first block whose walk reaches qblk (end > qblk)
        while (lo < hi) {
            const int mid = (lo + hi) >> 1;
            bwd_feature_qblocks<CAUSAL, BM, BN>(p, mid, b0, e0);
            if (e0 > qblk) hi = mid; else lo = mid + 1;
        }
        return n - lo;
    }
    int lo = n, hi = n_blocks - 1; // last block whose walk starts at or before qblk
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        bwd_feature_qblocks<CAUSAL, BM, BN>(p, mid, b0, e0);
        if (b0 <= qblk && e0 > b0) lo = mid; else hi = mid - 1;
    }
    return lo - n;
}

// Deterministic turn of key block n on query block qblk, in either engine: key order, or from
// the last block down when `reversed` (causal: the last key block any row of qblk sees is
// n_max, and every block from 0 to n_max sees some row); FEATURES: bwd_feature_turn.
template <bool CAUSAL, bool FEATURES, int BM, int BN>
__device__ __forceinline__ int bwd_turn(const BwdParams& p, int n, int qblk, bool reversed) {
    if (FEATURES) return bwd_feature_turn<CAUSAL, BM, BN>(p, n, qblk, reversed);
    if (!reversed) return n;
    const int n_max = min(static_cast<int>(gridDim.x) - 1, (qblk * BM + BM - 1 + p.diag_offset) / BN);
    return n_max - n;
}

// Deterministic mode's turns, in both engines: the CTAs adding into one query block's dQ
// take them through a per-block semaphore, in bwd_turn's (or bwd_rotated_turn's) order.
// Whether the semaphore has reached `turn`, by one acquire load: if so, the earlier adders'
// writes are visible. (The wgmma backward also reads it once ahead of its wait.)
__device__ __forceinline__ bool bwd_turn_reached(const unsigned int* sem, int turn) {
    unsigned int seen;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(sem) : "memory");
    return seen == static_cast<unsigned int>(turn);
}

// Waits until the semaphore reaches `turn`.
__device__ __forceinline__ void bwd_wait_turn(const unsigned int* sem, int turn) {
    while (!bwd_turn_reached(sem, turn)) {
    }
}

// Passes the turn on (release, cumulative at gpu scope). The caller orders its additions
// before this thread's release with a barrier: the mma.sync backward's atomics directly (no
// per-thread fence: bar.sync puts them before the release in causality order, and the release
// is cumulative; CUTLASS's GenericBarrier::arrive_inc passes its flag the same way), the wgmma
// backward's bulk reductions after their completion and a proxy fence in the issuing thread.
__device__ __forceinline__ void bwd_pass_turn(unsigned int* sem, int turn) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(sem), "r"(static_cast<unsigned int>(turn + 1))
                 : "memory");
}

// Causal launches: the order the grid's CTAs take their (key block, KV head, batch), longest
// first, after FlashAttention-3's SingleTileBwdLPTScheduler (hopper/tile_scheduler.hpp). Key
// block n walks the query blocks from its diagonal on, so block 0 has the most work; the
// grid's own order (key blocks fastest) starts each head's shortest blocks before the next
// head's longest, and the last wave ends on long blocks. The CTAs are taken in groups of S
// heads (S a power of two, so that S heads' Q, dO and dQ workspace, `bytes_per_row` per query
// row and head, fit in 40 MB of L2), key block major within a group: every head of a group
// starts its block 0 before any starts block 1. A list-scheduling model of 4,16,4096,128
// (64 heads × 32 key blocks on 132 SMs) ends 7 % sooner (548 → 512 block-steps).
// Deterministic launches keep their turn order: within a (KV head, batch) the key blocks
// still launch in index order, so a CTA launches after every CTA of its head whose turn comes
// before its own (reversed walks count the blocks from the last). The map is a bijection onto
// the grid and keeps that order: checked exhaustively for key blocks < 20, heads < 13,
// batch < 5 and four sequence lengths (group sizes 1 to 8) when written.
// `lin` numbers the grid (n_blocks key blocks × heads × batches) key block fastest: the
// launch's own CTA index, or an item a persistent CTA took (bwd_hopper_kernel.cuh).
__device__ __forceinline__ void bwd_lpt_order_at(const BwdParams& p, int bytes_per_row, int lin, int n_blocks,
                                                 int heads, int batches, int& n, int& kvh, int& b) {
    const int hb_count = heads * batches;
    const int64_t head_bytes = static_cast<int64_t>(p.q_len) * p.group * bytes_per_row;
    int group = 1;
    while (2 * group <= hb_count && 2 * group * head_bytes <= (int64_t{40} << 20)) group *= 2;
    const int g = lin / (group * n_blocks), r = lin % (group * n_blocks);
    const int in_group = g < hb_count / group ? group : hb_count % group; // the last group may be short
    n = r / in_group;
    const int hb = g * group + r % in_group;
    kvh = hb % heads;
    b = hb / heads;
}

__device__ __forceinline__ void bwd_lpt_order(const BwdParams& p, int bytes_per_row, int& n, int& kvh, int& b) {
    const int lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    bwd_lpt_order_at(p, bytes_per_row, lin, gridDim.x, gridDim.y, gridDim.z, n, kvh, b);
}

// The dK/dV epilogue of both engines: stores one accumulator row half (`hi`: rows g or g + 8
// of an MMA tile's NO n-tiles, columns col0 + 8n + 2t) of this quad's keys, scaled, as
// 16-byte chunks: the quad transposes its 4 × 4 words of each 4 n-tiles (two xor shuffles),
// after which lane t holds the 8 columns of n-tile n0 + t. Four times fewer, whole-sector
// stores than one word per n-tile: the wgmma backward's item epilogue took 5.6 µs with 4-byte
// stores (docs/PERF.md run 303, 64 KiB of dK and dV per CTA). Every view is 16-byte aligned
// with strides and D multiples of 8 elements (plan_backward), so a chunk is wholly inside or
// outside [0, D). Call with the whole warp (the shuffles); NO not a multiple of 4 stores words.
template <typename T, int NO>
__device__ __forceinline__ void store_acc_row(T* head, int64_t row_stride, int key, int col0, const BwdParams& p,
                                              const float (&acc)[NO][4], int hi, float scale, int t) {
    if constexpr (NO % 4 != 0) {
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            const int col = col0 + 8 * n + 2 * t;
            if (key < p.kv_len && col < p.head_dim)
                *reinterpret_cast<uint32_t*>(head + static_cast<int64_t>(key) * row_stride + col) =
                    StorageTraits<T>::pack(acc[n][2 * hi] * scale, acc[n][2 * hi + 1] * scale);
        }
    } else {
        const bool odd = (t & 1) != 0, high = (t & 2) != 0;
#pragma unroll
        for (int n0 = 0; n0 < NO; n0 += 4) {
            uint32_t w[4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
                w[j] = StorageTraits<T>::pack(acc[n0 + j][2 * hi] * scale, acc[n0 + j][2 * hi + 1] * scale);
            // Lanes t, t ^ 1: n-tile n0 + odd (and n0 + 2 + odd), columns 4·(t >> 1) .. + 3.
            const uint32_t a0 = __shfl_xor_sync(0xffffffffu, odd ? w[0] : w[1], 1);
            const uint32_t a1 = __shfl_xor_sync(0xffffffffu, odd ? w[2] : w[3], 1);
            const uint2 p0 = odd ? make_uint2(a0, w[1]) : make_uint2(w[0], a0);
            const uint2 p1 = odd ? make_uint2(a1, w[3]) : make_uint2(w[2], a1);
            // Lanes t, t ^ 2: the other column half of n-tile n0 + t.
            const uint2 send = high ? p0 : p1;
            const uint32_t rx = __shfl_xor_sync(0xffffffffu, send.x, 2);
            const uint32_t ry = __shfl_xor_sync(0xffffffffu, send.y, 2);
            const uint4 chunk = high ? make_uint4(rx, ry, p1.x, p1.y) : make_uint4(p0.x, p0.y, rx, ry);
            const int col = col0 + 8 * (n0 + t);
            if (key < p.kv_len && col < p.head_dim)
                *reinterpret_cast<uint4*>(head + static_cast<int64_t>(key) * row_stride + col) = chunk;
        }
    }
}

constexpr float kBwdLog2e = 1.4426950408889634f;

// Adds two adjacent f32 values into dQaccum (unordered, like every dQ addition of this kernel).
__device__ __forceinline__ void dq_add2(float* dst, float x, float y) {
#if __CUDA_ARCH__ >= 900
    // One 8-byte reduction instead of two 4-byte ones: the dQ additions limited this kernel at
    // 64 keys per CTA (ncu: L2 at ~68 %, the SMs at ~19 %); at 128 keys the L2 is at 37 %
    // (run 116).
    atomicAdd(reinterpret_cast<float2*>(dst), make_float2(x, y));
#else
    atomicAdd(dst, x);
    atomicAdd(dst + 1, y);
#endif
}

template <int DK, int BM, int BN, int WARPS, int QSTAGES>
struct BwdConfig {
    static constexpr int kThreads = WARPS * 32;
    static constexpr int kPitch = smem_pitch<DK>();
    // Warp tiling. With 128 keys and D a multiple of 64 up to 128, FlashAttention-2's 2-D
    // atoms: a warp owns 32 keys (two m-tiles) in phases A/B and 32 queries in phase C, so each
    // loaded fragment feeds twice the MMAs and each warp re-reads half the Q/dO tile (run 116:
    // one key m-tile per warp left the kernel latency-bound on LDSM -> HMMA; run 118 measured
    // 2–4 % at D = 128, nothing at D = 64). The 64-key tile above D = 128 (D = 192, 256) takes
    // them too, as FlashAttention-2's D = 256 tile does (`Flash_bwd_kernel_traits<256, 64, 64,
    // 8, 4, 2, 2>`): 32 keys × D/4 columns of dK/dV per warp load 6 fragments per 16 MMAs where
    // 16 keys × D/2 loaded 9 (run 313: 5–6 % at D = 256). Otherwise one m-tile of 16 keys
    // (queries) per warp.
    static constexpr bool kWide = (BN == 128 && DK <= 128 || BN == 64 && DK > 128) && DK % 64 == 0;
    static constexpr int kMA = kWide ? 2 : 1;        // key m-tiles per warp in phases A, B
    static constexpr int kMQ = kWide ? 2 : 1;        // query m-tiles per warp in phase C
    static constexpr int kKG = BN / (16 * kMA);      // key groups (16·kMA keys each)
    static constexpr int kSplitA = WARPS / kKG;      // query splits in phase A
    static constexpr int kQA = BM / kSplitA;         // queries per warp in phase A
    static constexpr int kNA = kQA / 8;              // n-tiles per warp in phase A
    static constexpr int kSplitB = WARPS / kKG;      // column splits in phase B
    static constexpr int kColsB = DK / kSplitB;      // columns per warp in phase B
    static constexpr int kNB = kColsB / 8;
    static constexpr int kMC = BM / (16 * kMQ);      // query groups of dQ (16·kMQ rows each)
    static constexpr int kSplitC = WARPS / kMC;      // column splits in phase C
    static constexpr int kColsC = DK / kSplitC;
    static constexpr int kNC = kColsC / 8;
    static constexpr int kPPitch = BM;               // pitch of the Pᵀ/dSᵀ tiles (≥ 64: swizzle)
    // The 32-key tile above D = 192, for 99 KiB parts (sm_86/87/89), does not fit with its
    // own Pᵀ/dSᵀ tiles: they take V's place once phase A has read V, and V is loaded again
    // with every query block's Q and dO (from L2: the same 32 keys each time).
    // FlashAttention-2 frees the same room on those parts by keeping V in registers
    // (flash_bwd_launch_template.h, `Is_V_in_regs`); a re-read V costs no registers here,
    // where the dK/dV accumulators already take 64 per thread. catalog.rs `bwd_v_shared`
    // states the same rule.
    static constexpr bool kVShared = BN == 32 && DK > 192;
    static constexpr int kSmemElems =
        2 * BN * kPitch + QSTAGES * 2 * BM * kPitch + (kVShared ? 0 : 2 * BN * kPPitch);
    static constexpr int kSmemBytes = kSmemElems * 2 + QSTAGES * 2 * BM * 4;
    // Unrolling: phase A by 2 and phases B/C fully, except where the dK/dV accumulators (DK
    // floats per thread) leave no room: above D = 192 (and D = 64 on sm_80, where the fully
    // unrolled loops spilled 8–24 bytes), the loops stay rolled.
    // With 128 keys per CTA above D = 64, phases B/C unroll by 2: by 4 they spilled 40–60
    // bytes at D = 128 (sm_80, sm_90a).
    // BM = 128: phase A unrolled spilled 8-20 bytes on sm_90a.
    static constexpr int kUnrollA = DK > 192 || BM == 128 ? 1 : 2;
    static constexpr int kUnrollBC = DK > 192 ? 1 : (BN == 128 && (DK > 64 || BM == 128) ? 2 : 4);
    static_assert(WARPS % kKG == 0 && WARPS % kMC == 0, "warp partition");
    // Phase B takes an odd last n-tile (the 32-key tile at D = 160 and 224: 40 and 56
    // columns per warp); phases A and C load n-tiles in pairs.
    static_assert(kQA % 16 == 0 && kColsB % 8 == 0 && kColsC % 16 == 0, "n-tile pairs");
    static_assert(!kVShared || (QSTAGES == 1 && 2 * kPPitch <= kPitch), "Pᵀ/dSᵀ fit in V's tile, one stage");
    static_assert(BM >= 64 && BM % 64 == 0, "Pᵀ/dSᵀ rows must span the 8-chunk swizzle");
};

// The Δ passes of both engines: Δ = rowsum(dO ∘ O) per query row, kDeltaRows rows per warp.
// Every view starts and strides on 16 bytes and D is a multiple of 8 (tensor.rs
// `check_tensor`, catalog.rs), so a lane reads one 16-byte chunk of O and of dO per row: the
// warp splits into groups of `lanes` lanes (the power of two ≥ D/8), `groups` rows at a time,
// and issues every row's loads before the first product. One row per warp with 4-byte
// loads kept too few bytes in flight: 1.6 TB/s of the H200's ~4.4 (docs/PERF.md, runs 216-217).
constexpr int kDeltaRows = 4;

struct DeltaLanes {
    int lanes;  // lanes per row: a power of two ≥ D/8
    int groups; // rows per pass: 32 / lanes
    int grp;    // this lane's row within a pass
    int sub;    // this lane's 16-byte chunk
};

__device__ __forceinline__ DeltaLanes delta_lanes(int head_dim, int lane) {
    const int chunks = head_dim >> 3;
    const int lanes = chunks <= 1 ? 1 : 1 << (32 - __clz(chunks - 1));
    return DeltaLanes{lanes, 32 / lanes, lane / lanes, lane % lanes};
}

// acc[k] = Δ of row row_first + k·groups + grp of (b, h) (rows from `row0`, the sequence's
// first packed row), for the k·groups + grp < kDeltaRows; 0 for rows at or past row_end. Every
// lane of a group holds its row's sum. All 32 lanes must call it (the sums are shuffles).
template <typename T>
__device__ __forceinline__ void rows_delta(const T* __restrict__ o, const T* __restrict__ d_o, const BwdParams& p,
                                           int b, int h, int row0, int row_first, int row_end, const DeltaLanes& dl,
                                           float (&acc)[kDeltaRows]) {
    // Every load is unconditional, at a clamped row and column that the view holds (row_first
    // < row_end), and its product is dropped after; branches around the loads kept ptxas from
    // issuing them together.
    const T* ohead = head_ptr(o, p.o_stride, b, h);
    const T* dhead = head_ptr(d_o, p.do_stride, b, h);
    const int col = min(8 * dl.sub, p.head_dim - 8);
    uint4 x[kDeltaRows], y[kDeltaRows];
    bool on[kDeltaRows];
#pragma unroll
    for (int k = 0; k < kDeltaRows; ++k) {
        const int j = k * dl.groups + dl.grp;
        on[k] = 8 * dl.sub < p.head_dim && j < kDeltaRows && row_first + j < row_end;
        const int64_t row = row0 + min(row_first + j, row_end - 1);
        x[k] = *reinterpret_cast<const uint4*>(ohead + row * p.o_stride[2] + col);
        y[k] = *reinterpret_cast<const uint4*>(dhead + row * p.do_stride[2] + col);
    }
#pragma unroll
    for (int k = 0; k < kDeltaRows; ++k) {
        const uint32_t xs[4] = {x[k].x, x[k].y, x[k].z, x[k].w}, ys[4] = {y[k].x, y[k].y, y[k].z, y[k].w};
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 u = StorageTraits<T>::unpack(xs[i]);
            const float2 v = StorageTraits<T>::unpack(ys[i]);
            sum = fmaf(u.x, v.x, fmaf(u.y, v.y, sum));
        }
        acc[k] = on[k] ? sum : 0.f;
    }
    for (int s = dl.lanes >> 1; s > 0; s >>= 1) {
#pragma unroll
        for (int k = 0; k < kDeltaRows; ++k) acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], s);
    }
}

// Δ per (b, h, row); kDeltaRows rows per warp. Grid (ceil(Sq / (8·kDeltaRows)), Hq, B).
template <typename T>
__device__ __forceinline__ void bwd_preprocess(const T* __restrict__ o, const T* __restrict__ d_o,
                                               float* __restrict__ delta, const BwdParams& p) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row_first = (blockIdx.x * 8 + warp) * kDeltaRows;
    const int h = blockIdx.y, b = blockIdx.z;
    int row0;
    const int len = bwd_seq_rows(p, b, row0);
    if (row_first >= len) return; // warp-uniform
    const bool packed = p.seqs.cu_q != nullptr;
    const DeltaLanes dl = delta_lanes(p.head_dim, lane);
    float acc[kDeltaRows];
    rows_delta(o, d_o, p, packed ? 0 : b, h, row0, row_first, len, dl, acc);
    const int64_t base = bwd_row_base(p, b, h, row0);
#pragma unroll
    for (int k = 0; k < kDeltaRows; ++k) {
        const int j = k * dl.groups + dl.grp, row = row_first + j;
        if (dl.sub == 0 && j < kDeltaRows && row < len) delta[base + row] = acc[k];
    }
}

// The sinks' gradient, dsink_h = −Σ_(b, i) exp(sink_h − LSE_i)·Δ_i over the rows that see a
// key (LSE finite), summed in a fixed order (each thread a fixed set of rows, then a tree),
// so it is deterministic in every mode. One CTA of 256 threads per query head. Δ rows are
// `delta_pitch` apart per (batch, head): q_len for this kernel's dense Δ pass, the padded
// q_blocks·64 for the Hopper one's; 0 when Δ is packed like LSE (this kernel's varlen Δ).
__device__ __forceinline__ void bwd_dsinks(const float* __restrict__ lse, const float* __restrict__ delta,
                                           float* __restrict__ dsinks, int delta_pitch, const BwdParams& p) {
    __shared__ float part[256];
    const int h = blockIdx.x;
    const float sink2 = sink_log2(h, p);
    float acc = 0.f;
    for (int b = 0; b < p.batch; ++b) {
        int row0;
        const int len = bwd_seq_rows(p, b, row0);
        const int64_t base = bwd_row_base(p, b, h, row0);
        const int64_t dbase = delta_pitch == 0 ? base : (static_cast<int64_t>(b) * p.q_heads + h) * delta_pitch;
        for (int r = threadIdx.x; r < len; r += 256) {
            const float l = lse[base + r];
            if (l != -INFINITY) acc += exp2f(sink2 - l * kBwdLog2e) * delta[dbase + r];
        }
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) dsinks[h] = -part[0];
}

// dQ = scale·dQaccum in the storage type; one warp per row. The main kernel adds dS·K
// unscaled, and the scale is applied here once per element instead of once per key block
// before every addition (FlashAttention-2 scales in its dQ conversion too, `convert_dQ`).
template <typename T>
__device__ __forceinline__ void bwd_postprocess(const float* __restrict__ dq_acc, T* __restrict__ dq,
                                                const BwdParams& p) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * 8 + warp;
    const int h = blockIdx.y, b = blockIdx.z;
    int row0;
    if (row >= bwd_seq_rows(p, b, row0)) return;
    const float* src = dq_acc + (bwd_row_base(p, b, h, row0) + row) * p.dq_pitch;
    T* dst = seq_head_ptr(dq, p.dq_stride, b, h, row0 + row, p.seqs.cu_q != nullptr);
    // 16-byte loads (the workspace's rows start on 16 bytes: `bwd_f32_regions`, a pitch of the
    // bucket) and 8-byte stores (dQ's rows start on 16 bytes, D is a multiple of 8).
    for (int d = 4 * lane; d < p.head_dim; d += 128) {
        const float4 x = *reinterpret_cast<const float4*>(src + d);
        *reinterpret_cast<uint2*>(dst + d) = make_uint2(StorageTraits<T>::pack(x.x * p.scale, x.y * p.scale),
                                                        StorageTraits<T>::pack(x.z * p.scale, x.w * p.scale));
    }
}

template <typename T, int DK, int BM, int BN, int WARPS, int QSTAGES, bool CAUSAL, bool FEATURES>
__device__ __forceinline__ void bwd_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                           const T* __restrict__ v, const T* __restrict__ d_o,
                                           const float* __restrict__ lse, const float* __restrict__ delta,
                                           float* __restrict__ dq_acc, T* __restrict__ dk, T* __restrict__ dv,
                                           unsigned int* __restrict__ sems, const BwdParams& p_launch,
                                           float* __restrict__ dump, const int* __restrict__ dump_tiles,
                                           int dump_count) {
    using Cfg = BwdConfig<DK, BM, BN, WARPS, QSTAGES>;
    // The general entries hold the features' state too: above D = 128 phase A stays rolled.
    constexpr int kUnrollA = FEATURES && (DK > 128 || Cfg::kWide && DK == 128) ? 1 : Cfg::kUnrollA;
    constexpr int DP = Cfg::kPitch;
    constexpr int PP = Cfg::kPPitch;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* sK = reinterpret_cast<T*>(smem_raw);
    T* sV = sK + BN * DP;
    T* sQ = sV + BN * DP;                  // QSTAGES tiles
    T* sdO = sQ + QSTAGES * BM * DP;       // QSTAGES tiles
    T* sP = Cfg::kVShared ? sV : sdO + QSTAGES * BM * DP; // Pᵀ [key][query]
    T* sdS = sP + BN * PP;                                 // dSᵀ [key][query]
    // QSTAGES × BM (log2 units)
    float* sLse = reinterpret_cast<float*>(Cfg::kVShared ? sdO + QSTAGES * BM * DP : sdS + BN * PP);
    float* sDelta = sLse + QSTAGES * BM;                    // QSTAGES × BM

    // Deterministic causal runs take turns on a query block from the highest key block down
    // (that block reaches the query block first, so the turns pipeline instead of serializing);
    // the grid is walked in that order too, so every block waited for was dispatched earlier
    // (FlashAttention-3's deterministic backward reverses the key blocks the same way).
    const bool reversed = CAUSAL && p_launch.deterministic;
    // Not in the FEATURES entries, which keep the grid's order: reading the block index
    // through variables there made the causal entries spill more on sm_80 and sm_90a (ptxas
    // --check; even without the remapping), and no run timed them.
    constexpr bool kLpt = CAUSAL && !FEATURES;
    int lpt_n = 0, lpt_kvh = 0, lpt_b = 0;
    if constexpr (kLpt) {
        lpt_n = blockIdx.x, lpt_kvh = blockIdx.y, lpt_b = blockIdx.z;
        bwd_lpt_order(p_launch, 8 * DK, lpt_n, lpt_kvh, lpt_b);
    }
    const int n_blk = kLpt ? (reversed ? gridDim.x - 1 - lpt_n : lpt_n) : (reversed ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
    const int kvh = kLpt ? lpt_kvh : blockIdx.y;
    const int b = kLpt ? lpt_b : blockIdx.z;
    // FEATURES: this sequence's lengths, alignment and row offsets (seqs.cuh); a key block
    // past its keys has nothing to do (the grid is sized by the longest sequence).
    BwdParams p = p_launch;
    SeqRows seq_rows{0, 0};
    if (FEATURES) {
        seq_rows = resolve_sequence(p, b);
        if (n_blk * BN >= p.kv_len) return;
    }
    const bool packed_q = FEATURES && p.seqs.cu_q != nullptr;
    const bool packed_k = FEATURES && p.seqs.cu_k != nullptr;
    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int mi = lane >> 3;
    const int key0 = n_blk * BN;
    const int d_chunks = p.head_dim >> 3;

    const T* k_head = seq_head_ptr(k, p.k_stride, b, kvh, seq_rows.k_row0, packed_k);
    const T* v_head = seq_head_ptr(v, p.v_stride, b, kvh, seq_rows.k_row0, packed_k);
    load_tile_async<T, DK, BN, Cfg::kThreads>(sK, k_head, key0, p.kv_len, p.k_stride[2], d_chunks, tid);
    if (!Cfg::kVShared) load_tile_async<T, DK, BN, Cfg::kThreads>(sV, v_head, key0, p.kv_len, p.v_stride[2], d_chunks, tid);
    cp_async_commit();

    // Query blocks that see any key of this block: causal skips those entirely above it.
    // FEATURES: the blocks whose rows see a key of this block under the window too.
    int i_begin, n_qblk;
    bwd_walk<CAUSAL, FEATURES, BM, BN>(p, n_blk, i_begin, n_qblk);
    const int per_head = max(0, n_qblk - i_begin);
    const int hg_end = per_head > 0 ? p.group : 0; // the walk ends when the group head reaches it

    // Warp roles.
    constexpr int kMA = Cfg::kMA, kMQ = Cfg::kMQ;
    const int kg = warp % Cfg::kKG;          // phases A, B: key m-tiles kMA·kg..
    const int qa0 = (warp / Cfg::kKG) * Cfg::kQA;    // phase A: first query
    const int cb0 = (warp / Cfg::kKG) * Cfg::kColsB; // phase B: first column
    const int mc = warp % Cfg::kMC;          // phase C: query m-tiles kMQ·mc..
    const int cc0 = (warp / Cfg::kMC) * Cfg::kColsC; // phase C: first column

    float acc_dk[kMA][Cfg::kNB][4], acc_dv[kMA][Cfg::kNB][4];
#pragma unroll
    for (int ma = 0; ma < kMA; ++ma)
#pragma unroll
        for (int n = 0; n < Cfg::kNB; ++n)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc_dk[ma][n][r] = acc_dv[ma][n][r] = 0.f;

    static_assert(QSTAGES == 1 || QSTAGES == 2, "the walk loads at most one tile ahead");
    static_assert(2 * BM <= Cfg::kThreads, "one thread per LSE / Δ row");
    // Loads tile (group head hg, query block i_begin + qi) of the walk into stage buf: Q and
    // dO, and the LSE and Δ of its rows (rows past q_len zero-filled, and masked). LSE and Δ
    // travel with the tile instead of being read from global memory at the top of each block,
    // where every warp waited on the two that loaded them (run 176: 10 % of the stall samples).
    auto issue = [&](int buf, int hg, int qi) {
        const int h = kvh * p.group + hg;
        const int m0 = (i_begin + qi) * BM;
        load_tile_async<T, DK, BM, Cfg::kThreads>(sQ + buf * BM * DP,
                                                  seq_head_ptr(q, p.q_stride, b, h, seq_rows.q_row0, packed_q), m0,
                                                  p.q_len, p.q_stride[2], d_chunks, tid);
        load_tile_async<T, DK, BM, Cfg::kThreads>(sdO + buf * BM * DP,
                                                  seq_head_ptr(d_o, p.do_stride, b, h, seq_rows.q_row0, packed_q),
                                                  m0, p.q_len, p.do_stride[2], d_chunks, tid);
        if (Cfg::kVShared) load_tile_async<T, DK, BN, Cfg::kThreads>(sV, v_head, key0, p.kv_len, p.v_stride[2], d_chunks, tid);
        if (tid < 2 * BM) {
            const int r = tid % BM;
            const bool in = m0 + r < p.q_len;
            const float* src = (tid < BM ? lse : delta) + bwd_row_base(p, b, h, seq_rows.q_row0) + m0 + (in ? r : 0);
            cp_async_4(smem_addr((tid < BM ? sLse : sDelta) + buf * BM + r), src, in);
        }
    };
    // The walk's position (group head, query block − i_begin) and stage, counted instead of
    // divided by per_head: an integer division per block cost ~40 instructions per warp (run
    // 176), and the counters alone leave registers for the faster paths below.
    int cur_hg = 0, cur_qi = 0, buf = 0;
    if (QSTAGES == 2) {
        if (hg_end > 0) issue(0, 0, 0);
        cp_async_commit();
    }

    while (cur_hg < hg_end) {
        const int h = kvh * p.group + cur_hg;
        const int qblk = i_begin + cur_qi;
        const int m0 = qblk * BM;
        if (QSTAGES == 1) {
            issue(buf, cur_hg, cur_qi);
            cp_async_commit();
        }
        if (++cur_qi == per_head) cur_qi = 0, ++cur_hg;
        const float slope = FEATURES ? alibi_slope(b, h, p) : 0.f;
        const int64_t row_base = bwd_row_base(p, b, h, seq_rows.q_row0);
        cp_async_wait<0>(); // this block's tile (the only group in flight)
        __syncthreads();
        if (QSTAGES == 2) {
            // The next block's tile, into the stage every warp finished with last block.
            if (cur_hg < hg_end) issue(buf ^ 1, cur_hg, cur_qi);
            cp_async_commit();
        }
        // Debug builds: the dump of this (b, h, query block) × key block, when the launcher
        // listed the query block (bwd_dump_tile; one slot per listed block, a tile per key block).
        float* dump_at = bwd_dump_tile<BM, BN>(dump, dump_tiles, dump_count, b, h, qblk, n_blk, gridDim.x);
        const T* tQ = sQ + buf * BM * DP;
        const T* tdO = sdO + buf * BM * DP;
        const float* tLse = sLse + buf * BM;
        const float* tDelta = sDelta + buf * BM;

        // Phase A: Sᵀ = K_kg·Q_iᵀ and dPᵀ = V_kg·dO_iᵀ over this warp's queries.
        float acc_s[kMA][Cfg::kNA][4], acc_dp[kMA][Cfg::kNA][4];
#pragma unroll
        for (int ma = 0; ma < kMA; ++ma)
#pragma unroll
            for (int n = 0; n < Cfg::kNA; ++n)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc_s[ma][n][r] = acc_dp[ma][n][r] = 0.f;
        // Fragment addresses split by the swizzle (kSplitAddr). Every row phase A reads of Q
        // and dO is ≡ lane (mod 8), so swz's XOR only mixes the lane's row bits into the chunk:
        // chunk 2·kk + c is 2·(kk ^ rh) + (c ^ rl) with rl = lane & 1, rh = (lane >> 1) & 3.
        // The lane's part is per query block, kk's is one XOR per k-step, and the n-tiles 16
        // rows apart and the dO tile are immediate offsets (ncu, run 320: ~2.4 integer
        // instructions per LDSM where each address was swz'd whole; FlashAttention-2's unrolled
        // CuTe loops take immediates). K/V keep the whole swz: their base, live across the
        // walk, spilled 8-32 bytes (quick compile). Run 321: −2.7 % at D = 64 causal, −2 % at
        // D = 256 causal, −0.7 % at D = 256, but +1.2 % at D = 128 non-causal, which keeps the
        // whole swz (and peels its first k-step instead, kPeel below).
        constexpr bool kSplitAddr = DK != 128;
        const uint32_t a_qo = smem_addr(tQ + (qa0 + (mi >> 1) * 8 + (lane & 7)) * DP) + (((mi ^ lane) & 1) << 4);
        const int rh = (lane >> 1) & 3;
        auto phase_a_step = [&](int kk) {
            uint32_t ka[kMA][4], va[kMA][4];
            const uint32_t x = static_cast<uint32_t>(kk ^ rh) << 5; // 2 chunks of 16 bytes
            const int achunk = 2 * kk + (lane >> 4);
#pragma unroll
            for (int ma = 0; ma < kMA; ++ma) {
                const int arow = 16 * (kMA * kg + ma) + (lane & 15);
                ldmatrix_x4(ka[ma], smem_addr(sK + swz<DP>(arow, achunk)));
                ldmatrix_x4(va[ma], smem_addr(sV + swz<DP>(arow, achunk)));
            }
#pragma unroll
            for (int n = 0; n < Cfg::kNA; n += 2) {
                const int qrow = qa0 + (n + (mi >> 1)) * 8 + (lane & 7);
                const int chunk = 2 * kk + (mi & 1);
                uint32_t bq[4], bo[4];
                if constexpr (kSplitAddr) {
                    ldmatrix_x4(bq, a_qo + x + n * 8 * DP * 2);
                    ldmatrix_x4(bo, a_qo + x + (QSTAGES * BM * DP + n * 8 * DP) * 2);
                } else {
                    ldmatrix_x4(bq, smem_addr(tQ + swz<DP>(qrow, chunk)));
                    ldmatrix_x4(bo, smem_addr(tdO + swz<DP>(qrow, chunk)));
                }
#pragma unroll
                for (int ma = 0; ma < kMA; ++ma) {
                    Mma<T>::run(acc_s[ma][n], ka[ma], bq[0], bq[1]);
                    Mma<T>::run(acc_s[ma][n + 1], ka[ma], bq[2], bq[3]);
                    Mma<T>::run(acc_dp[ma][n], va[ma], bo[0], bo[1]);
                    Mma<T>::run(acc_dp[ma][n + 1], va[ma], bo[2], bo[3]);
                }
            }
        };
        // D = 128's plain entries peel the first k-step: its MMAs then take zero accumulators
        // (RZ) instead of zeroed registers (run 320's ncu: 50 M CS2R against flash's 1 M).
        // Run 322: −0.6 % (non-causal) and −1.9 % (causal) at D = 128, but +0.5 to +0.9 % at
        // D = 64 and +0.5 % at D = 256 non-causal, so only D = 128 peels. The general entries
        // spilled 8-64 bytes peeled, and keep the loop whole.
        constexpr int kPeel = !FEATURES && DK == 128 ? 1 : 0;
        if constexpr (kPeel == 1) phase_a_step(0);
#pragma unroll kUnrollA
        for (int kk = kPeel; kk < DK / 16; ++kk) phase_a_step(kk);
        // Every warp has read V before P and dS overwrite it.
        if (Cfg::kVShared) __syncthreads();
        // FEATURES: whether some row's key range cuts this block (its ends are monotone in
        // the row, as in the forward's tile_needs_mask); blocks inside every range skip the
        // per-score range test.
        bool needs_mask = false;
        if (FEATURES) {
            const KeyRange first_row = row_key_range<CAUSAL>(m0, p);
            const KeyRange last_row = row_key_range<CAUSAL>(min(m0 + BM - 1, p.q_len - 1), p);
            needs_mask = key0 < last_row.lo || key0 + BN > first_row.hi;
        }
        // P and dS (f32), rounded to T into the Pᵀ / dSᵀ tiles. Blocks of the plain entries
        // whose every score is visible (inside both lengths, and under the diagonal) skip the
        // per-score tests: run 176 counted ~14 instructions per score in this loop.
        auto p_and_ds = [&](auto edge_tag) {
            constexpr bool kEdge = decltype(edge_tag)::value;
#pragma unroll
            for (int n = 0; n < Cfg::kNA; ++n) {
                const int ql = qa0 + 8 * n + 2 * t; // query (local), and ql + 1
                const float2 lse_pair = *reinterpret_cast<const float2*>(tLse + ql);
                const float2 delta_pair = *reinterpret_cast<const float2*>(tDelta + ql);
                const float row_lse2[2] = {lse_pair.x * kBwdLog2e, lse_pair.y * kBwdLog2e};
                const float row_delta[2] = {delta_pair.x, delta_pair.y};
#pragma unroll
                for (int mr = 0; mr < 2 * kMA; ++mr) {
                    const int ma = mr >> 1, r = mr & 1; // key m-tile, and its upper or lower 8 rows
                    const int kl = 16 * (kMA * kg + ma) + g + 8 * r; // key (local); kl & 7 == g
                    const int kglob = key0 + kl;
                    float pv[2], dsv[2];
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int qg = m0 + ql + e;
                        bool vis = true;
                        float s = acc_s[ma][n][2 * r + e];
                        float dscore = 1.f; // d(score)/d(raw score), the softcap's 1 − tanh²
                        if constexpr (kEdge) {
                            vis = kglob < p.kv_len;
                            if (FEATURES) {
                                vis = vis && qg < p.q_len;
                                // The forward's order (score_mod.cuh): softcap, ALiBi, the mask.
                                if (p.feat.softcap_in != 0.f) {
                                    const float x = s * p.feat.softcap_in;
                                    s = softcap_tanh(x); // the forward's tanh: P fits its LSE
                                    dscore = softcap_dtanh(x) * p.feat.softcap_in; // (1 − t²)·scale/c, FA2's dtanh
                                }
                                if (slope != 0.f) s -= slope * fabsf(static_cast<float>(qg + p.kv_len - p.q_len - kglob));
                                if (needs_mask) {
                                    const KeyRange range = row_key_range<CAUSAL>(qg, p);
                                    vis = vis && kglob >= range.lo && kglob < range.hi;
                                }
                            } else if (CAUSAL) {
                                vis = vis && kglob <= qg + p.diag_offset;
                            }
                        }
                        const float pr = vis ? exp2f(fmaf(s, p.scale_log2, -row_lse2[e])) : 0.f;
                        pv[e] = pr;
                        dsv[e] = pr * (acc_dp[ma][n][2 * r + e] - row_delta[e]) * dscore;
                        bwd_dump_scores<BM, BN>(dump_at, ql + e, kl, pr, acc_dp[ma][n][2 * r + e], dsv[e],
                                                row_delta[e]);
                    }
                    // (Writing out kl & 7 == g here, to fold the row into an immediate, kept four
                    // offsets live and spilled 4 bytes on sm_90a.)
                    const int off = swz<PP>(kl, ql >> 3) + (ql & 7);
                    *reinterpret_cast<uint32_t*>(sP + off) = StorageTraits<T>::pack(pv[0], pv[1]);
                    *reinterpret_cast<uint32_t*>(sdS + off) = StorageTraits<T>::pack(dsv[0], dsv[1]);
                }
            }
        };
        // Rows past q_len need no test in the plain entries: their Q, dO, LSE and Δ are
        // zero-filled, so P = 1 and dS = 0 there, and dV += Pᵀ·dO and dK += dSᵀ·Q add exact
        // zeros (their dQ rows are not written).
        const bool edge = FEATURES || key0 + BN > p.kv_len || (CAUSAL && key0 + BN - 1 > m0 + p.diag_offset);
        if (edge) p_and_ds(BoolTag<true>{}); else p_and_ds(BoolTag<false>{});
        __syncthreads();

        // Phase C: dQ_i (16·kMQ queries × this warp's columns) = dS·K_j, added into dQaccum.
        // Before dV and dK (FlashAttention-3's order): the additions then drain from the
        // load/store queue while phase B's MMAs run, where after phase B every warp waited on
        // them at the block's end (run 178: 19 % of the stall samples on the additions' queue
        // and the barrier after them).
        float acc_dq[kMQ][Cfg::kNC][4];
#pragma unroll
        for (int mq = 0; mq < kMQ; ++mq)
#pragma unroll
            for (int n = 0; n < Cfg::kNC; ++n)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc_dq[mq][n][r] = 0.f;
        auto phase_c_step = [&](int kk) {
            // A = dS (queries × keys) read from the dSᵀ tile transposed.
            uint32_t da[kMQ][4];
            const int arow = 16 * kk + (mi >> 1) * 8 + (lane & 7);
#pragma unroll
            for (int mq = 0; mq < kMQ; ++mq) {
                const int achunk = 2 * (kMQ * mc + mq) + (mi & 1);
                if constexpr (kSplitAddr && !FEATURES)
                    ldmatrix_x4_trans(da[mq],
                                      smem_addr(sdS + swz<PP>((mi >> 1) * 8 + (lane & 7), achunk)) + kk * 16 * PP * 2);
                else
                    ldmatrix_x4_trans(da[mq], smem_addr(sdS + swz<PP>(arow, achunk)));
            }
#pragma unroll
            for (int n = 0; n < Cfg::kNC; n += 2) {
                const int krow = 16 * kk + (mi & 1) * 8 + (lane & 7);
                const int chunk = cc0 / 8 + n + (mi >> 1);
                uint32_t bk[4];
                // The rows of both operands step by 16 per k-step, and 16 rows keep swz's XOR:
                // under kSplitAddr the lane's addresses are loop-invariant plus kk times a row
                // stride (plain entries; the general ones keep the whole swz, as in phase B).
                if constexpr (kSplitAddr && !FEATURES)
                    ldmatrix_x4_trans(bk, smem_addr(sK + swz<DP>((mi & 1) * 8 + (lane & 7), chunk)) + kk * 16 * DP * 2);
                else
                    ldmatrix_x4_trans(bk, smem_addr(sK + swz<DP>(krow, chunk)));
#pragma unroll
                for (int mq = 0; mq < kMQ; ++mq) {
                    Mma<T>::run(acc_dq[mq][n], da[mq], bk[0], bk[1]);
                    Mma<T>::run(acc_dq[mq][n + 1], da[mq], bk[2], bk[3]);
                }
            }
        };
        if constexpr (kPeel == 1) phase_c_step(0); // peeled, as phase A's
#pragma unroll Cfg::kUnrollBC
        for (int kk = kPeel; kk < BN / 16; ++kk) phase_c_step(kk);
        unsigned int* sem = sems + (static_cast<int64_t>(b) * p.q_heads + h) * p.q_blocks + qblk;
        const int turn = p.deterministic ? bwd_turn<CAUSAL, FEATURES, BM, BN>(p, n_blk, qblk, reversed) : 0;
        if (p.deterministic) {
            // Wait for the key blocks that add before this one (bwd_turn's order).
            if (tid == 0) bwd_wait_turn(sem, turn);
            __syncthreads();
        }
        float* dq_rows = dq_acc + (row_base + m0) * p.dq_pitch;
        if (m0 + BM <= p.q_len) {
            // Every row of the block is the sequence's, and every column is in the workspace,
            // whose pitch is the bucket (the host sets dq_pitch = DK; columns past head_dim add
            // the zeros of K's zero-filled columns): the additions need no tests and take
            // immediate offsets from one pointer. The tested form below cost ~10 instructions
            // per addition (run 176: a branch and a 64-bit address each).
            float* dq_thread = dq_rows + static_cast<int64_t>(16 * kMQ * mc + g) * DK + cc0 + 2 * t;
#pragma unroll
            for (int mq = 0; mq < kMQ; ++mq)
#pragma unroll
                for (int n = 0; n < Cfg::kNC; ++n)
#pragma unroll
                    for (int r = 0; r < 2; ++r)
                        dq_add2(dq_thread + (16 * mq + 8 * r) * DK + 8 * n, acc_dq[mq][n][2 * r],
                                acc_dq[mq][n][2 * r + 1]);
        } else {
#pragma unroll
            for (int mq = 0; mq < kMQ; ++mq) {
#pragma unroll
                for (int n = 0; n < Cfg::kNC; ++n) {
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const int ql = 16 * (kMQ * mc + mq) + g + 8 * r;
                        const int col = cc0 + 8 * n + 2 * t;
                        if (m0 + ql < p.q_len && col < p.head_dim) {
                            dq_add2(dq_rows + static_cast<int64_t>(ql) * p.dq_pitch + col, acc_dq[mq][n][2 * r],
                                    acc_dq[mq][n][2 * r + 1]);
                        }
                    }
                }
            }
        }
        if (p.deterministic) {
            __syncthreads(); // every thread's additions, before thread 0's release
            if (tid == 0) bwd_pass_turn(sem, turn);
        }
        // Phase B: dV_kg += Pᵀ·dO_i, dK_kg += dSᵀ·Q_i over this warp's columns.
        // Pᵀ/dSᵀ rows are ≡ lane (mod 8) too: phase A's split of the swizzle (kSplitAddr), in
        // the plain entries (the general ones, holding the features' state, spilled 20–56
        // bytes with the base live across the walk; they keep the whole swz per load). dSᵀ
        // follows Pᵀ in shared memory.
        const uint32_t a_ps = smem_addr(sP + (16 * kMA * kg + (lane & 15)) * PP) + ((((lane >> 4) ^ lane) & 1) << 4);
#pragma unroll Cfg::kUnrollBC
        for (int kk = 0; kk < BM / 16; ++kk) {
            uint32_t pa[kMA][4], sa[kMA][4];
            const uint32_t x = static_cast<uint32_t>(kk ^ rh) << 5;
            const int achunk = 2 * kk + (lane >> 4);
#pragma unroll
            for (int ma = 0; ma < kMA; ++ma) {
                if constexpr (kSplitAddr && !FEATURES) {
                    ldmatrix_x4(pa[ma], a_ps + x + ma * 16 * PP * 2);
                    ldmatrix_x4(sa[ma], a_ps + x + (BN * PP + ma * 16 * PP) * 2);
                } else {
                    const int arow = 16 * (kMA * kg + ma) + (lane & 15);
                    ldmatrix_x4(pa[ma], smem_addr(sP + swz<PP>(arow, achunk)));
                    ldmatrix_x4(sa[ma], smem_addr(sdS + swz<PP>(arow, achunk)));
                }
            }
            const int qrow = 16 * kk + (mi & 1) * 8 + (lane & 7);
#pragma unroll
            for (int n = 0; n + 1 < Cfg::kNB; n += 2) {
                const int chunk = cb0 / 8 + n + (mi >> 1);
                uint32_t bo[4], bq[4];
                ldmatrix_x4_trans(bo, smem_addr(tdO + swz<DP>(qrow, chunk)));
                ldmatrix_x4_trans(bq, smem_addr(tQ + swz<DP>(qrow, chunk)));
#pragma unroll
                for (int ma = 0; ma < kMA; ++ma) {
                    Mma<T>::run(acc_dv[ma][n], pa[ma], bo[0], bo[1]);
                    Mma<T>::run(acc_dv[ma][n + 1], pa[ma], bo[2], bo[3]);
                    Mma<T>::run(acc_dk[ma][n], sa[ma], bq[0], bq[1]);
                    Mma<T>::run(acc_dk[ma][n + 1], sa[ma], bq[2], bq[3]);
                }
            }
            if constexpr (Cfg::kNB % 2 == 1) {
                // The odd last n-tile: lanes 0–15 address its two 8-row halves.
                constexpr int n = Cfg::kNB - 1;
                const int chunk = cb0 / 8 + n;
                uint32_t bo[2], bq[2];
                ldmatrix_x2_trans(bo, smem_addr(tdO + swz<DP>(qrow, chunk)));
                ldmatrix_x2_trans(bq, smem_addr(tQ + swz<DP>(qrow, chunk)));
#pragma unroll
                for (int ma = 0; ma < kMA; ++ma) {
                    Mma<T>::run(acc_dv[ma][n], pa[ma], bo[0], bo[1]);
                    Mma<T>::run(acc_dk[ma][n], sa[ma], bq[0], bq[1]);
                }
            }
        }

        // One stage: the next block's loads overwrite the tile phase B reads. Two stages: the
        // barrier after the next wait orders phase B's reads before the loads into this stage,
        // and phase C's dSᵀ reads before the next block's P/dS stores.
        if (QSTAGES == 1) __syncthreads();
        if (QSTAGES == 2) buf ^= 1;
    }
    cp_async_wait<0>();

    // dK = scale·dK, dV: this warp's 16·kMA keys × columns, rows past kv_len skipped.
    T* dk_head = seq_head_ptr(dk, p.dk_stride, b, kvh, seq_rows.k_row0, packed_k);
    T* dv_head = seq_head_ptr(dv, p.dv_stride, b, kvh, seq_rows.k_row0, packed_k);
#pragma unroll
    for (int ma = 0; ma < kMA; ++ma) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int key = key0 + 16 * (kMA * kg + ma) + g + 8 * r;
            store_acc_row<T>(dk_head, p.dk_stride[2], key, cb0, p, acc_dk[ma], r, p.scale, t);
            store_acc_row<T>(dv_head, p.dv_stride[2], key, cb0, p, acc_dv[ma], r, 1.f, t);
        }
    }
}

} // namespace attn

// Release entries take no debug arguments; the debug build (ATTN_DEBUG: tile dumps) appends
// the dump buffer, its tile list and the list's length.
#ifdef ATTN_DEBUG
#define ATTN_BWD_DEBUG_PARAMS , float *__restrict__ dump, const int *__restrict__ dump_tiles, int dump_count
#define ATTN_BWD_DEBUG_ARGS dump, dump_tiles, dump_count
#else
#define ATTN_BWD_DEBUG_PARAMS
#define ATTN_BWD_DEBUG_ARGS nullptr, nullptr, 0
#endif
#define ATTN_BWD_ENTRY(NAME, T, DK, BM, BN, WARPS, QSTAGES, CAUSAL, FEATURES)                        \
    extern "C" __global__ void __launch_bounds__(WARPS * 32, 1)                                       \
        NAME(const T* q, const T* k, const T* v, const T* d_o, const float* lse, const float* delta,  \
             float* dq_acc, T* dk, T* dv, unsigned int* sems, const attn::BwdParams p ATTN_BWD_DEBUG_PARAMS) { \
        attn::bwd_kernel<T, DK, BM, BN, WARPS, QSTAGES, CAUSAL, FEATURES>(q, k, v, d_o, lse, delta, dq_acc, \
                                                                           dk, dv, sems, p,           \
                                                                           ATTN_BWD_DEBUG_ARGS);      \
    }

#define ATTN_BWD_PREP_ENTRY(PRE, POST, T)                                                             \
    extern "C" __global__ void __launch_bounds__(256)                                              \
        PRE(const T* o, const T* d_o, float* delta, const attn::BwdParams p) {                        \
        attn::bwd_preprocess<T>(o, d_o, delta, p);                                                    \
    }                                                                                                 \
    extern "C" __global__ void __launch_bounds__(256)                                                 \
        POST(const float* dq_acc, T* dq, const attn::BwdParams p) {                                   \
        attn::bwd_postprocess<T>(dq_acc, dq, p);                                                      \
    }

// The sinks' gradient pass (type-independent; one per unit).
#define ATTN_BWD_DSINKS_ENTRY(NAME)                                                                   \
    extern "C" __global__ void __launch_bounds__(256)                                                 \
        NAME(const float* lse, const float* delta, float* dsinks, int delta_pitch, const attn::BwdParams p) { \
        attn::bwd_dsinks(lse, delta, dsinks, delta_pitch, p);                                         \
    }
