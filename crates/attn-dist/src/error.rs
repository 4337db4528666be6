//! The crate's error type.

use std::time::Duration;

/// Everything that can go wrong in a distributed call. Errors that come from validation or from
/// another rank are raised on **every** rank (the ranks exchange a descriptor of their call
/// before any data moves), so no rank waits forever for a peer that gave up.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// libnccl could not be loaded.
    #[error("NCCL (libnccl.so) was not found: install NCCL (e.g. the nvidia-nccl-cu13 wheel) and put the directory holding libnccl.so on LD_LIBRARY_PATH (a libnccl.so → libnccl.so.2 symlink is enough)")]
    NcclMissing,
    /// An NCCL call failed on this rank.
    #[error("NCCL {call} failed on rank {rank}: {message}")]
    Nccl {
        /// This rank.
        rank: usize,
        /// The call.
        call: &'static str,
        /// NCCL's error string.
        message: String,
    },
    /// Waiting for a collective or a ring step took longer than the communicator's timeout,
    /// usually because a peer failed or stopped participating. The communicator was aborted.
    #[error("rank {rank}: {what} did not finish within {timeout:?}; a peer probably failed (the communicator was aborted)")]
    Timeout {
        /// This rank.
        rank: usize,
        /// What was waited for.
        what: &'static str,
        /// The limit.
        timeout: Duration,
    },
    /// The communicator was aborted by an earlier error; make a new one.
    #[error("rank {0}: the communicator was aborted by an earlier error; create a new one")]
    Aborted(usize),
    /// Ranks called with descriptions that do not agree (shapes, dtype, mask, sharding).
    #[error("rank {rank} disagrees with rank 0 on {field}: {theirs} vs {ours}; every rank must call with the same global problem")]
    Mismatch {
        /// The first rank that disagrees.
        rank: usize,
        /// The field.
        field: &'static str,
        /// Rank 0's value.
        ours: u64,
        /// That rank's value.
        theirs: u64,
    },
    /// Another rank refused its own arguments; its error is reported there.
    #[error("rank {rank} refused its arguments ({code}); see that rank's error")]
    PeerRefused {
        /// The rank.
        rank: usize,
        /// What kind of refusal.
        code: &'static str,
    },
    /// A sequence length that does not divide over the ranks.
    #[error("sequence length {seq_len} does not divide over {world} ranks with {sharding} sharding (it must be a multiple of {multiple})")]
    Indivisible {
        /// The global sequence length.
        seq_len: usize,
        /// Ranks.
        world: usize,
        /// The sharding scheme.
        sharding: &'static str,
        /// The length must be a multiple of this.
        multiple: usize,
    },
    /// An argument that is wrong on this rank (shapes, layouts, ranks).
    #[error("{0}")]
    InvalidArgument(String),
    /// The kernels refused a launch (or a launch failed).
    #[error(transparent)]
    Kernel(#[from] attn_kernels::KernelError),
    /// A CUDA driver call failed.
    #[error("CUDA {context}: {source}")]
    Driver {
        /// What was being done.
        context: &'static str,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
    /// The reference (CPU simulation) refused the problem.
    #[error(transparent)]
    Reference(#[from] attn_ref::AttnError),
}

pub(crate) fn driver(
    context: &'static str,
) -> impl FnOnce(cudarc::driver::DriverError) -> DistError {
    move |source| DistError::Driver { context, source }
}
