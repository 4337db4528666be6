//! `cargo xtask forward`: the GPU kernel on `.npy` inputs (the twin of `reference`), and the
//! GPU entry points other subcommands (oracle, bench, gate) share.

use std::{
    path::PathBuf,
    sync::{Arc, OnceLock},
};

use anyhow::{bail, Context};
use attn_kernels::{Dtype, FlashAttention, ForwardOptions, Layout};
use attn_ref::{AttnOutput, AttnShape, Problem, Tile};

use crate::flags::{CausalArg, DtypeArg};
use crate::npy;

/// Arguments of `cargo xtask forward`.
#[derive(clap::Args)]
pub struct Args {
    /// Q `[B, Hq, Sq, D]` (f16, f32 or f64 .npy; converted to --dtype).
    #[arg(long)]
    q: PathBuf,
    /// K `[B, Hkv, Sk, D]`.
    #[arg(long)]
    k: PathBuf,
    /// V `[B, Hkv, Sk, D]`.
    #[arg(long)]
    v: PathBuf,
    /// Causal mask.
    #[arg(long, value_enum, default_value_t = CausalArg::None)]
    causal: CausalArg,
    /// Softmax scale (default 1/√D).
    #[arg(long)]
    scale: Option<f64>,
    /// Storage type the kernel runs in.
    #[arg(long, value_enum, default_value_t = DtypeArg::F16)]
    dtype: DtypeArg,
    /// Kernel config name: an mma.sync config, a Hopper config, or an engine (`mma`,
    /// `hopper`, `decode`); default: the chooser's.
    #[arg(long)]
    config: Option<String>,
    /// Output O (same dtype as --dtype: f16 → <f2; bf16 is written as f32).
    #[arg(long)]
    out: PathBuf,
    /// Optional LSE output `[B, Hq, Sq]` (f32).
    #[arg(long)]
    lse: Option<PathBuf>,
    /// Layout of Q, K, V and O: bhsd (`[B, H, S, D]`) or bshd (`[B, S, H, D]`; the kernel
    /// reads and writes it in place, strided).
    #[arg(long, value_enum, default_value = "bhsd")]
    layout: crate::flags::LayoutArg,
    /// Serving features, varlen and paged KV: the flags of `cargo xtask reference`, with the
    /// same input layouts, so the two commands run on the same files.
    #[command(flatten)]
    features: crate::reference::FeatureArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let f = &args.features;
    if f.cu_seqlens_q.is_some() || f.block_table.is_some() {
        return run_sequences(&args);
    }
    let q = npy::read(&args.q)?;
    let k = npy::read(&args.k)?;
    let v = npy::read(&args.v)?;
    for (a, name) in [(&q, "--q"), (&k, "--k"), (&v, "--v")] {
        if a.dtype == "|u1" {
            bail!("{name}: uint8 input; expected f16, f32 or f64");
        }
    }
    let layout = attn_kernels::Layout::from(args.layout);
    let as_bhsd = |[a, b, c, d]: [usize; 4]| match layout {
        Layout::Bhsd => [a, b, c, d],
        Layout::Bshd => [a, c, b, d],
    };
    let [b, hq, sq, d] = as_bhsd(q.shape4("--q")?);
    let [bk, hkv, sk, dk] = as_bhsd(k.shape4("--k")?);
    if v.shape != k.shape {
        bail!(
            "--v shape {:?} differs from --k shape {:?}",
            v.shape,
            k.shape
        );
    }
    if bk != b || dk != d {
        bail!(
            "--q shape {:?} and --k shape {:?} disagree on batch or head_dim",
            q.shape,
            k.shape
        );
    }
    let shape = AttnShape::new(b, hq, hkv, sq, sk, d)?;
    let mut problem = Problem::new(shape, args.causal.into());
    if let Some(s) = args.scale {
        problem = problem.with_scale(s)?;
    }
    let problem = crate::reference::apply_features(problem, &args.features)?;
    let to32 = |x: &[f64]| x.iter().map(|&e| e as f32).collect::<Vec<f32>>();
    let run = run_gpu_layout(
        &problem,
        &to32(&q.data),
        &to32(&k.data),
        &to32(&v.data),
        args.dtype.as_str(),
        args.config.as_deref(),
        layout,
    )?;
    let oshape = match layout {
        Layout::Bhsd => [b, hq, sq, d],
        Layout::Bshd => [b, sq, hq, d],
    };
    if args.dtype == DtypeArg::F16 {
        let h: Vec<half::f16> = run
            .output
            .o
            .iter()
            .map(|&x| half::f16::from_f32(x))
            .collect();
        npy::write(&args.out, &oshape, &h)?;
    } else {
        npy::write(&args.out, &oshape, &run.output.o)?;
    }
    if let Some(l) = &args.lse {
        npy::write(l, &[b, hq, sq], &run.output.lse)?;
    }
    eprintln!("ran {} ({}x{} tiles)", run.kernel, run.block_m, run.block_n);
    Ok(())
}

/// `--cu-seqlens-q/-k` (Q, K, V, O `[total, H, D]`, LSE `[Hq, total_q]`) or
/// `--block-table/--seqused-k` (Q and O `[B, Hq, Sq, D]` or bshd, K and V the paged caches
/// `[num_blocks, page_size, Hkv, D]`, LSE `[B, Hq, Sq]`) through
/// `FlashAttention::forward_sequences`: the GPU twin of `reference`'s varlen and paged modes.
fn run_sequences(args: &Args) -> anyhow::Result<()> {
    use crate::reference::{read_float, read_i32_flag};
    use attn_kernels::{HostSequences, HostTensor};
    let f = &args.features;
    let (q, k, v) = (
        read_float(&args.q, "Q")?,
        read_float(&args.k, "K")?,
        read_float(&args.v, "V")?,
    );
    if k.shape != v.shape {
        bail!(
            "K has shape {:?} but V has shape {:?}; they must be equal",
            k.shape,
            v.shape
        );
    }
    let to32 = |x: &[f64]| x.iter().map(|&e| e as f32).collect::<Vec<f32>>();
    let (cu_q, cu_k, table, used);
    let (problem, q_t, k_t, o_dims, lse_dims);
    match (&f.cu_seqlens_q, &f.cu_seqlens_k, &f.block_table, &f.seqused_k) {
        (Some(cq), Some(ck), None, None) => {
            if args.layout != crate::flags::LayoutArg::Bhsd {
                bail!("--layout bshd does not apply to varlen inputs, which are [total, H, D]");
            }
            cu_q = read_i32_flag(cq, "--cu-seqlens-q", 1)?.1;
            cu_k = read_i32_flag(ck, "--cu-seqlens-k", 1)?.1;
            (table, used) = (Vec::new(), Vec::new());
            let rank3 = |shape: &[usize], name: &str| match shape[..] {
                [t, h, d] => Ok([t, h, d]),
                _ => bail!("{name}: expected a 3-D [total, H, D] array with --cu-seqlens-*, got shape {shape:?}"),
            };
            let ([tq, hq, d], [tk, hkv, dk]) = (rank3(&q.shape, "Q")?, rank3(&k.shape, "K")?);
            if d != dk {
                bail!("head-dim mismatch: Q has D = {d}, K/V have D = {dk}");
            }
            if cu_q.len() < 2 || cu_k.len() != cu_q.len() {
                bail!(
                    "--cu-seqlens-q has {} entries and --cu-seqlens-k {}: both are [B + 1], B ≥ 1",
                    cu_q.len(),
                    cu_k.len()
                );
            }
            let longest = |cu: &[i32]| cu.windows(2).map(|w| (w[1] - w[0]).max(0) as usize).max().unwrap_or(0).max(1);
            let shape = AttnShape::new(cu_q.len() - 1, hq, hkv, longest(&cu_q), longest(&cu_k), d)?;
            problem = Problem::new(shape, args.causal.into());
            q_t = ([1, hq, tq, d], Layout::Bshd);
            k_t = ([1, hkv, tk, d], Layout::Bshd);
            o_dims = vec![tq, hq, d];
            lse_dims = vec![hq, tq];
        }
        (None, None, Some(t), Some(u)) => {
            let layout = Layout::from(args.layout);
            let (table_shape, t) = read_i32_flag(t, "--block-table", 2)?;
            table = t;
            used = read_i32_flag(u, "--seqused-k", 1)?.1;
            (cu_q, cu_k) = (Vec::new(), Vec::new());
            let qs = q.shape4("Q")?;
            let [b, hq, sq, d] = match layout {
                Layout::Bhsd => qs,
                Layout::Bshd => [qs[0], qs[2], qs[1], qs[3]],
            };
            let [nb, ps, hkv, dk] = k.shape4("K")?;
            if d != dk {
                bail!("head-dim mismatch: Q has D = {d}, the K/V cache has D = {dk}");
            }
            if table_shape[0] != b || used.len() != b {
                bail!(
                    "--block-table has {} rows and --seqused-k {} entries, but Q has B = {b}",
                    table_shape[0],
                    used.len()
                );
            }
            let shape = AttnShape::new(b, hq, hkv, sq, 1, d)?;
            problem = Problem::new(shape, args.causal.into());
            q_t = ([b, hq, sq, d], layout);
            k_t = ([nb, hkv, ps, d], Layout::Bshd);
            o_dims = qs.to_vec();
            lse_dims = vec![b, hq, sq];
        }
        _ => bail!(
            "varlen needs --cu-seqlens-q and --cu-seqlens-k; paged KV needs --block-table and --seqused-k; they do not combine"
        ),
    }
    let mut problem = problem;
    if let Some(s) = args.scale {
        problem = problem.with_scale(s)?;
    }
    let problem = crate::reference::apply_features(problem, f)?;
    let seqs = HostSequences {
        cu_seqlens_q: (!cu_q.is_empty()).then_some(&cu_q[..]),
        cu_seqlens_k: (!cu_k.is_empty()).then_some(&cu_k[..]),
        block_table: (!table.is_empty()).then_some(&table[..]),
        seqused_k: (!used.is_empty()).then_some(&used[..]),
    };
    let opts = match &args.config {
        Some(name) => ForwardOptions::from_config_name(name)?,
        None => ForwardOptions::default(),
    };
    let gpu = gpu()?;
    let (q32, k32, v32) = (to32(&q.data), to32(&k.data), to32(&v.data));
    macro_rules! go {
        ($t:ty) => {{
            let cvt = |x: &[f32]| x.iter().map(|&e| <$t>::from_f32(e)).collect::<Vec<$t>>();
            let (qh, kh, vh) = (cvt(&q32), cvt(&k32), cvt(&v32));
            let t = |data, (dims, layout)| HostTensor { data, dims, layout };
            let out = gpu.forward_sequences_host(
                &problem,
                t(&qh[..], q_t),
                t(&kh[..], k_t),
                t(&vh[..], k_t),
                &seqs,
                &opts,
            )?;
            (
                out.o.iter().map(|e| e.to_f32()).collect::<Vec<f32>>(),
                out.lse,
                out.launch,
            )
        }};
    }
    let (o, lse, launch) = match Dtype::parse(args.dtype.as_str())? {
        Dtype::F16 => go!(half::f16),
        Dtype::Bf16 => go!(half::bf16),
    };
    if args.dtype == DtypeArg::F16 {
        let h: Vec<half::f16> = o.iter().map(|&x| half::f16::from_f32(x)).collect();
        npy::write(&args.out, &o_dims, &h)?;
    } else {
        npy::write(&args.out, &o_dims, &o)?;
    }
    if let Some(l) = &args.lse {
        npy::write(l, &lse_dims, &lse)?;
    }
    eprintln!("ran {} ({})", launch.kernel, launch.config.name());
    Ok(())
}

/// The process's GPU handle (opened once).
pub fn gpu() -> anyhow::Result<Arc<FlashAttention>> {
    static GPU: OnceLock<Arc<FlashAttention>> = OnceLock::new();
    if let Some(g) = GPU.get() {
        return Ok(g.clone());
    }
    let g = Arc::new(FlashAttention::new(0).context("opening GPU 0")?);
    Ok(GPU.get_or_init(|| g).clone())
}

/// What one GPU forward returns: the output (as f32), the tile size of the config that ran,
/// and, when tile dumps were asked for (debug kernels only), the dumped tiles.
pub struct GpuRun {
    /// O and LSE.
    pub output: AttnOutput,
    /// BLOCK_M of the config that ran.
    pub block_m: usize,
    /// BLOCK_N of the config that ran.
    pub block_n: usize,
    /// Dumped tiles (natural-log domain, like `attn_ref::Tile`), empty without a request.
    pub tiles: Vec<Tile>,
    /// The kernel that ran.
    pub kernel: String,
    /// The FP8 variant, when the FP8 kernel ran (its rounding model differs).
    pub fp8_variant: Option<attn_kernels::Fp8Variant>,
}

impl GpuRun {
    /// What a launch returned, with the tile size and name of the config that ran.
    fn new(
        o: Vec<f32>,
        lse: Vec<f32>,
        tiles: Vec<Tile>,
        launch: &attn_kernels::LaunchInfo,
        fp8_variant: Option<attn_kernels::Fp8Variant>,
    ) -> Self {
        GpuRun {
            output: AttnOutput { o, lse },
            block_m: launch.config.block_m,
            block_n: launch.config.block_n,
            tiles,
            kernel: format!("{} ({})", launch.kernel, launch.config.name()),
            fp8_variant,
        }
    }
}

/// [`run_gpu`] on buffers in `layout` (no tile dumps): the kernel runs on the strided
/// layout directly and O comes back in it.
pub fn run_gpu_layout(
    problem: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dtype: &str,
    config: Option<&str>,
    layout: Layout,
) -> anyhow::Result<GpuRun> {
    if layout == Layout::Bhsd {
        return run_gpu(problem, q, k, v, dtype, config, &[]);
    }
    let dtype = Dtype::parse(dtype)?;
    problem.shape().check_qkv_lens(q.len(), k.len(), v.len())?;
    let gpu = gpu()?;
    let opts = match config {
        Some(name) => ForwardOptions::from_config_name(name)?,
        None => ForwardOptions::default(),
    };
    macro_rules! go {
        ($t:ty) => {{
            let cvt = |x: &[f32]| x.iter().map(|&e| <$t>::from_f32(e)).collect::<Vec<$t>>();
            let out = gpu.forward_host_layout(problem, &cvt(q), &cvt(k), &cvt(v), layout, &opts)?;
            (
                out.o.iter().map(|e| e.to_f32()).collect::<Vec<f32>>(),
                out.lse,
                out.launch,
            )
        }};
    }
    let (o, lse, launch) = match dtype {
        Dtype::F16 => go!(half::f16),
        Dtype::Bf16 => go!(half::bf16),
    };
    Ok(GpuRun::new(o, lse, Vec::new(), &launch, None))
}

/// Runs the GPU kernel once on host inputs (f32 values, rounded to `dtype` = "f16"|"bf16").
/// `config` overrides the default config by name; `dump_tiles` lists (b, h, q_tile) blocks
/// whose S/P/m/l tiles the debug kernels dump (an error unless xtask was built with the
/// `debug-kernels` feature).
pub fn run_gpu(
    problem: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dtype: &str,
    config: Option<&str>,
    dump_tiles: &[(usize, usize, usize)],
) -> anyhow::Result<GpuRun> {
    if matches!(dtype, "e4m3" | "fp8") {
        if !dump_tiles.is_empty() {
            bail!("tile dumps exist for the f16/bf16 debug kernels only");
        }
        return run_fp8(problem, q, k, v, config);
    }
    let dtype = Dtype::parse(dtype)?;
    problem.shape().check_qkv_lens(q.len(), k.len(), v.len())?;
    let gpu = gpu()?;
    let opts = match config {
        Some(name) => ForwardOptions::from_config_name(name)?,
        None => ForwardOptions::default(),
    };
    fn cvt<T: attn_kernels::StorageType>(x: &[f32]) -> Vec<T> {
        x.iter().map(|&e| T::from_f32(e)).collect()
    }
    fn widen<T: attn_kernels::StorageType>(x: &[T]) -> Vec<f32> {
        x.iter().map(|e| e.to_f32()).collect()
    }
    macro_rules! go {
        ($t:ty) => {{
            let (q, k, v) = (cvt::<$t>(q), cvt::<$t>(k), cvt::<$t>(v));
            if dump_tiles.is_empty() {
                let out = gpu.forward_host_with(problem, &q, &k, &v, &opts)?;
                (widen(&out.o), out.lse, Vec::new(), out.launch)
            } else {
                debug_run::<$t>(&gpu, problem, &q, &k, &v, dump_tiles, &opts)?
            }
        }};
    }
    let (o, lse, tiles, launch) = match dtype {
        Dtype::F16 => go!(half::f16),
        Dtype::Bf16 => go!(half::bf16),
    };
    // The tile size of the config that actually ran (the debug build has fewer configs).
    Ok(GpuRun::new(o, lse, tiles, &launch, None))
}

/// The FP8 kernel (E4M3 codes, per-head scales, f16 O, the device's default variant) on
/// host values: quantized per head here (values that are already dequantized FP8 round-trip
/// to the same codes and scales).
fn run_fp8(
    problem: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    config: Option<&str>,
) -> anyhow::Result<GpuRun> {
    use attn_quant::{quantize, Fp8Format, Granularity};
    let shape = problem.shape();
    shape.check_qkv_lens(q.len(), k.len(), v.len())?;
    let (qd, kd) = (attn_quant::q_dims(shape), attn_quant::kv_dims(shape));
    let gpu = gpu()?;
    let variant = gpu.fp8_default_variant();
    let opts = attn_kernels::Fp8Options {
        schedule: Default::default(),
        splits: None,
        hopper: None,
        config: config
            .map(|name| {
                attn_kernels::FP8_CONFIGS
                    .into_iter()
                    .chain(attn_kernels::catalog::FP8_D256_TILES)
                    .find(|c| c.name() == name || c.name() == format!("{name}_s2"))
                    .with_context(|| format!("unknown FP8 config `{name}`"))
            })
            .transpose()?,
        variant: Some(variant),
    };
    let out = gpu.forward_fp8_host::<half::f16>(
        problem,
        &quantize(q, qd, Fp8Format::E4M3, Granularity::Head)?,
        &quantize(k, kd, Fp8Format::E4M3, Granularity::Head)?,
        &quantize(v, kd, Fp8Format::E4M3, Granularity::Head)?,
        &opts,
    )?;
    Ok(GpuRun::new(
        out.o.iter().map(|x| x.to_f32()).collect(),
        out.lse,
        Vec::new(),
        &out.launch,
        Some(variant),
    ))
}

type DebugParts = (Vec<f32>, Vec<f32>, Vec<Tile>, attn_kernels::LaunchInfo);

#[cfg(feature = "debug-kernels")]
fn debug_run<T: attn_kernels::StorageType>(
    gpu: &FlashAttention,
    problem: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    blocks: &[(usize, usize, usize)],
    opts: &ForwardOptions,
) -> anyhow::Result<DebugParts> {
    let out = gpu.forward_debug(
        problem,
        q,
        k,
        v,
        blocks,
        attn_kernels::debug::DebugVariant::Correct,
        opts,
    )?;
    Ok((
        out.output.o.iter().map(|e| e.to_f32()).collect(),
        out.output.lse,
        out.tiles,
        out.output.launch,
    ))
}

#[cfg(not(feature = "debug-kernels"))]
fn debug_run<T: attn_kernels::StorageType>(
    _gpu: &FlashAttention,
    _problem: &Problem,
    _q: &[T],
    _k: &[T],
    _v: &[T],
    _blocks: &[(usize, usize, usize)],
    _opts: &ForwardOptions,
) -> anyhow::Result<DebugParts> {
    bail!("tile dumps need the debug kernels: build xtask with `--features debug-kernels` (the bundle has them)")
}

/// What the backward's debug entry dumped (`xtask oracle --backward`).
pub struct BwdDebugRun {
    /// P, dP, dS and Δ of the listed blocks' key tiles.
    pub tiles: Vec<attn_ref::BwdTile>,
    /// The tiling they count in (query rows, keys).
    pub block: (usize, usize),
    /// The main kernel.
    pub kernel: String,
}

/// Runs the release forward and the mma.sync backward's debug entry on host values (f32,
/// rounded to `dtype` = "f16"|"bf16"), dumping the backward tiles of `blocks` (an error
/// unless xtask was built with the `debug-kernels` feature).
pub fn run_backward_debug(
    problem: &Problem,
    (q, k, v, d_o): (&[f32], &[f32], &[f32], &[f32]),
    dtype: &str,
    blocks: &[(usize, usize, usize)],
) -> anyhow::Result<BwdDebugRun> {
    let dtype = Dtype::parse(dtype)?;
    let gpu = gpu()?;
    match dtype {
        Dtype::F16 => backward_debug_run::<half::f16>(&gpu, problem, (q, k, v, d_o), blocks),
        Dtype::Bf16 => backward_debug_run::<half::bf16>(&gpu, problem, (q, k, v, d_o), blocks),
    }
}

#[cfg(feature = "debug-kernels")]
fn backward_debug_run<T: attn_kernels::StorageType>(
    gpu: &FlashAttention,
    problem: &Problem,
    (q, k, v, d_o): (&[f32], &[f32], &[f32], &[f32]),
    blocks: &[(usize, usize, usize)],
) -> anyhow::Result<BwdDebugRun> {
    let cvt = |x: &[f32]| -> Vec<T> { x.iter().map(|&e| T::from_f32(e)).collect() };
    let out = gpu.backward_debug(problem, (&cvt(q), &cvt(k), &cvt(v), &cvt(d_o)), blocks)?;
    Ok(BwdDebugRun {
        tiles: out.tiles,
        block: out.block,
        kernel: out.kernel,
    })
}

#[cfg(not(feature = "debug-kernels"))]
#[allow(clippy::extra_unused_type_parameters)] // the debug build's signature
fn backward_debug_run<T: attn_kernels::StorageType>(
    _gpu: &FlashAttention,
    _problem: &Problem,
    _inputs: (&[f32], &[f32], &[f32], &[f32]),
    _blocks: &[(usize, usize, usize)],
) -> anyhow::Result<BwdDebugRun> {
    bail!("backward tile dumps need the debug kernels: build xtask with `--features debug-kernels` (the bundle has them)")
}
