//! Stage 1: the release and debug kernel builds and the GPU test binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{cargo, Ctx, Modes, Outcome, StageDef, State};
use crate::gate::report::{Stage, Status};
use crate::gate::Layout;
use crate::sanitize;

pub const STAGE: StageDef = StageDef {
    stage: Stage::Build,
    name: "build (release + debug kernels)",
    needs_gpu: false,
    modes: Modes::Always,
    run,
};

fn run(ctx: &Ctx, state: &mut State) -> Outcome {
    if ctx.bundle {
        state.test_binary = sanitize::gpu_test_binary(&ctx.layout.source).ok();
        return Outcome::skipped("the bundle's binaries are prebuilt", "prebuilt (bundle)");
    }
    if ctx.cpu_only {
        return Outcome::skipped("CPU tests build what they need", "covered by CPU tests");
    }
    build(ctx.layout, ctx.root, &mut state.test_binary)
}

/// Builds the release and debug kernels and the GPU test binary; returns the binary.
fn build(layout: &Layout, root: &Path, test_binary: &mut Option<PathBuf>) -> Outcome {
    let cargo = cargo();
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
