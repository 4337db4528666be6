//! `cargo xtask setup-cuda` (not implemented yet).

/// Arguments of `cargo xtask setup-cuda`.
#[derive(clap::Args)]
pub struct SetupArgs {}

pub fn run_setup(_args: SetupArgs) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask setup-cuda` is not implemented yet")
}
