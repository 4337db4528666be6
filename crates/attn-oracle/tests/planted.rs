//! Planted faults: each one must be classified right, with its location; a clean case (the
//! f16 emulation against the reference) must be reported clean.

mod common;

use attn_oracle::{
    compare, compare_lse, Alternative, Axis, CompareOptions, ErrorPattern, Location, OracleError,
    ScaleKind, Stage, Storage, Suspect, ToleranceRule,
};
use attn_ref::reference::emulate::forward_emulated;
use attn_ref::{reference, AttnShape, Causal, Problem};
use common::{as_f32, masked_attention, qkv, randn, reference};

fn loc(b: usize, h: usize, s: usize, d: usize) -> Location {
    Location {
        b,
        h,
        s,
        d: Some(d),
    }
}

/// Non-causal (2, 4, 128, 64) with its reference.
fn dense() -> (AttnShape, Vec<f64>) {
    let shape = AttnShape::self_attention(2, 4, 128, 64).unwrap();
    let (q, k, v) = qkv(&shape, 11);
    let want = reference(&Problem::new(shape, Causal::None), &q, &k, &v);
    (shape, want)
}

#[test]
fn emulation_against_reference_is_clean_and_passes_the_rule() {
    let shape = AttnShape::self_attention(2, 4, 128, 64).unwrap();
    let p = Problem::new(shape, Causal::TopLeft);
    let (q, k, v) = qkv(&shape, 3);
    let exact = reference::forward(&p, &q, &k, &v).unwrap();
    let emu = forward_emulated(&p, &q, &k, &v, attn_ref::Dtype::F16).unwrap();
    let opts = CompareOptions::default().with_causal(Causal::TopLeft);
    let report = compare(&as_f32(&emu.o), &exact.o, &shape, &opts).unwrap();
    assert_eq!(report.pattern, ErrorPattern::Clean, "{report}");
    assert!(report.is_clean() && report.max_abs > 0.0 && report.max_abs < 4e-3);
    assert_eq!(report.stage(), None);
    let lse = compare_lse(
        &as_f32(&emu.lse),
        &exact.lse,
        &shape,
        &opts.clone().with_threshold(1e-3),
    )
    .unwrap();
    assert!(lse.is_clean(), "{lse}");

    // The emulation as the "kernel" meets the rule with itself as `emu`.
    let rule = ToleranceRule::for_storage(Storage::F16);
    let verdict = rule.check(&report, &report, Some(&lse));
    assert!(verdict.pass, "{verdict}");
    assert!((verdict.bound - (2.0 * report.max_abs + 1e-5)).abs() < 1e-18);
}

#[test]
fn nan_at_a_known_index_is_located() {
    let (shape, want) = dense();
    let mut got = as_f32(&want);
    let at = shape.q_offset(1, 2, 37) + 5;
    got[at] = f32::NAN;
    let report = compare(&got, &want, &shape, &CompareOptions::default()).unwrap();
    assert_eq!(report.nan.count, 1);
    assert_eq!(report.nan.unexpected, 1);
    assert_eq!(report.nan.first, Some(loc(1, 2, 37, 5)));
    assert_eq!(
        report.pattern,
        ErrorPattern::NanInf {
            nan: 1,
            inf: 0,
            hidden: 0,
            first: loc(1, 2, 37, 5)
        }
    );
    assert_eq!(report.stage(), Some(Stage::P));
    // Only the NaN is wrong; the rest is exact up to f32 narrowing.
    assert_eq!(report.wrong, 1);
    assert!(report.max_abs < 1e-6);
}

#[test]
fn inf_is_located() {
    let (shape, want) = dense();
    let mut got = as_f32(&want);
    got[shape.q_offset(0, 3, 100) + 63] = f32::NEG_INFINITY;
    let report = compare(&got, &want, &shape, &CompareOptions::default()).unwrap();
    assert_eq!(report.inf.first_unexpected, Some(loc(0, 3, 100, 63)));
    assert!(matches!(
        report.pattern,
        ErrorPattern::NanInf { nan: 0, inf: 1, first, .. } if first == loc(0, 3, 100, 63)
    ));
}

#[test]
fn a_wrong_row_is_whole_rows_at_its_location() {
    let (shape, want) = dense();
    let mut got = as_f32(&want);
    let start = shape.q_offset(1, 3, 77);
    got[start..start + 64].copy_from_slice(&randn(64, 99));
    let report = compare(&got, &want, &shape, &CompareOptions::default()).unwrap();
    match &report.pattern {
        ErrorPattern::WholeRows { rows, first } => {
            assert_eq!(*rows, 1);
            assert_eq!(
                first[0],
                Location {
                    b: 1,
                    h: 3,
                    s: 77,
                    d: None
                }
            );
        }
        other => panic!("expected whole rows, got {other}\n{report}"),
    }
    assert_eq!(report.worst.len(), 5);
    assert!(report
        .worst
        .iter()
        .all(|w| (w.at.b, w.at.h, w.at.s) == (1, 3, 77)));
    assert!(report.worst.windows(2).all(|w| w[0].error >= w[1].error));
    let wrong_heads: Vec<_> = report.heads.iter().filter(|h| h.stats.wrong > 0).collect();
    assert_eq!(wrong_heads.len(), 1);
    assert_eq!((wrong_heads[0].b, wrong_heads[0].h), (1, 3));
    assert_eq!(report.row_blocks[1].stats.wrong, report.wrong);
}

/// Self-attention, top-left causal, and the output of a mask whose diagonal is shifted.
fn shifted_diagonal(shift: isize) -> (AttnShape, Vec<f64>, Vec<f64>) {
    let shape = AttnShape::self_attention(1, 4, 256, 64).unwrap();
    let (q, k, v) = qkv(&shape, 21);
    let p = Problem::new(shape, Causal::TopLeft);
    let want = reference(&p, &q, &k, &v);
    let shifted = masked_attention(&shape, p.scale(), &q, &k, &v, |i, j| {
        (j as isize) <= i as isize + shift
    });
    (shape, want, shifted)
}

#[test]
fn causal_diagonal_off_by_one_is_recognized_both_ways() {
    for shift in [1, -1] {
        let (shape, want, shifted) = shifted_diagonal(shift);
        let opts = CompareOptions::default().with_causal(Causal::TopLeft);
        let report = compare(&as_f32(&shifted), &want, &shape, &opts).unwrap();
        match report.pattern {
            ErrorPattern::CausalDiagonal {
                alternative: None,
                decay_exponent: Some(e),
            } => assert!((-1.6..=-0.5).contains(&e), "shift {shift}: exponent {e}"),
            ref other => panic!("shift {shift}: expected causal diagonal, got {other}\n{report}"),
        }
        assert_eq!(report.stage(), Some(Stage::P));
        // The first rows move most: they gain or lose a large share of their weight.
        assert!(report.worst[0].at.s <= 1, "{report}");
    }
}

#[test]
fn causal_off_by_one_matches_a_given_alternative_mask() {
    let (shape, want, shifted) = shifted_diagonal(1);
    let opts = CompareOptions::default()
        .with_causal(Causal::TopLeft)
        .with_alternative(Alternative {
            label: "mask j <= i + 1".into(),
            suspect: Suspect::CausalMask,
            want: shifted.clone(),
        });
    let report = compare(&as_f32(&shifted), &want, &shape, &opts).unwrap();
    assert_eq!(
        report.pattern,
        ErrorPattern::CausalDiagonal {
            alternative: Some("mask j <= i + 1".into()),
            decay_exponent: None
        }
    );
}

#[test]
fn a_wrong_tail_query_tile_is_a_tile_edge() {
    // Sq = 100 with BLOCK_M = 64: rows 64..100 form the partial tile.
    let shape = AttnShape::self_attention(1, 4, 100, 64).unwrap();
    let (q, k, v) = qkv(&shape, 5);
    let want = reference(&Problem::new(shape, Causal::None), &q, &k, &v);
    let mut got = as_f32(&want);
    let noise = randn(got.len(), 6);
    for h in 0..4 {
        for s in 64..100 {
            let o = shape.q_offset(0, h, s);
            for d in 0..64 {
                got[o + d] += 0.05 * noise[o + d];
            }
        }
    }
    let report = compare(&got, &want, &shape, &CompareOptions::default()).unwrap();
    assert_eq!(
        report.pattern,
        ErrorPattern::TileEdges {
            axis: Axis::Query,
            start: 64
        },
        "{report}"
    );
    assert_eq!(report.row_blocks[0].stats.wrong, 0);
    assert!(report.row_blocks[1].stats.wrong > 0);
    assert_eq!(report.stage(), Some(Stage::O));
}

/// Bottom-right causal, Sq = 128 and Sk = 200, where the keys `lo..hi` are dropped for every
/// row (row `i` sees keys `j <= i + 72`).
fn dropped_keys(lo: usize, hi: usize) -> (AttnShape, Vec<f64>, Vec<f64>) {
    let shape = AttnShape::new(1, 2, 2, 128, 200, 64).unwrap();
    let (q, k, v) = qkv(&shape, 8);
    let p = Problem::new(shape, Causal::BottomRight);
    let want = reference(&p, &q, &k, &v);
    let got = masked_attention(&shape, p.scale(), &q, &k, &v, |i, j| {
        j <= i + 72 && !(lo..hi).contains(&j)
    });
    (shape, want, got)
}

#[test]
fn a_wrong_tail_key_tile_shows_in_the_rows_that_reach_it() {
    // Sk = 200, BLOCK_N = 64: keys 192..200 are the partial last key tile, reached by the
    // rows 120.. (Sq = 128 is a multiple of BLOCK_M, so no query tail is involved).
    let (shape, want, got) = dropped_keys(192, 200);
    let opts = CompareOptions::default().with_causal(Causal::BottomRight);
    let report = compare(&as_f32(&got), &want, &shape, &opts).unwrap();
    assert_eq!(
        report.pattern,
        ErrorPattern::TileEdges {
            axis: Axis::Key,
            start: 192
        },
        "{report}"
    );
    assert_eq!(report.stage(), Some(Stage::P));
}

#[test]
fn a_wrong_full_key_tile_is_key_tile_columns() {
    // Every row sees keys 0..73, so key tile 1 is reached by all rows; tile 2 (keys
    // 128..192) is first reached by row 56 (n = 129 visible keys).
    let (shape, want, got) = dropped_keys(128, 192);
    let opts = CompareOptions::default().with_causal(Causal::BottomRight);
    let report = compare(&as_f32(&got), &want, &shape, &opts).unwrap();
    assert_eq!(
        report.pattern,
        ErrorPattern::KeyTileColumns {
            k_tile: 2,
            first_row: 56
        },
        "{report}"
    );
}

#[test]
fn a_missing_softmax_scale_matches_the_scale_one_reference() {
    let shape = AttnShape::self_attention(1, 4, 128, 64).unwrap();
    let (q, k, v) = qkv(&shape, 13);
    let p = Problem::new(shape, Causal::None);
    let want = reference(&p, &q, &k, &v);
    let unscaled = reference(&p.with_scale(1.0).unwrap(), &q, &k, &v);
    let got = as_f32(&unscaled);

    // Without the hypothesis the error has no spatial structure.
    let plain = compare(&got, &want, &shape, &CompareOptions::default()).unwrap();
    assert!(
        matches!(plain.pattern, ErrorPattern::Unstructured { .. }),
        "{plain}"
    );

    let opts = CompareOptions::default().with_alternative(Alternative {
        label: "softmax scale 1".into(),
        suspect: Suspect::SoftmaxScale,
        want: unscaled,
    });
    let report = compare(&got, &want, &shape, &opts).unwrap();
    assert_eq!(
        report.pattern,
        ErrorPattern::ScaleLike {
            scale: ScaleKind::Softmax {
                alternative: "softmax scale 1".into()
            }
        }
    );
    assert_eq!(report.stage(), Some(Stage::S));
}

#[test]
fn a_constant_output_factor_is_scale_like() {
    let (shape, want) = dense();
    let got: Vec<f32> = want.iter().map(|&w| (0.97 * w) as f32).collect();
    let report = compare(&got, &want, &shape, &CompareOptions::default()).unwrap();
    match report.pattern {
        ErrorPattern::ScaleLike {
            scale: ScaleKind::Output { factor },
        } => assert!((factor - 0.97).abs() < 1e-6, "{factor}"),
        ref other => panic!("expected output scale, got {other}"),
    }
    assert_eq!(report.stage(), Some(Stage::O));
}

#[test]
fn swapped_heads_are_named_with_their_source() {
    let (shape, want) = dense();
    let mut got = as_f32(&want);
    let span = 128 * 64;
    let (a, b) = (shape.q_offset(0, 1, 0), shape.q_offset(1, 2, 0));
    let head_a = got[a..a + span].to_vec();
    got.copy_within(b..b + span, a);
    got[b..b + span].copy_from_slice(&head_a);
    let report = compare(&got, &want, &shape, &CompareOptions::default()).unwrap();
    match &report.pattern {
        ErrorPattern::Heads { heads } => {
            let found: Vec<_> = heads.iter().map(|x| (x.b, x.h, x.looks_like)).collect();
            assert_eq!(found, vec![(0, 1, Some((1, 2))), (1, 2, Some((0, 1)))]);
        }
        other => panic!("expected heads, got {other}\n{report}"),
    }
    assert_eq!(report.stage(), Some(Stage::S));
}

#[test]
fn one_wrong_batch_is_named() {
    let (shape, want) = dense();
    let mut got = as_f32(&want);
    let start = shape.q_offset(1, 0, 0);
    let noise = randn(got.len() - start, 17);
    for (g, n) in got[start..].iter_mut().zip(noise) {
        *g += 0.1 * n;
    }
    let report = compare(&got, &want, &shape, &CompareOptions::default()).unwrap();
    assert_eq!(report.pattern, ErrorPattern::OneBatch { b: 1 }, "{report}");
}

fn unwritten_block(poison: f32) -> (AttnShape, Vec<f64>, Vec<f32>) {
    let (shape, want) = dense();
    let mut got = as_f32(&want);
    let start = shape.q_offset(1, 2, 64);
    got[start..start + 64 * 64].fill(poison);
    (shape, want, got)
}

#[test]
fn an_unwritten_region_is_told_apart_from_computed_nan() {
    let (shape, want, got) = unwritten_block(f32::NAN);
    let report = compare(&got, &want, &shape, &CompareOptions::default()).unwrap();
    assert_eq!(
        report.pattern,
        ErrorPattern::Unwritten {
            count: 64 * 64,
            rows: 64,
            first: loc(1, 2, 64, 0)
        },
        "{report}"
    );
    assert_eq!(report.stage(), Some(Stage::O));

    // Half of each row unwritten (a store predicate on d) is still unwritten.
    let mut half_rows = as_f32(&want);
    for s in 10..20 {
        let o = shape.q_offset(0, 1, s) + 32;
        half_rows[o..o + 32].fill(f32::NAN);
    }
    let report = compare(&half_rows, &want, &shape, &CompareOptions::default()).unwrap();
    assert_eq!(
        report.pattern,
        ErrorPattern::Unwritten {
            count: 10 * 32,
            rows: 10,
            first: loc(0, 1, 10, 32)
        },
        "{report}"
    );

    // NaN propagated from non-finite inputs is not "unwritten".
    let opts = CompareOptions {
        inputs_finite: false,
        ..CompareOptions::default()
    };
    let report = compare(&got, &want, &shape, &opts).unwrap();
    assert!(matches!(report.pattern, ErrorPattern::NanInf { .. }));

    // With a poison payload, only NaNs carrying it count as unwritten.
    let poison = f32::from_bits(0x7fc0_dead);
    let opts = CompareOptions {
        poison_bits: Some(poison.to_bits()),
        ..CompareOptions::default()
    };
    let (_, _, poisoned) = unwritten_block(poison);
    let report = compare(&poisoned, &want, &shape, &opts).unwrap();
    assert_eq!(report.poisoned, 64 * 64);
    assert!(matches!(report.pattern, ErrorPattern::Unwritten { .. }));
    let report = compare(&got, &want, &shape, &opts).unwrap();
    assert!(
        matches!(report.pattern, ErrorPattern::NanInf { .. }),
        "canonical NaN is computed, not poison: {report}"
    );
}

#[test]
fn nan_the_reference_also_has_is_not_a_fault() {
    let (shape, mut want) = dense();
    let mut got = as_f32(&want);
    let row = shape.q_offset(0, 0, 3);
    want[row..row + 64].fill(f64::NAN);
    got[row..row + 64].fill(f32::NAN);
    let opts = CompareOptions {
        inputs_finite: false,
        ..CompareOptions::default()
    };
    let report = compare(&got, &want, &shape, &opts).unwrap();
    assert_eq!(report.nan.count, 64);
    assert_eq!(report.nan.unexpected, 0);
    assert!(report.is_clean());
    // Hiding it (finite where the reference propagates NaN) is a fault.
    got[row] = 0.0;
    let report = compare(&got, &want, &shape, &opts).unwrap();
    assert_eq!(report.hidden.unexpected, 1);
    assert!(matches!(
        report.pattern,
        ErrorPattern::NanInf { hidden: 1, .. }
    ));
}

#[test]
fn lse_minus_infinity_rows_agree() {
    // Bottom-right with Sq > Sk: the first rows see no key (LSE −∞).
    let shape = AttnShape::new(1, 2, 2, 40, 16, 64).unwrap();
    let p = Problem::new(shape, Causal::BottomRight);
    let (q, k, v) = qkv(&shape, 30);
    let exact = reference::forward(&p, &q, &k, &v).unwrap();
    assert!(exact.lse.contains(&f64::NEG_INFINITY));
    let opts = CompareOptions::default().with_threshold(1e-3);
    let mut got = as_f32(&exact.lse);
    let report = compare_lse(&got, &exact.lse, &shape, &opts).unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.inf.count, 2 * 24);
    assert_eq!(report.inf.unexpected, 0);
    got[shape.lse_offset(0, 1, 30)] += 0.01;
    let report = compare_lse(&got, &exact.lse, &shape, &opts).unwrap();
    assert_eq!(
        report.max_abs_at,
        Some(Location {
            b: 0,
            h: 1,
            s: 30,
            d: None
        })
    );
    assert!(
        matches!(report.pattern, ErrorPattern::WholeRows { rows: 1, .. }),
        "{report}"
    );
}

#[test]
fn bad_lengths_and_options_are_typed_errors() {
    let shape = AttnShape::self_attention(1, 1, 4, 8).unwrap();
    let err = compare(&[0.0; 31], &[0.0; 32], &shape, &CompareOptions::default()).unwrap_err();
    assert!(matches!(
        err,
        OracleError::LengthMismatch {
            expected: 32,
            got: 31,
            ..
        }
    ));
    assert!(err.to_string().contains("[1, 1, 4, 8]"), "{err}");
    let opts = CompareOptions::default().with_blocks(0, 64);
    assert!(matches!(
        compare(&[0.0; 32], &[0.0; 32], &shape, &opts),
        Err(OracleError::InvalidOption(_))
    ));
    let opts = CompareOptions::default().with_alternative(Alternative {
        label: "short".into(),
        suspect: Suspect::Other,
        want: vec![0.0; 3],
    });
    let err = compare(&[0.0; 32], &[0.0; 32], &shape, &opts).unwrap_err();
    assert!(err.to_string().contains("alternative `short`"), "{err}");
}

#[test]
fn the_rule_fails_on_a_planted_fault_with_reasons() {
    let shape = AttnShape::self_attention(1, 4, 128, 64).unwrap();
    let p = Problem::new(shape, Causal::None);
    let (q, k, v) = qkv(&shape, 40);
    let exact = reference::forward(&p, &q, &k, &v).unwrap();
    let emu = forward_emulated(&p, &q, &k, &v, attn_ref::Dtype::F16).unwrap();
    let opts = CompareOptions::default();
    let emu_report = compare(&as_f32(&emu.o), &exact.o, &shape, &opts).unwrap();
    let mut got = as_f32(&emu.o);
    got[shape.q_offset(0, 2, 9) + 1] += 0.002; // under the 4e-3 cap, over 2·emu + 1e-5
    let out = compare(&got, &exact.o, &shape, &opts).unwrap();
    let rule = ToleranceRule::for_storage(Storage::F16);
    let v = rule.check(&out, &emu_report, None);
    assert!(!v.pass);
    assert_eq!(v.reasons.len(), 1, "{v}");
    assert!(v.reasons[0].contains("2·max|emu − ref|"), "{v}");
    // bf16's caps are looser but the primary rule is the same.
    let v = ToleranceRule::for_storage(Storage::Bf16).check(&emu_report, &emu_report, None);
    assert!(v.pass);
}
