//! The driver side of the adversarial frontend: guest memory for requests,
//! descriptor chains and indirect tables, publishing on the available ring,
//! waiting for used entries, flooding.

use std::thread::sleep;
use std::time::{Duration, Instant};

use vmm_sys_util::epoll::EpollEvent;

use super::frontend::{Adversary, Outcome, INDIRECT_END, MEM_SIZE};
use super::split_ring::Desc;

impl Adversary {
    /// `len` bytes of guest memory for headers, buffers, status bytes
    /// (4 KiB aligned, filled with `fill`).
    pub fn scratch(&mut self, len: u64, fill: u8) -> u64 {
        let at = self.next_scratch;
        let end = at + len.div_ceil(4096).max(1) * 4096;
        assert!(end <= MEM_SIZE, "adversary scratch memory exhausted");
        self.next_scratch = end;
        self.ram.fill(at, len as usize, fill);
        at
    }

    /// `n` consecutive free descriptor slots (wrapping; old chains are done by then).
    pub fn alloc_descs(&mut self, n: u16) -> u16 {
        let size = self.ring().size;
        assert!(n <= size, "chain longer than the ring");
        let q = self.qm();
        if q.next_desc + n > size {
            q.next_desc = 0;
        }
        let first = q.next_desc;
        q.next_desc += n;
        first
    }

    pub fn write_desc(&self, index: u16, d: Desc) {
        self.ring().write_desc(&self.ram, index, d);
    }

    /// Writes `descs` as one direct chain (NEXT links added) and returns its head.
    pub fn chain(&mut self, descs: &[Desc]) -> u16 {
        let first = self.alloc_descs(descs.len() as u16);
        for (i, d) in descs.iter().enumerate() {
            let index = first + i as u16;
            let d = if i + 1 < descs.len() {
                d.then(index + 1)
            } else {
                *d
            };
            self.write_desc(index, d);
        }
        first
    }

    /// Writes `descs` as an indirect table (NEXT links added); returns its
    /// guest address and length in bytes.
    pub fn indirect_table(&mut self, descs: &[Desc]) -> (u64, u32) {
        let at = self.next_indirect;
        let len = 16 * descs.len() as u64;
        assert!(at + len <= INDIRECT_END, "indirect area exhausted");
        self.next_indirect = (at + len).next_multiple_of(64);
        for (i, d) in descs.iter().enumerate() {
            let d = if i + 1 < descs.len() {
                d.then(i as u16 + 1)
            } else {
                *d
            };
            self.ram.write(at + 16 * i as u64, &d.bytes());
        }
        (at, len as u32)
    }

    /// Adds `head` to the available ring, publishes it and kicks.
    pub fn push(&mut self, head: u16) {
        let (ring, idx) = (self.ring(), self.q().avail_idx);
        ring.set_avail_entry(&self.ram, idx, head);
        let idx = idx.wrapping_add(1);
        self.qm().avail_idx = idx;
        ring.publish_avail(&self.ram, idx);
        self.kick();
    }

    /// Publishes an arbitrary available index (and kicks): the driver's
    /// shadow index follows it.
    pub fn publish_avail_idx(&mut self, idx: u16) {
        self.qm().avail_idx = idx;
        self.ring().publish_avail(&self.ram, idx);
        self.kick();
    }

    pub fn avail_idx(&self) -> u16 {
        self.q().avail_idx
    }

    pub fn used_seen(&self) -> u16 {
        self.q().used_seen
    }

    pub fn kick(&self) {
        // A full counter (never after a few writes) only delays the kick.
        let _ = self.q().kick.write(1);
    }

    /// Whether the daemon signalled the selected queue's error eventfd
    /// (`SET_VRING_ERR`) since the last call.
    pub fn error_signalled(&self) -> bool {
        matches!(self.q().err.read(), Ok(n) if n > 0)
    }

    /// Whether the daemon hung up the connection.
    pub fn closed(&self) -> bool {
        let mut ev = [EpollEvent::default(); 1];
        matches!(self.hangup.wait(0, &mut ev), Ok(n) if n > 0)
    }

    /// Waits up to `limit` for the next used entry or a hang-up.
    pub fn wait_used(&mut self, limit: Duration) -> Outcome {
        let deadline = Instant::now() + limit;
        let ring = self.ring();
        loop {
            let seen = self.q().used_seen;
            if ring.used_idx(&self.ram) != seen {
                let (id, len) = ring.used_entry(&self.ram, seen);
                self.qm().used_seen = seen.wrapping_add(1);
                return Outcome::Used { id, len };
            }
            if self.closed() {
                return Outcome::Closed;
            }
            if Instant::now() >= deadline {
                return Outcome::Quiet;
            }
            sleep(Duration::from_micros(200));
        }
    }

    /// Publishes `head` again and again for `dur`, as fast as the device
    /// consumes it (a guest hammering the same bad request), keeping at most
    /// half a ring outstanding. Returns how many were published.
    pub fn flood(&mut self, head: u16, dur: Duration) -> u64 {
        let end = Instant::now() + dur;
        let mut published = 0u64;
        let ring = self.ring();
        let half = ring.size / 2;
        let event_idx = self.event_idx();
        while Instant::now() < end && !self.closed() {
            // The device's position: what it consumed (EVENT_IDX) or completed.
            let avail = self.q().avail_idx;
            let used = ring.used_idx(&self.ram);
            let pos = if event_idx {
                let ev = ring.avail_event(&self.ram);
                // The later of the two (both trail the available index).
                if avail.wrapping_sub(ev) < avail.wrapping_sub(used) {
                    ev
                } else {
                    used
                }
            } else {
                used
            };
            let mut idx = avail;
            while idx.wrapping_sub(pos) < half {
                ring.set_avail_entry(&self.ram, idx, head);
                idx = idx.wrapping_add(1);
                published += 1;
            }
            if idx != avail {
                self.qm().avail_idx = idx;
                ring.publish_avail(&self.ram, idx);
                self.kick();
            }
            sleep(Duration::from_millis(1));
        }
        let used = ring.used_idx(&self.ram);
        self.qm().used_seen = used;
        published
    }
}
