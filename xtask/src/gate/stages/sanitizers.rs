//! Stage 5: the GPU tests of module `sanitize::` under compute-sanitizer, every tool.

use super::{with_test_binary, Ctx, Modes, Outcome, StageDef, State};
use crate::gate::report::Stage;
use crate::sanitize::{self, Tool};

pub const STAGE: StageDef = StageDef {
    stage: Stage::Sanitizers,
    name: "sanitizers",
    needs_gpu: true,
    modes: Modes::Always,
    run,
};

fn run(ctx: &Ctx, state: &mut State) -> Outcome {
    let layout = ctx.layout;
    with_test_binary(state, |binary| {
        let run = || -> anyhow::Result<Outcome> {
            let tool = sanitize::find_compute_sanitizer()?;
            let results = sanitize::run_tools(
                &tool,
                binary,
                &Tool::ALL,
                "sanitize::",
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
    })
}
