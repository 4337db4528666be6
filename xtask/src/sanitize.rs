//! `cargo xtask sanitize` (not implemented yet).

/// Arguments of `cargo xtask sanitize`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask sanitize` is not implemented yet")
}
