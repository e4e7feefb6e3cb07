//! What `get_queues` reports of one virtqueue: its indexes as the guest
//! left them in the rings beside the ones the daemon has reached, the
//! event indexes each side asked to be notified at, and the requests the
//! daemon holds. A stalled queue shows here which side is waiting: a
//! request made available but not taken (`avail_idx` ahead of
//! `next_avail`: a kick lost or not listened to), completions published
//! with no call the guest asked for (`used_idx` past `used_event`, `calls`
//! still), or requests taken and never completed (`in_flight`). QEMU's
//! `x-query-virtio-queue-status` shows the same for its own devices.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::QueueT;
use vm_memory::{Bytes, GuestAddress, GuestMemory};

/// Counted by the queue's thread and its worker (one writer each: a load
/// and a store, no locked add on the data path).
#[derive(Debug, Default)]
pub struct QueueCounters {
    /// Kicks the queue's thread was woken by.
    pub kicks: AtomicU64,
    /// Calls (used-buffer notifications) the worker signalled.
    pub calls: AtomicU64,
    /// Nanoseconds spent spinning for the guest's next requests (the
    /// worker's spin, `--poll-us`, a thread's poll of several queues on
    /// its first queue): CPU time the daemon would give back if sleeping
    /// were free.
    pub spin_ns: AtomicU64,
}

impl QueueCounters {
    pub fn count(c: &AtomicU64) {
        Self::add(c, 1);
    }

    pub fn add(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Adds `d` to `spin_ns`.
    pub fn spun(&self, d: std::time::Duration) {
        Self::add(&self.spin_ns, d.as_nanos() as u64);
    }

    /// Adds the time since `start` to `spin_ns`.
    pub fn spun_since(&self, start: std::time::Instant) {
        self.spun(start.elapsed());
    }
}

/// One queue's state. Ring fields are `None` where the ring is not set up
/// or not in guest memory.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct QueueStatus {
    pub queue: usize,
    /// Started (it has a kick fd and was not stopped by GET_VRING_BASE).
    pub ready: bool,
    /// Enabled by the frontend (SET_VRING_ENABLE).
    pub enabled: bool,
    pub size: u16,
    pub event_idx: bool,
    /// The available ring's index: requests the guest made available.
    pub avail_idx: Option<u16>,
    /// The next available entry the daemon takes.
    pub next_avail: u16,
    /// The used ring's index: requests the daemon completed to the guest.
    pub used_idx: Option<u16>,
    pub next_used: u16,
    /// EVENT_IDX: the guest wants a call once `used_idx` passes this.
    pub used_event: Option<u16>,
    /// EVENT_IDX: the daemon wants a kick once `avail_idx` passes this.
    pub avail_event: Option<u16>,
    /// VIRTQ_AVAIL_F_NO_INTERRUPT and VIRTQ_USED_F_NO_NOTIFY (without
    /// EVENT_IDX: calls and kicks off).
    pub avail_flags: Option<u16>,
    pub used_flags: Option<u16>,
    /// Requests taken from the ring and not yet completed.
    pub in_flight: usize,
    pub kicks: u64,
    pub calls: u64,
    /// Microseconds spent spinning for the guest's next requests.
    pub spin_us: u64,
}

impl QueueStatus {
    /// Reads queue `queue` from its vring and the guest memory `mem`.
    pub fn read<M: GuestMemory>(
        queue: usize,
        vring: &VringRwLock,
        mem: &M,
        in_flight: usize,
        counters: &QueueCounters,
    ) -> Self {
        let state = vring.get_ref();
        let q = state.get_queue();
        let size = q.size();
        let ring = q.ready() && size > 0;
        let u16_at = |addr: u64| -> Option<u16> {
            ring.then(|| mem.read_obj::<u16>(GuestAddress(addr)).ok())
                .flatten()
                .map(u16::from_le)
        };
        let (avail, used) = (q.avail_ring(), q.used_ring());
        let n = u64::from(size);
        Self {
            queue,
            ready: q.ready(),
            enabled: state.is_enabled(),
            size,
            event_idx: q.event_idx_enabled(),
            avail_idx: u16_at(avail.wrapping_add(2)),
            next_avail: q.next_avail(),
            used_idx: u16_at(used.wrapping_add(2)),
            next_used: q.next_used(),
            used_event: u16_at(avail.wrapping_add(4 + 2 * n)),
            avail_event: u16_at(used.wrapping_add(4 + 8 * n)),
            avail_flags: u16_at(avail),
            used_flags: u16_at(used),
            in_flight,
            kicks: counters.kicks.load(Ordering::Relaxed),
            calls: counters.calls.load(Ordering::Relaxed),
            spin_us: counters.spin_ns.load(Ordering::Relaxed) / 1000,
        }
    }
}
