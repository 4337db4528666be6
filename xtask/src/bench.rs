//! `cargo xtask bench` (not implemented yet).

/// Arguments of `cargo xtask bench`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask bench` is not implemented yet")
}
