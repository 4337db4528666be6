//! `cargo xtask quantize` / `dequantize` (not implemented yet).

/// Arguments of `cargo xtask quantize`.
#[derive(clap::Args)]
pub struct QuantizeArgs {}
/// Arguments of `cargo xtask dequantize`.
#[derive(clap::Args)]
pub struct DequantizeArgs {}

pub fn run_quantize(_args: QuantizeArgs) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask quantize` is not implemented yet")
}
pub fn run_dequantize(_args: DequantizeArgs) -> anyhow::Result<()> {
    anyhow::bail!("`cargo xtask dequantize` is not implemented yet")
}
