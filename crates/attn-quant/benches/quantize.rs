//! Throughput of quantize + dequantize on 64 Mi f32 elements ([4, 16, 8192, 128], N(0,1)),
//! per-head and per-token E4M3, plus each half alone. Throughput is counted in input bytes
//! (4 per element), so GB/s = 0.268 / seconds per iteration.

use attn_quant::{dequantize, quantize, Fp8Format, Granularity};
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
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Bytes(bytes));
    for granularity in [Granularity::Head, Granularity::Token] {
        group.bench_function(format!("quantize+dequantize/e4m3/{granularity}"), |b| {
            b.iter(|| {
                let q = quantize(black_box(&x), SHAPE, Fp8Format::E4M3, granularity).unwrap();
                black_box(dequantize(&q).unwrap())
            })
        });
    }
    let q = quantize(&x, SHAPE, Fp8Format::E4M3, Granularity::Head).unwrap();
    group.bench_function("quantize/e4m3/head", |b| {
        b.iter(|| quantize(black_box(&x), SHAPE, Fp8Format::E4M3, Granularity::Head).unwrap())
    });
    group.bench_function("dequantize/e4m3/head", |b| {
        b.iter(|| dequantize(black_box(&q)).unwrap())
    });
    group.bench_function("quantize+dequantize/e5m2/head", |b| {
        b.iter(|| {
            let q = quantize(black_box(&x), SHAPE, Fp8Format::E5M2, Granularity::Head).unwrap();
            black_box(dequantize(&q).unwrap())
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
