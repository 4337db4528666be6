//! `cargo xtask oracle`: run the GPU kernel on fresh N(0,1) inputs and explain how it
//! differs from the f64 reference (attn-oracle), or compare any two `.npy` files.
//!
//! Problem mode (`--shape`): inputs are drawn from a seeded N(0,1) generator and rounded to
//! the storage type, so the kernel, the f64 reference and the emulation (the reference with
//! the kernel's rounding points) all see identical values. The verdict is the tolerance rule
//! `max|out − ref| ≤ 2·max|emu − ref| + 1e-5` plus the caps; elements above that bound are
//! the "wrong" ones the error pattern is read from. With `--tiles`, the debug kernels' S/P/m/l
//! dumps of those query blocks are compared with attn-ref's tiled reference (same tile sizes)
//! and the first diverging stage is named. When the output is off (and finite), the reference
//! is rerun under suspected wrong semantics (softmax scale 1, scale², scale·log2 e, the other
//! causal alignments) so the report can name the one the kernel matches; each costs one more
//! reference run. Exit 0 only when the rule holds.
//!
//! Backward tile mode (`--shape … --tiles … --backward`, debug builds): the release forward,
//! then the mma.sync backward's debug entry on a seeded N(0,1) dO, dumping P, dP, dS and Δ of
//! every key tile of the listed query blocks (in the mma.sync backward tile's rows: 128 at
//! D = 64 where 162 KiB fit, else 64); they are compared with attn-ref's backward tiles and
//! the first diverging stage is named. Exit 0 only when every tile matches and none is
//! missing or extra.
//!
//! File mode (`--got G.npy --want W.npy`): a 4-D `[B,H,S,D]` O or a 3-D `[B,H,S]` LSE;
//! exit 0 only when `max|got − want| ≤ --max-abs` and no NaN/Inf differs.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context};
use attn_oracle::{
    compare, compare_bwd_tiles, compare_lse, compare_tiles, write_artifacts, Alternative,
    Artifacts, BwdTileTolerance, CompareOptions, Findings, OracleReport, Storage, Suspect,
    TileTolerance, ToleranceRule,
};
use attn_ref::reference::{self, bwd_tiles, tiled};
use attn_ref::{AttnShape, Causal, Problem};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;

use crate::flags::{CausalArg, StorageArg};
use crate::forward::GpuRun;
use crate::npy;

/// Arguments of `cargo xtask oracle`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Problem shape `B,H,S,D` (query heads H, query length S): run the GPU kernel on it.
    #[arg(long, value_parser = parse_shape, required_unless_present = "got", conflicts_with = "got")]
    shape: Option<[usize; 4]>,
    /// Key/value length (default: S).
    #[arg(long, requires = "shape")]
    kv_len: Option<usize>,
    /// Key/value heads for GQA/MQA (default: H).
    #[arg(long, requires = "shape")]
    kv_heads: Option<usize>,
    /// Causal mask.
    #[arg(long, value_enum, default_value_t = CausalArg::None)]
    causal: CausalArg,
    /// Storage type: f16, bf16, or e4m3 (the FP8 kernel: per-head E4M3 codes, f16 O,
    /// checked against the reference on the dequantized inputs with its rounding model).
    #[arg(long, value_enum, default_value_t = StorageArg::F16, requires = "shape")]
    dtype: StorageArg,
    /// Kernel config name (default: the kernel's heuristic).
    #[arg(long, requires = "shape")]
    config: Option<String>,
    /// Query blocks whose tiles the debug kernels dump, `b:h:q_tile,…`.
    #[arg(long, value_delimiter = ',', value_parser = parse_tile, requires = "shape")]
    tiles: Vec<(usize, usize, usize)>,
    /// Backward tile mode: dump and check the backward's P, dP, dS and Δ tiles of the
    /// --tiles query blocks (the mma.sync backward tile's rows: 128 at D = 64 where 162 KiB
    /// fit, else 64) instead of the forward's (f16/bf16, no features).
    #[arg(long, requires = "tiles")]
    backward: bool,
    /// Seed of the N(0,1) inputs.
    #[arg(long, default_value_t = 0, requires = "shape")]
    seed: u64,
    /// Where to write O_ref.npy, O_test.npy, the tile arrays, report.json and summary.txt
    /// (required with --shape).
    #[arg(long, required_unless_present = "got")]
    out_dir: Option<PathBuf>,
    /// The array under test (.npy, 4-D O or 3-D LSE).
    #[arg(long, requires = "want")]
    got: Option<PathBuf>,
    /// The expected array (.npy, same shape).
    #[arg(long, requires = "got")]
    want: Option<PathBuf>,
    /// File mode: tolerated max abs error (default: the fp16 cap, 4e-3 for O, 1e-3 for LSE).
    #[arg(long, requires = "got")]
    max_abs: Option<f64>,
    /// File mode: BLOCK_M × BLOCK_N used to read tile-shaped error patterns.
    #[arg(long, default_value_t = 64)]
    block_m: usize,
    /// See --block-m.
    #[arg(long, default_value_t = 64)]
    block_n: usize,
}

fn parse_shape(s: &str) -> Result<[usize; 4], String> {
    let dims: Vec<usize> = s
        .split(',')
        .map(|x| x.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("`{s}`: {e}; expected B,H,S,D such as 1,8,512,64"))?;
    <[usize; 4]>::try_from(dims)
        .map_err(|d| format!("`{s}` has {} numbers; expected B,H,S,D", d.len()))
}

fn parse_tile(s: &str) -> Result<(usize, usize, usize), String> {
    let parts: Vec<usize> = s
        .split(':')
        .map(|x| x.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tile `{s}`: {e}; expected b:h:q_tile such as 0:3:1"))?;
    match parts[..] {
        [b, h, q] => Ok((b, h, q)),
        _ => Err(format!("tile `{s}`: expected b:h:q_tile such as 0:3:1")),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let causal = Causal::from(args.causal);
    if let (Some(got), Some(want)) = (&args.got, &args.want) {
        let files = FileSpec {
            got: got.clone(),
            want: want.clone(),
            out_dir: args.out_dir.clone(),
            max_abs: args.max_abs,
            causal,
            block_m: args.block_m,
            block_n: args.block_n,
        };
        let (findings, pass) = run_files(&files)?;
        print!("{}", findings.summary());
        ensure!(
            pass,
            "{} differs from {} beyond max abs {} (see the summary above)",
            files.got.display(),
            files.want.display(),
            findings.o.threshold
        );
        return Ok(());
    }
    let (Some([b, h, s, d]), Some(out_dir)) = (args.shape, args.out_dir.clone()) else {
        bail!("give --shape B,H,S,D --out-dir DIR, or --got G.npy --want W.npy");
    };
    let spec = ProblemSpec {
        shape: AttnShape::new(
            b,
            h,
            args.kv_heads.unwrap_or(h),
            s,
            args.kv_len.unwrap_or(s),
            d,
        )?,
        causal,
        dtype: args.dtype.as_str().to_string(),
        config: args.config.clone(),
        tiles: args.tiles.clone(),
        seed: args.seed,
        out_dir,
    };
    if args.backward {
        let report = run_backward_tiles(&spec, crate::forward::run_backward_debug)?;
        print!("{report}");
        eprintln!("artifacts in {}", spec.out_dir.display());
        ensure!(
            report.is_clean(),
            "the backward tiles differ from the reference (see the summary above)"
        );
        return Ok(());
    }
    let (findings, pass) = run_problem(&spec, crate::forward::run_gpu)?;
    print!("{}", findings.summary());
    eprintln!("artifacts in {}", spec.out_dir.display());
    ensure!(
        pass,
        "the tolerance rule (docs/ARCHITECTURE.md) does not hold"
    );
    Ok(())
}

/// One problem-mode run.
#[derive(Debug, Clone)]
pub struct ProblemSpec {
    pub shape: AttnShape,
    pub causal: Causal,
    pub dtype: String,
    pub config: Option<String>,
    pub tiles: Vec<(usize, usize, usize)>,
    pub seed: u64,
    pub out_dir: PathBuf,
}

/// Signature of `forward::run_gpu`, so tests can stand the CPU reference in for the GPU.
pub trait Backend:
    FnOnce(
    &Problem,
    &[f32],
    &[f32],
    &[f32],
    &str,
    Option<&str>,
    &[(usize, usize, usize)],
) -> anyhow::Result<GpuRun>
{
}
impl<F> Backend for F where
    F: FnOnce(
        &Problem,
        &[f32],
        &[f32],
        &[f32],
        &str,
        Option<&str>,
        &[(usize, usize, usize)],
    ) -> anyhow::Result<GpuRun>
{
}

/// Seeded N(0,1) values rounded to the storage type.
fn inputs(n: usize, rng: &mut StdRng, storage: attn_ref::Dtype) -> Vec<f32> {
    (0..n)
        .map(|_| storage.round(rng.sample::<f32, _>(StandardNormal)))
        .collect()
}

/// References under suspected wrong semantics, computed only when the kernel is off: the
/// softmax scale left out, applied twice, or with log2 e folded in (exp2 kernels); the other
/// causal alignments.
fn alternatives(p: &Problem, q: &[f32], k: &[f32], v: &[f32]) -> anyhow::Result<Vec<Alternative>> {
    let mut alts = Vec::new();
    let scale = p.scale();
    for (label, s) in [
        ("softmax scale 1 (scale missing)", 1.0),
        ("softmax scale squared (applied twice)", scale * scale),
        (
            "softmax scale·log2(e) (exp2 domain not undone)",
            scale * std::f64::consts::LOG2_E,
        ),
    ] {
        if (s - scale).abs() > 1e-12 * scale {
            alts.push(Alternative {
                label: label.to_string(),
                suspect: Suspect::SoftmaxScale,
                want: reference::forward(&p.with_scale(s)?, q, k, v)?.o,
            });
        }
    }
    let shape = *p.shape();
    for c in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
        let same = c == p.causal()
            || (shape.q_len() == shape.kv_len() && c != Causal::None && p.causal() != Causal::None);
        if !same {
            let alt = Problem::new(shape, c).with_scale(scale)?;
            alts.push(Alternative {
                label: format!("causal={c}"),
                suspect: Suspect::CausalMask,
                want: reference::forward(&alt, q, k, v)?.o,
            });
        }
    }
    Ok(alts)
}

/// Problem mode without the CLI: generates inputs, runs `backend`, the reference and the
/// emulation, compares, writes the artifacts. Returns the findings and whether the rule holds.
pub fn run_problem(spec: &ProblemSpec, backend: impl Backend) -> anyhow::Result<(Findings, bool)> {
    // FP8 (e4m3): the inputs are N(0,1) quantized per head and dequantized, so the f64
    // reference sees exactly the values the kernel's codes encode; the emulation follows the
    // kernel's rounding model (attn_kernels::fp8::fp8_rounding_model).
    let (emu_storage, fp8) = match spec.dtype.as_str() {
        "f16" => (attn_ref::Dtype::F16, false),
        "bf16" => (attn_ref::Dtype::Bf16, false),
        "e4m3" | "fp8" => (attn_ref::Dtype::F16, true),
        other => bail!("unknown --dtype `{other}`: expected f16, bf16 or e4m3"),
    };
    let storage = if fp8 {
        Storage::Fp8E4m3
    } else {
        Storage::from(emu_storage)
    };
    let shape = spec.shape;
    let p = Problem::new(shape, spec.causal);
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let (q, k, v) = if fp8 {
        let (qd, kd) = (attn_quant::q_dims(&shape), attn_quant::kv_dims(&shape));
        let mut deq = |n: usize, dims: [usize; 4]| -> anyhow::Result<Vec<f32>> {
            let x: Vec<f32> = (0..n)
                .map(|_| rng.sample::<f32, _>(StandardNormal))
                .collect();
            let t = attn_quant::quantize(
                &x,
                dims,
                attn_quant::Fp8Format::E4M3,
                attn_quant::Granularity::Head,
            )?;
            Ok(attn_quant::dequantize(&t)?)
        };
        (
            deq(shape.q_elems(), qd)?,
            deq(shape.kv_elems(), kd)?,
            deq(shape.kv_elems(), kd)?,
        )
    } else {
        (
            inputs(shape.q_elems(), &mut rng, emu_storage),
            inputs(shape.kv_elems(), &mut rng, emu_storage),
            inputs(shape.kv_elems(), &mut rng, emu_storage),
        )
    };

    let run = backend(
        &p,
        &q,
        &k,
        &v,
        &spec.dtype,
        spec.config.as_deref(),
        &spec.tiles,
    )
    .context("running the kernel")?;
    ensure!(
        run.output.o.len() == shape.o_elems() && run.output.lse.len() == shape.lse_elems(),
        "kernel {} returned O of {} and LSE of {} values; the shape needs {} and {}",
        run.kernel,
        run.output.o.len(),
        run.output.lse.len(),
        shape.o_elems(),
        shape.lse_elems()
    );
    let exact = reference::forward(&p, &q, &k, &v)?;
    let emu = match &run.fp8_variant {
        Some(variant) => reference::emulate::forward_emulated_spec(
            &p,
            &q,
            &k,
            &v,
            &attn_kernels::fp8::fp8_rounding_model(*variant, attn_kernels::Dtype::F16, run.block_n),
        )?,
        None => reference::emulate::forward_emulated_spec(
            &p,
            &q,
            &k,
            &v,
            &attn_kernels::config::fwd_rounding_model(match emu_storage {
                attn_ref::Dtype::F16 => attn_kernels::Dtype::F16,
                attn_ref::Dtype::Bf16 => attn_kernels::Dtype::Bf16,
            }),
        )?,
    };

    let rule = ToleranceRule::for_storage(storage);
    let base = CompareOptions::default()
        .with_causal(spec.causal)
        .with_blocks(run.block_m, run.block_n);
    let emu_o: Vec<f32> = emu.o.iter().map(|&x| x as f32).collect();
    let emu_report = compare(&emu_o, &exact.o, &shape, &base)?;
    let bound = rule.bound(emu_report.max_abs);
    let mut opts = base.clone().with_threshold(bound);
    let mut o_report = compare(&run.output.o, &exact.o, &shape, &opts)?;
    if !o_report.is_clean() && o_report.nonfinite_faults() == 0 {
        opts.alternatives = alternatives(&p, &q, &k, &v)?;
        o_report = compare(&run.output.o, &exact.o, &shape, &opts)?;
    }
    let lse_opts = base.clone().with_threshold(rule.caps.lse_abs);
    let lse_report = compare_lse(&run.output.lse, &exact.lse, &shape, &lse_opts)?;
    let verdict = rule.check(&o_report, &emu_report, Some(&lse_report));

    let (tile_report, ref_tiles) = if spec.tiles.is_empty() {
        (None, Vec::new())
    } else {
        let (_, ref_tiles) =
            tiled::forward_tiled(&p, &q, &k, &v, run.block_m, run.block_n, &spec.tiles)?;
        let tol = TileTolerance::for_storage(storage);
        (Some(compare_tiles(&run.tiles, &ref_tiles, &tol)), ref_tiles)
    };

    let findings = Findings {
        kernel: run.kernel.clone(),
        problem: format!(
            "B={} Hq={} Hkv={} Sq={} Sk={} D={} causal={} {} seed={} tiles {}x{}",
            shape.batch(),
            shape.q_heads(),
            shape.kv_heads(),
            shape.q_len(),
            shape.kv_len(),
            shape.head_dim(),
            spec.causal,
            spec.dtype,
            spec.seed,
            run.block_m,
            run.block_n
        ),
        o: o_report,
        lse: Some(lse_report),
        tiles: tile_report,
        verdict: Some(verdict.clone()),
    };
    write_artifacts(
        &spec.out_dir,
        &Artifacts {
            findings: &findings,
            o_test: &run.output.o,
            o_ref: &exact.o,
            tiles_test: &run.tiles,
            tiles_ref: &ref_tiles,
        },
    )?;
    Ok((findings, verdict.pass))
}

/// The GPU side of backward tile mode: `forward::run_backward_debug`'s signature, so tests can
/// stand the reference in for the GPU.
pub trait BwdBackend:
    FnOnce(
    &Problem,
    (&[f32], &[f32], &[f32], &[f32]),
    &str,
    &[(usize, usize, usize)],
) -> anyhow::Result<crate::forward::BwdDebugRun>
{
}
impl<F> BwdBackend for F where
    F: FnOnce(
        &Problem,
        (&[f32], &[f32], &[f32], &[f32]),
        &str,
        &[(usize, usize, usize)],
    ) -> anyhow::Result<crate::forward::BwdDebugRun>
{
}

/// Backward tile mode without the CLI: seeded inputs (Q, K, V, then dO), the backend's dumps
/// against attn-ref's backward tiles. Writes `bwd_report.json`, `bwd_summary.txt` and, per
/// compared tile, its P, dP and dS from both sides (`bwd_tiles/b{b}_h{h}_q{q}_k{k}_{p,dp,ds}_{test,ref}.npy`).
pub fn run_backward_tiles(
    spec: &ProblemSpec,
    backend: impl BwdBackend,
) -> anyhow::Result<attn_oracle::BwdTileReport> {
    let storage = match spec.dtype.as_str() {
        "f16" => attn_ref::Dtype::F16,
        "bf16" => attn_ref::Dtype::Bf16,
        other => bail!("--backward runs the f16/bf16 backward; --dtype `{other}` has none"),
    };
    let shape = spec.shape;
    let p = Problem::new(shape, spec.causal);
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let q = inputs(shape.q_elems(), &mut rng, storage);
    let k = inputs(shape.kv_elems(), &mut rng, storage);
    let v = inputs(shape.kv_elems(), &mut rng, storage);
    let d_o = inputs(shape.o_elems(), &mut rng, storage);
    let run = backend(&p, (&q, &k, &v, &d_o), &spec.dtype, &spec.tiles)
        .context("running the backward's debug kernel")?;
    let (bm, bn) = run.block;
    let want = bwd_tiles::backward_tiles(&p, &q, &k, &v, &d_o, bm, bn, &spec.tiles)?;
    let report = compare_bwd_tiles(
        &run.tiles,
        &want,
        &BwdTileTolerance::for_storage(Storage::from(storage)),
    );
    let dir = spec.out_dir.join("bwd_tiles");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for w in &want {
        let Some(g) = run.tiles.iter().find(|g| g.id == w.id) else {
            continue;
        };
        let stem = format!("b{}_h{}_q{}_k{}", w.id.b, w.id.h, w.id.q_tile, w.id.k_tile);
        for (field, got, exp) in [
            ("p", &g.p, &w.p),
            ("dp", &g.dp, &w.dp),
            ("ds", &g.ds, &w.ds),
        ] {
            if got.len() == w.rows * w.cols {
                npy::write(
                    &dir.join(format!("{stem}_{field}_test.npy")),
                    &[w.rows, w.cols],
                    got,
                )?;
            }
            npy::write(
                &dir.join(format!("{stem}_{field}_ref.npy")),
                &[w.rows, w.cols],
                exp,
            )?;
        }
    }
    let json = serde_json::json!({
        "kernel": run.kernel,
        "problem": format!("{shape:?} causal={} {} seed={} tiles {bm}x{bn}", spec.causal, spec.dtype, spec.seed),
        "report": report,
    });
    std::fs::write(
        spec.out_dir.join("bwd_report.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    std::fs::write(spec.out_dir.join("bwd_summary.txt"), report.to_string())?;
    Ok(report)
}

/// One file-mode run.
#[derive(Debug, Clone)]
pub struct FileSpec {
    pub got: PathBuf,
    pub want: PathBuf,
    pub out_dir: Option<PathBuf>,
    pub max_abs: Option<f64>,
    pub causal: Causal,
    pub block_m: usize,
    pub block_n: usize,
}

fn read_array(path: &Path) -> anyhow::Result<npy::NpyArray> {
    let a = npy::read(path)?;
    ensure!(
        a.dtype != "|u1",
        "{}: uint8 arrays are FP8 codes; dequantize them first (`cargo xtask dequantize`)",
        path.display()
    );
    Ok(a)
}

/// File mode without the CLI. Returns the findings and whether the tolerance holds.
pub fn run_files(spec: &FileSpec) -> anyhow::Result<(Findings, bool)> {
    let got = read_array(&spec.got)?;
    let want = read_array(&spec.want)?;
    ensure!(
        got.shape == want.shape,
        "{} has shape {:?} but {} has shape {:?}",
        spec.got.display(),
        got.shape,
        spec.want.display(),
        want.shape
    );
    let (shape, is_lse) = match got.shape[..] {
        [b, h, s, d] => (AttnShape::self_attention(b, h, s, d), false),
        [b, h, s] => (AttnShape::self_attention(b, h, s, 1), true),
        _ => bail!(
            "{}: expected a 4-D [B,H,S,D] O or a 3-D [B,H,S] LSE, got shape {:?}",
            spec.got.display(),
            got.shape
        ),
    };
    let shape = shape.with_context(|| format!("{}: invalid shape", spec.got.display()))?;
    let max_abs = spec.max_abs.unwrap_or(if is_lse { 1e-3 } else { 4e-3 });
    ensure!(
        max_abs.is_finite() && max_abs >= 0.0,
        "--max-abs must be finite and >= 0, got {max_abs}"
    );
    // The oracle compares an f32 output with an f64 reference; a wider `got` is narrowed,
    // which adds at most 2^-24 relative error.
    let got32: Vec<f32> = got.data.iter().map(|&x| x as f32).collect();
    let opts = CompareOptions::default()
        .with_threshold(max_abs)
        .with_causal(spec.causal)
        .with_blocks(spec.block_m, spec.block_n);
    let report: OracleReport = if is_lse {
        compare_lse(&got32, &want.data, &shape, &opts)?
    } else {
        compare(&got32, &want.data, &shape, &opts)?
    };
    let pass = report.is_clean();
    let findings = Findings {
        kernel: spec.got.display().to_string(),
        problem: format!("{} vs {}", spec.got.display(), spec.want.display()),
        o: report,
        lse: None,
        tiles: None,
        verdict: None,
    };
    if let Some(dir) = &spec.out_dir {
        write_artifacts(
            dir,
            &Artifacts {
                findings: &findings,
                o_test: &got32,
                o_ref: &want.data,
                tiles_test: &[],
                tiles_ref: &[],
            },
        )?;
    }
    Ok((findings, pass))
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_oracle::{ErrorPattern, ScaleKind, Stage};
    use attn_ref::AttnOutput;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-oracle-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// The CPU emulation (and the tiled reference for dumps) standing in for the GPU; `scale`
    /// overrides the softmax scale to plant a fault.
    fn cpu_backend(scale: Option<f64>) -> impl Backend {
        move |p: &Problem,
              q: &[f32],
              k: &[f32],
              v: &[f32],
              dtype: &str,
              _config: Option<&str>,
              dump: &[(usize, usize, usize)]| {
            let storage = match dtype {
                "bf16" => attn_ref::Dtype::Bf16,
                _ => attn_ref::Dtype::F16,
            };
            let p = match scale {
                Some(s) => p.with_scale(s)?,
                None => p.clone(),
            };
            let out = attn_ref::reference::emulate::forward_emulated(&p, q, k, v, storage)?;
            let (_, tiles) = tiled::forward_tiled(&p, q, k, v, 64, 64, dump)?;
            Ok(GpuRun {
                output: AttnOutput {
                    o: out.o.iter().map(|&x| x as f32).collect(),
                    lse: out.lse.iter().map(|&x| x as f32).collect(),
                },
                block_m: 64,
                block_n: 64,
                tiles,
                kernel: "cpu-emulation".into(),
                fp8_variant: None,
            })
        }
    }

    fn spec(dir: &Path, causal: Causal, tiles: Vec<(usize, usize, usize)>) -> ProblemSpec {
        ProblemSpec {
            shape: AttnShape::new(1, 4, 2, 100, 100, 64).unwrap(),
            causal,
            dtype: "f16".into(),
            config: None,
            tiles,
            seed: 7,
            out_dir: dir.to_path_buf(),
        }
    }

    /// A CPU stand-in for the FP8 kernel: the emulation with the wgmma variant's rounding
    /// model (E4M3 P after a 2⁸ gain, f16 O), times `gain` (1.0 = correct).
    fn fp8_backend(gain: f32) -> impl Backend {
        move |p: &Problem,
              q: &[f32],
              k: &[f32],
              v: &[f32],
              _dtype: &str,
              _config: Option<&str>,
              _dump: &[(usize, usize, usize)]|
              -> anyhow::Result<GpuRun> {
            let variant = attn_kernels::Fp8Variant::Wgmma;
            let spec =
                attn_kernels::fp8::fp8_rounding_model(variant, attn_kernels::Dtype::F16, 128);
            let out = attn_ref::reference::emulate::forward_emulated_spec(p, q, k, v, &spec)?;
            Ok(GpuRun {
                output: AttnOutput {
                    o: out.o.iter().map(|&x| x as f32 * gain).collect(),
                    lse: out.lse.iter().map(|&x| x as f32).collect(),
                },
                block_m: 64,
                block_n: 128,
                tiles: Vec::new(),
                kernel: "cpu-fp8-emulation".into(),
                fp8_variant: Some(variant),
            })
        }
    }

    #[test]
    fn fp8_is_checked_with_its_rounding_model() {
        let dir = temp_dir("fp8");
        let mut s = spec(&dir, Causal::BottomRight, Vec::new());
        s.dtype = "e4m3".into();
        s.shape = AttnShape::new(1, 4, 2, 90, 200, 128).unwrap();
        let (findings, pass) = run_problem(&s, fp8_backend(1.0)).unwrap();
        assert!(pass, "{findings}");
        // The E4M3 P rounding is far coarser than f16's: the bound follows the FP8 model.
        let verdict = findings.verdict.as_ref().unwrap();
        assert!(verdict.emu_max_abs > 1e-3, "{verdict}");
        // 2 % off is caught.
        let (findings, pass) = run_problem(&s, fp8_backend(1.02)).unwrap();
        assert!(!pass, "{findings}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Backward tile mode with attn-ref's tiles standing in for the GPU's dumps; `plant` adds
    /// to one dS element of the first tile.
    fn bwd_backend(plant: f64) -> impl BwdBackend {
        move |p: &Problem,
              (q, k, v, d_o): (&[f32], &[f32], &[f32], &[f32]),
              _dtype: &str,
              blocks: &[(usize, usize, usize)]|
              -> anyhow::Result<crate::forward::BwdDebugRun> {
            let mut tiles = bwd_tiles::backward_tiles(p, q, k, v, d_o, 64, 128, blocks)?;
            tiles[0].ds[5] += plant;
            Ok(crate::forward::BwdDebugRun {
                tiles,
                block: (64, 128),
                kernel: "cpu-reference".into(),
            })
        }
    }

    #[test]
    fn backward_tile_mode_writes_its_tiles_and_names_the_stage() {
        let dir = temp_dir("bwd");
        let mut s = spec(&dir, Causal::BottomRight, vec![(0, 3, 1)]);
        s.shape = AttnShape::new(1, 4, 2, 100, 300, 64).unwrap();
        let report = run_backward_tiles(&s, bwd_backend(0.0)).unwrap();
        assert!(report.is_clean(), "{report}");
        // Key tiles 0..3 of 128 keys (the last a tail), all visible to rows 64..100.
        assert_eq!(report.tiles.len(), 3, "{report}");
        assert!(dir.join("bwd_tiles/b0_h3_q1_k2_ds_test.npy").exists());
        assert!(dir.join("bwd_summary.txt").exists());
        let report = run_backward_tiles(&s, bwd_backend(0.3)).unwrap();
        assert_eq!(
            report.first_stage,
            Some(attn_oracle::BwdStage::DS),
            "{report}"
        );
        // FP8 has no backward.
        s.dtype = "e4m3".into();
        assert!(run_backward_tiles(&s, bwd_backend(0.0)).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_emulation_passes_in_bf16() {
        let dir = temp_dir("bf16");
        let mut s = spec(&dir, Causal::BottomRight, Vec::new());
        s.dtype = "bf16".into();
        s.shape = AttnShape::new(2, 2, 1, 70, 130, 64).unwrap();
        let (findings, pass) = run_problem(&s, cpu_backend(None)).unwrap();
        assert!(pass, "{findings}");
        let verdict = findings.verdict.as_ref().unwrap();
        // bf16 rounding is 8× coarser than f16's: the bound follows the emulation.
        assert!(verdict.emu_max_abs > 4e-3 / 8.0, "{verdict}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_emulation_passes_and_writes_artifacts() {
        let dir = temp_dir("pass");
        let s = spec(&dir, Causal::TopLeft, vec![(0, 3, 1)]);
        let (findings, pass) = run_problem(&s, cpu_backend(None)).unwrap();
        assert!(pass, "{findings}");
        assert_eq!(findings.o.pattern, ErrorPattern::Clean);
        let tiles = findings.tiles.as_ref().unwrap();
        // Query tile 1 (rows 64..100) of a causal problem visits key tiles 0 and 1.
        assert_eq!(tiles.tiles.len(), 2);
        assert!(tiles.is_clean(), "{tiles}");
        for f in [
            "O_ref.npy",
            "O_test.npy",
            "S_b0_h3_q1_k1_test.npy",
            "P_b0_h3_q1_k0_ref.npy",
            "report.json",
        ] {
            assert!(dir.join(f).is_file(), "{f} missing");
        }
        let o_ref = npy::read(&dir.join("O_ref.npy")).unwrap();
        assert_eq!(o_ref.shape, vec![1, 4, 100, 64]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_scale_fails_and_is_named() {
        let dir = temp_dir("scale");
        let s = spec(&dir, Causal::None, Vec::new());
        let (findings, pass) = run_problem(&s, cpu_backend(Some(1.0))).unwrap();
        assert!(!pass);
        assert!(
            matches!(
                &findings.o.pattern,
                ErrorPattern::ScaleLike { scale: ScaleKind::Softmax { alternative } }
                    if alternative.starts_with("softmax scale 1")
            ),
            "{findings}"
        );
        assert_eq!(findings.stage(), Some(Stage::S));
        let verdict = findings.verdict.as_ref().unwrap();
        assert!(!verdict.reasons.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_backend_error_is_reported_not_panicked() {
        let dir = temp_dir("err");
        let s = spec(&dir, Causal::None, Vec::new());
        let failing = |_: &Problem,
                       _: &[f32],
                       _: &[f32],
                       _: &[f32],
                       _: &str,
                       _: Option<&str>,
                       _: &[(usize, usize, usize)]|
         -> anyhow::Result<GpuRun> { bail!("no GPU") };
        let err = run_problem(&s, failing).unwrap_err();
        assert!(format!("{err:#}").contains("no GPU"));
        let mut bad = s.clone();
        bad.dtype = "f8".into();
        assert!(run_problem(&bad, cpu_backend(None)).is_err());
    }

    #[test]
    fn shapes_and_tiles_parse_with_clear_errors() {
        assert_eq!(parse_shape("1,8,512,64").unwrap(), [1, 8, 512, 64]);
        assert!(parse_shape("1,8,512").unwrap_err().contains("3 numbers"));
        assert!(parse_shape("1,x,2,3").is_err());
        assert_eq!(parse_tile("0:3:1").unwrap(), (0, 3, 1));
        assert!(parse_tile("0:3").is_err());
    }

    #[test]
    fn file_mode_compares_any_two_arrays() {
        let dir = temp_dir("files");
        std::fs::create_dir_all(&dir).unwrap();
        let (g, w) = (dir.join("g.npy"), dir.join("w.npy"));
        let want: Vec<f64> = (0..2 * 3 * 8 * 4).map(|i| (i as f64 * 0.7).sin()).collect();
        let mut got: Vec<f32> = want.iter().map(|&x| x as f32).collect();
        npy::write(&w, &[2, 3, 8, 4], &want).unwrap();
        npy::write(&g, &[2, 3, 8, 4], &got).unwrap();
        let mut fs = FileSpec {
            got: g.clone(),
            want: w.clone(),
            out_dir: Some(dir.join("out")),
            max_abs: None,
            causal: Causal::None,
            block_m: 64,
            block_n: 64,
        };
        let (findings, pass) = run_files(&fs).unwrap();
        assert!(pass, "{findings}");
        assert!(dir.join("out/report.json").is_file());

        got[5 * 4 + 2] += 0.01; // (0, 0, 5, 2)
        npy::write(&g, &[2, 3, 8, 4], &got).unwrap();
        let (findings, pass) = run_files(&fs).unwrap();
        assert!(!pass);
        let at = findings.o.max_abs_at.unwrap();
        assert_eq!((at.b, at.h, at.s, at.d), (0, 0, 5, Some(2)));
        fs.max_abs = Some(0.02);
        assert!(run_files(&fs).unwrap().1);

        // A 3-D LSE with −∞ rows on both sides.
        let lse = [f64::NEG_INFINITY, 0.5, 1.5, f64::NEG_INFINITY];
        npy::write(&w, &[1, 2, 2], &lse).unwrap();
        npy::write(&g, &[1, 2, 2], &lse.map(|x| x as f32)).unwrap();
        fs.out_dir = None;
        assert!(run_files(&fs).unwrap().1);

        npy::write(&g, &[1, 4], &[0.0f32; 4]).unwrap();
        let err = run_files(&fs).unwrap_err().to_string();
        assert!(err.contains("has shape [1, 4] but"), "{err}");
        npy::write(&w, &[1, 4], &[0.0f32; 4]).unwrap();
        let err = run_files(&fs).unwrap_err().to_string();
        assert!(err.contains("expected a 4-D"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
