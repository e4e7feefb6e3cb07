//! Fencing a queue's I/O: after the frontend went away or reset the device
//! (everything dropped), and when it stops a vring (everything completed).
//! Either way nothing of the queue can write guest memory afterwards; what
//! bounds the wait for a hung command is its path's io-timeout-ms.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use log::{debug, warn};

use super::{split_user_data, Stage, Worker, TAG_PART, TAG_TICK, TAG_TIMER};

/// How often a long drain says what it waits for.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

impl Worker {
    /// Waits for every I/O on the ring and drops all requests without
    /// touching guest memory or rings: the guest may already reuse them.
    /// Commands past their io-timeout-ms are cancelled meanwhile.
    pub fn drain_and_discard(&mut self) {
        let engine = &self.disk.engine;
        // Parked parts are not on the ring: drop them now.
        for id in std::mem::take(&mut self.parked) {
            if let Some(io) = self.ios.try_remove(id) {
                match io.stage {
                    Stage::Held(_) => engine.release(io.path, &io.info),
                    Stage::NoPath { .. } => engine.note_no_path_done(false),
                    _ => {}
                }
            }
        }
        // The tick cancels overdue commands while this waits.
        if self.tick_needed() {
            self.arm_tick();
        }
        let start = Instant::now();
        let mut told = start;
        while !self.ios.is_empty() {
            self.wait_ring();
            told = self.tell_progress(start, told, "dropping");
            let mut reaped = std::mem::take(&mut self.reaped);
            self.ring.reap(|ud, res, big| reaped.push((ud, res, big)));
            for &(ud, _, _) in &reaped {
                let (tag, index) = split_user_data(ud);
                match tag {
                    TAG_PART | TAG_TIMER => {
                        if let Some(io) = self.ios.try_remove(index) {
                            let holds_load = !matches!(
                                io.stage,
                                Stage::Timer(super::After::Resend(_)) | Stage::NoPath { .. }
                            );
                            if holds_load {
                                self.disk.engine.release(io.path, &io.info);
                            }
                        }
                    }
                    TAG_TICK => {
                        // Reaped here, not in `tick_fired`: re-armed below
                        // or after the drain, never left marked armed.
                        self.tick_armed = false;
                        self.cancel_overdue(self.disk.engine.now());
                        if self.tick_needed() {
                            self.arm_tick();
                        }
                    }
                    _ => {}
                }
            }
            reaped.clear();
            self.reaped = reaped;
        }
        let dropped = self.reqs.len();
        self.reqs.clear();
        self.in_flight.fetch_sub(dropped, Ordering::AcqRel);
        if dropped > 0 {
            debug!("discarded {dropped} requests of a frontend that went away");
        }
        // The frontend re-initialises the queue before using it again.
        self.broken = false;
        // Waiting requests still time out, overdue commands are still watched.
        if self.tick_needed() {
            self.arm_tick();
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
        let start = Instant::now();
        let mut told = start;
        while !self.reqs.is_empty() {
            // Parked parts and overdue checks need the tick.
            if self.tick_needed() {
                self.arm_tick();
            }
            self.wait_ring();
            told = self.tell_progress(start, told, "completing");
            self.ring.clear_event();
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
        if let Err(e) = self.ring.wait() {
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
