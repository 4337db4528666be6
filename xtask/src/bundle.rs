//! `cargo xtask bundle` (not implemented yet).

/// Arguments of `cargo xtask bundle`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask bundle` is not implemented yet")
}
