//! Parser of the resource lines that `nvcc -Xptxas=-v` prints on stderr.
//!
//! ptxas prints, per entry function (kernel):
//!
//! ```text
//! ptxas info    : Compiling entry function 'attn_fwd_f16_d128' for 'sm_80'
//! ptxas info    : Function properties for attn_fwd_f16_d128
//!     64 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//! ptxas info    : Used 32 registers, used 1 barriers, 64 bytes cumulative stack size, 33024 bytes smem, 380 bytes cmem[0]
//! ptxas info    : Compile time = 21.956 ms
//! ```
//!
//! sm_90a prints no `cmem`; `-G` builds add "Function properties" blocks for non-inlined device
//! functions that belong to no entry; the front end, nvcc and ptxas interleave warnings. Every
//! line ends up somewhere: in a [`ResourceReport`], a [`DeviceFunction`], a [`Diagnostic`], or
//! the [`Unparsed`] list with the reason — nothing is dropped silently, so a format change in a
//! future ptxas shows up as unparsed lines instead of a quietly wrong budget check.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// Resources of one kernel (entry function) for one arch, as ptxas reports them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceReport {
    /// Demangled name (`attn_fwd<64, 64>(...)`), or the symbol itself when it is not mangled.
    pub kernel: String,
    /// The symbol as ptxas prints it (what `cuModuleGetFunction` takes).
    pub symbol: String,
    /// Target, as ptxas prints it (`sm_90a`).
    pub arch: String,
    /// Registers per thread.
    pub registers: u32,
    /// Named barriers used (`bar.sync` ids); 0 when ptxas omits the field.
    pub barriers: u32,
    /// Static shared memory per block in bytes (dynamic shared memory is not known at compile
    /// time and is not included).
    pub smem: u64,
    /// Constant memory per bank in bytes (`cmem[0]` holds the kernel parameters). Empty on
    /// targets where ptxas prints none (sm_90a).
    pub cmem: BTreeMap<u32, u64>,
    /// Stack bytes per thread: the larger of the entry's own frame and the cumulative stack
    /// size over its call tree.
    pub stack: u64,
    /// Bytes of register spill stores to local memory.
    pub spill_stores: u64,
    /// Bytes of register spill loads from local memory.
    pub spill_loads: u64,
}

/// A non-entry device function that ptxas compiled on its own (not inlined; `-G` builds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFunction {
    /// Demangled name.
    pub name: String,
    /// The symbol as printed.
    pub symbol: String,
    /// Stack frame bytes.
    pub stack_frame: u64,
    /// Spill stores bytes.
    pub spill_stores: u64,
    /// Spill loads bytes.
    pub spill_loads: u64,
}

/// How serious a compiler message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Informational (e.g. "Overriding maximum register limit").
    Info,
    /// A warning from the front end, nvcc or ptxas.
    Warning,
    /// An error.
    Error,
}

/// A compiler message kept verbatim (multi-line front-end messages are joined with `\n`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// 1-based line of the first line of the message.
    pub line: usize,
    /// Severity.
    pub severity: Severity,
    /// The text.
    pub text: String,
}

/// A line (or an entry) the parser could not account for, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unparsed {
    /// 1-based line number.
    pub line: usize,
    /// The line as printed.
    pub text: String,
    /// Why it was not understood.
    pub reason: String,
}

/// Everything one compile printed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtxasOutput {
    /// One report per complete entry function, in the order ptxas printed them.
    pub reports: Vec<ResourceReport>,
    /// Non-entry device functions.
    pub device_functions: Vec<DeviceFunction>,
    /// Warnings and other messages.
    pub diagnostics: Vec<Diagnostic>,
    /// Lines and incomplete entries that were not understood.
    pub unparsed: Vec<Unparsed>,
}

/// Demangles an Itanium C++ symbol (`_Z…`); anything else, or a symbol the demangler rejects,
/// comes back unchanged.
pub fn demangle(symbol: &str) -> String {
    if !symbol.starts_with("_Z") {
        return symbol.to_string();
    }
    cpp_demangle::Symbol::new(symbol)
        .ok()
        .and_then(|s| s.demangle().ok())
        .unwrap_or_else(|| symbol.to_string())
}

static COMPILING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^ptxas info\s*: Compiling entry function '([^']+)' for '([^']+)'$")
        .expect("valid regex")
});
static PROPERTIES: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^ptxas info\s*: Function properties for (\S+)$").expect("valid regex")
});
static FRAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s+(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads$")
        .expect("valid regex")
});
static USED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^ptxas info\s*: (Used \d+ registers.*)$").expect("valid regex"));
static MODULE_MEMORY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^ptxas info\s*: \d+ bytes gmem(, \d+ bytes cmem\[\d+\])*$").expect("valid regex")
});
static COMPILE_TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^ptxas info\s*: Compile time = [0-9.]+ ms$").expect("valid regex")
});
static PTXAS_MESSAGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(ptxas|nvcc|nvlink|fatbinary) (info|warning|error|fatal)\s*: (.*)$")
        .expect("valid regex")
});
static FRONT_END: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^.+\(\d+\): (warning|error|catastrophic error|remark)\b").expect("valid regex")
});

/// Known informational ptxas lines that carry no resource data but are worth keeping.
const INFO_PREFIXES: [&str; 2] = [
    "Overriding maximum register limit",
    "Potential Performance Loss",
];

#[derive(Default)]
struct Entry {
    symbol: String,
    arch: String,
    line: usize,
    frame: Option<(u64, u64, u64)>,
    used: Option<UsedLine>,
}

#[derive(Default)]
struct UsedLine {
    registers: u32,
    barriers: u32,
    cumulative_stack: u64,
    smem: u64,
    cmem: BTreeMap<u32, u64>,
}

/// Parses the `Used N registers, …` fields; unknown fields are returned as errors by name.
fn parse_used(fields: &str) -> Result<UsedLine, String> {
    static REGS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^Used (\d+) registers$").expect("valid regex"));
    static BARRIERS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^used (\d+) barriers$").expect("valid regex"));
    static STACK: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^(\d+) bytes cumulative stack size$").expect("valid regex"));
    static SMEM: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^(\d+) bytes smem$").expect("valid regex"));
    static CMEM: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^(\d+) bytes cmem\[(\d+)\]$").expect("valid regex"));

    let num = |s: &str| s.parse::<u64>().map_err(|e| format!("number `{s}`: {e}"));
    let mut used = UsedLine::default();
    let mut saw_registers = false;
    for field in fields.split(", ") {
        if let Some(c) = REGS.captures(field) {
            used.registers = u32::try_from(num(&c[1])?).map_err(|e| e.to_string())?;
            saw_registers = true;
        } else if let Some(c) = BARRIERS.captures(field) {
            used.barriers = u32::try_from(num(&c[1])?).map_err(|e| e.to_string())?;
        } else if let Some(c) = STACK.captures(field) {
            used.cumulative_stack = num(&c[1])?;
        } else if let Some(c) = SMEM.captures(field) {
            used.smem = num(&c[1])?;
        } else if let Some(c) = CMEM.captures(field) {
            let bank = u32::try_from(num(&c[2])?).map_err(|e| e.to_string())?;
            used.cmem.insert(bank, num(&c[1])?);
        } else {
            return Err(format!(
                "unknown or truncated field `{field}` in a resource line"
            ));
        }
    }
    if saw_registers {
        Ok(used)
    } else {
        Err("resource line without a register count".to_string())
    }
}

fn parse_frame(c: &regex::Captures<'_>) -> Option<(u64, u64, u64)> {
    Some((c[1].parse().ok()?, c[2].parse().ok()?, c[3].parse().ok()?))
}

/// What the previous line opened, which decides how an indented line is read.
enum Expect {
    Nothing,
    /// A `Function properties for SYMBOL` line waits for its stack-frame line.
    Frame {
        symbol: String,
        line: usize,
    },
    /// A front-end diagnostic (index into `diagnostics`) takes continuation lines.
    Continuation(usize),
}

/// Parses everything one `nvcc -Xptxas=-v` run printed on stderr. Never fails: whatever is
/// not understood lands in [`PtxasOutput::unparsed`].
pub fn parse(text: &str) -> PtxasOutput {
    let mut out = PtxasOutput::default();
    let mut entry: Option<Entry> = None;
    let mut expect = Expect::Nothing;

    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = raw.trim_end();

        // A pending properties header must be followed by its frame line.
        if let Expect::Frame {
            symbol,
            line: header,
        } = &expect
        {
            if let Some(c) = FRAME.captures(line) {
                match parse_frame(&c) {
                    Some(frame) => match entry.as_mut() {
                        Some(e) if e.symbol == *symbol && e.frame.is_none() => {
                            e.frame = Some(frame)
                        }
                        _ => out.device_functions.push(DeviceFunction {
                            name: demangle(symbol),
                            symbol: symbol.clone(),
                            stack_frame: frame.0,
                            spill_stores: frame.1,
                            spill_loads: frame.2,
                        }),
                    },
                    None => out.unparsed.push(Unparsed {
                        line: line_no,
                        text: raw.to_string(),
                        reason: "number out of range in a stack-frame line".to_string(),
                    }),
                }
                expect = Expect::Nothing;
                continue;
            }
            out.unparsed.push(Unparsed {
                line: *header,
                text: format!("Function properties for {symbol}"),
                reason:
                    "properties header not followed by its stack-frame line (truncated output?)"
                        .to_string(),
            });
            expect = Expect::Nothing;
        }

        if line.is_empty() {
            expect = Expect::Nothing;
            continue;
        }
        if let Expect::Continuation(i) = expect {
            if raw.starts_with(char::is_whitespace) || line.starts_with("detected during") {
                if let Some(d) = out.diagnostics.get_mut(i) {
                    d.text.push('\n');
                    d.text.push_str(line);
                }
                continue;
            }
            expect = Expect::Nothing;
        }

        if let Some(c) = COMPILING.captures(line) {
            finish_entry(&mut out, entry.take());
            entry = Some(Entry {
                symbol: c[1].to_string(),
                arch: c[2].to_string(),
                line: line_no,
                ..Entry::default()
            });
        } else if let Some(c) = PROPERTIES.captures(line) {
            expect = Expect::Frame {
                symbol: c[1].to_string(),
                line: line_no,
            };
        } else if let Some(c) = USED.captures(line) {
            match (entry.as_mut(), parse_used(&c[1])) {
                (Some(e), Ok(used)) if e.used.is_none() => e.used = Some(used),
                (Some(_), Ok(_)) => out.unparsed.push(Unparsed {
                    line: line_no,
                    text: raw.to_string(),
                    reason: "second resource line for one entry function".to_string(),
                }),
                (None, Ok(_)) => out.unparsed.push(Unparsed {
                    line: line_no,
                    text: raw.to_string(),
                    reason: "resource line outside any `Compiling entry function`".to_string(),
                }),
                (_, Err(reason)) => out.unparsed.push(Unparsed {
                    line: line_no,
                    text: raw.to_string(),
                    reason,
                }),
            }
        } else if MODULE_MEMORY.is_match(line) || COMPILE_TIME.is_match(line) {
            // Module-level globals and timings: known, no per-kernel resource data.
        } else if let Some(c) = PTXAS_MESSAGE.captures(line) {
            let severity = match &c[2] {
                "warning" => Severity::Warning,
                "error" | "fatal" => Severity::Error,
                _ => Severity::Info,
            };
            if severity == Severity::Info && !INFO_PREFIXES.iter().any(|p| c[3].starts_with(p)) {
                out.unparsed.push(Unparsed {
                    line: line_no,
                    text: raw.to_string(),
                    reason: "unknown info line".to_string(),
                });
            } else {
                out.diagnostics.push(Diagnostic {
                    line: line_no,
                    severity,
                    text: line.to_string(),
                });
            }
        } else if let Some(c) = FRONT_END.captures(line) {
            let severity = match &c[1] {
                "warning" => Severity::Warning,
                "remark" => Severity::Info,
                _ => Severity::Error,
            };
            out.diagnostics.push(Diagnostic {
                line: line_no,
                severity,
                text: line.to_string(),
            });
            expect = Expect::Continuation(out.diagnostics.len() - 1);
        } else if line.starts_with("Remark: ") || line.contains(" detected in the compilation of ")
        {
            out.diagnostics.push(Diagnostic {
                line: line_no,
                severity: Severity::Info,
                text: line.to_string(),
            });
        } else {
            out.unparsed.push(Unparsed {
                line: line_no,
                text: raw.to_string(),
                reason: "unrecognized line".to_string(),
            });
        }
    }
    if let Expect::Frame { symbol, line } = expect {
        out.unparsed.push(Unparsed {
            line,
            text: format!("Function properties for {symbol}"),
            reason: "output ends before the stack-frame line (truncated?)".to_string(),
        });
    }
    finish_entry(&mut out, entry);
    out
}

/// Turns a finished entry into a report, or into an `unparsed` record naming what is missing.
fn finish_entry(out: &mut PtxasOutput, entry: Option<Entry>) {
    let Some(e) = entry else { return };
    match (e.frame, e.used) {
        (Some((frame, spill_stores, spill_loads)), Some(used)) => {
            out.reports.push(ResourceReport {
                kernel: demangle(&e.symbol),
                symbol: e.symbol,
                arch: e.arch,
                registers: used.registers,
                barriers: used.barriers,
                smem: used.smem,
                cmem: used.cmem,
                stack: frame.max(used.cumulative_stack),
                spill_stores,
                spill_loads,
            });
        }
        (frame, used) => {
            let missing = match (frame.is_none(), used.is_none()) {
                (true, true) => "its stack/spill line and its `Used … registers` line",
                (true, false) => "its stack/spill line",
                _ => "its `Used … registers` line",
            };
            out.unparsed.push(Unparsed {
                line: e.line,
                text: format!("Compiling entry function '{}' for '{}'", e.symbol, e.arch),
                reason: format!("entry function is missing {missing} (truncated output?)"),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/ptxas")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
    }

    fn by_symbol<'a>(out: &'a PtxasOutput, symbol: &str) -> &'a ResourceReport {
        out.reports
            .iter()
            .find(|r| r.symbol == symbol)
            .unwrap_or_else(|| panic!("no report for {symbol}: {out:#?}"))
    }

    const TEMPLATE: &str = "_Z8attn_fwdILi64ELi64EEvPK6__halfS2_PS0_i";

    #[test]
    fn release_sm80_three_kernels_with_cmem() {
        let out = parse(&fixture("release_sm80.txt"));
        assert!(out.unparsed.is_empty(), "{:#?}", out.unparsed);
        assert_eq!(out.reports.len(), 3);
        let d128 = by_symbol(&out, "attn_fwd_f16_d128");
        assert_eq!(d128.arch, "sm_80");
        assert_eq!(
            (d128.registers, d128.barriers, d128.smem, d128.stack),
            (32, 1, 33024, 64)
        );
        assert_eq!(d128.cmem, BTreeMap::from([(0, 380)]));
        let dyn_kernel = by_symbol(&out, "attn_fwd_f16_d64_dyn");
        assert_eq!(
            (dyn_kernel.registers, dyn_kernel.smem, dyn_kernel.stack),
            (72, 0, 0)
        );
        let template = by_symbol(&out, TEMPLATE);
        assert_eq!(template.smem, 16640);
    }

    #[test]
    fn mangled_template_names_are_demangled() {
        let out = parse(&fixture("release_sm89.txt"));
        let template = by_symbol(&out, TEMPLATE);
        assert_eq!(
            template.kernel,
            "void attn_fwd<64, 64>(__half const*, __half const*, __half*, int)"
        );
        assert_eq!(
            by_symbol(&out, "attn_fwd_f16_d128").kernel,
            "attn_fwd_f16_d128"
        );
        assert_eq!(demangle("not_mangled"), "not_mangled");
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
    }

    #[test]
    fn sm90a_prints_no_cmem() {
        let out = parse(&fixture("release_sm90a.txt"));
        assert!(out.unparsed.is_empty(), "{:#?}", out.unparsed);
        assert_eq!(out.reports.len(), 3);
        for r in &out.reports {
            assert_eq!(r.arch, "sm_90a");
            assert!(r.cmem.is_empty(), "{r:?}");
        }
        assert_eq!(by_symbol(&out, "attn_fwd_f16_d128").smem, 33024);
    }

    #[test]
    fn spills_and_interleaved_warnings() {
        let out = parse(&fixture("spills_warnings_sm89.txt"));
        assert!(out.unparsed.is_empty(), "{:#?}", out.unparsed);
        assert_eq!(out.reports.len(), 3);
        let dyn_kernel = by_symbol(&out, "attn_fwd_f16_d64_dyn");
        assert_eq!(
            (
                dyn_kernel.registers,
                dyn_kernel.spill_stores,
                dyn_kernel.spill_loads,
                dyn_kernel.stack
            ),
            (24, 508, 508, 328)
        );
        let d128 = by_symbol(&out, "attn_fwd_f16_d128");
        assert_eq!((d128.spill_stores, d128.spill_loads), (160, 152));
        let warnings: Vec<_> = out
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
            .collect();
        // One front-end block, the register lower bound, three spill warnings.
        assert_eq!(warnings.len(), 5, "{warnings:#?}");
        let front_end = &warnings[0];
        assert!(front_end.text.contains("#177-D"));
        assert!(front_end.text.contains("detected during instantiation"));
        assert!(out
            .diagnostics
            .iter()
            .any(|d| d.severity == Severity::Info && d.text.contains("Overriding maximum")));
    }

    #[test]
    fn debug_build_device_functions_are_not_kernels() {
        let out = parse(&fixture("debug_sm80.txt"));
        assert!(out.unparsed.is_empty(), "{:#?}", out.unparsed);
        assert_eq!(out.reports.len(), 3);
        assert_eq!(out.device_functions.len(), 4);
        let body = &out.device_functions[0];
        assert!(
            body.name.starts_with("void attn_body<128, 64>"),
            "{}",
            body.name
        );
        assert_eq!((body.stack_frame, body.spill_stores), (144, 80));
        // The entry's stack is its cumulative stack (24-byte frame, 176 cumulative).
        let d128 = by_symbol(&out, "attn_fwd_f16_d128");
        assert_eq!(
            (d128.registers, d128.stack, d128.spill_stores),
            (42, 176, 0)
        );
        assert_eq!(
            out.diagnostics
                .iter()
                .filter(|d| d.severity == Severity::Warning)
                .count(),
            2
        );
    }

    #[test]
    fn barrier_counts_and_module_globals() {
        for name in ["barriers_globals_sm80.txt", "barriers_globals_sm90a.txt"] {
            let out = parse(&fixture(name));
            assert!(out.unparsed.is_empty(), "{name}: {:#?}", out.unparsed);
            assert_eq!(by_symbol(&out, "no_barrier").barriers, 0);
            let named = by_symbol(&out, "named_barriers");
            assert_eq!((named.barriers, named.smem), (4, 1024));
        }
    }

    #[test]
    fn truncated_output_is_reported() {
        let text = fixture("release_sm80.txt");
        // Cut inside the second kernel's resource line.
        let cut = text
            .find("Used 32 registers, used 1 barriers, 64 bytes cumul")
            .expect("line");
        let out = parse(&text[..cut + 40]);
        assert_eq!(out.reports.len(), 1);
        assert!(
            out.unparsed
                .iter()
                .any(|u| u.reason.contains("unknown or truncated field")),
            "{:#?}",
            out.unparsed
        );
        assert!(
            out.unparsed
                .iter()
                .any(|u| u.reason.contains("missing its `Used")),
            "{:#?}",
            out.unparsed
        );

        let cut = text.find("    64 bytes stack frame").expect("frame line");
        let out = parse(&text[..cut]);
        assert!(out
            .unparsed
            .iter()
            .any(|u| u.reason.contains("stack-frame")));
    }

    #[test]
    fn unknown_lines_are_kept_with_a_reason() {
        let text = "ptxas info    : Something new in CUDA 14\nrandom junk\n\
                    ptxas info    : Used 10 registers, 12 bytes lmem\n";
        let out = parse(text);
        let reasons: Vec<_> = out
            .unparsed
            .iter()
            .map(|u| (u.line, u.reason.as_str()))
            .collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert_eq!(reasons[0], (1, "unknown info line"));
        assert_eq!(reasons[1], (2, "unrecognized line"));
        assert!(reasons[2].1.contains("`12 bytes lmem`"));
    }

    #[test]
    fn compile_errors_are_diagnostics() {
        let text = "bad.cu(1): error: identifier \"undefined_thing\" is undefined\n  \
                    o[0] = undefined_thing;\n         ^\n\n\
                    1 error detected in the compilation of \"bad.cu\".\n";
        let out = parse(text);
        assert!(out.unparsed.is_empty(), "{:#?}", out.unparsed);
        assert_eq!(out.diagnostics[0].severity, Severity::Error);
        assert!(out.diagnostics[0].text.contains("undefined_thing;"));
    }

    proptest::proptest! {
        #[test]
        fn junk_never_panics_and_every_line_is_accounted(lines in proptest::collection::vec(
            proptest::prop_oneof![
                "[ -~]{0,80}",
                proptest::strategy::Just("ptxas info    : Used 1 registers".to_string()),
                proptest::strategy::Just(
                    "ptxas info    : Compiling entry function 'k' for 'sm_80'".to_string()),
                proptest::strategy::Just("ptxas info    : Function properties for k".to_string()),
                proptest::strategy::Just(
                    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads".to_string()),
                "ptxas info    : Used [0-9]{1,25} registers(, [ -~]{0,20})?",
            ], 0..40)) {
            let text = lines.join("\n");
            let out = parse(&text);
            let known = |l: &str| {
                [&*COMPILING, &*PROPERTIES, &*FRAME, &*USED, &*MODULE_MEMORY, &*COMPILE_TIME,
                 &*PTXAS_MESSAGE, &*FRONT_END].iter().any(|re| re.is_match(l))
                    || l.starts_with("Remark: ")
                    || l.contains(" detected in the compilation of ")
            };
            // A line that matches no known shape and is not an indented continuation must be
            // reported by its line number.
            for (i, l) in lines.iter().enumerate() {
                let l = l.trim_end();
                if !l.is_empty() && !l.starts_with(char::is_whitespace) && !known(l) {
                    proptest::prop_assert!(
                        out.unparsed.iter().any(|u| u.line == i + 1),
                        "line {} `{}` was dropped: {:#?}", i + 1, l, out
                    );
                }
            }
            let entries = lines.iter().filter(|l| COMPILING.is_match(l.trim_end())).count();
            proptest::prop_assert!(out.reports.len() <= entries);
        }
    }
}
