//! Everything that waits, on the I/O queue's timers: deferred re-sends
//! (retry delays, the ghost-write guard), and the periodic tick (while
//! anything waits for a path or is watched for an io-timeout) that re-tries
//! parked parts and marks paths with an overdue command failed. Failed
//! paths are probed by the path checker (`crate::checker`), not here.

use std::time::Duration;

use mpath::{Nanos, PathState};

use super::{Stage, Worker};
use crate::request::STATUS_IOERR;

impl Worker {
    /// Sends part `id` again after `after`: on its path (`Stage::Retry`)
    /// or any path (`Stage::Failover`).
    pub(super) fn defer_send(&mut self, id: usize, after: Duration, stage: Stage) -> bool {
        debug_assert!(matches!(stage, Stage::Retry | Stage::Failover));
        self.ios[id].stage = stage;
        if let Err(e) = self.queue.defer(id as u64, after) {
            self.path_errors.warn(format_args!("io_uring timer: {e}"));
            return self.finish(id, STATUS_IOERR);
        }
        false
    }

    pub(super) fn timer_fired(&mut self, id: usize, now: Nanos) -> bool {
        if id == super::hold::HOLD_TIMER {
            return self.hold_timer_fired(now);
        }
        match self.ios.get(id).map(|io| (io.stage, io.path)) {
            Some((Stage::Retry, path)) => self.send(id, Some(path), now),
            Some((Stage::Failover, _)) => self.send(id, None, now),
            _ => false,
        }
    }

    /// Whether the tick must run: parked parts, or what the I/O queue
    /// watches (io-timeouts, held commands).
    pub(super) fn tick_needed(&self) -> bool {
        !self.parked.is_empty() || self.queue.tick_needed() || self.hold_needs_tick()
    }

    /// A part older than its path's io-timeout-ms means the path is failing:
    /// it is marked failed at once, so nothing new goes there. The kernel's
    /// own timeout fires later (its block-layer timer runs up to
    /// `roundup_pow_of_two(HZ)` jiffies late) and requests sent while its
    /// error recovery runs would wait for the next reconnect. What is in
    /// flight still completes through the kernel and fails over then.
    pub(super) fn overdue(&mut self, id: usize, age: Nanos, now: Nanos) {
        let engine = &self.disk.engine;
        let Some(io) = self.ios.get(id) else { return };
        if engine.path(io.path).state() != PathState::Usable {
            return;
        }
        let limit = self.disk.io_timeout(io.path).unwrap_or(0);
        self.path_errors.warn(format_args!(
            "path {}: a command is {} ms old (io-timeout-ms {}): marking the path failed",
            engine.path(io.path).name,
            age / 1_000_000,
            limit / 1_000_000
        ));
        engine.mark_failed_at(io.path, now);
    }

    /// The tick (after the I/O queue's own work on it): parts waiting for
    /// a path are sent if one is usable, or fail at their no-path timeout.
    pub(super) fn tick_fired(&mut self, now: Nanos) -> bool {
        // Held requests, when their own timer could not be set.
        let mut used = self.holding() && self.release_held(now);
        for id in std::mem::take(&mut self.parked) {
            let Some(io) = self.ios.get(id) else { continue };
            if io.stage != Stage::NoPath {
                continue;
            }
            if self.may_send(id) {
                self.disk.engine.note_no_path_done(true);
                self.ios[id].stage = Stage::Sent;
                used |= self.send(id, None, now);
            } else {
                used |= self.no_path(id, now);
                if matches!(self.ios.get(id).map(|i| i.stage), Some(Stage::NoPath)) {
                    self.parked.push(id);
                }
            }
        }
        if !self.parked.is_empty() || self.hold_needs_tick() {
            self.queue.arm_tick();
        }
        used
    }
}
