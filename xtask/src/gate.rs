//! `cargo xtask gate` (not implemented yet).

/// Arguments of `cargo xtask gate`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask gate` is not implemented yet")
}
