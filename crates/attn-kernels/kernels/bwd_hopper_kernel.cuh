// The Hopper (sm_90a) backward for f16/bf16 at head-dim buckets 64 and 128: TMA loads, wgmma
// on two warpgroups, dQ accumulated by bulk reductions of whole tiles, after FlashAttention-3
// (Shah et al. 2024; hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp: K/V-block-major, dK and dV in
// registers, dQ added in f32 through the L2 by `cp.reduce.async.bulk`, then a post-pass).
//
// One item = 128 keys of one (KV head, batch), for two consumer warpgroups of 64 keys each and
// a producer warpgroup; a CTA runs one item, or, persistent (default mode, plain entries),
// takes items in turn (BwdItemQueue). It walks the 64-row query blocks of every query head of its GQA group;
// per block, consumer w computes
//   Sᵀ = K_w·Qᵀ, dPᵀ = V_w·dOᵀ                       (SS wgmma, N = 64 queries)
//   Pᵀ = exp2(Sᵀ·scale·log2e − LSE₂), dSᵀ = Pᵀ∘(dPᵀ − Δ) (registers; P and dS rounded to T)
//   dV_w += Pᵀ·dO, dK_w += dSᵀ·Q                      (RS wgmma: Pᵀ, dSᵀ are the A fragments,
//                                                      dO and Q read MN-major, no transposes)
//   dQ[:, half w] = dS·K[:, half w]                   (SS wgmma, both operands MN-major: dSᵀ
//                                                      goes through shared memory)
// and stages its dQ half in shared memory. Computing Sᵀ rather than S (FA3's "SdP_swapAB")
// puts the keys on the accumulator rows, so Pᵀ and dSᵀ feed dV and dK from registers.
//
// Warp specialization (FA3's producer / dQ-writer split): producer warp 0 loads K and V once
// and Q, dO and the block's LSE₂ and Δ rows (bulk copies of 256 bytes) into a ring of two
// stages, three at D = 64 (full/empty mbarriers); producer warp 1 adds each staged dQ tile into
// the f32 workspace with one `cp.reduce.async.bulk` and frees the staging buffer (one per
// stage), so the L2's reduction and, in deterministic mode, the wait for another CTA's turn
// stall the consumers only when the writer falls a whole ring behind. The dSᵀ tile has a
// buffer per stage too, so the consumers meet only once per block, on the named barrier that
// completes dSᵀ.
//
// The preprocessing pass writes LSE₂ = LSE·log2e and Δ padded to whole blocks, with LSE₂ = +∞
// on rows past Sq (and rows that see no key), so those rows give P = 0 without a mask, and
// zeroes the dQ workspace; K/V rows past Sk and Q/dO rows past Sq arrive as zeros (TMA's
// fill), which make their terms vanish in dQ and dK/dV, and the epilogue drops their dK/dV
// rows. Causal blocks that straddle the diagonal are masked in registers.
//
// dQ workspace: per (batch·head, query block) one contiguous tile of 64 × DK floats, stored
// in the order the accumulators leave the threads (two halves of DK/2 columns; in each,
// (warp, n-tile, lane, register)), so staging is conflict-free 16-byte stores and one bulk
// reduce covers the tile; `bwd_hopper_postprocess` reads that order back.
//
// Features (FEATURES entries): the sliding window, softcap and ALiBi, per
// score as bwd_kernel.cuh's general entries (shared score_mod.cuh code): a key block walks
// only the query blocks its window reaches (`bwd_feature_qblocks`), and deterministic turns
// follow them (`bwd_feature_turn`). P and dS are computed in one pass after both GEMMs, so
// the softcap's 1 − tanh² needs no registers across the dPᵀ GEMM. Packed sequences run in
// the same entries: each CTA resolves its sequence and offsets its TMA boxes.
//
// SEQS entries: the sequence layouts alone (the forward's SEQS variant): each CTA resolves its
// sequence as above, then runs the plain entry's walk and its P, plus a key mask on the
// sequence's last key block, whose rows past its keys are the next sequence's (the plain
// entries rely on TMA's zero rows there). On the dense shape the general entry keeps the SMs
// 45 % busy against 60 % for the plain one (docs/PERF.md run 93), which is most of what a
// packed batch lost. Not for deterministic launches: the plain turn order counts the grid's
// key blocks, not the sequence's (the host runs those in the general entry).
//
// Deterministic mode: the CTAs adding into one query block take turns through the same
// per-block semaphores as the mma.sync backward (bwd_kernel.cuh); a dQ writer waits for its
// bulk reduce to complete before it passes the turn on. Each stage has its own writer
// (producer warps 9..), so the turn chains of consecutive query blocks overlap, and non-causal
// key blocks walk their query blocks rotated, each one step behind the key block before it,
// so no CTA waits for the others to fill a chain (bwd_rotated_turn). Runs 111–113: the cost
// over the default went from 1.41–1.46× to 1.10–1.12× at 4,16,4096,64.
#pragma once
#include "bwd_kernel.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace attn {

template <int DK> struct HopperBwdLayout {
    // D = 256 (FlashAttention-3's hdim-256 backward also takes small blocks there, 64 queries
    // × 80 keys, and splits S/dP between its warpgroups instead): the two consumer
    // warpgroups share one block of 64 keys, and each owns half of the head dim in dK, dV and
    // dQ, so its accumulators are the D = 128 kernel's (64 keys × 128 columns each). Both
    // compute the same Sᵀ and dPᵀ (64 × 64 over 256 columns): 7 GEMM units per block instead
    // of 5, the price of keeping P and dS in registers. A 64 × 256 f32 dQ staging tile per
    // stage would not fit beside two Q/dO stages, so the consumer warps add dQ themselves:
    // each stages 2 KiB (four n-tiles of its 16 rows, in the workspace's tile order) at a time
    // and adds it with one bulk reduction (cp.reduce.async.bulk); 16-byte reductions from
    // registers were slower (docs/PERF.md, runs 144–147).
    static constexpr bool kSplitD = DK == 256;
    static constexpr int kBM = 64;  // queries per inner step
    static constexpr int kBN = kSplitD ? 64 : 128; // keys per CTA (64 per consumer warpgroup, or shared)
    static constexpr int kThreads = 384; // two consumer warpgroups, then the producer's
    // Q/dO stages (and dSᵀ tiles, dQ staging buffers): three at D = 64, where they fit (183 KB),
    // so the consumers can run two tiles ahead of the dQ writer; two at D = 128 (231 KB) and
    // D = 256 (230 KB, with the warps' dQ staging instead of a tile per stage).
    static constexpr int kStages = DK == 64 ? 3 : 2;
    // Registers after `setmaxnreg`: the launch allocates 168 per thread (64512 for 384
    // threads, __launch_bounds__(384, 1)); the producer warpgroup (a TMA warp and a dQ-writer
    // warp) gives back to 56 (at 24 and 40 the writer's loop spilled; at 48 the persistent
    // loader's did at D = 64), the consumers take 224: 56·128 + 224·256 is the whole 64512.
    // A split that asks for more than the launch allocated never returns from setmaxnreg.inc.
    static constexpr int kProducerRegs = 56;
    static constexpr int kConsumerRegs = 224;
    static constexpr int kSub = DK / 64;      // 128-byte sub-tiles (64 columns) per row
    static constexpr int kNQ = DK / 2;        // dQ (and, split, dK/dV) columns per warpgroup
    static constexpr int kNO = kSplitD ? DK / 2 : DK; // dK/dV columns per warpgroup
    static constexpr int kKBytes = kBN * DK * 2;
    static constexpr int kQBytes = kBM * DK * 2; // one Q (or dO) stage
    static constexpr int kDsBytes = kBN * 128;   // dSᵀ: a 128-byte row (64 queries) per key
    static constexpr int kDqBytes = kSplitD ? 0 : kBM * DK * 4;
    static constexpr int kRowBytes = kBM * 4;    // LSE₂ or Δ of one query block
    static constexpr int kOffV = kKBytes;
    static constexpr int kOffQ = 2 * kKBytes;
    static constexpr int kOffDo = kOffQ + kStages * kQBytes;
    static constexpr int kOffDs = kOffDo + kStages * kQBytes;
    static constexpr int kOffDq = kOffDs + kStages * kDsBytes;
    static constexpr int kOffLse = kOffDq + kStages * kDqBytes;
    static constexpr int kOffDelta = kOffLse + kStages * kRowBytes;
    static constexpr int kWarpDqBytes = kSplitD ? 2048 : 0; // per consumer warp
    static constexpr int kOffDqWarp = kOffDelta + kStages * kRowBytes;
    static constexpr int kOffBar = kOffDqWarp + 8 * kWarpDqBytes;
    // K loaded, V loaded; two item slots' full and empty (BwdItemQueue); K read (D = 256);
    // per stage: Q/dO full, Q/dO empty, dQ staged (full), dQ reduced (empty).
    static constexpr int kBarriers = 7 + 4 * kStages;
    // After the barriers: the two item slots (item, blocks), the split tail's last-piece flag;
    // then a ring of 2·kStages entries (`BwdBlockInfo`) that the loader writes with each
    // block's loads, so the consumers and the dQ writer hold no walk state in their loops.
    static constexpr int kOffSched = kOffBar + 8 * kBarriers;
    static constexpr int kOffBlockInfo = kOffSched + 32;
    // 1024 bytes of slack to align the base (swizzled tiles start on 1024-byte boundaries);
    // src/catalog.rs `bwd_hopper_smem_bytes` is this.
    static constexpr int kSmemBytes = 1024 + kOffBlockInfo + 2 * kStages * 16;
    static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 168 * 384, "the launch's register allocation");
    static_assert(DK == 64 || DK == 128 || DK == 256, "the Hopper backward covers buckets 64, 128 and 256");
    static_assert(kStages <= 3, "deterministic mode's writer per stage: producer warps 9 to 11");
    static_assert(kSmemBytes <= 232448, "fits Hopper's 227 KiB of shared memory per block");
};

// The split tail of a plain non-causal launch (src/backward.rs `bwd_tail_split`). With one CTA
// per SM, a grid of `items` equal (key block, KV head, batch) items ends on a partial round of
// items mod SMs, while the other SMs idle (4,16,4096,128: 68 items of 132, a third of a round
// lost: 3 % of the launch, the wave quantization cuDNN's backward does not show, run 278).
// Those last items are cut into `tail_pieces` ranges of their query-block walk, one CTA each;
// every piece writes its dK, dV partial (f32, in the threads' register order) to a slot of
// `tail_part`, and the last of an item's pieces to arrive (a ticket in `tail_cnt`, zeroed
// before the launch) adds the item's slots in piece order and runs the epilogue, so the sum is
// the same whichever piece arrives last. The tail's CTAs come last in the 1-D grid, so they
// start after every whole item. Stream-K's idea (Osama et al. 2023, "Stream-K: Work-centric
// Parallel Decomposition for Dense Matrix-Matrix Multiplication"), for the last round only and
// without a persistent kernel. CTA c: item c below tail_first; else piece (c − first) mod pieces of
// item first + (c − first) / pieces. Items are key-block fastest, as the 3-D grid's.
template <int BN>
__device__ __forceinline__ void bwd_tail_item(const BwdParams& p, int c, int& n_blk, int& kvh, int& b, int& piece,
                                              int& tail_item) {
    int item = c;
    if (c >= p.tail_first) {
        tail_item = (c - p.tail_first) / p.tail_pieces;
        piece = (c - p.tail_first) % p.tail_pieces;
        item = p.tail_first + tail_item;
    }
    const int n_blocks = (p.kv_len + BN - 1) / BN;
    n_blk = item % n_blocks;
    kvh = (item / n_blocks) % p.kv_heads;
    b = item / (n_blocks * p.kv_heads);
}

// Δ = rowsum(dO∘O) and LSE₂ = LSE·log2e per (b, h, row) into [B·Hq, q_blocks·64] rows,
// padded: rows past Sq (and rows whose LSE is −∞: they see no key) get Δ = 0, LSE₂ = +∞; and
// zeros into the same rows of the dQ accumulator (64·q_blocks rows of the bucket's width per
// (b, h)), which the main kernel adds into. Zeroing here rather than in a memset pass of its own
// (FlashAttention-3's preprocess clears its dQaccum too) lets the stores overlap this pass's
// load latency. kDeltaRows rows per warp (bwd_kernel.cuh `rows_delta`); grid
// (q_blocks·64 / (8·kDeltaRows), Hq, B), so every padded row is written.
template <typename T>
__device__ __forceinline__ void bwd_hopper_preprocess(const T* __restrict__ o, const T* __restrict__ d_o,
                                                      const float* __restrict__ lse, float* __restrict__ lse2,
                                                      float* __restrict__ delta, float* __restrict__ dq_acc,
                                                      const BwdParams& p) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row_first = (blockIdx.x * 8 + warp) * kDeltaRows;
    const int h = blockIdx.y, b = blockIdx.z;
    const int q_pad = p.q_blocks * 64;
    if (row_first >= q_pad) return; // warp-uniform
    const int64_t bh = static_cast<int64_t>(b) * p.q_heads + h;
    // The accumulator's rows row_first.. are kDeltaRows · bucket contiguous floats (the tile
    // order permutes within a 64-row tile only), 16-byte aligned (`bwd_f32_regions`).
    float4* acc_rows = reinterpret_cast<float4*>(dq_acc + (bh * q_pad + row_first) * p.dq_pitch);
    for (int i = lane; i < kDeltaRows * p.dq_pitch / 4; i += 32) acc_rows[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    // Packed queries: sequence b's rows (the rows past its length are padding, as past Sq).
    int row0;
    const int len = bwd_seq_rows(p, b, row0);
    const DeltaLanes dl = delta_lanes(p.head_dim, lane);
    float acc[kDeltaRows] = {}; // padding rows: Δ = 0
    if (row_first < len) rows_delta(o, d_o, p, p.seqs.cu_q != nullptr ? 0 : b, h, row0, row_first, len, dl, acc);
    const int64_t lse_base = bwd_row_base(p, b, h, row0);
#pragma unroll
    for (int k = 0; k < kDeltaRows; ++k) {
        const int j = k * dl.groups + dl.grp, row = row_first + j;
        if (dl.sub != 0 || j >= kDeltaRows || row >= q_pad) continue;
        float l2 = INFINITY;
        if (row < len) {
            const float l = lse[lse_base + row];
            if (l != -INFINITY) l2 = l * kBwdLog2e;
        }
        delta[bh * q_pad + row] = acc[k]; // 0 past the sequence's rows
        lse2[bh * q_pad + row] = l2;
    }
}

// dQ = scale·the workspace (the main kernel adds dS·K unscaled, as bwd_postprocess says),
// read back from the tile order above. One CTA of 256 threads per 64-row tile, grid
// (q_blocks, Hq, B). The tile is read in its own order, 16
// coalesced bytes per thread and step, four steps in flight; a float4 holds columns c, c + 1
// of rows r and r + 8 (r = 16·warp + lane / 4, c = half·w + 8n + 2·(lane % 4)). The pairs go
// through shared memory (rows padded by 16 bytes: the 8 rows of a warp's stores fall in
// different banks) and leave as 16-byte row chunks. One warp per row, reading 8-byte pieces
// out of the tile order, moved 2.2 TB/s (docs/PERF.md, runs 216-217).
template <typename T>
__device__ __forceinline__ void bwd_hopper_postprocess(const float* __restrict__ dq_acc, T* __restrict__ dq,
                                                       const BwdParams& p) {
    __shared__ __align__(16) uint32_t rows[64 * (256 / 2 + 4)];
    const int qblk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int row0;
    const int len = bwd_seq_rows(p, b, row0);
    const int m0 = qblk * 64;
    if (m0 >= len) return; // CTA-uniform
    // The bucket (64, 128 or 256): per column half, half / 8 n-tiles and 16·half float4s.
    const int dk = p.dq_pitch, half = dk / 2;
    const int lg_tiles = __ffs(half >> 3) - 1; // log2(half / 8): the buckets are powers of two
    const int lg_half4 = __ffs(16 * half) - 1; // log2(float4s per half)
    const int pitch = dk / 2 + 4;              // words per staged row
    const int n_vec = 16 * dk;                 // float4s per tile
    const float4* tile = reinterpret_cast<const float4*>(
        dq_acc + ((static_cast<int64_t>(b) * p.q_heads + h) * p.q_blocks + qblk) * 64 * dk);
    constexpr int kInFlight = 4;
    for (int f0 = threadIdx.x; f0 < n_vec; f0 += 256 * kInFlight) {
        float4 x[kInFlight];
#pragma unroll
        for (int u = 0; u < kInFlight; ++u)
            if (f0 + 256 * u < n_vec) x[u] = tile[f0 + 256 * u];
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) {
            const int f = f0 + 256 * u;
            if (f >= n_vec) break;
            const int w = f >> lg_half4, rem = f & ((1 << lg_half4) - 1);
            const int lane = rem & 31, q = rem >> 5;
            const int n = q & ((1 << lg_tiles) - 1), wi = q >> lg_tiles;
            const int r = wi * 16 + (lane >> 2);
            const int word = (w * half + 8 * n + 2 * (lane & 3)) >> 1;
            rows[r * pitch + word] = StorageTraits<T>::pack(x[u].x * p.scale, x[u].y * p.scale);
            rows[(r + 8) * pitch + word] = StorageTraits<T>::pack(x[u].z * p.scale, x[u].w * p.scale);
        }
    }
    __syncthreads();
    T* head = seq_head_ptr(dq, p.dq_stride, b, h, row0, p.seqs.cu_q != nullptr);
    const int lg_chunks = __ffs(dk >> 3) - 1; // log2(16-byte chunks per row)
    for (int i = threadIdx.x; i < 64 * (dk >> 3); i += 256) {
        const int r = i >> lg_chunks, c = (i & ((1 << lg_chunks) - 1)) * 8;
        if (m0 + r < len && c < p.head_dim)
            *reinterpret_cast<uint4*>(head + static_cast<int64_t>(m0 + r) * p.dq_stride[2] + c) =
                *reinterpret_cast<const uint4*>(&rows[r * pitch + c / 2]);
    }
}

// Accumulator n-tiles 2kk, 2kk+1 as the A fragment of k-step kk (as in the forward's P).
template <typename T, int NT>
__device__ __forceinline__ void acc_to_a_frags(uint32_t (&a)[NT / 2][4], const float (&acc)[NT][4]) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) {
        a[kk][0] = StorageTraits<T>::pack(acc[2 * kk][0], acc[2 * kk][1]);
        a[kk][1] = StorageTraits<T>::pack(acc[2 * kk][2], acc[2 * kk][3]);
        a[kk][2] = StorageTraits<T>::pack(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
        a[kk][3] = StorageTraits<T>::pack(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
    }
}

// Deterministic turn of key block n on query block qblk when every key block walks all Q
// query blocks of a head, rotated: block n starts at query block −n mod Q and wraps, so it
// reaches qblk at step (qblk + n) mod Q. The turns follow the steps (ties, when there are more
// key blocks than query blocks, in key order). In lock-step, a block's previous adder is then
// the key block before it, one step ahead; without the rotation all key blocks of a head start
// on query block 0 together, and the last of 32 starts 31 turns late. Rotating the other way
// (block n starting at query block n) makes the previous adder key block n + 1, which the grid
// launches later: run 112 measured that, 6–9 % slower at 2,16,8192,64. Spacing the starts
// k = Q / n_blocks apart (k steps of slack per turn) measured within noise (runs 164–165).
// Deadlock: the first adder on a query block can be a later-launched key block (the wrap), so
// every key block of a head must be able to be resident at once; the host rotates only then
// (BwdParams::det_rotated; src/backward.rs `rotated_turns`, whose test simulates the walk).
// n_blocks is the number of key blocks. This count equals sorting by (step, n) for all
// n_blocks, Q < 40 (checked exhaustively when written; docs/PERF.md, run 113).
__device__ __forceinline__ int bwd_rotated_turn(int n, int qblk, int n_blocks, int q_blocks) {
    const int step = (qblk + n) % q_blocks;
    // Key blocks m with a smaller step: those with m mod Q in the cyclic range [−qblk, −qblk + step).
    auto below = [&](int r) { return (n_blocks / q_blocks) * r + min(r, n_blocks % q_blocks); }; // #{m : m mod Q < r}
    const int a = (q_blocks - qblk) % q_blocks;
    const int earlier = a + step <= q_blocks ? below(a + step) - below(a)
                                             : n_blocks - below(a) + below(a + step - q_blocks);
    return earlier + n / q_blocks;
}

// D = 256 (HopperBwdLayout::kSplitD): this warpgroup's dQ columns, dS·K[:, wg·128 + 64c ..]
// for chunks c = 0, 1 (32 accumulator registers each, beside dK's and dV's 128), added into
// the workspace tile in the order the staging buffers of the other buckets use
// (bwd_hopper_postprocess reads it back either way): per half chunk, the warp writes its four
// n-tiles (2 KiB, contiguous in that order) into its staging buffer `wstage` and lane 0 adds
// them with one bulk reduction, once the previous one has read the buffer. After chunk 0's
// wait every GEMM of the block has read Q/dO, so the stage is released there.
// Deterministic mode (the mma.sync backward's turns, bwd_kernel.cuh): after chunk 0 the CTA
// takes this block's turn (thread 0 waits, the named barrier holds the others) and adds.
// Passing a turn on needs the block's reductions to have completed. With DEFER (causal
// launches, whose turns run in reversed key order) that waits until the start of the next
// block, while its Sᵀ and dPᵀ GEMMs run: the reductions had the dQ step to complete in, and
// the next adder, which takes this query block one step later, gets the turn most of a step
// before its own dQ (docs/PERF.md runs 242–244; passed at the next block's dQ, as before, it
// arrived just as that adder waited: 4,16,4096,256 causal 1.20–1.28× → 1.08–1.10× the
// default). It is passed before the next one is waited for, so a CTA never holds a turn
// while it waits for one. A causal block's own turn is read once, right after dV and dK are
// issued (bwd_turn_reached), and thread 0 spins at chunk 0 only if that read missed: the wait
// otherwise costs an L2 round trip per block even when the turn came long before.
// Non-causal walks pass at once: the rotated walk's next adder needs the turn one block
// later, and deferring cost that chain its slack (run 163: 1.27–1.30× → 1.47×); the early
// read cost them 4 % (run 242). The caller passes the last pending turn with
// bwd_hopper_pass_turn after its walk.
struct PendingTurn {
    unsigned int* sem = nullptr; // null: nothing to pass
    int turn = 0;
};

// Passes `pending` on once this warpgroup pair's bulk reductions have completed (all 256
// consumer threads call it).
__device__ __forceinline__ void bwd_hopper_pass_turn(PendingTurn& pending, int tid, int lane) {
    if (pending.sem == nullptr) return;
    if (lane == 0) {
        bulk_wait<0>();
        fence_proxy_async_global();
    }
    // No fence in the other threads (they wrote nothing global): the barrier orders every
    // warp's completed reductions before thread 0's release, which is cumulative over them.
    named_barrier_sync(1, 256);
    if (tid == 0) bwd_pass_turn(pending.sem, pending.turn);
    pending.sem = nullptr;
}

template <typename T, class L, bool DEFER, int NO>
__device__ __forceinline__ void bwd_hopper_dq_by_warps(uint32_t ds_addr, uint32_t kq_addr, float* __restrict__ dq_acc,
                                                     float* wstage, unsigned int* __restrict__ sems,
                                                     const BwdParams& p, int b, int h, int qblk, int turn, int tid,
                                                     int wi, int lane, float (&acc_dv)[NO][4],
                                                     float (&acc_dk)[NO][4], uint64_t* empty, PendingTurn& pending,
                                                     bool turn_seen) {
    constexpr int kBM = L::kBM, kBN = L::kBN, kTilesPerHalf = L::kNQ / 8;
    const int64_t tile_idx = (static_cast<int64_t>(b) * p.q_heads + h) * p.q_blocks + qblk;
    float* tile = dq_acc + tile_idx * kBM * (2 * L::kNQ) + (tid >> 7) * kBM * L::kNQ;
    unsigned int* sem = sems + tile_idx;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
        float acc_dq[8][4];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk)
            Wgmma16<T, 64>::ss_tt(acc_dq, wgmma_desc_mn128(ds_addr + kk * 16 * 128, kBN * 128),
                                  wgmma_desc_mn128(kq_addr + c * kBN * 128 + kk * 16 * 128, kBN * 128), kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(acc_dq);
        if (c == 0) {
            wgmma_fence_operands(acc_dv);
            wgmma_fence_operands(acc_dk);
            if (lane == 0) mbar_arrive(empty); // this warp is done with Q/dO stage s
            if (p.deterministic) {
                if constexpr (DEFER) bwd_hopper_pass_turn(pending, tid, lane);
                if (tid == 0 && !turn_seen) bwd_wait_turn(sem, turn);
                named_barrier_sync(1, 256);
                // The bulk reductions below (async proxy) after the earlier adders' writes.
                if (lane == 0) fence_proxy_async_global();
            }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            if (lane == 0) bulk_wait_read<0>(); // the previous reduction has read the buffer
            __syncwarp();
#pragma unroll
            for (int n = 0; n < 4; ++n) {
                const float* a = acc_dq[4 * half + n];
                *reinterpret_cast<float4*>(wstage + (n * 32 + lane) * 4) =
                    make_float4(a[0], a[1], a[2], a[3]);
            }
            fence_proxy_async_smem();
            __syncwarp();
            if (lane == 0) {
                bulk_reduce_add_f32(tile + (wi * kTilesPerHalf + 8 * c + 4 * half) * 32 * 4, wstage, 2048);
                bulk_commit();
            }
        }
    }
    if (p.deterministic) {
        if constexpr (DEFER) {
            pending = PendingTurn{sem, turn};
        } else {
            if (lane == 0) {
                bulk_wait<0>();
                fence_proxy_async_global();
            }
            named_barrier_sync(1, 256); // as in bwd_hopper_pass_turn: no per-thread fence
            if (tid == 0) bwd_pass_turn(sem, turn);
        }
    }
}

// A split item's piece (bwd_tail_item) after its walk: writes this thread's dK, dV partial to
// the piece's slot (256 consumer threads × 2·NO float4, each float4 one n-tile's registers,
// thread-fastest so the stores coalesce), takes the item's ticket, and returns whether it
// was the last piece; if so, dK and dV hold the sum of every piece's slot, added in piece
// order. The threadfence-reduction pattern: stores, fence, barrier, then one atomic; the
// last arriver fences again and reads the other pieces' slots through the L2 (ld.global.cg).
// `flag`: a shared int of its own (a persistent CTA's next blocks already load into the stages).
template <int NO>
__device__ __forceinline__ bool bwd_tail_merge(float (&acc_dk)[NO][4], float (&acc_dv)[NO][4],
                                               float* __restrict__ tail_part, unsigned int* __restrict__ tail_cnt,
                                               int tail_item, int piece, int pieces, int tid, int* flag) {
    constexpr int kSlotFloats = 2 * NO * 4 * 256;
    float4* slot = reinterpret_cast<float4*>(tail_part + (static_cast<int64_t>(tail_item) * pieces + piece) * kSlotFloats);
#pragma unroll
    for (int n = 0; n < NO; ++n) {
        slot[n * 256 + tid] = make_float4(acc_dk[n][0], acc_dk[n][1], acc_dk[n][2], acc_dk[n][3]);
        slot[(NO + n) * 256 + tid] = make_float4(acc_dv[n][0], acc_dv[n][1], acc_dv[n][2], acc_dv[n][3]);
    }
    __threadfence();
    named_barrier_sync(1, 256);
    if (tid == 0) *flag = atomicAdd(tail_cnt + tail_item, 1u) == static_cast<unsigned>(pieces - 1);
    named_barrier_sync(1, 256);
    if (!*flag) return false;
    __threadfence();
    const float4* item = reinterpret_cast<const float4*>(tail_part + static_cast<int64_t>(tail_item) * pieces * kSlotFloats);
    // dK, then dV: NO float4 loads in flight at most (all 2·NO at once, 128 registers beside
    // the 128 of the accumulators, spilled at D = 128 and 256).
    auto merge = [&](float (&acc)[NO][4], int first) {
        for (int q = 0; q < pieces; ++q) {
            const float4* src = item + static_cast<int64_t>(q) * (kSlotFloats / 4) + first * 256;
#pragma unroll
            for (int n = 0; n < NO; ++n) {
                const float4 x = __ldcg(src + n * 256 + tid);
                if (q == 0) {
                    acc[n][0] = x.x, acc[n][1] = x.y, acc[n][2] = x.z, acc[n][3] = x.w;
                } else {
                    acc[n][0] += x.x, acc[n][1] += x.y, acc[n][2] += x.z, acc[n][3] += x.w;
                }
            }
        }
    };
    merge(acc_dk, 0);
    merge(acc_dv, NO);
    return true;
}

// A persistent launch's items (BwdParams::persistent_items > 0: the plain entries in the
// default mode, one CTA per SM, src/backward.rs `persistent_items`). A CTA loads the next
// item's first Q/dO block while its consumers finish the last one, and its K/V once that
// item's last block has staged its dQ (at D = 256, once both dQ halves have read K), so the
// CTA's start and the pipeline's fill are not paid per item: docs/PERF.md runs 302–307
// measured 1.5–3 % on causal launches (short items), about nothing on non-causal ones. Items
// go out in index order, so a causal grid's longest-first order and a split tail's place at
// the end hold: CTA c takes item c, then the next one a counter hands out (dynamic, as causal
// items differ in length up to 32×; a static round-robin of the longest-first list ends 28 %
// later in a list-scheduling model of 4,16,4096,128). The loader thread takes, decodes and
// publishes each item with its block count through two slots of shared memory with
// full/empty mbarriers, as FlashAttention-3's DynamicPersistentTileScheduler does with named
// barriers (hopper/tile_scheduler.hpp).
// One block of a CTA's walk, as the loader computed it (ring entry g mod 2·kStages for the
// walk's g-th block): the consumers read it after the stage's full barrier, the dQ writer
// after the block's dQ is staged. Entry g is written again for block g + 2·kStages, which
// waits for the consumers to free stage g + kStages, after the writer freed block g's dQ
// staging: both readers are done with it by then.
struct BwdBlockInfo {
    int qblk;      // query block
    int head;      // query head
    int head_tile; // (batch·Hq + head)·q_blocks: the dQ workspace's tile of block 0
    int turn;      // the deterministic dQ turn (0 in the default mode)
};

// The queue's state per thread is the count of items taken: the producer warpgroup's loops
// run at the edge of its 56 registers, and the consumers' at the edge of their 224.
template <typename L> struct BwdItemQueue {
    int taken = 0; // items this thread took from the slots so far

    static __device__ __forceinline__ int* slot(unsigned char* base, int j) {
        return reinterpret_cast<int*>(base + L::kOffSched) + 2 * j;
    }
    static __device__ __forceinline__ uint64_t* full(unsigned char* base, int j) {
        return reinterpret_cast<uint64_t*>(base + L::kOffBar) + 2 + j;
    }
    static __device__ __forceinline__ uint64_t* empty(unsigned char* base, int j) {
        return reinterpret_cast<uint64_t*>(base + L::kOffBar) + 4 + j;
    }
    // The loader thread: the index of its next item (past the end: none).
    static __device__ __forceinline__ unsigned int take(unsigned int* counter) {
        return gridDim.x + atomicAdd(counter, 1u);
    }
    // The loader thread: the next item (or -1, the end) and its block count into the next slot,
    // once its readers are done with what it held two items ago.
    __device__ __forceinline__ void publish(unsigned char* base, int lin, int blocks) {
        const int j = taken & 1, u = taken >> 1;
        ++taken;
        if (u > 0) mbar_wait(empty(base, j), (u - 1) & 1);
        slot(base, j)[0] = lin;
        slot(base, j)[1] = blocks;
        mbar_arrive(full(base, j)); // release: the slot's stores before the phase completes
    }
    // A reading thread: a whole consumer warp (lane 0 arrives once its lanes have read) or the
    // dQ writer's single thread. Returns the item (-1: none) and its block count.
    __device__ __forceinline__ int read(unsigned char* base, bool whole_warp, int lane, int& blocks) {
        const int j = taken & 1, u = taken >> 1;
        ++taken;
        mbar_wait(full(base, j), u & 1);
        const volatile int* v = slot(base, j);
        const int lin = v[0];
        blocks = v[1];
        if (whole_warp) __syncwarp();
        if (lane == 0) mbar_arrive(empty(base, j));
        return lin;
    }
};

template <typename T, int DK, bool CAUSAL, bool FEATURES, bool SEQS = false>
__device__ __forceinline__ void bwd_hopper_kernel(const TmaDesc* tma_q, const TmaDesc* tma_k, const TmaDesc* tma_v,
                                                  const TmaDesc* tma_do, const float* __restrict__ lse2,
                                                  const float* __restrict__ delta, float* __restrict__ dq_acc,
                                                  T* __restrict__ dk, T* __restrict__ dv,
                                                  unsigned int* __restrict__ sems, float* __restrict__ tail_part,
                                                  unsigned int* __restrict__ tail_cnt, const BwdParams& p_launch) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using L = HopperBwdLayout<DK>;
    constexpr int kBM = L::kBM, kBN = L::kBN, kST = L::kStages;
    constexpr int kNS = kBM / 8;     // n-tiles of Sᵀ, dPᵀ (queries)
    constexpr bool kSplitD = L::kSplitD;
    constexpr int kNO = L::kNO / 8;  // n-tiles of this warpgroup's dK, dV
    constexpr int kNQ = L::kNQ / 8;  // n-tiles of this warpgroup's dQ half
    constexpr int kKS = kBM / 16;    // k-steps of dV, dK (queries)
    constexpr int kConsumerWarps = 8;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* base = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    unsigned char* sK = base;
    unsigned char* sV = base + L::kOffV;
    unsigned char* sQ = base + L::kOffQ;
    unsigned char* sdO = base + L::kOffDo;
    unsigned char* sdS = base + L::kOffDs;
    float* sdQ = reinterpret_cast<float*>(base + L::kOffDq);
    float* sLse = reinterpret_cast<float*>(base + L::kOffLse);
    float* sDelta = reinterpret_cast<float*>(base + L::kOffDelta);
    float* sDqWarp = reinterpret_cast<float*>(base + L::kOffDqWarp); // D = 256: per consumer warp
    uint64_t* bar_k = reinterpret_cast<uint64_t*>(base + L::kOffBar); // K loaded (TMA bytes)
    uint64_t* bar_v = bar_k + 1;        // V loaded
    uint64_t* item_full = bar_k + 2;    // two: BwdItemQueue's slots
    uint64_t* item_empty = bar_k + 4;
    uint64_t* k_read = bar_k + 6;       // D = 256: the last block's dQ GEMMs have read K
    uint64_t* full = bar_k + 7;         // Q/dO stage loaded (TMA bytes)
    uint64_t* empty = full + kST;       // Q/dO stage read (consumer warps)
    uint64_t* dq_full = empty + kST;    // dQ staged (consumer warps)
    uint64_t* dq_empty = dq_full + kST; // dQ staging read by its reduce (the writer)
    int* sFlag = reinterpret_cast<int*>(base + L::kOffSched) + 4; // after BwdItemQueue's slots
    BwdBlockInfo* sBlocks = reinterpret_cast<BwdBlockInfo*>(base + L::kOffBlockInfo);

    // Deterministic causal runs walk the key blocks from the last one down (bwd_kernel.cuh).
    const bool reversed = CAUSAL && p_launch.deterministic;
    const int tid = threadIdx.x;
    // FEATURES or SEQS: this sequence's lengths, alignment and packed row offsets (seqs.cuh). Its
    // Q/dO and K/V tiles are TMA boxes at those offsets in the packed tensors: rows past the
    // sequence are the next sequence's, which LSE₂ = +∞ (queries) and the key range (keys)
    // turn into P = 0, and the epilogue drops. A key block past its keys returns at once
    // (before any barrier: the grid is sized by the longest sequence). These entries run one
    // item per CTA.
    static_assert(!(FEATURES && SEQS), "SEQS: the layouts without the features");
    constexpr bool kSeqs = FEATURES || SEQS; // this entry resolves sequence layouts
    // Persistent launches: plain entries (BwdItemQueue); the host sets persistent_items only
    // for default-mode launches, whose items wait on no other CTA.
    const bool persistent = !kSeqs && p_launch.persistent_items > 0;
    BwdItemQueue<L> queue;
    // The item space: the classic grid (key blocks × KV heads × batch, key block fastest) or,
    // with a split tail, its 1-D grid (bwd_tail_item).
    const int grid_x = (p_launch.kv_len + kBN - 1) / kBN;
    const bool rotated = !CAUSAL && !FEATURES && p_launch.deterministic && p_launch.det_rotated;
    BwdParams p = p_launch;
    SeqRows seq_rows{0, 0};
    int n_blk = 0, kvh = 0, b = 0, piece = -1, tail_item = 0;
    int i_begin = 0, per_head = 0, n_iter = 0, it0 = 0, rotation = 0;
    // The (key block, KV head, batch) of item `lin`, and its walk.
    auto decode = [&](int lin) {
        int n_lin = 0;
        piece = -1;
        tail_item = 0;
        if (!persistent) {
            n_lin = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
            if constexpr (CAUSAL) bwd_lpt_order(p_launch, 8 * DK, n_lin, kvh, b);
        } else {
            n_lin = lin % grid_x, kvh = (lin / grid_x) % p_launch.kv_heads, b = lin / (grid_x * p_launch.kv_heads);
            if constexpr (CAUSAL) {
                bwd_lpt_order_at(p_launch, 8 * DK, lin, grid_x, p_launch.kv_heads, p_launch.batch, n_lin, kvh, b);
            }
        }
        // A split tail (plain non-causal entries, src/backward.rs `bwd_tail_split`): a 1-D grid
        // whose CTAs from tail_first on are pieces of the last items, `tail_pieces` per item.
        if constexpr (!CAUSAL && !kSeqs) {
            if (p_launch.tail_pieces > 1) bwd_tail_item<kBN>(p_launch, lin, n_lin, kvh, b, piece, tail_item);
        }
        n_blk = reversed ? grid_x - 1 - n_lin : n_lin;
    };
    auto walk = [&] {
        int i_end;
        bwd_walk<CAUSAL, FEATURES, kBM, kBN>(p, n_blk, i_begin, i_end);
        per_head = max(0, i_end - i_begin);
        // A piece of a split item walks iterations [it0, it0 + n_iter) of the item's walk.
        n_iter = per_head * p.group;
        it0 = 0;
        if (piece >= 0) {
            it0 = piece * n_iter / p.tail_pieces;
            n_iter = (piece + 1) * n_iter / p.tail_pieces - it0;
        }
        // Iteration `it` covers query head kvh·group + it / per_head, block i_begin + it % per_head;
        // in deterministic mode rotated back by the key block where every key block walks every
        // query block (non-causal entries without features: see bwd_rotated_turn). The default
        // mode keeps the plain walk, where all key blocks of a head read the same Q/dO block from
        // the L2 at about the same time (run 113 measured it within noise, 0–3 % slower, rotated).
        rotation = rotated && per_head > 0 ? n_blk % per_head : 0;
    };
    const int lin0 = blockIdx.x; // a persistent launch's first item (1-D grid)
    decode(lin0);
    if (kSeqs) {
        seq_rows = resolve_sequence(p, b);
        if (n_blk * kBN >= p.kv_len) return;
    }
    walk();
    const bool packed_k = kSeqs && p.seqs.cu_k != nullptr;
    // The TMA batch coordinates of this item's K/V and Q/dO (packed sequences: one batch entry).
    auto kb_of = [&] { return packed_k ? 0 : b; };
    auto qb_of = [&] { return kSeqs && p.seqs.cu_q != nullptr ? 0 : b; };
    auto head_of = [&](int it) { return kvh * p.group + (it0 + it) / per_head; };
    auto qblk_of = [&](int it) { return i_begin + ((it0 + it) % per_head + per_head - rotation) % per_head; };
    // This key block's deterministic turn on query block qblk (0 in the default mode).
    auto turn_of = [&](int qblk) {
        if (!p.deterministic) return 0;
        return rotated ? bwd_rotated_turn(n_blk, qblk, (p.kv_len + kBN - 1) / kBN, per_head)
                       : bwd_turn<CAUSAL, FEATURES, kBM, kBN>(p, n_blk, qblk, reversed);
    };
    // The next item of this CTA (false: none). Every role calls it once per item, in order:
    // the loader takes it from the counter, decodes it and publishes it with its block count;
    // the others read both, and the consumers decode it for their key rows and epilogue.
    auto next_item = [&](int role) { // 0: loader, 1: dQ writer, 2: consumers
        if (!persistent) return false;
        int lin;
        if (role == 0) {
            const unsigned int next = queue.take(tail_cnt + p_launch.sched_slot);
            lin = next < static_cast<unsigned int>(p_launch.persistent_items) ? static_cast<int>(next) : -1;
            if (lin >= 0) {
                decode(lin);
                walk();
            }
            queue.publish(base, lin, n_iter);
        } else {
            lin = queue.read(base, role == 2, tid & 31, n_iter);
            if (lin >= 0 && role == 2) decode(lin);
        }
        return lin >= 0;
    };

    if (tid == 0) {
        mbar_init(bar_k, 1);
        mbar_init(bar_v, 1);
        mbar_init(k_read, kConsumerWarps);
        for (int j = 0; j < 2; ++j) {
            mbar_init(&item_full[j], 1);
            mbar_init(&item_empty[j], kConsumerWarps + (kSplitD ? 0 : 1)); // and the dQ writer
        }
#pragma unroll
        for (int st = 0; st < kST; ++st) {
            mbar_init(&full[st], 1);
            mbar_init(&empty[st], kConsumerWarps);
            mbar_init(&dq_full[st], kConsumerWarps);
            mbar_init(&dq_empty[st], 1);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (tid >= 256) {
        // The producer warpgroup: warp 8 loads, warp 9 writes dQ, the rest only give their
        // registers back.
        setmaxnreg_dec<L::kProducerRegs>();
        if (tid == 256) {
            tma_prefetch_desc(tma_q);
            tma_prefetch_desc(tma_k);
            tma_prefetch_desc(tma_v);
            tma_prefetch_desc(tma_do);
            int g = 0;       // Q/dO ring iterations so far, over every item
            int g_last = -1; // the last block of the last item that loaded K and V
            int kv_u = 0;    // items whose K and V were loaded
            // K and V of this item, once the previous item's last block is done with them: its
            // dQ is staged (after its dQ GEMM, the last read of K, and so of V; the dK GEMM
            // still runs), or at D = 256, where the consumers add dQ themselves, K's own
            // barrier after both halves of dQ. The loader waited for the stage's previous
            // phase (loading block g_last), so the parity cannot alias.
            auto load_kv = [&] {
                const int key0 = n_blk * kBN;
                if (kSplitD && kv_u > 0) mbar_wait(k_read, (kv_u - 1) & 1);
                if (!kSplitD && g_last >= 0) mbar_wait(&dq_full[g_last % kST], (g_last / kST) & 1);
                ++kv_u;
                mbar_arrive_expect_tx(bar_k, L::kKBytes);
                mbar_arrive_expect_tx(bar_v, L::kKBytes);
#pragma unroll
                for (int c = 0; c < L::kSub; ++c) {
                    tma_load_4d(sK + c * kBN * 128, tma_k, bar_k, c * 64, seq_rows.k_row0 + key0, kvh, kb_of());
                    tma_load_4d(sV + c * kBN * 128, tma_v, bar_v, c * 64, seq_rows.k_row0 + key0, kvh, kb_of());
                }
            };
            do {
                // Q, dO, LSE₂ and Δ of each block into the ring, once the consumers freed the
                // slot; K and V after the first block's, whose slot the previous item's
                // second-to-last block frees (so its loads run under the previous item's last
                // block).
                for (int it = 0; it < n_iter; ++it, ++g) {
                    const int s = g % kST;
                    const int h = head_of(it);
                    const int qblk = qblk_of(it);
                    const int m0 = qblk * kBM;
                    const int head_tile = (b * p.q_heads + h) * p.q_blocks;
                    const int64_t rows = static_cast<int64_t>(head_tile) * kBM + m0;
                    mbar_wait(&empty[s], ((g / kST) & 1) ^ 1);
                    // Released to the consumers by the arrival below, to the writer by theirs.
                    sBlocks[g % (2 * kST)] = BwdBlockInfo{qblk, h, head_tile, turn_of(qblk)};
                    mbar_arrive_expect_tx(&full[s], 2 * L::kQBytes + 2 * L::kRowBytes);
#pragma unroll
                    for (int c = 0; c < L::kSub; ++c) {
                        const int qrow = seq_rows.q_row0 + m0;
                        tma_load_4d(sQ + s * L::kQBytes + c * kBM * 128, tma_q, &full[s], c * 64, qrow, h, qb_of());
                        tma_load_4d(sdO + s * L::kQBytes + c * kBM * 128, tma_do, &full[s], c * 64, qrow, h, qb_of());
                    }
                    bulk_load(sLse + s * kBM, lse2 + rows, L::kRowBytes, &full[s]);
                    bulk_load(sDelta + s * kBM, delta + rows, L::kRowBytes, &full[s]);
                    if (it == 0) load_kv();
                }
                if (n_iter > 0) g_last = g - 1;
            } while (next_item(0));
        } else if (!kSplitD && tid >= 288 && (tid & 31) == 0 && (tid - 288) / 32 < (p.deterministic ? kST : 1)) {
            // The dQ writers: each adds a staged 64 × DK tile into the workspace in one bulk
            // reduce. Deterministic mode takes the block's turn first and passes it on once the
            // reduce has completed; the consumers never wait for either. There, one writer per
            // stage (lane 0 of warps 9..): writer w owns the blocks it ≡ w (mod kST), so the
            // turn chains of kST query blocks advance at once; one writer would wait out each
            // block's chain before it takes the next block's turn. The per-block order of the
            // additions is the turn order either way. (Deterministic launches run one item per
            // CTA; persistent ones have one writer.)
            const int writers = p.deterministic ? kST : 1;
            const int w = (tid - 288) / 32;
            int g = 0; // ring iterations so far, over every item
            do {
                for (int it = 0; it < n_iter; ++it, ++g) {
                    if (g % writers != w) continue;
                    const int s = g % kST;
                    mbar_wait(&dq_full[s], (g / kST) & 1);
                    const BwdBlockInfo blk = sBlocks[g % (2 * kST)];
                    const int64_t tile = static_cast<int64_t>(blk.head_tile) + blk.qblk;
                    float* dst = dq_acc + tile * kBM * DK;
                    unsigned int* sem = sems + tile;
                    const int turn = blk.turn;
                    if (p.deterministic) {
                        bwd_wait_turn(sem, turn);
                        fence_proxy_async_global();
                    }
                    bulk_reduce_add_f32(dst, sdQ + s * (kBM * DK), L::kDqBytes);
                    bulk_commit();
                    if (p.deterministic) {
                        bulk_wait<0>();
                        fence_proxy_async_global();
                        bwd_pass_turn(sem, turn); // st.release.gpu: no separate fence needed
                    } else {
                        bulk_wait_read<0>();
                    }
                    mbar_arrive(&dq_empty[s]);
                }
            } while (next_item(1));
            bulk_wait<0>(); // the staging must outlive the last reduce
        }
        return;
    }

    setmaxnreg_inc<L::kConsumerRegs>();
    const int wg = tid >> 7;       // keys 64·wg.. of the block (split: columns wg·DK/2..)
    const int wi = (tid >> 5) & 3; // warp in the warpgroup: rows 16·wi..
    const int lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;

    const uint32_t k_addr = smem_addr(sK);
    const uint32_t v_addr = smem_addr(sV);
    // This warpgroup's 64 key rows start 64 rows (8 KiB) into every K/V sub-tile (split:
    // both warpgroups read all 64).
    const int key_off = kSplitD ? 0 : wg * 64;
    const uint32_t kw_addr = k_addr + key_off * 128;
    const uint32_t vw_addr = v_addr + key_off * 128;
    // dQ's B operand: columns [wg·DK/2, +DK/2) of K, MN-major — sub-tile wg at D = 128, the
    // half row of the one sub-tile at D = 64 (64 bytes in; the swizzle XOR leaves it aligned),
    // sub-tiles 2wg and 2wg + 1 at D = 256.
    const uint32_t kq_addr = DK == 64 ? k_addr + wg * 64 : k_addr + wg * (DK / 128) * kBN * 128;
    // Split: dK/dV's and dO/Q's columns [wg·DK/2, +DK/2) start at Q/dO sub-tile 2wg.
    const uint32_t qcol_off = kSplitD ? wg * 2 * kBM * 128 : 0;

    PendingTurn pending; // D = 256, deterministic: the turn the last block took, not yet passed on
    int gi = 0;   // ring iterations so far, over every item
    int kv_u = 0; // items whose K and V this CTA loaded
    do {
        const int key0 = n_blk * kBN;
        const int krow = key0 + key_off + wi * 16 + g; // this thread's keys: krow, krow + 8
        float acc_dk[kNO][4], acc_dv[kNO][4];
#pragma unroll
        for (int n = 0; n < kNO; ++n)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc_dk[n][r] = acc_dv[n][r] = 0.f;

        if (n_iter > 0) {
            mbar_wait(bar_k, kv_u & 1);
            mbar_wait(bar_v, kv_u & 1);
        }
        for (int it = 0; it < n_iter; ++it, ++gi) {
            const int s = gi % kST;
            const uint32_t phase = (gi / kST) & 1;
            mbar_wait(&full[s], phase);
            const int qblk = sBlocks[gi % (2 * kST)].qblk, head = sBlocks[gi % (2 * kST)].head;
            const int m0 = qblk * kBM;
            const uint32_t q_addr = smem_addr(sQ + s * L::kQBytes);
            const uint32_t do_addr = smem_addr(sdO + s * L::kQBytes);
            const uint32_t ds_addr = smem_addr(sdS + s * L::kDsBytes);
            const float* tLse = sLse + s * kBM;
            const float* tDelta = sDelta + s * kBM;
            // Sᵀ and dPᵀ (64 keys × 64 queries each), two commit groups.
            float acc_s[kNS][4], acc_dp[kNS][4];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < DK / 16; ++kk) {
                const int c = kk / 4, w = (kk % 4) * 32;
                Wgmma16<T, kBM>::ss(acc_s, wgmma_desc<128>(kw_addr + c * kBN * 128 + w),
                                    wgmma_desc<128>(q_addr + c * kBM * 128 + w), kk > 0);
            }
            wgmma_commit();
#pragma unroll
            for (int kk = 0; kk < DK / 16; ++kk) {
                const int c = kk / 4, w = (kk % 4) * 32;
                Wgmma16<T, kBM>::ss(acc_dp, wgmma_desc<128>(vw_addr + c * kBN * 128 + w),
                                    wgmma_desc<128>(do_addr + c * kBM * 128 + w), kk > 0);
            }
            wgmma_commit();
            // D = 256, deterministic causal: the last block's turn passes here, while both GEMMs
            // run (PendingTurn).
            if constexpr (kSplitD && CAUSAL) {
                if (p.deterministic) bwd_hopper_pass_turn(pending, tid, lane);
            }

            uint32_t pa[kKS][4];
            if constexpr (FEATURES) {
                // Pᵀ through the forward's score modifiers and mask (score_mod.cuh), in its order:
                // softcap, ALiBi, the mask. The mask is applied only on blocks that some row's
                // range cuts (its ends are monotone in the row, as in the forward's
                // tile_needs_mask); ALiBi's distance is a float per element from one conversion
                // per block (exact below 2^24, as the forward's).
                const float slope = alibi_slope(b, head, p);
                const KeyRange first_row = row_key_range<CAUSAL>(m0, p);
                const KeyRange last_row = row_key_range<CAUSAL>(min(m0 + kBM - 1, p.q_len - 1), p);
                const bool needs_mask = key0 < last_row.lo || key0 + kBN > first_row.hi;
                const float dist0 = static_cast<float>(m0 + 2 * t + p.kv_len - p.q_len - krow);
                const bool capped = p.feat.softcap_in != 0.f;
                // P of element (n, e), and the softcap's d(score)/d(raw score) in `dscore`.
                auto prob = [&](int n, int e, float& dscore) {
                    const int ql = 8 * n + 2 * t + (e & 1);
                    float sc = acc_s[n][e];
                    dscore = 1.f;
                    if (capped) {
                        const float x = sc * p.feat.softcap_in;
                        sc = softcap_tanh(x);                           // the forward's tanh: P fits its LSE
                        dscore = softcap_dtanh(x) * p.feat.softcap_in; // (1 − t²)·scale/c, FA2's dtanh
                    }
                    if (slope != 0.f) sc -= slope * fabsf(dist0 + static_cast<float>(8 * n + (e & 1) - 8 * (e >> 1)));
                    float pr = exp2f(fmaf(sc, p.scale_log2, -tLse[ql]));
                    if (needs_mask) {
                        const KeyRange range = row_key_range<CAUSAL>(m0 + ql, p);
                        const int key = krow + 8 * (e >> 1);
                        if (key < range.lo || key >= range.hi) pr = 0.f;
                    }
                    return pr;
                };
                if (capped) {
                    // 1 − tanh² is needed in dSᵀ: P and dSᵀ in one pass after both GEMMs, so it
                    // holds no registers across the dPᵀ GEMM.
                    wgmma_wait<0>();
                    wgmma_fence_operands(acc_s);
                    wgmma_fence_operands(acc_dp);
#pragma unroll
                    for (int n = 0; n < kNS; ++n) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            float dscore;
                            const float pr = prob(n, e, dscore);
                            acc_s[n][e] = pr;
                            acc_dp[n][e] = pr * (acc_dp[n][e] - tDelta[8 * n + 2 * t + (e & 1)]) * dscore;
                        }
                    }
                    acc_to_a_frags<T, kNS>(pa, acc_s);
                } else {
                    // No softcap: Pᵀ while dPᵀ is still in the tensor cores, as the plain entry.
                    wgmma_wait<1>();
                    wgmma_fence_operands(acc_s);
#pragma unroll
                    for (int n = 0; n < kNS; ++n) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            float dscore;
                            acc_s[n][e] = prob(n, e, dscore);
                        }
                    }
                    acc_to_a_frags<T, kNS>(pa, acc_s);
                    wgmma_wait<0>();
                    wgmma_fence_operands(acc_dp);
#pragma unroll
                    for (int n = 0; n < kNS; ++n) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            acc_dp[n][e] = acc_s[n][e] * (acc_dp[n][e] - tDelta[8 * n + 2 * t + (e & 1)]);
                        }
                    }
                }
            } else {
                // Pᵀ (in place of Sᵀ) while dPᵀ is still in the tensor cores.
                wgmma_wait<1>();
                wgmma_fence_operands(acc_s);
                const bool masked = CAUSAL && key0 + kBN - 1 > m0 + p.diag_offset;
                // SEQS: the sequence's last key block (later rows are another sequence's keys).
                const bool key_tail = SEQS && key0 + kBN > p.kv_len;
#pragma unroll
                for (int n = 0; n < kNS; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int ql = 8 * n + 2 * t + (e & 1);
                        const int key = krow + 8 * (e >> 1);
                        float pr = exp2f(fmaf(acc_s[n][e], p.scale_log2, -tLse[ql]));
                        if (masked && key > m0 + ql + p.diag_offset) pr = 0.f;
                        if (key_tail && key >= p.kv_len) pr = 0.f;
                        acc_s[n][e] = pr;
                    }
                }
                acc_to_a_frags<T, kNS>(pa, acc_s);
                wgmma_wait<0>();
                wgmma_fence_operands(acc_dp);
                // dSᵀ = Pᵀ∘(dPᵀ − Δ) from P in f32; P and dS are rounded only as MMA operands
                // (attn-ref's backward_emulated models these points).
#pragma unroll
                for (int n = 0; n < kNS; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int ql = 8 * n + 2 * t + (e & 1);
                        acc_dp[n][e] = acc_s[n][e] * (acc_dp[n][e] - tDelta[ql]);
                    }
                }
            }
            uint32_t sa[kKS][4];
            acc_to_a_frags<T, kNS>(sa, acc_dp);

            // dV += Pᵀ·dO, dK += dSᵀ·Q (k-step kk: queries 16kk.., 16 rows of 128 bytes).
            auto issue_dv = [&] {
#pragma unroll
                for (int kk = 0; kk < kKS; ++kk)
                    Wgmma16<T, L::kNO>::rs(acc_dv, pa[kk], wgmma_desc_mn128(do_addr + qcol_off + kk * 16 * 128, kBM * 128));
            };
            auto issue_dk = [&] {
#pragma unroll
                for (int kk = 0; kk < kKS; ++kk)
                    Wgmma16<T, L::kNO>::rs(acc_dk, sa[kk], wgmma_desc_mn128(q_addr + qcol_off + kk * 16 * 128, kBM * 128));
            };
            // dSᵀ into shared memory (tile s), one 128-byte swizzled row of 64 queries per key: the
            // MN-major A operand of dQ. Rows 8 apart share no bank (chunk n ^ row). Its last
            // readers, the dQ MMAs of block it − 2, finished before either warpgroup passed the
            // barrier of block it − 1. Split: both warpgroups hold the same dSᵀ; each stores
            // alternate 16-byte chunks.
            auto store_ds = [&] {
                unsigned char* tile = sdS + s * L::kDsBytes;
                const int r0 = key_off + wi * 16 + g;
#pragma unroll
                for (int n = 0; n < kNS; ++n) {
                    if (kSplitD && (n & 1) != wg) continue;
#pragma unroll
                    for (int hi = 0; hi < 2; ++hi) {
                        const int r = r0 + 8 * hi;
                        const uint32_t word = (hi == 0) ? (n % 2 == 0 ? sa[n / 2][0] : sa[n / 2][2])
                                                        : (n % 2 == 0 ? sa[n / 2][1] : sa[n / 2][3]);
                        *reinterpret_cast<uint32_t*>(tile + r * 128 + ((n ^ (r & 7)) << 4) + 4 * t) = word;
                    }
                }
                fence_proxy_async_smem();
            };

            if constexpr (kSplitD) {
                wgmma_fence_operands(acc_dv);
                wgmma_fence_operands(acc_dk);
                wgmma_fence();
                issue_dv();
                issue_dk();
                wgmma_commit();
                // Causal: the early read of this block's turn (PendingTurn). Its turn is computed
                // here by thread 0 only; every thread computing it before the barrier (for all
                // walks) cost the non-causal deterministic launches 2 % (run 243).
                bool turn_seen = false;
                if (CAUSAL && p.deterministic && tid == 0) {
                    const int64_t tile_idx = (static_cast<int64_t>(b) * p.q_heads + head) * p.q_blocks + qblk;
                    turn_seen = bwd_turn_reached(sems + tile_idx, sBlocks[gi % (2 * kST)].turn);
                }
                store_ds();
                named_barrier_sync(1, 256); // both warpgroups' dSᵀ rows are in
                bwd_hopper_dq_by_warps<T, L, CAUSAL>(ds_addr, kq_addr, dq_acc, sDqWarp + (tid >> 5) * (L::kWarpDqBytes / 4),
                                             sems, p, b, head, qblk, sBlocks[gi % (2 * kST)].turn, tid, wi, lane, acc_dv,
                                             acc_dk, &empty[s], pending, turn_seen);
                if (it == n_iter - 1 && lane == 0) mbar_arrive(k_read); // both dQ halves read K
            } else {
                // FlashAttention-3's order (mainloop_bwd_sm90_tma_gmma_ws.hpp): dSᵀ stored, dV
                // queued, the barrier, then dQ ahead of dK, so dQ's staging for the writer runs
                // while dK is still in the tensor cores.
                store_ds();
                wgmma_fence_operands(acc_dv);
                wgmma_fence_operands(acc_dk);
                wgmma_fence();
                issue_dv();
                wgmma_commit();
                named_barrier_sync(1, 256); // both warpgroups' dSᵀ rows are in

                // dQ[:, half wg] = dS·K[:, half wg] over the block's 128 keys (k-step: 16 keys).
                float acc_dq[kNQ][4];
#pragma unroll
                for (int kk = 0; kk < kBN / 16; ++kk)
                    Wgmma16<T, L::kNQ>::ss_tt(acc_dq, wgmma_desc_mn128(ds_addr + kk * 16 * 128, kBN * 128),
                                              wgmma_desc_mn128(kq_addr + kk * 16 * 128, kBN * 128), kk > 0);
                wgmma_commit();
                issue_dk();
                wgmma_commit();
                wgmma_wait<1>(); // dV and dQ
                wgmma_fence_operands(acc_dq);

                // Stage dQ in the workspace's tile order (16 bytes per n-tile and thread) for the
                // writer, once its reduce of block it − 2 has read the buffer.
                mbar_wait(&dq_empty[s], phase ^ 1);
                float* stage = sdQ + s * (kBM * DK) + wg * kBM * L::kNQ;
#pragma unroll
                for (int n = 0; n < kNQ; ++n) {
                    *reinterpret_cast<float4*>(stage + ((wi * kNQ + n) * 32 + lane) * 4) =
                        make_float4(acc_dq[n][0], acc_dq[n][1], acc_dq[n][2], acc_dq[n][3]);
                }
                fence_proxy_async_smem();
                __syncwarp();
                if (lane == 0) mbar_arrive(&dq_full[s]);
                wgmma_wait<0>(); // dK
                wgmma_fence_operands(acc_dv);
                wgmma_fence_operands(acc_dk);
                if (lane == 0) mbar_arrive(&empty[s]); // this warp is done with Q/dO stage s
            }
        }

        if (n_iter > 0) ++kv_u;
        // D = 256, deterministic causal: the last block's turn.
        if constexpr (kSplitD && CAUSAL) bwd_hopper_pass_turn(pending, tid, lane);
        // A split item's piece: only the last of its pieces writes dK and dV.
        bool writes = true;
        if constexpr (!CAUSAL && !kSeqs) {
            if (piece >= 0)
                writes = bwd_tail_merge<kNO>(acc_dk, acc_dv, tail_part, tail_cnt, tail_item, piece, p.tail_pieces, tid, sFlag);
        }
        if (writes) {
            // dK = scale·dK, dV: this thread's keys krow, krow + 8, 16 bytes at a time.
            T* dk_head = seq_head_ptr(dk, p.dk_stride, b, kvh, seq_rows.k_row0, packed_k);
            T* dv_head = seq_head_ptr(dv, p.dv_stride, b, kvh, seq_rows.k_row0, packed_k);
            const int col0 = kSplitD ? wg * L::kNO : 0;
#pragma unroll
            for (int hi = 0; hi < 2; ++hi) {
                store_acc_row<T>(dk_head, p.dk_stride[2], krow + 8 * hi, col0, p, acc_dk, hi, p.scale, t);
                store_acc_row<T>(dv_head, p.dv_stride[2], krow + 8 * hi, col0, p, acc_dv, hi, 1.f, t);
            }
        }
    } while (next_item(2));
    // D = 256: the warp's last bulk reduction must read its staging before the CTA exits.
    if (kSplitD && lane == 0) bulk_wait<0>();
#else
    __trap(); // the Hopper entry points exist only in sm_90a cubins
#endif
}

} // namespace attn

// One entry per (dtype, bucket, causal, variant: plain, SEQS or FEATURES), generated by
// src/catalog.rs (`BwdHopperVariant`); the TMA descriptors are __grid_constant__ parameters.
#define ATTN_BWD_HOPPER_ENTRY(NAME, T, DK, CAUSAL, FEATURES, SEQS)                                       \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                 \
        NAME(const __grid_constant__ attn::TmaDesc tma_q, const __grid_constant__ attn::TmaDesc tma_k,   \
             const __grid_constant__ attn::TmaDesc tma_v, const __grid_constant__ attn::TmaDesc tma_do,  \
             const float* lse2, const float* delta, float* dq_acc, T* dk, T* dv, unsigned int* sems,     \
             float* tail_part, unsigned int* tail_cnt, const attn::BwdParams p) {                        \
        attn::bwd_hopper_kernel<T, DK, CAUSAL, FEATURES, SEQS>(&tma_q, &tma_k, &tma_v, &tma_do, lse2, delta,   \
                                                               dq_acc, dk, dv, sems, tail_part, tail_cnt, p); \
    }

#define ATTN_BWD_HOPPER_PREP_ENTRY(PRE, POST, T)                                                         \
    extern "C" __global__ void __launch_bounds__(256)                                                 \
        PRE(const T* o, const T* d_o, const float* lse, float* lse2, float* delta, float* dq_acc,         \
            const attn::BwdParams p) {                                                                   \
        attn::bwd_hopper_preprocess<T>(o, d_o, lse, lse2, delta, dq_acc, p);                             \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256)                                                    \
        POST(const float* dq_acc, T* dq, const attn::BwdParams p) {                                      \
        attn::bwd_hopper_postprocess<T>(dq_acc, dq, p);                                                  \
    }
