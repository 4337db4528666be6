//! The f16/bf16 forward against the reference: the seed shapes, tails, cross lengths with
//! every causal alignment, GQA, fully masked rows, every config and custom scales.

use attn_kernels::configs_for;
use attn_ref::Causal;

use crate::{case, gpu, run_all, DTYPES};

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_seed_shapes() {
    let mut cases = Vec::new();
    for dt in DTYPES {
        for causal in [Causal::None, Causal::TopLeft] {
            cases.push(case((1, 8, 8, 512, 512, 64), causal, dt));
            cases.push(case((2, 8, 8, 2048, 2048, 64), causal, dt));
        }
        cases.push(case((2, 8, 8, 2048, 2048, 128), Causal::None, dt));
    }
    run_all(&cases);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_tails() {
    let mut cases = Vec::new();
    for dt in DTYPES {
        for d in [64, 128] {
            for s in [1, 17, 63, 65, 511, 1000] {
                for causal in [Causal::None, Causal::TopLeft] {
                    cases.push(case((1, 2, 2, s, s, d), causal, dt));
                }
            }
        }
    }
    run_all(&cases);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_cross_lengths_and_alignments() {
    let mut cases = Vec::new();
    for dt in DTYPES {
        for d in [64, 128] {
            for (sq, sk) in [(100, 300), (300, 100), (1, 777), (129, 64)] {
                for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
                    cases.push(case((2, 2, 2, sq, sk, d), causal, dt));
                }
            }
        }
    }
    run_all(&cases);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_gqa() {
    let mut cases = Vec::new();
    for dt in DTYPES {
        for (hq, hkv) in [(8, 1), (8, 2), (4, 1)] {
            cases.push(case((2, hq, hkv, 200, 200, 64), Causal::TopLeft, dt));
            cases.push(case((1, hq, hkv, 130, 257, 128), Causal::None, dt));
        }
    }
    run_all(&cases);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_fully_masked_rows() {
    // Bottom-right with Sq > Sk: rows i < Sq − Sk see no key (O = 0, LSE = −∞).
    let mut cases = Vec::new();
    for dt in DTYPES {
        cases.push(case((1, 2, 2, 300, 70, 64), Causal::BottomRight, dt));
        cases.push(case((1, 2, 2, 200, 1, 128), Causal::BottomRight, dt));
    }
    run_all(&cases);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_every_config() {
    let gpu = gpu();
    let mut cases = Vec::new();
    for d in [64, 128] {
        for cfg in configs_for(d) {
            if cfg.smem_bytes(d) > gpu.max_smem_per_block() {
                continue;
            }
            for dt in DTYPES {
                for causal in [Causal::None, Causal::BottomRight] {
                    let mut c = case((1, 3, 3, 333, 301, d), causal, dt);
                    c.config = Some(cfg);
                    cases.push(c);
                }
            }
        }
    }
    run_all(&cases);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_custom_scale() {
    let mut cases = Vec::new();
    for dt in DTYPES {
        let mut c = case((1, 2, 2, 150, 150, 64), Causal::TopLeft, dt);
        c.problem = c.problem.with_scale(0.3).unwrap();
        cases.push(c);
        let mut c = case((1, 2, 2, 150, 150, 128), Causal::None, dt);
        c.problem = c.problem.with_scale(0.01).unwrap();
        cases.push(c);
    }
    run_all(&cases);
}

/// DESIGN §2: NaN inputs propagate as in the reference. One NaN element in K of head 0, at
/// keys in different n-tiles of the first 128-key tile and one past it, and one NaN element in
/// Q row 17 of head 1: O and LSE are NaN exactly where the reference's are, so no softmax path
/// (masked tiles, the row max's `fmaxf`, which drops NaN) hides one. With softcap too (the
/// feature entries, tanh.approx before the row max), at keys in even and odd n-tiles.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_nan_inputs_propagate() {
    use crate::{fresh_seed, randn, run_gpu, to_f32s};
    use attn_kernels::ForwardOptions;
    use half::f16;
    use rand::{rngs::StdRng, SeedableRng};

    fn nan_mask<T: Copy + Into<f64>>(x: &[T]) -> Vec<bool> {
        x.iter().map(|&e| e.into().is_nan()).collect()
    }
    let gpu = gpu();
    let mut failures = Vec::new();
    for d in [64, 128] {
        for (nan_key, softcap) in [5usize, 17, 30, 61, 127, 250]
            .into_iter()
            .flat_map(|k| [(k, None), (k, Some(20.0))])
        {
            for causal in [Causal::None, Causal::BottomRight] {
                let mut p = crate::problem((1, 2, 2, 200, 300, d), causal);
                if let Some(c) = softcap {
                    p = p.with_softcap(c).expect("a valid softcap");
                }
                let shape = p.shape();
                let seed = fresh_seed();
                let mut rng = StdRng::seed_from_u64(seed);
                let mut q: Vec<f16> = randn(&mut rng, shape.q_elems());
                let mut k: Vec<f16> = randn(&mut rng, shape.kv_elems());
                let v: Vec<f16> = randn(&mut rng, shape.kv_elems());
                // [B, H, S, D]: head 0's key `nan_key`, head 1's query row 17.
                k[nan_key * d + 3] = f16::NAN;
                q[(200 + 17) * d] = f16::NAN;
                let (o, lse) = run_gpu(gpu.as_ref(), &p, &q, &k, &v, &ForwardOptions::default());
                let r = attn_ref::reference::forward(&p, &q, &k, &v).unwrap();
                let o_nan = nan_mask(&to_f32s(&o));
                let r_nan = nan_mask(&r.o);
                let lse_nan = nan_mask(&lse);
                let rl_nan = nan_mask(&r.lse);
                if !r_nan.iter().any(|&x| x) {
                    failures.push(format!(
                        "d {d} key {nan_key} {causal} softcap {softcap:?}: the reference has no NaN"
                    ));
                }
                if o_nan != r_nan || lse_nan != rl_nan {
                    let first = o_nan.iter().zip(&r_nan).position(|(a, b)| a != b);
                    failures.push(format!(
                        "d {d} key {nan_key} {causal} softcap {softcap:?} seed {seed}: NaN pattern differs \
                         (O: first at {first:?}, ours {} NaN vs reference {}; LSE ours {} vs {})",
                        o_nan.iter().filter(|&&x| x).count(),
                        r_nan.iter().filter(|&&x| x).count(),
                        lse_nan.iter().filter(|&&x| x).count(),
                        rl_nan.iter().filter(|&&x| x).count(),
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
