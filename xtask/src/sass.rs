//! `cargo xtask sass`: the SASS of one embedded kernel, counted per loop. It disassembles the
//! cubin attn-kernels embedded (with NVIDIA's `nvdisasm`), finds the kernel's loops (a branch
//! back to a label at or before it) and prints, per loop and for the whole kernel, how many
//! instructions of each opcode it holds: the static counts behind "predict before you change"
//! (docs/PERF.md cites them, e.g. run 313's k-loops and run 321's fragment addresses).
//! Static counts, not executed ones: a loop's count times its trip count is what one pass
//! issues; `xtask profile` (ncu) measures the executed mix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use serde::Serialize;

/// Arguments of `cargo xtask sass`.
#[derive(clap::Args)]
pub struct Args {
    /// Compile unit, as `xtask ptxas` names it (e.g. `bwd_sm90a_bf16_d128`).
    #[arg(long)]
    unit: String,
    /// Kernel (extern "C" name, e.g. `attn_bwd_bf16_d128_full`).
    #[arg(long)]
    kernel: String,
    /// The debug build's cubin (`-G -lineinfo -DATTN_DEBUG`) instead of the release one.
    #[arg(long)]
    debug: bool,
    /// nvdisasm to run (default: $NVDISASM, else beside the nvcc the kernels were built with,
    /// else PATH and the CUDA homes, as `xtask sanitize` finds its tools).
    #[arg(long)]
    nvdisasm: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Opcodes to give a column each in the table (the rest are summed into `other`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "HMMA,LDSM,LDS,STS,MUFU,FFMA,FMUL,FADD,IMAD,LOP3,LEA,IADD3,BAR,REDG"
    )]
    columns: Vec<String>,
}

/// One instruction of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instr {
    /// Byte offset in the function.
    pub addr: u64,
    /// Opcode without modifiers or predicate (`LDSM` for `@P0 LDSM.16.M88.4`).
    pub opcode: String,
    /// The whole instruction text.
    pub text: String,
}

/// A loop: the instructions from a label to the branch back to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Loop {
    /// The label branched back to.
    pub label: String,
    /// Index of its first instruction in the function.
    pub first: usize,
    /// Index of its last instruction (the branch back).
    pub last: usize,
    /// Instructions per opcode in `[first, last]` (inner loops included).
    pub opcodes: BTreeMap<String, usize>,
}

impl Loop {
    /// Instructions in the loop.
    pub fn len(&self) -> usize {
        self.last + 1 - self.first
    }
}

/// The kernel's report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub unit: String,
    pub kernel: String,
    /// Instructions per opcode over the whole function.
    pub opcodes: BTreeMap<String, usize>,
    pub instructions: usize,
    /// Loops in order of their first instruction (an inner loop after the loop holding it).
    pub loops: Vec<Loop>,
}

/// The opcode of an instruction text: the first word after any predicate, up to its first dot.
pub fn opcode_of(text: &str) -> String {
    let mut words = text.split_whitespace();
    let mut w = words.next().unwrap_or("");
    if w.starts_with('@') {
        w = words.next().unwrap_or("");
    }
    w.split('.').next().unwrap_or("").to_string()
}

/// The instructions and labels of `kernel`'s function in an `nvdisasm -c` listing: from its
/// `.text.<kernel>:` line to the next section. `None` when the listing has no such function.
pub fn function(listing: &str, kernel: &str) -> Option<(Vec<Instr>, BTreeMap<String, usize>)> {
    let start = format!(".text.{kernel}:");
    let mut lines = listing.lines().skip_while(|l| l.trim_end() != start);
    lines.next()?;
    let mut instrs = Vec::new();
    let mut labels = BTreeMap::new();
    for line in lines {
        let t = line.trim();
        if t.starts_with(".section") || (t.starts_with(".text.") && t.ends_with(':')) {
            break;
        }
        if let Some(label) = t.strip_suffix(':').filter(|l| l.starts_with(".L")) {
            labels.insert(label.to_string(), instrs.len());
            continue;
        }
        // `/*0d40*/   LDSM.16.M88.4 R180, [R198+0x2000] ;`
        let Some(rest) = t.strip_prefix("/*") else {
            continue;
        };
        let Some((addr, body)) = rest.split_once("*/") else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr.trim(), 16) else {
            continue;
        };
        let text = body.trim().trim_end_matches(';').trim().to_string();
        if text.is_empty() {
            continue;
        }
        instrs.push(Instr {
            addr,
            opcode: opcode_of(&text),
            text,
        });
    }
    Some((instrs, labels))
}

/// The loops of a function: every branch to a label at or before it closes one.
pub fn loops(instrs: &[Instr], labels: &BTreeMap<String, usize>) -> Vec<Loop> {
    let mut out: Vec<Loop> = Vec::new();
    for (i, ins) in instrs.iter().enumerate() {
        if ins.opcode != "BRA" {
            continue;
        }
        let target = ins
            .text
            .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '`' | ','))
            .find(|w| w.starts_with(".L"));
        let Some(label) = target else { continue };
        let Some(&first) = labels.get(label) else {
            continue;
        };
        if first > i {
            continue;
        }
        // Several branches back to one label (a `continue`): the loop ends at the last.
        out.retain(|l| l.label != label);
        out.push(Loop {
            label: label.to_string(),
            first,
            last: i,
            opcodes: histogram(&instrs[first..=i]),
        });
    }
    out.sort_by_key(|l| (l.first, std::cmp::Reverse(l.last)));
    out
}

fn histogram(instrs: &[Instr]) -> BTreeMap<String, usize> {
    let mut h = BTreeMap::new();
    for i in instrs {
        *h.entry(i.opcode.clone()).or_insert(0) += 1;
    }
    h
}

/// The report of `kernel` in a listing.
pub fn report(listing: &str, unit: &str, kernel: &str) -> anyhow::Result<Report> {
    let Some((instrs, labels)) = function(listing, kernel) else {
        let names: Vec<&str> = listing
            .lines()
            .filter_map(|l| l.trim().strip_prefix(".text.")?.strip_suffix(':'))
            .collect();
        bail!(
            "no kernel `{kernel}` in {unit}; it has: {}",
            if names.is_empty() {
                "nothing (is this an nvdisasm -c listing?)".to_string()
            } else {
                names.join(", ")
            }
        );
    };
    Ok(Report {
        unit: unit.to_string(),
        kernel: kernel.to_string(),
        opcodes: histogram(&instrs),
        instructions: instrs.len(),
        loops: loops(&instrs, &labels),
    })
}

/// The table: one row per loop and one for the function, a column per requested opcode.
pub fn table(r: &Report, columns: &[String]) -> String {
    let mut s = format!(
        "{} / {}: {} instructions (static)\n",
        r.unit, r.kernel, r.instructions
    );
    let mut header = vec!["loop".to_string(), "range".into(), "instrs".into()];
    header.extend(columns.iter().cloned());
    header.push("other".into());
    let row = |name: &str, range: String, n: usize, h: &BTreeMap<String, usize>| {
        let mut cells = vec![name.to_string(), range, n.to_string()];
        let mut counted = 0;
        for c in columns {
            let k = h.get(c).copied().unwrap_or(0);
            counted += k;
            cells.push(k.to_string());
        }
        cells.push((n - counted).to_string());
        cells
    };
    let mut rows = vec![header];
    for l in &r.loops {
        rows.push(row(
            &l.label,
            format!("{}..{}", l.first, l.last),
            l.len(),
            &l.opcodes,
        ));
    }
    rows.push(row(
        "(function)",
        format!("0..{}", r.instructions.saturating_sub(1)),
        r.instructions,
        &r.opcodes,
    ));
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for cells in rows {
        let line: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        s.push_str(line.join("  ").trim_end());
        s.push('\n');
    }
    s
}

/// nvdisasm: the flag, then (unless `$NVDISASM` names one) beside the nvcc the kernels were
/// built with, where the PyPI wheel lands, then `sanitize::find_cuda_tool`'s search.
fn find_nvdisasm(arg: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = arg {
        return Ok(p.to_path_buf());
    }
    if std::env::var_os("NVDISASM").is_none() {
        if let Some(nvcc) = attn_kernels::cubin::nvcc_used() {
            let beside = Path::new(nvcc).with_file_name("nvdisasm");
            if beside.is_file() {
                return Ok(beside);
            }
        }
    }
    crate::sanitize::find_cuda_tool("nvdisasm", "NVDISASM", &["bin"]).context(
        "no nvdisasm beside the build's nvcc (`target/cuda-venv/bin/pip install \
         nvidia-cuda-nvdisasm` puts one there) nor elsewhere",
    )
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let cubin = attn_kernels::cubin::embedded()
        .iter()
        .find(|c| c.unit == args.unit && c.debug == args.debug)
        .with_context(|| {
            let units: Vec<&str> = attn_kernels::cubin::embedded()
                .iter()
                .filter(|c| c.debug == args.debug)
                .map(|c| c.unit)
                .collect();
            format!(
                "no {} cubin of unit `{}` in this build (units: {})",
                if args.debug { "debug" } else { "release" },
                args.unit,
                if units.is_empty() {
                    "none: built without nvcc, run `cargo xtask setup-cuda`".to_string()
                } else {
                    units.join(", ")
                }
            )
        })?;
    let nvdisasm = find_nvdisasm(args.nvdisasm.as_deref())?;
    let dir = tempfile_dir()?;
    let path = dir.join(format!("{}.cubin", args.unit));
    std::fs::write(&path, cubin.image).with_context(|| format!("writing {}", path.display()))?;
    let out = Command::new(&nvdisasm)
        .arg("-c")
        .arg(&path)
        .output()
        .with_context(|| format!("running {}", nvdisasm.display()))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        bail!(
            "{} -c failed ({}): {}",
            nvdisasm.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let listing = String::from_utf8_lossy(&out.stdout);
    let r = report(&listing, &args.unit, &args.kernel)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", table(&r, &args.columns));
    }
    Ok(())
}

/// A private directory under the system temp dir for the cubin nvdisasm reads.
fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("attn-xtask-sass-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The shape of `nvdisasm -c` output (13.x): a section line, the function's label, labels
    // and instructions with their offsets. Two nested loops: the inner one runs back to
    // .L_x_2, the outer one to .L_x_1; a forward branch does not make a loop.
    const LISTING: &str = "\t.section\t.text.other,\"ax\",@progbits\n\
.text.other:\n\
        /*0000*/                   EXIT ;\n\
\t.section\t.text.k,\"ax\",@progbits\n\
.text.k:\n\
        /*0000*/                   LDC R1, c[0x0][0x28] ;\n\
.L_x_1:\n\
        /*0010*/                   IMAD R2, R3, 0x8, R4 ;\n\
.L_x_2:\n\
        /*0020*/                   LDSM.16.M88.4 R8, [R2+0x100] ;\n\
        /*0030*/                   HMMA.16816.F32.BF16 R12, R8, R10, R12 ;\n\
        /*0040*/              @P1 BRA `(.L_x_2) ;\n\
        /*0050*/                   @!P0 BRA `(.L_x_3) ;\n\
        /*0060*/                   MUFU.EX2 R4, R4 ;\n\
.L_x_3:\n\
        /*0070*/                   BRA `(.L_x_1) ;\n\
        /*0080*/                   EXIT ;\n\
\t.section\t.text.after,\"ax\",@progbits\n\
.text.after:\n\
        /*0000*/                   EXIT ;\n";

    #[test]
    fn opcodes_drop_predicates_and_modifiers() {
        assert_eq!(opcode_of("@!P0 LDSM.16.MT88.4 R1, [R2]"), "LDSM");
        assert_eq!(opcode_of("HMMA.16816.F32.BF16 R1, R2, R3, R1"), "HMMA");
        assert_eq!(opcode_of("EXIT"), "EXIT");
    }

    #[test]
    fn the_function_is_cut_at_its_section_and_loops_nest() {
        let (instrs, labels) = function(LISTING, "k").unwrap();
        assert_eq!(instrs.len(), 9);
        assert_eq!(instrs[2].addr, 0x20);
        assert_eq!(labels[".L_x_3"], 7);
        let ls = loops(&instrs, &labels);
        let names: Vec<(&str, usize, usize)> = ls
            .iter()
            .map(|l| (l.label.as_str(), l.first, l.last))
            .collect();
        // Outer first (it starts earlier); the forward branch to .L_x_3 is no loop.
        assert_eq!(names, [(".L_x_1", 1, 7), (".L_x_2", 2, 4)]);
        assert_eq!(ls[1].opcodes["HMMA"], 1);
        assert_eq!(ls[0].opcodes["MUFU"], 1);
        assert_eq!(ls[0].opcodes["BRA"], 3);
        assert!(function(LISTING, "missing").is_none());
    }

    #[test]
    fn the_table_counts_columns_and_the_rest() {
        let r = report(LISTING, "u", "k").unwrap();
        assert_eq!(r.instructions, 9);
        let t = table(&r, &["HMMA".to_string(), "LDSM".to_string()]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("9 instructions"));
        // loop, range, instrs, HMMA, LDSM, other
        let inner: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(inner, [".L_x_2", "2..4", "3", "1", "1", "1"]);
        let whole: Vec<&str> = lines[4].split_whitespace().collect();
        assert_eq!(whole, ["(function)", "0..8", "9", "1", "1", "7"]);
    }

    #[test]
    fn a_missing_kernel_names_the_ones_there() {
        let e = report(LISTING, "u", "nope").unwrap_err().to_string();
        assert!(e.contains("other, k, after"), "{e}");
    }
}
