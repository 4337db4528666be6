//! `cargo xtask`: the workspace's task runner (nvcc builds, ptxas reports, sanitizers,
//! benchmarks against PyTorch SDPA, the release gate) and the `.npy` command-line twins of
//! the library crates. Each subcommand lives in its own module with its own `Args`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod backward;
mod bench;
mod bundle;
mod compare;
mod cuda;
// The cubin cache attn-kernels' build script uses; compiled here for its tests.
#[cfg(test)]
#[path = "../../crates/attn-kernels/build/cubin_cache.rs"]
mod cubin_cache;
#[cfg(test)]
mod cubin_cache_tests;
mod flags;
mod forward;
mod gate;
mod npy;
#[path = "../../crates/attn-kernels/build/nvcc.rs"]
#[allow(dead_code)]
mod nvcc;
mod oracle;
mod profile;
mod ptxas;
mod quant;
mod randn;
mod reference;
mod ring;
mod sanitize;
mod sass;
mod serve_bench;
mod sweep;
mod train_bench;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Tasks of the attention workspace",
    version
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// CPU f64 reference on .npy inputs.
    Reference(reference::Args),
    /// Quantize a .npy tensor to FP8 codes + scales.
    Quantize(quant::QuantizeArgs),
    /// Dequantize FP8 codes + scales back to f32.
    Dequantize(quant::DequantizeArgs),
    /// Compare two latency samples: bootstrap CIs, Hedges' g, decision.
    Compare(compare::Args),
    /// Compare a kernel (or a .npy) with the reference and explain the error.
    Oracle(oracle::Args),
    /// Run the GPU kernel on .npy inputs (the twin of `reference`).
    Forward(forward::Args),
    /// ptxas resource reports per kernel and arch, with a budget check.
    Ptxas(ptxas::Args),
    /// One embedded kernel's SASS (nvdisasm), instructions per opcode and per loop.
    Sass(sass::Args),
    /// Run the GPU tests under compute-sanitizer.
    Sanitize(sanitize::Args),
    /// Nsight Compute profile of one launch.
    Profile(profile::Args),
    /// Benchmark against PyTorch SDPA.
    Bench(bench::Args),
    /// Config sweep with elite selection.
    Sweep(sweep::Args),
    /// The release gate.
    Gate(gate::Args),
    /// Bundle GPU test binaries, cubins and a runner for a GPU host without Rust.
    Bundle(bundle::Args),
    /// Install the pinned CUDA 13.0 compiler from PyPI into target/cuda-venv.
    SetupCuda(cuda::SetupArgs),
    /// Ring attention over N local GPUs against one GPU on the whole sequence.
    Ring(ring::Args),
    /// Forward, backward and serving-feature timings against SDPA's forward and backward.
    TrainBench(train_bench::Args),
    /// Varlen and paged-KV launches against the dense work they replace.
    ServeBench(serve_bench::Args),
    /// The GPU backward on .npy inputs (twin of `reference --do`).
    Backward(backward::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Reference(a) => reference::run(a),
        Cmd::Ring(a) => ring::run(a),
        Cmd::TrainBench(a) => train_bench::run(a),
        Cmd::ServeBench(a) => serve_bench::run(a),
        Cmd::Backward(a) => backward::run(a),
        Cmd::Quantize(a) => quant::run_quantize(a),
        Cmd::Dequantize(a) => quant::run_dequantize(a),
        Cmd::Compare(a) => compare::run(a),
        Cmd::Oracle(a) => oracle::run(a),
        Cmd::Forward(a) => forward::run(a),
        Cmd::Ptxas(a) => ptxas::run(a),
        Cmd::Sass(a) => sass::run(a),
        Cmd::Sanitize(a) => sanitize::run(a),
        Cmd::Profile(a) => profile::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Sweep(a) => sweep::run(a),
        Cmd::Gate(a) => gate::run(a),
        Cmd::Bundle(a) => bundle::run(a),
        Cmd::SetupCuda(a) => cuda::run_setup(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, Cmd};

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn typed_flags_keep_their_spellings() {
        let cli = Cli::try_parse_from([
            "cargo xtask",
            "bench",
            "--shapes",
            "all",
            "--dtype",
            "both",
            "--causal",
            "bottom-right",
            "--fp8",
            "auto,wgmma,cvt",
        ])
        .expect("bench flags");
        assert!(matches!(cli.cmd, Cmd::Bench(_)));
        for bad in [
            ["bench", "--shapes", "tiny"],
            ["bench", "--dtype", "f32"],
            ["bench", "--fp8", "e4m3"],
            ["sweep", "--dtype", "both"],
        ] {
            let args = std::iter::once("cargo xtask").chain(bad);
            assert!(Cli::try_parse_from(args).is_err(), "{bad:?}");
        }
        Cli::try_parse_from(["cargo xtask", "sweep", "--dtype", "fp16"]).expect("fp16 alias");
    }
}
