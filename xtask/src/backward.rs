//! `cargo xtask backward`: the GPU twin of `xtask reference --do … --dq … --dk … --dv …`
//! (DESIGN.md §9). Runs our forward (for O and LSE) and then our backward on `.npy` inputs in
//! either layout, and writes dQ, dK, dV (and O, LSE when asked) as f32 `.npy`, so a PyTorch
//! user can compare the gradients with autograd or with the reference on the same files.
//! The serving features (`--window`, `--softcap`, `--alibi`, `--sinks`, as on `xtask
//! reference`) are differentiated too; with `--sinks`, `--dsinks` writes dL/d(sink) `[Hq]`.
//! Packed variable-length batches are not taken here (the library's `backward_with` takes
//! them).

use std::path::PathBuf;

use anyhow::{bail, Context};
use attn_kernels::{
    Backward, BackwardEngine, BackwardExtras, BackwardOptions, Dtype, Forward, ForwardOptions,
    Layout, StorageType, Tensor, TensorMut,
};
use attn_ref::{AttnShape, Problem};

use crate::flags::{CausalArg, DtypeArg};
use crate::npy;

/// Arguments of `cargo xtask backward`.
#[derive(clap::Args)]
pub struct Args {
    /// Q `[B, Hq, Sq, D]` (f16, f32 or f64 .npy; rounded to --dtype).
    #[arg(long)]
    q: PathBuf,
    /// K `[B, Hkv, Sk, D]`.
    #[arg(long)]
    k: PathBuf,
    /// V `[B, Hkv, Sk, D]`.
    #[arg(long)]
    v: PathBuf,
    /// dO, the gradient of the loss with respect to O, shaped like Q.
    #[arg(long = "do", value_name = "DO")]
    d_o: PathBuf,
    /// Where to write dQ (f32, shaped like Q).
    #[arg(long)]
    dq: PathBuf,
    /// Where to write dK (f32, shaped like K).
    #[arg(long)]
    dk: PathBuf,
    /// Where to write dV (f32, shaped like V).
    #[arg(long)]
    dv: PathBuf,
    /// Also write the forward's O (f32).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write the forward's LSE `[B, Hq, Sq]` (f32).
    #[arg(long)]
    lse: Option<PathBuf>,
    /// Causal mask.
    #[arg(long, value_enum, default_value_t = CausalArg::None)]
    causal: CausalArg,
    /// Softmax scale (default 1/√D).
    #[arg(long)]
    scale: Option<f64>,
    /// Storage type the kernels run in.
    #[arg(long, value_enum, default_value_t = DtypeArg::F16)]
    dtype: DtypeArg,
    /// Layout of every tensor: bhsd (`[B, H, S, D]`) or bshd (`[B, S, H, D]`, read and written
    /// in place, strided).
    #[arg(long, value_enum, default_value = "bhsd")]
    layout: crate::flags::LayoutArg,
    /// dQ reduced in a fixed order (bitwise reproducible).
    #[arg(long)]
    deterministic: bool,
    /// Which backward kernel: `auto` (wgmma on sm_90a at head-dim buckets 64/128, else
    /// mma.sync), `mma-sync`, or `hopper` (refused where it cannot run).
    #[arg(long, value_enum, default_value_t = EngineArg::Auto)]
    engine: EngineArg,
    /// Where to write the sink logits' gradient, `[Hq]` f32 (with --sinks).
    #[arg(long)]
    dsinks: Option<PathBuf>,
    #[command(flatten)]
    features: crate::reference::FeatureArgs,
}

/// `--engine` of `xtask backward`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineArg {
    Auto,
    MmaSync,
    Hopper,
}

impl From<EngineArg> for BackwardEngine {
    fn from(e: EngineArg) -> Self {
        match e {
            EngineArg::Auto => BackwardEngine::Auto,
            EngineArg::MmaSync => BackwardEngine::MmaSync,
            EngineArg::Hopper => BackwardEngine::Hopper,
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let layout = Layout::from(args.layout);
    let read = |p: &PathBuf, name: &str| -> anyhow::Result<([usize; 4], Vec<f32>)> {
        let a = crate::reference::read_float(p, name)?;
        let file = a.shape4(name)?;
        Ok((file, a.data.iter().map(|&x| x as f32).collect()))
    };
    let (qf, q) = read(&args.q, "Q")?;
    let (kf, k) = read(&args.k, "K")?;
    let (vf, v) = read(&args.v, "V")?;
    let (df, d_o) = read(&args.d_o, "dO")?;
    if kf != vf {
        bail!("K has shape {kf:?} but V has shape {vf:?}; they must be equal");
    }
    if df != qf {
        bail!("dO has shape {df:?} but Q has shape {qf:?}; dO is shaped like O, which is shaped like Q");
    }
    // The files' dims in [B, H, S, D] order.
    let bhsd = |[a, b, c, d]: [usize; 4]| match layout {
        Layout::Bhsd => [a, b, c, d],
        Layout::Bshd => [a, c, b, d],
    };
    let ([b, hq, sq, d], [bk, hkv, sk, dk]) = (bhsd(qf), bhsd(kf));
    if b != bk || d != dk {
        bail!("Q {qf:?} and K {kf:?} disagree on batch or head_dim");
    }
    let mut problem = Problem::new(AttnShape::new(b, hq, hkv, sq, sk, d)?, args.causal.into());
    if let Some(s) = args.scale {
        problem = problem.with_scale(s)?;
    }
    let problem = crate::reference::apply_features(problem, &args.features)?;
    if args.dsinks.is_some() && problem.features().sinks.is_none() {
        bail!("--dsinks needs --sinks (the gradient of the sink logits)");
    }
    let opts = BackwardOptions {
        deterministic: args.deterministic,
        engine: args.engine.into(),
        ..Default::default()
    };
    let host = Host {
        q: &q,
        k: &k,
        v: &v,
        d_o: &d_o,
    };
    let out = match Dtype::parse(args.dtype.as_str())? {
        Dtype::F16 => run_typed::<half::f16>(&problem, layout, &host, opts)?,
        Dtype::Bf16 => run_typed::<half::bf16>(&problem, layout, &host, opts)?,
    };
    npy::write(&args.dq, &qf, &out.dq)?;
    npy::write(&args.dk, &kf, &out.dk)?;
    npy::write(&args.dv, &kf, &out.dv)?;
    if let Some(p) = &args.out {
        npy::write(p, &qf, &out.o)?;
    }
    if let Some(p) = &args.lse {
        npy::write(p, &[b, hq, sq], &out.lse)?;
    }
    if let (Some(p), Some(ds)) = (&args.dsinks, &out.dsinks) {
        npy::write(p, &[hq], ds)?;
    }
    eprintln!("ran {} then {}", out.forward, out.backward);
    Ok(())
}

/// The inputs as f32 in the files' layout.
struct Host<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    d_o: &'a [f32],
}

/// Outputs in the files' layout, widened to f32, and what ran.
struct Grads {
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
    o: Vec<f32>,
    lse: Vec<f32>,
    dsinks: Option<Vec<f32>>,
    forward: String,
    backward: String,
}

fn run_typed<T: StorageType>(
    problem: &Problem,
    layout: Layout,
    host: &Host<'_>,
    options: BackwardOptions,
) -> anyhow::Result<Grads> {
    let gpu = crate::forward::gpu()?;
    let st = gpu.stream();
    let s = problem.shape();
    let (qd, kd) = (attn_kernels::dims_q(s), attn_kernels::dims_kv(s));
    let up = |x: &[f32]| -> anyhow::Result<_> {
        let v: Vec<T> = x.iter().map(|&e| T::from_f32(e)).collect();
        st.clone_htod(&v).context("uploading an input")
    };
    let (q, k, v, d_o) = (up(host.q)?, up(host.k)?, up(host.v)?, up(host.d_o)?);
    let nan = |n: usize| up(&vec![f32::NAN; n]);
    let (mut o, mut dq, mut dk, mut dv) = (
        nan(s.q_elems())?,
        nan(s.q_elems())?,
        nan(s.kv_elems())?,
        nan(s.kv_elems())?,
    );
    let mut lse = st.clone_htod(&vec![f32::NAN; s.lse_elems()])?;
    fn t<T>(x: &cudarc::driver::CudaSlice<T>, dims: [usize; 4], layout: Layout) -> Tensor<'_, T> {
        Tensor::contiguous(x.as_view(), dims, layout)
    }
    let fwd = gpu.forward(Forward {
        problem,
        q: t(&q, qd, layout),
        k: t(&k, kd, layout),
        v: t(&v, kd, layout),
        o: TensorMut::contiguous(o.as_view_mut(), qd, layout),
        lse: Some(lse.as_view_mut()),
        options: ForwardOptions::default(),
    })?;
    let mut dsinks = st.clone_htod(&vec![f32::NAN; s.q_heads()])?;
    let sinks = problem.features().sinks.is_some();
    let bwd = gpu.backward_with(
        Backward {
            problem,
            q: t(&q, qd, layout),
            k: t(&k, kd, layout),
            v: t(&v, kd, layout),
            o: t(&o, qd, layout),
            lse: lse.as_view(),
            d_o: t(&d_o, qd, layout),
            dq: TensorMut::contiguous(dq.as_view_mut(), qd, layout),
            dk: TensorMut::contiguous(dk.as_view_mut(), kd, layout),
            dv: TensorMut::contiguous(dv.as_view_mut(), kd, layout),
            options,
        },
        BackwardExtras {
            dsinks: sinks.then(|| dsinks.as_view_mut()),
            ..BackwardExtras::default()
        },
    )?;
    let down = |x: &cudarc::driver::CudaSlice<T>| -> anyhow::Result<Vec<f32>> {
        Ok(st.clone_dtoh(x)?.iter().map(|e| e.to_f32()).collect())
    };
    Ok(Grads {
        dq: down(&dq)?,
        dk: down(&dk)?,
        dv: down(&dv)?,
        o: down(&o)?,
        lse: st.clone_dtoh(&lse)?,
        dsinks: if sinks {
            Some(st.clone_dtoh(&dsinks)?)
        } else {
            None
        },
        forward: fwd.kernel,
        backward: bwd.kernel,
    })
}
