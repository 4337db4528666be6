//! The backward pass against the f64 reference (`attn_ref::reference::backward`) with the
//! gradient rule of attn-oracle (`ToleranceRule::check_gradient`: the FA3 rule against the
//! backward rounding emulation, plus the gradient rel-L2 caps), on O and LSE from our own
//! forward, fresh N(0,1) inputs and dO, and gradients poisoned (NaN) before the run.

use super::*;
use attn_kernels::{Backward, BackwardEngine, BackwardOptions, Layout, Tensor, TensorMut};

/// What [`run_backward`] returns, as f32 in `[B, H, S, D]` order: the gradients, and the O and
/// LSE of our forward that the backward was given.
struct BackwardRun {
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
    o: Vec<f32>,
    lse: Vec<f32>,
    info: attn_kernels::BackwardInfo,
}

/// Runs forward then backward on the GPU (`layout` for every tensor). The forward runs on a
/// launcher of `gpu`'s stream without its shared-memory limit, if it has one.
fn run_backward<T: StorageType>(
    gpu: &FlashAttention,
    p: &Problem,
    (q, k, v, d_o): (&[T], &[T], &[T], &[T]),
    layout: Layout,
    options: BackwardOptions,
) -> Result<BackwardRun, attn_kernels::KernelError> {
    let s = gpu.stream();
    let shape = p.shape();
    let (qd, kd) = (attn_kernels::dims_q(shape), attn_kernels::dims_kv(shape));
    let up = |x: &[T], dims| s.clone_htod(&layout.from_bhsd(x, dims)).unwrap();
    let (dq_, dk_, dv_, ddo) = (up(q, qd), up(k, kd), up(v, kd), up(d_o, qd));
    let mut o = upload_poisoned::<T>(gpu, shape.o_elems());
    let mut lse = s.clone_htod(&vec![f32::NAN; shape.lse_elems()]).unwrap();
    let unlimited = FlashAttention::on_stream(gpu.cache().clone(), s.clone());
    unlimited.forward(Forward {
        problem: p,
        q: Tensor::contiguous(dq_.as_view(), qd, layout),
        k: Tensor::contiguous(dk_.as_view(), kd, layout),
        v: Tensor::contiguous(dv_.as_view(), kd, layout),
        o: TensorMut::contiguous(o.as_view_mut(), qd, layout),
        lse: Some(lse.as_view_mut()),
        options: ForwardOptions::default(),
    })?;
    let mut gq = upload_poisoned::<T>(gpu, shape.q_elems());
    let mut gk = upload_poisoned::<T>(gpu, shape.kv_elems());
    let mut gv = upload_poisoned::<T>(gpu, shape.kv_elems());
    let info = gpu.backward(Backward {
        problem: p,
        q: Tensor::contiguous(dq_.as_view(), qd, layout),
        k: Tensor::contiguous(dk_.as_view(), kd, layout),
        v: Tensor::contiguous(dv_.as_view(), kd, layout),
        o: Tensor::contiguous(o.as_view(), qd, layout),
        lse: lse.as_view(),
        d_o: Tensor::contiguous(ddo.as_view(), qd, layout),
        dq: TensorMut::contiguous(gq.as_view_mut(), qd, layout),
        dk: TensorMut::contiguous(gk.as_view_mut(), kd, layout),
        dv: TensorMut::contiguous(gv.as_view_mut(), kd, layout),
        options,
    })?;
    let down = |x: &CudaSlice<T>, dims| to_f32s(&layout.to_bhsd(&s.clone_dtoh(x).unwrap(), dims));
    Ok(BackwardRun {
        dq: down(&gq, qd),
        dk: down(&gk, kd),
        dv: down(&gv, kd),
        o: down(&o, qd),
        lse: s.clone_dtoh(&lse).unwrap(),
        info,
    })
}

fn check_backward<T: StorageType + attn_ref::Element>(
    p: &Problem,
    storage: attn_ref::Dtype,
    layout: Layout,
    options: BackwardOptions,
) -> Result<attn_kernels::BackwardInfo, String> {
    check_backward_on::<T>(&gpu(), p, storage, layout, options)
}

/// [`check_backward`] with the backward on launcher `gpu`.
fn check_backward_on<T: StorageType + attn_ref::Element>(
    gpu: &FlashAttention,
    p: &Problem,
    storage: attn_ref::Dtype,
    layout: Layout,
    options: BackwardOptions,
) -> Result<attn_kernels::BackwardInfo, String> {
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let shape = p.shape();
    let q: Vec<T> = randn(&mut rng, shape.q_elems());
    let k: Vec<T> = randn(&mut rng, shape.kv_elems());
    let v: Vec<T> = randn(&mut rng, shape.kv_elems());
    let d_o: Vec<T> = randn(&mut rng, shape.o_elems());
    let got =
        run_backward(gpu, p, (&q, &k, &v, &d_o), layout, options).map_err(|e| e.to_string())?;
    let (dq, dk, dv) = (got.dq, got.dk, got.dv);
    let r = reference::backward(p, &q, &k, &v, &d_o).map_err(|e| e.to_string())?;
    // The emulation given the O and LSE our forward produced, as the backward was (as
    // backward_general.rs does): with the emulation's own forward, the rounding of O enters
    // Δ = rowsum(dO∘O) differently on the two sides, the same for every key of a row, and
    // one-row problems failed the 2× margin on both engines at one seed (runs 124–125).
    let emu = attn_ref::reference::backward::backward_emulated_with(
        p,
        &to_f32s(&q),
        &to_f32s(&k),
        &to_f32s(&v),
        &got.o,
        &got.lse,
        &to_f32s(&d_o),
        storage,
    )
    .map_err(|e| e.to_string())?;
    let rule = ToleranceRule::for_storage(storage.into());
    // The emulation under its least lucky resolution of the rounding ties a kernel's f32
    // order may decide the other way (attn_ref's TieSpread).
    let [eq, ek, ev] = emu.rule_emulation(&r);
    let mut errs = Vec::new();
    for (name, out, e, want) in [
        ("dQ", &dq, eq, &r.dq),
        ("dK", &dk, ek, &r.dk),
        ("dV", &dv, ev, &r.dv),
    ] {
        let verdict = rule.check_gradient(out, &e, want);
        if !verdict.pass {
            errs.push(format!("{name}: {verdict}"));
        }
    }
    if errs.is_empty() {
        Ok(got.info)
    } else {
        let (qd, kd) = (attn_kernels::dims_q(shape), attn_kernels::dims_kv(shape));
        let lse_dims = [shape.batch(), shape.q_heads(), shape.q_len()];
        dump_failing_case(
            &format!(
                "backward_{seed}_{}{}",
                got.info.kernel,
                if options.deterministic { "_det" } else { "" }
            ),
            &[
                ("q", &qd, &to_f32s(&q)),
                ("k", &kd, &to_f32s(&k)),
                ("v", &kd, &to_f32s(&v)),
                ("do", &qd, &to_f32s(&d_o)),
                ("o", &qd, &got.o),
                ("lse", &lse_dims, &got.lse),
                ("dq", &qd, &dq),
                ("dk", &kd, &dk),
                ("dv", &kd, &dv),
            ],
        );
        Err(format!(
            "{shape:?} {:?} {storage:?} {layout} {:?} deterministic {} {:?} on {} seed {seed}:\n{}",
            p.causal(),
            options.engine,
            options.deterministic,
            p.features(),
            got.info.kernel,
            errs.join("")
        ))
    }
}

/// The engines a head dim runs on: the default, and the mma.sync kernel too where the default
/// may be the wgmma one (buckets 64, 128 and 256), so an H100 run checks both.
fn engines_for(head_dim: usize) -> Vec<BackwardEngine> {
    use attn_kernels::catalog::{bwd_hopper_bucket, Arch};
    let bucket = attn_kernels::bucket_for(head_dim).expect("a catalog head dim");
    if bwd_hopper_bucket(Arch::Sm90a, bucket) {
        vec![BackwardEngine::Auto, BackwardEngine::MmaSync]
    } else {
        vec![BackwardEngine::Auto]
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_backward_99_kib_tile() {
    // sm_86/87/89 parts hold 99 KiB per block and run the sm_80 cubin, whose preferred tile
    // needs more: they take the unit's smaller tile (catalog::bwd_tiles): 64 queries instead
    // of 128 at D = 64, one stage of 64 keys up to D = 128 and of 32 above, where V shares
    // its room with Pᵀ/dSᵀ above D = 192. A launcher limited to 99 KiB chooses the same here
    // (Auto engine: the wgmma kernel does not fit either). Tails, GQA, both layouts, both causal alignments, the general entry
    // (window + softcap) and deterministic mode; D = 136 and 200 run the 160 and 224 buckets
    // with zero-filled columns, and those buckets' warps take an odd last n-tile in phase B.
    let small = super::small_smem::small_launcher();
    let (mut failures, mut runs) = (Vec::new(), 0);
    for d in [64, 96, 128, 136, 160, 192, 200, 224, 256] {
        let tile = match d {
            ..=64 => "_bm64_bn128_w8_s2_",
            65..=128 => "_bm64_bn64_w8_s1_",
            _ => "_bm64_bn32_w8_s1_",
        };
        for (dims, causal, layout) in [
            ((2, 4, 2, 113, 200, d), Causal::None, Layout::Bhsd),
            ((1, 4, 4, 200, 113, d), Causal::BottomRight, Layout::Bshd),
            ((1, 2, 1, 256, 256, d), Causal::TopLeft, Layout::Bhsd),
        ] {
            let plain = problem(dims, causal);
            let featured = plain
                .with_features(attn_ref::Features {
                    window: Some((40, 7)),
                    softcap: Some(8.0),
                    ..Default::default()
                })
                .unwrap();
            for (p, deterministic) in [(&plain, false), (&featured, false), (&plain, true)] {
                let o = BackwardOptions {
                    deterministic,
                    ..Default::default()
                };
                for r in [
                    check_backward_on::<f16>(&small, p, attn_ref::Dtype::F16, layout, o),
                    check_backward_on::<bf16>(&small, p, attn_ref::Dtype::Bf16, layout, o),
                ] {
                    runs += 1;
                    match r {
                        Ok(info) => {
                            assert!(
                                info.kernel.contains(tile)
                                    && info.smem_bytes <= attn_kernels::catalog::SM8X_SMALL_SMEM,
                                "d{d}: ran {} with {} bytes",
                                info.kernel,
                                info.smem_bytes
                            );
                        }
                        Err(e) => failures.push(e),
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn run_cases(cases: &[(Dims, Causal, Layout)]) {
    let mut failures = Vec::new();
    let mut runs = 0;
    for &(dims, causal, layout) in cases {
        let p = problem(dims, causal);
        for engine in engines_for(dims.5) {
            let o = BackwardOptions {
                engine,
                ..Default::default()
            };
            for r in [
                check_backward::<f16>(&p, attn_ref::Dtype::F16, layout, o),
                check_backward::<bf16>(&p, attn_ref::Dtype::Bf16, layout, o),
            ] {
                runs += 1;
                if let Err(e) = r {
                    failures.push(e);
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_backward_seed_shapes_and_masks() {
    let mut cases = Vec::new();
    for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
        for d in [64, 128] {
            cases.push(((2, 4, 4, 512, 512, d), causal, Layout::Bhsd));
            cases.push(((1, 8, 2, 384, 640, d), causal, Layout::Bshd));
        }
        // D = 256: the wgmma kernel's split-column CTAs (64 keys), GQA, both layouts.
        cases.push(((1, 4, 2, 384, 640, 256), causal, Layout::Bshd));
        cases.push(((2, 2, 2, 320, 320, 256), causal, Layout::Bhsd));
    }
    run_cases(&cases);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_backward_tails_gqa_and_head_dims() {
    let mut cases = Vec::new();
    for s in [1, 17, 113, 1023] {
        for causal in [Causal::None, Causal::BottomRight] {
            cases.push(((1, 6, 2, s, s, 128), causal, Layout::Bshd));
            cases.push(((2, 4, 1, s, 257, 64), causal, Layout::Bhsd));
        }
    }
    // Odd row counts (B·Hq·Sq = 51): the mma.sync engine's Δ then has an odd length, and the
    // dQ accumulator carved after it in the kept workspace must still start aligned for the
    // kernel's 8-byte atomics on sm_90 (it did not before 2026-11-28's third session).
    cases.push(((1, 3, 3, 17, 40, 64), Causal::None, Layout::Bshd));
    cases.push(((1, 3, 1, 17, 40, 96), Causal::BottomRight, Layout::Bhsd));
    // Every bucket, and padded head dims inside buckets.
    for d in [32, 40, 80, 96, 104, 160, 192, 224, 256] {
        cases.push(((1, 4, 2, 200, 300, d), Causal::BottomRight, Layout::Bshd));
    }
    run_cases(&cases);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn determinism_backward_deterministic_mode_is_bitwise_reproducible() {
    // Causal (the reversed turn order), and non-causal with as many, more and fewer key blocks
    // than query blocks (the Hopper entry's rotated walk, its spacing and its turn count), with
    // GQA.
    let cases = [
        ((2, 8, 2, 1000, 1000, 128), Causal::BottomRight),
        ((2, 8, 2, 1000, 1000, 128), Causal::None),
        ((1, 4, 2, 200, 1500, 64), Causal::None),
        ((1, 4, 4, 1500, 300, 64), Causal::None),
        // D = 256: the consumers take the turns themselves (no dQ writer).
        ((1, 4, 2, 500, 700, 256), Causal::None),
        ((1, 4, 2, 700, 700, 256), Causal::BottomRight),
        // More key blocks per head than an H100 has SMs (157 and 141 against 132): the
        // rotated walk would hang there, so these take their turns in key order
        // (src/backward.rs `rotated_turns`).
        ((1, 2, 1, 300, 20000, 64), Causal::None),
        ((1, 1, 1, 200, 9000, 256), Causal::None),
    ];
    let mut failures = Vec::new();
    for (dims, causal) in cases {
        let p = problem(dims, causal);
        let shape = p.shape();
        let mut rng = StdRng::seed_from_u64(fresh_seed());
        let q: Vec<bf16> = randn(&mut rng, shape.q_elems());
        let k: Vec<bf16> = randn(&mut rng, shape.kv_elems());
        let v: Vec<bf16> = randn(&mut rng, shape.kv_elems());
        let d_o: Vec<bf16> = randn(&mut rng, shape.o_elems());
        for engine in engines_for(dims.5) {
            let det = BackwardOptions {
                deterministic: true,
                engine,
                ..Default::default()
            };
            // The fixed order must also be a correct one.
            if let Err(e) = check_backward::<f16>(&p, attn_ref::Dtype::F16, Layout::Bshd, det) {
                failures.push(e);
            }
            let a = run_backward(&gpu(), &p, (&q, &k, &v, &d_o), Layout::Bshd, det).unwrap();
            for _ in 0..3 {
                let b = run_backward(&gpu(), &p, (&q, &k, &v, &d_o), Layout::Bshd, det).unwrap();
                let same =
                    |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits());
                if !(same(&a.dq, &b.dq) && same(&a.dk, &b.dk) && same(&a.dv, &b.dv)) {
                    failures.push(format!("{dims:?} {causal:?} {engine:?}: runs differ"));
                    break;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The wgmma kernel's split tail (`BackwardSchedule`): the last items of the grid cut into
/// query-range pieces whose dK/dV partials the last piece adds. Forced onto small grids (as if
/// the GPU held 5 or 7 CTAs) at every wgmma bucket, GQA and not, 2 to 8 pieces, rows that do
/// not fill the last query block, problems where Auto splits on the real GPU (an H100's or
/// H200's 132 SMs; deterministic: in key order), and deterministic launches; each against the f64 reference, and dK, dV bitwise equal on a
/// second run (the pieces add in a fixed order; dQ too in deterministic mode, its additions
/// being unordered in the default one).
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_backward_split_tail() {
    use attn_kernels::BackwardSchedule;
    let forced = |ctas, pieces| BackwardOptions {
        schedule: BackwardSchedule::TailPieces { ctas, pieces },
        ..Default::default()
    };
    let det = |o: BackwardOptions| BackwardOptions {
        deterministic: true,
        ..o
    };
    let cases: [(Dims, BackwardOptions); 15] = [
        ((2, 4, 4, 300, 500, 128), forced(5, 3)),
        ((1, 8, 2, 333, 700, 128), forced(7, 2)),
        ((2, 4, 2, 500, 300, 64), forced(5, 8)),
        ((1, 6, 3, 130, 1000, 64), forced(7, 4)),
        ((1, 4, 2, 260, 330, 256), forced(5, 3)),
        ((2, 2, 1, 77, 450, 256), forced(7, 2)),
        // 8 key blocks × 2 heads: one partial round of 16 items on any GPU of 16+ SMs.
        ((1, 2, 2, 1024, 1024, 128), BackwardOptions::default()),
        // Deterministic: the pieces take the dQ turns of their query blocks. Rotated walks
        // (forced): the tail is part of one head, or a whole head and part of another.
        ((1, 8, 2, 333, 700, 128), det(forced(7, 3))),
        ((1, 6, 3, 200, 500, 128), det(forced(7, 2))),
        // Key order (133 key blocks per head, more than an H100's 132 SMs): where Auto splits.
        ((1, 2, 1, 64, 17000, 128), det(forced(5, 2))),
        ((1, 2, 1, 100, 8550, 256), det(forced(7, 3))),
        ((1, 2, 1, 256, 17000, 128), det(BackwardOptions::default())),
        ((1, 6, 3, 130, 1000, 64), det(forced(5, 2))),
        ((1, 2, 2, 1024, 1024, 128), det(forced(9, 4))),
        // D = 256: the consumer warps take the turns themselves.
        ((2, 2, 1, 77, 450, 256), det(forced(7, 3))),
    ];
    if gpu().compute_capability() != (9, 0) {
        // Off Hopper the mma.sync kernel runs, which has no split tail: a forced split is
        // refused with a typed error.
        let (dims, options) = cases[0];
        let p = problem(dims, Causal::None);
        let n = p.shape().q_elems().max(p.shape().kv_elems());
        let x = vec![bf16::ONE; n];
        let (q, kv) = (&x[..p.shape().q_elems()], &x[..p.shape().kv_elems()]);
        let e = run_backward(&gpu(), &p, (q, kv, kv, q), Layout::Bshd, options);
        assert!(
            matches!(e, Err(attn_kernels::KernelError::EngineUnavailable(_))),
            "{:?}",
            e.map(|r| r.info)
        );
        return;
    }
    let mut failures = Vec::new();
    for (dims, options) in cases {
        let p = problem(dims, Causal::None);
        let shape = p.shape();
        for r in [
            check_backward::<f16>(&p, attn_ref::Dtype::F16, Layout::Bshd, options),
            check_backward::<bf16>(&p, attn_ref::Dtype::Bf16, Layout::Bhsd, options),
        ] {
            match r {
                Ok(info) if info.tail.is_none() => failures.push(format!(
                    "{dims:?} {options:?}: the tail did not split ({info:?})"
                )),
                Ok(_) => {}
                Err(e) => failures.push(e),
            }
        }
        let mut rng = StdRng::seed_from_u64(fresh_seed());
        let q: Vec<bf16> = randn(&mut rng, shape.q_elems());
        let k: Vec<bf16> = randn(&mut rng, shape.kv_elems());
        let v: Vec<bf16> = randn(&mut rng, shape.kv_elems());
        let d_o: Vec<bf16> = randn(&mut rng, shape.o_elems());
        let a = run_backward(&gpu(), &p, (&q, &k, &v, &d_o), Layout::Bshd, options).unwrap();
        let b = run_backward(&gpu(), &p, (&q, &k, &v, &d_o), Layout::Bshd, options).unwrap();
        let same = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits());
        if !(same(&a.dk, &b.dk) && same(&a.dv, &b.dv)) {
            failures.push(format!(
                "{dims:?} {options:?}: dK/dV differ between two runs"
            ));
        }
        if options.deterministic && !same(&a.dq, &b.dq) {
            failures.push(format!(
                "{dims:?} {options:?}: dQ differs between two deterministic runs"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Persistent launches (kernels/bwd_hopper_kernel.cuh `BwdItemQueue`): a few CTAs take many
/// items each, so every item after a CTA's first starts while its last one ends (the next
/// item's Q/dO and K/V loads, the item slots, the ring's phases across items). Each dims ×
/// mask × CTA count, against the f64 reference with both dtypes and layouts, asserting the
/// launch ran persistent; and the classic grid refuses nothing it ran before.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_backward_persistent() {
    use attn_kernels::BackwardSchedule;
    let on = |ctas| BackwardOptions {
        schedule: BackwardSchedule::Persistent { ctas },
        ..Default::default()
    };
    let cases: [(Dims, Causal, BackwardOptions); 12] = [
        ((2, 4, 4, 300, 500, 128), Causal::None, on(3)),
        ((2, 4, 4, 300, 500, 128), Causal::BottomRight, on(5)),
        // GQA: an item walks 4 query heads.
        ((1, 8, 2, 333, 700, 128), Causal::None, on(1)),
        ((1, 8, 2, 333, 700, 128), Causal::BottomRight, on(4)),
        // Top-left with Sk > Sq: key blocks 2.. see no query, items of no block.
        ((1, 4, 2, 200, 700, 128), Causal::TopLeft, on(2)),
        // D = 64 (three stages) and D = 256 (64-key CTAs, no dQ writer).
        ((2, 4, 2, 500, 300, 64), Causal::None, on(4)),
        ((2, 4, 2, 500, 300, 64), Causal::TopLeft, on(3)),
        ((1, 4, 2, 260, 330, 256), Causal::None, on(3)),
        ((1, 4, 2, 260, 330, 256), Causal::BottomRight, on(2)),
        // One-block items: a CTA runs ahead of its consumers by whole items.
        ((1, 4, 4, 17, 1000, 64), Causal::None, on(2)),
        // A forced split on 5 CTAs: the pieces are items of the persistent launch.
        (
            (1, 6, 3, 130, 1000, 64),
            Causal::None,
            BackwardOptions {
                schedule: BackwardSchedule::TailPieces { ctas: 5, pieces: 4 },
                ..Default::default()
            },
        ),
        // More items than SMs: Auto runs persistent on one CTA per SM (70 key blocks × 2).
        (
            (1, 2, 2, 64, 8960, 64),
            Causal::None,
            BackwardOptions::default(),
        ),
    ];
    if gpu().compute_capability() != (9, 0) {
        // Off Hopper the mma.sync kernel runs, which is never persistent: asking is refused.
        let p = problem(cases[0].0, Causal::None);
        let e = refused_backward(&p, p.shape().lse_elems(), cases[0].2);
        assert!(
            matches!(e, attn_kernels::KernelError::EngineUnavailable(_)),
            "{e}"
        );
        return;
    }
    let mut failures = Vec::new();
    for (dims, causal, options) in cases {
        let p = problem(dims, causal);
        for r in [
            check_backward::<f16>(&p, attn_ref::Dtype::F16, Layout::Bshd, options),
            check_backward::<bf16>(&p, attn_ref::Dtype::Bf16, Layout::Bhsd, options),
        ] {
            match r {
                Ok(info) if info.persistent_items.is_none() => failures.push(format!(
                    "{dims:?} {causal:?} {options:?}: not persistent ({info:?})"
                )),
                Ok(_) => {}
                Err(e) => failures.push(e),
            }
        }
    }
    // Refused, with nothing written: deterministic and general launches are never persistent,
    // and a persistent launch needs a CTA.
    let p = problem(cases[0].0, Causal::None);
    let det = BackwardOptions {
        deterministic: true,
        ..on(3)
    };
    for (options, what) in [(det, "deterministic"), (on(0), "no CTA")] {
        let e = refused_backward(&p, p.shape().lse_elems(), options);
        let typed = matches!(
            e,
            attn_kernels::KernelError::EngineUnavailable(_) | attn_kernels::KernelError::Problem(_)
        );
        if !typed {
            failures.push(format!("{what}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Runs a backward that must be refused (`lse_len` floats of LSE, `options`) on all-ones inputs
/// and NaN-poisoned gradients; asserts no gradient was written and returns the error.
fn refused_backward(
    p: &Problem,
    lse_len: usize,
    options: BackwardOptions,
) -> attn_kernels::KernelError {
    let gpu = gpu();
    let shape = p.shape();
    let (qd, kd) = (attn_kernels::dims_q(shape), attn_kernels::dims_kv(shape));
    let s = gpu.stream();
    let x = s.clone_htod(&vec![f16::ONE; shape.q_elems()]).unwrap();
    let kv = s.clone_htod(&vec![f16::ONE; shape.kv_elems()]).unwrap();
    let lse = s.clone_htod(&vec![0f32; lse_len]).unwrap();
    let mut gq = upload_poisoned::<f16>(&gpu, shape.q_elems());
    let mut gk = upload_poisoned::<f16>(&gpu, shape.kv_elems());
    let mut gv = upload_poisoned::<f16>(&gpu, shape.kv_elems());
    let e = gpu
        .backward(Backward {
            problem: p,
            q: Tensor::bhsd(&x, qd),
            k: Tensor::bhsd(&kv, kd),
            v: Tensor::bhsd(&kv, kd),
            o: Tensor::bhsd(&x, qd),
            lse: lse.as_view(),
            d_o: Tensor::bhsd(&x, qd),
            dq: TensorMut::bhsd(&mut gq, qd),
            dk: TensorMut::bhsd(&mut gk, kd),
            dv: TensorMut::bhsd(&mut gv, kd),
            options,
        })
        .unwrap_err();
    for g in [&gq, &gk, &gv] {
        assert!(
            s.clone_dtoh(g).unwrap().iter().all(|x| x.is_nan()),
            "a gradient was written ({e})"
        );
    }
    e
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_backward_refusals_write_nothing() {
    let p = problem((1, 4, 2, 64, 64, 64), Causal::None);
    let lse_short = p.shape().lse_elems() - 1;
    let e = refused_backward(&p, lse_short, BackwardOptions::default());
    assert!(e.to_string().contains("LSE"), "{e}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_backward_hopper_engine_refuses_other_buckets() {
    let p = problem((1, 2, 2, 64, 64, 192), Causal::None);
    let options = BackwardOptions {
        engine: BackwardEngine::Hopper,
        ..Default::default()
    };
    let e = refused_backward(&p, p.shape().lse_elems(), options);
    assert!(
        matches!(e, attn_kernels::KernelError::EngineUnavailable(_)),
        "{e}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitize_backward_small() {
    // Small shapes for compute-sanitizer: a tail, GQA, causal, deterministic mode.
    let p = problem((1, 4, 2, 77, 130, 64), Causal::BottomRight);
    let shape = p.shape();
    let mut rng = StdRng::seed_from_u64(1);
    let t: Vec<f16> = randn(&mut rng, shape.q_elems());
    let kv: Vec<f16> = randn(&mut rng, shape.kv_elems());
    let p256 = problem((1, 2, 1, 77, 130, 256), Causal::BottomRight);
    for engine in engines_for(64) {
        let o = BackwardOptions {
            engine,
            ..Default::default()
        };
        check_backward::<f16>(&p, attn_ref::Dtype::F16, Layout::Bshd, o).unwrap();
        // D = 256 (the wgmma kernel's dQ reductions from registers), default and deterministic.
        check_backward::<f16>(&p256, attn_ref::Dtype::F16, Layout::Bshd, o).unwrap();
        check_backward::<f16>(
            &p256,
            attn_ref::Dtype::F16,
            Layout::Bhsd,
            BackwardOptions {
                deterministic: true,
                engine,
                ..Default::default()
            },
        )
        .unwrap();
        run_backward(
            &gpu(),
            &p,
            (&t, &kv, &kv, &t),
            Layout::Bhsd,
            BackwardOptions {
                deterministic: true,
                engine,
                ..Default::default()
            },
        )
        .unwrap();
    }
    // The 99 KiB parts' 32-key tile (a launcher limited to 99 KiB): D = 136 runs the 160
    // bucket (an odd last n-tile in phase B), D = 200 the 224 bucket (Pᵀ/dSᵀ in V's room, V
    // loaded again with each query block), default and deterministic.
    let small = super::small_smem::small_launcher();
    for d in [136, 200] {
        let p = problem((1, 4, 2, 77, 130, d), Causal::BottomRight);
        for deterministic in [false, true] {
            let o = BackwardOptions {
                deterministic,
                ..Default::default()
            };
            let info = check_backward_on::<f16>(&small, &p, attn_ref::Dtype::F16, Layout::Bshd, o)
                .unwrap();
            assert!(
                info.kernel.contains("_bm64_bn32_w8_s1_"),
                "d{d}: {}",
                info.kernel
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn stability_10k_forward_backward_steps() {
    // Issue 17's soak: 10 000 back-to-back training steps (forward, then the deterministic
    // backward) on buffers allocated once; every step's gradients must equal the first's
    // bit for bit, and the first's pass the gradient rule (checked against the reference).
    let gpu = gpu();
    let p = problem((2, 4, 2, 300, 300, 128), Causal::BottomRight);
    let shape = p.shape();
    let (qd, kd) = (attn_kernels::dims_q(shape), attn_kernels::dims_kv(shape));
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let q: Vec<bf16> = randn(&mut rng, shape.q_elems());
    let k: Vec<bf16> = randn(&mut rng, shape.kv_elems());
    let v: Vec<bf16> = randn(&mut rng, shape.kv_elems());
    let d_o: Vec<bf16> = randn(&mut rng, shape.o_elems());
    let s = gpu.stream();
    let (dq_, dk_, dv_, ddo) = (
        s.clone_htod(&q).unwrap(),
        s.clone_htod(&k).unwrap(),
        s.clone_htod(&v).unwrap(),
        s.clone_htod(&d_o).unwrap(),
    );
    let mut o = upload_poisoned::<bf16>(&gpu, shape.o_elems());
    let mut lse = s.clone_htod(&vec![f32::NAN; shape.lse_elems()]).unwrap();
    let mut gq = upload_poisoned::<bf16>(&gpu, shape.q_elems());
    let mut gk = upload_poisoned::<bf16>(&gpu, shape.kv_elems());
    let mut gv = upload_poisoned::<bf16>(&gpu, shape.kv_elems());
    let mut first: Option<[Vec<u16>; 3]> = None;
    let bits = |x: &CudaSlice<bf16>| -> Vec<u16> {
        s.clone_dtoh(x)
            .unwrap()
            .iter()
            .map(|e| e.to_bits())
            .collect()
    };
    let mut kernel = String::new();
    for step in 0..10_000 {
        gpu.forward(Forward {
            problem: &p,
            q: Tensor::bhsd(&dq_, qd),
            k: Tensor::bhsd(&dk_, kd),
            v: Tensor::bhsd(&dv_, kd),
            o: TensorMut::bhsd(&mut o, qd),
            lse: Some(lse.as_view_mut()),
            options: ForwardOptions::default(),
        })
        .unwrap();
        let info = gpu
            .backward(Backward {
                problem: &p,
                q: Tensor::bhsd(&dq_, qd),
                k: Tensor::bhsd(&dk_, kd),
                v: Tensor::bhsd(&dv_, kd),
                o: Tensor::bhsd(&o, qd),
                lse: lse.as_view(),
                d_o: Tensor::bhsd(&ddo, qd),
                dq: TensorMut::bhsd(&mut gq, qd),
                dk: TensorMut::bhsd(&mut gk, kd),
                dv: TensorMut::bhsd(&mut gv, kd),
                options: BackwardOptions {
                    deterministic: true,
                    ..Default::default()
                },
            })
            .unwrap();
        kernel = info.kernel;
        if step == 0 || step % 1000 == 999 {
            let now = [bits(&gq), bits(&gk), bits(&gv)];
            match &first {
                None => first = Some(now),
                Some(f) => assert!(
                    f == &now,
                    "step {step}: gradients differ from step 0 ({kernel})"
                ),
            }
        }
    }
    // The first step's gradients against the reference (the soak must not test a wrong answer).
    let [fq, fk, fv] = first.unwrap();
    let widen =
        |b: &[u16]| -> Vec<f32> { b.iter().map(|&x| bf16::from_bits(x).to_f32()).collect() };
    let r = reference::backward(&p, &q, &k, &v, &d_o).unwrap();
    let f = |x: &[f32]| x.to_vec();
    let emu = attn_ref::reference::backward::backward_emulated(
        &p,
        &to_f32s(&q),
        &to_f32s(&k),
        &to_f32s(&v),
        &to_f32s(&d_o),
        attn_ref::Dtype::Bf16,
    )
    .unwrap();
    let rule = ToleranceRule::for_storage(attn_ref::Dtype::Bf16.into());
    let [eq, ek, ev] = emu.rule_emulation(&r);
    for (name, out, e32, want) in [
        ("dQ", widen(&fq), eq, &r.dq),
        ("dK", widen(&fk), ek, &r.dk),
        ("dV", widen(&fv), ev, &r.dv),
    ] {
        let verdict = rule.check_gradient(&f(&out), &e32, want);
        assert!(verdict.pass, "{name} ({kernel}): {verdict}");
    }
}
