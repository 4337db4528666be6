//! The Hopper forward's host side (`kernels/fwd_hopper_kernel.cuh`): which engine runs a
//! forward, the TMA descriptors of its tensors, and its launch plan.
//!
//! The kernel reads Q, K and V through TMA. Each tensor is described to the hardware as a
//! rank-4 tensor `(D, S, H, B)` (innermost first) with its own byte strides, so strided views
//! (`[B,S,H,D]`, slices of a KV cache) need no copies, and a box of 64 columns × rows that
//! lands in shared memory in the 128-byte swizzle wgmma reads. Elements outside the tensor
//! (rows past S, columns past the problem's D inside the bucket) arrive as zeros. The
//! descriptors are encoded on the host for every launch (a few hundred nanoseconds of CPU,
//! no device work) and passed by value as kernel parameters.

use attn_ref::{reference::emulate::KeyStates, Causal, Problem};
use cudarc::driver::{sys, DeviceRepr};

use crate::{
    catalog::{self, Elem, HopperTile, HopperVariant},
    config::{choose_splits, KernelConfig},
    launch::{check_sizes, fwd_params, FwdParams},
    tensor::Strides,
    KernelError,
};

/// Which mainloop runs a forward ([`crate::ForwardOptions::engine`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// The Hopper kernel on sm_90 devices unless the problem wants split-KV (decode-like
    /// grids too small for the chip) without a sequence layout (the Hopper sequence entries
    /// split keys themselves), an explicit mma.sync config or split count, or a debug build's
    /// tile dumps; the mma.sync kernel everywhere else.
    #[default]
    Auto,
    /// The FlashAttention-2-style mma.sync kernel (every arch; split-KV; tile dumps).
    MmaSync,
    /// The Hopper kernel (TMA, warp-specialized wgmma), with a given tile or the bucket's
    /// default (`None`). A typed error on devices other than sm_90.
    Hopper(Option<HopperTile>),
    /// The decode kernel (kernels/decode_kernel.cuh, every arch): 1–8 query rows per head
    /// after GQA packing, unmasked, one position (sinks, ALiBi and a window need one row per
    /// head, or GQA-packed rows of one token). `Auto` already picks it for every
    /// launch it can run; this names it, and refuses the others with the reason.
    Decode,
}

/// How a Hopper launch covers its work items, the (query block, head, batch) triples
/// ([`crate::ForwardOptions::schedule`], [`crate::Fp8Options::schedule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TileSchedule {
    /// Persistent where the entry walks items ([`catalog::hopper_persistent`]: dense,
    /// non-causal launches of the D = 128 176-key f16/bf16 tiles and the FP8 tiles up to
    /// D = 128), one CTA per SM, with a stream-K tail (as `StreamK`) where the last round
    /// is partial and sharing it saves at least four key tiles; one CTA per item everywhere
    /// else.
    #[default]
    Auto,
    /// One CTA per item (the classic grid), also where the entry could walk items.
    Grid,
    /// At most this many CTAs (`None`: one per SM), each walking whole items (the grid's
    /// arithmetic, bit for bit); a typed error where the entry runs one item per CTA.
    Persistent(Option<usize>),
    /// As `Persistent`, and the items of the last, partial round are shared out by key tiles
    /// across every CTA (kernels/fwd_hopper_kernel.cuh `walk_items`), whenever there is such a
    /// round. Deterministic (the pieces merge in key order), not bitwise the grid's.
    StreamK(Option<usize>),
}

/// The kernel's `HopperSched` (kernels/fwd_hopper_kernel.cuh): work item w is query block
/// (or flat-grid block) `w % tiles_x` of head `(w / tiles_x) % heads` of batch
/// `w / (tiles_x · heads)`; causal launches other than flat grids reorder them longest first
/// across groups of `lpt_heads` (head, batch) pairs (`item_order` in the tests mirrors it).
/// `splits` > 1 (sequence and feature entries): grid.y splits each item's key tiles;
/// `tail_items` > 0 (walking entries): the stream-K tail. Either way the three device pointers
/// are the split-KV workspace (bound at launch; 0 otherwise).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HopperSched {
    pub tiles_x: i32,
    pub heads: i32,
    pub items: i32,
    pub lpt_heads: i32,
    pub splits: i32,
    /// Walking launches: the last items shared out by key tiles (0: none), whose partials
    /// use the workspace below ([`tail_workspace`]).
    pub tail_items: i32,
    pub ws_o: u64,
    pub ws_ml: u64,
    pub counters: u64,
}

/// The (head, batch) pairs whose causal items run longest first together
/// ([`HopperSched::lpt_heads`]). At D ≤ 64, 8 pairs whose K/V (2 MiB a pair at most, 16 MiB
/// together) stay in the 50 MB L2 (measured on the 192-row tile; the 128-row small-grid tile
/// takes the same rule untimed): run 140, causal bf16 µs against one
/// pair at a time, 4,16,4096,64 349–350 → 328–333, 2,16,8192,64 606–623 → 579–596. All the
/// pairs at once thrashed the L2 (4,16,4096,128 475–496 → 542–555; 8,16,2048,128 273 → 424),
/// and at D = 128 eight pairs did not gain (4,16,4096,128 488–501, 1,16,16384,128
/// 1736 → 1775), so larger head dims and longer caches keep one pair at a time.
///
/// FP8 launches (`elem_bytes` 1) take the same rule on their 1-byte K/V at every head dim;
/// until run 325 they ran one pair at a time everywhere, and the last pairs' longest blocks
/// started in the second wave. Run 325 (H200, FP8 causal, µs, one pair → eight, 192-row /
/// 128-row tile): 2,8,2048,64 40.8 → 30.8 / 41.9 → 30.3 (our f16: 31.4); 4,16,4096,64
/// 317.3–318.1 → 300.6–300.9; 1,16,8192,64 294.5–295.1 → 254.8–255.4; 8,16,1024,64 72.5–72.8
/// → 71.7–71.9 (128 rows); 2,8,1024,64 13.2 → 13.4 (128 rows, 1.5 % slower). Run 328 (D =
/// 128, the 192-key ping-pong tile): 4,16,4096,128 403.3–404.6 → 390.7–391.2, 2,8,2048,128
/// 47.5–47.6 → 35.4–35.5, 8,16,2048,128 242.4–242.8 → 237.0–237.7, 2,16,8192,128 716.8–716.9
/// → 689.4–694.3. Run 329 (D = 256, the 96-key ping-pong tile): 4,16,4096,256 672.8–672.9 →
/// 646.6, 2,16,4096,256 349.3–349.7 → 325.7–326.7 (1,16,8192,256's 4 MiB pairs stay single).
pub(crate) fn causal_lpt_heads(bucket: usize, kv_len: usize, elem_bytes: usize) -> i32 {
    const GROUP: usize = 8;
    const PAIR_KV_BYTES: usize = 2 << 20;
    let timed = bucket <= 64 || elem_bytes == 1;
    // K and V of one pair.
    if timed && 2 * kv_len * bucket * elem_bytes <= PAIR_KV_BYTES {
        GROUP as i32
    } else {
        1
    }
}

/// `hopper_item`'s regrouping (kernels/fwd_hopper_kernel.cuh): item w's (rank x of its
/// query block, 0 = the first the kernel maps; (head, batch) pair).
#[cfg(test)]
fn lpt_order(w: i32, s: &HopperSched) -> (i32, i32) {
    let pairs = s.items / s.tiles_x;
    let g0 = w / (s.lpt_heads * s.tiles_x) * s.lpt_heads;
    let n = s.lpt_heads.min(pairs - g0);
    let local = w - g0 * s.tiles_x;
    (local / n, g0 + local % n)
}

/// `hopper_item`'s order for dense launches: item w's (rank, head, batch).
#[cfg(test)]
fn item_order(w: i32, s: &HopperSched, causal: bool) -> (i32, i32, i32) {
    let (x, rest) = if causal && s.lpt_heads > 1 {
        lpt_order(w, s)
    } else {
        (w % s.tiles_x, w / s.tiles_x)
    };
    (x, rest % s.heads, rest / s.heads)
}

// SAFETY: plain old data with the layout of the kernel's `HopperSched` (six ints, then three
// device pointers, 8-byte aligned at offset 24).
unsafe impl DeviceRepr for HopperSched {}

/// Items of a walking launch of `items` items on `ctas` CTAs, each of `key_tiles` key tiles,
/// to share out by key tiles (the stream-K tail, kernels/fwd_hopper_kernel.cuh `walk_items`):
/// the last, partial round's `items mod ctas`, where it leaves enough idle to pay. Whole, that
/// round keeps its CTAs one item longer than the rest (n key tiles); shared, every CTA walks
/// ⌈T·n / G⌉ of them, and each piece pays a pipeline fill, a partial write and, for the last, a
/// merge, about a key tile's time. So the tail is shared where it shortens the launch by at
/// least [`STREAM_K_MIN_SAVED_TILES`] key tiles: n·(G − T) ≥ that many times G (at
/// 4,16,4096,128 on 132 SMs, T = 68 and n = 32 save 15.5 of 32 tiles). 0 where there is a
/// single round (fewer items than CTAs) or none partial, and where the tail has fewer key
/// tiles than there are CTAs (T·n < G: some ranges would be empty, which the kernel's walk
/// does not allow).
pub(crate) fn stream_k_tail(items: usize, ctas: usize, key_tiles: usize) -> usize {
    let tail = items % ctas.max(1);
    if items <= ctas || key_tiles * (ctas - tail) < STREAM_K_MIN_SAVED_TILES * ctas {
        0
    } else {
        stream_k_shareable(tail, ctas, key_tiles)
    }
}

/// `tail` where its key tiles cover every CTA's range (T·n ≥ G, so that none is empty), else 0.
fn stream_k_shareable(tail: usize, ctas: usize, key_tiles: usize) -> usize {
    if tail * key_tiles >= ctas {
        tail
    } else {
        0
    }
}

/// The key tiles a stream-K tail must save to be used ([`stream_k_tail`]): a model's margin
/// over the pieces' overhead, not a timed optimum.
pub(crate) const STREAM_K_MIN_SAVED_TILES: usize = 4;

/// The stream-K tail's workspace for a launch of `ctas` CTAs with `tail_items` shared items of
/// `block_m` rows and `consumers` consumer warpgroups: (partial rows of the bucket's width,
/// tickets). One partial per slot CTA + item (a CTA holds at most one piece of an item, and
/// the slots of different pieces differ), one ticket per (tail item, consumer warp).
pub(crate) fn tail_workspace(
    ctas: usize,
    tail_items: usize,
    block_m: usize,
    consumers: usize,
) -> (usize, usize) {
    ((ctas + tail_items) * block_m, tail_items * 4 * consumers)
}

/// The 1-D grid and the item walk of a Hopper launch whose classic grid is `grid`
/// (x = blocks, y = heads, z = batches) and whose items walk `key_tiles` key tiles each.
/// `walks`: whether the entry loops over items ([`catalog::hopper_persistent`]); `what` names
/// the entry for the error.
pub(crate) fn hopper_schedule(
    grid: (u32, u32, u32),
    walks: bool,
    schedule: TileSchedule,
    sm_count: usize,
    key_tiles: usize,
    what: &str,
) -> Result<((u32, u32, u32), HopperSched), KernelError> {
    let items = (grid.0 as u64) * (grid.1 as u64) * (grid.2 as u64);
    if items > i32::MAX as u64 {
        return Err(KernelError::IndexOverflow(
            "query blocks × heads × batches (the Hopper kernel's work items)",
        ));
    }
    let items = items as usize;
    let (ctas, tail_items) = match schedule {
        TileSchedule::Auto if walks => {
            let ctas = items.min(sm_count.max(1));
            (ctas, stream_k_tail(items, ctas, key_tiles))
        }
        TileSchedule::Auto | TileSchedule::Grid => (items, 0),
        TileSchedule::Persistent(n) | TileSchedule::StreamK(n) => {
            if !walks {
                return Err(KernelError::EngineUnavailable(format!(
                    "{what} runs one work item per CTA; a persistent launch needs a dense, non-causal launch of a tile that walks items (D = 128's 176-key tiles, FP8 up to D = 128): use TileSchedule::Auto or Grid"
                )));
            }
            let ctas = items.min(n.unwrap_or(sm_count).max(1));
            let tail = match schedule {
                TileSchedule::StreamK(_) => stream_k_shareable(items % ctas, ctas, key_tiles),
                _ => 0,
            };
            (ctas, tail)
        }
    };
    Ok((
        (ctas.max(1) as u32, 1, 1),
        HopperSched {
            tiles_x: grid.0 as i32,
            heads: grid.1 as i32,
            items: items as i32,
            lpt_heads: 1,
            splits: 1,
            tail_items: tail_items as i32,
            ws_o: 0,
            ws_ml: 0,
            counters: 0,
        },
    ))
}

/// Key splits of a Hopper sequence or feature launch of `items` work items whose longest
/// item walks `key_tiles` key tiles: the split count that fills one wave of one CTA per SM
/// (these CTAs take all of an SM's shared memory), ⌊SMs / items⌋, each split keeping
/// [`crate::config::MIN_TILES_PER_SPLIT`] tiles, at most [`crate::config::MAX_SPLITS`]; 1
/// when the items already cover the SMs. Chunked prefill is the case: a few query blocks of
/// new tokens against a long cache.
pub(crate) fn hopper_seq_splits(items: usize, key_tiles: usize, sm_count: usize) -> usize {
    crate::config::wave_splits(items, key_tiles, sm_count, 1)
}

/// The Hopper configs compiled for `head_dim`'s bucket, the default first.
pub fn hopper_configs_for(head_dim: usize) -> Vec<HopperTile> {
    catalog::fwd_bucket(head_dim)
        .map(|b| catalog::hopper_tiles(b).to_vec())
        .unwrap_or_default()
}

impl HopperTile {
    /// Looks a Hopper config up by [`HopperTile::name`] (`wg128_128_s2_pp`), among the f16/bf16
    /// and the FP8 tiles.
    pub fn by_name(name: &str) -> Result<Self, KernelError> {
        let mut all: Vec<HopperTile> = catalog::FWD_HEAD_DIM_BUCKETS
            .iter()
            .flat_map(|&b| catalog::hopper_tiles(b).iter().copied())
            .chain(
                catalog::HOPPER_FP8_HEAD_DIMS
                    .iter()
                    .flat_map(|&d| catalog::hopper_fp8_tiles(d).iter().copied()),
            )
            .collect();
        all.sort();
        all.dedup();
        all.iter()
            .find(|t| t.name() == name)
            .copied()
            .ok_or_else(|| KernelError::UnknownConfig {
                name: name.to_string(),
                known: all.iter().map(|t| t.name()).collect::<Vec<_>>().join(", "),
            })
    }

    /// The same geometry as an mma.sync-style [`KernelConfig`] (`block_m` rows, `block_n`,
    /// all warps, `stages`), for [`crate::LaunchInfo`].
    pub fn as_config(&self) -> KernelConfig {
        catalog::tile(
            self.block_m(),
            self.block_n,
            self.threads() / 32,
            self.stages,
        )
    }
}

/// Whether `Engine::Auto` takes the Hopper kernel for `problem` on an sm_90 device: not when
/// a launch of at most 64 query rows would split its keys on the mma.sync kernel
/// (`mma_config` is its default config; longer ones split on the Hopper engine), nor when the
/// caller pinned an mma.sync config or a split count other than 1. Problems with features
/// (window, softcap, ALiBi, sinks), which both engines run, take it unless they are
/// decode-like (one 64-row block per head) and unmasked, where the mma.sync general entries
/// split the keys and the Hopper ones do not (a decode step over several rows of one head
/// with ALiBi or sinks would otherwise run one CTA per head; one row per head runs the
/// decode kernel).
pub(crate) fn auto_prefers_hopper(
    problem: &Problem,
    mma_config: &KernelConfig,
    pinned_config: bool,
    splits: Option<usize>,
    sm_count: usize,
) -> bool {
    if pinned_config || splits.is_some_and(|n| n != 1) {
        return false;
    }
    let s = problem.shape();
    let d = s.head_dim();
    if !problem.features().is_empty() {
        if s.q_len() > 64 || problem.causal() != Causal::None {
            return true;
        }
        let Ok(feat) = crate::launch::feature_config(d) else {
            return true;
        };
        let ctas = s.q_len().div_ceil(feat.block_m) * s.batch() * s.q_heads();
        let key_tiles = s.kv_len().div_ceil(feat.block_n);
        return crate::config::one_wave_splits(ctas, key_tiles, sm_count) == 1;
    }
    // Over 64 query rows, or causal, the Hopper engine splits small grids itself
    // (`plan_hopper` runs them in its sequence entries): the mma.sync entries' 64-row
    // blocks suit a short unmasked launch better.
    if s.q_len() > 64
        || short_causal_split(
            problem.causal() != Causal::None,
            s.batch() * s.q_heads(),
            s.kv_len(),
            sm_count,
        )
    {
        return true;
    }
    let ctas = s.q_len().div_ceil(mma_config.block_m) * s.batch() * s.q_heads();
    let key_tiles = s.kv_len().div_ceil(mma_config.block_n);
    choose_splits(mma_config, d, ctas, key_tiles, sm_count) == 1
}

/// Whether `Engine::Auto` gives a launch of at most 64 query rows (per sequence) to the
/// Hopper engine: when it is causal and its `items` (one query block per sequence and head)
/// over `keys` keys would split there ([`hopper_seq_splits`] on the 128-key tiles). The
/// mma.sync general entries, whose 64-row blocks suit such launches, cannot split a masked
/// one, and its plain split entries were 1.3× slower (docs/PERF.md, run 213). Speculative
/// decoding's verify step (a few tokens per sequence against a long cache) is the case.
pub(crate) fn short_causal_split(causal: bool, items: usize, keys: usize, sm_count: usize) -> bool {
    causal && hopper_seq_splits(items, keys.div_ceil(128), sm_count) > 1
}

/// Whether a dense launch that would split its keys (`plan_hopper`'s `dense_split`) runs
/// faster unsplit, on the default tiles: where the bucket's key-split tile's 64-row blocks
/// fill more than half the SMs, at D ≤ 64 over any keys and at D = 128 up to 4096 (at 8192
/// its split entries' 176-key tile is 1–4 % faster). H200, runs 339–340, split → key split,
/// µs: 1,4,2048,64 31.6 → 13.7 (causal 32.0 → 13.9), 1,4,2048,128 41.5–41.9 → 24.7–24.9,
/// 1,2,4096,64 37.5 → 26.8–27.0, 512 queries × 8192 keys × 16 heads at D = 64 67.9 → 49.9
/// (causal 68.5 → 51.0); with fewer rows (256 × 8192 × 16 heads: 64 key-split blocks) the
/// split stays 1.08× (D = 64) to 1.5× (D = 128) faster, as chunked prefill needs.
pub(crate) fn key_split_fills(
    bucket: usize,
    q_len: usize,
    kv_len: usize,
    batch_heads: usize,
    sm_count: usize,
) -> bool {
    catalog::hopper_kv_split_tile(bucket).is_some_and(|kv| {
        2 * q_len.div_ceil(kv.block_m()) * batch_heads > sm_count
            && (bucket <= 64 || kv_len <= 4096)
    })
}

/// A Hopper launch's asked key splits, if in 1..=[`crate::config::MAX_SPLITS`]; otherwise the
/// typed error (f16/bf16 and FP8 launches alike).
pub(crate) fn checked_splits(splits: Option<usize>) -> Result<Option<usize>, KernelError> {
    match splits {
        Some(0) => Err(KernelError::UnsupportedFeature(
            "0 key splits (use 1 for none, or leave it unset)".into(),
        )),
        Some(n) if n > crate::config::MAX_SPLITS => Err(KernelError::UnsupportedFeature(format!(
            "{n} key splits (at most {})",
            crate::config::MAX_SPLITS
        ))),
        asked => Ok(asked),
    }
}

/// `asked` if it is one of `tiles`, the first of `tiles` for `None`; otherwise the typed error
/// naming the valid ones (`what` says for which problem).
pub(crate) fn pick_tile(
    tiles: &[HopperTile],
    asked: Option<HopperTile>,
    what: &str,
) -> Result<HopperTile, KernelError> {
    match asked {
        None => tiles
            .first()
            .copied()
            .ok_or_else(|| KernelError::UnknownConfig {
                name: format!("a Hopper tile ({what})"),
                known: "none".into(),
            }),
        Some(t) if tiles.contains(&t) => Ok(t),
        Some(t) => Err(KernelError::UnknownConfig {
            name: format!("{} ({what})", t.name()),
            known: tiles
                .iter()
                .map(|t| t.name())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// How a Hopper forward entry spreads a row's keys over online-softmax states, for attn-ref's
/// emulation (the FA3 rule's `emu` must round P in the kernel's frames): one state, but for
/// the key-split tiles ([`HopperTile::kv_split`]), whose two consumers take alternate key
/// tiles and each round P against its own running max (kernels/fwd_hopper_kernel.cuh,
/// KVSPLIT). That is [`KeyStates::Split`] over tiles of two stages, one stage per worker.
/// `kernel`: the entry's name ([`crate::LaunchInfo::kernel`]). A one-state emulation of a
/// key-split launch missed the rule by 3 % once (run 346, D = 8, one element of 2464).
pub fn hopper_key_states(kernel: &str) -> KeyStates {
    if !kernel.starts_with("attn_fwdh") {
        return KeyStates::One;
    }
    catalog::FWD_HEAD_DIM_BUCKETS
        .iter()
        .filter_map(|&b| catalog::hopper_kv_split_tile(b))
        .chain(
            catalog::HOPPER_FP8_HEAD_DIMS
                .iter()
                .flat_map(|&d| catalog::hopper_fp8_tiles(d).iter().copied())
                .filter(|t| t.kv_split),
        )
        .find(|t| kernel.contains(&format!("_{}_", t.name())))
        .map_or(KeyStates::One, |t| KeyStates::Split {
            tile: 2 * t.block_n,
            splits: 1,
            workers: 2,
        })
}

/// A validated Hopper launch: geometry and scalars (pure, testable without a device).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HopperPlan {
    pub tile: HopperTile,
    /// Which entries of the tile run it.
    pub variant: HopperVariant,
    pub bucket: usize,
    /// The 1-D grid launched and the kernel's item walk over `grid` ([`hopper_schedule`]).
    pub launch_grid: (u32, u32, u32),
    pub sched: HopperSched,
    /// The kernel's `seqs.flat_block_m`: the block's rows on a flat grid, else 0.
    pub flat_block_m: i32,
    pub smem_bytes: u32,
    pub params: FwdParams,
}

#[cfg(test)]
impl HopperPlan {
    /// The classic grid the items cover: (blocks, heads, batches).
    fn grid(&self) -> (u32, u32, u32) {
        let s = self.sched;
        let xy = (s.tiles_x * s.heads) as u32;
        (s.tiles_x as u32, s.heads as u32, s.items as u32 / xy.max(1))
    }
}

/// What a sequence layout ([`crate::seqs`]) tells the Hopper plan.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SeqLaunch {
    /// Packed queries: the rows of the packed tensor (`total_q`), for the flat grid.
    pub packed_total_q: Option<usize>,
    /// A paged cache's page size, which sizes its TMA boxes
    /// ([`catalog::hopper_seq_default_tile`]).
    pub page_size: Option<usize>,
    /// The most keys one sequence can have, for the split count: dense keys' Sk, a paged
    /// cache's capacity, packed keys' `total_k`.
    pub keys_bound: usize,
}

/// `sequences`: a varlen / KV-cache launch, which runs in the `_seq` or `_feat` entries
/// ([`HopperVariant`]); packed queries run a flat grid ([`flat_grid_x`]). `splits`: key
/// splits (`None`: [`hopper_seq_splits`]); only the `_seq` / `_feat` entries split, so a
/// dense launch without features that splits runs in those (a pinned tile must have them).
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_hopper(
    problem: &Problem,
    tile: Option<HopperTile>,
    max_smem: usize,
    seq_launch: Option<SeqLaunch>,
    sm_count: usize,
    schedule: TileSchedule,
    splits: Option<usize>,
) -> Result<HopperPlan, KernelError> {
    check_sizes(problem)?;
    let s = problem.shape();
    let bucket = crate::config::bucket_for(s.head_dim())?;
    let causal = problem.causal() != Causal::None;
    // A dense launch without features splits its keys in the `_seq` / `_feat` entries (the
    // dense ones do not): when the caller asks for splits, or, unpinned, when a grid of more
    // than 64 query rows, or a causal one, leaves SMs idle over long keys (chunked prefill
    // against a dense cache; the sequence entries' default tile and heuristic decide).
    let dense_keys = seq_launch.is_none(); // the caller's: every item has kv_len keys
    let dense_split = dense_keys
        && problem.features().is_empty()
        && match splits {
            Some(n) => n > 1,
            None => {
                tile.is_none()
                    && (s.q_len() > 64 || causal)
                    && !key_split_fills(
                        bucket,
                        s.q_len(),
                        s.kv_len(),
                        s.batch() * s.q_heads(),
                        sm_count,
                    )
                    && catalog::hopper_seq_default_tile(bucket, s.kv_len(), causal, None, true)
                        .is_some_and(|t| {
                            let items = s.q_len().div_ceil(t.block_m()) * s.batch() * s.q_heads();
                            hopper_seq_splits(items, s.kv_len().div_ceil(t.block_n), sm_count) > 1
                        })
            }
        };
    let seq_launch = seq_launch.or(dense_split.then_some(SeqLaunch {
        keys_bound: s.kv_len(),
        ..SeqLaunch::default()
    }));
    let sequences = seq_launch.is_some();
    // A problem with a sequence layout, ALiBi or sinks runs the wide tile's `_seq` / `_feat`
    // entries where the dense default would be wide, else the bucket's feature tile; others
    // the default for the grid's size. Softcap and windows keep the feature tile: on the
    // wide tile softcap cost 1.33–1.44× plain against 1.27–1.28× on 128 keys, and a window
    // skips less of 176-key tiles (0.29× against 0.27×; run 127, docs/PERF.md). A pinned tile
    // must have the entries the launch needs.
    let features = !problem.features().is_empty();
    let wide_ok = problem.features().softcap.is_none() && problem.features().window.is_none();
    let asked = match tile {
        None if features && !wide_ok => catalog::hopper_feature_tile(bucket),
        None if features || sequences => catalog::hopper_seq_default_tile(
            bucket,
            s.kv_len(),
            causal,
            seq_launch.and_then(|l| l.page_size),
            dense_keys,
        ),
        None => catalog::hopper_default_tile(
            bucket,
            s.q_len(),
            s.kv_len(),
            causal,
            s.batch() * s.q_heads(),
            sm_count,
        ),
        t => t,
    };
    let tile = pick_tile(
        catalog::hopper_tiles(bucket),
        asked,
        &format!("head_dim {}", s.head_dim()),
    )?;
    // The feature entries run sequence layouts too; a tile with `_seq` entries takes those.
    let variant = if !sequences && !features {
        HopperVariant::Dense
    } else if !features && HopperVariant::Seqs.is_built(bucket, &tile) {
        HopperVariant::Seqs
    } else {
        HopperVariant::Features
    };
    if !variant.is_built(bucket, &tile) {
        let with: Vec<String> = catalog::hopper_tiles(bucket)
            .iter()
            .filter(|t| variant.is_built(bucket, t))
            .map(|t| t.name())
            .collect();
        return Err(KernelError::EngineUnavailable(format!(
            "the Hopper engine runs {} only in tile{} {} (asked: {}); leave the tile unset",
            if variant == HopperVariant::Dense {
                "dense problems".to_string()
            } else if features {
                crate::launch::feature_names(problem)
            } else if dense_split {
                "split-KV".to_string()
            } else {
                "varlen batches and KV-cache lengths".to_string()
            },
            if with.len() == 1 { "" } else { "s" },
            with.join(", "),
            tile.name()
        )));
    }
    let smem = catalog::hopper_smem_bytes(&tile, bucket);
    if smem > max_smem {
        return Err(KernelError::ConfigTooLarge {
            config: tile.name(),
            smem,
            limit: max_smem,
        });
    }
    // Packed queries: one flat x over every sequence's query blocks (kernels/seqs.cuh,
    // `flat_query_block`), instead of B × the longest sequence's blocks.
    let (grid, flat_block_m) = match seq_launch.and_then(|l| l.packed_total_q) {
        Some(total_q) => (
            (
                flat_grid_x(total_q, s.batch(), s.q_len(), tile.block_m()) as u32,
                s.q_heads() as u32,
                1,
            ),
            tile.block_m() as i32,
        ),
        None => (
            (
                s.q_len().div_ceil(tile.block_m()) as u32,
                s.q_heads() as u32,
                s.batch() as u32,
            ),
            0,
        ),
    };
    let walks = catalog::hopper_persistent(bucket, &tile, causal, variant, false);
    let (mut launch_grid, mut sched) = hopper_schedule(
        grid,
        walks,
        schedule,
        sm_count,
        s.kv_len().div_ceil(tile.block_n),
        &tile.name(),
    )?;
    if causal && flat_block_m == 0 {
        sched.lpt_heads = causal_lpt_heads(bucket, s.kv_len(), 2);
    }
    let splits = match checked_splits(splits)? {
        Some(n) => n,
        None if variant == HopperVariant::Dense => 1,
        None => {
            // Keys one item can see: the longest sequence's, or a window's span over the block.
            let mut keys = seq_launch.map_or(s.kv_len(), |l| l.keys_bound);
            if let Some((left, right)) = problem.features().window {
                if left >= 0 && right >= 0 {
                    keys = keys.min(left as usize + right as usize + tile.block_m());
                }
            }
            hopper_seq_splits(sched.items as usize, keys.div_ceil(tile.block_n), sm_count)
        }
    };
    if splits > 1 {
        sched.splits = splits as i32;
        launch_grid.1 = splits as u32;
    }
    Ok(HopperPlan {
        tile,
        variant,
        bucket,
        launch_grid,
        sched,
        flat_block_m,
        smem_bytes: smem as u32,
        params: fwd_params(problem, 1),
    })
}

/// grid.x of a Hopper launch over packed queries (kernels/seqs.cuh, `flat_query_block`): an
/// upper bound of the query blocks of all sequences, Σ ceil(min(len_b, q_len) / BM), from
/// what the host knows without reading the device-resident `cu_seqlens_q`: the rows `total_q`
/// need at most ceil(total_q / BM) + B − 1 blocks (each sequence wastes less than one), and
/// the batch grid's B · ceil(q_len / BM). CTAs past the last block exit at once. At least 1.
pub(crate) fn flat_grid_x(total_q: usize, batch: usize, q_len: usize, block_m: usize) -> usize {
    let packed = total_q.div_ceil(block_m) + batch.saturating_sub(1);
    let batch_grid = q_len.div_ceil(block_m).saturating_mul(batch);
    packed.min(batch_grid).max(1)
}

/// Columns of one f16/bf16 TMA box: 64 two-byte elements, one 128-byte swizzle span.
pub(crate) const TMA_BOX_COLS: usize = 64;

/// Element type of a TMA tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TmaElem {
    F16,
    Bf16,
    /// FP8 codes (TMA moves bytes).
    E4m3,
}

impl From<Elem> for TmaElem {
    fn from(e: Elem) -> Self {
        match e {
            Elem::F16 => TmaElem::F16,
            Elem::Bf16 => TmaElem::Bf16,
        }
    }
}

/// A rank-4 TMA tensor `(D, S, H, B)`: sizes, byte strides of S, H and B, and the box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TmaGeometry {
    pub dims: [u64; 4],
    pub strides: [u64; 3],
    pub box_dim: [u32; 4],
}

/// The TMA geometry of a `[B, H, S, D]` tensor (dims in that order) with element strides
/// `strides`, read in boxes of `box_cols` × `box_rows`. TMA wants every byte stride a multiple
/// of 16 below 2^40 (the launcher's tensor checks already ask 16 bytes); the stride of a dim of
/// size 1 is never used and is replaced by a valid one.
pub(crate) fn tma_geometry(
    dims: [usize; 4],
    strides: Strides,
    elem_bytes: usize,
    box_cols: usize,
    box_rows: usize,
) -> Result<TmaGeometry, KernelError> {
    let [b, h, s, d] = dims;
    let mut st = [0u64; 3];
    for (i, (n, elems)) in [(s, strides.row), (h, strides.head), (b, strides.batch)]
        .into_iter()
        .enumerate()
    {
        let bytes = (elems as u64).saturating_mul(elem_bytes as u64);
        st[i] = if n <= 1 { 16 } else { bytes };
        if st[i] % 16 != 0 || st[i] >= 1 << 40 {
            return Err(KernelError::Misaligned {
                tensor: "tensor",
                reason: format!(
                    "a stride of {bytes} bytes; TMA needs multiples of 16 bytes below 2^40"
                ),
            });
        }
    }
    if [b, h, s, d].iter().any(|&n| n as u64 > u32::MAX as u64) {
        return Err(KernelError::IndexOverflow(
            "tensor dims (TMA takes 32-bit sizes)",
        ));
    }
    Ok(TmaGeometry {
        dims: [d as u64, s as u64, h as u64, b as u64],
        strides: st,
        box_dim: [box_cols as u32, box_rows as u32, 1, 1],
    })
}

/// One encoded TMA descriptor, passed by value as a `__grid_constant__` kernel parameter.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct TmaDescArg(sys::CUtensorMap);

// SAFETY: 128 bytes of plain data (`CUtensorMap`), copied by the driver into the kernel's
// `const __grid_constant__ attn::TmaDesc` parameter of the same size.
unsafe impl DeviceRepr for TmaDescArg {}

/// Encodes the descriptor of a tensor at device address `addr`. The swizzle is the span of
/// one box row (128 or 64 bytes), the layout the kernels' wgmma descriptors read.
pub(crate) fn encode_tma(
    geometry: &TmaGeometry,
    addr: u64,
    elem: TmaElem,
) -> Result<TmaDescArg, KernelError> {
    let (dtype, bytes) = match elem {
        TmaElem::F16 => (sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2),
        TmaElem::Bf16 => (
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            2,
        ),
        TmaElem::E4m3 => (sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8, 1),
    };
    let swizzle = match geometry.box_dim[0] * bytes {
        128 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        64 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        other => {
            return Err(KernelError::InvalidTensor {
                tensor: "TMA box",
                reason: format!("box rows of {other} bytes; the kernels' swizzles take 64 or 128"),
            })
        }
    };
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    let element_strides = [1u32; 4];
    // SAFETY: a host-side encoding call: `map` is a valid CUtensorMap to write, the four
    // arrays have the rank's lengths (4, 3, 4, 4) and outlive the call, and `addr` is the
    // start of a device allocation whose extent the launcher checked against these dims and
    // strides (the driver only records it; nothing is read or written here).
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            dtype,
            4,
            addr as *mut std::ffi::c_void,
            geometry.dims.as_ptr(),
            geometry.strides.as_ptr(),
            geometry.box_dim.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .map_err(|source| KernelError::Driver {
        context: "encoding a TMA descriptor (cuTensorMapEncodeTiled)",
        source,
    })?;
    Ok(TmaDescArg(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Layout;
    use attn_ref::AttnShape;

    #[test]
    fn key_split_entries_emulate_one_state_per_consumer() {
        for d in catalog::FWD_HEAD_DIM_BUCKETS {
            let unit = crate::launch::hopper_unit(crate::Dtype::F16, d);
            for tile in catalog::hopper_tiles(d) {
                for variant in catalog::HopperVariant::ALL {
                    let name = catalog::hopper_entry_name(&unit, tile, true, variant);
                    let want = if tile.kv_split {
                        KeyStates::Split {
                            tile: 2 * tile.block_n,
                            splits: 1,
                            workers: 2,
                        }
                    } else {
                        KeyStates::One
                    };
                    assert_eq!(hopper_key_states(&name), want, "{name}");
                }
            }
        }
        for d in catalog::HOPPER_FP8_HEAD_DIMS {
            let unit = crate::fp8::hopper_fp8_unit(crate::Dtype::Bf16, d);
            for tile in catalog::hopper_fp8_tiles(d) {
                let name = catalog::hopper_fp8_entry_name(&unit, tile, false, false);
                let split = matches!(hopper_key_states(&name), KeyStates::Split { .. });
                assert_eq!(split, tile.kv_split, "{name}");
            }
        }
        // Other engines' entries: one state (decode has its own, `decode_key_states`).
        for name in [
            "attn_fwd_f16_d64_bm64_bn64_w4_s2_full_split",
            "attn_dec_f16_d64_r1",
        ] {
            assert_eq!(hopper_key_states(name), KeyStates::One, "{name}");
        }
    }

    /// The device's `flat_query_block` (kernels/seqs.cuh) in scalar form: CTA x's
    /// (sequence, block in it, the sequence's block count), None past the last block.
    fn flat_query_block(
        cu_q: &[i32],
        q_len: usize,
        bm: usize,
        x: usize,
    ) -> Option<(usize, usize, usize)> {
        let total = *cu_q.last()?;
        let mut base = 0;
        for b in 0..cu_q.len() - 1 {
            let a = cu_q[b].clamp(0, total);
            let len = (cu_q[b + 1].clamp(a, total) - a) as usize;
            let n = len.min(q_len).div_ceil(bm);
            if x < base + n {
                return Some((b, x - base, n));
            }
            base += n;
        }
        None
    }

    #[test]
    fn the_flat_grid_covers_every_query_block_once() {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(16);
        for case in 0..400 {
            let batch = rng.random_range(1..=70);
            let bm = [64, 128, 192][case % 3];
            let lens: Vec<usize> = (0..batch)
                .map(|_| match rng.random_range(0..4) {
                    0 => 0,
                    1 => rng.random_range(1..=bm),
                    _ => rng.random_range(1..=5000),
                })
                .collect();
            let longest = lens.iter().copied().max().unwrap_or(0);
            // The grid's q_len is the longest length, or a smaller cap (rows past it are
            // not computed on either grid).
            let q_len = if case % 5 == 0 { longest / 2 } else { longest };
            let mut cu = vec![0i32];
            for &l in &lens {
                cu.push(cu.last().unwrap() + l as i32);
            }
            let total = *cu.last().unwrap() as usize;
            let grid = flat_grid_x(total, batch, q_len, bm);
            let mut seen = vec![Vec::new(); batch];
            for x in 0..grid {
                if let Some((b, local, n)) = flat_query_block(&cu, q_len, bm, x) {
                    assert_eq!(n, lens[b].min(q_len).div_ceil(bm));
                    seen[b].push(local);
                }
            }
            for (b, blocks) in seen.iter().enumerate() {
                let want: Vec<usize> = (0..lens[b].min(q_len).div_ceil(bm)).collect();
                assert_eq!(
                    blocks, &want,
                    "case {case}: sequence {b} of {lens:?}, grid {grid}"
                );
            }
            // Never more CTAs than the batch grid would launch.
            assert!(grid <= q_len.div_ceil(bm).max(1) * batch);
        }
        // Empty batches still launch one CTA, which finds no block.
        assert_eq!(flat_grid_x(0, 4, 0, 128), 1);
        assert_eq!(flat_query_block(&[0, 0, 0], 0, 128, 0), None);
    }

    #[test]
    fn paged_boxes_divide_the_tile_and_the_page() {
        use crate::catalog::paged_box_rows;
        let tiles = crate::catalog::FWD_HEAD_DIM_BUCKETS
            .iter()
            .flat_map(|&b| crate::catalog::hopper_tiles(b));
        for tile in tiles {
            let bn = tile.block_n;
            for page in (16..=512).step_by(16) {
                let rows = paged_box_rows(bn, page);
                assert!(rows >= 16 && rows % 16 == 0, "BN {bn}, page {page}: {rows}");
                assert_eq!(bn % rows, 0);
                assert_eq!(page % rows, 0);
                // At most 16 boxes: the kernel gives one producer lane to each.
                assert!(bn / rows <= 16);
            }
        }
        assert_eq!(paged_box_rows(128, 16), 16);
        assert_eq!(paged_box_rows(128, 256), 128);
        assert_eq!(paged_box_rows(176, 64), 16);
    }

    #[test]
    fn geometry_of_both_layouts() {
        let dims = [2, 8, 100, 128];
        let g = tma_geometry(dims, Layout::Bhsd.strides(dims), 2, 64, 128).unwrap();
        assert_eq!(g.dims, [128, 100, 8, 2]);
        assert_eq!(g.strides, [256, 256 * 100, 256 * 100 * 8]);
        assert_eq!(g.box_dim, [64, 128, 1, 1]);
        let g = tma_geometry(dims, Layout::Bshd.strides(dims), 2, 64, 64).unwrap();
        assert_eq!(g.strides, [256 * 8, 256, 256 * 8 * 100]);
        // A size-1 batch never uses its stride, whatever it is.
        let mut st = Layout::Bhsd.strides([1, 8, 100, 128]);
        st.batch = 3;
        assert!(tma_geometry([1, 8, 100, 128], st, 2, 64, 64).is_ok());
        st.head = 3;
        assert!(matches!(
            tma_geometry([1, 8, 100, 128], st, 2, 64, 64),
            Err(KernelError::Misaligned { .. })
        ));
    }

    #[test]
    fn plans_pick_the_bucket_default_and_refuse_foreign_tiles() {
        let p = Problem::new(
            AttnShape::new(2, 4, 2, 300, 500, 96).unwrap(),
            Causal::TopLeft,
        );
        let plan = plan_hopper(&p, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap();
        assert_eq!(plan.bucket, 96);
        assert_eq!(plan.tile, catalog::hopper_tiles(96)[0]);
        assert_eq!(plan.grid(), (3, 4, 2));
        assert_eq!(
            plan.smem_bytes as usize,
            catalog::hopper_smem_bytes(&plan.tile, 96)
        );
        let wide = catalog::hopper_tiles(256)[0];
        assert!(!catalog::hopper_tiles(96).contains(&wide));
        assert!(matches!(
            plan_hopper(&p, Some(wide), 232_448, None, 132, TileSchedule::Auto, None),
            Err(KernelError::UnknownConfig { .. })
        ));
        assert!(matches!(
            plan_hopper(&p, None, 100_000, None, 132, TileSchedule::Auto, None),
            Err(KernelError::ConfigTooLarge { .. })
        ));
    }

    #[test]
    fn every_hopper_tile_fits_and_names_round_trip() {
        for &b in &catalog::FWD_HEAD_DIM_BUCKETS {
            let tiles = catalog::hopper_tiles(b);
            assert!(!tiles.is_empty(), "bucket {b} has no Hopper tile");
            for t in tiles {
                assert!(catalog::hopper_smem_bytes(t, b) <= catalog::Arch::Sm90a.max_smem());
                assert_eq!(HopperTile::by_name(&t.name()).unwrap(), *t);
                assert_eq!(t.block_n % 16, 0, "P·V k-steps are 16 keys");
            }
        }
        assert!(HopperTile::by_name("wg128_7_s2").is_err());
    }

    #[test]
    fn every_fp8_tile_is_found_by_name() {
        for d in catalog::HOPPER_FP8_HEAD_DIMS {
            for t in catalog::hopper_fp8_tiles(d) {
                assert_eq!(
                    HopperTile::by_name(&t.name()).ok(),
                    Some(*t),
                    "{}",
                    t.name()
                );
            }
        }
        assert!(HopperTile::by_name("wg128_200_s2_ia").is_err());
    }

    #[test]
    fn three_consumer_tiles_take_192_rows_and_512_threads() {
        let t = HopperTile::by_name("wg192_128_s2_pp_ia").unwrap();
        assert_eq!((t.consumers, t.block_m(), t.threads()), (3, 192, 512));
        assert_eq!(t.as_config().block_m, 192);
        let p = Problem::new(
            AttnShape::new(2, 4, 4, 4096, 4096, 64).unwrap(),
            Causal::None,
        );
        let plan = plan_hopper(&p, Some(t), 232_448, None, 132, TileSchedule::Auto, None).unwrap();
        assert_eq!(plan.grid(), (22, 4, 2), "4096 rows in blocks of 192");
        // Q is 192 rows of 128 bytes; two stages of 128-key K and V tiles; Q's full and
        // empty barriers and four per stage.
        assert_eq!(
            plan.smem_bytes as usize,
            1024 + 192 * 128 + 2 * 2 * 128 * 128 + 8 * 10
        );
        // Only D ≤ 64 has the 160-register budget for them.
        assert!(catalog::hopper_tiles(128).iter().all(|t| t.consumers == 2));
        assert!(catalog::hopper_fp8_tiles(128)
            .iter()
            .all(|t| t.consumers == 2));
    }

    /// Runs 336–338 (H200): causal grids with the key-split tile and a 128-row tile pinned;
    /// `(batch × heads, S, key split faster)` per family. The model picks the faster one on
    /// every grid but FP8 D = 128 at 24 × 640 (the key split 3 % slower).
    #[test]
    fn causal_launches_take_the_key_split_where_runs_336_to_338_timed_it_faster() {
        let timed: [(usize, usize, [bool; 4]); 15] = [
            // (bh, S, [f16 D64, FP8 D64, FP8 D128, f16 D128])
            (16, 1024, [true, true, true, false]),
            (4, 4096, [true, true, true, false]),
            (8, 2048, [true, true, true, false]),
            (12, 1024, [true, true, true, false]),
            (16, 768, [true, true, true, false]),
            (32, 512, [false, false, false, false]),
            (48, 512, [false, false, false, false]),
            (16, 1280, [false, false, false, false]),
            (16, 640, [true, true, true, false]),
            (24, 640, [false, false, false, false]),
            (8, 512, [true, true, true, true]),
            (8, 1024, [true, true, true, true]),
            (16, 512, [true, true, true, true]),
            (8, 640, [true, true, true, true]),
            (4, 2048, [true, true, true, true]),
        ];
        for (bh, s, faster) in timed {
            let f16 = |d| {
                catalog::hopper_default_tile(d, s, s, true, bh, 132)
                    .unwrap()
                    .kv_split
            };
            let fp8 = |d| {
                catalog::hopper_fp8_default_tile(d, s, s, true, bh, 132)
                    .unwrap()
                    .kv_split
            };
            let picked = [f16(64), fp8(64), fp8(128), f16(128)];
            let want = if (bh, s) == (24, 640) {
                [false, false, true, false] // the model's one miss, 3 %
            } else {
                faster
            };
            assert_eq!(picked, want, "{bh} x {s}");
        }
    }

    /// Runs 339–340: dense launches whose key-split blocks fill more than half the SMs run
    /// unsplit (on the key-split tile here), shorter query ranges against long keys still split.
    #[test]
    fn dense_launches_split_keys_only_where_the_key_split_tile_leaves_sms_idle() {
        let plan = |hq, sq, sk, d, causal| {
            let c = if causal {
                Causal::BottomRight
            } else {
                Causal::None
            };
            let p = Problem::new(AttnShape::new(1, hq, hq, sq, sk, d).unwrap(), c);
            plan_hopper(&p, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap()
        };
        for causal in [false, true] {
            for (hq, sq, sk, d) in [
                (4, 2048, 2048, 64),
                (4, 2048, 2048, 128),
                (2, 4096, 4096, 64),
                (2, 4096, 4096, 128),
                (1, 8192, 8192, 64),
                (16, 512, 8192, 64),
                (8, 1024, 8192, 64),
            ] {
                let p = plan(hq, sq, sk, d, causal);
                assert!(
                    p.variant == HopperVariant::Dense && p.tile.kv_split,
                    "{hq},{sq}x{sk},{d} causal {causal}: {} {:?}",
                    p.tile.name(),
                    p.variant
                );
            }
            for (hq, sq, sk, d) in [
                (16, 256, 8192, 64),
                (16, 256, 8192, 128),
                (16, 512, 8192, 128),
                (16, 128, 16384, 128),
            ] {
                let p = plan(hq, sq, sk, d, causal);
                assert_ne!(
                    p.variant,
                    HopperVariant::Dense,
                    "{hq},{sq}x{sk},{d} causal {causal}"
                );
            }
        }
    }

    #[test]
    fn small_d64_grids_take_the_128_row_or_the_key_split_tile() {
        let tile = |b, h, sq| {
            let p = Problem::new(AttnShape::new(b, h, h, sq, sq, 64).unwrap(), Causal::None);
            plan_hopper(&p, None, 232_448, None, 132, TileSchedule::Auto, None)
                .unwrap()
                .tile
        };
        let wide = catalog::hopper_tiles(64)[0];
        assert_eq!(wide.consumers, 3);
        // 4,16,4096: 1408 CTAs of 192 rows (11 waves) beat 2048 of 128 (16 waves).
        assert_eq!(tile(4, 16, 4096), wide);
        // 2,8,2048 and 4,8,512: both fit in the same waves; 128 rows finish first.
        for (b, h, sq) in [(2, 8, 2048), (4, 8, 512)] {
            let t = tile(b, h, sq);
            assert_eq!(
                (t.consumers, t.block_n, t.pingpong, t.intra, t.kv_split),
                (2, 128, true, true, false),
                "{b},{h},{sq}"
            );
        }
        // S = 512 at up to 66 blocks of 128 rows (half the SMs): the key-split tile, 64 rows.
        for (b, h, sq) in [(1, 8, 512), (2, 8, 512), (1, 33, 256)] {
            let t = tile(b, h, sq);
            assert_eq!(t, catalog::HOPPER_KV_SPLIT_64, "{b},{h},{sq}");
            assert_eq!(t.block_m(), 64);
        }
        assert!(!tile(1, 67, 128).kv_split);
        assert_eq!(
            catalog::hopper_kv_split_tile(128),
            Some(catalog::HOPPER_KV_SPLIT_128)
        );
        // Its plan: 64-row blocks; Q, four stages of 128-key K and V, the exchange buffer (O's
        // 32 floats and m, l per consumer thread) and the barriers.
        let p = Problem::new(AttnShape::new(1, 8, 8, 512, 512, 64).unwrap(), Causal::None);
        let plan = plan_hopper(&p, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap();
        assert_eq!(plan.grid(), (8, 8, 1));
        assert_eq!(
            plan.smem_bytes as usize,
            1024 + 64 * 128 + 2 * 4 * 128 * 128 + 36 * 128 * 4 + 8 * 18
        );
        // 8,16,1024: 768 CTAs of 192 rows (6 waves) beat 1024 of 128 (8 waves; run 138).
        assert_eq!(tile(8, 16, 1024), wide);
    }

    #[test]
    fn d128_takes_176_keys_without_a_mask_where_its_last_tile_is_nearly_full_and_pingpong_under_one(
    ) {
        let tile = |sk, causal| {
            let p = Problem::new(AttnShape::new(4, 16, 16, 4096, sk, 128).unwrap(), causal);
            plan_hopper(&p, None, 232_448, None, 132, TileSchedule::Auto, None)
                .unwrap()
                .tile
        };
        let narrow = catalog::HOPPER_128_PINGPONG;
        let wide = catalog::HOPPER_D128_WIDE;
        assert!(catalog::hopper_tiles(128).contains(&wide));
        assert_eq!((wide.block_n, wide.pingpong, wide.intra), (176, true, true));
        // 176 keys where the last key tile is nearly full (runs 222–223).
        assert_eq!(tile(16384, Causal::None), wide);
        assert_eq!(tile(8192, Causal::None), wide);
        assert_eq!(tile(6 * 176, Causal::None), wide);
        assert_eq!(tile(4096, Causal::None), narrow);
        assert_eq!(tile(2048, Causal::None), narrow);
        assert_eq!(tile(catalog::HOPPER_WIDE_MIN_KEYS, Causal::None), narrow);
        assert_eq!(tile(512, Causal::None), narrow);
        assert!(!catalog::hopper_wide_pays(
            catalog::HOPPER_WIDE_MIN_KEYS - 1
        ));
        // A causal mask keeps 128 keys, with ping-pong as every narrow launch (runs 134–135).
        assert_eq!(
            (narrow.block_n, narrow.pingpong, narrow.intra),
            (128, true, true)
        );
        assert_eq!(tile(4096, Causal::TopLeft), narrow);
        assert_eq!(tile(4096, Causal::BottomRight), narrow);
        assert_eq!(tile(512, Causal::BottomRight), narrow);
        // Other buckets keep their first tile.
        let p = Problem::new(
            AttnShape::new(4, 16, 16, 4096, 4096, 96).unwrap(),
            Causal::None,
        );
        assert_eq!(
            plan_hopper(&p, None, 232_448, None, 132, TileSchedule::Auto, None)
                .unwrap()
                .tile,
            catalog::hopper_tiles(96)[0]
        );
        // ALiBi and sinks follow the dense rule too, in the wide tile's `_feat` entries (and
        // keep the feature tile under a mask); softcap and windows keep the feature tile; a
        // sequence layout alone takes the wide tile's `_seq` entries.
        let plain = Problem::new(
            AttnShape::new(4, 16, 16, 4096, 16384, 128).unwrap(),
            Causal::None,
        );
        let a = plain.with_sinks(vec![0.5; 16]).unwrap();
        let plan = plan_hopper(&a, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap();
        assert_eq!((plan.tile, plan.variant), (wide, HopperVariant::Features));
        // At 4096 keys, where the dense default takes 128 keys, so does the feature launch.
        let a4096 = Problem::new(
            AttnShape::new(4, 16, 16, 4096, 4096, 128).unwrap(),
            Causal::None,
        )
        .with_sinks(vec![0.5; 16])
        .unwrap();
        let plan = plan_hopper(&a4096, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap();
        assert_eq!(Some(plan.tile), catalog::hopper_feature_tile(128));
        for f in [
            plain.with_softcap(30.0).unwrap(),
            plain.with_window(256, 256).unwrap(),
        ] {
            let plan = plan_hopper(&f, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap();
            assert_eq!(Some(plan.tile), catalog::hopper_feature_tile(128));
            assert_eq!(plan.variant, HopperVariant::Features);
        }
        let f = plain.with_softcap(30.0).unwrap();
        let plan = plan_hopper(
            &f,
            Some(wide),
            232_448,
            Some(SeqLaunch::default()),
            132,
            TileSchedule::Auto,
            None,
        )
        .unwrap();
        assert_eq!((plan.tile, plan.variant), (wide, HopperVariant::Features));
        let fc = Problem::new(
            AttnShape::new(4, 16, 16, 4096, 4096, 128).unwrap(),
            Causal::BottomRight,
        )
        .with_softcap(30.0)
        .unwrap();
        let plan = plan_hopper(&fc, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap();
        assert_eq!(Some(plan.tile), catalog::hopper_feature_tile(128));
        assert_eq!(plan.variant, HopperVariant::Features);
        let dense = Problem::new(
            AttnShape::new(4, 16, 16, 4096, 4096, 128).unwrap(),
            Causal::None,
        );
        let plan = plan_hopper(
            &dense,
            None,
            232_448,
            Some(SeqLaunch::default()),
            132,
            TileSchedule::Auto,
            None,
        )
        .unwrap();
        assert_eq!((plan.tile, plan.variant), (wide, HopperVariant::Seqs));
        // A paged cache: the wide tile only where its TMA boxes are as tall as the feature
        // tile's (pages of 16: both 16 rows; 64 and 256: 16 against 64 and 128).
        for (page, want) in [
            (16, Some(wide)),
            (64, catalog::hopper_feature_tile(128)),
            (256, catalog::hopper_feature_tile(128)),
        ] {
            let paged = SeqLaunch {
                page_size: Some(page),
                ..SeqLaunch::default()
            };
            let plan = plan_hopper(
                &dense,
                None,
                232_448,
                Some(paged),
                132,
                TileSchedule::Auto,
                None,
            )
            .unwrap();
            assert_eq!(Some(plan.tile), want, "page {page}");
        }
        // The dense launch of the same shape: 4096 keys waste 3 % of the wide tile's last key
        // tile, so 128 keys (`catalog::hopper_wide_pays`); the sequence entries above keep the
        // wide tile from 1024 keys in the longest sequence, whose last tiles vary by sequence.
        let plan = plan_hopper(&dense, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap();
        assert_eq!(
            (plan.tile, plan.variant),
            (catalog::HOPPER_128_PINGPONG, HopperVariant::Dense)
        );
        let short = Problem::new(
            AttnShape::new(4, 16, 16, 4096, 512, 128).unwrap(),
            Causal::None,
        );
        let plan = plan_hopper(
            &short,
            None,
            232_448,
            Some(SeqLaunch::default()),
            132,
            TileSchedule::Auto,
            None,
        )
        .unwrap();
        assert_eq!(Some(plan.tile), catalog::hopper_feature_tile(128));
        assert_eq!(plan.variant, HopperVariant::Features);
        // Pinned, the wide tile runs a short varlen launch in its `_seq` entries.
        let plan = plan_hopper(
            &short,
            Some(wide),
            232_448,
            Some(SeqLaunch::default()),
            132,
            TileSchedule::Auto,
            None,
        )
        .unwrap();
        assert_eq!((plan.tile, plan.variant), (wide, HopperVariant::Seqs));
        let causal = Problem::new(
            AttnShape::new(4, 16, 16, 4096, 4096, 128).unwrap(),
            Causal::BottomRight,
        );
        assert_eq!(
            Some(
                plan_hopper(
                    &causal,
                    None,
                    232_448,
                    Some(SeqLaunch::default()),
                    132,
                    TileSchedule::Auto,
                    None
                )
                .unwrap()
                .tile
            ),
            catalog::hopper_feature_tile(128)
        );
    }

    #[test]
    fn packed_queries_plan_a_flat_grid_and_dense_queries_a_batch_grid() {
        // 3 sequences of at most 700 rows, 1305 rows in all, 8 heads.
        let p = Problem::new(
            AttnShape::new(3, 8, 8, 700, 900, 128).unwrap(),
            Causal::BottomRight,
        );
        let packed = SeqLaunch {
            packed_total_q: Some(1305),
            page_size: None,
            keys_bound: 900,
        };
        let plan = plan_hopper(
            &p,
            None,
            232_448,
            Some(packed),
            132,
            TileSchedule::Auto,
            None,
        )
        .unwrap();
        let bm = plan.tile.block_m();
        assert_eq!(plan.flat_block_m, bm as i32);
        assert_eq!(
            plan.grid(),
            (flat_grid_x(1305, 3, 700, bm) as u32, 8, 1),
            "x enumerates the blocks of every sequence; no batch dimension"
        );
        assert!((plan.grid().0 as usize) < 3 * 700usize.div_ceil(bm));
        for seq in [Some(SeqLaunch::default()), None] {
            let plan = plan_hopper(&p, None, 232_448, seq, 132, TileSchedule::Auto, None).unwrap();
            assert_eq!(plan.flat_block_m, 0);
            assert_eq!(plan.grid(), (700usize.div_ceil(bm) as u32, 8, 3));
        }
    }

    #[test]
    fn every_bucket_has_a_hopper_feature_tile() {
        for &b in &catalog::FWD_HEAD_DIM_BUCKETS {
            let t = catalog::hopper_feature_tile(b).unwrap();
            assert!(catalog::hopper_tiles(b).contains(&t), "bucket {b}");
            assert_eq!(
                t,
                catalog::hopper_tiles(b)[0],
                "bucket {b}: the features run the default tile"
            );
            assert!(
                t.pingpong || b == 96,
                "bucket {b}: ping-pong wherever the bucket has it"
            );
            assert!(HopperVariant::Features.is_built(b, &t));
            if let Some(s) = catalog::hopper_seq_tile(b) {
                assert!(catalog::hopper_tiles(b).contains(&s), "bucket {b}");
                let built: Vec<_> = HopperVariant::ALL
                    .into_iter()
                    .filter(|v| v.is_built(b, &s))
                    .collect();
                assert_eq!(
                    built,
                    HopperVariant::ALL,
                    "bucket {b}: the `_seq` tile also has `_feat` entries"
                );
            }
            if b == 96 {
                assert_eq!(t, catalog::hopper_tiles(b)[0], "bucket {b}: the default");
            }
        }
    }

    #[test]
    fn d256_paged_launches_take_the_64_key_tile_where_its_boxes_are_taller() {
        let p = Problem::new(
            AttnShape::new(16, 16, 16, 4000, 4000, 256).unwrap(),
            Causal::None,
        );
        let plan = |p: &Problem, tile, page_size: Option<Option<usize>>| {
            let seq = page_size.map(|page| SeqLaunch {
                page_size: page,
                ..SeqLaunch::default()
            });
            plan_hopper(p, tile, 232_448, seq, 132, TileSchedule::Auto, None)
        };
        let default = catalog::hopper_tiles(256)[0];
        let paged = catalog::hopper_paged_tile(256).unwrap();
        assert_eq!((default.block_n, paged.block_n), (80, 64));
        // Boxes of gcd(BN, page) rows: 16 against 16 at pages of 16 and 48 (80 keys stay), 32
        // and 64 against 16 at 32, 64 and 256.
        for (page, want) in [
            (16, default),
            (32, paged),
            (64, paged),
            (256, paged),
            (48, default),
        ] {
            let got = plan(&p, None, Some(Some(page))).unwrap();
            assert_eq!(
                (got.tile, got.variant),
                (want, HopperVariant::Features),
                "page {page}"
            );
        }
        // Packed K/V and softcap keep the 80-key tile, and D = 224 has no paged tile.
        assert_eq!(plan(&p, None, Some(None)).unwrap().tile, default);
        let capped = p.with_softcap(30.0).unwrap();
        assert_eq!(plan(&capped, None, Some(Some(64))).unwrap().tile, default);
        assert_eq!(catalog::hopper_paged_tile(224), None);
        // The paged tile has no dense entries: pinned on a dense launch it is refused, typed.
        assert!(!HopperVariant::Dense.is_built(256, &paged));
        let err = plan(&p, Some(paged), None).unwrap_err();
        assert!(
            matches!(&err, KernelError::EngineUnavailable(m) if m.contains("dense problems")),
            "{err}"
        );
    }

    #[test]
    fn sequence_and_feature_launches_split_keys_of_small_grids() {
        // Chunked prefill: 256 new tokens of one sequence, 32 heads, against 16384 paged keys.
        let chunk = Problem::new(
            AttnShape::new(1, 32, 8, 256, 16384, 128).unwrap(),
            Causal::BottomRight,
        );
        let paged = SeqLaunch {
            page_size: Some(64),
            keys_bound: 16384,
            ..SeqLaunch::default()
        };
        let plan = |p: &Problem, seq: Option<SeqLaunch>, splits| {
            plan_hopper(p, None, 232_448, seq, 132, TileSchedule::Auto, splits)
        };
        let p = plan(&chunk, Some(paged), None).unwrap();
        let items = p.sched.items as usize;
        assert_eq!(items, 2 * 32); // two 128-row blocks per head
        assert_eq!(p.sched.splits, 2, "⌊132 / 64⌋");
        assert_eq!(p.launch_grid, (items as u32, 2, 1));
        assert_eq!((p.sched.ws_o, p.sched.counters), (0, 0), "bound at launch");
        // Pinned counts are the launch's; 0, more than MAX_SPLITS, and a dense launch without
        // features (its entries do not split) are refused.
        let p = plan(&chunk, Some(paged), Some(5)).unwrap();
        assert_eq!((p.sched.splits, p.launch_grid.1), (5, 5));
        let p = plan(&chunk, Some(paged), Some(1)).unwrap();
        assert_eq!((p.sched.splits, p.launch_grid.1), (1, 1));
        for bad in [0, crate::config::MAX_SPLITS + 1] {
            assert!(plan(&chunk, Some(paged), Some(bad)).is_err(), "{bad}");
        }
        // A dense launch without features splits in the sequence entries, pinned or not;
        // a pinned tile without them refuses.
        // (Causal D = 128 runs the 128-key feature tile, which has `_feat` entries only.)
        let p = plan(&chunk, None, Some(2)).unwrap();
        assert_eq!((p.sched.splits, p.variant), (2, HopperVariant::Features));
        let p = plan(&chunk, None, None).unwrap();
        assert_eq!((p.sched.splits, p.variant), (2, HopperVariant::Features));
        assert_eq!(
            p.tile,
            catalog::hopper_seq_default_tile(128, 16384, true, None, true).unwrap()
        );
        let dense_only = *catalog::hopper_tiles(128)
            .iter()
            .find(|t| {
                !HopperVariant::Seqs.is_built(128, t) && !HopperVariant::Features.is_built(128, t)
            })
            .expect("a D = 128 tile with dense entries only");
        assert!(matches!(
            plan_hopper(
                &chunk,
                Some(dense_only),
                232_448,
                None,
                132,
                TileSchedule::Auto,
                Some(2)
            ),
            Err(KernelError::EngineUnavailable(_))
        ));
        // A full grid, or 64 rows and fewer without a mask, stays on the dense entries; a
        // causal one of 64 rows splits.
        let p = plan(
            &chunk
                .with_shape(AttnShape::new(1, 32, 8, 512, 16384, 128).unwrap())
                .unwrap(),
            None,
            None,
        )
        .unwrap();
        assert_eq!((p.sched.splits, p.variant), (1, HopperVariant::Dense));
        let short = chunk
            .with_shape(AttnShape::new(1, 32, 8, 64, 16384, 128).unwrap())
            .unwrap();
        let p = plan(&short, None, None).unwrap();
        assert_eq!((p.sched.splits, p.variant), (4, HopperVariant::Features));
        let unmasked = Problem::new(*short.shape(), Causal::None);
        let p = plan(&unmasked, None, None).unwrap();
        assert_eq!((p.sched.splits, p.variant), (1, HopperVariant::Dense));
        // A dense launch with a feature splits like a sequence layout; a window bounds the
        // keys a block sees (100 + 0 + 128 rows: under 8 tiles, no split).
        let softcap = chunk.with_softcap(30.0).unwrap();
        assert_eq!(plan(&softcap, None, None).unwrap().sched.splits, 2);
        let window = chunk.with_window(100, 0).unwrap();
        assert_eq!(plan(&window, None, None).unwrap().sched.splits, 1);
        // A grid that covers the SMs, or keys too few for 8 tiles a split, stays whole.
        let full = chunk
            .with_shape(AttnShape::new(3, 32, 8, 256, 16384, 128).unwrap())
            .unwrap();
        assert_eq!(plan(&full, Some(paged), None).unwrap().sched.splits, 1);
        let short = SeqLaunch {
            keys_bound: 1000,
            ..paged
        };
        assert_eq!(plan(&chunk, Some(short), None).unwrap().sched.splits, 1);
        // At most 64 rows per sequence: only causal launches on a grid that splits.
        assert!(short_causal_split(true, 32, 16384, 132));
        assert!(!short_causal_split(false, 32, 16384, 132));
        assert!(!short_causal_split(true, 32, 900, 132));
        assert!(!short_causal_split(true, 64 * 32, 16384, 132));
        assert_eq!(hopper_seq_splits(8, 1000, 132), crate::config::MAX_SPLITS);
        assert_eq!(hopper_seq_splits(40, 1000, 132), 3);
        assert_eq!(hopper_seq_splits(132, 1000, 132), 1);
    }

    #[test]
    fn features_run_in_the_default_tile_and_take_the_hopper_engine() {
        let p = Problem::new(
            AttnShape::new(1, 8, 2, 300, 500, 128).unwrap(),
            Causal::BottomRight,
        )
        .with_window(100, 0)
        .unwrap();
        let plan = plan_hopper(&p, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap();
        assert_eq!(Some(plan.tile), catalog::hopper_feature_tile(128));
        assert_eq!(plan.params.feat.window_left, 100);
        // Above D = 192 the features run the default tile (80 keys with ping-pong, run 254).
        let wide = p
            .with_shape(AttnShape::new(1, 8, 2, 300, 500, 256).unwrap())
            .unwrap();
        let plan = plan_hopper(&wide, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap();
        assert_eq!(Some(plan.tile), catalog::hopper_feature_tile(256));
        assert_eq!(plan.tile, catalog::hopper_tiles(256)[0]);
        assert!(plan.tile.pingpong && plan.tile.block_n == 80);
        let other = *catalog::hopper_tiles(128)
            .iter()
            .find(|t| !HopperVariant::Features.is_built(128, t))
            .expect("a D = 128 tile without feature entries");
        assert!(matches!(
            plan_hopper(
                &p,
                Some(other),
                232_448,
                None,
                132,
                TileSchedule::Auto,
                None
            ),
            Err(KernelError::EngineUnavailable(_))
        ));
        // Decode with sinks: the mma.sync general entries split it and the Hopper ones do
        // not, so Auto leaves it to them; a prefill with sinks, a causal decode-like launch
        // (no split twin) and a grid that fills the chip take the Hopper engine.
        let sm = 132;
        let decode = Problem::new(
            AttnShape::new(1, 32, 8, 1, 8192, 128).unwrap(),
            Causal::None,
        )
        .with_sinks(vec![0.0; 32])
        .unwrap();
        let cfg = crate::config::choose_config(1, 32, 1, 128, sm, 232_448);
        assert!(!auto_prefers_hopper(&decode, &cfg, false, None, sm));
        assert!(!auto_prefers_hopper(&decode, &cfg, true, None, sm));
        let four_rows = decode
            .with_shape(AttnShape::new(1, 32, 8, 4, 8192, 128).unwrap())
            .unwrap();
        let masked = Problem::new(*four_rows.shape(), Causal::BottomRight)
            .with_sinks(vec![0.0; 32])
            .unwrap();
        assert!(auto_prefers_hopper(&masked, &cfg, false, None, sm));
        let prefill = decode
            .with_shape(AttnShape::new(1, 32, 8, 2048, 8192, 128).unwrap())
            .unwrap();
        assert!(auto_prefers_hopper(&prefill, &cfg, false, None, sm));
        let full = decode
            .with_shape(AttnShape::new(8, 32, 8, 1, 8192, 128).unwrap())
            .unwrap();
        assert!(auto_prefers_hopper(&full, &cfg, false, None, sm));
    }

    #[test]
    fn auto_keeps_split_kv_problems_on_mma_sync() {
        let sm = 132;
        let decode = Problem::new(
            AttnShape::new(1, 32, 8, 1, 8192, 128).unwrap(),
            Causal::None,
        );
        let cfg = crate::config::choose_config(1, 32, 1, 128, sm, 232_448);
        assert!(!auto_prefers_hopper(&decode, &cfg, false, None, sm));
        let prefill = Problem::new(
            AttnShape::new(4, 16, 16, 4096, 4096, 128).unwrap(),
            Causal::None,
        );
        let cfg = crate::config::choose_config(4, 16, 4096, 128, sm, 232_448);
        assert!(auto_prefers_hopper(&prefill, &cfg, false, None, sm));
        assert!(!auto_prefers_hopper(&prefill, &cfg, true, None, sm));
        assert!(!auto_prefers_hopper(&prefill, &cfg, false, Some(2), sm));
        assert!(auto_prefers_hopper(&prefill, &cfg, false, Some(1), sm));
        // A chunk of 128 new tokens against a long cache: mma.sync would split it, and the
        // Hopper engine does (in its sequence entries, `plan_hopper`).
        let chunk = Problem::new(
            AttnShape::new(1, 32, 8, 128, 16384, 128).unwrap(),
            Causal::BottomRight,
        );
        let cfg = crate::config::choose_config(1, 32, 128, 128, sm, 232_448);
        let ctas = 128usize.div_ceil(cfg.block_m) * 32;
        assert!(choose_splits(&cfg, 128, ctas, 16384 / cfg.block_n, sm) > 1);
        assert!(auto_prefers_hopper(&chunk, &cfg, false, None, sm));
    }

    #[test]
    fn causal_items_run_longest_first_in_groups_of_heads_and_cover_every_block_once() {
        for (tiles_x, heads, batch, lpt) in
            [(22, 16, 4, 8), (5, 3, 3, 8), (7, 5, 1, 4), (4, 2, 2, 1)]
        {
            let s = HopperSched {
                tiles_x,
                heads,
                items: tiles_x * heads * batch,
                lpt_heads: lpt,
                splits: 1,
                tail_items: 0,
                ws_o: 0,
                ws_ml: 0,
                counters: 0,
            };
            let mut seen = std::collections::HashSet::new();
            let mut last_rank_of_group = vec![-1; (heads * batch) as usize];
            for w in 0..s.items {
                let (x, h, b) = item_order(w, &s, true);
                assert!(
                    (0..tiles_x).contains(&x) && (0..heads).contains(&h) && (0..batch).contains(&b)
                );
                assert!(
                    seen.insert((x, h, b)),
                    "{s:?}: item {w} repeats ({x}, {h}, {b})"
                );
                // Within a group ranks never decrease: every pair's longest block first.
                let pair = (b * heads + h) as usize;
                let g = pair / lpt as usize;
                assert!(x >= last_rank_of_group[g], "{s:?}: item {w}");
                last_rank_of_group[g] = x;
            }
            assert_eq!(seen.len(), s.items as usize);
            // One pair per group is the classic order, which the kernel then keeps.
            if lpt == 1 {
                for w in 0..s.items {
                    assert_eq!(lpt_order(w, &s), (w % tiles_x, w / tiles_x));
                }
            }
        }
    }

    #[test]
    fn causal_lpt_groups_timed_tiles_whose_kv_fits_the_l2() {
        assert_eq!(causal_lpt_heads(64, 4096, 2), 8);
        assert_eq!(causal_lpt_heads(64, 8192, 2), 8);
        assert_eq!(causal_lpt_heads(64, 16384, 2), 1);
        assert_eq!(causal_lpt_heads(32, 8192, 2), 8);
        assert_eq!(causal_lpt_heads(128, 4096, 2), 1);
        // FP8's 1-byte K/V: twice the keys in the same bytes.
        assert_eq!(causal_lpt_heads(64, 16384, 1), 8);
        assert_eq!(causal_lpt_heads(64, 32768, 1), 1);
        assert_eq!(causal_lpt_heads(128, 4096, 1), 8);
        assert_eq!(causal_lpt_heads(128, 8192, 1), 8);
        assert_eq!(causal_lpt_heads(128, 16384, 1), 1);
        assert_eq!(causal_lpt_heads(256, 4096, 1), 8);
        assert_eq!(causal_lpt_heads(256, 8192, 1), 1);
        assert_eq!(causal_lpt_heads(256, 2048, 2), 1);
        let plan = |causal, d| {
            let p = Problem::new(AttnShape::new(4, 16, 16, 4096, 4096, d).unwrap(), causal);
            plan_hopper(&p, None, 232_448, None, 132, TileSchedule::Auto, None)
                .unwrap()
                .sched
        };
        assert_eq!(plan(Causal::BottomRight, 64).lpt_heads, 8);
        assert_eq!(plan(Causal::None, 64).lpt_heads, 1);
        assert_eq!(plan(Causal::BottomRight, 128).lpt_heads, 1);
    }

    #[test]
    fn schedules_cover_every_item_and_refuse_what_entries_cannot_walk() {
        let grid = (32, 16, 4); // 2048 items
        let sched = |grid, walks, schedule| hopper_schedule(grid, walks, schedule, 132, 32, "t");
        let (g, s) = sched(grid, true, TileSchedule::Auto).unwrap();
        assert_eq!(g, (132, 1, 1));
        assert_eq!((s.tiles_x, s.heads, s.items), (32, 16, 2048));
        assert_eq!(
            s.tail_items, 68,
            "2048 = 15 · 132 + 68: the last round is shared"
        );
        let (g, s) = sched(grid, false, TileSchedule::Auto).unwrap();
        assert_eq!(
            (g, s.tail_items),
            ((2048, 1, 1), 0),
            "entries that do not walk get one CTA per item"
        );
        let (g, s) = sched(grid, true, TileSchedule::Grid).unwrap();
        assert_eq!((g, s.tail_items), ((2048, 1, 1), 0));
        let (g, s) = sched(grid, true, TileSchedule::Persistent(Some(7))).unwrap();
        assert_eq!((g, s.tail_items), ((7, 1, 1), 0), "whole items only");
        let (g, s) = sched(grid, true, TileSchedule::StreamK(Some(7))).unwrap();
        assert_eq!((g, s.tail_items), ((7, 1, 1), 2048 % 7));
        // Fewer items than SMs: one CTA per item, nothing shared.
        let (g, s) = sched((3, 2, 1), true, TileSchedule::Auto).unwrap();
        assert_eq!((g, s.tail_items), ((6, 1, 1), 0));
        for schedule in [TileSchedule::Persistent(None), TileSchedule::StreamK(None)] {
            assert!(matches!(
                sched(grid, false, schedule),
                Err(KernelError::EngineUnavailable(_))
            ));
        }
        assert!(matches!(
            sched((1 << 20, 1 << 8, 1 << 4), true, TileSchedule::Auto),
            Err(KernelError::IndexOverflow(_))
        ));
    }

    #[test]
    fn stream_k_tail_is_used_where_it_saves_key_tiles() {
        // 2048 items, 32 tiles each, on 132 CTAs: 68 left over, 15.5 tiles saved.
        assert_eq!(stream_k_tail(2048, 132, 32), 68);
        // A round that is nearly full saves too little: 130 of 132, 32 tiles (0.5 saved).
        assert_eq!(stream_k_tail(132 * 15 + 130, 132, 32), 0);
        // Full rounds, or one round only: nothing to share.
        assert_eq!(stream_k_tail(132 * 16, 132, 32), 0);
        assert_eq!(stream_k_tail(100, 132, 32), 0);
        // Items of a single key tile cannot save four.
        assert_eq!(stream_k_tail(2048, 132, 1), 0);
        // A tail of fewer key tiles than CTAs is not shared (some ranges would be empty).
        assert_eq!(stream_k_tail(132 * 3 + 4, 132, 32), 0);
        assert_eq!(stream_k_tail(132 * 3 + 5, 132, 32), 5);
        assert_eq!(tail_workspace(132, 68, 128, 2), (200 * 128, 68 * 8));
    }

    /// The kernel's `walk_items` and `tail_piece` (kernels/fwd_hopper_kernel.cuh), mirrored:
    /// CTA `cta`'s (item, lo, hi, tail item, first CTA, sharing count) in walk order.
    fn walk(items: i32, tail: i32, ctas: i32, cta: i32, n: i32) -> Vec<[i32; 6]> {
        let bound = |c: i32, units: i32| (units as i64 * c as i64 / ctas as i64) as i32;
        let cta_of = |u: i32, units: i32| {
            (ctas - 1).min(((u as i64 + 1) * ctas as i64 - 1).div_euclid(units as i64) as i32)
        };
        let tail = if n > 0 && tail * n >= ctas { tail } else { 0 };
        let whole = items - tail;
        let mut out: Vec<[i32; 6]> = (cta..whole)
            .step_by(ctas as usize)
            .map(|w| [w, 0, n, 0, 0, 1])
            .collect();
        if tail > 0 {
            let units = tail * n;
            let (mut u, end) = (bound(cta, units), bound(cta + 1, units));
            while u < end {
                let t = u / n;
                let hi = end.min((t + 1) * n);
                let first = cta_of(t * n, units);
                let count = cta_of((t + 1) * n - 1, units) - first + 1;
                out.push([whole + t, u - t * n, hi - t * n, t, first, count]);
                u = hi;
            }
        }
        out
    }

    proptest::proptest! {
        /// Every key tile of every item is walked exactly once; an item's pieces are held by
        /// `count` consecutive CTAs from `first`, one each, in key order; their workspace slots
        /// (CTA + tail item) are distinct and inside `tail_workspace`; the CTAs' loads differ
        /// by at most one item's tiles before the tail and by one tile within it.
        #[test]
        fn stream_k_walks_cover_every_key_tile_once(
            ctas in 1i32..140,
            rounds in 0i32..4,
            extra in 0i32..140,
            n in 0i32..40,
        ) {
            let items = ctas * rounds + extra % ctas.max(1);
            proptest::prop_assume!(items > 0);
            let tail = items % ctas;
            // What the kernel shares: a tail of at least one key tile per CTA.
            let shared = if n > 0 && tail * n >= ctas { tail } else { 0 };
            let mut seen = vec![0u32; (items * n.max(1)) as usize];
            let mut slots = std::collections::HashSet::new();
            let mut tail_load = Vec::new();
            let mut pieces = std::collections::HashMap::new();
            for cta in 0..ctas {
                let mut load = 0;
                for [w, lo, hi, t, first, count] in walk(items, tail, ctas, cta, n) {
                    proptest::prop_assert!(0 <= lo && lo <= hi && hi <= n && w < items);
                    for j in lo..hi {
                        seen[(w * n + j) as usize] += 1;
                    }
                    if count > 1 {
                        proptest::prop_assert!(first <= cta && cta < first + count);
                        let seen_of_item = pieces.entry(w).or_insert((count, Vec::new()));
                        proptest::prop_assert_eq!(seen_of_item.0, count);
                        seen_of_item.1.push(cta);
                        proptest::prop_assert!(slots.insert(cta + t));
                        proptest::prop_assert!(cta + t < ctas + tail);
                        // Piece order is key order: the first CTA starts the item.
                        proptest::prop_assert_eq!(lo == 0, cta == first);
                        proptest::prop_assert_eq!(hi == n, cta == first + count - 1);
                    }
                    if w >= items - shared {
                        load += hi - lo;
                    }
                }
                tail_load.push(load);
            }
            for (count, ctas_of_item) in pieces.values() {
                proptest::prop_assert_eq!(*count as usize, ctas_of_item.len());
                proptest::prop_assert!(ctas_of_item.windows(2).all(|p| p[1] == p[0] + 1));
            }
            if n > 0 {
                proptest::prop_assert!(seen.iter().all(|&c| c == 1));
                let (lo, hi) = (tail_load.iter().min(), tail_load.iter().max());
                proptest::prop_assert!(hi.unwrap() - lo.unwrap() <= 1);
            }
        }
    }

    #[test]
    fn plans_walk_only_dense_non_causal_walking_tiles() {
        let wide = catalog::hopper_tiles(128)
            .iter()
            .copied()
            .find(|t| t.block_n == 176)
            .expect("a 176-key D = 128 tile");
        let dense = Problem::new(
            AttnShape::new(4, 16, 16, 4096, 4096, 128).unwrap(),
            Causal::None,
        );
        let plan = plan_hopper(
            &dense,
            Some(wide),
            232_448,
            None,
            132,
            TileSchedule::Auto,
            None,
        )
        .unwrap();
        assert_eq!(plan.launch_grid, (132, 1, 1));
        assert_eq!(plan.grid(), (32, 16, 4));
        assert_eq!(
            plan.sched.tail_items, 68,
            "24 tiles of 176 keys: the tail is shared"
        );
        // The default at 4096 keys (128-key tiles) runs one CTA per item.
        let plan = plan_hopper(&dense, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap();
        assert_eq!(plan.tile.block_n, 128);
        assert_eq!((plan.launch_grid, plan.sched.tail_items), ((2048, 1, 1), 0));
        let causal = Problem::new(*dense.shape(), Causal::BottomRight);
        let plan =
            plan_hopper(&causal, None, 232_448, None, 132, TileSchedule::Auto, None).unwrap();
        assert_eq!(
            plan.launch_grid.0, plan.sched.items as u32,
            "causal: one CTA per item"
        );
        assert!(plan_hopper(
            &causal,
            None,
            232_448,
            None,
            132,
            TileSchedule::Persistent(None),
            None
        )
        .is_err());
    }
}
