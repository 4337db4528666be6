//! `cargo xtask profile` (not implemented yet).

/// Arguments of `cargo xtask profile`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask profile` is not implemented yet")
}
