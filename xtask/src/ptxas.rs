//! `cargo xtask ptxas`: compiles every kernel unit for every arch with `-Xptxas=-v`, parses
//! what ptxas reports (registers, barriers, shared/constant memory, stack, spills) and prints a
//! table or JSON; `--check` holds the release build to the committed budget.

pub mod budget;
pub mod parse;
pub mod snapshot;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use rayon::prelude::*;
use serde::Serialize;

use crate::nvcc;
use parse::{Diagnostic, PtxasOutput, ResourceReport, Severity, Unparsed};

/// Arguments of `cargo xtask ptxas`.
#[derive(clap::Args)]
pub struct Args {
    /// Archs to compile for (comma or semicolon separated, `sm_` optional); default
    /// `ATTN_CUDA_ARCHS`, else 80;89;90a.
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
    /// Recompile even when a cached report for the same sources, flags and nvcc exists.
    #[arg(long)]
    no_cache: bool,
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

impl Mode {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Mode::Release => &nvcc::RELEASE_FLAGS,
            Mode::Debug => &nvcc::DEBUG_FLAGS,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Mode::Release => "release",
            Mode::Debug => "debug",
        }
    }
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

/// Where the kernels live and where work files go.
#[derive(Debug, Clone)]
pub struct Paths {
    /// `crates/attn-kernels/kernels` (include dir; units under `units/`).
    pub kernels_dir: PathBuf,
    /// Scratch dir for cubins and the report cache (`target/ptxas`).
    pub work_dir: PathBuf,
}

impl Paths {
    /// The paths inside the workspace.
    pub fn workspace(root: &Path) -> Self {
        Paths {
            kernels_dir: root.join("crates/attn-kernels/kernels"),
            work_dir: root.join("target/ptxas"),
        }
    }
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

/// The archs to compile: `--arch`, else `ATTN_CUDA_ARCHS`, else the default list.
pub fn archs_from(arg: Option<&str>) -> anyhow::Result<Vec<String>> {
    let env = std::env::var("ATTN_CUDA_ARCHS").ok();
    let list = arg.or(env.as_deref()).unwrap_or(nvcc::DEFAULT_ARCHS);
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
    Ok(archs)
}

/// Finds nvcc or says how to get it (without installing anything: for the gate on a GPU
/// host, which has its own toolkit and no network).
pub fn require_nvcc(root: &Path) -> anyhow::Result<PathBuf> {
    nvcc::find_nvcc(root).ok_or_else(|| {
        anyhow::anyhow!(
            "nvcc not found (looked at NVCC, CUDA_HOME/CUDA_PATH, PATH, /usr/local/cuda and \
             target/cuda-venv): run `cargo xtask setup-cuda` to install the pinned CUDA 13.0 \
             compiler"
        )
    })
}

/// The compile units (`units/*.cu`), sorted by name.
pub fn units(kernels_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let dir = kernels_dir.join("units");
    let mut units: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing kernel units in {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    units.sort();
    if units.is_empty() {
        bail!("no kernel units (*.cu) in {}", dir.display());
    }
    Ok(units)
}

/// Hash of every source file under the kernels dir, so an edited header invalidates the cache.
fn hash_sources(dir: &Path, hasher: &mut DefaultHasher) -> anyhow::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            hash_sources(&path, hasher)?;
        } else {
            path.hash(hasher);
            std::fs::read(&path)
                .with_context(|| format!("reading {}", path.display()))?
                .hash(hasher);
        }
    }
    Ok(())
}

/// Compiles one unit for one arch and returns ptxas's stderr (from the cache when the
/// sources, flags, arch and nvcc binary are unchanged).
fn compile(
    nvcc_path: &Path,
    paths: &Paths,
    sources_hash: u64,
    unit: &Path,
    arch: &str,
    mode: Mode,
    use_cache: bool,
) -> anyhow::Result<String> {
    let stem = unit
        .file_stem()
        .and_then(|s| s.to_str())
        .context("unit file name is not UTF-8")?;
    let mut args: Vec<String> = vec!["-cubin".into()];
    args.extend(nvcc::COMMON_FLAGS.iter().map(|s| s.to_string()));
    args.extend(mode.flags().iter().map(|s| s.to_string()));
    args.extend(["-gencode".to_string(), nvcc::gencode(arch)]);
    args.extend(["-I".to_string(), paths.kernels_dir.display().to_string()]);

    let mut hasher = DefaultHasher::new();
    sources_hash.hash(&mut hasher);
    (nvcc_path, &args, unit).hash(&mut hasher);
    if let Ok(meta) = std::fs::metadata(nvcc_path) {
        (meta.len(), meta.modified().ok()).hash(&mut hasher);
    }
    let cache = paths.work_dir.join("cache").join(format!(
        "{stem}-sm_{arch}-{}-{:016x}.txt",
        mode.name(),
        hasher.finish()
    ));
    if use_cache {
        if let Ok(text) = std::fs::read_to_string(&cache) {
            return Ok(text);
        }
    }

    let cubin_dir = paths.work_dir.join(mode.name()).join(format!("sm_{arch}"));
    std::fs::create_dir_all(&cubin_dir)
        .with_context(|| format!("creating {}", cubin_dir.display()))?;
    let output = Command::new(nvcc_path)
        .args(&args)
        .arg(unit)
        .arg("-o")
        .arg(cubin_dir.join(format!("{stem}.cubin")))
        .output()
        .with_context(|| format!("running {}", nvcc_path.display()))?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        let parsed = parse::parse(&stderr);
        let errors: Vec<&str> = parsed
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| d.text.as_str())
            .collect();
        let detail = if errors.is_empty() {
            stderr
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            errors.join("\n")
        };
        bail!(
            "nvcc failed on {} for sm_{arch} ({}):\n{detail}",
            unit.display(),
            output.status
        );
    }
    if let Some(parent) = cache.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(&cache, &stderr).with_context(|| format!("writing {}", cache.display()))?;
    Ok(stderr)
}

/// Compiles every unit for every arch (in parallel) and gathers the reports.
pub fn collect(
    nvcc_path: &Path,
    paths: &Paths,
    archs: &[String],
    mode: Mode,
    use_cache: bool,
) -> anyhow::Result<Collected> {
    let units = units(&paths.kernels_dir)?;
    let mut hasher = DefaultHasher::new();
    hash_sources(&paths.kernels_dir, &mut hasher)?;
    let sources_hash = hasher.finish();
    let jobs: Vec<(&PathBuf, &String)> = archs
        .iter()
        .flat_map(|a| units.iter().map(move |u| (u, a)))
        .collect();
    let outputs: Vec<(String, String, PtxasOutput)> = jobs
        .par_iter()
        .map(|(unit, arch)| {
            let text = compile(nvcc_path, paths, sources_hash, unit, arch, mode, use_cache)?;
            let name = unit
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            Ok((name, arch.to_string(), parse::parse(&text)))
        })
        .collect::<anyhow::Result<_>>()?;

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
    let archs = archs_from(args.arch.as_deref())?;
    let nvcc_path = crate::cuda::ensure_nvcc(&root)?;
    let paths = Paths::workspace(&root);
    let collected = collect(&nvcc_path, &paths, &archs, mode, !args.no_cache)?;

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
        assert_eq!(
            archs_from(Some("80,sm_89;90a")).expect("archs"),
            ["80", "89", "90a"]
        );
        let err = archs_from(Some("80,hopper"))
            .expect_err("bad arch")
            .to_string();
        assert!(err.contains("`hopper` is not an arch"), "{err}");
        assert!(archs_from(Some(" , ")).is_err());
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
