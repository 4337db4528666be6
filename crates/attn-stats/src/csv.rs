//! Reading latency samples from the CSV files benchmarks write.

use crate::StatsError;

/// Reads samples from CSV text in one of two layouts:
///
/// - one number per line, no header;
/// - a header row and comma-separated columns, of which the first whose name starts with
///   `latency_` (case-insensitive, e.g. `latency_ms`, `latency_us`) is read.
///
/// Blank lines and lines starting with `#` are skipped; fields are trimmed and may be
/// wrapped in double quotes (quoted commas are not supported: benchmark CSVs have none).
///
/// ```
/// use attn_stats::samples_from_csv;
/// assert_eq!(samples_from_csv("0.25\n0.26\n\n0.24\n").unwrap(), vec![0.25, 0.26, 0.24]);
/// let csv = "shape,latency_ms,tflops\n1x8x512x64,0.0121,88.7\n1x8x512x64,0.0123,87.3\n";
/// assert_eq!(samples_from_csv(csv).unwrap(), vec![0.0121, 0.0123]);
/// assert!(samples_from_csv("shape,tflops\na,1.0\n").is_err()); // no latency_* column
/// assert!(samples_from_csv("0.25\nNaN\n").is_err());
/// ```
///
/// # Errors
/// [`StatsError::CsvEmpty`] without samples, [`StatsError::CsvNoLatencyColumn`] for a header
/// without a `latency_*` column, [`StatsError::CsvFieldCount`] for a ragged line (or several
/// values per line without a header), [`StatsError::CsvNotNumber`] and
/// [`StatsError::CsvNonFinite`] for a bad value; each names the one-based line.
pub fn samples_from_csv(text: &str) -> Result<Vec<f64>, StatsError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'));
    let Some((first_no, first)) = lines.next() else {
        return Err(StatsError::CsvEmpty);
    };
    let header = fields(first);
    let is_header = header.first().is_some_and(|f| f.parse::<f64>().is_err());
    let (column, width) = if is_header {
        let column = header
            .iter()
            .position(|name| name.to_ascii_lowercase().starts_with("latency_"))
            .ok_or_else(|| StatsError::CsvNoLatencyColumn {
                header: first.to_string(),
            })?;
        (column, header.len())
    } else {
        (0, 1)
    };
    let data_lines = std::iter::once((first_no, first))
        .filter(|_| !is_header)
        .chain(lines);
    let mut samples = Vec::new();
    for (line_no, line) in data_lines {
        let row = fields(line);
        if row.len() != width {
            return Err(StatsError::CsvFieldCount {
                line: line_no,
                expected: width,
                found: row.len(),
            });
        }
        let text = row.get(column).copied().unwrap_or_default();
        let value: f64 = text.parse().map_err(|_| StatsError::CsvNotNumber {
            line: line_no,
            text: text.to_string(),
        })?;
        if !value.is_finite() {
            return Err(StatsError::CsvNonFinite {
                line: line_no,
                text: text.to_string(),
            });
        }
        samples.push(value);
    }
    if samples.is_empty() {
        return Err(StatsError::CsvEmpty);
    }
    Ok(samples)
}

fn fields(line: &str) -> Vec<&str> {
    line.split(',')
        .map(|f| {
            let f = f.trim();
            f.strip_prefix('"')
                .and_then(|g| g.strip_suffix('"'))
                .unwrap_or(f)
                .trim()
        })
        .collect()
}
