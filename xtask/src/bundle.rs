//! `cargo xtask bundle`: everything a GPU host without Rust needs, in `target/bundle/`
//! (docs/ARCHITECTURE.md): the release GPU test binary, the xtask binary (bench, sanitize, oracle,
//! gate, forward — with the debug kernels for tile dumps), the SDPA script and `run.sh`.
//!
//! On the GPU host: `target/bundle/run.sh test` runs every GPU test; `run.sh gate`,
//! `run.sh bench --shapes seed`, `run.sh sanitize`, `run.sh oracle …` run the rest.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context};

use crate::cuda;

/// Size limit of a packed bundle (what the GPU host's transfer accepts).
const MAX_BUNDLE_BYTES: u64 = 64 * 1024 * 1024;

/// Arguments of `cargo xtask bundle`.
#[derive(clap::Args)]
pub struct Args {
    /// Archs to compile the kernels for (the H100 test host is 90a).
    #[arg(long, default_value = "90a")]
    archs: String,
    /// Output directory.
    #[arg(long, default_value = "target/bundle")]
    out: PathBuf,
}

const RUNNER: &str = r#"#!/usr/bin/env bash
# Runs the bundled GPU tests and tools on a GPU host without Rust.
#   ./run.sh test [FILTER]        all GPU tests of attn-kernels (ignored by default elsewhere)
#   ./run.sh dist-test [FILTER]   attn-dist's GPU tests (ring attention; 2 GPUs for most)
#   ./run.sh bench|sanitize|gate|oracle|forward|profile|sweep|ptxas ARGS…
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export ATTN_BUNDLE_DIR="$here"
export ATTN_COMMIT="$(cat "$here/COMMIT")"
cmd="${1:-test}"
shift || true
case "$cmd" in
  test) exec "$here/tests/attn_kernels_gpu" --ignored "$@" ;;
  dist-test) exec "$here/tests/attn_dist_gpu" --ignored --test-threads 1 "$@" ;;
  gate|sanitize) exec "$here/bin/xtask" "$cmd" --from-bundle "$here" "$@" ;;
  *) exec "$here/bin/xtask" "$cmd" "$@" ;;
esac
"#;

pub fn run(args: Args) -> anyhow::Result<()> {
    let root = cuda::workspace_root();
    cuda::ensure_nvcc(&root)?;
    let out = if args.out.is_absolute() {
        args.out.clone()
    } else {
        root.join(&args.out)
    };
    let xtask = cargo_executable(
        &root,
        &args.archs,
        &[
            "build",
            "--release",
            "-p",
            "xtask",
            "--features",
            "debug-kernels",
        ],
        "xtask",
    )?;
    let tests = cargo_executable(
        &root,
        &args.archs,
        &[
            "test",
            "--release",
            "-p",
            "attn-kernels",
            "--features",
            "debug-kernels",
            "--test",
            "gpu",
            "--no-run",
        ],
        "gpu",
    )?;
    let dist_tests = cargo_executable(
        &root,
        &args.archs,
        &[
            "test",
            "--release",
            "-p",
            "attn-dist",
            "--test",
            "gpu",
            "--no-run",
        ],
        "gpu",
    )?;
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("clearing {}", out.display()))?;
    }
    for d in ["bin", "tests", "scripts"] {
        std::fs::create_dir_all(out.join(d))?;
    }
    copy(&xtask, &out.join("bin/xtask"))?;
    copy(&tests, &out.join("tests/attn_kernels_gpu"))?;
    copy(&dist_tests, &out.join("tests/attn_dist_gpu"))?;
    // Debug info is most of a binary's size; the cubins inside are what matters.
    for bin in [
        out.join("bin/xtask"),
        out.join("tests/attn_kernels_gpu"),
        out.join("tests/attn_dist_gpu"),
    ] {
        match Command::new("strip").arg(&bin).status() {
            Ok(s) if s.success() => {}
            _ => eprintln!(
                "warning: could not strip {} (binutils' strip missing?)",
                bin.display()
            ),
        }
    }
    std::fs::write(out.join("scripts/sdpa_bench.py"), crate::bench::SDPA_SCRIPT)?;
    // What `gate --from-bundle` reads: the budget, the committed ptxas snapshots (the
    // reports themselves are embedded in the binaries) and the performance baseline.
    copy(
        &root.join("crates/attn-kernels/ptxas-budget.json"),
        &out.join("ptxas-budget.json"),
    )?;
    copy_dir(
        &root.join("xtask/tests/snapshots"),
        &out.join("ptxas-snapshots"),
        |p| p.extension().is_some_and(|e| e == "snap"),
    )?;
    let baseline = root.join("docs/baseline");
    if baseline.is_dir() {
        copy_dir(&baseline, &out.join("baseline"), |p| {
            p.extension().is_some_and(|e| e == "csv")
        })?;
    }
    let runner = out.join("run.sh");
    std::fs::write(&runner, RUNNER)?;
    set_executable(&runner)?;
    std::fs::write(out.join("COMMIT"), crate::bench::git_commit())?;
    let total = dir_size(&out)?;
    // What travels is a gzip'd tar beside the directory: the two binaries each embed every
    // cubin (release and debug), ~65 MiB unpacked, ~19 MiB packed.
    let archive = out.with_extension("tar.gz");
    let (parent, name) = (
        out.parent().context("bundle directory has no parent")?,
        out.file_name().context("bundle directory has no name")?,
    );
    let status = Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(parent)
        .arg(name)
        .status()
        .context("running tar (needed to pack the bundle)")?;
    if !status.success() {
        bail!("tar failed packing {}", out.display());
    }
    let packed = std::fs::metadata(&archive)?.len();
    println!(
        "bundle: {} ({:.1} MiB, kernels for sm_{}); packed: {} ({:.1} MiB)",
        out.display(),
        total as f64 / 1048576.0,
        args.archs,
        archive.display(),
        packed as f64 / 1048576.0
    );
    if packed > MAX_BUNDLE_BYTES {
        bail!(
            "packed bundle is {:.1} MiB, over the 64 MiB limit; build fewer archs (--archs 90a)",
            packed as f64 / 1048576.0
        );
    }
    println!(
        "on the GPU host: tar xzf {} && {}/run.sh test",
        archive.display(),
        name.to_string_lossy()
    );
    Ok(())
}

/// Runs cargo with `--message-format=json` and returns the executable of target `name`.
fn cargo_executable(
    root: &Path,
    archs: &str,
    cargo_args: &[&str],
    name: &str,
) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(cargo_args)
        .arg("--message-format=json")
        .env("ATTN_CUDA_ARCHS", archs)
        .current_dir(root)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo")?;
    if !output.status.success() {
        bail!("`cargo {}` failed", cargo_args.join(" "));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut found = None;
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] == "compiler-artifact" && msg["target"]["name"] == name {
            if let Some(exe) = msg["executable"].as_str() {
                found = Some(PathBuf::from(exe));
            }
        }
    }
    found.with_context(|| format!("cargo built no executable named `{name}`"))
}

fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// Copies the files of `from` (recursively) that `keep` accepts into `to`.
fn copy_dir(from: &Path, to: &Path, keep: impl Fn(&Path) -> bool + Copy) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let p = e?.path();
        let dest = to.join(p.file_name().context("a file name")?);
        if p.is_dir() {
            copy_dir(&p, &dest, keep)?;
        } else if keep(&p) {
            copy(&p, &dest)?;
        }
    }
    Ok(())
}

#[cfg(unix)]
fn set_executable(p: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

#[cfg(not(unix))]
fn set_executable(_p: &Path) -> anyhow::Result<()> {
    Ok(())
}

fn dir_size(p: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(p)? {
        let e = e?;
        let m = e.metadata()?;
        total += if m.is_dir() {
            dir_size(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    #[test]
    fn runner_dispatches_every_documented_command() {
        for cmd in ["test)", "dist-test)", "gate|sanitize)", "*)"] {
            assert!(super::RUNNER.contains(cmd), "run.sh lacks `{cmd}`");
        }
        assert!(super::RUNNER.starts_with("#!/usr/bin/env bash"));
    }
}
