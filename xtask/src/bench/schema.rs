//! `bench.json`: the one definition of the file `cargo xtask bench` writes and
//! `cargo xtask gate` (the performance stage, the report, the roofline) reads.
//!
//! The writer always writes every field. The reader accepts files from older builds: fields
//! added later (`torch`, `ratio_to_flash`, `speedup_vs_ours_f16`, `sdpa`, a summary's `min`,
//! `max`, `mad`, `outliers_dropped`) may be missing, and unknown fields are ignored.

use serde::{Deserialize, Serialize};

/// Summary statistics of a latency sample in µs (attn-stats' `SampleReport`, as stored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleSummary {
    /// Sample count (after trimming).
    pub n: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// Standard deviation (n − 1).
    pub std: f64,
    /// Lower end of the bootstrap CI of the mean.
    pub ci_low: f64,
    /// Upper end of the bootstrap CI of the mean.
    pub ci_high: f64,
    /// Smallest value.
    #[serde(default)]
    pub min: Option<f64>,
    /// Largest value.
    #[serde(default)]
    pub max: Option<f64>,
    /// Median absolute deviation (unscaled).
    #[serde(default)]
    pub mad: Option<f64>,
    /// Values removed by MAD trimming.
    #[serde(default)]
    pub outliers_dropped: Option<u64>,
}

impl From<attn_stats::SampleReport> for SampleSummary {
    fn from(r: attn_stats::SampleReport) -> Self {
        SampleSummary {
            n: r.n as u64,
            mean: r.mean,
            median: r.median,
            std: r.std,
            ci_low: r.ci_low,
            ci_high: r.ci_high,
            min: Some(r.min),
            max: Some(r.max),
            mad: Some(r.mad),
            outliers_dropped: Some(r.outliers_dropped as u64),
        }
    }
}

/// The fastest SDPA backend of a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Champion {
    /// `sdpa_flash`, `sdpa_efficient` or `sdpa_cudnn`.
    pub backend: String,
    /// Its sample summary.
    #[serde(flatten)]
    pub summary: SampleSummary,
}

/// One SDPA backend's median, or why it did not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SdpaResult {
    /// `sdpa_flash`, `sdpa_efficient` or `sdpa_cudnn`.
    pub backend: String,
    /// Median µs, when it ran.
    pub median_us: Option<f64>,
    /// Why it did not run.
    pub error: Option<String>,
}

/// One row of `bench.json`: one (shape, causal, dtype) of our kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    /// Row name: `B,H,S,D[-causal]-dtype` (`S` may be `SqxSk`).
    pub shape: String,
    /// Causal or not.
    pub causal: bool,
    /// Storage type: `f16`, `bf16` or `fp8-<variant>`.
    pub dtype: String,
    /// Our kernel's name.
    pub kernel: String,
    /// `events` or `graph`.
    pub method: String,
    /// Our latency.
    pub ours: SampleSummary,
    /// Our throughput.
    pub tflops: f64,
    /// The SDPA champion; `None` when no SDPA backend ran.
    #[serde(default)]
    pub champion: Option<Champion>,
    /// mean(ours) / mean(champion).
    #[serde(default)]
    pub ratio: Option<f64>,
    /// CI of the ratio.
    #[serde(default)]
    pub ratio_ci_low: Option<f64>,
    /// CI of the ratio.
    #[serde(default)]
    pub ratio_ci_high: Option<f64>,
    /// Hedges' g (None when undefined).
    #[serde(default)]
    pub hedges_g: Option<f64>,
    /// `promote`, `regress` or `inconclusive` vs the champion.
    #[serde(default)]
    pub decision: Option<String>,
    /// mean(ours) / mean(SDPA flash backend), when flash ran.
    #[serde(default)]
    pub ratio_to_flash: Option<f64>,
    /// FP8 rows: mean(our f16 kernel) / mean(this row) on the same shape (throughput gain).
    #[serde(default)]
    pub speedup_vs_ours_f16: Option<f64>,
    /// Every SDPA backend tried on the shape.
    #[serde(default)]
    pub sdpa: Vec<SdpaResult>,
}

/// `bench.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchFile {
    /// The GPU (`sm_90, 132 SMs`).
    pub device: String,
    /// When it ran (UTC date).
    pub date: String,
    /// Commit benchmarked.
    pub commit: String,
    /// PyTorch version, when known.
    #[serde(default)]
    pub torch: Option<String>,
    /// One row per (shape, causal, dtype).
    pub rows: Vec<BenchRow>,
}

impl BenchFile {
    /// Parses `bench.json` text.
    pub fn from_json(text: &str) -> serde_json::Result<Self> {
        serde_json::from_str(text)
    }

    /// `bench.json` text (pretty, as `cargo xtask bench` writes it).
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }

    /// Reads a `bench.json` file.
    pub fn read(path: &std::path::Path) -> anyhow::Result<Self> {
        use anyhow::Context;
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// Writes a `bench.json` file.
    pub fn write(&self, path: &std::path::Path) -> anyhow::Result<()> {
        use anyhow::Context;
        std::fs::write(path, self.to_json()?).with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(median: f64) -> SampleSummary {
        SampleSummary {
            n: 300,
            mean: median + 0.1,
            median,
            std: 0.25,
            ci_low: median,
            ci_high: median + 0.2,
            min: Some(median - 0.5),
            max: Some(median + 1.5),
            mad: Some(0.125),
            outliers_dropped: Some(2),
        }
    }

    fn sample_file() -> BenchFile {
        BenchFile {
            device: "sm_90, 132 SMs".into(),
            date: "2026-11-21".into(),
            commit: "70b9a02".into(),
            torch: Some("2.11".into()),
            rows: vec![
                BenchRow {
                    shape: "2,8,2048,64-causal-f16".into(),
                    causal: true,
                    dtype: "f16".into(),
                    kernel: "attn_fwd_f16_d64 (64_64_4_s2)".into(),
                    method: "events".into(),
                    ours: summary(41.5),
                    tflops: 52.9,
                    champion: Some(Champion {
                        backend: "sdpa_cudnn".into(),
                        summary: summary(40.5),
                    }),
                    ratio: Some(1.0247),
                    ratio_ci_low: Some(1.01),
                    ratio_ci_high: Some(1.04),
                    hedges_g: Some(3.5),
                    decision: Some("regress".into()),
                    ratio_to_flash: Some(0.9),
                    speedup_vs_ours_f16: None,
                    sdpa: vec![
                        SdpaResult {
                            backend: "sdpa_flash".into(),
                            median_us: Some(46.0),
                            error: None,
                        },
                        SdpaResult {
                            backend: "sdpa_efficient".into(),
                            median_us: None,
                            error: Some("not supported".into()),
                        },
                    ],
                },
                BenchRow {
                    shape: "1,32,1x8192,128-fp8-wgmma".into(),
                    causal: false,
                    dtype: "fp8-wgmma".into(),
                    kernel: "attn_fwd_fp8 (128_128_8_s2) + Vt pass".into(),
                    method: "graph".into(),
                    ours: summary(20.0),
                    tflops: 4.5,
                    champion: None,
                    ratio: None,
                    ratio_ci_low: None,
                    ratio_ci_high: None,
                    hedges_g: None,
                    decision: None,
                    ratio_to_flash: None,
                    speedup_vs_ours_f16: Some(1.4),
                    sdpa: vec![],
                },
            ],
        }
    }

    #[test]
    fn write_then_read_gives_the_same_value() {
        let file = sample_file();
        let dir = std::env::temp_dir().join(format!("xtask-bench-schema-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("bench.json");
        file.write(&path).expect("write");
        assert_eq!(BenchFile::read(&path).expect("read"), file);
        std::fs::remove_dir_all(&dir).ok();
        // And through text, every field written (nulls included).
        let text = file.to_json().expect("json");
        assert!(text.contains(r#""speedup_vs_ours_f16": null"#), "{text}");
        assert!(text.contains(r#""outliers_dropped": 2"#), "{text}");
        assert_eq!(BenchFile::from_json(&text).expect("parse"), file);
    }

    #[test]
    fn summaries_convert_from_attn_stats() {
        let a: Vec<f64> = (0..50).map(|i| 10.0 + 0.01 * f64::from(i % 7)).collect();
        let b: Vec<f64> = (0..50).map(|i| 11.0 + 0.01 * f64::from(i % 5)).collect();
        let c = attn_stats::compare(&a, &b, &attn_stats::CompareOptions::default()).expect("cmp");
        let s = SampleSummary::from(c.baseline);
        assert_eq!(s.n, c.baseline.n as u64);
        assert_eq!(s.median, c.baseline.median);
        assert_eq!(s.min, Some(c.baseline.min));
        assert_eq!(s.outliers_dropped, Some(c.baseline.outliers_dropped as u64));
    }

    #[test]
    fn older_files_with_fewer_fields_still_parse() {
        let text = r#"{"device":"H100","date":"2026-11-21","commit":"abc","rows":[
            {"shape":"2,8,2048,64-f16","causal":false,"dtype":"f16","kernel":"k","method":"events",
             "ours":{"n":200,"mean":45.0,"median":44.9,"std":0.3,"ci_low":44.9,"ci_high":45.1},
             "tflops":381.0}]}"#;
        let f = BenchFile::from_json(text).expect("old bench.json");
        assert_eq!(f.torch, None);
        assert_eq!(f.rows[0].ours.min, None);
        assert!(f.rows[0].sdpa.is_empty());
        assert_eq!(f.rows[0].champion, None);
    }

    /// Every bench.json committed under docs/perf (and the gate report's copy) still parses.
    #[test]
    fn committed_bench_files_parse() {
        let root = crate::ptxas::workspace_root();
        let perf = root.join("docs/perf");
        let mut files = Vec::new();
        for e in std::fs::read_dir(&perf).expect("docs/perf") {
            let path = e.expect("entry").path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if path.is_dir() && name.as_deref().is_some_and(|n| n.contains("bench")) {
                let f = path.join("bench.json");
                if f.exists() {
                    files.push(f);
                }
            } else if name.as_deref().is_some_and(|n| n.ends_with("-bench.json")) {
                files.push(path);
            }
        }
        files.sort();
        assert!(
            files.len() >= 3,
            "expected the committed bench.json files under {}, found {files:?}",
            perf.display()
        );
        for f in &files {
            let bench = BenchFile::read(f).unwrap_or_else(|e| panic!("{e:#}"));
            assert!(!bench.rows.is_empty(), "{}: no rows", f.display());
            // Parse → write → parse is stable.
            let again = BenchFile::from_json(&bench.to_json().expect("json")).expect("reparse");
            assert_eq!(again, bench, "{}", f.display());
        }
        let report = root.join("docs/gate/report.json");
        if report.exists() {
            let text = std::fs::read_to_string(&report).expect("read");
            let r: crate::gate::report::GateReport =
                serde_json::from_str(&text).expect("docs/gate/report.json");
            assert!(r.performance.is_some_and(|p| !p.bench.rows.is_empty()));
        }
    }
}
