//! `cargo xtask sweep`: every compiled config × shape class, a correctness gate first, then
//! timing (the bench protocol); the top 3 per (dtype, head dim, shape class) with their CIs
//! become `crates/attn-kernels/elite.tsv`, which the default chooser reads (the seeds'
//! "EvoEngineer" elite selection, without the evolution).

use std::path::PathBuf;

use anyhow::{bail, Context};
use attn_kernels::{configs_for, elite, Dtype, ForwardOptions, KernelConfig};
use attn_ref::{
    reference::{self, emulate},
    AttnShape, Causal, Problem,
};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;

use crate::bench::{time_ours, BenchShape};
use crate::flags::DtypeArg;

/// Arguments of `cargo xtask sweep`.
#[derive(clap::Args)]
pub struct Args {
    /// f16 or bf16 (the elite table is keyed by dtype).
    #[arg(long, value_enum, default_value_t = DtypeArg::F16)]
    dtype: DtypeArg,
    /// Timed samples per (config, shape).
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// Warm-up launches per (config, shape).
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Where to write the elite table (default: print only). The committed table is
    /// crates/attn-kernels/elite.tsv.
    #[arg(long)]
    write_elite: Option<PathBuf>,
    /// Head-dim buckets to sweep (comma separated; each must be one of the catalog's
    /// buckets: 32, 64, 96, 128, 160, 192, 224, 256).
    #[arg(long, value_delimiter = ',', default_value = "64,128")]
    head_dims: Vec<usize>,
}

/// Representative shapes, one per (head dim, shape class).
fn class_shapes(head_dims: &[usize]) -> Vec<BenchShape> {
    let mut v = Vec::new();
    for &d in head_dims {
        for causal in [false, true] {
            v.push(BenchShape::mha(1, 8, 512, d, causal));
            v.push(BenchShape::mha(2, 8, 2048, d, causal));
            v.push(BenchShape::mha(4, 16, 4096, d, causal));
        }
    }
    if head_dims.contains(&128) {
        v.push(BenchShape::mha(1, 16, 16384, 128, false));
    }
    v
}

/// The correctness gate: the config on a tail shape, both causal alignments, against the f64
/// reference with the tolerance rule.
fn gate(dtype: Dtype, d: usize, cfg: KernelConfig) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for causal in [Causal::None, Causal::BottomRight] {
        let p = Problem::new(AttnShape::new(1, 3, 3, 333, 301, d)?, causal);
        let s = p.shape();
        let mut randn = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| dtype.round(rng.sample(StandardNormal)))
                .collect()
        };
        let (q, k, v) = (randn(s.q_elems()), randn(s.kv_elems()), randn(s.kv_elems()));
        let backend = attn_kernels::GpuBackend::new(
            crate::forward::gpu()?,
            dtype,
            ForwardOptions {
                config: Some(cfg),
                ..Default::default()
            },
        );
        let got = attn_ref::Attention::forward(&backend, &p, &q, &k, &v)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let want = reference::forward(&p, &q, &k, &v)?;
        let emu = emulate::forward_emulated(&p, &q, &k, &v, dtype)?;
        // The same rule (bound and sanity caps) the oracle and the gate apply.
        let opts = attn_oracle::CompareOptions::default();
        let out = attn_oracle::compare(&got.o, &want.o, s, &opts)?;
        let emu32: Vec<f32> = emu.o.iter().map(|&x| x as f32).collect();
        let emu = attn_oracle::compare(&emu32, &want.o, s, &opts)?;
        let verdict = attn_oracle::ToleranceRule::for_storage(dtype.into()).check(&out, &emu, None);
        if !verdict.pass {
            bail!(
                "config {} D={d} {causal}: {}",
                cfg.name(),
                verdict.reasons.join("; ")
            );
        }
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dtype = Dtype::from(args.dtype);
    let gpu = crate::forward::gpu()?;
    // SAFETY: one stream only (see bench).
    unsafe { gpu.context().disable_event_tracking() };
    let (ma, mi) = gpu.compute_capability();
    let arch = format!("sm_{ma}{mi}");
    let mut rows = Vec::new();
    let mut passed: Vec<(usize, KernelConfig)> = Vec::new();
    for &d in &args.head_dims {
        if !attn_kernels::FWD_HEAD_DIM_BUCKETS.contains(&d) {
            anyhow::bail!(
                "--head-dims: {d} is not a kernel bucket (one of {:?}); the elite table is keyed by bucket",
                attn_kernels::FWD_HEAD_DIM_BUCKETS
            );
        }
        for cfg in configs_for(d) {
            if cfg.smem_bytes(d) > gpu.max_smem_per_block() {
                continue;
            }
            match gate(dtype, d, cfg) {
                Ok(()) => passed.push((d, cfg)),
                Err(e) => eprintln!("gate failed, not timed: {e:#}"),
            }
        }
    }
    for shape in class_shapes(&args.head_dims) {
        let p = shape.problem()?;
        let s = p.shape();
        let class = elite::shape_class(s.q_len(), s.batch() * s.q_heads(), p.causal());
        let mut timed = Vec::new();
        for &(d, cfg) in passed.iter().filter(|(d, _)| *d == shape.d) {
            let t = time_ours(
                &gpu,
                &shape,
                dtype,
                &ForwardOptions {
                    config: Some(cfg),
                    ..Default::default()
                },
                attn_kernels::Layout::Bhsd,
                crate::bench::Warmup::calls(args.warmup),
                args.samples,
                false,
                crate::flags::TimingArg::Auto,
            )
            .with_context(|| format!("timing {} on {}", cfg.name(), shape.name()))?;
            let sum =
                attn_stats::Summary::new(&t.samples_us).map_err(|e| anyhow::anyhow!("{e}"))?;
            let ci = attn_stats::mean_ci(&t.samples_us, &attn_stats::BootstrapConfig::default())
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            eprintln!(
                "{} {} {}: median {:.2} µs",
                shape.name(),
                d,
                cfg.name(),
                sum.median
            );
            timed.push((
                cfg,
                sum.median,
                ci.low.min(sum.median),
                ci.high.max(sum.median),
            ));
        }
        timed.sort_by(|a, b| a.1.total_cmp(&b.1));
        for (rank, (cfg, med, lo, hi)) in timed.iter().take(3).enumerate() {
            rows.push(format!(
                "{arch}\t{dtype}\t{}\t{class}\t{}\t{}\t{med:.3}\t{lo:.3}\t{hi:.3}",
                shape.d,
                rank + 1,
                cfg.name()
            ));
        }
    }
    let table = format!(
        "# arch\tdtype\thead_dim\tclass\trank\tconfig\tmedian_us\tci_low_us\tci_high_us\n# Written by `cargo xtask sweep --write-elite` ({}, {}); CI = bootstrap CI of the mean, widened to include the median.\n{}\n",
        crate::bench::today(),
        crate::bench::git_commit(),
        rows.join("\n")
    );
    elite::parse(&table)
        .map_err(|e| anyhow::anyhow!("internal: the table written is malformed: {e}"))?;
    println!("{table}");
    if let Some(path) = args.write_elite {
        std::fs::write(&path, &table).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
