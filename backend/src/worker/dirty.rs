//! Dirty logging of the worker's own writes into guest memory (see
//! `crate::dirty_log`): read data the kernel DMA'd into guest buffers,
//! status bytes, GET_ID data and the used ring. Nothing is done while
//! logging is off: one atomic load per completion.

use std::sync::Arc;

use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::QueueT;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::Worker;
use crate::dirty_log::{guest_ranges, LogSwitch};

/// Offsets in a split ring's used ring: `flags`, `idx`, the element
/// array, and `avail_event` after it.
pub(super) const USED_FLAGS_OFFSET: u64 = 0;
const USED_IDX_OFFSET: u64 = 2;
const USED_RING_OFFSET: u64 = 4;
const USED_ELEM_LEN: u64 = 8;

/// Where `avail_event` lies in a used ring of `size` elements.
pub(super) fn avail_event_offset(size: u16) -> u64 {
    USED_RING_OFFSET + u64::from(size) * USED_ELEM_LEN
}

impl Worker {
    /// The log switch the request handler drives (`SET_LOG_BASE`,
    /// `SET_FEATURES`); a fresh worker has one that is never on.
    pub fn set_dirty_log(&mut self, log: Arc<LogSwitch>) {
        self.log = log;
    }

    /// Where the used ring is logged (`log_guest_addr` of `SET_VRING_ADDR`
    /// when its `VHOST_VRING_F_LOG` flag is set), or not at all.
    pub fn set_used_log(&mut self, log_guest_addr: Option<u64>) {
        self.used_log = log_guest_addr;
    }

    /// Logs `len` bytes written `offset` bytes into the used ring, at the
    /// ring's log address (while it is logged and logging is on).
    pub(super) fn log_used_ring(&self, offset: u64, len: u64) {
        if let Some(base) = self.used_log {
            if let Some(log) = self.log.active() {
                log.mark(base.wrapping_add(offset), len);
            }
        }
    }

    /// Marks the pages of data a read put into guest buffers (`iovecs`
    /// into `mem`): before the request's used entry is published.
    pub(super) fn log_read_data(&self, mem: &GuestMemoryMmap, iovecs: &[libc::iovec]) {
        if let Some(log) = self.log.active() {
            if self.log.marks_reads() {
                for (addr, len) in guest_ranges(mem, iovecs) {
                    log.mark(addr.0, len);
                }
            }
        }
    }

    /// Writes `data` at `addr` in guest memory and logs it.
    pub(super) fn write_guest(
        &self,
        mem: &GuestMemoryMmap,
        data: &[u8],
        addr: GuestAddress,
    ) -> bool {
        let ok = mem.write_slice(data, addr).is_ok();
        if ok {
            if let Some(log) = self.log.active() {
                log.mark(addr.0, data.len() as u64);
            }
        }
        ok
    }

    /// Writes a request's status byte and logs it.
    pub(super) fn write_status(&self, mem: &GuestMemoryMmap, status: u8, addr: GuestAddress) {
        // Through the ring view's host addresses when they are of this
        // table (no region lookup), else through vm-memory.
        let mapped = self.view.map().filter(|m| m.is(mem));
        if mapped.is_some_and(|m| m.write_u8(addr.0, status)) {
            if let Some(log) = self.log.active() {
                log.mark(addr.0, 1);
            }
            return;
        }
        self.write_guest(mem, &[status], addr);
    }

    /// Queues a used entry for `flush_used`, which publishes the queued
    /// ones together (every reap and every call to the guest flush them).
    pub(super) fn publish_used(&mut self, head: u16, len: u32) {
        self.used_batch.push((head, len));
    }

    /// Publishes the queued used entries under one lock of the vring and
    /// logs the used-ring bytes that wrote (the elements and `idx`) at the
    /// ring's log address.
    pub(super) fn flush_used(&mut self, vring: &VringRwLock) {
        if self.used_batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.used_batch);
        let (first, size) = {
            let mut state = vring.get_mut();
            let q = state.get_queue_mut();
            let at = (q.next_used(), q.size());
            self.put_used(q, &batch);
            at
        };
        if let (Some(base), Some(log)) = (self.used_log, self.log.active()) {
            for i in 0..batch.len() as u16 {
                let slot = first.wrapping_add(i) % size.max(1);
                let elem = USED_RING_OFFSET + u64::from(slot) * USED_ELEM_LEN;
                log.mark(base.wrapping_add(elem), USED_ELEM_LEN);
            }
            log.mark(base.wrapping_add(USED_IDX_OFFSET), 2);
        }
        self.used_batch = batch;
        self.used_batch.clear();
    }
}
