//! The CUDA path (`--features cuda`) on a GPU: every public function against the CPU path
//! (attn-ref's f64 reference) on the same values, for the layouts candle gives (contiguous
//! `(b, s, h, d)`, `(b, h, s, d)` viewed through `transpose(1, 2)`, and a `narrow` of a larger
//! tensor), f16 and bf16, causal both ways, GQA; no copies (the kernel is handed the inputs'
//! own device addresses and writes a fresh output); candle's per-thread default stream and a
//! non-default stream (`Device::new_cuda_with_stream`); and the clear errors for what the
//! kernels do not implement.
//!
//! Ignored by default (they need a CUDA GPU):
//! `cargo test -p attn-candle --features cuda --release --test gpu -- --ignored`.
//! Head dim 128 only, so a build filtered with `ATTN_HEAD_DIMS=128` runs them all.
#![cfg(feature = "cuda")]

use attn_candle::*;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::DevicePtr;
use candle_core::{DType, Device, Storage, Tensor};
use half::{bf16, f16};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

type R<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const D: usize = 128;
const DTYPES: [DType; 2] = [DType::F16, DType::BF16];

fn gpu() -> Device {
    Device::new_cuda(0).expect("a CUDA device (these tests are #[ignore]d without one)")
}

fn randn(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| StandardNormal.sample(&mut rng)).collect()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// A contiguous `(b, s, h, d)` tensor.
    Contiguous,
    /// `(b, h, s, d)` storage viewed as `(b, s, h, d)` through `transpose(1, 2)`.
    Transposed,
    /// A narrow of a larger `(b, s + 3, h + 2, d)` tensor on the seq and head dims (a start
    /// offset and strides that are not the tensor's own).
    Narrowed,
}
const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Transposed, Layout::Narrowed];

/// A `(b, s, h, d)` tensor of dtype `dt` in `layout` on `dev`.
fn tensor(
    dims: (usize, usize, usize, usize),
    dt: DType,
    layout: Layout,
    seed: u64,
    dev: &Device,
) -> R<Tensor> {
    let (b, s, h, d) = dims;
    let t = match layout {
        Layout::Contiguous => {
            Tensor::from_vec(randn(b * s * h * d, seed), (b, s, h, d), dev)?.to_dtype(dt)?
        }
        Layout::Transposed => Tensor::from_vec(randn(b * h * s * d, seed), (b, h, s, d), dev)?
            .to_dtype(dt)?
            .transpose(1, 2)?,
        Layout::Narrowed => Tensor::from_vec(
            randn(b * (s + 3) * (h + 2) * d, seed),
            (b, s + 3, h + 2, d),
            dev,
        )?
        .to_dtype(dt)?
        .narrow(1, 2, s)?
        .narrow(2, 1, h)?,
    };
    assert_eq!(t.dims(), &[b, s, h, d]);
    if layout != Layout::Contiguous && s > 1 && h > 1 {
        assert!(!t.is_contiguous(), "{layout:?} must be a strided view");
    }
    Ok(t)
}

fn values(t: &Tensor) -> R<Vec<f32>> {
    Ok(t.to_device(&Device::Cpu)?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?)
}

/// Max |gpu − cpu| over the elements, and the check against `atol + rtol·|cpu|`.
fn assert_close(gpu: &Tensor, cpu: &Tensor, dt: DType, what: &str) -> R<()> {
    assert_eq!(gpu.dims(), cpu.dims(), "{what}: shape");
    assert_eq!(gpu.dtype(), cpu.dtype(), "{what}: dtype");
    assert!(
        gpu.device().is_cuda(),
        "{what}: the CUDA result is on the GPU"
    );
    let (g, c) = (values(gpu)?, values(cpu)?);
    // The CPU path is the f64 reference rounded once; the kernel rounds P to the storage
    // type before P·V and accumulates in f32.
    let (atol, rtol) = match dt {
        DType::BF16 => (2e-2, 2e-2),
        DType::F16 => (4e-3, 4e-3),
        _ => (1e-4, 1e-4),
    };
    let mut worst = (0.0f32, 0usize);
    for (i, (&x, &y)) in g.iter().zip(&c).enumerate() {
        assert!(x.is_finite(), "{what}: element {i} is {x}");
        let e = (x - y).abs();
        if e > atol + rtol * y.abs() && e > worst.0 {
            worst = (e, i);
        }
    }
    assert!(
        worst.0 == 0.0,
        "{what}: element {} differs by {} (gpu {}, cpu {})",
        worst.1,
        worst.0,
        g[worst.1],
        c[worst.1]
    );
    Ok(())
}

fn to_cpu(t: &Tensor) -> R<Tensor> {
    Ok(t.to_device(&Device::Cpu)?)
}

/// (b, sq, sk, hq, hkv): self-attention, GQA with Sq < Sk, and Sq > Sk (rows that see no key
/// under bottom-right causal).
const SHAPES: [(usize, usize, usize, usize, usize); 3] =
    [(2, 96, 96, 4, 4), (2, 70, 200, 8, 2), (1, 150, 40, 6, 1)];

#[test]
#[ignore = "needs a CUDA GPU"]
fn flash_attn_matches_the_cpu_path_for_every_layout_dtype_and_mask() -> R<()> {
    let dev = gpu();
    let scale = 1.0 / (D as f32).sqrt();
    for (si, &(b, sq, sk, hq, hkv)) in SHAPES.iter().enumerate() {
        for dt in DTYPES {
            for layout in LAYOUTS {
                let seed = 100 * si as u64;
                let q = tensor((b, sq, hq, D), dt, layout, seed, &dev)?;
                let k = tensor((b, sk, hkv, D), dt, layout, seed + 1, &dev)?;
                let v = tensor((b, sk, hkv, D), dt, layout, seed + 2, &dev)?;
                let (qc, kc, vc) = (to_cpu(&q)?, to_cpu(&k)?, to_cpu(&v)?);
                let what =
                    |f: &str| format!("{f} {dt:?} {layout:?} b{b} sq{sq} sk{sk} hq{hq} hkv{hkv}");
                for causal in [false, true] {
                    assert_close(
                        &flash_attn(&q, &k, &v, scale, causal)?,
                        &flash_attn(&qc, &kc, &vc, scale, causal)?,
                        dt,
                        &what(&format!("flash_attn causal={causal}")),
                    )?;
                }
                assert_close(
                    &flash_attn_causal_top_left(&q, &k, &v, scale)?,
                    &flash_attn_causal_top_left(&qc, &kc, &vc, scale)?,
                    dt,
                    &what("flash_attn_causal_top_left"),
                )?;
                // (None, Some(0)) is the causal mask; windows wider than Sk are unbounded.
                for (l, r) in [(None, Some(0)), (Some(sk + 5), None), (None, Some(sk + 1))] {
                    assert_close(
                        &flash_attn_windowed(&q, &k, &v, scale, l, r)?,
                        &flash_attn_windowed(&qc, &kc, &vc, scale, l, r)?,
                        dt,
                        &what(&format!("flash_attn_windowed {l:?} {r:?}")),
                    )?;
                }
                assert_close(
                    &flash_attn_alibi_windowed_softcap(&q, &k, &v, None, scale, None, None, 0.0)?,
                    &flash_attn(&qc, &kc, &vc, scale, false)?,
                    dt,
                    &what("flash_attn_alibi_windowed_softcap without alibi/window/softcap"),
                )?;
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn with_lse_matches_the_cpu_path_and_stays_on_the_gpu() -> R<()> {
    let dev = gpu();
    let scale = 0.09;
    for &(b, sq, sk, hq, hkv) in &SHAPES {
        for dt in DTYPES {
            for causal in [false, true] {
                let q = tensor((b, sq, hq, D), dt, Layout::Transposed, 7, &dev)?;
                let k = tensor((b, sk, hkv, D), dt, Layout::Contiguous, 8, &dev)?;
                let v = tensor((b, sk, hkv, D), dt, Layout::Narrowed, 9, &dev)?;
                let (out, lse) = flash_attn_with_lse(&q, &k, &v, scale, causal)?;
                let (out_c, lse_c) =
                    flash_attn_with_lse(&to_cpu(&q)?, &to_cpu(&k)?, &to_cpu(&v)?, scale, causal)?;
                let what = format!("with_lse {dt:?} causal={causal} sq{sq} sk{sk}");
                assert_close(&out, &out_c, dt, &what)?;
                assert!(lse.device().is_cuda(), "{what}: the LSE stays on the GPU");
                assert_eq!(lse.dims(), &[b, hq, sq]);
                assert_eq!(lse.dtype(), DType::F32);
                let (g, c) = (values(&lse)?, values(&lse_c)?);
                for (i, (&x, &y)) in g.iter().zip(&c).enumerate() {
                    if y == f32::NEG_INFINITY {
                        assert_eq!(x, y, "{what}: LSE {i} of a row with no key");
                    } else {
                        assert!(
                            (x - y).abs() <= 2e-3 * (1.0 + y.abs()),
                            "{what}: LSE {i}: {x} vs {y}"
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sdpa_bhsd_and_the_builder_match_the_cpu_path() -> R<()> {
    let dev = gpu();
    let (b, hq, hkv, sq, sk) = (2, 8, 4, 64, 100);
    for dt in DTYPES {
        let q = Tensor::from_vec(randn(b * hq * sq * D, 1), (b, hq, sq, D), &dev)?.to_dtype(dt)?;
        let k =
            Tensor::from_vec(randn(b * hkv * sk * D, 2), (b, hkv, sk, D), &dev)?.to_dtype(dt)?;
        let v =
            Tensor::from_vec(randn(b * hkv * sk * D, 3), (b, hkv, sk, D), &dev)?.to_dtype(dt)?;
        let (qc, kc, vc) = (to_cpu(&q)?, to_cpu(&k)?, to_cpu(&v)?);
        for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
            let out = sdpa_bhsd(&q, &k, &v, 0.1, causal)?;
            assert_eq!(out.dims(), &[b, hq, sq, D]);
            assert!(out.is_contiguous());
            assert_close(
                &out,
                &sdpa_bhsd(&qc, &kc, &vc, 0.1, causal)?,
                dt,
                &format!("sdpa_bhsd {dt:?} {causal:?}"),
            )?;
            // The op itself through candle's CustomOp3 entry.
            let op = FlashAttn::new(0.1).causal(causal);
            let (qs, ks, vs) = (q.transpose(1, 2)?, k.transpose(1, 2)?, v.transpose(1, 2)?);
            assert_close(
                &qs.apply_op3(&ks, &vs, op.clone())?,
                &op.forward(&to_cpu(&qs)?, &to_cpu(&ks)?, &to_cpu(&vs)?)?,
                dt,
                &format!("apply_op3 {dt:?} {causal:?}"),
            )?;
        }
    }
    Ok(())
}

/// The device address of a tensor's first element (its storage plus the start offset).
fn address(t: &Tensor) -> u64 {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(s) = &*storage else {
        panic!("not a CUDA tensor")
    };
    let stream = s.device().cuda_stream();
    let (base, elem) = match t.dtype() {
        DType::BF16 => (s.as_cuda_slice::<bf16>().unwrap().device_ptr(&stream).0, 2),
        DType::F16 => (s.as_cuda_slice::<f16>().unwrap().device_ptr(&stream).0, 2),
        DType::F32 => (s.as_cuda_slice::<f32>().unwrap().device_ptr(&stream).0, 4),
        DType::F8E4M3 => (
            s.as_cuda_slice::<float8::F8E4M3>()
                .unwrap()
                .device_ptr(&stream)
                .0,
            1,
        ),
        dt => panic!("unexpected dtype {dt:?}"),
    };
    base + (layout.start_offset() * elem) as u64
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn no_copies_inputs_are_passed_through_and_the_output_is_fresh() -> R<()> {
    let dev = gpu();
    let stream = dev.as_cuda_device()?.cuda_stream();
    for layout in LAYOUTS {
        let q = tensor((2, 33, 8, D), DType::BF16, layout, 1, &dev)?;
        let k = tensor((2, 47, 2, D), DType::BF16, layout, 2, &dev)?;
        let v = tensor((2, 47, 2, D), DType::BF16, layout, 3, &dev)?;
        let (out, lse) = flash_attn_with_lse(&q, &k, &v, 0.1, true)?;
        let rec = last_cuda_launch().expect("a launch was recorded");
        assert_eq!(rec.q, address(&q), "{layout:?}: Q's own memory");
        assert_eq!(rec.k, address(&k), "{layout:?}: K's own memory");
        assert_eq!(rec.v, address(&v), "{layout:?}: V's own memory");
        assert_eq!(
            rec.o,
            address(&out),
            "{layout:?}: the output is what the kernel wrote"
        );
        assert_eq!(rec.lse, Some(address(&lse)), "{layout:?}: the LSE likewise");
        assert!(out.is_contiguous() && out.layout().start_offset() == 0);
        for input in [rec.q, rec.k, rec.v] {
            assert_ne!(rec.o, input, "{layout:?}: the output is a fresh buffer");
        }
        assert_eq!(
            rec.stream,
            stream.cu_stream() as usize,
            "{layout:?}: candle's stream"
        );
        assert!(!rec.kernel.is_empty());
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn correct_on_a_non_default_stream() -> R<()> {
    // Device::new_cuda uses the per-thread default stream; new_cuda_with_stream makes a new
    // stream. Work queued by candle before and after the op runs on that stream too.
    let dev = Device::new_cuda_with_stream(0)?;
    let stream = dev.as_cuda_device()?.cuda_stream();
    let (b, sq, sk, hq, hkv) = (2, 200, 300, 8, 2);
    for dt in DTYPES {
        let q = (tensor((b, sq, hq, D), dt, Layout::Transposed, 11, &dev)? * 2.0)?;
        let k = tensor((b, sk, hkv, D), dt, Layout::Contiguous, 12, &dev)?;
        let v = tensor((b, sk, hkv, D), dt, Layout::Narrowed, 13, &dev)?;
        let out = (flash_attn(&q, &k, &v, 0.05, true)? + 1.0)?;
        let rec = last_cuda_launch().expect("a launch was recorded");
        assert_eq!(
            rec.stream,
            stream.cu_stream() as usize,
            "launched on the device's own stream"
        );
        let want = (flash_attn(&to_cpu(&q)?, &to_cpu(&k)?, &to_cpu(&v)?, 0.05, true)? + 1.0)?;
        assert_close(&out, &want, dt, &format!("non-default stream {dt:?}"))?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn empty_and_keyless_problems_give_zeros_and_minus_infinity() -> R<()> {
    let dev = gpu();
    let q = Tensor::zeros((1, 5, 2, D), DType::BF16, &dev)?;
    // No keys: a zero-length narrow of a real buffer (no zero-byte allocation involved).
    let kv = Tensor::zeros((1, 4, 2, D), DType::BF16, &dev)?.narrow(1, 0, 0)?;
    let (out, lse) = flash_attn_with_lse(&q, &kv, &kv, 0.1, false)?;
    assert!(values(&out)?.iter().all(|&x| x == 0.0));
    assert!(values(&lse)?.iter().all(|&x| x == f32::NEG_INFINITY));
    Ok(())
}

fn err_msg<T: std::fmt::Debug>(r: candle_core::Result<T>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn what_the_kernels_lack_is_a_clear_error_and_what_they_have_matches_the_cpu() -> R<()> {
    let dev = gpu();
    let q = tensor((1, 16, 4, D), DType::BF16, Layout::Contiguous, 1, &dev)?;
    let k = tensor((1, 16, 2, D), DType::BF16, Layout::Contiguous, 2, &dev)?;
    // Windows, softcap and ALiBi were refusals until the kernels ran them; now each matches
    // the CPU path.
    let (qc, kc) = (to_cpu(&q)?, to_cpu(&k)?);
    let g = flash_attn_windowed(&q, &k, &k, 0.1, Some(4), Some(0))?;
    let c = flash_attn_windowed(&qc, &kc, &kc, 0.1, Some(4), Some(0))?;
    assert_close(&g, &c, DType::BF16, "windowed")?;
    let g = flash_attn_alibi_windowed_softcap(&q, &k, &k, None, 0.1, None, None, 30.0)?;
    let c = flash_attn_alibi_windowed_softcap(&qc, &kc, &kc, None, 0.1, None, None, 30.0)?;
    assert_close(&g, &c, DType::BF16, "softcap")?;
    let slopes = Tensor::new(&[0.5f32, 0.25, 0.125, 0.0625], &dev)?;
    let g = flash_attn_alibi(&q, &k, &k, &slopes, 0.1, true)?;
    let c = flash_attn_alibi(&qc, &kc, &kc, &to_cpu(&slopes)?, 0.1, true)?;
    assert_close(&g, &c, DType::BF16, "alibi")?;
    // Varlen: malformed prefix sums are refused before anything runs.
    let qv = q.squeeze(0)?;
    let kv = k.squeeze(0)?;
    let bad = Tensor::new(&[0u32, 9, 6], &dev)?;
    let m = err_msg(flash_attn_varlen(
        &qv, &kv, &kv, &bad, &bad, 10, 10, 0.1, true,
    ));
    assert!(m.contains("never decrease"), "{m}");
    // f32 on CUDA: the kernels store f16/bf16 only.
    let m = err_msg(flash_attn(
        &q.to_dtype(DType::F32)?,
        &k.to_dtype(DType::F32)?,
        &k.to_dtype(DType::F32)?,
        0.1,
        false,
    ));
    assert!(m.contains("unsupported dtype F32 on CUDA"), "{m}");
    // A head dim that is not contiguous.
    let qt = Tensor::zeros((1, 16, D, 4), DType::BF16, &dev)?.transpose(2, 3)?;
    let m = err_msg(flash_attn(&qt, &k, &k, 0.1, false));
    assert!(m.contains("head dim"), "{m}");
    Ok(())
}

/// Varlen on CUDA (`forward_sequences` over candle's buffers) against the CPU path: empty
/// sequences, a sequence with rows but no keys, lengths that are no multiple of a tile, GQA,
/// causal and not, f16 and bf16, contiguous and strided (a narrow of wider heads) inputs,
/// windows; and no copies of q, k, v.
#[test]
#[ignore = "needs a CUDA GPU"]
fn varlen_matches_the_cpu_path_without_copies() -> R<()> {
    let dev = gpu();
    let (hq, hkv) = (8, 2);
    let q_lens = [0usize, 1, 77, 130, 64, 5];
    let k_lens = [3usize, 1, 200, 130, 0, 90];
    let cu = |l: &[usize]| -> Vec<u32> {
        std::iter::once(0)
            .chain(l.iter().scan(0u32, |acc, &x| {
                *acc += x as u32;
                Some(*acc)
            }))
            .collect()
    };
    let (cq, ck) = (cu(&q_lens), cu(&k_lens));
    let (tq, tk) = (*cq.last().unwrap() as usize, *ck.last().unwrap() as usize);
    let (mq, mk) = (130, 200);
    for dt in [DType::F16, DType::BF16] {
        for narrowed in [false, true] {
            // Narrowed: the heads of a wider (total, h + 3, d) buffer (strided rows, an offset).
            let make = |t: usize, h: usize, seed: u64| -> R<Tensor> {
                let extra = if narrowed { 3 } else { 0 };
                let x =
                    Tensor::from_vec(randn(t * (h + extra) * D, seed), (t, h + extra, D), &dev)?
                        .to_dtype(dt)?;
                Ok(if narrowed { x.narrow(1, 1, h)? } else { x })
            };
            let (q, k, v) = (make(tq, hq, 1)?, make(tk, hkv, 2)?, make(tk, hkv, 3)?);
            let (cqd, ckd) = (
                Tensor::new(cq.as_slice(), &dev)?,
                Tensor::new(ck.as_slice(), &dev)?,
            );
            for causal in [false, true] {
                let what = format!("{dt:?} narrowed={narrowed} causal={causal}");
                let g = flash_attn_varlen(&q, &k, &v, &cqd, &ckd, mq, mk, 0.09, causal)?;
                let rec = last_cuda_launch().expect("a CUDA launch");
                assert_eq!(rec.q, address(&q), "{what}: q passed without a copy");
                assert_eq!(rec.k, address(&k), "{what}: k passed without a copy");
                assert!(rec.kernel.contains("_feat"), "{what}: ran {}", rec.kernel);
                let c = flash_attn_varlen(
                    &to_cpu(&q)?,
                    &to_cpu(&k)?,
                    &to_cpu(&v)?,
                    &to_cpu(&cqd)?,
                    &to_cpu(&ckd)?,
                    mq,
                    mk,
                    0.09,
                    causal,
                )?;
                assert_close(&g, &c, dt, &what)?;
            }
            let g = flash_attn_varlen_windowed(
                &q,
                &k,
                &v,
                &cqd,
                &ckd,
                mq,
                mk,
                0.09,
                Some(17),
                Some(3),
            )?;
            let c = flash_attn_varlen_windowed(
                &to_cpu(&q)?,
                &to_cpu(&k)?,
                &to_cpu(&v)?,
                &to_cpu(&cqd)?,
                &to_cpu(&ckd)?,
                mq,
                mk,
                0.09,
                Some(17),
                Some(3),
            )?;
            assert_close(&g, &c, dt, &format!("{dt:?} narrowed={narrowed} window"))?;
        }
    }
    Ok(())
}

/// The paged function on CUDA (packed queries, the caches read in place through the block
/// table) against the CPU path: shuffled pages, a sequence without query rows and one without
/// keys, decode-like single rows, causal and windowed, f16 and bf16.
#[test]
#[ignore = "needs a CUDA GPU"]
fn paged_matches_the_cpu_path() -> R<()> {
    let dev = gpu();
    let (hq, hkv, ps, num_blocks, max_blocks) = (8, 2, 16, 40, 8);
    let cu_q = [0u32, 1, 1, 38, 39, 40];
    let used = [100u32, 5, 128, 0, 17];
    let mut table: Vec<u32> = (0..(5 * max_blocks) as u32)
        .map(|i| (i * 7) % num_blocks as u32)
        .collect();
    table[1] = 39; // any page, anywhere in the cache
    for dt in [DType::F16, DType::BF16] {
        let q = Tensor::from_vec(randn(40 * hq * D, 41), (40, hq, D), &dev)?.to_dtype(dt)?;
        let kc = Tensor::from_vec(
            randn(num_blocks * ps * hkv * D, 42),
            (num_blocks, ps, hkv, D),
            &dev,
        )?
        .to_dtype(dt)?;
        let vc = Tensor::from_vec(
            randn(num_blocks * ps * hkv * D, 43),
            (num_blocks, ps, hkv, D),
            &dev,
        )?
        .to_dtype(dt)?;
        let tab = Tensor::new(table.as_slice(), &dev)?.reshape((5, max_blocks))?;
        let (sq, su) = (Tensor::new(&cu_q, &dev)?, Tensor::new(&used, &dev)?);
        for (left, right) in [(None, Some(0)), (None, None), (Some(31), Some(0))] {
            let what = format!("{dt:?} window {left:?},{right:?}");
            let g = flash_attn_varlen_paged_windowed(
                &q, &kc, &vc, &tab, &sq, &su, 37, 128, 0.09, left, right,
            )?;
            let rec = last_cuda_launch().expect("a CUDA launch");
            assert!(rec.kernel.ends_with("_paged"), "{what}: ran {}", rec.kernel);
            assert_eq!(rec.k, address(&kc), "{what}: the cache is read in place");
            let c = flash_attn_varlen_paged_windowed(
                &to_cpu(&q)?,
                &to_cpu(&kc)?,
                &to_cpu(&vc)?,
                &to_cpu(&tab)?,
                &to_cpu(&sq)?,
                &to_cpu(&su)?,
                37,
                128,
                0.09,
                left,
                right,
            )?;
            assert_close(&g, &c, dt, &what)?;
        }
    }
    Ok(())
}

/// A `(b, s, h, d)` view in `layout` of a fresh variable on `dev` (as [`tensor`], but the
/// variable is the base storage, so the op's backward receives the strided view), and the
/// same base copied to the CPU as a variable with the same view.
fn var_views(
    dims: (usize, usize, usize, usize),
    dt: DType,
    layout: Layout,
    seed: u64,
    dev: &Device,
) -> R<[(candle_core::Var, Tensor); 2]> {
    let (b, s, h, d) = dims;
    let base_dims = match layout {
        Layout::Contiguous => (b, s, h, d),
        Layout::Transposed => (b, h, s, d),
        Layout::Narrowed => (b, s + 3, h + 2, d),
    };
    let n = base_dims.0 * base_dims.1 * base_dims.2 * base_dims.3;
    let base = Tensor::from_vec(randn(n, seed), base_dims, dev)?.to_dtype(dt)?;
    let view = |t: &Tensor| -> candle_core::Result<Tensor> {
        match layout {
            Layout::Contiguous => Ok(t.clone()),
            Layout::Transposed => t.transpose(1, 2),
            Layout::Narrowed => t.narrow(1, 2, s)?.narrow(2, 1, h),
        }
    };
    let gpu = candle_core::Var::from_tensor(&base)?;
    let cpu = candle_core::Var::from_tensor(&to_cpu(&base)?)?;
    let (gv, cv) = (view(gpu.as_tensor())?, view(cpu.as_tensor())?);
    assert_eq!(gv.dims(), &[b, s, h, d]);
    Ok([(gpu, gv), (cpu, cv)])
}

/// A `(b, s, h, d)` tensor's values as `[B, H, S, D]` f32 on the host.
fn bhsd(t: &Tensor) -> R<Vec<f32>> {
    values(&t.transpose(1, 2)?.contiguous()?)
}

/// DESIGN §3 for one gradient: `max|out − ref| ≤ 2·max|emu − ref| + 1e-5`, with `emu` attn-ref's
/// emulation of the backward kernel's roundings, and rel L2 ≤ 2e-3 (f16) / 1e-2 (bf16).
fn check_gradient(out: &[f32], emu: &[f32], want: &[f64], dt: DType, what: &str) {
    assert_eq!(out.len(), want.len(), "{what}: length");
    let storage = if dt == DType::F16 {
        attn_oracle::Storage::F16
    } else {
        attn_oracle::Storage::Bf16
    };
    let verdict = attn_oracle::ToleranceRule::for_storage(storage).check_gradient(out, emu, want);
    assert!(verdict.pass, "{what}: {verdict}");
}

/// Gradients through candle's autograd on CUDA (attn-kernels' backward after a recomputed
/// forward) for every layout candle gives, f16 and bf16, GQA/MQA, the three masks (Sq > Sk
/// included: rows with no key get zero dQ): against attn-ref's f64 backward and its kernel
/// emulation (DESIGN §3), and against the CPU path's gradients of the same graph. The
/// backward reads q, k, v in place (the launch record names their own addresses) on
/// candle's stream.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gradients_match_the_cpu_path_and_the_tolerance_rule() -> R<()> {
    check_gradients(D, &SHAPES, &LAYOUTS)
}

/// D = 256: on sm_90 the backward runs the wgmma kernel's split-column CTAs (64 keys, each
/// warpgroup half the head dim), through candle's autograd like every other head dim.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gradients_at_head_dim_256_match_the_cpu_path() -> R<()> {
    check_gradients(
        256,
        &[(1, 150, 200, 4, 2)],
        &[Layout::Contiguous, Layout::Transposed],
    )
}

/// The body of the gradient tests: every shape, dtype, layout and causal mode at head dim `d`.
fn check_gradients(
    d: usize,
    shapes: &[(usize, usize, usize, usize, usize)],
    layouts: &[Layout],
) -> R<()> {
    use attn_ref::reference::backward::backward_emulated;
    use attn_ref::{AttnShape, Problem};
    let dev = gpu();
    let stream = dev.as_cuda_device()?.cuda_stream();
    let scale = 1.0 / (d as f32).sqrt();
    for (si, &(b, sq, sk, hq, hkv)) in shapes.iter().enumerate() {
        for dt in DTYPES {
            let storage = if dt == DType::F16 {
                attn_ref::Dtype::F16
            } else {
                attn_ref::Dtype::Bf16
            };
            for &layout in layouts {
                for causal in [Causal::None, Causal::TopLeft, Causal::BottomRight] {
                    let seed = 500 + 10 * si as u64;
                    let what = format!(
                        "{dt:?} {layout:?} {causal:?} b{b} sq{sq} sk{sk} hq{hq} hkv{hkv} d{d}"
                    );
                    let [(qg, q), (qc, qcv)] = var_views((b, sq, hq, d), dt, layout, seed, &dev)?;
                    let [(kg, k), (kc, kcv)] =
                        var_views((b, sk, hkv, d), dt, layout, seed + 1, &dev)?;
                    let [(vg, v), (vc, vcv)] =
                        var_views((b, sk, hkv, d), dt, layout, seed + 2, &dev)?;
                    // dO: random, representable in `dt`.
                    let w = tensor((b, sq, hq, d), dt, Layout::Contiguous, seed + 3, &dev)?;
                    let op = FlashAttn::new(scale).causal(causal);
                    let grads = |out: Tensor,
                                 w: &Tensor,
                                 vars: [&candle_core::Var; 3],
                                 views: [&Tensor; 3]|
                     -> R<Vec<Vec<f32>>> {
                        let loss =
                            (out.to_dtype(DType::F32)? * w.to_dtype(DType::F32)?)?.sum_all()?;
                        let g = loss.backward()?;
                        let mut out = Vec::new();
                        for (var, view) in vars.iter().zip(views) {
                            let gb = g.get(var.as_tensor()).ok_or("no gradient")?;
                            assert_eq!(gb.dtype(), dt);
                            // The gradient of the view's elements, through the same view.
                            let gv = match layout {
                                Layout::Contiguous => gb.clone(),
                                Layout::Transposed => gb.transpose(1, 2)?,
                                Layout::Narrowed => {
                                    gb.narrow(1, 2, view.dim(1)?)?.narrow(2, 1, view.dim(2)?)?
                                }
                            };
                            out.push(bhsd(&gv)?);
                        }
                        Ok(out)
                    };
                    let g_gpu = grads(op.forward(&q, &k, &v)?, &w, [&qg, &kg, &vg], [&q, &k, &v])?;
                    let rec = last_cuda_launch().expect("a launch was recorded");
                    assert!(
                        rec.kernel.starts_with("attn_bwd_"),
                        "{what}: {}",
                        rec.kernel
                    );
                    assert_eq!(
                        (rec.q, rec.k, rec.v),
                        (address(&q), address(&k), address(&v)),
                        "{what}: q, k, v read in place"
                    );
                    assert_eq!(
                        rec.stream,
                        stream.cu_stream() as usize,
                        "{what}: candle's stream"
                    );
                    let g_cpu = grads(
                        op.forward(&qcv, &kcv, &vcv)?,
                        &to_cpu(&w)?,
                        [&qc, &kc, &vc],
                        [&qcv, &kcv, &vcv],
                    )?;

                    let p = Problem::new(AttnShape::new(b, hq, hkv, sq, sk, d)?, causal)
                        .with_scale(f64::from(scale))?;
                    let (qh, kh, vh, doh) = (bhsd(&q)?, bhsd(&k)?, bhsd(&v)?, bhsd(&w)?);
                    let r = attn_ref::reference::backward(&p, &qh, &kh, &vh, &doh)?;
                    let emu = backward_emulated(&p, &qh, &kh, &vh, &doh, storage)?;
                    let [eq, ek, ev] = emu.rule_emulation(&r);
                    for (i, (name, e, want)) in
                        [("dQ", &eq, &r.dq), ("dK", &ek, &r.dk), ("dV", &ev, &r.dv)]
                            .into_iter()
                            .enumerate()
                    {
                        check_gradient(&g_gpu[i], e, want, dt, &format!("{name} {what}"));
                        // The CPU path is the reference rounded once: the same rule holds
                        // between the two devices' gradients.
                        let cpu: Vec<f64> = g_cpu[i].iter().map(|&x| f64::from(x)).collect();
                        check_gradient(
                            &g_gpu[i],
                            e,
                            &cpu,
                            dt,
                            &format!("{name} {what} vs the CPU path"),
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// `out.sum_all().backward()` hands the op a broadcast output gradient (all strides 0): it
/// is made contiguous for the kernel, and dQ meets DESIGN §3 against attn-ref (dO = 1) and
/// the CPU path's. Windows and softcap have gradients on CUDA too (the same rule against the
/// reference of the featured problem).
#[test]
#[ignore = "needs a CUDA GPU"]
fn broadcast_output_gradients_and_features() -> R<()> {
    use attn_ref::reference::backward::backward_emulated;
    use attn_ref::{AttnShape, Problem};
    let dev = gpu();
    let (b, sq, sk, hq, hkv) = (1, 64, 80, 4, 2);
    let scale = 0.09f32;
    for dt in DTYPES {
        let storage = if dt == DType::F16 {
            attn_ref::Dtype::F16
        } else {
            attn_ref::Dtype::Bf16
        };
        let [(qg, q), (qc, qcv)] = var_views((b, sq, hq, D), dt, Layout::Transposed, 31, &dev)?;
        let k = tensor((b, sk, hkv, D), dt, Layout::Contiguous, 32, &dev)?;
        let v = tensor((b, sk, hkv, D), dt, Layout::Contiguous, 33, &dev)?;
        let g = flash_attn(&q, &k, &v, scale, true)?.sum_all()?.backward()?;
        let gq = g
            .get(qg.as_tensor())
            .ok_or("no gradient")?
            .transpose(1, 2)?;
        let g = flash_attn(&qcv, &to_cpu(&k)?, &to_cpu(&v)?, scale, true)?
            .sum_all()?
            .backward()?;
        let gc = g
            .get(qc.as_tensor())
            .ok_or("no gradient")?
            .transpose(1, 2)?;
        let p = Problem::new(AttnShape::new(b, hq, hkv, sq, sk, D)?, Causal::BottomRight)
            .with_scale(f64::from(scale))?;
        let (qh, kh, vh) = (bhsd(&q)?, bhsd(&k)?, bhsd(&v)?);
        let ones = vec![1.0f32; qh.len()];
        let r = attn_ref::reference::backward(&p, &qh, &kh, &vh, &ones)?;
        let emu = backward_emulated(&p, &qh, &kh, &vh, &ones, storage)?;
        let [eq, ..] = emu.rule_emulation(&r);
        let what = format!("dQ of sum(out) {dt:?}");
        check_gradient(&bhsd(&gq)?, &eq, &r.dq, dt, &what);
        let cpu: Vec<f64> = bhsd(&gc)?.iter().map(|&x| f64::from(x)).collect();
        check_gradient(
            &bhsd(&gq)?,
            &eq,
            &cpu,
            dt,
            &format!("{what} vs the CPU path"),
        );

        // dQ of sum(out) with a window, and with a softcap, on CUDA against the reference
        // of the same featured problem (candle's window sizes are FlashAttention's).
        let windowed = flash_attn_windowed(&q, &k, &v, scale, Some(8), Some(0))?;
        let capped = flash_attn_alibi_windowed_softcap(&q, &k, &v, None, scale, None, None, 20.0)?;
        let base = Problem::new(AttnShape::new(b, hq, hkv, sq, sk, D)?, Causal::None)
            .with_scale(f64::from(scale))?;
        for (out, fp, name) in [
            (windowed, base.with_window(8, 0)?, "window (8, 0)"),
            (capped, base.with_softcap(20.0)?, "softcap 20"),
        ] {
            let g = out.sum_all()?.backward()?;
            let gq = g
                .get(qg.as_tensor())
                .ok_or("no gradient")?
                .transpose(1, 2)?;
            let r = attn_ref::reference::backward(&fp, &qh, &kh, &vh, &ones)?;
            let emu = backward_emulated(&fp, &qh, &kh, &vh, &ones, storage)?;
            let [eq, ..] = emu.rule_emulation(&r);
            check_gradient(
                &bhsd(&gq)?,
                &eq,
                &r.dq,
                dt,
                &format!("dQ of sum(out), {name}, {dt:?}"),
            );
        }
    }
    Ok(())
}

/// E4M3 codes of normal values times `spread` (some saturate, some are subnormal), made on
/// the CPU as `dims` and moved to `dev`.
fn e4m3_codes(dims: &[usize], spread: f32, seed: u64, dev: &Device) -> R<Tensor> {
    let n: usize = dims.iter().product();
    let x: Vec<f32> = randn(n, seed).iter().map(|v| v * spread).collect();
    Ok(Tensor::from_vec(x, dims, &Device::Cpu)?
        .to_dtype(DType::F8E4M3)?
        .to_device(dev)?)
}

/// Per-KV-head scales `base·(1 + j)` and one scale for the cache.
fn kv_scale_sets(hkv: usize, base: f32, dev: &Device) -> R<[Tensor; 2]> {
    let per_head: Vec<f32> = (0..hkv).map(|j| base * (1.0 + j as f32)).collect();
    Ok([
        Tensor::new(per_head.as_slice(), dev)?,
        Tensor::new(&[base * 1.5], dev)?,
    ])
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn kv_fp8_matches_the_cpu_path_reading_the_codes_in_place() -> R<()> {
    let dev = gpu();
    for (i, dt) in DTYPES.into_iter().enumerate() {
        for (b, sq, sk, hq, hkv) in SHAPES {
            let q = tensor((b, sq, hq, D), dt, Layout::Narrowed, 70 + i as u64, &dev)?;
            // (b, hkv, sk, D) storage viewed as (b, sk, hkv, D): strided codes.
            let k = e4m3_codes(&[b, hkv, sk, D], 30.0, 71, &dev)?.transpose(1, 2)?;
            let v = e4m3_codes(&[b, hkv, sk, D], 2.0, 72, &dev)?.transpose(1, 2)?;
            let [kh, kt] = kv_scale_sets(hkv, 0.01, &dev)?;
            let [vh, vt] = kv_scale_sets(hkv, 0.3, &dev)?;
            for (ks, vs) in [(&kh, &vh), (&kt, &vt)] {
                for causal in [false, true] {
                    let what = format!(
                        "{dt:?} {:?} {} scales causal {causal}",
                        (b, sq, sk, hq, hkv),
                        ks.dims()[0]
                    );
                    let g = flash_attn_kv_fp8(&q, &k, &v, ks, vs, 0.09, causal)?;
                    let rec = last_cuda_launch().expect("a CUDA launch");
                    assert!(rec.kernel.contains("_kv8"), "{what}: ran {}", rec.kernel);
                    assert_eq!(rec.k, address(&k), "{what}: K's codes read in place");
                    assert_eq!(rec.v, address(&v), "{what}: V's codes read in place");
                    let c = flash_attn_kv_fp8(
                        &to_cpu(&q)?,
                        &to_cpu(&k)?,
                        &to_cpu(&v)?,
                        &to_cpu(ks)?,
                        &to_cpu(vs)?,
                        0.09,
                        causal,
                    )?;
                    assert_close(&g, &c, dt, &what)?;
                }
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn paged_kv_fp8_matches_the_cpu_path() -> R<()> {
    let dev = gpu();
    let (hq, hkv, ps, num_blocks, max_blocks) = (8, 2, 16, 40, 8);
    let cu_q = [0u32, 1, 1, 38, 39, 40];
    let used = [100u32, 5, 128, 0, 17];
    let table: Vec<u32> = (0..(5 * max_blocks) as u32)
        .map(|i| (i * 7 + 3) % num_blocks as u32)
        .collect();
    let kc = e4m3_codes(&[num_blocks, ps, hkv, D], 30.0, 80, &dev)?;
    let vc = e4m3_codes(&[num_blocks, ps, hkv, D], 2.0, 81, &dev)?;
    let [ks, _] = kv_scale_sets(hkv, 0.01, &dev)?;
    let [vs, _] = kv_scale_sets(hkv, 0.3, &dev)?;
    let tab = Tensor::new(table.as_slice(), &dev)?.reshape((5, max_blocks))?;
    let (sq, su) = (Tensor::new(&cu_q, &dev)?, Tensor::new(&used, &dev)?);
    for dt in DTYPES {
        let q = Tensor::from_vec(randn(40 * hq * D, 82), (40, hq, D), &dev)?.to_dtype(dt)?;
        for (left, right) in [(None, Some(0)), (None, None), (Some(31), Some(0))] {
            let what = format!("{dt:?} window {left:?},{right:?}");
            let g = flash_attn_varlen_paged_kv_fp8(
                &q, &kc, &vc, &ks, &vs, &tab, &sq, &su, 37, 128, 0.09, left, right,
            )?;
            let rec = last_cuda_launch().expect("a CUDA launch");
            assert!(
                rec.kernel.ends_with("_paged_kv8"),
                "{what}: ran {}",
                rec.kernel
            );
            assert_eq!(rec.k, address(&kc), "{what}: the cache is read in place");
            let c = flash_attn_varlen_paged_kv_fp8(
                &to_cpu(&q)?,
                &to_cpu(&kc)?,
                &to_cpu(&vc)?,
                &to_cpu(&ks)?,
                &to_cpu(&vs)?,
                &to_cpu(&tab)?,
                &to_cpu(&sq)?,
                &to_cpu(&su)?,
                37,
                128,
                0.09,
                left,
                right,
            )?;
            assert_close(&g, &c, dt, &what)?;
        }
    }
    // Scales on the wrong device are a named error, and nothing is launched for them.
    let cpu_scale = Tensor::new(&[0.1f32, 0.2], &Device::Cpu)?;
    let q = Tensor::from_vec(randn(40 * hq * D, 83), (40, hq, D), &dev)?.to_dtype(DType::F16)?;
    let r = flash_attn_varlen_paged_kv_fp8(
        &q, &kc, &vc, &cpu_scale, &cpu_scale, &tab, &sq, &su, 37, 128, 0.09, None, None,
    );
    assert!(err_msg(r).contains("k_scale must be on the CUDA device"));
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn all_e4m3_matches_the_cpu_path_within_the_fp8_cap() -> R<()> {
    let dev = gpu();
    // The CPU path is exact f64 on the decoded codes; the kernel rounds P to E4M3 (and O to
    // the output type). attn-oracle's FP8 rel-L2 cap bounds what that rounding may cost.
    let cap = attn_oracle::Caps::for_storage(attn_oracle::Storage::Fp8E4m3).rel_l2;
    for (i, dt) in DTYPES.into_iter().enumerate() {
        for (b, sq, sk, hq, hkv) in SHAPES {
            let seed = 90 + 10 * i as u64;
            // (b, h, s, d) storage viewed as (b, s, h, d).
            let q = e4m3_codes(&[b, hq, sq, D], 20.0, seed, &dev)?.transpose(1, 2)?;
            let k = e4m3_codes(&[b, hkv, sk, D], 20.0, seed + 1, &dev)?.transpose(1, 2)?;
            let v = e4m3_codes(&[b, hkv, sk, D], 2.0, seed + 2, &dev)?.transpose(1, 2)?;
            let scales = |h: usize, base: f32| -> R<Tensor> {
                let x: Vec<f32> = (0..b * h).map(|j| base * (1.0 + (j % 3) as f32)).collect();
                Ok(Tensor::from_vec(x, (b, h), &dev)?)
            };
            let (qs, ks, vs) = (scales(hq, 0.01)?, scales(hkv, 0.01)?, scales(hkv, 0.3)?);
            for causal in [false, true] {
                let what = format!("{dt:?} {:?} causal {causal}", (b, sq, sk, hq, hkv));
                let g = flash_attn_fp8(&q, &k, &v, &qs, &ks, &vs, 0.09, causal, dt)?;
                let rec = last_cuda_launch().expect("a CUDA launch");
                assert_eq!(rec.q, address(&q), "{what}: Q's codes read in place");
                assert_eq!(rec.k, address(&k), "{what}: K's codes read in place");
                let c = flash_attn_fp8(
                    &to_cpu(&q)?,
                    &to_cpu(&k)?,
                    &to_cpu(&v)?,
                    &to_cpu(&qs)?,
                    &to_cpu(&ks)?,
                    &to_cpu(&vs)?,
                    0.09,
                    causal,
                    dt,
                )?;
                assert_eq!(g.dims(), c.dims());
                let (gv, cv) = (values(&g)?, values(&c)?);
                assert!(
                    gv.iter().all(|x| x.is_finite()),
                    "{what}: non-finite output"
                );
                let num: f64 = gv
                    .iter()
                    .zip(&cv)
                    .map(|(a, b)| f64::from(a - b).powi(2))
                    .sum();
                let den: f64 = cv.iter().map(|b| f64::from(*b).powi(2)).sum();
                let rel = (num / den.max(f64::MIN_POSITIVE)).sqrt();
                assert!(
                    rel <= cap,
                    "{what}: rel L2 {rel:.3e} > the FP8 cap {cap:.1e} ({})",
                    rec.kernel
                );
                eprintln!("{what}: {} rel L2 {rel:.3e}", rec.kernel);
            }
        }
    }
    Ok(())
}

/// Varlen gradients on CUDA (`flash_attn_varlen` → attn-kernels' packed-sequence backward):
/// each sequence's dQ, dK, dV against attn-ref's backward and its emulation of that
/// sequence's problem (DESIGN §3), with an empty query sequence (its keys get zero dK/dV)
/// and sequences of different lengths, f16 and bf16, causal and not.
#[test]
#[ignore = "needs a CUDA GPU"]
fn varlen_gradients_match_each_sequences_reference() -> R<()> {
    use attn_ref::reference::backward::backward_emulated;
    use attn_ref::{AttnShape, Problem};
    let dev = gpu();
    let (hq, hkv) = (4, 2);
    let cu_q: [u32; 4] = [0, 37, 37, 160];
    let cu_k: [u32; 4] = [0, 50, 70, 200];
    let (tq, tk) = (cu_q[3] as usize, cu_k[3] as usize);
    let (max_q, max_k) = (123, 130);
    let scale = 0.09f32;
    // Rows r0..r0 + len of a packed (total, h, D) array as [1, h, len, D].
    let unpack = |x: &[f32], r0: usize, len: usize, h: usize| -> Vec<f32> {
        let mut out = Vec::with_capacity(h * len * D);
        for hi in 0..h {
            for r in r0..r0 + len {
                out.extend_from_slice(&x[(r * h + hi) * D..][..D]);
            }
        }
        out
    };
    for dt in DTYPES {
        let storage = if dt == DType::F16 {
            attn_ref::Dtype::F16
        } else {
            attn_ref::Dtype::Bf16
        };
        for causal in [false, true] {
            let what = format!("varlen {dt:?} causal {causal}");
            let mk = |rows, h, seed| -> R<Tensor> {
                Ok(
                    Tensor::from_vec(randn(rows * h * D, seed), (rows, h, D), &dev)?
                        .to_dtype(dt)?,
                )
            };
            let q = candle_core::Var::from_tensor(&mk(tq, hq, 71)?)?;
            let k = candle_core::Var::from_tensor(&mk(tk, hkv, 72)?)?;
            let v = candle_core::Var::from_tensor(&mk(tk, hkv, 73)?)?;
            let w = mk(tq, hq, 74)?;
            let cu = |x: &[u32]| Tensor::new(x, &dev);
            let out = flash_attn_varlen(
                q.as_tensor(),
                k.as_tensor(),
                v.as_tensor(),
                &cu(&cu_q)?,
                &cu(&cu_k)?,
                max_q,
                max_k,
                scale,
                causal,
            )?;
            let loss = (out.to_dtype(DType::F32)? * w.to_dtype(DType::F32)?)?.sum_all()?;
            let g = loss.backward()?;
            let rec = last_cuda_launch().expect("a launch was recorded");
            assert!(
                rec.kernel.starts_with("attn_bwd_"),
                "{what}: {}",
                rec.kernel
            );
            let grad = |var: &candle_core::Var| -> R<Vec<f32>> {
                let t = g.get(var.as_tensor()).ok_or("no gradient")?;
                assert_eq!(t.dtype(), dt);
                values(t)
            };
            let (gq, gk, gv) = (grad(&q)?, grad(&k)?, grad(&v)?);
            let (qh, kh, vh, wh) = (
                values(q.as_tensor())?,
                values(k.as_tensor())?,
                values(v.as_tensor())?,
                values(&w)?,
            );
            for bi in 0..3 {
                let (q0, k0) = (cu_q[bi] as usize, cu_k[bi] as usize);
                let lq = cu_q[bi + 1] as usize - q0;
                let lk = cu_k[bi + 1] as usize - k0;
                let seq = format!("{what} sequence {bi} ({lq} queries, {lk} keys)");
                if lq == 0 {
                    // No query reads these keys.
                    let dk = unpack(&gk, k0, lk, hkv);
                    let dv = unpack(&gv, k0, lk, hkv);
                    assert!(
                        dk.iter().chain(&dv).all(|&x| x == 0.0),
                        "{seq}: dK/dV not zero"
                    );
                    continue;
                }
                let c = if causal {
                    attn_ref::Causal::BottomRight
                } else {
                    attn_ref::Causal::None
                };
                let p = Problem::new(AttnShape::new(1, hq, hkv, lq, lk, D)?, c)
                    .with_scale(f64::from(scale))?;
                let (sq_, sk_, sv_, sw_) = (
                    unpack(&qh, q0, lq, hq),
                    unpack(&kh, k0, lk, hkv),
                    unpack(&vh, k0, lk, hkv),
                    unpack(&wh, q0, lq, hq),
                );
                let r = attn_ref::reference::backward(&p, &sq_, &sk_, &sv_, &sw_)?;
                let emu = backward_emulated(&p, &sq_, &sk_, &sv_, &sw_, storage)?;
                let [eq, ek, ev] = emu.rule_emulation(&r);
                check_gradient(
                    &unpack(&gq, q0, lq, hq),
                    &eq,
                    &r.dq,
                    dt,
                    &format!("dQ {seq}"),
                );
                check_gradient(
                    &unpack(&gk, k0, lk, hkv),
                    &ek,
                    &r.dk,
                    dt,
                    &format!("dK {seq}"),
                );
                check_gradient(
                    &unpack(&gv, k0, lk, hkv),
                    &ev,
                    &r.dv,
                    dt,
                    &format!("dV {seq}"),
                );
            }
        }
    }
    Ok(())
}
