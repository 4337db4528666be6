//! `cargo xtask gate`: the release gate as one command. Stages, in order, each timed:
//! build (release + debug kernels) → ptxas budget + snapshots → correctness → sanitizers →
//! stability → performance (vs SDPA and vs the committed baseline) → report
//! (`target/gate/report.md`, `report.json`, `latency.svg`, `roofline.svg`).
//!
//! Exit 0 only if every stage passed. `--cpu-only` runs what needs no GPU (ptxas, CPU tests)
//! and lists the rest as not run; without it, a machine with no GPU is refused up front.
//! `--from-bundle DIR` runs on a GPU host with no Rust, from `cargo xtask bundle`'s output.
//! docs/GATE.md explains every stage and its pass rule. The stages are data
//! ([`stages::STAGES`]: name, GPU need, what runs), one module each under `gate/stages/`.

pub mod report;
pub mod stages;
pub mod svg;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use crate::ptxas;
use crate::sanitize::Source;
use report::{gate_passed, render_markdown, BenchFile, GateReport, StageResult, Status};
#[cfg(test)]
use stages::{cpu_tests::failed_tests, performance::compare_with_baseline};
use stages::{Ctx, Outcome, State};

/// Arguments of `cargo xtask gate`.
#[derive(clap::Args)]
pub struct Args {
    /// Run only the stages that need no GPU (ptxas budget + snapshots, CPU tests) and list the
    /// others as not run.
    #[arg(long)]
    cpu_only: bool,
    /// Run from a bundle made by `cargo xtask bundle` (GPU host without Rust).
    #[arg(long, value_name = "DIR")]
    from_bundle: Option<PathBuf>,
    /// Baseline samples directory (default docs/baseline, or DIR/baseline with --from-bundle).
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// After the performance stage, copy this run's samples into the baseline directory
    /// (review and commit them; the run itself still reports the missing/old baseline).
    #[arg(long)]
    write_baseline: bool,
    /// Skip the CPU-tests stage (for CI, which runs `cargo test --workspace` itself); the
    /// report marks it skipped.
    #[arg(long)]
    no_cpu_tests: bool,
    /// Output directory (default target/gate, or DIR/target/gate with --from-bundle).
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

/// Whether a sample file name (`<row>-<backend>.csv`) belongs to our kernel: bench writes
/// `<row>-ours.csv` for it and `<row>-sdpa_<backend>.csv` for PyTorch's backends.
pub fn is_ours(file_name: &str) -> bool {
    let stem = file_name.strip_suffix(".csv").unwrap_or(file_name);
    let backend = stem.rsplit('-').next().unwrap_or(stem);
    !backend.starts_with("sdpa_")
}

/// Why there is no usable GPU, from the two probes (`/dev/nvidia0`, `nvidia-smi -L`);
/// `Ok` carries nvidia-smi's GPU list.
pub fn judge_gpu_probe(
    dev_node: bool,
    smi: Result<(bool, String), String>,
) -> Result<String, String> {
    let mut why = Vec::new();
    if !dev_node {
        why.push("/dev/nvidia0 does not exist".to_string());
    }
    let list = match smi {
        Ok((true, out)) if out.lines().any(|l| l.starts_with("GPU ")) => {
            Some(out.trim().to_string())
        }
        Ok((true, out)) => {
            why.push(format!("`nvidia-smi -L` lists no GPU: {}", out.trim()));
            None
        }
        Ok((false, out)) => {
            why.push(format!("`nvidia-smi -L` failed: {}", out.trim()));
            None
        }
        Err(e) => {
            why.push(format!("`nvidia-smi -L` could not run: {e}"));
            None
        }
    };
    match list {
        Some(list) if why.is_empty() => Ok(list),
        _ => Err(why.join("; ")),
    }
}

/// Probes the machine for a GPU.
pub fn probe_gpu() -> Result<String, String> {
    let dev = Path::new("/dev/nvidia0").exists();
    let smi = Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .map(|o| {
            let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&o.stderr));
            (o.status.success(), text)
        })
        .map_err(|e| e.to_string());
    judge_gpu_probe(dev, smi)
}

/// Paths the stages read, by mode.
pub(crate) struct Layout {
    source: Source,
    out_dir: PathBuf,
    budget: PathBuf,
    snapshots: PathBuf,
    baseline: PathBuf,
}

impl Layout {
    fn new(args: &Args) -> Self {
        match &args.from_bundle {
            Some(dir) => Layout {
                source: Source::Bundle(dir.clone()),
                out_dir: args
                    .out_dir
                    .clone()
                    .unwrap_or_else(|| dir.join("target/gate")),
                budget: dir.join("ptxas-budget.json"),
                snapshots: dir.join("ptxas-snapshots"),
                baseline: args
                    .baseline
                    .clone()
                    .unwrap_or_else(|| dir.join("baseline")),
            },
            None => {
                let root = ptxas::workspace_root();
                Layout {
                    source: Source::Cargo(root.clone()),
                    out_dir: args
                        .out_dir
                        .clone()
                        .unwrap_or_else(|| root.join("target/gate")),
                    budget: ptxas::default_budget(&root),
                    snapshots: ptxas::snapshot::workspace_dir(&root),
                    baseline: args
                        .baseline
                        .clone()
                        .unwrap_or_else(|| root.join("docs/baseline")),
                }
            }
        }
    }

    fn log(&self, name: &str) -> PathBuf {
        self.out_dir.join("logs").join(name)
    }

    /// A path relative to the output dir when it is inside it.
    fn show(&self, path: &Path) -> String {
        path.strip_prefix(&self.out_dir)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// The latency panels: sample files grouped by shape key (the part before the last `-`).
fn latency_panels(samples: &Path) -> Vec<svg::LatencyPanel> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(samples)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "csv"));
    files.sort();
    let mut panels: Vec<svg::LatencyPanel> = Vec::new();
    for f in files {
        let Some(stem) = f.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            continue;
        };
        let (shape, backend) = stem.rsplit_once('-').unwrap_or((stem.as_str(), ""));
        let values = std::fs::read_to_string(&f)
            .ok()
            .and_then(|t| attn_stats::samples_from_csv(&t).ok())
            .unwrap_or_default();
        let series = (backend.to_string(), values);
        match panels.iter_mut().find(|p| p.title == shape) {
            Some(p) => {
                // Ours first, so it gets the first colour.
                if is_ours(&format!("{stem}.csv")) {
                    p.series.insert(0, series);
                } else {
                    p.series.push(series);
                }
            }
            None => panels.push(svg::LatencyPanel {
                title: shape.to_string(),
                series: vec![series],
            }),
        }
    }
    panels
}

/// Parses a bench row name `B,H,S,D[-causal]-dtype` (`S` may be `SqxSk`) into
/// `[B, H, Sq, Sk, D]`.
pub fn parse_row_shape(name: &str) -> Option<[usize; 5]> {
    let dims = name.split('-').next()?;
    let parts: Vec<&str> = dims.split(',').collect();
    let [b, h, s, d] = parts.as_slice() else {
        return None;
    };
    let (sq, sk) = match s.split_once('x') {
        Some((q, k)) => (q.parse().ok()?, k.parse().ok()?),
        None => (s.parse().ok()?, s.parse().ok()?),
    };
    Some([b.parse().ok()?, h.parse().ok()?, sq, sk, d.parse().ok()?])
}

/// Roofline points of the bench rows (fp16/bf16: 2-byte elements; MHA assumed for K/V
/// traffic, as in every shape set).
fn roofline_points(bench: &BenchFile) -> Vec<svg::RooflinePoint> {
    bench
        .rows
        .iter()
        .filter_map(|r| {
            let [b, h, sq, sk, d] = parse_row_shape(&r.shape)?.map(|x| x as f64);
            Some(svg::RooflinePoint {
                label: r.shape.clone(),
                intensity: svg::intensity(b, h, sq, sk, d, r.causal, 2.0),
                tflops: r.tflops,
            })
        })
        .collect()
}

fn git_commit(root: &Path) -> Option<String> {
    let out = Command::new("git")
        .current_dir(root)
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `cargo xtask gate`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let layout = Layout::new(&args);
    let root = match &layout.source {
        Source::Cargo(r) | Source::Bundle(r) => r.clone(),
    };
    let bundle = matches!(layout.source, Source::Bundle(_));
    let gpu = if args.cpu_only {
        None
    } else {
        match probe_gpu() {
            Ok(list) => Some(list),
            Err(why) => bail!(
                "no usable GPU ({why}); the full gate needs one — run `cargo xtask gate --cpu-only` \
                 for the stages that do not"
            ),
        }
    };
    std::fs::create_dir_all(layout.out_dir.join("logs"))
        .with_context(|| format!("creating {}", layout.out_dir.display()))?;

    let plan: Vec<&stages::StageDef> = stages::plan(args.cpu_only).collect();
    let bar = ProgressBar::new(plan.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));

    let started = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let ctx = Ctx {
        layout: &layout,
        root: &root,
        bundle,
        cpu_only: args.cpu_only,
        no_cpu_tests: args.no_cpu_tests,
        write_baseline: args.write_baseline,
    };
    let mut state = State::default();
    let mut stages = Vec::new();
    for def in plan {
        bar.set_message(def.name);
        let clock = Instant::now();
        let outcome = if args.cpu_only && def.needs_gpu {
            Outcome::not_run("needs a GPU (--cpu-only)")
        } else {
            (def.run)(&ctx, &mut state)
        };
        let seconds = clock.elapsed().as_secs_f64();
        // suspend() prints even when the bar is hidden (no terminal, as in CI).
        bar.suspend(|| {
            println!(
                "{:<32} {:<8} {:>7.1}s  {}",
                def.name,
                match &outcome.status {
                    Status::Passed => "passed",
                    Status::Failed => "FAILED",
                    Status::Skipped(_) => "skipped",
                    Status::NotRun(_) => "not run",
                },
                seconds,
                outcome.summary
            )
        });
        stages.push(StageResult {
            stage: def.stage,
            status: outcome.status,
            seconds,
            summary: outcome.summary,
            details: outcome.details,
            logs: outcome.logs,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();

    let performance = state.performance;
    let passed = gate_passed(&stages, args.cpu_only);
    let commit = match &performance {
        Some(p) if bundle => Some(p.bench.commit.clone()),
        _ => git_commit(&root),
    };
    let report = GateReport {
        started,
        mode: if bundle {
            format!("bundle {}", root.display())
        } else {
            "cargo".into()
        },
        cpu_only: args.cpu_only,
        commit,
        gpu,
        stages,
        performance,
        passed,
    };
    let write = |name: &str, text: &str| -> anyhow::Result<()> {
        let path = layout.out_dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("report.md", &render_markdown(&report))?;
    write("report.json", &serde_json::to_string_pretty(&report)?)?;
    if let Some(p) = &report.performance {
        write(
            "latency.svg",
            &svg::latency_svg(&latency_panels(&layout.out_dir.join("bench/samples"))),
        )?;
        write(
            "roofline.svg",
            &svg::roofline_svg(&roofline_points(&p.bench)),
        )?;
    }
    println!("report: {}", layout.out_dir.join("report.md").display());
    if !report.passed {
        let failed: Vec<&str> = report
            .stages
            .iter()
            .filter(|s| {
                s.status == Status::Failed
                    || (matches!(s.status, Status::NotRun(_))
                        && !(args.cpu_only && s.stage.needs_gpu()))
            })
            .map(|s| s.stage.title())
            .collect();
        bail!("the gate did not pass: {}", failed.join(", "));
    }
    if args.cpu_only {
        let not_run: Vec<&str> = report
            .stages
            .iter()
            .filter(|s| matches!(s.status, Status::NotRun(_)))
            .map(|s| s.stage.title())
            .collect();
        println!(
            "gate --cpu-only passed; not run (need a GPU): {}",
            not_run.join(", ")
        );
    } else {
        println!("gate passed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn baseline_regressions_need_practical_significance() {
        let dir = std::env::temp_dir().join(format!("gate-baseline-{}", std::process::id()));
        let (base, cand) = (dir.join("base"), dir.join("cand"));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&cand).unwrap();
        let samples = |mean: f64| -> String {
            (0..200)
                .map(|i| format!("{:.4}\n", mean + 0.01 * ((i % 7) as f64 - 3.0)))
                .collect()
        };
        std::fs::write(base.join("s-ours.csv"), samples(10.0)).unwrap();
        // 0.5 % slower: statistically clear, practically noise → no problem.
        std::fs::write(cand.join("s-ours.csv"), samples(10.05)).unwrap();
        let (rows, problems) = compare_with_baseline(&base, &cand).unwrap();
        assert_eq!(rows[0].decision, "regress");
        assert!(problems.is_empty(), "{problems:?}");
        // 10 % slower: fails.
        std::fs::write(cand.join("s-ours.csv"), samples(11.0)).unwrap();
        let (_, problems) = compare_with_baseline(&base, &cand).unwrap();
        assert_eq!(problems.len(), 1, "{problems:?}");
    }

    use super::*;

    #[test]
    fn sample_files_are_ours_unless_an_sdpa_backend() {
        assert!(is_ours("1,8,512,64-causal-f16-ours.csv"));
        assert!(is_ours("1,8,512,64-f16-attn_fwd_f16_d64.csv"));
        assert!(!is_ours("1,8,512,64-causal-f16-sdpa_cudnn.csv"));
        assert!(!is_ours("2,8,2048,128-bf16-sdpa_flash.csv"));
        assert!(!is_ours("sdpa_efficient.csv"));
    }

    #[test]
    fn gpu_probe_needs_both_the_device_node_and_a_listed_gpu() {
        let list = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)\n";
        assert_eq!(
            judge_gpu_probe(true, Ok((true, list.into()))),
            Ok(list.trim().to_string())
        );
        let why =
            judge_gpu_probe(false, Err("No such file or directory".into())).expect_err("no gpu");
        assert!(
            why.contains("/dev/nvidia0 does not exist") && why.contains("could not run"),
            "{why}"
        );
        let why = judge_gpu_probe(true, Ok((false, "NVIDIA-SMI has failed".into())))
            .expect_err("smi fails");
        assert!(
            why.contains("`nvidia-smi -L` failed: NVIDIA-SMI has failed"),
            "{why}"
        );
        assert!(judge_gpu_probe(true, Ok((true, "No devices found.".into()))).is_err());
        assert!(judge_gpu_probe(false, Ok((true, list.into()))).is_err());
    }

    #[test]
    fn failed_test_names_are_listed() {
        let log = "test a ... ok\ntest correctness_tails ... FAILED\ntest b ... ignored\n";
        assert_eq!(
            failed_tests(log),
            vec!["failed: correctness_tails".to_string()]
        );
    }

    #[test]
    fn baseline_comparison_flags_regressions_and_a_missing_baseline() {
        let dir = std::env::temp_dir().join(format!("xtask-gate-{}", std::process::id()));
        let (base, run) = (dir.join("baseline"), dir.join("samples"));
        std::fs::create_dir_all(&base).expect("dir");
        std::fs::create_dir_all(&run).expect("dir");
        let (_, problems) = compare_with_baseline(&base, &run).expect("empty");
        assert!(problems[0].contains("no baseline samples"), "{problems:?}");

        let sample = |mean: f64| -> String {
            (0..60)
                .map(|i| format!("{}\n", mean + 0.05 * f64::from((i * 7) % 11)))
                .collect()
        };
        std::fs::write(base.join("2,8,2048,64-f16-ours.csv"), sample(40.0)).expect("write");
        std::fs::write(run.join("2,8,2048,64-f16-ours.csv"), sample(44.0)).expect("write");
        std::fs::write(base.join("2,8,2048,64-f16-sdpa_cudnn.csv"), sample(40.0)).expect("write");
        std::fs::write(run.join("2,8,2048,64-f16-sdpa_cudnn.csv"), sample(46.0)).expect("write");
        let (rows, problems) = compare_with_baseline(&base, &run).expect("compare");
        assert_eq!(rows.len(), 2);
        let ours = rows.iter().find(|r| r.ours).expect("ours");
        assert_eq!(ours.decision, "regress");
        assert!(ours.ratio > 1.09 && ours.ratio < 1.11, "{}", ours.ratio);
        // Only our kernel's regression gates; SDPA's is machine drift.
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("2,8,2048,64-f16-ours.csv: regression"));

        std::fs::remove_file(run.join("2,8,2048,64-f16-ours.csv")).expect("rm");
        let (_, problems) = compare_with_baseline(&base, &run).expect("compare");
        assert!(
            problems.iter().any(|p| p.contains("reading")),
            "{problems:?}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn roofline_points_come_from_bench_rows() {
        let text = r#"{"device":"H100","date":"2026-11-21","commit":"abc","torch":"2.11","rows":[
            {"shape":"2,8,2048,64-f16","causal":false,"dtype":"f16","kernel":"k","method":"events",
             "ours":{"n":200,"mean":45.0,"median":44.9,"std":0.3,"ci_low":44.9,"ci_high":45.1},
             "tflops":381.0,
             "champion":{"backend":"sdpa_cudnn","n":200,"mean":45.5,"median":45.5,"std":0.2,"ci_low":45.4,"ci_high":45.6,"min":45.0,"max":46.0,"mad":0.1,"outliers_dropped":0},
             "ratio":0.99,"ratio_ci_low":0.98,"ratio_ci_high":1.0,"hedges_g":null,"decision":"inconclusive",
             "ratio_to_flash":0.7,"sdpa":[]},
            {"shape":"1,32,1x8192,128-causal-f16","causal":true,"dtype":"f16","kernel":"k","method":"graph",
             "ours":{"n":200,"mean":60.0,"median":60.0,"std":0.3,"ci_low":59.9,"ci_high":60.1},
             "tflops":4.5,"champion":null,"ratio":null,"ratio_ci_low":null,"ratio_ci_high":null,
             "hedges_g":null,"decision":null}]}"#;
        let bench: BenchFile = serde_json::from_str(text).expect("bench.json contract");
        let points = roofline_points(&bench);
        assert_eq!(points.len(), 2);
        assert!((points[0].intensity - 1024.0).abs() < 1e-9);
        assert_eq!(points[0].label, "2,8,2048,64-f16");
        assert_eq!(
            parse_row_shape("1,32,1x8192,128-causal-f16"),
            Some([1, 32, 1, 8192, 128])
        );
        assert_eq!(parse_row_shape("1,32,1y8192,128-f16"), None);
        assert_eq!(parse_row_shape("1,32,128-f16"), None);
        // Decode: 1 query row against 8192 keys is memory bound (about 1 FLOP per byte).
        assert!(points[1].intensity < 2.0, "{}", points[1].intensity);
    }
}
