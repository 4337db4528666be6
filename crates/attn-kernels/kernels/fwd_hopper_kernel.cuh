// The Hopper (sm_90a) forward for f16/bf16 and FP8: TMA loads, a warp-specialized producer,
// wgmma on two consumer warpgroups, after FlashAttention-3 (Shah et al. 2024,
// "FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision";
// hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp).
//
// One CTA = a producer warpgroup and CONSUMERS (2 or 3) consumer warpgroups of 64 query rows:
// - warpgroup 0, the producer, gives up registers (setmaxnreg) and one thread issues TMA
//   loads: the Q tile once, then K and V tiles into a STAGES-deep ring, each stage guarded by
//   a "full" mbarrier per tensor (transaction bytes) and an "empty" one per tensor (consumer
//   arrivals: K is free once Q·Kᵀ has read it, V once P·V has);
// - warpgroups 1.., the consumers, take the registers and own 64 query rows each (three of
//   them for D ≤ 64, FlashAttention-3's 192-row blocks, where 160 registers are enough):
//   S = Q·Kᵀ as an SS wgmma (both operands K-major in shared memory), the online softmax in
//   registers (softmax.cuh, mask.cuh: the wgmma accumulator has the mma.sync layout per warp),
//   O += P·V as an RS wgmma with P from registers and V MN-major in shared memory (no Vᵀ
//   copy), then the epilogue (epilogue.cuh) through the dead Q tile.
// Schedules (template flags, catalog `HopperTile`):
// - PINGPONG orders the consumers' GEMMs round-robin with named barriers so one warpgroup's
//   softmax runs under the others' tensor-core work (FA3 §3.1);
// - INTRA issues Q·Kᵀ(j+1) with P·V(j) and runs the softmax of tile j+1 while P·V(j) is still
//   in the tensor cores, deferring O's rescale (FA3 §3.2); without it an iteration is
//   softmax(j), then P·V(j) and Q·Kᵀ(j+1) in one commit group.
// FP8 (E4M3 Q, K and V; f16/bf16 O) runs the same loop with the 8-bit wgmma shapes, P cast to
// E4M3 after a 2⁸ gain, and the per-head scales folded in. 8-bit wgmma has no transposed B, so
// P·V needs Vᵀ: V lands as K does, and producer warps 1–3 transpose each stage in shared
// memory (FA3's in-kernel transpose; `transpose_v_fp8` below).
//
// Shared memory: every tile is stored as sub-tiles of 128-byte rows (64 f16 columns, or 64/128
// FP8 bytes) in TMA's and wgmma's swizzle, each on a 1024-byte boundary. A problem head dim
// below the bucket, and rows past the sequence end, arrive as zeros (TMA's out-of-bounds
// fill); the mask and the epilogue drop them.
#pragma once
#include "softmax.cuh" // before epilogue.cuh, which uses quad_sum
#include "debug_dump.cuh"
#include "epilogue.cuh"
#include "fp8.cuh"
#include "fp8_vt_smem.cuh"
#include "load.cuh"
#include "mask.cuh"
#include "score_mod.cuh"
#include "seqs.cuh"
#include "split_combine.cuh"
#include "timeline.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace attn {

// FP8: Q, K and V are E4M3 rows of DK bytes in sub-tiles of one 64- or 128-byte swizzle span
// (D = 256: two of 128). V lands in a stage of its own (kVRawBytes) and the producer writes
// its transpose into the V ring: DK rows of BN key bytes in fp8_prep.cuh's key order, because
// 8-bit wgmma has no transposed B.
// KVSPLIT: the two consumers share one 64-row query block and split its key tiles (see
// fwd_hopper_kernel), so the block is 64 rows and an exchange buffer holds the second
// consumer's softmax state for the merge.
template <int DK, int BN, int STAGES, bool FP8 = false, int CONSUMERS = 2, bool KVSPLIT = false>
struct HopperFwdLayout {
    static constexpr int kBM = KVSPLIT ? 64 : 64 * CONSUMERS; // 64 rows per consumer warpgroup
    static constexpr int kThreads = 128 * (CONSUMERS + 1); // producer + consumers
    // Registers per thread after `setmaxnreg`: the producer keeps 24 (FP8, whose producer
    // warps also transpose V: 40 beside two consumers, 32 beside three), the consumers share
    // the rest of the launch's 168 or 128 per thread (multiples of 8: 240 or 232 for two, 160
    // for three).
    static constexpr int kProducerRegs = FP8 ? (CONSUMERS == 2 ? 40 : 32) : 24;
    static constexpr int kConsumerRegs = CONSUMERS == 2 ? (FP8 ? 232 : 240) : 160;
    // setmaxnreg moves registers within the CTA's pool, which is what the launch allocated:
    // the launch bounds' registers per thread (65536 / kThreads, in steps of 8) for every
    // thread (a larger sum would leave setmaxnreg.inc waiting forever).
    static constexpr int kPoolRegs = 65536 / kThreads / 8 * 8 * kThreads;
    static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * CONSUMERS <= kPoolRegs, "the CTA's register pool");
    static constexpr int kSubTiles = FP8 ? (DK + 127) / 128 : (DK + 63) / 64; // swizzled sub-tiles per row
    static constexpr int kRowBytes = FP8 ? (DK < 128 ? DK : 128) : 128;      // bytes per sub-tile row
    static constexpr int kColsPerSub = FP8 ? kRowBytes : 64;                  // elements per sub-tile row
    static constexpr int kQBytes = kBM * kSubTiles * kRowBytes;
    static constexpr int kKBytes = BN * kSubTiles * kRowBytes; // one K stage
    static constexpr int kVBytes = FP8 ? DK * BN : kKBytes;    // one V (FP8: Vᵀ) stage
    static constexpr int kVRawBytes = FP8 ? kKBytes : 0;        // FP8: one V stage as TMA lands it
    // KVSPLIT: per thread of a consumer warpgroup, its O accumulator (DK / 2 floats) and m, l
    // of its two rows, stored float-major so that both warpgroups' threads i meet at one
    // conflict-free address.
    static constexpr int kXFloats = KVSPLIT ? DK / 2 + 4 : 0;
    // FP8: V's landing stages, more than the ring's, so that a tile's V load is issued tiles
    // before the transpose that needs it (run 189: with as many landing stages as ring stages,
    // the load's latency sat between the transposes and the consumers waited); four, so that
    // the stage index is a mask (a modulo by three cost the producer registers).
    // Two where four do not fit (FP8 D = 128 with 224 keys), counting the exchange buffer.
    static constexpr int kBytesWithFourLanding =
        1024 + kQBytes + STAGES * (kKBytes + kVBytes) + 4 * kVRawBytes + kXFloats * 128 * 4 + 8 * (2 + 4 * STAGES + 8);
    static constexpr int kVRawStages = !FP8 ? 0 : kBytesWithFourLanding <= 232448 ? 4 : 2;
    static constexpr int kVRawOffset = kQBytes + STAGES * (kKBytes + kVBytes);
    static constexpr int kXOffset = kVRawOffset + kVRawStages * kVRawBytes;
    static constexpr int kBarOffset = kXOffset + kXFloats * 128 * 4;
    // Q full, Q empty; K full, V full, K empty, V empty per stage; FP8: V-raw full and empty
    // per landing stage.
    static constexpr int kBarriers = 2 + 4 * STAGES + 2 * kVRawStages;
    // FP8: the producer warps that transpose V (warps 1–3; warp 0 issues the TMA loads), and
    // the units each has in flight (ptxas, CUDA 13.0: four spilled 20 bytes in the walking
    // entries at 40 registers; two spill nothing).
    static constexpr int kTransposeWarps = 3;
    static constexpr int kTransposeBatch = 2;
    // 1024 bytes of slack for aligning the base; the launcher's size (src/catalog.rs
    // `hopper_smem_bytes`) is this.
    static constexpr int kSmemBytes = 1024 + kBarOffset + 8 * kBarriers;
    static constexpr int kConsumerWarps = 4 * CONSUMERS;
    // Warps that read (and release) each K/V stage: every consumer's, or one warpgroup's
    // under KVSPLIT.
    static constexpr int kTileWarps = KVSPLIT ? 4 : kConsumerWarps;
    static_assert(!KVSPLIT || CONSUMERS == 2, "KVSPLIT: two consumer warpgroups");
    static_assert(CONSUMERS == 2 || CONSUMERS == 3, "two or three consumer warpgroups");
    static_assert(DK % 32 == 0 && DK <= 256, "head-dim buckets are multiples of 32 up to 256");
    static_assert(BN % 16 == 0 && BN <= 256, "wgmma N and TMA box rows");
    static_assert(kSmemBytes <= 232448, "fits Hopper's 227 KiB of shared memory per block");
    static_assert(!FP8 || ((DK == 64 || DK == 128 || DK == 256) && (BN == 64 || BN == 96 || BN == 128 || BN == 192 || BN == 224)),
                  "FP8: Q/K sub-tiles of one 64- or 128-byte swizzle span, Vᵀ sub-tiles of vt_span(BN)");
    // The epilogue stages O (2-byte elements, rows padded to 64) from the start of the tiles.
    static_assert(kBM * ((DK + 63) / 64 * 64) * 2 <= kBarOffset, "O staging fits the dead tiles");
};

// Barrier ids: 0 is __syncthreads; 1 gathers the consumers before the epilogue reuses the Q
// tile; 2 after they (under ping-pong: consumer 0) cleared V rows of a sequence's last key
// tile; 3.. order the consumers' GEMMs (one per consumer).
constexpr int kBarEpilogue = 1;
constexpr int kBarVClear = 2;
constexpr int kBarSchedBase = 3;

template <bool B> struct BoolConst {
    static constexpr bool value = B;
};

// The work a launch covers: items w = x + tiles_x·(h + heads·b) over the query blocks (or a
// flat grid's blocks) x, query heads h and batches b, x fastest. A launch of one CTA per item
// is the classic grid; a persistent launch (FlashAttention-3's tile scheduler,
// hopper/tile_scheduler.hpp) starts fewer CTAs, each striding over the items by gridDim.x,
// so that the producer loads the next item's Q and K/V tiles while the consumers finish the
// current one and write its output, and no CTA pays a launch and barrier set-up per item
// (each item still fills and drains its own softmax/GEMM overlap). Causal launches (but for
// flat grids) order their items longest first across groups of `lpt_heads` (head, batch)
// pairs: items w of group g = w / (lpt_heads · tiles_x) run rank x = local / n of pair
// g·lpt_heads + local % n (n: the group's size, local: w's offset in it), so the longest
// blocks of a whole group start first and the short ones fill the tail, while the group's
// K/V stays in the L2 (src/hopper.rs `causal_lpt_heads` picks the size). lpt_heads = 1 is
// the classic order. Mirrored by src/hopper.rs `HopperSched` and `item_order`.
struct HopperSched {
    int tiles_x;   // query blocks (or flat-grid blocks) per (head, batch)
    int heads;     // query heads
    int items;     // tiles_x · heads · batches (≤ 2^31 − 1, checked on the host)
    int lpt_heads; // causal: (head, batch) pairs ordered longest first together (≥ 1)
    // Split-KV (sequence and feature entries only, see the consumers' epilogue): key splits per
    // item (grid.y; 1: none), and the workspace of partial O [items, splits, kBM, DK], (m, l)
    // [items, splits, kBM, 2] and one ticket per item (zero between launches). Null for 1.
    int splits;
    // Walking entries: the last `tail_items` items (fewer than the CTAs) are shared out by key
    // tiles (`walk_items`); 0: every item whole. The workspace then holds one partial per
    // (CTA, tail item) slot, CTA + item [gridDim.x + tail_items, kBM, DK] and (m, l), and one
    // ticket per (tail item, consumer warp).
    int tail_items;
    float* ws_o;
    float* ws_ml;
    unsigned int* counters;
};

// The stream-K tail of a walking launch (Osama et al. 2023, "Stream-K: Work-centric Parallel
// Decomposition for Dense Matrix Multiplication on the GPU"). Handed out whole, the last
// `tail_items` items of a launch of G CTAs would keep tail_items CTAs busy for one more item
// while the rest idle (2048 items of 4,16,4096,128 on 132 SMs: 15.5 rounds, the last half
// empty). Instead their U = tail_items · n key tiles (n per item: walking entries are dense and
// non-causal) are cut into G contiguous ranges [⌊U·c / G⌋, ⌊U·(c + 1) / G⌋), and CTA c walks
// its range after its whole items (U ≥ G, so that no range is empty). A range covers the end
// of one item and the start of the next at most once per item boundary; each part of an item
// is a piece, walked as an item of its own key tiles, and the pieces of one item are held by
// consecutive CTAs.
struct TailPiece {
    int t;         // the tail item (0 = the first tail item)
    int first_cta; // the CTA holding its first key tile
    int count;     // CTAs sharing it (1: the item is whole here)
};

__device__ __forceinline__ int tail_bound(int cta, int units, int ctas) {
    return static_cast<int>(static_cast<int64_t>(units) * cta / ctas);
}

// The CTA whose range holds tail unit u: the largest c with ⌊U·c / G⌋ ≤ u.
__device__ __forceinline__ int tail_cta_of(int u, int units, int ctas) {
    return min(ctas - 1, static_cast<int>((static_cast<int64_t>(u + 1) * ctas - 1) / units));
}

// Tail item t's sharing (t < 0: a whole item).
__device__ __forceinline__ TailPiece tail_piece(const HopperSched& sched, int t, int n) {
    if (t < 0) return TailPiece{0, 0, 1};
    const int units = sched.tail_items * n;
    const int first = tail_cta_of(t * n, units, gridDim.x);
    return TailPiece{t, first, tail_cta_of((t + 1) * n - 1, units, gridDim.x) - first + 1};
}

// Calls visit(w, lo, hi, t) for each item w this CTA walks, in order: its whole items (key
// tiles [0, n), t = −1), then the pieces of its tail range (tiles [lo, hi) of tail item t). The
// producer and the consumers walk the same sequence, so their K/V ring counts agree. The
// tail's loop carries only its next key tile (the rest is recomputed from the launch's
// constants per piece): the consumers have no registers to spare across their mainloop.
template <typename Visit>
__device__ __forceinline__ void walk_items(const HopperSched& sched, int n, Visit&& visit) {
    const int ctas = gridDim.x, cta = blockIdx.x;
    // Every CTA's range must hold a key tile (U ≥ G), or a piece's CTAs would not be
    // consecutive; the host shares no smaller tail (src/hopper.rs `stream_k_tail`). Without
    // keys (n = 0) there is nothing to share: every item is whole (and empty).
    const int tail = n > 0 && sched.tail_items * n >= ctas ? sched.tail_items : 0;
#pragma unroll 1
    for (int w = cta; w < sched.items - tail; w += ctas) visit(w, 0, n, -1);
    if (tail == 0) return;
#pragma unroll 1
    for (int u = tail_bound(cta, tail * n, ctas); u < tail_bound(cta + 1, tail * n, ctas);) {
        const int t = u / n;
        const int hi = min(tail_bound(cta + 1, tail * n, ctas), (t + 1) * n);
        visit(sched.items - tail + t, u - t * n, hi - t * n, t);
        u = hi;
    }
}

// The last piece's merge of a tail item's partials for one warp's 16 rows (rows row0 + g and
// row0 + g + 8 of the thread): the pieces' unnormalized O and (m, l) from the workspace slots
// first_slot .. first_slot + count − 1, taken in key order whichever CTA came last, so the
// result does not depend on timing. Leaves O unnormalized, m the merged max (0 for an empty
// row) and the row's whole denominator in the quad's first thread (0 in the other three, so
// write_output's quad sum returns it exactly). A NaN in any piece reaches O and LSE through its
// weight.
template <int BM, int DK, int NO>
__device__ __forceinline__ void merge_tail_pieces(float (&o)[NO][4], float (&m)[2], float (&l)[2], const float* ws_o,
                                                  const float* ws_ml, int first_slot, int count, int row0, int lane) {
    const int row = row0 + (lane >> 2); // and row + 8
    const int t = lane & 3;
    float mx[2] = {-INFINITY, -INFINITY};
    for (int s = 0; s < count; ++s) {
        const float* ml = ws_ml + static_cast<int64_t>(first_slot + s) * BM * 2 + 2 * row;
        mx[0] = fmaxf(mx[0], __ldcg(ml));
        mx[1] = fmaxf(mx[1], __ldcg(ml + 16));
    }
    const float m_use[2] = {mx[0] == -INFINITY ? 0.f : mx[0], mx[1] == -INFINITY ? 0.f : mx[1]};
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NO; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    for (int s = 0; s < count; ++s) {
        const int64_t slot = first_slot + s;
        const float* ml = ws_ml + slot * BM * 2 + 2 * row;
        const float* src = ws_o + slot * BM * DK + row * DK + 2 * t;
        const float w0 = exp2f(__ldcg(ml) - m_use[0]);
        const float w1 = exp2f(__ldcg(ml + 16) - m_use[1]);
        sum[0] = fmaf(w0, __ldcg(ml + 1), sum[0]);
        sum[1] = fmaf(w1, __ldcg(ml + 17), sum[1]);
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            const float2 x = __ldcg(reinterpret_cast<const float2*>(src + n * 8));
            const float2 y = __ldcg(reinterpret_cast<const float2*>(src + 8 * DK + n * 8));
            o[n][0] = fmaf(w0, x.x, o[n][0]);
            o[n][1] = fmaf(w0, x.y, o[n][1]);
            o[n][2] = fmaf(w1, y.x, o[n][2]);
            o[n][3] = fmaf(w1, y.y, o[n][3]);
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        m[r] = m_use[r];
        l[r] = t == 0 ? sum[r] : 0.f;
    }
}

// One work item: its query block and head/batch, its sequence's parameters and rows, and the
// key tiles it walks. `valid` is false for a flat-grid block past the last sequence's or a
// block past its sequence's end: every thread of the CTA skips it alike.
struct HopperItem {
    int m_block, h, b;
    SeqRows rows;
    int t_begin, n_tiles, all_lo, all_hi;
    bool valid;
};

template <bool CAUSAL, bool FEATURES, bool kSeqs, int kBM, int BN>
__device__ __forceinline__ HopperItem hopper_item(int w, const HopperSched& sched, const FwdParams& p_in,
                                                  FwdParams& seq_p) {
    HopperItem it{};
    int x = w % sched.tiles_x;
    int rest = w / sched.tiles_x;
    if (CAUSAL && sched.lpt_heads > 1 && !(kSeqs && p_in.seqs.flat_block_m != 0)) {
        // Longest first across a group of lpt_heads (head, batch) pairs (see HopperSched);
        // with one pair per group this is the order above, so those launches skip it.
        const int pairs = sched.items / sched.tiles_x;
        const int g0 = w / (sched.lpt_heads * sched.tiles_x) * sched.lpt_heads;
        const int n = min(sched.lpt_heads, pairs - g0);
        const int local = w - g0 * sched.tiles_x;
        x = local / n;
        rest = g0 + local % n;
    }
    it.h = rest % sched.heads;
    it.b = rest / sched.heads;
    // Causal grids run the longest query blocks first, so the short ones fill the tail.
    it.m_block = CAUSAL ? sched.tiles_x - 1 - x : x;
    it.rows = SeqRows{0, 0};
    it.valid = true;
    if constexpr (kSeqs) {
        // resolve_sequence rewrites these three; the rest of seq_p is p_in's (the caller's
        // copy). Sequence entries run one item per CTA today, so this only matters if they
        // ever walk.
        seq_p.q_len = p_in.q_len;
        seq_p.kv_len = p_in.kv_len;
        seq_p.diag_offset = p_in.diag_offset;
        // This item's sequence (its lengths, causal alignment and row offsets). Packed queries
        // run a flat grid whose x enumerates every sequence's query blocks (seqs.cuh,
        // flat_query_block); otherwise the grid covers the longest sequence, so a block past
        // this one's end has nothing to do.
        if (p_in.seqs.flat_block_m != 0) {
            int local, count;
            if (!flat_query_block(p_in, x, it.b, local, count)) {
                it.valid = false;
                return it;
            }
            it.m_block = CAUSAL ? count - 1 - local : local;
        }
        it.rows = resolve_sequence(seq_p, it.b);
        if (it.m_block * kBM >= seq_p.q_len) {
            it.valid = false;
            return it;
        }
    }
    // Key tiles [t_begin, t_begin + n_tiles); FEATURES: the keys all rows see, [all_lo, all_hi).
    const int m0 = it.m_block * kBM;
    if constexpr (FEATURES) {
        key_tile_range<CAUSAL, kBM, BN>(m0, seq_p, it.t_begin, it.n_tiles, it.all_lo, it.all_hi);
    } else {
        it.t_begin = 0;
        it.n_tiles = key_tiles_for_block<CAUSAL, kBM, BN>(m0, seq_p);
    }
    return it;
}

// Split y of `splits` takes the item's key tiles [n·y / splits, n·(y + 1) / splits) (sizes
// within one of each other; a split may get none, and then leaves m = −∞, l = 0, O = 0).
__device__ __forceinline__ void split_key_tiles(HopperItem& it, int split, int splits) {
    const int lo = static_cast<int>(static_cast<int64_t>(it.n_tiles) * split / splits);
    const int hi = static_cast<int>(static_cast<int64_t>(it.n_tiles) * (split + 1) / splits);
    it.t_begin += lo;
    it.n_tiles = hi - lo;
}

// T: the output type (and the input type unless FP8). FP8: E4M3 Q, K, V with per-head
// scales [B, H] (q_scale, k_scale, v_scale; null otherwise), folded as the FP8 mma.sync and
// wgmma kernels do: Q·K's descale into the softmax scale, P multiplied by 2⁸ before its E4M3
// cast, V's descale into the epilogue.
// FEATURES (f16/bf16 only): sliding window, softcap, ALiBi and sinks as runtime values of
// p.feat (score_mod.cuh, shared with the mma.sync kernel); the producer loads only the key
// tiles inside the block's window (FA3's local n-block range) and the mask hook of every
// schedule runs the score modification. The FEATURES entries also run sequence layouts
// (p.seqs, seqs.cuh): packed Q/O and K/V are TMA tensors of one batch whose row
// coordinates start at the sequence's offset, and a paged cache arrives in boxes that each lie
// in one page (the producer's paged branch). Rows past a sequence's end are the
// next sequence's (or the cache's unused rows), not TMA's zeros: the mask drops their keys and
// the epilogue their query rows, and the consumers clear the V rows past the sequence's end in
// its last key tile before P·V reads them, so non-finite values there (an uninitialized cache)
// cannot reach O through 0·NaN.
// SEQS: the sequence layouts alone, without the score modifications (FEATURES implies them):
// the masks of the dense entries and none of the features' state, so that a wide tile whose
// registers the features overflow (D = 128's 176-key ping-pong tile spills 52 bytes with them,
// CUDA 13.0) still runs varlen batches and KV caches.
// Items (HopperSched): the producer and the consumers walk the same items in the same order
// and count the K/V ring's stages across them (`ring`), so the ring's barriers run on from one
// item to the next; Q has a "full" barrier whose phase is the item's parity and an "empty"
// one the consumers arrive on once their last Q·Kᵀ of the item has completed, so the next
// item's Q loads under the last P·V and the epilogue, which in these entries stores O from
// registers rather than staging it in the Q tile.
template <typename T, int DK, int BN, int STAGES, bool CAUSAL, bool PINGPONG, bool INTRA, bool FP8,
          bool FEATURES = false, int CONSUMERS = 2, bool SEQS = false, bool PERSISTENT = false, bool KVSPLIT = false>
__device__ __forceinline__ void fwd_hopper_kernel(T* __restrict__ o, float* __restrict__ lse, const TmaDesc* tma_q,
                                                  const TmaDesc* tma_k, const TmaDesc* tma_v,
                                                  const float* __restrict__ q_scale,
                                                  const float* __restrict__ k_scale,
                                                  const float* __restrict__ v_scale, const FwdParams& p_in,
                                                  const HopperSched& sched, float* __restrict__ dump = nullptr,
                                                  const int* __restrict__ dump_tiles = nullptr) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using L = HopperFwdLayout<DK, BN, STAGES, FP8, CONSUMERS, KVSPLIT>;
    constexpr int kBM = L::kBM;
    constexpr int kNT = BN / 8;
    constexpr int kNO = DK / 8;
    constexpr int kPitch = (DK + 63) / 64 * 64; // the epilogue's staging pitch (elements)
    constexpr int kKP = FP8 ? BN / 32 : BN / 16; // k-steps of P·V
    constexpr float kLog2Gain = FP8 ? 8.f : 0.f;  // P's gain before its E4M3 cast

    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* base = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    unsigned char* sQ = base;
    unsigned char* sK = sQ + L::kQBytes;
    unsigned char* sV = sK + STAGES * L::kKBytes;
    uint64_t* bar_q = reinterpret_cast<uint64_t*>(base + L::kBarOffset);
    uint64_t* full_k = bar_q + 1;
    uint64_t* full_v = full_k + STAGES;
    // K and V slots are released separately: a K slot is free once Q·Kᵀ has read it, a whole
    // softmax before P·V frees the V slot, so the next K load starts that much earlier.
    uint64_t* empty_k = full_v + STAGES;
    uint64_t* empty_v = empty_k + STAGES;
    uint64_t* empty_q = empty_v + STAGES;
    // FP8: V as TMA lands it, before the producer's transpose into the V ring.
    unsigned char* sVraw = base + L::kVRawOffset;
    uint64_t* full_vraw = empty_q + 1;
    uint64_t* empty_vraw = full_vraw + L::kVRawStages;

    static_assert(!(FEATURES && FP8), "the FP8 kernels take no features");
    // FP8 SEQS entries run dense keys only: the launcher takes them for key splits (chunked
    // prefill and decode grids, fp8.rs) and refuses FP8 sequence layouts, whose V tails in
    // the Vᵀ ring the clear below does not know and whose paged loads it does not issue.
    static_assert(!(SEQS && FEATURES), "SEQS: the layouts without the features");
    constexpr bool kSeqs = FEATURES || SEQS; // this entry resolves sequence layouts
    // PERSISTENT entries walk their items (HopperSched); the others run one item per CTA,
    // resolved before the producer gives up its registers. The catalog
    // (src/catalog.rs, `hopper_persistent`) picks the entries that walk: dense, non-causal
    // tiles whose producer fits the item loop in its 24 registers (D = 256's four sub-tiles
    // and the 3-consumer tiles spilled with it; sequences resolved per item spilled 200+
    // bytes), so that causal grids keep the hardware's dynamic order of their uneven blocks.
    constexpr bool kPersistent = PERSISTENT;
    static_assert(!(PERSISTENT && kSeqs), "sequence and feature entries run one item per CTA");
    static_assert(!(PERSISTENT && CAUSAL), "walking entries are non-causal: every item has the same key tiles");
    // KVSPLIT (small grids, where a CTA's chain of key tiles is the launch's critical path):
    // both consumers take the block's 64 query rows, consumer c the key tiles j ≡ c (mod 2),
    // each with its own O, m and l, so a block's chain of dependent tiles is half as long and
    // the grid has twice the CTAs; at the end the second consumer hands its state to the first
    // through shared memory, which merges the two as split-KV's combine does (FlashAttention's
    // split-KV, here inside one CTA) and writes the output. Dense launches only, no ping-pong
    // (the consumers' GEMMs are independent).
    static_assert(!KVSPLIT || (!kSeqs && !PINGPONG && !PERSISTENT), "KVSPLIT: dense, one item per CTA, no ping-pong");
    const int warpgroup = threadIdx.x >> 7;
    // ATTN_TIMELINE builds (timeline.cuh): the entry's kind and tag, and whether this CTA records.
    constexpr int kTimelineKind = (FP8 ? 4 : 0) + (PINGPONG ? 2 : 0) + (FEATURES ? 1 : 0);
    constexpr unsigned kTimelineTag = BN * 1000 + (FP8 ? 100 : 0) + (PINGPONG ? 10 : 0) + (FEATURES ? 1 : 0);
    const bool timeline = ATTN_TIMELINE_ON(kTimelineKind);
    auto stamp = [&](int step, int event) { ATTN_TIMELINE_STAMP(timeline, kTimelineKind, step, event, kTimelineTag); };
    if (static_cast<int>(blockIdx.x) >= sched.items) return; // no work (an empty launch's one CTA)
    FwdParams seq_p = p_in;
    HopperItem first{};
    if constexpr (!kPersistent) {
        first = hopper_item<CAUSAL, FEATURES, kSeqs, kBM, BN>(blockIdx.x, sched, p_in, seq_p);
        if (!first.valid) return; // the whole CTA, before any barrier
        if constexpr (kSeqs) {
            if (sched.splits > 1) split_key_tiles(first, blockIdx.y, sched.splits);
        }
    }
    // This CTA's next item (a non-persistent launch: its one item, `first`).
    auto next_item = [&](int w) {
        if constexpr (kPersistent) return hopper_item<CAUSAL, FEATURES, kSeqs, kBM, BN>(w, sched, p_in, seq_p);
        else return first;
    };

    if (threadIdx.x == 0) {
        mbar_init(bar_q, 1);
        mbar_init(empty_q, L::kConsumerWarps);
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full_k[s], 1);
            mbar_init(&full_v[s], FP8 ? L::kTransposeWarps : 1); // FP8: the transposing warps
            mbar_init(&empty_k[s], L::kTileWarps);
            mbar_init(&empty_v[s], L::kTileWarps);
        }
#pragma unroll
        for (int s = 0; s < L::kVRawStages; ++s) {
            mbar_init(&full_vraw[s], 1);
            mbar_init(&empty_vraw[s], L::kTransposeWarps);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (warpgroup == 0) {
        // Producer: one thread drives TMA (a paged cache: the first warp); the others only
        // give their registers back, but for FP8's warps 1–3, which transpose V.
        setmaxnreg_dec<L::kProducerRegs>();
        if constexpr (FP8) {
            if (threadIdx.x >= 32) {
                // Each stage of V: wait for its load and for the consumers to have released
                // the Vᵀ slot, transpose, and hand both on. The same item walk and stage count
                // as the loads below and the consumers.
                const int worker = (threadIdx.x >> 5) - 1, lane = threadIdx.x & 31;
                auto transpose_tile = [&](uint32_t g) {
                    const int s = g % STAGES, r = g % L::kVRawStages;
                    const uint32_t use = g / STAGES, r_use = g / L::kVRawStages;
                    stamp(g, 0);
                    mbar_wait(&full_vraw[r], r_use & 1);
                    stamp(g, 1);
                    mbar_wait(&empty_v[s], (use & 1) ^ 1);
                    stamp(g, 2);
                    static_assert(L::kTransposeWarps == 3, "transpose_v_fp8 splits a stage in three");
                    transpose_v_fp8<DK, BN, L::kTransposeBatch>(smem_addr(sVraw + r * L::kVRawBytes),
                                                                smem_addr(sV + s * L::kVBytes), worker, lane);
                    fence_proxy_async_smem(); // stmatrix's generic writes before wgmma's async reads
                    __syncwarp();
                    if (lane == 0) {
                        mbar_arrive(&full_v[s]);
                        mbar_arrive(&empty_vraw[r]);
                    }
                    stamp(g, 3);
                };
                if constexpr (kPersistent) {
                    // The walk's stages, whole items and tail pieces alike, are one run.
                    uint32_t stages = 0;
                    walk_items(sched, key_tiles_for_block<false, kBM, BN>(0, p_in),
                               [&](int, int lo, int hi, int) { stages += static_cast<uint32_t>(hi - lo); });
#pragma unroll 1
                    for (uint32_t g = 0; g < stages; ++g) transpose_tile(g);
                } else {
#pragma unroll 1
                    for (int j = 0; j < first.n_tiles; ++j) transpose_tile(j);
                }
                return;
            }
        }
        const bool paged = kSeqs && !FP8 && p_in.seqs.block_table != nullptr;
        if (paged ? threadIdx.x >= 32 : threadIdx.x != 0) return;
        if (threadIdx.x == 0) {
            tma_prefetch_desc(tma_q);
            tma_prefetch_desc(tma_k);
            tma_prefetch_desc(tma_v);
        }
        uint32_t ring = 0; // K/V stages filled for the items before this one
        int n_items = 0;   // items of this CTA so far
        // One item's Q tile and key tiles.
        auto produce = [&](const HopperItem& item) {
            const FwdParams& p = seq_p;
            const int h = item.h, b = item.b, t_begin = item.t_begin, n_tiles = item.n_tiles;
            const int m0 = item.m_block * kBM;
            const SeqRows rows = item.rows;
            const int q_batch = kSeqs && p.seqs.cu_q != nullptr ? 0 : b; // packed: one batch of rows
            const int k_batch = kSeqs && p.seqs.cu_k != nullptr ? 0 : b;
            const int kvh = h / p.group;
            // The Q tile, once the consumers' epilogue of the previous item has left it.
            auto load_q_tile = [&]() {
                if (n_items > 0) mbar_wait(empty_q, (n_items - 1) & 1);
                mbar_arrive_expect_tx(bar_q, L::kQBytes);
#pragma unroll
                for (int c = 0; c < L::kSubTiles; ++c)
                    tma_load_4d(sQ + c * kBM * L::kRowBytes, tma_q, bar_q, c * L::kColsPerSub, rows.q_row0 + m0, h,
                                q_batch);
            };
            if constexpr (kSeqs && !FP8) {
                if (paged) {
                    // A paged cache (FlashAttention-3 reads pages with per-thread copies in its
                    // producer; here TMA still moves them): a key tile spans pages, so it
                    // arrives in boxes of `box` rows, gcd(BN, page size) (the host encodes K
                    // and V boxes of that height), each inside one page. Lane i of the
                    // producer warp looks up box i's page and issues its copies, so the table
                    // reads of a tile overlap.
                    const int lane_p = threadIdx.x;
                    const int* table = p.seqs.block_table + static_cast<int64_t>(b) * p.seqs.max_blocks;
                    const int page_size = p.seqs.page_size;
                    int box = BN, rest = page_size; // Euclid: gcd(BN, page size)
                    while (rest != 0) {
                        const int t = box % rest;
                        box = rest;
                        rest = t;
                    }
                    if (lane_p == 0) load_q_tile();
                    // This lane's box: rows [lane·box, lane·box + box) of every tile (none past BN).
                    const bool has_box = lane_p * box < BN;
                    const int box_off = lane_p * box * L::kRowBytes; // = lane·box·128 in K and V
                    // Box (page, row in page) of tile j; keys past the sequence's (whose table
                    // slots may not exist) read page 0: the mask drops them and the consumers
                    // zero V's tail rows. Looked up one tile ahead, so the table read's latency
                    // hides under the wait for the next free stage.
                    int page = 0, row = 0;
                    auto lookup = [&](int j) {
                        const int key = (t_begin + j) * BN + lane_p * box;
                        page = 0;
                        row = 0;
                        if (has_box && j < n_tiles && key < p.kv_len) {
                            const int slot = key / page_size;
                            page = page_of(table, slot, p.seqs.num_blocks);
                            row = key - slot * page_size;
                        }
                    };
                    lookup(0);
                    for (int j = 0; j < n_tiles; ++j) {
                        const uint32_t g = ring + j;
                        const int s = g % STAGES;
                        const uint32_t parity = ((g / STAGES) & 1) ^ 1;
                        const int page_j = page, row_j = row;
                        lookup(j + 1);
                        mbar_wait(&empty_k[s], parity);
                        if (lane_p == 0) mbar_arrive_expect_tx(&full_k[s], L::kKBytes);
                        __syncwarp();
                        if (has_box) {
#pragma unroll
                            for (int c = 0; c < L::kSubTiles; ++c)
                                tma_load_4d(sK + s * L::kKBytes + c * BN * L::kRowBytes + box_off, tma_k, &full_k[s],
                                            c * L::kColsPerSub, row_j, kvh, page_j);
                        }
                        mbar_wait(&empty_v[s], parity);
                        if (lane_p == 0) mbar_arrive_expect_tx(&full_v[s], L::kVBytes);
                        __syncwarp();
                        if (has_box) {
#pragma unroll
                            for (int c = 0; c < L::kSubTiles; ++c)
                                tma_load_4d(sV + s * L::kVBytes + c * BN * 128 + box_off, tma_v, &full_v[s], c * 64,
                                            row_j, kvh, page_j);
                        }
                    }
                    ring += n_tiles;
                    ++n_items;
                    return;
                }
            }
            load_q_tile();
#pragma unroll 1
            for (int j = 0; j < n_tiles; ++j) {
                const uint32_t g = ring + j;
                const int s = g % STAGES;
                const uint32_t use = g / STAGES;
                unsigned char* k_dst = sK + s * L::kKBytes;
                unsigned char* v_dst = sV + s * L::kVBytes;
                stamp(g, 0);
                mbar_wait(&empty_k[s], (use & 1) ^ 1); // the consumers released its last use
                stamp(g, 1);
                mbar_arrive_expect_tx(&full_k[s], L::kKBytes);
#pragma unroll
                for (int c = 0; c < L::kSubTiles; ++c)
                    tma_load_4d(k_dst + c * BN * L::kRowBytes, tma_k, &full_k[s], c * L::kColsPerSub,
                                rows.k_row0 + (t_begin + j) * BN, kvh, k_batch);
                if constexpr (FP8) {
                    // V as K: into its landing stage, which the transposing warps turn into Vᵀ.
                    const int r = g % L::kVRawStages;
                    unsigned char* raw = sVraw + r * L::kVRawBytes;
                    mbar_wait(&empty_vraw[r], ((g / L::kVRawStages) & 1) ^ 1);
                    stamp(g, 2);
                    mbar_arrive_expect_tx(&full_vraw[r], L::kVRawBytes);
#pragma unroll
                    for (int c = 0; c < L::kSubTiles; ++c)
                        tma_load_4d(raw + c * BN * L::kRowBytes, tma_v, &full_vraw[r], c * L::kColsPerSub,
                                    rows.k_row0 + (t_begin + j) * BN, kvh, k_batch);
                } else {
                    mbar_wait(&empty_v[s], (use & 1) ^ 1);
                    stamp(g, 2);
                    mbar_arrive_expect_tx(&full_v[s], L::kVBytes);
#pragma unroll
                    for (int c = 0; c < L::kSubTiles; ++c)
                        tma_load_4d(v_dst + c * BN * 128, tma_v, &full_v[s], c * 64, rows.k_row0 + (t_begin + j) * BN,
                                    kvh, k_batch);
                }
            }
            ring += n_tiles;
            ++n_items;
        };
        if constexpr (kPersistent) {
            walk_items(sched, key_tiles_for_block<false, kBM, BN>(0, p_in), [&](int w, int lo, int hi, int) {
                HopperItem item = next_item(w);
                item.t_begin = lo;
                item.n_tiles = hi - lo;
                produce(item);
            });
        } else {
            produce(first);
        }
        return;
    }

    setmaxnreg_inc<L::kConsumerRegs>();
    const int cw = warpgroup - 1; // consumer index: query rows [64·cw, 64·cw + 64) of the block
    const int lane = threadIdx.x & 31;
    const int warp_row0 = ((threadIdx.x >> 5) & 3) * 16; // this warp's rows within its 64
    const int g = lane >> 2;
    const int t = lane & 3;
    const uint32_t q_addr = smem_addr(sQ) + (KVSPLIT ? 0 : cw * 64 * L::kRowBytes);
    // PINGPONG: consumer cw waits for its turn on my_bar and hands it to the next one.
    const int my_bar = kBarSchedBase + cw;
    const int other_bar = kBarSchedBase + (cw + 1 == CONSUMERS ? 0 : cw + 1);
    uint32_t ring = 0; // K/V stages consumed by the items before this one
    int n_items = 0;   // items of this CTA so far
    // One item: the mainloop over its key tiles, then its output.
    auto consume = [&](const HopperItem& item, int tail_t) {
        const FwdParams& p = seq_p;
        const int h = item.h, b = item.b, t_begin = item.t_begin, n_tiles = item.n_tiles;
        const int all_lo = item.all_lo, all_hi = item.all_hi;
        const int m0 = item.m_block * kBM;
        const SeqRows rows = item.rows;
        const int q_batch = kSeqs && p.seqs.cu_q != nullptr ? 0 : b; // packed: one batch of rows
        const int kvh = h / p.group;
        const int row_base = KVSPLIT ? m0 : m0 + cw * 64;
        const int lim_block = visible_keys<CAUSAL>(m0, p);
        const int lim_lo = visible_keys<CAUSAL>(row_base + warp_row0 + g, p);
        const int lim_hi = visible_keys<CAUSAL>(row_base + warp_row0 + g + 8, p);
        const float slope = FEATURES ? alibi_slope(b, h, p) : 0.f; // FEATURES: this head's ALiBi slope
        const float scale_log2 =
            FP8 ? p.scale_log2 * q_scale[b * p.q_heads + h] * k_scale[b * p.kv_heads + kvh] : p.scale_log2;

        float acc_o[kNO][4];
#pragma unroll
        for (int n = 0; n < kNO; ++n) acc_o[n][0] = acc_o[n][1] = acc_o[n][2] = acc_o[n][3] = 0.f;
        OnlineSoftmax<kNT, kNO> softmax;
        softmax.init();
        float acc_s[kNT][4];
        // Tile dumps (debug builds, dense f16/bf16 entries): S after the mask and P, m, l after
        // the softmax of each key tile, for the query blocks the launcher listed; the rows are
        // the CTA block's (this consumer's 64 from 64·cw).
#ifdef ATTN_DEBUG
        constexpr bool kDumps = !FP8 && !FEATURES && !SEQS && !KVSPLIT;
        const int dump_at = kDumps && dump != nullptr ? dump_slot<kBM, BN>(p, dump_tiles, b, h, item.m_block) : -1;
        auto dump_s = [&](int j) {
            if (dump_at >= 0)
                dump_scores<kBM, BN, kNT>(dump_tile_base<kBM, BN, kNT>(dump, dump_at, t_begin + j, p), acc_s,
                                          cw * 64 + warp_row0, lane, p.scale);
        };
        auto dump_p = [&](int j) {
            if (dump_at >= 0)
                dump_probs<kBM, BN, kNT>(dump_tile_base<kBM, BN, kNT>(dump, dump_at, t_begin + j, p), acc_s,
                                         softmax.m, softmax.l, cw * 64 + warp_row0, lane);
        };
#else
        auto dump_s = [](int) {};
        auto dump_p = [](int) {};
#endif

        // S = Q·Kᵀ of key tile j: k-step kk reads 16 columns of sub-tile kk / 4 (32 bytes each).
        auto issue_qk = [&](int j) {
            const int s = (ring + j) % STAGES;
            mbar_wait(&full_k[s], ((ring + j) / STAGES) & 1);
            const uint32_t k_addr = smem_addr(sK + s * L::kKBytes);
            wgmma_fence();
            if constexpr (FP8) {
                // k-step kk reads 32 bytes of sub-tile kk / 4 (one 128-byte span holds 4 k-steps).
                constexpr int kRB = L::kRowBytes;
#pragma unroll
                for (int kk = 0; kk < DK / 32; ++kk) {
                    const int c = kk / 4;
                    const int w = (kk % 4) * 32;
                    wgmma_e4m3_ss<BN>(acc_s, wgmma_desc<kRB>(q_addr + c * kBM * kRB + w),
                                      wgmma_desc<kRB>(k_addr + c * BN * kRB + w), kk > 0);
                }
            } else {
#pragma unroll
                for (int kk = 0; kk < DK / 16; ++kk) {
                    const int c = kk / 4;
                    const int w = (kk % 4) * 32;
                    Wgmma16<T, BN>::ss(acc_s, wgmma_desc<128>(q_addr + c * kBM * 128 + w),
                                       wgmma_desc<128>(k_addr + c * BN * 128 + w), kk > 0);
                }
            }
        };
        // FEATURES with a sequence layout: V rows past the sequence's keys in its last tile hold
        // other data (see above); consumer threads zero them (whole 128-byte rows, so the swizzle
        // does not matter) before any P·V reads the tile. Without ping-pong every consumer
        // thread takes a share and they all meet. Under PINGPONG the consumers are in different
        // turns, so consumer 0 clears alone, inside its turn: the turns go 0, 1, .. for every
        // tile, so its P·V(j) is the tile's first; a barrier of its own warpgroup orders its own
        // reads, and handing the turn on (a named barrier: the writes before it are visible to
        // the threads it releases) orders the other consumers'. Uniform over the CTA: it depends
        // on p and j only.
        const bool clear_v_tail =
            kSeqs && !FP8 && (p.seqs.cu_k != nullptr || p.seqs.seqused_k != nullptr || p.seqs.block_table != nullptr);
        constexpr int kClearThreads = PINGPONG ? 128 : 128 * CONSUMERS;
        auto clear_v_rows = [&](int j, unsigned char* v_tile) {
            const int first = p.kv_len - (t_begin + j) * BN; // the tile's first row past the keys
            if (!clear_v_tail || j + 1 != n_tiles || first >= BN) return;
            if (PINGPONG && cw != 0) return;
            const int lo = first < 0 ? 0 : first;
            const int chunks = L::kSubTiles * (BN - lo) * 8; // 16-byte chunks
            for (int i = threadIdx.x - 128; i < chunks; i += kClearThreads) {
                const int c = i / ((BN - lo) * 8);
                const int r = i % ((BN - lo) * 8);
                *reinterpret_cast<uint4*>(v_tile + c * BN * 128 + lo * 128 + r * 16) = make_uint4(0, 0, 0, 0);
            }
            fence_proxy_async_smem(); // generic-proxy writes before wgmma's async-proxy reads
            named_barrier_sync(kBarVClear, kClearThreads);
        };
        // O += P·V of key tile j: k-step kk reads keys 16kk.. (16 rows of 128 bytes per sub-tile).
        // may_be_last (a constant at every call, folded once inlined): j can be the item's last
        // tile, the only one whose V tail clear_v_rows may clear; the steady-state calls skip
        // its checks (about 12 instructions per tile, run 125's ncu). (A BoolConst parameter
        // and `if constexpr` on its type here crashed nvcc 13.0's front end.)
        auto issue_pv = [&](int j, const uint32_t (&pa)[kKP][4], bool may_be_last) {
            const int s = (ring + j) % STAGES;
            mbar_wait(&full_v[s], ((ring + j) / STAGES) & 1);
            if constexpr (kSeqs) {
                if (may_be_last) clear_v_rows(j, sV + s * L::kVBytes);
            }
            const uint32_t v_addr = smem_addr(sV + s * L::kVBytes);
            wgmma_fence_operands(acc_o);
            wgmma_fence();
            if constexpr (FP8) {
                // Vᵀ is K-major (sub-tiles of DK rows × kSpan key bytes): k-step kk reads keys
                // 32kk.. of every row.
                constexpr int kSpan = vt_span(BN);
#pragma unroll
                for (int kk = 0; kk < kKP; ++kk)
                    wgmma_e4m3_rs<DK>(acc_o, pa[kk],
                                      wgmma_desc<kSpan>(v_addr + kk * 32 / kSpan * (DK * kSpan) + kk * 32 % kSpan));
            } else {
#pragma unroll
                for (int kk = 0; kk < kKP; ++kk)
                    Wgmma16<T, DK>::rs(acc_o, pa[kk], wgmma_desc_mn128(v_addr + kk * 16 * 128, BN * 128));
            }
        };
        auto release_k = [&](int j) {
            if (lane == 0) mbar_arrive(&empty_k[(ring + j) % STAGES]);
        };
        auto release_v = [&](int j) {
            if (lane == 0) mbar_arrive(&empty_v[(ring + j) % STAGES]);
        };
        // A walking entry hands the Q tile back as soon as its last Q·Kᵀ has read it, so the next
        // item's Q loads under this item's last P·V and epilogue (which then stores O from registers).
        auto release_q = [&]() {
            if constexpr (kPersistent) {
                if (lane == 0) mbar_arrive(empty_q);
            }
        };

        // P of one tile as A operands: n-tiles 2kk and 2kk+1 of the accumulator are k-step kk's
        // m16k16 fragment (the same identity the mma.sync kernel uses).
        // FP8: k32 fragments of E4M3 codes; Vᵀ's key permutation (fp8_vt_smem.cuh) makes the
        // values this thread holds the operand it needs (as in fwd_fp8_wgmma_kernel.cuh).
        uint32_t pa[kKP][4];
        auto convert_p = [&]() {
#pragma unroll
            for (int kk = 0; kk < kKP; ++kk) {
                if constexpr (FP8) {
                    pack_p_e4m3_k32(pa[kk], acc_s, kk);
                } else {
                    pa[kk][0] = StorageTraits<T>::pack(acc_s[2 * kk][0], acc_s[2 * kk][1]);
                    pa[kk][1] = StorageTraits<T>::pack(acc_s[2 * kk][2], acc_s[2 * kk][3]);
                    pa[kk][2] = StorageTraits<T>::pack(acc_s[2 * kk + 1][0], acc_s[2 * kk + 1][1]);
                    pa[kk][3] = StorageTraits<T>::pack(acc_s[2 * kk + 1][2], acc_s[2 * kk + 1][3]);
                }
            }
        };
        // The row offsets of the scores mask_tile leaves (ALiBi's row term, score_mod.cuh);
        // constant 0 without FEATURES, so the softmax's additions fold away.
        float row_off[2] = {0.f, 0.f};
        auto mask_tile = [&](int j) {
            const int key0 = (t_begin + j) * BN;
            if constexpr (FEATURES) {
                features_and_mask<kNT, CAUSAL, BN, true>(acc_s, key0, row_base + warp_row0 + g, all_lo, all_hi, slope,
                                                         p, t, row_off);
            } else {
                if (key0 + BN > lim_block) apply_mask<kNT>(acc_s, key0, lim_lo, lim_hi, t);
            }
        };

        // This consumer's key tiles j = J(i), i < my_tiles: all of the item's, or under KVSPLIT
        // every second one from j = cw.
        constexpr int kJStep = KVSPLIT ? 2 : 1;
        const int my_tiles = KVSPLIT ? (n_tiles > cw ? (n_tiles - cw + 1) / 2 : 0) : n_tiles;
        auto J = [&](int i) { return (KVSPLIT ? cw : 0) + i * kJStep; };

        // One iteration: softmax of tile j, then (ordered against the other consumer under
        // PINGPONG) P·V(j) and, when HAS_NEXT, Q·Kᵀ of the next tile in one commit group. The last iteration
        // is peeled off so that no wgmma sits in a branch (ptxas serializes wgmma on divergent
        // paths, C7520).
        auto iteration = [&](int j, auto has_next) {
            constexpr bool kHasNext = decltype(has_next)::value;
            mask_tile(j);
            dump_s(j);
            softmax.template update<false>(acc_s, acc_o, scale_log2, kLog2Gain, row_off);
            dump_p(j);
            convert_p();
            if constexpr (PINGPONG) named_barrier_sync(my_bar, 256);
            issue_pv(j, pa, !kHasNext);
            if constexpr (kHasNext) issue_qk(j + kJStep);
            wgmma_commit();
            if constexpr (PINGPONG) named_barrier_arrive(other_bar, 256);
            wgmma_wait<0>();
            wgmma_fence_operands(acc_o);
            wgmma_fence_operands(acc_s);
            release_v(j);
            if constexpr (kHasNext) release_k(j + kJStep);
        };

        mbar_wait(bar_q, n_items & 1);
        if (my_tiles > 0) {
            if constexpr (PINGPONG) {
                if (cw == CONSUMERS - 1) named_barrier_arrive(kBarSchedBase, 256); // consumer 0 goes first
                named_barrier_sync(my_bar, 256);
            }
            issue_qk(J(0));
            wgmma_commit();
            if constexpr (PINGPONG) named_barrier_arrive(other_bar, 256);
            wgmma_wait<0>();
            wgmma_fence_operands(acc_s);
            release_k(J(0));
            if constexpr (INTRA) {
                // FA3's intra-warpgroup overlap (§3.2): Q·Kᵀ(j+1) and P·V(j) are issued
                // together and the softmax of tile j+1 runs while P·V(j) still accumulates into
                // O; O's rescale by the new maxima waits for that MMA.
                float corr[2];
                mask_tile(J(0));
                dump_s(J(0));
                softmax.template update_scores<false>(acc_s, corr, scale_log2, kLog2Gain, row_off);
                dump_p(J(0));
                convert_p();
                for (int i = 0; i + 1 < my_tiles; ++i) {
                    const int j = J(i), next = j + kJStep;
                    // Timeline events (ATTN_TIMELINE builds): 0 step start, 1 ping-pong turn,
                    // 2 K(next) landed, 3 V(j) landed, 4 Q·Kᵀ(next) done, 5 softmax done,
                    // 6 P·V(j) done, 7 O rescaled and P converted.
                    const int step = static_cast<int>(ring) + i;
                    stamp(step, 0);
                    if constexpr (PINGPONG) named_barrier_sync(my_bar, 256);
                    if (timeline) {
                        stamp(step, 1);
                        mbar_wait(&full_k[(ring + next) % STAGES], ((ring + next) / STAGES) & 1);
                        stamp(step, 2);
                        mbar_wait(&full_v[(ring + j) % STAGES], ((ring + j) / STAGES) & 1);
                        stamp(step, 3);
                    }
                    issue_qk(next);
                    wgmma_commit();
                    issue_pv(j, pa, false); // not the item's last tile
                    wgmma_commit();
                    if constexpr (PINGPONG) named_barrier_arrive(other_bar, 256);
                    wgmma_wait<1>(); // Q·Kᵀ(next) done; P·V(j) may still run
                    stamp(step, 4);
                    wgmma_fence_operands(acc_s);
                    release_k(next);
                    mask_tile(next);
                    dump_s(next);
                    softmax.template update_scores<false>(acc_s, corr, scale_log2, kLog2Gain, row_off);
                    dump_p(next);
                    schedule_after(softmax.l[1]); // the softmax overlaps P·V(j), see schedule_after
                    stamp(step, 5);
                    wgmma_wait<0>();
                    stamp(step, 6);
                    wgmma_fence_operands(acc_o);
                    release_v(j);
                    OnlineSoftmax<kNT, kNO>::rescale(acc_o, corr);
                    convert_p();
                    stamp(step, 7);
                }
                release_q(); // every Q·Kᵀ of the item has completed
                if constexpr (PINGPONG) named_barrier_sync(my_bar, 256);
                issue_pv(J(my_tiles - 1), pa, true);
                wgmma_commit();
                if constexpr (PINGPONG) named_barrier_arrive(other_bar, 256);
                wgmma_wait<0>();
                wgmma_fence_operands(acc_o);
                release_v(J(my_tiles - 1));
            } else {
                for (int i = 0; i + 1 < my_tiles; ++i) iteration(J(i), BoolConst<true>{});
                release_q(); // every Q·Kᵀ of the item has completed
                iteration(J(my_tiles - 1), BoolConst<false>{});
            }
            // The last consumer's arrivals outnumber consumer 0's waits by the one before the
            // first GEMM: consume it, so no barrier is left half-arrived.
            if constexpr (PINGPONG) {
                if (cw == 0) named_barrier_sync(my_bar, 256);
            }
        } else {
            release_q();
        }

        // Packed Q/O: the sequence's rows of batch 0, LSE [Hq, total_q] (seqs.cuh's layouts).
        T* o_head = head_ptr(o, p.o_stride, q_batch, h) + static_cast<int64_t>(rows.q_row0) * p.o_stride[2];
        float* lse_head = nullptr;
        if (lse != nullptr) {
            lse_head = kSeqs && p.seqs.cu_q != nullptr
                           ? lse + static_cast<int64_t>(h) * p.seqs.total_q + rows.q_row0
                           : lse + static_cast<int64_t>(b * p.q_heads + h) * p.q_len;
        }
        if constexpr (kSeqs) {
            if (sched.splits > 1) {
                // Split-KV across CTAs (chunked prefill: a few query blocks against long keys
                // would leave most SMs idle): CTA (x, y) ran split y of item x's key tiles
                // (split_key_tiles). Its consumers store their unnormalized O and (m, l), and
                // the item's last CTA to take a ticket merges the splits in split order and
                // resets the ticket, as the mma.sync split entries do (split_combine.cuh;
                // FlashAttention's split-KV, the CUDA samples' threadfence reduction): the
                // result does not depend on which CTA came last, and a sink joins once there.
                // Only the consumers take part (the producer warps have left); the dead Q tile
                // holds the ticket's flag and the rows' merged max and 1/l.
                const int n = sched.splits;
                const int64_t item = blockIdx.x;
                // FP8: every split's m carries P's 2⁸ gain; removing it here leaves the merge's
                // weights as they were and its LSE right. V's descale goes into the partial O
                // (the merge is linear in it).
                softmax.m[0] -= kLog2Gain;
                softmax.m[1] -= kLog2Gain;
                if constexpr (FP8) {
                    const float vs = v_scale[b * p.kv_heads + kvh];
#pragma unroll
                    for (int n = 0; n < kNO; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc_o[n][e] *= vs;
                }
                float* ws_o = sched.ws_o + item * n * kBM * DK;
                float* ws_ml = sched.ws_ml + item * n * kBM * 2;
                write_partial<DK, kNO>(acc_o, softmax.m, softmax.l, ws_o + blockIdx.y * (kBM * DK),
                                       ws_ml + blockIdx.y * (kBM * 2), row_base - m0 + warp_row0, lane);
                const int tid = static_cast<int>(threadIdx.x) - 128;
                auto sync = [] { named_barrier_sync(kBarEpilogue, 128 * CONSUMERS); };
                unsigned int* flag = reinterpret_cast<unsigned int*>(sQ);
                float* row_max = reinterpret_cast<float*>(sQ) + 32;
                if (last_split(sched.counters + item, n, tid, flag, sync)) {
                    merge_splits<T, DK, kBM>(ws_o, ws_ml, sched.counters + item, n, o_head, lse_head, m0, p.q_len,
                                             p.o_stride[2], p.head_dim, tid, 128 * CONSUMERS, row_max,
                                             row_max + kBM, sync, FEATURES ? sink_log2(h, p) : -INFINITY);
                }
                return;
            }
        }
        if constexpr (kPersistent) {
            // The piece's sharing is recomputed here rather than kept live through the mainloop
            // (a register the wide FP8 tiles do not have).
            const TailPiece piece = tail_piece(sched, tail_t, key_tiles_for_block<false, kBM, BN>(0, p_in));
            if (piece.count > 1) {
                // A piece of a tail item (walk_items): each consumer warp stores its 16 rows'
                // unnormalized O and (m, l) in this CTA's slot and takes the ticket of its rows
                // (the rows are the same warp's in every piece, so warps need not wait for each
                // other); the warp that comes last merges the pieces (the threadfence reduction,
                // as split_combine.cuh's `last_split`) and writes the rows as a whole item would.
                const int row0 = cw * 64 + warp_row0;
                const int64_t slot = static_cast<int64_t>(blockIdx.x) + piece.t;
                write_partial<DK, kNO>(acc_o, softmax.m, softmax.l, sched.ws_o + slot * (kBM * DK),
                                       sched.ws_ml + slot * (kBM * 2), row0, lane);
                unsigned int* ticket =
                    sched.counters + piece.t * L::kConsumerWarps + (static_cast<int>(threadIdx.x >> 5) - 4);
                __threadfence(); // this warp's partials are visible device-wide before its ticket
                __syncwarp();
                unsigned int arrived = 0u;
                if (lane == 0) arrived = atomicAdd(ticket, 1u);
                arrived = __shfl_sync(0xffffffffu, arrived, 0);
                if (arrived != static_cast<unsigned int>(piece.count - 1)) {
                    ring += n_tiles;
                    ++n_items;
                    return;
                }
                __threadfence();
                if (lane == 0) *ticket = 0u; // every piece has arrived: ready for the next launch
                merge_tail_pieces<kBM, DK, kNO>(acc_o, softmax.m, softmax.l, sched.ws_o, sched.ws_ml,
                                                piece.first_cta + piece.t, piece.count, row0, lane);
            }
        }
        // Every consumer is done reading Q (its last wgmma has completed) before any stages its
        // output in the Q tile. A walking entry stores O from registers instead (below): the Q
        // tile already went back to the producer for the next item.
        // KVSPLIT: the second consumer leaves its O, m and l for the first around that barrier.
        float* xbuf = reinterpret_cast<float*>(base + L::kXOffset) + (threadIdx.x & 127);
        if constexpr (KVSPLIT) {
            if (cw == 1) {
#pragma unroll
                for (int n = 0; n < kNO; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) xbuf[(4 * n + e) * 128] = acc_o[n][e];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    xbuf[(4 * kNO + r) * 128] = softmax.m[r];
                    xbuf[(4 * kNO + 2 + r) * 128] = softmax.l[r];
                }
            }
        }
        if constexpr (!kPersistent) named_barrier_sync(kBarEpilogue, 128 * CONSUMERS);
        if constexpr (KVSPLIT) {
            if (cw == 1) {
                ring += n_tiles;
                ++n_items;
                return;
            }
            // Both states scaled to the larger maximum (m is base 2, the same on a row's four
            // threads; l is this thread's partial sum, reduced by write_output). A consumer
            // without keys has m = −∞, l = 0 and O = 0, so its factor is 0.
            float a0[2], a1[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float m1 = xbuf[(4 * kNO + r) * 128];
                const float l1 = xbuf[(4 * kNO + 2 + r) * 128];
                const float m_new = fmaxf(softmax.m[r], m1);
                const float m_use = m_new == -INFINITY ? 0.f : m_new;
                a0[r] = exp2f(softmax.m[r] - m_use);
                a1[r] = exp2f(m1 - m_use);
                softmax.l[r] = softmax.l[r] * a0[r] + l1 * a1[r];
                softmax.m[r] = m_new;
            }
#pragma unroll
            for (int n = 0; n < kNO; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    acc_o[n][e] = fmaf(acc_o[n][e], a0[e >> 1], xbuf[(4 * n + e) * 128] * a1[e >> 1]);
        }
        // FP8: LSE comes from m in the scaled domain, so remove the 2⁸ gain P carried.
        softmax.m[0] -= kLog2Gain;
        softmax.m[1] -= kLog2Gain;
        const float out_scale = FP8 ? v_scale[b * p.kv_heads + kvh] : 1.f;
        T* staging = reinterpret_cast<T*>(sQ) + cw * 64 * kPitch;
        write_output<T, kPitch, kNO, FEATURES, kPersistent>(
            acc_o, softmax.m, softmax.l, staging, o_head, lse_head, warp_row0, row_base, p.q_len, lane,
            static_cast<int>(p.o_stride[2]), p.head_dim >> 3, out_scale, FEATURES ? sink_log2(h, p) : -INFINITY);
        ring += n_tiles;
        ++n_items;
    };
    if constexpr (kPersistent) {
        walk_items(sched, key_tiles_for_block<false, kBM, BN>(0, p_in), [&](int w, int lo, int hi, int tail_t) {
            HopperItem item = next_item(w);
            item.t_begin = lo;
            item.n_tiles = hi - lo;
            consume(item, tail_t);
        });
    } else {
        consume(first, -1);
    }
    ATTN_TIMELINE_COUNT(kTimelineKind);
#else
    __trap(); // the Hopper entry points exist only in sm_90a cubins
#endif
}

} // namespace attn

// One extern "C" entry per (dtype, bucket, tile, mode), generated by src/catalog.rs. The three
// TMA descriptors are __grid_constant__ parameters (TMA reads them from parameter space). The
// debug build (ATTN_DEBUG: tile dumps) appends the dump buffer and its tile list.
#ifdef ATTN_DEBUG
#define ATTN_FWDH_DEBUG_PARAMS , float *__restrict__ dump, const int *__restrict__ dump_tiles
#define ATTN_FWDH_DEBUG_ARGS , dump, dump_tiles
#else
#define ATTN_FWDH_DEBUG_PARAMS
#define ATTN_FWDH_DEBUG_ARGS
#endif
#define ATTN_FWD_HOPPER_ENTRY(NAME, T, DK, BN, ST, CAUSAL, PINGPONG, INTRA, FEATURES, CONSUMERS, SEQS, PERSIST, KVSPLIT) \
    extern "C" __global__ void __launch_bounds__(128 * (CONSUMERS + 1), 1)                              \
        NAME(T* __restrict__ o, float* __restrict__ lse, const __grid_constant__ attn::TmaDesc tma_q,   \
             const __grid_constant__ attn::TmaDesc tma_k, const __grid_constant__ attn::TmaDesc tma_v, \
             const attn::FwdParams p, const attn::HopperSched sched ATTN_FWDH_DEBUG_PARAMS) {           \
        attn::fwd_hopper_kernel<T, DK, BN, ST, CAUSAL, PINGPONG, INTRA, false, FEATURES, CONSUMERS, SEQS,   \
                                PERSIST, KVSPLIT>(                                                      \
            o, lse, &tma_q, &tma_k, &tma_v, nullptr, nullptr, nullptr, p, sched ATTN_FWDH_DEBUG_ARGS);  \
    }

// The FP8 entry: Q, K and V are E4M3 codes with TMA descriptors like the f16/bf16 entry's;
// per-head scales [B, H]. SEQS: the `_seq` entry, which splits dense keys (grid.y).
#define ATTN_FWD_HOPPER_FP8_ENTRY(NAME, OutT, DK, BN, ST, CAUSAL, PINGPONG, INTRA, CONSUMERS, SEQS, PERSIST, KVSPLIT) \
    extern "C" __global__ void __launch_bounds__(128 * (CONSUMERS + 1), 1)                                     \
        NAME(OutT* __restrict__ o, float* __restrict__ lse, const __grid_constant__ attn::TmaDesc tma_q,       \
             const __grid_constant__ attn::TmaDesc tma_k, const __grid_constant__ attn::TmaDesc tma_v,         \
             const float* __restrict__ q_scale, const float* __restrict__ k_scale,                             \
             const float* __restrict__ v_scale, const attn::FwdParams p, const attn::HopperSched sched) {       \
        attn::fwd_hopper_kernel<OutT, DK, BN, ST, CAUSAL, PINGPONG, INTRA, true, false, CONSUMERS, SEQS,       \
                                PERSIST, KVSPLIT>(                                                             \
            o, lse, &tma_q, &tma_k, &tma_v, q_scale, k_scale, v_scale, p, sched);                              \
    }
