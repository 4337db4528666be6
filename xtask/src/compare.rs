//! `cargo xtask compare` (not implemented yet).

/// Arguments of `cargo xtask compare`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask compare` is not implemented yet")
}
