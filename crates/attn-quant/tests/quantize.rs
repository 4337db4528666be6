//! Behaviour of quantize / dequantize / error_report on edge cases, bad inputs and random
//! data, checked against a serial re-statement of the contract written here.

use attn_quant::{
    compute_scales, dequantize, dequantize_parts, error_report, quantize, quantize_with,
    quantize_with_scales, scale_from_amax, Fp8Format, Fp8Tensor, Granularity, QuantInput,
    QuantOptions, QuantizeError,
};
use half::{bf16, f16};
use proptest::prelude::*;
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;

const GRANULARITIES: [Granularity; 6] = [
    Granularity::Tensor,
    Granularity::Head,
    Granularity::Token,
    Granularity::Block(1),
    Granularity::Block(3),
    Granularity::Block(16),
];

fn normal(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| rng.sample::<f32, _>(StandardNormal))
        .collect()
}

fn numel(shape: [usize; 4]) -> usize {
    shape.iter().product()
}

/// Group of each element, restated from the documented layout table.
fn group_of(shape: [usize; 4], granularity: Granularity, i: usize) -> usize {
    let [_, h, s, d] = shape;
    let (bh, t) = (i / (s * d), i / d % s);
    let _ = h;
    match granularity {
        Granularity::Tensor => 0,
        Granularity::Head => bh,
        Granularity::Token => bh * s + t,
        Granularity::Block(n) => bh * s.div_ceil(n) + t / n,
    }
}

/// A serial, obviously-correct restatement of `quantize`: amax per group, the documented
/// scale rule, then float8's conversion of the f32 quotient x / scale.
fn serial_quantize(x: &[f32], shape: [usize; 4], format: Fp8Format, g: Granularity) -> Fp8Tensor {
    let n_scales = g.num_scales(shape).unwrap();
    let mut amax = vec![0.0f64; n_scales];
    for (i, v) in x.iter().enumerate() {
        let k = group_of(shape, g, i);
        amax[k] = amax[k].max(f64::from(v.abs()));
    }
    let scales: Vec<f32> = amax
        .iter()
        .map(|&a| scale_from_amax(a, format, 0).unwrap())
        .collect();
    let codes = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let q = v / scales[group_of(shape, g, i)];
            match format {
                Fp8Format::E4M3 => float8::F8E4M3::from_f32(q).to_bits(),
                Fp8Format::E5M2 => float8::F8E5M2::from_f32(q).to_bits(),
            }
        })
        .collect();
    Fp8Tensor {
        codes,
        scales,
        shape,
        format,
        granularity: g,
    }
}

/// `|x − x̂| ≤ scale · half_ulp(x / scale)` plus the f32 rounding of the product
/// `decode · scale`.
fn assert_within_half_ulp<T: QuantInput>(x: &[T], q: &Fp8Tensor) {
    let y = dequantize(q).unwrap();
    for (i, (&v, &approx)) in x.iter().zip(&y).enumerate() {
        let v = v.to_f64();
        let scale = f64::from(q.scales[group_of(q.shape, q.granularity, i)]);
        let bound = scale * q.format.half_ulp(v / scale)
            + f64::from(approx).abs() * f64::from(f32::EPSILON) * 0.5
            + f64::from(f32::from_bits(1)) * 0.5;
        let err = (v - f64::from(approx)).abs();
        assert!(
            err <= bound,
            "{} {}: element {i} = {v:e} came back {approx:e} (error {err:e} > bound {bound:e}, \
             scale {scale:e})",
            q.format,
            q.granularity
        );
    }
}

#[test]
fn zero_tensor_gets_unit_scales_and_zero_codes() {
    let shape = [2, 3, 7, 8];
    let x = vec![0.0f32; numel(shape)];
    for format in Fp8Format::ALL {
        for g in GRANULARITIES {
            let q = quantize(&x, shape, format, g).unwrap();
            assert!(q.scales.iter().all(|&s| s == 1.0), "{format} {g}");
            assert!(q.codes.iter().all(|&c| c == 0), "{format} {g}");
            assert_eq!(dequantize(&q).unwrap(), x);
            let r = error_report(&x, &q).unwrap();
            assert_eq!(r.overall.max_abs, 0.0);
            assert_eq!(r.overall.rel_l2(), 0.0);
            assert_eq!(r.overall.snr_db(), f64::INFINITY);
        }
    }
    // Negative zeros keep their sign bit and still get scale 1.
    let q = quantize(
        &[-0.0f32; 4],
        [1, 1, 1, 4],
        Fp8Format::E4M3,
        Granularity::Tensor,
    )
    .unwrap();
    assert_eq!(q.scales, [1.0]);
    assert_eq!(q.codes, [0x80; 4]);
}

#[test]
fn one_nonzero_element_maps_to_max() {
    let shape = [1, 2, 3, 4];
    for format in Fp8Format::ALL {
        for v in [1.0f32, -3.7e-3, 123.456, -6.0e4] {
            let mut x = vec![0.0f32; numel(shape)];
            x[17] = v;
            let q = quantize(&x, shape, format, Granularity::Tensor).unwrap();
            let max_code = format.encode(f64::from(format.max()));
            let expected = if v < 0.0 { max_code | 0x80 } else { max_code };
            assert_eq!(q.codes[17], expected, "{format} {v}");
            assert!(q.codes.iter().enumerate().all(|(i, &c)| i == 17 || c == 0));
            // The scale is amax / max rounded up: at most one f32 ulp above.
            let s = f64::from(q.scales[0]);
            assert!(s * f64::from(format.max()) >= f64::from(v.abs()));
            assert!(s * f64::from(format.max()) <= f64::from(v.abs()) * (1.0 + 2e-7));
            let y = dequantize(&q).unwrap();
            assert!(
                ((y[17] - v) / v).abs() <= 2.5e-7,
                "{format} {v} -> {}",
                y[17]
            );
        }
    }
}

#[test]
fn exact_max_round_trips_exactly() {
    for format in Fp8Format::ALL {
        let m = format.max();
        let x = [m, -m, m / 2.0, -m / 4.0, 0.0, 1.0, -1.0, 2.0];
        let q = quantize(&x, [1, 1, 2, 4], format, Granularity::Tensor).unwrap();
        assert_eq!(
            q.scales,
            [1.0],
            "{format}: amax == max gives scale exactly 1"
        );
        assert_eq!(q.codes[0], q.codes[1] & 0x7f);
        assert_eq!(format.decode(q.codes[0]), m);
        assert_eq!(dequantize(&q).unwrap(), x);
        assert_eq!(error_report(&x, &q).unwrap().overall.saturated, 0);
    }
}

#[test]
fn values_above_max_saturate_and_are_counted() {
    for format in Fp8Format::ALL {
        let m = format.max();
        let above = [m * 1.0001, m * 1.03, m * 1.2, m * 10.0, f32::MAX];
        let mut x = vec![0.5f32, -m, m, 0.0];
        x.extend(above);
        x.extend(above.map(|v| -v));
        x.resize(16, 1.0);
        // A scale of 1 (static scaling): every |x| > max saturates to ±max, not to NaN/inf.
        let q =
            quantize_with_scales(&x, [1, 1, 4, 4], format, Granularity::Tensor, &[1.0]).unwrap();
        let y = dequantize(&q).unwrap();
        for (i, (&v, &approx)) in x.iter().zip(&y).enumerate() {
            if v.abs() >= m {
                assert_eq!(approx, m.copysign(v), "{format} element {i} = {v}");
            }
        }
        let report = error_report(&x, &q).unwrap();
        assert_eq!(report.overall.saturated, 2 * above.len(), "{format}");
        assert!(report.overall.max_abs >= f64::from(f32::MAX) - f64::from(m));
        // With derived scales the same data does not saturate.
        let q = quantize(&x, [1, 1, 4, 4], format, Granularity::Tensor).unwrap();
        assert_eq!(error_report(&x, &q).unwrap().overall.saturated, 0);
    }
}

#[test]
fn subnormal_inputs_give_normal_scales_and_finite_codes() {
    let tiny = [
        f32::from_bits(1),
        -f32::from_bits(1),
        f32::from_bits(7),
        1e-40,
        -3e-39,
        f32::MIN_POSITIVE * 0.999,
        0.0,
        f32::from_bits(0x0000_0100),
    ];
    let shape = [2, 1, 2, 2];
    for format in Fp8Format::ALL {
        for g in [
            Granularity::Tensor,
            Granularity::Token,
            Granularity::Block(1),
        ] {
            let q = quantize(&tiny, shape, format, g).unwrap();
            for &s in &q.scales {
                assert!(s.is_normal() && s > 0.0, "{format} {g}: scale {s:e}");
            }
            assert!(q.codes.iter().all(|&c| format.is_finite_code(c)));
            let y = dequantize(&q).unwrap();
            assert!(y.iter().all(|v| v.is_finite()));
            assert_within_half_ulp(&tiny, &q);
        }
    }
    // The scale rule itself, across the subnormal/normal boundary.
    for format in Fp8Format::ALL {
        let max = f64::from(format.max());
        for amax in [
            f64::from(f32::from_bits(1)),
            1e-40,
            f64::from(f32::MIN_POSITIVE),
            f64::from(f32::MIN_POSITIVE) * max * 0.5,
            f64::from(f32::MIN_POSITIVE) * max * 3.0,
            1e-30,
        ] {
            let s = scale_from_amax(amax, format, 0).unwrap();
            assert!(s.is_normal(), "{format} amax {amax:e}: scale {s:e}");
            assert!(amax / f64::from(s) <= max, "{format} amax {amax:e}");
            assert_eq!(s, s.max(f32::MIN_POSITIVE));
        }
    }
}

#[test]
fn scale_rule_edges() {
    for format in Fp8Format::ALL {
        let max = f64::from(format.max());
        assert_eq!(scale_from_amax(0.0, format, 0), Some(1.0));
        assert_eq!(scale_from_amax(0.0, format, 5), Some(1.0));
        assert_eq!(scale_from_amax(max, format, 0), Some(1.0));
        assert_eq!(scale_from_amax(max, format, 3), Some(8.0));
        assert_eq!(scale_from_amax(f64::NAN, format, 0), None);
        assert_eq!(scale_from_amax(f64::INFINITY, format, 0), None);
        assert_eq!(scale_from_amax(-1.0, format, 0), None);
        assert_eq!(scale_from_amax(1.0, format, 200), None);
        assert_eq!(scale_from_amax(1.0, format, u32::MAX), None);
        // Near f32::MAX the dequantized max must stay finite.
        let s = scale_from_amax(f64::from(f32::MAX) * 0.5, format, 0).unwrap();
        assert!((s * format.max()).is_finite());
        // Rounded up, and by at most one ulp: amax / scale ≤ max, tightly.
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..10_000 {
            let amax = f64::from(10f64.powf(rng.random_range(-36.0..37.0)) as f32);
            let s = f64::from(scale_from_amax(amax, format, 0).unwrap());
            assert!(amax / s <= max);
            // Tight unless the scale was raised to f32::MIN_POSITIVE (tiny amax).
            if amax >= f64::from(f32::MIN_POSITIVE) * max {
                assert!(amax / s >= max * (1.0 - 2.5e-7), "{amax:e}");
            }
        }
    }
}

#[test]
fn mixed_signs_keep_their_sign() {
    let shape = [2, 2, 16, 8];
    let x = normal(numel(shape), 11);
    for format in Fp8Format::ALL {
        for g in GRANULARITIES {
            let q = quantize(&x, shape, format, g).unwrap();
            for (&v, &c) in x.iter().zip(&q.codes) {
                assert_eq!(v.is_sign_negative(), c & 0x80 != 0, "{format} {g} {v}");
            }
            let y = dequantize(&q).unwrap();
            assert!(x
                .iter()
                .zip(&y)
                .all(|(a, b)| *b == 0.0 || a.signum() == b.signum()));
        }
    }
}

#[test]
fn outlier_only_affects_its_own_group() {
    let shape = [2, 4, 32, 16];
    let clean = normal(numel(shape), 3);
    let mut dirty = clean.clone();
    // (b, h, s, d) = (1, 2, 10, 5)
    let at = ((4 + 2) * 32 + 10) * 16 + 5;
    dirty[at] = 1.0e6;
    for format in Fp8Format::ALL {
        for g in [
            Granularity::Head,
            Granularity::Token,
            Granularity::Block(8),
            Granularity::Tensor,
        ] {
            let qc = quantize(&clean, shape, format, g).unwrap();
            let qd = quantize(&dirty, shape, format, g).unwrap();
            let rc = error_report(&clean, &qc).unwrap();
            let rd = error_report(&dirty, &qd).unwrap();
            let hit = group_of(shape, g, at);
            for k in 0..qc.scales.len() {
                if k == hit {
                    continue;
                }
                // Other groups are bit-identical and keep their error.
                assert_eq!(qc.scales[k], qd.scales[k]);
                assert_eq!(rc.groups[k], rd.groups[k], "{format} {g} group {k}");
            }
            for i in 0..clean.len() {
                if group_of(shape, g, i) != hit {
                    assert_eq!(qc.codes[i], qd.codes[i]);
                }
            }
            // Within the outlier's group the rest of the values lose precision; with one
            // tensor-wide scale that is everything, which is why head/token scales exist.
            let bound = match format {
                Fp8Format::E4M3 => 0.04,
                Fp8Format::E5M2 => 0.08,
            };
            let others: Vec<_> = (0..rd.groups.len()).filter(|&k| k != hit).collect();
            assert!(others.iter().all(|&k| rd.groups[k].rel_l2() < bound));
            if g == Granularity::Tensor && format == Fp8Format::E4M3 {
                // 10⁶ / 448 pushes N(0,1) values below E4M3's smallest subnormal (2⁻⁹).
                // (E5M2's 2⁻¹⁶ still resolves them: range is what E5M2 is for.)
                let rel_l2_without_outlier = |x: &[f32], q: &Fp8Tensor| {
                    let y = dequantize(q).unwrap();
                    let (mut e, mut s) = (0.0f64, 0.0f64);
                    for i in (0..x.len()).filter(|&i| i != at) {
                        e += (f64::from(x[i]) - f64::from(y[i])).powi(2);
                        s += f64::from(x[i]).powi(2);
                    }
                    (e / s).sqrt()
                };
                let before = rel_l2_without_outlier(&clean, &qc);
                let after = rel_l2_without_outlier(&dirty, &qd);
                assert!(before < 0.04 && after > 0.5, "{before} {after}");
            }
        }
    }
}

#[test]
fn matches_the_serial_restatement_across_chunk_boundaries() {
    // 2·3·1000·40 = 240k elements: tensor and head groups exceed one parallel chunk (65536),
    // 1000 tokens do not divide into blocks of 64 or 7.
    let shape = [2, 3, 1000, 40];
    let mut x = normal(numel(shape), 5);
    // Give heads very different magnitudes so that wrong group boundaries show.
    for (i, v) in x.iter_mut().enumerate() {
        *v *= 10f32.powi((i / (1000 * 40)) as i32 - 2);
    }
    for format in Fp8Format::ALL {
        for g in [
            Granularity::Tensor,
            Granularity::Head,
            Granularity::Token,
            Granularity::Block(64),
            Granularity::Block(7),
        ] {
            let q = quantize(&x, shape, format, g).unwrap();
            assert_eq!(q, serial_quantize(&x, shape, format, g), "{format} {g}");
            assert_eq!(
                q.scales.len(),
                g.scales_shape(shape).unwrap().iter().product::<usize>()
            );
            let y = dequantize(&q).unwrap();
            for (i, (&c, &v)) in q.codes.iter().zip(&y).enumerate() {
                let s = q.scales[group_of(shape, g, i)];
                assert_eq!(v, format.decode(c) * s);
            }
        }
    }
}

#[test]
fn round_trip_error_within_half_ulp_of_the_group_scale() {
    let shape = [2, 3, 24, 16];
    let mut x = normal(numel(shape), 17);
    for (i, v) in x.iter_mut().enumerate() {
        *v *= 4f32.powi((i % 7) as i32 - 3); // mixed magnitudes inside groups too
    }
    for format in Fp8Format::ALL {
        for g in GRANULARITIES {
            assert_within_half_ulp(&x, &quantize(&x, shape, format, g).unwrap());
        }
    }
}

#[test]
fn f16_and_bf16_inputs_match_their_f32_values() {
    let shape = [1, 2, 9, 8];
    let x = normal(numel(shape), 23);
    let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let h32: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
    let b32: Vec<f32> = b.iter().map(|v| v.to_f32()).collect();
    for format in Fp8Format::ALL {
        for g in GRANULARITIES {
            assert_eq!(
                quantize(&h, shape, format, g).unwrap(),
                quantize(&h32, shape, format, g).unwrap()
            );
            assert_eq!(
                quantize(&b, shape, format, g).unwrap(),
                quantize(&b32, shape, format, g).unwrap()
            );
            assert_within_half_ulp(&h, &quantize(&h, shape, format, g).unwrap());
        }
    }
}

#[test]
fn margin_gives_power_of_two_headroom() {
    let shape = [1, 2, 8, 8];
    let x = normal(numel(shape), 29);
    for format in Fp8Format::ALL {
        let q0 = quantize(&x, shape, format, Granularity::Head).unwrap();
        for margin in [1u32, 3] {
            let q = quantize_with(
                &x,
                shape,
                format,
                Granularity::Head,
                &QuantOptions { margin },
            )
            .unwrap();
            for (a, b) in q0.scales.iter().zip(&q.scales) {
                assert_eq!(*b, *a * 2f32.powi(margin as i32));
            }
            // The largest code now sits `margin` binades below max.
            let top = q
                .codes
                .iter()
                .map(|&c| format.decode(c).abs())
                .fold(0.0, f32::max);
            assert!(top <= format.max() / 2f32.powi(margin as i32));
            assert_within_half_ulp(&x, &q);
            // Values up to 2^margin times the calibration amax fit without saturating.
            let grown: Vec<f32> = x.iter().map(|v| v * 2f32.powi(margin as i32)).collect();
            let q2 =
                quantize_with_scales(&grown, shape, format, Granularity::Head, &q.scales).unwrap();
            assert_eq!(error_report(&grown, &q2).unwrap().overall.saturated, 0);
        }
        let err = quantize_with(
            &x,
            shape,
            format,
            Granularity::Head,
            &QuantOptions { margin: 300 },
        )
        .unwrap_err();
        assert!(matches!(
            err,
            QuantizeError::ScaleOverflow {
                group: 0,
                margin: 300,
                ..
            }
        ));
    }
}

#[test]
fn compute_scales_then_quantize_with_scales_equals_quantize() {
    let shape = [2, 2, 10, 4];
    let x = normal(numel(shape), 31);
    for format in Fp8Format::ALL {
        for g in GRANULARITIES {
            let s = compute_scales(&x, shape, format, g, &QuantOptions::default()).unwrap();
            assert_eq!(
                quantize_with_scales(&x, shape, format, g, &s).unwrap(),
                quantize(&x, shape, format, g).unwrap()
            );
        }
    }
}

#[test]
fn error_report_matches_a_direct_computation() {
    let shape = [1, 3, 5, 4];
    let x = normal(numel(shape), 37);
    let q = quantize(&x, shape, Fp8Format::E5M2, Granularity::Head).unwrap();
    let y = dequantize(&q).unwrap();
    let r = error_report(&x, &q).unwrap();
    assert_eq!(r.groups.len(), 3);
    for h in 0..3 {
        let span = h * 20..(h + 1) * 20;
        let err2: f64 = span
            .clone()
            .map(|i| (f64::from(x[i]) - f64::from(y[i])).powi(2))
            .sum();
        let sig2: f64 = span.clone().map(|i| f64::from(x[i]).powi(2)).sum();
        let maxe = span
            .clone()
            .map(|i| (f64::from(x[i]) - f64::from(y[i])).abs())
            .fold(0.0, f64::max);
        let g = &r.groups[h];
        assert_eq!(g.elements, 20);
        assert!((g.error_energy - err2).abs() <= 1e-12 * err2);
        assert!((g.signal_energy - sig2).abs() <= 1e-12 * sig2);
        assert_eq!(g.max_abs, maxe);
        assert!((g.rel_l2() - (err2 / sig2).sqrt()).abs() < 1e-12);
        assert!((g.snr_db() - 10.0 * (sig2 / err2).log10()).abs() < 1e-9);
    }
    assert_eq!(r.overall.elements, 60);
    assert!(r.to_string().contains("60 elements in 3 groups"));
    assert!(r.worst_group().is_some());
}

// ---- bad input ----------------------------------------------------------------------

#[test]
fn non_finite_input_names_the_first_bad_element() {
    let shape = [2, 3, 4, 5];
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut x = normal(numel(shape), 41);
        let at = ((3 + 1) * 4 + 2) * 5 + 3; // (1, 1, 2, 3)
        x[at] = bad;
        x[at + 10] = f32::NAN;
        for g in GRANULARITIES {
            let err = quantize(&x, shape, Fp8Format::E4M3, g).unwrap_err();
            match &err {
                QuantizeError::NonFiniteInput {
                    index,
                    position,
                    value,
                } => {
                    assert_eq!(*index, at);
                    assert_eq!(*position, [1, 1, 2, 3]);
                    assert!(value.is_nan() == bad.is_nan());
                }
                other => panic!("{g}: expected NonFiniteInput, got {other:?}"),
            }
            assert!(
                err.to_string().contains("[b, h, s, d] = [1, 1, 2, 3]"),
                "{err}"
            );
            let err = quantize_with_scales(&x, shape, Fp8Format::E4M3, Granularity::Tensor, &[1.0])
                .unwrap_err();
            assert!(matches!(err, QuantizeError::NonFiniteInput { index, .. } if index == at));
        }
    }
    // Inside one tensor-wide group split across parallel chunks, the first still wins.
    let shape = [1, 1, 2048, 128];
    let mut x = normal(numel(shape), 43);
    x[200_000] = f32::NAN;
    x[70_001] = f32::NEG_INFINITY;
    x[140_000] = f32::INFINITY;
    let err = quantize(&x, shape, Fp8Format::E5M2, Granularity::Tensor).unwrap_err();
    assert!(
        matches!(err, QuantizeError::NonFiniteInput { index: 70_001, .. }),
        "{err}"
    );
    let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let err = quantize(&h, shape, Fp8Format::E4M3, Granularity::Head).unwrap_err();
    assert!(
        matches!(err, QuantizeError::NonFiniteInput { index: 70_001, .. }),
        "{err}"
    );
}

#[test]
fn f64_input_beyond_f32_range_is_a_scale_overflow() {
    let x = [1.0f64, 1e300, 0.0, 2.0];
    let err = quantize(&x, [1, 2, 1, 2], Fp8Format::E4M3, Granularity::Token).unwrap_err();
    assert!(
        matches!(err, QuantizeError::ScaleOverflow { group: 0, .. }),
        "{err}"
    );
}

#[test]
fn shape_errors() {
    let x = vec![1.0f32; 24];
    let err = quantize(&x, [1, 2, 3, 5], Fp8Format::E4M3, Granularity::Head).unwrap_err();
    assert_eq!(
        err,
        QuantizeError::LengthMismatch {
            buffer: "input",
            got: 24,
            expected: 30,
            needs: "shape [1, 2, 3, 5]".into()
        }
    );
    assert_eq!(
        quantize(&x, [1, 2, 3, 4], Fp8Format::E4M3, Granularity::Block(0)).unwrap_err(),
        QuantizeError::ZeroBlockSize
    );
    assert_eq!(
        quantize::<f32>(&[], [1, 0, 3, 4], Fp8Format::E4M3, Granularity::Head).unwrap_err(),
        QuantizeError::ZeroDimension {
            shape: [1, 0, 3, 4]
        }
    );
    assert!(matches!(
        quantize(
            &x,
            [usize::MAX, 2, 3, 4],
            Fp8Format::E4M3,
            Granularity::Head
        ),
        Err(QuantizeError::ShapeOverflow { .. })
    ));
}

#[test]
fn dequantize_rejects_bad_buffers() {
    let shape = [1, 2, 3, 4];
    let x = normal(numel(shape), 47);
    let q = quantize(&x, shape, Fp8Format::E4M3, Granularity::Token).unwrap();
    let (f, g) = (q.format, q.granularity);

    let err = dequantize_parts(&q.codes, &q.scales[..5], shape, f, g).unwrap_err();
    assert!(
        matches!(
            &err,
            QuantizeError::LengthMismatch {
                buffer: "scales",
                got: 5,
                expected: 6,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("[1, 2, 3]"), "{err}");
    let err = dequantize_parts(&q.codes[..23], &q.scales, shape, f, g).unwrap_err();
    assert!(matches!(
        err,
        QuantizeError::LengthMismatch {
            buffer: "codes",
            got: 23,
            ..
        }
    ));
    let err = dequantize_parts(&q.codes, &q.scales, shape, f, Granularity::Block(0)).unwrap_err();
    assert_eq!(err, QuantizeError::ZeroBlockSize);

    for bad in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
        let mut scales = q.scales.clone();
        scales[4] = bad;
        let err = dequantize_parts(&q.codes, &scales, shape, f, g).unwrap_err();
        assert!(
            matches!(err, QuantizeError::InvalidScale { group: 4, .. }),
            "{err}"
        );
    }

    // NaN codes (both formats) and E5M2's infinities, planted among valid codes.
    for (format, code) in [
        (Fp8Format::E4M3, 0x7f),
        (Fp8Format::E4M3, 0xff),
        (Fp8Format::E5M2, 0x7d),
        (Fp8Format::E5M2, 0xfe),
        (Fp8Format::E5M2, 0x7c),
        (Fp8Format::E5M2, 0xfc),
    ] {
        let valid = quantize(&x, shape, format, g).unwrap();
        let mut codes = valid.codes.clone();
        codes[13] = code;
        codes[20] = code;
        let err = dequantize_parts(&codes, &valid.scales, shape, format, g).unwrap_err();
        match err {
            QuantizeError::NonFiniteCode {
                index,
                position,
                code: c,
                format: fm,
                ..
            } => {
                assert_eq!((index, position, c, fm), (13, [0, 1, 0, 1], code, format));
            }
            other => panic!("{format} 0x{code:02x}: {other:?}"),
        }
        let mut bad = valid.clone();
        bad.codes = codes;
        assert!(matches!(
            error_report(&x, &bad),
            Err(QuantizeError::NonFiniteCode { index: 13, .. })
        ));
    }

    // A caller's scale so large that decode · scale overflows f32.
    let mut scales = q.scales.clone();
    scales[0] = 1e38;
    let mut codes = q.codes.clone();
    codes[..4].copy_from_slice(&[0x00, 0x38, 0x7e, 0x00]); // 0, 1, 448, 0
    let err = dequantize_parts(&codes, &scales, shape, f, g).unwrap_err();
    assert!(
        matches!(err, QuantizeError::DequantizeOverflow { index: 2, .. }),
        "{err}"
    );

    // The error report checks lengths too.
    assert!(matches!(
        error_report(&x[..10], &q),
        Err(QuantizeError::LengthMismatch {
            buffer: "input",
            ..
        })
    ));
    assert!(matches!(
        quantize_with_scales(&x, shape, f, g, &[1.0; 3]),
        Err(QuantizeError::LengthMismatch {
            buffer: "scales",
            ..
        })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any shape, granularity and magnitude: the parallel quantizer equals the serial
    /// restatement, and the round trip stays within half an FP8 ulp of the group's scale.
    #[test]
    fn random_shapes_round_trip(
        b in 1usize..3, h in 1usize..4, s in 1usize..40, d in 1usize..20,
        gran in prop_oneof![
            Just(Granularity::Tensor), Just(Granularity::Head), Just(Granularity::Token),
            (1usize..50).prop_map(Granularity::Block),
        ],
        e4m3 in any::<bool>(),
        log_mag in -30i32..30,
        seed in any::<u64>(),
    ) {
        let shape = [b, h, s, d];
        let format = if e4m3 { Fp8Format::E4M3 } else { Fp8Format::E5M2 };
        let x: Vec<f32> = normal(numel(shape), seed)
            .into_iter()
            .map(|v| v * 2f32.powi(log_mag))
            .collect();
        let q = quantize(&x, shape, format, gran).unwrap();
        prop_assert_eq!(&q, &serial_quantize(&x, shape, format, gran));
        assert_within_half_ulp(&x, &q);
        prop_assert_eq!(error_report(&x, &q).unwrap().overall.saturated, 0);
    }
}
