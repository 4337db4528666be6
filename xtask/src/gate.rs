//! `cargo xtask gate`: the release gate as one command. Stages, in order, each timed:
//! build (release + debug kernels) → ptxas budget + snapshots → correctness → sanitizers →
//! stability → performance (vs SDPA and vs the committed baseline) → report
//! (`target/gate/report.md`, `report.json`, `latency.svg`, `roofline.svg`).
//!
//! Exit 0 only if every stage passed. `--cpu-only` runs what needs no GPU (ptxas, CPU tests)
//! and lists the rest as not run; without it, a machine with no GPU is refused up front.
//! `--from-bundle DIR` runs on a GPU host with no Rust, from `cargo xtask bundle`'s output.
//! docs/GATE.md explains every stage and its pass rule.

pub mod report;
pub mod svg;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use crate::ptxas;
use crate::sanitize::{self, Source, Tool};
use report::{
    gate_passed, render_markdown, BaselineComparison, BenchFile, GateReport, Performance, Stage,
    StageResult, Status,
};

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
struct Layout {
    source: Source,
    out_dir: PathBuf,
    kernels_dir: PathBuf,
    ptxas_work_dir: PathBuf,
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
                kernels_dir: dir.join("kernels"),
                ptxas_work_dir: dir.join("target/ptxas"),
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
                    kernels_dir: root.join("crates/attn-kernels/kernels"),
                    // Shares `cargo xtask ptxas`'s cache.
                    ptxas_work_dir: root.join("target/ptxas"),
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

/// A stage's result before timing is attached.
struct Outcome {
    status: Status,
    summary: String,
    details: Vec<String>,
    logs: Vec<String>,
}

impl Outcome {
    fn new(passed: bool, summary: impl Into<String>) -> Self {
        Outcome {
            status: if passed {
                Status::Passed
            } else {
                Status::Failed
            },
            summary: summary.into(),
            details: vec![],
            logs: vec![],
        }
    }
    fn failed(e: &anyhow::Error) -> Self {
        let mut o = Outcome::new(false, first_line(&format!("{e:#}")));
        o.details.push(format!("{e:#}"));
        o
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_string()
}

/// Builds the release and debug kernels and the GPU test binary; returns the binary.
fn stage_build(layout: &Layout, root: &Path, test_binary: &mut Option<PathBuf>) -> Outcome {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let builds: [(&str, &[&str]); 2] = [
        (
            "build-release.log",
            &["build", "-p", "attn-kernels", "--release"],
        ),
        (
            "build-debug-kernels.log",
            &[
                "build",
                "-p",
                "attn-kernels",
                "--release",
                "--features",
                "debug-kernels",
            ],
        ),
    ];
    let mut outcome = Outcome::new(true, "release and debug kernels built");
    for (log_name, args) in builds {
        let log = layout.log(log_name);
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(root).args(args);
        outcome.logs.push(layout.show(&log));
        match sanitize::run_logged(cmd, &log) {
            Ok(Some(0)) => {}
            Ok(code) => {
                outcome.status = Status::Failed;
                outcome.summary = format!("`cargo {}` failed", args.join(" "));
                outcome.details.push(format!(
                    "`cargo {}` exited with {code:?}; see the log",
                    args.join(" ")
                ));
                return outcome;
            }
            Err(e) => return Outcome::failed(&e),
        }
    }
    match sanitize::gpu_test_binary(&layout.source) {
        Ok(bin) => {
            outcome
                .details
                .push(format!("GPU test binary: {}", bin.display()));
            *test_binary = Some(bin);
        }
        Err(e) => return Outcome::failed(&e),
    }
    outcome
}

/// ptxas report of the release kernels, held to the budget and the committed snapshots.
fn stage_ptxas(layout: &Layout) -> Outcome {
    let run = || -> anyhow::Result<Outcome> {
        let root = match &layout.source {
            Source::Cargo(r) | Source::Bundle(r) => r.clone(),
        };
        let nvcc_path = ptxas::require_nvcc(&root)?;
        let archs = ptxas::archs_from(None)?;
        let paths = ptxas::Paths {
            kernels_dir: layout.kernels_dir.clone(),
            work_dir: layout.ptxas_work_dir.clone(),
        };
        let collected = ptxas::collect(&nvcc_path, &paths, &archs, ptxas::Mode::Release, true)?;
        let table_path = layout.out_dir.join("ptxas.txt");
        std::fs::write(&table_path, ptxas::render_table(&collected))
            .with_context(|| format!("writing {}", table_path.display()))?;
        let mut outcome = Outcome::new(
            true,
            format!(
                "{} kernel reports over sm_{}",
                collected.kernels.len(),
                archs.join(", sm_")
            ),
        );
        outcome.logs.push(layout.show(&table_path));
        if let Err(e) = ptxas::check_budget(&collected, &layout.budget) {
            outcome.status = Status::Failed;
            outcome.summary = "over budget".into();
            outcome.details.push(format!("{e:#}"));
        }
        if let Err(e) = ptxas::snapshot::compare_committed(&collected, &layout.snapshots) {
            if outcome.status == Status::Passed {
                outcome.summary = "snapshots differ".into();
            }
            outcome.status = Status::Failed;
            outcome.details.push(format!("{e:#}"));
        }
        Ok(outcome)
    };
    run().unwrap_or_else(|e| Outcome::failed(&e))
}

/// `cargo test --workspace` (cargo mode only).
fn stage_cpu_tests(layout: &Layout, root: &Path) -> Outcome {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let log = layout.log("cpu-tests.log");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root).args(["test", "--workspace"]);
    match sanitize::run_logged(cmd, &log) {
        Err(e) => Outcome::failed(&e),
        Ok(code) => {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let counts = sanitize::parse_test_counts(&text);
            let passed = code == Some(0) && counts.is_some_and(|c| c.failed == 0 && c.passed > 0);
            let summary = match counts {
                Some(c) => format!(
                    "{} passed, {} failed, {} ignored",
                    c.passed, c.failed, c.ignored
                ),
                None => "no test result line".into(),
            };
            let mut o = Outcome::new(passed, summary);
            if code != Some(0) {
                o.details
                    .push(format!("`cargo test --workspace` exited with {code:?}"));
            }
            o.details.extend(failed_tests(&text));
            o.logs.push(layout.show(&log));
            o
        }
    }
}

/// Names of failed tests in a libtest log (`test NAME ... FAILED`).
pub fn failed_tests(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .map(|name| format!("failed: {name}"))
        .collect()
}

/// Runs the GPU test binary with a filter and skips; passes when tests ran and none failed.
fn stage_gpu_tests(
    layout: &Layout,
    binary: &Path,
    log_name: &str,
    filter: Option<&str>,
    skips: &[&str],
) -> Outcome {
    let log = layout.log(log_name);
    let mut cmd = Command::new(binary);
    cmd.args(["--include-ignored", "--test-threads=1"]);
    if let Some(f) = filter {
        cmd.arg(f);
    }
    for s in skips {
        cmd.args(["--skip", s]);
    }
    match sanitize::run_logged(cmd, &log) {
        Err(e) => Outcome::failed(&e),
        Ok(code) => {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let counts = sanitize::parse_test_counts(&text);
            let ran = counts.is_some_and(|c| c.passed + c.failed > 0);
            let passed = code == Some(0) && ran && counts.is_some_and(|c| c.failed == 0);
            let summary = match counts {
                Some(c) if ran => format!("{} passed, {} failed", c.passed, c.failed),
                Some(_) => format!("no test matched {}", filter.unwrap_or("(all)")),
                None => format!("no test result line (exit {code:?})"),
            };
            let mut o = Outcome::new(passed, summary);
            o.details.extend(failed_tests(&text));
            o.logs.push(layout.show(&log));
            o
        }
    }
}

fn stage_sanitizers(layout: &Layout, binary: &Path) -> Outcome {
    let run = || -> anyhow::Result<Outcome> {
        let tool = sanitize::find_compute_sanitizer()?;
        let results = sanitize::run_tools(
            &tool,
            binary,
            &Tool::ALL,
            "sanitize_",
            &layout.out_dir.join("sanitize"),
        )?;
        let ok = results.iter().all(|r| r.failures.is_empty());
        let mut o = Outcome::new(
            ok,
            results
                .iter()
                .map(|r| {
                    let errors: u64 = r.summary.error_summaries.iter().sum();
                    format!(
                        "{} {}",
                        r.tool.name(),
                        if r.failures.is_empty() {
                            format!("{errors} errors")
                        } else {
                            "FAILED".into()
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        );
        for r in &results {
            if !r.failures.is_empty() {
                o.details
                    .push(format!("{}: {}", r.tool.name(), r.failures.join("; ")));
            }
            if let Some((errors, warnings)) = r.summary.racecheck {
                o.details.push(format!(
                    "racecheck hazards: {errors} errors, {warnings} warnings"
                ));
            }
            o.logs.push(layout.show(&r.log));
        }
        Ok(o)
    };
    run().unwrap_or_else(|e| Outcome::failed(&e))
}

/// Smallest slowdown against the baseline that fails the gate: the lower end of the ratio's
/// CI must exceed 1 + this. Graph-timed samples are so tight that a 0.2 % drift between two
/// runs on one H200 (2026-11-21, 10.05 → 10.07 µs) was a statistically clear `regress` with
/// Hedges' g ≈ 30; a release gate needs practical significance on top of statistical.
pub const REGRESSION_TOLERANCE: f64 = 0.03;

/// Compares every baseline sample file with this run's file of the same name.
fn compare_with_baseline(
    baseline_dir: &Path,
    samples_dir: &Path,
) -> anyhow::Result<(Vec<BaselineComparison>, Vec<String>)> {
    let mut problems = Vec::new();
    let mut names: Vec<String> = match std::fs::read_dir(baseline_dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".csv"))
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    if !names.iter().any(|n| is_ours(n)) {
        problems.push(format!(
            "no baseline samples of our kernel in {}: nothing to detect a regression against — \
             re-run with --write-baseline, review the samples and commit them",
            baseline_dir.display()
        ));
    }
    let options = attn_stats::CompareOptions::default();
    let mut rows = Vec::new();
    for name in names {
        let read = |dir: &Path| -> anyhow::Result<Vec<f64>> {
            let path = dir.join(&name);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            attn_stats::samples_from_csv(&text)
                .with_context(|| format!("samples in {}", path.display()))
        };
        let (base, cand) = match (read(baseline_dir), read(samples_dir)) {
            (Ok(b), Ok(c)) => (b, c),
            (Err(e), _) | (_, Err(e)) => {
                if is_ours(&name) {
                    problems.push(format!("{e:#}"));
                }
                continue;
            }
        };
        let c = attn_stats::compare(&base, &cand, &options)
            .with_context(|| format!("comparing {name}"))?;
        let decision = c.decision.to_string();
        if is_ours(&name) && decision == "regress" && c.ratio_ci_low > 1.0 + REGRESSION_TOLERANCE {
            problems.push(format!(
                "{name}: regression vs baseline, mean {:.2} → {:.2} µs (ratio {:.3} [{:.3}, {:.3}])",
                c.baseline.mean, c.candidate.mean, c.ratio, c.ratio_ci_low, c.ratio_ci_high
            ));
        }
        rows.push(BaselineComparison {
            ours: is_ours(&name),
            file: name,
            baseline_mean: c.baseline.mean,
            candidate_mean: c.candidate.mean,
            ratio: c.ratio,
            ratio_ci_low: c.ratio_ci_low,
            ratio_ci_high: c.ratio_ci_high,
            hedges_g: c.hedges_g,
            decision,
        });
    }
    Ok((rows, problems))
}

/// Benchmark on the seed shapes, then the baseline comparison.
fn stage_performance(
    layout: &Layout,
    write_baseline: bool,
    perf: &mut Option<Performance>,
) -> Outcome {
    let mut run = || -> anyhow::Result<Outcome> {
        let bench_dir = layout.out_dir.join("bench");
        let log = layout.log("bench.log");
        let exe = std::env::current_exe().context("locating the xtask binary")?;
        let mut cmd = Command::new(exe);
        cmd.args(["bench", "--shapes", "seed", "--out-dir"])
            .arg(&bench_dir);
        let code = sanitize::run_logged(cmd, &log)?;
        if code != Some(0) {
            let mut o = Outcome::new(false, format!("bench exited with {code:?}"));
            o.logs.push(layout.show(&log));
            return Ok(o);
        }
        let json_path = bench_dir.join("bench.json");
        let bench = BenchFile::read(&json_path)?;
        let samples = bench_dir.join("samples");
        let (baseline, problems) = compare_with_baseline(&layout.baseline, &samples)?;
        let decided = |d: &str| {
            bench
                .rows
                .iter()
                .filter(|r| r.decision.as_deref() == Some(d))
                .count()
        };
        let mut problems = problems;
        for r in bench.rows.iter().filter(|r| r.champion.is_none()) {
            problems.push(format!(
                "{}: no SDPA backend ran, so there is no champion to compare with (see bench.log)",
                r.shape
            ));
        }
        let mut o = Outcome::new(
            problems.is_empty() && !bench.rows.is_empty(),
            format!(
                "{} rows; vs SDPA champion: {} promote, {} inconclusive, {} slower (informative); vs baseline: {} compared, {} problem(s)",
                bench.rows.len(),
                decided("promote"),
                decided("inconclusive"),
                decided("regress"),
                baseline.len(),
                problems.len()
            ),
        );
        if bench.rows.is_empty() {
            o.details.push("bench.json has no rows".into());
        }
        o.details.extend(problems);
        o.logs.push(layout.show(&log));
        o.logs.push(layout.show(&json_path));
        if write_baseline {
            let n = copy_ours(&samples, &layout.baseline)?;
            o.details.push(format!(
                "wrote {n} sample file(s) of this run to {} (review and commit them)",
                layout.baseline.display()
            ));
        }
        *perf = Some(Performance {
            bench,
            baseline_dir: layout.baseline.display().to_string(),
            baseline,
        });
        Ok(o)
    };
    run().unwrap_or_else(|e| Outcome::failed(&e))
}

/// Copies every sample file (ours and SDPA's: the SDPA ones show machine drift next time).
fn copy_ours(samples: &Path, baseline: &Path) -> anyhow::Result<usize> {
    std::fs::create_dir_all(baseline)
        .with_context(|| format!("creating {}", baseline.display()))?;
    let mut n = 0;
    for e in std::fs::read_dir(samples).with_context(|| format!("listing {}", samples.display()))? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "csv") {
            if let Some(name) = path.file_name() {
                std::fs::copy(&path, baseline.join(name))
                    .with_context(|| format!("copying {}", path.display()))?;
                n += 1;
            }
        }
    }
    Ok(n)
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

    let plan: Vec<Stage> = if args.cpu_only {
        vec![
            Stage::Build,
            Stage::Ptxas,
            Stage::CpuTests,
            Stage::Correctness,
            Stage::Sanitizers,
            Stage::Stability,
            Stage::Performance,
        ]
    } else {
        vec![
            Stage::Build,
            Stage::Ptxas,
            Stage::Correctness,
            Stage::Sanitizers,
            Stage::Stability,
            Stage::Performance,
        ]
    };
    let bar = ProgressBar::new(plan.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));

    let started = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let mut test_binary: Option<PathBuf> = None;
    let mut performance: Option<Performance> = None;
    let mut stages = Vec::new();
    for stage in plan {
        bar.set_message(stage.title());
        let clock = Instant::now();
        let outcome = if args.cpu_only && stage.needs_gpu() {
            Outcome {
                status: Status::NotRun("needs a GPU (--cpu-only)".into()),
                summary: "not run".into(),
                details: vec![],
                logs: vec![],
            }
        } else {
            match stage {
                Stage::Build if bundle => {
                    test_binary = sanitize::gpu_test_binary(&layout.source).ok();
                    Outcome {
                        status: Status::Skipped("the bundle's binaries are prebuilt".into()),
                        summary: "prebuilt (bundle)".into(),
                        details: vec![],
                        logs: vec![],
                    }
                }
                Stage::Build if args.cpu_only => Outcome {
                    status: Status::Skipped("CPU tests build what they need".into()),
                    summary: "covered by CPU tests".into(),
                    details: vec![],
                    logs: vec![],
                },
                Stage::Build => stage_build(&layout, &root, &mut test_binary),
                Stage::Ptxas => stage_ptxas(&layout),
                Stage::CpuTests if bundle => Outcome {
                    status: Status::Skipped("a bundle has no cargo: CI runs the CPU tests".into()),
                    summary: "skipped (bundle)".into(),
                    details: vec![],
                    logs: vec![],
                },
                Stage::CpuTests if args.no_cpu_tests => Outcome {
                    status: Status::Skipped("--no-cpu-tests (the caller runs them)".into()),
                    summary: "skipped (--no-cpu-tests)".into(),
                    details: vec![],
                    logs: vec![],
                },
                Stage::CpuTests => stage_cpu_tests(&layout, &root),
                Stage::Performance => stage_performance(&layout, args.write_baseline, &mut performance),
                Stage::Correctness | Stage::Sanitizers | Stage::Stability => match &test_binary {
                    None => Outcome {
                        status: Status::NotRun("no GPU test binary (the build failed, or the bundle lacks tests/attn_kernels_gpu)".into()),
                        summary: "not run".into(),
                        details: vec![],
                        logs: vec![],
                    },
                    Some(bin) => match stage {
                        Stage::Correctness => stage_gpu_tests(
                            &layout,
                            bin,
                            "correctness.log",
                            None,
                            &["stability_", "sanitize_"],
                        ),
                        Stage::Stability => stage_gpu_tests(&layout, bin, "stability.log", Some("stability_"), &[]),
                        _ => stage_sanitizers(&layout, bin),
                    },
                },
            }
        };
        let seconds = clock.elapsed().as_secs_f64();
        // suspend() prints even when the bar is hidden (no terminal, as in CI).
        bar.suspend(|| {
            println!(
                "{:<32} {:<8} {:>7.1}s  {}",
                stage.title(),
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
            stage,
            status: outcome.status,
            seconds,
            summary: outcome.summary,
            details: outcome.details,
            logs: outcome.logs,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();

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
