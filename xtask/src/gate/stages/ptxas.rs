//! Stage 2: the ptxas report of the release kernels (read from the build's embedded logs), held to the budget and the committed
//! snapshots.

use anyhow::Context;

use super::{Ctx, Modes, Outcome, StageDef, State};
use crate::gate::report::{Stage, Status};
use crate::ptxas;

pub const STAGE: StageDef = StageDef {
    stage: Stage::Ptxas,
    name: "ptxas budget + snapshots",
    needs_gpu: false,
    modes: Modes::Always,
    run,
};

fn run(ctx: &Ctx, _: &mut State) -> Outcome {
    let layout = ctx.layout;
    let run = || -> anyhow::Result<Outcome> {
        // The reports attn-kernels' build embedded with the cubins: nothing is recompiled.
        let archs = ptxas::archs_from(None, ptxas::Mode::Release)?;
        let collected = ptxas::collect(&archs, ptxas::Mode::Release)?;
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
