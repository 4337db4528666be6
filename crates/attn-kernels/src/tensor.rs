//! Device tensors as the kernels take them: a cudarc view with dims `[batch, heads, seq,
//! head_dim]` and element strides for batch, head and sequence; the last dim is contiguous.
//!
//! `[B,H,S,D]` (PyTorch SDPA) and `[B,S,H,D]` (FlashAttention, candle, mistral.rs) are two
//! stride sets of one type ([`Layout`]); a view may start anywhere inside a larger
//! allocation (a KV cache with spare capacity) and may have any strides, so callers never
//! copy. What a launch reads and writes is checked against the view before anything runs
//! (dims, extent, alignment, aliasing).

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

use crate::KernelError;

/// Element strides of a `[batch, heads, seq, head_dim]` tensor (the head-dim stride is 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Strides {
    /// Elements between consecutive batch entries.
    pub batch: usize,
    /// Elements between consecutive heads.
    pub head: usize,
    /// Elements between consecutive sequence positions (rows).
    pub row: usize,
}

/// The two memory orders callers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    /// `[B, H, S, D]`, contiguous (PyTorch SDPA's order).
    #[default]
    Bhsd,
    /// `[B, S, H, D]`, contiguous (FlashAttention's, candle's and mistral.rs's order).
    Bshd,
}

impl Layout {
    /// The strides of a contiguous tensor of `dims = [batch, heads, seq, head_dim]`.
    pub fn strides(self, dims: [usize; 4]) -> Strides {
        let [_, h, s, d] = dims;
        match self {
            Layout::Bhsd => Strides {
                batch: h * s * d,
                head: s * d,
                row: d,
            },
            Layout::Bshd => Strides {
                batch: s * h * d,
                head: d,
                row: h * d,
            },
        }
    }

    /// `bhsd` / `bshd`.
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Bhsd => "bhsd",
            Layout::Bshd => "bshd",
        }
    }

    /// Parses `bhsd` or `bshd`.
    pub fn parse(s: &str) -> Result<Self, KernelError> {
        match s {
            "bhsd" => Ok(Layout::Bhsd),
            "bshd" => Ok(Layout::Bshd),
            other => Err(KernelError::InvalidTensor {
                tensor: "layout",
                reason: format!("unknown layout `{other}`: expected bhsd or bshd"),
            }),
        }
    }

    /// Reorders a contiguous `[B, H, S, D]` host buffer into this layout.
    pub fn from_bhsd<T: Copy>(self, x: &[T], dims: [usize; 4]) -> Vec<T> {
        self.permute(x, dims, true)
    }

    /// Reorders a host buffer in this layout into contiguous `[B, H, S, D]`.
    pub fn to_bhsd<T: Copy>(self, x: &[T], dims: [usize; 4]) -> Vec<T> {
        self.permute(x, dims, false)
    }

    fn permute<T: Copy>(self, x: &[T], dims: [usize; 4], forward: bool) -> Vec<T> {
        if self == Layout::Bhsd {
            return x.to_vec();
        }
        let [b, h, s, d] = dims;
        let (src, dst) = (Layout::Bhsd.strides(dims), self.strides(dims));
        let (from, to) = if forward { (src, dst) } else { (dst, src) };
        let mut out = x.to_vec();
        for bi in 0..b {
            for hi in 0..h {
                for si in 0..s {
                    let f = bi * from.batch + hi * from.head + si * from.row;
                    let t = bi * to.batch + hi * to.head + si * to.row;
                    out[t..t + d].copy_from_slice(&x[f..f + d]);
                }
            }
        }
        out
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A read-only device tensor: a view, its dims `[batch, heads, seq, head_dim]` and strides.
#[derive(Debug)]
pub struct Tensor<'a, T> {
    pub(crate) view: CudaView<'a, T>,
    pub(crate) dims: [usize; 4],
    pub(crate) strides: Strides,
}

/// A writable device tensor (the output O).
#[derive(Debug)]
pub struct TensorMut<'a, T> {
    pub(crate) view: CudaViewMut<'a, T>,
    pub(crate) dims: [usize; 4],
    pub(crate) strides: Strides,
}

impl<'a, T> Tensor<'a, T> {
    /// A tensor over `view` with explicit strides. Whether every element it names lies
    /// inside the view is checked at launch.
    pub fn new(view: CudaView<'a, T>, dims: [usize; 4], strides: Strides) -> Self {
        Self {
            view,
            dims,
            strides,
        }
    }

    /// A contiguous tensor in `layout` starting at the view's first element.
    pub fn contiguous(view: CudaView<'a, T>, dims: [usize; 4], layout: Layout) -> Self {
        Self::new(view, dims, layout.strides(dims))
    }

    /// A whole contiguous `[B, H, S, D]` buffer.
    pub fn bhsd(slice: &'a CudaSlice<T>, dims: [usize; 4]) -> Self {
        Self::contiguous(slice.as_view(), dims, Layout::Bhsd)
    }

    /// Dims `[batch, heads, seq, head_dim]`.
    pub fn dims(&self) -> [usize; 4] {
        self.dims
    }
    /// Element strides.
    pub fn strides(&self) -> Strides {
        self.strides
    }

    /// The underlying view.
    pub fn view(&self) -> &CudaView<'a, T> {
        &self.view
    }

    /// The rows `rows` along the sequence dim, as a tensor of the same strides (no copy).
    pub fn rows(&self, rows: std::ops::Range<usize>) -> Result<Tensor<'a, T>, KernelError> {
        if rows.start > rows.end || rows.end > self.dims[2] {
            return Err(KernelError::InvalidTensor {
                tensor: "row range",
                reason: format!(
                    "rows {rows:?} are not inside the tensor's {} rows",
                    self.dims[2]
                ),
            });
        }
        let offset = rows.start.saturating_mul(self.strides.row);
        if offset > self.view.len() {
            return Err(KernelError::InvalidTensor {
                tensor: "row range",
                reason: format!("row {} starts past the end of the view", rows.start),
            });
        }
        let mut dims = self.dims;
        dims[2] = rows.len();
        Ok(Tensor {
            view: self.view.slice(offset..),
            dims,
            strides: self.strides,
        })
    }
}

impl<'a, T> TensorMut<'a, T> {
    /// A writable tensor over `view` with explicit strides (checked at launch, including
    /// that no two of its elements share memory).
    pub fn new(view: CudaViewMut<'a, T>, dims: [usize; 4], strides: Strides) -> Self {
        Self {
            view,
            dims,
            strides,
        }
    }

    /// A contiguous tensor in `layout` starting at the view's first element.
    pub fn contiguous(view: CudaViewMut<'a, T>, dims: [usize; 4], layout: Layout) -> Self {
        Self::new(view, dims, layout.strides(dims))
    }

    /// A whole contiguous `[B, H, S, D]` buffer.
    pub fn bhsd(slice: &'a mut CudaSlice<T>, dims: [usize; 4]) -> Self {
        Self::contiguous(slice.as_view_mut(), dims, Layout::Bhsd)
    }

    /// Elements in the underlying view.
    pub fn view_len(&self) -> usize {
        self.view.len()
    }

    pub(crate) fn view_mut(&mut self) -> &mut CudaViewMut<'a, T> {
        &mut self.view
    }

    /// A shorter-lived handle on the same tensor (to pass it to several launches in turn).
    pub fn reborrow(&mut self) -> TensorMut<'_, T> {
        TensorMut {
            view: self.view.slice_mut(..),
            dims: self.dims,
            strides: self.strides,
        }
    }

    /// Dims `[batch, heads, seq, head_dim]`.
    pub fn dims(&self) -> [usize; 4] {
        self.dims
    }
    /// Element strides.
    pub fn strides(&self) -> Strides {
        self.strides
    }
}

/// What a launch may touch of one tensor, once validated: the elements `[0, extent)` of
/// its view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    /// One past the largest element offset the kernel may access (0 for an empty tensor).
    pub extent: usize,
}

/// Validates one tensor of a launch, before anything runs:
/// - its dims are the ones the problem implies (`expected`);
/// - every element it names lies inside the view (`view_len` elements);
/// - the kernel's 16-byte vector loads stay aligned: the view starts on 16 bytes
///   (`base_addr`), and every stride is a multiple of 16 bytes;
/// - an output (`writable`) never names one memory location twice.
#[allow(clippy::too_many_arguments)] // one tensor's description, flattened to plain values for testing
pub(crate) fn check_tensor(
    tensor: &'static str,
    expected: [usize; 4],
    dims: [usize; 4],
    strides: Strides,
    view_len: usize,
    elem_bytes: usize,
    base_addr: u64,
    writable: bool,
) -> Result<Checked, KernelError> {
    let bad = |reason: String| KernelError::InvalidTensor { tensor, reason };
    if dims != expected {
        return Err(bad(format!(
            "dims {dims:?} but the problem needs {expected:?} ([batch, heads, seq, head_dim])"
        )));
    }
    let [b, h, s, d] = dims;
    let extent = if dims.contains(&0) {
        0
    } else {
        [(b, strides.batch), (h, strides.head), (s, strides.row)]
            .iter()
            .try_fold(d, |acc, &(n, st)| {
                (n - 1).checked_mul(st).and_then(|x| x.checked_add(acc))
            })
            .ok_or(KernelError::IndexOverflow("tensor extent"))?
    };
    if extent > view_len {
        return Err(bad(format!(
            "dims {dims:?} with strides (batch {}, head {}, row {}) reach element {} but the view holds {view_len}",
            strides.batch, strides.head, strides.row, extent - 1
        )));
    }
    let vec_elems = 16 / elem_bytes;
    if base_addr % 16 != 0 {
        return Err(KernelError::Misaligned {
            tensor,
            reason: format!(
                "the view starts at address {base_addr:#x}, not on a 16-byte boundary: start it at an element offset that is a multiple of {vec_elems}"
            ),
        });
    }
    for (what, st, n) in [
        ("batch", strides.batch, b),
        ("head", strides.head, h),
        ("row", strides.row, s),
    ] {
        if n > 1 && st % vec_elems != 0 {
            return Err(KernelError::Misaligned {
                tensor,
                reason: format!(
                    "the {what} stride {st} is not a multiple of {vec_elems} elements (16 bytes), which the kernels' vector loads need"
                ),
            });
        }
    }
    if strides.row > i32::MAX as usize {
        return Err(KernelError::IndexOverflow(
            "row stride (32-bit in the kernels)",
        ));
    }
    if writable && !non_overlapping(dims, strides) {
        return Err(bad(format!(
            "strides (batch {}, head {}, row {}) make distinct elements share memory; an output needs distinct locations",
            strides.batch, strides.head, strides.row
        )));
    }
    Ok(Checked { extent })
}

/// Whether no two elements of the tensor share an offset: sorted by stride, each dim's
/// stride must step over everything the smaller dims span.
fn non_overlapping(dims: [usize; 4], strides: Strides) -> bool {
    let mut ds = [
        (1usize, dims[3]),
        (strides.row, dims[2]),
        (strides.head, dims[1]),
        (strides.batch, dims[0]),
    ];
    ds.sort_unstable();
    let mut span = 0usize; // largest offset reachable with the smaller dims
    for (st, n) in ds {
        if n <= 1 {
            continue;
        }
        if st <= span {
            return false;
        }
        span = match (n - 1).checked_mul(st).and_then(|x| x.checked_add(span)) {
            Some(x) => x,
            None => return false,
        };
    }
    true
}

/// Whether the byte ranges `[a, a + a_len)` and `[b, b + b_len)` intersect.
pub(crate) fn ranges_overlap(a: u64, a_len: u64, b: u64, b_len: u64) -> bool {
    a_len > 0 && b_len > 0 && a < b.saturating_add(b_len) && b < a.saturating_add(a_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIMS: [usize; 4] = [2, 3, 5, 64];

    fn check(
        strides: Strides,
        len: usize,
        addr: u64,
        writable: bool,
    ) -> Result<Checked, KernelError> {
        check_tensor("Q", DIMS, DIMS, strides, len, 2, addr, writable)
    }

    #[test]
    fn both_layouts_cover_exactly_the_buffer() {
        let n = DIMS.iter().product::<usize>();
        for layout in [Layout::Bhsd, Layout::Bshd] {
            let c = check(layout.strides(DIMS), n, 0, true).unwrap();
            assert_eq!(c.extent, n, "{layout}");
            assert!(check(layout.strides(DIMS), n - 1, 0, true).is_err());
        }
    }

    #[test]
    fn views_into_a_larger_cache_are_fine() {
        // A KV cache with capacity 16 positions per head, of which 5 are used.
        let st = Layout::Bhsd.strides([2, 3, 16, 64]);
        let c = check(st, 2 * 3 * 16 * 64, 256, false).unwrap();
        assert_eq!(c.extent, st.batch + 2 * st.head + 4 * 64 + 64);
    }

    #[test]
    fn wrong_dims_misalignment_and_overlap_are_typed_errors() {
        let st = Layout::Bhsd.strides(DIMS);
        let n = DIMS.iter().product::<usize>();
        let e = check_tensor("K", [2, 3, 6, 64], DIMS, st, n, 2, 0, false).unwrap_err();
        assert!(e.to_string().contains("[2, 3, 6, 64]"), "{e}");
        assert!(matches!(
            check(st, n, 8, false),
            Err(KernelError::Misaligned { .. })
        ));
        let odd = Strides { row: 68, ..st };
        assert!(matches!(
            check(odd, n * 2, 0, false),
            Err(KernelError::Misaligned { .. })
        ));
        // Heads aliasing each other: fine to read, not to write.
        let aliased = Strides { head: 0, ..st };
        assert!(check(aliased, n, 0, false).is_ok());
        assert!(matches!(
            check(aliased, n, 0, true),
            Err(KernelError::InvalidTensor { .. })
        ));
        // Rows overlapping (row stride < head_dim).
        let tight = Strides { row: 32, ..st };
        assert!(check(tight, n, 0, true).is_err());
    }

    #[test]
    fn layout_permutation_round_trips() {
        let dims = [2, 3, 4, 8];
        let x: Vec<u32> = (0..dims.iter().product::<usize>() as u32).collect();
        let y = Layout::Bshd.from_bhsd(&x, dims);
        assert_ne!(x, y);
        // Element (b=1, h=2, s=3, d=5) sits where the bshd strides say.
        let st = Layout::Bshd.strides(dims);
        let bhsd = Layout::Bhsd.strides(dims);
        assert_eq!(
            y[st.batch + 2 * st.head + 3 * st.row + 5],
            x[bhsd.batch + 2 * bhsd.head + 3 * bhsd.row + 5]
        );
        assert_eq!(Layout::Bshd.to_bhsd(&y, dims), x);
    }

    #[test]
    fn byte_ranges() {
        assert!(ranges_overlap(0, 10, 9, 1));
        assert!(!ranges_overlap(0, 10, 10, 5));
        assert!(!ranges_overlap(0, 0, 0, 5));
    }
}
