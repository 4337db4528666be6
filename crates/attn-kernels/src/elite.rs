//! The sweep's elite table: the fastest configs per (arch, dtype, head dim, shape class),
//! measured by `cargo xtask sweep` and committed as `elite.tsv`. The default chooser reads
//! it first and falls back to [`crate::config::choose_config`].

use std::sync::OnceLock;

use attn_ref::{Causal, Problem};

use crate::{Dtype, KernelConfig};

/// The committed table (regenerate with `cargo xtask sweep --write-elite`).
pub const ELITE_TSV: &str = include_str!("../elite.tsv");

/// One row of the elite table.
#[derive(Debug, Clone, PartialEq)]
pub struct EliteEntry {
    /// `sm_90`, …
    pub arch: String,
    /// Storage type.
    pub dtype: Dtype,
    /// Head dim.
    pub head_dim: usize,
    /// [`shape_class`] of the shapes it was measured on.
    pub class: String,
    /// 1 = fastest.
    pub rank: usize,
    /// The config.
    pub config: KernelConfig,
    /// Median latency (µs) and its bootstrap CI.
    pub median_us: f64,
    /// Lower CI bound (µs).
    pub ci_low_us: f64,
    /// Upper CI bound (µs).
    pub ci_high_us: f64,
}

/// Shape class used by the sweep: query length bucket × causal, e.g. `s512-causal`.
/// Buckets: ≤ 512, ≤ 2048, ≤ 8192, longer.
pub fn shape_class(q_len: usize, batch_heads: usize, causal: Causal) -> String {
    let len = match q_len {
        0..=512 => "s512",
        513..=2048 => "s2k",
        2049..=8192 => "s8k",
        _ => "slong",
    };
    let bh = if batch_heads <= 16 { "bh16" } else { "bhbig" };
    let c = if causal == Causal::None {
        "full"
    } else {
        "causal"
    };
    format!("{len}-{bh}-{c}")
}

/// Parses the table; errors name the line.
pub fn parse(tsv: &str) -> Result<Vec<EliteEntry>, String> {
    let mut out = Vec::new();
    for (i, line) in tsv.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 9 {
            return Err(format!(
                "elite.tsv line {}: expected 9 tab-separated fields",
                i + 1
            ));
        }
        let num = |s: &str| -> Result<f64, String> {
            s.parse::<f64>()
                .map_err(|_| format!("elite.tsv line {}: `{s}` is not a number", i + 1))
        };
        let entry = EliteEntry {
            arch: f[0].to_string(),
            dtype: Dtype::parse(f[1]).map_err(|e| format!("elite.tsv line {}: {e}", i + 1))?,
            head_dim: num(f[2])? as usize,
            class: f[3].to_string(),
            rank: num(f[4])? as usize,
            config: KernelConfig::by_name(f[5])
                .map_err(|e| format!("elite.tsv line {}: {e}", i + 1))?,
            median_us: num(f[6])?,
            ci_low_us: num(f[7])?,
            ci_high_us: num(f[8])?,
        };
        if !(entry.ci_low_us <= entry.median_us && entry.median_us <= entry.ci_high_us) {
            return Err(format!("elite.tsv line {}: median outside its CI", i + 1));
        }
        out.push(entry);
    }
    Ok(out)
}

fn table() -> &'static [EliteEntry] {
    static TABLE: OnceLock<Vec<EliteEntry>> = OnceLock::new();
    // A malformed table is caught by the test below; at run time it falls back to the
    // heuristic rather than failing a launch.
    TABLE.get_or_init(|| parse(ELITE_TSV).unwrap_or_default())
}

/// The rank-1 config for this problem on `arch`, if the sweep measured its class.
pub fn lookup(problem: &Problem, arch: &str) -> Option<KernelConfig> {
    lookup_dtype(problem, arch, None)
}

/// Like [`lookup`] for a given dtype (None: any).
pub fn lookup_dtype(problem: &Problem, arch: &str, dtype: Option<Dtype>) -> Option<KernelConfig> {
    let s = problem.shape();
    let class = shape_class(s.q_len(), s.batch() * s.q_heads(), problem.causal());
    table()
        .iter()
        // Keyed by bucket: a D = 120 problem runs (and is tuned as) the D = 128 kernels.
        .filter(|e| {
            e.arch == arch
                && Some(e.head_dim) == crate::catalog::fwd_bucket(s.head_dim())
                && e.class == class
        })
        .filter(|e| dtype.is_none_or(|d| d == e.dtype))
        .min_by_key(|e| e.rank)
        .map(|e| e.config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_table_is_well_formed() {
        let rows = parse(ELITE_TSV).unwrap_or_else(|e| {
            panic!("{e}\nregenerate with `cargo xtask sweep --write-elite` on a GPU host")
        });
        for r in &rows {
            assert!(
                (1..=3).contains(&r.rank),
                "rank {} outside the top 3",
                r.rank
            );
            assert!(r.config.check_head_dim(r.head_dim).is_ok(), "{:?}", r);
        }
    }

    #[test]
    fn malformed_rows_are_rejected() {
        assert!(parse("sm_90\tf16\t64\ts512-bh16-full\t1\t64_64_4_s2\t10\t9\t11").is_ok());
        assert!(parse("sm_90\tf16\t64\ts512-bh16-full\t1\t99_64_4_s2\t10\t9\t11").is_err());
        assert!(parse("sm_90\tf16\t64\ts512-bh16-full\t1\t64_64_4_s2\t10\t11\t12").is_err());
        assert!(parse("sm_90\tf16\t64").is_err());
    }

    #[test]
    fn padded_head_dims_use_their_buckets_row() {
        use attn_ref::{AttnShape, Causal};
        let p = |d| {
            Problem::new(
                AttnShape::self_attention(1, 8, 512, d).unwrap(),
                Causal::None,
            )
        };
        let d128 = lookup(&p(128), "sm_90");
        assert!(d128.is_some(), "the committed table has sm_90 D=128 rows");
        assert_eq!(lookup(&p(120), "sm_90"), d128);
        assert_eq!(lookup(&p(104), "sm_90"), d128);
        // D = 96 is its own bucket, with no rows yet: the chooser decides.
        assert_eq!(lookup(&p(96), "sm_90"), None);
        assert_eq!(lookup(&p(128), "sm_80"), None);
    }
}
