//! Snapshots of the release resource report, one per arch, committed under
//! `xtask/tests/snapshots/` so that a change in registers, shared memory, stack or spills shows
//! up as a diff in review. Only the fields that the source and compiler decide are kept
//! (no compile times, no cmem, which only restates the parameter size), sorted.
//!
//! The same rendering serves the insta test below and the gate, which compares the committed
//! file's body with a fresh report without needing cargo (it also runs from the bundle).

use std::path::{Path, PathBuf};

use super::Collected;

/// The command that regenerates the snapshots, named in every failure message.
pub const REGENERATE: &str =
    "`cargo insta test --accept -p xtask` (or `INSTA_UPDATE=always cargo test -p xtask`)";

/// The snapshot name of one arch (`ptxas_release_sm_90a`).
pub fn name(arch: &str) -> String {
    format!("ptxas_release_sm_{arch}")
}

/// The committed snapshot file of one arch under `dir` (`xtask/tests/snapshots`).
pub fn file(dir: &Path, arch: &str) -> PathBuf {
    dir.join(format!("{}.snap", name(arch)))
}

/// The snapshot directory in the workspace.
pub fn workspace_dir(root: &Path) -> PathBuf {
    root.join("xtask/tests/snapshots")
}

/// The stable fields of one arch's release kernels, one line per kernel, sorted by unit and
/// kernel.
pub fn render(collected: &Collected, arch: &str) -> String {
    let target = format!("sm_{arch}");
    let mut rows: Vec<_> = collected
        .kernels
        .iter()
        .filter(|k| k.report.arch == target)
        .collect();
    rows.sort_by(|a, b| (&a.unit, &a.report.kernel).cmp(&(&b.unit, &b.report.kernel)));
    let mut out = format!("# {target} release: unit | kernel | registers barriers smem stack spill_stores spill_loads\n");
    for k in rows {
        let r = &k.report;
        out.push_str(&format!(
            "{} | {} | regs={} bars={} smem={} stack={} spill_st={} spill_ld={}\n",
            k.unit,
            r.kernel,
            r.registers,
            r.barriers,
            r.smem,
            r.stack,
            r.spill_stores,
            r.spill_loads
        ));
    }
    out
}

/// The body of an insta `.snap` file: everything after the closing `---` of its header.
pub fn body(snap_text: &str) -> Option<&str> {
    let rest = snap_text.strip_prefix("---\n")?;
    let end = rest.find("\n---\n")?;
    Some(&rest[end + "\n---\n".len()..])
}

/// Compares fresh reports with the committed snapshots of every arch; `Err` names each arch
/// that differs or has no snapshot, with the regenerate command.
pub fn compare_committed(collected: &Collected, dir: &Path) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for arch in &collected.archs {
        let path = file(dir, arch);
        let fresh = render(collected, arch);
        match std::fs::read_to_string(&path) {
            Err(e) => problems.push(format!("{}: {e}", path.display())),
            Ok(text) => match body(&text) {
                None => problems.push(format!("{}: not an insta snapshot file", path.display())),
                Some(committed) if committed.trim_end() != fresh.trim_end() => {
                    problems.push(format!(
                        "sm_{arch} differs from {}:\n{}",
                        path.display(),
                        line_diff(committed, &fresh)
                    ))
                }
                Some(_) => {}
            },
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "ptxas snapshots out of date ({}); if the change is intended, regenerate with {} and \
         commit the .snap files",
        problems.join("; "),
        REGENERATE
    )
}

/// A minimal line diff (lines only in the committed file `-`, only in the fresh report `+`).
fn line_diff(old: &str, new: &str) -> String {
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let mut out: Vec<String> = old_lines
        .iter()
        .filter(|l| !new_lines.contains(l))
        .map(|l| format!("  - {l}"))
        .collect();
    out.extend(
        new_lines
            .iter()
            .filter(|l| !old_lines.contains(l))
            .map(|l| format!("  + {l}")),
    );
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvcc;
    use crate::ptxas::{collect, KernelReport, Mode};

    #[test]
    fn body_skips_the_insta_header() {
        let snap =
            "---\nsource: xtask/src/ptxas/snapshot.rs\nexpression: text\n---\n# sm_80\na | b\n";
        assert_eq!(body(snap), Some("# sm_80\na | b\n"));
        assert_eq!(body("no header"), None);
    }

    #[test]
    fn render_keeps_stable_fields_sorted_per_arch() {
        let report = |unit: &str, kernel: &str, arch: &str| KernelReport {
            unit: unit.into(),
            report: crate::ptxas::parse::ResourceReport {
                kernel: kernel.into(),
                symbol: kernel.into(),
                arch: arch.into(),
                registers: 90,
                barriers: 1,
                smem: 16384,
                cmem: [(0, 380)].into(),
                stack: 0,
                spill_stores: 0,
                spill_loads: 0,
            },
        };
        let collected = Collected {
            mode: Mode::Release,
            archs: vec!["80".into(), "90a".into()],
            kernels: vec![
                report("b.cu", "k2", "sm_80"),
                report("a.cu", "k9", "sm_80"),
                report("a.cu", "k1", "sm_90a"),
            ],
            diagnostics: vec![],
            unparsed: vec![],
        };
        let text = render(&collected, "80");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("a.cu | k9 | regs=90 bars=1 smem=16384 stack=0"));
        assert!(lines[2].starts_with("b.cu | k2"));
        assert!(!text.contains("380"), "cmem is not a stable field");

        let dir = std::env::temp_dir().join(format!("xtask-snap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(file(&dir, "80"), format!("---\nsource: x\n---\n{text}")).expect("write");
        let err = compare_committed(&collected, &dir)
            .expect_err("90a has no file")
            .to_string();
        assert!(err.contains("ptxas_release_sm_90a.snap"), "{err}");
        assert!(!err.contains("sm_80 differs"), "{err}");
        assert!(err.contains("cargo insta test --accept -p xtask"), "{err}");
        std::fs::write(file(&dir, "90a"), "---\nsource: x\n---\nstale\n").expect("write");
        let err = compare_committed(&collected, &dir)
            .expect_err("stale")
            .to_string();
        assert!(
            err.contains("- stale") && err.contains("+ a.cu | k1"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The release report of every arch must match its committed snapshot. The reports are
    /// the ones attn-kernels' build embedded (nvcc must have been present: CI installs it
    /// with `cargo xtask setup-cuda` first, and a build without kernels fails the test). A
    /// development build filtered by ATTN_CUDA_ARCHS / ATTN_HEAD_DIMS is checked on the units
    /// it holds only; the full catalog goes through insta.
    #[test]
    fn release_resources_match_committed_snapshots() {
        let catalog: Vec<String> = attn_kernels::catalog::units(&[], &[])
            .iter()
            .map(|u| u.name())
            .collect();
        let built: Vec<&str> = attn_kernels::cubin::embedded()
            .iter()
            .filter(|c| !c.debug)
            .map(|c| c.unit)
            .collect();
        assert!(
            !built.is_empty(),
            "the kernels were not built (no nvcc at build time), so the ptxas snapshots cannot \
             be checked: run `cargo xtask setup-cuda` (installs the pinned CUDA 13.0 compiler \
             into target/cuda-venv) and rebuild"
        );
        let full = catalog.iter().all(|u| built.contains(&u.as_str()));
        let archs = nvcc::parse_archs(nvcc::DEFAULT_ARCHS);
        let collected = collect(&crate::ptxas::built_archs(Mode::Release), Mode::Release)
            .unwrap_or_else(|e| panic!("reading the embedded ptxas reports failed: {e:#}"));
        assert!(
            collected.unparsed.is_empty(),
            "ptxas printed lines the parser does not understand: {:#?}",
            collected.unparsed
        );
        let dir = workspace_dir(&crate::ptxas::workspace_root());
        let mut failures = Vec::new();
        for arch in &archs {
            let text = render(&collected, arch);
            if !full {
                // Filtered build: the committed lines of the built units must match.
                let committed = std::fs::read_to_string(file(&dir, arch)).unwrap_or_default();
                let keep = |l: &&str| l.split(" | ").next().is_some_and(|u| built.contains(&u));
                let want: Vec<&str> = body(&committed)
                    .unwrap_or("")
                    .lines()
                    .filter(keep)
                    .collect();
                let got: Vec<&str> = text.lines().filter(keep).collect();
                if want != got {
                    failures.push(format!(
                        "sm_{arch} (filtered build):\n{}",
                        line_diff(&want.join("\n"), &got.join("\n"))
                    ));
                }
                continue;
            }
            let result = std::panic::catch_unwind(|| {
                insta::with_settings!({
                    snapshot_path => "../../tests/snapshots",
                    prepend_module_to_snapshot => false,
                    omit_expression => true,
                }, {
                    insta::assert_snapshot!(name(arch), text);
                });
            });
            if result.is_err() {
                failures.push(format!("sm_{arch}"));
            }
        }
        assert!(
            failures.is_empty(),
            "ptxas release snapshot(s) changed for {}: review the diff above; if intended, \
             regenerate with {REGENERATE} and commit xtask/tests/snapshots/*.snap",
            failures.join(", ")
        );
    }
}
