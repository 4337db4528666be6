//! `cargo xtask ptxas`: parses what ptxas reported (registers, barriers, shared/constant
//! memory, stack, spills) when attn-kernels' build compiled the catalog — the logs are
//! embedded with the cubins, so nothing is compiled twice — and prints a table or JSON;
//! `--check` holds the release build to the committed budget.

pub mod budget;
pub mod parse;
pub mod snapshot;

use std::path::{Path, PathBuf};

use anyhow::bail;
use serde::Serialize;

use crate::nvcc;
use parse::{Diagnostic, PtxasOutput, ResourceReport, Severity, Unparsed};

/// Arguments of `cargo xtask ptxas`.
#[derive(clap::Args)]
pub struct Args {
    /// Archs to report (comma or semicolon separated, `sm_` optional); default: every arch
    /// the build embedded (`ATTN_CUDA_ARCHS` at build time, else 80;89;90a).
    #[arg(long)]
    arch: Option<String>,
    /// Release flags (`-O3 -DNDEBUG`); the default.
    #[arg(long, conflicts_with = "debug")]
    release: bool,
    /// Debug-kernel flags (`-G -lineinfo -DATTN_DEBUG`).
    #[arg(long)]
    debug: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Fail, naming each violation, unless the release build is within the budget file.
    #[arg(long, conflicts_with = "debug")]
    check: bool,
    /// Budget file (default crates/attn-kernels/ptxas-budget.json).
    #[arg(long)]
    budget: Option<PathBuf>,
}

/// Which flag set the kernels are compiled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `RELEASE_FLAGS`.
    Release,
    /// `DEBUG_FLAGS`.
    Debug,
}

/// A parsed kernel report with the compile unit it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelReport {
    /// File name of the unit (`f16_d64.cu`).
    pub unit: String,
    /// The resources.
    #[serde(flatten)]
    pub report: ResourceReport,
}

/// What a message or an unparsed line is attached to.
#[derive(Debug, Clone, Serialize)]
pub struct Located<T> {
    /// Compile unit.
    pub unit: String,
    /// Requested arch (`90a`).
    pub arch: String,
    /// The item.
    #[serde(flatten)]
    pub item: T,
}

/// Everything one `ptxas` run found, over all units and archs.
#[derive(Debug, Clone, Serialize)]
pub struct Collected {
    /// Flag set.
    pub mode: Mode,
    /// Archs compiled.
    pub archs: Vec<String>,
    /// Kernels, sorted by (arch, unit, kernel).
    pub kernels: Vec<KernelReport>,
    /// Warnings and other compiler messages.
    pub diagnostics: Vec<Located<Diagnostic>>,
    /// Lines nobody understood (a ptxas format change, or truncated output).
    pub unparsed: Vec<Located<Unparsed>>,
}

/// The workspace root (xtask's parent directory, as built).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The default budget file.
pub fn default_budget(root: &Path) -> PathBuf {
    root.join("crates/attn-kernels/ptxas-budget.json")
}

/// The archs to report: `--arch`, else every arch this build embedded.
pub fn archs_from(arg: Option<&str>, mode: Mode) -> anyhow::Result<Vec<String>> {
    let built = built_archs(mode);
    let Some(list) = arg else {
        if built.is_empty() {
            bail!("{}", not_built(mode));
        }
        return Ok(built);
    };
    let archs = nvcc::parse_archs(list);
    if archs.is_empty() {
        bail!("no archs in `{list}`: expected e.g. 80,89,90a");
    }
    for a in &archs {
        let digits = a.trim_end_matches(['a', 'f']);
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
            bail!("`{a}` is not an arch: expected e.g. 80, 89, 90a or sm_90a");
        }
    }
    for a in &archs {
        if !built.contains(a) {
            bail!(
                "sm_{a} was not built (built: {}): rebuild with ATTN_CUDA_ARCHS including {a}",
                if built.is_empty() {
                    "none".to_string()
                } else {
                    built.join(", ")
                }
            );
        }
    }
    Ok(archs)
}

/// The archs this build embedded cubins for, in `mode`.
pub fn built_archs(mode: Mode) -> Vec<String> {
    let mut archs: Vec<String> = attn_kernels::cubin::embedded()
        .iter()
        .filter(|c| c.debug == (mode == Mode::Debug))
        .map(|c| c.arch.to_string())
        .collect();
    archs.sort();
    archs.dedup();
    archs
}

fn not_built(mode: Mode) -> String {
    match mode {
        Mode::Release if attn_kernels::cubin::nvcc_used().is_none() => {
            "the kernels were not built (no nvcc at build time): run `cargo xtask setup-cuda`, then rebuild xtask".into()
        }
        Mode::Release => "this build embedded no release cubins".into(),
        Mode::Debug => "no debug cubins: build xtask with `--features debug-kernels`".into(),
    }
}

/// Gathers the reports ptxas printed when attn-kernels' build compiled the catalog (the
/// embedded logs: nothing is compiled twice) for `archs` in `mode`.
pub fn collect(archs: &[String], mode: Mode) -> anyhow::Result<Collected> {
    let outputs: Vec<(String, String, PtxasOutput)> = attn_kernels::cubin::embedded()
        .iter()
        .filter(|c| c.debug == (mode == Mode::Debug) && archs.iter().any(|a| a == c.arch))
        .map(|c| {
            (
                c.unit.to_string(),
                c.arch.to_string(),
                parse::parse(c.ptxas_log),
            )
        })
        .collect();
    if outputs.is_empty() {
        bail!("{}", not_built(mode));
    }
    let mut collected = Collected {
        mode,
        archs: archs.to_vec(),
        kernels: Vec::new(),
        diagnostics: Vec::new(),
        unparsed: Vec::new(),
    };
    for (unit, arch, out) in outputs {
        for report in out.reports {
            if report.arch != format!("sm_{arch}") {
                collected.unparsed.push(Located {
                    unit: unit.clone(),
                    arch: arch.clone(),
                    item: Unparsed {
                        line: 0,
                        text: report.symbol.clone(),
                        reason: format!(
                            "ptxas compiled for {} but sm_{arch} was asked",
                            report.arch
                        ),
                    },
                });
            }
            collected.kernels.push(KernelReport {
                unit: unit.clone(),
                report,
            });
        }
        collected
            .diagnostics
            .extend(out.diagnostics.into_iter().map(|item| Located {
                unit: unit.clone(),
                arch: arch.clone(),
                item,
            }));
        collected
            .unparsed
            .extend(out.unparsed.into_iter().map(|item| Located {
                unit: unit.clone(),
                arch: arch.clone(),
                item,
            }));
    }
    collected.kernels.sort_by(|a, b| {
        (&a.report.arch, &a.unit, &a.report.kernel).cmp(&(
            &b.report.arch,
            &b.unit,
            &b.report.kernel,
        ))
    });
    Ok(collected)
}

/// The human-readable table.
pub fn render_table(collected: &Collected) -> String {
    let header = [
        "arch", "unit", "kernel", "regs", "bars", "smem", "cmem0", "stack", "spill st", "spill ld",
    ];
    let rows: Vec<[String; 10]> = collected
        .kernels
        .iter()
        .map(|k| {
            let r = &k.report;
            [
                r.arch.clone(),
                k.unit.clone(),
                r.kernel.clone(),
                r.registers.to_string(),
                r.barriers.to_string(),
                r.smem.to_string(),
                r.cmem.get(&0).map_or("-".to_string(), u64::to_string),
                r.stack.to_string(),
                r.spill_stores.to_string(),
                r.spill_loads.to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        let text: Vec<String> = cells
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i < 3 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        out.push_str(text.join("  ").trim_end());
        out.push('\n');
    };
    line(&header.map(String::from));
    for row in &rows {
        line(row);
    }
    out
}

/// Runs the budget check; `Ok` with the stale rules, or an error naming every violation.
pub fn check_budget(collected: &Collected, budget_path: &Path) -> anyhow::Result<Vec<String>> {
    let budget = budget::Budget::load(budget_path)?;
    let (mut violations, stale) = budget.check(&collected.kernels)?;
    for u in &collected.unparsed {
        violations.push(budget::Violation {
            kernel: "(ptxas output)".into(),
            arch: format!("sm_{}", u.arch),
            unit: u.unit.clone(),
            what: format!(
                "line {} not understood ({}): `{}` — the check cannot vouch for what it cannot read",
                u.item.line, u.item.reason, u.item.text
            ),
        });
    }
    if !violations.is_empty() {
        let list: Vec<String> = violations.iter().map(|v| format!("  - {v}")).collect();
        bail!(
            "{} ptxas budget violation(s) against {}:\n{}",
            violations.len(),
            budget_path.display(),
            list.join("\n")
        );
    }
    Ok(stale)
}

/// `cargo xtask ptxas`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let root = workspace_root();
    let mode = if args.debug {
        Mode::Debug
    } else {
        Mode::Release
    };
    let archs = archs_from(args.arch.as_deref(), mode)?;
    let collected = collect(&archs, mode)?;

    if args.json {
        println!("{}", serde_json::to_string_pretty(&collected)?);
    } else {
        print!("{}", render_table(&collected));
        let warnings = collected
            .diagnostics
            .iter()
            .filter(|d| d.item.severity != Severity::Info)
            .count();
        if warnings > 0 {
            eprintln!("{warnings} compiler warning(s):");
            for d in &collected.diagnostics {
                eprintln!("  [{} sm_{}] {}", d.unit, d.arch, d.item.text);
            }
        }
    }
    for u in &collected.unparsed {
        eprintln!(
            "warning: {} sm_{} line {}: {} — `{}`",
            u.unit, u.arch, u.item.line, u.item.reason, u.item.text
        );
    }
    if args.check {
        let budget_path = args.budget.unwrap_or_else(|| default_budget(&root));
        let stale = check_budget(&collected, &budget_path)?;
        for s in stale {
            eprintln!("note: budget rule `{s}` matches no kernel (stale?)");
        }
        eprintln!(
            "ptxas budget: {} kernel report(s) within {}",
            collected.kernels.len(),
            budget_path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archs_are_validated() {
        let err = archs_from(Some("80,hopper"), Mode::Release)
            .expect_err("bad arch")
            .to_string();
        assert!(err.contains("`hopper` is not an arch"), "{err}");
        assert!(archs_from(Some(" , "), Mode::Release).is_err());
        // An arch the build did not embed is named as such.
        let err = archs_from(Some("75"), Mode::Release)
            .expect_err("not built")
            .to_string();
        assert!(err.contains("sm_75 was not built"), "{err}");
        if !built_archs(Mode::Release).is_empty() {
            assert_eq!(
                archs_from(None, Mode::Release).unwrap(),
                built_archs(Mode::Release)
            );
        }
    }

    #[test]
    fn table_lists_every_kernel_with_aligned_columns() {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ptxas/release_sm80.txt"),
        )
        .expect("fixture");
        let kernels = parse::parse(&text)
            .reports
            .into_iter()
            .map(|report| KernelReport {
                unit: "unit.cu".into(),
                report,
            })
            .collect();
        let collected = Collected {
            mode: Mode::Release,
            archs: vec!["80".into()],
            kernels,
            diagnostics: vec![],
            unparsed: vec![],
        };
        let table = render_table(&collected);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("arch"));
        assert!(table.contains("33024"));
        assert!(lines[1..].iter().all(|l| l.contains(" 380 ")));
    }
}
