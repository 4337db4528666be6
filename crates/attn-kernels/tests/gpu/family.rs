//! The kernel family as real callers use it: every head dim, `[B,H,S,D]` and `[B,S,H,D]`
//! layouts, views inside larger buffers (a KV cache with spare capacity), and typed errors
//! for what the kernels cannot take.

use attn_kernels::{
    dims_kv, dims_q, Dtype, FlashAttention, Forward, ForwardOptions, KernelError, Layout,
    StorageType, Strides, Tensor, TensorMut,
};
use attn_ref::{
    reference::{self, emulate},
    Causal, Problem,
};
use half::{bf16, f16};
use rand::{rngs::StdRng, SeedableRng};
use rayon::prelude::*;

use super::{check_output, fresh_seed, gpu, problem, randn, to_f32s, Dims, DTYPES};

/// FlashAttention's `test_flash_attn_output` sequence-length pairs (Sq, Sk).
const FA_SEQLENS: [(usize, usize); 11] = [
    (1, 147),
    (113, 203),
    (128, 217),
    (113, 211),
    (108, 256),
    (256, 512),
    (512, 256),
    (1024, 1024),
    (1023, 1024),
    (1024, 1023),
    (2048, 2048),
];

/// FlashAttention's head dims with D % 8 == 0 (59 and 111 are refused: see below).
const FA_HEAD_DIMS: [usize; 10] = [32, 40, 64, 80, 96, 128, 160, 192, 224, 256];

/// Runs one forward on host buffers in `layout` (the kernel reads and writes the strided
/// layout in place) into a NaN-poisoned O; returns O in `[B, H, S, D]` order and LSE.
pub(super) fn run_layout<T: StorageType>(
    gpu: &FlashAttention,
    p: &Problem,
    (q, k, v): (&[T], &[T], &[T]),
    layout: Layout,
    opts: &ForwardOptions,
) -> Result<(Vec<T>, Vec<f32>), KernelError> {
    let s = p.shape();
    let (qd, kd) = (dims_q(s), dims_kv(s));
    let out = gpu.forward_host_layout(
        p,
        &layout.from_bhsd(q, qd),
        &layout.from_bhsd(k, kd),
        &layout.from_bhsd(v, kd),
        layout,
        opts,
    )?;
    Ok((layout.to_bhsd(&out.o, qd), out.lse))
}

/// One (dims, causal, dtype) cell of the matrix, both layouts against one reference.
fn check_cell<T: StorageType + attn_ref::Element>(
    gpu: &FlashAttention,
    dims: Dims,
    causal: Causal,
    storage: attn_ref::Dtype,
) -> Result<(), String> {
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let p = problem(dims, causal);
    let s = p.shape();
    let q: Vec<T> = randn(&mut rng, s.q_elems());
    let k: Vec<T> = randn(&mut rng, s.kv_elems());
    let v: Vec<T> = randn(&mut rng, s.kv_elems());
    let reference = reference::forward(&p, &q, &k, &v).map_err(|e| e.to_string())?;
    let emu = emulate::forward_emulated(&p, &to_f32s(&q), &to_f32s(&k), &to_f32s(&v), storage)
        .map_err(|e| e.to_string())?;
    let mut bhsd_out = None;
    for layout in [Layout::Bhsd, Layout::Bshd] {
        let (o, lse) = run_layout(gpu, &p, (&q, &k, &v), layout, &ForwardOptions::default())
            .map_err(|e| format!("{dims:?} {causal} {storage} {layout}: {e}"))?;
        check_output(&p, &to_f32s(&o), &lse, &reference, &emu, storage.into())
            .map_err(|e| format!("{dims:?} {causal} {storage} {layout} seed {seed}: {e}"))?;
        // The layout changes addresses only, never the arithmetic: bitwise the same O.
        match &bhsd_out {
            None => bhsd_out = Some(o),
            Some(b) => {
                let same = b
                    .iter()
                    .zip(&o)
                    .all(|(x, y)| x.to_f32().to_bits() == y.to_f32().to_bits());
                if !same {
                    return Err(format!(
                        "{dims:?} {causal} {storage}: bshd output differs bitwise from bhsd"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// FlashAttention's forward test matrix at one head dim: its 11 seqlen pairs, Hq 9 with Hkv
/// 9/3/1, f16 and bf16, no mask and bottom-right causal, `[B,H,S,D]` and `[B,S,H,D]` — 132
/// cells × 2 layouts, each against the f64 reference with the FA3 rule. Batch 2 (batch
/// strides exercised), 1 for the pairs of a million or more scores, whose f64 reference
/// dominates the run (FlashAttention's own test uses batch 4).
fn fa_matrix(d: usize) {
    let gpu = gpu();
    let mut cells = Vec::new();
    for (sq, sk) in FA_SEQLENS {
        let batch = if sq * sk >= 1_000_000 { 1 } else { 2 };
        for hkv in [9, 3, 1] {
            for causal in [Causal::None, Causal::BottomRight] {
                for dtype in DTYPES {
                    cells.push(((batch, 9, hkv, sq, sk, d), causal, dtype));
                }
            }
        }
    }
    // The launcher is shared across the rayon workers (launches queue on its stream); the
    // CPU reference of each cell runs in parallel with the others.
    let failures: Vec<String> = cells
        .par_iter()
        .filter_map(|&(dims, causal, dtype)| {
            match dtype {
                Dtype::F16 => check_cell::<f16>(&gpu, dims, causal, attn_ref::Dtype::F16),
                Dtype::Bf16 => check_cell::<bf16>(&gpu, dims, causal, attn_ref::Dtype::Bf16),
            }
            .err()
        })
        .collect();
    assert!(
        failures.is_empty(),
        "D={d}: {} of {} cells (x2 layouts) failed:\n{}",
        failures.len(),
        cells.len(),
        failures.join("\n")
    );
}

/// The matrix covers exactly FlashAttention's head dims with D % 8 == 0.
#[test]
fn fa_matrix_tests_cover_every_fa_head_dim() {
    let src = include_str!("family.rs");
    for d in FA_HEAD_DIMS {
        assert!(
            src.contains(&format!("    fa_matrix({d});")),
            "D={d} has no matrix test"
        );
        assert!(attn_kernels::bucket_for(d).is_ok());
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_fa_matrix_d32_d40() {
    fa_matrix(32);
    fa_matrix(40);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_fa_matrix_d64_d80() {
    fa_matrix(64);
    fa_matrix(80);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_fa_matrix_d96_d128() {
    fa_matrix(96);
    fa_matrix(128);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_fa_matrix_d160_d192() {
    fa_matrix(160);
    fa_matrix(192);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_fa_matrix_d224_d256() {
    fa_matrix(224);
    fa_matrix(256);
}

/// Every head dim the kernels take (8..=256 step 8) and every config of its bucket, on a
/// tail shape, against the reference.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_every_head_dim_every_config() {
    let gpu = gpu();
    let mut failures = Vec::new();
    for d in (8..=256).step_by(8) {
        for cfg in attn_kernels::configs_for(d) {
            if cfg.smem_bytes(d) > gpu.max_smem_per_block() {
                continue;
            }
            for causal in [Causal::None, Causal::BottomRight] {
                let c = super::Case {
                    problem: problem((1, 4, 2, 77, 200, d), causal),
                    dtype: Dtype::F16,
                    config: Some(cfg),
                    splits: Some(1),
                    engine: attn_kernels::Engine::Auto,
                    schedule: attn_kernels::TileSchedule::Auto,
                };
                if let Err(e) = super::check_case(&gpu, &c) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// D = 59 and 111 (FlashAttention's odd head dims) and others outside the set: a typed
/// error naming the supported set, and nothing written.
#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_unsupported_head_dims_name_the_set() {
    let gpu = gpu();
    for d in [59, 111, 4, 264] {
        let p = problem((1, 2, 2, 16, 16, d), Causal::None);
        let s = p.shape();
        let st = gpu.stream();
        let q = st.clone_htod(&vec![f16::ONE; s.q_elems()]).unwrap();
        let kv = st.clone_htod(&vec![f16::ONE; s.kv_elems()]).unwrap();
        let mut o = st.clone_htod(&vec![f16::NAN; s.o_elems()]).unwrap();
        let e = gpu
            .forward(Forward::bhsd(&p, &q, &kv, &kv, &mut o, None))
            .unwrap_err();
        assert!(
            matches!(e, KernelError::UnsupportedHeadDim { head_dim, .. } if head_dim == d),
            "D={d}: {e}"
        );
        assert!(e.to_string().contains("D % 8 == 0"), "{e}");
        let back = st.clone_dtoh(&o).unwrap();
        assert!(back.iter().all(|x| x.is_nan()), "D={d}: O was written");
    }
}

/// K and V as views into a KV cache with spare capacity (the cache is `[B, Hkv, capacity,
/// D]`, the problem uses the first `kv_len` positions, starting at an offset inside the
/// allocation), O inside a larger buffer with a padded row stride: correct results, and not
/// one element outside O's own is written.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_views_into_a_kv_cache() {
    let gpu = gpu();
    let st = gpu.stream();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let (b, hq, hkv, sq, sk, d, cap) = (2, 8, 2, 37, 300, 96, 512);
    for causal in [Causal::None, Causal::BottomRight] {
        let p = problem((b, hq, hkv, sq, sk, d), causal);
        let s = p.shape();
        let q: Vec<f16> = randn(&mut rng, s.q_elems());
        let k: Vec<f16> = randn(&mut rng, s.kv_elems());
        let v: Vec<f16> = randn(&mut rng, s.kv_elems());
        // The cache: [B, S_cap, Hkv, D] (bshd with spare capacity), 64 elements of slack
        // before it, garbage in the unused positions.
        let pad = 64;
        let cache_dims = [b, hkv, cap, d];
        let cache_st = Layout::Bshd.strides(cache_dims);
        let fill = |src: &[f16]| {
            let mut c: Vec<f16> = randn(&mut rng.clone(), pad + b * cap * hkv * d);
            for bi in 0..b {
                for h in 0..hkv {
                    for j in 0..sk {
                        let from = ((bi * hkv + h) * sk + j) * d;
                        let to = pad + bi * cache_st.batch + h * cache_st.head + j * cache_st.row;
                        c[to..to + d].copy_from_slice(&src[from..from + d]);
                    }
                }
            }
            c
        };
        let (kc, vc) = (fill(&k), fill(&v));
        let dk = st.clone_htod(&kc).unwrap();
        let dv = st.clone_htod(&vc).unwrap();
        let dq = st.clone_htod(&q).unwrap();
        // O: [B, Hq, Sq, D] rows 128 elements apart (row padding), poisoned.
        let o_st = Strides {
            batch: hq * sq * 128,
            head: sq * 128,
            row: 128,
        };
        let o_len = b * o_st.batch;
        let mut o = st.clone_htod(&vec![f16::NAN; o_len]).unwrap();
        let mut lse = st.clone_htod(&vec![f32::NAN; s.lse_elems()]).unwrap();
        let (qd, kd) = (dims_q(s), dims_kv(s));
        gpu.forward(Forward {
            problem: &p,
            q: Tensor::bhsd(&dq, qd),
            k: Tensor::new(dk.slice(pad..), kd, cache_st),
            v: Tensor::new(dv.slice(pad..), kd, cache_st),
            o: TensorMut::new(o.as_view_mut(), qd, o_st),
            lse: Some(lse.as_view_mut()),
            options: ForwardOptions::default(),
        })
        .unwrap();
        let o_host = st.clone_dtoh(&o).unwrap();
        let lse_host = st.clone_dtoh(&lse).unwrap();
        let mut dense = vec![0f32; s.o_elems()];
        for (i, x) in o_host.iter().enumerate() {
            let (row, col) = (i / 128, i % 128);
            if col < d {
                dense[row * d + col] = x.to_f32();
            } else {
                assert!(x.is_nan(), "element {i} past the row was written");
            }
        }
        let reference = reference::forward(&p, &q, &k, &v).unwrap();
        let emu = emulate::forward_emulated(
            &p,
            &to_f32s(&q),
            &to_f32s(&k),
            &to_f32s(&v),
            attn_ref::Dtype::F16,
        )
        .unwrap();
        check_output(
            &p,
            &dense,
            &lse_host,
            &reference,
            &emu,
            attn_ref::Dtype::F16.into(),
        )
        .unwrap_or_else(|e| panic!("{causal} seed {seed}: {e}"));
    }
}

/// Bad views: misaligned starts and strides, views too short for their dims. Each a typed
/// error, and O untouched.
#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_views_misaligned_overlapping_or_short() {
    let gpu = gpu();
    let st = gpu.stream();
    let p = problem((1, 2, 2, 16, 16, 64), Causal::None);
    let s = p.shape();
    let (qd, kd) = (dims_q(s), dims_kv(s));
    let big = st.clone_htod(&vec![f16::ONE; 4 * s.q_elems() + 8]).unwrap();
    let mut o = st.clone_htod(&vec![f16::NAN; s.o_elems() + 8]).unwrap();
    let bhsd = |dims| Layout::Bhsd.strides(dims);
    // Q starting one element in: not 16-byte aligned.
    let e = gpu
        .forward(Forward {
            problem: &p,
            q: Tensor::new(big.slice(1..), qd, bhsd(qd)),
            k: Tensor::new(big.slice(0..), kd, bhsd(kd)),
            v: Tensor::new(big.slice(0..), kd, bhsd(kd)),
            o: TensorMut::new(o.slice_mut(0..), qd, bhsd(qd)),
            lse: None,
            options: ForwardOptions::default(),
        })
        .unwrap_err();
    assert!(
        matches!(e, KernelError::Misaligned { tensor: "Q", .. }),
        "{e}"
    );
    // K with a row stride of 68 elements (136 bytes).
    let odd = Strides {
        row: 68,
        head: 68 * 16,
        batch: 68 * 16 * 2,
    };
    let e = gpu
        .forward(Forward {
            problem: &p,
            q: Tensor::new(big.slice(0..), qd, bhsd(qd)),
            k: Tensor::new(big.slice(0..), kd, odd),
            v: Tensor::new(big.slice(0..), kd, bhsd(kd)),
            o: TensorMut::new(o.slice_mut(0..), qd, bhsd(qd)),
            lse: None,
            options: ForwardOptions::default(),
        })
        .unwrap_err();
    assert!(
        matches!(e, KernelError::Misaligned { tensor: "K", .. }),
        "{e}"
    );
    // V view too short for its dims.
    let e = gpu
        .forward(Forward {
            problem: &p,
            q: Tensor::new(big.slice(0..), qd, bhsd(qd)),
            k: Tensor::new(big.slice(0..), kd, bhsd(kd)),
            v: Tensor::new(big.slice(0..s.kv_elems() - 8), kd, bhsd(kd)),
            o: TensorMut::new(o.slice_mut(0..), qd, bhsd(qd)),
            lse: None,
            options: ForwardOptions::default(),
        })
        .unwrap_err();
    assert!(
        matches!(e, KernelError::InvalidTensor { tensor: "V", .. }),
        "{e}"
    );
    // (O over an input cannot be built from safe cudarc views: the borrow checker refuses a
    // mutable and a shared view of one buffer. The launcher still checks address ranges;
    // the CPU test `launch::tests::tensors_are_checked_against_the_problem_and_each_other`
    // covers that check.)
    let back = st.clone_dtoh(&o).unwrap();
    assert!(back.iter().all(|x| x.is_nan()), "O was written");
}
