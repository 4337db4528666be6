//! Element-wise comparison of a kernel's O (or LSE) with the reference: error statistics,
//! non-finite values with their locations, the worst elements and per-group summaries.

use std::fmt;

use attn_ref::{AttnShape, Causal};
use serde::Serialize;

use crate::pattern::{self, Alternative, ErrorPattern, Stage};
use crate::OracleError;

/// Which tensor a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TensorKind {
    /// The attention output O `[B, Hq, Sq, D]`.
    O,
    /// The log-sum-exp `[B, Hq, Sq]`.
    Lse,
}

impl TensorKind {
    fn name(self) -> &'static str {
        match self {
            TensorKind::O => "O",
            TensorKind::Lse => "LSE",
        }
    }
}

/// How to compare and what the problem looked like (for the pattern classification).
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// An element is *wrong* when `|got − want|` exceeds this. The pattern is read from the
    /// wrong elements; set it to the tolerance rule's bound ([`crate::ToleranceRule::bound`])
    /// so that rounding noise is not mistaken for a fault. Default 4e-3, the fp16 max-abs cap.
    pub threshold: f64,
    /// Query rows per block (BLOCK_M) for the per-row-block summaries and the tail check.
    pub block_m: usize,
    /// Keys per block (BLOCK_N) for the key-tile and tail-key checks.
    pub block_n: usize,
    /// How many worst elements to list.
    pub worst_k: usize,
    /// The problem's causal mode; the diagonal and key-tile patterns need it.
    pub causal: Causal,
    /// Whether Q, K and V were all finite. With finite inputs a NaN the reference does not
    /// have cannot have propagated from the inputs.
    pub inputs_finite: bool,
    /// The bit pattern the output was poisoned with before the launch, when it is a NaN
    /// payload the kernel cannot produce itself: NaNs carrying it prove the kernel never
    /// wrote there.
    pub poison_bits: Option<u32>,
    /// References computed under suspected wrong semantics (another softmax scale, a shifted
    /// mask…): when the output matches one of them, the pattern names that suspect.
    pub alternatives: Vec<Alternative>,
}

impl Default for CompareOptions {
    fn default() -> Self {
        Self {
            threshold: 4e-3,
            block_m: 64,
            block_n: 64,
            worst_k: 5,
            causal: Causal::None,
            inputs_finite: true,
            poison_bits: None,
            alternatives: Vec::new(),
        }
    }
}

impl CompareOptions {
    /// Sets [`CompareOptions::threshold`].
    pub fn with_threshold(mut self, threshold: f64) -> Self {
        self.threshold = threshold;
        self
    }
    /// Sets the tile sizes BLOCK_M × BLOCK_N.
    pub fn with_blocks(mut self, block_m: usize, block_n: usize) -> Self {
        self.block_m = block_m;
        self.block_n = block_n;
        self
    }
    /// Sets the causal mode.
    pub fn with_causal(mut self, causal: Causal) -> Self {
        self.causal = causal;
        self
    }
    /// Adds a reference computed under a suspected wrong semantics.
    pub fn with_alternative(mut self, alternative: Alternative) -> Self {
        self.alternatives.push(alternative);
        self
    }

    fn validate(&self) -> Result<(), OracleError> {
        if !(self.threshold.is_finite() && self.threshold >= 0.0) {
            return Err(OracleError::InvalidOption(format!(
                "threshold must be finite and >= 0, got {}",
                self.threshold
            )));
        }
        if self.block_m == 0 || self.block_n == 0 {
            return Err(OracleError::InvalidOption(format!(
                "block sizes must be >= 1, got BLOCK_M={} BLOCK_N={}",
                self.block_m, self.block_n
            )));
        }
        Ok(())
    }
}

/// An element's coordinates: batch, query head, query row and (for O) the head-dim index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Location {
    /// Batch index.
    pub b: usize,
    /// Query head index.
    pub h: usize,
    /// Query row.
    pub s: usize,
    /// Head-dim index; `None` for LSE.
    pub d: Option<usize>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.d {
            Some(d) => write!(f, "(b={}, h={}, s={}, d={})", self.b, self.h, self.s, d),
            None => write!(f, "(b={}, h={}, s={})", self.b, self.h, self.s),
        }
    }
}

/// One of the worst elements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorstElement {
    /// Where.
    pub at: Location,
    /// The kernel's value.
    pub got: f64,
    /// The reference's value.
    pub want: f64,
    /// `|got − want|`.
    pub error: f64,
}

/// Counts of one kind of non-finite value in the kernel's output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NonFiniteCount {
    /// How many elements of `got` are of this kind.
    pub count: usize,
    /// How many of them the reference does not have at the same place (the faults).
    pub unexpected: usize,
    /// The first one, in `[B, H, S, D]` order.
    pub first: Option<Location>,
    /// The first unexpected one.
    pub first_unexpected: Option<Location>,
}

impl NonFiniteCount {
    fn add(&mut self, at: Location, unexpected: bool) {
        self.count += 1;
        self.first.get_or_insert(at);
        if unexpected {
            self.unexpected += 1;
            self.first_unexpected.get_or_insert(at);
        }
    }
}

/// Error statistics of a group of elements (one head, one row block).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct GroupSummary {
    /// Max `|got − want|` over finite pairs.
    pub max_abs: f64,
    /// `‖got − want‖ / ‖want‖` over finite pairs.
    pub rel_l2: f64,
    /// Elements above the threshold or with an unexpected non-finite value.
    pub wrong: usize,
    /// Elements in the group.
    pub elements: usize,
    /// The first wrong element.
    pub first_wrong: Option<Location>,
}

/// Per-head summary.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HeadSummary {
    /// Batch index.
    pub b: usize,
    /// Query head index.
    pub h: usize,
    /// Its statistics.
    #[serde(flatten)]
    pub stats: GroupSummary,
}

/// Per-row-block summary, over every (batch, head): rows `start..end` form query tile `q_tile`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RowBlockSummary {
    /// The query tile index (`start / BLOCK_M`).
    pub q_tile: usize,
    /// First row.
    pub start: usize,
    /// One past the last row.
    pub end: usize,
    /// Its statistics.
    #[serde(flatten)]
    pub stats: GroupSummary,
}

/// The oracle's verdict on one tensor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OracleReport {
    /// O or LSE.
    pub tensor: TensorKind,
    /// `[B, H, S, D]` (D = 1 for LSE).
    pub dims: [usize; 4],
    /// The wrong-element threshold used.
    pub threshold: f64,
    /// Max `|got − want|` over pairs where both are finite.
    pub max_abs: f64,
    /// Where `max_abs` is reached.
    pub max_abs_at: Option<Location>,
    /// `‖got − want‖₂ / ‖want‖₂` over pairs where both are finite (0 when both are all 0).
    pub rel_l2: f64,
    /// Elements above the threshold or with an unexpected non-finite value.
    pub wrong: usize,
    /// NaNs in `got`.
    pub nan: NonFiniteCount,
    /// ±Infs in `got`.
    pub inf: NonFiniteCount,
    /// Finite values in `got` where the reference has NaN or ±Inf (a kernel hiding them).
    pub hidden: NonFiniteCount,
    /// NaNs that carry [`CompareOptions::poison_bits`].
    pub poisoned: usize,
    /// The worst finite elements, worst first (ties: first in memory order).
    pub worst: Vec<WorstElement>,
    /// One summary per (batch, head).
    pub heads: Vec<HeadSummary>,
    /// One summary per BLOCK_M query rows, over every (batch, head).
    pub row_blocks: Vec<RowBlockSummary>,
    /// The error pattern.
    pub pattern: ErrorPattern,
    /// Why the pattern was chosen: the measurements behind it.
    pub evidence: Vec<String>,
}

impl OracleReport {
    /// No wrong element and no unexpected non-finite value.
    pub fn is_clean(&self) -> bool {
        self.wrong == 0
    }
    /// The pipeline stage the pattern points at (`None` when clean or unknown).
    pub fn stage(&self) -> Option<Stage> {
        self.pattern.stage()
    }
    /// Where to look, from the seeds' decision tree.
    pub fn hint(&self) -> &'static str {
        self.pattern.hint()
    }
    /// The human summary (same text as `Display`).
    pub fn summary(&self) -> String {
        self.to_string()
    }
    /// Unexpected NaN/±Inf/hidden values.
    pub fn nonfinite_faults(&self) -> usize {
        self.nan.unexpected + self.inf.unexpected + self.hidden.unexpected
    }
}

/// Formats a float the same way on every platform (`1.234e-3`, `0`, `NaN`, `inf`).
pub(crate) fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".to_string()
    } else if x.is_finite() {
        format!("{x:.3e}")
    } else {
        format!("{x}")
    }
}

impl fmt::Display for OracleReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [b, h, s, d] = self.dims;
        let dims = match self.tensor {
            TensorKind::O => format!("[{b}, {h}, {s}, {d}]"),
            TensorKind::Lse => format!("[{b}, {h}, {s}]"),
        };
        let total = b * h * s * d;
        writeln!(
            f,
            "{} {dims}: max abs {} at {}, rel L2 {}, {} of {total} above {}",
            self.tensor.name(),
            sci(self.max_abs),
            self.max_abs_at
                .map_or_else(|| "-".to_string(), |l| l.to_string()),
            sci(self.rel_l2),
            self.wrong,
            sci(self.threshold),
        )?;
        for (name, c) in [("NaN", &self.nan), ("Inf", &self.inf)] {
            if c.count > 0 {
                writeln!(
                    f,
                    "  {name}: {} ({} not in the reference), first at {}",
                    c.count,
                    c.unexpected,
                    c.first.map_or_else(|| "-".to_string(), |l| l.to_string())
                )?;
            }
        }
        if self.hidden.count > 0 {
            writeln!(
                f,
                "  finite where the reference is not: {}, first at {}",
                self.hidden.count,
                self.hidden
                    .first
                    .map_or_else(|| "-".to_string(), |l| l.to_string())
            )?;
        }
        writeln!(f, "  pattern: {}", self.pattern)?;
        for e in &self.evidence {
            writeln!(f, "    - {e}")?;
        }
        let stage = self.stage().map_or("-", Stage::name);
        writeln!(f, "  stage: {stage}; hint: {}", self.hint())?;
        if !self.worst.is_empty() && !self.is_clean() {
            writeln!(f, "  worst finite elements:")?;
            for w in &self.worst {
                writeln!(
                    f,
                    "    {} got {} want {} err {}",
                    w.at,
                    sci(w.got),
                    sci(w.want),
                    sci(w.error)
                )?;
            }
        }
        let wrong_heads: Vec<_> = self.heads.iter().filter(|x| x.stats.wrong > 0).collect();
        if !wrong_heads.is_empty() && wrong_heads.len() < self.heads.len() {
            write!(f, "  heads with wrong elements:")?;
            for x in wrong_heads.iter().take(8) {
                write!(f, " (b={}, h={}): {}", x.b, x.h, x.stats.wrong)?;
            }
            if wrong_heads.len() > 8 {
                write!(f, " … {} more", wrong_heads.len() - 8)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Logical dimensions `[B, H, S, D]` of the compared tensor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dims {
    pub b: usize,
    pub h: usize,
    pub s: usize,
    pub d: usize,
    pub kind: TensorKind,
}

impl Dims {
    pub fn len(&self) -> usize {
        self.b * self.h * self.s * self.d
    }
    pub fn rows(&self) -> usize {
        self.b * self.h * self.s
    }
    /// Location of a flat element index.
    pub fn loc(&self, idx: usize) -> Location {
        let d = idx % self.d;
        let row = idx / self.d;
        let mut l = self.row_loc(row);
        l.d = (self.kind == TensorKind::O).then_some(d);
        l
    }
    /// Location of a flat row index `(b·H + h)·S + s` (d = None).
    pub fn row_loc(&self, row: usize) -> Location {
        let s = row % self.s;
        let bh = row / self.s;
        Location {
            b: bh / self.h,
            h: bh % self.h,
            s,
            d: None,
        }
    }
}

/// Per-row accumulators the pattern classification reads.
#[derive(Debug, Clone)]
pub(crate) struct RowStats {
    /// Max finite error of the row.
    pub max: Vec<f64>,
    /// Sum of squared finite errors.
    pub err2: Vec<f64>,
    /// Sum of squared reference values (finite pairs).
    pub ref2: Vec<f64>,
    /// Wrong elements (including unexpected non-finite ones).
    pub wrong: Vec<u32>,
    /// Unexpected NaNs.
    pub nan: Vec<u32>,
    /// Unexpected NaNs, ±Infs and hidden values.
    pub nonfinite: Vec<u32>,
    /// NaNs with the poison bits.
    pub poison: Vec<u32>,
}

/// Compares a kernel's O `[B, Hq, Sq, D]` with the reference.
///
/// Pairs where both sides hold the same non-finite value (NaN and NaN, +∞ and +∞) agree: the
/// kernel must propagate what the reference propagates. Errors are measured over pairs where
/// both are finite; unexpected non-finite values are counted and located separately.
pub fn compare(
    got: &[f32],
    want: &[f64],
    shape: &AttnShape,
    opts: &CompareOptions,
) -> Result<OracleReport, OracleError> {
    let dims = Dims {
        b: shape.batch(),
        h: shape.q_heads(),
        s: shape.q_len(),
        d: shape.head_dim(),
        kind: TensorKind::O,
    };
    compare_dims(got, want, dims, shape.kv_len(), opts)
}

/// Compares a kernel's LSE `[B, Hq, Sq]` with the reference; −∞ and −∞ (fully masked rows)
/// agree. Use the LSE cap (1e-3) as the threshold.
pub fn compare_lse(
    got: &[f32],
    want: &[f64],
    shape: &AttnShape,
    opts: &CompareOptions,
) -> Result<OracleReport, OracleError> {
    let dims = Dims {
        b: shape.batch(),
        h: shape.q_heads(),
        s: shape.q_len(),
        d: 1,
        kind: TensorKind::Lse,
    };
    compare_dims(got, want, dims, shape.kv_len(), opts)
}

fn check_len(what: &str, dims: &Dims, len: usize) -> Result<(), OracleError> {
    if len == dims.len() {
        return Ok(());
    }
    let shape = match dims.kind {
        TensorKind::O => format!("[{}, {}, {}, {}]", dims.b, dims.h, dims.s, dims.d),
        TensorKind::Lse => format!("[{}, {}, {}]", dims.b, dims.h, dims.s),
    };
    Err(OracleError::LengthMismatch {
        what: what.to_string(),
        shape,
        expected: dims.len(),
        got: len,
    })
}

pub(crate) fn compare_dims(
    got: &[f32],
    want: &[f64],
    dims: Dims,
    kv_len: usize,
    opts: &CompareOptions,
) -> Result<OracleReport, OracleError> {
    opts.validate()?;
    check_len("got", &dims, got.len())?;
    check_len("want", &dims, want.len())?;
    for alt in &opts.alternatives {
        check_len(
            &format!("alternative `{}`", alt.label),
            &dims,
            alt.want.len(),
        )?;
    }

    let rows = dims.rows();
    let mut rs = RowStats {
        max: vec![0.0; rows],
        err2: vec![0.0; rows],
        ref2: vec![0.0; rows],
        wrong: vec![0; rows],
        nan: vec![0; rows],
        nonfinite: vec![0; rows],
        poison: vec![0; rows],
    };
    let mut nan = NonFiniteCount::default();
    let mut inf = NonFiniteCount::default();
    let mut hidden = NonFiniteCount::default();
    let mut poisoned = 0usize;
    let mut max_abs = 0.0f64;
    let mut max_abs_idx: Option<usize> = None;
    let (mut err2, mut ref2) = (0.0f64, 0.0f64);
    // (error, index), sorted worst first; k is small so insertion into a short Vec is cheapest.
    let mut worst: Vec<(f64, usize)> = Vec::with_capacity(opts.worst_k + 1);

    for (idx, (&g32, &w)) in got.iter().zip(want).enumerate() {
        let row = idx / dims.d;
        let g = f64::from(g32);
        if g.is_nan() {
            let unexpected = !w.is_nan();
            nan.add(dims.loc(idx), unexpected);
            if unexpected {
                rs.nan[row] += 1;
                rs.nonfinite[row] += 1;
                rs.wrong[row] += 1;
                if opts.poison_bits == Some(g32.to_bits()) {
                    poisoned += 1;
                    rs.poison[row] += 1;
                }
            }
        } else if g.is_infinite() {
            let unexpected = g != w;
            inf.add(dims.loc(idx), unexpected);
            if unexpected {
                rs.nonfinite[row] += 1;
                rs.wrong[row] += 1;
            }
        } else if !w.is_finite() {
            hidden.add(dims.loc(idx), true);
            rs.nonfinite[row] += 1;
            rs.wrong[row] += 1;
        } else {
            let e = (g - w).abs();
            err2 += e * e;
            ref2 += w * w;
            rs.err2[row] += e * e;
            rs.ref2[row] += w * w;
            if e > rs.max[row] {
                rs.max[row] = e;
            }
            if e > max_abs || max_abs_idx.is_none() {
                max_abs = e;
                max_abs_idx = Some(idx);
            }
            if e > opts.threshold {
                rs.wrong[row] += 1;
            }
            if opts.worst_k > 0
                && (worst.len() < opts.worst_k || worst.last().is_some_and(|&(we, _)| e > we))
            {
                let pos = worst.partition_point(|&(we, _)| we >= e);
                worst.insert(pos, (e, idx));
                worst.truncate(opts.worst_k);
            }
        }
    }

    let rel = |e2: f64, r2: f64| {
        if r2 > 0.0 {
            (e2 / r2).sqrt()
        } else if e2 == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    };
    let first_wrong_in = |rows: std::ops::Range<usize>| -> Option<Location> {
        rows.into_iter().find(|&r| rs.wrong[r] > 0).and_then(|r| {
            (r * dims.d..(r + 1) * dims.d)
                .find(|&i| is_wrong(got[i], want[i], opts.threshold))
                .map(|i| dims.loc(i))
        })
    };

    let mut heads = Vec::with_capacity(dims.b * dims.h);
    for bh in 0..dims.b * dims.h {
        let range = bh * dims.s..(bh + 1) * dims.s;
        let mut g = GroupSummary {
            elements: dims.s * dims.d,
            ..GroupSummary::default()
        };
        let (mut e2, mut r2) = (0.0, 0.0);
        for r in range.clone() {
            g.max_abs = g.max_abs.max(rs.max[r]);
            g.wrong += rs.wrong[r] as usize;
            e2 += rs.err2[r];
            r2 += rs.ref2[r];
        }
        g.rel_l2 = rel(e2, r2);
        g.first_wrong = if g.wrong > 0 {
            first_wrong_in(range)
        } else {
            None
        };
        heads.push(HeadSummary {
            b: bh / dims.h,
            h: bh % dims.h,
            stats: g,
        });
    }

    let mut row_blocks = Vec::new();
    for (q_tile, start) in (0..dims.s).step_by(opts.block_m).enumerate() {
        let end = (start + opts.block_m).min(dims.s);
        let mut g = GroupSummary {
            elements: dims.b * dims.h * (end - start) * dims.d,
            ..GroupSummary::default()
        };
        let (mut e2, mut r2) = (0.0, 0.0);
        for bh in 0..dims.b * dims.h {
            for r in bh * dims.s + start..bh * dims.s + end {
                g.max_abs = g.max_abs.max(rs.max[r]);
                g.wrong += rs.wrong[r] as usize;
                e2 += rs.err2[r];
                r2 += rs.ref2[r];
            }
            if g.first_wrong.is_none() && g.wrong > 0 {
                g.first_wrong = first_wrong_in(bh * dims.s + start..bh * dims.s + end);
            }
        }
        g.rel_l2 = rel(e2, r2);
        row_blocks.push(RowBlockSummary {
            q_tile,
            start,
            end,
            stats: g,
        });
    }

    let worst = worst
        .into_iter()
        .map(|(error, idx)| WorstElement {
            at: dims.loc(idx),
            got: f64::from(got[idx]),
            want: want[idx],
            error,
        })
        .collect();
    let wrong = rs.wrong.iter().map(|&w| w as usize).sum();

    let mut report = OracleReport {
        tensor: dims.kind,
        dims: [dims.b, dims.h, dims.s, dims.d],
        threshold: opts.threshold,
        max_abs,
        max_abs_at: max_abs_idx.map(|i| dims.loc(i)),
        rel_l2: rel(err2, ref2),
        wrong,
        nan,
        inf,
        hidden,
        poisoned,
        worst,
        heads,
        row_blocks,
        pattern: ErrorPattern::Clean,
        evidence: Vec::new(),
    };
    let ctx = pattern::Context {
        got,
        want,
        dims,
        kv_len,
        opts,
        rows: &rs,
        report: &report,
    };
    let (pattern, evidence) = pattern::classify(&ctx);
    report.pattern = pattern;
    report.evidence = evidence;
    Ok(report)
}

/// Whether one pair is a fault: an unexpected non-finite value or an error above threshold.
pub(crate) fn is_wrong(got: f32, want: f64, threshold: f64) -> bool {
    let g = f64::from(got);
    if g.is_nan() {
        !want.is_nan()
    } else if g.is_infinite() {
        g != want
    } else if !want.is_finite() {
        true
    } else {
        (g - want).abs() > threshold
    }
}
