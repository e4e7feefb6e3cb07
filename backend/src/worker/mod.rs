//! One queue's worker: pops descriptor chains, sends each request through
//! the engine to a path's driver on this worker's own io_uring ring, and
//! completes requests when every part is done.
//!
//! A part whose path fails is re-sent on another path (after the ghost-write
//! guard's delay for cancelled writes), waits for a usable path up to the
//! no-path timeout, or is retried on its path after the controller's retry
//! delay: the guest sees only the final result. Every wait is an io_uring
//! timeout on this ring, never a sleeping thread.

mod avail;
mod dirty;
mod drain;
mod inflight;
mod parts;
mod queue;
mod resubmit;
mod ring_size;
#[cfg(test)]
mod tests;
mod timers;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use io_uring::types::Timespec;
use mpath::{Attempts, FlushPart, IoInfo, IoKind, IoOutcome, Nanos, PathId};
use mpath_io::{IoOp, Ring};
use slab::Slab;
use vhost_user_backend::VringRwLock;
use vm_memory::{GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};

use crate::disk::Disk;
use crate::ratelimit::RateLimitedLog;
use crate::request::Parser;
use crate::virtio::Limits;

type Mem = Arc<GuestMemoryMmap>;

/// What a completion on the ring is about (top byte of `user_data`).
const TAG_SHIFT: u32 = 56;
const TAG_PART: u64 = 0;
const TAG_TIMER: u64 = 1;
const TAG_TICK: u64 = 2;
/// A cancellation of an overdue part (its own completion is ignored).
const TAG_CANCEL: u64 = 4;

fn user_data(tag: u64, index: usize) -> u64 {
    (tag << TAG_SHIFT) | index as u64
}

fn split_user_data(ud: u64) -> (u64, usize) {
    (ud >> TAG_SHIFT, (ud & ((1 << TAG_SHIFT) - 1)) as usize)
}

/// A guest request being served: completes when `remaining` parts are done.
struct Req {
    head: u16,
    status_addr: GuestAddress,
    used_len: u32,
    status: u8,
    remaining: u32,
    /// Keeps the guest memory mapped while the data iovecs are in use.
    mem: Mem,
    iovecs: Vec<libc::iovec>,
    /// A read: its data buffers are marked in the dirty log on completion.
    reads: bool,
}

// SAFETY: the iovecs are addresses into the guest memory that `mem` keeps
// mapped; only the owning worker uses them, whichever thread holds it.
unsafe impl Send for Req {}

/// Where a part is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stage {
    /// Its I/O is on the ring (on `Io::path`).
    OnDevice,
    /// A NOP standing for an injected fault is on the ring.
    Injected(IoOutcome),
    /// Held by a `hang` path with this result.
    Held(IoOutcome),
    /// A timer on the ring; then `After`.
    Timer(After),
    /// Waiting for a usable path since this time.
    NoPath { since: Nanos },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum After {
    /// Deliver this completion (added latency or bandwidth cap elapsed).
    Deliver(IoOutcome),
    /// Send again: on this path (retry) or any path (failover).
    Resend(Option<PathId>),
}

/// One part of a request on one path.
struct Io {
    req: usize,
    path: PathId,
    op: IoOp,
    offset: u64,
    info: IoInfo,
    /// Its tries over the paths: first submission, rounds, paths failed.
    att: Attempts,
    /// A flush command: the path it is for and what it covers.
    flush: Option<Box<FlushPart>>,
    retries: u32,
    started: Nanos,
    stage: Stage,
    /// The timer's duration while `Stage::Timer` is on the ring.
    timer: Option<Box<Timespec>>,
    /// This part's data: `Req::iovecs[iov.0..iov.0 + iov.1]`.
    iov: (u32, u32),
    /// A cancellation was sent for it (overdue past io-timeout-ms).
    cancelled: bool,
    /// The aligned copy of that data the path's I/O uses instead (O_DIRECT
    /// with guest buffers the device cannot take), while on the ring.
    bounce: Option<mpath_io::Bounce>,
}

pub struct Worker {
    /// Requests submitted (and inline completions reaped) per part of a
    /// burst: the guest sees early completions while the rest is parsed.
    submit_batch: usize,
    disk: Arc<Disk>,
    limits: Limits,
    ring: Ring,
    parser: Parser,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    reqs: Slab<Req>,
    ios: Slab<Io>,
    /// Parts held by a `hang` path or waiting for a usable path.
    parked: Vec<usize>,
    /// Requests in flight, read without the worker's lock (drain, shutdown).
    in_flight: Arc<AtomicUsize>,
    /// The periodic tick (no-path waits, held parts, io-timeouts) is on the ring.
    tick_armed: bool,
    tick: Box<Timespec>,
    numa_node: Option<u32>,
    /// `numa_node` was read on the worker's own thread (once: sysfs).
    numa_known: bool,
    reaped: Vec<(u64, i32, [u64; 2])>,
    bad_input: RateLimitedLog,
    path_errors: RateLimitedLog,
    ring_errors: RateLimitedLog,
    /// The vring this worker serves (first event), for draining outside
    /// the worker's thread (GET_VRING_BASE).
    vring: Option<VringRwLock>,
    /// The driver broke the ring: nothing more is popped until the
    /// frontend re-initialises the queue (see `avail`).
    broken: bool,
    /// Dirty logging for live migration (see `dirty`).
    log: Arc<crate::dirty_log::LogSwitch>,
    /// The used ring's guest-physical log address, when it is logged.
    used_log: Option<u64>,
    /// This queue's part of the frontend's inflight region, when tracked.
    inflight: Option<crate::vhost_user::InflightQueue>,
    /// Heads the inflight region held at queue start, still to serve.
    resubmit: std::collections::VecDeque<u16>,
    /// The rings through host addresses (see `crate::vring`).
    view: crate::vring::RingView,
    /// Adaptive wait before re-arming kicks (see `queue::Spin`).
    spin: queue::Spin,
}

const TICK: std::time::Duration = std::time::Duration::from_millis(10);

fn op_kind(op: IoOp) -> IoKind {
    match op {
        IoOp::Read => IoKind::Read,
        IoOp::Write { .. } => IoKind::Write,
        _ => IoKind::Other,
    }
}

fn modifies(op: IoOp) -> bool {
    matches!(
        op,
        IoOp::Write { .. } | IoOp::Discard | IoOp::WriteZeroes { .. }
    )
}

fn timespec(d: std::time::Duration) -> Box<Timespec> {
    Box::new(Timespec::new().sec(d.as_secs()).nsec(d.subsec_nanos()))
}

impl Worker {
    pub fn new(
        disk: Arc<Disk>,
        limits: Limits,
        queue_size: u16,
        mem: GuestMemoryAtomic<GuestMemoryMmap>,
        in_flight: Arc<AtomicUsize>,
        submit_batch: usize,
    ) -> std::io::Result<Self> {
        let (sq, cq) = ring_size::ring_size(&disk, &limits, queue_size);
        Ok(Self {
            submit_batch: if submit_batch == 0 {
                usize::MAX
            } else {
                submit_batch
            },
            disk,
            limits,
            ring: Ring::with_sizes(sq, cq)?,
            parser: Parser::default(),
            mem,
            reqs: Slab::with_capacity(usize::from(queue_size)),
            ios: Slab::with_capacity(usize::from(queue_size)),
            parked: Vec::new(),
            in_flight,
            tick_armed: false,
            tick: timespec(TICK),
            numa_node: None,
            numa_known: false,
            reaped: Vec::with_capacity(usize::from(queue_size)),
            bad_input: RateLimitedLog::new(),
            path_errors: RateLimitedLog::new(),
            ring_errors: RateLimitedLog::new(),
            vring: None,
            broken: false,
            log: Arc::new(crate::dirty_log::LogSwitch::new()),
            used_log: None,
            inflight: None,
            resubmit: std::collections::VecDeque::new(),
            view: crate::vring::RingView::default(),
            spin: queue::Spin::new(queue::default_spin()),
        })
    }

    pub fn ring_eventfd(&self) -> std::os::fd::RawFd {
        self.ring.eventfd()
    }

    pub fn set_memory(&mut self, mem: GuestMemoryAtomic<GuestMemoryMmap>) {
        self.mem = mem;
    }

    /// Remembers the vring this worker serves (see `quiesce`).
    pub fn attach(&mut self, vring: &VringRwLock) {
        if self.vring.is_none() {
            self.vring = Some(vring.clone());
        }
    }

    /// Submits what is queued. A refused system call (no memory, ...) must
    /// not end the queue's thread: the entries stay queued, and the worker
    /// wakes itself shortly to try again.
    fn submit(&mut self) {
        if let Err(e) = self.ring.submit() {
            self.ring_errors
                .warn(format_args!("io_uring submit: {e}; trying again"));
            std::thread::sleep(SUBMIT_RETRY);
            self.ring.wake();
        }
    }
}

/// Pause before a submission the kernel refused is tried again.
const SUBMIT_RETRY: std::time::Duration = std::time::Duration::from_millis(1);

/// Failures to update the used ring or signal the guest: the guest's doing
/// (a used ring outside its memory, a closed call fd), so rate-limited.
static VRING_ERRORS: std::sync::Mutex<Option<RateLimitedLog>> = std::sync::Mutex::new(None);

fn vring_warn(msg: std::fmt::Arguments<'_>) {
    let mut log = VRING_ERRORS.lock().unwrap_or_else(|p| p.into_inner());
    log.get_or_insert_with(RateLimitedLog::new).warn(msg);
}

/// The NUMA node of the CPU this thread runs on now (sysfs), if any.
fn current_numa_node() -> Option<u32> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu < 0 {
        return None;
    }
    let dir = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}")).ok()?;
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
        .next()
}
