//! Split-KV (flash-decoding): forced split counts on every config with split entry points,
//! and the split heuristic.

use attn_kernels::{config::has_split, configs_for};
use attn_ref::Causal;

use crate::{case, gpu, run_all, DTYPES};

/// Split-KV: every split count on grids too small to fill the chip, causal (where later
/// splits of early query blocks are empty) and not, with tails.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_split_kv() {
    let gpu = gpu();
    let mut cases = Vec::new();
    for d in [64, 128] {
        let split_configs = configs_for(d)
            .into_iter()
            .filter(|c| has_split(c, d) && c.smem_bytes(d) <= gpu.max_smem_per_block());
        for cfg in split_configs {
            for dt in DTYPES {
                for splits in [2, 3, 5, 16] {
                    for (sq, sk, causal) in [
                        (100, 1000, Causal::None),
                        (300, 700, Causal::BottomRight),
                        (257, 257, Causal::TopLeft),
                        (1, 4097, Causal::None),
                    ] {
                        let mut c = case((1, 2, 1, sq, sk, d), causal, dt);
                        c.config = Some(cfg);
                        c.splits = Some(splits);
                        cases.push(c);
                    }
                }
            }
        }
    }
    assert!(!cases.is_empty(), "no config with split-KV entry points");
    // And the heuristic on the seed shape and the decode shape.
    for dt in DTYPES {
        cases.push(case((1, 8, 8, 512, 512, 64), Causal::None, dt));
        cases.push(case((1, 32, 32, 1, 8192, 128), Causal::None, dt));
    }
    run_all(&cases);
}
