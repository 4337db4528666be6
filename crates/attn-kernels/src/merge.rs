//! Merging partial attention results by their log-sum-exp (`kernels/lse_merge.cuh`).
//!
//! Attention over a key set split into disjoint parts is the LSE-weighted mean of the parts'
//! normalized outputs: with `λ = ln Σ_p e^{λ_p}`, `O = Σ_p e^{λ_p − λ} O_p`. Ring attention
//! (attn-dist) and cascade attention run the forward once per key block and merge here. The
//! row arithmetic is the same device function as the split-KV epilogue's (`merge_row`), so an
//! empty row (no part saw a key) comes out as O = 0, LSE = −inf in both.
//!
//! The accumulator is f32 `[B, H, S, D]` with its LSE `[B, H, S]`; parts arrive in the storage
//! type with any strides and cover a row range. The last merge of a row range can write the
//! result straight into the output tensor (and its LSE) instead of back into the accumulator.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use cudarc::driver::{LaunchConfig, PushKernelArg};

use crate::catalog::{self, Arch, Family, UnitKey};
use crate::config::elem_of;
use crate::launch::{driver, FlashAttention, StorageType};
use crate::tensor::{check_tensor, ranges_overlap, Tensor, TensorMut};
use crate::KernelError;

/// The compile unit of the merge kernels (one per arch; the newest that runs is picked).
pub const MERGE_UNIT: UnitKey = UnitKey {
    family: Family::Merge,
    arch: Arch::Sm80,
    elem: catalog::Elem::F16,
    head_dim: 0,
};

/// An f32 accumulator of partial results: O `[B, H, S, D]` and LSE `[B, H, S]`, both
/// contiguous, on one device.
#[derive(Debug)]
pub struct LseAccumulator {
    o: CudaSlice<f32>,
    lse: CudaSlice<f32>,
    dims: [usize; 4],
}

impl LseAccumulator {
    /// Allocates an accumulator for `dims = [B, H, S, D]` on `stream`'s device. Its rows hold
    /// nothing until a merge with `first = true` covers them.
    pub fn new(stream: &Arc<CudaStream>, dims: [usize; 4]) -> Result<Self, KernelError> {
        let [b, h, s, d] = dims;
        if dims.contains(&0) {
            return Err(KernelError::InvalidTensor {
                tensor: "LSE accumulator",
                reason: format!("dims {dims:?} have a zero size"),
            });
        }
        if d % 2 != 0 || d > 256 {
            return Err(KernelError::UnsupportedHeadDim {
                head_dim: d,
                supported: "even head dims up to 256 for the LSE merge",
            });
        }
        let rows = b
            .checked_mul(h)
            .and_then(|x| x.checked_mul(s))
            .ok_or(KernelError::IndexOverflow("accumulator rows"))?;
        let elems = rows
            .checked_mul(d)
            .ok_or(KernelError::IndexOverflow("accumulator elements"))?;
        if s > i32::MAX as usize || h > 65535 || b > 65535 {
            return Err(KernelError::IndexOverflow("accumulator grid (S, H, B)"));
        }
        Ok(Self {
            o: stream
                .alloc_zeros::<f32>(elems)
                .map_err(driver("allocating the LSE accumulator"))?,
            lse: stream
                .alloc_zeros::<f32>(rows)
                .map_err(driver("allocating the LSE accumulator"))?,
            dims,
        })
    }

    /// `[B, H, S, D]`.
    pub fn dims(&self) -> [usize; 4] {
        self.dims
    }

    /// The accumulated O (f32, contiguous `[B, H, S, D]`); meaningful for rows merged at least
    /// once and not finished into an output.
    pub fn o(&self) -> &CudaSlice<f32> {
        &self.o
    }

    /// The accumulated LSE (contiguous `[B, H, S]`), like [`Self::o`].
    pub fn lse(&self) -> &CudaSlice<f32> {
        &self.lse
    }
}

/// One merge into an [`LseAccumulator`].
#[derive(Debug)]
pub struct Merge<'a, T> {
    /// The accumulator rows (positions along S) the part covers.
    pub rows: Range<usize>,
    /// The part: O `[B, H, rows.len(), D]` with any strides, and its natural-log LSE
    /// `[B, H, rows.len()]` contiguous. `None` only finishes the rows (writes `out` from the
    /// accumulator).
    pub part: Option<(Tensor<'a, T>, CudaView<'a, f32>)>,
    /// The accumulator's rows hold nothing yet (this is their first part).
    pub first: bool,
    /// Write the merged rows to this output (`[B, H, S, D]` like the accumulator, any
    /// strides; only `rows` are written) and its LSE (`[B, H, S]` contiguous, when wanted)
    /// instead of back into the accumulator.
    pub out: Option<(TensorMut<'a, T>, Option<CudaViewMut<'a, f32>>)>,
}

/// What one merge launch needs, validated (pure over dims, lengths and addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MergeGeometry {
    pub rows: usize,
    pub grid: (u32, u32, u32),
}

/// Validates a merge against the accumulator's dims: rows inside S, the part's dims, LSE
/// lengths, the output's dims, and that the output overlaps no input.
#[allow(clippy::too_many_arguments)] // flattened descriptions, for testing without a device
pub(crate) fn check_merge(
    acc_dims: [usize; 4],
    rows: &Range<usize>,
    elem_bytes: usize,
    part: Option<([usize; 4], crate::Strides, usize, u64, usize, u64)>,
    out: Option<([usize; 4], crate::Strides, usize, u64)>,
    out_lse: Option<(usize, u64)>,
) -> Result<MergeGeometry, KernelError> {
    let [b, h, s, d] = acc_dims;
    if rows.start > rows.end || rows.end > s {
        return Err(KernelError::InvalidTensor {
            tensor: "merge rows",
            reason: format!("rows {rows:?} are not inside the accumulator's {s} rows"),
        });
    }
    let n = rows.len();
    let mut inputs = Vec::new();
    if let Some((dims, strides, len, addr, lse_len, lse_addr)) = part {
        let c = check_tensor(
            "part O",
            [b, h, n, d],
            dims,
            strides,
            len,
            elem_bytes,
            addr,
            false,
        )?;
        inputs.push(("part O", addr, (c.extent * elem_bytes) as u64));
        if lse_len != b * h * n {
            return Err(KernelError::InvalidTensor {
                tensor: "part LSE",
                reason: format!(
                    "{lse_len} elements but [B, H, rows] = [{b}, {h}, {n}] needs {}",
                    b * h * n
                ),
            });
        }
        inputs.push(("part LSE", lse_addr, (lse_len * 4) as u64));
    }
    if let Some((dims, strides, len, addr)) = out {
        let c = check_tensor("O", acc_dims, dims, strides, len, elem_bytes, addr, true)?;
        let o_bytes = (c.extent * elem_bytes) as u64;
        for &(name, a, l) in &inputs {
            if ranges_overlap(addr, o_bytes, a, l) {
                return Err(KernelError::Overlap {
                    output: "O",
                    input: name,
                });
            }
        }
        if let Some((lse_len, lse_addr)) = out_lse {
            if lse_len != b * h * s {
                return Err(KernelError::InvalidTensor {
                    tensor: "LSE",
                    reason: format!("{lse_len} elements but [B, H, S] needs {}", b * h * s),
                });
            }
            for (name, a, l) in inputs.iter().copied().chain([("O", addr, o_bytes)]) {
                if ranges_overlap(lse_addr, (lse_len * 4) as u64, a, l) {
                    return Err(KernelError::Overlap {
                        output: "LSE",
                        input: name,
                    });
                }
            }
        }
    } else if out_lse.is_some() {
        return Err(KernelError::InvalidTensor {
            tensor: "LSE",
            reason: "an output LSE needs an output O".into(),
        });
    }
    Ok(MergeGeometry {
        rows: n,
        grid: (n.div_ceil(8) as u32, h as u32, b as u32),
    })
}

/// Kernel parameters; the layout of `attn::LseMergeParams` (kernels/lse_merge.cuh).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct LseMergeParams {
    acc_o: u64,
    acc_lse: u64,
    part_o: u64,
    part_lse: u64,
    out: u64,
    out_lse: u64,
    part_stride: [i64; 3],
    out_stride: [i64; 3],
    heads: i32,
    rows: i32,
    acc_rows: i32,
    row0: i32,
    head_dim: i32,
    acc_empty: i32,
}

// SAFETY: plain-old-data with the C layout of the kernel's parameter struct.
unsafe impl cudarc::driver::DeviceRepr for LseMergeParams {}

fn strides_i64(s: crate::Strides) -> [i64; 3] {
    [s.batch as i64, s.head as i64, s.row as i64]
}

impl FlashAttention {
    /// Merges one part into `acc` (or finishes rows into an output), on this launcher's
    /// stream. Validation happens before anything runs; on error nothing is written.
    pub fn merge<T: StorageType>(
        &self,
        acc: &mut LseAccumulator,
        merge: Merge<'_, T>,
    ) -> Result<(), KernelError> {
        let Merge {
            rows,
            part,
            first,
            out,
        } = merge;
        let stream = self.stream();
        let eb = std::mem::size_of::<T>();
        let (mut out_o, mut out_lse) = match out {
            Some((o, l)) => (Some(o), l),
            None => (None, None),
        };
        let mut guards = Vec::new();
        let (part_desc, part_ptrs) = match &part {
            Some((o, lse)) => {
                let (p, g) = o.view.device_ptr(stream);
                let (lp, lg) = lse.device_ptr(stream);
                guards.push(g);
                guards.push(lg);
                (
                    Some((o.dims(), o.strides(), o.view.len(), p, lse.len(), lp)),
                    (p, lp, strides_i64(o.strides())),
                )
            }
            None => (None, (0, 0, [0; 3])),
        };
        let out_desc = match out_o.as_mut() {
            Some(o) => {
                let (dims, strides, len) = (o.dims(), o.strides(), o.view.len());
                let (p, g) = o.view.device_ptr_mut(stream);
                guards.push(g);
                Some((dims, strides, len, p))
            }
            None => None,
        };
        let out_lse_desc = match out_lse.as_mut() {
            Some(l) => {
                let len = l.len();
                let (p, g) = l.device_ptr_mut(stream);
                guards.push(g);
                Some((len, p))
            }
            None => None,
        };
        let geo = check_merge(acc.dims, &rows, eb, part_desc, out_desc, out_lse_desc)?;
        if geo.rows == 0 {
            return Ok(());
        }
        let (f, _) = self.function(
            &MERGE_UNIT,
            &catalog::lse_merge_entry_name(elem_of(T::DTYPE)),
            false,
            0,
        )?;
        let [_, heads, acc_rows, head_dim] = acc.dims;
        let (acc_o, go) = acc.o.device_ptr_mut(stream);
        let (acc_lse, gl) = acc.lse.device_ptr_mut(stream);
        guards.push(go);
        guards.push(gl);
        let params = LseMergeParams {
            acc_o,
            acc_lse,
            part_o: part_ptrs.0,
            part_lse: part_ptrs.1,
            out: out_desc.map_or(0, |d| d.3),
            out_lse: out_lse_desc.map_or(0, |d| d.1),
            part_stride: part_ptrs.2,
            out_stride: out_desc.map_or([0; 3], |d| strides_i64(d.1)),
            heads: heads as i32,
            rows: geo.rows as i32,
            acc_rows: acc_rows as i32,
            row0: rows.start as i32,
            head_dim: head_dim as i32,
            acc_empty: first as i32,
        };
        let mut b = stream.launch_builder(&f);
        b.arg(&params);
        // SAFETY: `params` has the layout of attn::LseMergeParams. `check_merge` proved every
        // row [row0, row0 + rows) of every (b, h) lies inside the accumulator (allocated for
        // its dims), the part's view and the output's view, with 16-byte-aligned starts and
        // strides (the kernel reads pairs), and that the output overlaps no input. The grid
        // (ceil(rows/8), H, B) × 8 warps gives each row one warp and bounds r < rows. The
        // guards keep every buffer's stream ordering until after the launch.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: geo.grid,
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(driver("launching the LSE merge"))?;
        drop(guards);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    const ACC: [usize; 4] = [2, 4, 100, 64];

    fn part(
        n: usize,
        addr: u64,
        lse_addr: u64,
    ) -> ([usize; 4], crate::Strides, usize, u64, usize, u64) {
        let dims = [2, 4, n, 64];
        (
            dims,
            Layout::Bshd.strides(dims),
            dims.iter().product(),
            addr,
            2 * 4 * n,
            lse_addr,
        )
    }

    #[test]
    fn a_part_covers_its_rows_and_the_grid_one_warp_per_row() {
        let g = check_merge(ACC, &(10..40), 2, Some(part(30, 0, 1 << 20)), None, None).unwrap();
        assert_eq!(g.rows, 30);
        assert_eq!(g.grid, (4, 4, 2));
    }

    #[test]
    fn rows_outside_the_accumulator_and_wrong_part_dims_are_refused() {
        assert!(check_merge(ACC, &(90..101), 2, None, None, None).is_err());
        assert!(check_merge(ACC, &(10..40), 2, Some(part(31, 0, 1 << 20)), None, None).is_err());
        let mut p = part(30, 0, 1 << 20);
        p.4 -= 1; // LSE one short
        assert!(check_merge(ACC, &(10..40), 2, Some(p), None, None).is_err());
    }

    #[test]
    fn the_output_may_not_overlap_the_part_and_needs_the_accumulator_dims() {
        let n: usize = ACC.iter().product();
        let st = Layout::Bhsd.strides(ACC);
        let out = Some((ACC, st, n, 0u64));
        let e = check_merge(ACC, &(0..30), 2, Some(part(30, 64, 1 << 24)), out, None).unwrap_err();
        assert!(matches!(e, KernelError::Overlap { output: "O", .. }), "{e}");
        let far = Some((ACC, st, n, 1u64 << 30));
        assert!(check_merge(ACC, &(0..30), 2, Some(part(30, 64, 1 << 24)), far, None).is_ok());
        let wrong = Some(([2, 4, 99, 64], st, n, 1u64 << 30));
        assert!(check_merge(ACC, &(0..30), 2, None, wrong, None).is_err());
        // An output LSE of the wrong length, or without an output O.
        assert!(check_merge(ACC, &(0..30), 2, None, far, Some((799, 1 << 34))).is_err());
        assert!(check_merge(ACC, &(0..30), 2, None, far, Some((800, 1 << 34))).is_ok());
        assert!(check_merge(ACC, &(0..30), 2, None, None, Some((800, 1 << 34))).is_err());
    }

    #[test]
    fn params_match_the_kernel_struct_layout() {
        // 6 pointers, 6 strides, 6 ints (kernels/lse_merge.cuh's LseMergeParams).
        assert_eq!(std::mem::size_of::<LseMergeParams>(), 6 * 8 + 6 * 8 + 6 * 4);
    }
}
