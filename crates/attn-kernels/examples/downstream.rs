//! A downstream program that depends only on attn-ref and attn-kernels: one forward on the
//! GPU, checked against the f64 reference. Run on a GPU host:
//! `cargo run -p attn-kernels --example downstream --release`.

use attn_kernels::FlashAttention;
use attn_ref::{reference, AttnShape, Causal, Problem};
use half::f16;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

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

    let gpu = FlashAttention::new(0)?;
    let out = gpu.forward_host(&problem, &q, &k, &v)?;
    let want = reference::forward(&problem, &q, &k, &v)?;

    let max_err = out
        .o
        .iter()
        .zip(&want.o)
        .map(|(g, w)| (g.to_f64() - w).abs())
        .fold(0.0, f64::max);
    println!("{}: max |out - ref| = {max_err:.2e}", out.launch.kernel);
    if max_err.is_nan() || max_err > 4e-3 {
        return Err(format!("error {max_err:.2e} above the fp16 cap 4e-3").into());
    }
    Ok(())
}
