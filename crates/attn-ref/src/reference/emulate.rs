//! The reference with the GPU kernel's rounding points: the `emu` of the tolerance rule
//! `max|out − ref| ≤ 2·max|emu − ref| + 1e-5` (FlashAttention-3's test rule).
//!
//! What is emulated, following FlashAttention-2's forward kernel (`softmax.h`):
//! 1. Q, K, V are rounded to the storage type (round-to-nearest-even, as `__float2half_rn`).
//! 2. `S = q·k` is accumulated in f32. Products of two f16 or bf16 values are exact in f32,
//!    so only the order of the additions could differ from a tensor core, whose order is
//!    unspecified; this sums eight interleaved lanes, then the lanes.
//! 3. The softmax runs in base 2 on `scale_log2 = scale·log2(e)` (f32), over key tiles of
//!    [`EMU_BLOCK_N`] keys with an online running max `m` of the raw f32 scores:
//!    `p = exp2(fma(s, scale_log2, −m·scale_log2))`, the correction
//!    `α = exp2((m_old − m_new)·scale_log2)`, all in f32.
//! 4. The row sum `l = α·l + Σ p` is accumulated in f32 from the *unrounded* p; then p is
//!    rounded to the storage type (the MMA's A operand) and `acc = α·acc + Σ round(p)·v`
//!    is accumulated in f32.
//! 5. `O = round(acc / l)` (f32 division, then the storage type);
//!    `LSE = (m·scale_log2 + log2 l)·ln 2` in f32.
//!
//! Not emulated: the GPU's `ex2.approx` (about 2 ulp from the correctly rounded `exp2`
//! used here), the softcap's `tanh.approx.f32` (f32 `tanh` here: the H100's instruction
//! measured within 1.1e-5 relative, 2^-16.5, over x ∈ [−10, 10], docs/PERF.md run 161, though
//! PTX documents only about 2^-11), the tensor core's internal accumulation order. All are far
//! below the f16/bf16 rounding of P and O that dominates the error.
//!
//! Features, as FlashAttention-2 applies them: with a softcap `c` the raw score is
//! `tanh(q·k · (scale/c))` and the softmax scale becomes `c`; ALiBi subtracts
//! `(slope / softmax scale) · |i + Sk − Sq − j|` from the raw f32 score; a sliding window
//! leaves the masked keys out of the (0-aligned) key tiles; an attention sink joins the
//! running max and the f32 denominator after the last tile, in log2 units
//! (`sink·log2(e)`). The sink's placement is a model, not a copy of a particular kernel.
//!
//! Fully masked rows give O = 0, LSE = −∞; NaN/Inf propagate as in [`super::forward`].
//!
//! ```
//! use attn_ref::{AttnShape, Causal, Problem};
//! use attn_ref::reference::{emulate::{forward_emulated, Storage}, forward};
//!
//! let shape = AttnShape::self_attention(1, 2, 33, 16)?;
//! let problem = Problem::new(shape, Causal::TopLeft);
//! let x: Vec<f32> = (0..shape.q_elems()).map(|i| (i as f32 * 0.61).sin()).collect();
//! let emu = forward_emulated(&problem, &x, &x, &x, Storage::F16)?;
//! let exact = forward(&problem, &x, &x, &x)?;
//! let err = emu.o.iter().zip(&exact.o).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
//! assert!(err > 0.0 && err < 4e-3);
//! # Ok::<(), attn_ref::AttnError>(())
//! ```

use std::f32::consts::LN_2;

use rayon::prelude::*;

use super::RefOutput;
use crate::{AttnError, Problem};

/// Keys per tile of the emulated online softmax (the kernel's BLOCK_N). Tile boundaries
/// decide where the running max may change and `acc` is rescaled.
pub const EMU_BLOCK_N: usize = 64;

/// Lanes of the emulated f32 dot product.
const LANES: usize = 8;

/// The storage type of the emulated kernel (inputs, P before P·V, and O): the workspace's one
/// [`Dtype`](crate::Dtype), under the name this module has always used.
pub use crate::Dtype as Storage;

/// How the emulated kernel rounds P before P·V.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PRounding {
    /// To a 16-bit storage type.
    Storage(Storage),
    /// To FP8 E4M3 (nearest-even, saturating at ±448) after multiplying by `2^log2_gain`;
    /// the gain is divided out again exactly (FlashAttention-3's FP8 P, gain 8).
    E4m3 {
        /// The power of two P is scaled by before the cast.
        log2_gain: i32,
    },
}

impl PRounding {
    /// Rounds one probability.
    pub fn round(self, p: f32) -> f32 {
        match self {
            PRounding::Storage(s) => s.round(p),
            PRounding::E4m3 { log2_gain } => {
                let gain = (log2_gain as f32).exp2();
                float8::F8E4M3::from_f32(p * gain).to_f32() / gain
            }
        }
    }
}

/// How a kernel spreads one query row's keys over independent online-softmax states, whose
/// (acc, m, l) it merges in f32 before rounding O. Each state rounds P relative to its own
/// running max, so the split decides which P values round alike: an emulation that walks the
/// keys in a different order rounds them in other frames, and its error is no longer the
/// kernel's (a one-row decode output has few elements, and a single O value rounding the
/// other way then exceeds twice the emulation's error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyStates {
    /// One state walks the key tiles in order (the prefill kernels).
    #[default]
    One,
    /// Split-KV over workers (kernels/decode_kernel.cuh's tensor-core stage): the visible
    /// keys `[lo, hi)` in tiles of `tile` keys from `lo`; split `s` of `splits` takes tiles
    /// `[s·per, (s + 1)·per)` with `per = ⌈tiles / splits⌉`; inside each tile, worker `w` of
    /// `workers` takes the `w`-th of `workers` equal slices, and each (split, worker) pair is
    /// a state whose running max moves once per slice.
    Split {
        /// Keys per tile (a ring stage).
        tile: usize,
        /// Key splits.
        splits: usize,
        /// States per split (warps), each taking a `tile / workers` slice of every tile.
        workers: usize,
    },
}

/// The rounding points of an emulated kernel; [`EmuSpec::storage`] is the FP16/BF16 kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmuSpec {
    /// Rounding of Q, K, V on load; `None` uses them as given (the FP8 kernel: callers pass
    /// dequantized FP8 values, which its MMAs multiply exactly).
    pub inputs: Option<Storage>,
    /// Rounding of P, the A operand of P·V.
    pub p: PRounding,
    /// Rounding of O.
    pub out: Storage,
    /// Keys per tile of the online softmax (the kernel's BLOCK_N), for [`KeyStates::One`].
    pub block_n: usize,
    /// How the keys are spread over online-softmax states.
    pub states: KeyStates,
}

impl EmuSpec {
    /// The FP16/BF16 kernel: inputs, P and O in `storage`, tiles of [`EMU_BLOCK_N`] keys.
    pub fn storage(storage: Storage) -> Self {
        Self {
            inputs: Some(storage),
            p: PRounding::Storage(storage),
            out: storage,
            block_n: EMU_BLOCK_N,
            states: KeyStates::One,
        }
    }
}

/// The forward pass with the kernel's rounding points (see the module documentation). The
/// values returned are f32 values (O: storage-type values) widened to f64.
pub fn forward_emulated(
    p: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    storage: Storage,
) -> Result<RefOutput, AttnError> {
    forward_emulated_spec(p, q, k, v, &EmuSpec::storage(storage))
}

/// [`forward_emulated`] with explicit rounding points (the FP8 kernel's, for one).
pub fn forward_emulated_spec(
    p: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    spec: &EmuSpec,
) -> Result<RefOutput, AttnError> {
    let shape = *p.shape();
    shape.check_qkv_lens(q.len(), k.len(), v.len())?;
    if spec.block_n == 0 {
        return Err(AttnError::InvalidArgument(
            "block_n must be at least 1".into(),
        ));
    }
    if let KeyStates::Split {
        tile,
        splits,
        workers,
    } = spec.states
    {
        if splits == 0 || workers == 0 || tile == 0 || tile % workers != 0 {
            return Err(AttnError::InvalidArgument(format!(
                "KeyStates::Split needs splits, workers ≥ 1 and tile a multiple of workers \
                 (tile {tile}, splits {splits}, workers {workers})"
            )));
        }
    }
    let round_all = |x: &[f32]| -> Vec<f32> {
        match spec.inputs {
            Some(st) => x.par_iter().map(|&y| st.round(y)).collect(),
            None => x.to_vec(),
        }
    };
    let (q, k, v) = (round_all(q), round_all(k), round_all(v));
    let block_n = spec.block_n;
    let features = p.features();
    // FlashAttention-2 folds the scale into the softcap: raw scores are tanh(q·k · scale/c)
    // and the softmax scale becomes c (`params.softcap`, `params.scale_softmax`).
    let (softcap_in, scale_softmax) = match features.softcap {
        Some(c) => (Some((p.scale() / c) as f32), c),
        None => (None, p.scale()),
    };
    let scale_log2 = (scale_softmax * std::f64::consts::LOG2_E) as f32;
    let (sq, d) = (shape.q_len(), shape.head_dim());

    let max_block = match spec.states {
        KeyStates::One => block_n,
        KeyStates::Split { tile, workers, .. } => tile / workers,
    };
    let mut o = vec![0.0; shape.o_elems()];
    let mut lse = vec![0.0; shape.lse_elems()];
    o.par_chunks_mut(d)
        .zip(lse.par_iter_mut())
        .enumerate()
        .for_each_init(
            || (vec![0.0f32; d], vec![0.0f32; d], vec![0.0f32; max_block]),
            |(acc, part, s), (row_index, (out, lse_out))| {
                let bh = row_index / sq;
                let (b, h, i) = (bh / shape.q_heads(), bh % shape.q_heads(), row_index % sq);
                let kvh = shape.kv_head_of(h);
                let qi = &q[shape.q_offset(b, h, i)..][..d];
                // ALiBi in raw-score units, `slope / scale_softmax` as the kernel divides it.
                let alibi = features
                    .alibi
                    .as_ref()
                    .map(|a| (f64::from(a.slope(b, h, shape.q_heads())) / scale_softmax) as f32);
                let range = p.visible_range(i);
                // One online softmax over `blocks` (each a key range whose scores move the
                // running max once), accumulating into `acc`, returning (m, l).
                let mut walk =
                    |acc: &mut [f32], blocks: &mut dyn Iterator<Item = (usize, usize)>| {
                        acc.fill(0.0);
                        let mut m = f32::NEG_INFINITY;
                        let mut l = 0.0f32;
                        for (c0, cols) in blocks {
                            for (c, sc) in s[..cols].iter_mut().enumerate() {
                                let j = c0 + c;
                                let mut x = dot_f32(qi, &k[shape.kv_offset(b, kvh, j)..][..d]);
                                if let Some(f) = softcap_in {
                                    x = (x * f).tanh();
                                }
                                if let Some(slope) = alibi {
                                    x -= slope * p.alibi_distance(i, j) as f32;
                                }
                                *sc = x;
                            }
                            let m_new = max_f32(m, max_f32_slice(&s[..cols]));
                            if m_new == f32::NEG_INFINITY {
                                continue; // every score so far is −∞: nothing to add yet
                            }
                            let alpha = ((m - m_new) * scale_log2).exp2();
                            let m_scaled = m_new * scale_log2;
                            l *= alpha;
                            acc.iter_mut().for_each(|a| *a *= alpha);
                            for (c, &sc) in s[..cols].iter().enumerate() {
                                let pc = sc.mul_add(scale_log2, -m_scaled).exp2();
                                l += pc;
                                let pr = spec.p.round(pc);
                                let vj = &v[shape.kv_offset(b, kvh, c0 + c)..][..d];
                                acc.iter_mut().zip(vj).for_each(|(a, &x)| *a += pr * x);
                            }
                            m = m_new;
                        }
                        (m, l)
                    };
                let (m, mut l) = match spec.states {
                    KeyStates::One => {
                        // Key tiles are aligned to multiples of block_n, as the kernel's are;
                        // the masked part of a tile is left out (−∞ scores add nothing).
                        let first = range.start / block_n * block_n;
                        let mut blocks = (first..range.end).step_by(block_n).map(|tile| {
                            let c0 = tile.max(range.start);
                            (c0, (tile + block_n).min(range.end) - c0)
                        });
                        walk(acc, &mut blocks)
                    }
                    KeyStates::Split {
                        tile,
                        splits,
                        workers,
                    } => {
                        // Each (split, worker) state separately, merged in f32 at the
                        // largest max (as the kernel's group merge and split combine).
                        let slice = tile / workers;
                        let tiles = range.len().div_ceil(tile);
                        let per = tiles.div_ceil(splits);
                        let mut states = Vec::with_capacity(splits * workers);
                        for split in 0..splits {
                            let (t0, t1) =
                                ((split * per).min(tiles), ((split + 1) * per).min(tiles));
                            for w in 0..workers {
                                let mut blocks = (t0..t1).filter_map(|t| {
                                    let c0 = range.start + t * tile + w * slice;
                                    (c0 < range.end).then(|| (c0, (c0 + slice).min(range.end) - c0))
                                });
                                let (ms, ls) = walk(part, &mut blocks);
                                states.push((ms, ls, part.clone()));
                            }
                        }
                        let m = states
                            .iter()
                            .fold(f32::NEG_INFINITY, |a, st| max_f32(a, st.0));
                        acc.fill(0.0);
                        let mut l = 0.0f32;
                        if m != f32::NEG_INFINITY {
                            for (ms, ls, a) in &states {
                                if *ms == f32::NEG_INFINITY {
                                    continue;
                                }
                                let w = ((ms - m) * scale_log2).exp2();
                                l += w * ls;
                                acc.iter_mut().zip(a).for_each(|(x, &y)| *x += w * y);
                            }
                        }
                        (m, l)
                    }
                };
                // The running max in log2 units.
                let mut m_log2 = m * scale_log2;
                if let (Some(sink), false) = (p.sink(h), range.is_empty()) {
                    // The sink joins the max and the denominator after the last tile.
                    let sink_log2 = (sink * std::f64::consts::LOG2_E) as f32;
                    let m_new = max_f32(m_log2, sink_log2);
                    let alpha = (m_log2 - m_new).exp2();
                    l = l * alpha + (sink_log2 - m_new).exp2();
                    acc.iter_mut().for_each(|a| *a *= alpha);
                    m_log2 = m_new;
                }
                if range.is_empty() {
                    out.fill(0.0);
                    *lse_out = f64::NEG_INFINITY;
                } else if l == 0.0 && m_log2 == f32::NEG_INFINITY {
                    // Visible keys whose scores are all −∞ (Inf inputs): propagate.
                    out.fill(f64::NAN);
                    *lse_out = f64::NAN;
                } else {
                    for (od, &a) in out.iter_mut().zip(acc.iter()) {
                        *od = f64::from(spec.out.round(a / l));
                    }
                    *lse_out = f64::from((m_log2 + l.log2()) * LN_2);
                }
            },
        );
    Ok(RefOutput { o, lse })
}

/// f32 dot product over [`LANES`] interleaved partial sums.
fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let mut a_chunks = a.chunks_exact(LANES);
    let mut b_chunks = b.chunks_exact(LANES);
    for (x, y) in a_chunks.by_ref().zip(b_chunks.by_ref()) {
        for i in 0..LANES {
            lanes[i] += x[i] * y[i];
        }
    }
    for (i, (x, y)) in a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .enumerate()
    {
        lanes[i] += x * y;
    }
    lanes.iter().sum()
}

/// `max` that returns NaN if either operand is NaN.
fn max_f32(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}

fn max_f32_slice(xs: &[f32]) -> f32 {
    xs.iter().fold(f32::NEG_INFINITY, |m, &x| max_f32(m, x))
}
