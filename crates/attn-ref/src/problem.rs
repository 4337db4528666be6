//! The problem description every crate in the workspace speaks: shape, causal alignment,
//! softmax scale, the `[B, H, S, D]` layout and tile identifiers.

use crate::AttnError;

/// Sizes of one attention problem. Q is `[batch, q_heads, q_len, head_dim]`, K and V are
/// `[batch, kv_heads, kv_len, head_dim]`, O is shaped like Q and LSE is `[batch, q_heads, q_len]`.
///
/// All tensors are contiguous in `[B, H, S, D]` order. Query head `h` reads KV head
/// `h / (q_heads / kv_heads)` (grouped-query / multi-query attention).
///
/// Fields are private so that every value in circulation has passed [`AttnShape::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttnShape {
    batch: usize,
    q_heads: usize,
    kv_heads: usize,
    q_len: usize,
    kv_len: usize,
    head_dim: usize,
}

impl AttnShape {
    /// Validates and builds a shape: every size must be non-zero, `q_heads` a multiple of
    /// `kv_heads`, and every tensor's element count must fit in `usize`.
    pub fn new(
        batch: usize,
        q_heads: usize,
        kv_heads: usize,
        q_len: usize,
        kv_len: usize,
        head_dim: usize,
    ) -> Result<Self, AttnError> {
        for (name, v) in [
            ("batch", batch),
            ("q_heads", q_heads),
            ("kv_heads", kv_heads),
            ("q_len", q_len),
            ("kv_len", kv_len),
            ("head_dim", head_dim),
        ] {
            if v == 0 {
                return Err(AttnError::ZeroSize { name });
            }
        }
        if q_heads % kv_heads != 0 {
            return Err(AttnError::HeadsNotDivisible { q_heads, kv_heads });
        }
        let fits = |a: usize, b: usize, c: usize, d: usize| {
            a.checked_mul(b)
                .and_then(|x| x.checked_mul(c))
                .and_then(|x| x.checked_mul(d))
                .is_some()
        };
        if !fits(batch, q_heads, q_len, head_dim) || !fits(batch, kv_heads, kv_len, head_dim) {
            return Err(AttnError::TooLarge);
        }
        Ok(Self {
            batch,
            q_heads,
            kv_heads,
            q_len,
            kv_len,
            head_dim,
        })
    }

    /// Self-attention shape: one head count, one sequence length (`Sq == Sk`).
    pub fn self_attention(
        batch: usize,
        heads: usize,
        seq_len: usize,
        head_dim: usize,
    ) -> Result<Self, AttnError> {
        Self::new(batch, heads, heads, seq_len, seq_len, head_dim)
    }

    /// Batch size B.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// Number of query heads Hq.
    pub fn q_heads(&self) -> usize {
        self.q_heads
    }
    /// Number of key/value heads Hkv (divides Hq).
    pub fn kv_heads(&self) -> usize {
        self.kv_heads
    }
    /// Query sequence length Sq.
    pub fn q_len(&self) -> usize {
        self.q_len
    }
    /// Key/value sequence length Sk.
    pub fn kv_len(&self) -> usize {
        self.kv_len
    }
    /// Head dimension D.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }
    /// Query heads sharing one KV head (`Hq / Hkv`).
    pub fn group_size(&self) -> usize {
        self.q_heads / self.kv_heads
    }
    /// The KV head that query head `h` reads.
    pub fn kv_head_of(&self, q_head: usize) -> usize {
        q_head / self.group_size()
    }
    /// Elements in Q (and in O).
    pub fn q_elems(&self) -> usize {
        self.batch * self.q_heads * self.q_len * self.head_dim
    }
    /// Elements in K (and in V).
    pub fn kv_elems(&self) -> usize {
        self.batch * self.kv_heads * self.kv_len * self.head_dim
    }
    /// Elements in O (same as Q).
    pub fn o_elems(&self) -> usize {
        self.q_elems()
    }
    /// Elements in LSE (`B·Hq·Sq`).
    pub fn lse_elems(&self) -> usize {
        self.batch * self.q_heads * self.q_len
    }
    /// Flat offset of `Q[b, h, s, 0]` (also O's).
    pub fn q_offset(&self, b: usize, h: usize, s: usize) -> usize {
        ((b * self.q_heads + h) * self.q_len + s) * self.head_dim
    }
    /// Flat offset of `K[b, kvh, s, 0]` (also V's); `kvh` is a KV head index.
    pub fn kv_offset(&self, b: usize, kv_head: usize, s: usize) -> usize {
        ((b * self.kv_heads + kv_head) * self.kv_len + s) * self.head_dim
    }
    /// Flat offset of `LSE[b, h, s]`.
    pub fn lse_offset(&self, b: usize, h: usize, s: usize) -> usize {
        (b * self.q_heads + h) * self.q_len + s
    }
    /// Floating-point operations of the forward pass (`4·B·Hq·Sq·Sk·D`), halved for causal
    /// masks as the benchmark convention does.
    pub fn flops(&self, causal: Causal) -> f64 {
        let f = 4.0
            * self.batch as f64
            * self.q_heads as f64
            * self.q_len as f64
            * self.kv_len as f64
            * self.head_dim as f64;
        if causal == Causal::None {
            f
        } else {
            f / 2.0
        }
    }

    /// Checks that Q, K and V slices have the lengths this shape implies.
    pub fn check_qkv_lens(&self, q: usize, k: usize, v: usize) -> Result<(), AttnError> {
        check_len("Q", self.q_elems(), q)?;
        check_len("K", self.kv_elems(), k)?;
        check_len("V", self.kv_elems(), v)
    }
}

/// Checks that a buffer named `tensor` holds `expected` elements.
pub fn check_len(tensor: &'static str, expected: usize, got: usize) -> Result<(), AttnError> {
    if expected == got {
        Ok(())
    } else {
        Err(AttnError::LengthMismatch {
            tensor,
            expected,
            got,
        })
    }
}

/// Causal masking and how the diagonal is aligned when `Sq != Sk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Causal {
    /// Every key is visible to every query.
    #[default]
    None,
    /// PyTorch `is_causal`: key `j` is visible to query `i` iff `j <= i`.
    TopLeft,
    /// FlashAttention ≥ 2.1: key `j` is visible to query `i` iff `j <= i + Sk - Sq`.
    BottomRight,
}

impl Causal {
    /// Number of keys visible to query row `i`: keys `0..n` are visible, the rest are masked.
    /// Zero means the row is fully masked (output 0, LSE −∞).
    pub fn visible_keys(self, i: usize, q_len: usize, kv_len: usize) -> usize {
        match self {
            Causal::None => kv_len,
            Causal::TopLeft => (i + 1).min(kv_len),
            Causal::BottomRight => {
                // j <= i + Sk - Sq  ⇔  j < i + 1 + Sk - Sq, computed without underflow.
                let end = (i + 1 + kv_len).saturating_sub(q_len);
                end.min(kv_len)
            }
        }
    }

    /// Whether key `j` is visible to query `i`.
    pub fn is_visible(self, i: usize, j: usize, q_len: usize, kv_len: usize) -> bool {
        j < self.visible_keys(i, q_len, kv_len)
    }

    /// Parses `none`, `top-left` or `bottom-right` (the CLI spelling).
    pub fn parse(s: &str) -> Result<Self, AttnError> {
        match s {
            "none" => Ok(Causal::None),
            "top-left" => Ok(Causal::TopLeft),
            "bottom-right" => Ok(Causal::BottomRight),
            other => Err(AttnError::UnknownCausal(other.to_string())),
        }
    }

    /// The CLI spelling of this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Causal::None => "none",
            Causal::TopLeft => "top-left",
            Causal::BottomRight => "bottom-right",
        }
    }
}

impl std::fmt::Display for Causal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A complete problem: shape, causal mode and softmax scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Problem {
    shape: AttnShape,
    causal: Causal,
    scale: f64,
}

impl Problem {
    /// A problem with the default scale `1/√D`.
    pub fn new(shape: AttnShape, causal: Causal) -> Self {
        Self {
            shape,
            causal,
            scale: 1.0 / (shape.head_dim() as f64).sqrt(),
        }
    }

    /// Replaces the softmax scale; it must be finite and positive.
    pub fn with_scale(mut self, scale: f64) -> Result<Self, AttnError> {
        if !scale.is_finite() || scale <= 0.0 {
            return Err(AttnError::InvalidScale(scale));
        }
        self.scale = scale;
        Ok(self)
    }

    /// The shape.
    pub fn shape(&self) -> &AttnShape {
        &self.shape
    }
    /// The causal mode.
    pub fn causal(&self) -> Causal {
        self.causal
    }
    /// The softmax scale applied to `Q·Kᵀ`.
    pub fn scale(&self) -> f64 {
        self.scale
    }
    /// Keys visible to query row `i` (`0..n`).
    pub fn visible_keys(&self, i: usize) -> usize {
        self.causal
            .visible_keys(i, self.shape.q_len(), self.shape.kv_len())
    }
}

/// Identifies one (query block × key block) tile of one (batch, query head).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileId {
    /// Batch index.
    pub b: usize,
    /// Query head index.
    pub h: usize,
    /// Query block index (rows `q_tile·BLOCK_M ..`).
    pub q_tile: usize,
    /// Key block index (keys `k_tile·BLOCK_N ..`).
    pub k_tile: usize,
}

/// The host values of one tile of the online-softmax algorithm, after the tile was processed.
///
/// `rows`/`cols` are the valid extents (tails are shorter than BLOCK_M/BLOCK_N); `s` and `p`
/// are row-major `rows × cols`. All values are in the natural-log domain:
/// - `s[r][c]` = scale · q·k, or −∞ where masked;
/// - `m[r]` = running row max after this tile (−∞ while every key so far is masked);
/// - `p[r][c]` = `exp(s − m[r])` (0 where masked), the unnormalized probabilities;
/// - `l[r]` = running row sum of `exp(s − m[r])` over all tiles so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Tile {
    /// Which tile.
    pub id: TileId,
    /// Valid query rows in the tile.
    pub rows: usize,
    /// Valid key columns in the tile.
    pub cols: usize,
    /// Scaled scores, `rows × cols`.
    pub s: Vec<f64>,
    /// Unnormalized probabilities, `rows × cols`.
    pub p: Vec<f64>,
    /// Running max per row.
    pub m: Vec<f64>,
    /// Running sum per row.
    pub l: Vec<f64>,
}

/// An element type the reference accepts: `f16`, `bf16`, `f32`, `f64`.
pub trait Element: Copy + Send + Sync + 'static {
    /// Exact widening to f64.
    fn to_f64(self) -> f64;
}

impl Element for f64 {
    fn to_f64(self) -> f64 {
        self
    }
}
impl Element for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
}
impl Element for half::f16 {
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
}
impl Element for half::bf16 {
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
}
