//! Error-pattern classification: reads the set of wrong elements of a comparison and names the
//! fault family, with the measurements that support it and a hint from the seeds' decision
//! tree (S diverges → QK path; P diverges → softmax update or causal mask; O diverges → P·V
//! accumulation or final normalization).
//!
//! What is observable in O. Every output row is a softmax-weighted mean of the V rows its
//! query sees, so a fault on one *key* tile does not show up as columns of O: it moves every
//! row whose visible-key range reaches that tile, by about that tile's share of the row's
//! softmax weight. With a causal mask the rows that reach key tile `t` are exactly a suffix of
//! the rows (those with `visible_keys > t·BLOCK_N`), which is the signature we look for
//! ([`ErrorPattern::KeyTileColumns`]). Without a mask every row reaches every tile and such a
//! fault is indistinguishable from a systematic one; tile dumps (`compare_tiles`) settle it.
//! Likewise a mask off by one at the diagonal adds or drops one key in (almost) every row,
//! moving row `i` by about `1/n_i` (its `n_i` visible keys share the weight): the error
//! decays like a power of `n_i` with exponent near −1 ([`ErrorPattern::CausalDiagonal`]).

use std::fmt;

use serde::Serialize;

use crate::compare::{sci, Dims, Location, OracleReport, RowStats, TensorKind};
use crate::CompareOptions;
use attn_ref::Causal;

/// A stage of the FlashAttention forward pipeline, in the order data flows through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Stage {
    /// Scores `S = scale·Q·Kᵀ`: Q/K loads, layouts, the softmax scale.
    S,
    /// The online softmax: running max m, `P = exp(S − m)`, running sum l, the causal mask.
    P,
    /// The output: `P·V` accumulation, rescaling, the final `1/l`, the store.
    O,
}

impl Stage {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Stage::S => "S",
            Stage::P => "P",
            Stage::O => "O",
        }
    }
    /// The seeds' decision-tree hint for a divergence first seen at this stage.
    pub fn hint(self) -> &'static str {
        match self {
            Stage::S => "S diverges: the QK path (Q/K layouts and loads, head/batch offsets, the softmax scale)",
            Stage::P => "P diverges: the softmax update (running max/sum, rescale) or the causal mask",
            Stage::O => "O diverges: the P·V accumulation or the final normalization and store",
        }
    }
}

/// What an alternative reference assumes went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Suspect {
    /// The alternative uses another softmax scale (1, scale², scale·log2 e…).
    SoftmaxScale,
    /// The alternative uses another causal mask (shifted by one, other alignment…).
    CausalMask,
    /// Anything else.
    Other,
}

/// A reference computed under a suspected wrong semantics: if the kernel matches it (every
/// element within the threshold), the pattern names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Alternative {
    /// What it is, for the report (`"softmax scale 1"`, `"mask j <= i+1"`).
    pub label: String,
    /// Which family of fault it stands for.
    pub suspect: Suspect,
    /// Its output, laid out like the compared tensor.
    pub want: Vec<f64>,
}

/// How a scale-like error looks.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScaleKind {
    /// `got ≈ factor · want` element-wise.
    Output {
        /// The least-squares factor `⟨got, want⟩ / ⟨want, want⟩`.
        factor: f64,
    },
    /// `got` matches a reference computed with another softmax scale.
    Softmax {
        /// The alternative's label.
        alternative: String,
    },
}

/// The axis of a tail tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Axis {
    /// Query rows (BLOCK_M).
    Query,
    /// Keys (BLOCK_N).
    Key,
}

/// A wrong head, and the reference head its output matches, if any (a head-indexing bug).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HeadMatch {
    /// Batch index.
    pub b: usize,
    /// Query head.
    pub h: usize,
    /// `(b, h)` of the reference head this output equals within the threshold.
    pub looks_like: Option<(usize, usize)>,
}

/// The family a set of wrong elements belongs to. `Display` gives one line; the report's
/// `evidence` lists the measurements behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ErrorPattern {
    /// Every element is within the threshold: what is left is rounding.
    Clean,
    /// NaN (the poison) survived where the kernel should have written: NaN in whole rows or in
    /// runs of at least one vector store (8 elements), or NaNs carrying the poison bits, where
    /// the reference and the inputs are finite.
    Unwritten {
        /// NaN elements.
        count: usize,
        /// Rows holding them.
        rows: usize,
        /// The first one.
        first: Location,
    },
    /// NaN or ±Inf the reference does not have (or finite values where it has them).
    NanInf {
        /// Unexpected NaNs.
        nan: usize,
        /// Unexpected ±Infs.
        inf: usize,
        /// Finite values where the reference is not finite.
        hidden: usize,
        /// The first unexpected non-finite value.
        first: Location,
    },
    /// A scale error: `out ≈ c·ref`, or a match with another softmax scale.
    ScaleLike {
        /// Which kind.
        scale: ScaleKind,
    },
    /// A causal mask wrong at the diagonal: almost every row that does not see every key is
    /// wrong, by an amount decaying with its visible-key count.
    CausalDiagonal {
        /// The alternative mask it matches, when one was given and matched.
        alternative: Option<String>,
        /// Fitted exponent of row error vs visible keys (≈ −1 for one key too many or few).
        decay_exponent: Option<f64>,
    },
    /// The rows that reach one key tile are wrong, and only those (causal problems).
    KeyTileColumns {
        /// The key tile.
        k_tile: usize,
        /// The first wrong row: the first row whose visible keys reach the tile.
        first_row: usize,
    },
    /// Errors confined to the partial last tile of an axis.
    TileEdges {
        /// Query rows or keys.
        axis: Axis,
        /// First row (or key) of the partial tile.
        start: usize,
    },
    /// A few heads are wrong throughout, the others are right.
    Heads {
        /// The wrong heads.
        heads: Vec<HeadMatch>,
    },
    /// Every head of one batch is wrong, the other batches are right.
    OneBatch {
        /// The batch.
        b: usize,
    },
    /// A minority of rows are wrong, each in most of its elements.
    WholeRows {
        /// Wrong rows.
        rows: usize,
        /// The first few.
        first: Vec<Location>,
    },
    /// The output matches an alternative reference (other than scale or mask).
    MatchesAlternative {
        /// Its label.
        label: String,
    },
    /// Wrong elements without a recognized structure.
    Unstructured {
        /// Rows with a wrong element.
        rows_wrong: usize,
        /// Rows in total.
        rows: usize,
        /// Heads with a wrong element.
        heads_wrong: usize,
    },
}

impl ErrorPattern {
    /// The pipeline stage this pattern points at, if any.
    pub fn stage(&self) -> Option<Stage> {
        match self {
            ErrorPattern::Clean | ErrorPattern::MatchesAlternative { .. } => None,
            ErrorPattern::Unstructured { .. } => None,
            ErrorPattern::Unwritten { .. } => Some(Stage::O),
            ErrorPattern::NanInf { .. } => Some(Stage::P),
            ErrorPattern::ScaleLike {
                scale: ScaleKind::Output { .. },
            } => Some(Stage::O),
            ErrorPattern::ScaleLike {
                scale: ScaleKind::Softmax { .. },
            } => Some(Stage::S),
            ErrorPattern::CausalDiagonal { .. } => Some(Stage::P),
            ErrorPattern::KeyTileColumns { .. } => Some(Stage::S),
            ErrorPattern::TileEdges {
                axis: Axis::Query, ..
            } => Some(Stage::O),
            ErrorPattern::TileEdges {
                axis: Axis::Key, ..
            } => Some(Stage::P),
            ErrorPattern::Heads { .. } | ErrorPattern::OneBatch { .. } => Some(Stage::S),
            ErrorPattern::WholeRows { .. } => Some(Stage::P),
        }
    }

    /// Where to look.
    pub fn hint(&self) -> &'static str {
        match self {
            ErrorPattern::Clean => "nothing to fix: the differences are rounding",
            ErrorPattern::Unwritten { .. } => "O: rows never stored — the grid (ceil(Sq/BLOCK_M) blocks), the row predicate of the O store, early exits of fully masked blocks",
            ErrorPattern::NanInf { .. } => "P: overflow or 0/0 in the softmax — exp of an unsubtracted max, −∞ − (−∞) for masked rows, 1/l with l = 0; with non-finite inputs, check propagation",
            ErrorPattern::ScaleLike { scale: ScaleKind::Output { .. } } => "O: a constant factor on the output — the final 1/l normalization or a missing/double rescale of the accumulator",
            ErrorPattern::ScaleLike { scale: ScaleKind::Softmax { .. } } => "S: the softmax scale (missing, applied twice, or log2 e folded in for exp2 but not undone)",
            ErrorPattern::CausalDiagonal { .. } => "P: the causal mask at the diagonal — off by one (j <= i vs j < i) or top-left vs bottom-right alignment",
            ErrorPattern::KeyTileColumns { .. } => "S: the K (or V) tile loaded for that key tile — pipeline stage/buffer index, tile offset; dump its tiles to see if S or only O diverges",
            ErrorPattern::TileEdges { axis: Axis::Query, .. } => "O: the partial last query tile — Q load and O store predicates for rows >= Sq",
            ErrorPattern::TileEdges { axis: Axis::Key, .. } => "P: the partial last key tile — keys >= Sk must be masked to −∞ before max/sum and their V rows zero-filled",
            ErrorPattern::Heads { .. } => "S: head indexing — the (b, h) → pointer offsets, the GQA kv-head mapping h / (Hq/Hkv)",
            ErrorPattern::OneBatch { .. } => "S: batch indexing — the batch stride of Q/K/V or O",
            ErrorPattern::WholeRows { .. } => "P: per-row state — the row's max/sum (m, l) or the row mapping of the O store",
            ErrorPattern::MatchesAlternative { .. } => "the kernel computes the alternative's semantics",
            ErrorPattern::Unstructured { .. } => "no structure: dump tiles (--tiles) to find the first diverging stage",
        }
    }
}

impl fmt::Display for ErrorPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorPattern::Clean => write!(f, "clean (rounding only)"),
            ErrorPattern::Unwritten { count, rows, first } => write!(
                f,
                "unwritten: {count} poison NaN in {rows} rows, first at {first}"
            ),
            ErrorPattern::NanInf {
                nan,
                inf,
                hidden,
                first,
            } => write!(
                f,
                "NaN/Inf: {nan} NaN, {inf} Inf, {hidden} hidden, first at {first}"
            ),
            ErrorPattern::ScaleLike {
                scale: ScaleKind::Output { factor },
            } => write!(f, "scale-like: out ≈ {factor:.4}·ref"),
            ErrorPattern::ScaleLike {
                scale: ScaleKind::Softmax { alternative },
            } => write!(f, "scale-like: matches the reference with {alternative}"),
            ErrorPattern::CausalDiagonal {
                alternative,
                decay_exponent,
            } => {
                write!(f, "causal diagonal")?;
                if let Some(a) = alternative {
                    write!(f, ": matches the reference with {a}")?;
                }
                if let Some(e) = decay_exponent {
                    write!(f, " (row error ∝ n^{e:.2})")?;
                }
                Ok(())
            }
            ErrorPattern::KeyTileColumns { k_tile, first_row } => write!(
                f,
                "key tile {k_tile}: exactly the rows that reach it are wrong (from row {first_row})"
            ),
            ErrorPattern::TileEdges { axis, start } => match axis {
                Axis::Query => write!(f, "tile edge: the partial last query tile (rows {start}..)"),
                Axis::Key => write!(f, "tile edge: the partial last key tile (keys {start}..)"),
            },
            ErrorPattern::Heads { heads } => {
                let n = heads.len();
                write!(f, "{} wrong:", if n == 1 { "one head" } else { "heads" })?;
                for x in heads {
                    write!(f, " (b={}, h={})", x.b, x.h)?;
                    if let Some((b, h)) = x.looks_like {
                        write!(f, " = ref (b={b}, h={h})")?;
                    }
                }
                Ok(())
            }
            ErrorPattern::OneBatch { b } => write!(f, "one batch wrong: b={b}"),
            ErrorPattern::WholeRows { rows, first } => {
                write!(f, "whole rows: {rows} wrong")?;
                if let Some(l) = first.first() {
                    write!(f, ", first {l}")?;
                }
                Ok(())
            }
            ErrorPattern::MatchesAlternative { label } => {
                write!(f, "matches the alternative reference `{label}`")
            }
            ErrorPattern::Unstructured {
                rows_wrong,
                rows,
                heads_wrong,
            } => write!(
                f,
                "unstructured: {rows_wrong} of {rows} rows in {heads_wrong} heads"
            ),
        }
    }
}

/// Everything the classification reads.
pub(crate) struct Context<'a> {
    pub got: &'a [f32],
    pub want: &'a [f64],
    pub dims: Dims,
    pub kv_len: usize,
    pub opts: &'a CompareOptions,
    pub rows: &'a RowStats,
    pub report: &'a OracleReport,
}

/// Names the pattern of the wrong elements; returns it with its evidence.
pub(crate) fn classify(c: &Context<'_>) -> (ErrorPattern, Vec<String>) {
    let mut ev = Vec::new();
    let r = c.report;
    if r.nonfinite_faults() > 0 {
        return (nonfinite(c, &mut ev), ev);
    }
    if r.wrong == 0 {
        let (lo, hi) = r.heads.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
            (lo.min(x.stats.max_abs), hi.max(x.stats.max_abs))
        });
        ev.push(format!(
            "max abs {} <= threshold {}",
            sci(r.max_abs),
            sci(c.opts.threshold)
        ));
        ev.push(format!(
            "per-head max abs between {} and {}",
            sci(lo),
            sci(hi)
        ));
        return (ErrorPattern::Clean, ev);
    }
    if let Some(p) = alternatives(c, &mut ev) {
        return (p, ev);
    }
    if let Some(p) = output_scale(c, &mut ev) {
        return (p, ev);
    }
    if let Some(p) = heads(c, &mut ev) {
        return (p, ev);
    }
    (rows(c, &mut ev), ev)
}

/// Elements of the narrowest vector store a kernel issues for O (16 bytes of f16/bf16).
const STORE_VECTOR: usize = 8;

fn nonfinite(c: &Context<'_>, ev: &mut Vec<String>) -> ErrorPattern {
    let r = c.report;
    let d = c.dims.d;
    let nan_rows: Vec<usize> = (0..c.dims.rows()).filter(|&i| c.rows.nan[i] > 0).collect();
    let whole_rows = nan_rows.iter().all(|&i| c.rows.nan[i] as usize == d);
    // A skipped store leaves at least one vector store's worth of contiguous elements (16
    // bytes = 8 halves); an isolated NaN is arithmetic.
    let min_run = d.min(STORE_VECTOR);
    let store_shaped = nan_rows.iter().all(|&row| {
        let got = &c.got[row * d..(row + 1) * d];
        let want = &c.want[row * d..(row + 1) * d];
        let mut run = 0usize;
        let mut ok = true;
        for (g, w) in got.iter().zip(want) {
            if g.is_nan() && !w.is_nan() {
                run += 1;
            } else {
                ok &= run == 0 || run >= min_run;
                run = 0;
            }
        }
        ok && (run == 0 || run >= min_run)
    });
    let only_nan = r.inf.unexpected == 0 && r.hidden.unexpected == 0;
    let poison_ok = match c.opts.poison_bits {
        Some(_) => r.poisoned == r.nan.unexpected,
        None => store_shaped,
    };
    if let (true, true, Some(first)) = (
        c.opts.inputs_finite && only_nan && poison_ok,
        !nan_rows.is_empty(),
        r.nan.first_unexpected,
    ) {
        let heads: std::collections::BTreeSet<usize> =
            nan_rows.iter().map(|&i| i / c.dims.s).collect();
        let (lo, hi) = nan_rows.iter().fold((usize::MAX, 0), |(lo, hi), &i| {
            (lo.min(i % c.dims.s), hi.max(i % c.dims.s))
        });
        ev.push(format!(
            "{} NaN where the reference and the inputs are finite",
            r.nan.unexpected
        ));
        match c.opts.poison_bits {
            Some(bits) => ev.push(format!("all carry the poison bits {bits:#010x}")),
            None => {
                ev.push(if whole_rows {
                    format!("they fill whole rows ({} rows × {d})", nan_rows.len())
                } else {
                    format!(
                        "they form runs of >= {min_run} contiguous elements in {} rows: parts of rows never stored",
                        nan_rows.len()
                    )
                });
                ev.push("the shape of a skipped store; a NaN the kernel computes for a whole row (0/0 with l = 0) looks the same — poison with a NaN payload to tell".to_string());
            }
        }
        ev.push(format!(
            "rows s = {lo}..={hi} in {} of {} heads",
            heads.len(),
            c.dims.b * c.dims.h
        ));
        return ErrorPattern::Unwritten {
            count: r.nan.unexpected,
            rows: nan_rows.len(),
            first,
        };
    }
    let firsts = [
        r.nan.first_unexpected,
        r.inf.first_unexpected,
        r.hidden.first_unexpected,
    ];
    let first = firsts.into_iter().flatten().min().unwrap_or(Location {
        b: 0,
        h: 0,
        s: 0,
        d: None,
    });
    for (name, x) in [("NaN", &r.nan), ("Inf", &r.inf), ("hidden", &r.hidden)] {
        if let Some(at) = x.first_unexpected {
            ev.push(format!("{} unexpected {name}, first at {at}", x.unexpected));
        }
    }
    if !c.opts.inputs_finite {
        ev.push("the inputs are not finite: the kernel must propagate exactly what the reference propagates".to_string());
    } else if r.nan.unexpected > 0 && !store_shaped {
        ev.push(format!("isolated NaN (runs shorter than {min_run} elements) with finite inputs: computed by the kernel (0/0, ∞ − ∞), not left unwritten"));
    } else if r.nan.unexpected > 0 && c.opts.poison_bits.is_some() {
        ev.push(format!(
            "{} of {} NaN carry the poison bits: not all of them are unwritten",
            r.poisoned, r.nan.unexpected
        ));
    }
    ErrorPattern::NanInf {
        nan: r.nan.unexpected,
        inf: r.inf.unexpected,
        hidden: r.hidden.unexpected,
        first,
    }
}

/// How well `got` fits another candidate reference.
struct Fit {
    /// Max abs error over finite pairs.
    max: f64,
    /// Elements above the threshold or with a non-finite disagreement.
    wrong: usize,
    /// `‖got − want‖ / ‖want‖` over finite pairs.
    rel_l2: f64,
}

impl Fit {
    fn of(got: &[f32], want: &[f64], threshold: f64) -> Self {
        let (mut max, mut wrong, mut e2, mut r2) = (0.0f64, 0usize, 0.0f64, 0.0f64);
        for (&g, &w) in got.iter().zip(want) {
            wrong += usize::from(crate::compare::is_wrong(g, w, threshold));
            let e = (f64::from(g) - w).abs();
            if e.is_finite() && w.is_finite() {
                max = max.max(e);
                e2 += e * e;
                r2 += w * w;
            }
        }
        let rel_l2 = if r2 > 0.0 {
            (e2 / r2).sqrt()
        } else {
            e2.sqrt()
        };
        Fit { max, wrong, rel_l2 }
    }

    /// Whether this candidate explains `got` where the reference (max abs `max`, rel L2
    /// `rel_l2`) does not: every element within the threshold, or an error at least ten
    /// times smaller in L2 and four times smaller at the worst element. The second form
    /// matters because a kernel also carries its own rounding, which an exact candidate
    /// reference does not.
    fn explains(&self, max: f64, rel_l2: f64) -> bool {
        self.wrong == 0 || (self.rel_l2 <= 0.1 * rel_l2 && self.max <= 0.25 * max)
    }
}

fn alternatives(c: &Context<'_>, ev: &mut Vec<String>) -> Option<ErrorPattern> {
    let r = c.report;
    let mut best: Option<(&crate::Alternative, Fit)> = None;
    for alt in &c.opts.alternatives {
        let fit = Fit::of(c.got, &alt.want, c.opts.threshold);
        if fit.explains(r.max_abs, r.rel_l2)
            && best.as_ref().is_none_or(|(_, b)| fit.rel_l2 < b.rel_l2)
        {
            best = Some((alt, fit));
        }
    }
    let (alt, fit) = best?;
    ev.push(format!(
        "matches `{}`: max abs {}, rel L2 {} (against the reference: {}, {})",
        alt.label,
        sci(fit.max),
        sci(fit.rel_l2),
        sci(r.max_abs),
        sci(r.rel_l2)
    ));
    Some(match alt.suspect {
        Suspect::SoftmaxScale => ErrorPattern::ScaleLike {
            scale: ScaleKind::Softmax {
                alternative: alt.label.clone(),
            },
        },
        Suspect::CausalMask => ErrorPattern::CausalDiagonal {
            alternative: Some(alt.label.clone()),
            decay_exponent: None,
        },
        Suspect::Other => ErrorPattern::MatchesAlternative {
            label: alt.label.clone(),
        },
    })
}

fn output_scale(c: &Context<'_>, ev: &mut Vec<String>) -> Option<ErrorPattern> {
    let (gw, ww) = c
        .got
        .iter()
        .zip(c.want)
        .filter(|(g, w)| g.is_finite() && w.is_finite())
        .fold((0.0, 0.0), |(gw, ww), (&g, &w)| {
            (gw + f64::from(g) * w, ww + w * w)
        });
    let factor = gw / ww;
    if !factor.is_finite() || (factor - 1.0).abs() < 1e-3 {
        return None;
    }
    let scaled: Vec<f64> = c.want.iter().map(|&w| factor * w).collect();
    let fit = Fit::of(c.got, &scaled, c.opts.threshold);
    if !fit.explains(c.report.max_abs, c.report.rel_l2) {
        return None;
    }
    ev.push(format!(
        "least-squares factor c = {factor:.6}: max |got − c·ref| = {}, rel L2 {} (against the reference: {}, {})",
        sci(fit.max),
        sci(fit.rel_l2),
        sci(c.report.max_abs),
        sci(c.report.rel_l2)
    ));
    Some(ErrorPattern::ScaleLike {
        scale: ScaleKind::Output { factor },
    })
}

fn heads(c: &Context<'_>, ev: &mut Vec<String>) -> Option<ErrorPattern> {
    let (nb, nh, s) = (c.dims.b, c.dims.h, c.dims.s);
    let n_heads = nb * nh;
    let wrong_rows_of = |bh: usize| {
        (bh * s..(bh + 1) * s)
            .filter(|&r| c.rows.wrong[r] > 0)
            .count()
    };
    let wrong: Vec<(usize, usize)> = (0..n_heads)
        .map(|bh| (bh, wrong_rows_of(bh)))
        .filter(|&(_, n)| n > 0)
        .collect();
    if n_heads < 2 || wrong.len() >= n_heads || wrong.iter().any(|&(_, n)| 2 * n < s) {
        return None;
    }
    let min_frac = wrong.iter().map(|&(_, n)| n).min().unwrap_or(0) as f64 / s as f64;
    let right_max = c
        .report
        .heads
        .iter()
        .filter(|x| x.stats.wrong == 0)
        .fold(0.0f64, |m, x| m.max(x.stats.max_abs));
    ev.push(format!(
        "{} of {n_heads} heads wrong, each in >= {:.0}% of its rows; the other heads' max abs is {}",
        wrong.len(),
        100.0 * min_frac,
        sci(right_max)
    ));
    let batches: std::collections::BTreeSet<usize> = wrong.iter().map(|&(bh, _)| bh / nh).collect();
    if nb > 1 && nh > 1 && wrong.len() == nh && batches.len() == 1 {
        let b = *batches.iter().next()?;
        ev.push(format!("they are exactly the {nh} heads of batch {b}"));
        return Some(ErrorPattern::OneBatch { b });
    }
    let span = s * c.dims.d;
    let mut found = Vec::new();
    for &(bh, _) in &wrong {
        // A head-indexing bug writes another head's output here: look for it (bounded, since
        // the search is quadratic in heads).
        let looks_like = if wrong.len() <= 8 {
            let got = &c.got[bh * span..(bh + 1) * span];
            let own = &c.report.heads[bh].stats;
            (0..n_heads)
                .filter(|&o| o != bh)
                .find(|&o| {
                    Fit::of(got, &c.want[o * span..(o + 1) * span], c.opts.threshold)
                        .explains(own.max_abs, own.rel_l2)
                })
                .map(|o| (o / nh, o % nh))
        } else {
            None
        };
        if let Some((ob, oh)) = looks_like {
            ev.push(format!(
                "O(b={}, h={}) matches the reference's head (b={ob}, h={oh})",
                bh / nh,
                bh % nh
            ));
        }
        found.push(HeadMatch {
            b: bh / nh,
            h: bh % nh,
            looks_like,
        });
    }
    Some(ErrorPattern::Heads { heads: found })
}

/// Least-squares slope of `y` on `x`.
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), &(x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (sxy, sxx) = points.iter().fold((0.0, 0.0), |(a, b), &(x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    (sxx > 0.0).then(|| sxy / sxx)
}

fn rows(c: &Context<'_>, ev: &mut Vec<String>) -> ErrorPattern {
    let (s_len, d) = (c.dims.s, c.dims.d);
    let n_heads = c.dims.b * c.dims.h;
    let total_rows = c.dims.rows();
    // Collapse (b, h): per query row s, in how many heads it is wrong and its RMS error.
    let mut heads_wrong_at = vec![0usize; s_len];
    let mut err2_at = vec![0.0f64; s_len];
    for row in 0..total_rows {
        let s = row % s_len;
        heads_wrong_at[s] += usize::from(c.rows.wrong[row] > 0);
        err2_at[s] += c.rows.err2[row];
    }
    let rms_at = |s: usize| (err2_at[s] / (n_heads * d) as f64).sqrt();
    let wrong_s: Vec<usize> = (0..s_len).filter(|&s| heads_wrong_at[s] > 0).collect();
    let rows_wrong = c.rows.wrong.iter().filter(|&&w| w > 0).count();
    let heads_wrong = c.report.heads.iter().filter(|x| x.stats.wrong > 0).count();
    let (Some(&first_s), Some(&last_s)) = (wrong_s.first(), wrong_s.last()) else {
        return ErrorPattern::Clean;
    };

    // Tail rows: everything wrong lies in the partial last row block.
    let bm = c.opts.block_m;
    if s_len % bm != 0 && s_len > bm {
        let tail = s_len / bm * bm;
        // Most of the tail's rows must be wrong: one bad row that happens to lie in the
        // tail is a row fault, not a tail fault.
        if first_s >= tail && 2 * wrong_s.len() >= s_len - tail {
            ev.push(format!(
                "every wrong row has s >= {tail}: the partial last row block ({} rows; Sq = {s_len} is not a multiple of BLOCK_M = {bm})",
                s_len - tail
            ));
            ev.push(format!(
                "{} of its rows wrong in {heads_wrong} heads ({rows_wrong} (b, h, s) rows); rows s < {tail} are within the threshold",
                wrong_s.len()
            ));
            // With a causal mask the rows of the query tail can be exactly the rows that
            // reach the partial last key tile (Sq == Sk): say so rather than guess.
            let kv = c.kv_len;
            let bn = c.opts.block_n;
            if c.opts.causal != Causal::None && kv % bn != 0 && c.dims.kind == TensorKind::O {
                let key_tail = kv / bn * bn;
                let reach = |s: usize| c.opts.causal.visible_keys(s, s_len, kv) > key_tail;
                if reach(first_s) && (first_s == 0 || !reach(first_s - 1)) {
                    ev.push(format!(
                        "the same rows are those reaching the partial last key tile (keys {key_tail}..{kv}): it may be the key tail instead; dump tiles to tell"
                    ));
                }
            }
            return ErrorPattern::TileEdges {
                axis: Axis::Query,
                start: tail,
            };
        }
    }

    if c.opts.causal != Causal::None && c.dims.kind == TensorKind::O {
        if let Some(p) = causal(c, ev, &wrong_s, &heads_wrong_at, &rms_at) {
            return p;
        }
    }

    // Whole rows: a minority of rows, each wrong in most of its elements.
    let wrong_rows: Vec<usize> = (0..total_rows).filter(|&r| c.rows.wrong[r] > 0).collect();
    let min_fill = wrong_rows
        .iter()
        .map(|&r| c.rows.wrong[r] as usize)
        .min()
        .unwrap_or(0);
    if 2 * wrong_rows.len() <= total_rows && 2 * min_fill >= d {
        let first: Vec<Location> = wrong_rows
            .iter()
            .take(8)
            .map(|&r| c.dims.row_loc(r))
            .collect();
        ev.push(format!(
            "{} of {total_rows} rows wrong, each in >= {min_fill} of its {d} elements",
            wrong_rows.len()
        ));
        let listed: Vec<String> = first.iter().map(Location::to_string).collect();
        ev.push(format!("rows: {}", listed.join(", ")));
        if first_s / bm == last_s / bm {
            ev.push(format!(
                "all in row block {} (rows {}..{})",
                first_s / bm,
                first_s / bm * bm,
                ((first_s / bm + 1) * bm).min(s_len)
            ));
        }
        return ErrorPattern::WholeRows {
            rows: wrong_rows.len(),
            first,
        };
    }

    ev.push(format!(
        "{rows_wrong} of {total_rows} rows and {heads_wrong} of {n_heads} heads hold wrong elements ({} elements)",
        c.report.wrong
    ));
    if 2 * rows_wrong > total_rows {
        ev.push(if c.opts.causal == Causal::None {
            "without a causal mask every row sees every key tile: a fault in one key tile also looks like this".to_string()
        } else {
            "every row sees key tile 0: a fault in that tile also looks like this".to_string()
        });
    }
    let blocks: Vec<String> = c
        .report
        .row_blocks
        .iter()
        .take(8)
        .map(|x| format!("{}:{}", x.q_tile, sci(x.stats.max_abs)))
        .collect();
    ev.push(format!("per-row-block max abs: {}", blocks.join(" ")));
    ErrorPattern::Unstructured {
        rows_wrong,
        rows: total_rows,
        heads_wrong,
    }
}

fn causal(
    c: &Context<'_>,
    ev: &mut Vec<String>,
    wrong_s: &[usize],
    heads_wrong_at: &[usize],
    rms_at: &dyn Fn(usize) -> f64,
) -> Option<ErrorPattern> {
    let (s_len, kv) = (c.dims.s, c.kv_len);
    let bn = c.opts.block_n;
    let visible = |s: usize| c.opts.causal.visible_keys(s, s_len, kv);
    let is_wrong = |s: usize| heads_wrong_at[s] > 0;

    // Diagonal: nearly every row that does not see every key is wrong, with an error that
    // decays with the visible-key count (fit over the rows inside the first key tile, where a
    // key-tile fault would be flat).
    let partial: Vec<usize> = (0..s_len).filter(|&s| visible(s) < kv).collect();
    let partial_wrong = partial.iter().filter(|&&s| is_wrong(s)).count();
    if partial.len() >= 8 && 4 * partial_wrong >= 3 * partial.len() {
        let pts = |limit: usize| -> Vec<(f64, f64)> {
            wrong_s
                .iter()
                .filter(|&&s| (1..=limit).contains(&visible(s)) && rms_at(s) > 0.0)
                .map(|&s| ((visible(s) as f64).ln(), rms_at(s).ln()))
                .collect()
        };
        let mut fit = pts(bn.max(16));
        if fit.len() < 8 {
            fit = pts(usize::MAX);
        }
        if fit.len() >= 8 {
            if let Some(e) = slope(&fit).filter(|&e| e <= -0.5) {
                ev.push(format!(
                    "{partial_wrong} of the {} rows that do not see every key are wrong",
                    partial.len()
                ));
                ev.push(format!(
                    "row RMS error ∝ n^{e:.2} over {} rows (n = visible keys): about one key's weight 1/n, as a mask off by one at the diagonal gives",
                    fit.len()
                ));
                return Some(ErrorPattern::CausalDiagonal {
                    alternative: None,
                    decay_exponent: Some(e),
                });
            }
        }
    }

    // Key tile: the wrong rows are exactly those from r0 on, and r0 is the first row whose
    // visible keys reach some key tile t.
    let r0 = *wrong_s.first()?;
    let suffix = s_len - r0;
    if r0 == 0 || 10 * wrong_s.len() < 9 * suffix {
        return None;
    }
    let (n_prev, n_first) = (visible(r0 - 1), visible(r0));
    if n_first == 0 {
        return None;
    }
    let t = (n_first - 1) / bn;
    if n_prev > t * bn {
        return None;
    }
    ev.push(format!(
        "{} of the {suffix} rows s >= {r0} are wrong, no row before",
        wrong_s.len()
    ));
    ev.push(format!(
        "row {r0} is the first whose visible keys (n = {n_first}) reach key tile {t} (keys {}..{})",
        t * bn,
        ((t + 1) * bn).min(kv)
    ));
    let last_tile = (kv - 1) / bn;
    if kv % bn != 0 && t == last_tile {
        ev.push(format!(
            "key tile {t} is the partial last one (Sk = {kv} is not a multiple of BLOCK_N = {bn})"
        ));
        return Some(ErrorPattern::TileEdges {
            axis: Axis::Key,
            start: t * bn,
        });
    }
    Some(ErrorPattern::KeyTileColumns {
        k_tile: t,
        first_row: r0,
    })
}
