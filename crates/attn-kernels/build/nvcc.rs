// Shared by attn-kernels' build.rs and by xtask (through `#[path]`), so the kernels are
// compiled with one set of flags and one discovery order wherever they are built.
//
// Discovery order (DESIGN.md §5): `NVCC`, `CUDA_HOME`/`CUDA_PATH`, `PATH`, `/usr/local/cuda`,
// then the pinned PyPI compiler that `cargo xtask setup-cuda` installs under
// `target/cuda-venv`.

use std::path::{Path, PathBuf};

/// Archs compiled when `ATTN_CUDA_ARCHS` is unset.
pub const DEFAULT_ARCHS: &str = "80;89;90a";

/// The pinned PyPI packages of the CUDA 13.0 compiler (mixing versions breaks ptxas).
pub const PINNED_CUDA_PACKAGES: [&str; 5] = [
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
];

/// Flags common to every kernel compile unit.
pub const COMMON_FLAGS: [&str; 3] = ["-std=c++17", "--use_fast_math", "-Xptxas=-v"];
/// Release flags.
pub const RELEASE_FLAGS: [&str; 2] = ["-O3", "-DNDEBUG"];
/// Debug flags: device debug info, line info, tile dumps compiled in.
// (`-G` implies full line info; adding `-lineinfo` only makes nvcc and ptxas warn.)
pub const DEBUG_FLAGS: [&str; 2] = ["-G", "-DATTN_DEBUG"];
/// Debug flags of the Hopper forward's units: the release code with the tile dumps compiled
/// in and line info. `-G` is not an option there: it keeps every value in local memory, and
/// the warp-specialized kernel's `setmaxnreg` register split and its wgmma accumulators
/// (which must stay in registers between issue and wait) do not survive that.
pub const HOPPER_DEBUG_FLAGS: [&str; 4] = ["-O3", "-DNDEBUG", "-lineinfo", "-DATTN_DEBUG"];

/// Parses `ATTN_CUDA_ARCHS`-style lists (`80;89;90a`, commas also accepted).
pub fn parse_archs(list: &str) -> Vec<String> {
    list.split([';', ','])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_start_matches("sm_").to_string())
        .collect()
}

/// `-gencode` argument for one arch (`90a` → `arch=compute_90a,code=sm_90a`).
pub fn gencode(arch: &str) -> String {
    format!("arch=compute_{arch},code=sm_{arch}")
}

/// The venv that `cargo xtask setup-cuda` creates, relative to the workspace root.
pub fn venv_dir(workspace_root: &Path) -> PathBuf {
    workspace_root.join("target").join("cuda-venv")
}

/// nvcc inside the setup-cuda venv, if it is there.
pub fn venv_nvcc(workspace_root: &Path) -> Option<PathBuf> {
    let lib = venv_dir(workspace_root).join("lib");
    let entries = std::fs::read_dir(lib).ok()?;
    for e in entries.flatten() {
        let p = e.path().join("site-packages/nvidia/cu13/bin/nvcc");
        if p.is_file() {
            return Some(p);
        }
    }
    None
}

/// Finds nvcc: `NVCC`, `CUDA_HOME`/`CUDA_PATH`, `PATH`, `/usr/local/cuda`, then the venv.
pub fn find_nvcc(workspace_root: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NVCC") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Some(p);
        }
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(home) = std::env::var_os(var) {
            let p = PathBuf::from(home).join("bin").join("nvcc");
            if p.is_file() {
                return Some(p);
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("nvcc");
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let p = PathBuf::from("/usr/local/cuda/bin/nvcc");
    if p.is_file() {
        return Some(p);
    }
    venv_nvcc(workspace_root)
}
