//! `cargo xtask forward`: the GPU kernel on `.npy` inputs (not implemented yet), and the
//! GPU entry points other subcommands (oracle, bench, gate) share.

use attn_ref::{AttnOutput, Problem, Tile};

/// Arguments of `cargo xtask forward`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask forward` is not implemented yet")
}

/// What one GPU forward returns: the output (as f32), the tile size of the config that ran,
/// and, when tile dumps were asked for (debug kernels only), the dumped tiles.
#[allow(dead_code)]
pub struct GpuRun {
    /// O and LSE.
    pub output: AttnOutput,
    /// BLOCK_M of the config that ran.
    pub block_m: usize,
    /// BLOCK_N of the config that ran.
    pub block_n: usize,
    /// Dumped tiles (natural-log domain, like `attn_ref::Tile`), empty without a request.
    pub tiles: Vec<Tile>,
    /// A name for reports (`fa2-f16-d64-64x64w4s2-sm90a`).
    pub kernel: String,
}

/// Runs the GPU kernel once on host inputs (f32 values, rounded to `dtype` = "f16"|"bf16").
/// `config` overrides the default config by name; `dump_tiles` lists (b, h, q_tile) blocks
/// whose S/P/m/l tiles the debug kernels dump (an error with release kernels).
#[allow(dead_code)]
pub fn run_gpu(
    _problem: &Problem,
    _q: &[f32],
    _k: &[f32],
    _v: &[f32],
    _dtype: &str,
    _config: Option<&str>,
    _dump_tiles: &[(usize, usize, usize)],
) -> anyhow::Result<GpuRun> {
    anyhow::bail!("GPU forward is not implemented yet")
}
