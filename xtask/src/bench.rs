//! `cargo xtask bench`: our kernel against PyTorch SDPA (flash, efficient, cudnn), both timed
//! in the same run with the same protocol (below), summarized by attn-stats. Our FP8 rows
//! (`--fp8`) are compared with cuDNN's FP8 SDPA (`cudnn_fp8`, through `nvidia-cudnn-frontend`
//! where python3 can import it; it writes O in E4M3, ours in f16) and with SDPA's f16 backends
//! on the same shape; the fastest is the row's champion.
//!
//! Protocol: random N(0,1) inputs, rotated across up to 8 sets when one set fits in L2
//! (50 MB); ≥ 20 warm-ups, and event-timed shapes keep launching until `--sustain-ms`
//! has passed; ≥ 200 samples. Each sample is a CUDA event pair around one launch
//! ("events"), or, for shapes whose launch is under 20 µs (or every shape with
//! `--timing graph`), around one replay of a CUDA graph of 20 launches divided by 20
//! ("graph") — the SDPA side then captures a graph too. Samples
//! are enqueued back to back and synchronized once.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
};

use anyhow::{bail, Context};
use attn_kernels::{
    dims_kv, dims_q, Dtype, FlashAttention, Forward, ForwardOptions, Fp8Forward, Fp8Options,
    Fp8Scales, Fp8Variant, KernelConfig, Layout, StorageType, Tensor, TensorMut,
};
use attn_ref::{AttnShape, Causal, Problem};
use cudarc::driver::{sys, CudaSlice, CudaStream};
use rand::{rngs::StdRng, Rng, SeedableRng};

pub mod schema;

use crate::flags::{CausalArg, DtypeChoice, Fp8Arg, ShapeSet, TimingArg};

use schema::{BenchFile, BenchRow, Champion, SdpaResult};

/// The least warm-up of an event-timed shape, on both sides. A GPU at its power cap (the
/// H200's 700 W under these forwards) lowers its clocks some 50 ms into sustained load; with
/// 30 warm-up launches the first quarter of 200 samples ran at higher clocks than the rest,
/// which made every backend's samples bimodal (docs/PERF.md, run 216). Samples taken after
/// this much load are all in the sustained state for our kernels. cuDNN's backward needed
/// more (1.5 s: docs/PERF.md, run 310), so `bench` and `train-bench` take `--sustain-ms`
/// (default 1500); `sweep` and `serve-bench`, which time our kernels only, keep this.
pub(crate) const SUSTAINED_WARMUP: std::time::Duration = std::time::Duration::from_millis(500);

/// What precedes a timing loop: `sustain` of load, then `calls` untimed calls.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Warmup {
    pub calls: usize,
    pub sustain: std::time::Duration,
}

impl Warmup {
    /// `calls` warm-up calls after [`SUSTAINED_WARMUP`] of load.
    pub(crate) fn calls(calls: usize) -> Self {
        Self {
            calls,
            sustain: SUSTAINED_WARMUP,
        }
    }
}

/// Calls `launch` until `duration` has passed (a synchronization every 8 calls, to read the
/// time), so that what is timed next runs at sustained clocks.
pub(crate) fn sustain_for(
    stream: &CudaStream,
    duration: std::time::Duration,
    mut launch: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let start = std::time::Instant::now();
    while start.elapsed() < duration {
        for _ in 0..8 {
            launch()?;
        }
        stream.synchronize()?;
    }
    Ok(())
}

/// The SDPA timing script, embedded so the bundle's xtask binary needs nothing beside it.
pub const SDPA_SCRIPT: &str = include_str!("../scripts/sdpa_bench.py");

const L2_BYTES: usize = 50 * 1024 * 1024;
const GRAPH_LAUNCHES: usize = 20;

/// Arguments of `cargo xtask bench`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Shape set.
    #[arg(long, value_enum, default_value_t = ShapeSet::Seed)]
    shapes: ShapeSet,
    /// One shape `B,H,S,D` (or `B,Hq:Hkv,SqxSk,D`) instead of a set (with --causal).
    #[arg(long)]
    shape: Option<String>,
    /// Causal mode for --shape.
    #[arg(long, value_enum, default_value_t = CausalArg::None)]
    causal: CausalArg,
    /// Storage type(s).
    #[arg(long, value_enum, default_value_t = DtypeChoice::F16)]
    dtype: DtypeChoice,
    /// Kernel config: an mma.sync config (`128_64_8_s2`), a Hopper config (`wg128_128_s2_pp`),
    /// or an engine with its default config (`mma`, `hopper`, `decode`); default: the chooser's.
    #[arg(long)]
    config: Option<String>,
    /// Split-KV count for the mma.sync, decode and Hopper FP8 kernels (1 = no split); default:
    /// the chooser's.
    #[arg(long)]
    splits: Option<usize>,
    /// Warm-up launches per shape.
    #[arg(long, default_value_t = 30)]
    warmup: usize,
    /// Load before each timing loop, ours and SDPA's, in ms, so the samples run at sustained
    /// clocks (launches of 20 µs and more; shorter ones are graph-timed after `--warmup`).
    /// After 500 ms cuDNN's backward still changed clock state within its samples (docs/PERF.md,
    /// runs 305 and 309); `train-bench` and this default to 1500.
    #[arg(long, default_value_t = 1500)]
    sustain_ms: u64,
    /// Timed samples per shape and backend.
    #[arg(long, default_value_t = 300)]
    samples: usize,
    /// Where bench.json and samples/*.csv go.
    #[arg(long, default_value = "target/bench")]
    out_dir: PathBuf,
    /// Skip the SDPA side (our kernel only).
    #[arg(long)]
    no_sdpa: bool,
    /// Warm up, then launch exactly once (for ncu) and exit.
    #[arg(long)]
    once: bool,
    /// Also time the FP8 (E4M3, per-head scales, f16 out) forward: `auto` (the device's
    /// default variant), or a comma list of hopper, wgmma, fp8, p16, cvt (repeats run once). Implies f16
    /// among the dtypes, so each FP8 row carries its speedup over our f16 kernel on the same
    /// shape. The SDPA side then also times cuDNN's FP8 SDPA on each shape (Hq = Hkv and
    /// Sq = Sk, event-timed rows; it needs `nvidia-cudnn-frontend` importable by python3).
    #[arg(long, value_enum, value_delimiter = ',')]
    fp8: Option<Vec<Fp8Arg>>,
    /// FP8 config name (`128_128_8_s2`, one of attn_kernels::FP8_CONFIGS, or a Hopper tile such as
    /// `wg128_128_s2_ia` for the `hopper` variant; default: the
    /// chooser's).
    #[arg(long)]
    fp8_config: Option<String>,
    /// Memory layout of our kernel's Q, K, V and O: bhsd (contiguous `[B,H,S,D]`) or bshd
    /// (`[B,S,H,D]`, strided heads). SDPA always runs on contiguous `[B,H,S,D]`.
    #[arg(long, value_enum, default_value = "bhsd")]
    layout: crate::flags::LayoutArg,
    /// How the Hopper engine's launches (f16/bf16 and FP8) cover their work items: `auto`
    /// (persistent CTAs where the entry walks items, with a stream-K tail where it pays),
    /// `grid` (one CTA per query block), `persistent` (whole items only) or `stream-k` (a
    /// stream-K tail whenever the last round is partial).
    #[arg(long, value_enum, default_value = "auto")]
    schedule: crate::flags::ScheduleArg,
    /// After the run, print the Hopper forward's per-warp phase timeline and write its rows
    /// to timeline.csv (needs a build with `ATTN_TIMELINE=1`: `attn_kernels::timeline`).
    #[arg(long)]
    timeline: bool,
    /// How samples are timed: `auto` (CUDA graphs for launches under 20 µs, events
    /// otherwise), `graph` or `events`; the SDPA side follows ours shape by shape.
    #[arg(long, value_enum, default_value = "auto")]
    timing: TimingArg,
}

impl Args {
    fn warm(&self) -> Warmup {
        Warmup {
            calls: self.warmup,
            sustain: std::time::Duration::from_millis(self.sustain_ms),
        }
    }
}

/// An FP8 config: a Hopper-engine tile (`wg128_128_s2_ia`, for the `hopper` variant) or one
/// of the other variants' configs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fp8ConfigArg {
    Hopper(attn_kernels::HopperTile),
    Config(KernelConfig),
}

fn fp8_config_arg(name: &str) -> anyhow::Result<Fp8ConfigArg> {
    if name.starts_with("wg") {
        return Ok(Fp8ConfigArg::Hopper(attn_kernels::HopperTile::by_name(
            name,
        )?));
    }
    fp8_config_by_name(name).map(Fp8ConfigArg::Config)
}

/// Looks an FP8 config up by [`KernelConfig::name`] (the `_s2` suffix may be omitted).
fn fp8_config_by_name(name: &str) -> anyhow::Result<KernelConfig> {
    let all = || {
        attn_kernels::FP8_CONFIGS
            .into_iter()
            .chain(attn_kernels::catalog::FP8_D256_TILES)
    };
    all()
        .find(|c| c.name() == name || c.name() == format!("{name}_s2"))
        .with_context(|| {
            let known: Vec<String> = all().map(|c| c.name()).collect();
            format!(
                "unknown FP8 config `{name}`: expected one of {}",
                known.join(", ")
            )
        })
}

/// One benchmark shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchShape {
    pub b: usize,
    pub hq: usize,
    pub hkv: usize,
    pub sq: usize,
    pub sk: usize,
    pub d: usize,
    pub causal: Causal,
}

impl BenchShape {
    pub fn mha(b: usize, h: usize, s: usize, d: usize, causal: bool) -> Self {
        Self {
            b,
            hq: h,
            hkv: h,
            sq: s,
            sk: s,
            d,
            causal: if causal {
                Causal::TopLeft
            } else {
                Causal::None
            },
        }
    }

    /// `1,8,512,64` (+ `-causal`), or `1,32,1x8192,128` for Sq ≠ Sk.
    pub fn name(&self) -> String {
        let s = if self.sq == self.sk {
            format!("{}", self.sq)
        } else {
            format!("{}x{}", self.sq, self.sk)
        };
        let c = if self.causal == Causal::None {
            ""
        } else {
            "-causal"
        };
        let h = if self.hkv == self.hq {
            format!("{}", self.hq)
        } else {
            format!("{}:{}", self.hq, self.hkv)
        };
        format!("{},{h},{s},{}{c}", self.b, self.d)
    }

    pub fn problem(&self) -> anyhow::Result<Problem> {
        Ok(Problem::new(
            AttnShape::new(self.b, self.hq, self.hkv, self.sq, self.sk, self.d)?,
            self.causal,
        ))
    }
}

/// The benchmark shape sets.
pub fn shape_set(set: ShapeSet) -> Vec<BenchShape> {
    let seed = || {
        [
            (1, 8, 512, 64),
            (2, 8, 512, 64),
            (2, 8, 2048, 64),
            (2, 8, 2048, 128),
        ]
        .into_iter()
        .flat_map(|(b, h, s, d)| {
            [
                BenchShape::mha(b, h, s, d, false),
                BenchShape::mha(b, h, s, d, true),
            ]
        })
        .collect::<Vec<_>>()
    };
    let large = || {
        vec![
            BenchShape::mha(4, 16, 4096, 64, false),
            BenchShape::mha(4, 16, 4096, 64, true),
            BenchShape::mha(4, 16, 4096, 128, false),
            BenchShape::mha(4, 16, 4096, 128, true),
            BenchShape::mha(1, 16, 16384, 128, false),
        ]
    };
    // DESIGN.md §7's decode shape, and serve-bench's paged decode (B 64, Hq 32 / Hkv 8, 4096
    // keys) on a dense cache: SDPA has no paged input, so its gathered dense cache is the
    // paged decode's baseline (FlashInfer's cubin wheel, 458 MB, does not fit the GPU host's
    // 64 MiB transfer).
    let decode = || {
        vec![
            BenchShape {
                b: 1,
                hq: 32,
                hkv: 32,
                sq: 1,
                sk: 8192,
                d: 128,
                causal: Causal::None,
            },
            BenchShape {
                b: 64,
                hq: 32,
                hkv: 8,
                sq: 1,
                sk: 4096,
                d: 128,
                causal: Causal::None,
            },
        ]
    };
    match set {
        ShapeSet::Seed => seed(),
        ShapeSet::Large => large(),
        ShapeSet::SeedLarge => [seed(), large()].concat(),
        ShapeSet::Decode => decode(),
        ShapeSet::All => [seed(), large(), decode()].concat(),
    }
}

/// Parses `B,H,S,D`, or the general `B,Hq:Hkv,SqxSk,D` (GQA heads, a query length other
/// than the key length: `64,32:8,1x4096,256` is a GQA decode step).
pub fn parse_shape(s: &str, causal: Causal) -> anyhow::Result<BenchShape> {
    let usage = || format!("--shape `{s}`: expected B,H,S,D or B,Hq:Hkv,SqxSk,D");
    let fields: Vec<&str> = s.split(',').map(str::trim).collect();
    let [b, h, sl, d] = fields[..] else {
        bail!("{}: four comma-separated fields", usage());
    };
    let num = |x: &str| x.parse::<usize>().with_context(usage);
    let pair = |x: &str, sep: char| -> anyhow::Result<(usize, usize)> {
        Ok(match x.split_once(sep) {
            Some((a, c)) => (num(a)?, num(c)?),
            None => (num(x)?, num(x)?),
        })
    };
    let (hq, hkv) = pair(h, ':')?;
    let (sq, sk) = pair(sl, 'x')?;
    Ok(BenchShape {
        b: num(b)?,
        hq,
        hkv,
        sq,
        sk,
        d: num(d)?,
        causal,
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let shapes = match &args.shape {
        Some(s) => vec![parse_shape(s, args.causal.into())?],
        None => shape_set(args.shapes),
    };
    let mut dtypes = args.dtype.dtypes();
    let gpu = crate::forward::gpu()?;
    let mut fp8_variants: Vec<Fp8Variant> = Vec::new();
    for v in args.fp8.iter().flatten() {
        let v = v.resolve(|| gpu.fp8_default_variant());
        if !fp8_variants.contains(&v) {
            fp8_variants.push(v);
        }
    }
    if !fp8_variants.is_empty() && !dtypes.contains(&Dtype::F16) {
        dtypes.insert(0, Dtype::F16);
    }
    let mut config = match args.config.as_deref() {
        Some(name) => ForwardOptions::from_config_name(name)?,
        None => ForwardOptions::default(),
    };
    if args.splits.is_some() {
        config.splits = args.splits;
    }
    config.schedule = args.schedule.into();
    let layout = attn_kernels::Layout::from(args.layout);
    // SAFETY: the benchmark issues all its work on one stream, so cudarc's cross-stream
    // event tracking is not needed; without it, no event records enter the timed region or
    // the captured CUDA graphs.
    unsafe { gpu.context().disable_event_tracking() };
    if args.once {
        let shape = shapes.first().context("no shape")?;
        if fp8_variants.is_empty() {
            for &dt in &dtypes {
                time_ours(
                    &gpu,
                    shape,
                    dt,
                    &config,
                    layout,
                    Warmup::calls(5),
                    1,
                    true,
                    args.timing,
                )?;
            }
        } else {
            // FP8 only: the f16 launches would be profiled too.
            let fp8_config = args.fp8_config.as_deref().map(fp8_config_arg).transpose()?;
            for &v in &fp8_variants {
                time_fp8(
                    &gpu,
                    shape,
                    v,
                    fp8_config,
                    args.schedule.into(),
                    args.splits,
                    Warmup::calls(5),
                    1,
                    args.timing,
                )?;
            }
        }
        return Ok(());
    }
    std::fs::create_dir_all(args.out_dir.join("samples"))
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    let report = bench(&gpu, &shapes, &dtypes, &fp8_variants, &config, &args)?;
    let path = args.out_dir.join("bench.json");
    report.write(&path)?;
    println!("{}", render_table(&report));
    println!("wrote {}", path.display());
    if args.timeline {
        write_timeline(&gpu, &args.out_dir.join("timeline.csv"))?;
    }
    Ok(())
}

/// `--timeline`: the phase summary on stdout, every row in `path`.
fn write_timeline(gpu: &FlashAttention, path: &std::path::Path) -> anyhow::Result<()> {
    use attn_kernels::timeline;
    let rows = timeline::read(gpu)?;
    for summary in timeline::summarize(&rows) {
        println!("timeline: {summary}");
    }
    let mut csv =
        csv::Writer::from_path(path).with_context(|| format!("creating {}", path.display()))?;
    let events = (0..timeline::EVENTS).map(|e| format!("t{e}"));
    csv.write_record(
        ["unit", "tag", "cta", "warp", "step"]
            .map(String::from)
            .into_iter()
            .chain(events),
    )?;
    for r in &rows {
        let ids = [r.tag, r.cta, r.warp, r.step].map(|x| x.to_string());
        let clocks = r.clocks.iter().map(|c| c.to_string());
        csv.write_record(std::iter::once(r.unit.clone()).chain(ids).chain(clocks))?;
    }
    csv.flush()?;
    println!("wrote {} ({} rows)", path.display(), rows.len());
    Ok(())
}

fn bench(
    gpu: &Arc<FlashAttention>,
    shapes: &[BenchShape],
    dtypes: &[Dtype],
    fp8_variants: &[Fp8Variant],
    config: &ForwardOptions,
    args: &Args,
) -> anyhow::Result<BenchFile> {
    // Our side first, then the SDPA script on the same GPU in the same run.
    let mut ours = Vec::new();
    for &dt in dtypes {
        for shape in shapes {
            let layout = attn_kernels::Layout::from(args.layout);
            let t = time_ours(
                gpu,
                shape,
                dt,
                config,
                layout,
                args.warm(),
                args.samples,
                false,
                args.timing,
            )?;
            let name = format!("{}-{}", shape.name(), dt);
            write_csv(
                &args
                    .out_dir
                    .join("samples")
                    .join(format!("{name}-ours.csv")),
                &t.samples_us,
            )?;
            eprintln!(
                "{name}: ours median {:.2} µs ({})",
                median(&t.samples_us),
                t.method
            );
            ours.push((shape, dt, t));
        }
    }
    let mut fp8_rows = Vec::new();
    for &variant in fp8_variants {
        for shape in shapes {
            let fp8_config = args.fp8_config.as_deref().map(fp8_config_arg).transpose()?;
            let t = time_fp8(
                gpu,
                shape,
                variant,
                fp8_config,
                args.schedule.into(),
                args.splits,
                args.warm(),
                args.samples,
                args.timing,
            )?;
            let name = format!("{}-fp8-{variant}", shape.name());
            write_csv(
                &args
                    .out_dir
                    .join("samples")
                    .join(format!("{name}-ours.csv")),
                &t.samples_us,
            )?;
            eprintln!(
                "{name}: ours median {:.2} µs ({})",
                median(&t.samples_us),
                t.method
            );
            fp8_rows.push((shape, variant, t));
        }
    }
    let sdpa = if args.no_sdpa {
        None
    } else {
        Some(run_sdpa(&ours, &fp8_rows, args)?)
    };
    let mut rows = Vec::new();
    let f16_of = |shape: &BenchShape| {
        ours.iter()
            .find(|(s, d, _)| *s == shape && *d == Dtype::F16)
            .map(|(_, _, t)| mean(&t.samples_us))
    };
    let all = ours
        .iter()
        .map(|(s, dt, t)| (*s, dt.to_string(), format!("{}-{}", s.name(), dt), t))
        .chain(
            fp8_rows
                .iter()
                .map(|(s, v, t)| (*s, format!("fp8-{v}"), format!("{}-fp8-{v}", s.name()), t)),
        );
    for (shape, dtype, name, t) in all {
        // SDPA has no FP8 path: FP8 rows are compared with cuDNN's FP8 SDPA and SDPA's f16 run
        // of the shape.
        let sdpa_names = baseline_names(shape, &name, dtype.starts_with("fp8"));
        let mine =
            attn_stats::Summary::new(&t.samples_us).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let opts = attn_stats::CompareOptions::default();
        let mut row = BenchRow {
            shape: name.clone(),
            causal: shape.causal != Causal::None,
            speedup_vs_ours_f16: if dtype.starts_with("fp8") {
                f16_of(shape).map(|f| f / mean(&t.samples_us))
            } else {
                None
            },
            dtype,
            kernel: t.kernel.clone(),
            method: t.method.to_string(),
            ours: attn_stats::compare(&t.samples_us, &t.samples_us, &opts)
                .map(|c| c.baseline.into())
                .map_err(|e| anyhow::anyhow!("{name}: {e}"))?,
            tflops: shape.problem()?.shape().flops(shape.causal) / (mine.median * 1e-6) / 1e12,
            champion: None,
            ratio: None,
            ratio_ci_low: None,
            ratio_ci_high: None,
            hedges_g: None,
            decision: None,
            ratio_to_flash: None,
            sdpa: Vec::new(),
        };
        if let Some(sdpa) = &sdpa {
            let mut best: Option<(String, Vec<f64>)> = None;
            for r in sdpa.iter().filter(|r| sdpa_names.contains(&r.name)) {
                row.sdpa.push(SdpaResult {
                    backend: r.backend.clone(),
                    median_us: r.samples.as_ref().map(|s| median(s)),
                    error: r.error.clone(),
                });
                if let Some(s) = &r.samples {
                    if r.backend == "sdpa_flash" {
                        row.ratio_to_flash = Some(mean(&t.samples_us) / mean(s));
                    }
                    if best.as_ref().is_none_or(|(_, b)| median(s) < median(b)) {
                        best = Some((r.backend.clone(), s.clone()));
                    }
                }
            }
            if let Some((backend, champ)) = best {
                let c = attn_stats::compare(&champ, &t.samples_us, &opts)
                    .map_err(|e| anyhow::anyhow!("{name} vs {backend}: {e}"))?;
                row.ours = c.candidate.into();
                row.champion = Some(Champion {
                    backend,
                    summary: c.baseline.into(),
                });
                row.ratio = Some(c.ratio);
                row.ratio_ci_low = Some(c.ratio_ci_low);
                row.ratio_ci_high = Some(c.ratio_ci_high);
                row.hedges_g = c.hedges_g;
                row.decision = Some(c.decision.to_string());
            }
        }
        rows.push(row);
    }
    let (ma, mi) = gpu.compute_capability();
    Ok(BenchFile {
        device: format!("sm_{ma}{mi}, {} SMs", gpu.sm_count()),
        date: today(),
        commit: git_commit(),
        torch: None,
        rows,
    })
}

pub(crate) struct OurTiming {
    pub samples_us: Vec<f64>,
    pub kernel: String,
    pub method: &'static str,
}

fn randn_device<T: StorageType>(
    stream: &Arc<CudaStream>,
    rng: &mut StdRng,
    n: usize,
) -> anyhow::Result<CudaSlice<T>> {
    let host: Vec<T> = crate::randn::normal_samples(n, rng.random(), T::from_f32);
    Ok(stream.clone_htod(&host)?)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn time_ours(
    gpu: &Arc<FlashAttention>,
    shape: &BenchShape,
    dtype: Dtype,
    config: &ForwardOptions,
    layout: Layout,
    warmup: Warmup,
    samples: usize,
    once: bool,
    timing: TimingArg,
) -> anyhow::Result<OurTiming> {
    match dtype {
        Dtype::F16 => {
            time_typed::<half::f16>(gpu, shape, config, layout, warmup, samples, once, timing)
        }
        Dtype::Bf16 => {
            time_typed::<half::bf16>(gpu, shape, config, layout, warmup, samples, once, timing)
        }
    }
}

type InputSet<T> = (CudaSlice<T>, CudaSlice<T>, CudaSlice<T>, CudaSlice<T>);

#[allow(clippy::too_many_arguments)]
fn time_typed<T: StorageType>(
    gpu: &Arc<FlashAttention>,
    shape: &BenchShape,
    config: &ForwardOptions,
    layout: Layout,
    warmup: Warmup,
    samples: usize,
    once: bool,
    timing: TimingArg,
) -> anyhow::Result<OurTiming> {
    let p = shape.problem()?;
    let s = *p.shape();
    let stream = gpu.stream().clone();
    let bytes = 2 * (2 * s.q_elems() + 2 * s.kv_elems());
    let n_sets = (2 * L2_BYTES).div_ceil(bytes).clamp(1, 8);
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let mut sets: Vec<InputSet<T>> = Vec::new();
    for _ in 0..n_sets {
        sets.push((
            randn_device::<T>(&stream, &mut rng, s.q_elems())?,
            randn_device::<T>(&stream, &mut rng, s.kv_elems())?,
            randn_device::<T>(&stream, &mut rng, s.kv_elems())?,
            stream.alloc_zeros::<T>(s.o_elems())?,
        ));
    }
    let mut lse = stream.alloc_zeros::<f32>(s.lse_elems())?;
    let opts = config.clone();
    let mut kernel = String::new();
    let mut launch = |i: usize| -> anyhow::Result<()> {
        let (q, k, v, o) = &mut sets[i % n_sets];
        let (qd, kd) = (dims_q(&s), dims_kv(&s));
        let info = gpu.forward(Forward {
            problem: &p,
            q: Tensor::contiguous(q.as_view(), qd, layout),
            k: Tensor::contiguous(k.as_view(), kd, layout),
            v: Tensor::contiguous(v.as_view(), kd, layout),
            o: TensorMut::contiguous(o.as_view_mut(), qd, layout),
            lse: Some(lse.as_view_mut()),
            options: opts.clone(),
        })?;
        if kernel.is_empty() {
            kernel = format!("{} ({})", info.kernel, info.config.name());
        }
        Ok(())
    };
    let (samples_us, method) = time_launches(gpu, warmup, samples, once, timing, &mut launch)?;
    Ok(OurTiming {
        samples_us,
        kernel,
        method,
    })
}

/// Times `launch(i)` (one forward on input set i) per the protocol in the module docs.
pub(crate) fn time_launches(
    gpu: &Arc<FlashAttention>,
    warmup: Warmup,
    samples: usize,
    once: bool,
    timing: TimingArg,
    launch: &mut dyn FnMut(usize) -> anyhow::Result<()>,
) -> anyhow::Result<(Vec<f64>, &'static str)> {
    let stream = gpu.stream().clone();
    let (sustain, warmup) = (warmup.sustain, warmup.calls);
    for i in 0..warmup {
        launch(i)?;
    }
    stream.synchronize()?;
    if once {
        launch(0)?;
        stream.synchronize()?;
        return Ok((Vec::new(), "once"));
    }
    let ctx = gpu.context();
    let event_flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let use_graph = match timing {
        TimingArg::Graph => true,
        TimingArg::Events => false,
        TimingArg::Auto => {
            // Probe: is one launch under 20 µs? Then time graph replays instead.
            let probe_ev: Vec<_> = (0..22)
                .map(|_| ctx.new_event(event_flags))
                .collect::<Result<_, _>>()?;
            for (i, w) in probe_ev.chunks(2).enumerate() {
                w[0].record(&stream)?;
                launch(i)?;
                w[1].record(&stream)?;
            }
            stream.synchronize()?;
            let mut probe: Vec<f64> = probe_ev
                .chunks(2)
                .map(|w| w[0].elapsed_ms(&w[1]).map(|ms| ms as f64 * 1e3))
                .collect::<Result<_, _>>()?;
            probe.sort_by(f64::total_cmp);
            probe[probe.len() / 2] < 20.0
        }
    };
    let events: Vec<_> = (0..2 * samples)
        .map(|_| ctx.new_event(event_flags))
        .collect::<Result<_, _>>()?;
    let samples_us = if use_graph {
        stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        for i in 0..GRAPH_LAUNCHES {
            launch(i)?;
        }
        let graph = stream
            .end_capture(sys::CUgraphInstantiate_flags(0))?
            .context("empty CUDA graph")?;
        graph.upload()?;
        for _ in 0..warmup.div_ceil(GRAPH_LAUNCHES).max(2) {
            graph.launch()?;
        }
        for w in events.chunks(2) {
            w[0].record(&stream)?;
            graph.launch()?;
            w[1].record(&stream)?;
        }
        stream.synchronize()?;
        events
            .chunks(2)
            .map(|w| {
                w[0].elapsed_ms(&w[1])
                    .map(|ms| ms as f64 * 1e3 / GRAPH_LAUNCHES as f64)
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        // Launches of 20 µs and more: on to sustained clocks first.
        let mut i = warmup;
        sustain_for(&stream, sustain, || {
            launch(i)?;
            i += 1;
            Ok(())
        })?;
        for (i, w) in events.chunks(2).enumerate() {
            w[0].record(&stream)?;
            launch(i)?;
            w[1].record(&stream)?;
        }
        stream.synchronize()?;
        events
            .chunks(2)
            .map(|w| w[0].elapsed_ms(&w[1]).map(|ms| ms as f64 * 1e3))
            .collect::<Result<Vec<_>, _>>()?
    };
    Ok((samples_us, if use_graph { "graph" } else { "events" }))
}

type Fp8Upload = (CudaSlice<u8>, CudaSlice<f32>);
type Fp8Set = (Fp8Upload, Fp8Upload, Fp8Upload, CudaSlice<half::f16>);

/// Times the FP8 forward (f16 out) on per-head E4M3 inputs quantized by attn-quant from
/// N(0,1), with the same protocol; the Vᵀ pass of the variants that have one is inside every
/// timed launch.
#[allow(clippy::too_many_arguments)]
fn time_fp8(
    gpu: &Arc<FlashAttention>,
    shape: &BenchShape,
    variant: Fp8Variant,
    config: Option<Fp8ConfigArg>,
    schedule: attn_kernels::TileSchedule,
    splits: Option<usize>,
    warmup: Warmup,
    samples: usize,
    timing: TimingArg,
) -> anyhow::Result<OurTiming> {
    use attn_quant::{quantize, Fp8Format, Granularity};
    let p = shape.problem()?;
    let s = *p.shape();
    let stream = gpu.stream().clone();
    let bytes = 2 * s.q_elems() + 2 * s.kv_elems() + 2 * s.o_elems();
    let n_sets = (2 * L2_BYTES).div_ceil(bytes).clamp(1, 8);
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let (qd, kd) = (attn_quant::q_dims(&s), attn_quant::kv_dims(&s));
    let mut upload = |n: usize, dims: [usize; 4]| -> anyhow::Result<Fp8Upload> {
        let x: Vec<f32> = crate::randn::normal_samples(n, rng.random(), |v| v);
        let t = quantize(&x, dims, Fp8Format::E4M3, Granularity::Head)?;
        Ok((stream.clone_htod(&t.codes)?, stream.clone_htod(&t.scales)?))
    };
    let mut sets: Vec<Fp8Set> = Vec::new();
    for _ in 0..n_sets {
        sets.push((
            upload(s.q_elems(), qd)?,
            upload(s.kv_elems(), kd)?,
            upload(s.kv_elems(), kd)?,
            stream.alloc_zeros::<half::f16>(s.o_elems())?,
        ));
    }
    let mut lse = stream.alloc_zeros::<f32>(s.lse_elems())?;
    let opts = Fp8Options {
        schedule,
        hopper: match config {
            Some(Fp8ConfigArg::Hopper(t)) => Some(t),
            _ => None,
        },
        config: match config {
            Some(Fp8ConfigArg::Config(c)) => Some(c),
            _ => None,
        },
        variant: Some(variant),
        splits,
    };
    let mut kernel = String::new();
    let mut launch = |i: usize| -> anyhow::Result<()> {
        let (q, k, v, o) = &mut sets[i % n_sets];
        let info = gpu.forward_fp8(Fp8Forward {
            problem: &p,
            q: Tensor::bhsd(&q.0, qd),
            k: Tensor::bhsd(&k.0, kd),
            v: Tensor::bhsd(&v.0, kd),
            scales: Fp8Scales {
                q: q.1.as_view(),
                k: k.1.as_view(),
                v: v.1.as_view(),
            },
            o: TensorMut::bhsd(o, qd),
            lse: Some(lse.as_view_mut()),
            options: opts,
        })?;
        if kernel.is_empty() {
            // Every variant but the Hopper engine's launches a Vᵀ pass first.
            let pass = if variant == Fp8Variant::Hopper {
                ""
            } else {
                " + Vt pass"
            };
            kernel = format!("{} ({}){pass}", info.kernel, info.config.name());
        }
        Ok(())
    };
    let (samples_us, method) = time_launches(gpu, warmup, samples, false, timing, &mut launch)?;
    Ok(OurTiming {
        samples_us,
        kernel,
        method,
    })
}

struct SdpaSamples {
    name: String,
    backend: String,
    samples: Option<Vec<f64>>,
    error: Option<String>,
}

/// The SDPA script's spec: one entry per f16/bf16 row (SDPA's backends), and one per shape of
/// the FP8 rows (cuDNN's FP8 SDPA, named [`fp8_baseline_name`], timed by the method of that
/// shape's first FP8 row).
fn sdpa_spec(
    ours: &[(&BenchShape, Dtype, OurTiming)],
    fp8_rows: &[(&BenchShape, Fp8Variant, OurTiming)],
) -> Vec<serde_json::Value> {
    let entry = |s: &BenchShape, name: String, dtype: &str, method: &str| {
        serde_json::json!({
            "name": name, "b": s.b, "hq": s.hq, "hkv": s.hkv,
            "sq": s.sq, "sk": s.sk, "d": s.d, "causal": s.causal != Causal::None,
            "bottom_right": s.causal == Causal::BottomRight,
            "dtype": dtype, "method": method, "graph_launches": GRAPH_LAUNCHES,
        })
    };
    let mut spec: Vec<serde_json::Value> = ours
        .iter()
        .map(|(s, dt, t)| entry(s, format!("{}-{}", s.name(), dt), dt.as_str(), t.method))
        .collect();
    let mut fp8_shapes: Vec<&BenchShape> = Vec::new();
    for (s, _, t) in fp8_rows {
        if !fp8_shapes.contains(s) {
            fp8_shapes.push(s);
            spec.push(entry(s, fp8_baseline_name(s), "fp8", t.method));
        }
    }
    spec
}

/// The name cuDNN's FP8 SDPA runs under for a shape's FP8 rows (`<shape>-fp8`; its samples
/// go to `<shape>-fp8-cudnn_fp8.csv`).
fn fp8_baseline_name(shape: &BenchShape) -> String {
    format!("{}-fp8", shape.name())
}

/// The SDPA script's entries a row is compared with: its own (f16/bf16 rows), or for an FP8
/// row cuDNN's FP8 SDPA and SDPA's f16 backends on the same shape (the fastest is the
/// champion: cuDNN FP8 wherever it ran).
fn baseline_names(shape: &BenchShape, row_name: &str, fp8: bool) -> Vec<String> {
    if fp8 {
        vec![fp8_baseline_name(shape), format!("{}-f16", shape.name())]
    } else {
        vec![row_name.to_string()]
    }
}

fn run_sdpa(
    ours: &[(&BenchShape, Dtype, OurTiming)],
    fp8_rows: &[(&BenchShape, Fp8Variant, OurTiming)],
    args: &Args,
) -> anyhow::Result<Vec<SdpaSamples>> {
    let spec = sdpa_spec(ours, fp8_rows);
    let spec_path = args.out_dir.join("sdpa_spec.json");
    std::fs::write(&spec_path, serde_json::to_string_pretty(&spec)?)?;
    // The script goes in on stdin (`python3 -`), so the output directory holds results only.
    let mut child = Command::new("python3")
        .arg("-")
        .arg("--spec")
        .arg(&spec_path)
        .arg("--out-dir")
        .arg(&args.out_dir)
        .arg("--warmup")
        .arg(args.warmup.to_string())
        .arg("--warmup-ms")
        .arg(args.sustain_ms.to_string())
        .arg("--samples")
        .arg(args.samples.to_string())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .context("running python3 (the SDPA baseline needs python3 with torch)")?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().context("python3's stdin")?;
        stdin
            .write_all(SDPA_SCRIPT.as_bytes())
            .context("writing the SDPA script to python3")?;
    }
    let status = child.wait().context("waiting for python3")?;
    if !status.success() {
        bail!("the SDPA baseline script failed ({status})");
    }
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(args.out_dir.join("sdpa.json")).context("reading sdpa.json")?,
    )?;
    let mut out = Vec::new();
    for r in summary["results"]
        .as_array()
        .context("sdpa.json: no results")?
    {
        let name = r["name"].as_str().unwrap_or_default().to_string();
        let backend = r["backend"].as_str().unwrap_or_default().to_string();
        let samples = match r["csv"].as_str() {
            Some(p) => Some(read_csv(Path::new(p))?),
            None => None,
        };
        out.push(SdpaSamples {
            name,
            backend,
            samples,
            error: r["error"].as_str().map(str::to_string),
        });
    }
    Ok(out)
}

fn write_csv(path: &Path, us: &[f64]) -> anyhow::Result<()> {
    let s: String = us.iter().map(|x| format!("{x:.4}\n")).collect();
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

fn read_csv(path: &Path) -> anyhow::Result<Vec<f64>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    attn_stats::samples_from_csv(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn median(x: &[f64]) -> f64 {
    let mut v = x.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// Markdown table of a report: µs, TFLOP/s, champion, ratio with CI, g, decision.
pub fn render_table(r: &BenchFile) -> String {
    let mut s = format!(
        "device {}, {}, commit {}\n\n| shape | kernel | method | ours µs (median [CI of mean]) | TFLOP/s | champion | champion µs | ours/champion (CI) | ours/flash | g | decision | FP8 speedup vs our f16 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        r.device, r.date, r.commit
    );
    for row in &r.rows {
        let champ = row.champion.as_ref();
        s.push_str(&format!(
            "| {} | {} | {} | {:.2} [{:.2}, {:.2}] | {:.1} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.shape,
            row.kernel,
            row.method,
            row.ours.median,
            row.ours.ci_low,
            row.ours.ci_high,
            row.tflops,
            champ.map_or("-".into(), |c| c.backend.clone()),
            champ.map_or("-".into(), |c| format!("{:.2}", c.summary.median)),
            match (row.ratio, row.ratio_ci_low, row.ratio_ci_high) {
                (Some(r), Some(l), Some(h)) => format!("{r:.3} ({l:.3}–{h:.3})"),
                _ => "-".into(),
            },
            row.ratio_to_flash.map_or("-".into(), |x| format!("{x:.3}")),
            row.hedges_g.map_or("-".into(), |g| format!("{g:.2}")),
            row.decision.clone().unwrap_or_else(|| "-".into()),
            row.speedup_vs_ours_f16
                .map_or("-".into(), |x| format!("{x:.3}x")),
        ));
    }
    s
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The current git commit, or `ATTN_COMMIT` (set by the bundle), or "unknown".
pub fn git_commit() -> String {
    if let Ok(c) = std::env::var("ATTN_COMMIT") {
        return c;
    }
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(method: &'static str) -> OurTiming {
        OurTiming {
            samples_us: vec![1.0, 2.0],
            kernel: String::new(),
            method,
        }
    }

    #[test]
    fn fp8_rows_add_one_cudnn_fp8_entry_per_shape_and_compare_with_it() {
        let a = BenchShape::mha(1, 8, 512, 64, false);
        let b = BenchShape::mha(4, 16, 4096, 128, true);
        let ours = vec![
            (&a, Dtype::F16, timing("graph")),
            (&b, Dtype::Bf16, timing("events")),
        ];
        // Two variants on each shape: one cuDNN FP8 entry per shape, with the first row's method.
        let fp8 = vec![
            (&a, Fp8Variant::Hopper, timing("graph")),
            (&b, Fp8Variant::Hopper, timing("events")),
            (&a, Fp8Variant::Wgmma, timing("events")),
            (&b, Fp8Variant::Wgmma, timing("events")),
        ];
        let spec = sdpa_spec(&ours, &fp8);
        let names: Vec<&str> = spec.iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "1,8,512,64-f16",
                "4,16,4096,128-causal-bf16",
                "1,8,512,64-fp8",
                "4,16,4096,128-causal-fp8"
            ]
        );
        assert_eq!(spec[2]["dtype"], "fp8");
        assert_eq!(spec[2]["method"], "graph");
        assert_eq!(spec[3]["causal"], true);
        assert_eq!(spec[3]["hq"], 16);
        // An FP8 row looks for cuDNN FP8 and SDPA's f16 run of its shape; other rows their own.
        assert_eq!(
            baseline_names(&b, "4,16,4096,128-causal-fp8-hopper", true),
            ["4,16,4096,128-causal-fp8", "4,16,4096,128-causal-f16"]
        );
        assert_eq!(
            baseline_names(&b, "4,16,4096,128-causal-bf16", false),
            ["4,16,4096,128-causal-bf16"]
        );
    }

    #[test]
    fn shape_sets_match_the_design() {
        let seed = shape_set(ShapeSet::Seed);
        assert_eq!(seed.len(), 8);
        assert_eq!(seed[0].name(), "1,8,512,64");
        assert_eq!(seed[1].name(), "1,8,512,64-causal");
        let decode = shape_set(ShapeSet::Decode);
        assert_eq!(decode[0].name(), "1,32,1x8192,128");
        assert_eq!(decode[1].name(), "64,32:8,1x4096,128");
        // serve-bench's paged decode on a dense cache (the SDPA baseline of paged decode).
        assert_eq!(
            (decode[1].b, decode[1].hq, decode[1].hkv, decode[1].sk),
            (64, 32, 8, 4096)
        );
        assert_eq!(shape_set(ShapeSet::All).len(), 8 + 5 + 2);
        assert!(<ShapeSet as clap::ValueEnum>::from_str("tiny", false).is_err());
    }

    #[test]
    fn shape_parsing_rejects_junk() {
        assert_eq!(parse_shape("1,8,512,64", Causal::None).unwrap().sq, 512);
        assert!(parse_shape("1,8,512", Causal::None).is_err());
        assert!(parse_shape("1,8,x,64", Causal::None).is_err());
        let gqa = parse_shape("64,32:8,1x4096,256", Causal::None).unwrap();
        assert_eq!(gqa.name(), "64,32:8,1x4096,256");
        assert_eq!(
            (gqa.b, gqa.hq, gqa.hkv, gqa.sq, gqa.sk, gqa.d),
            (64, 32, 8, 1, 4096, 256)
        );
        assert!(parse_shape("1,32:,1x8,64", Causal::None).is_err());
        assert!(parse_shape("1,32,1x,64", Causal::None).is_err());
    }

    #[test]
    fn fp8_configs_by_name() {
        assert_eq!(
            fp8_config_by_name("64_128_4").unwrap(),
            attn_kernels::FP8_CONFIGS[2]
        );
        assert_eq!(
            fp8_config_by_name("128_128_8_s3").unwrap(),
            attn_kernels::FP8_CONFIGS[1]
        );
        // The D = 256 configs are known too.
        assert_eq!(
            fp8_config_by_name("64_64_4").unwrap(),
            attn_kernels::catalog::FP8_D256_TILES[0]
        );
        let err = fp8_config_by_name("64_32_4").unwrap_err().to_string();
        assert!(err.contains("128_128_8_s2"), "{err}");
    }

    #[test]
    fn date_is_civil() {
        let d = today();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"));
    }
}
