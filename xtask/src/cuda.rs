//! `cargo xtask setup-cuda`: installs the pinned CUDA 13.0 compiler from PyPI into
//! `target/cuda-venv` (no system CUDA needed), where attn-kernels' build.rs finds it; and
//! `ensure_nvcc`, which every command that needs nvcc calls first.
//!
//! `--candle` also installs what `cargo build -p attn-candle --features cuda` needs beyond the
//! compiler (crates/attn-candle/README.md, "The build story"): the CUDA 13.0 cuBLAS, cuRAND
//! and NVRTC wheels, a CUDA root `target/cuda-venv/cuda` (the wheels' `nvidia/cu13`, with
//! `lib/stubs/` holding the unversioned `.so` names the linker wants and a generated libcuda
//! stub), and `target/cuda-venv/candle.env` to source before building.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context};

use crate::nvcc;

/// Arguments of `cargo xtask setup-cuda`.
#[derive(clap::Args)]
pub struct SetupArgs {
    /// Reinstall even when a compiler is already in the venv.
    #[arg(long)]
    force: bool,
    /// Also install the libraries attn-candle's `cuda` feature links against (cuBLAS,
    /// cuRAND, NVRTC of CUDA 13.0 from PyPI, about 1 GB), a libcuda stub, and
    /// `target/cuda-venv/candle.env` to source before `cargo build -p attn-candle --features cuda`.
    #[arg(long)]
    candle: bool,
}

/// The PyPI wheels of the libraries candle-core's `cuda` feature links (cudarc's
/// `dynamic-linking` with cuBLAS, cuBLASLt, cuRAND and NVRTC), matching the pinned CUDA 13.0
/// compiler. libcudart comes with the compiler's `nvidia-cuda-runtime`.
pub const CANDLE_CUDA_PACKAGES: [&str; 3] = [
    "nvidia-cublas==13.1.0.3",
    "nvidia-curand==10.4.0.35",
    "nvidia-cuda-nvrtc==13.0.88",
];

/// The unversioned names the linker looks for (`-lcublas` …), and the wheels' files.
const CANDLE_LINK_LIBS: [(&str, &str); 5] = [
    ("libcublas.so", "libcublas.so.13"),
    ("libcublasLt.so", "libcublasLt.so.13"),
    ("libcurand.so", "libcurand.so.10"),
    ("libnvrtc.so", "libnvrtc.so.13"),
    ("libcudart.so", "libcudart.so.13"),
];

/// The workspace root (xtask's parent directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub fn run_setup(args: SetupArgs) -> anyhow::Result<()> {
    let root = workspace_root();
    let nvcc_path = match nvcc::venv_nvcc(&root) {
        Some(p) if !args.force => {
            println!("pinned nvcc already installed: {}", p.display());
            p
        }
        _ => {
            let p = install(&root)?;
            println!("installed {}", p.display());
            p
        }
    };
    if args.candle {
        let env = install_candle(&root, &nvcc_path, args.force)?;
        println!(
            "attn-candle's CUDA build is ready: `source {}` then `cargo build -p attn-candle --features cuda`",
            env.display()
        );
    }
    Ok(())
}

/// `setup-cuda --candle`: the wheels, the CUDA root with its link stubs, and `candle.env`.
/// Returns the path of `candle.env`.
fn install_candle(root: &Path, nvcc_path: &Path, force: bool) -> anyhow::Result<PathBuf> {
    let venv = nvcc::venv_dir(root);
    // nvidia/cu13: bin/nvcc, include/, lib/ (where every cu13 wheel puts its libraries).
    let cuda_root = nvcc_path
        .parent()
        .and_then(Path::parent)
        .context("nvcc is not inside a CUDA root (…/bin/nvcc)")?
        .to_path_buf();
    let lib = cuda_root.join("lib");
    let marker = venv.join(".candle-installed");
    let wanted = CANDLE_CUDA_PACKAGES.join("\n");
    let installed = std::fs::read_to_string(&marker).is_ok_and(|m| m == wanted);
    if force || !installed || CANDLE_LINK_LIBS.iter().any(|(_, f)| !lib.join(f).is_file()) {
        let st = Command::new(venv.join("bin").join("pip"))
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
            ])
            .args(CANDLE_CUDA_PACKAGES)
            .status()
            .context("running pip")?;
        if !st.success() {
            bail!("pip could not install {}", CANDLE_CUDA_PACKAGES.join(" "));
        }
    }
    // The linker wants unversioned names (`-lcublas` finds libcublas.so); the wheels ship
    // only the versioned files. lib/stubs is on cudarc's link search path under CUDA_HOME.
    let stubs = lib.join("stubs");
    std::fs::create_dir_all(&stubs).with_context(|| format!("creating {}", stubs.display()))?;
    for (name, file) in CANDLE_LINK_LIBS {
        if !lib.join(file).is_file() {
            bail!("{} is missing after the install", lib.join(file).display());
        }
        replace_symlink(&Path::new("..").join(file), &stubs.join(name))?;
    }
    write_libcuda_stub(&cuda_root)?;
    // A stable CUDA root path (the real one has the Python version in it).
    let link = venv.join("cuda");
    let target = cuda_root
        .strip_prefix(&venv)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| cuda_root.clone());
    replace_symlink(&target, &link)?;
    let env = venv.join("candle.env");
    std::fs::write(&env, candle_env(&link)).context("writing candle.env")?;
    std::fs::write(&marker, wanted).context("writing the candle install marker")?;
    Ok(env)
}

fn replace_symlink(target: &Path, link: &Path) -> anyhow::Result<()> {
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(link).with_context(|| format!("removing {}", link.display()))?;
    }
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("linking {} -> {}", link.display(), target.display()))
}

/// The environment of a `--features cuda` build, to `source`.
fn candle_env(cuda_home: &Path) -> String {
    format!(
        r#"# Written by `cargo xtask setup-cuda --candle`. Source it before building attn-candle with
# `--features cuda` on a machine without a system CUDA (crates/attn-candle/README.md).
# CUDA_HOME: nvcc for candle-kernels and attn-kernels, the link search path of cudarc.
export CUDA_HOME="{home}"
# cudarc's `cuda-version-from-build-system` runs `nvcc --version` from PATH.
export PATH="$CUDA_HOME/bin:$PATH"
# candle-kernels compiles for this compute capability (it would ask nvidia-smi otherwise).
export CUDA_COMPUTE_CAP="${{CUDA_COMPUTE_CAP:-90}}"
# Run time: cuBLAS, cuRAND, NVRTC and cudart from the wheels.
export LD_LIBRARY_PATH="$CUDA_HOME/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
# Without an NVIDIA driver, the generated libcuda stub stands in (every call answers
# CUDA_ERROR_STUB_LIBRARY), so CPU-only runs of a `cuda` build start. Never on a GPU host.
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$CUDA_HOME/lib/stubs/no-driver"
fi
"#,
        home = cuda_home.display()
    )
}

/// Every driver entry point `cuda.h` declares (and the versioned names its `#define`s map
/// the plain ones to), and the profiler's.
fn driver_entry_points(cuda_h: &str) -> Vec<String> {
    let decl = regex::Regex::new(r"CUDAAPI\s+(cu[A-Za-z0-9_]+)\s*\(").expect("valid regex");
    let alias = regex::Regex::new(r"(?m)^\s*#\s*define\s+cu[A-Za-z0-9_]+\s+(cu[A-Za-z0-9_]+)\s*$")
        .expect("valid regex");
    // The profiler's entry points live in cudaProfiler.h, which the wheels do not ship.
    let profiler = ["cuProfilerInitialize", "cuProfilerStart", "cuProfilerStop"];
    let mut names: Vec<String> = decl
        .captures_iter(cuda_h)
        .chain(alias.captures_iter(cuda_h))
        .map(|c| c[1].to_string())
        .chain(profiler.map(String::from))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// `lib/stubs/libcuda.so` (soname `libcuda.so.1`): every driver entry point of the wheels'
/// `cuda.h`, each answering `CUDA_ERROR_STUB_LIBRARY` (34), as the toolkit's own stub does.
/// The PyPI wheels ship no libcuda stub, and linking with cudarc's `dynamic-linking` needs
/// one; at run time the driver's real libcuda.so.1 is loaded instead.
/// `lib/stubs/no-driver/libcuda.so.1` is the same file, for CPU-only runs on machines
/// without a driver.
fn write_libcuda_stub(cuda_root: &Path) -> anyhow::Result<()> {
    let header = cuda_root.join("include").join("cuda.h");
    let text = std::fs::read_to_string(&header)
        .with_context(|| format!("reading {}", header.display()))?;
    let names = driver_entry_points(&text);
    if names.len() < 100 {
        bail!(
            "only {} driver entry points found in {}",
            names.len(),
            header.display()
        );
    }
    let stubs = cuda_root.join("lib").join("stubs");
    let mut c = String::from(
        "/* Generated by `cargo xtask setup-cuda --candle` from cuda.h: a link-time stand-in for\n   libcuda.so.1. Every entry point returns CUDA_ERROR_STUB_LIBRARY. */\n",
    );
    for n in &names {
        c.push_str(&format!("int {n}(void) {{ return 34; }}\n"));
    }
    let src = stubs.join("libcuda_stub.c");
    std::fs::write(&src, c).context("writing the libcuda stub source")?;
    let out = stubs.join("libcuda.so");
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .context("running cc (a C compiler is needed for the libcuda stub)")?;
    if !st.success() {
        bail!("cc could not build {}", out.display());
    }
    let no_driver = stubs.join("no-driver");
    std::fs::create_dir_all(&no_driver)?;
    replace_symlink(Path::new("../libcuda.so"), &no_driver.join("libcuda.so.1"))?;
    Ok(())
}

/// nvcc from the usual places, or the pinned PyPI compiler, installed now if needed.
pub fn ensure_nvcc(root: &Path) -> anyhow::Result<PathBuf> {
    if let Some(p) = nvcc::find_nvcc(root) {
        return Ok(p);
    }
    eprintln!("nvcc not found: installing the pinned CUDA 13.0 compiler into target/cuda-venv (as `cargo xtask setup-cuda` does)");
    install(root)
}

fn install(root: &Path) -> anyhow::Result<PathBuf> {
    let venv = nvcc::venv_dir(root);
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .context("python3 not found: it is needed to install the CUDA compiler from PyPI")?;
    if !venv.join("bin").join("pip").is_file() {
        let st = Command::new(python)
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .with_context(|| format!("running {python} -m venv"))?;
        if !st.success() {
            bail!("`{python} -m venv {}` failed", venv.display());
        }
    }
    let st = Command::new(venv.join("bin").join("pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(nvcc::PINNED_CUDA_PACKAGES)
        .status()
        .context("running pip")?;
    if !st.success() {
        bail!(
            "pip could not install {}",
            nvcc::PINNED_CUDA_PACKAGES.join(" ")
        );
    }
    let nvcc_path = nvcc::venv_nvcc(root)
        .context("pip succeeded but nvcc is not where the nvidia-cuda-nvcc wheel puts it")?;
    // build.rs watches this marker: its appearance triggers the kernel build.
    std::fs::write(
        venv.join(".installed"),
        nvcc::PINNED_CUDA_PACKAGES.join("\n"),
    )
    .context("writing the install marker")?;
    Ok(nvcc_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_entry_points_take_declarations_and_versioned_aliases() {
        let h = "#define cuCtxCreate                         cuCtxCreate_v4\n\
                 CUresult CUDAAPI cuInit(unsigned int Flags);\n\
                 __CUDA_DEPRECATED CUresult CUDAAPI cuCtxDetach(CUcontext ctx);\n\
                 CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);\n\
                 #define CU_LAUNCH_PARAM_END ((void*)0x00)\n";
        assert_eq!(
            driver_entry_points(h),
            [
                "cuCtxCreate",
                "cuCtxCreate_v4",
                "cuCtxDetach",
                "cuInit",
                "cuProfilerInitialize",
                "cuProfilerStart",
                "cuProfilerStop"
            ]
        );
    }

    #[test]
    fn candle_env_sets_the_build_variables() {
        let env = candle_env(Path::new("/x/target/cuda-venv/cuda"));
        for want in [
            "export CUDA_HOME=\"/x/target/cuda-venv/cuda\"",
            "export PATH=\"$CUDA_HOME/bin:$PATH\"",
            "CUDA_COMPUTE_CAP",
            "lib/stubs/no-driver",
        ] {
            assert!(env.contains(want), "{want} not in:\n{env}");
        }
    }
}
