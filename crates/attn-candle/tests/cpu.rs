//! Every public function on the CPU device against attn-ref's f64 reference, computed here
//! independently on the same values: fresh seeded N(0, 1) data, contiguous `(b, s, h, d)`
//! tensors and strided views (a transpose of `(b, h, s, d)`, a narrow of a larger tensor),
//! f32, f16 and bf16.

use attn_candle::*;
use attn_ref::reference::{forward, varlen::forward_varlen, RefOutput};
use attn_ref::{Alibi, AttnShape, Problem};
use candle_core::{DType, Device, Tensor};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

type R<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

fn randn(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| StandardNormal.sample(&mut rng)).collect()
}

#[derive(Clone, Copy, Debug)]
enum Layout {
    /// A contiguous `(b, s, h, d)` tensor.
    Contiguous,
    /// `(b, h, s, d)` storage viewed as `(b, s, h, d)` through `transpose(1, 2)`.
    Transposed,
    /// A narrow of a larger `(b, s + 3, h + 2, d)` tensor on the seq and head dims.
    Narrowed,
}
const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Transposed, Layout::Narrowed];

/// A `(b, s, h, d)` tensor of dtype `dt` in `layout`, with its values as `[B, H, S, D]` f32
/// (read back through candle's own strided copy, after rounding to `dt`).
fn tensor(
    dims: (usize, usize, usize, usize),
    dt: DType,
    layout: Layout,
    seed: u64,
) -> R<(Tensor, Vec<f32>)> {
    let (b, s, h, d) = dims;
    let dev = Device::Cpu;
    let t = match layout {
        Layout::Contiguous => {
            Tensor::from_vec(randn(b * s * h * d, seed), (b, s, h, d), &dev)?.to_dtype(dt)?
        }
        Layout::Transposed => Tensor::from_vec(randn(b * h * s * d, seed), (b, h, s, d), &dev)?
            .to_dtype(dt)?
            .transpose(1, 2)?,
        Layout::Narrowed => Tensor::from_vec(
            randn(b * (s + 3) * (h + 2) * d, seed),
            (b, s + 3, h + 2, d),
            &dev,
        )?
        .to_dtype(dt)?
        .narrow(1, 2, s)?
        .narrow(2, 1, h)?,
    };
    assert_eq!(t.dims(), &[b, s, h, d]);
    if !matches!(layout, Layout::Contiguous) && s > 1 && h > 1 {
        assert!(!t.is_contiguous(), "{layout:?} must be a strided view");
    }
    let bshd = t
        .to_dtype(DType::F32)?
        .contiguous()?
        .flatten_all()?
        .to_vec1::<f32>()?;
    Ok((t, bshd_to_bhsd(&bshd, b, s, h, d)))
}

fn bshd_to_bhsd(x: &[f32], b: usize, s: usize, h: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                for di in 0..d {
                    out[((bi * h + hi) * s + si) * d + di] = x[((bi * s + si) * h + hi) * d + di];
                }
            }
        }
    }
    out
}

fn bhsd_to_bshd(x: &[f64], b: usize, h: usize, s: usize, d: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                for di in 0..d {
                    out[((bi * s + si) * h + hi) * d + di] = x[((bi * h + hi) * s + si) * d + di];
                }
            }
        }
    }
    out
}

fn tol(dt: DType) -> f64 {
    match dt {
        DType::F32 => 1e-6,
        DType::F16 => 1e-3,
        _ => 8e-3,
    }
}

fn values(t: &Tensor) -> R<Vec<f64>> {
    Ok(t.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?)
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g == w) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Q, K, V of one case, each `(b, s, h, d)`, and their `[B, H, S, D]` values.
struct Case {
    shape: AttnShape,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    qh: Vec<f32>,
    kh: Vec<f32>,
    vh: Vec<f32>,
    dt: DType,
}

impl Case {
    fn new(
        dims: (usize, usize, usize, usize, usize, usize),
        dt: DType,
        layout: Layout,
        seed: u64,
    ) -> R<Self> {
        let (b, hq, hkv, sq, sk, d) = dims;
        let (q, qh) = tensor((b, sq, hq, d), dt, layout, seed)?;
        let (k, kh) = tensor((b, sk, hkv, d), dt, layout, seed + 1)?;
        let (v, vh) = tensor((b, sk, hkv, d), dt, layout, seed + 2)?;
        Ok(Self {
            shape: AttnShape::new(b, hq, hkv, sq, sk, d)?,
            q,
            k,
            v,
            qh,
            kh,
            vh,
            dt,
        })
    }

    fn reference(&self, p: &Problem) -> R<RefOutput> {
        Ok(forward(p, &self.qh, &self.kh, &self.vh)?)
    }

    /// Checks an output `(b, sq, hq, d)` against the reference of `p`.
    fn check(&self, out: &Tensor, p: &Problem, what: &str) -> R<Vec<f64>> {
        let s = self.shape;
        assert_eq!(
            out.dims(),
            &[s.batch(), s.q_len(), s.q_heads(), s.head_dim()],
            "{what}"
        );
        assert_eq!(out.dtype(), self.dt, "{what}");
        let want = bhsd_to_bshd(
            &self.reference(p)?.o,
            s.batch(),
            s.q_heads(),
            s.q_len(),
            s.head_dim(),
        );
        let got = values(out)?;
        assert_close(&got, &want, tol(self.dt), &format!("{what} {:?}", self.dt));
        Ok(got)
    }

    fn problem(&self, causal: Causal, scale: f32) -> Problem {
        Problem::new(self.shape, causal)
            .with_scale(f64::from(scale))
            .unwrap()
    }
}

/// GQA 4:2 with Sq < Sk, and MQA 3:1 with Sq > Sk (bottom-right causal masks whole rows).
const SHAPES: [(usize, usize, usize, usize, usize, usize); 2] =
    [(2, 4, 2, 5, 7, 16), (1, 3, 1, 6, 3, 8)];

#[test]
fn flash_attn_matches_the_reference_for_every_dtype_and_layout() -> R<()> {
    let scale = 0.3f32;
    let mut seed = 10;
    for dt in DTYPES {
        for layout in LAYOUTS {
            for dims in SHAPES {
                seed += 3;
                let c = Case::new(dims, dt, layout, seed)?;
                let what = format!("{layout:?} {dims:?}");
                let plain = flash_attn(&c.q, &c.k, &c.v, scale, false)?;
                let plain = c.check(
                    &plain,
                    &c.problem(Causal::None, scale),
                    &format!("plain {what}"),
                )?;
                let causal = flash_attn(&c.q, &c.k, &c.v, scale, true)?;
                let causal = c.check(
                    &causal,
                    &c.problem(Causal::BottomRight, scale),
                    &format!("causal {what}"),
                )?;
                // The mask matters: causal and plain attention differ on these shapes.
                assert!(
                    max_diff(&plain, &causal) > 0.05,
                    "{what}: causal changed nothing"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn causal_is_bottom_right_and_top_left_is_available() -> R<()> {
    let scale = 0.25f32;
    for dt in DTYPES {
        let c = Case::new((1, 2, 2, 4, 9, 8), dt, Layout::Transposed, 40)?;
        let br = flash_attn(&c.q, &c.k, &c.v, scale, true)?;
        let br = c.check(&br, &c.problem(Causal::BottomRight, scale), "bottom-right")?;
        let tl = flash_attn_causal_top_left(&c.q, &c.k, &c.v, scale)?;
        let tl = c.check(&tl, &c.problem(Causal::TopLeft, scale), "top-left")?;
        assert!(
            max_diff(&br, &tl) > 0.05,
            "top-left and bottom-right must differ when Sq != Sk"
        );
        // The builder with Causal::TopLeft is the same op.
        let op = FlashAttn::new(scale)
            .causal(Causal::TopLeft)
            .forward(&c.q, &c.k, &c.v)?;
        assert_eq!(values(&op)?, tl);
    }
    Ok(())
}

#[test]
fn windowed_matches_the_reference_window() -> R<()> {
    let scale = 0.35f32;
    for dt in DTYPES {
        for layout in [Layout::Contiguous, Layout::Narrowed] {
            let c = Case::new((2, 4, 2, 6, 9, 16), dt, layout, 70)?;
            let base = c.problem(Causal::None, scale);
            let cases: [(Option<usize>, Option<usize>, Problem); 5] = [
                (Some(2), Some(1), base.with_window(2, 1)?),
                (Some(3), None, base.with_window(3, -1)?),
                (None, Some(2), base.with_window(-1, 2)?),
                // candle-flash-attn's causal spelling.
                (None, Some(0), c.problem(Causal::BottomRight, scale)),
                // A size beyond Sk is unbounded.
                (Some(100), Some(100), base.clone()),
            ];
            let plain = values(&flash_attn(&c.q, &c.k, &c.v, scale, false)?)?;
            for (l, r, p) in cases {
                let out = flash_attn_windowed(&c.q, &c.k, &c.v, scale, l, r)?;
                let got = c.check(&out, &p, &format!("window ({l:?}, {r:?}) {layout:?}"))?;
                if l != Some(100) {
                    assert!(
                        max_diff(&got, &plain) > 0.01,
                        "window ({l:?}, {r:?}) masked nothing"
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn softcap_matches_the_reference_and_zero_means_none() -> R<()> {
    let scale = 1.0f32; // large scores, so that a softcap of 2 bites
    for dt in DTYPES {
        let c = Case::new((1, 4, 4, 5, 5, 16), dt, Layout::Transposed, 90)?;
        let out =
            flash_attn_alibi_windowed_softcap(&c.q, &c.k, &c.v, None, scale, None, None, 2.0)?;
        let capped = c.check(
            &out,
            &c.problem(Causal::None, scale).with_softcap(2.0)?,
            "softcap 2",
        )?;
        let out =
            flash_attn_alibi_windowed_softcap(&c.q, &c.k, &c.v, None, scale, None, Some(0), 0.0)?;
        c.check(
            &out,
            &c.problem(Causal::BottomRight, scale),
            "softcap 0 = none, causal",
        )?;
        let plain = values(&flash_attn(&c.q, &c.k, &c.v, scale, false)?)?;
        assert!(max_diff(&capped, &plain) > 0.01, "softcap changed nothing");
    }
    Ok(())
}

#[test]
fn alibi_per_head_and_per_batch_head_match_the_reference() -> R<()> {
    let scale = 0.25f32;
    let dev = Device::Cpu;
    for dt in DTYPES {
        let c = Case::new((2, 4, 2, 5, 8, 16), dt, Layout::Narrowed, 110)?;
        let per_head = vec![0.5f32, 0.25, 0.125, 0.0625];
        let per_bh: Vec<f32> = (0..8).map(|i| 0.05 * (i + 1) as f32).collect();
        let s1 = Tensor::new(per_head.as_slice(), &dev)?;
        let s2 = Tensor::from_vec(per_bh.clone(), (2, 4), &dev)?;
        let base = c.problem(Causal::None, scale);
        let causal = c.problem(Causal::BottomRight, scale);

        let out = flash_attn_alibi(&c.q, &c.k, &c.v, &s1, scale, false)?;
        let a = c.check(
            &out,
            &base.with_alibi(Alibi::PerHead(per_head.clone()))?,
            "alibi [Hq]",
        )?;
        let plain = values(&flash_attn(&c.q, &c.k, &c.v, scale, false)?)?;
        assert!(max_diff(&a, &plain) > 0.01, "ALiBi changed nothing");

        let out = flash_attn_alibi(&c.q, &c.k, &c.v, &s2, scale, true)?;
        c.check(
            &out,
            &causal.with_alibi(Alibi::PerBatchHead(per_bh.clone()))?,
            "alibi [B, Hq] causal",
        )?;

        let out = flash_attn_alibi_windowed(&c.q, &c.k, &c.v, &s1, scale, Some(3), Some(0))?;
        c.check(
            &out,
            &base
                .with_window(3, 0)?
                .with_alibi(Alibi::PerHead(per_head.clone()))?,
            "alibi windowed",
        )?;

        let out = flash_attn_alibi_windowed_softcap(
            &c.q,
            &c.k,
            &c.v,
            Some(&s2),
            scale,
            Some(4),
            Some(1),
            3.0,
        )?;
        let p = base
            .with_window(4, 1)?
            .with_softcap(3.0)?
            .with_alibi(Alibi::PerBatchHead(per_bh.clone()))?;
        c.check(&out, &p, "alibi + window + softcap")?;
    }
    Ok(())
}

#[test]
fn with_lse_returns_the_reference_lse() -> R<()> {
    let scale = 0.3f32;
    for dt in DTYPES {
        // Sq > Sk: causal rows 0..2 see no key (O = 0, LSE = −∞).
        let c = Case::new((2, 2, 1, 5, 3, 8), dt, Layout::Transposed, 130)?;
        for causal in [false, true] {
            let (out, lse) = flash_attn_with_lse(&c.q, &c.k, &c.v, scale, causal)?;
            let mode = if causal {
                Causal::BottomRight
            } else {
                Causal::None
            };
            let p = c.problem(mode, scale);
            c.check(&out, &p, "with_lse output")?;
            assert_eq!(lse.dims(), &[2, 2, 5]);
            assert_eq!(lse.dtype(), DType::F32);
            let want: Vec<f64> = c
                .reference(&p)?
                .lse
                .iter()
                .map(|&x| f64::from(x as f32))
                .collect();
            let got = values(&lse)?;
            assert_eq!(got, want, "lse causal={causal}");
            assert_eq!(got.contains(&f64::NEG_INFINITY), causal);
        }
    }
    Ok(())
}

#[test]
fn sdpa_bhsd_takes_candle_nn_layout() -> R<()> {
    let dev = Device::Cpu;
    let scale = 0.3f32;
    let (b, hq, hkv, sq, sk, d) = (2, 4, 2, 3, 6, 8);
    for dt in DTYPES {
        let q =
            Tensor::from_vec(randn(b * hq * sq * d, 150), (b, hq, sq, d), &dev)?.to_dtype(dt)?;
        let k =
            Tensor::from_vec(randn(b * hkv * sk * d, 151), (b, hkv, sk, d), &dev)?.to_dtype(dt)?;
        let v =
            Tensor::from_vec(randn(b * hkv * sk * d, 152), (b, hkv, sk, d), &dev)?.to_dtype(dt)?;
        let f = |t: &Tensor| -> R<Vec<f32>> {
            Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
        };
        let (qh, kh, vh) = (f(&q)?, f(&k)?, f(&v)?);
        let shape = AttnShape::new(b, hq, hkv, sq, sk, d)?;
        for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
            let out = sdpa_bhsd(&q, &k, &v, scale, causal)?;
            assert_eq!(out.dims(), &[b, hq, sq, d]);
            assert!(out.is_contiguous());
            let p = Problem::new(shape, causal).with_scale(f64::from(scale))?;
            let want = forward(&p, &qh, &kh, &vh)?.o;
            assert_close(
                &values(&out)?,
                &want,
                tol(dt),
                &format!("sdpa_bhsd {causal} {dt:?}"),
            );
        }
    }
    Ok(())
}

/// `(total, h, d)` tensor, contiguous or a narrow of a larger one on the head dim, and its
/// values `[total, H, D]`.
fn packed(
    total: usize,
    h: usize,
    d: usize,
    dt: DType,
    strided: bool,
    seed: u64,
) -> R<(Tensor, Vec<f32>)> {
    let dev = Device::Cpu;
    let t = if strided {
        Tensor::from_vec(randn(total * (h + 1) * d, seed), (total, h + 1, d), &dev)?
            .to_dtype(dt)?
            .narrow(1, 1, h)?
    } else {
        Tensor::from_vec(randn(total * h * d, seed), (total, h, d), &dev)?.to_dtype(dt)?
    };
    let vals = t
        .to_dtype(DType::F32)?
        .contiguous()?
        .flatten_all()?
        .to_vec1::<f32>()?;
    Ok((t, vals))
}

#[test]
fn varlen_matches_the_reference_with_empty_sequences() -> R<()> {
    let dev = Device::Cpu;
    let scale = 0.3f32;
    let (hq, hkv, d) = (4, 2, 8);
    // Sequence 1 has no query rows; sequence 2 has rows but no keys (zeros); 0 and 3 are
    // ordinary, with Sq != Sk.
    let cu_q = [0u32, 3, 3, 5, 11];
    let cu_k = [0u32, 4, 6, 6, 9];
    let (max_q, max_k) = (6, 4);
    let seqlens_q = Tensor::new(&cu_q, &dev)?;
    let seqlens_k = Tensor::new(&cu_k, &dev)?;
    let cu_qi: Vec<i32> = cu_q.iter().map(|&x| x as i32).collect();
    let cu_ki: Vec<i32> = cu_k.iter().map(|&x| x as i32).collect();
    let template = AttnShape::new(4, hq, hkv, 1, 1, d)?;
    for dt in DTYPES {
        for strided in [false, true] {
            let (q, qv) = packed(11, hq, d, dt, strided, 170)?;
            let (k, kv) = packed(9, hkv, d, dt, strided, 171)?;
            let (v, vv) = packed(9, hkv, d, dt, strided, 172)?;
            assert_eq!(q.is_contiguous(), !strided);
            let what = format!("{dt:?} strided={strided}");
            let mut outs = Vec::new();
            for causal in [false, true] {
                let out = flash_attn_varlen(
                    &q, &k, &v, &seqlens_q, &seqlens_k, max_q, max_k, scale, causal,
                )?;
                assert_eq!(out.dims(), &[11, hq, d]);
                assert_eq!(out.dtype(), dt);
                let mode = if causal {
                    Causal::BottomRight
                } else {
                    Causal::None
                };
                let p = Problem::new(template, mode).with_scale(f64::from(scale))?;
                let want = forward_varlen(&p, &cu_qi, &cu_ki, &qv, &kv, &vv)?.o;
                let got = values(&out)?;
                assert_close(
                    &got,
                    &want,
                    tol(dt),
                    &format!("varlen causal={causal} {what}"),
                );
                // Rows 3..5 belong to the sequence with no keys: exactly zero.
                assert!(
                    got[3 * hq * d..5 * hq * d].iter().all(|&x| x == 0.0),
                    "{what}: keyless rows"
                );
                assert!(got[..3 * hq * d].iter().any(|&x| x != 0.0));
                outs.push(got);
            }
            assert!(
                max_diff(&outs[0], &outs[1]) > 0.05,
                "{what}: causal changed nothing"
            );

            let out = flash_attn_varlen_windowed(
                &q,
                &k,
                &v,
                &seqlens_q,
                &seqlens_k,
                max_q,
                max_k,
                scale,
                Some(1),
                Some(0),
            )?;
            let p = Problem::new(template, Causal::None)
                .with_scale(f64::from(scale))?
                .with_window(1, 0)?;
            let want = forward_varlen(&p, &cu_qi, &cu_ki, &qv, &kv, &vv)?.o;
            assert_close(
                &values(&out)?,
                &want,
                tol(dt),
                &format!("varlen windowed {what}"),
            );

            let slopes: Vec<f32> = (0..4 * hq).map(|i| 0.03 * (i + 1) as f32).collect();
            let st = Tensor::from_vec(slopes.clone(), (4, hq), &dev)?;
            let out = flash_attn_varlen_alibi_windowed_softcap(
                &q,
                &k,
                &v,
                Some(&st),
                &seqlens_q,
                &seqlens_k,
                max_q,
                max_k,
                scale,
                None,
                Some(0),
                1.5,
            )?;
            let p = Problem::new(template, Causal::BottomRight)
                .with_scale(f64::from(scale))?
                .with_softcap(1.5)?
                .with_alibi(Alibi::PerBatchHead(slopes))?;
            let want = forward_varlen(&p, &cu_qi, &cu_ki, &qv, &kv, &vv)?.o;
            assert_close(
                &values(&out)?,
                &want,
                tol(dt),
                &format!("varlen alibi softcap {what}"),
            );
        }
    }
    Ok(())
}

fn err_msg<T: std::fmt::Debug>(r: candle_core::Result<T>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_inputs_are_errors_not_panics() -> R<()> {
    let dev = Device::Cpu;
    let t = |dims: &[usize]| Tensor::zeros(dims, DType::F32, &dev).unwrap();
    let (q, k) = (t(&[1, 4, 4, 8]), t(&[1, 6, 2, 8]));
    let expect = |r: candle_core::Result<Tensor>, needle: &str| {
        let m = err_msg(r);
        assert!(m.contains(needle), "message `{m}` lacks `{needle}`");
    };
    expect(flash_attn(&t(&[4, 4, 8]), &k, &k, 1.0, false), "rank 4");
    expect(
        flash_attn(&q, &t(&[1, 6, 2, 16]), &t(&[1, 6, 2, 16]), 1.0, false),
        "head_dim",
    );
    expect(
        flash_attn(&q, &t(&[2, 6, 2, 8]), &t(&[2, 6, 2, 8]), 1.0, false),
        "batch",
    );
    expect(
        flash_attn(&q, &k, &t(&[1, 5, 2, 8]), 1.0, false),
        "same shape",
    );
    expect(
        flash_attn(&q, &t(&[1, 6, 3, 8]), &t(&[1, 6, 3, 8]), 1.0, false),
        "must divide",
    );
    expect(
        flash_attn(&q, &k, &k.to_dtype(DType::F16)?, 1.0, false),
        "same dtype",
    );
    let qu = q.to_dtype(DType::U8)?;
    let ku = k.to_dtype(DType::U8)?;
    expect(flash_attn(&qu, &ku, &ku, 1.0, false), "unsupported dtype");
    expect(flash_attn(&q, &k, &k, 0.0, false), "scale");
    expect(flash_attn(&q, &k, &k, f32::NAN, true), "scale");
    expect(
        flash_attn_alibi_windowed_softcap(&q, &k, &k, None, 1.0, None, None, -1.0),
        "softcap",
    );
    // ALiBi: wrong length, wrong rank, wrong dtype.
    expect(flash_attn_alibi(&q, &k, &k, &t(&[3]), 1.0, false), "ALiBi");
    expect(
        flash_attn_alibi(&q, &k, &k, &t(&[2, 4]), 1.0, false),
        "ALiBi",
    );
    expect(
        flash_attn_alibi(&q, &k, &k, &t(&[1, 1, 4]), 1.0, false),
        "rank 3",
    );
    expect(
        flash_attn_alibi(&q, &k, &k, &t(&[4]).to_dtype(DType::F16)?, 1.0, false),
        "f32",
    );
    let nan = Tensor::new(&[f32::NAN, 0.0, 0.0, 0.0], &dev)?;
    expect(flash_attn_alibi(&q, &k, &k, &nan, 1.0, false), "ALiBi");
    // sdpa_bhsd wants rank 4.
    let r = sdpa_bhsd(&t(&[4, 4, 8]), &k, &k, 1.0, Causal::None);
    expect(r, "(batch, heads, seq, head_dim)");

    // Varlen.
    let (vq, vk) = (t(&[5, 4, 8]), t(&[6, 2, 8]));
    let u = |x: &[u32]| Tensor::new(x, &dev).unwrap();
    let ok_q = u(&[0, 2, 5]);
    let ok_k = u(&[0, 3, 6]);
    flash_attn_varlen(&vq, &vk, &vk, &ok_q, &ok_k, 3, 3, 1.0, true)?; // the valid baseline
    expect(
        flash_attn_varlen(&q, &vk, &vk, &ok_q, &ok_k, 3, 3, 1.0, true),
        "rank 3",
    );
    expect(
        flash_attn_varlen(&vq, &vk, &vk, &u(&[0, 2]), &ok_k, 3, 3, 1.0, true),
        "batch + 1",
    );
    expect(
        flash_attn_varlen(&vq, &vk, &vk, &u(&[0, 3, 2]), &ok_k, 3, 3, 1.0, true),
        "never decrease",
    );
    expect(
        flash_attn_varlen(&vq, &vk, &vk, &u(&[1, 2, 5]), &ok_k, 3, 3, 1.0, true),
        "start at 0",
    );
    expect(
        flash_attn_varlen(&vq, &vk, &vk, &u(&[0, 2, 4]), &ok_k, 3, 3, 1.0, true),
        "q has 5 rows",
    );
    expect(
        flash_attn_varlen(&vq, &vk, &vk, &ok_q, &ok_k, 2, 3, 1.0, true),
        "max_seqlen",
    );
    let f = Tensor::new(&[0f32, 2.0, 5.0], &dev)?;
    expect(
        flash_attn_varlen(&vq, &vk, &vk, &f, &ok_k, 3, 3, 1.0, true),
        "u32",
    );
    expect(
        flash_attn_varlen(
            &vq,
            &t(&[6, 3, 8]),
            &t(&[6, 3, 8]),
            &ok_q,
            &ok_k,
            3,
            3,
            1.0,
            true,
        ),
        "must divide",
    );
    Ok(())
}

/// Without the `cuda` feature, candle's `CudaStorage` is a stand-in no tensor holds; a direct
/// call says the feature is off.
#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_fwd_without_the_feature_is_a_clear_error() {
    use candle_core::{CudaStorage, CustomOp3, Layout};
    let l = Layout::contiguous((1, 1, 1, 8));
    let s = CudaStorage;
    let m = err_msg(
        FlashAttn::new(1.0)
            .cuda_fwd(&s, &l, &s, &l, &s, &l)
            .map(|_| ()),
    );
    assert!(m.contains(CUDA_FEATURE_DISABLED), "{m}");
}

/// The paged function against the varlen one on the same keys gathered from the pages: a
/// shuffled table, pages that straddle, a sequence with no query rows, one with rows but no
/// keys, causal and windowed; and the refusals (a table entry outside the cache, a page size
/// that is no multiple of 16, more keys than the table holds).
#[test]
fn paged_matches_varlen_on_the_gathered_keys() -> R<()> {
    let dev = Device::Cpu;
    let (hq, hkv, d, ps, num_blocks) = (4, 2, 8, 16, 9);
    let cu_q = [0u32, 2, 2, 7, 9];
    let used = [20u32, 7, 33, 0];
    let max_blocks = 3;
    // Sequence b's pages, shuffled through the cache; unused slots hold junk.
    let table: [u32; 12] = [5, 1, 999, 7, 999, 999, 0, 3, 8, 999, 999, 999];
    let cache_k = randn(num_blocks * ps * hkv * d, 180);
    let cache_v = randn(num_blocks * ps * hkv * d, 181);
    let q = randn(9 * hq * d, 182);
    // The same keys packed per sequence, for the varlen call.
    let mut cu_k = vec![0u32];
    let (mut kp, mut vp) = (Vec::new(), Vec::new());
    for (b, &n) in used.iter().enumerate() {
        for j in 0..n as usize {
            let page = table[b * max_blocks + j / ps] as usize;
            let at = (page * ps + j % ps) * hkv * d;
            kp.extend_from_slice(&cache_k[at..at + hkv * d]);
            vp.extend_from_slice(&cache_v[at..at + hkv * d]);
        }
        cu_k.push(cu_k[b] + n);
    }
    let total_k = *cu_k.last().unwrap() as usize;
    let t = |v: &[f32], shape: &[usize]| Tensor::from_vec(v.to_vec(), shape, &dev);
    let (qt, kc, vc) = (
        t(&q, &[9, hq, d])?,
        t(&cache_k, &[num_blocks, ps, hkv, d])?,
        t(&cache_v, &[num_blocks, ps, hkv, d])?,
    );
    let (kt, vt) = (t(&kp, &[total_k, hkv, d])?, t(&vp, &[total_k, hkv, d])?);
    let tab = Tensor::new(&table, &dev)?.reshape((4, max_blocks))?;
    let (sq, sk, su) = (
        Tensor::new(&cu_q, &dev)?,
        Tensor::new(cu_k.as_slice(), &dev)?,
        Tensor::new(&used, &dev)?,
    );
    for (left, right) in [(None, None), (None, Some(0)), (Some(5), Some(2))] {
        let got = flash_attn_varlen_paged_windowed(
            &qt, &kc, &vc, &tab, &sq, &su, 5, 33, 0.3, left, right,
        )?;
        let want = flash_attn_varlen_windowed(&qt, &kt, &vt, &sq, &sk, 5, 33, 0.3, left, right)?;
        assert_eq!(got.dims(), &[9, hq, d]);
        let (g, w) = (values(&got)?, values(&want)?);
        assert!(
            g.iter().zip(&w).all(|(a, b)| (a - b).abs() <= 1e-6),
            "window {left:?},{right:?}"
        );
        // Rows 7..9 belong to the sequence with no keys: exactly zero.
        assert!(g[7 * hq * d..].iter().all(|&x| x == 0.0));
    }
    let err = |r: candle_core::Result<Tensor>| match r {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let mut bad = table;
    bad[1] = 9; // sequence 0 uses its second page
    let m = err(flash_attn_varlen_paged_windowed(
        &qt,
        &kc,
        &vc,
        &Tensor::new(&bad, &dev)?.reshape((4, max_blocks))?,
        &sq,
        &su,
        5,
        33,
        0.3,
        None,
        None,
    ));
    assert!(m.contains("outside the cache"), "{m}");
    let small = t(
        &cache_k[..num_blocks * 8 * hkv * d],
        &[num_blocks, 8, hkv, d],
    )?;
    let m = err(flash_attn_varlen_paged_windowed(
        &qt, &small, &small, &tab, &sq, &su, 5, 33, 0.3, None, None,
    ));
    assert!(m.contains("multiple of 16"), "{m}");
    let m = err(flash_attn_varlen_paged_windowed(
        &qt,
        &kc,
        &vc,
        &tab,
        &sq,
        &Tensor::new(&[20u32, 7, 49, 0], &dev)?,
        5,
        49,
        0.3,
        None,
        None,
    ));
    assert!(m.contains("pages"), "{m}");
    Ok(())
}

// ---- Backward ----
//
// Gradients through candle's autograd of our op against candle's autograd of its plain
// matmul–softmax–matmul attention in f64 on the same (rounded) inputs and the same output
// gradient. Both are then the exact gradient up to f64 error, so what remains is our single
// rounding of each gradient to the storage type: elementwise within one ulp of the storage
// type (twice the round-to-nearest bound), and within DESIGN §3's gradient rel L2 (2e-3
// fp16, 1e-2 bf16).

/// The loss `sum(out · w)` (so dO = w) and its gradients with respect to the variables.
fn loss_grads(out: &Tensor, w: &Tensor, vars: &[&candle_core::Var]) -> R<Vec<Vec<f64>>> {
    let loss = (out.to_dtype(DType::F64)? * w)?.sum_all()?;
    let grads = loss.backward()?;
    vars.iter()
        .map(|v| {
            let g = grads
                .get(v.as_tensor())
                .ok_or("a variable got no gradient")?;
            assert_eq!(g.dims(), v.as_tensor().dims(), "gradient shape");
            assert_eq!(g.dtype(), v.as_tensor().dtype(), "gradient dtype");
            values(g)
        })
        .collect()
}

/// Candle's plain attention on `(b, s, h, d)` (f64): KV heads repeated for GQA, scores,
/// mask (−∞), softmax, ·V. Every row must see a key.
fn plain_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, causal: Causal) -> R<Tensor> {
    let (b, sq, hq, d) = q.dims4()?;
    let (_, sk, hkv, _) = k.dims4()?;
    let repeat = |t: &Tensor| -> candle_core::Result<Tensor> {
        t.transpose(1, 2)?
            .unsqueeze(2)?
            .expand((b, hkv, hq / hkv, sk, d))?
            .reshape((b, hq, sk, d))
    };
    let qh = q.transpose(1, 2)?.contiguous()?;
    let scores = (qh.matmul(&repeat(k)?.t()?)? * scale)?;
    let mask: Vec<f64> = (0..sq)
        .flat_map(|i| {
            (0..sk).map(move |j| {
                if causal.is_visible(i, j, sq, sk) {
                    0.0
                } else {
                    f64::NEG_INFINITY
                }
            })
        })
        .collect();
    let scores = scores.broadcast_add(&Tensor::from_vec(mask, (sq, sk), &Device::Cpu)?)?;
    // Softmax is shift-invariant: the detached max changes no gradient.
    let max = scores.max_keepdim(3)?.detach();
    let e = scores.broadcast_sub(&max)?.exp()?;
    let p = e.broadcast_div(&e.sum_keepdim(3)?)?;
    Ok(p.matmul(&repeat(v)?)?.transpose(1, 2)?)
}

/// A seeded N(0, 1) tensor of `dims` rounded to `dt`.
fn randn_t(dims: &[usize], dt: DType, seed: u64) -> R<Tensor> {
    let n = dims.iter().product();
    Ok(Tensor::from_vec(randn(n, seed), dims, &Device::Cpu)?.to_dtype(dt)?)
}

/// Base storage of a `(b, s, h, d)` input in `layout`, and the view that makes it one.
fn base_dims(layout: Layout, (b, s, h, d): (usize, usize, usize, usize)) -> Vec<usize> {
    match layout {
        Layout::Contiguous => vec![b, s, h, d],
        Layout::Transposed => vec![b, h, s, d],
        Layout::Narrowed => vec![b, s + 3, h + 2, d],
    }
}

fn view(layout: Layout, t: &Tensor, s: usize, h: usize) -> candle_core::Result<Tensor> {
    match layout {
        Layout::Contiguous => Ok(t.clone()),
        Layout::Transposed => t.transpose(1, 2),
        Layout::Narrowed => t.narrow(1, 2, s)?.narrow(2, 1, h),
    }
}

/// Checks `got` (our gradient, rounded to `dt`) against `want` (the f64 plain gradient).
fn assert_grad_close(got: &[f64], want: &[f64], dt: DType, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    // One ulp of the storage type, relative; the absolute floor covers f16's subnormals.
    let (ulp, floor, rel_l2) = match dt {
        DType::F64 => (1e-12, 1e-13, 1e-12),
        DType::F32 => (2f64.powi(-23), 1e-30, 1e-6),
        DType::F16 => (2f64.powi(-10), 6e-8, 2e-3),
        _ => (2f64.powi(-7), 1e-30, 1e-2),
    };
    let (mut err2, mut ref2) = (0.0, 0.0);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.is_finite() && w.is_finite(),
            "{what}: element {i}: {g} vs {w}"
        );
        let e = (g - w).abs();
        assert!(
            e <= ulp * w.abs() + floor,
            "{what}: element {i}: got {g}, want {w} (|diff| {e:.3e})"
        );
        err2 += e * e;
        ref2 += w * w;
    }
    assert!(ref2 > 0.0, "{what}: the reference gradient is all zero");
    let rel = (err2 / ref2).sqrt();
    assert!(rel <= rel_l2, "{what}: rel L2 {rel:.3e} > {rel_l2:.0e}");
}

/// One gradient case: q, k, v of `dims` (b, hq, hkv, sq, sk, d) in `dt` and `layout`; our
/// op (`ours` on the `(b, s, h, d)` views, softmax scale `1/√d` in f32) against plain
/// attention with `causal`.
fn check_grads(
    dims: (usize, usize, usize, usize, usize, usize),
    dt: DType,
    layout: Layout,
    seed: u64,
    causal: Causal,
    ours: &dyn Fn(&Tensor, &Tensor, &Tensor) -> candle_core::Result<Tensor>,
    what: &str,
) -> R<()> {
    use candle_core::Var;
    let (b, hq, hkv, sq, sk, d) = dims;
    // The f32 scale our callers pass, widened: the plain side must use the same value.
    let scale = f64::from(1.0 / (d as f32).sqrt());
    let qb = randn_t(&base_dims(layout, (b, sq, hq, d)), dt, seed)?;
    let kb = randn_t(&base_dims(layout, (b, sk, hkv, d)), dt, seed + 1)?;
    let vb = randn_t(&base_dims(layout, (b, sk, hkv, d)), dt, seed + 2)?;
    // dO: random, representable in `dt` so both sides see the same values.
    let w = randn_t(&[b, sq, hq, d], dt, seed + 3)?.to_dtype(DType::F64)?;

    let vars = [&qb, &kb, &vb].map(|t| Var::from_tensor(t).unwrap());
    let (q, k, v) = (
        view(layout, vars[0].as_tensor(), sq, hq)?,
        view(layout, vars[1].as_tensor(), sk, hkv)?,
        view(layout, vars[2].as_tensor(), sk, hkv)?,
    );
    if !matches!(layout, Layout::Contiguous) {
        assert!(
            !q.is_contiguous(),
            "{what}: {layout:?} must be a strided view"
        );
    }
    let got = loss_grads(&ours(&q, &k, &v)?, &w, &[&vars[0], &vars[1], &vars[2]])?;

    let vars64 =
        [&qb, &kb, &vb].map(|t| Var::from_tensor(&t.to_dtype(DType::F64).unwrap()).unwrap());
    let (q, k, v) = (
        view(layout, vars64[0].as_tensor(), sq, hq)?,
        view(layout, vars64[1].as_tensor(), sk, hkv)?,
        view(layout, vars64[2].as_tensor(), sk, hkv)?,
    );
    let out = plain_attention(&q, &k, &v, scale, causal)?;
    let want = loss_grads(&out, &w, &[&vars64[0], &vars64[1], &vars64[2]])?;
    for (name, (g, wv)) in ["dQ", "dK", "dV"].iter().zip(got.iter().zip(&want)) {
        assert_grad_close(
            g,
            wv,
            dt,
            &format!("{what} {name} {dt:?} {layout:?} {dims:?} {causal:?}"),
        );
    }
    Ok(())
}

/// (b, hq, hkv, sq, sk, d): GQA 4:2 with Sq < Sk, MQA 3:1 with Sq > Sk, self-attention.
const GRAD_SHAPES: [(usize, usize, usize, usize, usize, usize); 3] =
    [(2, 4, 2, 5, 7, 16), (1, 3, 1, 6, 3, 8), (1, 2, 2, 9, 9, 32)];

#[test]
fn gradients_match_candle_autograd_of_plain_attention() -> R<()> {
    for (si, &dims) in GRAD_SHAPES.iter().enumerate() {
        let (sq, sk) = (dims.3, dims.4);
        for dt in [DType::F64, DType::F32, DType::F16, DType::BF16] {
            for layout in LAYOUTS {
                for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
                    if causal == Causal::BottomRight && sq > sk {
                        continue; // rows with no key: plain softmax is NaN there (next test)
                    }
                    let scale = 1.0 / (dims.5 as f32).sqrt();
                    let op = FlashAttn::new(scale).causal(causal);
                    check_grads(
                        dims,
                        dt,
                        layout,
                        1000 + 10 * si as u64,
                        causal,
                        &|q, k, v| op.forward(q, k, v),
                        "FlashAttn",
                    )?;
                }
            }
        }
    }
    Ok(())
}

#[test]
fn every_dense_entry_point_has_gradients() -> R<()> {
    let dims = (2, 4, 2, 5, 7, 16);
    let (sk, d) = (dims.4, dims.5);
    let scale = 1.0 / (d as f32).sqrt();
    let c = |causal: Causal,
             f: &dyn Fn(&Tensor, &Tensor, &Tensor) -> candle_core::Result<Tensor>,
             what: &str| {
        for dt in [DType::F32, DType::BF16] {
            check_grads(dims, dt, Layout::Transposed, 77, causal, f, what)?;
        }
        R::Ok(())
    };
    c(
        Causal::None,
        &|q, k, v| flash_attn(q, k, v, scale, false),
        "flash_attn",
    )?;
    c(
        Causal::BottomRight,
        &|q, k, v| flash_attn(q, k, v, scale, true),
        "flash_attn causal",
    )?;
    c(
        Causal::TopLeft,
        &|q, k, v| flash_attn_causal_top_left(q, k, v, scale),
        "flash_attn_causal_top_left",
    )?;
    c(
        Causal::BottomRight,
        &|q, k, v| Ok(flash_attn_with_lse(q, k, v, scale, true)?.0),
        "flash_attn_with_lse",
    )?;
    // (None, Some(0)) is the causal mask and a window wider than Sk is none: both have a
    // backward.
    c(
        Causal::BottomRight,
        &|q, k, v| flash_attn_windowed(q, k, v, scale, None, Some(0)),
        "flash_attn_windowed (None, Some(0))",
    )?;
    c(
        Causal::None,
        &|q, k, v| flash_attn_windowed(q, k, v, scale, Some(sk + 1), None),
        "flash_attn_windowed (Some(sk + 1), None)",
    )?;
    c(
        Causal::BottomRight,
        &|q, k, v| flash_attn_alibi_windowed_softcap(q, k, v, None, scale, None, Some(0), 0.0),
        "flash_attn_alibi_windowed_softcap without alibi and softcap",
    )?;
    // sdpa_bhsd on candle-nn's (b, h, s, d): through transposes on both sides.
    c(
        Causal::TopLeft,
        &|q, k, v| {
            let t = |x: &Tensor| x.transpose(1, 2);
            sdpa_bhsd(&t(q)?, &t(k)?, &t(v)?, scale, Causal::TopLeft)?.transpose(1, 2)
        },
        "sdpa_bhsd",
    )?;
    Ok(())
}

/// Bottom-right causal with Sq > Sk: the first Sq − Sk rows see no key, so their dQ is
/// exactly 0 and they add nothing to dK, dV; the other rows match plain attention on those
/// rows alone.
#[test]
fn rows_that_see_no_key_have_zero_gradients() -> R<()> {
    use candle_core::Var;
    let (b, hq, hkv, sq, sk, d) = (1, 4, 2, 7, 3, 8);
    let scale = 0.4;
    for dt in [DType::F32, DType::BF16] {
        let qv = Var::from_tensor(&randn_t(&[b, sq, hq, d], dt, 5)?)?;
        let kv = Var::from_tensor(&randn_t(&[b, sk, hkv, d], dt, 6)?)?;
        let vv = Var::from_tensor(&randn_t(&[b, sk, hkv, d], dt, 7)?)?;
        let w = randn_t(&[b, sq, hq, d], dt, 8)?.to_dtype(DType::F64)?;
        let out = flash_attn(qv.as_tensor(), kv.as_tensor(), vv.as_tensor(), scale, true)?;
        let got = loss_grads(&out, &w, &[&qv, &kv, &vv])?;
        let masked = (sq - sk) * hq * d;
        assert!(got[0][..masked].iter().all(|&x| x == 0.0), "masked dQ rows");

        let f64v = |v: &Var| Var::from_tensor(&v.as_tensor().to_dtype(DType::F64).unwrap());
        let (q64, k64, v64) = (f64v(&qv)?, f64v(&kv)?, f64v(&vv)?);
        let seen = q64.as_tensor().narrow(1, sq - sk, sk)?;
        let out = plain_attention(
            &seen,
            k64.as_tensor(),
            v64.as_tensor(),
            f64::from(scale),
            Causal::BottomRight,
        )?;
        let want = loss_grads(&out, &w.narrow(1, sq - sk, sk)?, &[&q64, &k64, &v64])?;
        for (i, name) in ["dQ", "dK", "dV"].iter().enumerate() {
            assert_grad_close(
                &got[i],
                &want[i],
                dt,
                &format!("{name} {dt:?} (masked rows)"),
            );
        }
    }
    Ok(())
}

/// Varlen gradients: each sequence's slice of the packed tensors against plain attention on
/// that sequence alone (a sequence with no query rows, one with rows but no keys, GQA,
/// causal and not; Sq ≤ Sk so that plain softmax sees a key in every row).
#[test]
fn varlen_gradients_match_plain_attention_per_sequence() -> R<()> {
    use candle_core::Var;
    let (hq, hkv, d) = (4, 2, 8);
    let lens = [(3usize, 5usize), (0, 2), (2, 0), (4, 4), (2, 5)];
    let cu = |f: fn(&(usize, usize)) -> usize| -> Vec<u32> {
        std::iter::once(0)
            .chain(lens.iter().scan(0, |acc, l| {
                *acc += f(l) as u32;
                Some(*acc)
            }))
            .collect()
    };
    let (cu_q, cu_k) = (cu(|l| l.0), cu(|l| l.1));
    let (tq, tk) = (cu_q[lens.len()] as usize, cu_k[lens.len()] as usize);
    let scale = 0.35;
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for causal in [false, true] {
            let qv = Var::from_tensor(&randn_t(&[tq, hq, d], dt, 40)?)?;
            let kv = Var::from_tensor(&randn_t(&[tk, hkv, d], dt, 41)?)?;
            let vv = Var::from_tensor(&randn_t(&[tk, hkv, d], dt, 42)?)?;
            let w = randn_t(&[tq, hq, d], dt, 43)?.to_dtype(DType::F64)?;
            let dev = Device::Cpu;
            let out = flash_attn_varlen(
                qv.as_tensor(),
                kv.as_tensor(),
                vv.as_tensor(),
                &Tensor::new(cu_q.as_slice(), &dev)?,
                &Tensor::new(cu_k.as_slice(), &dev)?,
                5,
                5,
                scale,
                causal,
            )?;
            let got = loss_grads(&out, &w, &[&qv, &kv, &vv])?;

            let f64v = |v: &Var| Var::from_tensor(&v.as_tensor().to_dtype(DType::F64).unwrap());
            let (q64, k64, v64) = (f64v(&qv)?, f64v(&kv)?, f64v(&vv)?);
            let mut parts = Vec::new();
            for (bi, &(lq, lk)) in lens.iter().enumerate() {
                if lq == 0 {
                    continue;
                }
                if lk == 0 {
                    parts.push(Tensor::zeros((lq, hq, d), DType::F64, &dev)?);
                    continue;
                }
                let rows = |t: &Var, start: u32, len: usize| {
                    t.as_tensor().narrow(0, start as usize, len)?.unsqueeze(0)
                };
                let mode = if causal {
                    Causal::BottomRight
                } else {
                    Causal::None
                };
                let o = plain_attention(
                    &rows(&q64, cu_q[bi], lq)?,
                    &rows(&k64, cu_k[bi], lk)?,
                    &rows(&v64, cu_k[bi], lk)?,
                    f64::from(scale),
                    mode,
                )?;
                parts.push(o.squeeze(0)?);
            }
            let want = loss_grads(&Tensor::cat(&parts, 0)?, &w, &[&q64, &k64, &v64])?;
            for (i, name) in ["dQ", "dK", "dV"].iter().enumerate() {
                assert_grad_close(
                    &got[i],
                    &want[i],
                    dt,
                    &format!("varlen {name} {dt:?} causal={causal}"),
                );
            }
            // The keyless sequence's query rows (rows 3..5) get exactly zero.
            assert!(got[0][3 * hq * d..5 * hq * d].iter().all(|&x| x == 0.0));
        }
    }
    Ok(())
}

/// What no backward implements is a candle error naming it; the forward still runs.
#[test]
fn unsupported_backward_features_are_named_errors() -> R<()> {
    use candle_core::Var;
    let dev = Device::Cpu;
    let expect = |out: candle_core::Result<Tensor>, needle: &str| -> R<()> {
        let m = err_msg(out?.sum_all()?.backward());
        assert!(m.contains(BACKWARD_UNSUPPORTED), "`{m}` lacks the marker");
        assert!(m.contains(needle), "`{m}` lacks `{needle}`");
        Ok(())
    };
    // The paged op (a decode-time op) has no backward on any device.
    let vq = Var::from_tensor(&randn_t(&[5, 4, 8], DType::F32, 62)?)?;
    let u = |x: &[u32]| Tensor::new(x, &dev).unwrap();
    let cache = randn_t(&[2, 16, 2, 8], DType::F32, 64)?;
    let paged = flash_attn_varlen_paged_windowed(
        vq.as_tensor(),
        &cache,
        &cache,
        &Tensor::new(&[[0u32], [1]], &dev)?,
        &u(&[0, 2, 5]),
        &u(&[10, 16]),
        3,
        16,
        0.3,
        None,
        Some(0),
    );
    expect(paged, "paged KV cache")?;
    Ok(())
}

/// The CPU backward with the serving features (window, softcap, ALiBi, all at once, varlen
/// with a window) against central finite differences of the op's own forward, in f64:
/// candle's plain attention has no softcap or window to compare with.
#[test]
fn feature_gradients_match_finite_differences_on_cpu() -> R<()> {
    use candle_core::Var;
    let dev = Device::Cpu;
    let slopes = Tensor::new(&[0.5f32, 0.25, 0.125, 0.0625], &dev)?;
    type Op<'a> = Box<dyn Fn(&Tensor, &Tensor, &Tensor) -> candle_core::Result<Tensor> + 'a>;
    let ops: Vec<(&str, Op)> = vec![
        (
            "window",
            Box::new(|q, k, v| flash_attn_windowed(q, k, v, 0.4, Some(2), Some(1))),
        ),
        (
            "softcap",
            Box::new(|q, k, v| {
                flash_attn_alibi_windowed_softcap(q, k, v, None, 0.4, None, None, 1.5)
            }),
        ),
        (
            "alibi",
            Box::new(|q, k, v| flash_attn_alibi(q, k, v, &slopes, 0.4, true)),
        ),
        (
            "all",
            Box::new(|q, k, v| {
                flash_attn_alibi_windowed_softcap(
                    q,
                    k,
                    v,
                    Some(&slopes),
                    0.4,
                    Some(3),
                    Some(0),
                    2.0,
                )
            }),
        ),
    ];
    for (seed, (name, op)) in ops.iter().enumerate() {
        let s = 100 + 10 * seed as u64;
        let q = randn_t(&[1, 5, 4, 8], DType::F64, s)?;
        let k = randn_t(&[1, 7, 2, 8], DType::F64, s + 1)?;
        let v = randn_t(&[1, 7, 2, 8], DType::F64, s + 2)?;
        let w = randn_t(&[1, 5, 4, 8], DType::F64, s + 3)?;
        let (qv, kv, vv) = (
            Var::from_tensor(&q)?,
            Var::from_tensor(&k)?,
            Var::from_tensor(&v)?,
        );
        let loss = |q: &Tensor, k: &Tensor, v: &Tensor| -> R<f64> {
            Ok((op(q, k, v)? * &w)?.sum_all()?.to_scalar::<f64>()?)
        };
        let grads = (op(qv.as_tensor(), kv.as_tensor(), vv.as_tensor())? * &w)?
            .sum_all()?
            .backward()?;
        for (which, var) in [("q", &qv), ("k", &kv), ("v", &vv)] {
            let g = grads
                .get(var)
                .ok_or("no gradient")?
                .flatten_all()?
                .to_vec1::<f64>()?;
            let x = var.as_tensor().flatten_all()?.to_vec1::<f64>()?;
            let dims = var.as_tensor().dims().to_vec();
            let mut worst = 0f64;
            for i in (0..x.len()).step_by(3) {
                let h = 1e-5;
                let at = |delta: f64| -> R<Tensor> {
                    let mut y = x.clone();
                    y[i] += delta;
                    Ok(Tensor::from_vec(y, dims.as_slice(), &dev)?)
                };
                let (plus, minus) = match which {
                    "q" => (loss(&at(h)?, &k, &v)?, loss(&at(-h)?, &k, &v)?),
                    "k" => (loss(&q, &at(h)?, &v)?, loss(&q, &at(-h)?, &v)?),
                    _ => (loss(&q, &k, &at(h)?)?, loss(&q, &k, &at(-h)?)?),
                };
                let fd = (plus - minus) / (2.0 * h);
                worst = worst.max((fd - g[i]).abs() / (1.0 + fd.abs()));
            }
            assert!(
                worst < 1e-6,
                "{name} d{which}: finite differences differ by {worst:e}"
            );
        }
    }
    Ok(())
}

/// Random E4M3 codes `(b, s, h, d)` as a strided view (`(b, h, s, d)` storage transposed),
/// from normal values times `spread` (so some codes are subnormal or saturate).
fn e4m3_codes(b: usize, s: usize, h: usize, d: usize, spread: f32, seed: u64) -> R<Tensor> {
    let x: Vec<f32> = randn(b * h * s * d, seed)
        .iter()
        .map(|v| v * spread)
        .collect();
    Ok(Tensor::from_vec(x, (b, h, s, d), &Device::Cpu)?
        .to_dtype(DType::F8E4M3)?
        .transpose(1, 2)?)
}

/// `codes · scale` in f64, the scale of each element's KV head (dim 2 of `(.., .., h, d)`),
/// contiguous. Decoded from the bits with attn-quant (float8 0.7's `to_f64`, which candle's
/// `to_dtype` uses, does not return on some codes).
fn dequantized(codes: &Tensor, scales: &[f32]) -> R<Tensor> {
    let (h, d) = (codes.dims()[2], codes.dims()[3]);
    let bits = codes.flatten_all()?.to_vec1::<float8::F8E4M3>()?;
    let table = attn_quant::Fp8Format::E4M3.decode_table();
    let x: Vec<f64> = bits
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let scale = scales[if scales.len() == 1 { 0 } else { (i / d) % h }];
            f64::from(table[usize::from(c.to_bits())]) * f64::from(scale)
        })
        .collect();
    Ok(Tensor::from_vec(x, codes.dims(), &Device::Cpu)?)
}

#[test]
fn kv_fp8_equals_flash_attn_on_the_dequantized_cache() -> R<()> {
    let dev = Device::Cpu;
    let (b, sq, sk, hq, hkv, d) = (2, 5, 23, 4, 2, 16);
    for (i, dt) in DTYPES.into_iter().enumerate() {
        let (q, _) = tensor((b, sq, hq, d), dt, Layout::Narrowed, 300 + i as u64)?;
        let k = e4m3_codes(b, sk, hkv, d, 40.0, 310 + i as u64)?;
        let v = e4m3_codes(b, sk, hkv, d, 3.0, 320 + i as u64)?;
        for (ks, vs) in [
            (vec![0.05f32, 0.02], vec![0.5f32, 0.25]),
            (vec![0.03], vec![0.7]),
        ] {
            let (kt, vt) = (
                Tensor::new(ks.as_slice(), &dev)?,
                Tensor::new(vs.as_slice(), &dev)?,
            );
            let (kd, vd) = (dequantized(&k, &ks)?, dequantized(&v, &vs)?);
            for causal in [false, true] {
                let got = flash_attn_kv_fp8(&q, &k, &v, &kt, &vt, 0.3, causal)?;
                assert_eq!(got.dtype(), dt);
                let want =
                    flash_attn(&q.to_dtype(DType::F64)?, &kd, &vd, 0.3, causal)?.to_dtype(dt)?;
                // The same f64 reference on the same f64 values: bitwise equal.
                assert_eq!(
                    values(&got)?,
                    values(&want)?,
                    "{dt:?}, {} scales, causal {causal}",
                    ks.len()
                );
            }
            // The builder composes with the other features (window, softcap) and the LSE.
            let op = FlashAttn::new(0.3)
                .window(Some(4), Some(1))
                .softcap(5.0)
                .kv_fp8_scales(&kt, &vt)?;
            let (got, lse) = op.forward_with_lse(&q, &k, &v)?;
            let plain = FlashAttn::new(0.3).window(Some(4), Some(1)).softcap(5.0);
            let (want, want_lse) = plain.forward_with_lse(&q.to_dtype(DType::F64)?, &kd, &vd)?;
            assert_eq!(values(&got)?, values(&want.to_dtype(dt)?)?);
            assert_eq!(values(&lse)?, values(&want_lse)?);
        }
    }
    Ok(())
}

#[test]
fn paged_kv_fp8_equals_the_paged_op_on_the_dequantized_cache() -> R<()> {
    let dev = Device::Cpu;
    let (hq, hkv, d, ps, num_blocks) = (4, 2, 16, 16, 6);
    let table: [u32; 6] = [4, 0, 999, 2, 5, 1];
    let (cu_q, used) = ([0u32, 1, 4], [20u32, 41]);
    // (num_blocks, page_size, hkv, d) codes: the (b, s, h, d) helper with b = pages.
    let kc = e4m3_codes(num_blocks, ps, hkv, d, 30.0, 330)?;
    let vc = e4m3_codes(num_blocks, ps, hkv, d, 2.0, 331)?;
    let (ks, vs) = (vec![0.04f32, 0.06], vec![0.3f32, 0.9]);
    let (kt, vt) = (
        Tensor::new(ks.as_slice(), &dev)?,
        Tensor::new(vs.as_slice(), &dev)?,
    );
    let (kd, vd) = (dequantized(&kc, &ks)?, dequantized(&vc, &vs)?);
    let tab = Tensor::new(&table, &dev)?.reshape((2, 3))?;
    let (sq, su) = (Tensor::new(&cu_q, &dev)?, Tensor::new(&used, &dev)?);
    for dt in [DType::F16, DType::BF16] {
        let q = Tensor::from_vec(randn(4 * hq * d, 332), (4, hq, d), &dev)?.to_dtype(dt)?;
        for (left, right) in [(None, None), (None, Some(0)), (Some(7), Some(0))] {
            let got = flash_attn_varlen_paged_kv_fp8(
                &q, &kc, &vc, &kt, &vt, &tab, &sq, &su, 3, 41, 0.25, left, right,
            )?;
            let want = flash_attn_varlen_paged_windowed(
                &q.to_dtype(DType::F64)?,
                &kd,
                &vd,
                &tab,
                &sq,
                &su,
                3,
                41,
                0.25,
                left,
                right,
            )?
            .to_dtype(dt)?;
            assert_eq!(
                values(&got)?,
                values(&want)?,
                "{dt:?} window {left:?},{right:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn kv_fp8_misuse_is_a_named_error() -> R<()> {
    let dev = Device::Cpu;
    let (q, _) = tensor((1, 3, 4, 16), DType::F16, Layout::Contiguous, 340)?;
    let k = e4m3_codes(1, 7, 2, 16, 10.0, 341)?;
    let v = e4m3_codes(1, 7, 2, 16, 1.0, 342)?;
    let two = Tensor::new(&[0.1f32, 0.2], &dev)?;
    // Codes without scales, scales without codes, one of K/V as codes.
    assert!(err_msg(flash_attn(&q, &k, &v, 0.3, false)).contains("no scales"));
    let kf = k.to_dtype(DType::F16)?;
    let vf = v.to_dtype(DType::F16)?;
    assert!(
        err_msg(flash_attn_kv_fp8(&q, &kf, &vf, &two, &two, 0.3, false))
            .contains("scales go with F8E4M3")
    );
    assert!(
        err_msg(flash_attn_kv_fp8(&q, &k, &vf, &two, &two, 0.3, false)).contains("both as F8E4M3")
    );
    // Scale lengths, dtypes and ranks.
    let three = Tensor::new(&[0.1f32, 0.2, 0.3], &dev)?;
    assert!(
        err_msg(flash_attn_kv_fp8(&q, &k, &v, &three, &three, 0.3, false))
            .contains("one per KV head (2)")
    );
    assert!(err_msg(flash_attn_kv_fp8(
        &q,
        &k,
        &v,
        &two,
        &Tensor::new(&[0.1f32], &dev)?,
        0.3,
        false
    ))
    .contains("same length"));
    assert!(err_msg(flash_attn_kv_fp8(
        &q,
        &k,
        &v,
        &two.to_dtype(DType::F16)?,
        &two,
        0.3,
        false
    ))
    .contains("must be an f32 tensor"));
    // Q as codes too.
    let q8 = q.to_dtype(DType::F8E4M3)?;
    assert!(
        err_msg(flash_attn_kv_fp8(&q8, &k, &v, &two, &two, 0.3, false))
            .contains("takes q in f32, f16 or bf16")
    );
    // No backward through the E4M3 cache.
    let qv = candle_core::Var::from_tensor(&q.to_dtype(DType::F32)?)?;
    let out = flash_attn_kv_fp8(qv.as_tensor(), &k, &v, &two, &two, 0.3, false)?;
    assert!(err_msg(out.sum_all()?.backward()).contains(BACKWARD_UNSUPPORTED));
    Ok(())
}

/// `codes · scale[b, h]` in f64 for `(b, s, h, d)` codes and `(b, h)` scales.
fn dequantized_per_batch_head(codes: &Tensor, scales: &[f32]) -> R<Tensor> {
    let (b, s, h, d) = codes.dims4()?;
    let per_head: Vec<Tensor> = (0..b)
        .map(|bi| {
            let t = codes.narrow(0, bi, 1)?;
            dequantized(&t, &scales[bi * h..(bi + 1) * h])
        })
        .collect::<R<_>>()?;
    let out = Tensor::cat(&per_head, 0)?;
    assert_eq!(out.dims(), &[b, s, h, d]);
    Ok(out)
}

#[test]
fn all_e4m3_equals_flash_attn_on_the_decoded_inputs() -> R<()> {
    let dev = Device::Cpu;
    let (b, sq, sk, hq, hkv, d) = (2, 6, 19, 4, 2, 16);
    let q = e4m3_codes(b, sq, hq, d, 20.0, 350)?;
    let k = e4m3_codes(b, sk, hkv, d, 20.0, 351)?;
    let v = e4m3_codes(b, sk, hkv, d, 3.0, 352)?;
    let scales =
        |n: usize, base: f32| -> Vec<f32> { (0..n).map(|i| base * (1.0 + i as f32)).collect() };
    let (qs, ks, vs) = (
        scales(b * hq, 0.01),
        scales(b * hkv, 0.02),
        scales(b * hkv, 0.3),
    );
    let t = |x: &[f32], h: usize| Tensor::from_vec(x.to_vec(), (b, h), &dev);
    let (qt, kt, vt) = (t(&qs, hq)?, t(&ks, hkv)?, t(&vs, hkv)?);
    let (qd, kd, vd) = (
        dequantized_per_batch_head(&q, &qs)?,
        dequantized_per_batch_head(&k, &ks)?,
        dequantized_per_batch_head(&v, &vs)?,
    );
    for dt in DTYPES {
        for causal in [false, true] {
            let got = flash_attn_fp8(&q, &k, &v, &qt, &kt, &vt, 0.25, causal, dt)?;
            assert_eq!(got.dtype(), dt);
            let want = flash_attn(&qd, &kd, &vd, 0.25, causal)?.to_dtype(dt)?;
            assert_eq!(values(&got)?, values(&want)?, "{dt:?} causal {causal}");
        }
    }
    // Misuse: f16 q, scales of the wrong shape, an output dtype the op does not write, and
    // no backward.
    let qh = Tensor::from_vec(randn(b * sq * hq * d, 353), (b, sq, hq, d), &dev)?
        .to_dtype(DType::F16)?;
    assert!(err_msg(flash_attn_fp8(
        &qh,
        &k,
        &v,
        &qt,
        &kt,
        &vt,
        0.25,
        false,
        DType::F16
    ))
    .contains("takes q, k and v as F8E4M3"));
    assert!(err_msg(flash_attn_fp8(
        &q,
        &k,
        &v,
        &kt,
        &kt,
        &vt,
        0.25,
        false,
        DType::F16
    ))
    .contains("q_scale must be f32 (batch = 2, heads = 4)"));
    assert!(err_msg(flash_attn_fp8(
        &q,
        &k,
        &v,
        &qt,
        &kt,
        &vt,
        0.25,
        false,
        DType::U8
    ))
    .contains("writes f16 or bf16"));
    let qv = candle_core::Var::from_tensor(&q)?;
    let out = flash_attn_fp8(
        qv.as_tensor(),
        &k,
        &v,
        &qt,
        &kt,
        &vt,
        0.25,
        false,
        DType::F32,
    )?;
    assert!(err_msg(out.sum_all()?.backward()).contains(BACKWARD_UNSUPPORTED));
    Ok(())
}
