//! Requests over the disk's QoS budget (`crate::qos`) wait here, in arrival
//! order, until the budget lets the first one go: one timer on the I/O
//! queue for the first, never a sleeping thread or a busy wait. While any
//! wait, later requests (flushes included, which cost nothing) queue behind
//! them, so the guest's order between a write and a later flush is kept.

use std::collections::VecDeque;
use std::time::Duration;

use mpath::{Nanos, QosDir};

use super::{Mem, Worker};
use crate::request::{Kind, Request};

/// The timer tag of the hold (part ids are slab keys, far below it).
pub(super) const HOLD_TIMER: usize = usize::MAX;

/// The longest the first held request goes unchecked: a limit raised or
/// removed at runtime lets held requests go within this.
const RECHECK: Duration = Duration::from_millis(50);

/// A parsed request waiting for the budget.
pub(super) struct Held {
    head: u16,
    req: Request,
    /// The table it was parsed in (kept mapped while it waits).
    mem: Mem,
    arrived: Nanos,
    cost: Option<(QosDir, u64)>,
}

#[derive(Default)]
pub(super) struct Hold {
    queue: VecDeque<Held>,
    /// The hold's timer is on the I/O queue.
    timer: bool,
}

/// What a request counts against the limits: reads and writes by their
/// bytes (write-zeroes as writes, as QEMU counts them); flushes, discards,
/// GET_ID and zero-length requests nothing.
fn cost(req: &Request) -> Option<(QosDir, u64)> {
    match req.kind {
        Kind::Read if req.len > 0 => Some((QosDir::Read, req.len)),
        Kind::Write if req.len > 0 => Some((QosDir::Write, req.len)),
        Kind::WriteZeroes => {
            let bytes = req.segments.iter().map(|s| s.len).sum::<u64>();
            (bytes > 0).then_some((QosDir::Write, bytes))
        }
        _ => None,
    }
}

impl Worker {
    /// Starts `req` now if the budget allows and nothing waits before it,
    /// else holds it; `true` if a request completed.
    pub(super) fn admit(&mut self, head: u16, req: Request, mem: &Mem, now: Nanos) -> bool {
        let qos = &self.disk.qos;
        if self.hold.queue.is_empty() {
            if !qos.on() {
                return self.start_parsed(head, req, mem, now);
            }
            let cost = cost(&req);
            if cost.is_none_or(|(dir, bytes)| qos.admit(dir, bytes, now).is_ok()) {
                return self.start_parsed(head, req, mem, now);
            }
        }
        let cost = cost(&req);
        self.disk.qos.note_held(cost.map_or(0, |c| c.1));
        // Held requests are in flight for drain and shutdown.
        self.count_in_flight(1);
        self.hold.queue.push_back(Held {
            head,
            req,
            mem: mem.clone(),
            arrived: now,
            cost,
        });
        self.release_held(now)
    }

    /// Starts held requests in order while the budget allows, then sets the
    /// timer for the first one left; `true` if a request completed.
    pub(super) fn release_held(&mut self, now: Nanos) -> bool {
        let mut used = false;
        while let Some(h) = self.hold.queue.front() {
            if let Some((dir, bytes)) = h.cost {
                if let Err(wait) = self.disk.qos.admit(dir, bytes, now) {
                    self.arm_hold_timer(Duration::from_nanos(wait));
                    break;
                }
            }
            used |= self.start_held(now);
        }
        used
    }

    /// Starts every held request at once, whatever the budget: the queue is
    /// stopping (GET_VRING_BASE), and that must not wait for the limits.
    pub(super) fn release_all_held(&mut self, now: Nanos) -> bool {
        let mut used = false;
        while !self.hold.queue.is_empty() {
            used |= self.start_held(now);
        }
        used
    }

    fn start_held(&mut self, now: Nanos) -> bool {
        let Some(h) = self.hold.queue.pop_front() else {
            return false;
        };
        self.disk.qos.note_released(now.saturating_sub(h.arrived));
        self.count_in_flight(-1);
        self.start_parsed(h.head, h.req, &h.mem, now)
    }

    /// Drops the held requests without touching guest memory (the frontend
    /// went away or reset the device; the inflight region still has them).
    pub(super) fn drop_held(&mut self) {
        let now = self.disk.engine.now();
        let n = self.hold.queue.len();
        for h in self.hold.queue.drain(..) {
            self.disk.qos.note_released(now.saturating_sub(h.arrived));
        }
        self.count_in_flight(-(n as isize));
    }

    fn arm_hold_timer(&mut self, wait: Duration) {
        if self.hold.timer {
            return;
        }
        match self.queue.defer(HOLD_TIMER as u64, wait.min(RECHECK)) {
            Ok(()) => self.hold.timer = true,
            Err(e) => {
                // The tick looks at the hold instead (`tick_fired`).
                self.ring_errors
                    .warn(format_args!("io_uring timer for held requests: {e}"));
                self.queue.arm_tick();
            }
        }
    }

    /// The hold's timer came back (fired, or expired by a drain).
    pub(super) fn hold_timer_fired(&mut self, now: Nanos) -> bool {
        self.hold.timer = false;
        self.release_held(now)
    }

    pub(super) fn holding(&self) -> bool {
        !self.hold.queue.is_empty()
    }

    /// Requests are held without their timer (it could not be set): the
    /// tick looks at them.
    pub(super) fn hold_needs_tick(&self) -> bool {
        self.holding() && !self.hold.timer
    }
}
