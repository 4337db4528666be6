//! `cargo xtask oracle` (not implemented yet).

/// Arguments of `cargo xtask oracle`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask oracle` is not implemented yet")
}
