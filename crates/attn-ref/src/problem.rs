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

/// ALiBi slopes (Press et al., "Train Short, Test Long", 2022): query head `h` of batch `b`
/// adds `−slope · |i + Sk − Sq − j|` to the score of key `j` (distance from the
/// bottom-right-aligned diagonal, as FlashAttention does).
#[derive(Debug, Clone, PartialEq)]
pub enum Alibi {
    /// One slope per query head, `[Hq]`.
    PerHead(Vec<f32>),
    /// One slope per (batch, query head), `[B, Hq]` row-major.
    PerBatchHead(Vec<f32>),
}

impl Alibi {
    /// The slopes as given.
    pub fn slopes(&self) -> &[f32] {
        match self {
            Alibi::PerHead(s) | Alibi::PerBatchHead(s) => s,
        }
    }

    /// The slope of query head `h` of batch `b` (`q_heads` = Hq).
    ///
    /// # Panics
    /// If the index is out of range of the slopes.
    pub fn slope(&self, b: usize, h: usize, q_heads: usize) -> f32 {
        match self {
            Alibi::PerHead(s) => s[h],
            Alibi::PerBatchHead(s) => s[b * q_heads + h],
        }
    }

    /// The slopes of batch `b` as per-head slopes (for a one-sequence sub-problem).
    pub fn for_batch(&self, b: usize, q_heads: usize) -> Alibi {
        match self {
            Alibi::PerHead(s) => Alibi::PerHead(s.clone()),
            Alibi::PerBatchHead(s) => Alibi::PerHead(s[b * q_heads..][..q_heads].to_vec()),
        }
    }
}

/// Serving features of attention beyond the causal mask, all off by default. A [`Problem`]
/// only holds values that passed its `with_*` builders (see [`Problem::with_features`]).
///
/// Per score, in order (FlashAttention's order):
/// 1. `s = scale · q·k`;
/// 2. softcap: `s ← c · tanh(s / c)`;
/// 3. ALiBi: `s ← s − slope · |i + Sk − Sq − j|`;
/// 4. masking: causal ∩ sliding window (masked keys never touch the row);
/// 5. softmax, with the sink logit (if any) added to the denominator only:
///    `l = Σ_j exp(s_j − m) + exp(sink − m)`, `o = Σ_j exp(s_j − m)·v_j / l`, `lse = m + ln l`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Features {
    /// Sliding window `(left, right)`, −1 = unbounded on that side. Bottom-right aligned:
    /// key `j` is visible to query `i` iff `i + Sk − Sq − left ≤ j ≤ i + Sk − Sq + right`.
    pub window: Option<(i64, i64)>,
    /// Softcap `c > 0`: `s ← c·tanh(s/c)` on the scaled score.
    pub softcap: Option<f64>,
    /// ALiBi slopes.
    pub alibi: Option<Alibi>,
    /// Attention-sink logits, one per query head `[Hq]`.
    pub sinks: Option<Vec<f32>>,
}

impl Features {
    /// Whether no feature is set (plain attention).
    pub fn is_empty(&self) -> bool {
        self.window.is_none()
            && self.softcap.is_none()
            && self.alibi.is_none()
            && self.sinks.is_none()
    }

    /// Whether the score of a visible key is anything but `scale · q·k` (softcap or ALiBi).
    pub fn transforms_scores(&self) -> bool {
        self.softcap.is_some() || self.alibi.is_some()
    }

    /// Checks every set feature against a shape.
    pub fn validate(&self, shape: &AttnShape) -> Result<(), AttnError> {
        if let Some((left, right)) = self.window {
            if left < -1 || right < -1 {
                return Err(AttnError::InvalidWindow { left, right });
            }
        }
        if let Some(c) = self.softcap {
            if !c.is_finite() || c <= 0.0 {
                return Err(AttnError::InvalidSoftcap(c));
            }
        }
        if let Some(alibi) = &self.alibi {
            let expected = match alibi {
                Alibi::PerHead(_) => shape.q_heads(),
                Alibi::PerBatchHead(_) => shape.batch() * shape.q_heads(),
            };
            check_feature("ALiBi slopes", expected, alibi.slopes())?;
            if let Some((index, &value)) = alibi
                .slopes()
                .iter()
                .enumerate()
                .find(|(_, x)| !x.is_finite())
            {
                return Err(AttnError::NonFiniteFeature {
                    feature: "ALiBi slopes",
                    index,
                    value,
                });
            }
        }
        if let Some(sinks) = &self.sinks {
            check_feature("sinks", shape.q_heads(), sinks)?;
            // −∞ is a valid logit (a sink that takes nothing); NaN and +∞ are not.
            if let Some((index, &value)) = sinks
                .iter()
                .enumerate()
                .find(|(_, x)| x.is_nan() || **x == f32::INFINITY)
            {
                return Err(AttnError::NonFiniteFeature {
                    feature: "sinks",
                    index,
                    value,
                });
            }
        }
        Ok(())
    }
}

fn check_feature(feature: &'static str, expected: usize, got: &[f32]) -> Result<(), AttnError> {
    if got.len() == expected {
        Ok(())
    } else {
        Err(AttnError::FeatureLength {
            feature,
            expected,
            got: got.len(),
        })
    }
}

/// A complete problem: shape, causal mode, softmax scale and the optional [`Features`]
/// (sliding window, softcap, ALiBi, sinks).
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    shape: AttnShape,
    causal: Causal,
    scale: f64,
    features: Features,
}

impl Problem {
    /// A problem with the default scale `1/√D`.
    pub fn new(shape: AttnShape, causal: Causal) -> Self {
        Self {
            shape,
            causal,
            scale: 1.0 / (shape.head_dim() as f64).sqrt(),
            features: Features::default(),
        }
    }

    /// Replaces all features at once, after [`Features::validate`].
    ///
    /// Like every `with_*` builder, this takes `&self` and returns a new problem, so a
    /// problem can be reused after deriving another from it.
    pub fn with_features(&self, features: Features) -> Result<Self, AttnError> {
        features.validate(&self.shape)?;
        Ok(Self {
            features,
            ..self.clone()
        })
    }

    /// Adds a sliding window `(left, right)` (−1 = unbounded on that side), intersected
    /// with the causal mask. Errors on a value below −1.
    pub fn with_window(&self, left: i64, right: i64) -> Result<Self, AttnError> {
        let features = Features {
            window: Some((left, right)),
            ..self.features.clone()
        };
        self.with_features(features)
    }

    /// Adds a softcap `c`: `s ← c·tanh(s/c)`. Errors unless `c` is finite and > 0.
    pub fn with_softcap(&self, c: f64) -> Result<Self, AttnError> {
        let features = Features {
            softcap: Some(c),
            ..self.features.clone()
        };
        self.with_features(features)
    }

    /// Adds ALiBi slopes. Errors on a length other than `Hq` ([`Alibi::PerHead`]) or
    /// `B·Hq` ([`Alibi::PerBatchHead`]), or a non-finite slope.
    pub fn with_alibi(&self, alibi: Alibi) -> Result<Self, AttnError> {
        let features = Features {
            alibi: Some(alibi),
            ..self.features.clone()
        };
        self.with_features(features)
    }

    /// Adds attention-sink logits, one per query head. Errors on a length other than `Hq`,
    /// or a NaN or +∞ logit (−∞ is a sink that takes no mass).
    pub fn with_sinks(&self, sinks: Vec<f32>) -> Result<Self, AttnError> {
        let features = Features {
            sinks: Some(sinks),
            ..self.features.clone()
        };
        self.with_features(features)
    }

    /// The same problem with another shape (batch, lengths), keeping causal mode, scale and
    /// features; the features are validated against the new shape.
    pub fn with_shape(&self, shape: AttnShape) -> Result<Self, AttnError> {
        self.features.validate(&shape)?;
        Ok(Self {
            shape,
            ..self.clone()
        })
    }

    /// The one-sequence problem of batch entry `b` with lengths `q_len`, `kv_len`: batch 1,
    /// the same heads, head dim, causal mode, scale and features, with per-(batch, head)
    /// ALiBi slopes narrowed to entry `b`'s. What the varlen and paged entry points run for
    /// each sequence. Errors if `b` is outside the batch or a length is zero.
    pub fn sequence(&self, b: usize, q_len: usize, kv_len: usize) -> Result<Problem, AttnError> {
        let s = &self.shape;
        if b >= s.batch() {
            return Err(AttnError::InvalidArgument(format!(
                "sequence {b} is outside the batch of {}",
                s.batch()
            )));
        }
        let shape = AttnShape::new(1, s.q_heads(), s.kv_heads(), q_len, kv_len, s.head_dim())?;
        let features = Features {
            alibi: self
                .features
                .alibi
                .as_ref()
                .map(|a| a.for_batch(b, s.q_heads())),
            ..self.features.clone()
        };
        Problem::new(shape, self.causal)
            .with_scale(self.scale)?
            .with_features(features)
    }

    /// Replaces the softmax scale; it must be finite and positive. Returns a new problem
    /// (`&self`, so the original stays usable).
    pub fn with_scale(&self, scale: f64) -> Result<Self, AttnError> {
        if !scale.is_finite() || scale <= 0.0 {
            return Err(AttnError::InvalidScale(scale));
        }
        Ok(Self {
            scale,
            ..self.clone()
        })
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
    /// The features (window, softcap, ALiBi, sinks).
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// The number of keys visible to query row `i`; zero means the row is fully masked
    /// (O = 0, LSE = −∞). Without a window with a left bound these are the keys `0..n`; in
    /// general they are [`Problem::visible_range`].
    pub fn visible_keys(&self, i: usize) -> usize {
        self.visible_range(i).len()
    }

    /// The keys visible to query row `i`: the causal mask intersected with the sliding
    /// window, an interval of `0..Sk` (empty for a fully masked row).
    pub fn visible_range(&self, i: usize) -> std::ops::Range<usize> {
        let (sq, sk) = (self.shape.q_len(), self.shape.kv_len());
        let end = self.causal.visible_keys(i, sq, sk);
        let Some((left, right)) = self.features.window else {
            return 0..end;
        };
        // The bottom-right diagonal i + Sk − Sq, in i128 so that no sum overflows.
        let diag = i as i128 + sk as i128 - sq as i128;
        let mut lo = 0i128;
        let mut hi = end as i128; // exclusive
        if left >= 0 {
            lo = lo.max(diag - left as i128);
        }
        if right >= 0 {
            hi = hi.min(diag + right as i128 + 1);
        }
        if hi <= lo {
            0..0
        } else {
            lo as usize..hi as usize
        }
    }

    /// Whether key `j` is visible to query row `i` (causal mask ∩ window).
    pub fn is_visible(&self, i: usize, j: usize) -> bool {
        self.visible_range(i).contains(&j)
    }

    /// The score of key `j` for query row `i` of `(b, h)` given the scaled dot product
    /// `s = scale · q·k`: softcap, then ALiBi (see [`Features`]). Masking is separate
    /// ([`Problem::visible_range`]). Returns `s` unchanged when neither is set.
    #[inline]
    pub fn score(&self, b: usize, h: usize, i: usize, j: usize, s: f64) -> f64 {
        let mut s = s;
        if let Some(c) = self.features.softcap {
            s = c * (s / c).tanh();
        }
        if let Some(alibi) = &self.features.alibi {
            s -= f64::from(alibi.slope(b, h, self.shape.q_heads())) * self.alibi_distance(i, j);
        }
        s
    }

    /// `|i + Sk − Sq − j|`, the ALiBi distance of key `j` from row `i`'s diagonal.
    pub fn alibi_distance(&self, i: usize, j: usize) -> f64 {
        let d = i as i128 + self.shape.kv_len() as i128 - self.shape.q_len() as i128 - j as i128;
        d.unsigned_abs() as f64
    }

    /// The sink logit of query head `h`, if the problem has sinks.
    pub fn sink(&self, h: usize) -> Option<f64> {
        self.features.sinks.as_ref().map(|s| f64::from(s[h]))
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
/// - `s[r][c]` = the score ([`Problem::score`]: scale · q·k, softcapped, ALiBi-shifted), or
///   −∞ where masked;
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

/// The backward's values of one tile (`b`, `h`, query block × key block) of a problem without
/// score features, in the kernels' terms: with `z = scale · q·k` and the row's LSE,
/// - `p[r][c]` = `exp(z − LSE)` (0 where masked), the normalized probabilities;
/// - `dp[r][c]` = `dO_r · V_c` (every valid column, masked or not: the GEMM computes them all);
/// - `ds[r][c]` = `p · (dp − Δ_r)`, the gradient of the loss with respect to `z` (0 where
///   masked), so that `dQ = scale · dS·K` and `dK = scale · dSᵀ·Q`;
/// - `delta[r]` = `Δ_r = Σ_c p·dp` over the row's keys (= `dO_r · O_r`).
///
/// `rows`/`cols` are the valid extents; the matrices are row-major `rows × cols`.
#[derive(Debug, Clone, PartialEq)]
pub struct BwdTile {
    /// Which tile.
    pub id: TileId,
    /// Valid query rows in the tile.
    pub rows: usize,
    /// Valid key columns in the tile.
    pub cols: usize,
    /// Normalized probabilities, `rows × cols`.
    pub p: Vec<f64>,
    /// `dO·Vᵀ`, `rows × cols`.
    pub dp: Vec<f64>,
    /// `P ∘ (dP − Δ)`, `rows × cols`.
    pub ds: Vec<f64>,
    /// Δ per row.
    pub delta: Vec<f64>,
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
