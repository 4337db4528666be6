//! `cargo xtask sanitize`: runs the GPU test binary's `sanitize::` module (small shapes, tails and
//! causal masks) under compute-sanitizer, one tool at a time, keeps each log in
//! `target/sanitize/<tool>.log`, and fails on any reported error, on a missing `ERROR SUMMARY`
//! (the tool or the process died), on a failed test, or when no test ran at all.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::LazyLock;

use anyhow::{bail, Context};
use regex::Regex;
use serde::Serialize;

/// A compute-sanitizer tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// Out-of-bounds and misaligned accesses, leaks.
    Memcheck,
    /// Shared-memory data races.
    Racecheck,
    /// Reads of uninitialized device global memory.
    Initcheck,
    /// Invalid uses of synchronization primitives.
    Synccheck,
}

impl Tool {
    /// Every tool, in the order the gate runs them.
    pub const ALL: [Tool; 4] = [
        Tool::Memcheck,
        Tool::Racecheck,
        Tool::Initcheck,
        Tool::Synccheck,
    ];

    /// The `--tool` value.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Memcheck => "memcheck",
            Tool::Racecheck => "racecheck",
            Tool::Initcheck => "initcheck",
            Tool::Synccheck => "synccheck",
        }
    }

    /// Options beyond `--tool`: memcheck also checks for leaks.
    fn extra_args(self) -> &'static [&'static str] {
        match self {
            Tool::Memcheck => &["--leak-check", "full"],
            _ => &[],
        }
    }
}

/// `--tool` choices, with `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolChoice {
    /// memcheck
    Memcheck,
    /// racecheck
    Racecheck,
    /// initcheck
    Initcheck,
    /// synccheck
    Synccheck,
    /// All four, in turn.
    All,
}

impl ToolChoice {
    fn tools(self) -> Vec<Tool> {
        match self {
            ToolChoice::Memcheck => vec![Tool::Memcheck],
            ToolChoice::Racecheck => vec![Tool::Racecheck],
            ToolChoice::Initcheck => vec![Tool::Initcheck],
            ToolChoice::Synccheck => vec![Tool::Synccheck],
            ToolChoice::All => Tool::ALL.to_vec(),
        }
    }
}

/// Arguments of `cargo xtask sanitize`.
#[derive(clap::Args)]
pub struct Args {
    /// Which compute-sanitizer tool to run.
    #[arg(long, value_enum, default_value = "all")]
    tool: ToolChoice,
    /// Use the test binary of a bundle (`DIR/tests/attn_kernels_gpu`) instead of building one.
    #[arg(long, value_name = "DIR")]
    from_bundle: Option<PathBuf>,
    /// Test-name filter passed to the test binary.
    #[arg(long, default_value = "sanitize::")]
    filter: String,
}

/// Where the GPU test binary comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// Build it with cargo in the workspace.
    Cargo(PathBuf),
    /// A bundle directory made by `cargo xtask bundle`.
    Bundle(PathBuf),
}

impl Source {
    /// Where logs and outputs go: `target/` of the workspace, or `DIR/target/` of a bundle.
    pub fn target_dir(&self) -> PathBuf {
        match self {
            Source::Cargo(root) | Source::Bundle(root) => root.join("target"),
        }
    }
}

/// Test counts summed over every `test result:` line of a libtest run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TestCounts {
    /// Passed.
    pub passed: u64,
    /// Failed.
    pub failed: u64,
    /// Ignored (not run).
    pub ignored: u64,
    /// Filtered out by name.
    pub filtered_out: u64,
}

static TEST_RESULT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored; \d+ measured; (\d+) filtered out",
    )
    .expect("valid regex")
});

/// Sums libtest's `test result:` lines; `None` when there is none (the binary died first).
pub fn parse_test_counts(log: &str) -> Option<TestCounts> {
    let mut total: Option<TestCounts> = None;
    for c in TEST_RESULT.captures_iter(log) {
        let t = total.get_or_insert_with(TestCounts::default);
        let n = |i: usize| c[i].parse::<u64>().unwrap_or(0);
        t.passed += n(1);
        t.failed += n(2);
        t.ignored += n(3);
        t.filtered_out += n(4);
    }
    total
}

/// What one compute-sanitizer log says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SanitizerSummary {
    /// Errors of each `ERROR SUMMARY` line (one per sanitized process).
    pub error_summaries: Vec<u64>,
    /// racecheck's `(errors, warnings)` hazards, when it printed its summary.
    pub racecheck: Option<(u64, u64)>,
    /// The test harness's counts.
    pub tests: Option<TestCounts>,
}

static ERROR_SUMMARY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^=+ ERROR SUMMARY: (\d+) errors?\s*$").expect("valid regex"));
static RACECHECK_SUMMARY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?m)^=+ RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)",
    )
    .expect("valid regex")
});

/// Parses a compute-sanitizer log (tool output and test output interleaved).
pub fn parse_log(log: &str) -> SanitizerSummary {
    SanitizerSummary {
        error_summaries: ERROR_SUMMARY
            .captures_iter(log)
            .filter_map(|c| c[1].parse().ok())
            .collect(),
        racecheck: RACECHECK_SUMMARY
            .captures(log)
            .and_then(|c| Some((c[1].parse().ok()?, c[2].parse().ok()?))),
        tests: parse_test_counts(log),
    }
}

/// Why a sanitizer run did not pass (empty = passed).
pub fn failures(summary: &SanitizerSummary, exit_code: Option<i32>, filter: &str) -> Vec<String> {
    let mut why = Vec::new();
    let errors: u64 = summary.error_summaries.iter().sum();
    // racecheck ends with `RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)`
    // instead of an `ERROR SUMMARY` line (seen with compute-sanitizer of CUDA 13.0 on an H200).
    if summary.error_summaries.is_empty() && summary.racecheck.is_none() {
        why.push(
            "no `ERROR SUMMARY` line: the sanitizer or the test process died before finishing"
                .into(),
        );
    } else if errors > 0 {
        why.push(format!("{errors} sanitizer error(s)"));
    }
    if let Some((hazard_errors, _)) = summary.racecheck {
        if hazard_errors > 0 {
            why.push(format!("{hazard_errors} racecheck hazard error(s)"));
        }
    }
    match summary.tests {
        None => why.push("the test harness printed no `test result` line".into()),
        Some(t) if t.failed > 0 => why.push(format!("{} test(s) failed", t.failed)),
        Some(t) if t.passed == 0 => why.push(format!(
            "no test matching `{filter}` ran: nothing was checked"
        )),
        Some(_) => {}
    }
    match exit_code {
        Some(0) => {}
        Some(code) => why.push(format!("exit status {code}")),
        None => why.push("killed by a signal".into()),
    }
    why
}

/// The outcome of one tool.
#[derive(Debug, Clone, Serialize)]
pub struct ToolResult {
    /// The tool.
    pub tool: Tool,
    /// The kept log.
    pub log: PathBuf,
    /// What the log says.
    pub summary: SanitizerSummary,
    /// Why it failed; empty when it passed.
    pub failures: Vec<String>,
}

/// Parses `cargo test --no-run --message-format=json` output: the executable of the test
/// target `name`.
pub fn test_executable(cargo_json: &str, name: &str) -> Option<PathBuf> {
    cargo_json
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == name)
        .filter(|v| {
            v["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "test"))
        })
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
}

/// The GPU test binary: built by cargo (`attn-kernels`, test target `gpu`, release, with the
/// `debug-kernels` feature like the bundle's), or the bundle's `tests/attn_kernels_gpu`.
pub fn gpu_test_binary(source: &Source) -> anyhow::Result<PathBuf> {
    match source {
        Source::Bundle(dir) => {
            let bin = dir.join("tests/attn_kernels_gpu");
            if !bin.is_file() {
                bail!(
                    "{} is missing: is {} a bundle made by `cargo xtask bundle`?",
                    bin.display(),
                    dir.display()
                );
            }
            Ok(bin)
        }
        Source::Cargo(root) => {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let output = Command::new(cargo)
                .current_dir(root)
                .args([
                    "test",
                    "-p",
                    "attn-kernels",
                    "--release",
                    "--test",
                    "gpu",
                    "--no-run",
                ])
                // The same feature set as the bundle's test binary (debug-dump tests included).
                .args(["--features", "debug-kernels", "--message-format=json"])
                .stderr(Stdio::inherit())
                .output()
                .context("running cargo to build the GPU test binary")?;
            if !output.status.success() {
                bail!("building the GPU test binary failed ({})", output.status);
            }
            test_executable(&String::from_utf8_lossy(&output.stdout), "gpu")
                .context("cargo built no executable for attn-kernels' `gpu` test target")
        }
    }
}

/// Finds compute-sanitizer: `COMPUTE_SANITIZER`, `PATH`, then the CUDA install dirs.
pub fn find_compute_sanitizer() -> anyhow::Result<PathBuf> {
    find_cuda_tool(
        "compute-sanitizer",
        "COMPUTE_SANITIZER",
        &["compute-sanitizer", "bin"],
    )
}

/// Finds a CUDA tool by env override, `PATH`, `CUDA_HOME`/`CUDA_PATH` and `/usr/local/cuda`
/// (each with the given sub-directories).
pub fn find_cuda_tool(name: &str, env: &str, subdirs: &[&str]) -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("{env}={} is not a file", p.display());
    }
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect())
        .unwrap_or_default();
    let mut homes: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .collect();
    homes.push(PathBuf::from("/usr/local/cuda"));
    for home in homes {
        candidates.extend(subdirs.iter().map(|s| home.join(s).join(name)));
    }
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "`{name}` not found (set {env}, or put it on PATH; it ships with the CUDA toolkit \
                 on the GPU host, not with the PyPI compiler)"
            )
        })
}

/// The libtest arguments every GPU-test run uses: ignored tests too (GPU tests are `#[ignore]`d
/// so that CI without a GPU skips them), one thread (one GPU, readable sanitizer logs).
pub fn test_args(filter: &str) -> [&str; 3] {
    ["--include-ignored", "--test-threads=1", filter]
}

/// Runs `cmd` with stdout and stderr both written to `log`; returns the exit code (`None`:
/// killed by a signal).
pub fn run_logged(mut cmd: Command, log: &Path) -> anyhow::Result<Option<i32>> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = file.try_clone().context("duplicating the log handle")?;
    let program = cmd.get_program().to_string_lossy().into_owned();
    let status = cmd
        .stdout(file)
        .stderr(err)
        .status()
        .with_context(|| format!("running {program}"))?;
    Ok(status.code())
}

/// Runs each tool over the filtered tests and judges its log.
pub fn run_tools(
    sanitizer: &Path,
    test_binary: &Path,
    tools: &[Tool],
    filter: &str,
    log_dir: &Path,
) -> anyhow::Result<Vec<ToolResult>> {
    let mut results = Vec::new();
    for &tool in tools {
        let log = log_dir.join(format!("{}.log", tool.name()));
        let mut cmd = Command::new(sanitizer);
        cmd.args(["--tool", tool.name(), "--error-exitcode", "1"])
            .args(tool.extra_args())
            .arg(test_binary)
            .args(test_args(filter));
        let code = run_logged(cmd, &log)?;
        let text =
            std::fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))?;
        let summary = parse_log(&text);
        let failures = failures(&summary, code, filter);
        results.push(ToolResult {
            tool,
            log,
            summary,
            failures,
        });
    }
    Ok(results)
}

/// `cargo xtask sanitize`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let source = match args.from_bundle {
        Some(dir) => Source::Bundle(dir),
        None => Source::Cargo(crate::ptxas::workspace_root()),
    };
    let sanitizer = find_compute_sanitizer()?;
    let binary = gpu_test_binary(&source)?;
    let log_dir = source.target_dir().join("sanitize");
    let results = run_tools(
        &sanitizer,
        &binary,
        &args.tool.tools(),
        &args.filter,
        &log_dir,
    )?;
    let mut failed = Vec::new();
    for r in &results {
        let errors: u64 = r.summary.error_summaries.iter().sum();
        let tests = r.summary.tests.map_or("-".to_string(), |t| {
            format!("{} passed, {} failed", t.passed, t.failed)
        });
        let verdict = if r.failures.is_empty() { "ok" } else { "FAIL" };
        println!(
            "{:<10} {:<4} errors={errors:<3} tests: {tests:<22} log: {}",
            r.tool.name(),
            verdict,
            r.log.display()
        );
        if !r.failures.is_empty() {
            failed.push(format!("{}: {}", r.tool.name(), r.failures.join("; ")));
        }
    }
    if !failed.is_empty() {
        bail!("compute-sanitizer found problems — {}", failed.join(" | "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAN: &str = "========= COMPUTE-SANITIZER\n\nrunning 3 tests\n\
        test sanitize_f16_d64_tail ... ok\ntest sanitize_f16_d64_causal ... ok\n\
        test sanitize_bf16_d128 ... ok\n\n\
        test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 41 filtered out; finished in 12.03s\n\n\
        ========= ERROR SUMMARY: 0 errors\n";

    #[test]
    fn clean_log_passes() {
        let s = parse_log(CLEAN);
        assert_eq!(s.error_summaries, vec![0]);
        assert_eq!(
            s.tests,
            Some(TestCounts {
                passed: 3,
                failed: 0,
                ignored: 0,
                filtered_out: 41
            })
        );
        assert!(failures(&s, Some(0), "sanitize_").is_empty());
    }

    #[test]
    fn errors_fail_and_are_counted() {
        let log = "========= Invalid __global__ read of size 2 bytes\n=========     at attn_fwd+0x1a0\n\
            test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s\n\
            ========= ERROR SUMMARY: 1 error\n";
        let s = parse_log(log);
        assert_eq!(s.error_summaries, vec![1]);
        let why = failures(&s, Some(1), "sanitize_");
        assert_eq!(
            why,
            vec![
                "1 sanitizer error(s)".to_string(),
                "exit status 1".to_string()
            ]
        );
    }

    #[test]
    fn racecheck_summary_is_read() {
        let log = "========= Error: Race reported between Write access at attn_fwd+0x10\n\
            ========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n\
            test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s\n\
            ========= ERROR SUMMARY: 1 error\n";
        let s = parse_log(log);
        assert_eq!(s.racecheck, Some((1, 1)));
        assert_eq!(failures(&s, Some(1), "x")[0], "1 sanitizer error(s)");
    }

    #[test]
    fn a_clean_racecheck_run_without_error_summary_passes() {
        // What compute-sanitizer 13.0's racecheck printed on the H200 (2026-11-21): a
        // RACECHECK SUMMARY and no ERROR SUMMARY line.
        let log = "========= COMPUTE-SANITIZER\nrunning 1 test\n\
            test sanitize_small_shapes_every_config ... ok\n\
            test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 15 filtered out; finished in 7.05s\n\
            ========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n";
        let s = parse_log(log);
        assert_eq!(s.racecheck, Some((0, 0)));
        assert!(failures(&s, Some(0), "sanitize_").is_empty());
        let racy = log.replace(
            "0 hazards displayed (0 errors",
            "1 hazards displayed (1 error",
        );
        assert_eq!(
            failures(&parse_log(&racy), Some(0), "sanitize_"),
            vec!["1 racecheck hazard error(s)".to_string()]
        );
    }

    #[test]
    fn a_missing_summary_or_an_empty_run_never_passes() {
        let crashed = "running 1 test\nSegmentation fault\n";
        let why = failures(&parse_log(crashed), None, "sanitize_");
        assert!(why[0].contains("no `ERROR SUMMARY`"));
        assert!(why.iter().any(|w| w.contains("no `test result`")));
        assert!(why.iter().any(|w| w.contains("signal")));

        let nothing_ran = CLEAN.replace("3 passed", "0 passed");
        let why = failures(&parse_log(&nothing_ran), Some(0), "sanitize_");
        assert_eq!(
            why,
            vec!["no test matching `sanitize_` ran: nothing was checked".to_string()]
        );

        let failed = CLEAN.replace("0 failed", "2 failed");
        assert_eq!(
            failures(&parse_log(&failed), Some(101), "s")[0],
            "2 test(s) failed"
        );
    }

    /// The subprocess plumbing, with a stand-in for compute-sanitizer: argument order, one log
    /// per tool with stdout and stderr, and the verdict per tool.
    #[cfg(unix)]
    #[test]
    fn run_tools_passes_the_right_arguments_and_judges_each_log() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("xtask-sanitize-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let fake = dir.join("fake-sanitizer");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho \"args: $*\"\necho 'running 2 tests' >&2\n\
             echo 'test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 9 filtered out; finished in 0.1s'\n\
             if [ \"$2\" = racecheck ]; then echo '========= ERROR SUMMARY: 3 errors'; exit 1; fi\n\
             echo '========= ERROR SUMMARY: 0 errors'\n",
        )
        .expect("write script");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let bin = dir.join("gpu-tests");
        let results = run_tools(
            &fake,
            &bin,
            &[Tool::Memcheck, Tool::Racecheck],
            "sanitize_",
            &dir.join("logs"),
        )
        .expect("run");
        assert_eq!(results.len(), 2);
        let memcheck_log = std::fs::read_to_string(&results[0].log).expect("log");
        assert!(
            memcheck_log.contains(&format!(
                "args: --tool memcheck --error-exitcode 1 --leak-check full {} \
                 --include-ignored --test-threads=1 sanitize_",
                bin.display()
            )),
            "{memcheck_log}"
        );
        assert!(
            memcheck_log.contains("running 2 tests"),
            "stderr is kept too"
        );
        assert!(results[0].failures.is_empty(), "{:?}", results[0].failures);
        assert_eq!(results[1].log, dir.join("logs/racecheck.log"));
        assert_eq!(
            results[1].failures,
            vec![
                "3 sanitizer error(s)".to_string(),
                "exit status 1".to_string()
            ]
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn cargo_json_gives_the_test_executable() {
        let json = r#"{"reason":"compiler-artifact","target":{"name":"attn_kernels","kind":["lib"]},"executable":null}
{"reason":"compiler-artifact","target":{"name":"gpu","kind":["test"]},"executable":"/w/target/release/deps/gpu-0123abcd"}
{"reason":"build-finished","success":true}"#;
        assert_eq!(
            test_executable(json, "gpu"),
            Some(PathBuf::from("/w/target/release/deps/gpu-0123abcd"))
        );
        assert_eq!(test_executable(json, "other"), None);
        assert_eq!(test_executable("not json\n", "gpu"), None);
    }
}
