//! Varlen batches, KV caches with per-sequence lengths and paged KV caches
//! ([`FlashAttention::forward_sequences`]) against the f64 reference, one sequence at a time:
//! each sequence is the dense problem of its own lengths (`Problem::sequence`, the definition
//! attn-ref's varlen and paged references use), checked with attn-oracle's rule on its rows of
//! the packed output. Cases: empty sequences, sequences with rows but no keys, lengths that are
//! no multiple of any tile, Sq ≠ Sk both ways, GQA, both causal alignments, pages that
//! straddle tiles and lie anywhere in the cache, the serving features, f16 and bf16.
//!
//! Rows a launch must not read (cache rows past `seqused_k`, pages no sequence uses) hold NaN,
//! so reading one would show in the output; outputs start NaN, so a row left unwritten shows
//! too.

use attn_kernels::{
    Engine, FlashAttention, Forward, ForwardKvFp8, ForwardOptions, Indices, KernelError, KeyRows,
    KvScales, Layout, QueryRows, Sequences, StorageType, Tensor, TensorMut,
};
use attn_quant::Fp8Format;
use attn_ref::{
    reference::{self, emulate},
    Alibi, AttnShape, Causal, Dtype, Element, Features, Problem,
};
use half::{bf16, f16};
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use rand_distr::StandardNormal;

use crate::{check_output, emu_spec_for, features::alibi_slopes, fresh_seed, gpu, randn, to_f32s};

/// How a case stores its keys.
#[derive(Debug, Clone, Copy)]
enum Keys {
    /// `[B, Hkv, cap, D]` with `seqused_k` (a KV cache with spare capacity).
    Dense { cap: usize },
    /// `[total_k, Hkv, D]` with `cu_seqlens_k`.
    Packed,
    /// A cache of `num_blocks` pages of `page_size` keys, pages shuffled.
    Paged { page_size: usize, num_blocks: usize },
}

#[derive(Debug, Clone)]
struct SeqCase {
    heads: (usize, usize),
    d: usize,
    causal: Causal,
    features: Features,
    /// Query rows per sequence; all equal unless `q_packed`.
    q_lens: Vec<usize>,
    /// Keys per sequence.
    k_lens: Vec<usize>,
    q_packed: bool,
    keys: Keys,
    /// The engine asked for (`Auto` takes the Hopper kernel on sm_90 for layouts whose
    /// longest query sequence exceeds 64 rows).
    engine: Engine,
    /// K/V as an E4M3 cache ([`FlashAttention::forward_kv_fp8`]) instead of in Q's type.
    kv8: Option<KvScaleKind>,
    /// Key splits asked for (`None`: the heuristic).
    splits: Option<usize>,
    /// A power of two the standard-normal queries are multiplied by and the keys (and an
    /// E4M3 cache's K scales) divided by, so the scores keep their size (1 almost everywhere;
    /// the decode kernel's E4M3 tensor-core stage rescales a bf16 Q into f16's range, tested
    /// with queries far outside it).
    q_gain: f32,
}

/// How an E4M3 cache's scales are laid out.
#[derive(Debug, Clone, Copy, PartialEq)]
enum KvScaleKind {
    /// One scale per KV head (different for K and V).
    PerHead,
    /// One scale for the whole cache.
    PerTensor,
}

/// Powers of two, so that `decode(code) · scale` is exact in f16 and bf16 and the reference
/// can take the dequantized cache in the case's own type: per head 2^-(h mod 3) for K and
/// 2^-(h mod 3) / 2 for V (so swapping K's and V's scales, or heads, shows), or 2^-1 / 2^-2
/// for the whole cache.
fn kv8_scales(kind: KvScaleKind, hkv: usize) -> (Vec<f32>, Vec<f32>) {
    match kind {
        KvScaleKind::PerHead => (
            (0..hkv).map(|h| 0.5f32.powi((h % 3) as i32)).collect(),
            (0..hkv).map(|h| 0.5f32.powi((h % 3) as i32 + 1)).collect(),
        ),
        KvScaleKind::PerTensor => (vec![0.5], vec![0.25]),
    }
}

/// `x` through an E4M3 cache of scale `s`: decode(encode(x / s)) · s, exact in T.
fn through_e4m3<T: StorageType>(x: T, s: f32) -> T {
    let code = Fp8Format::E4M3.encode_f32(x.to_f32() / s);
    T::from_f32(Fp8Format::E4M3.decode(code) * s)
}

/// The engines a case runs on: both kernels on an sm_90 device, mma.sync elsewhere.
fn engines(gpu: &FlashAttention) -> Vec<Engine> {
    if gpu.compute_capability() == (9, 0) {
        vec![Engine::MmaSync, Engine::Hopper(None)]
    } else {
        vec![Engine::MmaSync]
    }
}

/// [`engines`] plus, on sm_90, the Hopper tiles with `_seq` entries for head dim `d` (D = 128's
/// wide ping-pong tile, which an unpinned launch takes only from 1024 keys on, without a
/// mask); it has `_feat` entries too, so the cases with features run it as well.
fn engines_for(gpu: &FlashAttention, d: usize) -> Vec<Engine> {
    let mut v = engines(gpu);
    if gpu.compute_capability() == (9, 0) {
        if let Ok(bucket) = attn_kernels::bucket_for(d) {
            let tile = attn_kernels::catalog::hopper_seq_tile(bucket);
            v.extend(tile.map(|t| Engine::Hopper(Some(t))));
        }
    }
    v
}

/// Everything one sequence needs for its reference: `[1, H, S, D]` Q, K, V.
struct SeqData<T> {
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
}

fn prefix(lens: &[usize]) -> Vec<i32> {
    let mut cu = vec![0i32];
    for &l in lens {
        cu.push(cu.last().copied().unwrap_or(0) + l as i32);
    }
    cu
}

/// Runs one case and checks every sequence; `Err` lists what failed.
fn run_case<T: StorageType + Element>(
    gpu: &FlashAttention,
    c: &SeqCase,
    dtype: Dtype,
    rng: &mut StdRng,
) -> Result<String, String> {
    let (hq, hkv) = c.heads;
    let d = c.d;
    let b = c.q_lens.len();
    let nan = T::from_f32(f32::NAN);
    let mut seqs: Vec<SeqData<T>> = (0..b)
        .map(|i| SeqData {
            q: (0..hq * c.q_lens[i] * d)
                .map(|_| T::from_f32(rng.sample::<f32, _>(StandardNormal) * c.q_gain))
                .collect(),
            // K shrinks by the queries' gain, so the scores (and the f32 LSE) stay O(1).
            k: (0..hkv * c.k_lens[i] * d)
                .map(|_| T::from_f32(rng.sample::<f32, _>(StandardNormal) / c.q_gain))
                .collect(),
            v: randn(rng, hkv * c.k_lens[i] * d),
        })
        .collect();
    // An E4M3 cache: the reference sees the cache's dequantized values.
    let (k_scales, v_scales) = c.kv8.map_or((vec![], vec![]), |kind| kv8_scales(kind, hkv));
    let k_scales: Vec<f32> = k_scales.iter().map(|s| s / c.q_gain).collect();
    let head_scale = |scales: &[f32], h: usize| scales[if scales.len() == 1 { 0 } else { h }];
    if c.kv8.is_some() {
        for (i, s) in seqs.iter_mut().enumerate() {
            let per_head = c.k_lens[i] * d;
            for (j, (k, v)) in s.k.iter_mut().zip(s.v.iter_mut()).enumerate() {
                let h = j / per_head.max(1);
                *k = through_e4m3(*k, head_scale(&k_scales, h));
                *v = through_e4m3(*v, head_scale(&v_scales, h));
            }
        }
    }
    let max_q = c.q_lens.iter().copied().max().unwrap_or(0).max(1);
    let max_k = c.k_lens.iter().copied().max().unwrap_or(0).max(1);
    // Queries: packed [total_q, Hq, D] or dense [B, Hq, Sq, D].
    let cu_q = prefix(&c.q_lens);
    let total_q = *cu_q.last().unwrap() as usize;
    let (q_host, q_dims, q_layout) = if c.q_packed {
        let mut q = vec![nan; total_q * hq * d];
        for (i, s) in seqs.iter().enumerate() {
            for h in 0..hq {
                for r in 0..c.q_lens[i] {
                    let dst = ((cu_q[i] as usize + r) * hq + h) * d;
                    q[dst..dst + d].copy_from_slice(&s.q[(h * c.q_lens[i] + r) * d..][..d]);
                }
            }
        }
        (q, [1, hq, total_q, d], Layout::Bshd)
    } else {
        let sq = c.q_lens[0];
        let q: Vec<T> = seqs.iter().flat_map(|s| s.q.iter().copied()).collect();
        (q, [b, hq, sq, d], Layout::Bhsd)
    };
    let kv_len_template = match c.keys {
        Keys::Dense { cap } => cap,
        _ => max_k,
    };
    let template = Problem::new(
        AttnShape::new(
            b,
            hq,
            hkv,
            if c.q_packed { max_q } else { c.q_lens[0] },
            kv_len_template,
            d,
        )
        .map_err(|e| e.to_string())?,
        c.causal,
    )
    .with_features(c.features.clone())
    .map_err(|e| e.to_string())?;
    // Keys and values in the case's storage; unused rows and pages NaN.
    let mut table = Vec::new();
    let cu_k = prefix(&c.k_lens);
    let (k_host, v_host, k_dims, k_layout) = match c.keys {
        Keys::Dense { cap } => {
            let mut k = vec![nan; b * hkv * cap * d];
            let mut v = k.clone();
            for (i, s) in seqs.iter().enumerate() {
                for h in 0..hkv {
                    for r in 0..c.k_lens[i] {
                        let dst = ((i * hkv + h) * cap + r) * d;
                        let src = (h * c.k_lens[i] + r) * d;
                        k[dst..dst + d].copy_from_slice(&s.k[src..src + d]);
                        v[dst..dst + d].copy_from_slice(&s.v[src..src + d]);
                    }
                }
            }
            (k, v, [b, hkv, cap, d], Layout::Bhsd)
        }
        Keys::Packed => {
            let total_k = *cu_k.last().unwrap() as usize;
            let mut k = vec![nan; total_k.max(1) * hkv * d];
            let mut v = k.clone();
            for (i, s) in seqs.iter().enumerate() {
                for h in 0..hkv {
                    for r in 0..c.k_lens[i] {
                        let dst = ((cu_k[i] as usize + r) * hkv + h) * d;
                        let src = (h * c.k_lens[i] + r) * d;
                        k[dst..dst + d].copy_from_slice(&s.k[src..src + d]);
                        v[dst..dst + d].copy_from_slice(&s.v[src..src + d]);
                    }
                }
            }
            (k, v, [1, hkv, total_k, d], Layout::Bshd)
        }
        Keys::Paged {
            page_size,
            num_blocks,
        } => {
            let max_blocks = max_k.div_ceil(page_size);
            let mut pages: Vec<i32> = (0..num_blocks as i32).collect();
            pages.shuffle(rng);
            assert!(
                b * max_blocks <= num_blocks,
                "the case's cache is too small"
            );
            // Unused table slots point at page 0 or past the cache: never read.
            table = vec![0i32; b * max_blocks];
            let mut next = 0;
            let mut k = vec![nan; num_blocks * page_size * hkv * d];
            let mut v = k.clone();
            for (i, s) in seqs.iter().enumerate() {
                for slot in 0..max_blocks {
                    table[i * max_blocks + slot] = if slot * page_size < c.k_lens[i] {
                        next += 1;
                        pages[next - 1]
                    } else if slot % 2 == 0 {
                        -7
                    } else {
                        num_blocks as i32 + 1000
                    };
                }
                for h in 0..hkv {
                    for r in 0..c.k_lens[i] {
                        let page = table[i * max_blocks + r / page_size] as usize;
                        let dst = ((page * page_size + r % page_size) * hkv + h) * d;
                        let src = (h * c.k_lens[i] + r) * d;
                        k[dst..dst + d].copy_from_slice(&s.k[src..src + d]);
                        v[dst..dst + d].copy_from_slice(&s.v[src..src + d]);
                    }
                }
            }
            (k, v, [num_blocks, hkv, page_size, d], Layout::Bshd)
        }
    };
    let used: Vec<i32> = c.k_lens.iter().map(|&l| l as i32).collect();
    // E4M3 codes of the laid-out cache: the KV head of element j follows from the layout.
    // Rows no launch may read hold the largest code (448 · scale), which would show in O.
    let head_of = |j: usize| match c.keys {
        Keys::Dense { cap } => j / (cap * d) % hkv,
        _ => j / d % hkv,
    };
    let codes = |x: &[T], scales: &[f32]| -> Vec<u8> {
        x.iter()
            .enumerate()
            .map(|(j, v)| {
                let f = v.to_f32();
                if f.is_nan() {
                    0x7E
                } else {
                    Fp8Format::E4M3.encode_f32(f / head_scale(scales, head_of(j)))
                }
            })
            .collect()
    };
    let (k_codes, v_codes) = if c.kv8.is_some() {
        (codes(&k_host, &k_scales), codes(&v_host, &v_scales))
    } else {
        (vec![0u8], vec![0u8])
    };
    let st = gpu.stream();
    let up = |x: &[i32]| st.clone_htod(x).map_err(|e| e.to_string());
    let dq = st.clone_htod(&q_host).map_err(|e| e.to_string())?;
    let dk = st.clone_htod(&k_host).map_err(|e| e.to_string())?;
    let dv = st.clone_htod(&v_host).map_err(|e| e.to_string())?;
    let mut o = st
        .clone_htod(&vec![nan; q_host.len()])
        .map_err(|e| e.to_string())?;
    let lse_len = if c.q_packed {
        hq * total_q
    } else {
        b * hq * c.q_lens[0]
    };
    let mut lse = st
        .clone_htod(&vec![f32::NAN; lse_len])
        .map_err(|e| e.to_string())?;
    let (dcu_q, dcu_k, dtable, dused) = (
        up(&cu_q)?,
        up(&cu_k)?,
        up(if table.is_empty() { &[0] } else { &table })?,
        up(&used)?,
    );
    let seq_layout = Sequences {
        queries: if c.q_packed {
            QueryRows::Packed {
                cu_seqlens: Indices::new(dcu_q.as_view()).with_host(&cu_q),
            }
        } else {
            QueryRows::Dense
        },
        keys: match c.keys {
            Keys::Dense { .. } => KeyRows::Dense,
            Keys::Packed => KeyRows::Packed {
                cu_seqlens: Indices::new(dcu_k.as_view()).with_host(&cu_k),
            },
            Keys::Paged { .. } => KeyRows::Paged {
                block_table: Indices::new(dtable.as_view()).with_host(&table),
            },
        },
        seqused_k: match c.keys {
            Keys::Packed => None,
            _ => Some(Indices::new(dused.as_view()).with_host(&used)),
        },
    };
    let options = ForwardOptions {
        engine: c.engine,
        splits: c.splits,
        ..ForwardOptions::default()
    };
    let launch = if c.kv8.is_some() {
        let (dkc, dvc) = (
            st.clone_htod(&k_codes).map_err(|e| e.to_string())?,
            st.clone_htod(&v_codes).map_err(|e| e.to_string())?,
        );
        let (dks, dvs) = (
            st.clone_htod(&k_scales).map_err(|e| e.to_string())?,
            st.clone_htod(&v_scales).map_err(|e| e.to_string())?,
        );
        gpu.forward_kv_fp8(
            ForwardKvFp8 {
                problem: &template,
                q: Tensor::contiguous(dq.as_view(), q_dims, q_layout),
                k: Tensor::contiguous(dkc.as_view(), k_dims, k_layout),
                v: Tensor::contiguous(dvc.as_view(), k_dims, k_layout),
                scales: KvScales {
                    k: dks.as_view(),
                    v: dvs.as_view(),
                },
                o: TensorMut::contiguous(o.as_view_mut(), q_dims, q_layout),
                lse: Some(lse.as_view_mut()),
                options,
            },
            Some(seq_layout),
        )
    } else {
        gpu.forward_sequences(
            Forward {
                problem: &template,
                q: Tensor::contiguous(dq.as_view(), q_dims, q_layout),
                k: Tensor::contiguous(dk.as_view(), k_dims, k_layout),
                v: Tensor::contiguous(dv.as_view(), k_dims, k_layout),
                o: TensorMut::contiguous(o.as_view_mut(), q_dims, q_layout),
                lse: Some(lse.as_view_mut()),
                options,
            },
            seq_layout,
        )
    }
    .map_err(|e| format!("launch: {e}"))?;
    // A pinned split count is the Hopper launch's (the sequence and feature entries split).
    if let (Some(n), true) = (c.splits, launch.kernel.starts_with("attn_fwdh_")) {
        if launch.splits != n {
            return Err(format!(
                "{}: {} splits, asked {n}",
                launch.kernel, launch.splits
            ));
        }
    }
    let o: Vec<T> = st.clone_dtoh(&o).map_err(|e| e.to_string())?;
    let lse: Vec<f32> = st.clone_dtoh(&lse).map_err(|e| e.to_string())?;
    let mut failures = Vec::new();
    for (i, s) in seqs.iter().enumerate() {
        let (sq, sk) = (c.q_lens[i], c.k_lens[i]);
        if sq == 0 {
            continue;
        }
        // This sequence's O as [1, Hq, sq, D] and LSE [1, Hq, sq].
        let mut oi = Vec::with_capacity(hq * sq * d);
        let mut li = Vec::with_capacity(hq * sq);
        for h in 0..hq {
            for r in 0..sq {
                let (row, lrow) = if c.q_packed {
                    let g = cu_q[i] as usize + r;
                    ((g * hq + h) * d, h * total_q + g)
                } else {
                    (((i * hq + h) * sq + r) * d, (i * hq + h) * sq + r)
                };
                oi.extend(o[row..row + d].iter().map(|x| x.to_f32()));
                li.push(lse[lrow]);
            }
        }
        if sk == 0 {
            // No keys: O = 0 and LSE = −∞ (with or without a sink).
            if oi.iter().any(|&x| x != 0.0) || li.iter().any(|&x| x != f32::NEG_INFINITY) {
                failures.push(format!("sequence {i} ({sq}×0): O must be 0 and LSE −∞"));
            }
            continue;
        }
        let p = template.sequence(i, sq, sk).map_err(|e| e.to_string())?;
        let r = reference::forward(&p, &s.q, &s.k, &s.v).map_err(|e| e.to_string())?;
        let spec = emu_spec_for(&launch, d, c.kv8.is_some(), dtype)?;
        let emu = emulate::forward_emulated_spec(
            &p,
            &to_f32s(&s.q),
            &to_f32s(&s.k),
            &to_f32s(&s.v),
            &spec,
        )
        .map_err(|e| e.to_string())?;
        if let Err(e) = check_output(&p, &oi, &li, &r, &emu, dtype.into()) {
            failures.push(format!("sequence {i} ({sq}×{sk}): {e}"));
        }
    }
    if failures.is_empty() {
        Ok(launch.kernel)
    } else {
        Err(format!(
            "{} ({}): {}",
            launch.kernel,
            dtype.as_str(),
            failures.join("; ")
        ))
    }
}

/// The suffix of the Hopper entry that runs `c`: `_seq` (sequence layouts alone) in a tile
/// with those entries, pinned or the unpinned choice, else `_feat`.
fn hopper_suffix(c: &SeqCase) -> &'static str {
    use attn_kernels::catalog::{hopper_seq_default_tile, hopper_seq_tile};
    let Ok(bucket) = attn_kernels::bucket_for(c.d) else {
        return "_feat";
    };
    let tile = match c.engine {
        Engine::Hopper(Some(t)) => Some(t),
        _ => hopper_seq_default_tile(
            bucket,
            c.k_lens.iter().copied().max().unwrap_or(0),
            c.causal != Causal::None,
            match c.keys {
                Keys::Paged { page_size, .. } => Some(page_size),
                _ => None,
            },
            false,
        ),
    };
    let seq_tile = tile.is_some_and(|t| hopper_seq_tile(bucket) == Some(t));
    if seq_tile && c.features.is_empty() {
        "_seq"
    } else {
        "_feat"
    }
}

/// Whether a Hopper launch of `c` ran the paged caches' tile exactly when it should: unpinned,
/// without softcap or a window, over pages its TMA boxes read taller than the feature tile's
/// (`catalog::hopper_paged_tile`, D = 256). True for buckets without such a tile.
fn paged_tile_ran(c: &SeqCase, kernel: &str) -> bool {
    use attn_kernels::catalog::{hopper_feature_tile, hopper_paged_tile, paged_box_rows};
    let Ok(bucket) = attn_kernels::bucket_for(c.d) else {
        return true;
    };
    let (Some(paged), Some(feature)) = (hopper_paged_tile(bucket), hopper_feature_tile(bucket))
    else {
        return true;
    };
    let want = match (c.keys, c.engine) {
        (_, Engine::Hopper(Some(t))) => t == paged,
        // Softcap and windows keep the feature tile (src/hopper.rs `plan_hopper`).
        (Keys::Paged { page_size, .. }, _)
            if c.features.softcap.is_none() && c.features.window.is_none() =>
        {
            paged_box_rows(paged.block_n, page_size) > paged_box_rows(feature.block_n, page_size)
        }
        _ => false,
    };
    kernel.contains(&format!("_{}_", paged.name())) == want
}

fn run_dtypes(gpu: &FlashAttention, c: &SeqCase, rng: &mut StdRng, failures: &mut Vec<String>) {
    for dtype in [Dtype::F16, Dtype::Bf16] {
        let r = match dtype {
            Dtype::F16 => run_case::<f16>(gpu, c, dtype, rng),
            _ => run_case::<bf16>(gpu, c, dtype, rng),
        };
        match r {
            Ok(kernel) if runs_decode(c) => {
                if !kernel.starts_with("attn_dec_") || kernel.ends_with("_kv8") != c.kv8.is_some() {
                    failures.push(format!("{c:?}: ran {kernel}, not the decode kernel"));
                }
            }
            Ok(kernel) => {
                // The engine that ran: Hopper when asked, and Auto's choice on sm_90.
                let max_q = c.q_lens.iter().copied().max().unwrap_or(0);
                let hopper = matches!(c.engine, Engine::Hopper(_))
                    || (c.engine == Engine::Auto
                        && c.kv8.is_none()
                        && gpu.compute_capability() == (9, 0)
                        && (max_q > 64 || short_causal_splits(gpu, c)));
                // The Hopper engine reads every sequence layout in its `_seq` and feature
                // entries.
                let want = match (c.keys, c.kv8.is_some()) {
                    _ if hopper => hopper_suffix(c),
                    (Keys::Paged { .. }, false) => "_paged",
                    (Keys::Paged { .. }, true) => "_paged_kv8",
                    (_, false) => "_feat",
                    (_, true) => "_feat_kv8",
                };
                let name = kernel.strip_suffix("_split").unwrap_or(&kernel);
                if !name.ends_with(want) {
                    failures.push(format!("{c:?}: ran {kernel}, not a `{want}` entry"));
                }
                if hopper && !paged_tile_ran(c, &kernel) {
                    failures.push(format!(
                        "{c:?}: ran {kernel}, not the paged caches' tile choice"
                    ));
                }
                if hopper != kernel.starts_with("attn_fwdh_") {
                    failures.push(format!(
                        "{:?}: ran {kernel} (Hopper expected: {hopper})",
                        c.engine
                    ));
                }
            }
            Err(e) => failures.push(format!(
                "{:?} D {} {:?} q_packed {} {:?}: {e}",
                c.causal, c.d, c.keys, c.q_packed, c.features
            )),
        }
    }
}

/// Whether `Engine::Auto` sends a launch of at most 64 rows per sequence to the Hopper
/// engine (src/hopper.rs `short_causal_split`): causal, and the Hopper sequence
/// entries' heuristic would split its B · Hq items over the keys the launch can hold (one
/// wave of one CTA per SM, 8 tiles of 128 keys a split).
fn short_causal_splits(gpu: &FlashAttention, c: &SeqCase) -> bool {
    let keys = match c.keys {
        Keys::Dense { cap } => cap,
        Keys::Packed => c.k_lens.iter().sum(),
        Keys::Paged { page_size, .. } => {
            c.k_lens
                .iter()
                .copied()
                .max()
                .unwrap_or(0)
                .div_ceil(page_size)
                * page_size
        }
    };
    let items = c.q_lens.len() * c.heads.0;
    let splits = (gpu.sm_count() / items.max(1)).min(keys.div_ceil(128) / 8);
    c.causal != Causal::None && items < gpu.sm_count() && splits > 1
}

/// Whether the launcher runs `c` on the decode kernel: `Auto` or `Decode`, dense queries, and
/// at most 8 unmasked rows per CTA after GQA packing (one query row per head; a single row's
/// bottom-right mask hides nothing); with sinks, ALiBi or a window, one position per head
/// (GQA groups above 8 then stay unpacked, one row per CTA) — src/decode.rs's rule.
fn runs_decode(c: &SeqCase) -> bool {
    if !matches!(c.engine, Engine::Auto | Engine::Decode) || c.q_packed {
        return false;
    }
    let f = &c.features;
    let per_head = f.alibi.is_some() || f.sinks.is_some() || f.window.is_some();
    let (hq, hkv) = c.heads;
    let group = hq / hkv;
    let sq = c.q_lens[0];
    let packs = sq == 1 && group > 1 && c.causal != Causal::TopLeft;
    let rows = if packs && (group <= 8 || !per_head) {
        group
    } else {
        sq
    };
    let unmasked =
        c.causal == Causal::None || packs || (sq == 1 && c.causal == Causal::BottomRight);
    unmasked && rows <= 8 && (!per_head || sq == 1)
}

/// The serving features every matrix also runs with: all four at once.
fn all_features(b: usize, hq: usize) -> Features {
    Features {
        window: Some((40, 7)),
        softcap: Some(6.0),
        alibi: Some(Alibi::PerBatchHead(
            (0..b).flat_map(|_| alibi_slopes(hq)).collect(),
        )),
        sinks: Some((0..hq).map(|h| h as f32 * 0.5 - 1.0).collect()),
    }
}

const CAUSALS: [Causal; 3] = [Causal::None, Causal::TopLeft, Causal::BottomRight];

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_seqs_varlen() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    // Empty, one-row, tails, Sq > Sk and Sq < Sk, a sequence with rows and no keys.
    let q_lens = vec![0, 1, 77, 200, 130, 64, 3];
    let k_lens = vec![5, 1, 300, 200, 0, 81, 250];
    for d in [64, 128, 40, 256] {
        for engine in engines_for(&gpu, d).into_iter().chain([Engine::Auto]) {
            for causal in CAUSALS {
                for features in [Features::default(), all_features(q_lens.len(), 4)] {
                    let c = SeqCase {
                        heads: (4, 2),
                        d,
                        causal,
                        features,
                        q_lens: q_lens.clone(),
                        k_lens: k_lens.clone(),
                        q_packed: true,
                        keys: Keys::Packed,
                        engine,
                        kv8: None,
                        splits: None,
                        q_gain: 1.0,
                    };
                    run_dtypes(&gpu, &c, &mut rng, &mut failures);
                }
            }
        }
    }
    // Dense queries over packed keys, with keys and queries past 192-row blocks.
    for d in [64, 128] {
        for engine in engines_for(&gpu, d) {
            let c = SeqCase {
                heads: (4, 4),
                d,
                causal: Causal::BottomRight,
                features: Features::default(),
                q_lens: vec![333; 3],
                k_lens: vec![500, 333, 401],
                q_packed: false,
                keys: Keys::Packed,
                engine,
                kv8: None,
                splits: None,
                q_gain: 1.0,
            };
            run_dtypes(&gpu, &c, &mut rng, &mut failures);
        }
    }
    // Over 1024 keys without a mask an unpinned D = 128 launch takes the wide tile's `_seq`
    // entries (hopper_suffix checks which ran); a short sequence and one past it in the same
    // batch, and GQA.
    let mut engines: Vec<Engine> = engines(&gpu).into_iter().skip(1).collect();
    engines.push(Engine::Auto);
    for engine in engines {
        for keys in [Keys::Packed, Keys::Dense { cap: 1600 }] {
            let c = SeqCase {
                heads: (8, 2),
                d: 128,
                causal: Causal::None,
                features: Features::default(),
                q_lens: vec![700, 1300, 5],
                k_lens: vec![1100, 1500, 20],
                q_packed: true,
                keys,
                engine,
                kv8: None,
                splits: None,
                q_gain: 1.0,
            };
            run_dtypes(&gpu, &c, &mut rng, &mut failures);
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_seqs_paged() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let k_lens = vec![100, 0, 333, 16, 47];
    // D = 192: three 64-column sub-tiles per row. D = 256: the 80-key tile, which pages of 16
    // and 48 cut into 16-row boxes, and at pages of 256 (which its tiles straddle) the 64-key
    // paged tile's 64-row boxes (`catalog::hopper_paged_tile`); `paged_tile_ran` checks which.
    for d in [64, 128, 96, 192, 256] {
        for page_size in [16, 48, 256] {
            for causal in CAUSALS {
                // Decode (one query), a chunk of new queries, and packed queries.
                for (q_lens, q_packed) in [
                    (vec![1; 5], false),
                    (vec![37; 5], false),
                    (vec![3, 0, 50, 16, 1], true),
                ] {
                    let features = if q_lens[0] == 37 {
                        all_features(5, 8)
                    } else {
                        Features::default()
                    };
                    // Decode runs on the decode kernel under Auto; mma.sync's paged
                    // entries run it too, and so does the Hopper engine (on sm_90), whose
                    // key tiles arrive in one TMA box per page (16 and 48: several boxes a
                    // tile; 256: one).
                    let mut engines = engines_for(&gpu, d);
                    engines.push(Engine::Auto);
                    for engine in engines {
                        let c = SeqCase {
                            heads: (8, 2),
                            d,
                            causal,
                            features: features.clone(),
                            q_lens: q_lens.clone(),
                            k_lens: k_lens.clone(),
                            q_packed,
                            keys: Keys::Paged {
                                page_size,
                                num_blocks: 5 * 333usize.div_ceil(page_size) + 3,
                            },
                            engine,
                            kv8: None,
                            splits: None,
                            q_gain: 1.0,
                        };
                        run_dtypes(&gpu, &c, &mut rng, &mut failures);
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_seqs_kv_cache_lengths() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    // The cache rows past seqused_k are NaN: the Hopper kernel must clear them from its last
    // V tile (its TMA loads whole tiles of the cache).
    for d in [64, 128] {
        for engine in engines_for(&gpu, d).into_iter().chain([Engine::Auto]) {
            for causal in CAUSALS {
                for sq in [1, 19, 150] {
                    let c = SeqCase {
                        heads: (6, 3),
                        d,
                        causal,
                        features: if sq == 150 {
                            all_features(4, 6)
                        } else {
                            Features::default()
                        },
                        q_lens: vec![sq; 4],
                        k_lens: vec![256, 10, 0, 129],
                        q_packed: false,
                        keys: Keys::Dense { cap: 256 },
                        engine,
                        kv8: None,
                        splits: None,
                        q_gain: 1.0,
                    };
                    run_dtypes(&gpu, &c, &mut rng, &mut failures);
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// An E4M3 KV cache ([`FlashAttention::forward_kv_fp8`]) in every layout: dense caches with
/// `seqused_k`, packed (varlen) and paged keys; decode (one row, GQA-packed, split over the
/// keys) and prefill, all three masks, the serving features, per-head and per-cache scales,
/// D 64/128/256 and a D of no bucket (96 → the 128 bucket's columns past D), f16 and bf16
/// queries. The reference runs on the cache's dequantized values.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_seqs_kv_fp8() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for d in [64, 128, 96, 256] {
        for kind in [KvScaleKind::PerHead, KvScaleKind::PerTensor] {
            for causal in CAUSALS {
                // Decode over a dense cache: 6 CTAs after GQA packing, so the keys split
                // (mma.sync's general split entries; Auto runs the decode kernel).
                for engine in [Engine::MmaSync, Engine::Auto] {
                    let decode = SeqCase {
                        heads: (8, 2),
                        d,
                        causal,
                        features: Features::default(),
                        q_lens: vec![1; 3],
                        k_lens: vec![1500, 777, 1],
                        q_packed: false,
                        keys: Keys::Dense { cap: 1536 },
                        engine,
                        kv8: Some(kind),
                        splits: None,
                        q_gain: 1.0,
                    };
                    run_dtypes(&gpu, &decode, &mut rng, &mut failures);
                }
                // Varlen prefill over packed keys, with every feature.
                let q_lens = vec![0, 1, 77, 130, 3];
                let k_lens = vec![5, 1, 300, 0, 250];
                let prefill = SeqCase {
                    heads: (4, 2),
                    d,
                    causal,
                    features: all_features(q_lens.len(), 4),
                    q_lens,
                    k_lens,
                    q_packed: true,
                    keys: Keys::Packed,
                    engine: Engine::Auto,
                    kv8: Some(kind),
                    splits: None,
                    q_gain: 1.0,
                };
                run_dtypes(&gpu, &prefill, &mut rng, &mut failures);
                // Paged decode, pages straddling tiles; with a window and softcap (no
                // sinks, so it may split). Both engines, as above.
                for engine in [Engine::MmaSync, Engine::Auto] {
                    let paged = SeqCase {
                        heads: (8, 2),
                        d,
                        causal,
                        features: Features {
                            window: Some((300, 0)),
                            softcap: Some(8.0),
                            ..Features::default()
                        },
                        q_lens: vec![1; 4],
                        k_lens: vec![900, 17, 0, 1200],
                        q_packed: false,
                        keys: Keys::Paged {
                            page_size: 48,
                            num_blocks: 4 * 1200usize.div_ceil(48) + 3,
                        },
                        engine,
                        kv8: Some(kind),
                        splits: None,
                        q_gain: 1.0,
                    };
                    run_dtypes(&gpu, &paged, &mut rng, &mut failures);
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// The decode kernel ([`Engine::Decode`], kernels/decode_kernel.cuh) against the reference:
/// one query row per head (MHA: 1 row per CTA; GQA groups of 3, 4 and 8 packed as 4-, 4- and
/// 8-row CTAs), two rows without a mask, f16/bf16 and E4M3 caches, dense caches with
/// `seqused_k`, packed keys and paged caches (pages of 16 and 48 keys), empty and one-key
/// sequences, the split heuristic, no split and forced splits, softcap, a window on one row,
/// and ALiBi ([Hq] and [B, Hq] slopes) with sinks or a window on GQA-packed rows. Unused cache
/// rows are NaN and outputs start NaN (as in every case here).
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_seqs_decode() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let k_lens = vec![2000, 0, 1, 333, 1024];
    let cap = 2048;
    let keys_of = |i: usize| match i {
        0 => Keys::Dense { cap },
        1 => Keys::Packed,
        2 => Keys::Paged {
            page_size: 16,
            num_blocks: 5 * cap / 16 + 3,
        },
        _ => Keys::Paged {
            page_size: 48,
            num_blocks: 5 * cap.div_ceil(48) + 3,
        },
    };
    // 112: a head dimension below its bucket (128), whose E4M3 rows end mid-chunk pair.
    for d in [128, 64, 256, 96, 32, 112] {
        let kv8s = if d == 128 {
            vec![
                None,
                Some(KvScaleKind::PerHead),
                Some(KvScaleKind::PerTensor),
            ]
        } else {
            vec![None, Some(KvScaleKind::PerHead)]
        };
        for kv8 in kv8s {
            for heads in [(16, 16), (8, 2), (16, 2), (6, 2)] {
                for ki in 0..4 {
                    let c = SeqCase {
                        heads,
                        d,
                        causal: if ki % 2 == 0 {
                            Causal::BottomRight
                        } else {
                            Causal::None
                        },
                        features: Features::default(),
                        q_lens: vec![1; k_lens.len()],
                        k_lens: k_lens.clone(),
                        q_packed: false,
                        keys: keys_of(ki),
                        engine: Engine::Decode,
                        kv8,
                        splits: None,
                        q_gain: 1.0,
                    };
                    run_dtypes(&gpu, &c, &mut rng, &mut failures);
                }
            }
            // Split counts: none, odd, more splits than key stages of the short sequences.
            for splits in [1, 5, 32] {
                let c = SeqCase {
                    heads: (8, 2),
                    d,
                    causal: Causal::BottomRight,
                    features: Features::default(),
                    q_lens: vec![1; k_lens.len()],
                    k_lens: k_lens.clone(),
                    q_packed: false,
                    keys: keys_of(splits % 4),
                    engine: Engine::Decode,
                    kv8,
                    splits: Some(splits),
                    q_gain: 1.0,
                };
                run_dtypes(&gpu, &c, &mut rng, &mut failures);
            }
            // Two rows per head, no mask; softcap; a window over one row; ALiBi ([B, Hq]
            // slopes) with sinks, and ALiBi with a window and softcap (GQA groups of 4 and 3,
            // packed: each row reads its query head's slope and sink).
            // Each sequence its own slopes: 0.5×, 1×, 1.5×, … the per-head ones.
            let per_batch_slopes = (0..k_lens.len()).flat_map(|b| {
                alibi_slopes(8)
                    .into_iter()
                    .map(move |x| x * (b + 1) as f32 / 2.0)
            });
            let features = [
                (2, (4, 4), Features::default()),
                (
                    1,
                    (8, 2),
                    Features {
                        softcap: Some(5.0),
                        ..Features::default()
                    },
                ),
                (
                    1,
                    (8, 2),
                    Features {
                        window: Some((100, 0)),
                        softcap: Some(8.0),
                        ..Features::default()
                    },
                ),
                (
                    1,
                    (8, 2),
                    Features {
                        alibi: Some(Alibi::PerBatchHead(per_batch_slopes.collect())),
                        sinks: Some((0..8).map(|h| h as f32 * 0.7 - 2.0).collect()),
                        ..Features::default()
                    },
                ),
                (
                    1,
                    (6, 2),
                    Features {
                        alibi: Some(Alibi::PerHead(alibi_slopes(6))),
                        window: Some((300, 0)),
                        softcap: Some(8.0),
                        ..Features::default()
                    },
                ),
            ];
            for (sq, heads, features) in features {
                let c = SeqCase {
                    heads,
                    d,
                    causal: if sq == 1 {
                        Causal::BottomRight
                    } else {
                        Causal::None
                    },
                    features,
                    q_lens: vec![sq; k_lens.len()],
                    k_lens: k_lens.clone(),
                    q_packed: false,
                    keys: keys_of(sq + 1),
                    engine: Engine::Decode,
                    kv8,
                    splits: None,
                    q_gain: 1.0,
                };
                run_dtypes(&gpu, &c, &mut rng, &mut failures);
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// bf16 queries far outside f16's range (|q| up to ~5·10^5) and far below its normal range
/// (~10^-6), with keys scaled the other way, against E4M3 caches: the decode kernel's tensor-core stage runs both GEMMs in f16,
/// after scaling Q by a power of two, and must neither overflow nor lose the small queries'
/// bits. Buckets 32, 64, 128 and 256, and 96 and 160 on padded rows; 1-8 rows.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_seqs_decode_kv8_wide_bf16_queries() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for q_gain in [2f32.powi(17), 2f32.powi(-20)] {
        for d in [128, 64, 32, 96, 256, 160] {
            for (i, heads) in [(8, 2), (16, 2), (4, 4)].into_iter().enumerate() {
                let c = SeqCase {
                    heads,
                    d,
                    causal: Causal::None,
                    features: Features::default(),
                    q_lens: vec![1; 3],
                    k_lens: vec![700, 1, 2048],
                    q_packed: false,
                    keys: if i == 0 {
                        Keys::Dense { cap: 2048 }
                    } else {
                        Keys::Paged {
                            page_size: 16,
                            num_blocks: 3 * 2048 / 16 + 1,
                        }
                    },
                    engine: Engine::Decode,
                    kv8: Some(KvScaleKind::PerHead),
                    splits: None,
                    q_gain,
                };
                if let Err(e) = run_case::<bf16>(&gpu, &c, Dtype::Bf16, &mut rng) {
                    failures.push(format!("q_gain {q_gain} D {d} heads {heads:?}: {e}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// What the decode kernel refuses when named ([`Engine::Decode`]): more than 8 rows after
/// packing, a causal mask over several rows, ALiBi, sinks or a window over several rows of one
/// head, packed queries — typed errors, nothing written. (ALiBi, sinks and windows over one
/// position it runs: `features::correctness_features_sinks_split_and_decode`.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_decode_refusals_write_nothing() {
    let gpu = gpu();
    let st = gpu.stream();
    let (b, hkv, d, sk) = (2, 2, 64, 300);
    let seven = f16::from_f32(7.0);
    let run = |hq: usize, sq: usize, causal: Causal, features: Features| {
        let p = Problem::new(AttnShape::new(b, hq, hkv, sq, sk, d).unwrap(), causal)
            .with_features(features)
            .unwrap();
        let q = st
            .clone_htod(&vec![f16::from_f32(0.5); b * hq * sq * d])
            .unwrap();
        let kv = st
            .clone_htod(&vec![f16::from_f32(0.25); b * hkv * sk * d])
            .unwrap();
        let mut o = st.clone_htod(&vec![seven; b * hq * sq * d]).unwrap();
        let r = gpu.forward(Forward {
            problem: &p,
            q: Tensor::contiguous(q.as_view(), [b, hq, sq, d], Layout::Bhsd),
            k: Tensor::contiguous(kv.as_view(), [b, hkv, sk, d], Layout::Bhsd),
            v: Tensor::contiguous(kv.as_view(), [b, hkv, sk, d], Layout::Bhsd),
            o: TensorMut::contiguous(o.as_view_mut(), [b, hq, sq, d], Layout::Bhsd),
            lse: None,
            options: ForwardOptions {
                engine: Engine::Decode,
                ..ForwardOptions::default()
            },
        });
        let o: Vec<f16> = st.clone_dtoh(&o).unwrap();
        (r, o.iter().all(|&x| x == seven))
    };
    let (ok, _) = run(8, 1, Causal::BottomRight, Features::default());
    assert!(
        ok.as_ref().is_ok_and(|i| i.kernel.starts_with("attn_dec_")),
        "{ok:?}"
    );
    for (what, hq, sq, causal, features) in [
        (
            "16 rows after packing",
            32,
            1,
            Causal::BottomRight,
            Features::default(),
        ),
        (
            "a causal mask over 4 rows",
            2,
            4,
            Causal::BottomRight,
            Features::default(),
        ),
        (
            "ALiBi over 2 rows",
            4,
            2,
            Causal::None,
            Features {
                alibi: Some(Alibi::PerHead(alibi_slopes(4))),
                ..Features::default()
            },
        ),
        (
            "sinks over 2 rows",
            4,
            2,
            Causal::None,
            Features {
                sinks: Some(vec![0.5; 4]),
                ..Features::default()
            },
        ),
        (
            "a window over 4 rows",
            2,
            4,
            Causal::None,
            Features {
                window: Some((64, 0)),
                ..Features::default()
            },
        ),
    ] {
        let (r, untouched) = run(hq, sq, causal, features);
        assert!(
            matches!(r, Err(KernelError::EngineUnavailable(_))),
            "{what}: {r:?}"
        );
        assert!(untouched, "{what}: O was written");
    }
}

/// Corrupt device-resident indices in a decode launch (seqused_k past the capacity and
/// negative, block-table entries outside the cache): clamped, no out-of-bounds access
/// (memcheck runs this), the stream stays healthy.
#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitize_seqs_decode_corrupt_indices() {
    let gpu = gpu();
    let st = gpu.stream();
    let (b, hq, hkv, d, ps, blocks) = (3, 8, 2, 128, 16, 6);
    let p = Problem::new(
        AttnShape::new(b, hq, hkv, 1, 2 * ps, d).unwrap(),
        Causal::BottomRight,
    );
    for kv8 in [false, true] {
        let q = st
            .clone_htod(&vec![f16::from_f32(0.5); b * hq * d])
            .unwrap();
        let kc = st
            .clone_htod(&vec![f16::from_f32(0.25); blocks * ps * hkv * d])
            .unwrap();
        let quarter = Fp8Format::E4M3.encode_f32(0.25); // exact in E4M3, scale 1
        let codes = st
            .clone_htod(&vec![quarter; blocks * ps * hkv * d])
            .unwrap();
        let scales = st.clone_htod(&[1.0f32]).unwrap();
        let mut o = st
            .clone_htod(&vec![f16::from_f32(f32::NAN); b * hq * d])
            .unwrap();
        let table = st.clone_htod(&[0, 1, -100, 5, 1 << 30, 2]).unwrap();
        let used = st.clone_htod(&[32, 1 << 30, -3]).unwrap();
        let dims = [b, hq, 1, d];
        let kdims = [blocks, hkv, ps, d];
        let seqs = Sequences {
            queries: QueryRows::Dense,
            keys: KeyRows::Paged {
                block_table: Indices::new(table.as_view()),
            },
            seqused_k: Some(Indices::new(used.as_view())),
        };
        let options = ForwardOptions {
            engine: Engine::Decode,
            ..ForwardOptions::default()
        };
        let info = if kv8 {
            gpu.forward_kv_fp8(
                ForwardKvFp8 {
                    problem: &p,
                    q: Tensor::contiguous(q.as_view(), dims, Layout::Bhsd),
                    k: Tensor::contiguous(codes.as_view(), kdims, Layout::Bshd),
                    v: Tensor::contiguous(codes.as_view(), kdims, Layout::Bshd),
                    scales: KvScales {
                        k: scales.as_view(),
                        v: scales.as_view(),
                    },
                    o: TensorMut::contiguous(o.as_view_mut(), dims, Layout::Bhsd),
                    lse: None,
                    options,
                },
                Some(seqs),
            )
        } else {
            gpu.forward_sequences(
                Forward {
                    problem: &p,
                    q: Tensor::contiguous(q.as_view(), dims, Layout::Bhsd),
                    k: Tensor::contiguous(kc.as_view(), kdims, Layout::Bshd),
                    v: Tensor::contiguous(kc.as_view(), kdims, Layout::Bshd),
                    o: TensorMut::contiguous(o.as_view_mut(), dims, Layout::Bhsd),
                    lse: None,
                    options,
                },
                seqs,
            )
        }
        .unwrap();
        assert!(info.kernel.starts_with("attn_dec_"), "{}", info.kernel);
        st.synchronize().expect("the stream stays healthy");
        // Sequence 0 (32 keys on pages 0 and 1) is well defined: every value is 0.25.
        let out: Vec<f16> = st.clone_dtoh(&o).unwrap();
        for h in 0..hq {
            let x = out[h * d].to_f32();
            assert!((x - 0.25).abs() < 1e-3, "kv8 {kv8} head {h}: {x}");
        }
    }
}

/// Split-KV in the general entries (f16/bf16 caches): single-row launches with a window and
/// softcap over dense and paged caches split their keys (the grid is small), and the result
/// equals the reference; with every feature too, sinks included (they join once, in the
/// split combine's merge).
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_seqs_general_split() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for d in [64, 128] {
        for keys in [
            Keys::Dense { cap: 4096 },
            Keys::Paged {
                page_size: 16,
                num_blocks: 2 * 4096 / 16 + 1,
            },
        ] {
            for features in [
                Features::default(),
                Features {
                    window: Some((1000, 0)),
                    softcap: Some(10.0),
                    ..Features::default()
                },
                all_features(2, 4),
            ] {
                let c = SeqCase {
                    heads: (4, 4),
                    d,
                    causal: Causal::BottomRight,
                    features,
                    q_lens: vec![1; 2],
                    k_lens: vec![4096, 2500],
                    q_packed: false,
                    keys,
                    engine: Engine::MmaSync,
                    kv8: None,
                    splits: None,
                    q_gain: 1.0,
                };
                run_dtypes(&gpu, &c, &mut rng, &mut failures);
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// Split-KV in the Hopper engine's sequence and feature entries (chunked prefill: a few
/// blocks of new queries against long caches): pinned split counts (3 and 5, with splits
/// that get no key tile under a causal mask, and a sequence with rows but no keys) and the heuristic's, over packed, dense and
/// paged keys, both causal alignments, every feature at once, and head dims 64, 128 and 256
/// (three bucket tiles: 192, 128 and 128 query rows), against the reference; a pinned count
/// is the launch's. Off sm_90 the same cases run unpinned on the mma.sync general entries.
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_seqs_hopper_split() {
    let gpu = gpu();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let q_lens = vec![130, 64, 0, 200, 70];
    let k_lens = vec![2900, 1500, 700, 2600, 0];
    let hopper = gpu.compute_capability() == (9, 0);
    for d in [64, 128, 256] {
        for keys in [
            Keys::Packed,
            Keys::Dense { cap: 3000 },
            Keys::Paged {
                page_size: 64,
                num_blocks: q_lens.len() * 2900usize.div_ceil(64) + 5,
            },
        ] {
            for causal in CAUSALS {
                for (features, splits) in [
                    (Features::default(), Some(3)),
                    (all_features(q_lens.len(), 4), Some(5)),
                    (Features::default(), None),
                ] {
                    let c = SeqCase {
                        heads: (4, 2),
                        d,
                        causal,
                        features,
                        q_lens: q_lens.clone(),
                        k_lens: k_lens.clone(),
                        q_packed: true,
                        keys,
                        engine: if splits.is_some() && hopper {
                            Engine::Hopper(None)
                        } else {
                            Engine::Auto
                        },
                        kv8: None,
                        splits: splits.filter(|_| hopper),
                        q_gain: 1.0,
                    };
                    run_dtypes(&gpu, &c, &mut rng, &mut failures);
                }
            }
        }
    }
    // Speculative decoding's verify step: a few tokens per sequence against long keys. Causal
    // launches take the Hopper entries, which split them; unmasked ones stay on the mma.sync
    // general entries, which split those (`run_dtypes` checks which ran).
    for d in [64, 128] {
        for causal in CAUSALS {
            for keys in [
                Keys::Dense { cap: 3000 },
                Keys::Paged {
                    page_size: 16,
                    num_blocks: 3 * 2900usize.div_ceil(16) + 5,
                },
            ] {
                let c = SeqCase {
                    heads: (4, 2),
                    d,
                    causal,
                    features: if causal == Causal::TopLeft {
                        all_features(3, 4)
                    } else {
                        Features::default()
                    },
                    q_lens: vec![16, 5, 33],
                    k_lens: vec![2900, 2600, 2000],
                    q_packed: true,
                    keys,
                    engine: Engine::Auto,
                    kv8: None,
                    splits: None,
                    q_gain: 1.0,
                };
                run_dtypes(&gpu, &c, &mut rng, &mut failures);
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// One split Hopper launch (chunked prefill with every feature, 4 splits) twice on the same
/// inputs: bitwise equal, whichever CTA merged, and finite; off sm_90 the engine refuses.
/// Small, so that compute-sanitizer's tools run it (memcheck, racecheck, synccheck: the
/// partials' stores, the ticket and the merge).
#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitize_seqs_hopper_split_deterministic() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let hopper = gpu.compute_capability() == (9, 0);
    let (hq, hkv, d) = (4usize, 2usize, 128usize);
    let (sq, sk) = (200usize, 3000usize);
    let p = Problem::new(
        AttnShape::new(1, hq, hkv, sq, sk, d).unwrap(),
        Causal::BottomRight,
    )
    .with_features(all_features(1, hq))
    .unwrap();
    let q: Vec<f16> = randn(&mut rng, sq * hq * d);
    let k: Vec<f16> = randn(&mut rng, sk * hkv * d);
    let v: Vec<f16> = randn(&mut rng, sk * hkv * d);
    let cu_q = [0, sq as i32];
    let cu_k = [0, sk as i32];
    let host = attn_kernels::HostSequences {
        cu_seqlens_q: Some(&cu_q),
        cu_seqlens_k: Some(&cu_k),
        ..Default::default()
    };
    fn t(data: &[f16], rows: usize, heads: usize, d: usize) -> attn_kernels::HostTensor<'_, f16> {
        attn_kernels::HostTensor {
            data,
            dims: [1, heads, rows, d],
            layout: Layout::Bshd,
        }
    }
    let opts = ForwardOptions {
        engine: Engine::Hopper(None),
        splits: Some(4),
        ..ForwardOptions::default()
    };
    let run = || {
        gpu.forward_sequences_host(
            &p,
            t(&q, sq, hq, d),
            t(&k, sk, hkv, d),
            t(&v, sk, hkv, d),
            &host,
            &opts,
        )
    };
    if hopper {
        let (a, b) = (run().unwrap(), run().unwrap());
        assert_eq!(a.launch.splits, 4, "{:?}", a.launch);
        assert!(a
            .o
            .iter()
            .zip(&b.o)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
        assert!(a
            .lse
            .iter()
            .zip(&b.lse)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
        assert!(a.o.iter().all(|x| x.to_f32().is_finite()));
    } else {
        assert!(
            matches!(run(), Err(KernelError::EngineUnavailable(_))),
            "the Hopper engine off sm_90"
        );
    }
}

/// What an E4M3 cache's launch refuses, before writing anything: scales of the wrong
/// length, K and V scales of different layouts, a head dim that is no multiple of 16, the
/// Hopper engine, and a K/V code tensor of the wrong dims.
#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_kv_fp8() {
    let gpu = gpu();
    let st = gpu.stream();
    let try_launch = |d: usize, nk: usize, nv: usize, engine: Engine, kdims_sk: usize| {
        let p = Problem::new(AttnShape::new(2, 4, 2, 1, 64, d).unwrap(), Causal::None);
        let q = st.clone_htod(&vec![f16::from_f32(0.5); 2 * 4 * d]).unwrap();
        let kc = st.clone_htod(&vec![0x38u8; 2 * 2 * 64 * d]).unwrap();
        let ks = st.clone_htod(&vec![1f32; nk]).unwrap();
        let vs = st.clone_htod(&vec![1f32; nv]).unwrap();
        let mut o = st.clone_htod(&vec![f16::from_f32(7.0); 2 * 4 * d]).unwrap();
        let r = gpu.forward_kv_fp8(
            ForwardKvFp8 {
                problem: &p,
                q: Tensor::contiguous(q.as_view(), [2, 4, 1, d], Layout::Bhsd),
                k: Tensor::contiguous(kc.as_view(), [2, 2, kdims_sk, d], Layout::Bhsd),
                v: Tensor::contiguous(kc.as_view(), [2, 2, 64, d], Layout::Bhsd),
                scales: KvScales {
                    k: ks.as_view(),
                    v: vs.as_view(),
                },
                o: TensorMut::contiguous(o.as_view_mut(), [2, 4, 1, d], Layout::Bhsd),
                lse: None,
                options: ForwardOptions {
                    engine,
                    ..ForwardOptions::default()
                },
            },
            None,
        );
        let o: Vec<f16> = st.clone_dtoh(&o).unwrap();
        (r, o.iter().all(|x| x.to_f32() == 7.0))
    };
    let (ok, _) = try_launch(64, 2, 2, Engine::Auto, 64);
    ok.expect("a valid launch");
    for (what, d, nk, nv, engine, sk) in [
        ("3 scales for 2 heads", 64, 3, 3, Engine::Auto, 64),
        ("per-head K, per-cache V", 64, 2, 1, Engine::Auto, 64),
        ("D = 40", 40, 2, 2, Engine::Auto, 64),
        ("the Hopper engine", 64, 2, 2, Engine::Hopper(None), 64),
        ("K of 32 rows", 64, 2, 2, Engine::Auto, 32),
    ] {
        let (r, untouched) = try_launch(d, nk, nv, engine, sk);
        assert!(r.is_err(), "{what}: launched");
        assert!(untouched, "{what}: O was written");
    }
}

/// Device-resident indices the host never saw: cu_seqlens past the tensors, seqused_k past
/// the capacity, block-table entries outside the cache. The kernel clamps them (wrong rows,
/// no out-of-bounds access: compute-sanitizer's memcheck runs this test), the launch and the
/// stream stay healthy, and the next launch is right.
#[test]
#[ignore = "needs a CUDA GPU"]
fn sanitize_seqs_corrupt_device_indices() {
    let gpu = gpu();
    let st = gpu.stream();
    let (b, hq, hkv, d, ps, blocks) = (3, 4, 2, 64, 16, 6);
    let p = Problem::new(
        AttnShape::new(b, hq, hkv, 40, 1, d).unwrap(),
        Causal::BottomRight,
    );
    let q = st
        .clone_htod(&vec![f16::from_f32(0.5); 64 * hq * d])
        .unwrap();
    let kc = st
        .clone_htod(&vec![f16::from_f32(0.25); blocks * ps * hkv * d])
        .unwrap();
    // Packed Q whose prefix sums run past its 64 rows and backwards; a table with entries
    // outside the cache; seqused_k past the capacity and negative.
    let cu_q = st.clone_htod(&[0, 40, 1 << 30, -5]).unwrap();
    let table = st
        .clone_htod(&[0, 1, -100, 5, 1 << 30, 2, 3, 4, -1])
        .unwrap();
    let used = st.clone_htod(&[48, 1 << 30, -3]).unwrap();
    let qdims = [1, hq, 64, d];
    let kdims = [blocks, hkv, ps, d];
    // Both engines on sm_90 (the Hopper kernel reads pages by TMA boxes).
    for engine in engines(&gpu) {
        let mut o = st
            .clone_htod(&vec![f16::from_f32(f32::NAN); 64 * hq * d])
            .unwrap();
        let mut lse = st.clone_htod(&vec![f32::NAN; hq * 64]).unwrap();
        gpu.forward_sequences(
            Forward {
                problem: &p,
                q: Tensor::contiguous(q.as_view(), qdims, Layout::Bshd),
                k: Tensor::contiguous(kc.as_view(), kdims, Layout::Bshd),
                v: Tensor::contiguous(kc.as_view(), kdims, Layout::Bshd),
                o: TensorMut::contiguous(o.as_view_mut(), qdims, Layout::Bshd),
                lse: Some(lse.as_view_mut()),
                options: ForwardOptions {
                    engine,
                    ..Default::default()
                },
            },
            Sequences {
                queries: QueryRows::Packed {
                    cu_seqlens: Indices::new(cu_q.as_view()),
                },
                keys: KeyRows::Paged {
                    block_table: Indices::new(table.as_view()),
                },
                seqused_k: Some(Indices::new(used.as_view())),
            },
        )
        .unwrap();
        st.synchronize().expect("the stream stays healthy");
        // Sequence 0 (rows 0..40, 48 keys through pages 0, 1, and the clamped −100 → 0) is
        // well defined: every key and value is 0.25, so O = 0.25.
        let out: Vec<f16> = st.clone_dtoh(&o).unwrap();
        for r in 0..40 {
            for h in 0..hq {
                let x = out[(r * hq + h) * d].to_f32();
                assert!((x - 0.25).abs() < 1e-3, "{engine:?}: row {r} head {h}: {x}");
            }
        }
    }
    // And the device still computes right afterwards.
    let mut rng = StdRng::seed_from_u64(fresh_seed());
    let mut failures = Vec::new();
    let c = SeqCase {
        heads: (hq, hkv),
        d,
        causal: Causal::BottomRight,
        features: Features::default(),
        q_lens: vec![1, 5],
        k_lens: vec![33, 7],
        q_packed: true,
        keys: Keys::Paged {
            page_size: 16,
            num_blocks: 8,
        },
        engine: Engine::Auto,
        kv8: None,
        splits: None,
        q_gain: 1.0,
    };
    run_dtypes(&gpu, &c, &mut rng, &mut failures);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The Hopper engine (TMA coordinates from the indices): packed Q over a dense cache of
    // 48 rows with the same corrupt cu_seqlens_q and seqused_k.
    if gpu.compute_capability() == (9, 0) {
        let mut o = st
            .clone_htod(&vec![f16::from_f32(f32::NAN); 64 * hq * d])
            .unwrap();
        let mut lse = st.clone_htod(&vec![f32::NAN; hq * 64]).unwrap();
        let cache = [b, hkv, 48, d];
        let kc = st
            .clone_htod(&vec![f16::from_f32(0.25); b * hkv * 48 * d])
            .unwrap();
        let p48 = Problem::new(
            AttnShape::new(b, hq, hkv, 40, 48, d).unwrap(),
            Causal::BottomRight,
        );
        let info = gpu
            .forward_sequences(
                Forward {
                    problem: &p48,
                    q: Tensor::contiguous(q.as_view(), qdims, Layout::Bshd),
                    k: Tensor::contiguous(kc.as_view(), cache, Layout::Bhsd),
                    v: Tensor::contiguous(kc.as_view(), cache, Layout::Bhsd),
                    o: TensorMut::contiguous(o.as_view_mut(), qdims, Layout::Bshd),
                    lse: Some(lse.as_view_mut()),
                    options: ForwardOptions {
                        engine: Engine::Hopper(None),
                        ..ForwardOptions::default()
                    },
                },
                Sequences {
                    queries: QueryRows::Packed {
                        cu_seqlens: Indices::new(cu_q.as_view()),
                    },
                    keys: KeyRows::Dense,
                    seqused_k: Some(Indices::new(used.as_view())),
                },
            )
            .unwrap();
        assert!(info.kernel.starts_with("attn_fwdh_"), "{}", info.kernel);
        st.synchronize().expect("the stream stays healthy");
        let out: Vec<f16> = st.clone_dtoh(&o).unwrap();
        for r in 0..40 {
            for h in 0..hq {
                let x = out[(r * hq + h) * d].to_f32();
                assert!((x - 0.25).abs() < 1e-3, "Hopper: row {r} head {h}: {x}");
            }
        }
    }
}

/// Refused launches are typed errors and write nothing: malformed host copies of the indices,
/// index arrays of the wrong length, tensors that do not match the layout, and options these
/// launches lack.
#[test]
#[ignore = "needs a CUDA GPU"]
fn validation_seqs_refusals_write_nothing() {
    let gpu = gpu();
    let st = gpu.stream();
    let (b, hq, hkv, d) = (2, 4, 2, 64);
    let p = Problem::new(
        AttnShape::new(b, hq, hkv, 8, 8, d).unwrap(),
        Causal::BottomRight,
    );
    let q = st
        .clone_htod(&vec![f16::from_f32(1.0); 12 * hq * d])
        .unwrap();
    let k = st
        .clone_htod(&vec![f16::from_f32(1.0); 12 * hkv * d])
        .unwrap();
    let poison = vec![f16::from_f32(f32::NAN); 12 * hq * d];
    let mut o = st.clone_htod(&poison).unwrap();
    let good_cu = [0, 4, 12];
    let cu_dev = st.clone_htod(&good_cu).unwrap();
    let short_dev = st.clone_htod(&[0, 12]).unwrap();
    let qd = [1, hq, 12, d];
    let kd = [1, hkv, 12, d];
    let run = |o: &mut cudarc::driver::CudaSlice<f16>,
               cu_q_host: &[i32],
               short: bool,
               q_dims: [usize; 4],
               opts: ForwardOptions|
     -> Result<(), KernelError> {
        gpu.forward_sequences(
            Forward {
                problem: &p,
                q: Tensor::contiguous(q.as_view(), q_dims, Layout::Bshd),
                k: Tensor::contiguous(k.as_view(), kd, Layout::Bshd),
                v: Tensor::contiguous(k.as_view(), kd, Layout::Bshd),
                o: TensorMut::contiguous(o.as_view_mut(), q_dims, Layout::Bshd),
                lse: None,
                options: opts,
            },
            Sequences {
                queries: QueryRows::Packed {
                    cu_seqlens: Indices::new(if short {
                        short_dev.as_view()
                    } else {
                        cu_dev.as_view()
                    })
                    .with_host(cu_q_host),
                },
                keys: KeyRows::Packed {
                    cu_seqlens: Indices::new(cu_dev.as_view()).with_host(&good_cu),
                },
                seqused_k: None,
            },
        )
        .map(|_| ())
    };
    let refusals: Vec<(&str, Result<(), KernelError>)> = vec![
        (
            "not monotone",
            run(&mut o, &[0, 9, 4], false, qd, Default::default()),
        ),
        (
            "wrong total",
            run(&mut o, &[0, 4, 11], false, qd, Default::default()),
        ),
        (
            "short device array",
            run(&mut o, &[0, 12], true, qd, Default::default()),
        ),
        (
            "batched Q",
            run(&mut o, &good_cu, false, [2, hq, 6, d], Default::default()),
        ),
        (
            "split-KV under a causal mask",
            run(
                &mut o,
                &good_cu,
                false,
                qd,
                ForwardOptions {
                    splits: Some(2),
                    ..Default::default()
                },
            ),
        ),
        (
            "Hopper engine with an mma.sync config",
            run(
                &mut o,
                &good_cu,
                false,
                qd,
                ForwardOptions {
                    engine: Engine::Hopper(None),
                    config: Some(attn_kernels::KernelConfig::by_name("64_64_4_s2").unwrap()),
                    ..Default::default()
                },
            ),
        ),
    ];
    for (what, r) in refusals {
        assert!(r.is_err(), "{what}: accepted");
    }
    let after: Vec<f16> = st.clone_dtoh(&o).unwrap();
    assert!(
        after.iter().all(|x| x.to_f32().is_nan()),
        "a refused launch wrote O"
    );
    // The same launch with good indices runs.
    run(&mut o, &good_cu, false, qd, Default::default()).unwrap();
}

/// Issue 16's CUDA-graph contract: a paged decode step (no split, no feature arrays) does no
/// host sync, allocation or host-to-device copy, so it can be captured once and replayed.
/// The graph is replayed 1000 times while `seqused_k` changes in device memory between
/// replays (as a serving loop appends tokens); every 50th output is checked against the
/// reference on that step's lengths, and every output must be free of NaN (the unused pages
/// and the poisoned output would show).
#[test]
#[ignore = "needs a CUDA GPU"]
fn correctness_seqs_paged_decode_in_a_cuda_graph() {
    use cudarc::driver::sys;
    // Its own stream: capturing the shared launcher's stream would break the tests running
    // beside this one in other threads.
    let gpu = gpu().fork().unwrap();
    let st = gpu.stream();
    let seed = fresh_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let (b, hq, hkv, d, ps, max_blocks) = (4, 8, 2, 128, 16, 8);
    let num_blocks = b * max_blocks + 5;
    let mut pages: Vec<i32> = (0..num_blocks as i32).collect();
    pages.shuffle(&mut rng);
    let table: Vec<i32> = pages[..b * max_blocks].to_vec();
    let q: Vec<f16> = randn(&mut rng, b * hq * d);
    let kc: Vec<f16> = randn(&mut rng, num_blocks * ps * hkv * d);
    let vc: Vec<f16> = randn(&mut rng, num_blocks * ps * hkv * d);
    let p = Problem::new(
        AttnShape::new(b, hq, hkv, 1, 1, d).unwrap(),
        Causal::BottomRight,
    );
    // cudarc tracks each buffer's last write with an event once a context has several
    // streams, and makes every launch wait on it: inside a capture that wait is a dependency
    // on uncaptured work (CUDA_ERROR_STREAM_CAPTURE_ISOLATION). Buffers a captured launch
    // uses are therefore allocated untracked, as a serving loop on cudarc would; they are
    // used on this test's stream only.
    let ctx = gpu.context().clone();
    let tracking = ctx.is_event_tracking();
    // SAFETY: the buffers allocated while tracking is off are used on `st` alone (no
    // cross-stream use needs ordering), and outlive every launch that uses them (the test
    // synchronizes before they drop).
    unsafe { ctx.disable_event_tracking() };
    let (dq, dk, dv) = (
        st.clone_htod(&q).unwrap(),
        st.clone_htod(&kc).unwrap(),
        st.clone_htod(&vc).unwrap(),
    );
    let dtable = st.clone_htod(&table).unwrap();
    let mut dused = st.clone_htod(&vec![1i32; b]).unwrap();
    let mut o = st
        .clone_htod(&vec![f16::from_f32(f32::NAN); b * hq * d])
        .unwrap();
    if tracking {
        // SAFETY: restores the context's setting; slices created from here on are tracked.
        unsafe { ctx.enable_event_tracking() };
    }
    st.synchronize().unwrap();
    let qd = [b, hq, 1, d];
    let kd = [num_blocks, hkv, ps, d];
    let step = |capture: bool, o: &mut cudarc::driver::CudaSlice<f16>| {
        if capture {
            st.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .unwrap();
        }
        gpu.forward_sequences(
            Forward {
                problem: &p,
                q: Tensor::bhsd(&dq, qd),
                k: Tensor::contiguous(dk.as_view(), kd, Layout::Bshd),
                v: Tensor::contiguous(dv.as_view(), kd, Layout::Bshd),
                o: TensorMut::bhsd(o, qd),
                lse: None,
                options: ForwardOptions::default(),
            },
            Sequences {
                queries: QueryRows::Dense,
                keys: KeyRows::Paged {
                    block_table: Indices::new(dtable.as_view()),
                },
                seqused_k: Some(Indices::new(dused.as_view())),
            },
        )
        .expect("a decode launch is capturable");
        if capture {
            st.end_capture(sys::CUgraphInstantiate_flags(0)).unwrap()
        } else {
            st.synchronize().unwrap();
            None
        }
    };
    // One launch outside the capture first (loads the module), then the capture.
    step(false, &mut o);
    let graph = step(true, &mut o);
    let graph = graph.expect("the capture holds the launch");
    let mut failures = Vec::new();
    for step in 0..1000 {
        let used: Vec<i32> = (0..b)
            .map(|_| rng.random_range(1..=(max_blocks * ps) as i32))
            .collect();
        st.memcpy_htod(&used, &mut dused).unwrap();
        graph.launch().unwrap();
        let out: Vec<f16> = st.clone_dtoh(&o).unwrap();
        if out.iter().any(|x| x.to_f32().is_nan()) {
            failures.push(format!("step {step}: NaN in O (seqused_k {used:?})"));
            continue;
        }
        if step % 50 != 0 {
            continue;
        }
        for (i, &sk) in used.iter().enumerate() {
            let sk = sk as usize;
            let gather = |cache: &[f16]| -> Vec<f16> {
                let mut g = Vec::with_capacity(hkv * sk * d);
                for h in 0..hkv {
                    for j in 0..sk {
                        let page = table[i * max_blocks + j / ps] as usize;
                        let at = ((page * ps + j % ps) * hkv + h) * d;
                        g.extend_from_slice(&cache[at..at + d]);
                    }
                }
                g
            };
            let (k, v) = (gather(&kc), gather(&vc));
            let qi = &q[i * hq * d..(i + 1) * hq * d];
            let pi = p.sequence(i, 1, sk).unwrap();
            let r = reference::forward(&pi, qi, &k, &v).unwrap();
            let emu = emulate::forward_emulated(
                &pi,
                &to_f32s(qi),
                &to_f32s(&k),
                &to_f32s(&v),
                Dtype::F16,
            )
            .unwrap();
            let oi = to_f32s(&out[i * hq * d..(i + 1) * hq * d]);
            // LSE is not written in this launch: check O against the reference's LSE.
            if let Err(e) = check_output(
                &pi,
                &oi,
                &r.lse.iter().map(|&x| x as f32).collect::<Vec<_>>(),
                &r,
                &emu,
                Dtype::F16.into(),
            ) {
                failures.push(format!("step {step} sequence {i} ({sk} keys): {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}
