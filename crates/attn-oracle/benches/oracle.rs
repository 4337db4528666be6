//! Cost of the oracle on a seed-set output: `compare` on O of (2, 8, 2048, 128) = 4 Mi
//! elements (clean, and with one planted wrong row so the classification runs its full row
//! analysis), and `compare_tiles` on 16 tiles of 64 × 64. Inputs are N(0,1); the "kernel"
//! is the reference plus 1e-4·N(0,1) noise, well under the threshold.

use attn_oracle::{compare, compare_tiles, CompareOptions, TileTolerance};
use attn_ref::{AttnShape, Tile, TileId};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;
use std::hint::black_box;
use std::time::Duration;

fn randn(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.sample(StandardNormal)).collect()
}

fn bench(c: &mut Criterion) {
    let shape = AttnShape::self_attention(2, 8, 2048, 128).unwrap();
    let want = randn(shape.o_elems(), 1);
    let noise = randn(shape.o_elems(), 2);
    let clean: Vec<f32> = want
        .iter()
        .zip(&noise)
        .map(|(&w, &n)| (w + 1e-4 * n) as f32)
        .collect();
    let mut wrong_row = clean.clone();
    let start = shape.q_offset(1, 5, 1000);
    wrong_row[start..start + 128]
        .iter_mut()
        .for_each(|x| *x += 0.5);
    let opts = CompareOptions::default();

    let mut g = c.benchmark_group("compare");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(shape.o_elems() as u64));
    g.bench_function("clean_2x8x2048x128", |b| {
        b.iter(|| compare(black_box(&clean), black_box(&want), &shape, &opts).unwrap())
    });
    g.bench_function("wrong_row_2x8x2048x128", |b| {
        b.iter(|| compare(black_box(&wrong_row), black_box(&want), &shape, &opts).unwrap())
    });
    g.finish();

    let tiles: Vec<Tile> = (0..16)
        .map(|k| Tile {
            id: TileId {
                b: 0,
                h: 0,
                q_tile: 0,
                k_tile: k,
            },
            rows: 64,
            cols: 64,
            s: randn(64 * 64, 10 + k as u64),
            p: randn(64 * 64, 40 + k as u64),
            m: randn(64, 70 + k as u64),
            l: randn(64, 90 + k as u64)
                .iter()
                .map(|x| x.abs() + 1.0)
                .collect(),
        })
        .collect();
    let mut got = tiles.clone();
    got[9].p[100] += 0.1;
    let tol = TileTolerance::default();
    let mut g = c.benchmark_group("compare_tiles");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    g.bench_function("16_tiles_64x64", |b| {
        b.iter(|| compare_tiles(black_box(&got), black_box(&tiles), &tol))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
