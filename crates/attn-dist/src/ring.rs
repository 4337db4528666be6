//! Ring attention forward (Liu et al. 2023, "Ring Attention with Blockwise Transformers for
//! Near-Infinite Context"): each rank keeps its query shard, K/V shards travel around the ring
//! by NCCL send/recv on a communication stream while the local kernel runs on the compute
//! stream, and the partial results are merged by LSE (attn-kernels' merge kernel, the same row
//! arithmetic as the split-KV epilogue).
//!
//! Step `s` computes with the K/V shard received at step `s − 1` while the shard for step
//! `s + 1` is in flight into the other of two receive buffers. Events order the streams:
//! - the communication of step `s` waits until the compute of step `s − 1` has finished reading
//!   the buffer it overwrites;
//! - the compute of step `s` waits for the communication of step `s − 1`.

use std::sync::Arc;

use attn_kernels::{
    FlashAttention, Forward, ForwardOptions, Layout, LseAccumulator, Merge, StorageType, Tensor,
    TensorMut,
};
use attn_ref::{AttnShape, Causal, Problem};
use cudarc::driver::{
    sys as cu, CudaEvent, CudaSlice, CudaStream, CudaViewMut, DevicePtr, DevicePtrMut,
};

use crate::error::driver;
use crate::nccl::Communicator;
use crate::schedule::{ring_steps, Step};
use crate::shard::{ShardPlan, Sharding};
use crate::DistError;

/// One ring attention call, on one rank.
#[derive(Debug)]
pub struct RingForward<'a, T> {
    /// The **global** problem: `Sq = Sk = S` (the whole sequence), heads, head dim, mask and
    /// scale. Window, softcap, ALiBi and sinks are not supported by the ring yet.
    pub problem: &'a Problem,
    /// How the sequence is split over ranks ([`Sharding::Zigzag`] balances a causal mask).
    pub sharding: Sharding,
    /// This rank's queries `[B, Hq, S/N, D]`, any strides, rows in the sharding's local order.
    pub q: Tensor<'a, T>,
    /// This rank's keys `[B, Hkv, S/N, D]`, dense in `[B,H,S,D]` or `[B,S,H,D]` order (they are
    /// sent as one block).
    pub k: Tensor<'a, T>,
    /// This rank's values, like `k` (same layout).
    pub v: Tensor<'a, T>,
    /// This rank's output rows `[B, Hq, S/N, D]`, any strides.
    pub o: TensorMut<'a, T>,
    /// Their LSE `[B, Hq, S/N]` (natural log), when wanted.
    pub lse: Option<CudaViewMut<'a, f32>>,
}

/// Timings of one call, when profiling is on ([`RingAttention::set_profiling`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RingReport {
    /// Per ring step: the local attention + merge time, and the K/V transfer time that ran
    /// beside it (0 for the last step, which receives nothing).
    pub steps: Vec<StepTiming>,
    /// From the first launch to the end of the last merge, on the compute stream.
    pub total_ms: f32,
    /// The whole call on the host: validation, the descriptor exchange, the ring and the
    /// wait for it.
    pub wall_ms: f64,
}

/// One step's timings.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepTiming {
    /// Local attention and merge, milliseconds.
    pub compute_ms: f32,
    /// The send/recv of the next K/V shard, milliseconds.
    pub comm_ms: f32,
}

/// Timing events of one step: compute start/end, communication start/end (profiling only).
type StepMarks = (
    Option<CudaEvent>,
    Option<CudaEvent>,
    Option<CudaEvent>,
    Option<CudaEvent>,
);

/// Device memory a call needs, kept between calls of the same size.
struct Buffers<T> {
    /// Two receive slots, each (K, V).
    recv: [(CudaSlice<T>, CudaSlice<T>); 2],
    acc: LseAccumulator,
    part_o: CudaSlice<T>,
    part_lse: CudaSlice<f32>,
    kv_elems: usize,
    acc_dims: [usize; 4],
}

/// Ring attention on one rank: a communicator, the compute launcher (its stream is the
/// compute stream) and a communication stream.
pub struct RingAttention<T: StorageType> {
    comm: Communicator,
    compute: FlashAttention,
    comm_stream: Arc<CudaStream>,
    buffers: Option<Buffers<T>>,
    profiling: bool,
}

impl<T: StorageType> std::fmt::Debug for RingAttention<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingAttention")
            .field("rank", &self.comm.rank())
            .field("world", &self.comm.world())
            .field("profiling", &self.profiling)
            .finish()
    }
}

/// Fields of the call descriptor every rank exchanges before any data moves.
const FIELDS: [&str; 11] = [
    "status",
    "dtype",
    "batch",
    "q_heads",
    "kv_heads",
    "seq_len",
    "head_dim",
    "causal",
    "sharding",
    "scale",
    "kv_layout",
];

/// Status codes of the descriptor's first field.
const STATUS: [&str; 4] = [
    "ok",
    "invalid arguments",
    "a kernel refusal",
    "a CUDA error",
];

fn status_of(e: &DistError) -> u64 {
    match e {
        DistError::InvalidArgument(_) | DistError::Indivisible { .. } => 1,
        DistError::Kernel(_) => 2,
        _ => 3,
    }
}

/// Checks the gathered descriptors (`world` rows of [`FIELDS`]): any rank's refusal, then any
/// field that differs from rank 0's. Pure, so every rank reaches the same verdict.
pub(crate) fn check_descriptors(all: &[u64], world: usize) -> Result<(), DistError> {
    let n = FIELDS.len();
    for r in 0..world {
        let status = all[r * n];
        if status != 0 {
            return Err(DistError::PeerRefused {
                rank: r,
                code: STATUS.get(status as usize).copied().unwrap_or("an error"),
            });
        }
    }
    for r in 1..world {
        for f in 1..n {
            let (ours, theirs) = (all[f], all[r * n + f]);
            if ours != theirs {
                return Err(DistError::Mismatch {
                    rank: r,
                    field: FIELDS[f],
                    ours,
                    theirs,
                });
            }
        }
    }
    Ok(())
}

/// Whether a tensor is a dense `[B,H,S,D]` or `[B,S,H,D]` block, and which.
fn dense_layout<T>(t: &Tensor<'_, T>) -> Option<Layout> {
    let d = t.dims();
    [Layout::Bhsd, Layout::Bshd]
        .into_iter()
        .find(|l| l.strides(d) == t.strides() && t.view().len() >= d.iter().product())
}

fn layout_code(l: Layout) -> u64 {
    match l {
        Layout::Bhsd => 1,
        Layout::Bshd => 2,
    }
}

/// The checks one rank can make alone. Returns the shard plan and the K/V layout.
fn validate_local<T>(
    args: &RingForward<'_, T>,
    world: usize,
) -> Result<(ShardPlan, Layout), DistError> {
    let g = args.problem.shape();
    if g.q_len() != g.kv_len() {
        return Err(DistError::InvalidArgument(format!(
            "ring attention shards one sequence: Sq ({}) must equal Sk ({})",
            g.q_len(),
            g.kv_len()
        )));
    }
    if !args.problem.features().is_empty() {
        return Err(DistError::InvalidArgument(
            "ring attention does not support window, softcap, ALiBi or sinks yet".into(),
        ));
    }
    let plan = ShardPlan::new(g.q_len(), world, args.sharding)?;
    let l = plan.local_len();
    let (b, hq, hkv, d) = (g.batch(), g.q_heads(), g.kv_heads(), g.head_dim());
    for (name, dims, want) in [
        ("Q", args.q.dims(), [b, hq, l, d]),
        ("K", args.k.dims(), [b, hkv, l, d]),
        ("V", args.v.dims(), [b, hkv, l, d]),
        ("O", args.o.dims(), [b, hq, l, d]),
    ] {
        if dims != want {
            return Err(DistError::InvalidArgument(format!(
                "{name} shard has dims {dims:?}; the global problem over {world} ranks needs {want:?} ([B, H, S/N, D])"
            )));
        }
    }
    let (Some(kl), Some(vl)) = (dense_layout(&args.k), dense_layout(&args.v)) else {
        return Err(DistError::InvalidArgument(
            "K and V shards must be dense [B,H,S,D] or [B,S,H,D] blocks: they travel as one buffer"
                .into(),
        ));
    };
    if kl != vl {
        return Err(DistError::InvalidArgument(
            "K and V shards must have the same layout".into(),
        ));
    }
    if let Some(lse) = &args.lse {
        if lse.len() != b * hq * l {
            return Err(DistError::InvalidArgument(format!(
                "LSE has {} elements; [B, Hq, S/N] needs {}",
                lse.len(),
                b * hq * l
            )));
        }
    }
    Ok((plan, kl))
}

/// Writes accumulator rows `rows` into the call's O and LSE (a zero-row call only runs the
/// merge's checks on them).
fn finish_rows<T: StorageType>(
    compute: &FlashAttention,
    acc: &mut LseAccumulator,
    rows: std::ops::Range<usize>,
    args: &mut RingForward<'_, T>,
) -> Result<(), DistError> {
    compute.merge(
        acc,
        Merge {
            rows,
            part: None,
            first: false,
            out: Some((
                args.o.reborrow(),
                args.lse.as_mut().map(|x| x.slice_mut(..)),
            )),
        },
    )?;
    Ok(())
}

fn timing_event(stream: &CudaStream) -> Result<CudaEvent, DistError> {
    stream
        .record_event(Some(cu::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(driver("recording an event"))
}

impl<T: StorageType> RingAttention<T> {
    /// Ring attention over `comm`, computing with `compute` (whose stream becomes the compute
    /// stream; it must be on the communicator's device). A communication stream is created.
    pub fn new(comm: Communicator, compute: FlashAttention) -> Result<Self, DistError> {
        if compute.context().ordinal() != comm.context().ordinal() {
            return Err(DistError::InvalidArgument(format!(
                "the launcher is on device {} but the communicator on device {}",
                compute.context().ordinal(),
                comm.context().ordinal()
            )));
        }
        let comm_stream = compute
            .context()
            .new_stream()
            .map_err(driver("creating the communication stream"))?;
        Ok(Self {
            comm,
            compute,
            comm_stream,
            buffers: None,
            profiling: false,
        })
    }

    /// Records per-step timings in the returned [`RingReport`] (adds a few events per step).
    pub fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
    }

    /// The communicator.
    pub fn communicator(&mut self) -> &mut Communicator {
        &mut self.comm
    }

    /// The compute launcher.
    pub fn launcher(&self) -> &FlashAttention {
        &self.compute
    }

    fn ensure_buffers(&mut self, kv_elems: usize, acc_dims: [usize; 4]) -> Result<(), DistError> {
        if self
            .buffers
            .as_ref()
            .is_some_and(|b| b.kv_elems == kv_elems && b.acc_dims == acc_dims)
        {
            return Ok(());
        }
        self.buffers = None; // free first
        let s = self.compute.stream();
        let alloc = |n: usize| {
            s.alloc_zeros::<T>(n)
                .map_err(driver("allocating ring buffers"))
        };
        let rows = acc_dims[0] * acc_dims[1] * acc_dims[2];
        self.buffers = Some(Buffers {
            recv: [
                (alloc(kv_elems)?, alloc(kv_elems)?),
                (alloc(kv_elems)?, alloc(kv_elems)?),
            ],
            acc: LseAccumulator::new(s, acc_dims)?,
            part_o: alloc(rows * acc_dims[3])?,
            part_lse: s
                .alloc_zeros::<f32>(rows)
                .map_err(driver("allocating ring buffers"))?,
            kv_elems,
            acc_dims,
        });
        Ok(())
    }

    /// Runs the ring. Every rank of the communicator must call this with the same global
    /// problem and sharding. Returns when this rank's output is written; any error (here or
    /// on another rank) is returned on every rank.
    pub fn forward(&mut self, args: RingForward<'_, T>) -> Result<RingReport, DistError> {
        let entered = std::time::Instant::now();
        let world = self.comm.world();
        let mut args = args;
        let local = validate_local(&args, world).and_then(|(plan, layout)| {
            if world > 1 {
                // Validate O and LSE before anything moves: a zero-row merge runs the merge's
                // checks on the output and launches nothing.
                let g = args.problem.shape();
                let (b, hq, hkv, d) = (g.batch(), g.q_heads(), g.kv_heads(), g.head_dim());
                let l = plan.local_len();
                self.ensure_buffers(b * hkv * l * d, [b, hq, l, d])?;
                if let Some(buf) = self.buffers.as_mut() {
                    finish_rows(&self.compute, &mut buf.acc, 0..0, &mut args)?;
                }
            }
            Ok((plan, layout))
        });
        let g = *args.problem.shape();
        let desc = [
            local.as_ref().err().map_or(0, status_of),
            T::DTYPE as u64,
            g.batch() as u64,
            g.q_heads() as u64,
            g.kv_heads() as u64,
            g.q_len() as u64,
            g.head_dim() as u64,
            u64::from(args.problem.causal() != Causal::None),
            args.sharding.code(),
            args.problem.scale().to_bits(),
            local.as_ref().map_or(0, |(_, l)| layout_code(*l)),
        ];
        if world > 1 {
            let all = self.comm.all_gather_u64(self.compute.stream(), &desc)?;
            let (plan, _) = local?;
            check_descriptors(&all, world)?;
            let mut report = self.ring(args, plan)?;
            report.wall_ms = entered.elapsed().as_secs_f64() * 1e3;
            Ok(report)
        } else {
            local?;
            // One rank: the plain kernel, so the result is bitwise the single-GPU one.
            let start = timing_event(self.compute.stream())?;
            self.compute.forward(Forward {
                problem: args.problem,
                q: args.q,
                k: args.k,
                v: args.v,
                o: args.o,
                lse: args.lse,
                options: ForwardOptions::default(),
            })?;
            let end = timing_event(self.compute.stream())?;
            self.comm.wait_event(&end, "the local attention")?;
            let total_ms = start.elapsed_ms(&end).map_err(driver("reading timings"))?;
            Ok(RingReport {
                steps: vec![StepTiming {
                    compute_ms: total_ms,
                    comm_ms: 0.0,
                }],
                total_ms,
                wall_ms: entered.elapsed().as_secs_f64() * 1e3,
            })
        }
    }

    fn ring(
        &mut self,
        mut args: RingForward<'_, T>,
        plan: ShardPlan,
    ) -> Result<RingReport, DistError> {
        let world = self.comm.world();
        let rank = self.comm.rank();
        let g = *args.problem.shape();
        let (b, hq, hkv, d) = (g.batch(), g.q_heads(), g.kv_heads(), g.head_dim());
        let l = plan.local_len();
        let kv_dims = [b, hkv, l, d];
        let kv_elems = b * hkv * l * d;
        let kv_bytes = kv_elems * std::mem::size_of::<T>();
        let kv_strides = args.k.strides();
        self.ensure_buffers(kv_elems, [b, hq, l, d])?;
        let causal = args.problem.causal() != Causal::None;
        let steps: Vec<Step> = ring_steps(&plan, rank, causal);
        let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
        let cs = self.compute.stream().clone();
        let ms = self.comm_stream.clone();
        let Some(buf) = self.buffers.as_mut() else {
            return Err(DistError::InvalidArgument("ring buffers missing".into()));
        };
        let prof = self.profiling;
        let mut marks: Vec<StepMarks> = Vec::new();
        let start = timing_event(&cs)?;
        // The caller's K/V are ready on the compute stream from here.
        let mut compute_done = cs
            .record_event(None)
            .map_err(driver("recording an event"))?;
        let mut comm_done: Option<CudaEvent> = None;
        for step in &steps {
            let s = step.step;
            let last = s + 1 == world;
            let (cm0, cm1) = if last {
                (None, None)
            } else {
                // Send what this step computes with; receive the next step's shard into the
                // slot the previous step read.
                ms.wait(&compute_done)
                    .map_err(driver("ordering the streams"))?;
                let slot = s % 2;
                let (send_k, send_v) = if s == 0 {
                    (
                        args.k.view().device_ptr(&ms).0,
                        args.v.view().device_ptr(&ms).0,
                    )
                } else {
                    let (k, v) = &buf.recv[(s - 1) % 2];
                    (k.device_ptr(&ms).0, v.device_ptr(&ms).0)
                };
                let (rk, rv) = &mut buf.recv[slot];
                let recv_k = rk.device_ptr_mut(&ms).0;
                let recv_v = rv.device_ptr_mut(&ms).0;
                let t0 = if prof { Some(timing_event(&ms)?) } else { None };
                self.comm.send_recv(
                    &ms,
                    next,
                    &[(send_k, kv_bytes), (send_v, kv_bytes)],
                    prev,
                    &[(recv_k, kv_bytes), (recv_v, kv_bytes)],
                )?;
                let t1 = if prof { Some(timing_event(&ms)?) } else { None };
                (t0, t1)
            };
            if let Some(ev) = &comm_done {
                cs.wait(ev).map_err(driver("ordering the streams"))?;
            }
            let c0 = if prof { Some(timing_event(&cs)?) } else { None };
            let (cur_k, cur_v) = if s == 0 {
                (
                    Tensor::new(args.k.view().slice(..), kv_dims, kv_strides),
                    Tensor::new(args.v.view().slice(..), kv_dims, kv_strides),
                )
            } else {
                let (k, v) = &buf.recv[(s - 1) % 2];
                (
                    Tensor::new(k.as_view(), kv_dims, kv_strides),
                    Tensor::new(v.as_view(), kv_dims, kv_strides),
                )
            };
            let mut covered = 0..0;
            if let Some(blk) = &step.block {
                let (m, n) = (blk.q_rows.len(), blk.kv_rows.len());
                let shape = AttnShape::new(b, hq, hkv, m, n, d)?;
                let mask = if blk.causal {
                    Causal::TopLeft
                } else {
                    Causal::None
                };
                let sub = Problem::new(shape, mask).with_scale(args.problem.scale())?;
                let part_dims = [b, hq, m, d];
                let part_len = b * hq * m * d;
                self.compute.forward(Forward {
                    problem: &sub,
                    q: args.q.rows(blk.q_rows.clone())?,
                    k: cur_k.rows(blk.kv_rows.clone())?,
                    v: cur_v.rows(blk.kv_rows.clone())?,
                    o: TensorMut::contiguous(
                        buf.part_o.slice_mut(..part_len),
                        part_dims,
                        Layout::Bhsd,
                    ),
                    lse: Some(buf.part_lse.slice_mut(..b * hq * m)),
                    options: ForwardOptions::default(),
                })?;
                self.compute.merge(
                    &mut buf.acc,
                    Merge {
                        rows: blk.q_rows.clone(),
                        part: Some((
                            Tensor::contiguous(
                                buf.part_o.slice(..part_len),
                                part_dims,
                                Layout::Bhsd,
                            ),
                            buf.part_lse.slice(..b * hq * m),
                        )),
                        first: s == 0,
                        out: last.then(|| {
                            (
                                args.o.reborrow(),
                                args.lse.as_mut().map(|x| x.slice_mut(..)),
                            )
                        }),
                    },
                )?;
                covered = blk.q_rows.clone();
            }
            if last {
                // Rows the last step did not touch: finish them from the accumulator.
                for rows in [0..covered.start, covered.end..l] {
                    if rows.is_empty() {
                        continue;
                    }
                    finish_rows(&self.compute, &mut buf.acc, rows, &mut args)?;
                }
            }
            let c1 = if prof { Some(timing_event(&cs)?) } else { None };
            compute_done = cs
                .record_event(None)
                .map_err(driver("recording an event"))?;
            if !last {
                comm_done = Some(
                    ms.record_event(None)
                        .map_err(driver("recording an event"))?,
                );
            }
            marks.push((c0, c1, cm0, cm1));
        }
        let end = timing_event(&cs)?;
        self.comm.wait_event(&end, "the ring")?;
        let ms_between = |a: &Option<CudaEvent>, b: &Option<CudaEvent>| -> Result<f32, DistError> {
            match (a, b) {
                (Some(a), Some(b)) => a.elapsed_ms(b).map_err(driver("reading timings")),
                _ => Ok(0.0),
            }
        };
        let mut report = RingReport {
            steps: Vec::new(),
            total_ms: start.elapsed_ms(&end).map_err(driver("reading timings"))?,
            wall_ms: 0.0,
        };
        if prof {
            for (c0, c1, m0, m1) in &marks {
                report.steps.push(StepTiming {
                    compute_ms: ms_between(c0, c1)?,
                    comm_ms: ms_between(m0, m1)?,
                });
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(status: u64, seq: u64) -> Vec<u64> {
        vec![status, 1, 2, 8, 2, seq, 128, 1, 2, 0x3fc0_0000_0000_0000, 2]
    }

    #[test]
    fn every_rank_reaches_the_same_verdict_on_the_descriptors() {
        let ok: Vec<u64> = [desc(0, 4096), desc(0, 4096)].concat();
        assert!(check_descriptors(&ok, 2).is_ok());
        let refused: Vec<u64> = [desc(0, 4096), desc(1, 4096)].concat();
        assert!(matches!(
            check_descriptors(&refused, 2),
            Err(DistError::PeerRefused {
                rank: 1,
                code: "invalid arguments"
            })
        ));
        let mismatch: Vec<u64> = [desc(0, 4096), desc(0, 4096), desc(0, 2048)].concat();
        let e = check_descriptors(&mismatch, 3).unwrap_err();
        assert!(
            matches!(
                e,
                DistError::Mismatch {
                    rank: 2,
                    field: "seq_len",
                    ours: 4096,
                    theirs: 2048
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn the_descriptor_names_every_field() {
        assert_eq!(desc(0, 1).len(), FIELDS.len());
    }
}
