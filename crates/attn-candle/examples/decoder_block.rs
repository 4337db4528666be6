//! A Llama-style decoder block in candle — RMSNorm, RoPE, grouped-query attention, SwiGLU
//! MLP — with random weights, run twice: attention through this crate's op
//! (`attn_candle::flash_attn`, causal) and through candle's plain matmul–softmax–matmul. Prints
//! both times (attention alone and the whole block) and the max difference of the outputs.
//!
//! ```text
//! cargo run -p attn-candle --release --example decoder_block            # CPU
//! cargo run -p attn-candle --release --features cuda --example decoder_block -- --seq 4096
//! ```
//!
//! On the CPU it runs f32 with a small model (the op is attn-ref's f64 reference there: a
//! check, not a speed-up). Built with `cuda` and with a GPU present it runs bf16 with a
//! Llama-7B-sized block (32 query heads, 8 KV heads, head dim 128). `--cpu` forces the CPU;
//! `--seq N` and `--batch N` set the shape; `--iters N` the timed repetitions.

#[path = "common/mod.rs"]
mod common;

use std::time::Instant;

use candle_core::{DType, Device, Result, Tensor, D};

struct Config {
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    ffn: usize,
    eps: f64,
    rope_theta: f64,
}

impl Config {
    /// Llama-2-7B's attention geometry with GQA (as Llama-3 / Mistral use it).
    fn gpu() -> Self {
        Self {
            hidden: 4096,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            ffn: 11008,
            eps: 1e-5,
            rope_theta: 10000.0,
        }
    }

    /// Small enough for the f64 reference on a CPU.
    fn cpu() -> Self {
        Self {
            hidden: 512,
            heads: 8,
            kv_heads: 2,
            head_dim: 64,
            ffn: 1408,
            eps: 1e-5,
            rope_theta: 10000.0,
        }
    }
}

struct Block {
    cfg: Config,
    attn_norm: Tensor,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    mlp_norm: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
}

/// Which attention the block runs.
#[derive(Clone, Copy, Debug)]
enum Attention {
    /// `attn_candle::flash_attn` on `(b, s, h, d)`.
    Ours,
    /// Candle's plain attention: repeat KV heads, Q·Kᵀ, causal mask, softmax in f32, ·V.
    Plain,
}

fn linear_weight(rows: usize, cols: usize, dt: DType, dev: &Device) -> Result<Tensor> {
    // N(0, 1/rows): keeps activations O(1) through the block.
    (Tensor::randn(0f32, 1.0, (rows, cols), dev)? / (rows as f64).sqrt())?.to_dtype(dt)
}

impl Block {
    fn new(cfg: Config, dt: DType, dev: &Device) -> Result<Self> {
        let (h, hd) = (cfg.hidden, cfg.head_dim);
        Ok(Self {
            attn_norm: Tensor::ones(h, dt, dev)?,
            wq: linear_weight(h, cfg.heads * hd, dt, dev)?,
            wk: linear_weight(h, cfg.kv_heads * hd, dt, dev)?,
            wv: linear_weight(h, cfg.kv_heads * hd, dt, dev)?,
            wo: linear_weight(cfg.heads * hd, h, dt, dev)?,
            mlp_norm: Tensor::ones(h, dt, dev)?,
            w_gate: linear_weight(h, cfg.ffn, dt, dev)?,
            w_up: linear_weight(h, cfg.ffn, dt, dev)?,
            w_down: linear_weight(cfg.ffn, h, dt, dev)?,
            cfg,
        })
    }

    fn forward(&self, x: &Tensor, rope: &Rope, attention: Attention) -> Result<Tensor> {
        let (b, s, _) = x.dims3()?;
        let c = &self.cfg;
        let h = rms_norm(x, &self.attn_norm, c.eps)?;
        let q = matmul(&h, &self.wq)?.reshape((b, s, c.heads, c.head_dim))?;
        let k = matmul(&h, &self.wk)?.reshape((b, s, c.kv_heads, c.head_dim))?;
        let v = matmul(&h, &self.wv)?.reshape((b, s, c.kv_heads, c.head_dim))?;
        let (q, k) = (rope.apply(&q)?, rope.apply(&k)?);
        let a = attend(&q, &k, &v, attention)?.reshape((b, s, c.heads * c.head_dim))?;
        let x = (x + matmul(&a, &self.wo)?)?;
        let h = rms_norm(&x, &self.mlp_norm, c.eps)?;
        let gate = matmul(&h, &self.w_gate)?.silu()?;
        let up = matmul(&h, &self.w_up)?;
        x + matmul(&(gate * up)?, &self.w_down)?
    }
}

/// `(b, s, k) · (k, n)`.
fn matmul(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (b, s, k) = x.dims3()?;
    x.reshape((b * s, k))?.matmul(w)?.reshape((b, s, ()))
}

/// RMSNorm in f32, back in the input dtype.
fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let dt = x.dtype();
    let x32 = x.to_dtype(DType::F32)?;
    let rms = (x32.sqr()?.mean_keepdim(D::Minus1)? + eps)?.sqrt()?;
    x32.broadcast_div(&rms)?.to_dtype(dt)?.broadcast_mul(w)
}

/// Rotary embeddings (rotate-half form) for `(b, s, h, d)` tensors.
struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    fn new(seq: usize, head_dim: usize, theta: f64, dt: DType, dev: &Device) -> Result<Self> {
        let half = head_dim / 2;
        let inv: Vec<f32> = (0..half)
            .map(|i| (1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)) as f32)
            .collect();
        let inv = Tensor::from_vec(inv, (1, half), dev)?;
        let pos = Tensor::arange(0u32, seq as u32, dev)?
            .to_dtype(DType::F32)?
            .reshape((seq, 1))?;
        let freqs = pos.broadcast_mul(&inv)?; // (s, d/2)
        let shape = (seq, 1, half); // broadcast over heads
        Ok(Self {
            cos: freqs.cos()?.reshape(shape)?.to_dtype(dt)?,
            sin: freqs.sin()?.reshape(shape)?.to_dtype(dt)?,
        })
    }

    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let d = x.dim(D::Minus1)?;
        let (x1, x2) = (x.narrow(3, 0, d / 2)?, x.narrow(3, d / 2, d / 2)?);
        let r1 = (x1.broadcast_mul(&self.cos)? - x2.broadcast_mul(&self.sin)?)?;
        let r2 = (x2.broadcast_mul(&self.cos)? + x1.broadcast_mul(&self.sin)?)?;
        Tensor::cat(&[r1, r2], 3)
    }
}

/// Causal GQA attention on `(b, s, h, d)`; the output is `(b, s, hq, d)`.
fn attend(q: &Tensor, k: &Tensor, v: &Tensor, attention: Attention) -> Result<Tensor> {
    let scale = 1.0 / (q.dim(3)? as f64).sqrt();
    match attention {
        Attention::Ours => attn_candle::flash_attn(q, k, v, scale as f32, true),
        Attention::Plain => plain_attention(q, k, v, scale),
    }
}

/// What a candle model does without a fused kernel (candle-transformers' Llama): heads
/// first, KV heads repeated for GQA, scores and softmax in f32, a causal mask.
fn plain_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let (b, s, hq, d) = q.dims4()?;
    let hkv = k.dim(2)?;
    let q = q.transpose(1, 2)?.contiguous()?; // (b, hq, s, d)
    let repeat = |t: &Tensor| -> Result<Tensor> {
        // (b, s, hkv, d) → (b, hq, s, d), each KV head serving hq / hkv query heads.
        let t = t.transpose(1, 2)?; // (b, hkv, s, d)
        let sk = t.dim(2)?;
        t.unsqueeze(2)?
            .expand((b, hkv, hq / hkv, sk, d))?
            .reshape((b, hq, sk, d))
    };
    let (k, v) = (repeat(k)?, repeat(v)?);
    let scores = (q.matmul(&k.t()?)? * scale)?.to_dtype(DType::F32)?;
    let sk = k.dim(2)?;
    let mask = causal_mask(s, sk, q.device())?;
    let scores = scores.broadcast_add(&mask)?;
    let max = scores.max_keepdim(D::Minus1)?;
    let e = scores.broadcast_sub(&max)?.exp()?;
    let p = e
        .broadcast_div(&e.sum_keepdim(D::Minus1)?)?
        .to_dtype(v.dtype())?;
    p.matmul(&v)?.transpose(1, 2) // (b, s, hq, d)
}

/// The bottom-right causal mask `(s, sk)` (0 or −∞), built once per shape and kept on the
/// device, as models keep theirs: rebuilding it on the host every call would time a 4·s·sk
/// byte host-to-device copy as part of candle's attention.
fn causal_mask(s: usize, sk: usize, dev: &Device) -> Result<Tensor> {
    thread_local! {
        static MASK: std::cell::RefCell<Option<((usize, usize), Tensor)>> =
            const { std::cell::RefCell::new(None) };
    }
    if let Some(m) = MASK.with(|m| {
        m.borrow()
            .as_ref()
            .filter(|(key, t)| *key == (s, sk) && t.device().same_device(dev))
            .map(|(_, t)| t.clone())
    }) {
        return Ok(m);
    }
    let mask: Vec<f32> = (0..s)
        .flat_map(|i| {
            (0..sk).map(move |j| {
                if j + s > i + sk {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    let mask = Tensor::from_vec(mask, (s, sk), dev)?;
    MASK.with(|m| *m.borrow_mut() = Some(((s, sk), mask.clone())));
    Ok(mask)
}

/// Mean seconds of `f` over `iters` runs after one warm-up, synchronizing the device.
fn time<T>(dev: &Device, iters: usize, mut f: impl FnMut() -> Result<T>) -> Result<(f64, T)> {
    let mut out = f()?;
    dev.synchronize()?;
    let t0 = Instant::now();
    for _ in 0..iters {
        out = f()?;
    }
    dev.synchronize()?;
    Ok((t0.elapsed().as_secs_f64() / iters as f64, out))
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    (a.to_dtype(DType::F32)? - b.to_dtype(DType::F32)?)?
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_scalar::<f32>()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dev = common::device(&args);
    let on_gpu = dev.is_cuda();
    let (cfg, dt) = if on_gpu {
        (Config::gpu(), DType::BF16)
    } else {
        (Config::cpu(), DType::F32)
    };
    let batch = common::arg(&args, "--batch").unwrap_or(1);
    let seq = common::arg(&args, "--seq").unwrap_or(if on_gpu { 4096 } else { 256 });
    let iters = common::arg(&args, "--iters").unwrap_or(if on_gpu { 10 } else { 2 });
    println!(
        "decoder block on {}: batch {batch}, seq {seq}, hidden {}, {} query / {} KV heads of {}, ffn {}, {dt:?}",
        if on_gpu { "CUDA" } else { "the CPU" },
        cfg.hidden,
        cfg.heads,
        cfg.kv_heads,
        cfg.head_dim,
        cfg.ffn
    );
    let rope = Rope::new(seq, cfg.head_dim, cfg.rope_theta, dt, &dev)?;
    let block = Block::new(cfg, dt, &dev)?;
    let x = Tensor::randn(0f32, 1.0, (batch, seq, block.cfg.hidden), &dev)?.to_dtype(dt)?;

    // Attention alone, on the block's own Q, K, V.
    let c = &block.cfg;
    let h = rms_norm(&x, &block.attn_norm, c.eps)?;
    let q = rope.apply(&matmul(&h, &block.wq)?.reshape((batch, seq, c.heads, c.head_dim))?)?;
    let k = rope.apply(&matmul(&h, &block.wk)?.reshape((batch, seq, c.kv_heads, c.head_dim))?)?;
    let v = matmul(&h, &block.wv)?.reshape((batch, seq, c.kv_heads, c.head_dim))?;
    let (t_ours, a_ours) = time(&dev, iters, || attend(&q, &k, &v, Attention::Ours))?;
    let (t_plain, a_plain) = time(&dev, iters, || attend(&q, &k, &v, Attention::Plain))?;
    println!(
        "attention: attn-candle {:9.3} ms | candle matmul-softmax-matmul {:9.3} ms | {:.2}x | max |diff| {:.3e}",
        t_ours * 1e3,
        t_plain * 1e3,
        t_plain / t_ours,
        max_abs_diff(&a_ours, &a_plain)?
    );

    let (b_ours, y_ours) = time(&dev, iters, || block.forward(&x, &rope, Attention::Ours))?;
    let (b_plain, y_plain) = time(&dev, iters, || block.forward(&x, &rope, Attention::Plain))?;
    println!(
        "block:     attn-candle {:9.3} ms | candle matmul-softmax-matmul {:9.3} ms | {:.2}x | max |diff| {:.3e}",
        b_ours * 1e3,
        b_plain * 1e3,
        b_plain / b_ours,
        max_abs_diff(&y_ours, &y_plain)?
    );
    Ok(())
}
