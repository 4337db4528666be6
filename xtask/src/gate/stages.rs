//! The gate's stages as data: each [`StageDef`] names a stage, says whether it needs a GPU
//! and in which modes it is planned, and points at the function that runs it (one module per
//! stage). [`STAGES`] is the order of the gate; [`plan`] picks the stages of a mode.

pub mod build;
pub mod cpu_tests;
pub mod gpu_tests;
pub mod performance;
pub mod ptxas;
pub mod sanitizers;

use std::path::{Path, PathBuf};

use super::report::{Performance, Stage, Status};
use super::Layout;

/// In which mode the gate plans a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modes {
    /// The full gate and `--cpu-only`.
    Always,
    /// `--cpu-only` only (on a GPU host the caller, CI, runs the CPU tests itself).
    CpuOnly,
}

/// One stage of the gate, as data.
pub struct StageDef {
    /// The stage's identity in the report.
    pub stage: Stage,
    /// Display name (the report's stage column).
    pub name: &'static str,
    /// Whether it needs a GPU: `--cpu-only` lists it as not run.
    pub needs_gpu: bool,
    /// When it is planned.
    pub modes: Modes,
    /// What it runs.
    pub run: fn(&Ctx, &mut State) -> Outcome,
}

/// The gate, in order.
pub static STAGES: [StageDef; 7] = [
    build::STAGE,
    ptxas::STAGE,
    cpu_tests::STAGE,
    gpu_tests::CORRECTNESS,
    sanitizers::STAGE,
    gpu_tests::STABILITY,
    performance::STAGE,
];

/// The description of `stage`.
pub fn def(stage: Stage) -> &'static StageDef {
    STAGES
        .iter()
        .find(|d| d.stage == stage)
        .expect("every Stage has a StageDef in STAGES")
}

/// The stages a run plans, in order.
pub fn plan(cpu_only: bool) -> impl Iterator<Item = &'static StageDef> {
    STAGES
        .iter()
        .filter(move |d| cpu_only || d.modes == Modes::Always)
}

/// What every stage may read.
pub struct Ctx<'a> {
    /// Paths by mode.
    pub layout: &'a Layout,
    /// The workspace (cargo mode) or the bundle directory.
    pub root: &'a Path,
    /// `--from-bundle`.
    pub bundle: bool,
    /// `--cpu-only`.
    pub cpu_only: bool,
    /// `--no-cpu-tests`.
    pub no_cpu_tests: bool,
    /// `--write-baseline`.
    pub write_baseline: bool,
}

/// What stages hand to later stages.
#[derive(Default)]
pub struct State {
    /// The GPU test binary (from the build stage, or the bundle).
    pub test_binary: Option<PathBuf>,
    /// The performance stage's data, for the report.
    pub performance: Option<Performance>,
}

/// A stage's result before timing is attached.
pub struct Outcome {
    pub status: Status,
    pub summary: String,
    pub details: Vec<String>,
    pub logs: Vec<String>,
}

impl Outcome {
    pub fn new(passed: bool, summary: impl Into<String>) -> Self {
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

    pub fn failed(e: &anyhow::Error) -> Self {
        let mut o = Outcome::new(false, first_line(&format!("{e:#}")));
        o.details.push(format!("{e:#}"));
        o
    }

    /// Not applicable in this mode.
    pub fn skipped(reason: &str, summary: &str) -> Self {
        Outcome {
            status: Status::Skipped(reason.into()),
            summary: summary.into(),
            details: vec![],
            logs: vec![],
        }
    }

    /// Wanted but not run.
    pub fn not_run(reason: &str) -> Self {
        Outcome {
            status: Status::NotRun(reason.into()),
            summary: "not run".into(),
            details: vec![],
            logs: vec![],
        }
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_string()
}

/// Runs `f` with the GPU test binary, or reports the stage as not run without one.
pub fn with_test_binary(state: &State, f: impl FnOnce(&Path) -> Outcome) -> Outcome {
    match &state.test_binary {
        None => Outcome::not_run(
            "no GPU test binary (the build failed, or the bundle lacks tests/attn_kernels_gpu)",
        ),
        Some(bin) => f(bin),
    }
}

/// Cargo, as the xtask was started with.
pub fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plans_keep_the_gate_order() {
        let ids = |cpu_only| plan(cpu_only).map(|d| d.stage).collect::<Vec<_>>();
        assert_eq!(
            ids(true),
            [
                Stage::Build,
                Stage::Ptxas,
                Stage::CpuTests,
                Stage::Correctness,
                Stage::Sanitizers,
                Stage::Stability,
                Stage::Performance,
            ]
        );
        assert_eq!(
            ids(false),
            [
                Stage::Build,
                Stage::Ptxas,
                Stage::Correctness,
                Stage::Sanitizers,
                Stage::Stability,
                Stage::Performance,
            ]
        );
    }

    #[test]
    fn every_stage_is_described_once_with_its_name_and_gpu_need() {
        for d in &STAGES {
            assert_eq!(STAGES.iter().filter(|e| e.stage == d.stage).count(), 1);
            assert_eq!(def(d.stage).name, d.stage.title());
        }
        let gpu: Vec<&str> = STAGES
            .iter()
            .filter(|d| d.needs_gpu)
            .map(|d| d.name)
            .collect();
        assert_eq!(
            gpu,
            ["correctness", "sanitizers", "stability", "performance"]
        );
        assert_eq!(Stage::Build.title(), "build (release + debug kernels)");
        assert_eq!(Stage::Ptxas.title(), "ptxas budget + snapshots");
        assert_eq!(Stage::CpuTests.title(), "CPU tests");
        assert!(!Stage::CpuTests.needs_gpu() && Stage::Stability.needs_gpu());
    }
}
