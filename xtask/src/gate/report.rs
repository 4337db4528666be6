//! The gate's results as data, and their rendering to Markdown (a pure function, tested).

use serde::{Deserialize, Serialize};

/// `bench.json`, as `cargo xtask bench` writes it (one definition for writer and readers).
pub use crate::bench::schema::BenchFile;

/// One stage of the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Release and debug kernel builds, the GPU test binary.
    Build,
    /// ptxas budget and snapshots.
    Ptxas,
    /// `cargo test --workspace` (CPU only).
    CpuTests,
    /// GPU correctness tests.
    Correctness,
    /// compute-sanitizer, four tools.
    Sanitizers,
    /// Repeated launches and streams.
    Stability,
    /// Benchmark vs SDPA and vs the committed baseline.
    Performance,
}

impl Stage {
    /// Display name (from the stage's description in [`super::stages::STAGES`]).
    pub fn title(self) -> &'static str {
        super::stages::def(self).name
    }

    /// Whether the stage needs a GPU (from its description).
    pub fn needs_gpu(self) -> bool {
        super::stages::def(self).needs_gpu
    }
}

/// How a stage ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "kebab-case")]
pub enum Status {
    /// Everything it checks held.
    Passed,
    /// Something it checks did not hold (the details say what).
    Failed,
    /// Not applicable in this mode (the bundle's binaries are prebuilt); does not fail the gate.
    Skipped(String),
    /// Wanted but not run (no GPU in `--cpu-only`, or a stage it depends on failed).
    NotRun(String),
}

impl Status {
    fn label(&self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "FAILED",
            Status::Skipped(_) => "skipped",
            Status::NotRun(_) => "not run",
        }
    }
}

/// The outcome of one stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageResult {
    /// Which stage.
    pub stage: Stage,
    /// How it ended.
    #[serde(flatten)]
    pub status: Status,
    /// Wall time in seconds.
    pub seconds: f64,
    /// One line for the table.
    pub summary: String,
    /// Every finding (violations, failing tests, errors per tool).
    pub details: Vec<String>,
    /// Logs kept, relative to the output directory where possible.
    pub logs: Vec<String>,
}

/// One sample file compared with the committed baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineComparison {
    /// Sample file name (`<shape>-<backend>.csv`).
    pub file: String,
    /// Whether it is our kernel (gating) or an SDPA backend (drift of the machine, informative).
    pub ours: bool,
    /// Baseline mean µs.
    pub baseline_mean: f64,
    /// This run's mean µs.
    pub candidate_mean: f64,
    /// candidate / baseline.
    pub ratio: f64,
    /// CI of the ratio.
    pub ratio_ci_low: f64,
    /// CI of the ratio.
    pub ratio_ci_high: f64,
    /// Hedges' g.
    pub hedges_g: Option<f64>,
    /// `promote`, `regress` or `inconclusive`.
    pub decision: String,
}

/// The performance stage's data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Performance {
    /// The benchmark file.
    pub bench: BenchFile,
    /// Where the baseline was read from.
    pub baseline_dir: String,
    /// Per sample file.
    pub baseline: Vec<BaselineComparison>,
}

/// The whole gate run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateReport {
    /// Start time (RFC 3339, UTC).
    pub started: String,
    /// `cargo` or `bundle DIR`.
    pub mode: String,
    /// `--cpu-only`.
    pub cpu_only: bool,
    /// Commit checked, when known.
    pub commit: Option<String>,
    /// `nvidia-smi -L`, when a GPU was found.
    pub gpu: Option<String>,
    /// Every stage, in order.
    pub stages: Vec<StageResult>,
    /// Benchmark results, when the performance stage ran.
    pub performance: Option<Performance>,
    /// The verdict (see [`gate_passed`]).
    pub passed: bool,
}

/// The verdict: no stage failed, and — unless `cpu_only`, where the GPU stages are knowingly
/// left out — every stage ran. A skipped stage (not applicable) does not count against it.
pub fn gate_passed(stages: &[StageResult], cpu_only: bool) -> bool {
    !stages.is_empty()
        && stages.iter().all(|s| match &s.status {
            Status::Passed | Status::Skipped(_) => true,
            Status::Failed => false,
            Status::NotRun(_) => cpu_only && s.stage.needs_gpu(),
        })
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("n/a".to_string(), |g| format!("{g:+.2}"))
}

/// Escapes `|` so free text does not break a Markdown table.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The Markdown report.
pub fn render_markdown(report: &GateReport) -> String {
    let mut md = String::new();
    let verdict = if report.passed { "PASSED" } else { "FAILED" };
    md.push_str(&format!("# Release gate: {verdict}\n\n"));
    md.push_str(&format!(
        "- started: {}\n- mode: {}{}\n- commit: {}\n- GPU: {}\n\n",
        report.started,
        report.mode,
        if report.cpu_only { " (--cpu-only)" } else { "" },
        report.commit.as_deref().unwrap_or("unknown"),
        report.gpu.as_deref().unwrap_or("none"),
    ));
    md.push_str("| # | stage | status | time (s) | summary |\n|---|---|---|---|---|\n");
    for (i, s) in report.stages.iter().enumerate() {
        md.push_str(&format!(
            "| {} | {} | {} | {:.1} | {} |\n",
            i + 1,
            s.stage.title(),
            s.status.label(),
            s.seconds,
            cell(&s.summary)
        ));
    }
    let not_run: Vec<String> = report
        .stages
        .iter()
        .filter_map(|s| match &s.status {
            Status::NotRun(why) => Some(format!("- {}: {why}", s.stage.title())),
            _ => None,
        })
        .collect();
    if !not_run.is_empty() {
        md.push_str("\n## Not run\n\n");
        md.push_str(&not_run.join("\n"));
        md.push('\n');
    }
    for s in &report.stages {
        if s.details.is_empty() && s.logs.is_empty() {
            continue;
        }
        md.push_str(&format!("\n## {}\n\n", s.stage.title()));
        if let Status::Skipped(why) = &s.status {
            md.push_str(&format!("Skipped: {why}\n\n"));
        }
        for d in &s.details {
            md.push_str(&format!("- {}\n", d.replace('\n', "\n  ")));
        }
        for l in &s.logs {
            md.push_str(&format!("- log: `{l}`\n"));
        }
    }
    if let Some(p) = &report.performance {
        md.push_str(&format!(
            "\n## Performance vs PyTorch SDPA\n\n{} — {} — bench commit {}\n\n",
            p.bench.device, p.bench.date, p.bench.commit
        ));
        md.push_str(
            "| shape | causal | dtype | kernel | method | ours median µs | ours mean µs [CI] | TFLOP/s | champion | champion median µs | ratio [CI] | g | decision |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for r in &p.bench.rows {
            let num = |v: Option<f64>, digits: usize| {
                v.map_or("n/a".to_string(), |v| format!("{v:.digits$}"))
            };
            let (champion, champion_median) = match &r.champion {
                Some(c) => (c.backend.clone(), format!("{:.2}", c.summary.median)),
                None => ("none ran".to_string(), "n/a".to_string()),
            };
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.2} | {:.2} [{:.2}, {:.2}] | {:.1} | {} | {} | {} [{}, {}] | {} | {} |\n",
                r.shape,
                if r.causal { "yes" } else { "no" },
                r.dtype,
                cell(&r.kernel),
                r.method,
                r.ours.median,
                r.ours.mean,
                r.ours.ci_low,
                r.ours.ci_high,
                r.tflops,
                champion,
                champion_median,
                num(r.ratio, 3),
                num(r.ratio_ci_low, 3),
                num(r.ratio_ci_high, 3),
                fmt_opt(r.hedges_g),
                r.decision.as_deref().unwrap_or("n/a")
            ));
        }
        md.push_str(&format!(
            "\nratio = mean(ours) / mean(champion); below 1 is faster than SDPA. \
             Latency distributions: `latency.svg`; roofline: `roofline.svg`.\n\n\
             ### Against the committed baseline ({})\n\n",
            p.baseline_dir
        ));
        if p.baseline.is_empty() {
            md.push_str("No comparison (see the stage's details).\n");
        } else {
            md.push_str(
                "| samples | gating | baseline mean µs | this run mean µs | ratio [CI] | g | decision |\n\
                 |---|---|---|---|---|---|---|\n",
            );
            for b in &p.baseline {
                md.push_str(&format!(
                    "| {} | {} | {:.2} | {:.2} | {:.3} [{:.3}, {:.3}] | {} | {} |\n",
                    b.file,
                    if b.ours { "yes" } else { "no (SDPA drift)" },
                    b.baseline_mean,
                    b.candidate_mean,
                    b.ratio,
                    b.ratio_ci_low,
                    b.ratio_ci_high,
                    fmt_opt(b.hedges_g),
                    b.decision
                ));
            }
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::schema::{BenchRow, Champion, SampleSummary};

    fn stage(stage: Stage, status: Status) -> StageResult {
        StageResult {
            stage,
            status,
            seconds: 1.3,
            summary: "a | b".into(),
            details: vec!["line one\nline two".into()],
            logs: vec!["logs/x.log".into()],
        }
    }

    fn summary(median: f64) -> SampleSummary {
        SampleSummary {
            n: 200,
            mean: median + 0.1,
            median,
            std: 0.5,
            ci_low: median,
            ci_high: median + 0.2,
            min: None,
            max: None,
            mad: None,
            outliers_dropped: None,
        }
    }

    #[test]
    fn verdict_rules() {
        let gpu_not_run = stage(Stage::Correctness, Status::NotRun("no GPU".into()));
        let ok = stage(Stage::Ptxas, Status::Passed);
        assert!(gate_passed(&[ok.clone(), gpu_not_run.clone()], true));
        assert!(!gate_passed(&[ok.clone(), gpu_not_run], false));
        let skipped = stage(Stage::Build, Status::Skipped("bundle".into()));
        assert!(gate_passed(&[skipped, ok.clone()], false));
        let failed = stage(Stage::Ptxas, Status::Failed);
        assert!(!gate_passed(&[failed, ok.clone()], true));
        let cpu_not_run = stage(Stage::CpuTests, Status::NotRun("no cargo".into()));
        assert!(!gate_passed(&[ok, cpu_not_run], true));
        assert!(!gate_passed(&[], true));
    }

    #[test]
    fn markdown_has_every_stage_the_verdict_and_the_numbers() {
        let report = GateReport {
            started: "2026-11-21T10:00:00Z".into(),
            mode: "cargo".into(),
            cpu_only: false,
            commit: Some("abc123".into()),
            gpu: Some("GPU 0: NVIDIA H100 80GB HBM3".into()),
            stages: vec![
                stage(Stage::Ptxas, Status::Passed),
                stage(Stage::Sanitizers, Status::Failed),
                stage(Stage::Stability, Status::NotRun("build failed".into())),
            ],
            performance: Some(Performance {
                bench: BenchFile {
                    device: "NVIDIA H100 80GB HBM3".into(),
                    date: "2026-11-21".into(),
                    commit: "abc123".into(),
                    torch: None,
                    rows: vec![BenchRow {
                        shape: "2,8,2048,64-causal-f16".into(),
                        causal: true,
                        dtype: "f16".into(),
                        kernel: "attn_fwd_f16_d64".into(),
                        method: "events".into(),
                        ours: summary(41.5),
                        tflops: 52.9,
                        champion: Some(Champion {
                            backend: "sdpa_cudnn".into(),
                            summary: summary(40.5),
                        }),
                        ratio: Some(1.0247),
                        ratio_ci_low: Some(1.01),
                        ratio_ci_high: Some(1.04),
                        hedges_g: None,
                        decision: Some("inconclusive".into()),
                        ratio_to_flash: None,
                        speedup_vs_ours_f16: None,
                        sdpa: vec![],
                    }],
                },
                baseline_dir: "docs/baseline".into(),
                baseline: vec![],
            }),
            passed: false,
        };
        let md = render_markdown(&report);
        assert!(md.starts_with("# Release gate: FAILED\n"));
        assert!(md.contains("| 1 | ptxas budget + snapshots | passed | 1.3 | a \\| b |"));
        assert!(md.contains("| 2 | sanitizers | FAILED |"));
        assert!(md.contains("## Not run\n\n- stability: build failed"));
        assert!(md.contains("- line one\n  line two"));
        assert!(md.contains(
            "| 2,8,2048,64-causal-f16 | yes | f16 | attn_fwd_f16_d64 | events | 41.50 |"
        ));
        assert!(md.contains("| sdpa_cudnn | 40.50 | 1.025 [1.010, 1.040] | n/a | inconclusive |"));
        assert!(md.contains("No comparison"));

        // A row without any SDPA result renders as such instead of inventing numbers.
        let mut lonely = report.clone();
        if let Some(p) = lonely.performance.as_mut() {
            let row = &mut p.bench.rows[0];
            (
                row.champion,
                row.ratio,
                row.ratio_ci_low,
                row.ratio_ci_high,
                row.decision,
            ) = (None, None, None, None, None);
        }
        let md = render_markdown(&lonely);
        assert!(
            md.contains("| none ran | n/a | n/a [n/a, n/a] | n/a | n/a |"),
            "{md}"
        );

        let json = serde_json::to_string(&report).expect("serialize");
        let back: GateReport = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, report);
        assert!(
            json.contains(r#""status":"not-run","reason":"build failed""#),
            "{json}"
        );
    }
}
