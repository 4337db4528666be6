//! `cargo xtask quantize` / `dequantize`: FP8 codes and scales as `.npy` files
//! (docs/ARCHITECTURE.md). Codes are uint8 with the input's `[B, H, S, D]` shape; scales are f32
//! shaped `[1]`, `[B, H]`, `[B, H, S]` or `[B, H, ⌈S/N⌉]` by granularity (the layout the FP8
//! kernel reads, see `attn_quant::Granularity`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use attn_quant::{Fp8Format, Fp8Tensor, Granularity, QuantInput, QuantOptions};

use crate::npy;

/// Arguments of `cargo xtask quantize`.
#[derive(clap::Args, Debug)]
pub struct QuantizeArgs {
    /// The tensor to quantize: a `[B, H, S, D]` .npy of f16, f32 or f64.
    #[arg(long)]
    pub input: PathBuf,
    /// FP8 format: e4m3 (max 448) or e5m2 (max 57344).
    #[arg(long)]
    pub format: Fp8Format,
    /// Which elements share a scale: tensor, head, token or block:N (N tokens).
    #[arg(long)]
    pub granularity: Granularity,
    /// Where to write the codes (uint8 .npy, same shape as the input).
    #[arg(long)]
    pub codes: PathBuf,
    /// Where to write the scales (f32 .npy shaped `[1]`, `[B,H]`, `[B,H,S]` or `[B,H,ceil(S/N)]`).
    #[arg(long)]
    pub scales: PathBuf,
    /// Power-of-two headroom: scales = amax · 2^margin / max.
    #[arg(long, default_value_t = 0)]
    pub margin: u32,
}

/// Arguments of `cargo xtask dequantize`.
#[derive(clap::Args, Debug)]
pub struct DequantizeArgs {
    /// FP8 codes: a uint8 `[B, H, S, D]` .npy (as written by `quantize`).
    #[arg(long)]
    pub codes: PathBuf,
    /// Scales: an f32 .npy in the granularity's layout.
    #[arg(long)]
    pub scales: PathBuf,
    /// FP8 format the codes are in: e4m3 or e5m2.
    #[arg(long)]
    pub format: Fp8Format,
    /// Granularity the scales were computed with: tensor, head, token or block:N.
    #[arg(long)]
    pub granularity: Granularity,
    /// Where to write the dequantized tensor (f32 .npy, the codes' shape).
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run_quantize(args: QuantizeArgs) -> anyhow::Result<()> {
    if args.codes == args.scales {
        bail!(
            "--codes and --scales are the same file ({}); give two paths",
            args.codes.display()
        );
    }
    let input = npy::read(&args.input)?;
    let shape = input.shape4(&args.input.display().to_string())?;
    let options = QuantOptions {
        margin: args.margin,
    };
    let what = || format!("quantizing {}", args.input.display());
    // Keep the input's own precision: f16 stays f16 (exact), f64 is rounded to f32 only at
    // the division by its scale.
    let (q, summary) = match input.dtype.as_str() {
        "<f2" => {
            let x: Vec<half::f16> = input.data.iter().map(|&v| half::f16::from_f64(v)).collect();
            quantize_and_report(&x, shape, &args, &options).with_context(what)?
        }
        "<f4" => {
            let x: Vec<f32> = input.data.iter().map(|&v| v as f32).collect();
            quantize_and_report(&x, shape, &args, &options).with_context(what)?
        }
        "<f8" => quantize_and_report(&input.data, shape, &args, &options).with_context(what)?,
        other => bail!(
            "{}: dtype {other} cannot be quantized; expected f16, f32 or f64 (is this a codes \
             file?)",
            args.input.display()
        ),
    };
    let scales_shape = q.scales_shape()?;
    npy::write(&args.codes, &shape, &q.codes)?;
    npy::write(&args.scales, &scales_shape, &q.scales)?;
    println!(
        "{} {shape:?} {} → {} codes {}, {} scales {scales_shape:?} {}; {summary}",
        args.input.display(),
        input.dtype,
        q.format,
        args.codes.display(),
        q.granularity,
        args.scales.display()
    );
    Ok(())
}

fn quantize_and_report<T: QuantInput>(
    x: &[T],
    shape: [usize; 4],
    args: &QuantizeArgs,
    options: &QuantOptions,
) -> anyhow::Result<(Fp8Tensor, attn_quant::QuantErrorReport)> {
    let q = attn_quant::quantize_with(x, shape, args.format, args.granularity, options)?;
    let report = attn_quant::error_report(x, &q)?;
    Ok((q, report))
}

pub fn run_dequantize(args: DequantizeArgs) -> anyhow::Result<()> {
    let codes = npy::read(&args.codes)?;
    if codes.dtype != "|u1" {
        bail!(
            "{}: codes must be uint8 (|u1), got {}",
            args.codes.display(),
            codes.dtype
        );
    }
    let shape = codes.shape4(&args.codes.display().to_string())?;
    let scales = read_scales(&args.scales, shape, args.granularity)?;
    let bytes: Vec<u8> = codes.data.iter().map(|&v| v as u8).collect();
    let out = attn_quant::dequantize_parts(&bytes, &scales, shape, args.format, args.granularity)
        .with_context(|| {
        format!(
            "dequantizing {} with scales {}",
            args.codes.display(),
            args.scales.display()
        )
    })?;
    npy::write(&args.out, &shape, &out)?;
    println!(
        "{} {shape:?} {} {} → {} f32",
        args.codes.display(),
        args.format,
        args.granularity,
        args.out.display()
    );
    Ok(())
}

/// Reads an f32 scales file and checks its shape against the granularity's layout (a
/// same-length buffer in another shape would be read in the wrong order).
fn read_scales(
    path: &Path,
    shape: [usize; 4],
    granularity: Granularity,
) -> anyhow::Result<Vec<f32>> {
    let scales = npy::read(path)?;
    if scales.dtype != "<f4" {
        bail!(
            "{}: scales must be float32 (<f4), got {}; save them with .astype(np.float32)",
            path.display(),
            scales.dtype
        );
    }
    let expected = granularity.scales_shape(shape)?;
    // A 0-d array (np.save of a scalar) is the same single scale as [1].
    let same = scales.shape == expected || (expected == [1] && scales.shape.is_empty());
    if !same {
        bail!(
            "{}: scales have shape {:?} but granularity {granularity} over codes of shape \
             {shape:?} needs {expected:?}",
            path.display(),
            scales.shape
        );
    }
    Ok(scales.data.iter().map(|&v| v as f32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A scratch directory per test, removed at the end.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("xtask-quant-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
        fn path(&self, file: &str) -> PathBuf {
            self.0.join(file)
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn normal(n: usize, seed: u64) -> Vec<f32> {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| rng.sample::<f32, _>(rand_distr::StandardNormal))
            .collect()
    }

    fn quantize_args(dir: &Scratch, format: Fp8Format, granularity: Granularity) -> QuantizeArgs {
        QuantizeArgs {
            input: dir.path("x.npy"),
            format,
            granularity,
            codes: dir.path("c.npy"),
            scales: dir.path("s.npy"),
            margin: 0,
        }
    }

    fn dequantize_args(
        dir: &Scratch,
        format: Fp8Format,
        granularity: Granularity,
    ) -> DequantizeArgs {
        DequantizeArgs {
            codes: dir.path("c.npy"),
            scales: dir.path("s.npy"),
            format,
            granularity,
            out: dir.path("y.npy"),
        }
    }

    #[derive(Parser)]
    struct QuantizeCli {
        #[command(flatten)]
        args: QuantizeArgs,
    }

    #[test]
    fn quantize_then_dequantize_round_trips_through_files() {
        let dir = Scratch::new("round-trip");
        let shape = [2, 3, 10, 8];
        let x = normal(shape.iter().product(), 1);
        npy::write(&dir.path("x.npy"), &shape, &x).unwrap();
        for format in Fp8Format::ALL {
            for (granularity, scales_shape) in [
                (Granularity::Tensor, vec![1]),
                (Granularity::Head, vec![2, 3]),
                (Granularity::Token, vec![2, 3, 10]),
                (Granularity::Block(4), vec![2, 3, 3]),
            ] {
                run_quantize(quantize_args(&dir, format, granularity)).unwrap();
                let codes = npy::read(&dir.path("c.npy")).unwrap();
                let scales = npy::read(&dir.path("s.npy")).unwrap();
                assert_eq!(
                    (codes.dtype.as_str(), codes.shape.as_slice()),
                    ("|u1", &shape[..])
                );
                assert_eq!(scales.dtype, "<f4");
                assert_eq!(scales.shape, scales_shape);
                // The files hold exactly what the library computes.
                let q = attn_quant::quantize(&x, shape, format, granularity).unwrap();
                assert!(codes
                    .data
                    .iter()
                    .zip(&q.codes)
                    .all(|(&a, &b)| a == f64::from(b)));
                assert!(scales
                    .data
                    .iter()
                    .zip(&q.scales)
                    .all(|(&a, &b)| a == f64::from(b)));

                run_dequantize(dequantize_args(&dir, format, granularity)).unwrap();
                let y = npy::read(&dir.path("y.npy")).unwrap();
                assert_eq!((y.dtype.as_str(), y.shape.as_slice()), ("<f4", &shape[..]));
                let expected = q.dequantize().unwrap();
                assert!(y
                    .data
                    .iter()
                    .zip(&expected)
                    .all(|(&a, &b)| a == f64::from(b)));
                let bound = match format {
                    Fp8Format::E4M3 => 0.04,
                    Fp8Format::E5M2 => 0.08,
                };
                let (mut e2, mut x2) = (0.0, 0.0);
                for (a, b) in x.iter().zip(&y.data) {
                    e2 += (f64::from(*a) - b).powi(2);
                    x2 += f64::from(*a).powi(2);
                }
                assert!((e2 / x2).sqrt() < bound, "{format} {granularity}");
            }
        }
    }

    #[test]
    fn f16_and_f64_inputs_are_accepted() {
        let dir = Scratch::new("dtypes");
        let shape = [1, 2, 3, 4];
        let x = normal(24, 2);
        let h: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f32(v)).collect();
        npy::write(&dir.path("x.npy"), &shape, &h).unwrap();
        run_quantize(quantize_args(&dir, Fp8Format::E4M3, Granularity::Head)).unwrap();
        let q = attn_quant::quantize(&h, shape, Fp8Format::E4M3, Granularity::Head).unwrap();
        let codes = npy::read(&dir.path("c.npy")).unwrap();
        assert!(codes
            .data
            .iter()
            .zip(&q.codes)
            .all(|(&a, &b)| a == f64::from(b)));

        let d: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        npy::write(&dir.path("x.npy"), &shape, &d).unwrap();
        run_quantize(quantize_args(&dir, Fp8Format::E5M2, Granularity::Token)).unwrap();
        assert_eq!(npy::read(&dir.path("s.npy")).unwrap().shape, vec![1, 2, 3]);
    }

    #[test]
    fn zero_input_gets_unit_scales() {
        let dir = Scratch::new("zeros");
        npy::write(&dir.path("x.npy"), &[1, 2, 2, 2], &[0.0f32; 8]).unwrap();
        run_quantize(quantize_args(&dir, Fp8Format::E4M3, Granularity::Head)).unwrap();
        let scales = npy::read(&dir.path("s.npy")).unwrap();
        assert_eq!(scales.data, vec![1.0, 1.0]);
        assert!(npy::read(&dir.path("c.npy"))
            .unwrap()
            .data
            .iter()
            .all(|&c| c == 0.0));
    }

    #[test]
    fn quantize_errors_name_the_problem() {
        let dir = Scratch::new("q-errors");
        let shape = [1, 2, 3, 4];
        let mut x = normal(24, 3);
        x[17] = f32::NAN; // (0, 1, 1, 1)
        npy::write(&dir.path("x.npy"), &shape, &x).unwrap();
        let err =
            run_quantize(quantize_args(&dir, Fp8Format::E4M3, Granularity::Head)).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("element 17") && msg.contains("[0, 1, 1, 1]"),
            "{msg}"
        );
        assert!(!dir.path("c.npy").exists(), "nothing is written on error");

        x[17] = f32::NEG_INFINITY;
        npy::write(&dir.path("x.npy"), &shape, &x).unwrap();
        let msg = format!(
            "{:#}",
            run_quantize(quantize_args(&dir, Fp8Format::E5M2, Granularity::Token)).unwrap_err()
        );
        assert!(msg.contains("-inf"), "{msg}");

        npy::write(&dir.path("x.npy"), &[2, 12], &normal(24, 4)).unwrap();
        let msg = format!(
            "{:#}",
            run_quantize(quantize_args(&dir, Fp8Format::E4M3, Granularity::Head)).unwrap_err()
        );
        assert!(msg.contains("4-D"), "{msg}");

        npy::write(&dir.path("x.npy"), &shape, &[7u8; 24]).unwrap();
        let msg = format!(
            "{:#}",
            run_quantize(quantize_args(&dir, Fp8Format::E4M3, Granularity::Head)).unwrap_err()
        );
        assert!(msg.contains("cannot be quantized"), "{msg}");

        let mut args = quantize_args(&dir, Fp8Format::E4M3, Granularity::Head);
        args.input = dir.path("missing.npy");
        assert!(format!("{:#}", run_quantize(args).unwrap_err()).contains("missing.npy"));

        let mut args = quantize_args(&dir, Fp8Format::E4M3, Granularity::Head);
        args.scales = args.codes.clone();
        assert!(run_quantize(args).is_err());
    }

    #[test]
    fn command_line_parsing_rejects_bad_format_and_granularity() {
        let base = [
            "q", "--input", "x.npy", "--codes", "c.npy", "--scales", "s.npy",
        ];
        let parse =
            |extra: &[&str]| QuantizeCli::try_parse_from(base.iter().chain(extra)).map(|c| c.args);
        let ok = parse(&["--format", "e5m2", "--granularity", "block:64"]).unwrap();
        assert_eq!(
            (ok.format, ok.granularity),
            (Fp8Format::E5M2, Granularity::Block(64))
        );
        let err = parse(&["--format", "e4m3", "--granularity", "block:0"]).unwrap_err();
        assert!(
            err.to_string().contains("block size must be at least 1"),
            "{err}"
        );
        let err = parse(&["--format", "e4m3", "--granularity", "row"]).unwrap_err();
        assert!(err.to_string().contains("unknown granularity"), "{err}");
        let err = parse(&["--format", "fp8", "--granularity", "head"]).unwrap_err();
        assert!(err.to_string().contains("unknown FP8 format"), "{err}");
    }

    #[test]
    fn dequantize_errors_name_the_problem() {
        let dir = Scratch::new("dq-errors");
        let shape = [1, 2, 3, 4];
        npy::write(&dir.path("x.npy"), &shape, &normal(24, 5)).unwrap();
        run_quantize(quantize_args(&dir, Fp8Format::E4M3, Granularity::Token)).unwrap();
        let run = |format, granularity| {
            format!(
                "{:#}",
                run_dequantize(dequantize_args(&dir, format, granularity)).unwrap_err()
            )
        };

        // Scales of another granularity: wrong shape (and length).
        let msg = run(Fp8Format::E4M3, Granularity::Head);
        assert!(msg.contains("[1, 2, 3]") && msg.contains("[1, 2]"), "{msg}");
        // Same length, wrong shape: [2, 3] written where [1, 2, 3] is expected.
        let scales = npy::read(&dir.path("s.npy")).unwrap();
        let s32: Vec<f32> = scales.data.iter().map(|&v| v as f32).collect();
        npy::write(&dir.path("s.npy"), &[2, 3], &s32).unwrap();
        assert!(run(Fp8Format::E4M3, Granularity::Token).contains("needs [1, 2, 3]"));
        // f64 scales.
        let s64: Vec<f64> = s32.iter().map(|&v| f64::from(v)).collect();
        npy::write(&dir.path("s.npy"), &[1, 2, 3], &s64).unwrap();
        assert!(run(Fp8Format::E4M3, Granularity::Token).contains("float32"));
        // A zero scale.
        let mut bad = s32.clone();
        bad[4] = 0.0;
        npy::write(&dir.path("s.npy"), &[1, 2, 3], &bad).unwrap();
        assert!(run(Fp8Format::E4M3, Granularity::Token).contains("scale 4"));
        npy::write(&dir.path("s.npy"), &[1, 2, 3], &s32).unwrap();

        // A NaN code (0x7f in E4M3) at flat index 9 = (0, 0, 2, 1).
        let codes = npy::read(&dir.path("c.npy")).unwrap();
        let mut bytes: Vec<u8> = codes.data.iter().map(|&v| v as u8).collect();
        bytes[9] = 0x7f;
        npy::write(&dir.path("c.npy"), &shape, &bytes).unwrap();
        let msg = run(Fp8Format::E4M3, Granularity::Token);
        assert!(
            msg.contains("code 9") && msg.contains("[0, 0, 2, 1]"),
            "{msg}"
        );
        assert!(!dir.path("y.npy").exists(), "nothing is written on error");
        // Float codes.
        npy::write(&dir.path("c.npy"), &shape, &normal(24, 6)).unwrap();
        assert!(run(Fp8Format::E4M3, Granularity::Token).contains("uint8"));
    }

    #[test]
    fn a_scalar_scales_file_is_accepted_for_tensor_granularity() {
        let dir = Scratch::new("scalar");
        let shape = [1, 1, 2, 2];
        npy::write(&dir.path("c.npy"), &shape, &[0x38u8, 0xb8, 0x00, 0x40]).unwrap();
        npy::write::<f32>(&dir.path("s.npy"), &[], &[0.5]).unwrap();
        run_dequantize(dequantize_args(&dir, Fp8Format::E4M3, Granularity::Tensor)).unwrap();
        let y = npy::read(&dir.path("y.npy")).unwrap();
        assert_eq!(y.data, vec![0.5, -0.5, 0.0, 1.0]);
    }
}
