//! The vhost-user-blk device: what the request handler (`vhost_user`)
//! calls. One worker per queue; each worker's io_uring eventfd joins its
//! queue thread's epoll loop so completions are handled where requests
//! were submitted.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost_user_backend::VringRwLock;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;

use crate::dirty_log::{LogSwitch, VHOST_F_LOG_ALL};
use crate::disk::Disk;
use crate::queue_status::{QueueCounters, QueueStatus};
use crate::vhost_user::backend_channel::BackendChannel;
use crate::vhost_user::{InflightQueue, InflightRegion};
use crate::virtio::{self, Limits};
use crate::worker::Worker;

struct Inner {
    num_queues: u16,
    queue_size: u16,
    features: u64,
    config: Vec<u8>,
    workers: Vec<Mutex<Worker>>,
    in_flight: Vec<Arc<AtomicUsize>>,
    /// Adaptive polling window after each burst of work (0: off).
    poll: Duration,
    /// INFLIGHT_SHMFD is offered (off: `--no-inflight`).
    inflight_offered: AtomicBool,
    /// The frontend gave us an inflight region: a stop need not wait for
    /// what is in flight (a restarted daemon resubmits it).
    inflight_tracked: AtomicBool,
    /// Dirty logging for live migration, shared with every worker.
    dirty_log: Arc<LogSwitch>,
    /// Each queue's kicks and calls, and its vring once the connection's
    /// handler has one, and the guest memory (`queue_status`).
    counters: Vec<Arc<QueueCounters>>,
    vrings: Mutex<Vec<VringRwLock>>,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    /// The capacity in the config space is the disk's now (`resize`).
    disk: Arc<Disk>,
    /// The backend request channel, once the frontend gave one; and its
    /// descriptor between the serve loop's peek and the handler's message.
    backend_channel: Mutex<Option<Arc<BackendChannel>>>,
    backend_req_fd: Mutex<Option<OwnedFd>>,
}

/// What telling the frontend of a config change did.
#[derive(Debug)]
pub enum ConfigNotice {
    /// Sent (and acknowledged, with REPLY_ACK).
    Sent,
    /// The frontend gave no backend request channel (not negotiated).
    NoChannel,
    Failed(std::io::Error),
}

/// The backend of one frontend connection; the disk outlives it.
#[derive(Clone)]
pub struct BlkDevice(Arc<Inner>);

impl BlkDevice {
    pub fn new(
        disk: Arc<Disk>,
        num_queues: u16,
        queue_size: u16,
        poll: Duration,
        submit_batch: usize,
        mem: GuestMemoryAtomic<GuestMemoryMmap>,
    ) -> std::io::Result<Self> {
        let limits = Limits::new(&disk, queue_size);
        let mut workers = Vec::new();
        let mut in_flight = Vec::new();
        let dirty_log = Arc::new(LogSwitch::new());
        let mut counters = Vec::new();
        for _ in 0..num_queues {
            let counter = Arc::new(AtomicUsize::new(0));
            let mut w = Worker::new(
                disk.clone(),
                limits,
                queue_size,
                mem.clone(),
                counter.clone(),
                submit_batch,
            )?;
            w.set_dirty_log(dirty_log.clone());
            counters.push(w.counters.clone());
            workers.push(Mutex::new(w));
            in_flight.push(counter);
        }
        Ok(Self(Arc::new(Inner {
            disk,
            backend_channel: Mutex::new(None),
            backend_req_fd: Mutex::new(None),
            num_queues,
            queue_size,
            features: virtio::features(&limits, num_queues),
            config: virtio::config_space(&limits, num_queues),
            workers,
            in_flight,
            poll,
            inflight_offered: AtomicBool::new(true),
            inflight_tracked: AtomicBool::new(false),
            dirty_log,
            counters,
            vrings: Mutex::new(Vec::new()),
            mem,
        })))
    }

    /// The connection's vrings, for `queue_status` (the handler's own).
    pub fn set_vrings(&self, vrings: Vec<VringRwLock>) {
        *self.0.vrings.lock().unwrap_or_else(|p| p.into_inner()) = vrings;
    }

    /// Queue `queue`'s counters.
    pub fn counters(&self, queue: usize) -> Option<&QueueCounters> {
        self.0.counters.get(queue).map(|c| &**c)
    }

    /// A kick woke queue `queue`'s thread.
    pub fn count_kick(&self, queue: usize) {
        if let Some(c) = self.0.counters.get(queue) {
            QueueCounters::count(&c.kicks);
        }
    }

    /// Every queue's state as `get_queues` reports it. Reads the rings and
    /// counters only: no worker lock, so a stuck worker cannot stall it.
    pub fn queue_status(&self) -> Vec<QueueStatus> {
        let vrings = self.0.vrings.lock().unwrap_or_else(|p| p.into_inner());
        let mem = self.0.mem.memory();
        vrings
            .iter()
            .enumerate()
            .zip(self.0.in_flight.iter().zip(&self.0.counters))
            .map(|((q, vring), (in_flight, counters))| {
                let in_flight = in_flight.load(Ordering::Acquire);
                QueueStatus::read(q, vring, &*mem, in_flight, counters)
            })
            .collect()
    }

    /// The event id of a worker's completions in `handle_event` (0 is a kick).
    pub fn completion_event_id(&self) -> u64 {
        u64::from(self.0.num_queues) + 1
    }

    pub fn ring_eventfd(&self, queue: usize) -> std::os::fd::RawFd {
        self.worker(queue).ring_eventfd()
    }

    fn worker(&self, queue: usize) -> MutexGuard<'_, Worker> {
        // A worker panicking is a bug; keep serving the others.
        self.0.workers[queue]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// What every worker's ring registers (fixed buffers, files).
    pub fn set_registration(&self, opts: mpath_io::RegOptions) {
        for q in 0..self.0.workers.len() {
            self.worker(q).set_registration(opts);
        }
    }

    /// Releases every worker's registered guest memory.
    pub fn forget_memory(&self) {
        for q in 0..self.0.workers.len() {
            self.worker(q).forget_memory();
        }
    }

    /// What registration did on every queue, summed.
    pub fn reg_stats(&self) -> mpath_io::RegStats {
        let mut sum = mpath_io::RegStats::default();
        for q in 0..self.0.workers.len() {
            sum += self.worker(q).reg_stats();
        }
        sum
    }

    /// Requests in flight on every queue.
    pub fn in_flight(&self) -> usize {
        self.0
            .in_flight
            .iter()
            .map(|c| c.load(Ordering::Acquire))
            .sum()
    }

    /// Migration's dirty log (`SET_LOG_BASE`, `LOG_ALL` in `SET_FEATURES`).
    pub fn dirty_log(&self) -> &LogSwitch {
        &self.0.dirty_log
    }

    /// SET_LOG_BASE: the new log replaces the old, and once this returns
    /// no worker marks the old one. QEMU reads the old log once more after
    /// our reply and drops it: a mark made there later would be lost.
    /// Every mark is made under its worker's lock, with the log loaded in
    /// that same critical section, so taking each lock once after the swap
    /// waits out any worker still holding the old log. (Its mapping lives
    /// as long as a worker holds it: an `Arc`.)
    pub fn set_log_base(&self, log: crate::dirty_log::DirtyLog) {
        self.0.dirty_log.set_base(log);
        for q in 0..self.0.workers.len() {
            drop(self.worker(q));
        }
    }

    /// Where queue `queue`'s used ring is logged (`VHOST_VRING_F_LOG`).
    pub fn set_used_log(&self, queue: usize, log_guest_addr: Option<u64>) {
        if queue < self.0.workers.len() {
            self.worker(queue).set_used_log(log_guest_addr);
        }
    }

    /// Where queue `queue` tells the frontend it broke (`SET_VRING_ERR`).
    pub fn set_error_fd(&self, queue: usize, fd: Option<std::fs::File>) {
        if queue < self.0.workers.len() {
            self.worker(queue).set_error_fd(fd);
        }
    }

    /// The other queues of `queue`'s thread, for its worker's spin.
    pub fn set_siblings(&self, queue: usize, siblings: Option<Arc<vmm_sys_util::epoll::Epoll>>) {
        if queue < self.0.workers.len() {
            self.worker(queue).set_siblings(siblings);
        }
    }

    /// Drops every request still in flight after the frontend went away.
    pub fn discard_in_flight(&self) {
        for q in 0..self.0.workers.len() {
            self.worker(q).drain_and_discard();
        }
    }
}

impl BlkDevice {
    pub fn num_queues(&self) -> usize {
        usize::from(self.0.num_queues)
    }

    /// The largest queue size a frontend may set.
    pub fn queue_size(&self) -> u16 {
        self.0.queue_size
    }

    pub fn features(&self) -> u64 {
        // Every write into guest memory can be logged (see `dirty_log`).
        self.0.features | VHOST_F_LOG_ALL
    }

    pub fn protocol_features(&self) -> VhostUserProtocolFeatures {
        let f = VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
            | VhostUserProtocolFeatures::RESET_DEVICE
            | VhostUserProtocolFeatures::LOG_SHMFD
            // The channel that tells the frontend of a resize.
            | VhostUserProtocolFeatures::BACKEND_REQ;
        if self.0.inflight_offered.load(Ordering::Relaxed) {
            f | VhostUserProtocolFeatures::INFLIGHT_SHMFD
        } else {
            f
        }
    }

    /// Whether INFLIGHT_SHMFD is offered (`--no-inflight` turns it off).
    pub fn offer_inflight(&self, on: bool) {
        self.0.inflight_offered.store(on, Ordering::Relaxed);
    }

    /// The frontend's inflight region (SET_INFLIGHT_FD), one part per worker.
    pub fn set_inflight(&self, region: Option<Arc<InflightRegion>>) {
        for q in 0..self.0.workers.len() {
            let part = region.clone().and_then(|r| InflightQueue::new(r, q as u16));
            self.worker(q).set_inflight(part);
        }
        self.0
            .inflight_tracked
            .store(region.is_some(), Ordering::Release);
    }

    /// Whether a stop may leave requests in flight to a restarted daemon.
    pub fn tracks_inflight(&self) -> bool {
        self.0.inflight_tracked.load(Ordering::Acquire)
    }

    /// At queue start: repair and resubmit from the inflight region.
    pub fn restore_inflight(&self, queue: usize, vring: &VringRwLock) {
        if queue < self.0.workers.len() {
            let mut w = self.worker(queue);
            w.attach(vring);
            w.restore_inflight(vring);
        }
    }

    /// Waits until no worker is between the steps of publishing a used
    /// entry, and keeps them from starting one: the inflight region is
    /// consistent from then on, whatever the process does next.
    pub fn hold_workers(&self) -> Vec<MutexGuard<'_, Worker>> {
        (0..self.0.workers.len()).map(|q| self.worker(q)).collect()
    }

    pub fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        // Exactly `size` bytes from `offset`; zeroes past our structure.
        let mut config = self.0.config.clone();
        // `capacity`, the first field, as it is now.
        let sectors = self.0.disk.capacity_bytes() >> virtio::SECTOR_SHIFT;
        config[0..8].copy_from_slice(&sectors.to_le_bytes());
        let mut out = vec![0u8; size as usize];
        let start = (offset as usize).min(config.len());
        let end = (offset as usize)
            .saturating_add(size as usize)
            .min(config.len());
        out[..end - start].copy_from_slice(&config[start..end]);
        out
    }

    /// The serve loop's copy of the next SET_BACKEND_REQ_FD's descriptor.
    pub fn stash_backend_req_fd(&self, fd: OwnedFd) {
        *self
            .0
            .backend_req_fd
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(fd);
    }

    /// The crate accepted SET_BACKEND_REQ_FD: the stashed descriptor is the
    /// channel from now on.
    pub fn open_backend_channel(&self, reply_ack: bool) {
        let fd = self
            .0
            .backend_req_fd
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let channel = fd.and_then(|fd| match BackendChannel::new(fd, reply_ack) {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                log::warn!("backend request channel: {e}");
                None
            }
        });
        if channel.is_none() {
            log::warn!(
                "SET_BACKEND_REQ_FD: no descriptor of ours; resizes will not reach the guest"
            );
        }
        *self
            .0
            .backend_channel
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = channel;
    }

    /// Tells the frontend the config space changed (the capacity). Waits for
    /// its acknowledgement with REPLY_ACK; never holds the handler (the
    /// frontend reads the config space before it answers).
    pub fn config_changed(&self) -> ConfigNotice {
        let channel = self
            .0
            .backend_channel
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match channel {
            None => ConfigNotice::NoChannel,
            Some(c) => match c.send_config_change() {
                Ok(()) => ConfigNotice::Sent,
                Err(e) => ConfigNotice::Failed(e),
            },
        }
    }

    pub fn update_memory(&self, mem: GuestMemoryAtomic<GuestMemoryMmap>) {
        for q in 0..self.0.workers.len() {
            self.worker(q).set_memory(mem.clone());
        }
    }

    /// RESET_DEVICE: what is in flight is dropped (the guest reuses it).
    pub fn reset_device(&self) {
        self.discard_in_flight();
        // Dropped, not to be resubmitted: the guest re-creates its rings.
        for q in 0..self.0.workers.len() {
            let mut w = self.worker(q);
            w.forget_inflight();
            w.forget_rings();
        }
    }

    /// GET_VRING_BASE. Reported stopped only once nothing of the queue can
    /// write guest memory: under the worker's lock (a chain popped but not
    /// yet counted is finished too), with no cap but the paths' io-timeout-ms.
    pub fn stop_vring(&self, queue: usize) {
        if queue < self.0.workers.len() {
            self.worker(queue).quiesce();
        }
    }

    /// Serves a kick (`device_event` 0) or the worker's completions
    /// (`completion_event_id`) on queue `thread_id`'s thread.
    pub fn handle_event(
        &self,
        device_event: u16,
        _evset: EventSet,
        vrings: &[VringRwLock],
        thread_id: usize,
    ) -> std::io::Result<()> {
        let Some(vring) = vrings.first() else {
            return Ok(());
        };
        if thread_id >= self.0.workers.len() {
            return Ok(());
        }
        let mut w = self.worker(thread_id);
        w.attach(vring);
        let polling = !self.0.poll.is_zero();
        if device_event == 0 {
            if crate::shutdown::requested() {
                return Ok(());
            }
            w.process_queue(vring, !polling);
        } else if u64::from(device_event) == self.completion_event_id() {
            w.process_completions(vring);
        } else {
            return Ok(());
        }
        // Commands on the polled ring (--io-poll) complete only when
        // polled: the worker keeps polling while any is in flight.
        if (polling || w.io_polling()) && !crate::shutdown::requested() {
            w.poll(vring, self.0.poll);
        }
        // Never an error: one would end this queue's thread for good.
        Ok(())
    }
}
