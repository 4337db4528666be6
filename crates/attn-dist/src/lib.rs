//! `attn-dist`: context parallelism for the workspace's attention kernels. The sequence is
//! sharded over GPUs, K/V shards travel around a ring over NCCL while each rank runs the local
//! kernel, and the partial results are merged by their log-sum-exp:
//! - [`Communicator`]: one rank of an NCCL communicator (non-blocking, with timeouts, so a
//!   failed peer is a typed error and not a hang); [`UniqueId`] to start one across processes;
//! - [`run_local`]: one process driving N local GPUs, one thread each;
//! - [`RingAttention`]: ring attention forward with [`Sharding::Zigzag`] for causal balance,
//!   GQA (only KV heads travel), f16/bf16, and the single-GPU API's O and LSE layouts;
//! - [`ShardPlan`] and [`schedule`]: which rows each rank owns and what each ring step
//!   computes, pure and tested; [`sim`] runs the same ring on the CPU in f64;
//! - [`RingModel`]: when communication stops being hidden, for machines not at hand.
//!
//! Two GPUs in one process:
//!
//! ```no_run
//! use std::time::Duration;
//! use attn_dist::{run_local, RingAttention, RingForward, ShardPlan, Sharding};
//! use attn_kernels::{FlashAttention, Layout, Tensor, TensorMut};
//! use attn_ref::{AttnShape, Causal, Problem};
//! use half::bf16;
//!
//! let shape = AttnShape::new(1, 16, 4, 65536, 65536, 128)?;
//! let problem = Problem::new(shape, Causal::BottomRight);
//! let results = run_local(&[0, 1], Duration::from_secs(60), |comm| {
//!     let plan = ShardPlan::new(65536, comm.world(), Sharding::Zigzag)?;
//!     let gpu = FlashAttention::with_stream(comm.context().default_stream())?;
//!     let s = gpu.stream().clone();
//!     let (qd, kd) = ([1, 16, plan.local_len(), 128], [1, 4, plan.local_len(), 128]);
//!     // This rank's shards (filled by the caller; see ShardPlan::global_row).
//!     let q = s.alloc_zeros::<bf16>(qd.iter().product()).map_err(|e| attn_dist::DistError::InvalidArgument(e.to_string()))?;
//!     let k = s.alloc_zeros::<bf16>(kd.iter().product()).map_err(|e| attn_dist::DistError::InvalidArgument(e.to_string()))?;
//!     let v = s.alloc_zeros::<bf16>(kd.iter().product()).map_err(|e| attn_dist::DistError::InvalidArgument(e.to_string()))?;
//!     let mut o = s.alloc_zeros::<bf16>(qd.iter().product()).map_err(|e| attn_dist::DistError::InvalidArgument(e.to_string()))?;
//!     let mut ring = RingAttention::<bf16>::new(comm, gpu)?;
//!     ring.forward(RingForward {
//!         problem: &problem,
//!         sharding: Sharding::Zigzag,
//!         q: Tensor::contiguous(q.as_view(), qd, Layout::Bshd),
//!         k: Tensor::contiguous(k.as_view(), kd, Layout::Bshd),
//!         v: Tensor::contiguous(v.as_view(), kd, Layout::Bshd),
//!         o: TensorMut::contiguous(o.as_view_mut(), qd, Layout::Bshd),
//!         lse: None,
//!     })
//! });
//! for r in results {
//!     r?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Across processes (or nodes), rank 0 makes a [`UniqueId`], hands its hex text to the others
//! (an environment variable, a file, the launcher), and every process calls
//! [`Communicator::init`] with its rank; the README shows a launch.

#![warn(missing_docs)]

mod error;
pub mod model;
pub mod nccl;
pub mod ring;
pub mod schedule;
pub mod shard;
pub mod sim;

use std::time::Duration;

pub use error::DistError;
pub use model::RingModel;
pub use nccl::{nccl_available, prepare_environment, Communicator, UniqueId};
pub use ring::{RingAttention, RingForward, RingReport, StepTiming};
pub use shard::{ShardPlan, Sharding};

/// Runs `f` on one thread per device in `ordinals`, each with its rank's [`Communicator`]
/// (rank `i` on device `ordinals[i]`). Returns every rank's result, in rank order. A rank
/// whose setup fails returns its error; the others then fail their first collective by
/// timeout instead of hanging.
pub fn run_local<R, F>(ordinals: &[usize], timeout: Duration, f: F) -> Vec<Result<R, DistError>>
where
    R: Send,
    F: Fn(Communicator) -> Result<R, DistError> + Sync,
{
    if !attn_kernels::driver_available() {
        return ordinals
            .iter()
            .map(|_| Err(attn_kernels::KernelError::DriverMissing.into()))
            .collect();
    }
    prepare_environment();
    let id = match UniqueId::new() {
        Ok(id) => id,
        Err(e) => {
            let msg = e.to_string();
            let mut out = vec![Err(e)];
            out.extend((1..ordinals.len()).map(|_| Err(DistError::InvalidArgument(msg.clone()))));
            return out;
        }
    };
    let world = ordinals.len();
    std::thread::scope(|scope| {
        let handles: Vec<_> = ordinals
            .iter()
            .enumerate()
            .map(|(rank, &ordinal)| {
                let f = &f;
                scope.spawn(move || -> Result<R, DistError> {
                    let ctx = cudarc::driver::CudaContext::new(ordinal)
                        .map_err(error::driver("opening the device"))?;
                    let comm = Communicator::init(&ctx, rank, world, &id, timeout)?;
                    f(comm)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(DistError::InvalidArgument(
                        "a rank's thread panicked".into(),
                    ))
                })
            })
            .collect()
    })
}
