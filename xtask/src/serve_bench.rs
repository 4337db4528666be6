//! `cargo xtask serve-bench`: the serving layouts against the dense work they replace, timed
//! in one process with `bench`'s protocol (CUDA events around each launch, CUDA-graph replays
//! under 20 µs; ratios of means with bootstrap CIs, attn-stats):
//! - **varlen**: 16 sequences of random lengths 128–4096 (DESIGN.md §7's `varlen` set; H 16,
//!   D 128 or `--varlen-head-dim`) through `forward_sequences` (packed Q/K/V) on the default engine (Hopper on sm_90) and
//!   on the mma.sync engine, the same packed queries against a paged KV cache (pages of 16
//!   and 64 shuffled through the cache, `seqused_k`: chunked prefill's layout), and the padded
//!   dense batch of the same sequences (B = 16, S = the longest) on both engines;
//! - **chunked prefill**: 16 (a speculative verify step), 128, 256 and 512 new tokens of one
//!   sequence against a paged cache of 16384 keys (Hq 32 / Hkv 8, D 128, bottom-right
//!   causal) on the default engine (the
//!   Hopper sequence entries split the keys of a grid that leaves SMs idle), unsplit, and on
//!   mma.sync; and the same keys as a dense cache through the plain forward;
//! - **paged decode**: batch 64, Hq 32 / Hkv 8, 4096 keys each, pages of 16 (§7's paged
//!   shape), one query per sequence, through a shuffled block table, against the same keys in
//!   a dense `[B, Hkv, S, D]` cache (dense `forward`, which may split) and through the dense
//!   cache with `seqused_k`. Reported as K/V bytes read per µs.
//! - **E4M3 KV cache**: the same paged decode (pages of 16) and its dense cache with K/V as
//!   E4M3 codes (`forward_kv_fp8`, per-head scales), against the f16 paged run; and the
//!   single-sequence decode (1, 32, 1 → 8192, 128) with an f16 and an E4M3 cache, and the same
//!   at Gemma 2's D = 256 (Hq 16 / Hkv 8).
//! - **decode with sinks or ALiBi**: a gpt-oss-like step (1 sequence, Hq 64 / Hkv 8, D 64,
//!   8192 keys, f16 cache) plain, with attention sinks (also under a 128-key window), and with
//!   ALiBi, on the default engine and on the engines `Engine::Auto` took before (the Hopper
//!   feature entry, one CTA per head; mma.sync unsplit; for ALiBi, the mma.sync split
//!   entries, before the decode kernel ran ALiBi).

use std::sync::Arc;

use anyhow::Context;
use attn_kernels::{
    dims_kv, dims_q, Engine, FlashAttention, Forward, ForwardKvFp8, ForwardOptions, Indices,
    KeyRows, KvScales, Layout, QueryRows, Sequences, Tensor, TensorMut,
};
use attn_ref::{AttnShape, Causal, Problem};
use cudarc::driver::CudaSlice;
use half::f16;
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};

use crate::bench::time_launches;
use crate::flags::TimingArg;

/// Flags of `xtask serve-bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Warm-up launches.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Timed samples per variant.
    #[arg(long, default_value_t = 100)]
    samples: usize,
    /// Seed of the sequence lengths and page order.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Write the samples' summary as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Head dim of the varlen set (the other sets keep the shapes named above).
    #[arg(long, default_value_t = 128)]
    varlen_head_dim: usize,
    /// Run only these sets (comma-separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Set>,
}

/// The sets of `serve-bench`, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Set {
    /// Packed and paged varlen prefill against the padded dense batch.
    Varlen,
    /// Chunks of one sequence against a paged cache.
    ChunkedPrefill,
    /// Paged decode (f16 and E4M3 caches) against dense caches.
    Paged,
    /// Single-sequence decode at D = 128 and 256, f16 and E4M3 caches.
    Decode,
    /// Decode with attention sinks, a window or ALiBi.
    DecodeFeatures,
}

fn randn(
    stream: &Arc<cudarc::driver::CudaStream>,
    rng: &mut StdRng,
    n: usize,
) -> anyhow::Result<CudaSlice<f16>> {
    let host: Vec<f16> = crate::randn::normal_samples(n, rng.random(), f16::from_f32);
    Ok(stream.clone_htod(&host)?)
}

/// Dense `[B, H, S, D]` inputs of `shape`: Q, K and V drawn from N(0, 1), O zeroed.
type DenseInputs = (
    CudaSlice<f16>,
    CudaSlice<f16>,
    CudaSlice<f16>,
    CudaSlice<f16>,
);

fn dense_inputs(
    stream: &Arc<cudarc::driver::CudaStream>,
    rng: &mut StdRng,
    shape: &AttnShape,
) -> anyhow::Result<DenseInputs> {
    Ok((
        randn(stream, rng, shape.q_elems())?,
        randn(stream, rng, shape.kv_elems())?,
        randn(stream, rng, shape.kv_elems())?,
        stream.alloc_zeros::<f16>(shape.q_elems())?,
    ))
}

struct Timed {
    name: String,
    kernel: String,
    samples: Vec<f64>,
}

fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// Prints each variant against `base` (its first entry): mean µs, the ratio with its CI, and
/// `per_us` (work per µs: TFLOP or GB) when given.
fn report(
    title: &str,
    rows: &[Timed],
    work: f64,
    unit: &str,
    json: &mut Vec<serde_json::Value>,
) -> anyhow::Result<()> {
    println!("\n{title}");
    println!(
        "| variant | kernel | mean µs | {unit} | time / {} [95 % CI] |",
        rows[0].name
    );
    println!("|---|---|---|---|---|");
    let opts = attn_stats::CompareOptions::default();
    for r in rows {
        let c = attn_stats::compare(&rows[0].samples, &r.samples, &opts)
            .map_err(|e| anyhow::anyhow!("{}: {e}", r.name))?;
        let m = mean(&r.samples);
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.3} [{:.3}, {:.3}] |",
            r.name,
            r.kernel,
            m,
            work / m,
            c.ratio,
            c.ratio_ci_low,
            c.ratio_ci_high
        );
        json.push(serde_json::json!({
            "set": title, "variant": r.name, "kernel": r.kernel, "mean_us": m,
            "per_us": work / m, "unit": unit, "ratio": c.ratio,
            "ratio_ci": [c.ratio_ci_low, c.ratio_ci_high],
        }));
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let gpu = crate::forward::gpu()?;
    // SAFETY: every set issues all its work on the launcher's one stream, so cudarc's
    // cross-stream event tracking is not needed; without it, no event wait enters the
    // captured CUDA graphs of launches under 20 µs (with it, capture failed with
    // CUDA_ERROR_STREAM_CAPTURE_ISOLATION, run 198).
    unsafe { gpu.context().disable_event_tracking() };
    let mut json = Vec::new();
    let runs = |set: Set| args.only.is_empty() || args.only.contains(&set);
    if runs(Set::Varlen) {
        varlen(&gpu, &args, &mut json)?;
    }
    if runs(Set::ChunkedPrefill) {
        chunked_prefill(&gpu, &args, &mut json)?;
    }
    if runs(Set::Paged) {
        paged(&gpu, &args, &mut json)?;
    }
    if runs(Set::Decode) {
        decode(&gpu, &args, &mut json, (32, 32, 128), true)?;
        // Gemma 2's head dim (9B: 16 query heads over 8 KV heads).
        decode(&gpu, &args, &mut json, (16, 8, 256), false)?;
    }
    if runs(Set::DecodeFeatures) {
        decode_features(&gpu, &args, &mut json)?;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Times `launch` by `bench`'s protocol (an event pair per launch, or CUDA-graph replays for
/// launches under 20 µs): the samples, in µs.
fn time_samples(
    gpu: &Arc<FlashAttention>,
    args: &Args,
    launch: &mut dyn FnMut(usize) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<f64>> {
    let (samples, _) = time_launches(
        gpu,
        crate::bench::Warmup::calls(args.warmup),
        args.samples,
        false,
        TimingArg::Auto,
        launch,
    )?;
    Ok(samples)
}

fn varlen(
    gpu: &Arc<FlashAttention>,
    args: &Args,
    json: &mut Vec<serde_json::Value>,
) -> anyhow::Result<()> {
    let (h, d, n) = (16, args.varlen_head_dim, 16);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let lens: Vec<usize> = (0..n).map(|_| rng.random_range(128..=4096)).collect();
    let total: usize = lens.iter().sum();
    let longest = *lens.iter().max().context("no sequences")?;
    let mut cu = vec![0i32];
    for &l in &lens {
        cu.push(cu[cu.len() - 1] + l as i32);
    }
    let st = gpu.stream().clone();
    for causal in [Causal::None, Causal::BottomRight] {
        // FLOPs of the real work: Σ 4·H·L²·D (halved causal).
        let flops: f64 = lens
            .iter()
            .map(|&l| 4.0 * (h * l * l * d) as f64 / if causal == Causal::None { 1.0 } else { 2.0 })
            .sum();
        let mut rows = Vec::new();
        // Packed, default engine (Hopper on sm_90) and mma.sync; then the same packed queries
        // against a paged KV cache holding the same sequences (chunked prefill's layout):
        // pages shuffled through the cache, a table row per sequence, `seqused_k`.
        let template = Problem::new(AttnShape::new(n, h, h, longest, longest, d)?, causal);
        // The Hopper tiles of the paged rows at D = 128: the wide 176-key tile reads every page
        // size in 16-row TMA boxes (gcd(176, page)), the 128-key tile a page of ≥ 64 keys in
        // boxes of ≥ 64 rows; the default engine takes the latter there
        // (`hopper_seq_default_tile`). Other head dims have one tile for sequence layouts,
        // which the default rows run.
        let on_hopper = gpu.compute_capability() == (9, 0);
        let pinned = |tile: Option<attn_kernels::HopperTile>| {
            tile.filter(|_| on_hopper)
                .map(|t| (format!("Hopper {} tile", t.name()), Engine::Hopper(Some(t))))
        };
        let (feature_tile, seq_tile) = (
            attn_kernels::catalog::hopper_feature_tile(d),
            attn_kernels::catalog::hopper_seq_tile(d),
        );
        let two_tiles = seq_tile.is_some() && seq_tile != feature_tile;
        let narrow = pinned(feature_tile).filter(|_| two_tiles);
        let wide = pinned(seq_tile).filter(|_| two_tiles);
        let mut variants: Vec<(String, Engine, Option<usize>)> = vec![
            ("varlen (packed), default engine".into(), Engine::Auto, None),
            ("varlen (packed), mma.sync".into(), Engine::MmaSync, None),
        ];
        for (ps, pin) in [(16usize, &narrow), (64, &wide), (256, &wide)] {
            let paged = format!("varlen (packed Q), paged KV, page {ps}");
            variants.push((format!("{paged}, default engine"), Engine::Auto, Some(ps)));
            if ps == 16 {
                variants.push((format!("{paged}, mma.sync"), Engine::MmaSync, Some(ps)));
            }
            if let Some((tile, engine)) = pin {
                variants.push((format!("{paged}, {tile}"), *engine, Some(ps)));
            }
        }
        for (name, engine, page) in variants {
            let q = randn(&st, &mut rng, total * h * d)?;
            let mut o = st.alloc_zeros::<f16>(total * h * d)?;
            let dcu = st.clone_htod(&cu)?;
            let dims = [1, h, total, d];
            // K/V: packed like Q, or `pages` (None: packed) of `ps` rows.
            let (kd, pages) = match page {
                None => (dims, None),
                Some(ps) => {
                    let max_blocks = longest.div_ceil(ps);
                    let mut pages: Vec<i32> = (0..(n * max_blocks) as i32).collect();
                    pages.shuffle(&mut rng);
                    let used: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
                    (
                        [n * max_blocks, h, ps, d],
                        Some((st.clone_htod(&pages)?, st.clone_htod(&used)?)),
                    )
                }
            };
            let kv_elems = kd.iter().product();
            let k = randn(&st, &mut rng, kv_elems)?;
            let v = randn(&st, &mut rng, kv_elems)?;
            let mut kernel = String::new();
            let mut launch = |_: usize| -> anyhow::Result<()> {
                let (keys, seqused_k) = match &pages {
                    None => (
                        KeyRows::Packed {
                            cu_seqlens: Indices::new(dcu.as_view()),
                        },
                        None,
                    ),
                    Some((table, used)) => (
                        KeyRows::Paged {
                            block_table: Indices::new(table.as_view()),
                        },
                        Some(Indices::new(used.as_view())),
                    ),
                };
                let info = gpu.forward_sequences(
                    Forward {
                        problem: &template,
                        q: Tensor::contiguous(q.as_view(), dims, Layout::Bshd),
                        k: Tensor::contiguous(k.as_view(), kd, Layout::Bshd),
                        v: Tensor::contiguous(v.as_view(), kd, Layout::Bshd),
                        o: TensorMut::contiguous(o.as_view_mut(), dims, Layout::Bshd),
                        lse: None,
                        options: ForwardOptions {
                            engine,
                            ..Default::default()
                        },
                    },
                    Sequences {
                        queries: QueryRows::Packed {
                            cu_seqlens: Indices::new(dcu.as_view()),
                        },
                        keys,
                        seqused_k,
                    },
                )?;
                kernel = info.kernel;
                Ok(())
            };
            let samples = time_samples(gpu, args, &mut launch)?;
            rows.push(Timed {
                name,
                kernel,
                samples,
            });
        }
        // Padded dense, default engine and mma.sync.
        for (name, engine) in [
            ("padded dense, default engine", Engine::Auto),
            ("padded dense, mma.sync", Engine::MmaSync),
        ] {
            let p = Problem::new(AttnShape::new(n, h, h, longest, longest, d)?, causal);
            let s = *p.shape();
            let q = randn(&st, &mut rng, s.q_elems())?;
            let k = randn(&st, &mut rng, s.kv_elems())?;
            let v = randn(&st, &mut rng, s.kv_elems())?;
            let mut o = st.alloc_zeros::<f16>(s.o_elems())?;
            let mut kernel = String::new();
            let opts = ForwardOptions {
                engine,
                ..Default::default()
            };
            let mut launch = |_: usize| -> anyhow::Result<()> {
                let info = gpu.forward(Forward {
                    problem: &p,
                    q: Tensor::bhsd(&q, dims_q(&s)),
                    k: Tensor::bhsd(&k, dims_kv(&s)),
                    v: Tensor::bhsd(&v, dims_kv(&s)),
                    o: TensorMut::bhsd(&mut o, dims_q(&s)),
                    lse: None,
                    options: opts.clone(),
                })?;
                kernel = info.kernel;
                Ok(())
            };
            let samples = time_samples(gpu, args, &mut launch)?;
            rows.push(Timed {
                name: name.into(),
                kernel,
                samples,
            });
        }
        // A dense batch of about the same FLOPs (16 sequences of the lengths' root mean
        // square, a multiple of 8): the dense kernel's throughput on this much work, which
        // issue 16's varlen target compares against. Its time is scaled to the varlen FLOPs.
        {
            let sq_mean = lens.iter().map(|&l| (l * l) as f64).sum::<f64>() / n as f64;
            let s_eq = ((sq_mean.sqrt() / 8.0).round() as usize * 8).max(8);
            let p = Problem::new(AttnShape::new(n, h, h, s_eq, s_eq, d)?, causal);
            let s = *p.shape();
            let dense_flops = 4.0 * (n * h * s_eq * s_eq * d) as f64
                / if causal == Causal::None { 1.0 } else { 2.0 };
            let q = randn(&st, &mut rng, s.q_elems())?;
            let k = randn(&st, &mut rng, s.kv_elems())?;
            let v = randn(&st, &mut rng, s.kv_elems())?;
            let mut o = st.alloc_zeros::<f16>(s.o_elems())?;
            let mut kernel = String::new();
            let mut launch = |_: usize| -> anyhow::Result<()> {
                let info = gpu.forward(Forward {
                    problem: &p,
                    q: Tensor::bhsd(&q, dims_q(&s)),
                    k: Tensor::bhsd(&k, dims_kv(&s)),
                    v: Tensor::bhsd(&v, dims_kv(&s)),
                    o: TensorMut::bhsd(&mut o, dims_q(&s)),
                    lse: None,
                    options: ForwardOptions::default(),
                })?;
                kernel = info.kernel;
                Ok(())
            };
            let samples = time_samples(gpu, args, &mut launch)?;
            let scale = flops / dense_flops;
            rows.push(Timed {
                name: format!("dense {n}×{s_eq} (same FLOPs ±, time scaled ×{scale:.3})"),
                kernel,
                samples: samples.iter().map(|t| t * scale).collect(),
            });
        }
        report(
            &format!(
                "varlen: {n} sequences of {}–{} tokens (total {total}), H {h}, D {d}, f16, causal {causal}; TFLOP/s of the real work",
                lens.iter().min().unwrap_or(&0),
                longest
            ),
            &rows,
            flops / 1e6, // TFLOP/s = FLOP / (µs · 1e-6) / 1e12
            "TFLOP/s",
            json,
        )?;
    }
    Ok(())
}

/// Chunked prefill: `chunk` new tokens of one sequence (dense queries `[1, Hq, chunk, D]`,
/// bottom-right causal: row i sees the cache's `ctx − chunk` older keys and the chunk's first
/// i + 1) against a paged cache of `ctx` keys (pages of 64, shuffled), Hq 32 / Hkv 8, D 128,
/// f16. Variants: the default engine (the Hopper sequence entries, which split the keys when
/// the grid leaves SMs idle), the same entries unsplit (`splits = 1`, what the default ran
/// before), and mma.sync (whose general entries cannot split under a causal mask); then the
/// same keys as a dense cache.
fn chunked_prefill(
    gpu: &Arc<FlashAttention>,
    args: &Args,
    json: &mut Vec<serde_json::Value>,
) -> anyhow::Result<()> {
    let (hq, hkv, d, ctx, ps) = (32usize, 8usize, 128usize, 16384usize, 64usize);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let st = gpu.stream().clone();
    let max_blocks = ctx / ps;
    let mut pages: Vec<i32> = (0..max_blocks as i32).collect();
    pages.shuffle(&mut rng);
    let table = st.clone_htod(&pages)?;
    let used = st.clone_htod(&[ctx as i32])?;
    let kd = [max_blocks, hkv, ps, d];
    let k = randn(&st, &mut rng, max_blocks * ps * hkv * d)?;
    let v = randn(&st, &mut rng, max_blocks * ps * hkv * d)?;
    let dense_k = randn(&st, &mut rng, hkv * ctx * d)?;
    let dense_v = randn(&st, &mut rng, hkv * ctx * d)?;
    let unsplit = if gpu.compute_capability() == (9, 0) {
        Engine::Hopper(None)
    } else {
        Engine::Auto
    };
    // 16 new tokens: speculative decoding's verify step.
    for chunk in [16usize, 128, 256, 512] {
        let p = Problem::new(
            AttnShape::new(1, hq, hkv, chunk, ctx, d)?,
            Causal::BottomRight,
        );
        let s = *p.shape();
        // Σ over the chunk's rows of 4·D·(keys the row sees), per query head.
        let keys: usize = (0..chunk).map(|i| ctx - chunk + i + 1).sum();
        let flops = 4.0 * (hq * d * keys) as f64;
        let q = randn(&st, &mut rng, s.q_elems())?;
        let mut o = st.alloc_zeros::<f16>(s.o_elems())?;
        let mut rows = Vec::new();
        for (name, engine, splits) in [
            ("default engine", Engine::Auto, None),
            ("default entries unsplit (splits = 1)", unsplit, Some(1)),
            ("mma.sync", Engine::MmaSync, None),
        ] {
            let mut kernel = String::new();
            let mut launch = |_: usize| -> anyhow::Result<()> {
                let info = gpu.forward_sequences(
                    Forward {
                        problem: &p,
                        q: Tensor::bhsd(&q, dims_q(&s)),
                        k: Tensor::contiguous(k.as_view(), kd, Layout::Bshd),
                        v: Tensor::contiguous(v.as_view(), kd, Layout::Bshd),
                        o: TensorMut::bhsd(&mut o, dims_q(&s)),
                        lse: None,
                        options: ForwardOptions {
                            engine,
                            splits,
                            ..ForwardOptions::default()
                        },
                    },
                    Sequences {
                        queries: QueryRows::Dense,
                        keys: KeyRows::Paged {
                            block_table: Indices::new(table.as_view()),
                        },
                        seqused_k: Some(Indices::new(used.as_view())),
                    },
                )?;
                kernel = format!("{} ({} splits)", info.kernel, info.splits);
                Ok(())
            };
            let samples = time_samples(gpu, args, &mut launch)?;
            rows.push(Timed {
                name: name.into(),
                kernel,
                samples,
            });
        }
        // The same keys as a dense cache `[1, Hkv, ctx, D]` through the plain forward: the
        // default (the Hopper sequence entries split it), the Hopper dense entries (which do
        // not split: Auto's choice before, unless mma.sync split), and mma.sync (which may).
        for (name, engine, splits) in [
            ("dense cache, default engine", Engine::Auto, None),
            (
                "dense cache, Hopper dense entries (splits = 1)",
                unsplit,
                Some(1),
            ),
            ("dense cache, mma.sync", Engine::MmaSync, None),
        ] {
            let mut kernel = String::new();
            let mut launch = |_: usize| -> anyhow::Result<()> {
                let info = gpu.forward(Forward {
                    problem: &p,
                    q: Tensor::bhsd(&q, dims_q(&s)),
                    k: Tensor::bhsd(&dense_k, dims_kv(&s)),
                    v: Tensor::bhsd(&dense_v, dims_kv(&s)),
                    o: TensorMut::bhsd(&mut o, dims_q(&s)),
                    lse: None,
                    options: ForwardOptions {
                        engine,
                        splits,
                        ..ForwardOptions::default()
                    },
                })?;
                kernel = format!("{} ({} splits)", info.kernel, info.splits);
                Ok(())
            };
            let samples = time_samples(gpu, args, &mut launch)?;
            rows.push(Timed {
                name: name.into(),
                kernel,
                samples,
            });
        }
        report(
            &format!(
                "chunked prefill: {chunk} new tokens against a paged cache of {ctx} keys (page {ps}), Hq {hq} / Hkv {hkv}, D {d}, f16, bottom-right causal; TFLOP/s"
            ),
            &rows,
            flops / 1e6,
            "TFLOP/s",
            json,
        )?;
    }
    Ok(())
}

fn paged(
    gpu: &Arc<FlashAttention>,
    args: &Args,
    json: &mut Vec<serde_json::Value>,
) -> anyhow::Result<()> {
    let (b, hq, hkv, ctx, d) = (64usize, 32usize, 8usize, 4096usize, 128usize);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let st = gpu.stream().clone();
    let used = st.clone_htod(&vec![ctx as i32; b])?;
    let q = randn(&st, &mut rng, b * hq * d)?;
    let mut o = st.alloc_zeros::<f16>(b * hq * d)?;
    let kv_bytes = (2 * b * hkv * ctx * d * 2) as f64;
    let mut rows = Vec::new();
    let mut fp8_rows = Vec::new();
    let p = Problem::new(AttnShape::new(b, hq, hkv, 1, ctx, d)?, Causal::BottomRight);
    let s = *p.shape();
    // Dense caches [B, Hkv, S, D] (bhsd) and [B, S, Hkv, D] (bshd): the plain forward (which
    // may split), and forward_sequences with seqused_k (the paged launch's kernel without the
    // table).
    for layout in [Layout::Bhsd, Layout::Bshd] {
        let k = randn(&st, &mut rng, s.kv_elems())?;
        let v = randn(&st, &mut rng, s.kv_elems())?;
        for with_used in [false, true] {
            let mut kernel = String::new();
            let mut launch = |_: usize| -> anyhow::Result<()> {
                let fwd = Forward {
                    problem: &p,
                    q: Tensor::bhsd(&q, dims_q(&s)),
                    k: Tensor::contiguous(k.as_view(), dims_kv(&s), layout),
                    v: Tensor::contiguous(v.as_view(), dims_kv(&s), layout),
                    o: TensorMut::bhsd(&mut o, dims_q(&s)),
                    lse: None,
                    options: ForwardOptions::default(),
                };
                let info = if with_used {
                    gpu.forward_sequences(
                        fwd,
                        Sequences {
                            seqused_k: Some(Indices::new(used.as_view())),
                            ..Default::default()
                        },
                    )?
                } else {
                    gpu.forward(fwd)?
                };
                kernel = info.kernel;
                Ok(())
            };
            let samples = time_samples(gpu, args, &mut launch)?;
            rows.push(Timed {
                name: format!(
                    "dense {layout} cache, {}",
                    if with_used {
                        "forward_sequences + seqused_k"
                    } else {
                        "plain forward"
                    }
                ),
                kernel,
                samples,
            });
        }
    }
    // Paged caches [num_blocks, page_size, Hkv, D], pages shuffled.
    // The default engine (the decode kernel) at every page size; mma.sync's paged entry at
    // pages of 16 for comparison.
    for (ps, engine) in [
        (16usize, Engine::Auto),
        (16, Engine::MmaSync),
        (64, Engine::Auto),
        (256, Engine::Auto),
    ] {
        let max_blocks = ctx / ps;
        let num_blocks = b * max_blocks;
        let mut pages: Vec<i32> = (0..num_blocks as i32).collect();
        pages.shuffle(&mut rng);
        let table = st.clone_htod(&pages)?; // row b = pages[b·max_blocks ..]
        let kc = randn(&st, &mut rng, num_blocks * ps * hkv * d)?;
        let vc = randn(&st, &mut rng, num_blocks * ps * hkv * d)?;
        let kd = [num_blocks, hkv, ps, d];
        let mut kernel = String::new();
        let mut launch = |_: usize| -> anyhow::Result<()> {
            let info = gpu.forward_sequences(
                Forward {
                    problem: &p,
                    q: Tensor::bhsd(&q, dims_q(&s)),
                    k: Tensor::contiguous(kc.as_view(), kd, Layout::Bshd),
                    v: Tensor::contiguous(vc.as_view(), kd, Layout::Bshd),
                    o: TensorMut::bhsd(&mut o, dims_q(&s)),
                    lse: None,
                    options: ForwardOptions {
                        engine,
                        ..ForwardOptions::default()
                    },
                },
                Sequences {
                    queries: QueryRows::Dense,
                    keys: KeyRows::Paged {
                        block_table: Indices::new(table.as_view()),
                    },
                    seqused_k: Some(Indices::new(used.as_view())),
                },
            )?;
            kernel = info.kernel;
            Ok(())
        };
        let samples = time_samples(gpu, args, &mut launch)?;
        rows.push(Timed {
            name: format!(
                "paged, page {ps}{}",
                if engine == Engine::MmaSync {
                    ", mma.sync"
                } else {
                    ""
                }
            ),
            kernel,
            samples,
        });
        if ps == 16 && engine == Engine::Auto {
            fp8_rows.push(Timed {
                name: "f16 paged cache, page 16".into(),
                kernel: rows[rows.len() - 1].kernel.clone(),
                samples: rows[rows.len() - 1].samples.clone(),
            });
            // The same pages as E4M3 codes (random codes of finite values, per-head scales).
            let codes = |rng: &mut StdRng| -> anyhow::Result<CudaSlice<u8>> {
                let host: Vec<u8> = (0..num_blocks * ps * hkv * d)
                    .map(|_| rng.random_range(0u8..0x7E) | (rng.random::<u8>() & 0x80))
                    .collect();
                Ok(st.clone_htod(&host)?)
            };
            let (k8, v8) = (codes(&mut rng)?, codes(&mut rng)?);
            let scales = st.clone_htod(&vec![0.01f32; hkv])?;
            for (paged, engine) in [
                (true, Engine::Auto),
                (true, Engine::MmaSync),
                (false, Engine::Auto),
            ] {
                let mut kernel = String::new();
                let mut launch = |_: usize| -> anyhow::Result<()> {
                    let (kd, layout, keys) = if paged {
                        (
                            [num_blocks, hkv, ps, d],
                            Layout::Bshd,
                            KeyRows::Paged {
                                block_table: Indices::new(table.as_view()),
                            },
                        )
                    } else {
                        (dims_kv(&s), Layout::Bshd, KeyRows::Dense)
                    };
                    let info = gpu.forward_kv_fp8(
                        ForwardKvFp8 {
                            problem: &p,
                            q: Tensor::bhsd(&q, dims_q(&s)),
                            k: Tensor::contiguous(k8.as_view(), kd, layout),
                            v: Tensor::contiguous(v8.as_view(), kd, layout),
                            scales: KvScales {
                                k: scales.as_view(),
                                v: scales.as_view(),
                            },
                            o: TensorMut::bhsd(&mut o, dims_q(&s)),
                            lse: None,
                            options: ForwardOptions {
                                engine,
                                ..ForwardOptions::default()
                            },
                        },
                        Some(Sequences {
                            queries: QueryRows::Dense,
                            keys,
                            seqused_k: Some(Indices::new(used.as_view())),
                        }),
                    )?;
                    kernel = info.kernel;
                    Ok(())
                };
                let samples = time_samples(gpu, args, &mut launch)?;
                let mma = if engine == Engine::MmaSync {
                    ", mma.sync"
                } else {
                    ""
                };
                fp8_rows.push(Timed {
                    name: if paged {
                        format!("E4M3 paged cache, page 16{mma}")
                    } else {
                        format!("E4M3 dense [B, S, Hkv, D] cache + seqused_k{mma}")
                    },
                    kernel,
                    samples,
                });
            }
        }
    }
    // The copy bandwidth of this device in the same process: a device-to-device copy of the
    // same K/V bytes. Its row's GB/s counts the bytes it reads, like the others; the copy
    // also writes them, so the usual "copy bandwidth" (read + write) is twice that.
    {
        let src = randn(&st, &mut rng, 2 * s.kv_elems())?;
        let mut dst = st.alloc_zeros::<f16>(2 * s.kv_elems())?;
        let mut launch = |_: usize| -> anyhow::Result<()> {
            st.memcpy_dtod(&src, &mut dst)?;
            Ok(())
        };
        let samples = time_samples(gpu, args, &mut launch)?;
        rows.push(Timed {
            name: "device-to-device copy of the same bytes (also writes them)".into(),
            kernel: "cuMemcpyDtoDAsync".into(),
            samples,
        });
    }
    // The copy bandwidth over the E4M3 cache's bytes (half the f16 cache's).
    {
        let n = s.kv_elems(); // two byte arrays of this many codes = 2 · n bytes
        let src = st.alloc_zeros::<u8>(2 * n)?;
        let mut dst = st.alloc_zeros::<u8>(2 * n)?;
        let mut launch = |_: usize| -> anyhow::Result<()> {
            st.memcpy_dtod(&src, &mut dst)?;
            Ok(())
        };
        let samples = time_samples(gpu, args, &mut launch)?;
        fp8_rows.push(Timed {
            name: "device-to-device copy of the E4M3 bytes (also writes them)".into(),
            kernel: "cuMemcpyDtoDAsync".into(),
            samples,
        });
    }
    report(
        &format!(
            "paged decode: B {b}, Hq {hq} / Hkv {hkv}, {ctx} keys, D {d}, f16; GB/s of K/V read"
        ),
        &rows,
        kv_bytes / 1e3, // GB/s = bytes / (µs · 1e-6) / 1e9
        "GB/s",
        json,
    )?;
    report(
        &format!(
            "paged decode, E4M3 KV cache: B {b}, Hq {hq} / Hkv {hkv}, {ctx} keys, D {d}; GB/s of E4M3 K/V read (the f16 row reads twice these bytes)"
        ),
        &fp8_rows,
        kv_bytes / 2.0 / 1e3,
        "GB/s",
        json,
    )?;
    Ok(())
}

/// One sequence decoding against a long cache of 8192 keys with `hq` query heads over `hkv`
/// KV heads at head dim `d`: the f16 cache through the plain forward and the same keys as an
/// E4M3 cache (`forward_kv_fp8`), on the decode kernel, with the copy bandwidth. `sweep` adds
/// forced split counts and mma.sync's split entries (for DESIGN.md §7's decode shape).
fn decode(
    gpu: &Arc<FlashAttention>,
    args: &Args,
    json: &mut Vec<serde_json::Value>,
    (hq, hkv, d): (usize, usize, usize),
    sweep: bool,
) -> anyhow::Result<()> {
    let ctx = 8192usize;
    let mut rng = StdRng::seed_from_u64(args.seed + 1);
    let st = gpu.stream().clone();
    let p = Problem::new(AttnShape::new(1, hq, hkv, 1, ctx, d)?, Causal::BottomRight);
    let s = *p.shape();
    let (q, k, v, mut o) = dense_inputs(&st, &mut rng, &s)?;
    let codes = |rng: &mut StdRng| -> anyhow::Result<CudaSlice<u8>> {
        let host: Vec<u8> = (0..s.kv_elems())
            .map(|_| rng.random_range(0u8..0x7E) | (rng.random::<u8>() & 0x80))
            .collect();
        Ok(st.clone_htod(&host)?)
    };
    let (k8, v8) = (codes(&mut rng)?, codes(&mut rng)?);
    let scales = st.clone_htod(&vec![0.01f32; hkv])?;
    let mut rows = Vec::new();
    // The decode kernel (the default engine) with the heuristic's split count, then a sweep
    // of split counts; mma.sync's split entries with their heuristic for comparison.
    let engines: &[(Engine, Option<usize>)] = if sweep {
        &[
            (Engine::Auto, None),
            (Engine::Auto, Some(8)),
            (Engine::Auto, Some(16)),
            (Engine::Auto, Some(24)),
            (Engine::Auto, Some(32)),
            (Engine::MmaSync, None),
        ]
    } else {
        &[(Engine::Auto, None)]
    };
    let variants = [false, true]
        .into_iter()
        .flat_map(|fp8| engines.iter().map(move |&(e, n)| (fp8, e, n)));
    for (fp8, engine, splits) in variants {
        let options = ForwardOptions {
            splits,
            engine,
            ..ForwardOptions::default()
        };
        let mut kernel = String::new();
        let mut launch = |_: usize| -> anyhow::Result<()> {
            let info = if fp8 {
                gpu.forward_kv_fp8(
                    ForwardKvFp8 {
                        problem: &p,
                        q: Tensor::bhsd(&q, dims_q(&s)),
                        k: Tensor::contiguous(k8.as_view(), dims_kv(&s), Layout::Bhsd),
                        v: Tensor::contiguous(v8.as_view(), dims_kv(&s), Layout::Bhsd),
                        scales: KvScales {
                            k: scales.as_view(),
                            v: scales.as_view(),
                        },
                        o: TensorMut::bhsd(&mut o, dims_q(&s)),
                        lse: None,
                        options: options.clone(),
                    },
                    None,
                )?
            } else {
                gpu.forward(Forward {
                    problem: &p,
                    q: Tensor::bhsd(&q, dims_q(&s)),
                    k: Tensor::bhsd(&k, dims_kv(&s)),
                    v: Tensor::bhsd(&v, dims_kv(&s)),
                    o: TensorMut::bhsd(&mut o, dims_q(&s)),
                    lse: None,
                    options: options.clone(),
                })?
            };
            kernel = format!("{} ({} splits)", info.kernel, info.splits);
            Ok(())
        };
        let samples = time_samples(gpu, args, &mut launch)?;
        rows.push(Timed {
            name: format!(
                "{}{}{}",
                if fp8 { "E4M3 cache" } else { "f16 cache" },
                splits.map_or(String::new(), |n| format!(", {n} splits forced")),
                if engine == Engine::MmaSync {
                    ", mma.sync"
                } else {
                    ""
                }
            ),
            kernel,
            samples,
        });
    }
    {
        let src = randn(&st, &mut rng, 2 * s.kv_elems())?;
        let mut dst = st.alloc_zeros::<f16>(2 * s.kv_elems())?;
        let mut launch = |_: usize| -> anyhow::Result<()> {
            st.memcpy_dtod(&src, &mut dst)?;
            Ok(())
        };
        let samples = time_samples(gpu, args, &mut launch)?;
        rows.push(Timed {
            name: "device-to-device copy of the f16 cache's bytes (also writes them)".into(),
            kernel: "cuMemcpyDtoDAsync".into(),
            samples,
        });
    }
    report(
        &format!(
            "decode: 1 × {hq} / {hkv} heads × {ctx} keys, D {d}; time only (bytes differ per row)"
        ),
        &rows,
        1.0,
        "1/µs",
        json,
    )?;
    Ok(())
}

/// A decode step with attention sinks or ALiBi (gpt-oss's sinks and 128-key window layers;
/// 1 × 64 query heads / 8 KV heads × 8192 keys, D 64, f16), against the plain step, on the
/// default engine and on the engines `Engine::Auto` chose before sinks could split (and before
/// the decode kernel ran ALiBi).
fn decode_features(
    gpu: &Arc<FlashAttention>,
    args: &Args,
    json: &mut Vec<serde_json::Value>,
) -> anyhow::Result<()> {
    let (hq, hkv, ctx, d) = (64usize, 8usize, 8192usize, 64usize);
    let mut rng = StdRng::seed_from_u64(args.seed + 2);
    let st = gpu.stream().clone();
    let plain = Problem::new(AttnShape::new(1, hq, hkv, 1, ctx, d)?, Causal::BottomRight);
    let s = *plain.shape();
    let (q, k, v, mut o) = dense_inputs(&st, &mut rng, &s)?;
    let sinks: Vec<f32> = (0..hq).map(|_| rng.random_range(-2.0f32..2.0)).collect();
    let slopes: Vec<f32> = (0..hq)
        .map(|h| 2f32.powf(-8.0 * (h as f32 + 1.0) / hq as f32))
        .collect();
    let with_sinks = plain.clone().with_sinks(sinks.clone())?;
    let window_sinks = plain.clone().with_window(128, 0)?.with_sinks(sinks)?;
    let alibi = plain.clone().with_alibi(attn_ref::Alibi::PerHead(slopes))?;
    let hopper = Engine::Hopper(None);
    #[rustfmt::skip]
    let variants: Vec<(&str, &Problem, Engine, Option<usize>)> = vec![
        ("plain", &plain, Engine::Auto, None),
        ("sinks", &with_sinks, Engine::Auto, None),
        ("sinks, Hopper engine unsplit (Auto's old choice)", &with_sinks, hopper, Some(1)),
        ("sinks, mma.sync unsplit (the old mma.sync path)", &with_sinks, Engine::MmaSync, Some(1)),
        ("sinks + 128-key window", &window_sinks, Engine::Auto, None),
        ("ALiBi", &alibi, Engine::Auto, None),
        ("ALiBi, mma.sync split entries (Auto's previous choice)", &alibi, Engine::MmaSync, None),
        ("ALiBi, Hopper engine unsplit (Auto's old choice)", &alibi, hopper, Some(1)),
    ];
    let mut rows = Vec::new();
    for (name, p, engine, splits) in variants {
        let options = ForwardOptions {
            engine,
            splits,
            ..ForwardOptions::default()
        };
        let mut kernel = String::new();
        let mut launch = |_: usize| -> anyhow::Result<()> {
            let info = gpu.forward(Forward {
                problem: p,
                q: Tensor::bhsd(&q, dims_q(&s)),
                k: Tensor::bhsd(&k, dims_kv(&s)),
                v: Tensor::bhsd(&v, dims_kv(&s)),
                o: TensorMut::bhsd(&mut o, dims_q(&s)),
                lse: None,
                options: options.clone(),
            })?;
            kernel = format!("{} ({} splits)", info.kernel, info.splits);
            Ok(())
        };
        let samples = time_samples(gpu, args, &mut launch)?;
        rows.push(Timed {
            name: name.into(),
            kernel,
            samples,
        });
    }
    report(
        &format!(
            "decode with sinks / ALiBi: 1 × {hq} / {hkv} heads × {ctx} keys, D {d}, f16; time only"
        ),
        &rows,
        1.0,
        "1/µs",
        json,
    )?;
    Ok(())
}
