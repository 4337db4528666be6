//! `.npy` reading and writing shared by the subcommands (f16, f32, f64, int32, uint8), via
//! `npyz`.

use std::{fs::File, io::BufWriter, path::Path};

use anyhow::{bail, Context};
use npyz::WriterBuilder;

/// An array read from a `.npy` file: its shape, its element type and its values widened to
/// f64 (u8 arrays keep their bytes in `bytes`).
#[derive(Debug, Clone)]
pub struct NpyArray {
    /// Dimensions, C order.
    pub shape: Vec<usize>,
    /// The numpy type string (`<f2`, `<f4`, `<f8`, `<i4`, `|u1`).
    pub dtype: String,
    /// Values as f64 (exact for all accepted float types).
    pub data: Vec<f64>,
}

impl NpyArray {
    /// The shape as `[B, H, S, D]`, or an error naming the file.
    pub fn shape4(&self, what: &str) -> anyhow::Result<[usize; 4]> {
        match self.shape[..] {
            [b, h, s, d] => Ok([b, h, s, d]),
            _ => bail!(
                "{what}: expected a 4-D [B,H,S,D] array, got shape {:?}",
                self.shape
            ),
        }
    }
}

/// Reads a C-order `.npy` of f16, f32, f64, int32 or uint8 values.
pub fn read(path: &Path) -> anyhow::Result<NpyArray> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file = npyz::NpyFile::new(&bytes[..])
        .with_context(|| format!("{}: not a valid .npy file", path.display()))?;
    if file.order() != npyz::Order::C {
        bail!(
            "{}: Fortran-order arrays are not supported; save with np.ascontiguousarray",
            path.display()
        );
    }
    let shape: Vec<usize> = file.shape().iter().map(|&d| d as usize).collect();
    let dtype = match file.dtype() {
        npyz::DType::Plain(ts) => ts.to_string(),
        other => bail!(
            "{}: unsupported dtype {other:?}; expected f16, f32, f64, int32 or uint8",
            path.display()
        ),
    };
    let ctx = || format!("{}: data truncated or corrupt", path.display());
    let data: Vec<f64> = match dtype.as_str() {
        "<f2" => file
            .into_vec::<half::f16>()
            .with_context(ctx)?
            .into_iter()
            .map(f64::from)
            .collect(),
        "<f4" => file
            .into_vec::<f32>()
            .with_context(ctx)?
            .into_iter()
            .map(f64::from)
            .collect(),
        "<f8" => file.into_vec::<f64>().with_context(ctx)?,
        "<i4" => file
            .into_vec::<i32>()
            .with_context(ctx)?
            .into_iter()
            .map(f64::from)
            .collect(),
        "|u1" => file
            .into_vec::<u8>()
            .with_context(ctx)?
            .into_iter()
            .map(f64::from)
            .collect(),
        other => bail!(
            "{}: unsupported dtype `{other}`; expected <f2, <f4, <f8, <i4 or |u1",
            path.display()
        ),
    };
    let expected: usize = shape.iter().product();
    if data.len() != expected {
        bail!(
            "{}: shape {:?} needs {expected} values, file has {}",
            path.display(),
            shape,
            data.len()
        );
    }
    Ok(NpyArray { shape, dtype, data })
}

/// Reads a C-order int32 `.npy` (`<i4`): its shape and values.
pub fn read_i32(path: &Path) -> anyhow::Result<(Vec<usize>, Vec<i32>)> {
    let arr = read(path)?;
    if arr.dtype != "<i4" {
        bail!(
            "{}: dtype `{}` is not int32 (`<i4`)",
            path.display(),
            arr.dtype
        );
    }
    // Exact: every value came from an i32.
    Ok((arr.shape, arr.data.iter().map(|&x| x as i32).collect()))
}

/// Writes `data` with `shape` as a C-order `.npy` of element type `T`.
pub fn write<T>(path: &Path, shape: &[usize], data: &[T]) -> anyhow::Result<()>
where
    T: npyz::AutoSerialize + Copy,
{
    let expected: usize = shape.iter().product();
    if expected != data.len() {
        bail!(
            "internal: writing {} values with shape {shape:?}",
            data.len()
        );
    }
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let shape64: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&shape64)
        .writer(BufWriter::new(file))
        .begin_nd()
        .with_context(|| format!("writing {}", path.display()))?;
    writer
        .extend(data.iter().copied())
        .with_context(|| format!("writing {}", path.display()))?;
    writer
        .finish()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_f32_and_f16() {
        let dir = std::env::temp_dir().join(format!("xtask-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.npy");
        write(&p, &[1, 2, 1, 3], &[1.5f32, -2.0, 3.25, 0.0, 7.0, -1.0]).unwrap();
        let a = read(&p).unwrap();
        assert_eq!(a.shape, vec![1, 2, 1, 3]);
        assert_eq!(a.dtype, "<f4");
        assert_eq!(a.data, vec![1.5, -2.0, 3.25, 0.0, 7.0, -1.0]);
        let h: Vec<half::f16> = [0.5f32, 1.0]
            .iter()
            .map(|&x| half::f16::from_f32(x))
            .collect();
        write(&p, &[2], &h).unwrap();
        let a = read(&p).unwrap();
        assert_eq!(a.dtype, "<f2");
        assert_eq!(a.data, vec![0.5, 1.0]);
    }

    #[test]
    fn int32_round_trip() {
        let dir = std::env::temp_dir().join(format!("xtask-npy-i-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("i.npy");
        write(&p, &[2, 2], &[0i32, -7, i32::MAX, i32::MIN]).unwrap();
        let (shape, data) = read_i32(&p).unwrap();
        assert_eq!(shape, vec![2, 2]);
        assert_eq!(data, vec![0, -7, i32::MAX, i32::MIN]);
        write(&p, &[2], &[1.0f32, 2.0]).unwrap();
        let msg = format!("{:#}", read_i32(&p).unwrap_err());
        assert!(msg.contains("not int32"), "{msg}");
    }

    #[test]
    fn truncated_file_is_an_error() {
        let dir = std::env::temp_dir().join(format!("xtask-npy-t-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.npy");
        write(&p, &[4, 4], &[1.0f64; 16]).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 9]).unwrap();
        assert!(read(&p).is_err());
        std::fs::write(&p, b"not an npy").unwrap();
        assert!(read(&p).is_err());
    }
}
