//! Stages 4 and 6: the GPU test binary, once for correctness (everything but the stability
//! and sanitizer tests) and once for stability.

use std::path::Path;
use std::process::Command;

use super::cpu_tests::failed_tests;
use super::{with_test_binary, Ctx, Modes, Outcome, StageDef, State};
use crate::gate::report::Stage;
use crate::gate::Layout;
use crate::sanitize;

pub const CORRECTNESS: StageDef = StageDef {
    stage: Stage::Correctness,
    name: "correctness",
    needs_gpu: true,
    modes: Modes::Always,
    run: run_correctness,
};

pub const STABILITY: StageDef = StageDef {
    stage: Stage::Stability,
    name: "stability",
    needs_gpu: true,
    modes: Modes::Always,
    run: run_stability,
};

fn run_correctness(ctx: &Ctx, state: &mut State) -> Outcome {
    with_test_binary(state, |bin| {
        gpu_tests(
            ctx.layout,
            bin,
            "correctness.log",
            None,
            &["stability::", "sanitize::"],
        )
    })
}

fn run_stability(ctx: &Ctx, state: &mut State) -> Outcome {
    with_test_binary(state, |bin| {
        gpu_tests(ctx.layout, bin, "stability.log", Some("stability::"), &[])
    })
}

/// Runs the GPU test binary with a filter and skips; passes when tests ran and none failed.
fn gpu_tests(
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
