//! Tile-by-tile comparison of a debug kernel's S/P/m/l dumps with the tiled reference: which
//! tiles are missing or extra, each tile's error per stage, the first diverging stage and the
//! worst tile.

use std::collections::BTreeMap;
use std::fmt;

use attn_ref::{Tile, TileId};
use serde::{Serialize, Serializer};

use crate::compare::sci;
use crate::{OracleReport, Stage, Storage};

/// Per-stage tolerances of a tile comparison. They assume the tiled reference ran on the
/// same storage-rounded inputs as the kernel, so S differs only by f32 accumulation order and
/// P additionally by the kernel's `exp` (and its rounding of P when it dumps it rounded).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TileTolerance {
    /// Max abs error of S (scaled scores).
    pub s: f64,
    /// Max abs error of P (`exp(S − m)`, in [0, 1]).
    pub p: f64,
    /// Max abs error of the running max m.
    pub m: f64,
    /// Max relative error of the running sum l.
    pub l_rel: f64,
}

impl TileTolerance {
    /// Defaults for a storage type: f16 P carries 2⁻¹¹ relative rounding, bf16 2⁻⁸.
    pub fn for_storage(storage: Storage) -> Self {
        match storage {
            Storage::F16 => Self {
                s: 1e-3,
                p: 2e-3,
                m: 1e-3,
                l_rel: 2e-3,
            },
            Storage::Bf16 | Storage::Fp8E4m3 => Self {
                s: 8e-3,
                p: 1.6e-2,
                m: 8e-3,
                l_rel: 1.6e-2,
            },
        }
    }
}

impl Default for TileTolerance {
    fn default() -> Self {
        Self::for_storage(Storage::F16)
    }
}

fn ser_id<S: Serializer>(id: &TileId, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut st = s.serialize_struct("TileId", 4)?;
    st.serialize_field("b", &id.b)?;
    st.serialize_field("h", &id.h)?;
    st.serialize_field("q_tile", &id.q_tile)?;
    st.serialize_field("k_tile", &id.k_tile)?;
    st.end()
}

fn ser_ids<S: Serializer>(ids: &[TileId], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    struct W<'a>(&'a TileId);
    impl Serialize for W<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            ser_id(self.0, s)
        }
    }
    let mut seq = s.serialize_seq(Some(ids.len()))?;
    for id in ids {
        seq.serialize_element(&W(id))?;
    }
    seq.end()
}

fn ser_opt_id<S: Serializer>(id: &Option<TileId>, s: S) -> Result<S::Ok, S::Error> {
    match id {
        Some(id) => ser_id(id, s),
        None => s.serialize_none(),
    }
}

fn fmt_id(id: &TileId) -> String {
    format!("(b={}, h={}, q={}, k={})", id.b, id.h, id.q_tile, id.k_tile)
}

/// The comparison of one tile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TileDiff {
    /// Which tile.
    #[serde(serialize_with = "ser_id")]
    pub id: TileId,
    /// Valid rows × cols of the reference tile.
    pub rows: usize,
    /// Valid key columns of the reference tile.
    pub cols: usize,
    /// Why the tiles cannot be compared element-wise (different extents or buffer lengths).
    pub shape_mismatch: Option<String>,
    /// Max abs error of S over pairs where both are finite.
    pub s_max: f64,
    /// `(row, col)` of `s_max`.
    pub s_worst: Option<(usize, usize)>,
    /// Elements of S masked (−∞) on one side only: a mask difference.
    pub s_mask_mismatch: usize,
    /// Other non-finite disagreements in S (NaN, +∞).
    pub s_nonfinite: usize,
    /// Max abs error of P.
    pub p_max: f64,
    /// `(row, col)` of `p_max`.
    pub p_worst: Option<(usize, usize)>,
    /// Max abs error of m.
    pub m_max: f64,
    /// Max relative error of l.
    pub l_max_rel: f64,
    /// Non-finite disagreements in P, m or l.
    pub softmax_nonfinite: usize,
    /// The first stage whose tolerance is exceeded in this tile.
    pub stage: Option<Stage>,
    /// Worst error as a multiple of its tolerance, over all stages (∞ for non-finite).
    pub score: f64,
}

/// The comparison of a set of dumped tiles with the reference's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TileReport {
    /// The tolerances used.
    pub tolerance: TileTolerance,
    /// Tiles found on both sides, in `(b, h, q_tile, k_tile)` order.
    pub tiles: Vec<TileDiff>,
    /// Tiles the reference has and the kernel did not dump.
    #[serde(serialize_with = "ser_ids")]
    pub missing: Vec<TileId>,
    /// Tiles the kernel dumped that the reference does not have (e.g. a fully masked key
    /// tile the kernel should have skipped).
    #[serde(serialize_with = "ser_ids")]
    pub extra: Vec<TileId>,
    /// The earliest stage that diverges in any tile (S before P).
    pub first_stage: Option<Stage>,
    /// The first diverging tile in processing order.
    #[serde(serialize_with = "ser_opt_id")]
    pub first_divergence: Option<TileId>,
    /// The tile with the largest score.
    #[serde(serialize_with = "ser_opt_id")]
    pub worst: Option<TileId>,
}

impl TileReport {
    /// Whether every tile matched and none is missing or extra.
    pub fn is_clean(&self) -> bool {
        self.first_stage.is_none() && self.missing.is_empty() && self.extra.is_empty()
    }

    /// The first diverging stage of the whole pipeline: the tiles' stage if any tile
    /// diverges, else O if the output comparison is not clean, else none.
    pub fn diagnose(&self, o: &OracleReport) -> Option<Stage> {
        self.first_stage
            .or_else(|| (!o.is_clean()).then_some(Stage::O))
    }
}

impl fmt::Display for TileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let diverging = self.tiles.iter().filter(|t| t.stage.is_some()).count();
        writeln!(
            f,
            "tiles: {} compared, {diverging} diverging, {} missing, {} extra",
            self.tiles.len(),
            self.missing.len(),
            self.extra.len()
        )?;
        if let (Some(stage), Some(first)) = (self.first_stage, self.first_divergence) {
            writeln!(
                f,
                "  first diverging stage: {} (first tile {}); {}",
                stage.name(),
                fmt_id(&first),
                stage.hint()
            )?;
        }
        if let Some(w) = self
            .worst
            .and_then(|w| self.tiles.iter().find(|t| t.id == w))
        {
            writeln!(
                f,
                "  worst tile {}: S {} P {} m {} l(rel) {}{}",
                fmt_id(&w.id),
                sci(w.s_max),
                sci(w.p_max),
                sci(w.m_max),
                sci(w.l_max_rel),
                if w.s_mask_mismatch > 0 {
                    format!(", {} mask differences", w.s_mask_mismatch)
                } else {
                    String::new()
                }
            )?;
        }
        for id in self.missing.iter().take(4) {
            writeln!(f, "  missing {}", fmt_id(id))?;
        }
        for id in self.extra.iter().take(4) {
            writeln!(f, "  extra {}", fmt_id(id))?;
        }
        Ok(())
    }
}

/// `|a − b|` where both are finite; `None` when both are the same non-finite value;
/// `Some(∞)` for a non-finite disagreement.
fn pair_err(a: f64, b: f64) -> Option<f64> {
    if a.is_finite() && b.is_finite() {
        Some((a - b).abs())
    } else if a == b || (a.is_nan() && b.is_nan()) {
        None
    } else {
        Some(f64::INFINITY)
    }
}

fn diff_tile(got: &Tile, want: &Tile, tol: &TileTolerance) -> TileDiff {
    let mut d = TileDiff {
        id: want.id,
        rows: want.rows,
        cols: want.cols,
        shape_mismatch: None,
        s_max: 0.0,
        s_worst: None,
        s_mask_mismatch: 0,
        s_nonfinite: 0,
        p_max: 0.0,
        p_worst: None,
        m_max: 0.0,
        l_max_rel: 0.0,
        softmax_nonfinite: 0,
        stage: None,
        score: 0.0,
    };
    let n = want.rows * want.cols;
    let lens_ok = [got.s.len(), got.p.len(), want.s.len(), want.p.len()]
        .iter()
        .all(|&l| l == n)
        && [got.m.len(), got.l.len(), want.m.len(), want.l.len()]
            .iter()
            .all(|&l| l == want.rows);
    if got.rows != want.rows || got.cols != want.cols || !lens_ok {
        d.shape_mismatch = Some(format!(
            "kernel tile is {}×{} (S {}, P {}, m {}, l {} values), reference {}×{}",
            got.rows,
            got.cols,
            got.s.len(),
            got.p.len(),
            got.m.len(),
            got.l.len(),
            want.rows,
            want.cols
        ));
        d.stage = Some(Stage::S);
        d.score = f64::INFINITY;
        return d;
    }
    let cols = want.cols.max(1);
    for (i, (&g, &w)) in got.s.iter().zip(&want.s).enumerate() {
        match pair_err(g, w) {
            Some(e) if e.is_finite() && e > d.s_max => {
                d.s_max = e;
                d.s_worst = Some((i / cols, i % cols));
            }
            Some(e) if e.is_finite() => {}
            Some(_) if g == f64::NEG_INFINITY || w == f64::NEG_INFINITY => d.s_mask_mismatch += 1,
            Some(_) => d.s_nonfinite += 1,
            None => {}
        }
    }
    for (i, (&g, &w)) in got.p.iter().zip(&want.p).enumerate() {
        match pair_err(g, w) {
            Some(e) if e.is_finite() && e > d.p_max => {
                d.p_max = e;
                d.p_worst = Some((i / cols, i % cols));
            }
            Some(e) if e.is_finite() => {}
            Some(_) => d.softmax_nonfinite += 1,
            None => {}
        }
    }
    for (&g, &w) in got.m.iter().zip(&want.m) {
        match pair_err(g, w) {
            Some(e) if e.is_finite() => d.m_max = d.m_max.max(e),
            Some(_) => d.softmax_nonfinite += 1,
            None => {}
        }
    }
    for (&g, &w) in got.l.iter().zip(&want.l) {
        match pair_err(g, w) {
            Some(e) if e.is_finite() => {
                d.l_max_rel = d.l_max_rel.max(e / w.abs().max(f64::MIN_POSITIVE))
            }
            Some(_) => d.softmax_nonfinite += 1,
            None => {}
        }
    }
    let ratio = |e: f64, t: f64| {
        if t > 0.0 {
            e / t
        } else if e > 0.0 {
            f64::INFINITY
        } else {
            0.0
        }
    };
    let s_score = if d.s_nonfinite > 0 {
        f64::INFINITY
    } else {
        ratio(d.s_max, tol.s)
    };
    let p_score = [
        ratio(d.p_max, tol.p),
        ratio(d.m_max, tol.m),
        ratio(d.l_max_rel, tol.l_rel),
        if d.softmax_nonfinite > 0 || d.s_mask_mismatch > 0 {
            f64::INFINITY
        } else {
            0.0
        },
    ]
    .into_iter()
    .fold(0.0f64, f64::max);
    // A mask difference shows in the dumped S as −∞ on one side, but it is the mask (stage P)
    // that is wrong; only finite score errors point at the QK path.
    d.stage = if s_score > 1.0 {
        Some(Stage::S)
    } else if p_score > 1.0 {
        Some(Stage::P)
    } else {
        None
    };
    d.score = s_score.max(p_score);
    d
}

/// Pairs the kernel's dumped tiles with the reference's by [`TileId`] and compares S, P, m
/// and l. Duplicate ids keep the last tile of each side.
pub fn compare_tiles(got: &[Tile], want: &[Tile], tol: &TileTolerance) -> TileReport {
    let got_by_id: BTreeMap<TileId, &Tile> = got.iter().map(|t| (t.id, t)).collect();
    let want_by_id: BTreeMap<TileId, &Tile> = want.iter().map(|t| (t.id, t)).collect();
    let missing = want_by_id
        .keys()
        .filter(|id| !got_by_id.contains_key(id))
        .copied()
        .collect();
    let extra = got_by_id
        .keys()
        .filter(|id| !want_by_id.contains_key(id))
        .copied()
        .collect();
    let tiles: Vec<TileDiff> = want_by_id
        .iter()
        .filter_map(|(id, w)| got_by_id.get(id).map(|g| diff_tile(g, w, tol)))
        .collect();
    let first_stage = tiles.iter().filter_map(|t| t.stage).min();
    let first_divergence = tiles.iter().find(|t| t.stage.is_some()).map(|t| t.id);
    let worst = tiles
        .iter()
        .filter(|t| t.score > 0.0)
        .fold(None::<&TileDiff>, |best, t| match best {
            Some(b) if b.score >= t.score => Some(b),
            _ => Some(t),
        })
        .map(|t| t.id);
    TileReport {
        tolerance: *tol,
        tiles,
        missing,
        extra,
        first_stage,
        first_divergence,
        worst,
    }
}
