//! One queue's worker: pops descriptor chains, sends each request through
//! the engine to a path on this worker's own I/O queue (`mpath_io::IoQueue`:
//! the ring, timers, lab shaping), and completes requests when every part
//! is done.
//!
//! A part whose path fails is re-sent on another path (after the ghost-write
//! guard's delay for cancelled writes), waits for a usable path up to the
//! no-path timeout, or is retried on its path after the controller's retry
//! delay: the guest sees only the final result. Every wait is a timer on
//! the I/O queue, never a sleeping thread.

mod avail;
mod dirty;
mod drain;
#[cfg(test)]
mod garbage_tests;
mod hold;
mod inflight;
#[cfg(test)]
mod machine_tests;
mod parts;
mod queue;
mod ring_size;
pub(crate) mod spin;
mod tables;
#[cfg(test)]
mod tests;
mod timers;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use mpath::{Attempts, FlushPart, IoInfo, IoKind, Nanos, PathId};
use mpath_io::{Event, GuestBufs, IoOp, IoQueue, PathDriver, PathTable, Shaping};
use slab::Slab;
use vhost_user_backend::VringRwLock;
use vm_memory::{GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

use crate::disk::Disk;
use crate::ratelimit::RateLimitedLog;
use crate::request::Parser;
use crate::virtio::Limits;

type Mem = Arc<GuestMemoryMmap>;

/// A guest request being served: completes when `remaining` parts are done.
struct Req {
    head: u16,
    status_addr: GuestAddress,
    used_len: u32,
    status: u8,
    remaining: u32,
    /// The guest memory the request was parsed in (status, dirty log): its
    /// slot in the worker's `tables`.
    table: usize,
    /// A read: its data buffers are marked in the dirty log on completion.
    reads: bool,
}

impl Req {
    /// A request at `head` with no parts yet (see `Worker::launch`).
    fn new(head: u16, status_addr: GuestAddress, used_len: u32, reads: bool) -> Self {
        Self {
            head,
            status_addr,
            used_len,
            status: crate::request::STATUS_OK,
            remaining: 0,
            table: 0,
            reads,
        }
    }
}

impl Io {
    /// What the engine is told of this part.
    #[inline]
    fn info(&self) -> IoInfo {
        IoInfo {
            kind: op_kind(self.op),
            bytes: self.len,
        }
    }
}

/// Where a part is (one byte: `Io` stays small enough to move without a
/// memcpy call).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stage {
    /// On the I/O queue (on `Io::path`): its completion comes from there.
    Sent,
    /// A deferral on the I/O queue; then sent again on `Io::path`.
    Retry,
    /// A deferral on the I/O queue; then sent again on any path.
    Failover,
    /// Waiting for a usable path since it was born (`Attempts::born`: a
    /// failover does not restart the no-path clock).
    NoPath,
}

/// One part of a request on one path.
struct Io {
    /// Its request's slot in `Worker::reqs` (u32 so that `Io` moves in
    /// and out of its slab without a memcpy call).
    req: u32,
    path: PathId,
    op: IoOp,
    offset: u64,
    len: u64,
    /// Its tries over the paths: first submission, rounds, paths failed.
    att: Attempts,
    /// A flush command: the path it is for and what it covers.
    flush: Option<Box<FlushPart>>,
    retries: u32,
    started: Nanos,
    stage: Stage,
    /// This part's data while it is not on the I/O queue (which holds it
    /// while the part is there, and gives it back with the completion).
    bufs: Option<GuestBufs>,
}

pub struct Worker {
    /// Requests submitted (and inline completions reaped) per part of a
    /// burst: the guest sees early completions while the rest is parsed.
    submit_batch: usize,
    /// Bytes of the requests started since the burst was last handed over,
    /// and how many hand it over (see `queue::SUBMIT_BATCH_BYTES`).
    burst_bytes: u64,
    /// Early hand-overs of this burst that completed requests since the
    /// guest was last called (`queue::EARLY_HANDOVERS_PER_CALL`).
    early_uncalled: u32,
    submit_batch_bytes: u64,
    disk: Arc<Disk>,
    limits: Limits,
    queue: IoQueue<Disk>,
    parser: Parser,
    /// The memory table the worker serves with, as last handed over
    /// (`set_memory`: the handler does so after every change of it): the
    /// rings and requests are read through it without an atomic load per
    /// access.
    table: Mem,
    reqs: Slab<Req>,
    ios: Slab<Io>,
    /// Parts waiting for a usable path.
    parked: Vec<usize>,
    /// Requests waiting for the disk's QoS budget (see `hold`).
    hold: hold::Hold,
    /// Requests in flight, read without the worker's lock (drain, shutdown).
    in_flight: Arc<AtomicUsize>,
    numa_node: Option<u32>,
    /// This worker's statistics shard (counts without shared atomics).
    stats: mpath::StatsShard,
    /// `numa_node` was read on the worker's own thread (once: sysfs).
    numa_known: bool,
    events: Vec<Event>,
    bad_input: RateLimitedLog,
    path_errors: RateLimitedLog,
    ring_errors: RateLimitedLog,
    /// The vring this worker serves (first event), for draining outside
    /// the worker's thread (GET_VRING_BASE).
    vring: Option<VringRwLock>,
    /// Used entries to publish together (see `flush_used`).
    used_batch: Vec<(u16, u32)>,
    /// Heads taken off the available ring, not yet started (see `avail`).
    taken: avail::Taken,
    /// The driver broke the ring: nothing more is popped until the
    /// frontend re-initialises the queue (see `avail`).
    broken: bool,
    /// The memory tables of requests in flight (see `tables`).
    tables: tables::Tables,
    /// The frontend's error eventfd (`SET_VRING_ERR`), signalled when the
    /// queue breaks.
    error_fd: Option<std::fs::File>,
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
    /// Adaptive wait before re-arming kicks (see `spin::Spin`).
    spin: spin::Spin,
    /// Guest memory is registered as fixed buffers (when a path takes them).
    fixed_buffers: bool,
    /// The other queues of this worker's thread (see `queue_thread`): a
    /// spin ends when one of them has work.
    siblings: Option<Arc<vmm_sys_util::epoll::Epoll>>,
    /// Kicks and calls of this queue (`get_queues`).
    pub(crate) counters: Arc<crate::queue_status::QueueCounters>,
    /// This queue's eventfd as the disk writes it when a path's driver
    /// changes (held here: the disk keeps only a weak reference).
    _driver_waker: Arc<vmm_sys_util::eventfd::EventFd>,
}

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

/// A worker's own keep-alive of one guest memory table (see
/// [`Worker::keep_alive`]).
type KeepAlive = Arc<Mem>;

/// The one way guest buffers reach the I/O queue; `keep` holds `mem`'s
/// table.
fn guest_bufs(mem: &Mem, keep: KeepAlive, iov: Vec<libc::iovec>) -> GuestBufs {
    debug_assert!(Arc::ptr_eq(&*keep, mem));
    // SAFETY: the parser resolved these iovecs to host addresses of guest
    // ranges it checked in `mem` (a split keeps subranges of them), and
    // `keep`, handed over with them, holds that very table (checked by the
    // caller, `Worker::keep_alive`), keeping its mapping alive while they live.
    unsafe { GuestBufs::new(keep, iov) }
}

/// The disk's paths as the I/O queue sees them.
impl PathTable for Disk {
    fn driver(&self, path: usize) -> Option<Arc<dyn PathDriver>> {
        Disk::driver_arc(self, PathId(path))
    }
    fn generation(&self) -> u64 {
        Disk::drivers_generation(self)
    }
    fn shaping(&self, path: usize) -> &Shaping {
        Disk::shaping(self, PathId(path))
    }
    fn io_timeout(&self, path: usize) -> Option<u64> {
        Disk::io_timeout(self, PathId(path))
    }
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
        let queue = IoQueue::new(disk.clone(), sq, cq)?;
        let driver_waker = Arc::new(queue.waker()?);
        disk.wake_on_driver_change(&driver_waker);
        let stats = disk.engine.stats_shard();
        Ok(Self {
            submit_batch: if submit_batch == 0 {
                usize::MAX
            } else {
                submit_batch
            },
            burst_bytes: 0,
            early_uncalled: 0,
            // `--submit-batch 0` hands over whole bursts, however large.
            submit_batch_bytes: if submit_batch == 0 {
                u64::MAX
            } else {
                queue::SUBMIT_BATCH_BYTES
            },
            disk,
            limits,
            queue,
            parser: Parser::default(),
            table: mem.memory().into_inner(),
            reqs: Slab::with_capacity(usize::from(queue_size)),
            ios: Slab::with_capacity(usize::from(queue_size)),
            parked: Vec::new(),
            hold: hold::Hold::default(),
            in_flight,
            numa_node: None,
            stats,
            numa_known: false,
            events: Vec::with_capacity(usize::from(queue_size)),
            bad_input: RateLimitedLog::new(),
            path_errors: RateLimitedLog::new(),
            ring_errors: RateLimitedLog::new(),
            vring: None,
            used_batch: Vec::with_capacity(usize::from(queue_size)),
            taken: avail::Taken::default(),
            broken: false,
            tables: tables::Tables::default(),
            error_fd: None,
            log: Arc::new(crate::dirty_log::LogSwitch::new()),
            used_log: None,
            inflight: None,
            resubmit: std::collections::VecDeque::new(),
            view: crate::vring::RingView::default(),
            spin: spin::Spin::new(spin::default_spin()),
            fixed_buffers: false,
            siblings: None,
            counters: Arc::default(),
            _driver_waker: driver_waker,
        })
    }

    /// The epoll set of the other queues this worker's thread serves.
    pub fn set_siblings(&mut self, siblings: Option<Arc<vmm_sys_util::epoll::Epoll>>) {
        self.siblings = siblings;
    }

    /// Another queue of this thread has work (a kick, completions, a wake).
    fn sibling_has_work(&self) -> bool {
        let Some(ep) = &self.siblings else {
            return false;
        };
        let mut ev = [vmm_sys_util::epoll::EpollEvent::default(); 1];
        matches!(ep.wait(0, &mut ev), Ok(n) if n > 0)
    }

    /// What the I/O queue registers with its ring.
    pub fn set_registration(&mut self, opts: mpath_io::RegOptions) {
        self.fixed_buffers = opts.fixed_buffers;
        self.queue.set_registration(opts);
    }

    pub fn reg_stats(&self) -> mpath_io::RegStats {
        self.queue.reg_stats()
    }

    /// Releases the registered guest memory (the frontend left): its pages
    /// are unpinned once no command uses them.
    pub fn forget_memory(&mut self) {
        self.queue.forget_memory();
    }

    /// Commands are in flight on the polled ring: keep polling (`poll`).
    pub fn io_polling(&self) -> bool {
        self.queue.polling()
    }

    /// Names the guest memory of this batch to the I/O queue when it is a
    /// new table (its regions become fixed buffers at the next command
    /// that can use them).
    fn name_memory(&mut self, mem: &Mem) {
        if !self.fixed_buffers {
            return;
        }
        // Named by the worker's keep-alive of the table: the one every
        // request's `GuestBufs` carries, so `GuestBufs::memory_id` matches.
        let keep = self.keep_alive(mem);
        // The queue holds the keep-alive it was named with, so its address
        // is not reused while it is the queue's.
        if self.queue.named_memory() == Some(Arc::as_ptr(&keep).cast::<()>() as usize) {
            return;
        }
        use vm_memory::{GuestMemoryBackend, GuestMemoryRegion, MemoryRegionAddress};
        let regions: Vec<mpath_io::HostRegion> = mem
            .iter()
            .filter_map(|r| {
                let host = r.get_host_address(MemoryRegionAddress(0)).ok()?;
                Some(mpath_io::HostRegion {
                    host: host as usize,
                    len: usize::try_from(r.len()).ok()?,
                })
            })
            .collect();
        self.queue.set_memory(keep, &regions);
    }

    pub fn ring_eventfd(&self) -> std::os::fd::RawFd {
        self.queue.eventfd()
    }

    pub fn set_memory(&mut self, mem: GuestMemoryAtomic<GuestMemoryMmap>) {
        self.table = mem.memory().into_inner();
        // The old table is unmapped once its last request is done, not held.
        self.tables.forget_current();
    }

    /// A device reset: the ring view forgets the rings' layout and the used
    /// entries counted for the next notification (the frontend lays the
    /// rings out again from index 0).
    pub fn forget_rings(&mut self) {
        self.view = crate::vring::RingView::default();
    }

    /// This worker's keep-alive of the table `mem`: one `Arc` per worker and
    /// table, so that each part's buffers clone and drop a counter no other
    /// queue's worker touches (the table's own `Arc` is shared by all).
    fn keep_alive(&mut self, mem: &Mem) -> KeepAlive {
        self.tables.keep_alive(mem)
    }

    /// Moves this queue's count of requests in flight by `delta`. Only this
    /// worker writes it (others read it: drain, shutdown, `get_queues`), so
    /// a load and a release store do what a locked read-modify-write did,
    /// without the lock: the writes that finished a request are visible to
    /// whoever sees the count without it.
    fn count_in_flight(&self, delta: isize) {
        let n = self.in_flight.load(std::sync::atomic::Ordering::Relaxed);
        self.in_flight.store(
            n.wrapping_add_signed(delta),
            std::sync::atomic::Ordering::Release,
        );
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
        let engine = &self.disk.engine;
        if let Err(e) = self.queue.flush_stamped(|| engine.now()) {
            self.ring_errors
                .warn(format_args!("io_uring submit: {e}; trying again"));
            std::thread::sleep(SUBMIT_RETRY);
            self.queue.wake();
        }
    }
}

/// Pause before a submission the kernel refused is tried again.
const SUBMIT_RETRY: std::time::Duration = std::time::Duration::from_millis(1);

/// Failures to update the used ring or signal the guest: the guest's doing
/// (a used ring outside its memory, a closed call fd), so rate-limited.
static VRING_ERRORS: std::sync::Mutex<Option<RateLimitedLog>> = std::sync::Mutex::new(None);

pub(crate) fn vring_warn(msg: std::fmt::Arguments<'_>) {
    let mut log = VRING_ERRORS.lock().unwrap_or_else(|p| p.into_inner());
    log.get_or_insert_with(RateLimitedLog::new).warn(msg);
}

/// The NUMA node of the CPU this thread runs on now (sysfs), if any.
fn current_numa_node() -> Option<u32> {
    let cpu = mpath_io::current_cpu()?;
    let dir = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}")).ok()?;
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
        .next()
}
