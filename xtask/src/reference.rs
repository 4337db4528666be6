//! `cargo xtask reference`: the f64 CPU reference on `.npy` inputs.
//!
//! Q is `[B, Hq, Sq, D]`, K and V are `[B, Hkv, Sk, D]` (f16, f32 or f64 `.npy`, C order);
//! O is written as `[B, Hq, Sq, D]` and, with `--lse`, LSE as `[B, Hq, Sq]` (natural log,
//! −∞ for fully masked rows), both in `--out-dtype` (f32 by default).
//!
//! With `--do dO.npy --dq dQ.npy --dk dK.npy --dv dV.npy` (all four together) the backward
//! pass runs too ([`reference::backward_with`] on this forward's O and LSE): dO is shaped
//! like O, dQ is written like Q and dK, dV like K, in `--out-dtype` and `--layout`.

use std::path::PathBuf;

use anyhow::{bail, Context};
use attn_ref::{reference, AttnShape, Causal, Problem};

use crate::flags::CausalArg;
use crate::npy;

/// Element type of the written O and LSE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutDtype {
    /// 32-bit float (`<f4`).
    F32,
    /// 64-bit float (`<f8`), the reference's own precision.
    F64,
}

/// Arguments of `cargo xtask reference`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Queries, `[B, Hq, Sq, D]` .npy (f16, f32 or f64).
    #[arg(long)]
    pub q: PathBuf,
    /// Keys, `[B, Hkv, Sk, D]` .npy.
    #[arg(long)]
    pub k: PathBuf,
    /// Values, `[B, Hkv, Sk, D]` .npy, shaped like K.
    #[arg(long)]
    pub v: PathBuf,
    /// Causal mask: none, top-left (PyTorch is_causal) or bottom-right (FlashAttention ≥ 2.1).
    #[arg(long, value_enum, default_value_t = CausalArg::None)]
    pub causal: CausalArg,
    /// Softmax scale; default 1/√D.
    #[arg(long)]
    pub scale: Option<f64>,
    /// Element type of the outputs.
    #[arg(long, value_enum, default_value = "f32")]
    pub out_dtype: OutDtype,
    /// Where to write O, `[B, Hq, Sq, D]`.
    #[arg(long)]
    pub out: PathBuf,
    /// Where to write LSE, `[B, Hq, Sq]` (optional).
    #[arg(long)]
    pub lse: Option<PathBuf>,
    /// Layout of Q, K, V and O: bhsd (`[B, H, S, D]`) or bshd (`[B, S, H, D]`).
    #[arg(long, value_enum, default_value = "bhsd")]
    pub layout: crate::flags::LayoutArg,
    /// Gradient of the loss with respect to O, shaped like O: runs the backward pass too
    /// (needs --dq, --dk and --dv).
    #[arg(long = "do", value_name = "DO")]
    pub d_o: Option<PathBuf>,
    /// Where to write dQ, shaped like Q (with --do).
    #[arg(long)]
    pub dq: Option<PathBuf>,
    /// Where to write dK, shaped like K (with --do).
    #[arg(long)]
    pub dk: Option<PathBuf>,
    /// Where to write dV, shaped like V (with --do).
    #[arg(long)]
    pub dv: Option<PathBuf>,
}

/// The paths of the backward pass: dO in, dQ, dK, dV out.
struct BackwardPaths {
    d_o: PathBuf,
    dq: PathBuf,
    dk: PathBuf,
    dv: PathBuf,
}

impl Args {
    /// The backward paths when `--do`, `--dq`, `--dk`, `--dv` are all given, `None` when
    /// none is, an error naming the missing flags otherwise.
    fn backward_paths(&self) -> anyhow::Result<Option<BackwardPaths>> {
        let flags = [
            ("--do", &self.d_o),
            ("--dq", &self.dq),
            ("--dk", &self.dk),
            ("--dv", &self.dv),
        ];
        let names = |given: bool| -> Vec<&str> {
            flags
                .iter()
                .filter(|(_, path)| path.is_some() == given)
                .map(|(name, _)| *name)
                .collect()
        };
        match (&self.d_o, &self.dq, &self.dk, &self.dv) {
            (None, None, None, None) => Ok(None),
            (Some(d_o), Some(dq), Some(dk), Some(dv)) => Ok(Some(BackwardPaths {
                d_o: d_o.clone(),
                dq: dq.clone(),
                dk: dk.clone(),
                dv: dv.clone(),
            })),
            _ => bail!(
                "{} given without {}: the backward pass needs --do, --dq, --dk and --dv together",
                names(true).join(", "),
                names(false).join(", ")
            ),
        }
    }
}

/// Writes `data` (f64) as `dims` in `dtype`.
fn write_out(
    path: &std::path::Path,
    dims: &[usize],
    data: &[f64],
    dtype: OutDtype,
) -> anyhow::Result<()> {
    match dtype {
        OutDtype::F64 => npy::write(path, dims, data),
        OutDtype::F32 => {
            let narrow: Vec<f32> = data.iter().map(|&x| x as f32).collect();
            npy::write(path, dims, &narrow)
        }
    }
}

/// Reads one input tensor: a 4-D float array.
fn read_input(path: &std::path::Path, name: &str) -> anyhow::Result<([usize; 4], Vec<f64>)> {
    let arr = npy::read(path).with_context(|| format!("reading {name}"))?;
    if !matches!(arr.dtype.as_str(), "<f2" | "<f4" | "<f8") {
        bail!(
            "{name} ({}): dtype `{}` is not a float type; expected f16, f32 or f64",
            path.display(),
            arr.dtype
        );
    }
    let shape = arr.shape4(&format!("{name} ({})", path.display()))?;
    Ok((shape, arr.data))
}

/// The attention shape implied by Q `[B,Hq,Sq,D]` and K, V `[B,Hkv,Sk,D]`, with every
/// cross-check a user can get wrong named in the error.
fn problem_shape(q: [usize; 4], k: [usize; 4], v: [usize; 4]) -> anyhow::Result<AttnShape> {
    if k != v {
        bail!("K has shape {k:?} but V has shape {v:?}; they must be equal ([B, Hkv, Sk, D])");
    }
    let ([bq, hq, sq, dq], [bk, hkv, sk, dk]) = (q, k);
    if bq != bk {
        bail!("batch mismatch: Q has B = {bq}, K/V have B = {bk}");
    }
    if dq != dk {
        bail!("head-dim mismatch: Q has D = {dq}, K/V have D = {dk}");
    }
    AttnShape::new(bq, hq, hkv, sq, sk, dq).context("invalid attention shape")
}

/// Runs the reference and writes O (and LSE; and with `--do`, dQ, dK, dV).
pub fn run(args: Args) -> anyhow::Result<()> {
    let backward = args.backward_paths()?;
    let causal = Causal::from(args.causal);
    let layout = attn_kernels::Layout::from(args.layout);
    // [B, S, H, D] files are read as such and permuted to the reference's [B, H, S, D].
    let swap = |[a, b, c, d]: [usize; 4]| match layout {
        attn_kernels::Layout::Bhsd => [a, b, c, d],
        attn_kernels::Layout::Bshd => [a, c, b, d],
    };
    let (q_shape, q) = read_input(&args.q, "Q")?;
    let (k_shape, k) = read_input(&args.k, "K")?;
    let (v_shape, v) = read_input(&args.v, "V")?;
    let (q_shape, k_shape, v_shape) = (swap(q_shape), swap(k_shape), swap(v_shape));
    let shape = problem_shape(q_shape, k_shape, v_shape)?;
    let mut problem = Problem::new(shape, causal);
    if let Some(scale) = args.scale {
        problem = problem.with_scale(scale)?;
    }
    let (q, k, v) = (
        layout.to_bhsd(&q, q_shape),
        layout.to_bhsd(&k, k_shape),
        layout.to_bhsd(&v, v_shape),
    );
    let d_o = match &backward {
        Some(paths) => {
            let (do_shape, d_o) = read_input(&paths.d_o, "dO")?;
            let do_shape = swap(do_shape);
            if do_shape != q_shape {
                bail!(
                    "dO has shape {:?} but O has shape {:?}; they must be equal",
                    swap(do_shape),
                    swap(q_shape)
                );
            }
            Some(layout.to_bhsd(&d_o, q_shape))
        }
        None => None,
    };
    let out = reference::forward(&problem, &q, &k, &v)?;
    let grads = d_o
        .map(|d_o| reference::backward_with(&problem, &q, &k, &v, &out.o, &out.lse, &d_o))
        .transpose()?;

    let lse_dims = &q_shape[..3];
    let o_dims = swap(q_shape);
    write_out(
        &args.out,
        &o_dims,
        &layout.from_bhsd(&out.o, q_shape),
        args.out_dtype,
    )?;
    if let Some(path) = &args.lse {
        write_out(path, lse_dims, &out.lse, args.out_dtype)?;
    }
    if let (Some(paths), Some(g)) = (&backward, &grads) {
        let kv_dims = swap(k_shape);
        for (path, data, dims, bhsd) in [
            (&paths.dq, &g.dq, o_dims, q_shape),
            (&paths.dk, &g.dk, kv_dims, k_shape),
            (&paths.dv, &g.dv, kv_dims, k_shape),
        ] {
            write_out(path, &dims, &layout.from_bhsd(data, bhsd), args.out_dtype)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};
    use rand_distr::{Distribution, StandardNormal};
    use std::path::Path;

    /// A fresh directory under the system temp dir for one test.
    fn temp_dir(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("xtask-reference-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn normal(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n).map(|_| StandardNormal.sample(&mut rng)).collect()
    }

    /// Writes random f32 Q, K, V with the given shapes; returns their paths and values.
    fn write_qkv(dir: &Path, q: [usize; 4], kv: [usize; 4]) -> [(PathBuf, Vec<f32>); 3] {
        let mut seed = 0;
        [("q", q), ("k", kv), ("v", kv)].map(|(name, shape)| {
            seed += 1;
            let path = dir.join(format!("{name}.npy"));
            let data = normal(shape.iter().product(), seed);
            npy::write(&path, &shape, &data).unwrap();
            (path, data)
        })
    }

    fn args(dir: &Path, causal: &str) -> Args {
        Args {
            q: dir.join("q.npy"),
            k: dir.join("k.npy"),
            v: dir.join("v.npy"),
            causal: <CausalArg as clap::ValueEnum>::from_str(causal, false).unwrap(),
            scale: None,
            out_dtype: OutDtype::F32,
            out: dir.join("o.npy"),
            lse: Some(dir.join("lse.npy")),
            layout: crate::flags::LayoutArg::Bhsd,
            d_o: None,
            dq: None,
            dk: None,
            dv: None,
        }
    }

    #[test]
    fn bshd_files_give_the_bhsd_result_in_bshd_order() {
        use attn_kernels::Layout;
        let dir = temp_dir("bshd");
        // Q [B=2, Sq=5, Hq=4, D=8], K/V [2, Sk=7, Hkv=2, 8] on disk.
        let [(_, q), (_, k), (_, v)] = write_qkv(&dir, [2, 5, 4, 8], [2, 7, 2, 8]);
        let mut a = args(&dir, "bottom-right");
        a.layout = crate::flags::LayoutArg::Bshd;
        run(a).unwrap();
        let o = npy::read(&dir.join("o.npy")).unwrap();
        let lse = npy::read(&dir.join("lse.npy")).unwrap();
        assert_eq!(o.shape, vec![2, 5, 4, 8]);
        assert_eq!(lse.shape, vec![2, 4, 5]);
        let shape = AttnShape::new(2, 4, 2, 5, 7, 8).unwrap();
        let problem = Problem::new(shape, Causal::BottomRight);
        let (qd, kd) = ([2, 4, 5, 8], [2, 2, 7, 8]);
        let want = reference::forward(
            &problem,
            &Layout::Bshd.to_bhsd(&q, qd),
            &Layout::Bshd.to_bhsd(&k, kd),
            &Layout::Bshd.to_bhsd(&v, kd),
        )
        .unwrap();
        let want_o = Layout::Bshd.from_bhsd(&want.o, qd);
        assert!(o
            .data
            .iter()
            .zip(&want_o)
            .all(|(a, b)| *a == f64::from(*b as f32)));
        assert!(lse
            .data
            .iter()
            .zip(&want.lse)
            .all(|(a, b)| *a == f64::from(*b as f32)));
    }

    #[test]
    fn writes_the_reference_output() {
        let dir = temp_dir("ok");
        let [(_, q), (_, k), (_, v)] = write_qkv(&dir, [2, 4, 5, 8], [2, 2, 7, 8]);
        let shape = AttnShape::new(2, 4, 2, 5, 7, 8).unwrap();
        for (causal, out_dtype, scale) in [
            ("none", OutDtype::F32, None),
            ("bottom-right", OutDtype::F64, Some(0.3)),
            ("top-left", OutDtype::F32, Some(1.5)),
        ] {
            let mut a = args(&dir, causal);
            a.out_dtype = out_dtype;
            a.scale = scale;
            run(a).unwrap();
            let mut problem = Problem::new(shape, Causal::parse(causal).unwrap());
            if let Some(s) = scale {
                problem = problem.with_scale(s).unwrap();
            }
            let want = reference::forward(&problem, &q, &k, &v).unwrap();
            let o = npy::read(&dir.join("o.npy")).unwrap();
            let lse = npy::read(&dir.join("lse.npy")).unwrap();
            assert_eq!(o.shape, vec![2, 4, 5, 8]);
            assert_eq!(lse.shape, vec![2, 4, 5]);
            let expected_dtype = if out_dtype == OutDtype::F64 {
                "<f8"
            } else {
                "<f4"
            };
            assert_eq!(o.dtype, expected_dtype);
            let narrow = |x: f64| {
                if out_dtype == OutDtype::F64 {
                    x
                } else {
                    f64::from(x as f32)
                }
            };
            assert!(
                o.data.iter().zip(&want.o).all(|(a, b)| *a == narrow(*b)),
                "{causal}"
            );
            assert!(
                lse.data
                    .iter()
                    .zip(&want.lse)
                    .all(|(a, b)| *a == narrow(*b)),
                "{causal}"
            );
        }
    }

    #[test]
    fn f16_inputs_and_masked_rows() {
        let dir = temp_dir("f16");
        let shape = [1, 1, 4, 2];
        let data: Vec<half::f16> = normal(8, 9)
            .iter()
            .map(|&x| half::f16::from_f32(x))
            .collect();
        for name in ["q", "k"] {
            npy::write(&dir.join(format!("{name}.npy")), &shape, &data).unwrap();
        }
        let kv_shape = [1, 1, 2, 2];
        npy::write(&dir.join("k.npy"), &kv_shape, &data[..4]).unwrap();
        npy::write(&dir.join("v.npy"), &kv_shape, &data[4..]).unwrap();
        run(args(&dir, "bottom-right")).unwrap();
        // Sq = 4 > Sk = 2 bottom-right: rows 0 and 1 see no key → O = 0, LSE = −∞.
        let o = npy::read(&dir.join("o.npy")).unwrap();
        let lse = npy::read(&dir.join("lse.npy")).unwrap();
        assert_eq!(&o.data[..4], &[0.0; 4]);
        assert_eq!(&lse.data[..2], &[f64::NEG_INFINITY; 2]);
        assert!(lse.data[2..].iter().all(|x| x.is_finite()));
    }

    /// `args` with the four backward flags pointing into `dir`.
    fn backward_args(dir: &Path, causal: &str) -> Args {
        let mut a = args(dir, causal);
        a.d_o = Some(dir.join("do.npy"));
        a.dq = Some(dir.join("dq.npy"));
        a.dk = Some(dir.join("dk.npy"));
        a.dv = Some(dir.join("dv.npy"));
        a
    }

    #[test]
    fn writes_the_backward_reference_gradients() {
        use attn_kernels::Layout;
        let dir = temp_dir("backward");
        let shape = AttnShape::new(2, 4, 2, 5, 7, 8).unwrap();
        for (layout, causal, out_dtype, scale) in [
            (Layout::Bhsd, "none", OutDtype::F32, None),
            (Layout::Bhsd, "bottom-right", OutDtype::F64, Some(0.3)),
            (Layout::Bshd, "top-left", OutDtype::F64, Some(1.5)),
        ] {
            let (qd, kd) = ([2, 4, 5, 8], [2, 2, 7, 8]); // [B, H, S, D]
            let disk = |[a, b, c, d]: [usize; 4]| match layout {
                Layout::Bhsd => [a, b, c, d],
                Layout::Bshd => [a, c, b, d],
            };
            let [(_, q), (_, k), (_, v)] = write_qkv(&dir, disk(qd), disk(kd));
            let d_o = normal(shape.q_elems(), 77);
            npy::write(&dir.join("do.npy"), &disk(qd), &d_o).unwrap();
            let mut a = backward_args(&dir, causal);
            a.out_dtype = out_dtype;
            a.scale = scale;
            a.layout = match layout {
                Layout::Bhsd => crate::flags::LayoutArg::Bhsd,
                Layout::Bshd => crate::flags::LayoutArg::Bshd,
            };
            run(a).unwrap();

            let mut problem = Problem::new(shape, Causal::parse(causal).unwrap());
            if let Some(s) = scale {
                problem = problem.with_scale(s).unwrap();
            }
            let bhsd = |x: &[f32], dims| layout.to_bhsd(x, dims);
            let want = reference::backward(
                &problem,
                &bhsd(&q, qd),
                &bhsd(&k, kd),
                &bhsd(&v, kd),
                &bhsd(&d_o, qd),
            )
            .unwrap();
            let narrow = |x: f64| {
                if out_dtype == OutDtype::F64 {
                    x
                } else {
                    f64::from(x as f32)
                }
            };
            let expected_dtype = match out_dtype {
                OutDtype::F64 => "<f8",
                OutDtype::F32 => "<f4",
            };
            for (name, grad, dims) in [
                ("dq", &want.dq, qd),
                ("dk", &want.dk, kd),
                ("dv", &want.dv, kd),
            ] {
                let got = npy::read(&dir.join(format!("{name}.npy"))).unwrap();
                assert_eq!(got.shape, disk(dims).to_vec(), "{causal} {name}");
                assert_eq!(got.dtype, expected_dtype, "{causal} {name}");
                let want_disk = layout.from_bhsd(grad, dims);
                assert!(
                    got.data
                        .iter()
                        .zip(&want_disk)
                        .all(|(a, b)| *a == narrow(*b)),
                    "{causal} {name}"
                );
                assert!(got.data.iter().any(|&x| x != 0.0), "{causal} {name}");
            }
            let o = npy::read(&dir.join("o.npy")).unwrap();
            let want_o = layout.from_bhsd(&want.o, qd);
            assert!(o.data.iter().zip(&want_o).all(|(a, b)| *a == narrow(*b)));
        }
    }

    #[test]
    fn backward_flags_come_together() {
        let dir = temp_dir("backward-flags");
        write_qkv(&dir, [1, 2, 3, 4], [1, 2, 3, 4]);
        npy::write(&dir.join("do.npy"), &[1, 2, 3, 4], &normal(24, 5)).unwrap();
        let mut a = backward_args(&dir, "none");
        a.dk = None;
        let msg = run_err(a);
        assert!(msg.contains("--do, --dq, --dv given without --dk"), "{msg}");
        let mut a = args(&dir, "none");
        a.d_o = Some(dir.join("do.npy"));
        let msg = run_err(a);
        assert!(msg.contains("given without --dq, --dk, --dv"), "{msg}");
        let mut a = args(&dir, "none");
        a.dq = Some(dir.join("dq.npy"));
        let msg = run_err(a);
        assert!(msg.contains("--dq given without --do, --dk, --dv"), "{msg}");
        assert!(!dir.join("o.npy").exists(), "no output on a flag error");
        // dO must be shaped like O.
        npy::write(&dir.join("do.npy"), &[1, 2, 4, 4], &normal(32, 5)).unwrap();
        let msg = run_err(backward_args(&dir, "none"));
        assert!(msg.contains("dO has shape [1, 2, 4, 4]"), "{msg}");
        // The flag is spelled --do on the command line.
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = <Cli as clap::Parser>::try_parse_from([
            "reference",
            "--q",
            "q",
            "--k",
            "k",
            "--v",
            "v",
            "--out",
            "o",
            "--do",
            "g",
            "--dq",
            "a",
            "--dk",
            "b",
            "--dv",
            "c",
        ])
        .expect("backward flags parse");
        assert_eq!(cli.args.d_o, Some(PathBuf::from("g")));
        assert_eq!(cli.args.dv, Some(PathBuf::from("c")));
    }

    fn run_err(a: Args) -> String {
        format!("{:#}", run(a).expect_err("must fail"))
    }

    #[test]
    fn truncated_or_corrupt_input_is_an_error() {
        let dir = temp_dir("corrupt");
        write_qkv(&dir, [1, 2, 3, 4], [1, 2, 3, 4]);
        let bytes = std::fs::read(dir.join("k.npy")).unwrap();
        std::fs::write(dir.join("k.npy"), &bytes[..bytes.len() - 5]).unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(
            msg.contains("reading K") && msg.contains("truncated"),
            "{msg}"
        );
        std::fs::write(dir.join("k.npy"), b"\x93NUMPY garbage").unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(
            msg.contains("reading K") && msg.contains("not a valid .npy"),
            "{msg}"
        );
        std::fs::remove_file(dir.join("v.npy")).unwrap();
        std::fs::write(dir.join("k.npy"), &bytes).unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(msg.contains("reading V"), "{msg}");
        assert!(!dir.join("o.npy").exists(), "no output on error");
    }

    #[test]
    fn wrong_dtypes_are_errors() {
        let dir = temp_dir("dtype");
        write_qkv(&dir, [1, 2, 3, 4], [1, 2, 3, 4]);
        let ints: Vec<i64> = (0..24).collect();
        npy::write(&dir.join("q.npy"), &[1, 2, 3, 4], &ints).unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(msg.contains("reading Q") && msg.contains("<i8"), "{msg}");
        let bytes: Vec<u8> = (0..24).collect();
        npy::write(&dir.join("q.npy"), &[1, 2, 3, 4], &bytes).unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(
            msg.contains("Q") && msg.contains("not a float type"),
            "{msg}"
        );
    }

    #[test]
    fn shape_mismatches_are_errors() {
        type Case<'a> = ([usize; 4], [usize; 4], Option<[usize; 4]>, &'a str);
        let cases: [Case; 6] = [
            (
                [1, 2, 3, 4],
                [1, 2, 3, 8],
                None,
                "head-dim mismatch: Q has D = 4",
            ),
            ([2, 2, 3, 4], [1, 2, 3, 4], None, "batch mismatch"),
            ([1, 3, 3, 4], [1, 2, 3, 4], None, "multiple of kv_heads"),
            (
                [1, 2, 3, 4],
                [1, 2, 3, 4],
                Some([1, 2, 5, 4]),
                "must be equal",
            ),
            (
                [1, 2, 0, 4],
                [1, 2, 3, 4],
                None,
                "`q_len` must be at least 1",
            ),
            (
                [1, 2, 3, 4],
                [1, 2, 3, 4],
                Some([2, 12, 1, 1]),
                "must be equal",
            ),
        ];
        for (n, (q, kv, v, want)) in cases.into_iter().enumerate() {
            let dir = temp_dir(&format!("shape{n}"));
            write_qkv(&dir, q, kv);
            if let Some(v_shape) = v {
                let data = normal(v_shape.iter().product(), 3);
                npy::write(&dir.join("v.npy"), &v_shape, &data).unwrap();
            }
            let msg = run_err(args(&dir, "none"));
            assert!(msg.contains(want), "case {n}: {msg}");
        }
        let dir = temp_dir("rank");
        write_qkv(&dir, [1, 2, 3, 4], [1, 2, 3, 4]);
        npy::write(&dir.join("q.npy"), &[6, 4], &normal(24, 4)).unwrap();
        let msg = run_err(args(&dir, "none"));
        assert!(msg.contains("expected a 4-D [B,H,S,D] array"), "{msg}");
    }

    #[test]
    fn bad_options_are_errors() {
        let dir = temp_dir("options");
        write_qkv(&dir, [1, 2, 3, 4], [1, 2, 3, 4]);
        // An unknown causal mode is now refused by clap, before `run`.
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let msg = <Cli as clap::Parser>::try_parse_from([
            "reference",
            "--q",
            "q",
            "--k",
            "k",
            "--v",
            "v",
            "--out",
            "o",
            "--causal",
            "causal",
        ])
        .map(|_| ())
        .expect_err("unknown causal mode")
        .to_string();
        assert!(
            msg.contains("invalid value 'causal' for '--causal")
                && msg.contains("none, top-left, bottom-right"),
            "{msg}"
        );
        let mut a = args(&dir, "none");
        a.scale = Some(0.0);
        let msg = run_err(a);
        assert!(
            msg.contains("softmax scale must be finite and > 0"),
            "{msg}"
        );
        let mut a = args(&dir, "none");
        a.out = dir.join("missing-dir").join("o.npy");
        let msg = run_err(a);
        assert!(msg.contains("creating"), "{msg}");
    }
}
