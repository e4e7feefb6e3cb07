//! Taking chains off the available ring without trusting the driver: an
//! available index too far ahead, a head out of range or a chain that
//! virtio-queue cuts short (loop, bad next index, bad indirect table) breaks
//! the queue. It is then left alone until the frontend re-initialises it
//! (reset, GET_VRING_BASE, a new connection), as the vhost-user spec allows,
//! and virtio-queue is never asked again for what it would refuse and log.

use std::num::Wrapping;
use std::sync::atomic::Ordering;

use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{DescriptorChain, QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestAddress};

use super::{Mem, Worker};

/// Available ring header (flags, idx) and element sizes (virtio 1.2, 2.7.6).
const AVAIL_HEADER: u64 = 4;
const AVAIL_ELEMENT: u64 = 2;

pub(super) enum Popped {
    Chain(DescriptorChain<Mem>),
    /// Nothing available.
    Empty,
    /// The queue is stopped (not ready): nothing to do until it restarts.
    Stopped,
    /// The driver broke the ring.
    Broken(String),
}

/// Takes the next available chain, checking what virtio-queue would only log.
pub(super) fn pop(vring: &VringRwLock, mem: &Mem) -> Popped {
    let mut state = vring.get_mut();
    let q = state.get_queue_mut();
    if !q.ready() {
        return Popped::Stopped;
    }
    let size = q.size();
    let avail = match q.avail_idx(&**mem, Ordering::Acquire) {
        Ok(idx) => idx,
        Err(e) => return Popped::Broken(format!("available index unreadable: {e}")),
    };
    let next = Wrapping(q.next_avail());
    let pending = (avail - next).0;
    if pending == 0 {
        return Popped::Empty;
    }
    if pending > size || size == 0 {
        return Popped::Broken(format!(
            "available index {} is {pending} entries past the device's {} (queue size {size})",
            avail.0, next.0
        ));
    }
    // The slot of the next head must be readable, or virtio-queue logs.
    let slot = q
        .avail_ring()
        .checked_add(AVAIL_HEADER + AVAIL_ELEMENT * u64::from(next.0 % size));
    let readable = slot.is_some_and(|a| mem.read_obj::<u16>(GuestAddress(a)).is_ok());
    if !readable {
        return Popped::Broken("available ring outside guest memory".into());
    }
    let chain = match q.iter(mem.clone()) {
        Ok(mut it) => it.next(),
        // The index moved meanwhile (too far ahead): virtio-queue refuses.
        Err(e) => return Popped::Broken(format!("available ring: {e}")),
    };
    match chain {
        Some(c) if c.head_index() >= size => Popped::Broken(format!(
            "head {} out of range (queue size {size})",
            c.head_index()
        )),
        Some(c) => Popped::Chain(c),
        None => Popped::Empty,
    }
}

/// A chain's descriptors, noting whether virtio-queue cut it short: it ends
/// a chain silently at a loop (after `size` descriptors), a next index out
/// of range, an unreadable descriptor or a bad indirect table.
pub(super) struct Checked<I> {
    chain: I,
    yielded: bool,
    last_has_next: bool,
    cut_short: bool,
}

impl<I: Iterator<Item = Descriptor>> Checked<I> {
    pub(super) fn new(chain: I) -> Self {
        Self {
            chain,
            yielded: false,
            last_has_next: false,
            cut_short: false,
        }
    }

    /// After the chain was read to its end: it ended before its last
    /// descriptor said so (or had none).
    pub(super) fn cut_short(&self) -> bool {
        self.cut_short
    }
}

impl<I: Iterator<Item = Descriptor>> Iterator for Checked<I> {
    type Item = Descriptor;

    fn next(&mut self) -> Option<Descriptor> {
        match self.chain.next() {
            Some(d) => {
                self.yielded = true;
                self.last_has_next = d.has_next();
                Some(d)
            }
            None => {
                self.cut_short = !self.yielded || self.last_has_next;
                None
            }
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
    }

    /// Whether the driver broke this queue since it was last initialised.
    pub fn is_broken(&self) -> bool {
        self.broken
    }
}
