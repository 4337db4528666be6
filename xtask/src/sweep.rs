//! `cargo xtask sweep` (not implemented yet).

/// Arguments of `cargo xtask sweep`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask sweep` is not implemented yet")
}
