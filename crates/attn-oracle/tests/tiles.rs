//! Tile comparison against attn-ref's tiled reference, the human summaries (insta) and the
//! artifacts on disk.

mod common;

use attn_oracle::{
    compare, compare_tiles, write_artifacts, Artifacts, CompareOptions, Findings, Stage,
    TileTolerance,
};
use attn_ref::reference::tiled::forward_tiled;
use attn_ref::{AttnShape, Causal, Problem, Tile, TileId};
use common::{as_f32, qkv, randn};

/// The tiled reference of a causal (1, 2, 160, 64) problem, capturing query tiles
/// (0, 1, 1) and (0, 0, 2) with 64 × 64 tiles: 2 + 3 tiles (the last query tile is a tail).
fn tiles() -> (AttnShape, Vec<f64>, Vec<Tile>) {
    let shape = AttnShape::self_attention(1, 2, 160, 64).unwrap();
    let (q, k, v) = qkv(&shape, 50);
    let p = Problem::new(shape, Causal::TopLeft);
    let (out, tiles) = forward_tiled(&p, &q, &k, &v, 64, 64, &[(0, 1, 1), (0, 0, 2)]).unwrap();
    (shape, out.o, tiles)
}

fn id(h: usize, q_tile: usize, k_tile: usize) -> TileId {
    TileId {
        b: 0,
        h,
        q_tile,
        k_tile,
    }
}

#[test]
fn identical_tiles_are_clean() {
    let (_, _, want) = tiles();
    assert_eq!(want.len(), 5);
    let report = compare_tiles(&want, &want, &TileTolerance::default());
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.tiles.len(), 5);
    assert_eq!(report.worst, None);
}

#[test]
fn an_error_in_one_tiles_p_is_stage_p() {
    let (_, _, want) = tiles();
    let mut got = want.clone();
    let t = got.iter_mut().find(|t| t.id == id(0, 2, 1)).unwrap();
    let at = 7 * t.cols + 20;
    t.p[at] += 0.05;
    let report = compare_tiles(&got, &want, &TileTolerance::default());
    assert_eq!(report.first_stage, Some(Stage::P), "{report}");
    assert_eq!(report.first_divergence, Some(id(0, 2, 1)));
    assert_eq!(report.worst, Some(id(0, 2, 1)));
    let diff = report.tiles.iter().find(|d| d.id == id(0, 2, 1)).unwrap();
    assert_eq!(diff.p_worst, Some((7, 20)));
    assert!((diff.p_max - 0.05).abs() < 1e-12);
    assert_eq!(diff.s_max, 0.0);
    assert_eq!(report.tiles.iter().filter(|d| d.stage.is_some()).count(), 1);
}

#[test]
fn an_error_in_s_wins_over_later_p_errors() {
    let (_, _, want) = tiles();
    let mut got = want.clone();
    // P wrong in an earlier tile, S wrong in a later one: the earliest *stage* is S.
    got.iter_mut().find(|t| t.id == id(0, 2, 0)).unwrap().p[3] += 0.1;
    let t = got.iter_mut().find(|t| t.id == id(1, 1, 1)).unwrap();
    t.s[63 * 64 + 5] += 0.02; // the diagonal tile's last row sees all 64 keys
    let report = compare_tiles(&got, &want, &TileTolerance::default());
    assert_eq!(report.first_stage, Some(Stage::S), "{report}");
    assert_eq!(report.first_divergence, Some(id(0, 2, 0)));
    let diff = report.tiles.iter().find(|d| d.id == id(1, 1, 1)).unwrap();
    assert_eq!(diff.stage, Some(Stage::S));
    assert_eq!(diff.s_worst, Some((63, 5)));
}

#[test]
fn a_mask_difference_in_s_is_stage_p() {
    let (_, _, want) = tiles();
    let mut got = want.clone();
    // The diagonal tile (q=1, k=1) of head 1: row 0 sees key 64 only; unmask key 65.
    let t = got.iter_mut().find(|t| t.id == id(1, 1, 1)).unwrap();
    assert_eq!(t.s[1], f64::NEG_INFINITY);
    t.s[1] = 0.3;
    let report = compare_tiles(&got, &want, &TileTolerance::default());
    assert_eq!(report.first_stage, Some(Stage::P), "{report}");
    assert_eq!(
        report
            .tiles
            .iter()
            .map(|d| d.s_mask_mismatch)
            .sum::<usize>(),
        1
    );
}

#[test]
fn missing_extra_and_malformed_tiles_are_reported() {
    let (_, _, want) = tiles();
    let mut got: Vec<Tile> = want
        .iter()
        .filter(|t| t.id != id(0, 2, 2))
        .cloned()
        .collect();
    let mut skipped = want[0].clone();
    skipped.id = id(1, 1, 2); // a fully masked tile the kernel should have skipped
    got.push(skipped);
    got[0].s.pop();
    let report = compare_tiles(&got, &want, &TileTolerance::default());
    assert_eq!(report.missing, vec![id(0, 2, 2)]);
    assert_eq!(report.extra, vec![id(1, 1, 2)]);
    let bad = report.tiles.iter().find(|d| d.id == want[0].id).unwrap();
    assert!(bad.shape_mismatch.is_some());
    assert!(!report.is_clean());
}

#[test]
fn tile_stage_combines_with_o() {
    let (shape, o, want) = tiles();
    let clean_tiles = compare_tiles(&want, &want, &TileTolerance::default());
    let mut got = as_f32(&o);
    got[shape.q_offset(0, 0, 150) + 3] += 0.5;
    let o_report = compare(&got, &o, &shape, &CompareOptions::default()).unwrap();
    // Tiles agree but O does not: the divergence is after P.
    assert_eq!(clean_tiles.diagnose(&o_report), Some(Stage::O));
    let o_clean = compare(&as_f32(&o), &o, &shape, &CompareOptions::default()).unwrap();
    assert_eq!(clean_tiles.diagnose(&o_clean), None);
}

/// A wrong row, found by `compare` and summarized.
fn wrong_row_findings() -> (AttnShape, Vec<f32>, Vec<f64>, Findings) {
    let shape = AttnShape::self_attention(1, 2, 96, 64).unwrap();
    let (q, k, v) = qkv(&shape, 60);
    let want = common::reference(&Problem::new(shape, Causal::None), &q, &k, &v);
    let mut got = as_f32(&want);
    let start = shape.q_offset(0, 1, 70);
    got[start..start + 64].copy_from_slice(&randn(64, 61));
    let o = compare(&got, &want, &shape, &CompareOptions::default()).unwrap();
    let findings = Findings {
        kernel: "planted-wrong-row".into(),
        problem: "B=1 Hq=2 Sq=96 D=64 causal=none seed=60".into(),
        o,
        lse: None,
        tiles: None,
        verdict: None,
    };
    (shape, got, want, findings)
}

#[test]
fn summary_of_a_wrong_row() {
    let (.., findings) = wrong_row_findings();
    insta::assert_snapshot!("wrong_row", findings.summary());
}

#[test]
fn summary_of_an_unwritten_tail_with_tiles() {
    let (shape, o, want_tiles) = tiles();
    let mut got = as_f32(&o);
    // Query tile 2 (rows 128..160) of head 0 never stored; its P dump is also off.
    let start = shape.q_offset(0, 0, 128);
    got[start..start + 32 * 64].fill(f32::NAN);
    let mut got_tiles = want_tiles.clone();
    got_tiles
        .iter_mut()
        .find(|t| t.id == id(0, 2, 1))
        .unwrap()
        .p[40] += 0.01;
    let opts = CompareOptions::default().with_causal(Causal::TopLeft);
    let findings = Findings {
        kernel: "planted-unwritten".into(),
        problem: "B=1 Hq=2 Sq=160 D=64 causal=top-left seed=50".into(),
        o: compare(&got, &o, &shape, &opts).unwrap(),
        lse: None,
        tiles: Some(compare_tiles(
            &got_tiles,
            &want_tiles,
            &TileTolerance::default(),
        )),
        verdict: None,
    };
    assert_eq!(findings.stage(), Some(Stage::P));
    insta::assert_snapshot!("unwritten_tail", findings.summary());
}

#[test]
fn artifacts_are_written_and_readable() {
    let (_, got, want, findings) = wrong_row_findings();
    let (_, _, tiles) = tiles();
    let dir = std::env::temp_dir().join(format!("attn-oracle-artifacts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let written = write_artifacts(
        &dir,
        &Artifacts {
            findings: &findings,
            o_test: &got,
            o_ref: &want,
            tiles_test: &tiles[..1],
            tiles_ref: &tiles[..1],
        },
    )
    .unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "O_test.npy",
            "O_ref.npy",
            "S_b0_h0_q2_k0_test.npy",
            "P_b0_h0_q2_k0_test.npy",
            "S_b0_h0_q2_k0_ref.npy",
            "P_b0_h0_q2_k0_ref.npy",
            "report.json",
            "summary.txt"
        ]
    );
    let bytes = std::fs::read(dir.join("O_test.npy")).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(npy.shape(), &[1, 2, 96, 64]);
    assert_eq!(npy.into_vec::<f32>().unwrap(), got);
    let bytes = std::fs::read(dir.join("S_b0_h0_q2_k0_ref.npy")).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(npy.shape(), &[32, 64]);
    assert_eq!(npy.into_vec::<f64>().unwrap(), tiles[0].s);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["o"]["pattern"]["kind"], "whole_rows");
    assert_eq!(json["o"]["pattern"]["first"][0]["s"], 70);
    assert_eq!(
        std::fs::read_to_string(dir.join("summary.txt")).unwrap(),
        findings.summary()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
