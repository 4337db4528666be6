//! Throughput of the f64 reference against the textbook single-threaded loop nest, in the
//! same run. Criterion's throughput is set to the problem's FLOP count (`4·B·Hq·Sq·Sk·D`),
//! so its "elem/s" column reads as FLOP/s.
//!
//! - `full/2x8x2048x128`: [`forward`] on the whole (2,8,2048,128) problem.
//! - `naive/1x1x2048x128`: [`forward_naive`] on one of those 16 heads — the naive loop
//!   takes seconds per head, and its FLOP rate does not depend on the head count, so one
//!   head measures it; multiply its time by 16 for the full problem.
//! - `rows64/1x16x16384x128`: [`forward_rows`] on 64 evenly spaced rows of each of the 16
//!   heads of the (1,16,16384,128) problem (FLOPs counted for those rows only).

use attn_ref::reference::{forward, forward_naive, forward_rows, RowSelection};
use attn_ref::{AttnShape, Causal, Problem};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

fn normal(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| StandardNormal.sample(&mut rng)).collect()
}

fn inputs(shape: &AttnShape, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    (
        normal(shape.q_elems(), seed),
        normal(shape.kv_elems(), seed + 1),
        normal(shape.kv_elems(), seed + 2),
    )
}

fn bench_reference(c: &mut Criterion) {
    let mut group = c.benchmark_group("reference");
    group.sample_size(10);
    group.warm_up_time(std::time::Duration::from_millis(500));
    group.measurement_time(std::time::Duration::from_secs(20));

    let full = AttnShape::self_attention(2, 8, 2048, 128).expect("valid shape");
    let (q, k, v) = inputs(&full, 1);
    let problem = Problem::new(full, Causal::None);
    group.throughput(Throughput::Elements(full.flops(Causal::None) as u64));
    group.bench_function("full/2x8x2048x128", |bench| {
        bench.iter(|| forward(&problem, &q, &k, &v).expect("forward"))
    });

    let one_head = AttnShape::self_attention(1, 1, 2048, 128).expect("valid shape");
    let (q1, k1, v1) = inputs(&one_head, 4);
    let problem1 = Problem::new(one_head, Causal::None);
    group.throughput(Throughput::Elements(one_head.flops(Causal::None) as u64));
    group.bench_function("naive/1x1x2048x128", |bench| {
        bench.iter(|| forward_naive(&problem1, &q1, &k1, &v1).expect("naive"))
    });

    let long = AttnShape::self_attention(1, 16, 16384, 128).expect("valid shape");
    let (ql, kl, vl) = inputs(&long, 7);
    let problem_long = Problem::new(long, Causal::None);
    let rows = 64;
    let selection = RowSelection::Evenly { count: rows };
    let row_flops = 4.0 * 16.0 * rows as f64 * 16384.0 * 128.0;
    group.throughput(Throughput::Elements(row_flops as u64));
    group.bench_function("rows64/1x16x16384x128", |bench| {
        bench.iter(|| forward_rows(&problem_long, &ql, &kl, &vl, &selection).expect("rows"))
    });
    group.finish();
}

criterion_group!(benches, bench_reference);
criterion_main!(benches);
