//! `cargo xtask reference` (not implemented yet).

/// Arguments of `cargo xtask reference`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask reference` is not implemented yet")
}
