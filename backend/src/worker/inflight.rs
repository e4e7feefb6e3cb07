//! The worker's side of inflight tracking: mark a head when it is popped,
//! publish used entries in the spec's order, and after a restart serve the
//! heads the region still holds (in the order they were popped) before
//! any new one.

use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::{Queue, QueueT};

use super::{vring_warn, Worker};
use crate::vhost_user::InflightQueue;

impl Worker {
    /// The queue's view of the frontend's inflight region (None: untracked).
    pub fn set_inflight(&mut self, q: Option<InflightQueue>) {
        self.inflight = q;
        self.resubmit.clear();
    }

    /// After a device reset (everything in flight dropped): the region no
    /// longer holds any of it.
    pub fn forget_inflight(&mut self) {
        if let Some(inf) = self.inflight.as_mut() {
            inf.forget();
        }
        self.resubmit.clear();
    }

    /// At queue start: repair the region's last batch, queue what it still
    /// holds for resubmission and put the available index after it (the
    /// frontend's base may be the used index, rewound when we died).
    pub fn restore_inflight(&mut self, vring: &VringRwLock) {
        let Some(inf) = self.inflight.as_mut() else {
            return;
        };
        let Ok(used) = vring.queue_used_idx() else {
            return; // no used ring yet: nothing to repair against
        };
        let r = inf.recover(used);
        let base = vring.queue_next_avail();
        log::info!(
            "inflight region: {} requests to resubmit; used index {used}, available index {} (frontend said {base})",
            r.resubmit.len(),
            r.next_avail
        );
        vring.set_queue_next_avail(r.next_avail);
        vring.set_queue_next_used(used);
        self.resubmit = r.resubmit.into();
    }

    /// A head was popped from the available ring.
    pub(super) fn mark_inflight(&mut self, head: u16) {
        if let Some(inf) = self.inflight.as_mut() {
            inf.get(head);
        }
    }

    /// Publishes used entries. With inflight tracking each is a batch of
    /// one in the spec's order (the batch's head noted, the used entry and
    /// index written, the head no longer in flight, the region's used index
    /// moved); without it the used index is stored once for all of them.
    pub(super) fn put_used(&mut self, q: &mut Queue, entries: &[(u16, u32)]) {
        let Some(inf) = &self.inflight else {
            if let Err(e) = self.view.add_used_batch(&self.table, q, entries) {
                vring_warn(format_args!("add_used: {e}"));
            }
            return;
        };
        for &(head, len) in entries {
            inf.pre_put(head);
            if let Err(e) = self.view.add_used(&self.table, q, head, len) {
                vring_warn(format_args!("add_used({head}): {e}"));
                continue;
            }
            crate::diag::die_before_inflight_used();
            inf.post_put(head, q.next_used());
        }
    }
}
