//! `cargo xtask ring`: ring attention (attn-dist) on N local GPUs against the single-GPU
//! kernel on the whole sequence, timed in the same run with the same method (CUDA events on
//! each rank's compute stream, the slowest rank per iteration), with per-step compute and
//! communication times.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use attn_dist::{run_local, RingAttention, RingForward, ShardPlan, Sharding};
use attn_kernels::{
    FlashAttention, Forward, ForwardOptions, Layout, StorageType, Tensor, TensorMut,
};
use attn_ref::{AttnShape, Causal, Problem};
use clap::Parser;
use half::bf16;
use serde::Serialize;

/// Flags of `xtask ring`.
#[derive(Debug, Parser)]
pub struct Args {
    /// GPUs (ranks), devices 0..N.
    #[arg(long, default_value_t = 2)]
    world: usize,
    /// Global sequence length.
    #[arg(long, default_value_t = 131072)]
    seq: usize,
    /// Batch.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Query heads.
    #[arg(long, default_value_t = 16)]
    heads: usize,
    /// KV heads (comma-separated list: one run each).
    #[arg(long, value_delimiter = ',', default_value = "16,4")]
    kv_heads: Vec<usize>,
    /// Head dim.
    #[arg(long, default_value_t = 128)]
    head_dim: usize,
    /// Masks to run: none, causal, or both.
    #[arg(long, default_value = "both")]
    mask: String,
    /// Timed iterations.
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Untimed warm-up iterations.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Debug, Serialize)]
struct Row {
    world: usize,
    seq: usize,
    batch: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    causal: bool,
    sharding: &'static str,
    single_ms: Vec<f64>,
    ring_ms: Vec<f64>,
    single_tflops: f64,
    ring_tflops: f64,
    /// Ring throughput over single-GPU throughput (the scaling), with its bootstrap CI.
    speedup: f64,
    speedup_ci: (f64, f64),
    /// Per step, the slowest rank: (compute ms, comm ms).
    steps: Vec<(f32, f32)>,
}

fn randn_device<T: StorageType>(
    gpu: &FlashAttention,
    n: usize,
    seed: u64,
) -> Result<cudarc::driver::CudaSlice<T>> {
    let host: Vec<T> = crate::randn::normal_samples(n, seed, T::from_f32);
    Ok(gpu.stream().clone_htod(&host)?)
}

/// The single-GPU kernel on the whole sequence, on device 0: milliseconds per iteration.
fn time_single(problem: &Problem, args: &Args) -> Result<Vec<f64>> {
    let gpu = FlashAttention::new(0)?;
    let s = problem.shape();
    let (qd, kd) = (attn_kernels::dims_q(s), attn_kernels::dims_kv(s));
    let q = randn_device::<bf16>(&gpu, s.q_elems(), 1)?;
    let k = randn_device::<bf16>(&gpu, s.kv_elems(), 2)?;
    let v = randn_device::<bf16>(&gpu, s.kv_elems(), 3)?;
    let mut o = gpu.stream().alloc_zeros::<bf16>(s.o_elems())?;
    let mut out = Vec::new();
    for i in 0..args.warmup + args.iters {
        let st = gpu.stream();
        let e0 = st.record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        gpu.forward(Forward {
            problem,
            q: Tensor::contiguous(q.as_view(), qd, Layout::Bshd),
            k: Tensor::contiguous(k.as_view(), kd, Layout::Bshd),
            v: Tensor::contiguous(v.as_view(), kd, Layout::Bshd),
            o: TensorMut::contiguous(o.as_view_mut(), qd, Layout::Bshd),
            lse: None,
            options: ForwardOptions::default(),
        })?;
        let e1 = st.record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        let ms = e0.elapsed_ms(&e1)? as f64;
        if i >= args.warmup {
            out.push(ms);
        }
    }
    Ok(out)
}

/// Per-iteration ring times (ms) and per-step (compute, comm) ms.
type RingTimes = (Vec<f64>, Vec<(f32, f32)>);

/// The ring on `world` GPUs: per iteration the slowest rank's time, and the per-step timings
/// of the last iteration (slowest rank per step).
fn time_ring(problem: &Problem, sharding: Sharding, args: &Args) -> Result<RingTimes> {
    let ordinals: Vec<usize> = (0..args.world).collect();
    let results = run_local(&ordinals, Duration::from_secs(120), |comm| {
        let rank = comm.rank();
        let plan = ShardPlan::new(problem.shape().q_len(), comm.world(), sharding)?;
        let s = problem.shape();
        let l = plan.local_len();
        let qd = [s.batch(), s.q_heads(), l, s.head_dim()];
        let kd = [s.batch(), s.kv_heads(), l, s.head_dim()];
        let gpu = FlashAttention::with_stream(comm.context().default_stream())?;
        let dev =
            |e: cudarc::driver::DriverError| attn_dist::DistError::InvalidArgument(e.to_string());
        let q = randn_device::<bf16>(&gpu, qd.iter().product(), 10 + rank as u64)
            .map_err(|e| attn_dist::DistError::InvalidArgument(e.to_string()))?;
        let k = randn_device::<bf16>(&gpu, kd.iter().product(), 20 + rank as u64)
            .map_err(|e| attn_dist::DistError::InvalidArgument(e.to_string()))?;
        let v = randn_device::<bf16>(&gpu, kd.iter().product(), 30 + rank as u64)
            .map_err(|e| attn_dist::DistError::InvalidArgument(e.to_string()))?;
        let mut o = gpu
            .stream()
            .alloc_zeros::<bf16>(qd.iter().product())
            .map_err(dev)?;
        let mut ring = RingAttention::<bf16>::new(comm, gpu)?;
        ring.set_profiling(true);
        let mut times = Vec::new();
        let mut steps = Vec::new();
        for i in 0..args.warmup + args.iters {
            let rep = ring.forward(RingForward {
                problem,
                sharding,
                q: Tensor::contiguous(q.as_view(), qd, Layout::Bshd),
                k: Tensor::contiguous(k.as_view(), kd, Layout::Bshd),
                v: Tensor::contiguous(v.as_view(), kd, Layout::Bshd),
                o: TensorMut::contiguous(o.as_view_mut(), qd, Layout::Bshd),
                lse: None,
            })?;
            if i >= args.warmup {
                times.push(rep.wall_ms);
                steps = rep
                    .steps
                    .iter()
                    .map(|s| (s.compute_ms, s.comm_ms))
                    .collect();
            }
        }
        Ok((times, steps))
    });
    let mut per_rank = Vec::new();
    for (r, res) in results.into_iter().enumerate() {
        per_rank.push(res.with_context(|| format!("rank {r}"))?);
    }
    let n = per_rank[0].0.len();
    let times = (0..n)
        .map(|i| per_rank.iter().map(|(t, _)| t[i]).fold(0.0, f64::max))
        .collect();
    let n_steps = per_rank[0].1.len();
    let steps = (0..n_steps)
        .map(|s| {
            per_rank
                .iter()
                .map(|(_, st)| st[s])
                .fold((0.0f32, 0.0f32), |a, b| (a.0.max(b.0), a.1.max(b.1)))
        })
        .collect();
    Ok((times, steps))
}

/// Entry point.
pub fn run(args: Args) -> Result<()> {
    let masks: Vec<bool> = match args.mask.as_str() {
        "none" => vec![false],
        "causal" => vec![true],
        "both" => vec![false, true],
        m => return Err(anyhow!("--mask {m}: expected none, causal or both")),
    };
    let mut rows = Vec::new();
    for &hkv in &args.kv_heads {
        for &causal in &masks {
            let shape = AttnShape::new(
                args.batch,
                args.heads,
                hkv,
                args.seq,
                args.seq,
                args.head_dim,
            )?;
            let mask = if causal {
                Causal::BottomRight
            } else {
                Causal::None
            };
            let problem = Problem::new(shape, mask);
            let sharding = if causal {
                Sharding::Zigzag
            } else {
                Sharding::Contiguous
            };
            let single = time_single(&problem, &args)?;
            let (ring, steps) = time_ring(&problem, sharding, &args)?;
            let flops = shape.flops(mask);
            let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
            // Speedup = single time / ring time: compare() gives the ratio of means
            // candidate/baseline with a bootstrap CI; invert it.
            let cmp = attn_stats::compare(&ring, &single, &attn_stats::CompareOptions::default())
                .map_err(|e| anyhow!("{e}"))?;
            let row = Row {
                world: args.world,
                seq: args.seq,
                batch: args.batch,
                heads: args.heads,
                kv_heads: hkv,
                head_dim: args.head_dim,
                causal,
                sharding: sharding.as_str(),
                single_tflops: flops / mean(&single) * 1e-9,
                ring_tflops: flops / mean(&ring) * 1e-9,
                speedup: cmp.ratio,
                speedup_ci: (cmp.ratio_ci_low, cmp.ratio_ci_high),
                single_ms: single,
                ring_ms: ring,
                steps,
            };
            println!(
                "B{} Hq{} Hkv{} S{} D{} {} ({}): single {:.2} ms ({:.0} TFLOP/s), ring×{} {:.2} ms ({:.0} TFLOP/s), speedup {:.3} [{:.3}, {:.3}]",
                row.batch, row.heads, hkv, row.seq, row.head_dim,
                if causal { "causal" } else { "full" }, row.sharding,
                mean(&row.single_ms), row.single_tflops, row.world, mean(&row.ring_ms), row.ring_tflops,
                row.speedup, row.speedup_ci.0, row.speedup_ci.1
            );
            for (i, (c, m)) in row.steps.iter().enumerate() {
                println!("  step {i}: compute {c:.2} ms, send/recv {m:.2} ms");
            }
            rows.push(row);
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
