//! `cargo xtask forward` (not implemented yet).

/// Arguments of `cargo xtask forward`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask forward` is not implemented yet")
}
