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
