//! Stage 3 (`--cpu-only` only): `cargo test --workspace`.

use std::process::Command;

use super::{cargo, Ctx, Modes, Outcome, StageDef, State};
use crate::gate::report::Stage;
use crate::sanitize;

pub const STAGE: StageDef = StageDef {
    stage: Stage::CpuTests,
    name: "CPU tests",
    needs_gpu: false,
    modes: Modes::CpuOnly,
    run,
};

fn run(ctx: &Ctx, _: &mut State) -> Outcome {
    if ctx.bundle {
        return Outcome::skipped(
            "a bundle has no cargo: CI runs the CPU tests",
            "skipped (bundle)",
        );
    }
    if ctx.no_cpu_tests {
        return Outcome::skipped(
            "--no-cpu-tests (the caller runs them)",
            "skipped (--no-cpu-tests)",
        );
    }
    let layout = ctx.layout;
    let log = layout.log("cpu-tests.log");
    let mut cmd = Command::new(cargo());
    cmd.current_dir(ctx.root).args(["test", "--workspace"]);
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
