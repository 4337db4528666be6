//! Bitwise determinism (f16/bf16 with split-KV, and FP8), 100k back-to-back launches, and
//! four launchers on their own streams sharing one kernel cache from four threads.

use std::sync::Arc;

use attn_kernels::{Dtype, FlashAttention, Forward, ForwardOptions, KernelConfig, Layout};
use attn_ref::{reference, reference::emulate, AttnShape, Causal, Problem};
use half::{bf16, f16};
use rand::{rngs::StdRng, SeedableRng};

use crate::{check_output, fp8, fresh_seed, gpu, randn, run_gpu, to_f32s, upload_poisoned};

#[test]
#[ignore = "needs a CUDA GPU"]
fn determinism_bitwise() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    for causal in [Causal::None, Causal::TopLeft] {
        let p = Problem::new(AttnShape::new(2, 4, 2, 700, 700, 128).unwrap(), causal);
        let s = p.shape();
        let q: Vec<bf16> = randn(&mut rng, s.q_elems());
        let k: Vec<bf16> = randn(&mut rng, s.kv_elems());
        let v: Vec<bf16> = randn(&mut rng, s.kv_elems());
        // Split-KV included: its merge order does not depend on which CTA finishes last.
        let opts = ForwardOptions {
            config: KernelConfig::by_name("64_64_4_s2").ok(),
            splits: Some(if causal == Causal::None { 5 } else { 1 }),
            ..Default::default()
        };
        let a = run_gpu(&gpu, &p, &q, &k, &v, &opts);
        let b = run_gpu(&gpu, &p, &q, &k, &v, &opts);
        let bits = |x: &[bf16]| x.iter().map(|e| e.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a.0), bits(&b.0), "O differs between two runs");
        let lbits = |x: &[f32]| x.iter().map(|e| e.to_bits()).collect::<Vec<_>>();
        assert_eq!(lbits(&a.1), lbits(&b.1), "LSE differs between two runs");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn determinism_fp8_bitwise() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let p = fp8::fp8_problem((2, 4, 4, 300, 300, 128), Causal::TopLeft);
    let z = fp8::quantize_all(&p, &fp8::inputs(&p, &mut rng, false));
    for variant in fp8::variants(&gpu) {
        let opts = attn_kernels::Fp8Options {
            splits: None,
            schedule: Default::default(),
            hopper: None,
            config: None,
            variant: Some(variant),
        };
        let a = fp8::run(&gpu, &p, &z, Dtype::F16, &opts);
        let b = fp8::run(&gpu, &p, &z, Dtype::F16, &opts);
        assert!(
            a.0.iter()
                .zip(&b.0)
                .all(|(x, y)| x.to_bits() == y.to_bits())
                && a.1 == b.1,
            "{}: two runs differ",
            a.2
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn stability_100k_launches_then_correct() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let p = Problem::new(
        AttnShape::self_attention(1, 8, 512, 64).unwrap(),
        Causal::None,
    );
    let s = p.shape();
    let q: Vec<f16> = randn(&mut rng, s.q_elems());
    let k: Vec<f16> = randn(&mut rng, s.kv_elems());
    let v: Vec<f16> = randn(&mut rng, s.kv_elems());
    let st = gpu.stream();
    let (dq, dk, dv) = (
        st.clone_htod(&q).unwrap(),
        st.clone_htod(&k).unwrap(),
        st.clone_htod(&v).unwrap(),
    );
    let mut o = upload_poisoned::<f16>(&gpu, s.o_elems());
    let mut lse = st.clone_htod(&vec![f32::NAN; s.lse_elems()]).unwrap();
    for i in 0..100_000 {
        gpu.forward(Forward::bhsd(&p, &dq, &dk, &dv, &mut o, Some(&mut lse)))
            .unwrap_or_else(|e| panic!("launch {i}: {e}"));
        if i % 10_000 == 9_999 {
            st.synchronize()
                .unwrap_or_else(|e| panic!("after launch {i}: {e}"));
        }
    }
    let o = to_f32s(&st.clone_dtoh(&o).unwrap());
    let lse = st.clone_dtoh(&lse).unwrap();
    let r = reference::forward(&p, &q, &k, &v).unwrap();
    let emu = emulate::forward_emulated(
        &p,
        &to_f32s(&q),
        &to_f32s(&k),
        &to_f32s(&v),
        attn_ref::Dtype::F16,
    )
    .unwrap();
    check_output(&p, &o, &lse, &r, &emu, attn_oracle::Storage::F16).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn stability_four_concurrent_streams() {
    let base = gpu();
    let handles: Vec<FlashAttention> = (0..4).map(|_| base.fork().unwrap()).collect();
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let p = Problem::new(
        AttnShape::new(2, 8, 4, 513, 700, 128).unwrap(),
        Causal::BottomRight,
    );
    let s = p.shape();
    let inputs: Vec<(Vec<f16>, Vec<f16>, Vec<f16>)> = (0..4)
        .map(|_| {
            (
                randn(&mut rng, s.q_elems()),
                randn(&mut rng, s.kv_elems()),
                randn(&mut rng, s.kv_elems()),
            )
        })
        .collect();
    std::thread::scope(|sc| {
        for (h, (q, k, v)) in handles.iter().zip(&inputs) {
            let p = &p;
            sc.spawn(move || {
                let st = h.stream();
                let (dq, dk, dv) = (
                    st.clone_htod(q).unwrap(),
                    st.clone_htod(k).unwrap(),
                    st.clone_htod(v).unwrap(),
                );
                let mut o = upload_poisoned::<f16>(h, s.o_elems());
                let mut lse = st.clone_htod(&vec![f32::NAN; s.lse_elems()]).unwrap();
                for _ in 0..200 {
                    h.forward(Forward::bhsd(p, &dq, &dk, &dv, &mut o, Some(&mut lse)))
                        .unwrap();
                }
                let o = to_f32s(&st.clone_dtoh(&o).unwrap());
                let lse = st.clone_dtoh(&lse).unwrap();
                let r = reference::forward(p, q, k, v).unwrap();
                let emu = emulate::forward_emulated(
                    p,
                    &to_f32s(q),
                    &to_f32s(k),
                    &to_f32s(v),
                    attn_ref::Dtype::F16,
                )
                .unwrap();
                check_output(p, &o, &lse, &r, &emu, attn_oracle::Storage::F16).unwrap();
            });
        }
    });
}

/// One launcher shared by 8 threads launching at once (different head dims, layouts and
/// masks on its one stream), each checking its own result against the reference; then the
/// same with 8 forked launchers (8 streams, one kernel cache).
#[test]
#[ignore = "needs a CUDA GPU"]
fn stability_one_launcher_eight_threads() {
    let shared = gpu();
    let forks: Vec<Arc<FlashAttention>> =
        (0..8).map(|_| Arc::new(shared.fork().unwrap())).collect();
    for (name, launchers) in [("shared", vec![shared.clone(); 8]), ("forked", forks)] {
        let failures: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = launchers
                .iter()
                .enumerate()
                .map(|(t, g)| {
                    scope.spawn(move || -> Result<(), String> {
                        let d = [32, 64, 96, 128, 160, 192, 224, 256][t];
                        let layout = if t % 2 == 0 {
                            Layout::Bhsd
                        } else {
                            Layout::Bshd
                        };
                        let causal = if t % 3 == 0 {
                            Causal::BottomRight
                        } else {
                            Causal::None
                        };
                        let p = crate::problem((2, 4, 2, 100 + t, 300, d), causal);
                        let s = p.shape();
                        let mut rng = StdRng::seed_from_u64(fresh_seed());
                        let q: Vec<f16> = randn(&mut rng, s.q_elems());
                        let k: Vec<f16> = randn(&mut rng, s.kv_elems());
                        let v: Vec<f16> = randn(&mut rng, s.kv_elems());
                        let r = reference::forward(&p, &q, &k, &v).map_err(|e| e.to_string())?;
                        let emu = emulate::forward_emulated(
                            &p,
                            &to_f32s(&q),
                            &to_f32s(&k),
                            &to_f32s(&v),
                            attn_ref::Dtype::F16,
                        )
                        .map_err(|e| e.to_string())?;
                        for _ in 0..5 {
                            let (o, lse) = super::family::run_layout(
                                g,
                                &p,
                                (&q, &k, &v),
                                layout,
                                &ForwardOptions::default(),
                            )
                            .map_err(|e| e.to_string())?;
                            check_output(
                                &p,
                                &to_f32s(&o),
                                &lse,
                                &r,
                                &emu,
                                attn_ref::Dtype::F16.into(),
                            )
                            .map_err(|e| format!("thread {t} D={d} {layout}: {e}"))?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .filter_map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("thread panicked".into()))
                        .err()
                })
                .collect()
        });
        assert!(failures.is_empty(), "{name}: {}", failures.join("\n"));
    }
}
