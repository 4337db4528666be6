//! A communicator over NCCL (through cudarc's `nccl` sys layer, loaded at run time), with
//! what ring attention needs: paired send/recv, a small all-gather, and waits that cannot hang.
//!
//! Communicators are created **non-blocking** (`NCCL_COMM_BLOCKING=0` unless the environment
//! says otherwise), so even initialization returns at once and every wait polls
//! `ncclCommGetAsyncError` against a timeout. When a wait fails or times out the communicator
//! is aborted (`ncclCommAbort`), which also releases the peers' pending operations, and every
//! later call returns [`DistError::Aborted`].
//!
//! NVLink multicast (NVLS) stays off: [`prepare_environment`] sets `NCCL_NVLS_ENABLE=0` (and
//! the PyTorch/NVSHMEM equivalents) when they are unset, before the first communicator.

use std::ffi::CStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use cudarc::nccl::sys;

use crate::DistError;

/// The environment every process of ours runs NCCL under: NVLink multicast off, and
/// non-blocking communicators. Values already set by the user are kept. Call it before any
/// thread starts NCCL work ([`crate::run_local`] and [`Communicator::init`] do).
pub fn prepare_environment() {
    for (key, value) in [
        ("NCCL_NVLS_ENABLE", "0"),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
        ("NVSHMEM_DISABLE_NVLS", "1"),
        ("NCCL_COMM_BLOCKING", "0"),
    ] {
        if std::env::var_os(key).is_none() {
            std::env::set_var(key, value);
        }
    }
}

/// Whether libnccl can be loaded. Under the `dynamic-linking` feature libnccl was linked at
/// build time, so it is there whenever the process runs.
pub fn nccl_available() -> bool {
    culib_present()
}

#[cfg(feature = "dynamic-loading")]
fn culib_present() -> bool {
    // SAFETY: only tries to dlopen the library; no CUDA call is made.
    unsafe { sys::is_culib_present() }
}

/// Linked at build time: present whenever the process runs.
#[cfg(not(feature = "dynamic-loading"))]
fn culib_present() -> bool {
    true
}

/// An NCCL unique id: made on one rank, handed to the others (as hex text, e.g. through an
/// environment variable or a file), and passed to [`Communicator::init`] on every rank.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId([u8; 128]);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UniqueId({}…)", &self.to_hex()[..16])
    }
}

impl UniqueId {
    /// A fresh id (`ncclGetUniqueId`).
    pub fn new() -> Result<Self, DistError> {
        if !nccl_available() {
            return Err(DistError::NcclMissing);
        }
        prepare_environment();
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        // SAFETY: `id` is a valid out-pointer for the call's duration.
        check(usize::MAX, "ncclGetUniqueId", unsafe {
            sys::ncclGetUniqueId(&mut id)
        })?;
        Ok(Self(id.internal.map(|c| c as u8)))
    }

    /// 256 hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses [`Self::to_hex`].
    pub fn from_hex(s: &str) -> Result<Self, DistError> {
        let bad = || {
            DistError::InvalidArgument(format!(
                "an NCCL unique id is 256 hex digits; got {} characters",
                s.len()
            ))
        };
        if s.len() != 256 || !s.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; 128];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self(out))
    }

    fn raw(&self) -> sys::ncclUniqueId {
        sys::ncclUniqueId {
            internal: self.0.map(|b| b as ::core::ffi::c_char),
        }
    }
}

/// Rank 0 writes a fresh id to `path` (through a temporary file and a rename, so readers never
/// see half of it); the other ranks wait for the file.
fn exchange_id_file(
    path: &std::path::Path,
    rank: usize,
    timeout: Duration,
) -> Result<UniqueId, DistError> {
    let io = |what: &str, e: std::io::Error| {
        DistError::InvalidArgument(format!("{what} {}: {e}", path.display()))
    };
    if rank == 0 {
        let id = UniqueId::new()?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, id.to_hex()).map_err(|e| io("writing", e))?;
        std::fs::rename(&tmp, path).map_err(|e| io("renaming into", e))?;
        return Ok(id);
    }
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.trim().len() == 256 {
                return UniqueId::from_hex(text.trim());
            }
        }
        if start.elapsed() > timeout {
            return Err(DistError::Timeout {
                rank,
                what: "waiting for rank 0's NCCL id file",
                timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn error_string(r: sys::ncclResult_t) -> String {
    // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any code.
    unsafe {
        let p = sys::ncclGetErrorString(r);
        if p.is_null() {
            format!("{r:?}")
        } else {
            format!("{} ({r:?})", CStr::from_ptr(p).to_string_lossy())
        }
    }
}

fn check(rank: usize, call: &'static str, r: sys::ncclResult_t) -> Result<(), DistError> {
    match r {
        sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => Ok(()),
        e => Err(DistError::Nccl {
            rank,
            call,
            message: error_string(e),
        }),
    }
}

/// One rank's NCCL communicator, bound to one device.
#[derive(Debug)]
pub struct Communicator {
    comm: sys::ncclComm_t,
    ctx: Arc<CudaContext>,
    rank: usize,
    world: usize,
    timeout: Duration,
    aborted: bool,
}

// SAFETY: an NCCL communicator may be used from any thread as long as calls on it do not
// overlap; every method that calls NCCL takes `&mut self` or is only reached through one.
unsafe impl Send for Communicator {}

impl Communicator {
    /// Joins the communicator `id` as `rank` of `world` on `ctx`'s device. Returns once every
    /// rank has joined, or [`DistError::Timeout`] after `timeout`.
    pub fn init(
        ctx: &Arc<CudaContext>,
        rank: usize,
        world: usize,
        id: &UniqueId,
        timeout: Duration,
    ) -> Result<Self, DistError> {
        if !nccl_available() {
            return Err(DistError::NcclMissing);
        }
        if world == 0 || rank >= world || world > i32::MAX as usize {
            return Err(DistError::InvalidArgument(format!(
                "rank {rank} is not inside a world of {world} ranks"
            )));
        }
        prepare_environment();
        ctx.bind_to_thread()
            .map_err(crate::error::driver("binding the device"))?;
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: `comm` is a valid out-pointer; the id is 128 bytes by value; rank < world.
        check(rank, "ncclCommInitRank", unsafe {
            sys::ncclCommInitRank(&mut comm, world as i32, id.raw(), rank as i32)
        })?;
        let mut me = Self {
            comm,
            ctx: ctx.clone(),
            rank,
            world,
            timeout,
            aborted: comm.is_null(),
        };
        if me.aborted {
            return Err(DistError::Nccl {
                rank,
                call: "ncclCommInitRank",
                message: "returned no communicator".into(),
            });
        }
        me.settle("joining the communicator")?;
        Ok(me)
    }

    /// Joins a communicator described by the environment, for one process per GPU (the
    /// launch the README shows; torchrun's and Slurm's variables work too):
    /// - rank: `ATTN_DIST_RANK`, else `RANK`, else `SLURM_PROCID`;
    /// - world: `ATTN_DIST_WORLD`, else `WORLD_SIZE`, else `SLURM_NTASKS`;
    /// - device: `ATTN_DIST_DEVICE`, else `LOCAL_RANK`, else `SLURM_LOCALID`, else the rank;
    /// - the id: `ATTN_DIST_ID` (hex), else the file `ATTN_DIST_ID_FILE`, which rank 0 writes
    ///   (atomically) and the others wait for, within `timeout` (a path every node sees).
    pub fn from_env(timeout: Duration) -> Result<Self, DistError> {
        let var = |names: &[&str]| -> Option<(String, String)> {
            names
                .iter()
                .find_map(|n| std::env::var(n).ok().map(|v| (n.to_string(), v)))
        };
        let num =
            |names: &[&str], what: &str| -> Result<Option<usize>, DistError> {
                match var(names) {
                    None => Ok(None),
                    Some((n, v)) => v.trim().parse().map(Some).map_err(|_| {
                        DistError::InvalidArgument(format!("{n}={v} is not a {what}"))
                    }),
                }
            };
        let rank = num(&["ATTN_DIST_RANK", "RANK", "SLURM_PROCID"], "rank")?.ok_or_else(|| {
            DistError::InvalidArgument("set ATTN_DIST_RANK (or RANK) for each process".into())
        })?;
        let world = num(
            &["ATTN_DIST_WORLD", "WORLD_SIZE", "SLURM_NTASKS"],
            "world size",
        )?
        .ok_or_else(|| DistError::InvalidArgument("set ATTN_DIST_WORLD (or WORLD_SIZE)".into()))?;
        let device = num(
            &["ATTN_DIST_DEVICE", "LOCAL_RANK", "SLURM_LOCALID"],
            "device",
        )?
        .unwrap_or(rank);
        let id = if let Some((_, hex)) = var(&["ATTN_DIST_ID"]) {
            UniqueId::from_hex(hex.trim())?
        } else if let Some((_, path)) = var(&["ATTN_DIST_ID_FILE"]) {
            exchange_id_file(std::path::Path::new(&path), rank, timeout)?
        } else {
            return Err(DistError::InvalidArgument(
                "set ATTN_DIST_ID (hex) or ATTN_DIST_ID_FILE (a path every rank sees)".into(),
            ));
        };
        if !attn_kernels::driver_available() {
            return Err(attn_kernels::KernelError::DriverMissing.into());
        }
        let ctx = CudaContext::new(device).map_err(crate::error::driver("opening the device"))?;
        Self::init(&ctx, rank, world, &id, timeout)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the communicator.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The device context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// How long a wait may take before the communicator is aborted.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the wait limit.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn live(&self) -> Result<(), DistError> {
        if self.aborted {
            Err(DistError::Aborted(self.rank))
        } else {
            Ok(())
        }
    }

    /// The communicator's asynchronous state: `Ok(true)` when idle, `Ok(false)` while an
    /// operation is still being set up.
    fn poll(&self) -> Result<bool, DistError> {
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: a live communicator and a valid out-pointer.
        check(self.rank, "ncclCommGetAsyncError", unsafe {
            sys::ncclCommGetAsyncError(self.comm, &mut state)
        })?;
        match state {
            sys::ncclResult_t::ncclSuccess => Ok(true),
            sys::ncclResult_t::ncclInProgress => Ok(false),
            e => Err(DistError::Nccl {
                rank: self.rank,
                call: "an asynchronous operation",
                message: error_string(e),
            }),
        }
    }

    /// Aborts the communicator (idempotent). Peers blocked on it fail or time out.
    pub fn abort(&mut self) {
        if !self.aborted {
            self.aborted = true;
            // SAFETY: a live communicator, aborted once; NCCL cancels its pending work.
            let _ = unsafe { sys::ncclCommAbort(self.comm) };
        }
    }

    /// Runs `f` until it says done, polling NCCL's async error; aborts on error or timeout.
    fn wait_until(
        &mut self,
        what: &'static str,
        mut done: impl FnMut(&Self) -> Result<bool, DistError>,
    ) -> Result<(), DistError> {
        self.live()?;
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let r = self.poll().and_then(|idle| Ok(idle && done(self)?));
            match r {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    self.abort();
                    return Err(e);
                }
            }
            if start.elapsed() > self.timeout {
                self.abort();
                return Err(DistError::Timeout {
                    rank: self.rank,
                    what,
                    timeout: self.timeout,
                });
            }
            spins += 1;
            if spins > 64 {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Waits for the communicator to finish setting up its last call (non-blocking mode).
    fn settle(&mut self, what: &'static str) -> Result<(), DistError> {
        self.wait_until(what, |_| Ok(true))
    }

    /// Waits until the work recorded in `event` is done, polling NCCL for errors.
    pub fn wait_event(&mut self, event: &CudaEvent, what: &'static str) -> Result<(), DistError> {
        self.wait_until(what, |_| {
            event
                .try_is_complete()
                .map_err(crate::error::driver("waiting for a ring step"))
        })
    }

    /// Waits until `stream` has drained, polling NCCL for errors.
    pub fn wait_stream(
        &mut self,
        stream: &CudaStream,
        what: &'static str,
    ) -> Result<(), DistError> {
        let ev = stream
            .record_event(None)
            .map_err(crate::error::driver("recording an event"))?;
        self.wait_event(&ev, what)
    }

    /// Enqueues, as one NCCL group on `stream`: a send of `sends` (device address, bytes) to
    /// `to` and a receive of `recvs` from `from`. Returns when NCCL has accepted the group (the
    /// transfers run on the stream).
    pub(crate) fn send_recv(
        &mut self,
        stream: &CudaStream,
        to: usize,
        sends: &[(u64, usize)],
        from: usize,
        recvs: &[(u64, usize)],
    ) -> Result<(), DistError> {
        self.live()?;
        if to >= self.world || from >= self.world {
            return Err(DistError::InvalidArgument(format!(
                "peer {to}/{from} outside a world of {}",
                self.world
            )));
        }
        let rank = self.rank;
        let s = stream.cu_stream() as sys::cudaStream_t;
        // SAFETY: group calls only batch the p2p calls that follow; no arguments.
        check(rank, "ncclGroupStart", unsafe { sys::ncclGroupStart() })?;
        let mut r = Ok(());
        for &(ptr, bytes) in sends {
            // SAFETY: the caller passes device allocations of at least `bytes` bytes that
            // stay alive and unwritten until `stream` passes this point.
            r = r.and(check(rank, "ncclSend", unsafe {
                sys::ncclSend(
                    ptr as *const _,
                    bytes,
                    sys::ncclDataType_t::ncclUint8,
                    to as i32,
                    self.comm,
                    s,
                )
            }));
        }
        for &(ptr, bytes) in recvs {
            // SAFETY: as above, for buffers nothing else reads or writes until the stream
            // passes this point.
            r = r.and(check(rank, "ncclRecv", unsafe {
                sys::ncclRecv(
                    ptr as *mut _,
                    bytes,
                    sys::ncclDataType_t::ncclUint8,
                    from as i32,
                    self.comm,
                    s,
                )
            }));
        }
        // SAFETY: closes the group opened above.
        let end = check(rank, "ncclGroupEnd", unsafe { sys::ncclGroupEnd() });
        if let Err(e) = r.and(end) {
            self.abort();
            return Err(e);
        }
        self.settle("enqueueing a send/recv")
    }

    /// Gathers `local` (the same length on every rank) from every rank, in rank order, and
    /// waits for it (with the timeout).
    pub fn all_gather_u64(
        &mut self,
        stream: &Arc<CudaStream>,
        local: &[u64],
    ) -> Result<Vec<u64>, DistError> {
        self.live()?;
        let n = local.len();
        let send = stream
            .clone_htod(local)
            .map_err(crate::error::driver("copying a descriptor to the device"))?;
        let mut recv = stream
            .alloc_zeros::<u64>(n * self.world)
            .map_err(crate::error::driver("allocating a descriptor buffer"))?;
        {
            use cudarc::driver::{DevicePtr, DevicePtrMut};
            let (sp, _gs) = send.device_ptr(stream);
            let (rp, _gr) = recv.device_ptr_mut(stream);
            let rank = self.rank;
            // SAFETY: `send` holds n u64 and `recv` n·world, both alive until the stream
            // sync below; the guards order the call after their allocation on `stream`.
            let r = check(rank, "ncclAllGather", unsafe {
                sys::ncclAllGather(
                    sp as *const _,
                    rp as *mut _,
                    n,
                    sys::ncclDataType_t::ncclUint64,
                    self.comm,
                    stream.cu_stream() as sys::cudaStream_t,
                )
            });
            if let Err(e) = r {
                self.abort();
                return Err(e);
            }
        }
        self.settle("enqueueing an all-gather")?;
        self.wait_stream(stream, "exchanging call descriptors")?;
        stream
            .clone_dtoh(&recv)
            .map_err(crate::error::driver("copying descriptors to the host"))
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if !self.aborted {
            // SAFETY: a live communicator, destroyed once. Its streams' work was waited for
            // by the calls that queued it (or they failed, and it was aborted instead).
            let _ = unsafe { sys::ncclCommDestroy(self.comm) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_round_trip_through_hex() {
        let mut raw = [0u8; 128];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = (i * 37 % 256) as u8;
        }
        let id = UniqueId(raw);
        assert_eq!(UniqueId::from_hex(&id.to_hex()).unwrap(), id);
        assert!(UniqueId::from_hex("abc").is_err());
        assert!(UniqueId::from_hex(&"zz".repeat(128)).is_err());
    }
}
