//! Batches whose sequences differ in length: packed variable-length Q/K/V (FlashAttention's
//! `flash_attn_varlen_func`), KV caches with per-sequence lengths (`seqused_k`, FlashAttention's
//! `cache_seqlens`) and paged KV caches (vLLM's PagedAttention layout, FlashAttention's
//! `block_table`), for [`FlashAttention::forward_sequences`].
//!
//! Each sequence is the independent problem of its own lengths, with causal and window
//! alignment computed per sequence; attn-ref's `reference::varlen` and `reference::paged` are
//! the definitions the GPU tests check against.
//!
//! Layouts (each a [`Tensor`] view with any strides, last dim contiguous):
//! - dense Q/O: `[B, Hq, Sq, D]`, LSE `[B, Hq, Sq]`;
//! - packed Q/O ([`QueryRows::Packed`]): `[1, Hq, total_q, D]` — the `[total_q, Hq, D]`
//!   buffer of FlashAttention is `Tensor::new(view, [1, Hq, total_q, D], Layout::Bshd…)` —
//!   and LSE `[Hq, total_q]` (FlashAttention's varlen LSE);
//! - dense K/V: `[B, Hkv, Sk, D]`; packed K/V: `[1, Hkv, total_k, D]`;
//! - paged K/V ([`KeyRows::Paged`]): the caches `[num_blocks, page_size, Hkv, D]` seen as
//!   `[num_blocks, Hkv, page_size, D]` tensors (a bshd view), page size a multiple of 16, and
//!   a block table `[B, max_blocks_per_seq]`.
//!
//! Device-resident indices cannot be checked without a host sync, so the kernel clamps every
//! one of them into the host-checked sizes before it addresses memory: a `cu_seqlens` entry
//! into `0..=total`, a `seqused_k` entry into `0..=capacity`, a block-table entry into
//! `0..num_blocks`. A corrupt index therefore gives wrong rows, never an out-of-bounds access.
//! Give the host copies ([`Indices::with_host`]) to get typed errors before launch instead.
//!
//! The problem passed with the tensors gives B (the number of sequences), the heads, D, the
//! causal mode, scale and features. Its `q_len` is Sq for dense Q and the longest sequence
//! (`max_seqlen_q`, which sizes the grid) for packed Q: rows of a sequence past it are not
//! computed. Its `kv_len` is Sk for dense K/V and is not used for packed or paged K/V.
//!
//! These launches run in the general entry points (the ones with the score-modifying
//! features): on sm_90 the Hopper kernel's for varlen batches, KV-cache lengths and paged
//! caches whose longest query sequence exceeds 64 rows (`Engine::Auto`; `Engine::Hopper`
//! takes any), which split the keys of a grid that leaves SMs idle (chunked prefill: a few
//! blocks of new queries against a long cache; `hopper_seq_splits`, or
//! [`crate::ForwardOptions::splits`]), causal launches included; the mma.sync kernel's
//! everywhere else, which split unmasked launches only. Decode-shaped launches run the decode
//! kernel.

use attn_ref::{reference::varlen::check_cu_seqlens, AttnError, AttnShape, Causal, Problem};
use cudarc::driver::{CudaView, DevicePtr, SyncOnDrop};

use crate::{
    launch::{Forward, FwdSeqs, LaunchExtras},
    FlashAttention, KernelError, LaunchInfo, StorageType, Tensor, TensorMut,
};

/// An int32 index array on the device, with an optional host copy of the same values that
/// is checked before launch (see the module documentation for what happens without it).
#[derive(Debug)]
pub struct Indices<'a> {
    /// The array the kernel reads.
    pub device: CudaView<'a, i32>,
    /// The same values on the host, for validation.
    pub host: Option<&'a [i32]>,
}

impl<'a> Indices<'a> {
    /// A device array with no host copy.
    pub fn new(device: CudaView<'a, i32>) -> Self {
        Self { device, host: None }
    }

    /// Adds the host copy, checked before launch.
    pub fn with_host(mut self, host: &'a [i32]) -> Self {
        self.host = Some(host);
        self
    }
}

/// How the queries of the batch are stored.
#[derive(Debug, Default)]
pub enum QueryRows<'a> {
    /// `[B, Hq, Sq, D]`: every sequence has Sq rows.
    #[default]
    Dense,
    /// Sequences packed back to back, `[1, Hq, total_q, D]`; `cu_seqlens` holds the `B + 1`
    /// prefix sums (sequence b owns rows `cu[b]..cu[b + 1]`).
    Packed {
        /// `cu_seqlens_q`.
        cu_seqlens: Indices<'a>,
    },
}

/// How the keys and values of the batch are stored.
#[derive(Debug, Default)]
pub enum KeyRows<'a> {
    /// `[B, Hkv, Sk, D]`: every sequence has Sk keys (or `seqused_k[b]`).
    #[default]
    Dense,
    /// Sequences packed back to back, `[1, Hkv, total_k, D]`, with `B + 1` prefix sums.
    Packed {
        /// `cu_seqlens_k`.
        cu_seqlens: Indices<'a>,
    },
    /// A paged cache `[num_blocks, Hkv, page_size, D]` and the block table
    /// `[B, max_blocks_per_seq]`: key j of sequence b is row `j % page_size` of page
    /// `block_table[b][j / page_size]`. Needs `seqused_k`.
    Paged {
        /// `block_table`, row-major `[B, max_blocks_per_seq]`.
        block_table: Indices<'a>,
    },
}

/// The sequence layout of one [`FlashAttention::forward_sequences`] call.
#[derive(Debug, Default)]
pub struct Sequences<'a> {
    /// Query (and output) rows.
    pub queries: QueryRows<'a>,
    /// Key and value rows.
    pub keys: KeyRows<'a>,
    /// `[B]` keys each sequence uses (of its dense rows, its packed rows or its pages).
    /// Required with [`KeyRows::Paged`].
    pub seqused_k: Option<Indices<'a>>,
}

/// The expected dims of a launch's tensors, from the problem and the sequence layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expected {
    pub q: [usize; 4],
    pub kv: [usize; 4],
    pub lse: usize,
}

impl Expected {
    /// Dense `[B, H, S, D]` tensors of `s`.
    pub(crate) fn dense(s: &AttnShape) -> Self {
        Self {
            q: crate::launch::dims_q(s),
            kv: crate::launch::dims_kv(s),
            lse: s.lse_elems(),
        }
    }
}

/// What [`plan_sequences`] derives: the tensors' expected dims and the kernel's scalars
/// (pointers still 0; the launcher binds them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SeqPlan {
    pub expected: Expected,
    pub seqs: FwdSeqs,
    /// The kernel's `kv_len`: dense Sk, the paged capacity, or 0 (packed: from `cu_seqlens_k`).
    pub kv_len: usize,
    pub paged: bool,
}

impl SeqPlan {
    /// The most keys one sequence can have (what split counts are sized by): dense keys' Sk,
    /// a paged cache's capacity, packed keys' `total_k`.
    pub(crate) fn keys_bound(&self) -> usize {
        if self.kv_len > 0 {
            self.kv_len
        } else {
            self.seqs.total_k as usize
        }
    }
}

/// Lengths of the device index arrays, and the host copies when given: what
/// [`plan_sequences`] checks. Pure, so it is testable without a device.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct IndexLens<'a> {
    pub cu_q: Option<(usize, Option<&'a [i32]>)>,
    pub cu_k: Option<(usize, Option<&'a [i32]>)>,
    pub block_table: Option<(usize, Option<&'a [i32]>)>,
    pub seqused_k: Option<(usize, Option<&'a [i32]>)>,
}

impl<'a> IndexLens<'a> {
    pub(crate) fn of(seqs: &Sequences<'a>) -> Self {
        let l = |i: &Indices<'a>| (i.device.len(), i.host);
        Self {
            cu_q: match &seqs.queries {
                QueryRows::Packed { cu_seqlens } => Some(l(cu_seqlens)),
                QueryRows::Dense => None,
            },
            cu_k: match &seqs.keys {
                KeyRows::Packed { cu_seqlens } => Some(l(cu_seqlens)),
                _ => None,
            },
            block_table: match &seqs.keys {
                KeyRows::Paged { block_table } => Some(l(block_table)),
                _ => None,
            },
            seqused_k: seqs.seqused_k.as_ref().map(l),
        }
    }
}

fn i32_size(what: &'static str, x: usize) -> Result<i32, KernelError> {
    i32::try_from(x).map_err(|_| KernelError::IndexOverflow(what))
}

fn invalid(tensor: &'static str, reason: String) -> KernelError {
    KernelError::InvalidTensor { tensor, reason }
}

/// Checks a sequence layout against the problem and the tensors' dims (`q_dims`: Q's,
/// `k_dims`: K's, which V must equal — the caller checks V and O against the result), and the
/// host copies of the indices when given. Returns the expected dims and the kernel's scalars.
pub(crate) fn plan_sequences(
    problem: &Problem,
    idx: &IndexLens<'_>,
    q_dims: [usize; 4],
    k_dims: [usize; 4],
) -> Result<SeqPlan, KernelError> {
    let s = problem.shape();
    let (b, hq, hkv, d) = (s.batch(), s.q_heads(), s.kv_heads(), s.head_dim());
    let mut seqs = FwdSeqs {
        bottom_right: i32::from(problem.causal() == Causal::BottomRight),
        ..FwdSeqs::default()
    };
    // Queries.
    let (q, lse) = match idx.cu_q {
        None => (crate::launch::dims_q(s), s.lse_elems()),
        Some((len, host)) => {
            if len != b + 1 {
                return Err(AttnError::CuSeqlensLength {
                    name: "cu_seqlens_q",
                    expected: b + 1,
                    got: len,
                }
                .into());
            }
            if q_dims[0] != 1 {
                return Err(invalid(
                    "Q",
                    format!(
                        "packed (varlen) queries are one [1, Hq, total_q, D] tensor, got batch {}",
                        q_dims[0]
                    ),
                ));
            }
            let total_q = q_dims[2];
            seqs.total_q = i32_size("total_q", total_q)?;
            if let Some(cu) = host {
                let off = check_cu_seqlens("cu_seqlens_q", cu, b)?;
                check_total("cu_seqlens_q", &off, total_q, "Q's rows (total_q)")?;
                let longest = off.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
                if longest > s.q_len() {
                    return Err(AttnError::InvalidArgument(format!(
                        "a sequence has {longest} query rows but the problem's q_len \
                         (max_seqlen_q, which sizes the grid) is {}; pass the longest length",
                        s.q_len()
                    ))
                    .into());
                }
            }
            ([1, hq, total_q, d], hq * total_q)
        }
    };
    // Keys.
    let mut cu_k_host = None;
    let (kv, kv_len, paged) = match (idx.cu_k, idx.block_table) {
        (None, None) => (crate::launch::dims_kv(s), s.kv_len(), false),
        (Some((len, host)), None) => {
            if len != b + 1 {
                return Err(AttnError::CuSeqlensLength {
                    name: "cu_seqlens_k",
                    expected: b + 1,
                    got: len,
                }
                .into());
            }
            if k_dims[0] != 1 {
                return Err(invalid(
                    "K",
                    format!(
                        "packed (varlen) keys are one [1, Hkv, total_k, D] tensor, got batch {}",
                        k_dims[0]
                    ),
                ));
            }
            let total_k = k_dims[2];
            seqs.total_k = i32_size("total_k", total_k)?;
            if let Some(cu) = host {
                let off = check_cu_seqlens("cu_seqlens_k", cu, b)?;
                check_total("cu_seqlens_k", &off, total_k, "K's rows (total_k)")?;
                cu_k_host = Some(off);
            }
            ([1, hkv, total_k, d], 0, false)
        }
        (None, Some((len, host))) => {
            let (num_blocks, page_size) = (k_dims[0], k_dims[2]);
            if page_size == 0 || page_size % 16 != 0 {
                return Err(AttnError::InvalidPageSize(page_size).into());
            }
            if num_blocks == 0 {
                return Err(invalid("K", "a paged cache needs at least one page".into()));
            }
            if len == 0 || len % b != 0 {
                return Err(AttnError::BlockTableShape { len, batch: b }.into());
            }
            let max_blocks = len / b;
            let capacity = max_blocks
                .checked_mul(page_size)
                .ok_or(KernelError::IndexOverflow("max_blocks_per_seq · page_size"))?;
            seqs.max_blocks = i32_size("max_blocks_per_seq", max_blocks)?;
            seqs.page_size = i32_size("page_size", page_size)?;
            seqs.num_blocks = i32_size("num_blocks", num_blocks)?;
            (seqs.page_mul, seqs.page_shift) = page_divisor(page_size);
            i32_size("max_blocks_per_seq · page_size", capacity)?;
            if idx.seqused_k.is_none() {
                return Err(AttnError::InvalidArgument(
                    "a paged KV cache needs seqused_k (the keys each sequence uses)".into(),
                )
                .into());
            }
            if let Some(table) = host {
                check_len_host("block_table", len, table.len())?;
                let used = idx.seqused_k.and_then(|(_, h)| h);
                for seq in 0..b {
                    // The pages a sequence uses; all of its row without host lengths.
                    let keys = used
                        .and_then(|u| u.get(seq))
                        .map_or(capacity, |&u| usize::try_from(u).unwrap_or(0).min(capacity));
                    let row = &table[seq * max_blocks..][..max_blocks];
                    for (slot, &index) in row.iter().enumerate().take(keys.div_ceil(page_size)) {
                        if index < 0 || index as usize >= num_blocks {
                            return Err(AttnError::BlockIndexOutOfRange {
                                batch: seq,
                                slot,
                                index: i64::from(index),
                                num_blocks,
                            }
                            .into());
                        }
                    }
                }
            }
            ([num_blocks, hkv, page_size, d], capacity, true)
        }
        (Some(_), Some(_)) => {
            return Err(AttnError::InvalidArgument(
                "keys are either packed (cu_seqlens_k) or paged (block_table), not both".into(),
            )
            .into())
        }
    };
    // Keys used per sequence.
    if let Some((len, host)) = idx.seqused_k {
        check_len_host("seqused_k", b, len)?;
        if let Some(used) = host {
            check_len_host("seqused_k", b, used.len())?;
            for (seq, &u) in used.iter().enumerate() {
                let cap = match &cu_k_host {
                    Some(off) => off[seq + 1] - off[seq],
                    None if idx.cu_k.is_some() => usize::MAX, // unknown without the host copy
                    None => kv_len,
                };
                if u < 0 || u as usize > cap {
                    return Err(AttnError::SequsedOutOfRange {
                        batch: seq,
                        seqused: i64::from(u),
                        capacity: cap,
                    }
                    .into());
                }
            }
        }
    }
    Ok(SeqPlan {
        expected: Expected { q, kv, lse },
        seqs,
        kv_len,
        paged,
    })
}

/// Constants for dividing by `d` (≥ 2) with a multiply-high and a shift, exact for every
/// `0 ≤ n < 2³¹`: `n / d = umulhi(n, mul) >> shift` (kernels/load.cuh `PageDiv`). With
/// `l = ⌈log₂ d⌉`, `mul = ⌈2^(31+l) / d⌉` and `shift = l − 1`: the error of `mul` is below
/// `d`, so `n·mul / 2^(31+l)` exceeds `n/d` by less than `2^−l ≤ 1/d`, never reaching the
/// next integer (Granlund and Montgomery 1994, as `cutlass::FastDivmod`).
pub(crate) fn page_divisor(d: usize) -> (u32, i32) {
    let d = d.max(2) as u64;
    let l = 64 - (d - 1).leading_zeros() as u64; // ⌈log₂ d⌉ ≥ 1
    let mul = (1u64 << (31 + l)).div_ceil(d);
    (mul as u32, (l - 1) as i32)
}

fn check_total(
    name: &'static str,
    offsets: &[usize],
    total: usize,
    what: &str,
) -> Result<(), KernelError> {
    let last = offsets.last().copied().unwrap_or(0);
    if last != total {
        return Err(AttnError::InvalidArgument(format!(
            "{name} ends at {last} but {what} is {total}: the last prefix sum must equal it"
        ))
        .into());
    }
    Ok(())
}

fn check_len_host(what: &'static str, expected: usize, got: usize) -> Result<(), KernelError> {
    if expected != got {
        return Err(KernelError::BufferLength {
            tensor: what,
            expected,
            got,
        });
    }
    Ok(())
}

/// Device addresses of a sequence layout's index arrays on `stream`, with the guards that
/// keep cudarc's stream ordering until the launch.
pub(crate) fn bind_indices<'a>(
    stream: &'a cudarc::driver::CudaStream,
    seqs: &'a Sequences<'_>,
    out: &mut FwdSeqs,
) -> Vec<SyncOnDrop<'a>> {
    let mut guards = Vec::new();
    let mut bind = |i: &'a Indices<'_>| {
        let (p, g) = i.device.device_ptr(stream);
        guards.push(g);
        p
    };
    if let QueryRows::Packed { cu_seqlens } = &seqs.queries {
        out.cu_q = bind(cu_seqlens);
    }
    match &seqs.keys {
        KeyRows::Packed { cu_seqlens } => out.cu_k = bind(cu_seqlens),
        KeyRows::Paged { block_table } => out.block_table = bind(block_table),
        KeyRows::Dense => {}
    }
    if let Some(u) = &seqs.seqused_k {
        out.seqused_k = bind(u);
    }
    guards
}

impl FlashAttention {
    /// The f16/bf16 forward over a batch of sequences of different lengths: packed (varlen)
    /// queries and/or keys, per-sequence key counts, or a paged KV cache (see the module
    /// documentation for the layouts and what the problem's lengths mean). Composes with
    /// both causal alignments, GQA, the window, softcap, ALiBi and sinks, per sequence.
    ///
    /// Errors before anything is written: tensors whose dims do not match the layout, index
    /// arrays of the wrong length, malformed host copies of the indices, options these
    /// launches lack (an mma.sync config other than the general one; split-KV under a causal
    /// mask on the mma.sync engine).
    pub fn forward_sequences<T: StorageType>(
        &self,
        args: Forward<'_, T>,
        seqs: Sequences<'_>,
    ) -> Result<LaunchInfo, KernelError> {
        self.launch(
            args,
            LaunchExtras {
                seqs: Some(seqs),
                ..LaunchExtras::default()
            },
        )
    }
}

/// Host copies of a sequence layout's index arrays, for
/// [`FlashAttention::forward_sequences_host`]: `None` for what the layout does not use.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostSequences<'a> {
    /// `[B + 1]` prefix sums of the query lengths (packed Q).
    pub cu_seqlens_q: Option<&'a [i32]>,
    /// `[B + 1]` prefix sums of the key lengths (packed K/V).
    pub cu_seqlens_k: Option<&'a [i32]>,
    /// `[B, max_blocks_per_seq]` pages (paged K/V).
    pub block_table: Option<&'a [i32]>,
    /// `[B]` keys used per sequence.
    pub seqused_k: Option<&'a [i32]>,
}

/// A host buffer with the dims and layout of the tensor it holds.
#[derive(Debug, Clone, Copy)]
pub struct HostTensor<'a, T> {
    /// The elements.
    pub data: &'a [T],
    /// `[B, H, S, D]` dims (`[1, H, total, D]` packed; `[num_blocks, Hkv, page_size, D]`
    /// paged).
    pub dims: [usize; 4],
    /// How `data` is laid out (packed and paged buffers are [`crate::Layout::Bshd`]).
    pub layout: crate::Layout,
}

impl FlashAttention {
    /// Host convenience for [`FlashAttention::forward_sequences`]: uploads Q, K, V and the
    /// index arrays (whose host copies are then also validated), runs into a NaN-poisoned O
    /// (Q's dims and layout) and LSE, and downloads both. For tests, the CLI and benchmarks.
    pub fn forward_sequences_host<T: StorageType>(
        &self,
        problem: &Problem,
        q: HostTensor<'_, T>,
        k: HostTensor<'_, T>,
        v: HostTensor<'_, T>,
        seqs: &HostSequences<'_>,
        opts: &crate::ForwardOptions,
    ) -> Result<crate::HostOutput<T>, KernelError> {
        let s = self.stream();
        let err = |context| move |source| KernelError::Driver { context, source };
        let up = |x: &[T], what| s.clone_htod(x).map_err(err(what));
        // Device buffers cannot be empty; an empty index array is caught by the checks.
        let up_i = |x: Option<&[i32]>| {
            let x = x.unwrap_or(&[]);
            s.clone_htod(if x.is_empty() { &[0][..] } else { x })
                .map_err(err("uploading an index array"))
        };
        let (dq, dk, dv) = (
            up(q.data, "uploading Q")?,
            up(k.data, "uploading K")?,
            up(v.data, "uploading V")?,
        );
        let hq = problem.shape().q_heads();
        let lse_len = match seqs.cu_seqlens_q {
            Some(_) => hq * q.dims[2],
            None => q.dims[0] * hq * q.dims[2],
        };
        let mut o = s
            .clone_htod(&vec![T::from_f32(f32::NAN); q.data.len()])
            .map_err(err("allocating O"))?;
        let mut lse = s
            .clone_htod(&vec![f32::NAN; lse_len.max(1)])
            .map_err(err("allocating LSE"))?;
        let (cu_q, cu_k, table, used) = (
            up_i(seqs.cu_seqlens_q)?,
            up_i(seqs.cu_seqlens_k)?,
            up_i(seqs.block_table)?,
            up_i(seqs.seqused_k)?,
        );
        fn idx<'b>(dev: &'b cudarc::driver::CudaSlice<i32>, host: &'b [i32]) -> Indices<'b> {
            // The device copy has the host copy's length (an empty one was padded above).
            Indices::new(dev.slice(..host.len().max(1))).with_host(host)
        }
        let layout = Sequences {
            queries: match seqs.cu_seqlens_q {
                Some(h) => QueryRows::Packed {
                    cu_seqlens: idx(&cu_q, h),
                },
                None => QueryRows::Dense,
            },
            keys: match (seqs.cu_seqlens_k, seqs.block_table) {
                (Some(h), _) => KeyRows::Packed {
                    cu_seqlens: idx(&cu_k, h),
                },
                (None, Some(h)) => KeyRows::Paged {
                    block_table: idx(&table, h),
                },
                (None, None) => KeyRows::Dense,
            },
            seqused_k: seqs.seqused_k.map(|h| idx(&used, h)),
        };
        let launch = self.forward_sequences(
            Forward {
                problem,
                q: Tensor::contiguous(dq.as_view(), q.dims, q.layout),
                k: Tensor::contiguous(dk.as_view(), k.dims, k.layout),
                v: Tensor::contiguous(dv.as_view(), v.dims, v.layout),
                o: TensorMut::contiguous(o.as_view_mut(), q.dims, q.layout),
                lse: Some(lse.slice_mut(..lse_len.max(1))),
                options: opts.clone(),
            },
            layout,
        )?;
        let o = s.clone_dtoh(&o).map_err(err("downloading O"))?;
        let mut lse = s.clone_dtoh(&lse).map_err(err("downloading LSE"))?;
        lse.truncate(lse_len);
        Ok(crate::HostOutput { o, lse, launch })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(b: usize, sq: usize, sk: usize, causal: Causal) -> Problem {
        Problem::new(AttnShape::new(b, 4, 2, sq, sk, 64).unwrap(), causal)
    }

    fn lens<'a>(
        cu_q: Option<&'a [i32]>,
        cu_k: Option<&'a [i32]>,
        table: Option<&'a [i32]>,
        used: Option<&'a [i32]>,
    ) -> IndexLens<'a> {
        let l = |x: Option<&'a [i32]>| x.map(|h| (h.len(), Some(h)));
        IndexLens {
            cu_q: l(cu_q),
            cu_k: l(cu_k),
            block_table: l(table),
            seqused_k: l(used),
        }
    }

    #[test]
    fn varlen_dims_and_scalars() {
        let p = problem(3, 7, 9, Causal::BottomRight);
        let (cu_q, cu_k) = ([0, 3, 3, 10], [0, 9, 12, 20]);
        let plan = plan_sequences(
            &p,
            &lens(Some(&cu_q), Some(&cu_k), None, None),
            [1, 4, 10, 64],
            [1, 2, 20, 64],
        )
        .unwrap();
        assert_eq!(plan.expected.q, [1, 4, 10, 64]);
        assert_eq!(plan.expected.kv, [1, 2, 20, 64]);
        assert_eq!(plan.expected.lse, 4 * 10);
        assert_eq!((plan.seqs.total_q, plan.seqs.total_k), (10, 20));
        assert_eq!(plan.keys_bound(), 20, "packed keys: total_k");
        assert_eq!(plan.seqs.bottom_right, 1);
        assert!(!plan.paged);
        // Dense queries against packed keys: Q keeps [B, Hq, Sq, D].
        let plan = plan_sequences(
            &p,
            &lens(None, Some(&cu_k), None, None),
            [3, 4, 7, 64],
            [1, 2, 20, 64],
        )
        .unwrap();
        assert_eq!(
            (plan.expected.q, plan.expected.lse),
            ([3, 4, 7, 64], 3 * 4 * 7)
        );
    }

    #[test]
    fn malformed_host_indices_are_typed_errors() {
        let p = problem(2, 8, 8, Causal::None);
        let plan = |cu_q: &[i32], q_rows: usize| {
            plan_sequences(
                &p,
                &lens(Some(cu_q), None, None, None),
                [1, 4, q_rows, 64],
                [2, 2, 8, 64],
            )
        };
        assert!(plan(&[0, 4, 8], 8).is_ok());
        // Wrong length, not monotone, not starting at 0, total mismatch, too long a sequence.
        assert!(matches!(
            plan(&[0, 8], 8),
            Err(KernelError::Problem(AttnError::CuSeqlensLength { .. }))
        ));
        assert!(matches!(
            plan(&[0, 5, 4], 4),
            Err(KernelError::Problem(AttnError::CuSeqlensNotMonotone {
                index: 2,
                ..
            }))
        ));
        assert!(matches!(
            plan(&[1, 4, 8], 8),
            Err(KernelError::Problem(AttnError::CuSeqlensNotMonotone {
                index: 0,
                ..
            }))
        ));
        let e = plan(&[0, 4, 8], 9).unwrap_err();
        assert!(e.to_string().contains("total_q"), "{e}");
        let e = plan(&[0, 1, 10], 10).unwrap_err();
        assert!(e.to_string().contains("max_seqlen_q"), "{e}");
        // Q given a batch of 2 though packed.
        assert!(matches!(
            plan_sequences(
                &p,
                &lens(Some(&[0, 4, 8]), None, None, None),
                [2, 4, 8, 64],
                [2, 2, 8, 64]
            ),
            Err(KernelError::InvalidTensor { tensor: "Q", .. })
        ));
    }

    #[test]
    fn paged_geometry_and_table_checks() {
        let p = problem(2, 1, 1, Causal::BottomRight);
        let table = [3, 0, 1, 2];
        let used = [20, 32];
        let plan = plan_sequences(
            &p,
            &lens(None, None, Some(&table), Some(&used)),
            [2, 4, 1, 64],
            [4, 2, 16, 64],
        )
        .unwrap();
        assert!(plan.paged);
        assert_eq!(plan.expected.kv, [4, 2, 16, 64]);
        assert_eq!(plan.kv_len, 32);
        assert_eq!(plan.keys_bound(), 32, "paged: the capacity");
        assert_eq!(
            (
                plan.seqs.max_blocks,
                plan.seqs.page_size,
                plan.seqs.num_blocks
            ),
            (2, 16, 4)
        );
        // An entry past the cache, in a used page: refused; in an unused page: fine.
        let bad = [3, 4, 1, 2];
        let e = plan_sequences(
            &p,
            &lens(None, None, Some(&bad), Some(&used)),
            [2, 4, 1, 64],
            [4, 2, 16, 64],
        )
        .unwrap_err();
        assert!(matches!(
            e,
            KernelError::Problem(AttnError::BlockIndexOutOfRange {
                batch: 0,
                slot: 1,
                ..
            })
        ));
        assert!(plan_sequences(
            &p,
            &lens(None, None, Some(&bad), Some(&[16, 32])),
            [2, 4, 1, 64],
            [4, 2, 16, 64],
        )
        .is_ok());
        // seqused_k over the capacity; a page size that is no multiple of 16; no seqused_k;
        // a table that is no multiple of the batch.
        assert!(matches!(
            plan_sequences(
                &p,
                &lens(None, None, Some(&table), Some(&[33, 1])),
                [2, 4, 1, 64],
                [4, 2, 16, 64]
            ),
            Err(KernelError::Problem(AttnError::SequsedOutOfRange { .. }))
        ));
        assert!(matches!(
            plan_sequences(
                &p,
                &lens(None, None, Some(&table), Some(&used)),
                [2, 4, 1, 64],
                [4, 2, 24, 64]
            ),
            Err(KernelError::Problem(AttnError::InvalidPageSize(24)))
        ));
        assert!(plan_sequences(
            &p,
            &lens(None, None, Some(&table), None),
            [2, 4, 1, 64],
            [4, 2, 16, 64]
        )
        .unwrap_err()
        .to_string()
        .contains("seqused_k"));
        assert!(matches!(
            plan_sequences(
                &p,
                &lens(None, None, Some(&table[..3]), Some(&used)),
                [2, 4, 1, 64],
                [4, 2, 16, 64]
            ),
            Err(KernelError::Problem(AttnError::BlockTableShape { .. }))
        ));
    }

    #[test]
    fn page_division_is_exact() {
        let umulhi = |n: u32, m: u32| ((u64::from(n) * u64::from(m)) >> 32) as u32;
        for d in [
            16usize, 32, 48, 64, 80, 112, 128, 144, 256, 272, 1024, 4096, 65_536, 65_552,
        ] {
            let (mul, shift) = page_divisor(d);
            let check = |n: u32| {
                assert_eq!(
                    (umulhi(n, mul) >> shift) as usize,
                    n as usize / d,
                    "{n} / {d}"
                )
            };
            for n in 0..20_000 {
                check(n);
            }
            for k in 1..2000u32 {
                // Around multiples of d, and near 2^31.
                let m = (k as usize * d).min(i32::MAX as usize) as u32;
                for n in [m.saturating_sub(1), m, m.saturating_add(1)] {
                    check(n.min(i32::MAX as u32));
                }
                check(i32::MAX as u32 - k);
            }
        }
    }

    #[test]
    fn seqused_k_is_bounded_by_each_sequence() {
        let p = problem(2, 4, 8, Causal::None);
        // Dense keys: bounded by Sk.
        assert!(plan_sequences(
            &p,
            &lens(None, None, None, Some(&[8, 0])),
            [2, 4, 4, 64],
            [2, 2, 8, 64]
        )
        .is_ok());
        assert!(plan_sequences(
            &p,
            &lens(None, None, None, Some(&[9, 0])),
            [2, 4, 4, 64],
            [2, 2, 8, 64]
        )
        .is_err());
        // Packed keys: bounded by each sequence's packed length.
        assert!(plan_sequences(
            &p,
            &lens(None, Some(&[0, 3, 10]), None, Some(&[3, 7])),
            [2, 4, 4, 64],
            [1, 2, 10, 64]
        )
        .is_ok());
        assert!(plan_sequences(
            &p,
            &lens(None, Some(&[0, 3, 10]), None, Some(&[4, 7])),
            [2, 4, 4, 64],
            [1, 2, 10, 64]
        )
        .is_err());
    }
}
