//! A downstream program that depends only on attn-ref and attn-kernels: one forward on the
//! GPU through the host convenience, and the same forward on device buffers in the
//! `[B, S, H, D]` layout (FlashAttention's, candle's) through the [`Forward`] descriptor,
//! both checked against the f64 reference. Run on a GPU host:
//! `cargo run -p attn-kernels --example downstream --release`.

use attn_kernels::{dims_kv, dims_q, FlashAttention, Forward, Layout, Tensor, TensorMut};
use attn_ref::{reference, AttnShape, Causal, Problem};
use half::f16;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// max |out − ref| over `[B, H, S, D]`-ordered outputs (NaN if any output is NaN).
fn max_err(out: &[f16], want: &[f64]) -> f64 {
    out.iter()
        .zip(want)
        .map(|(g, w)| (g.to_f64() - w).abs())
        .fold(0.0, |m, e| {
            if e.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(e)
            }
        })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let shape = AttnShape::new(2, 8, 2, 1000, 1000, 128)?; // GQA 4:1
    let problem = Problem::new(shape, Causal::TopLeft);
    let mut rng = rand::rngs::StdRng::seed_from_u64(rand::rng().random());
    let mut randn = |n: usize| -> Vec<f16> {
        (0..n)
            .map(|_| f16::from_f32(rng.sample::<f32, _>(StandardNormal)))
            .collect()
    };
    let (q, k, v) = (
        randn(shape.q_elems()),
        randn(shape.kv_elems()),
        randn(shape.kv_elems()),
    );
    let want = reference::forward(&problem, &q, &k, &v)?;
    let gpu = FlashAttention::new(0)?;

    // Host buffers in [B, H, S, D]: upload, launch, download in one call.
    let out = gpu.forward_host(&problem, &q, &k, &v)?;
    let host_err = max_err(&out.o, &want.o);
    println!("{}: max |out - ref| = {host_err:.2e}", out.launch.kernel);

    // Device buffers in [B, S, H, D], read and written in place (no permutation).
    let (qd, kd) = (dims_q(&shape), dims_kv(&shape));
    let bshd = Layout::Bshd;
    let s = gpu.stream();
    let dq = s.clone_htod(&bshd.from_bhsd(&q, qd))?;
    let dk = s.clone_htod(&bshd.from_bhsd(&k, kd))?;
    let dv = s.clone_htod(&bshd.from_bhsd(&v, kd))?;
    let mut o = s.alloc_zeros::<f16>(shape.o_elems())?;
    let mut lse = s.alloc_zeros::<f32>(shape.lse_elems())?;
    let launch = gpu.forward(Forward {
        problem: &problem,
        q: Tensor::contiguous(dq.as_view(), qd, bshd),
        k: Tensor::contiguous(dk.as_view(), kd, bshd),
        v: Tensor::contiguous(dv.as_view(), kd, bshd),
        o: TensorMut::contiguous(o.as_view_mut(), qd, bshd),
        lse: Some(lse.as_view_mut()),
        options: Default::default(),
    })?;
    let o_bhsd = bshd.to_bhsd(&s.clone_dtoh(&o)?, qd);
    let device_err = max_err(&o_bhsd, &want.o);
    println!(
        "{} ({bshd}): max |out - ref| = {device_err:.2e}",
        launch.kernel
    );

    for (what, err) in [("host", host_err), ("bshd", device_err)] {
        if err.is_nan() || err > 4e-3 {
            return Err(format!("{what}: error {err:.2e} above the fp16 cap 4e-3").into());
        }
    }
    Ok(())
}
