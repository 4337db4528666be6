//! `cargo xtask train-bench`: our forward, backward (default, deterministic, and the mma.sync
//! kernel, default and deterministic, where the default is the wgmma one) and the
//! forward with each serving feature (window, softcap, ALiBi), against PyTorch SDPA's forward
//! and autograd backward (flash and cuDNN backends), in one run. Every sample is a CUDA event
//! pair around one call; medians with bootstrap CIs of the time ratios (attn-stats). The ratios
//! against SDPA compare training steps on both sides (forward, backward, one synchronization
//! per step), so both run at the same duty cycle; our per-phase loops (features, engines,
//! deterministic mode) are compared only with each other. Every loop, on both sides, first
//! runs its calls for `bench::SUSTAINED_WARMUP`, so all are timed at sustained clocks.

use std::process::Command;

use anyhow::{anyhow, Context, Result};
use attn_kernels::{
    dims_kv, dims_q, Backward, BackwardEngine, BackwardOptions, BackwardSchedule, FlashAttention,
    Forward, ForwardOptions, Layout, Tensor, TensorMut,
};
use attn_ref::{Alibi, AttnShape, Causal, Problem};
use clap::Parser;
use cudarc::driver::{sys::CUevent_flags, CudaSlice};
use half::bf16;

use crate::bench::Warmup;

/// The SDPA side, embedded so the bundle's xtask needs nothing beside it.
const SCRIPT: &str = include_str!("../scripts/sdpa_train_bench.py");

/// Flags of `xtask train-bench`.
#[derive(Debug, Parser)]
pub struct Args {
    /// Shapes `B,H,S,D` (bf16, Hq = Hkv), separated by `;`.
    #[arg(long, default_value = "4,16,4096,128;2,16,8192,128;4,16,4096,64")]
    shapes: String,
    /// Warm-up calls.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Load before each timing loop, ours and SDPA's, in ms, so the samples run at sustained
    /// clocks. After 500 ms (`bench`'s) cuDNN's backward still changed clock state within 20
    /// samples (docs/PERF.md runs 305 and 309); after 1500 and 3000 it did not (run 310).
    #[arg(long, default_value_t = 1500)]
    sustain_ms: u64,
    /// Timed calls.
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Python with torch (the SDPA side); `none` skips it.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Write everything as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Also time a varlen batch of this many sequences (bf16, H 16, D 128, lengths drawn
    /// from 128–4096 with a fixed seed): the packed forward and backward, with TFLOP/s on
    /// the sequences' own FLOPs; 0 skips it.
    #[arg(long, default_value_t = 16)]
    varlen_seqs: usize,
    /// Time only the default forward and the default and deterministic backward of each
    /// shape, both backward modes on their classic grid too (`BackwardSchedule::Grid`, no
    /// split tail), and the deterministic one with its tail forced into 2, 3, 4 and 8 pieces,
    /// the backward launches timed interleaved; no features, no mma.sync engine, no training
    /// steps: a quick comparison of two builds' default kernels.
    #[arg(long)]
    plain: bool,
}

fn parse_shapes(s: &str) -> Result<Vec<[usize; 4]>> {
    s.split(';')
        .filter(|x| !x.trim().is_empty())
        .map(|x| {
            let v: Vec<usize> = x
                .split(',')
                .map(|n| n.trim().parse().map_err(|_| anyhow!("bad shape `{x}`")))
                .collect::<Result<_>>()?;
            <[usize; 4]>::try_from(v).map_err(|_| anyhow!("a shape is B,H,S,D: `{x}`"))
        })
        .collect()
}

impl Args {
    fn warm(&self) -> Warmup {
        Warmup {
            calls: self.warmup,
            sustain: std::time::Duration::from_millis(self.sustain_ms),
        }
    }
}

fn median(x: &mut [f64]) -> f64 {
    x.sort_by(f64::total_cmp);
    x[x.len() / 2]
}

/// Times `f` (one call per sample) with CUDA events on `gpu`'s stream, in µs.
fn time(
    gpu: &FlashAttention,
    warmup: Warmup,
    iters: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    let mut out = time_interleaved(gpu, warmup, iters, 1, |_| f())?;
    Ok(out.pop().unwrap_or_default())
}

/// Times the calls `f(0)`, …, `f(n − 1)` interleaved, in µs per call: each round runs every
/// call once, in an order that rotates from round to round, so the clocks and the GPU's power
/// state weigh on all of them alike. Each timed in its own loop, one launch gave medians 4–7 %
/// apart depending on where it sat in the call (docs/PERF.md, runs 293–294).
fn time_interleaved(
    gpu: &FlashAttention,
    warmup: Warmup,
    iters: usize,
    n: usize,
    mut f: impl FnMut(usize) -> Result<()>,
) -> Result<Vec<Vec<f64>>> {
    let s = gpu.stream();
    // Without it each loop's first samples ran at the clocks the previous loop left: the
    // variants timed later in a shape's sequence (softcap, ALiBi) ran hotter than the plain
    // forward timed first (docs/PERF.md, run 225).
    crate::bench::sustain_for(s, warmup.sustain, || (0..n).try_for_each(&mut f))?;
    let mut out = vec![Vec::with_capacity(iters); n];
    let warmup = warmup.calls;
    for i in 0..warmup + iters {
        for j in 0..n {
            let k = (i + j) % n;
            let a = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            f(k)?;
            let b = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            let ms = a.elapsed_ms(&b)? as f64;
            if i >= warmup {
                out[k].push(ms * 1e3);
            }
        }
    }
    Ok(out)
}

/// One dense shape's bf16 tensors (`[B, H, S, D]`, random inputs and dO) and the two calls
/// `train-bench` times on them; the forward writes the O and LSE the next backward reads.
struct DenseSet<'g> {
    gpu: &'g FlashAttention,
    qd: [usize; 4],
    kd: [usize; 4],
    q: CudaSlice<bf16>,
    k: CudaSlice<bf16>,
    v: CudaSlice<bf16>,
    d_o: CudaSlice<bf16>,
    o: CudaSlice<bf16>,
    lse: CudaSlice<f32>,
    dq: CudaSlice<bf16>,
    dk: CudaSlice<bf16>,
    dv: CudaSlice<bf16>,
}

impl<'g> DenseSet<'g> {
    fn new(gpu: &'g FlashAttention, shape: &AttnShape) -> Result<Self> {
        let s = gpu.stream();
        let rnd = |seed: u64, len: usize| -> Result<CudaSlice<bf16>> {
            let host: Vec<bf16> = crate::randn::normal_samples(len, seed, bf16::from_f32);
            Ok(s.clone_htod(&host)?)
        };
        Ok(Self {
            gpu,
            qd: dims_q(shape),
            kd: dims_kv(shape),
            q: rnd(1, shape.q_elems())?,
            k: rnd(2, shape.kv_elems())?,
            v: rnd(3, shape.kv_elems())?,
            d_o: rnd(4, shape.o_elems())?,
            o: s.alloc_zeros::<bf16>(shape.o_elems())?,
            lse: s.alloc_zeros::<f32>(shape.lse_elems())?,
            dq: s.alloc_zeros::<bf16>(shape.q_elems())?,
            dk: s.alloc_zeros::<bf16>(shape.kv_elems())?,
            dv: s.alloc_zeros::<bf16>(shape.kv_elems())?,
        })
    }

    fn forward(&mut self, p: &Problem) -> Result<()> {
        let (qd, kd, bh) = (self.qd, self.kd, Layout::Bhsd);
        self.gpu.forward(Forward {
            problem: p,
            q: Tensor::contiguous(self.q.as_view(), qd, bh),
            k: Tensor::contiguous(self.k.as_view(), kd, bh),
            v: Tensor::contiguous(self.v.as_view(), kd, bh),
            o: TensorMut::contiguous(self.o.as_view_mut(), qd, bh),
            lse: Some(self.lse.as_view_mut()),
            options: ForwardOptions::default(),
        })?;
        Ok(())
    }

    fn backward(&mut self, p: &Problem, options: BackwardOptions) -> Result<()> {
        let (qd, kd, bh) = (self.qd, self.kd, Layout::Bhsd);
        self.gpu.backward(Backward {
            problem: p,
            q: Tensor::contiguous(self.q.as_view(), qd, bh),
            k: Tensor::contiguous(self.k.as_view(), kd, bh),
            v: Tensor::contiguous(self.v.as_view(), kd, bh),
            o: Tensor::contiguous(self.o.as_view(), qd, bh),
            lse: self.lse.as_view(),
            d_o: Tensor::contiguous(self.d_o.as_view(), qd, bh),
            dq: TensorMut::contiguous(self.dq.as_view_mut(), qd, bh),
            dk: TensorMut::contiguous(self.dk.as_view_mut(), kd, bh),
            dv: TensorMut::contiguous(self.dv.as_view_mut(), kd, bh),
            options,
        })?;
        Ok(())
    }
}

/// Times training steps the way the SDPA script does: per step, CUDA events around the
/// forward (`step(true)`) and the backward (`step(false)`), then one synchronization. Returns
/// the forward's and the backward's µs per timed step.
fn time_steps(
    gpu: &FlashAttention,
    warmup: Warmup,
    iters: usize,
    mut step: impl FnMut(bool) -> Result<()>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let s = gpu.stream();
    crate::bench::sustain_for(s, warmup.sustain, || {
        step(true)?;
        step(false)
    })?;
    let (mut fwd, mut bwd) = (Vec::new(), Vec::new());
    let warmup = warmup.calls;
    for i in 0..warmup + iters {
        let a = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        step(true)?;
        let b = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        step(false)?;
        let c = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let (f, g) = (a.elapsed_ms(&b)? as f64, b.elapsed_ms(&c)? as f64);
        if i >= warmup {
            fwd.push(f * 1e3);
            bwd.push(g * 1e3);
        }
    }
    Ok((fwd, bwd))
}

/// Entry point.
pub fn run(args: Args) -> Result<()> {
    let shapes = parse_shapes(&args.shapes)?;
    let gpu = FlashAttention::new(0)?;
    let mut rows = Vec::new();
    for &[b, h, n, d] in &shapes {
        for causal in [false, true] {
            let shape = AttnShape::new(b, h, h, n, n, d)?;
            let mask = if causal {
                Causal::BottomRight
            } else {
                Causal::None
            };
            let p = Problem::new(shape, mask);
            let mut t = DenseSet::new(&gpu, &shape)?;
            let windowed = p.with_window(256, if causal { 0 } else { 256 })?;
            let capped = p.with_softcap(30.0)?;
            let slopes: Vec<f32> = (0..h)
                .map(|i| 2f32.powf(-8.0 * (i + 1) as f32 / h as f32))
                .collect();
            let biased = p.with_alibi(Alibi::PerHead(slopes))?;
            // Zero slopes: the feature entry with every feature's arithmetic skipped, so the
            // entry's own cost (its tile, its registers) separates from ALiBi's.
            let feat_noop = p.with_alibi(Alibi::PerHead(vec![0.0; h]))?;
            let (warmup, iters) = (args.warm(), args.iters);
            let fwd_of = |t: &mut DenseSet, p: &Problem| time(&gpu, warmup, iters, || t.forward(p));
            let bwd_of =
                |t: &mut DenseSet, p: &Problem, deterministic: bool, engine: BackwardEngine| {
                    let options = BackwardOptions {
                        deterministic,
                        engine,
                        ..Default::default()
                    };
                    time(&gpu, warmup, iters, || t.backward(p, options))
                };
            let fwd = fwd_of(&mut t, &p)?;
            if args.plain {
                // Both backward modes, each also on the classic grid (no split tail), the
                // default one also persistent without a split tail where it runs persistent,
                // and the deterministic one with its tail forced into pieces where the launch
                // takes them (a tail to split, enough query blocks), timed interleaved.
                let det = BackwardOptions {
                    deterministic: true,
                    ..Default::default()
                };
                let grid = BackwardOptions {
                    schedule: BackwardSchedule::Grid,
                    ..Default::default()
                };
                let det_grid = BackwardOptions {
                    deterministic: true,
                    ..grid
                };
                let mut options = vec![BackwardOptions::default(), det, grid, det_grid];
                let persistent = BackwardOptions {
                    schedule: BackwardSchedule::Persistent {
                        ctas: gpu.sm_count(),
                    },
                    ..Default::default()
                };
                let persistent_timed = t.backward(&p, persistent).is_ok();
                if persistent_timed {
                    options.push(persistent);
                }
                let mut pieces_timed = Vec::new();
                for pieces in [2, 3, 4, 8] {
                    let split = BackwardOptions {
                        schedule: BackwardSchedule::TailPieces {
                            ctas: gpu.sm_count(),
                            pieces,
                        },
                        ..det
                    };
                    if t.backward(&p, split).is_ok() {
                        options.push(split);
                        pieces_timed.push(pieces);
                    }
                }
                let mut times = time_interleaved(&gpu, warmup, iters, options.len(), |i| {
                    t.backward(&p, options[i])
                })?;
                let mut split_times = times.split_off(4);
                let bwd_persistent = if persistent_timed {
                    Some(split_times.remove(0))
                } else {
                    None
                };
                let [bwd, bwd_det, bwd_grid, bwd_det_grid]: [Vec<f64>; 4] = times
                    .try_into()
                    .map_err(|_| anyhow!("four backward options timed"))?;
                let flops = shape.flops(mask);
                let m = |x: &[f64]| median(&mut x.to_vec());
                println!(
                    "B{b} H{h} S{n} D{d} {}: fwd {:.1} µs ({:.0} TFLOP/s) | bwd {:.1} µs ({:.0} TFLOP/s), deterministic {:.1} µs ({:.3}×), grid {:.1} µs (default / grid {:.3}×), deterministic grid {:.1} µs (deterministic / its grid {:.3}×)",
                    if causal { "causal" } else { "full" },
                    m(&fwd),
                    flops / m(&fwd) * 1e-6,
                    m(&bwd),
                    2.5 * flops / m(&bwd) * 1e-6,
                    m(&bwd_det),
                    m(&bwd_det) / m(&bwd),
                    m(&bwd_grid),
                    m(&bwd) / m(&bwd_grid),
                    m(&bwd_det_grid),
                    m(&bwd_det) / m(&bwd_det_grid)
                );
                if let Some(x) = &bwd_persistent {
                    println!(
                        "    persistent without a split tail: {:.1} µs (default / it {:.3}×)",
                        m(x),
                        m(&bwd) / m(x)
                    );
                }
                let mut det_split = serde_json::Map::new();
                for (pieces, x) in pieces_timed.into_iter().zip(split_times) {
                    println!(
                        "    deterministic, tail in {pieces} pieces: {:.1} µs (over deterministic grid {:.3}×, over default {:.3}×)",
                        m(&x),
                        m(&x) / m(&bwd_det_grid),
                        m(&x) / m(&bwd)
                    );
                    det_split.insert(pieces.to_string(), serde_json::json!(x));
                }
                rows.push(serde_json::json!({
                    "shape": [b, h, n, d, causal],
                    "fwd_us": fwd, "bwd_us": bwd, "bwd_det_us": bwd_det, "bwd_grid_us": bwd_grid,
                    "bwd_det_grid_us": bwd_det_grid,
                    "bwd_persistent_unsplit_us": bwd_persistent,
                    "bwd_det_split_us": det_split,
                    "flops_fwd": flops,
                }));
                continue;
            }
            let window = fwd_of(&mut t, &windowed)?;
            let softcap = fwd_of(&mut t, &capped)?;
            let noop = fwd_of(&mut t, &feat_noop)?;
            let alibi = fwd_of(&mut t, &biased)?;
            // The features' backward (the default engine's general entry), each on its own
            // forward's O and LSE (the last forward above is ALiBi's).
            let bwd_alibi = bwd_of(&mut t, &biased, false, BackwardEngine::Auto)?;
            t.forward(&capped)?;
            let bwd_softcap = bwd_of(&mut t, &capped, false, BackwardEngine::Auto)?;
            t.forward(&windowed)?;
            let bwd_window = bwd_of(&mut t, &windowed, false, BackwardEngine::Auto)?;
            // One forward more (untimed), so O and LSE are the plain problem's for the backward.
            t.forward(&p)?;
            let bwd = bwd_of(&mut t, &p, false, BackwardEngine::Auto)?;
            let bwd_det = bwd_of(&mut t, &p, true, BackwardEngine::Auto)?;
            // The mma.sync kernel on the same device: the sm_80/89 path, timed where Auto
            // takes the wgmma one.
            let bwd_mma = bwd_of(&mut t, &p, false, BackwardEngine::MmaSync)?;
            let bwd_mma_det = bwd_of(&mut t, &p, true, BackwardEngine::MmaSync)?;
            // The default forward and backward timed as training steps, as the SDPA script
            // times its own, for the comparison with SDPA. On a GPU at its power cap a forward
            // timed in a loop of its own keeps higher clocks than one between backward passes
            // (docs/PERF.md, run 216: 0.887× cuDNN's time that way, 1.03× by `bench`), so the
            // loops above are compared only with each other.
            let (step_fwd, step_bwd) = time_steps(&gpu, warmup, iters, |forward| {
                if forward {
                    t.forward(&p)
                } else {
                    t.backward(&p, BackwardOptions::default())
                }
            })?;
            let flops = shape.flops(mask);
            let tf = |us: f64, mult: f64| mult * flops / us * 1e-6;
            let m = |x: &[f64]| median(&mut x.to_vec());
            println!(
                "B{b} H{h} S{n} D{d} {}: fwd {:.1} µs ({:.0} TFLOP/s) | window {:.3}× softcap {:.3}× alibi {:.3}× plain | bwd {:.1} µs ({:.0} TFLOP/s), deterministic {:.1} µs ({:.3}×), mma.sync {:.1} µs ({:.0} TFLOP/s), deterministic {:.3}×",
                if causal { "causal" } else { "full" },
                m(&fwd), tf(m(&fwd), 1.0),
                m(&window) / m(&fwd), m(&softcap) / m(&fwd), m(&alibi) / m(&fwd),
                m(&bwd), tf(m(&bwd), 2.5), m(&bwd_det), m(&bwd_det) / m(&bwd),
                m(&bwd_mma), tf(m(&bwd_mma), 2.5), m(&bwd_mma_det) / m(&bwd_mma)
            );
            println!(
                "    training steps (forward then backward, as SDPA's are timed): fwd {:.1} µs ({:.0} TFLOP/s), bwd {:.1} µs ({:.0} TFLOP/s)",
                m(&step_fwd), tf(m(&step_fwd), 1.0), m(&step_bwd), tf(m(&step_bwd), 2.5)
            );
            println!(
                "    fwd feature entry with zero ALiBi slopes (no feature arithmetic) vs plain: {:.3}×",
                m(&noop) / m(&fwd)
            );
            println!(
                "    bwd with features (default engine's general entry) vs the plain default: window {:.3}× softcap {:.3}× alibi {:.3}×",
                m(&bwd_window) / m(&bwd),
                m(&bwd_softcap) / m(&bwd),
                m(&bwd_alibi) / m(&bwd)
            );
            rows.push(serde_json::json!({
                "shape": [b, h, n, d, causal],
                "fwd_us": fwd, "window_us": window, "softcap_us": softcap, "alibi_us": alibi,
                "feat_noop_us": noop,
                "step_fwd_us": step_fwd, "step_bwd_us": step_bwd,
                "bwd_us": bwd, "bwd_det_us": bwd_det, "bwd_mma_us": bwd_mma, "bwd_mma_det_us": bwd_mma_det,
                "flops_fwd": flops,
                "bwd_window_us": bwd_window, "bwd_softcap_us": bwd_softcap, "bwd_alibi_us": bwd_alibi,
            }));
        }
    }
    let varlen = if args.varlen_seqs > 0 {
        varlen_rows(&gpu, &args)?
    } else {
        Vec::new()
    };
    let mut sdpa = serde_json::Value::Null;
    if args.python != "none" {
        let list: Vec<_> = shapes
            .iter()
            .flat_map(|&[b, h, n, d]| [[b, h, n, d, 0], [b, h, n, d, 1]])
            .collect();
        let out = Command::new(&args.python)
            .arg("-c")
            .arg(SCRIPT)
            .arg(serde_json::to_string(&list)?)
            .arg(args.warmup.to_string())
            .arg(args.iters.to_string())
            .arg(args.sustain_ms.to_string())
            .output()
            .context("running the SDPA script")?;
        if !out.status.success() {
            return Err(anyhow!(
                "SDPA script failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        sdpa = serde_json::from_slice(&out.stdout).context("parsing the SDPA script's output")?;
        let f = |v: &serde_json::Value| -> Vec<f64> {
            v.as_array()
                .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
                .unwrap_or_default()
        };
        // The script answers two backends per shape, in our rows' order.
        for (i, r) in sdpa.as_array().into_iter().flatten().enumerate() {
            let ours = &rows[i / 2];
            let (sf, sb) = (f(&r["fwd_us"]), f(&r["bwd_us"]));
            if sf.is_empty() || sb.is_empty() {
                println!("SDPA {} {}: {}", r["backend"], r["shape"], r["error"]);
                continue;
            }
            let opts = attn_stats::CompareOptions::default();
            // Our training steps against SDPA's (the same duty cycle on both sides); with
            // --plain, which times no steps, our own loops (the forward's ratio then favours us:
            // run 216).
            let (fwd_key, bwd_key) = if args.plain {
                ("fwd_us", "bwd_us")
            } else {
                ("step_fwd_us", "step_bwd_us")
            };
            let cf =
                attn_stats::compare(&sf, &f(&ours[fwd_key]), &opts).map_err(|e| anyhow!("{e}"))?;
            let cb =
                attn_stats::compare(&sb, &f(&ours[bwd_key]), &opts).map_err(|e| anyhow!("{e}"))?;
            let mma = if args.plain {
                String::new()
            } else {
                let cm = attn_stats::compare(&sb, &f(&ours["bwd_mma_us"]), &opts)
                    .map_err(|e| anyhow!("{e}"))?;
                format!(
                    ", bwd mma.sync {:.3} [{:.3}, {:.3}]",
                    cm.ratio, cm.ratio_ci_low, cm.ratio_ci_high
                )
            };
            println!(
                "SDPA {} {}: fwd {:.1} µs, bwd {:.1} µs | ours/SDPA time: fwd {:.3} [{:.3}, {:.3}], bwd {:.3} [{:.3}, {:.3}]{mma}",
                r["backend"],
                r["shape"],
                median(&mut sf.clone()),
                median(&mut sb.clone()),
                cf.ratio,
                cf.ratio_ci_low,
                cf.ratio_ci_high,
                cb.ratio,
                cb.ratio_ci_low,
                cb.ratio_ci_high,
            );
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(
            path,
            serde_json::to_string_pretty(
                &serde_json::json!({"ours": rows, "varlen": varlen, "sdpa": sdpa}),
            )?,
        )?;
    }
    Ok(())
}

/// The varlen rows: `args.varlen_seqs` packed sequences through `forward_sequences` and
/// `backward_with` (both masks), timed like the dense rows. Their TFLOP/s count each
/// sequence's own FLOPs (backward: 2.5 × the forward's), so they compare with the dense rows'.
fn varlen_rows(gpu: &FlashAttention, args: &Args) -> Result<Vec<serde_json::Value>> {
    use attn_kernels::{BackwardExtras, Indices, KeyRows, QueryRows, Sequences};
    use rand::{Rng, SeedableRng};
    let (h, d) = (16, 128);
    let s = gpu.stream().clone();
    let mut r = rand::rngs::StdRng::seed_from_u64(7);
    let lens: Vec<usize> = (0..args.varlen_seqs)
        .map(|_| r.random_range(128..=4096))
        .collect();
    let mut cu = vec![0i32];
    for &l in &lens {
        cu.push(cu[cu.len() - 1] + l as i32);
    }
    let total = *cu.last().unwrap_or(&0) as usize;
    let max_len = lens.iter().copied().max().unwrap_or(1);
    let n = total * h * d;
    let rnd = |r: &mut rand::rngs::StdRng| -> Result<cudarc::driver::CudaSlice<bf16>> {
        let host: Vec<bf16> = crate::randn::normal_samples(n, r.random(), bf16::from_f32);
        Ok(s.clone_htod(&host)?)
    };
    let (q, k, v, d_o) = (rnd(&mut r)?, rnd(&mut r)?, rnd(&mut r)?, rnd(&mut r)?);
    let dcu = s.clone_htod(&cu)?;
    let seqs = || Sequences {
        queries: QueryRows::Packed {
            cu_seqlens: Indices::new(dcu.as_view()).with_host(&cu),
        },
        keys: KeyRows::Packed {
            cu_seqlens: Indices::new(dcu.as_view()).with_host(&cu),
        },
        seqused_k: None,
    };
    let dims = [1, h, total, d];
    let bs = Layout::Bshd;
    let mut o = s.alloc_zeros::<bf16>(n)?;
    let mut lse = s.alloc_zeros::<f32>(h * total)?;
    let (mut dq, mut dk, mut dv) = (
        s.alloc_zeros::<bf16>(n)?,
        s.alloc_zeros::<bf16>(n)?,
        s.alloc_zeros::<bf16>(n)?,
    );
    let mut out = Vec::new();
    for mask in [Causal::None, Causal::BottomRight] {
        let p = Problem::new(AttnShape::new(lens.len(), h, h, max_len, max_len, d)?, mask);
        let flops: f64 = lens
            .iter()
            .map(|&l| AttnShape::new(1, h, h, l, l, d).map(|a| a.flops(mask)))
            .sum::<std::result::Result<f64, _>>()?;
        let fwd = time(gpu, args.warm(), args.iters, || {
            gpu.forward_sequences(
                Forward {
                    problem: &p,
                    q: Tensor::contiguous(q.as_view(), dims, bs),
                    k: Tensor::contiguous(k.as_view(), dims, bs),
                    v: Tensor::contiguous(v.as_view(), dims, bs),
                    o: TensorMut::contiguous(o.as_view_mut(), dims, bs),
                    lse: Some(lse.as_view_mut()),
                    options: ForwardOptions::default(),
                },
                seqs(),
            )?;
            Ok(())
        })?;
        let bwd = time(gpu, args.warm(), args.iters, || {
            gpu.backward_with(
                Backward {
                    problem: &p,
                    q: Tensor::contiguous(q.as_view(), dims, bs),
                    k: Tensor::contiguous(k.as_view(), dims, bs),
                    v: Tensor::contiguous(v.as_view(), dims, bs),
                    o: Tensor::contiguous(o.as_view(), dims, bs),
                    lse: lse.as_view(),
                    d_o: Tensor::contiguous(d_o.as_view(), dims, bs),
                    dq: TensorMut::contiguous(dq.as_view_mut(), dims, bs),
                    dk: TensorMut::contiguous(dk.as_view_mut(), dims, bs),
                    dv: TensorMut::contiguous(dv.as_view_mut(), dims, bs),
                    options: BackwardOptions::default(),
                },
                BackwardExtras {
                    seqs: seqs(),
                    dsinks: None,
                },
            )?;
            Ok(())
        })?;
        let m = |x: &[f64]| median(&mut x.to_vec());
        println!(
            "varlen {} sequences of {}–{} tokens ({total} in all), H{h} D{d} {}: fwd {:.1} µs ({:.0} TFLOP/s) | bwd {:.1} µs ({:.0} TFLOP/s)",
            lens.len(),
            lens.iter().min().unwrap_or(&0),
            max_len,
            if mask == Causal::None { "full" } else { "causal" },
            m(&fwd),
            flops / m(&fwd) * 1e-6,
            m(&bwd),
            2.5 * flops / m(&bwd) * 1e-6
        );
        out.push(serde_json::json!({
            "lens": lens, "causal": mask != Causal::None, "flops_fwd": flops,
            "fwd_us": fwd, "bwd_us": bwd,
        }));
    }
    Ok(out)
}
