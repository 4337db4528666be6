//! Hand-written SVG figures of the gate report: latency distributions (box plot with the
//! samples strewn over it, one panel per shape) and a roofline with one point per shape.

use std::fmt::Write as _;

/// Peak dense bf16 GEMM throughput measured on the H100, TFLOP/s.
pub const PEAK_TFLOPS: f64 = 780.0;
/// Copy bandwidth measured on the H100, TB/s.
pub const PEAK_TBPS: f64 = 3.0;

/// Linear-interpolated quantile of sorted data (`q` in [0, 1]).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One panel: a shape and the samples (µs) of each backend timed on it.
#[derive(Debug, Clone)]
pub struct LatencyPanel {
    /// Title (the sample files' shape key).
    pub title: String,
    /// `(backend, samples)`.
    pub series: Vec<(String, Vec<f64>)>,
}

/// Box plots (whiskers at the 1st/99th percentiles, box at the quartiles, median line) with up
/// to 300 samples per series drawn as faint dots, one panel per shape with its own µs axis.
pub fn latency_svg(panels: &[LatencyPanel]) -> String {
    const WIDTH: f64 = 760.0;
    const LEFT: f64 = 120.0;
    const RIGHT: f64 = 30.0;
    const ROW: f64 = 26.0;
    const PANEL_GAP: f64 = 56.0;
    let height: f64 = 20.0
        + panels
            .iter()
            .map(|p| PANEL_GAP + ROW * p.series.len().max(1) as f64)
            .sum::<f64>();
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    svg.push('\n');
    if panels.is_empty() {
        svg.push_str(r#"<text x="10" y="20">no latency samples</text>"#);
        svg.push_str("\n</svg>\n");
        return svg;
    }
    let mut y0 = 20.0;
    for panel in panels {
        let finite: Vec<Vec<f64>> = panel
            .series
            .iter()
            .map(|(_, s)| {
                let mut v: Vec<f64> = s.iter().copied().filter(|x| x.is_finite()).collect();
                v.sort_by(f64::total_cmp);
                v
            })
            .collect();
        let lo = finite
            .iter()
            .filter_map(|v| v.first())
            .copied()
            .fold(f64::INFINITY, f64::min);
        let hi = finite
            .iter()
            .filter_map(|v| v.last())
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = if lo.is_finite() && hi > lo {
            let pad = (hi - lo) * 0.05;
            (lo - pad, hi + pad)
        } else if lo.is_finite() {
            (lo * 0.95, lo * 1.05 + 1e-9)
        } else {
            (0.0, 1.0)
        };
        let x = |v: f64| LEFT + (v - lo) / (hi - lo) * (WIDTH - LEFT - RIGHT);
        let _ = writeln!(
            svg,
            r#"<text x="10" y="{:.1}" font-weight="bold">{}</text>"#,
            y0 + 12.0,
            escape(&panel.title)
        );
        let axis_y = y0 + 24.0 + ROW * panel.series.len().max(1) as f64;
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{axis_y:.1}" x2="{:.1}" y2="{axis_y:.1}" stroke="#444"/>"##,
            WIDTH - RIGHT
        );
        for t in 0..=4 {
            let v = lo + (hi - lo) * f64::from(t) / 4.0;
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{v:.1} µs</text>"#,
                x(v),
                axis_y + 14.0
            );
        }
        for (i, ((name, _), sorted)) in panel.series.iter().zip(&finite).enumerate() {
            let cy = y0 + 24.0 + ROW * i as f64 + ROW / 2.0;
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 8.0,
                cy + 4.0,
                escape(name)
            );
            if sorted.is_empty() {
                continue;
            }
            let color = if i == 0 { "#c0392b" } else { "#2c6fbb" };
            let step = sorted.len().div_ceil(300).max(1);
            for (j, v) in sorted.iter().step_by(step).enumerate() {
                // Spread the dots vertically in a fixed pattern so dense regions stay visible.
                let dy = ((j * 7) % 11) as f64 - 5.0;
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="1.5" fill="{color}" fill-opacity="0.25"/>"#,
                    x(*v),
                    cy + dy
                );
            }
            let [p1, q1, med, q3, p99] = [0.01, 0.25, 0.5, 0.75, 0.99].map(|q| quantile(sorted, q));
            let _ = writeln!(
                svg,
                r#"<line x1="{:.1}" y1="{cy:.1}" x2="{:.1}" y2="{cy:.1}" stroke="{color}"/>"#,
                x(p1),
                x(p99)
            );
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="14" fill="none" stroke="{color}"/>"#,
                x(q1),
                cy - 7.0,
                (x(q3) - x(q1)).max(1.0)
            );
            let _ = writeln!(
                svg,
                r#"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="{color}" stroke-width="2"/>"#,
                x(med),
                cy - 7.0,
                cy + 7.0
            );
        }
        y0 = axis_y + PANEL_GAP - 24.0;
    }
    svg.push_str("</svg>\n");
    svg
}

/// One roofline point.
#[derive(Debug, Clone)]
pub struct RooflinePoint {
    /// Label (shape, causal).
    pub label: String,
    /// FLOP per byte of compulsory DRAM traffic.
    pub intensity: f64,
    /// Achieved TFLOP/s.
    pub tflops: f64,
}

/// FLOP per byte: attention FLOPs (4·B·H·Sq·Sk·D, halved for causal, as `cargo xtask
/// bench` counts them) over the compulsory traffic (read Q and K, V once, write O once, `elem` bytes
/// each; MHA).
pub fn intensity(b: f64, h: f64, sq: f64, sk: f64, d: f64, causal: bool, elem: f64) -> f64 {
    let flops = 4.0 * b * h * sq * sk * d * if causal { 0.5 } else { 1.0 };
    let bytes = 2.0 * b * h * (sq + sk) * d * elem;
    flops / bytes
}

/// The roofline ceiling at an intensity: min(peak compute, intensity × bandwidth), TFLOP/s.
pub fn ceiling(intensity: f64) -> f64 {
    PEAK_TFLOPS.min(intensity * PEAK_TBPS)
}

/// Log-log roofline with the two ceilings above and one labelled point per shape.
pub fn roofline_svg(points: &[RooflinePoint]) -> String {
    const W: f64 = 640.0;
    const H: f64 = 420.0;
    const L: f64 = 70.0;
    const B: f64 = 50.0;
    const T: f64 = 20.0;
    const R: f64 = 20.0;
    let (x_lo, x_hi) = (0.0_f64, 4.0_f64); // log10 FLOP/byte: 1 … 10^4
    let (y_lo, y_hi) = (0.0_f64, 3.0_f64); // log10 TFLOP/s: 1 … 1000
    let px = |ai: f64| L + (ai.max(1e-9).log10() - x_lo) / (x_hi - x_lo) * (W - L - R);
    let py = |tf: f64| H - B - (tf.max(1e-9).log10() - y_lo) / (y_hi - y_lo) * (H - B - T);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        svg,
        r##"<rect x="{L}" y="{T}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
        W - L - R,
        H - B - T
    );
    for e in 0..=4 {
        let v = 10f64.powi(e);
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{v}</text>"#,
            px(v),
            H - B + 16.0
        );
    }
    for e in 0..=3 {
        let v = 10f64.powi(e);
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{v}</text>"#,
            L - 6.0,
            py(v) + 4.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">arithmetic intensity (FLOP/byte, compulsory traffic)</text>"#,
        (L + W - R) / 2.0,
        H - 12.0
    );
    let _ = writeln!(
        svg,
        r#"<text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">TFLOP/s</text>"#,
        (T + H - B) / 2.0,
        (T + H - B) / 2.0
    );
    // The two ceilings meet at the ridge point.
    let ridge = PEAK_TFLOPS / PEAK_TBPS;
    let x_min = 10f64.powf(x_lo);
    let x_max = 10f64.powf(x_hi);
    let _ = writeln!(
        svg,
        r##"<polyline points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="none" stroke="#222" stroke-width="2"/>"##,
        px(x_min),
        py(ceiling(x_min)),
        px(ridge),
        py(PEAK_TFLOPS),
        px(x_max),
        py(PEAK_TFLOPS)
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}">{PEAK_TFLOPS} TFLOP/s (bf16 GEMM), {PEAK_TBPS} TB/s (copy)</text>"#,
        px(ridge) + 6.0,
        py(PEAK_TFLOPS) - 6.0
    );
    for p in points {
        if !(p.intensity.is_finite() && p.tflops.is_finite() && p.intensity > 0.0 && p.tflops > 0.0)
        {
            continue;
        }
        let (cx, cy) = (px(p.intensity), py(p.tflops));
        let _ = writeln!(
            svg,
            r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="4" fill="#c0392b"/><text x="{:.1}" y="{:.1}">{} ({:.0}% of roof)</text>"##,
            cx + 6.0,
            cy + 4.0,
            escape(&p.label),
            100.0 * p.tflops / ceiling(p.intensity)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 4.0);
        assert!((quantile(&v, 0.5) - 2.5).abs() < 1e-12);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn roofline_math() {
        // S = 2048, D = 64, fp16: 4·S²·D / (4·S·D·2) = S/2 = 1024 FLOP/byte, compute bound.
        let ai = intensity(2.0, 8.0, 2048.0, 2048.0, 64.0, false, 2.0);
        assert!((ai - 1024.0).abs() < 1e-9);
        assert_eq!(ceiling(ai), PEAK_TFLOPS);
        assert!((ceiling(10.0) - 30.0).abs() < 1e-12);
        // Causal halves the FLOPs, not the compulsory traffic: 512/2/2 = 128.
        assert!((intensity(1.0, 1.0, 512.0, 512.0, 64.0, true, 2.0) - 128.0).abs() < 1e-9);
    }

    #[test]
    fn svgs_are_well_formed_and_labelled() {
        let panel = LatencyPanel {
            title: "2x8x2048x64-causal-f16 <ours>".into(),
            series: vec![
                (
                    "ours".into(),
                    (0..500).map(|i| 40.0 + f64::from(i % 17) * 0.1).collect(),
                ),
                ("cudnn".into(), vec![38.0, 39.0, f64::NAN]),
                ("empty".into(), vec![]),
            ],
        };
        let svg = latency_svg(&[panel]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("&lt;ours&gt;"));
        assert!(svg.contains(">cudnn</text>"));
        // 500 samples thinned to ≤ 300 dots (every 2nd: 250), + 2 for cudnn.
        let dots = svg.matches("<circle").count();
        assert!((200..=302).contains(&dots), "{dots}");
        assert!(!svg.contains("NaN"));
        assert_eq!(latency_svg(&[]).matches("no latency samples").count(), 1);

        let roof = roofline_svg(&[
            RooflinePoint {
                label: "2,8,2048,64".into(),
                intensity: 1024.0,
                tflops: 390.0,
            },
            RooflinePoint {
                label: "bad".into(),
                intensity: f64::NAN,
                tflops: 1.0,
            },
        ]);
        assert!(roof.contains("2,8,2048,64 (50% of roof)"));
        assert!(!roof.contains(">bad"));
        assert!(!roof.contains("NaN"));
    }
}
