//! Debug kernels (feature `debug-kernels`): tile dumps of S, P and l against the tiled
//! reference, and the planted broken-rescale kernel caught at the P stage.

use attn_kernels::{debug::DebugVariant, Engine, ForwardOptions};
use attn_ref::{reference::tiled::forward_tiled, AttnShape, Causal, Problem};
use half::f16;
use rand::{rngs::StdRng, SeedableRng};

use crate::{fresh_seed, gpu, randn};

fn max_tile_err(
    got: &[attn_ref::Tile],
    want: &[attn_ref::Tile],
    field: fn(&attn_ref::Tile) -> &Vec<f64>,
) -> f64 {
    assert_eq!(got.len(), want.len(), "number of processed tiles");
    let mut worst = 0f64;
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.id, w.id);
        for (&a, &b) in field(g).iter().zip(field(w)) {
            if a == b {
                continue; // both -inf (masked) compare equal
            }
            worst = worst.max((a - b).abs() / (1.0 + b.abs()));
        }
    }
    worst
}

fn dumps(p: &Problem, variant: DebugVariant, blocks: &[(usize, usize, usize)]) -> (f64, f64, f64) {
    let cfg = attn_kernels::KernelConfig::by_name("64_64_4_s2").unwrap();
    let opts = ForwardOptions {
        config: Some(cfg),
        ..Default::default()
    };
    dumps_with(p, variant, blocks, &opts, (64, 64))
}

/// The largest relative errors of the dumped S, P and l against the tiled reference's tiles
/// of (bm, bn).
fn dumps_with(
    p: &Problem,
    variant: DebugVariant,
    blocks: &[(usize, usize, usize)],
    opts: &ForwardOptions,
    (bm, bn): (usize, usize),
) -> (f64, f64, f64) {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let s = p.shape();
    let q: Vec<f16> = randn(&mut rng, s.q_elems());
    let k: Vec<f16> = randn(&mut rng, s.kv_elems());
    let v: Vec<f16> = randn(&mut rng, s.kv_elems());
    let out = gpu
        .forward_debug(p, &q, &k, &v, blocks, variant, opts)
        .unwrap();
    let (_, want) = forward_tiled(p, &q, &k, &v, bm, bn, blocks).unwrap();
    (
        max_tile_err(&out.tiles, &want, |t| &t.s),
        max_tile_err(&out.tiles, &want, |t| &t.p),
        max_tile_err(&out.tiles, &want, |t| &t.l),
    )
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_debug_dumps_match_the_tiled_reference() {
    let p = Problem::new(
        AttnShape::self_attention(1, 8, 512, 64).unwrap(),
        Causal::None,
    );
    let (s, pe, l) = dumps(&p, DebugVariant::Correct, &[(0, 0, 0), (0, 5, 7)]);
    assert!(
        s < 1e-3 && pe < 2e-3 && l < 2e-3,
        "S {s:.2e} P {pe:.2e} l {l:.2e}"
    );
    let p = Problem::new(
        AttnShape::new(1, 2, 1, 100, 77, 128).unwrap(),
        Causal::BottomRight,
    );
    let (s, pe, l) = dumps(&p, DebugVariant::Correct, &[(0, 1, 1)]);
    assert!(
        s < 1e-3 && pe < 2e-3 && l < 2e-3,
        "S {s:.2e} P {pe:.2e} l {l:.2e}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_broken_rescale_is_caught_at_the_p_stage() {
    let p = Problem::new(
        AttnShape::self_attention(1, 2, 256, 64).unwrap(),
        Causal::None,
    );
    let (s, _pe, l) = dumps(&p, DebugVariant::BrokenRescale, &[(0, 0, 0)]);
    assert!(s < 1e-3, "S must still match: {s:.2e}");
    assert!(l > 1e-2, "the missing rescale must show in l / P: {l:.2e}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_hopper_debug_dumps_match_the_tiled_reference() {
    if gpu().compute_capability() != (9, 0) {
        eprintln!("not an sm_90 GPU: the Hopper engine's dumps were not checked");
        return;
    }
    let hopper = ForwardOptions {
        engine: Engine::Hopper(None),
        ..Default::default()
    };
    // The debug tile: 128 query rows (two consumer warpgroups) by 128 keys, ping-pong and
    // intra-warpgroup overlap. Blocks in the middle and at the tail, a tail key tile, both
    // causal alignments, GQA.
    let cases = [
        (
            (1, 8, 8, 512, 512, 64),
            Causal::None,
            vec![(0, 0, 0), (0, 5, 3)],
        ),
        (
            (2, 4, 2, 300, 277, 128),
            Causal::BottomRight,
            vec![(1, 3, 2), (0, 0, 0)],
        ),
        (
            (1, 2, 1, 400, 400, 128),
            Causal::TopLeft,
            vec![(0, 1, 1), (0, 0, 3)],
        ),
        ((1, 2, 2, 200, 700, 64), Causal::None, vec![(0, 1, 1)]),
    ];
    for ((b, hq, hkv, sq, sk, d), causal, blocks) in cases {
        let p = Problem::new(AttnShape::new(b, hq, hkv, sq, sk, d).unwrap(), causal);
        let (s, pe, l) = dumps_with(&p, DebugVariant::Correct, &blocks, &hopper, (128, 128));
        assert!(
            s < 1e-3 && pe < 2e-3 && l < 2e-3,
            "{:?} {causal:?}: S {s:.2e} P {pe:.2e} l {l:.2e}",
            (b, hq, hkv, sq, sk, d)
        );
    }
    // The planted bug is the mma.sync kernel's; the Hopper engine refuses it, and tiles other
    // than its debug tile.
    let p = Problem::new(
        AttnShape::self_attention(1, 2, 256, 64).unwrap(),
        Causal::None,
    );
    let q = vec![f16::ONE; p.shape().q_elems()];
    let kv = vec![f16::ONE; p.shape().kv_elems()];
    let other = ForwardOptions {
        engine: Engine::Hopper(Some(attn_kernels::catalog::HOPPER_KV_SPLIT_64)),
        ..Default::default()
    };
    for (variant, opts) in [
        (DebugVariant::BrokenRescale, &hopper),
        (DebugVariant::Correct, &other),
    ] {
        let e = gpu()
            .forward_debug(&p, &q, &kv, &kv, &[(0, 0, 0)], variant, opts)
            .unwrap_err();
        assert!(
            matches!(e, attn_kernels::KernelError::EngineUnavailable(_)),
            "{variant:?}: {e}"
        );
    }
}

/// The mma.sync backward's debug entry dumps P, dP, dS and Δ of the listed query blocks; the
/// oracle compares them with attn-ref's backward tiles, and the gradients that ran with the
/// dumps still pass the FA3 rule's caps against the f64 reference.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_backward_debug_dumps_match_the_reference_tiles() {
    use attn_oracle::{compare_bwd_tiles, BwdTileTolerance, Storage};
    use attn_ref::reference::{backward, bwd_tiles::backward_tiles};
    // Interior and tail blocks, a tail key tile, both causal alignments, GQA, D 64 and 128.
    // Each block is named by a (b, h, query row) in it: the tile's rows are the device's
    // (128 at D = 64 where 162 KiB fit, else 64).
    let cases = [
        (
            (1, 4, 4, 256, 256, 64),
            Causal::None,
            vec![(0, 0, 0), (0, 3, 130)],
        ),
        (
            (2, 4, 2, 200, 177, 128),
            Causal::BottomRight,
            vec![(1, 3, 192), (0, 0, 0)],
        ),
        (
            (1, 2, 1, 300, 300, 128),
            Causal::TopLeft,
            vec![(0, 1, 64), (0, 0, 256)],
        ),
        ((1, 2, 2, 100, 333, 64), Causal::None, vec![(0, 1, 70)]),
    ];
    let gpu = gpu();
    let mut failures = Vec::new();
    for ((b, hq, hkv, sq, sk, d), causal, rows) in cases {
        let p = Problem::new(AttnShape::new(b, hq, hkv, sq, sk, d).unwrap(), causal);
        let (bm, _) = gpu.backward_debug_block(&p, attn_ref::Dtype::F16).unwrap();
        let blocks: Vec<_> = rows.iter().map(|&(b, h, r)| (b, h, r / bm)).collect();
        let s = p.shape();
        let seed = fresh_seed();
        let mut rng = StdRng::seed_from_u64(seed);
        let q: Vec<f16> = randn(&mut rng, s.q_elems());
        let k: Vec<f16> = randn(&mut rng, s.kv_elems());
        let v: Vec<f16> = randn(&mut rng, s.kv_elems());
        let d_o: Vec<f16> = randn(&mut rng, s.o_elems());
        let out = gpu.backward_debug(&p, (&q, &k, &v, &d_o), &blocks).unwrap();
        assert_eq!(out.block.0, bm);
        let bn = out.block.1;
        let want = backward_tiles(&p, &q, &k, &v, &d_o, bm, bn, &blocks).unwrap();
        assert!(!want.is_empty());
        let report = compare_bwd_tiles(
            &out.tiles,
            &want,
            &BwdTileTolerance::for_storage(Storage::F16),
        );
        if !report.is_clean() {
            failures.push(format!(
                "{:?} {causal:?} seed {seed}: {report}",
                (b, hq, hkv, sq, sk, d)
            ));
        }
        // The dumping kernel's gradients are still the gradients (max abs against f64).
        let f = |x: &[f16]| x.iter().map(|e| e.to_f64()).collect::<Vec<_>>();
        let r = backward(&p, &f(&q), &f(&k), &f(&v), &f(&d_o)).unwrap();
        for (name, got, want) in [
            ("dQ", &out.dq, &r.dq),
            ("dK", &out.dk, &r.dk),
            ("dV", &out.dv, &r.dv),
        ] {
            let errs: Vec<f64> = got
                .iter()
                .zip(want.iter())
                .map(|(a, b)| (a.to_f64() - b).abs())
                .collect();
            let err = errs.iter().copied().fold(0.0, f64::max);
            let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
            // NaN (an unwritten, poisoned element) fails too.
            if errs.iter().any(|e| !e.is_finite()) || err > 1e-2 * scale {
                failures.push(format!(
                    "{:?} {causal:?}: {name} max err {err:.3e} (scale {scale:.2})",
                    (b, hq, hkv, sq, sk, d)
                ));
            }
        }
    }
    // A problem with a feature is refused with a typed error, before anything runs.
    let p = Problem::new(AttnShape::new(1, 1, 1, 64, 64, 64).unwrap(), Causal::None)
        .with_softcap(5.0)
        .unwrap();
    let x: Vec<f16> = randn(&mut StdRng::seed_from_u64(1), 64 * 64);
    assert!(gpu
        .backward_debug(&p, (&x, &x, &x, &x), &[(0, 0, 0)])
        .is_err());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
