//! `cargo xtask reference`: the f64 CPU reference on `.npy` inputs.
//!
//! Q is `[B, Hq, Sq, D]`, K and V are `[B, Hkv, Sk, D]` (f16, f32 or f64 `.npy`, C order);
//! O is written as `[B, Hq, Sq, D]` and, with `--lse`, LSE as `[B, Hq, Sq]` (natural log,
//! −∞ for fully masked rows), both in `--out-dtype` (f32 by default).
//!
//! With `--do dO.npy --dq dQ.npy --dk dK.npy --dv dV.npy` (all four together) the backward
//! pass runs too ([`reference::backward_with`] on this forward's O and LSE): dO is shaped
//! like O, dQ is written like Q and dK, dV like K, in `--out-dtype` and `--layout`. Every
//! serving feature has gradients; with `--sinks`, `--dsinks` writes dL/d(sink) `[Hq]`. Varlen
//! batches run the backward per sequence (dO, dQ `[total_q, Hq, D]`, dK, dV
//! `[total_k, Hkv, D]`); a paged KV cache has no backward here (it is an inference layout).
//! Serving features ([`FeatureArgs`]): `--window L,R`, `--softcap F`, `--alibi A.npy`,
//! `--sinks S.npy`; variable-length batches (`--cu-seqlens-q`/`--cu-seqlens-k`: Q, K, V and
//! O are `[total, H, D]`, LSE `[Hq, total_q]`); a paged KV cache (`--block-table`/
//! `--seqused-k`: K and V are `[num_blocks, page_size, Hkv, D]`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use attn_ref::reference::{paged, varlen};
use attn_ref::{reference, Alibi, AttnShape, Causal, Problem};

use crate::flags::{CausalArg, WindowArg};
use crate::npy;

/// Element type of the written O and LSE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutDtype {
    /// 32-bit float (`<f4`).
    F32,
    /// 64-bit float (`<f8`), the reference's own precision.
    F64,
}

/// Arguments of `cargo xtask reference`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Queries, `[B, Hq, Sq, D]` .npy (f16, f32 or f64).
    #[arg(long)]
    pub q: PathBuf,
    /// Keys, `[B, Hkv, Sk, D]` .npy.
    #[arg(long)]
    pub k: PathBuf,
    /// Values, `[B, Hkv, Sk, D]` .npy, shaped like K.
    #[arg(long)]
    pub v: PathBuf,
    /// Causal mask: none, top-left (PyTorch is_causal) or bottom-right (FlashAttention ≥ 2.1).
    #[arg(long, value_enum, default_value_t = CausalArg::None)]
    pub causal: CausalArg,
    /// Softmax scale; default 1/√D.
    #[arg(long)]
    pub scale: Option<f64>,
    /// Element type of the outputs.
    #[arg(long, value_enum, default_value = "f32")]
    pub out_dtype: OutDtype,
    /// Where to write O, `[B, Hq, Sq, D]`.
    #[arg(long)]
    pub out: PathBuf,
    /// Where to write LSE, `[B, Hq, Sq]` (optional).
    #[arg(long)]
    pub lse: Option<PathBuf>,
    /// Layout of Q, K, V and O: bhsd (`[B, H, S, D]`) or bshd (`[B, S, H, D]`).
    #[arg(long, value_enum, default_value = "bhsd")]
    pub layout: crate::flags::LayoutArg,
    /// Gradient of the loss with respect to O, shaped like O: runs the backward pass too
    /// (needs --dq, --dk and --dv).
    #[arg(long = "do", value_name = "DO")]
    pub d_o: Option<PathBuf>,
    /// Where to write dQ, shaped like Q (with --do).
    #[arg(long)]
    pub dq: Option<PathBuf>,
    /// Where to write dK, shaped like K (with --do).
    #[arg(long)]
    pub dk: Option<PathBuf>,
    /// Where to write dV, shaped like V (with --do).
    #[arg(long)]
    pub dv: Option<PathBuf>,
    /// Where to write the sink logits' gradient, `[Hq]` (with --do and --sinks).
    #[arg(long)]
    pub dsinks: Option<PathBuf>,
    /// Serving features, varlen and paged KV.
    #[command(flatten)]
    pub features: FeatureArgs,
}

/// The paths of the backward pass: dO in, dQ, dK, dV out.
struct BackwardPaths {
    d_o: PathBuf,
    dq: PathBuf,
    dk: PathBuf,
    dv: PathBuf,
}

impl Args {
    /// The backward paths when `--do`, `--dq`, `--dk`, `--dv` are all given, `None` when
    /// none is, an error naming the missing flags otherwise.
    fn backward_paths(&self) -> anyhow::Result<Option<BackwardPaths>> {
        let flags = [
            ("--do", &self.d_o),
            ("--dq", &self.dq),
            ("--dk", &self.dk),
            ("--dv", &self.dv),
        ];
        let names = |given: bool| -> Vec<&str> {
            flags
                .iter()
                .filter(|(_, path)| path.is_some() == given)
                .map(|(name, _)| *name)
                .collect()
        };
        match (&self.d_o, &self.dq, &self.dk, &self.dv) {
            (None, None, None, None) => Ok(None),
            (Some(d_o), Some(dq), Some(dk), Some(dv)) => Ok(Some(BackwardPaths {
                d_o: d_o.clone(),
                dq: dq.clone(),
                dk: dk.clone(),
                dv: dv.clone(),
            })),
            _ => bail!(
                "{} given without {}: the backward pass needs --do, --dq, --dk and --dv together",
                names(true).join(", "),
                names(false).join(", ")
            ),
        }
    }
}

/// Writes `data` (f64) as `dims` in `dtype`.
fn write_out(
    path: &std::path::Path,
    dims: &[usize],
    data: &[f64],
    dtype: OutDtype,
) -> anyhow::Result<()> {
    match dtype {
        OutDtype::F64 => npy::write(path, dims, data),
        OutDtype::F32 => {
            let narrow: Vec<f32> = data.iter().map(|&x| x as f32).collect();
            npy::write(path, dims, &narrow)
        }
    }
}

/// The serving-feature flags of `cargo xtask reference` (all optional).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FeatureArgs {
    /// Sliding window `L,R` (−1 = unbounded), bottom-right aligned like FlashAttention: key j
    /// is visible to query i iff i+Sk−Sq−L ≤ j ≤ i+Sk−Sq+R; intersected with --causal.
    #[arg(long, value_name = "L,R", allow_hyphen_values = true)]
    pub window: Option<WindowArg>,
    /// Softcap F > 0: score ← F·tanh(score/F) on the scaled score.
    #[arg(long, value_name = "F")]
    pub softcap: Option<f64>,
    /// ALiBi slopes, f32 .npy `[Hq]` or `[B, Hq]`: score −= slope·|i+Sk−Sq−j|.
    #[arg(long, value_name = "A.npy")]
    pub alibi: Option<PathBuf>,
    /// Attention-sink logits, f32 .npy `[Hq]`, added to each row's softmax denominator.
    #[arg(long, value_name = "S.npy")]
    pub sinks: Option<PathBuf>,
    /// Varlen: int32 .npy `[B+1]` prefix sums of the query lengths; Q and O are then
    /// `[total_q, Hq, D]` and LSE `[Hq, total_q]`.
    #[arg(long, value_name = "C.npy", requires = "cu_seqlens_k", conflicts_with_all = ["block_table", "seqused_k"])]
    pub cu_seqlens_q: Option<PathBuf>,
    /// Varlen: int32 .npy `[B+1]` prefix sums of the key lengths; K and V are then
    /// `[total_k, Hkv, D]`.
    #[arg(long, value_name = "C.npy", requires = "cu_seqlens_q")]
    pub cu_seqlens_k: Option<PathBuf>,
    /// Paged KV: int32 .npy `[B, max_blocks_per_seq]`; K and V are then the paged caches
    /// `[num_blocks, page_size, Hkv, D]` (page_size a multiple of 16).
    #[arg(long, value_name = "T.npy", requires = "seqused_k")]
    pub block_table: Option<PathBuf>,
    /// Paged KV: int32 .npy `[B]`, the number of valid keys of each sequence.
    #[arg(long, value_name = "U.npy", requires = "block_table")]
    pub seqused_k: Option<PathBuf>,
}

/// Reads an f32 `.npy` for a feature flag.
fn read_f32_flag(path: &Path, flag: &str) -> anyhow::Result<(Vec<usize>, Vec<f32>)> {
    let arr = npy::read(path).with_context(|| format!("{flag} {}", path.display()))?;
    if arr.dtype != "<f4" {
        bail!(
            "{flag} {}: dtype `{}` is not f32 (`<f4`)",
            path.display(),
            arr.dtype
        );
    }
    Ok((arr.shape, arr.data.iter().map(|&x| x as f32).collect()))
}

/// Reads an int32 `.npy` of rank `rank` for a flag.
pub(crate) fn read_i32_flag(
    path: &Path,
    flag: &str,
    rank: usize,
) -> anyhow::Result<(Vec<usize>, Vec<i32>)> {
    let (shape, data) =
        npy::read_i32(path).with_context(|| format!("{flag} {}", path.display()))?;
    if shape.len() != rank {
        bail!(
            "{flag} {}: expected a {rank}-D int32 array, got shape {shape:?}",
            path.display()
        );
    }
    Ok((shape, data))
}

/// Adds the window, softcap, ALiBi and sinks flags to a problem; errors name the flag.
pub(crate) fn apply_features(mut problem: Problem, f: &FeatureArgs) -> anyhow::Result<Problem> {
    if let Some(w) = f.window {
        problem = problem.with_window(w.left, w.right).context("--window")?;
    }
    if let Some(c) = f.softcap {
        problem = problem.with_softcap(c).context("--softcap")?;
    }
    let (batch, hq) = (problem.shape().batch(), problem.shape().q_heads());
    if let Some(path) = &f.alibi {
        let (shape, slopes) = read_f32_flag(path, "--alibi")?;
        let alibi = match shape[..] {
            [h] if h == hq => Alibi::PerHead(slopes),
            [b, h] if b == batch && h == hq => Alibi::PerBatchHead(slopes),
            _ => bail!(
                "--alibi {}: shape {shape:?} is neither [Hq] = [{hq}] nor [B, Hq] = [{batch}, {hq}]",
                path.display()
            ),
        };
        problem = problem
            .with_alibi(alibi)
            .with_context(|| format!("--alibi {}", path.display()))?;
    }
    if let Some(path) = &f.sinks {
        let (shape, sinks) = read_f32_flag(path, "--sinks")?;
        if shape != [hq] {
            bail!(
                "--sinks {}: shape {shape:?} is not [Hq] = [{hq}]",
                path.display()
            );
        }
        problem = problem
            .with_sinks(sinks)
            .with_context(|| format!("--sinks {}", path.display()))?;
    }
    Ok(problem)
}

/// Reads one float input of any rank.
pub(crate) fn read_float(path: &Path, name: &str) -> anyhow::Result<npy::NpyArray> {
    let arr = npy::read(path).with_context(|| format!("reading {name}"))?;
    if !matches!(arr.dtype.as_str(), "<f2" | "<f4" | "<f8") {
        bail!(
            "{name} ({}): dtype `{}` is not a float type; expected f16, f32 or f64",
            path.display(),
            arr.dtype
        );
    }
    Ok(arr)
}

/// Writes O and (with `--lse`) LSE in `--out-dtype`.
fn write_outputs(
    args: &Args,
    o: &[f64],
    o_dims: &[usize],
    lse: &[f64],
    lse_dims: &[usize],
) -> anyhow::Result<()> {
    match args.out_dtype {
        OutDtype::F64 => {
            npy::write(&args.out, o_dims, o)?;
            if let Some(path) = &args.lse {
                npy::write(path, lse_dims, lse)?;
            }
        }
        OutDtype::F32 => {
            let o: Vec<f32> = o.iter().map(|&x| x as f32).collect();
            npy::write(&args.out, o_dims, &o)?;
            if let Some(path) = &args.lse {
                let lse: Vec<f32> = lse.iter().map(|&x| x as f32).collect();
                npy::write(path, lse_dims, &lse)?;
            }
        }
    }
    Ok(())
}

/// `--cu-seqlens-q/-k`: Q `[total_q, Hq, D]`, K and V `[total_k, Hkv, D]`.
fn run_varlen(args: &Args, cu_q: &Path, cu_k: &Path) -> anyhow::Result<()> {
    if args.layout != crate::flags::LayoutArg::Bhsd {
        bail!("--layout bshd does not apply to varlen inputs, which are [total, H, D]");
    }
    let (_, cu_q) = read_i32_flag(cu_q, "--cu-seqlens-q", 1)?;
    let (_, cu_k) = read_i32_flag(cu_k, "--cu-seqlens-k", 1)?;
    if cu_q.len() < 2 {
        bail!(
            "--cu-seqlens-q has {} entries; it needs B + 1 ≥ 2",
            cu_q.len()
        );
    }
    if cu_k.len() != cu_q.len() {
        bail!(
            "--cu-seqlens-k has {} entries but --cu-seqlens-q has {}; both are [B + 1]",
            cu_k.len(),
            cu_q.len()
        );
    }
    let rank3 = |arr: &npy::NpyArray, name: &str| match arr.shape[..] {
        [t, h, d] => Ok([t, h, d]),
        _ => bail!(
            "{name}: expected a 3-D [total, H, D] array with --cu-seqlens-*, got shape {:?}",
            arr.shape
        ),
    };
    let (q, k, v) = (
        read_float(&args.q, "Q")?,
        read_float(&args.k, "K")?,
        read_float(&args.v, "V")?,
    );
    let ([tq, hq, dq], [_, hkv, dk]) = (rank3(&q, "Q")?, rank3(&k, "K")?);
    if k.shape != v.shape {
        bail!(
            "K has shape {:?} but V has shape {:?}; they must be equal ([total_k, Hkv, D])",
            k.shape,
            v.shape
        );
    }
    if dq != dk {
        bail!("head-dim mismatch: Q has D = {dq}, K/V have D = {dk}");
    }
    let batch = cu_q.len() - 1;
    let shape = AttnShape::new(batch, hq, hkv, 1, 1, dq).context("invalid attention shape")?;
    let mut template = Problem::new(shape, Causal::from(args.causal));
    if let Some(scale) = args.scale {
        template = template.with_scale(scale)?;
    }
    let template = apply_features(template, &args.features)?;
    let Some(paths) = args.backward_paths()? else {
        let out = varlen::forward_varlen(&template, &cu_q, &cu_k, &q.data, &k.data, &v.data)
            .context("varlen inputs (--cu-seqlens-q, --cu-seqlens-k)")?;
        return write_outputs(args, &out.o, &[tq, hq, dq], &out.lse, &[hq, tq]);
    };
    let d_o = read_float(&paths.d_o, "dO")?;
    if d_o.shape != q.shape {
        bail!(
            "dO has shape {:?} but O has shape {:?}; they must be equal ([total_q, Hq, D])",
            d_o.shape,
            q.shape
        );
    }
    let g = varlen::backward_varlen(
        &template, &cu_q, &cu_k, &q.data, &k.data, &v.data, &d_o.data,
    )
    .context("varlen inputs (--cu-seqlens-q, --cu-seqlens-k)")?;
    write_outputs(args, &g.o, &[tq, hq, dq], &g.lse, &[hq, tq])?;
    for (path, data, dims) in [
        (&paths.dq, &g.dq, &q.shape),
        (&paths.dk, &g.dk, &k.shape),
        (&paths.dv, &g.dv, &k.shape),
    ] {
        write_out(path, dims, data, args.out_dtype)?;
    }
    write_dsinks(args, &g)
}

/// `--block-table/--seqused-k`: Q `[B, Hq, Sq, D]` (or bshd), K and V the paged caches.
fn run_paged(args: &Args, table: &Path, seqused: &Path) -> anyhow::Result<()> {
    let layout = attn_kernels::Layout::from(args.layout);
    let (table_shape, table) = read_i32_flag(table, "--block-table", 2)?;
    let (_, seqused) = read_i32_flag(seqused, "--seqused-k", 1)?;
    let (q_shape, q) = read_input(&args.q, "Q")?;
    let q_shape = match layout {
        attn_kernels::Layout::Bhsd => q_shape,
        attn_kernels::Layout::Bshd => [q_shape[0], q_shape[2], q_shape[1], q_shape[3]],
    };
    let (k_shape, k) = read_input(&args.k, "K")?;
    let (v_shape, v) = read_input(&args.v, "V")?;
    if k_shape != v_shape {
        bail!("K has shape {k_shape:?} but V has shape {v_shape:?}; they must be equal ([num_blocks, page_size, Hkv, D])");
    }
    let [b, hq, sq, dq] = q_shape;
    let [_, page_size, hkv, dk] = k_shape;
    if dq != dk {
        bail!("head-dim mismatch: Q has D = {dq}, the K/V cache has D = {dk}");
    }
    if table_shape[0] != b {
        bail!(
            "--block-table has {} rows but Q has B = {b}",
            table_shape[0]
        );
    }
    if seqused.len() != b {
        bail!(
            "--seqused-k has {} entries but Q has B = {b}",
            seqused.len()
        );
    }
    let shape = AttnShape::new(b, hq, hkv, sq, 1, dq).context("invalid attention shape")?;
    let mut template = Problem::new(shape, Causal::from(args.causal));
    if let Some(scale) = args.scale {
        template = template.with_scale(scale)?;
    }
    let template = apply_features(template, &args.features)?;
    let q = layout.to_bhsd(&q, q_shape);
    let kv = paged::PagedKv {
        k_cache: &k,
        v_cache: &v,
        page_size,
        block_table: &table,
        seqused_k: &seqused,
    };
    let out = paged::forward_paged(&template, &q, &kv)
        .context("paged KV (--block-table, --seqused-k)")?;
    let o = layout.from_bhsd(&out.o, q_shape);
    let o_dims = match layout {
        attn_kernels::Layout::Bhsd => q_shape,
        attn_kernels::Layout::Bshd => [b, sq, hq, dq],
    };
    write_outputs(args, &o, &o_dims, &out.lse, &q_shape[..3])
}

/// Reads one input tensor: a 4-D float array.
fn read_input(path: &std::path::Path, name: &str) -> anyhow::Result<([usize; 4], Vec<f64>)> {
    let arr = npy::read(path).with_context(|| format!("reading {name}"))?;
    if !matches!(arr.dtype.as_str(), "<f2" | "<f4" | "<f8") {
        bail!(
            "{name} ({}): dtype `{}` is not a float type; expected f16, f32 or f64",
            path.display(),
            arr.dtype
        );
    }
    let shape = arr.shape4(&format!("{name} ({})", path.display()))?;
    Ok((shape, arr.data))
}

/// The attention shape implied by Q `[B,Hq,Sq,D]` and K, V `[B,Hkv,Sk,D]`, with every
/// cross-check a user can get wrong named in the error.
fn problem_shape(q: [usize; 4], k: [usize; 4], v: [usize; 4]) -> anyhow::Result<AttnShape> {
    if k != v {
        bail!("K has shape {k:?} but V has shape {v:?}; they must be equal ([B, Hkv, Sk, D])");
    }
    let ([bq, hq, sq, dq], [bk, hkv, sk, dk]) = (q, k);
    if bq != bk {
        bail!("batch mismatch: Q has B = {bq}, K/V have B = {bk}");
    }
    if dq != dk {
        bail!("head-dim mismatch: Q has D = {dq}, K/V have D = {dk}");
    }
    AttnShape::new(bq, hq, hkv, sq, sk, dq).context("invalid attention shape")
}

/// Runs the reference and writes O (and LSE; and with `--do`, dQ, dK, dV).
pub fn run(args: Args) -> anyhow::Result<()> {
    let backward = args.backward_paths()?;
    let f = &args.features;
    if backward.is_some() && (f.block_table.is_some() || f.seqused_k.is_some()) {
        bail!("--do/--dq/--dk/--dv: the backward reference takes dense and varlen problems, not a paged KV cache (an inference layout)");
    }
    if args.dsinks.is_some() && (backward.is_none() || f.sinks.is_none()) {
        bail!("--dsinks is the gradient of the sink logits: it needs --do (with --dq, --dk, --dv) and --sinks");
    }
    match (
        &f.cu_seqlens_q,
        &f.cu_seqlens_k,
        &f.block_table,
        &f.seqused_k,
    ) {
        (Some(_), _, Some(_), _) | (Some(_), _, _, Some(_)) | (_, Some(_), Some(_), _) => {
            bail!("--cu-seqlens-q/-k (varlen) and --block-table/--seqused-k (paged KV) cannot be combined")
        }
        (Some(cq), Some(ck), None, None) => return run_varlen(&args, cq, ck),
        (Some(_), None, ..) => bail!("--cu-seqlens-q needs --cu-seqlens-k"),
        (None, Some(_), ..) => bail!("--cu-seqlens-k needs --cu-seqlens-q"),
        (None, None, Some(t), Some(u)) => return run_paged(&args, t, u),
        (None, None, Some(_), None) => bail!("--block-table needs --seqused-k"),
        (None, None, None, Some(_)) => bail!("--seqused-k needs --block-table"),
        (None, None, None, None) => {}
    }
    let causal = Causal::from(args.causal);
    let layout = attn_kernels::Layout::from(args.layout);
    // [B, S, H, D] files are read as such and permuted to the reference's [B, H, S, D].
    let swap = |[a, b, c, d]: [usize; 4]| match layout {
        attn_kernels::Layout::Bhsd => [a, b, c, d],
        attn_kernels::Layout::Bshd => [a, c, b, d],
    };
    let (q_shape, q) = read_input(&args.q, "Q")?;
    let (k_shape, k) = read_input(&args.k, "K")?;
    let (v_shape, v) = read_input(&args.v, "V")?;
    let (q_shape, k_shape, v_shape) = (swap(q_shape), swap(k_shape), swap(v_shape));
    let shape = problem_shape(q_shape, k_shape, v_shape)?;
    let mut problem = Problem::new(shape, causal);
    if let Some(scale) = args.scale {
        problem = problem.with_scale(scale)?;
    }
    let problem = apply_features(problem, &args.features)?;
    let (q, k, v) = (
        layout.to_bhsd(&q, q_shape),
        layout.to_bhsd(&k, k_shape),
        layout.to_bhsd(&v, v_shape),
    );
    let d_o = match &backward {
        Some(paths) => {
            let (do_shape, d_o) = read_input(&paths.d_o, "dO")?;
            let do_shape = swap(do_shape);
            if do_shape != q_shape {
                bail!(
                    "dO has shape {:?} but O has shape {:?}; they must be equal",
                    swap(do_shape),
                    swap(q_shape)
                );
            }
            Some(layout.to_bhsd(&d_o, q_shape))
        }
        None => None,
    };
    let out = reference::forward(&problem, &q, &k, &v)?;
    let grads = d_o
        .map(|d_o| reference::backward_with(&problem, &q, &k, &v, &out.o, &out.lse, &d_o))
        .transpose()?;

    let lse_dims = &q_shape[..3];
    let o_dims = swap(q_shape);
    write_out(
        &args.out,
        &o_dims,
        &layout.from_bhsd(&out.o, q_shape),
        args.out_dtype,
    )?;
    if let Some(path) = &args.lse {
        write_out(path, lse_dims, &out.lse, args.out_dtype)?;
    }
    if let (Some(paths), Some(g)) = (&backward, &grads) {
        let kv_dims = swap(k_shape);
        for (path, data, dims, bhsd) in [
            (&paths.dq, &g.dq, o_dims, q_shape),
            (&paths.dk, &g.dk, kv_dims, k_shape),
            (&paths.dv, &g.dv, kv_dims, k_shape),
        ] {
            write_out(path, &dims, &layout.from_bhsd(data, bhsd), args.out_dtype)?;
        }
        write_dsinks(&args, g)?;
    }
    Ok(())
}

/// `--dsinks`: the sink logits' gradient `[Hq]`, when asked (run checked it has sinks).
fn write_dsinks(args: &Args, g: &reference::RefGrads) -> anyhow::Result<()> {
    if let (Some(path), Some(ds)) = (&args.dsinks, &g.dsinks) {
        write_out(path, &[ds.len()], ds, args.out_dtype)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};
    use rand_distr::{Distribution, StandardNormal};
    use std::path::Path;

    /// A fresh directory under the system temp dir for one test.
    fn temp_dir(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("xtask-reference-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn normal(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n).map(|_| StandardNormal.sample(&mut rng)).collect()
    }

    /// Writes random f32 Q, K, V with the given shapes; returns their paths and values.
    fn write_qkv(dir: &Path, q: [usize; 4], kv: [usize; 4]) -> [(PathBuf, Vec<f32>); 3] {
        let mut seed = 0;
        [("q", q), ("k", kv), ("v", kv)].map(|(name, shape)| {
            seed += 1;
            let path = dir.join(format!("{name}.npy"));
            let data = normal(shape.iter().product(), seed);
            npy::write(&path, &shape, &data).unwrap();
            (path, data)
        })
    }

    fn args(dir: &Path, causal: &str) -> Args {
        Args {
            q: dir.join("q.npy"),
            k: dir.join("k.npy"),
            v: dir.join("v.npy"),
            causal: <CausalArg as clap::ValueEnum>::from_str(causal, false).unwrap(),
            scale: None,
            out_dtype: OutDtype::F32,
            out: dir.join("o.npy"),
            lse: Some(dir.join("lse.npy")),
            layout: crate::flags::LayoutArg::Bhsd,
            d_o: None,
            dq: None,
            dk: None,
            dv: None,
            dsinks: None,
            features: FeatureArgs::default(),
        }
    }

    #[test]
    fn bshd_files_give_the_bhsd_result_in_bshd_order() {
        use attn_kernels::Layout;
        let dir = temp_dir("bshd");
        // Q [B=2, Sq=5, Hq=4, D=8], K/V [2, Sk=7, Hkv=2, 8] on disk.
        let [(_, q), (_, k), (_, v)] = write_qkv(&dir, [2, 5, 4, 8], [2, 7, 2, 8]);
        let mut a = args(&dir, "bottom-right");
        a.layout = crate::flags::LayoutArg::Bshd;
        run(a).unwrap();
        let o = npy::read(&dir.join("o.npy")).unwrap();
        let lse = npy::read(&dir.join("lse.npy")).unwrap();
        assert_eq!(o.shape, vec![2, 5, 4, 8]);
        assert_eq!(lse.shape, vec![2, 4, 5]);
        let shape = AttnShape::new(2, 4, 2, 5, 7, 8).unwrap();
        let problem = Problem::new(shape, Causal::BottomRight);
        let (qd, kd) = ([2, 4, 5, 8], [2, 2, 7, 8]);
        let want = reference::forward(
            &problem,
            &Layout::Bshd.to_bhsd(&q, qd),
            &Layout::Bshd.to_bhsd(&k, kd),
            &Layout::Bshd.to_bhsd(&v, kd),
        )
        .unwrap();
        let want_o = Layout::Bshd.from_bhsd(&want.o, qd);
        assert!(o
            .data
            .iter()
            .zip(&want_o)
            .all(|(a, b)| *a == f64::from(*b as f32)));
        assert!(lse
            .data
            .iter()
            .zip(&want.lse)
            .all(|(a, b)| *a == f64::from(*b as f32)));
    }

    #[test]
    fn writes_the_reference_output() {
        let dir = temp_dir("ok");
        let [(_, q), (_, k), (_, v)] = write_qkv(&dir, [2, 4, 5, 8], [2, 2, 7, 8]);
        let shape = AttnShape::new(2, 4, 2, 5, 7, 8).unwrap();
        for (causal, out_dtype, scale) in [
            ("none", OutDtype::F32, None),
            ("bottom-right", OutDtype::F64, Some(0.3)),
            ("top-left", OutDtype::F32, Some(1.5)),
        ] {
            let mut a = args(&dir, causal);
            a.out_dtype = out_dtype;
            a.scale = scale;
            run(a).unwrap();
            let mut problem = Problem::new(shape, Causal::parse(causal).unwrap());
            if let Some(s) = scale {
                problem = problem.with_scale(s).unwrap();
            }
            let want = reference::forward(&problem, &q, &k, &v).unwrap();
            let o = npy::read(&dir.join("o.npy")).unwrap();
            let lse = npy::read(&dir.join("lse.npy")).unwrap();
            assert_eq!(o.shape, vec![2, 4, 5, 8]);
            assert_eq!(lse.shape, vec![2, 4, 5]);
            let expected_dtype = if out_dtype == OutDtype::F64 {
                "<f8"
            } else {
                "<f4"
            };
            assert_eq!(o.dtype, expected_dtype);
            let narrow = |x: f64| {
                if out_dtype == OutDtype::F64 {
                    x
                } else {
                    f64::from(x as f32)
                }
            };
            assert!(
                o.data.iter().zip(&want.o).all(|(a, b)| *a == narrow(*b)),
                "{causal}"
            );
            assert!(
                lse.data
                    .iter()
                    .zip(&want.lse)
                    .all(|(a, b)| *a == narrow(*b)),
                "{causal}"
            );
        }
    }

    #[test]
    fn f16_inputs_and_masked_rows() {
        let dir = temp_dir("f16");
        let shape = [1, 1, 4, 2];
        let data: Vec<half::f16> = normal(8, 9)
            .iter()
            .map(|&x| half::f16::from_f32(x))
            .collect();
        for name in ["q", "k"] {
            npy::write(&dir.join(format!("{name}.npy")), &shape, &data).unwrap();
        }
        let kv_shape = [1, 1, 2, 2];
        npy::write(&dir.join("k.npy"), &kv_shape, &data[..4]).unwrap();
        npy::write(&dir.join("v.npy"), &kv_shape, &data[4..]).unwrap();
        run(args(&dir, "bottom-right")).unwrap();
        // Sq = 4 > Sk = 2 bottom-right: rows 0 and 1 see no key → O = 0, LSE = −∞.
        let o = npy::read(&dir.join("o.npy")).unwrap();
        let lse = npy::read(&dir.join("lse.npy")).unwrap();
        assert_eq!(&o.data[..4], &[0.0; 4]);
        assert_eq!(&lse.data[..2], &[f64::NEG_INFINITY; 2]);
        assert!(lse.data[2..].iter().all(|x| x.is_finite()));
    }

    /// `args` with the four backward flags pointing into `dir`.
    fn backward_args(dir: &Path, causal: &str) -> Args {
        let mut a = args(dir, causal);
        a.d_o = Some(dir.join("do.npy"));
        a.dq = Some(dir.join("dq.npy"));
        a.dk = Some(dir.join("dk.npy"));
        a.dv = Some(dir.join("dv.npy"));
        a
    }

    #[test]
    fn writes_the_backward_reference_gradients() {
        use attn_kernels::Layout;
        let dir = temp_dir("backward");
        let shape = AttnShape::new(2, 4, 2, 5, 7, 8).unwrap();
        for (layout, causal, out_dtype, scale) in [
            (Layout::Bhsd, "none", OutDtype::F32, None),
            (Layout::Bhsd, "bottom-right", OutDtype::F64, Some(0.3)),
            (Layout::Bshd, "top-left", OutDtype::F64, Some(1.5)),
        ] {
            let (qd, kd) = ([2, 4, 5, 8], [2, 2, 7, 8]); // [B, H, S, D]
            let disk = |[a, b, c, d]: [usize; 4]| match layout {
                Layout::Bhsd => [a, b, c, d],
                Layout::Bshd => [a, c, b, d],
            };
            let [(_, q), (_, k), (_, v)] = write_qkv(&dir, disk(qd), disk(kd));
            let d_o = normal(shape.q_elems(), 77);
            npy::write(&dir.join("do.npy"), &disk(qd), &d_o).unwrap();
            let mut a = backward_args(&dir, causal);
            a.out_dtype = out_dtype;
            a.scale = scale;
            a.layout = match layout {
                Layout::Bhsd => crate::flags::LayoutArg::Bhsd,
                Layout::Bshd => crate::flags::LayoutArg::Bshd,
            };
            run(a).unwrap();

            let mut problem = Problem::new(shape, Causal::parse(causal).unwrap());
            if let Some(s) = scale {
                problem = problem.with_scale(s).unwrap();
            }
            let bhsd = |x: &[f32], dims| layout.to_bhsd(x, dims);
            let want = reference::backward(
                &problem,
                &bhsd(&q, qd),
                &bhsd(&k, kd),
                &bhsd(&v, kd),
                &bhsd(&d_o, qd),
            )
            .unwrap();
            let narrow = |x: f64| {
                if out_dtype == OutDtype::F64 {
                    x
                } else {
                    f64::from(x as f32)
                }
            };
            let expected_dtype = match out_dtype {
                OutDtype::F64 => "<f8",
                OutDtype::F32 => "<f4",
            };
            for (name, grad, dims) in [
                ("dq", &want.dq, qd),
                ("dk", &want.dk, kd),
                ("dv", &want.dv, kd),
            ] {
                let got = npy::read(&dir.join(format!("{name}.npy"))).unwrap();
                assert_eq!(got.shape, disk(dims).to_vec(), "{causal} {name}");
                assert_eq!(got.dtype, expected_dtype, "{causal} {name}");
                let want_disk = layout.from_bhsd(grad, dims);
                assert!(
                    got.data
                        .iter()
                        .zip(&want_disk)
                        .all(|(a, b)| *a == narrow(*b)),
                    "{causal} {name}"
                );
                assert!(got.data.iter().any(|&x| x != 0.0), "{causal} {name}");
            }
            let o = npy::read(&dir.join("o.npy")).unwrap();
            let want_o = layout.from_bhsd(&want.o, qd);
            assert!(o.data.iter().zip(&want_o).all(|(a, b)| *a == narrow(*b)));
        }
    }

    #[test]
    fn backward_flags_come_together() {
        let dir = temp_dir("backward-flags");
        write_qkv(&dir, [1, 2, 3, 4], [1, 2, 3, 4]);
        npy::write(&dir.join("do.npy"), &[1, 2, 3, 4], &normal(24, 5)).unwrap();
        let mut a = backward_args(&dir, "none");
        a.dk = None;
        let msg = run_err(a);
        assert!(msg.contains("--do, --dq, --dv given without --dk"), "{msg}");
        let mut a = args(&dir, "none");
        a.d_o = Some(dir.join("do.npy"));
        let msg = run_err(a);
        assert!(msg.contains("given without --dq, --dk, --dv"), "{msg}");
        let mut a = args(&dir, "none");
        a.dq = Some(dir.join("dq.npy"));
        let msg = run_err(a);
        assert!(msg.contains("--dq given without --do, --dk, --dv"), "{msg}");
        assert!(!dir.join("o.npy").exists(), "no output on a flag error");
        // dO must be shaped like O.
        npy::write(&dir.join("do.npy"), &[1, 2, 4, 4], &normal(32, 5)).unwrap();
        let msg = run_err(backward_args(&dir, "none"));
        assert!(msg.contains("dO has shape [1, 2, 4, 4]"), "{msg}");
        // The flag is spelled --do on the command line.
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = <Cli as clap::Parser>::try_parse_from([
            "reference",
            "--q",
            "q",
            "--k",
            "k",
            "--v",
            "v",
            "--out",
            "o",
            "--do",
            "g",
            "--dq",
            "a",
            "--dk",
            "b",
            "--dv",
            "c",
        ])
        .expect("backward flags parse");
        assert_eq!(cli.args.d_o, Some(PathBuf::from("g")));
        assert_eq!(cli.args.dv, Some(PathBuf::from("c")));
    }

    #[test]
    fn backward_with_features_varlen_and_dsinks() {
        let dir = temp_dir("backward-features");
        let shape = AttnShape::new(1, 4, 2, 5, 7, 8).unwrap();
        let (qd, kd) = ([1, 4, 5, 8], [1, 2, 7, 8]);
        let [(_, q), (_, k), (_, v)] = write_qkv(&dir, qd, kd);
        let d_o = normal(shape.q_elems(), 78);
        npy::write(&dir.join("do.npy"), &qd, &d_o).unwrap();
        let sinks = normal(4, 79);
        npy::write(&dir.join("sinks.npy"), &[4], &sinks).unwrap();
        let mut a = backward_args(&dir, "bottom-right");
        a.out_dtype = OutDtype::F64;
        a.features.window = Some("3,0".parse().unwrap());
        a.features.softcap = Some(2.0);
        a.features.sinks = Some(dir.join("sinks.npy"));
        a.dsinks = Some(dir.join("dsinks.npy"));
        run(a).unwrap();
        let p = Problem::new(shape, Causal::BottomRight)
            .with_window(3, 0)
            .unwrap()
            .with_softcap(2.0)
            .unwrap()
            .with_sinks(sinks.clone())
            .unwrap();
        let want = reference::backward(&p, &q, &k, &v, &d_o).unwrap();
        for (name, w) in [("dq", &want.dq), ("dk", &want.dk), ("dv", &want.dv)] {
            let got = npy::read(&dir.join(format!("{name}.npy"))).unwrap();
            assert_eq!(&got.data, w, "{name}");
        }
        let ds = npy::read(&dir.join("dsinks.npy")).unwrap();
        assert_eq!(
            (ds.shape.as_slice(), &ds.data),
            ([4usize].as_slice(), want.dsinks.as_ref().unwrap())
        );

        // Varlen: [total, H, D] files, the per-sequence backward.
        let (cu_q, cu_k) = ([0i32, 2, 5], [0i32, 4, 7]);
        npy::write(&dir.join("cuq.npy"), &[3], &cu_q).unwrap();
        npy::write(&dir.join("cuk.npy"), &[3], &cu_k).unwrap();
        let (pq, pk) = (normal(5 * 4 * 8, 80), normal(7 * 2 * 8, 81));
        let (pv, pdo) = (normal(7 * 2 * 8, 82), normal(5 * 4 * 8, 83));
        for (name, data, dims) in [
            ("q", &pq, [5, 4, 8]),
            ("k", &pk, [7, 2, 8]),
            ("v", &pv, [7, 2, 8]),
            ("do", &pdo, [5, 4, 8]),
        ] {
            npy::write(&dir.join(format!("{name}.npy")), &dims, data).unwrap();
        }
        let mut a = backward_args(&dir, "bottom-right");
        a.out_dtype = OutDtype::F64;
        a.features.cu_seqlens_q = Some(dir.join("cuq.npy"));
        a.features.cu_seqlens_k = Some(dir.join("cuk.npy"));
        run(a).unwrap();
        let template = Problem::new(
            AttnShape::new(2, 4, 2, 1, 1, 8).unwrap(),
            Causal::BottomRight,
        );
        let want = varlen::backward_varlen(&template, &cu_q, &cu_k, &pq, &pk, &pv, &pdo).unwrap();
        for (name, w, dims) in [
            ("dq", &want.dq, [5, 4, 8]),
            ("dk", &want.dk, [7, 2, 8]),
            ("dv", &want.dv, [7, 2, 8]),
        ] {
            let got = npy::read(&dir.join(format!("{name}.npy"))).unwrap();
            assert_eq!(
                (got.shape.as_slice(), &got.data),
                (dims.as_slice(), w),
                "varlen {name}"
            );
        }

        // --dsinks without --sinks, and a paged cache with --do: named errors.
        let mut a = backward_args(&dir, "none");
        a.dsinks = Some(dir.join("x.npy"));
        assert!(run_err(a).contains("--dsinks is the gradient of the sink logits"));
        let mut a = backward_args(&dir, "none");
        a.features.block_table = Some(dir.join("cuq.npy"));
        a.features.seqused_k = Some(dir.join("cuq.npy"));
        assert!(run_err(a).contains("not a paged KV cache"));
    }

    fn run_err(a: Args) -> String {
        format!("{:#}", run(a).expect_err("must fail"))
    }

    #[test]
    fn truncated_or_corrupt_input_is_an_error() {
        let dir = temp_dir("corrupt");
        write_qkv(&dir, [1, 2, 3, 4], [1, 2, 3, 4]);
        let bytes = std::fs::read(dir.join("k.npy")).unwrap();
        std::fs::write(dir.join("k.npy"), &bytes[..bytes.len() - 5]).unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(
            msg.contains("reading K") && msg.contains("truncated"),
            "{msg}"
        );
        std::fs::write(dir.join("k.npy"), b"\x93NUMPY garbage").unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(
            msg.contains("reading K") && msg.contains("not a valid .npy"),
            "{msg}"
        );
        std::fs::remove_file(dir.join("v.npy")).unwrap();
        std::fs::write(dir.join("k.npy"), &bytes).unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(msg.contains("reading V"), "{msg}");
        assert!(!dir.join("o.npy").exists(), "no output on error");
    }

    #[test]
    fn wrong_dtypes_are_errors() {
        let dir = temp_dir("dtype");
        write_qkv(&dir, [1, 2, 3, 4], [1, 2, 3, 4]);
        let ints: Vec<i64> = (0..24).collect();
        npy::write(&dir.join("q.npy"), &[1, 2, 3, 4], &ints).unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(msg.contains("reading Q") && msg.contains("<i8"), "{msg}");
        let bytes: Vec<u8> = (0..24).collect();
        npy::write(&dir.join("q.npy"), &[1, 2, 3, 4], &bytes).unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(
            msg.contains("Q") && msg.contains("not a float type"),
            "{msg}"
        );
    }

    #[test]
    fn shape_mismatches_are_errors() {
        type Case<'a> = ([usize; 4], [usize; 4], Option<[usize; 4]>, &'a str);
        let cases: [Case; 6] = [
            (
                [1, 2, 3, 4],
                [1, 2, 3, 8],
                None,
                "head-dim mismatch: Q has D = 4",
            ),
            ([2, 2, 3, 4], [1, 2, 3, 4], None, "batch mismatch"),
            ([1, 3, 3, 4], [1, 2, 3, 4], None, "multiple of kv_heads"),
            (
                [1, 2, 3, 4],
                [1, 2, 3, 4],
                Some([1, 2, 5, 4]),
                "must be equal",
            ),
            (
                [1, 2, 0, 4],
                [1, 2, 3, 4],
                None,
                "`q_len` must be at least 1",
            ),
            (
                [1, 2, 3, 4],
                [1, 2, 3, 4],
                Some([2, 12, 1, 1]),
                "must be equal",
            ),
        ];
        for (n, (q, kv, v, want)) in cases.into_iter().enumerate() {
            let dir = temp_dir(&format!("shape{n}"));
            write_qkv(&dir, q, kv);
            if let Some(v_shape) = v {
                let data = normal(v_shape.iter().product(), 3);
                npy::write(&dir.join("v.npy"), &v_shape, &data).unwrap();
            }
            let msg = run_err(args(&dir, "none"));
            assert!(msg.contains(want), "case {n}: {msg}");
        }
        let dir = temp_dir("rank");
        write_qkv(&dir, [1, 2, 3, 4], [1, 2, 3, 4]);
        npy::write(&dir.join("q.npy"), &[6, 4], &normal(24, 4)).unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(msg.contains("expected a 4-D [B,H,S,D] array"), "{msg}");
    }

    #[test]
    fn bad_options_are_errors() {
        let dir = temp_dir("options");
        write_qkv(&dir, [1, 2, 3, 4], [1, 2, 3, 4]);
        // An unknown causal mode is now refused by clap, before `run`.
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let msg = <Cli as clap::Parser>::try_parse_from([
            "reference",
            "--q",
            "q",
            "--k",
            "k",
            "--v",
            "v",
            "--out",
            "o",
            "--causal",
            "causal",
        ])
        .map(|_| ())
        .expect_err("unknown causal mode")
        .to_string();
        assert!(
            msg.contains("invalid value 'causal' for '--causal")
                && msg.contains("none, top-left, bottom-right"),
            "{msg}"
        );
        let mut a = args(&dir, "none");
        a.scale = Some(0.0);
        let msg = run_err(a);
        assert!(
            msg.contains("softmax scale must be finite and > 0"),
            "{msg}"
        );
        let mut a = args(&dir, "none");
        a.out = dir.join("missing-dir").join("o.npy");
        let msg = run_err(a);
        assert!(msg.contains("creating"), "{msg}");
    }

    /// Asserts that the written O and LSE are `want` narrowed to f32, with the given shapes.
    fn assert_written(
        dir: &Path,
        o_shape: &[usize],
        lse_shape: &[usize],
        want: &reference::RefOutput,
    ) {
        let o = npy::read(&dir.join("o.npy")).unwrap();
        let lse = npy::read(&dir.join("lse.npy")).unwrap();
        assert_eq!(o.shape, o_shape);
        assert_eq!(lse.shape, lse_shape);
        assert_eq!(o.data.len(), want.o.len());
        assert!(o
            .data
            .iter()
            .zip(&want.o)
            .all(|(a, b)| *a == f64::from(*b as f32)));
        assert!(lse
            .data
            .iter()
            .zip(&want.lse)
            .all(|(a, b)| *a == f64::from(*b as f32)));
    }

    #[test]
    fn feature_flags_give_the_library_result() {
        let dir = temp_dir("features");
        let [(_, q), (_, k), (_, v)] = write_qkv(&dir, [2, 4, 5, 8], [2, 2, 7, 8]);
        let slopes: Vec<f32> = normal(8, 21).iter().map(|x| x.abs()).collect();
        let sinks = normal(4, 22);
        npy::write(&dir.join("alibi.npy"), &[2, 4], &slopes).unwrap();
        npy::write(&dir.join("sinks.npy"), &[4], &sinks).unwrap();
        let mut a = args(&dir, "top-left");
        a.features = FeatureArgs {
            window: Some(WindowArg { left: 2, right: 1 }),
            softcap: Some(3.0),
            alibi: Some(dir.join("alibi.npy")),
            sinks: Some(dir.join("sinks.npy")),
            ..FeatureArgs::default()
        };
        run(a).unwrap();
        let problem = Problem::new(AttnShape::new(2, 4, 2, 5, 7, 8).unwrap(), Causal::TopLeft)
            .with_window(2, 1)
            .unwrap()
            .with_softcap(3.0)
            .unwrap()
            .with_alibi(Alibi::PerBatchHead(slopes))
            .unwrap()
            .with_sinks(sinks)
            .unwrap();
        let want = reference::forward(&problem, &q, &k, &v).unwrap();
        let plain =
            reference::forward(&Problem::new(*problem.shape(), Causal::TopLeft), &q, &k, &v)
                .unwrap();
        assert_ne!(want.o, plain.o, "the features must change the result");
        assert_written(&dir, &[2, 4, 5, 8], &[2, 4, 5], &want);
    }

    #[test]
    fn varlen_flags_give_the_library_result() {
        let dir = temp_dir("varlen");
        // Three sequences (Sq, Sk) = (3, 5), (0, 1), (4, 0): an empty Q and an empty K.
        let (cu_q, cu_k) = ([0i32, 3, 3, 7], [0i32, 5, 6, 6]);
        npy::write(&dir.join("cuq.npy"), &[4], &cu_q).unwrap();
        npy::write(&dir.join("cuk.npy"), &[4], &cu_k).unwrap();
        let q = normal(7 * 4 * 8, 31);
        let k = normal(6 * 2 * 8, 32);
        let v = normal(6 * 2 * 8, 33);
        npy::write(&dir.join("q.npy"), &[7, 4, 8], &q).unwrap();
        npy::write(&dir.join("k.npy"), &[6, 2, 8], &k).unwrap();
        npy::write(&dir.join("v.npy"), &[6, 2, 8], &v).unwrap();
        let mut a = args(&dir, "bottom-right");
        a.features.cu_seqlens_q = Some(dir.join("cuq.npy"));
        a.features.cu_seqlens_k = Some(dir.join("cuk.npy"));
        a.features.window = Some(WindowArg { left: 1, right: -1 });
        run(a).unwrap();
        let template = Problem::new(
            AttnShape::new(3, 4, 2, 1, 1, 8).unwrap(),
            Causal::BottomRight,
        )
        .with_window(1, -1)
        .unwrap();
        let want = varlen::forward_varlen(&template, &cu_q, &cu_k, &q, &k, &v).unwrap();
        assert!(
            want.lse[3..7].iter().all(|&x| x == f64::NEG_INFINITY),
            "sequence 2 sees no key"
        );
        assert_written(&dir, &[7, 4, 8], &[4, 7], &want);
    }

    #[test]
    fn paged_flags_give_the_library_result() {
        let dir = temp_dir("paged");
        // Cache of 4 pages of 16; sequence 0 has 20 keys in pages 2, 0; sequence 1 has 16 in 3.
        let cache_shape = [4, 16, 2, 8];
        let [(_, q), (_, k), (_, v)] = write_qkv(&dir, [2, 4, 5, 8], cache_shape);
        let table = [2i32, 0, 3, -1];
        let seqused = [20i32, 16];
        npy::write(&dir.join("table.npy"), &[2, 2], &table).unwrap();
        npy::write(&dir.join("seqused.npy"), &[2], &seqused).unwrap();
        let mut a = args(&dir, "bottom-right");
        a.features.block_table = Some(dir.join("table.npy"));
        a.features.seqused_k = Some(dir.join("seqused.npy"));
        run(a).unwrap();
        let template = Problem::new(
            AttnShape::new(2, 4, 2, 5, 1, 8).unwrap(),
            Causal::BottomRight,
        );
        let kv = paged::PagedKv {
            k_cache: &k,
            v_cache: &v,
            page_size: 16,
            block_table: &table,
            seqused_k: &seqused,
        };
        let want = paged::forward_paged(&template, &q, &kv).unwrap();
        assert_written(&dir, &[2, 4, 5, 8], &[2, 4, 5], &want);
    }

    #[test]
    fn feature_flag_errors_name_the_flag() {
        let dir = temp_dir("feature-errors");
        write_qkv(&dir, [1, 2, 3, 4], [1, 2, 3, 4]);
        let with = |f: FeatureArgs| {
            let mut a = args(&dir, "none");
            a.features = f;
            run_err(a)
        };
        let msg = with(FeatureArgs {
            softcap: Some(0.0),
            ..Default::default()
        });
        assert!(
            msg.contains("--softcap") && msg.contains("softcap must be finite and > 0"),
            "{msg}"
        );
        let msg = with(FeatureArgs {
            window: Some(WindowArg { left: -3, right: 0 }),
            ..Default::default()
        });
        assert!(msg.contains("--window") && msg.contains("(-3, 0)"), "{msg}");
        npy::write(&dir.join("a3.npy"), &[3], &[0.1f32; 3]).unwrap();
        let msg = with(FeatureArgs {
            alibi: Some(dir.join("a3.npy")),
            ..Default::default()
        });
        assert!(
            msg.contains("--alibi") && msg.contains("neither [Hq] = [2]"),
            "{msg}"
        );
        npy::write(&dir.join("a64.npy"), &[2], &[0.1f64; 2]).unwrap();
        let msg = with(FeatureArgs {
            alibi: Some(dir.join("a64.npy")),
            ..Default::default()
        });
        assert!(msg.contains("--alibi") && msg.contains("not f32"), "{msg}");
        npy::write(&dir.join("nan.npy"), &[2], &[0.0f32, f32::NAN]).unwrap();
        let msg = with(FeatureArgs {
            sinks: Some(dir.join("nan.npy")),
            ..Default::default()
        });
        assert!(msg.contains("--sinks") && msg.contains("sinks[1]"), "{msg}");
        let msg = with(FeatureArgs {
            sinks: Some(dir.join("a3.npy")),
            ..Default::default()
        });
        assert!(
            msg.contains("--sinks") && msg.contains("is not [Hq] = [2]"),
            "{msg}"
        );
        let msg = with(FeatureArgs {
            sinks: Some(dir.join("missing.npy")),
            ..Default::default()
        });
        assert!(msg.contains("--sinks"), "{msg}");

        // Varlen.
        npy::write(&dir.join("cu_bad.npy"), &[3], &[0i32, 2, 1]).unwrap();
        npy::write(&dir.join("cu_ok.npy"), &[3], &[0i32, 1, 3]).unwrap();
        npy::write(&dir.join("cu_f.npy"), &[3], &[0.0f32, 1.0, 3.0]).unwrap();
        npy::write(&dir.join("q3.npy"), &[3, 2, 4], &normal(24, 5)).unwrap();
        let varlen_args = |cq: &str, ck: &str| {
            let mut a = args(&dir, "none");
            a.q = dir.join("q3.npy");
            a.k = dir.join("q3.npy");
            a.v = dir.join("q3.npy");
            a.features.cu_seqlens_q = Some(dir.join(cq));
            a.features.cu_seqlens_k = Some(dir.join(ck));
            a
        };
        assert!(run(varlen_args("cu_ok.npy", "cu_ok.npy")).is_ok());
        std::fs::remove_file(dir.join("o.npy")).unwrap();
        std::fs::remove_file(dir.join("lse.npy")).unwrap();
        let msg = run_err(varlen_args("cu_bad.npy", "cu_ok.npy"));
        assert!(
            msg.contains("--cu-seqlens-q") && msg.contains("cu_seqlens_q[2] = 1"),
            "{msg}"
        );
        let msg = run_err(varlen_args("cu_ok.npy", "cu_f.npy"));
        assert!(
            msg.contains("--cu-seqlens-k") && msg.contains("not int32"),
            "{msg}"
        );
        let mut a = varlen_args("cu_ok.npy", "cu_ok.npy");
        a.features.cu_seqlens_k = None;
        assert!(run_err(a).contains("--cu-seqlens-q needs --cu-seqlens-k"));
        let mut a = varlen_args("cu_ok.npy", "cu_ok.npy");
        a.q = dir.join("q.npy");
        assert!(run_err(a).contains("expected a 3-D [total, H, D] array"));

        // Paged.
        npy::write(&dir.join("cache.npy"), &[2, 16, 2, 4], &normal(256, 6)).unwrap();
        npy::write(&dir.join("cache8.npy"), &[4, 8, 2, 4], &normal(256, 6)).unwrap();
        npy::write(&dir.join("table.npy"), &[1, 2], &[1i32, 2]).unwrap();
        npy::write(&dir.join("used.npy"), &[1], &[20i32]).unwrap();
        let paged_args = |cache: &str| {
            let mut a = args(&dir, "none");
            a.k = dir.join(cache);
            a.v = dir.join(cache);
            a.features.block_table = Some(dir.join("table.npy"));
            a.features.seqused_k = Some(dir.join("used.npy"));
            a
        };
        let msg = run_err(paged_args("cache.npy"));
        assert!(
            msg.contains("--block-table") && msg.contains("block_table[0][1] = 2"),
            "{msg}"
        );
        let msg = run_err(paged_args("cache8.npy"));
        assert!(msg.contains("page size 8"), "{msg}");
        let mut a = paged_args("cache.npy");
        a.features.cu_seqlens_q = Some(dir.join("cu_ok.npy"));
        assert!(run_err(a).contains("cannot be combined"));
        assert!(!dir.join("o.npy").exists(), "no output on error");

        // clap: the window's spelling, and flags that need each other.
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |extra: &[&str]| {
            let mut argv = vec![
                "reference",
                "--q",
                "q",
                "--k",
                "k",
                "--v",
                "v",
                "--out",
                "o",
            ];
            argv.extend_from_slice(extra);
            <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.args)
        };
        let ok = parse(&["--window", "-1,0", "--softcap", "30"]).unwrap();
        assert_eq!(ok.features.window, Some(WindowArg { left: -1, right: 0 }));
        let msg = parse(&["--window", "12"])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("--window") && msg.contains("expected L,R"),
            "{msg}"
        );
        let msg = parse(&["--block-table", "t.npy"])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("--seqused-k"), "{msg}");
        let msg = parse(&[
            "--cu-seqlens-q",
            "a",
            "--cu-seqlens-k",
            "b",
            "--block-table",
            "t",
            "--seqused-k",
            "u",
        ])
        .map(|_| ())
        .unwrap_err()
        .to_string();
        assert!(msg.contains("cannot be used with"), "{msg}");
    }
}
