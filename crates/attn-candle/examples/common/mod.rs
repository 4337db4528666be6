//! What both examples share: their flags and their device choice.

use candle_core::Device;

/// The number after `name` among `args`.
pub fn arg(args: &[String], name: &str) -> Option<usize> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).and_then(|v| v.parse().ok())
}

/// The CPU with `--cpu` or without a usable CUDA device; GPU 0 otherwise.
pub fn device(args: &[String]) -> Device {
    if args.iter().any(|a| a == "--cpu") || !candle_core::utils::cuda_is_available() {
        Device::Cpu
    } else {
        // Built with `cuda`: the GPU if there is one (a driver and a device), else the CPU.
        Device::new_cuda(0).unwrap_or_else(|e| {
            let e = e.to_string();
            let reason = e.lines().next().unwrap_or("unknown error");
            eprintln!("no usable CUDA device ({reason}); running on the CPU");
            Device::Cpu
        })
    }
}
