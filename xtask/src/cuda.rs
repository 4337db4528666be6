//! `cargo xtask setup-cuda`: installs the pinned CUDA 13.0 compiler from PyPI into
//! `target/cuda-venv` (no system CUDA needed), where attn-kernels' build.rs finds it; and
//! `ensure_nvcc`, which every command that needs nvcc calls first.

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
}

/// The workspace root (xtask's parent directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub fn run_setup(args: SetupArgs) -> anyhow::Result<()> {
    let root = workspace_root();
    if !args.force {
        if let Some(p) = nvcc::venv_nvcc(&root) {
            println!("pinned nvcc already installed: {}", p.display());
            return Ok(());
        }
    }
    let p = install(&root)?;
    println!("installed {}", p.display());
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
