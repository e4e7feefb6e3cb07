//! The guest memory tables a worker's requests were parsed in, counted per
//! worker with plain integers: a request names its table by slot, where a
//! clone of the table's `Arc` per request cost two locked instructions (its
//! clone and its drop). The I/O queue's buffers still carry a keep-alive of
//! their own (`GuestBufs`), one `Arc` per table and worker, whose address
//! names the table to the queue (`GuestBufs::memory_id`).

use std::sync::Arc;

use slab::Slab;

use super::{KeepAlive, Mem};

struct Held {
    mem: Mem,
    keep: KeepAlive,
    /// Requests in flight that were parsed in this table.
    requests: usize,
}

#[derive(Default)]
pub(super) struct Tables {
    held: Slab<Held>,
    /// The slot of the table requests are parsed in now, if any.
    current: Option<usize>,
}

impl Tables {
    /// The slot of `mem` as the current table (a new one if it is not).
    fn current_slot(&mut self, mem: &Mem) -> usize {
        if let Some(s) = self.current {
            if Arc::ptr_eq(&self.held[s].mem, mem) {
                return s;
            }
        }
        self.forget_current();
        let s = self.held.insert(Held {
            mem: mem.clone(),
            keep: Arc::new(mem.clone()),
            requests: 0,
        });
        self.current = Some(s);
        s
    }

    /// Counts one more request in `mem`; its slot, for `mem` and `release`.
    pub(super) fn hold(&mut self, mem: &Mem) -> usize {
        let s = self.current_slot(mem);
        self.held[s].requests += 1;
        s
    }

    /// The table of a request `hold` counted (until its `release`).
    pub(super) fn mem(&self, slot: usize) -> &Mem {
        &self.held[slot].mem
    }

    /// A request of `slot` is done: a table no longer current is dropped
    /// (unmapped, once the I/O queue holds none of its buffers) with its
    /// last request.
    pub(super) fn release(&mut self, slot: usize) {
        let h = &mut self.held[slot];
        h.requests -= 1;
        if h.requests == 0 && self.current != Some(slot) {
            self.held.remove(slot);
        }
    }

    /// Every request was dropped (the frontend went away).
    pub(super) fn release_all(&mut self) {
        let current = self.current;
        self.held.retain(|s, h| {
            h.requests = 0;
            Some(s) == current
        });
    }

    /// This worker's keep-alive of `mem` (made current): the same `Arc` for
    /// every buffer of the table, so that its address names the table.
    pub(super) fn keep_alive(&mut self, mem: &Mem) -> KeepAlive {
        let s = self.current_slot(mem);
        self.held[s].keep.clone()
    }

    /// A new memory table replaces the current one: it is held only as long
    /// as its requests are in flight.
    pub(super) fn forget_current(&mut self) {
        if let Some(s) = self.current.take() {
            if self.held[s].requests == 0 {
                self.held.remove(s);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.held.len()
    }

    /// The current table and its keep-alive.
    #[cfg(test)]
    pub(super) fn current(&self) -> Option<(&Mem, &KeepAlive)> {
        self.current
            .map(|s| (&self.held[s].mem, &self.held[s].keep))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{GuestAddress, GuestMemoryMmap};

    fn table() -> Mem {
        Arc::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 4096)]).expect("memory"))
    }

    #[test]
    fn a_replaced_table_is_held_until_its_last_request_is_done() {
        let (a, b) = (table(), table());
        let mut t = Tables::default();
        let r1 = t.hold(&a);
        let r2 = t.hold(&a);
        assert_eq!(r1, r2);
        assert!(Arc::ptr_eq(t.mem(r1), &a));
        t.forget_current();
        let r3 = t.hold(&b);
        assert_eq!(t.len(), 2);
        t.release(r1);
        assert!(Arc::ptr_eq(t.mem(r2), &a), "still held for r2");
        t.release(r2);
        assert_eq!(t.len(), 1, "a dropped with its last request");
        t.release(r3);
        assert_eq!(t.len(), 1, "the current table stays");
        let r4 = t.hold(&b);
        assert!(Arc::ptr_eq(t.mem(r4), &b));
    }

    #[test]
    fn a_table_is_named_by_one_keep_alive() {
        let a = table();
        let mut t = Tables::default();
        let k1 = t.keep_alive(&a);
        let s = t.hold(&a);
        let k2 = t.keep_alive(&a);
        assert!(Arc::ptr_eq(&k1, &k2));
        t.release(s);
        t.forget_current();
        let k3 = t.keep_alive(&a);
        assert!(
            !Arc::ptr_eq(&k1, &k3),
            "a new turn of the table, a new name"
        );
    }

    #[test]
    fn dropping_every_request_keeps_only_the_current_table() {
        let (a, b) = (table(), table());
        let mut t = Tables::default();
        t.hold(&a);
        t.forget_current();
        let s = t.hold(&b);
        t.release_all();
        assert_eq!(t.len(), 1);
        assert!(Arc::ptr_eq(t.mem(s), &b));
    }
}
