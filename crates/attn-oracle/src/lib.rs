//! `attn-oracle` tells *where* an attention kernel goes wrong, not only *that* it does. It
//! takes plain host data — the kernel's output, the f64 reference, optionally the S/P/m/l
//! tiles a debug kernel dumped and the tiled reference's twins — and returns a report: max
//! abs and relative L2 error, NaN/±Inf counts with their first location, the worst elements,
//! per-head and per-row-block summaries, an [`ErrorPattern`] with the evidence behind it, the
//! first diverging [`Stage`] of the FlashAttention pipeline (S → P → O), and the verdict of
//! the workspace's tolerance rule ([`ToleranceRule`]; docs/ARCHITECTURE.md).
//!
//! It has no CUDA dependency: the GPU side (`cargo xtask oracle`) runs the kernel and hands
//! the oracle host vectors.
//!
//! ```
//! use attn_oracle::{compare, CompareOptions, ErrorPattern};
//! use attn_ref::AttnShape;
//!
//! let shape = AttnShape::self_attention(1, 2, 4, 2).unwrap(); // O is [1, 2, 4, 2]
//! let want: Vec<f64> = (0..16).map(|i| (i as f64 * 0.37).sin()).collect();
//! let mut got: Vec<f32> = want.iter().map(|&x| x as f32).collect();
//! got[13] = f32::NAN; // (b=0, h=1, s=2, d=1)
//!
//! let report = compare(&got, &want, &shape, &CompareOptions::default()).unwrap();
//! assert_eq!(report.nan.count, 1);
//! let first = report.nan.first.unwrap();
//! assert_eq!((first.b, first.h, first.s, first.d), (0, 1, 2, Some(1)));
//! assert!(matches!(report.pattern, ErrorPattern::NanInf { .. }));
//! println!("{report}"); // the human summary
//! ```
//!
//! The decision tree the hints follow is the seeds' debugging loop: S diverges → the QK path
//! (layouts, scale); P diverges → the softmax update or the causal mask; O diverges → the P·V
//! accumulation or the final normalization. A backward's dumped P, dP, Δ and dS tiles get the
//! same treatment ([`compare_bwd_tiles`], [`BwdStage`]).

#![warn(missing_docs)]

mod artifacts;
mod bwd_tiles;
mod compare;
mod pattern;
mod tiles;
mod tolerance;

pub use artifacts::{write_artifacts, write_npy, Artifacts, Findings};
pub use bwd_tiles::{compare_bwd_tiles, BwdStage, BwdTileDiff, BwdTileReport, BwdTileTolerance};
pub use compare::{
    compare, compare_lse, CompareOptions, GroupSummary, HeadSummary, Location, NonFiniteCount,
    OracleReport, RowBlockSummary, TensorKind, WorstElement,
};
pub use pattern::{Alternative, Axis, ErrorPattern, HeadMatch, ScaleKind, Stage, Suspect};
pub use tiles::{compare_tiles, TileDiff, TileReport, TileTolerance};
pub use tolerance::{Caps, GradientWorst, Storage, ToleranceRule, Verdict};

/// Errors of the oracle: bad input sizes or options, and I/O while writing artifacts.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    /// A buffer does not have the length the shape implies.
    #[error("{what} has {got} elements but the shape {shape} needs {expected}")]
    LengthMismatch {
        /// Which buffer (`"got"`, `"want"`, an alternative's label…).
        what: String,
        /// The shape, written `[B, H, S, D]`.
        shape: String,
        /// Elements the shape implies.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// An option is out of its valid range.
    #[error("invalid oracle option: {0}")]
    InvalidOption(String),
    /// Creating or writing a file failed.
    #[error("writing {path}: {source}")]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Serializing the JSON report failed.
    #[error("serializing report.json: {0}")]
    Json(#[from] serde_json::Error),
}
