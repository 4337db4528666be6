//! The oracle's findings as a whole, and the artifacts written to an output directory:
//! `O_ref.npy`, `O_test.npy`, per-tile `S_*`/`P_*` arrays, `report.json` and `summary.txt`.

use std::fmt;
use std::path::{Path, PathBuf};

use attn_ref::Tile;
use serde::Serialize;

use crate::{OracleError, OracleReport, Stage, TileReport, Verdict};

/// Everything one oracle run found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Findings {
    /// The backend that ran (`fa2-f16-d64-64x64w4s2-sm90a`, `got.npy`…).
    pub kernel: String,
    /// The problem, in words (`B=1 Hq=8 Hkv=8 Sq=512 Sk=512 D=64 causal=none f16 seed=0`).
    pub problem: String,
    /// O compared with the f64 reference.
    pub o: OracleReport,
    /// LSE compared with the reference, when available.
    pub lse: Option<OracleReport>,
    /// The tile comparison, when tiles were dumped.
    pub tiles: Option<TileReport>,
    /// The tolerance rule's verdict, when an emulation was available.
    pub verdict: Option<Verdict>,
}

impl Findings {
    /// The first diverging stage: from the tiles when dumped, else from O's pattern.
    pub fn stage(&self) -> Option<Stage> {
        match &self.tiles {
            Some(t) => t.diagnose(&self.o),
            None => self.o.stage(),
        }
    }
    /// The human summary (same text as `Display`).
    pub fn summary(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Findings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "oracle: {} on {}", self.kernel, self.problem)?;
        write!(f, "{}", self.o)?;
        if let Some(l) = &self.lse {
            write!(f, "{l}")?;
        }
        if let Some(t) = &self.tiles {
            write!(f, "{t}")?;
        }
        if let Some(stage) = self.stage() {
            // Without dumps the stage is inferred from O's pattern: say so.
            let how = if self.tiles.is_some() {
                "first diverging stage"
            } else {
                "suspected stage (from the O pattern; dump tiles to confirm)"
            };
            writeln!(f, "{how}: {} — {}", stage.name(), stage.hint())?;
        }
        if let Some(v) = &self.verdict {
            write!(f, "{v}")?;
        }
        Ok(())
    }
}

/// What [`write_artifacts`] writes.
#[derive(Debug, Clone, Copy)]
pub struct Artifacts<'a> {
    /// The findings (→ `report.json`, `summary.txt`); O's dims give the arrays' shape.
    pub findings: &'a Findings,
    /// The kernel's O (→ `O_test.npy`, f32).
    pub o_test: &'a [f32],
    /// The reference O (→ `O_ref.npy`, f64).
    pub o_ref: &'a [f64],
    /// Tiles the kernel dumped (→ `S_…_test.npy`, `P_…_test.npy`).
    pub tiles_test: &'a [Tile],
    /// The reference's tiles (→ `S_…_ref.npy`, `P_…_ref.npy`).
    pub tiles_ref: &'a [Tile],
}

fn npy_bytes<T: npyz::AutoSerialize + Copy>(shape: &[u64], data: &[T]) -> std::io::Result<Vec<u8>> {
    use npyz::WriterBuilder;
    let mut buf = Vec::new();
    let mut w = npyz::WriteOptions::<T>::new()
        .default_dtype()
        .shape(shape)
        .writer(&mut buf)
        .begin_nd()?;
    w.extend(data.iter().copied())?;
    w.finish()?;
    Ok(buf)
}

/// Writes `data` as a C-order `.npy` of `shape` at `path` (the artifacts' format; GPU tests
/// dump failing cases with it).
pub fn write_npy<T: npyz::AutoSerialize + Copy>(
    path: &Path,
    shape: &[usize],
    data: &[T],
) -> Result<(), OracleError> {
    let io = |source| OracleError::Io {
        path: path.to_path_buf(),
        source,
    };
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    std::fs::write(path, npy_bytes(&shape, data).map_err(io)?).map_err(io)
}

/// Writes the artifacts into `dir` (created if needed) and returns the paths written.
/// Tile arrays are `[rows, cols]` f64, named `S_b{b}_h{h}_q{q}_k{k}_{test,ref}.npy`.
pub fn write_artifacts(dir: &Path, a: &Artifacts<'_>) -> Result<Vec<PathBuf>, OracleError> {
    std::fs::create_dir_all(dir).map_err(|source| OracleError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let dims = a.findings.o.dims;
    let shape: Vec<usize> = match a.findings.o.tensor {
        crate::TensorKind::O => dims.to_vec(),
        crate::TensorKind::Lse => dims[..3].to_vec(),
    };
    let expected: usize = dims.iter().product();
    for (what, len) in [("O_test", a.o_test.len()), ("O_ref", a.o_ref.len())] {
        if len != expected {
            return Err(OracleError::LengthMismatch {
                what: what.to_string(),
                shape: format!("{shape:?}"),
                expected,
                got: len,
            });
        }
    }
    let mut written = Vec::new();
    let mut put = |name: String| {
        let p = dir.join(name);
        written.push(p.clone());
        p
    };
    write_npy(&put("O_test.npy".into()), &shape, a.o_test)?;
    write_npy(&put("O_ref.npy".into()), &shape, a.o_ref)?;
    for (tiles, side) in [(a.tiles_test, "test"), (a.tiles_ref, "ref")] {
        for t in tiles {
            let id = t.id;
            let stem = format!("b{}_h{}_q{}_k{}_{side}", id.b, id.h, id.q_tile, id.k_tile);
            // A tile whose buffers disagree with its extents is saved flat, not dropped: it is
            // the evidence of a dump-layout bug.
            let tile_shape = |len: usize| {
                if len == t.rows * t.cols {
                    vec![t.rows, t.cols]
                } else {
                    vec![len]
                }
            };
            write_npy(&put(format!("S_{stem}.npy")), &tile_shape(t.s.len()), &t.s)?;
            write_npy(&put(format!("P_{stem}.npy")), &tile_shape(t.p.len()), &t.p)?;
        }
    }
    let json = serde_json::to_string_pretty(a.findings)?;
    let report = put("report.json".into());
    std::fs::write(&report, json).map_err(|source| OracleError::Io {
        path: report.clone(),
        source,
    })?;
    let summary = put("summary.txt".into());
    std::fs::write(&summary, a.findings.summary()).map_err(|source| OracleError::Io {
        path: summary.clone(),
        source,
    })?;
    Ok(written)
}
