//! Debug kernels (feature `debug-kernels`): tile dumps of S, P, m and l for chosen query
//! blocks, and the planted broken-rescale variant, for the oracle; and the backward's P, dP,
//! dS and Δ tiles ([`FlashAttention::backward_debug`]).

use attn_ref::{BwdTile, Problem, Tile, TileId};

use crate::{
    backward::BwdDump,
    catalog::{self, Arch},
    launch::{DumpArgs, LaunchExtras},
    Backward, BackwardEngine, BackwardExtras, BackwardOptions, Engine, FlashAttention, Forward,
    ForwardOptions, HostOutput, KernelError, KernelMode, StorageType, Tensor, TensorMut,
};

/// Which debug kernel to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugVariant {
    /// The same algorithm as release, compiled with `-G -DATTN_DEBUG`.
    Correct,
    /// The planted bug: the online-softmax rescale of O and l is skipped (non-causal only).
    BrokenRescale,
}

/// Output of a debug run: O, LSE and the dumped tiles (natural-log domain, like
/// [`attn_ref::Tile`]; only processed key tiles are returned).
#[derive(Debug, Clone)]
pub struct DebugOutput<T> {
    /// O, LSE and launch info.
    pub output: HostOutput<T>,
    /// The dumped tiles, ordered by (b, h, q_tile, k_tile).
    pub tiles: Vec<Tile>,
}

impl FlashAttention {
    /// Runs a debug kernel on host inputs and dumps the tiles of the (b, h, q_tile) blocks
    /// in `blocks`: the mma.sync kernel of `opts.config` (or a debug config), or with
    /// [`Engine::Hopper`] the Hopper kernel's debug tile
    /// ([`crate::catalog::hopper_debug_tile`], 128 × 128 at D ≤ 64 and 128; q_tile counts
    /// blocks of that tile's rows).
    #[allow(clippy::too_many_arguments)] // the inputs, the block list, the variant, options
    pub fn forward_debug<T: StorageType>(
        &self,
        problem: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        blocks: &[(usize, usize, usize)],
        variant: DebugVariant,
        opts: &ForwardOptions,
    ) -> Result<DebugOutput<T>, KernelError> {
        let shape = problem.shape();
        shape.check_qkv_lens(q.len(), k.len(), v.len())?;
        if let Engine::Hopper(tile) = opts.engine {
            // The Hopper engine's debug entries: one tile per bucket (`hopper_debug_tile`).
            let bucket = crate::config::bucket_for(shape.head_dim())?;
            let debug_tile = crate::catalog::hopper_debug_tile(bucket).ok_or_else(|| {
                KernelError::EngineUnavailable(format!(
                    "the Hopper engine has debug entries at head dims 64 and 128 only, not {}",
                    shape.head_dim()
                ))
            })?;
            if tile.is_some_and(|t| t != debug_tile) || opts.config.is_some() {
                return Err(KernelError::EngineUnavailable(format!(
                    "the Hopper engine's debug build has the tile {} only",
                    debug_tile.name()
                )));
            }
            if variant == DebugVariant::BrokenRescale {
                return Err(KernelError::EngineUnavailable(
                    "the planted broken-rescale kernel is an mma.sync one; use Engine::MmaSync"
                        .into(),
                ));
            }
            let opts = ForwardOptions {
                engine: Engine::Hopper(Some(debug_tile)),
                ..Default::default()
            };
            return self.debug_launch(
                problem,
                (q, k, v),
                blocks,
                variant,
                (debug_tile.block_m(), debug_tile.block_n),
                opts,
            );
        }
        let debug_configs = crate::config::debug_configs_for(shape.head_dim());
        let cfg = match opts.config {
            Some(c) => c,
            None => Some(self.default_config(problem))
                .filter(|c| debug_configs.contains(c))
                .or_else(|| debug_configs.first().copied())
                .ok_or_else(|| KernelError::UnknownConfig {
                    name: format!("any (debug build, head_dim {})", shape.head_dim()),
                    known: "debug kernels exist for head dims 64 and 128".into(),
                })?,
        };
        if !debug_configs.contains(&cfg) {
            return Err(KernelError::UnknownConfig {
                name: format!("{} (debug build)", cfg.name()),
                known: debug_configs
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let opts = ForwardOptions {
            config: Some(cfg),
            engine: Engine::MmaSync,
            ..Default::default()
        };
        self.debug_launch(
            problem,
            (q, k, v),
            blocks,
            variant,
            (cfg.block_m, cfg.block_n),
            opts,
        )
    }

    /// Validates the block list, runs one debug launch with a (BM, BN) tile and unpacks its
    /// dumps.
    fn debug_launch<T: StorageType>(
        &self,
        problem: &Problem,
        (q, k, v): (&[T], &[T], &[T]),
        blocks: &[(usize, usize, usize)],
        variant: DebugVariant,
        (bm, bn): (usize, usize),
        opts: ForwardOptions,
    ) -> Result<DebugOutput<T>, KernelError> {
        let shape = problem.shape();
        check_blocks(shape, bm, blocks)?;
        if variant == DebugVariant::BrokenRescale && problem.causal() != attn_ref::Causal::None {
            return Err(attn_ref::AttnError::InvalidArgument(
                "the broken-rescale variant exists for non-causal problems only".into(),
            )
            .into());
        }
        let key_tiles = shape.kv_len().div_ceil(bn);
        let per_tile = 2 * bm * bn + 2 * bm;
        let dump_len = blocks.len().max(1) * key_tiles * per_tile;
        let s = self.stream();
        let err = |context| move |source| KernelError::Driver { context, source };
        let dq = s.clone_htod(q).map_err(err("uploading Q"))?;
        let dk = s.clone_htod(k).map_err(err("uploading K"))?;
        let dv = s.clone_htod(v).map_err(err("uploading V"))?;
        // Poison O and the dump with NaN so unwritten elements show.
        let poison = vec![T::from_f32(f32::NAN); shape.o_elems()];
        let mut o = s.clone_htod(&poison).map_err(err("allocating O"))?;
        let mut lse = s
            .clone_htod(&vec![f32::NAN; shape.lse_elems()])
            .map_err(err("allocating LSE"))?;
        let mut dump = s
            .clone_htod(&vec![f32::NAN; dump_len])
            .map_err(err("allocating the dump buffer"))?;
        let dtiles = upload_blocks(s, blocks)?;
        let extras = LaunchExtras {
            mode: match variant {
                DebugVariant::Correct => None,
                DebugVariant::BrokenRescale => Some(KernelMode::BrokenRescale),
            },
            dump: Some(DumpArgs {
                buffer: &mut dump,
                tiles: &dtiles,
                count: blocks.len() as i32,
            }),
            seqs: None,
            kv_scales: None,
        };
        let launch = self.launch(
            Forward::bhsd(problem, &dq, &dk, &dv, &mut o, Some(&mut lse)).with_options(opts),
            extras,
        )?;
        let o = s.clone_dtoh(&o).map_err(err("downloading O"))?;
        let lse = s.clone_dtoh(&lse).map_err(err("downloading LSE"))?;
        let dump = s.clone_dtoh(&dump).map_err(err("downloading the dump"))?;
        let tiles = unpack_dump(problem, &dump, blocks, bm, bn);
        Ok(DebugOutput {
            output: HostOutput { o, lse, launch },
            tiles,
        })
    }
}

/// Output of a debug backward: the gradients (storage type, `[B, H, S, D]`) and the dumped
/// tiles of the listed query blocks.
#[derive(Debug, Clone)]
pub struct BwdDebugOutput<T> {
    /// dQ.
    pub dq: Vec<T>,
    /// dK.
    pub dk: Vec<T>,
    /// dV.
    pub dv: Vec<T>,
    /// The dumped tiles, ordered by (b, h, q_tile, k_tile); key tiles the kernel's walk
    /// skipped are absent.
    pub tiles: Vec<BwdTile>,
    /// The tiling the tiles count in (query rows, keys): the mma.sync backward's tile.
    pub block: (usize, usize),
    /// The main kernel that ran.
    pub kernel: String,
}

impl FlashAttention {
    /// The tiling [`Self::backward_debug`] counts its `(b, h, q_tile)` blocks in on this
    /// device, (query rows, keys) — the mma.sync backward's tile for the problem's head dim
    /// and `dtype` — so a caller can pick the block holding a given query row. Head dims 64
    /// and 128 only (the debug entries').
    pub fn backward_debug_block(
        &self,
        problem: &Problem,
        dtype: attn_ref::Dtype,
    ) -> Result<(usize, usize), KernelError> {
        let head_dim = problem.shape().head_dim();
        let bucket = crate::config::bucket_for(head_dim)?;
        // The arch `backward_with` will run, so the tile below is the one that dumps.
        let arch = self.backward_arch(&catalog::UnitKey {
            family: catalog::Family::Bwd,
            arch: Arch::Sm80,
            elem: crate::config::elem_of(dtype),
            head_dim: bucket,
        })?;
        catalog::bwd_tile(arch, bucket)
            .filter(|_| catalog::BWD_DEBUG_HEAD_DIMS.contains(&bucket))
            .map(|t| (t.block_m, t.block_n))
            .ok_or_else(|| {
                KernelError::EngineUnavailable(format!(
                    "the backward's debug entries exist at head dims {:?}, not {head_dim}",
                    catalog::BWD_DEBUG_HEAD_DIMS,
                ))
            })
    }

    /// Runs the release forward on host `q`, `k`, `v` (`[B, H, S, D]`) for O and LSE, then the
    /// mma.sync backward's debug entry (compiled `-G -DATTN_DEBUG`) with `d_o`, dumping P, dP,
    /// dS and Δ ([`attn_ref::BwdTile`]) of every key tile of the `(b, h, q_tile)` blocks in
    /// `blocks` (q_tile in the backward tile's rows: [`Self::backward_debug_block`]); compare them
    /// with `attn_ref::reference::bwd_tiles::backward_tiles` through
    /// `attn_oracle::compare_bwd_tiles`. Plain problems (no window, softcap, ALiBi or sinks)
    /// at head dims 64 and 128; the gradients and the dump start as NaN.
    pub fn backward_debug<T: StorageType>(
        &self,
        problem: &Problem,
        (q, k, v, d_o): (&[T], &[T], &[T], &[T]),
        blocks: &[(usize, usize, usize)],
    ) -> Result<BwdDebugOutput<T>, KernelError> {
        let shape = problem.shape();
        shape.check_qkv_lens(q.len(), k.len(), v.len())?;
        attn_ref::check_len("dO", shape.o_elems(), d_o.len())?;
        if !problem.features().is_empty() {
            return Err(KernelError::UnsupportedFeature(
                "backward tile dumps cover problems without a window, softcap, ALiBi or sinks"
                    .into(),
            ));
        }
        let (bm, bn) = self.backward_debug_block(problem, T::DTYPE)?;
        check_blocks(shape, bm, blocks)?;
        let key_tiles = shape.kv_len().div_ceil(bn);
        let per_tile = 3 * bm * bn + bm;
        let s = self.stream();
        let err = |context| move |source| KernelError::Driver { context, source };
        let (dims_q, dims_kv) = (crate::dims_q(shape), crate::dims_kv(shape));
        let dq_in = s.clone_htod(q).map_err(err("uploading Q"))?;
        let dk_in = s.clone_htod(k).map_err(err("uploading K"))?;
        let dv_in = s.clone_htod(v).map_err(err("uploading V"))?;
        let ddo = s.clone_htod(d_o).map_err(err("uploading dO"))?;
        let nan = |n: usize| vec![T::from_f32(f32::NAN); n];
        let mut o = s
            .clone_htod(&nan(shape.o_elems()))
            .map_err(err("allocating O"))?;
        let mut lse = s
            .clone_htod(&vec![f32::NAN; shape.lse_elems()])
            .map_err(err("allocating LSE"))?;
        self.forward(Forward::bhsd(
            problem,
            &dq_in,
            &dk_in,
            &dv_in,
            &mut o,
            Some(&mut lse),
        ))?;
        let mut gq = s
            .clone_htod(&nan(shape.q_elems()))
            .map_err(err("allocating dQ"))?;
        let mut gk = s
            .clone_htod(&nan(shape.kv_elems()))
            .map_err(err("allocating dK"))?;
        let mut gv = s
            .clone_htod(&nan(shape.kv_elems()))
            .map_err(err("allocating dV"))?;
        let mut dump = s
            .clone_htod(&vec![f32::NAN; blocks.len().max(1) * key_tiles * per_tile])
            .map_err(err("allocating the dump buffer"))?;
        let dtiles = upload_blocks(s, blocks)?;
        let info = self.backward_dumping(
            Backward {
                problem,
                q: Tensor::bhsd(&dq_in, dims_q),
                k: Tensor::bhsd(&dk_in, dims_kv),
                v: Tensor::bhsd(&dv_in, dims_kv),
                o: Tensor::bhsd(&o, dims_q),
                lse: lse.as_view(),
                d_o: Tensor::bhsd(&ddo, dims_q),
                dq: TensorMut::bhsd(&mut gq, dims_q),
                dk: TensorMut::bhsd(&mut gk, dims_kv),
                dv: TensorMut::bhsd(&mut gv, dims_kv),
                options: BackwardOptions {
                    deterministic: false,
                    engine: BackwardEngine::MmaSync,
                    ..Default::default()
                },
            },
            BackwardExtras::default(),
            Some(BwdDump {
                buffer: &mut dump,
                tiles: &dtiles,
                count: blocks.len() as i32,
            }),
        )?;
        let down = |x: &cudarc::driver::CudaSlice<T>, what| s.clone_dtoh(x).map_err(err(what));
        let dump = s.clone_dtoh(&dump).map_err(err("downloading the dump"))?;
        Ok(BwdDebugOutput {
            dq: down(&gq, "downloading dQ")?,
            dk: down(&gk, "downloading dK")?,
            dv: down(&gv, "downloading dV")?,
            tiles: unpack_bwd_dump(problem, &dump, blocks, bm, bn),
            block: (bm, bn),
            kernel: info.kernel,
        })
    }
}

/// Checks that every `(b, h, q_tile)` block lies inside the problem (q_tile in `bm`-row blocks).
fn check_blocks(
    shape: &attn_ref::AttnShape,
    bm: usize,
    blocks: &[(usize, usize, usize)],
) -> Result<(), KernelError> {
    let q_tiles = shape.q_len().div_ceil(bm);
    match blocks
        .iter()
        .find(|&&(b, h, qt)| b >= shape.batch() || h >= shape.q_heads() || qt >= q_tiles)
    {
        Some(&(b, h, qt)) => Err(attn_ref::AttnError::InvalidArgument(format!(
            "tile block ({b}, {h}, {qt}) outside batch {}, heads {}, q tiles {q_tiles} \
             ({bm}-row blocks)",
            shape.batch(),
            shape.q_heads()
        ))
        .into()),
        None => Ok(()),
    }
}

/// The kernels' tile list: `(b, h, q_tile)` triples as i32, padded by one so it is never empty.
fn upload_blocks(
    s: &std::sync::Arc<cudarc::driver::CudaStream>,
    blocks: &[(usize, usize, usize)],
) -> Result<cudarc::driver::CudaSlice<i32>, KernelError> {
    let flat: Vec<i32> = blocks
        .iter()
        .flat_map(|&(b, h, qt)| [b as i32, h as i32, qt as i32])
        .chain(std::iter::repeat_n(0, 3))
        .collect();
    s.clone_htod(&flat).map_err(|source| KernelError::Driver {
        context: "uploading the tile list",
        source,
    })
}

/// Turns the backward's raw dump buffer into tiles; a key tile whose Δ values are all still
/// NaN (the poison) was not visited and is left out.
pub fn unpack_bwd_dump(
    problem: &Problem,
    dump: &[f32],
    blocks: &[(usize, usize, usize)],
    bm: usize,
    bn: usize,
) -> Vec<BwdTile> {
    let shape = problem.shape();
    let key_tiles = shape.kv_len().div_ceil(bn);
    let per_tile = 3 * bm * bn + bm;
    let mut tiles = Vec::new();
    for (slot, &(b, h, qt)) in blocks.iter().enumerate() {
        let rows = bm.min(shape.q_len().saturating_sub(qt * bm));
        for kt in 0..key_tiles {
            let base = (slot * key_tiles + kt) * per_tile;
            let Some(raw) = dump.get(base..base + per_tile) else {
                continue;
            };
            let delta = &raw[3 * bm * bn..];
            if delta[..rows].iter().all(|x| x.is_nan()) {
                continue;
            }
            let cols = bn.min(shape.kv_len() - kt * bn);
            let take = |m: usize| -> Vec<f64> {
                (0..rows)
                    .flat_map(|r| (0..cols).map(move |c| (r, c)))
                    .map(|(r, c)| raw[m * bm * bn + r * bn + c] as f64)
                    .collect()
            };
            tiles.push(BwdTile {
                id: TileId {
                    b,
                    h,
                    q_tile: qt,
                    k_tile: kt,
                },
                rows,
                cols,
                p: take(0),
                dp: take(1),
                ds: take(2),
                delta: delta[..rows].iter().map(|&x| x as f64).collect(),
            });
        }
    }
    tiles.sort_by_key(|t| (t.id.b, t.id.h, t.id.q_tile, t.id.k_tile));
    tiles
}

/// Turns the raw dump buffer into tiles; a key tile whose m values are all still NaN (the
/// poison) was not processed and is left out.
pub fn unpack_dump(
    problem: &Problem,
    dump: &[f32],
    blocks: &[(usize, usize, usize)],
    bm: usize,
    bn: usize,
) -> Vec<Tile> {
    let shape = problem.shape();
    let key_tiles = shape.kv_len().div_ceil(bn);
    let per_tile = 2 * bm * bn + 2 * bm;
    let mut tiles = Vec::new();
    for (slot, &(b, h, qt)) in blocks.iter().enumerate() {
        let rows = bm.min(shape.q_len() - qt * bm);
        for kt in 0..key_tiles {
            let base = (slot * key_tiles + kt) * per_tile;
            let Some(raw) = dump.get(base..base + per_tile) else {
                continue;
            };
            let (s_raw, rest) = raw.split_at(bm * bn);
            let (p_raw, rest) = rest.split_at(bm * bn);
            let (m_raw, l_raw) = rest.split_at(bm);
            if m_raw[..rows].iter().all(|x| x.is_nan()) {
                continue;
            }
            let cols = bn.min(shape.kv_len() - kt * bn);
            let take = |src: &[f32]| -> Vec<f64> {
                (0..rows)
                    .flat_map(|r| (0..cols).map(move |c| (r, c)))
                    .map(|(r, c)| src[r * bn + c] as f64)
                    .collect()
            };
            tiles.push(Tile {
                id: TileId {
                    b,
                    h,
                    q_tile: qt,
                    k_tile: kt,
                },
                rows,
                cols,
                s: take(s_raw),
                p: take(p_raw),
                m: m_raw[..rows].iter().map(|&x| x as f64).collect(),
                l: l_raw[..rows].iter().map(|&x| x as f64).collect(),
            });
        }
    }
    // Ordered by (b, h, q_tile, k_tile), like the tiled reference's capture, whatever the
    // order of `blocks`.
    tiles.sort_by_key(|t| (t.id.b, t.id.h, t.id.q_tile, t.id.k_tile));
    tiles
}
