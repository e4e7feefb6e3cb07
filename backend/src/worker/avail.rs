//! Taking chains off the available ring without trusting the driver: an
//! available index too far ahead, a head out of range, rings outside guest
//! memory or a chain cut short (loop, bad next index, bad indirect table: `vring::Chain`)
//! breaks the queue. It is then left alone until the frontend re-initialises it
//! (reset, GET_VRING_BASE, a new connection), as the vhost-user spec allows,
//! and nothing more is popped from it.

use std::io::Write;

use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::QueueT;

use mpath::Nanos;

use super::Worker;

pub(super) enum Popped {
    /// The head of the next chain (read it with `RingView::chain`).
    Chain(u16),
    /// Nothing available.
    Empty,
    /// The queue is stopped (not ready): nothing to do until it restarts.
    Stopped,
    /// The driver broke the ring.
    Broken(String),
}

/// Heads taken off the available ring in one go, not started yet: the
/// vring's lock and the ring's index are taken once per batch, not per
/// request. Empty whenever the worker is not inside `process_queue`. A
/// queue stopped meanwhile (GET_VRING_BASE marks it not ready, then waits
/// for the worker's lock) still has the batch's heads served: they count in
/// the available index it reports, and their used entries are published
/// before it is reported stopped.
#[derive(Default)]
pub(crate) struct Taken {
    heads: [u16; POP_BATCH],
    taken: usize,
    next: usize,
    /// The clock read right after the available index that showed these
    /// heads: each was made available before it and is started after it,
    /// so a part's time on its path counted from it never includes time
    /// before the guest made the request. One read per batch (at most
    /// `POP_BATCH` requests), not per request.
    pub(super) at: Nanos,
    /// What broke the ring after the heads taken.
    broken: Option<String>,
}

/// Heads taken per look at the available ring (a burst's early hand-over
/// comes every `--submit-batch` requests, 8 by default).
const POP_BATCH: usize = 16;

impl Worker {
    /// Takes the next available head through the ring view (`crate::vring`
    /// checks the available index, the head and that the rings are in
    /// guest memory).
    pub(super) fn pop(&mut self, vring: &VringRwLock) -> Popped {
        let t = &mut self.taken;
        if t.next < t.taken {
            t.next += 1;
            return Popped::Chain(t.heads[t.next - 1]);
        }
        if let Some(why) = t.broken.take() {
            return Popped::Broken(why);
        }
        let mut state = vring.get_mut();
        let q = state.get_queue_mut();
        if !q.ready() {
            return Popped::Stopped;
        }
        let batch = self.view.pop_batch(&self.table, q, &mut t.heads);
        t.taken = batch.taken;
        t.next = 0;
        t.broken = batch.broken;
        drop(state);
        if t.taken > 0 {
            t.at = self.disk.engine.now();
        }
        if t.taken == 0 {
            return match t.broken.take() {
                Some(why) => Popped::Broken(why),
                None => Popped::Empty,
            };
        }
        t.next = 1;
        Popped::Chain(t.heads[0])
    }

    /// Puts the heads taken but not started back on the available ring (the
    /// worker stops early: the ring broke), as if they had never been taken.
    pub(super) fn untake(&mut self, vring: &VringRwLock) {
        let t = &mut self.taken;
        let rest = (t.taken - t.next) as u16;
        *t = Taken {
            at: t.at,
            ..Taken::default()
        };
        if rest > 0 {
            let mut state = vring.get_mut();
            let q = state.get_queue_mut();
            q.set_next_avail(q.next_avail().wrapping_sub(rest));
        }
    }
}

impl Worker {
    /// Stops processing this queue until the frontend re-initialises it.
    /// Requests already started still complete. (vhost-user-backend keeps
    /// the frontend's error eventfd to itself, so the frontend learns of it
    /// from the guest's timeout, as with QEMU's own broken-device state.)
    pub(super) fn mark_broken(&mut self, why: &str) {
        if self.broken {
            return;
        }
        self.broken = true;
        self.disk
            .bad_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.bad_input.warn(format_args!(
            "queue broken by the driver: {why}; not processing it until the frontend resets it"
        ));
        // Tell the frontend (QEMU logs "vhost vring error in virtqueue N").
        if let Some(fd) = &self.error_fd {
            match (&*fd).write_all(&1u64.to_ne_bytes()) {
                // Full (the fd is non-blocking): signalled already.
                Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => self
                    .bad_input
                    .warn(format_args!("signalling the queue's error eventfd: {e}")),
                _ => {}
            }
        }
    }

    /// The frontend's error eventfd for this queue (`SET_VRING_ERR`).
    pub fn set_error_fd(&mut self, fd: Option<std::fs::File>) {
        self.error_fd = fd;
    }

    /// Whether the driver broke this queue since it was last initialised.
    pub fn is_broken(&self) -> bool {
        self.broken
    }
}
