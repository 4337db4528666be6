//! `attn-ref` says what scaled-dot-product attention *means*: the problem types that every
//! crate of the workspace speaks ([`AttnShape`], [`Causal`], [`Problem`], [`TileId`],
//! [`Tile`]), a CPU reference with f64 accumulation, and a tiled online-softmax twin that
//! exposes the S and P tiles a FlashAttention kernel computes.
//!
//! ```
//! use attn_ref::{AttnShape, Causal, Problem};
//! let shape = AttnShape::new(1, 4, 2, 3, 5, 8).unwrap(); // GQA 4:2, Sq=3, Sk=5, D=8
//! let problem = Problem::new(shape, Causal::BottomRight);
//! assert_eq!(shape.kv_head_of(3), 1);
//! assert_eq!(problem.visible_keys(0), 3); // bottom-right: j <= i + Sk - Sq
//! assert!((problem.scale() - 1.0 / 8f64.sqrt()).abs() < 1e-15);
//! ```

#![warn(missing_docs)]

mod backend;
mod dtype;
mod problem;
pub mod reference;

pub use backend::ReferenceBackend;
pub use dtype::Dtype;
pub use problem::{
    check_len, Alibi, AttnShape, BwdTile, Causal, Element, Features, Problem, Tile, TileId,
};

/// Errors from building or checking a problem.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttnError {
    /// A size was zero.
    #[error("`{name}` must be at least 1")]
    ZeroSize {
        /// Which size.
        name: &'static str,
    },
    /// `q_heads` is not a multiple of `kv_heads`.
    #[error("q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads}) for grouped-query attention")]
    HeadsNotDivisible {
        /// Query heads.
        q_heads: usize,
        /// Key/value heads.
        kv_heads: usize,
    },
    /// The element count of a tensor overflows `usize`.
    #[error("shape too large: an element count overflows usize")]
    TooLarge,
    /// A buffer's length does not match the shape.
    #[error("{tensor} has {got} elements but the shape needs {expected}")]
    LengthMismatch {
        /// Which tensor.
        tensor: &'static str,
        /// Elements the shape implies.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// The softmax scale is not finite and positive.
    #[error("softmax scale must be finite and > 0, got {0}")]
    InvalidScale(f64),
    /// An unknown causal spelling.
    #[error("unknown causal mode `{0}`: expected none, top-left or bottom-right")]
    UnknownCausal(String),
    /// A sliding-window bound below −1.
    #[error(
        "sliding window ({left}, {right}) is invalid: each side must be >= 0, or -1 for unbounded"
    )]
    InvalidWindow {
        /// Keys to the left of the diagonal.
        left: i64,
        /// Keys to the right of the diagonal.
        right: i64,
    },
    /// A softcap that is not finite and positive.
    #[error("softcap must be finite and > 0, got {0}")]
    InvalidSoftcap(f64),
    /// ALiBi slopes or sinks of the wrong length.
    #[error("{feature} have {got} values but the shape needs {expected}")]
    FeatureLength {
        /// Which feature.
        feature: &'static str,
        /// Values the shape implies.
        expected: usize,
        /// Values given.
        got: usize,
    },
    /// A NaN or infinite ALiBi slope, or a NaN or +∞ sink.
    #[error("{feature}[{index}] = {value} is not allowed")]
    NonFiniteFeature {
        /// Which feature.
        feature: &'static str,
        /// Index of the bad value.
        index: usize,
        /// The value.
        value: f32,
    },
    /// A `cu_seqlens` array of the wrong length (it must hold `B + 1` prefix sums).
    #[error("{name} has {got} entries but {expected} are needed (batch + 1)")]
    CuSeqlensLength {
        /// Which array (`cu_seqlens_q`, `cu_seqlens_k`).
        name: &'static str,
        /// Entries needed.
        expected: usize,
        /// Entries given.
        got: usize,
    },
    /// A `cu_seqlens` array that does not start at 0 or decreases.
    #[error("{name}[{index}] = {value} is invalid: prefix sums start at 0 and never decrease (previous {previous})")]
    CuSeqlensNotMonotone {
        /// Which array.
        name: &'static str,
        /// Index of the bad entry.
        index: usize,
        /// Its value.
        value: i64,
        /// The entry before it (0 for index 0, which must be 0).
        previous: i64,
    },
    /// A paged-KV page size that is not a positive multiple of 16.
    #[error("page size {0} must be a positive multiple of 16")]
    InvalidPageSize(usize),
    /// A paged-KV cache whose length is not a whole number of pages.
    #[error("{tensor} cache has {got} elements, not a whole number of pages of {page_elems} (page_size × Hkv × D)")]
    PagedCacheShape {
        /// Which cache (`K`, `V`).
        tensor: &'static str,
        /// Elements given.
        got: usize,
        /// Elements per page.
        page_elems: usize,
    },
    /// A block table whose length is not a positive multiple of the batch.
    #[error("block table has {len} entries, not [batch = {batch}, max_blocks_per_seq ≥ 1]")]
    BlockTableShape {
        /// Entries given.
        len: usize,
        /// Batch size.
        batch: usize,
    },
    /// A block-table entry that a sequence uses but that names no block of the cache.
    #[error("block_table[{batch}][{slot}] = {index} is outside the cache's {num_blocks} blocks")]
    BlockIndexOutOfRange {
        /// Sequence.
        batch: usize,
        /// Slot in the sequence's row of the table.
        slot: usize,
        /// The entry.
        index: i64,
        /// Blocks in the cache.
        num_blocks: usize,
    },
    /// A `seqused_k` entry outside `0..=capacity` (`max_blocks_per_seq · page_size`).
    #[error(
        "seqused_k[{batch}] = {seqused} is outside 0..={capacity} (the block table's capacity)"
    )]
    SequsedOutOfRange {
        /// Sequence.
        batch: usize,
        /// The entry.
        seqused: i64,
        /// Keys the sequence's row of the block table can hold.
        capacity: usize,
    },
    /// A tile size or row selection is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// A backend's error, boxed so that backends with different error types share one trait.
pub type BackendError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Output of an attention backend, on the host: O `[B,Hq,Sq,D]` and LSE `[B,Hq,Sq]`
/// (natural log of the softmax denominator of scaled scores; −∞ for fully masked rows).
#[derive(Debug, Clone, PartialEq)]
pub struct AttnOutput {
    /// The attention output.
    pub o: Vec<f32>,
    /// Log-sum-exp per query row.
    pub lse: Vec<f32>,
}

/// One attention implementation: the CPU reference, a GPU kernel, … Tests, the oracle and
/// the gate run any backend on the same inputs through this trait.
///
/// Inputs are f32 host slices in `[B, H, S, D]` layout; a backend with a narrower storage
/// type rounds them to it (callers that want exact agreement pass values already
/// representable in that type).
pub trait Attention {
    /// A short name for reports (`"reference-f64"`, `"fa2-f16-sm90a"`).
    fn name(&self) -> String;
    /// Runs the forward pass.
    fn forward(
        &self,
        problem: &Problem,
        q: &[f32],
        k: &[f32],
        v: &[f32],
    ) -> Result<AttnOutput, BackendError>;
}
