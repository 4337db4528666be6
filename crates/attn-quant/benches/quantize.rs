//! Throughput of quantize + dequantize on 64 Mi f32 elements ([4, 16, 8192, 128], N(0,1)).
//! Throughput is counted in input bytes (4 per element): GB/s = 0.268 / seconds per
//! iteration. `fresh` allocates the outputs every iteration (`quantize` + `dequantize`, so
//! first-touch page faults are included); `reuse` writes into buffers of the previous
//! iteration (`quantize_into` + `dequantize_into`).

use attn_quant::{
    dequantize, dequantize_into, quantize, quantize_into, Fp8Format, Granularity, QuantOptions,
};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;
use rayon::prelude::*;
use std::hint::black_box;
use std::time::Duration;

const SHAPE: [usize; 4] = [4, 16, 8192, 128];

fn input() -> Vec<f32> {
    let n: usize = SHAPE.iter().product();
    // Seeded per chunk so generation is parallel yet reproducible.
    let mut x = vec![0.0f32; n];
    x.par_chunks_mut(1 << 20)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut rng = StdRng::seed_from_u64(i as u64);
            chunk
                .iter_mut()
                .for_each(|v| *v = rng.sample(StandardNormal));
        });
    x
}

fn bench(c: &mut Criterion) {
    let x = input();
    let bytes = (x.len() * std::mem::size_of::<f32>()) as u64;
    let mut group = c.benchmark_group("fp8_64Mi_f32");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6))
        .throughput(Throughput::Bytes(bytes));
    group.bench_function("fresh/quantize+dequantize/e4m3/head", |b| {
        b.iter(|| {
            let q = quantize(black_box(&x), SHAPE, Fp8Format::E4M3, Granularity::Head).unwrap();
            black_box(dequantize(&q).unwrap())
        })
    });
    let options = QuantOptions::default();
    let mut q = quantize(&x, SHAPE, Fp8Format::E4M3, Granularity::Head).unwrap();
    let mut y = vec![0.0f32; x.len()];
    for (format, granularity) in [
        (Fp8Format::E4M3, Granularity::Head),
        (Fp8Format::E4M3, Granularity::Token),
        (Fp8Format::E5M2, Granularity::Head),
    ] {
        let name = format!("reuse/quantize+dequantize/{format}/{granularity}");
        group.bench_function(name, |b| {
            b.iter(|| {
                quantize_into(black_box(&x), SHAPE, format, granularity, &options, &mut q).unwrap();
                dequantize_into(&q.codes, &q.scales, SHAPE, format, granularity, &mut y).unwrap();
            })
        });
    }
    let (format, granularity) = (Fp8Format::E4M3, Granularity::Head);
    group.bench_function("reuse/quantize/e4m3/head", |b| {
        b.iter(|| {
            quantize_into(black_box(&x), SHAPE, format, granularity, &options, &mut q).unwrap()
        })
    });
    group.bench_function("reuse/dequantize/e4m3/head", |b| {
        b.iter(|| dequantize_into(&q.codes, &q.scales, SHAPE, format, granularity, &mut y).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
