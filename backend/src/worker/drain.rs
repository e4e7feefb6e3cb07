//! Fencing a queue's I/O: after the frontend went away or reset the device
//! (everything dropped), and when it stops a vring (everything completed).
//! Either way nothing of the queue can write guest memory afterwards; what
//! bounds the wait for a hung command is its path's io-timeout-ms.

use std::time::{Duration, Instant};

use log::{debug, warn};

use mpath_io::Event;

use super::{Stage, Worker};

/// How often a long drain says what it waits for.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

impl Worker {
    /// Waits for every I/O on the I/O queue and drops all requests without
    /// touching guest memory or rings: the guest may already reuse them.
    /// Commands past their io-timeout-ms are cancelled meanwhile.
    pub fn drain_and_discard(&mut self) {
        // (Empty outside `process_queue`; the queue is re-initialised anyway.)
        self.taken = Default::default();
        // Every reap and every call publishes what is queued.
        debug_assert!(self.used_batch.is_empty());
        // Requests held for the QoS budget are not on the I/O queue.
        self.drop_held();
        let engine = &self.disk.engine;
        // Parts waiting for a path are not on the I/O queue: drop them now.
        for id in std::mem::take(&mut self.parked) {
            if let Some(io) = self.ios.try_remove(id) {
                if io.stage == Stage::NoPath {
                    engine.note_no_path_done(false);
                }
            }
        }
        // Nor are completions a lab `hang` holds.
        for tag in self.queue.take_held() {
            if let Some(io) = self.ios.try_remove(tag as usize) {
                engine.release(io.path, &io.info());
            }
        }
        // Lab delays and deferred re-sends end now: nothing of them is on
        // a device.
        self.queue.expire_timers();
        // The tick cancels overdue commands while this waits.
        if self.tick_needed() {
            self.queue.arm_tick();
        }
        let start = Instant::now();
        let mut told = start;
        while !self.ios.is_empty() {
            self.wait_ring();
            told = self.tell_progress(start, told, "dropping");
            let mut events = std::mem::take(&mut self.events);
            let now = self.disk.engine.now();
            self.queue.reap_discarding(now, |e| events.push(e));
            for e in events.drain(..) {
                match e {
                    // A completion holds its path's load; a deferred
                    // re-send does not.
                    Event::Done { tag, .. } => {
                        if let Some(io) = self.ios.try_remove(tag as usize) {
                            self.disk.engine.release(io.path, &io.info());
                        }
                    }
                    Event::Timer { tag } if tag as usize == super::hold::HOLD_TIMER => {
                        self.hold_timer_fired(self.disk.engine.now());
                    }
                    Event::Timer { tag } => {
                        self.ios.try_remove(tag as usize);
                    }
                    Event::Overdue { .. } | Event::Tick => {}
                }
            }
            self.events = events;
        }
        let dropped = self.reqs.len();
        self.reqs.clear();
        self.tables.release_all();
        self.count_in_flight(-(dropped as isize));
        if dropped > 0 {
            debug!("discarded {dropped} requests of a frontend that went away");
        }
        // The frontend re-initialises the queue before using it again.
        self.broken = false;
        // Waiting requests still time out, overdue commands are still watched.
        if self.tick_needed() {
            self.queue.arm_tick();
        }
    }

    /// Completes everything this queue has in flight, on the caller's
    /// thread with the worker's lock held (so nothing is popped meanwhile):
    /// when this returns, nothing of the queue can write guest memory. For
    /// GET_VRING_BASE, which reports the ring stopped only then.
    pub fn quiesce(&mut self) {
        let Some(vring) = self.vring.clone() else {
            return; // never served: nothing in flight
        };
        // Held requests go now: a stopping queue does not wait for limits.
        if self.release_all_held(self.disk.engine.now()) {
            self.notify(&vring);
        }
        let start = Instant::now();
        let mut told = start;
        while !self.reqs.is_empty() {
            // Parked parts and overdue checks need the tick.
            if self.tick_needed() {
                self.queue.arm_tick();
            }
            self.wait_ring();
            told = self.tell_progress(start, told, "completing");
            self.queue.clear_event();
            if self.reap_all(&vring) {
                self.notify(&vring);
            }
        }
        // The frontend re-initialises the queue (SET_VRING_BASE, KICK).
        self.broken = false;
    }

    /// Submits what is queued and blocks until something completes.
    fn wait_ring(&mut self) {
        self.submit();
        if let Err(e) = self.queue.wait() {
            // Never give up while the kernel may still write guest memory.
            self.ring_errors
                .warn(format_args!("waiting for in-flight I/O: {e}"));
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Says every few seconds what a long drain waits for.
    fn tell_progress(&mut self, start: Instant, told: Instant, doing: &str) -> Instant {
        if told.elapsed() < PROGRESS_EVERY {
            return told;
        }
        warn!(
            "{doing} in-flight I/O for {:?}: {} requests, {} parts still out; each ends at its path's io-timeout-ms (or the device's own timeout)",
            start.elapsed(),
            self.reqs.len(),
            self.ios.len()
        );
        Instant::now()
    }
}
