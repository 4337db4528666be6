//! The backward's general entries (`attn_bwd_*_feat`): the forward's score-modifying
//! features (sliding window, softcap, ALiBi, sinks and the sinks' gradient) and packed
//! variable-length batches, against the f64 reference with attn-oracle's gradient rule (the
//! FA3 rule against `backward_emulated_with` — the emulation given the O and LSE our forward
//! produced, so the forward's own error is on both sides — plus the gradient caps), on O and
//! LSE from our own forward, fresh N(0,1) inputs and dO, and gradients poisoned (NaN) before the run; the
//! sinks' gradient against the row-sum rule. Everything runs on both engines (wgmma at
//! D 64/128 on sm_90a); varlen batches include sequences with no queries and with no keys,
//! whose gradients must be zero, and lengths that end mid-block, so the wgmma entry's boxes
//! read into the next sequence.

use attn_kernels::{
    Backward, BackwardEngine, BackwardExtras, BackwardOptions, FlashAttention, Forward,
    ForwardOptions, Indices, KernelError, KeyRows, Layout, QueryRows, Sequences, StorageType,
    Tensor, TensorMut,
};
use attn_oracle::ToleranceRule;
use attn_ref::{
    reference::{
        self,
        backward::{backward_emulated_with, RefGrads, Spread, TieSpread},
    },
    Causal, Dtype, Features, Problem,
};
use half::{bf16, f16};
use rand::{rngs::StdRng, SeedableRng};

use crate::{features::feature_sets, fresh_seed, gpu, problem, randn, to_f32s, upload_poisoned};

const CAUSALS: [Causal; 3] = [Causal::None, Causal::TopLeft, Causal::BottomRight];

/// The default engine (on sm_90a at D 64/128: the wgmma kernel's general entry) and the
/// mma.sync kernel's, so an H100 run checks both.
const ENGINES: [BackwardEngine; 2] = [BackwardEngine::Auto, BackwardEngine::MmaSync];

/// Gradients as f32: dQ, dK, dV in the order of the inputs, and the sinks' gradient; and the
/// forward's O (same order) and LSE that the backward used.
struct Grads {
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
    dsinks: Option<Vec<f32>>,
    o: Vec<f32>,
    lse: Vec<f32>,
}

/// The packed layout of a varlen run: prefix sums of the query and key lengths.
struct Packed {
    cu_q: Vec<i32>,
    cu_k: Vec<i32>,
}

fn prefix(lens: &[usize]) -> Vec<i32> {
    let mut cu = vec![0i32];
    for &l in lens {
        cu.push(cu.last().copied().unwrap_or(0) + l as i32);
    }
    cu
}

/// Forward then backward of `p` on the GPU. Dense runs take `[B, H, S, D]` inputs in `layout`;
/// packed runs take `[total, H, D]` inputs. Returns the gradients in the inputs' order.
fn run<T: StorageType>(
    gpu: &FlashAttention,
    p: &Problem,
    (q, k, v, d_o): (&[T], &[T], &[T], &[T]),
    layout: Layout,
    packed: Option<&Packed>,
    options: BackwardOptions,
) -> Result<Grads, KernelError> {
    let s = gpu.stream();
    let shape = p.shape();
    let (hq, hkv, d) = (shape.q_heads(), shape.kv_heads(), shape.head_dim());
    let (qd, kd, lse_len) = match packed {
        None => (
            attn_kernels::dims_q(shape),
            attn_kernels::dims_kv(shape),
            shape.lse_elems(),
        ),
        Some(_) => {
            let (tq, tk) = (q.len() / (hq * d), k.len() / (hkv * d));
            ([1, hq, tq, d], [1, hkv, tk, d], hq * tq)
        }
    };
    let layout = if packed.is_some() {
        Layout::Bshd
    } else {
        layout
    };
    let up = |x: &[T], dims| s.clone_htod(&layout.from_bhsd(x, dims)).unwrap();
    // Packed inputs are already [total, H, D], the bshd order of [1, H, total, D].
    let up_as_is = |x: &[T]| s.clone_htod(x).unwrap();
    let (dq_, dk_, dv_, ddo) = if packed.is_some() {
        (up_as_is(q), up_as_is(k), up_as_is(v), up_as_is(d_o))
    } else {
        (up(q, qd), up(k, kd), up(v, kd), up(d_o, qd))
    };
    let q_elems: usize = qd.iter().product();
    let kv_elems: usize = kd.iter().product();
    let dcu = packed.map(|pk| {
        (
            s.clone_htod(&pk.cu_q).unwrap(),
            s.clone_htod(&pk.cu_k).unwrap(),
        )
    });
    let seqs = || match (packed, &dcu) {
        (Some(pk), Some((cq, ck))) => Sequences {
            queries: QueryRows::Packed {
                cu_seqlens: Indices::new(cq.as_view()).with_host(&pk.cu_q),
            },
            keys: KeyRows::Packed {
                cu_seqlens: Indices::new(ck.as_view()).with_host(&pk.cu_k),
            },
            seqused_k: None,
        },
        _ => Sequences::default(),
    };
    let mut o = upload_poisoned::<T>(gpu, q_elems);
    let mut lse = s.clone_htod(&vec![f32::NAN; lse_len]).unwrap();
    gpu.forward_sequences(
        Forward {
            problem: p,
            q: Tensor::contiguous(dq_.as_view(), qd, layout),
            k: Tensor::contiguous(dk_.as_view(), kd, layout),
            v: Tensor::contiguous(dv_.as_view(), kd, layout),
            o: TensorMut::contiguous(o.as_view_mut(), qd, layout),
            lse: Some(lse.as_view_mut()),
            options: ForwardOptions::default(),
        },
        seqs(),
    )?;
    let mut gq = upload_poisoned::<T>(gpu, q_elems);
    let mut gk = upload_poisoned::<T>(gpu, kv_elems);
    let mut gv = upload_poisoned::<T>(gpu, kv_elems);
    let mut gs = s.clone_htod(&vec![f32::NAN; hq]).unwrap();
    let sinks = p.features().sinks.is_some();
    gpu.backward_with(
        Backward {
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
        },
        BackwardExtras {
            seqs: seqs(),
            dsinks: sinks.then(|| gs.as_view_mut()),
        },
    )?;
    let down = |x: &cudarc::driver::CudaSlice<T>, dims| {
        let host = s.clone_dtoh(x).unwrap();
        to_f32s(&if packed.is_some() {
            host
        } else {
            layout.to_bhsd(&host, dims)
        })
    };
    Ok(Grads {
        dq: down(&gq, qd),
        dk: down(&gk, kd),
        dv: down(&gv, kd),
        dsinks: sinks.then(|| s.clone_dtoh(&gs).unwrap()),
        o: down(&o, qd),
        lse: s.clone_dtoh(&lse).unwrap(),
    })
}

/// Rows `row0..row0 + len` of a packed `[total, H, D]` array as `[1, H, len, D]`.
fn unpack(x: &[f32], row0: usize, len: usize, heads: usize, d: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(heads * len * d);
    for h in 0..heads {
        for r in 0..len {
            out.extend_from_slice(&x[((row0 + r) * heads + h) * d..][..d]);
        }
    }
    out
}

/// The emulated backward of a packed batch, one sequence at a time (as the reference's
/// `backward_varlen`), from our forward's O (`[total_q, Hq, D]`) and LSE (`[Hq, total_q]`),
/// scattered back into the packed layout; zeros where a sequence has no queries or no keys.
fn emulated_varlen(
    p: &Problem,
    pk: &Packed,
    (q, k, v, d_o): (&[f32], &[f32], &[f32], &[f32]),
    (o, lse): (&[f32], &[f32]),
    storage: Dtype,
) -> Result<RefGrads, String> {
    let shape = p.shape();
    let (hq, hkv, d) = (shape.q_heads(), shape.kv_heads(), shape.head_dim());
    let tq = q.len() / (hq * d);
    let zeros = |n: usize| Spread {
        lo: vec![0.0; n],
        hi: vec![0.0; n],
    };
    let mut g = RefGrads {
        dq: vec![0.0; q.len()],
        dk: vec![0.0; k.len()],
        dv: vec![0.0; k.len()],
        o: vec![0.0; q.len()],
        lse: vec![f64::NEG_INFINITY; hq * tq],
        dsinks: p.features().sinks.as_ref().map(|_| vec![0.0; hq]),
        ties: Some(TieSpread {
            dq: zeros(q.len()),
            dk: zeros(k.len()),
            dv: zeros(k.len()),
            ties: 0,
            roundings: 0,
        }),
    };
    for b in 0..shape.batch() {
        let (q0, sq) = (pk.cu_q[b] as usize, (pk.cu_q[b + 1] - pk.cu_q[b]) as usize);
        let (k0, sk) = (pk.cu_k[b] as usize, (pk.cu_k[b + 1] - pk.cu_k[b]) as usize);
        if sq == 0 || sk == 0 {
            continue;
        }
        let seq_lse: Vec<f32> = (0..hq)
            .flat_map(|h| lse[h * tq + q0..][..sq].iter().copied())
            .collect();
        let one = backward_emulated_with(
            &p.sequence(b, sq, sk).map_err(|e| e.to_string())?,
            &unpack(q, q0, sq, hq, d),
            &unpack(k, k0, sk, hkv, d),
            &unpack(v, k0, sk, hkv, d),
            &unpack(o, q0, sq, hq, d),
            &seq_lse,
            &unpack(d_o, q0, sq, hq, d),
            storage,
        )
        .map_err(|e| e.to_string())?;
        let scatter = |src: &[f64], dst: &mut [f64], row0: usize, len: usize, heads: usize| {
            for h in 0..heads {
                for r in 0..len {
                    dst[((row0 + r) * heads + h) * d..][..d]
                        .copy_from_slice(&src[(h * len + r) * d..][..d]);
                }
            }
        };
        scatter(&one.dq, &mut g.dq, q0, sq, hq);
        scatter(&one.dk, &mut g.dk, k0, sk, hkv);
        scatter(&one.dv, &mut g.dv, k0, sk, hkv);
        if let (Some(all), Some(part)) = (g.ties.as_mut(), one.ties.as_ref()) {
            for (dst, src, row0, len, heads) in [
                (&mut all.dq, &part.dq, q0, sq, hq),
                (&mut all.dk, &part.dk, k0, sk, hkv),
                (&mut all.dv, &part.dv, k0, sk, hkv),
            ] {
                scatter(&src.lo, &mut dst.lo, row0, len, heads);
                scatter(&src.hi, &mut dst.hi, row0, len, heads);
            }
            all.ties += part.ties;
            all.roundings += part.roundings;
        }
        if let (Some(all), Some(part)) = (g.dsinks.as_mut(), one.dsinks.as_ref()) {
            for (a, x) in all.iter_mut().zip(part) {
                *a += x;
            }
        }
    }
    Ok(g)
}

/// One run of `p` (dense in `layout`, or packed) against the reference; `Err` says what
/// failed, with the seed.
fn check<T: StorageType + attn_ref::Element>(
    p: &Problem,
    storage: Dtype,
    layout: Layout,
    lens: Option<(&[usize], &[usize])>,
    options: BackwardOptions,
    what: &str,
) -> Result<(), String> {
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let shape = p.shape();
    let (hq, hkv, d) = (shape.q_heads(), shape.kv_heads(), shape.head_dim());
    let packed = lens.map(|(lq, lk)| Packed {
        cu_q: prefix(lq),
        cu_k: prefix(lk),
    });
    let (nq, nk) = match &packed {
        None => (shape.q_elems(), shape.kv_elems()),
        Some(pk) => (
            *pk.cu_q.last().unwrap_or(&0) as usize * hq * d,
            *pk.cu_k.last().unwrap_or(&0) as usize * hkv * d,
        ),
    };
    let q: Vec<T> = randn(&mut rng, nq);
    let k: Vec<T> = randn(&mut rng, nk);
    let v: Vec<T> = randn(&mut rng, nk);
    let d_o: Vec<T> = randn(&mut rng, nq);
    let got = run(
        &gpu(),
        p,
        (&q, &k, &v, &d_o),
        layout,
        packed.as_ref(),
        options,
    )
    .map_err(|e| format!("{what}: {e}"))?;
    let (fq, fk, fv, fo) = (to_f32s(&q), to_f32s(&k), to_f32s(&v), to_f32s(&d_o));
    let f32s = (&fq[..], &fk[..], &fv[..], &fo[..]);
    let (want, emu) = match &packed {
        None => (
            reference::backward(p, &q, &k, &v, &d_o).map_err(|e| e.to_string())?,
            backward_emulated_with(p, f32s.0, f32s.1, f32s.2, &got.o, &got.lse, f32s.3, storage)
                .map_err(|e| e.to_string())?,
        ),
        Some(pk) => (
            reference::varlen::backward_varlen(p, &pk.cu_q, &pk.cu_k, &q, &k, &v, &d_o)
                .map_err(|e| e.to_string())?,
            emulated_varlen(p, pk, f32s, (&got.o, &got.lse), storage)?,
        ),
    };
    let rule = ToleranceRule::for_storage(storage.into());
    let mut errs = Vec::new();
    let mut check_one = |name: &str, out: &[f32], e: &[f32], w: &[f64]| {
        let verdict = rule.check_gradient(out, e, w);
        if !verdict.pass {
            errs.push(format!("{name}: {verdict}"));
        }
    };
    // The emulation under its least lucky resolution of its rounding ties (TieSpread).
    let [eq, ek, ev] = emu.rule_emulation(&want);
    check_one("dQ", &got.dq, &eq, &want.dq);
    check_one("dK", &got.dk, &ek, &want.dk);
    check_one("dV", &got.dv, &ev, &want.dv);
    match (&got.dsinks, &want.dsinks) {
        (Some(g), Some(w)) => {
            let spread = sink_spread(p, packed.is_some(), &want.o, &want.lse, &fo);
            let verdict = rule.check_row_sum_gradient(g, w, &spread);
            if !verdict.pass {
                errs.push(format!("dsinks: {verdict}"));
            }
        }
        (None, None) => {}
        _ => errs.push("dsinks: present on one side only".into()),
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{what} {:?} {:?} {storage:?} {layout} {:?} det={} seed {seed}:\n{}",
            shape,
            p.causal(),
            options.engine,
            options.deterministic,
            errs.join("")
        ))
    }
}

/// attn-oracle's `spread` of the sinks' gradient: per head, `sqrt(Σ_i w_i² Σ_d (dO_id·O_id)²)`
/// with `w_i = exp(sink − LSE_i)` over the rows that see a key, from the reference's O and
/// LSE (`[B, Hq, Sq, D]` and `[B, Hq, Sq]`, or packed `[total_q, Hq, D]` and `[Hq, total_q]`).
fn sink_spread(p: &Problem, packed: bool, o: &[f64], lse: &[f64], d_o: &[f32]) -> Vec<f64> {
    let shape = p.shape();
    let (hq, d) = (shape.q_heads(), shape.head_dim());
    let sinks = p.features().sinks.clone().unwrap_or_default();
    let rows_per_head = lse.len() / hq;
    let mut out = vec![0.0f64; hq];
    for (h, acc) in out.iter_mut().enumerate() {
        for i in 0..rows_per_head {
            // Dense: (b, h, s) with i = b·Sq + s; packed: (h, i).
            let (l, base) = if packed {
                (lse[h * rows_per_head + i], (i * hq + h) * d)
            } else {
                let (b, s) = (i / shape.q_len(), i % shape.q_len());
                let r = (b * hq + h) * shape.q_len() + s;
                (lse[r], r * d)
            };
            if !l.is_finite() {
                continue;
            }
            let w = (f64::from(sinks[h]) - l).exp();
            let t: f64 = (0..d)
                .map(|c| (f64::from(d_o[base + c]) * o[base + c]).powi(2))
                .sum();
            *acc += w * w * t;
        }
        *acc = acc.sqrt();
    }
    out
}

fn both_types(
    p: &Problem,
    layout: Layout,
    lens: Option<(&[usize], &[usize])>,
    options: BackwardOptions,
    what: &str,
    failures: &mut Vec<String>,
    runs: &mut usize,
) {
    for r in [
        check::<f16>(p, Dtype::F16, layout, lens, options, what),
        check::<bf16>(p, Dtype::Bf16, layout, lens, options, what),
    ] {
        *runs += 1;
        if let Err(e) = r {
            failures.push(e);
        }
    }
}

fn assert_none(failures: &[String], runs: usize) {
    assert!(
        failures.is_empty(),
        "{} of {runs} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_backward_features() {
    // Every feature set of the forward's matrix × causal mode × two shapes (GQA, tails,
    // Sq ≠ Sk both ways, both layouts), f16 and bf16.
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let (mut failures, mut runs) = (Vec::new(), 0);
    for (dims, layout) in [
        ((2, 4, 2, 200, 300, 64), Layout::Bshd),
        ((1, 4, 4, 257, 130, 128), Layout::Bhsd),
    ] {
        for causal in CAUSALS {
            for (name, features) in feature_sets(&mut rng, dims.0, dims.1) {
                let p = problem(dims, causal).with_features(features).unwrap();
                for engine in ENGINES {
                    let o = BackwardOptions {
                        engine,
                        ..Default::default()
                    };
                    both_types(&p, layout, None, o, name, &mut failures, &mut runs);
                }
            }
        }
    }
    assert_none(&failures, runs);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_backward_features_every_bucket_and_deterministic() {
    // All four features at every head-dim bucket (and a padded D), and deterministic mode,
    // whose turns follow the window's key blocks.
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let (mut failures, mut runs) = (Vec::new(), 0);
    let all = |rng: &mut StdRng, b, hq| {
        feature_sets(rng, b, hq)
            .into_iter()
            .find(|(n, _)| *n == "all four")
            .map(|(_, f)| f)
            .unwrap_or_default()
    };
    for d in [32, 72, 96, 160, 192, 224, 256] {
        let p = problem((1, 4, 2, 150, 190, d), Causal::BottomRight)
            .with_features(all(&mut rng, 1, 4))
            .unwrap();
        let o = BackwardOptions::default();
        both_types(
            &p,
            Layout::Bshd,
            None,
            o,
            "all four",
            &mut failures,
            &mut runs,
        );
        if d == 256 {
            // The wgmma kernel's D = 256 entries take their deterministic turns in the
            // consumers.
            let o = BackwardOptions {
                deterministic: true,
                ..BackwardOptions::default()
            };
            both_types(
                &p,
                Layout::Bshd,
                None,
                o,
                "all four, deterministic",
                &mut failures,
                &mut runs,
            );
        }
    }
    for causal in CAUSALS {
        for (name, f) in [
            (
                "window(40,7)",
                Features {
                    window: Some((40, 7)),
                    ..Features::default()
                },
            ),
            (
                "window(0,0)",
                Features {
                    window: Some((0, 0)),
                    ..Features::default()
                },
            ),
            ("all four", all(&mut rng, 2, 4)),
        ] {
            let p = problem((2, 4, 2, 300, 700, 64), causal)
                .with_features(f)
                .unwrap();
            for engine in ENGINES {
                let o = BackwardOptions {
                    deterministic: true,
                    engine,
                    ..Default::default()
                };
                both_types(&p, Layout::Bshd, None, o, name, &mut failures, &mut runs);
            }
        }
    }
    assert_none(&failures, runs);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_backward_varlen() {
    // Packed batches with an empty query sequence, an empty key sequence, one-row and
    // one-key sequences, lengths across block boundaries; GQA; every causal mode; plain, a
    // window with softcap, and all four features; default and deterministic mode.
    let lq = [37usize, 0, 130, 1, 64, 200];
    let lk = [50usize, 20, 0, 1, 200, 129];
    let (mut failures, mut runs) = (Vec::new(), 0);
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    for d in [64, 128, 256] {
        let dims = (lq.len(), 4, 2, 200, 200, d);
        for causal in CAUSALS {
            let sets: Vec<(&str, Features)> = vec![
                ("plain", Features::default()),
                (
                    "window + softcap",
                    Features {
                        window: Some((48, 16)),
                        softcap: Some(8.0),
                        ..Features::default()
                    },
                ),
                (
                    "all four",
                    feature_sets(&mut rng, lq.len(), 4)
                        .into_iter()
                        .find(|(n, _)| *n == "all four")
                        .map(|(_, f)| f)
                        .unwrap_or_default(),
                ),
            ];
            for (name, f) in sets {
                let p = problem(dims, causal).with_features(f).unwrap();
                for (deterministic, engine) in [false, true]
                    .into_iter()
                    .flat_map(|d| ENGINES.map(|e| (d, e)))
                {
                    let o = BackwardOptions {
                        deterministic,
                        engine,
                        ..Default::default()
                    };
                    let lens = Some((&lq[..], &lk[..]));
                    both_types(&p, Layout::Bshd, lens, o, name, &mut failures, &mut runs);
                }
            }
        }
    }
    assert_none(&failures, runs);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn determinism_backward_general_is_bitwise_reproducible() {
    let lq = [300usize, 0, 513, 77];
    let lk = [280usize, 40, 600, 1000];
    let packed = Packed {
        cu_q: prefix(&lq),
        cu_k: prefix(&lk),
    };
    let (tq, tk) = (lq.iter().sum::<usize>(), lk.iter().sum::<usize>());
    let p = problem((4, 8, 2, 513, 1000, 128), Causal::BottomRight)
        .with_window(100, 0)
        .unwrap();
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let q: Vec<bf16> = randn(&mut rng, tq * 8 * 128);
    let k: Vec<bf16> = randn(&mut rng, tk * 2 * 128);
    let v: Vec<bf16> = randn(&mut rng, tk * 2 * 128);
    let d_o: Vec<bf16> = randn(&mut rng, tq * 8 * 128);
    let det = BackwardOptions {
        deterministic: true,
        ..Default::default()
    };
    let go = || {
        run(
            &gpu(),
            &p,
            (&q, &k, &v, &d_o),
            Layout::Bshd,
            Some(&packed),
            det,
        )
        .unwrap()
    };
    let a = go();
    let same = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits());
    for _ in 0..3 {
        let b = go();
        assert!(
            same(&a.dq, &b.dq) && same(&a.dk, &b.dk) && same(&a.dv, &b.dv),
            "runs differ"
        );
    }
}

/// The sequence layout a refused backward is given.
#[derive(Clone, Copy)]
enum Layouts {
    Dense,
    SequsedK,
    PackedQ,
}

/// A refused general backward: asserts nothing was written (gradients and dsinks stay NaN).
fn refused(p: &Problem, options: BackwardOptions, with_dsinks: bool, kind: Layouts) -> KernelError {
    let gpu = gpu();
    let shape = p.shape();
    let (qd, kd) = (attn_kernels::dims_q(shape), attn_kernels::dims_kv(shape));
    let s = gpu.stream();
    let x = s.clone_htod(&vec![f16::ONE; shape.q_elems()]).unwrap();
    let kv = s.clone_htod(&vec![f16::ONE; shape.kv_elems()]).unwrap();
    let lse = s.clone_htod(&vec![0f32; shape.lse_elems()]).unwrap();
    let idx = s.clone_htod(&vec![0i32; shape.batch() + 1]).unwrap();
    let mut gq = upload_poisoned::<f16>(&gpu, shape.q_elems());
    let mut gk = upload_poisoned::<f16>(&gpu, shape.kv_elems());
    let mut gv = upload_poisoned::<f16>(&gpu, shape.kv_elems());
    let mut gs = s.clone_htod(&vec![f32::NAN; shape.q_heads()]).unwrap();
    let e = gpu
        .backward_with(
            Backward {
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
            },
            BackwardExtras {
                seqs: match kind {
                    Layouts::Dense => Sequences::default(),
                    Layouts::SequsedK => Sequences {
                        seqused_k: Some(Indices::new(idx.as_view())),
                        ..Sequences::default()
                    },
                    Layouts::PackedQ => Sequences {
                        queries: QueryRows::Packed {
                            cu_seqlens: Indices::new(idx.as_view()),
                        },
                        ..Sequences::default()
                    },
                },
                dsinks: with_dsinks.then(|| gs.as_view_mut()),
            },
        )
        .unwrap_err();
    for g in [&gq, &gk, &gv] {
        assert!(
            s.clone_dtoh(g).unwrap().iter().all(|x| x.is_nan()),
            "a gradient was written ({e})"
        );
    }
    assert!(s.clone_dtoh(&gs).unwrap().iter().all(|x| x.is_nan()));
    e
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_backward_general_refusals_write_nothing() {
    let p = problem((2, 4, 2, 64, 64, 64), Causal::None);
    // The wgmma engine's general entries exist at buckets 64, 128 and 256 only.
    let wide = problem((1, 2, 2, 64, 64, 192), Causal::None)
        .with_window(8, 0)
        .unwrap();
    let hopper = BackwardOptions {
        engine: BackwardEngine::Hopper,
        ..Default::default()
    };
    let e = refused(&wide, hopper, false, Layouts::Dense);
    assert!(matches!(e, KernelError::EngineUnavailable(_)), "{e}");
    // dsinks without sinks.
    let e = refused(&p, BackwardOptions::default(), true, Layouts::Dense);
    assert!(e.to_string().contains("sinks"), "{e}");
    // seqused_k (a KV-cache layout) is forward-only.
    let e = refused(&p, BackwardOptions::default(), false, Layouts::SequsedK);
    assert!(matches!(e, KernelError::UnsupportedFeature(_)), "{e}");
    // Packed queries with dense-shaped tensors.
    let e = refused(&p, BackwardOptions::default(), false, Layouts::PackedQ);
    assert!(matches!(e, KernelError::InvalidTensor { .. }), "{e}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitize_backward_general_small() {
    // For compute-sanitizer: a packed batch with empty sequences and every feature, default
    // and deterministic, and a dense window case.
    let lq = [17usize, 0, 70, 1];
    let lk = [30usize, 9, 0, 80];
    let mut rng = StdRng::seed_from_u64(1);
    let f = feature_sets(&mut rng, 4, 4)
        .into_iter()
        .find(|(n, _)| *n == "all four")
        .map(|(_, f)| f)
        .unwrap_or_default();
    let p = problem((4, 4, 2, 70, 80, 64), Causal::BottomRight)
        .with_features(f)
        .unwrap();
    for (deterministic, engine) in [false, true]
        .into_iter()
        .flat_map(|d| ENGINES.map(|e| (d, e)))
    {
        let o = BackwardOptions {
            deterministic,
            engine,
            ..Default::default()
        };
        check::<f16>(&p, Dtype::F16, Layout::Bshd, Some((&lq, &lk)), o, "varlen").unwrap();
    }
    let w = problem((1, 4, 2, 77, 130, 64), Causal::TopLeft)
        .with_window(20, 3)
        .unwrap();
    check::<bf16>(
        &w,
        Dtype::Bf16,
        Layout::Bhsd,
        None,
        BackwardOptions::default(),
        "window",
    )
    .unwrap();
}
