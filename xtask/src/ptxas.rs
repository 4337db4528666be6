//! `cargo xtask ptxas` (not implemented yet).

/// Arguments of `cargo xtask ptxas`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask ptxas` is not implemented yet")
}
