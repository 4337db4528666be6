//! BCa CI of the mean, n = 1 000, 10 000 resamples: what the release gate runs once per shape;
//! and the whole `compare` (two mean CIs, the ratio CI and the CI of g) at the same size.

use attn_stats::{compare, mean_ci, BootstrapConfig, BootstrapMethod, CompareOptions};
use criterion::{criterion_group, criterion_main, Criterion};
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};

fn bench_bca_mean(c: &mut Criterion) {
    // Latency-like data: log-normal around 0.25 ms with a right tail.
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let dist = LogNormal::new((0.25f64).ln(), 0.05).expect("valid log-normal parameters");
    let data: Vec<f64> = (0..1_000).map(|_| dist.sample(&mut rng)).collect();
    let mut group = c.benchmark_group("bootstrap");
    group.sample_size(20);
    for method in [BootstrapMethod::Bca, BootstrapMethod::Percentile] {
        let config = BootstrapConfig {
            method,
            resamples: 10_000,
            ..Default::default()
        };
        group.bench_function(format!("mean_ci_{method}_n1000_b10000"), |b| {
            b.iter(|| mean_ci(std::hint::black_box(&data), &config))
        });
    }
    let candidate: Vec<f64> = data.iter().map(|x| 0.97 * x).collect();
    group.sample_size(10);
    group.bench_function("compare_bca_n1000_vs_n1000_b10000", |b| {
        b.iter(|| {
            compare(
                std::hint::black_box(&data),
                &candidate,
                &CompareOptions::default(),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, bench_bca_mean);
criterion_main!(benches);
