// The FlashAttention-2-style forward kernel (Dao 2023, "FlashAttention-2: Faster Attention
// with Better Parallelism and Work Partitioning"): one CTA per (query block, head, batch),
// BM/16 warps each owning 16 whole query rows (so the softmax state never crosses warps),
// Q fragments held in registers, K/V streamed through a STAGES-deep cp.async ring,
// S = Q·Kᵀ and O += P·V on mma.sync.m16n8k16 with P reused from the S accumulators in
// registers (no shared-memory round trip).
#pragma once
#include "debug_dump.cuh"
#include "epilogue.cuh"
#include "kv_fp8.cuh"
#include "load.cuh"
#include "mask.cuh"
#include "score_mod.cuh"
#include "seqs.cuh"
#include "softmax.cuh"
#include "split_combine.cuh"

namespace attn {

// DK: the head-dim bucket the kernel is specialized for (a multiple of 32); the problem's own
// D ≤ DK is a runtime scalar (p.head_dim): columns past it are zero-filled on load and never
// stored, so one kernel serves every D of its bucket without host copies.
template <typename T, int DK, int BM, int BN, int STAGES, int WARPS>
struct FwdConfig {
    static constexpr int kWarps = WARPS;
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kMT = BM / (16 * WARPS); // m16 tiles per warp: 1 or 2 (FA2 uses 2)
    static constexpr int kRowsPerWarp = 16 * kMT;
    static constexpr int kNT = BN / 8;   // n-tiles of S per m-tile
    static constexpr int kNO = DK / 8;   // n-tiles of O per m-tile
    static constexpr int kKQ = DK / 16;  // k-steps of Q·Kᵀ
    static constexpr int kPitch = smem_pitch<DK>(); // shared-memory row pitch (elements)
    static constexpr int kKP = BN / 16;  // k-steps of P·V
    // With one m-tile per warp Q stays in registers; with two, each K/V fragment loaded from
    // shared memory feeds two MMAs (half the ldmatrix traffic per flop) and Q is re-read
    // from shared memory instead, which keeps the register count under 255. Above D = 128
    // the O accumulator alone takes DK/2 registers, so Q is re-read there too (as
    // FlashAttention-2 does for every head dim).
    static constexpr bool kQInRegs = kMT == 1 && DK <= 128;
    static constexpr int kSmemElems = (BM + 2 * STAGES * BN) * kPitch;
    static constexpr int kSmemBytes = kSmemElems * 2;
    // An E4M3 KV cache (kv_fp8.cuh): Q, one widened K and V tile, and the byte stages of the
    // ring (src/catalog.rs: fwd_smem_bytes mirrors both formulas).
    static constexpr int kSmemBytesKvFp8 = (BM + 2 * BN) * kPitch * 2 + 2 * STAGES * BN * DK;
    static_assert(BM % (16 * WARPS) == 0 && (kMT == 1 || kMT == 2), "BM = 16 or 32 rows per warp");
    static_assert(BN % 16 == 0 && DK % 32 == 0 && DK <= 256, "tile sizes");
    static_assert(STAGES >= 2, "the K/V ring needs at least two stages");
};

// SPLIT: the key range of a query block is split over p.n_splits CTAs (flash-decoding's
// split-KV, Dao et al. 2023), for grids too small to fill the chip; see split_combine.cuh.
// FEATURES: sliding window, softcap, ALiBi and sinks as runtime values of p.feat
// (score_mod.cuh); the key tiles outside the block's window are skipped. FEATURES entries
// also run varlen batches and KV caches with per-sequence lengths (p.seqs, seqs.cuh), and
// PAGED ones read K/V through a block table (load_tile_paged). FEATURES entries split
// (unmasked launches), each split taking an equal share of the block's visible key tiles;
// the sink joins once, in split_combine's merge. KV_FP8 (FEATURES only): K and V are E4M3
// codes with per-KV-head scales p.feat.k_descale / v_descale (kv_fp8.cuh).
template <typename T, int DK, int BM, int BN, int STAGES, int WARPS, bool CAUSAL, bool BREAK_RESCALE,
          bool SPLIT, bool FEATURES = false, bool PAGED = false, bool KV_FP8 = false,
          typename KV = std::conditional_t<KV_FP8, uint8_t, T>>
__device__ __forceinline__ void fwd_kernel(const T* __restrict__ q, const KV* __restrict__ k,
                                           const KV* __restrict__ v, T* __restrict__ o,
                                           float* __restrict__ lse, float* __restrict__ dump,
                                           const int* __restrict__ dump_tiles, float* __restrict__ ws_o,
                                           float* __restrict__ ws_ml, unsigned int* __restrict__ counters,
                                           const FwdParams& launch_p) {
    using Cfg = FwdConfig<T, DK, BM, BN, STAGES, WARPS>;
    static_assert(!(FEATURES && BREAK_RESCALE), "features run in release entries");
    static_assert(FEATURES || !(PAGED || KV_FP8), "paged and E4M3 K/V run in the FEATURES entries");
    constexpr int MT = Cfg::kMT;
    constexpr int DP = Cfg::kPitch;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* sQ = reinterpret_cast<T*>(smem_raw);
    T* sK = sQ + BM * DP;
    // KV_FP8: one widened K and V tile; the ring holds byte stages after them.
    T* sV = sK + (KV_FP8 ? 1 : STAGES) * BN * DP;
    uint8_t* stage_k = reinterpret_cast<uint8_t*>(sV + BN * DP);
    uint8_t* stage_v = stage_k + STAGES * BN * DK;

    const int q_tile = SPLIT ? blockIdx.x / launch_p.n_splits : blockIdx.x;
    const int split = SPLIT ? blockIdx.x % launch_p.n_splits : 0;
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    // FEATURES: this batch entry's own lengths (varlen, seqused_k, paged); the rest of the
    // kernel reads them through `p` as if the launch were this one sequence.
    FwdParams seq_p;
    SeqRows rows{0, 0};
    if constexpr (FEATURES) {
        seq_p = launch_p;
        rows = resolve_sequence(seq_p, b);
        if (q_tile * BM >= seq_p.q_len) return; // the grid covers the longest sequence
    }
    const FwdParams& p = FEATURES ? seq_p : launch_p;
    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int m0 = q_tile * BM;
    const int warp_row0 = warp * Cfg::kRowsPerWarp;
    const int kvh = h / p.group;

    const T* q_head = head_ptr(q, p.q_stride, b, h);
    T* o_head = head_ptr(o, p.o_stride, b, h);
    float* lse_head = lse == nullptr ? nullptr : lse + static_cast<int64_t>(b * p.q_heads + h) * launch_p.q_len;
    const KV* k_head = head_ptr(k, p.k_stride, b, kvh);
    const KV* v_head = head_ptr(v, p.v_stride, b, kvh);
    if constexpr (FEATURES) {
        if (p.seqs.cu_q != nullptr) { // packed Q/O [total_q, Hq, D]; LSE [Hq, total_q]
            q_head = q + static_cast<int64_t>(rows.q_row0) * p.q_stride[2] + static_cast<int64_t>(h) * p.q_stride[1];
            o_head = o + static_cast<int64_t>(rows.q_row0) * p.o_stride[2] + static_cast<int64_t>(h) * p.o_stride[1];
            if (lse != nullptr) lse_head = lse + static_cast<int64_t>(h) * p.seqs.total_q + rows.q_row0;
        }
        if (PAGED) { // pages: the batch stride is the page stride, rows come from the table
            k_head = k + static_cast<int64_t>(kvh) * p.k_stride[1];
            v_head = v + static_cast<int64_t>(kvh) * p.v_stride[1];
        } else if (p.seqs.cu_k != nullptr) { // packed K/V [total_k, Hkv, D]
            k_head = k + static_cast<int64_t>(rows.k_row0) * p.k_stride[2] + static_cast<int64_t>(kvh) * p.k_stride[1];
            v_head = v + static_cast<int64_t>(rows.k_row0) * p.v_stride[2] + static_cast<int64_t>(kvh) * p.v_stride[1];
        }
    }
    const int d_chunks = p.head_dim >> 3;

#ifdef ATTN_DEBUG
    const int slot = dump == nullptr ? -1 : dump_slot<BM, BN>(p, dump_tiles, b, h, q_tile);
#endif

    // This CTA's key tiles: [t_begin, t_begin + n_tiles).
    int t_begin = 0;
    int n_tiles;
    // FEATURES: the keys every row of the block sees, [all_lo, all_hi); outside it, the mask.
    int all_lo = 0, all_hi = 0;
    if constexpr (FEATURES) {
        key_tile_range<CAUSAL, BM, BN>(m0, p, t_begin, n_tiles, all_lo, all_hi);
    } else {
        n_tiles = key_tiles_for_block<CAUSAL, BM, BN>(m0, p);
    }
    if constexpr (SPLIT) {
        const int per = (n_tiles + p.n_splits - 1) / p.n_splits;
        const int first = min(n_tiles, split * per);
        t_begin += first;
        n_tiles = min(n_tiles, first + per) - first;
    }
    // Keys visible to this thread's rows (rows past q_len are computed and discarded).
    int lim_lo[MT], lim_hi[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        lim_lo[mt] = visible_keys<CAUSAL>(m0 + warp_row0 + mt * 16 + g, p);
        lim_hi[mt] = visible_keys<CAUSAL>(m0 + warp_row0 + mt * 16 + g + 8, p);
    }
    // Keys visible to every row of the block: tiles entirely below need no mask.
    const int lim_block = visible_keys<CAUSAL>(m0, p);
    // FEATURES: this head's ALiBi slope.
    const float slope = FEATURES ? alibi_slope(b, h, p) : 0.f;
    // KV_FP8: the keys' dequantization factor (the values' is applied to O at the end).
    const float k_desc = KV_FP8 ? kv_descale(p.feat.k_descale, p.feat.descale_per_head, kvh) : 1.f;

    // Prologue: Q and the first STAGES-1 K/V tiles. One commit group per tile, always
    // committed (possibly empty) so that wait_group counts stay uniform.
    load_tile_async<T, DK, BM, Cfg::kThreads>(sQ, q_head, m0, p.q_len, p.q_stride[2], d_chunks, tid);
    // PAGED: the pages of the next tile to load, fetched one tile ahead (PageRows).
    PageRows<KV_FP8 ? DK / 2 : DK, BN, Cfg::kThreads> pages;
    const int* table = PAGED ? p.seqs.block_table + static_cast<int64_t>(b) * p.seqs.max_blocks : nullptr;
    const PageDiv div{p.seqs.page_size, p.seqs.page_mul, p.seqs.page_shift};
    if constexpr (PAGED) pages.fetch(table, t_begin * BN, p.kv_len, div, p.seqs.num_blocks, tid);
    auto load_kv = [&](int buf, int key0) {
        if constexpr (KV_FP8) {
            const int code_chunks = p.head_dim >> 4;
            if constexpr (PAGED) {
                load_codes_paged<DK, BN, Cfg::kThreads>(stage_k + buf * BN * DK, k_head, pages, table, key0,
                                                        p.kv_len, div, p.seqs.num_blocks, p.k_stride[0],
                                                        p.k_stride[2], code_chunks, tid);
                load_codes_paged<DK, BN, Cfg::kThreads>(stage_v + buf * BN * DK, v_head, pages, table, key0,
                                                        p.kv_len, div, p.seqs.num_blocks, p.v_stride[0],
                                                        p.v_stride[2], code_chunks, tid);
                pages.fetch(table, key0 + BN, p.kv_len, div, p.seqs.num_blocks, tid);
            } else {
                load_codes_async<DK, BN, Cfg::kThreads>(stage_k + buf * BN * DK, k_head, key0, p.kv_len,
                                                        p.k_stride[2], code_chunks, tid);
                load_codes_async<DK, BN, Cfg::kThreads>(stage_v + buf * BN * DK, v_head, key0, p.kv_len,
                                                        p.v_stride[2], code_chunks, tid);
            }
        } else if constexpr (PAGED) {
            load_tile_paged<T, DK, BN, Cfg::kThreads>(sK + buf * BN * DP, k_head, pages, table, key0, p.kv_len, div,
                                                      p.seqs.num_blocks, p.k_stride[0], p.k_stride[2], d_chunks,
                                                      tid);
            load_tile_paged<T, DK, BN, Cfg::kThreads>(sV + buf * BN * DP, v_head, pages, table, key0, p.kv_len, div,
                                                      p.seqs.num_blocks, p.v_stride[0], p.v_stride[2], d_chunks,
                                                      tid);
            pages.fetch(table, key0 + BN, p.kv_len, div, p.seqs.num_blocks, tid);
        } else {
            load_tile_async<T, DK, BN, Cfg::kThreads>(sK + buf * BN * DP, k_head, key0, p.kv_len, p.k_stride[2],
                                                      d_chunks, tid);
            load_tile_async<T, DK, BN, Cfg::kThreads>(sV + buf * BN * DP, v_head, key0, p.kv_len, p.v_stride[2],
                                                      d_chunks, tid);
        }
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_tiles) load_kv(s, (t_begin + s) * BN);
        cp_async_commit();
    }

    // Q fragments (A operand, row-major 16x16 per k-step) of m-tile mt, k-step kk.
    auto load_q = [&](uint32_t (&frag)[4], int mt, int kk) {
        const int row = warp_row0 + mt * 16 + (lane & 15);
        const int chunk = 2 * kk + (lane >> 4);
        ldmatrix_x4(frag, smem_addr(sQ + swz<DP>(row, chunk)));
    };
    uint32_t qf[Cfg::kQInRegs ? Cfg::kKQ : 1][4];
    float acc_o[MT][Cfg::kNO][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < Cfg::kNO; ++n) acc_o[mt][n][0] = acc_o[mt][n][1] = acc_o[mt][n][2] = acc_o[mt][n][3] = 0.f;
    OnlineSoftmax<Cfg::kNT, Cfg::kNO> softmax[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) softmax[mt].init();

    for (int j = 0; j < n_tiles; ++j) {
        const int jn = j + STAGES - 1;
        if (jn < n_tiles) load_kv(jn % STAGES, (t_begin + jn) * BN);
        cp_async_commit();
        cp_async_wait<STAGES - 1>();
        __syncthreads();

        if constexpr (Cfg::kQInRegs) {
            if (j == 0) {
#pragma unroll
                for (int kk = 0; kk < Cfg::kKQ; ++kk) load_q(qf[kk], 0, kk);
            }
        }

        if constexpr (KV_FP8) {
            // Widen this tile's codes; the trailing barrier of the last iteration freed sK/sV.
            widen_codes<T, DK, BN, Cfg::kThreads>(sK, stage_k + (j % STAGES) * BN * DK, tid);
            widen_codes<T, DK, BN, Cfg::kThreads>(sV, stage_v + (j % STAGES) * BN * DK, tid);
            __syncthreads();
        }
        const T* tK = KV_FP8 ? sK : sK + (j % STAGES) * BN * DP;
        const T* tV = KV_FP8 ? sV : sV + (j % STAGES) * BN * DP;

        // S = Q·Kᵀ (raw dot products, f32); each K fragment feeds all MT m-tiles.
        float acc_s[MT][Cfg::kNT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < Cfg::kNT; ++n) acc_s[mt][n][0] = acc_s[mt][n][1] = acc_s[mt][n][2] = acc_s[mt][n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < Cfg::kKQ; ++kk) {
            uint32_t qa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if constexpr (Cfg::kQInRegs) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) qa[mt][i] = qf[kk][i];
                } else {
                    load_q(qa[mt], mt, kk);
                }
            }
#pragma unroll
            for (int n = 0; n < Cfg::kNT; n += 2) {
                // Matrices: (n, chunk 2kk), (n, 2kk+1), (n+1, 2kk), (n+1, 2kk+1).
                const int mi = lane >> 3;
                const int key = (n + (mi >> 1)) * 8 + (lane & 7);
                const int chunk = 2 * kk + (mi & 1);
                uint32_t bk[4];
                ldmatrix_x4(bk, smem_addr(tK + swz<DP>(key, chunk)));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    Mma<T>::run(acc_s[mt][n], qa[mt], bk[0], bk[1]);
                    Mma<T>::run(acc_s[mt][n + 1], qa[mt], bk[2], bk[3]);
                }
            }
        }

        const int key0 = (t_begin + j) * BN;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            if constexpr (KV_FP8) { // raw scores of the dequantized keys
#pragma unroll
                for (int n = 0; n < Cfg::kNT; ++n)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc_s[mt][n][i] *= k_desc;
            }
            if constexpr (FEATURES) {
                float unused_off[2]; // 0: this kernel takes no row offsets (score_mod.cuh)
                features_and_mask<Cfg::kNT, CAUSAL, BN>(acc_s[mt], key0, m0 + warp_row0 + mt * 16 + g, all_lo, all_hi,
                                                        slope, p, t, unused_off);
            } else {
                if (key0 + BN > lim_block) apply_mask<Cfg::kNT>(acc_s[mt], key0, lim_lo[mt], lim_hi[mt], t);
            }
#ifdef ATTN_DEBUG
            float* dbase = nullptr;
            if (slot >= 0) {
                dbase = dump_tile_base<BM, BN, Cfg::kNT>(dump, slot, t_begin + j, p);
                dump_scores<BM, BN, Cfg::kNT>(dbase, acc_s[mt], warp_row0 + mt * 16, lane, p.scale);
            }
#endif
            softmax[mt].template update<BREAK_RESCALE>(acc_s[mt], acc_o[mt], p.scale_log2);
#ifdef ATTN_DEBUG
            if (slot >= 0)
                dump_probs<BM, BN, Cfg::kNT>(dbase, acc_s[mt], softmax[mt].m, softmax[mt].l, warp_row0 + mt * 16, lane);
#endif
        }

        // O += P·V, with P taken from the S accumulators: n-tiles 2kk and 2kk+1 of the
        // m16n8 accumulator layout are exactly the m16k16 A-operand layout. Each V fragment
        // feeds all MT m-tiles.
#pragma unroll
        for (int kk = 0; kk < Cfg::kKP; ++kk) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                pa[mt][0] = StorageTraits<T>::pack(acc_s[mt][2 * kk][0], acc_s[mt][2 * kk][1]);
                pa[mt][1] = StorageTraits<T>::pack(acc_s[mt][2 * kk][2], acc_s[mt][2 * kk][3]);
                pa[mt][2] = StorageTraits<T>::pack(acc_s[mt][2 * kk + 1][0], acc_s[mt][2 * kk + 1][1]);
                pa[mt][3] = StorageTraits<T>::pack(acc_s[mt][2 * kk + 1][2], acc_s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int n = 0; n < Cfg::kNO; n += 2) {
                // Matrices: (keys 16kk+0..7, chunk n), (16kk+8..15, n), (+0..7, n+1), (+8..15, n+1).
                const int mi = lane >> 3;
                const int key = 16 * kk + (mi & 1) * 8 + (lane & 7);
                const int chunk = n + (mi >> 1);
                uint32_t bv[4];
                ldmatrix_x4_trans(bv, smem_addr(tV + swz<DP>(key, chunk)));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    Mma<T>::run(acc_o[mt][n], pa[mt], bv[0], bv[1]);
                    Mma<T>::run(acc_o[mt][n + 1], pa[mt], bv[2], bv[3]);
                }
            }
        }
        __syncthreads(); // the next iteration's prefetch overwrites this tile's buffer
    }
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (KV_FP8) { // O of the dequantized values (linear, so before any merge)
        const float v_desc = kv_descale(p.feat.v_descale, p.feat.descale_per_head, kvh);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < Cfg::kNO; ++n)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc_o[mt][n][i] *= v_desc;
    }

    if constexpr (SPLIT) {
        const int64_t block = (static_cast<int64_t>(b * p.q_heads + h) * gridDim.x) / p.n_splits + q_tile;
        float* my_o = ws_o + (block * p.n_splits + split) * (BM * DK);
        float* my_ml = ws_ml + (block * p.n_splits + split) * (BM * 2);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            write_partial<DK, Cfg::kNO>(acc_o[mt], softmax[mt].m, softmax[mt].l, my_o, my_ml,
                                       warp_row0 + mt * 16, lane);
        split_combine<T, DK, BM, Cfg::kThreads>(ws_o + block * p.n_splits * (BM * DK),
                                                ws_ml + block * p.n_splits * (BM * 2),
                                                counters + block, p.n_splits, o_head, lse_head, m0,
                                                p.q_len, p.o_stride[2], p.head_dim, tid,
                                                FEATURES ? sink_log2(h, p) : -INFINITY);
    } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            write_output<T, DP, Cfg::kNO, FEATURES>(acc_o[mt], softmax[mt].m, softmax[mt].l, sQ, o_head,
                                                    lse_head, warp_row0 + mt * 16, m0, p.q_len, lane,
                                                    static_cast<int>(p.o_stride[2]), d_chunks, 1.f,
                                                    FEATURES ? sink_log2(h, p) : -INFINITY);
    }
}

} // namespace attn

// One extern "C" entry point per (dtype, bucket, config, mode): src/catalog.rs generates the
// instantiation units (one line of this macro per entry) and the launcher looks kernels up by
// the same names, so the name is an argument here. Release entries take no debug arguments;
// the debug build (ATTN_DEBUG: tile dumps) appends the dump buffer and its tile list.
#ifdef ATTN_DEBUG
#define ATTN_FWD_DEBUG_PARAMS , float *__restrict__ dump, const int *__restrict__ dump_tiles
#define ATTN_FWD_DEBUG_ARGS dump, dump_tiles
#else
#define ATTN_FWD_DEBUG_PARAMS
#define ATTN_FWD_DEBUG_ARGS nullptr, nullptr
#endif
#define ATTN_FWD_ENTRY(NAME, T, DK, BM, BN, ST, W, CAUSAL, BREAK, SPLIT, FEATURES, PAGED, KV8)     \
    extern "C" __global__ void __launch_bounds__(W * 32)                                           \
        NAME(const T* __restrict__ q, const std::conditional_t<KV8, uint8_t, T>* __restrict__ k,   \
             const std::conditional_t<KV8, uint8_t, T>* __restrict__ v,                            \
             T* __restrict__ o, float* __restrict__ lse, float* __restrict__ ws_o,                 \
             float* __restrict__ ws_ml, unsigned int* __restrict__ counters,                       \
             const attn::FwdParams p ATTN_FWD_DEBUG_PARAMS) {                                      \
        attn::fwd_kernel<T, DK, BM, BN, ST, W, CAUSAL, BREAK, SPLIT, FEATURES, PAGED, KV8>(q, k, v,\
                                                                    o,                             \
                                                                    lse, ATTN_FWD_DEBUG_ARGS,      \
                                                                    ws_o, ws_ml, counters, p);     \
    }
