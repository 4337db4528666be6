//! Tile-by-tile comparison of a debug backward kernel's P/dP/dS/Δ dumps with attn-ref's
//! backward tiles ([`attn_ref::reference::bwd_tiles`]): which tiles are missing or extra,
//! each tile's error per stage, the earliest diverging stage and the worst tile.
//!
//! The stages, in the order a key-block-major backward computes them: P (from Q·Kᵀ and the
//! forward's LSE) and dP (dO·Vᵀ) are independent; Δ (rowsum dO∘O, from the forward's O)
//! enters dS = P∘(dP − Δ). A wrong dS with P, dP and Δ right points at the combination.

use std::collections::BTreeMap;
use std::fmt;

use attn_ref::{BwdTile, TileId};
use serde::Serialize;

use crate::compare::sci;
use crate::Storage;

/// Per-stage tolerances of a backward tile comparison, for a kernel that ran on the same
/// storage-rounded inputs as the reference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BwdTileTolerance {
    /// Max abs error of P (normalized probabilities, in [0, 1]).
    pub p: f64,
    /// Max error of dP relative to the tile's largest |dP| (at least 1): f32 accumulation of
    /// the same storage values.
    pub dp_rel: f64,
    /// Max error of Δ and of dS relative to the tile's largest |dP − Δ| (at least 1): P's
    /// error times that span, and Δ computed from the forward's rounded O.
    pub ds_rel: f64,
}

impl BwdTileTolerance {
    /// Defaults for a storage type: P as the forward tiles' P ([`crate::TileTolerance`]), dP
    /// to 10⁻⁴ of its scale, dS and Δ to P's tolerance of theirs.
    pub fn for_storage(storage: Storage) -> Self {
        let p = crate::TileTolerance::for_storage(storage).p;
        Self {
            p,
            dp_rel: 1e-4,
            ds_rel: p,
        }
    }
}

/// A stage of the backward's tile pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum BwdStage {
    /// P = exp(scale·q·k − LSE): the scores, the mask or the LSE.
    P,
    /// dP = dO·Vᵀ.
    DP,
    /// Δ = rowsum(dO∘O).
    Delta,
    /// dS = P∘(dP − Δ).
    DS,
}

impl BwdStage {
    /// Where to look when this stage diverges first.
    pub fn hint(self) -> &'static str {
        match self {
            BwdStage::P => "check Q·Kᵀ, the causal/tail mask and the LSE the kernel reads",
            BwdStage::DP => "check the dO·Vᵀ GEMM and the dO/V tile loads",
            BwdStage::Delta => "check the Δ pass (rowsum of dO∘O) and the row it is read for",
            BwdStage::DS => "check the combination P∘(dP − Δ) (rows and columns of Δ)",
        }
    }
}

/// The comparison of one tile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BwdTileDiff {
    /// Which tile (`b`, `h`, `q_tile`, `k_tile`).
    pub id: (usize, usize, usize, usize),
    /// Why the tiles cannot be compared element-wise (different extents or lengths).
    pub shape_mismatch: Option<String>,
    /// Max abs error of P.
    pub p_max: f64,
    /// Max abs error of dP.
    pub dp_max: f64,
    /// Max abs error of Δ.
    pub delta_max: f64,
    /// Max abs error of dS, and its `(row, col)`.
    pub ds_max: f64,
    /// `(row, col)` of `ds_max`.
    pub ds_worst: Option<(usize, usize)>,
    /// Non-finite values on either side (the kernel's NaN poison left unwritten included).
    pub nonfinite: usize,
    /// The earliest stage over its tolerance.
    pub stage: Option<BwdStage>,
    /// Worst error as a multiple of its tolerance (∞ for non-finite values or a mismatch).
    pub score: f64,
}

/// The comparison of a set of dumped backward tiles with the reference's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BwdTileReport {
    /// The tolerances used.
    pub tolerance: BwdTileTolerance,
    /// Tiles found on both sides, in `(b, h, q_tile, k_tile)` order.
    pub tiles: Vec<BwdTileDiff>,
    /// Tiles the reference has and the kernel did not dump, `(b, h, q_tile, k_tile)`.
    pub missing: Vec<(usize, usize, usize, usize)>,
    /// Tiles the kernel dumped that the reference does not have (a skipped tile visited).
    pub extra: Vec<(usize, usize, usize, usize)>,
    /// The earliest stage that diverges in any tile.
    pub first_stage: Option<BwdStage>,
    /// The tile with the largest score.
    pub worst: Option<(usize, usize, usize, usize)>,
}

impl BwdTileReport {
    /// Whether every tile matched and none is missing or extra.
    pub fn is_clean(&self) -> bool {
        self.first_stage.is_none() && self.missing.is_empty() && self.extra.is_empty()
    }
}

fn tuple(id: &TileId) -> (usize, usize, usize, usize) {
    (id.b, id.h, id.q_tile, id.k_tile)
}

impl fmt::Display for BwdTileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let diverging = self.tiles.iter().filter(|t| t.stage.is_some()).count();
        writeln!(
            f,
            "backward tiles: {} compared, {diverging} diverging, {} missing, {} extra",
            self.tiles.len(),
            self.missing.len(),
            self.extra.len()
        )?;
        if let Some(stage) = self.first_stage {
            writeln!(f, "  first diverging stage: {stage:?}; {}", stage.hint())?;
        }
        if let Some(w) = self
            .worst
            .and_then(|w| self.tiles.iter().find(|t| t.id == w))
        {
            writeln!(
                f,
                "  worst tile {:?}: P {} dP {} Δ {} dS {} at {:?}{}",
                w.id,
                sci(w.p_max),
                sci(w.dp_max),
                sci(w.delta_max),
                sci(w.ds_max),
                w.ds_worst,
                w.shape_mismatch
                    .as_ref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            )?;
        }
        for id in self.missing.iter().take(4) {
            writeln!(f, "  missing {id:?}")?;
        }
        for id in self.extra.iter().take(4) {
            writeln!(f, "  extra {id:?}")?;
        }
        Ok(())
    }
}

/// Max abs difference and its index, and the count of non-finite values on either side.
fn max_err(got: &[f64], want: &[f64]) -> (f64, Option<usize>, usize) {
    let mut worst = (0.0f64, None, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if !(g.is_finite() && w.is_finite()) {
            worst.2 += 1;
        } else if (g - w).abs() > worst.0 {
            worst = ((g - w).abs(), Some(i), worst.2);
        }
    }
    worst
}

fn diff_tile(got: &BwdTile, want: &BwdTile, tol: &BwdTileTolerance) -> BwdTileDiff {
    let mut d = BwdTileDiff {
        id: tuple(&want.id),
        shape_mismatch: None,
        p_max: 0.0,
        dp_max: 0.0,
        delta_max: 0.0,
        ds_max: 0.0,
        ds_worst: None,
        nonfinite: 0,
        stage: None,
        score: 0.0,
    };
    let n = want.rows * want.cols;
    let lens = [
        got.p.len(),
        got.dp.len(),
        got.ds.len(),
        want.p.len(),
        want.dp.len(),
        want.ds.len(),
    ];
    if got.rows != want.rows
        || got.cols != want.cols
        || lens.iter().any(|&l| l != n)
        || got.delta.len() != want.rows
        || want.delta.len() != want.rows
    {
        d.shape_mismatch = Some(format!(
            "kernel tile {}×{}, reference {}×{}",
            got.rows, got.cols, want.rows, want.cols
        ));
        d.stage = Some(BwdStage::P);
        d.score = f64::INFINITY;
        return d;
    }
    let cols = want.cols.max(1);
    let (p_max, _, p_bad) = max_err(&got.p, &want.p);
    let (dp_max, _, dp_bad) = max_err(&got.dp, &want.dp);
    let (delta_max, _, delta_bad) = max_err(&got.delta, &want.delta);
    let (ds_max, ds_at, ds_bad) = max_err(&got.ds, &want.ds);
    d.p_max = p_max;
    d.dp_max = dp_max;
    d.delta_max = delta_max;
    d.ds_max = ds_max;
    d.ds_worst = ds_at.map(|i| (i / cols, i % cols));
    d.nonfinite = p_bad + dp_bad + delta_bad + ds_bad;
    let dp_scale = want.dp.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    let ds_scale = (0..n).fold(1.0f64, |m, e| {
        m.max((want.dp[e] - want.delta[e / cols]).abs())
    });
    let stages = [
        (BwdStage::P, p_max / tol.p, p_bad),
        (BwdStage::DP, dp_max / (tol.dp_rel * dp_scale), dp_bad),
        (
            BwdStage::Delta,
            delta_max / (tol.ds_rel * ds_scale),
            delta_bad,
        ),
        (BwdStage::DS, ds_max / (tol.ds_rel * ds_scale), ds_bad),
    ];
    for (stage, ratio, bad) in stages {
        let score = if bad > 0 { f64::INFINITY } else { ratio };
        if score > 1.0 && d.stage.is_none() {
            d.stage = Some(stage);
        }
        d.score = d.score.max(score);
    }
    d
}

/// Pairs the kernel's dumped backward tiles with the reference's by [`TileId`] and compares
/// P, dP, Δ and dS. Duplicate ids keep the last tile of each side.
pub fn compare_bwd_tiles(
    got: &[BwdTile],
    want: &[BwdTile],
    tol: &BwdTileTolerance,
) -> BwdTileReport {
    let got_by_id: BTreeMap<TileId, &BwdTile> = got.iter().map(|t| (t.id, t)).collect();
    let want_by_id: BTreeMap<TileId, &BwdTile> = want.iter().map(|t| (t.id, t)).collect();
    let missing = want_by_id
        .keys()
        .filter(|id| !got_by_id.contains_key(id))
        .map(tuple)
        .collect();
    let extra = got_by_id
        .keys()
        .filter(|id| !want_by_id.contains_key(id))
        .map(tuple)
        .collect();
    let tiles: Vec<BwdTileDiff> = want_by_id
        .iter()
        .filter_map(|(id, w)| got_by_id.get(id).map(|g| diff_tile(g, w, tol)))
        .collect();
    let first_stage = tiles.iter().filter_map(|t| t.stage).min();
    let worst = tiles
        .iter()
        .filter(|t| t.score > 0.0)
        .max_by(|a, b| a.score.total_cmp(&b.score))
        .map(|t| t.id);
    BwdTileReport {
        tolerance: *tol,
        tiles,
        missing,
        extra,
        first_stage,
        worst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_ref::reference::bwd_tiles::backward_tiles;
    use attn_ref::{AttnShape, Causal, Problem};

    fn tiles() -> Vec<BwdTile> {
        let shape = AttnShape::new(1, 2, 1, 20, 24, 8).unwrap();
        let p = Problem::new(shape, Causal::BottomRight);
        let x = |n: usize, s: f64| -> Vec<f64> { (0..n).map(|i| (i as f64 * s).sin()).collect() };
        let (q, k, v, d_o) = (x(320, 0.37), x(192, 0.71), x(192, 0.53), x(320, 0.29));
        backward_tiles(&p, &q, &k, &v, &d_o, 8, 8, &[(0, 0, 1), (0, 1, 2)]).unwrap()
    }

    #[test]
    fn identical_tiles_are_clean() {
        let want = tiles();
        let r = compare_bwd_tiles(&want, &want, &BwdTileTolerance::for_storage(Storage::F16));
        assert!(r.is_clean(), "{r}");
        assert_eq!(r.tiles.len(), want.len());
    }

    #[test]
    fn each_stage_and_missing_tiles_are_named() {
        let want = tiles();
        let tol = BwdTileTolerance::for_storage(Storage::F16);
        // dS wrong in one element only: stage dS, at that element.
        let mut got = want.clone();
        got[1].ds[3] += 0.5;
        let r = compare_bwd_tiles(&got, &want, &tol);
        assert_eq!(r.first_stage, Some(BwdStage::DS), "{r}");
        assert_eq!(r.worst, Some(tuple(&want[1].id)));
        assert_eq!(r.tiles[1].ds_worst, Some((0, 3)));
        // P wrong (and so dS): P is named first.
        let mut got = want.clone();
        got[0].p[0] += 0.1;
        got[0].ds[0] += 0.1;
        assert_eq!(
            compare_bwd_tiles(&got, &want, &tol).first_stage,
            Some(BwdStage::P)
        );
        // Unwritten (NaN) dP: non-finite, stage dP.
        let mut got = want.clone();
        got[2].dp[5] = f64::NAN;
        let r = compare_bwd_tiles(&got, &want, &tol);
        assert_eq!(r.first_stage, Some(BwdStage::DP));
        assert_eq!(r.tiles[2].nonfinite, 1);
        // A dropped tile is missing, a foreign one extra.
        let mut got = want.clone();
        let mut foreign = got.remove(0);
        foreign.id.k_tile = 99;
        got.push(foreign);
        let r = compare_bwd_tiles(&got, &want, &tol);
        assert_eq!(r.missing, vec![tuple(&want[0].id)]);
        assert_eq!(r.extra.len(), 1);
        assert!(!r.is_clean());
        assert!(r.to_string().contains("1 missing, 1 extra"), "{r}");
    }
}
