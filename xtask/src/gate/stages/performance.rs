//! Stage 7: the benchmark on the seed and large shapes, f16 and bf16, and the FP8 forward
//! (`cargo xtask bench`, vs PyTorch SDPA and cuDNN's FP8 SDPA), then this run's samples against
//! the committed baseline.

use std::path::Path;
use std::process::Command;

use anyhow::Context;

use super::{Ctx, Modes, Outcome, StageDef, State};
use crate::gate::report::{BaselineComparison, BenchFile, Performance, Stage};
use crate::gate::{is_ours, Layout};
use crate::sanitize;

pub const STAGE: StageDef = StageDef {
    stage: Stage::Performance,
    name: "performance",
    needs_gpu: true,
    modes: Modes::Always,
    run,
};

fn run(ctx: &Ctx, state: &mut State) -> Outcome {
    stage_performance(ctx.layout, ctx.write_baseline, &mut state.performance)
}

/// Smallest slowdown against the baseline that fails the gate: the lower end of the ratio's
/// CI must exceed 1 + this. Graph-timed samples are so tight that a 0.2 % drift between two
/// runs on one H200 (2026-11-21, 10.05 → 10.07 µs) was a statistically clear `regress` with
/// Hedges' g ≈ 30; a release gate needs practical significance on top of statistical.
pub const REGRESSION_TOLERANCE: f64 = 0.03;

/// Compares every baseline sample file with this run's file of the same name.
pub fn compare_with_baseline(
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

/// `xtask bench`'s arguments for this stage: the seed and large shapes (issue 15's targets
/// are at S ≥ 4096), both 16-bit types, and the device's default FP8 variant on every shape
/// (compared with cuDNN's FP8 SDPA where the GPU host's python3 has `nvidia-cudnn-frontend`).
fn bench_args(bench_dir: &Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = [
        "bench",
        "--shapes",
        "seed-large",
        "--dtype",
        "both",
        "--fp8",
        "auto",
        "--out-dir",
    ]
    .iter()
    .map(Into::into)
    .collect();
    args.push(bench_dir.into());
    args
}

/// Benchmark on the seed and large shapes, then the baseline comparison.
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
        cmd.args(bench_args(&bench_dir));
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn the_stage_benches_large_shapes_and_fp8_with_flags_bench_accepts() {
        let args = bench_args(Path::new("target/gate/bench"));
        let text: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        for want in ["seed-large", "both", "auto", "target/gate/bench"] {
            assert!(
                text.iter().any(|a| a == want),
                "{want} missing from {text:?}"
            );
        }
        let cli = crate::Cli::try_parse_from(
            std::iter::once(std::ffi::OsString::from("xtask")).chain(args),
        );
        assert!(
            matches!(cli.map(|c| c.cmd), Ok(crate::Cmd::Bench(_))),
            "xtask bench refused the stage's arguments"
        );
    }
}
