//! `cargo xtask profile`: Nsight Compute on one kernel launch of `cargo xtask bench --once`,
//! with a fixed metric set (tensor pipe, DRAM throughput, achieved occupancy, shared-memory
//! bank conflicts, issue stalls). The raw CSV is kept under `target/profile/`; a summary table
//! is printed.
//!
//! Clocks are left alone (`--clock-control none`) so the numbers match what the benchmark
//! sees under the GPU's own boost behaviour, not ncu's locked base clock.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context};
use serde::Serialize;

use crate::flags::{CausalArg, DtypeArg, Fp8Arg};

/// The fixed metric set, with the label the summary table prints.
///
/// Stall reasons are ncu's `smsp__average_warps_issue_stalled_<reason>_per_issue_active`
/// ratios (warps stalled per issued instruction, the breakdown of the "Warp State Statistics"
/// section), for the reasons that matter in an attention kernel: barriers, global loads (long
/// scoreboard), shared memory/MUFU (short scoreboard, MIO throttle), tensor pipe saturation
/// (math pipe throttle) and fixed latencies (wait).
pub const METRICS: [(&str, &str); 17] = [
    ("gpu__time_duration.sum", "duration"),
    (
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "tensor pipe active",
    ),
    (
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "dram throughput",
    ),
    (
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "achieved occupancy",
    ),
    (
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
        "smem bank conflicts (ld)",
    ),
    (
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
        "smem bank conflicts (st)",
    ),
    (
        "smsp__average_warp_latency_per_inst_issued.ratio",
        "warp cycles per issued inst",
    ),
    (
        "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
        "stall: barrier",
    ),
    (
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
        "stall: long scoreboard",
    ),
    (
        "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
        "stall: short scoreboard",
    ),
    (
        "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
        "stall: mio throttle",
    ),
    (
        "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
        "stall: math pipe throttle",
    ),
    (
        "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
        "stall: wait",
    ),
    (
        "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",
        "stall: not selected",
    ),
    (
        "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
        "stall: lg throttle",
    ),
    (
        "smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio",
        "stall: dispatch",
    ),
    ("launch__registers_per_thread", "registers per thread"),
];

/// Arguments of `cargo xtask profile`.
#[derive(clap::Args)]
pub struct Args {
    /// Problem shape `B,H,S,D`.
    #[arg(long)]
    shape: String,
    /// Causal mask.
    #[arg(long, value_enum, default_value_t = CausalArg::None)]
    causal: CausalArg,
    /// Storage type.
    #[arg(long, value_enum, default_value_t = DtypeArg::F16)]
    dtype: DtypeArg,
    /// Kernel config name (passed to `bench --config`).
    #[arg(long)]
    config: Option<String>,
    /// Profile the FP8 forward instead: a variant (wgmma, fp8, p16, cvt; passed to
    /// `bench --fp8`). Pair it with `--kernel-regex attn_fp8_.*_<variant>` to skip the Vᵀ pass.
    #[arg(long, value_enum)]
    fp8: Option<Fp8Arg>,
    /// FP8 config name (passed to `bench --fp8-config`).
    #[arg(long)]
    fp8_config: Option<String>,
    /// Kernels to profile (ncu `-k regex:`).
    #[arg(long, default_value = "attn")]
    kernel_regex: String,
    /// Launches of matching kernels to skip before the profiled one (warm-up).
    #[arg(long, default_value_t = 5)]
    launch_skip: u32,
    /// Extra metrics on top of the fixed set (repeatable), e.g. Hopper's
    /// `sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active`.
    #[arg(long = "metric")]
    extra_metrics: Vec<String>,
}

/// One metric value with its unit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metric {
    /// The number, when the cell is numeric.
    pub value: Option<f64>,
    /// The cell as printed.
    pub raw: String,
    /// Unit from the units row (`%`, `nsecond`, …; empty when none).
    pub unit: String,
}

/// One profiled kernel launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfiledKernel {
    /// ncu's result ID.
    pub id: String,
    /// Kernel name as ncu prints it.
    pub kernel: String,
    /// Block size `(x, y, z)`.
    pub block: String,
    /// Grid size `(x, y, z)`.
    pub grid: String,
    /// Every metric column.
    pub metrics: BTreeMap<String, Metric>,
}

/// Columns of the raw page that describe the launch rather than measure it.
const ID_COLUMNS: [&str; 11] = [
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
];

/// Reads a number as ncu prints it (`1,234.5` uses thousands separators).
fn number(cell: &str) -> Option<f64> {
    let cleaned: String = cell.trim().chars().filter(|c| *c != ',').collect();
    let v: f64 = cleaned.parse().ok()?;
    v.is_finite().then_some(v)
}

/// Parses `ncu --csv --page raw` output: skips ncu's `==PROF==` lines and anything before the
/// header row (`"ID",…`), reads the units row, one [`ProfiledKernel`] per data row.
pub fn parse_ncu_csv(text: &str) -> anyhow::Result<Vec<ProfiledKernel>> {
    let start = text
        .lines()
        .position(|l| l.starts_with("\"ID\","))
        .context("no CSV header row (`\"ID\",…`) in the ncu output: did ncu profile any kernel?")?;
    let csv_text: String = text
        .lines()
        .skip(start)
        .filter(|l| l.starts_with('"'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(false)
        .from_reader(csv_text.as_bytes());
    let mut records = reader.records();
    let header = records
        .next()
        .context("empty ncu CSV")?
        .context("ncu CSV header")?;
    let column = |name: &str| header.iter().position(|h| h == name);
    let (Some(id_col), Some(name_col)) = (column("ID"), column("Kernel Name")) else {
        bail!("ncu CSV header lacks `ID` or `Kernel Name`: {:?}", header);
    };
    let block_col = column("Block Size");
    let grid_col = column("Grid Size");

    let mut units: Option<csv::StringRecord> = None;
    let mut kernels = Vec::new();
    for (i, record) in records.enumerate() {
        let record = record.with_context(|| format!("ncu CSV row {}", i + 2))?;
        // The units row has an empty ID cell.
        if units.is_none() && record.get(id_col).is_some_and(str::is_empty) {
            units = Some(record);
            continue;
        }
        let cell = |c: Option<usize>| c.and_then(|c| record.get(c)).unwrap_or("").to_string();
        let mut metrics = BTreeMap::new();
        for (c, name) in header.iter().enumerate() {
            if ID_COLUMNS.contains(&name) {
                continue;
            }
            let raw = record.get(c).unwrap_or("").to_string();
            metrics.insert(
                name.to_string(),
                Metric {
                    value: number(&raw),
                    unit: units
                        .as_ref()
                        .and_then(|u| u.get(c))
                        .unwrap_or("")
                        .to_string(),
                    raw,
                },
            );
        }
        kernels.push(ProfiledKernel {
            id: cell(Some(id_col)),
            kernel: cell(Some(name_col)),
            block: cell(block_col),
            grid: cell(grid_col),
            metrics,
        });
    }
    if kernels.is_empty() {
        bail!("the ncu CSV has a header but no kernel rows");
    }
    Ok(kernels)
}

/// The summary table: one row per fixed metric, one column per profiled kernel.
pub fn render_summary(kernels: &[ProfiledKernel]) -> String {
    let mut out = String::new();
    for k in kernels {
        out.push_str(&format!(
            "kernel {} (id {}, block {}, grid {})\n",
            k.kernel, k.id, k.block, k.grid
        ));
        for (metric, label) in METRICS {
            let text = match k.metrics.get(metric) {
                None => "(not collected)".to_string(),
                Some(m) => match m.value {
                    Some(v) => format!("{v:.2} {}", m.unit).trim_end().to_string(),
                    None => m.raw.clone(),
                },
            };
            out.push_str(&format!("  {label:<30} {text}\n"));
        }
        for (name, m) in &k.metrics {
            if !METRICS.iter().any(|(known, _)| known == name) {
                out.push_str(&format!("  {name:<30} {} {}\n", m.raw, m.unit));
            }
        }
    }
    out
}

/// Validates `B,H,S,D` and returns it normalized.
pub fn parse_shape(shape: &str) -> anyhow::Result<[usize; 4]> {
    let parts: Vec<&str> = shape.split(',').map(str::trim).collect();
    let dims: Vec<usize> = parts
        .iter()
        .map(|p| p.parse::<usize>().ok().filter(|&n| n > 0))
        .collect::<Option<_>>()
        .with_context(|| format!("shape `{shape}`: expected four positive integers B,H,S,D"))?;
    dims.try_into()
        .map_err(|_| anyhow::anyhow!("shape `{shape}`: expected four numbers B,H,S,D"))
}

/// `cargo xtask profile`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let shape = parse_shape(&args.shape)?;
    let ncu = crate::sanitize::find_cuda_tool("ncu", "NCU", &["bin", "nsight-compute"])?;
    let exe = std::env::current_exe().context("locating the xtask binary")?;
    // In a bundle (run.sh sets ATTN_BUNDLE_DIR) the outputs go next to it.
    let base = std::env::var_os("ATTN_BUNDLE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(crate::ptxas::workspace_root);
    let out_dir = base.join("target/profile");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let stem = format!(
        "{}-{}-{}{}",
        shape.map(|d| d.to_string()).join("x"),
        args.causal,
        args.fp8
            .as_ref()
            .map(|v| format!("fp8-{v}"))
            .unwrap_or_else(|| args.dtype.to_string()),
        args.config
            .as_ref()
            .map(|c| format!("-{c}"))
            .unwrap_or_default()
    );
    let log = out_dir.join(format!("{stem}.ncu.log"));
    let csv_path = out_dir.join(format!("{stem}.csv"));

    let mut metrics: Vec<&str> = METRICS.iter().map(|(m, _)| *m).collect();
    metrics.extend(args.extra_metrics.iter().map(String::as_str));
    let shape_arg = shape.map(|d| d.to_string()).join(",");
    let mut cmd = Command::new(&ncu);
    cmd.args(["--clock-control", "none", "--csv", "--page", "raw"])
        .args(["--metrics", &metrics.join(",")])
        .args(["-k", &format!("regex:{}", args.kernel_regex)])
        .args([
            "--launch-skip",
            &args.launch_skip.to_string(),
            "--launch-count",
            "1",
        ])
        .arg("--log-file")
        .arg(&log)
        .arg(&exe)
        .args([
            "bench",
            "--once",
            "--shape",
            &shape_arg,
            "--causal",
            &args.causal.to_string(),
        ])
        .args(["--dtype", args.dtype.as_str()]);
    if let Some(config) = &args.config {
        cmd.args(["--config", config]);
    }
    if let Some(variant) = &args.fp8 {
        cmd.args(["--fp8", &variant.to_string()]);
    }
    if let Some(config) = &args.fp8_config {
        cmd.args(["--fp8-config", config]);
    }
    let status = cmd
        .status()
        .with_context(|| format!("running {}", ncu.display()))?;
    let text = std::fs::read_to_string(&log)
        .with_context(|| format!("ncu wrote no log at {} ({status})", log.display()))?;
    if !status.success() {
        let errors: Vec<&str> = text.lines().filter(|l| l.contains("==ERROR==")).collect();
        bail!(
            "ncu failed ({status}): {} (log: {})",
            errors.join(" "),
            log.display()
        );
    }
    let kernels = parse_ncu_csv(&text).with_context(|| format!("reading {}", log.display()))?;
    let csv_only: String = text
        .lines()
        .skip_while(|l| !l.starts_with("\"ID\","))
        .filter(|l| l.starts_with('"'))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&csv_path, csv_only)
        .with_context(|| format!("writing {}", csv_path.display()))?;
    print!("{}", render_summary(&kernels));
    println!(
        "raw CSV: {}\nncu log: {}",
        csv_path.display(),
        log.display()
    );
    Ok(())
}

/// The fixture path used by the tests.
#[cfg(test)]
fn fixture() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ncu/raw_page_sample.csv")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_page_csv_with_units_row_and_prof_lines() {
        let text = std::fs::read_to_string(fixture()).expect("fixture");
        let kernels = parse_ncu_csv(&text).expect("parse");
        assert_eq!(kernels.len(), 2);
        let k = &kernels[0];
        assert_eq!(k.kernel, "attn_fwd_f16_d64_128x64");
        assert_eq!(k.block, "(128, 1, 1)");
        let tensor =
            &k.metrics["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"];
        assert_eq!((tensor.value, tensor.unit.as_str()), (Some(61.37), "%"));
        // Thousands separators inside a quoted cell.
        let conflicts = &k.metrics["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"];
        assert_eq!(conflicts.value, Some(12_288.0));
        assert_eq!(k.metrics["gpu__time_duration.sum"].unit, "usecond");
        // A non-numeric cell keeps its text.
        let na = &kernels[1].metrics["dram__throughput.avg.pct_of_peak_sustained_elapsed"];
        assert_eq!((na.value, na.raw.as_str()), (None, "n/a"));
        let summary = render_summary(&kernels);
        assert!(summary.contains("tensor pipe active"));
        assert!(summary.contains("61.37 %"));
    }

    #[test]
    fn output_without_a_profiled_kernel_is_an_error() {
        let err = parse_ncu_csv(
            "==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\n",
        )
        .expect_err("no rows")
        .to_string();
        assert!(err.contains("did ncu profile any kernel"), "{err}");
        let err = parse_ncu_csv("\"ID\",\"Kernel Name\"\n\"\",\"\"\n")
            .expect_err("units only")
            .to_string();
        assert!(err.contains("no kernel rows"), "{err}");
        // A row whose column count differs from the header (truncated output) is an error.
        assert!(parse_ncu_csv("\"ID\",\"Kernel Name\"\n\"0\"\n").is_err());
    }

    #[test]
    fn shapes_are_validated() {
        assert_eq!(
            parse_shape("2, 8,2048,64").expect("shape"),
            [2, 8, 2048, 64]
        );
        assert!(parse_shape("2,8,2048").is_err());
        assert!(parse_shape("2,8,0,64").is_err());
        assert!(parse_shape("a,b,c,d").is_err());
    }

    #[test]
    fn metric_names_are_unique() {
        let mut names: Vec<_> = METRICS.iter().map(|(m, _)| m).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), METRICS.len());
    }
}
