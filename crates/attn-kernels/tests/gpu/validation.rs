//! Launches the validation rejects return typed errors and launch nothing: O keeps what it
//! held before.

use attn_kernels::{
    configs_for, cubin, dims_kv, dims_q, Dtype, Forward, ForwardOptions, Fp8Forward, Fp8Options,
    Fp8Scales, Fp8Variant, KernelError, Tensor, TensorMut,
};
use attn_ref::{AttnShape, Causal, Problem};
use cudarc::driver::CudaSlice;
use half::f16;

use crate::{fp8, gpu, upload_poisoned};

#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_errors_launch_nothing() {
    let gpu = gpu();
    let st = gpu.stream();
    let p = Problem::new(
        AttnShape::self_attention(1, 2, 64, 64).unwrap(),
        Causal::None,
    );
    let s = p.shape();
    let (qd, kd) = (dims_q(s), dims_kv(s));
    let good: CudaSlice<f16> = st
        .clone_htod(&vec![f16::from_f32(1.0); s.q_elems()])
        .unwrap();
    let short: CudaSlice<f16> = st
        .clone_htod(&vec![f16::from_f32(1.0); s.q_elems() - 1])
        .unwrap();
    let sentinel = f16::from_f32(7.0);
    let mut o: CudaSlice<f16> = st.clone_htod(&vec![sentinel; s.o_elems()]).unwrap();
    // A Q view shorter than its dims need.
    let err = gpu
        .forward(Forward::bhsd(&p, &short, &good, &good, &mut o, None))
        .unwrap_err();
    assert!(
        matches!(err, KernelError::InvalidTensor { tensor: "Q", .. }),
        "{err}"
    );
    // An LSE buffer of the wrong length.
    let mut lse_short = st.clone_htod(&vec![0f32; 3]).unwrap();
    let err = gpu
        .forward(Forward::bhsd(
            &p,
            &good,
            &good,
            &good,
            &mut o,
            Some(&mut lse_short),
        ))
        .unwrap_err();
    assert!(
        matches!(err, KernelError::BufferLength { tensor: "LSE", .. }),
        "{err}"
    );
    // A K view starting one element (2 bytes) into its allocation: off the 16-byte
    // boundary the kernels' vector loads need.
    let padded: CudaSlice<f16> = st
        .clone_htod(&vec![f16::from_f32(1.0); s.kv_elems() + 8])
        .unwrap();
    let err = gpu
        .forward(Forward {
            problem: &p,
            q: Tensor::bhsd(&good, qd),
            k: Tensor::bhsd(&good, kd),
            v: Tensor::contiguous(
                padded.slice(1..1 + s.kv_elems()),
                kd,
                attn_kernels::Layout::Bhsd,
            ),
            o: TensorMut::bhsd(&mut o, qd),
            lse: None,
            options: ForwardOptions::default(),
        })
        .unwrap_err();
    assert!(
        matches!(err, KernelError::Misaligned { tensor: "V", .. }),
        "{err}"
    );
    // A head dim no kernel takes (not a multiple of 8).
    let p100 = Problem::new(
        AttnShape::self_attention(1, 2, 64, 100).unwrap(),
        Causal::None,
    );
    let q100: CudaSlice<f16> = st
        .clone_htod(&vec![f16::from_f32(1.0); p100.shape().q_elems()])
        .unwrap();
    let mut o100: CudaSlice<f16> = st
        .clone_htod(&vec![sentinel; p100.shape().q_elems()])
        .unwrap();
    let err = gpu
        .forward(Forward::bhsd(&p100, &q100, &q100, &q100, &mut o100, None))
        .unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedHeadDim { head_dim: 100, .. }),
        "{err}"
    );
    // Nothing was written.
    let back = st.clone_dtoh(&o).unwrap();
    assert!(back.iter().all(|&x| x == sentinel));
    let back = st.clone_dtoh(&o100).unwrap();
    assert!(back.iter().all(|&x| x == sentinel));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_fp8_errors_launch_nothing() {
    let gpu = gpu();
    let s = gpu.stream();
    let p = fp8::fp8_problem((1, 4, 2, 64, 64, 128), Causal::None);
    let shape = p.shape();
    let (qd, kd) = (dims_q(shape), dims_kv(shape));
    let codes = |n| s.clone_htod(&vec![0x38u8; n]).unwrap();
    let scales = |n| s.clone_htod(&vec![1.0f32; n]).unwrap();
    let (q, k, v) = (
        codes(shape.q_elems()),
        codes(shape.kv_elems()),
        codes(shape.kv_elems()),
    );
    let good = [scales(4), scales(2), scales(2)];
    let short = codes(shape.kv_elems() - 1);
    let bad_scales = [scales(4), scales(4), scales(2)];
    let mut o = upload_poisoned::<f16>(&gpu, shape.o_elems());
    let opts = Fp8Options::default();
    // One FP8 launch over whole contiguous [B, H, S, D] buffers.
    let launch = |p: &Problem,
                  q: &CudaSlice<u8>,
                  k: &CudaSlice<u8>,
                  v: &CudaSlice<u8>,
                  sc: &[CudaSlice<f32>; 3],
                  o: &mut CudaSlice<f16>,
                  options: Fp8Options| {
        let (qd, kd) = (dims_q(p.shape()), dims_kv(p.shape()));
        gpu.forward_fp8(Fp8Forward {
            problem: p,
            q: Tensor::bhsd(q, qd),
            k: Tensor::bhsd(k, kd),
            v: Tensor::bhsd(v, kd),
            scales: Fp8Scales {
                q: sc[0].as_view(),
                k: sc[1].as_view(),
                v: sc[2].as_view(),
            },
            o: TensorMut::bhsd(o, qd),
            lse: None,
            options,
        })
    };
    let cases: Vec<(&str, Result<_, KernelError>)> = vec![
        ("short V", launch(&p, &q, &k, &short, &good, &mut o, opts)),
        (
            "K scales per q head",
            launch(&p, &q, &k, &v, &bad_scales, &mut o, opts),
        ),
        (
            "fp16 config",
            launch(
                &p,
                &q,
                &k,
                &v,
                &good,
                &mut o,
                Fp8Options {
                    schedule: Default::default(),
                    splits: None,
                    hopper: None,
                    config: Some(configs_for(128)[0]),
                    variant: None,
                },
            ),
        ),
    ];
    for (what, r) in cases {
        let e = r.expect_err(what);
        println!("{what}: {e}");
    }
    // Strided FP8 views are checked like the f16 ones: a K view one byte off its allocation.
    let padded = codes(shape.kv_elems() + 16);
    let r = gpu.forward_fp8(Fp8Forward {
        problem: &p,
        q: Tensor::bhsd(&q, qd),
        k: Tensor::contiguous(
            padded.slice(1..1 + shape.kv_elems()),
            kd,
            attn_kernels::Layout::Bhsd,
        ),
        v: Tensor::bhsd(&v, kd),
        scales: Fp8Scales {
            q: good[0].as_view(),
            k: good[1].as_view(),
            v: good[2].as_view(),
        },
        o: TensorMut::bhsd(&mut o, qd),
        lse: None,
        options: opts,
    });
    assert!(
        matches!(r, Err(KernelError::Misaligned { tensor: "K", .. })),
        "{r:?}"
    );
    let d96 = fp8::fp8_problem((1, 4, 2, 64, 64, 96), Causal::None);
    let mut o96 = upload_poisoned::<f16>(&gpu, d96.shape().o_elems());
    let (q96, k96) = (codes(d96.shape().q_elems()), codes(d96.shape().kv_elems()));
    let r = launch(&d96, &q96, &k96, &k96, &good, &mut o96, opts);
    assert!(
        matches!(r, Err(KernelError::UnsupportedHeadDim { head_dim: 96, .. })),
        "{r:?}"
    );
    // Variants this device or build cannot run are refused before anything is launched.
    for variant in Fp8Variant::ALL {
        if gpu.fp8_variant_available(variant) {
            continue;
        }
        let r = launch(
            &p,
            &q,
            &k,
            &v,
            &good,
            &mut o,
            Fp8Options {
                schedule: Default::default(),
                splits: None,
                hopper: None,
                config: None,
                variant: Some(variant),
            },
        );
        assert!(
            matches!(r, Err(KernelError::VariantUnavailable { .. })),
            "{variant}: {r:?}"
        );
    }
    // Hopper with the sm_90a cubins defaults to the Hopper engine's FP8 mainloop; without
    // them, to fp8.
    if gpu.compute_capability() == (9, 0) {
        let hopper_unit = attn_kernels::fp8::hopper_fp8_unit(Dtype::F16, 128).name();
        let has_90a = cubin::embedded()
            .iter()
            .any(|c| c.arch == "90a" && c.unit == hopper_unit && !c.debug);
        let expected = if has_90a {
            Fp8Variant::Hopper
        } else {
            Fp8Variant::Fp8
        };
        assert_eq!(gpu.fp8_default_variant(), expected);
    }
    let back = s.clone_dtoh(&o).unwrap();
    assert!(back.iter().all(|x| x.is_nan()), "a rejected launch wrote O");
    let back = s.clone_dtoh(&o96).unwrap();
    assert!(back.iter().all(|x| x.is_nan()), "a rejected launch wrote O");
}
