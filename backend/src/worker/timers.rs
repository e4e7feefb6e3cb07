//! Everything that waits: timers for delayed completions and re-sends, and
//! a periodic tick (while anything is parked or watched for an io-timeout)
//! that re-tries parked parts, releases held ones and marks paths with an
//! overdue command failed. Failed paths are probed by the path checker
//! (`crate::checker`), not here.

use std::time::Duration;

use mpath::{IoOutcome, Nanos, PathState};
use vhost_user_backend::VringRwLock;

use super::{
    timespec, user_data, After, Io, Stage, Worker, TAG_CANCEL, TAG_PART, TAG_TICK, TAG_TIMER,
};
use crate::request::STATUS_IOERR;

impl Worker {
    /// Puts part `id` on a timer; `After` happens when it fires.
    pub(super) fn start_timer(
        &mut self,
        id: usize,
        after: Duration,
        then: After,
        vring: &VringRwLock,
    ) -> bool {
        let io = &mut self.ios[id];
        let ts = timespec(after);
        let ptr: *const io_uring::types::Timespec = &*ts;
        io.timer = Some(ts);
        io.stage = Stage::Timer(then);
        // SAFETY: the timespec is boxed in the part, which stays in the slab
        // until this timer completes.
        if let Err(e) = unsafe { self.ring.push_timeout(ptr, user_data(TAG_TIMER, id)) } {
            self.path_errors.warn(format_args!("io_uring timer: {e}"));
            if matches!(then, After::Deliver(_)) {
                let io = &self.ios[id];
                self.disk.engine.release(io.path, &io.info);
            }
            return self.finish(id, STATUS_IOERR, vring);
        }
        false
    }

    pub(super) fn timer_fired(&mut self, id: usize, now: Nanos, vring: &VringRwLock) -> bool {
        let Some(io) = self.ios.get_mut(id) else {
            return false;
        };
        io.timer = None;
        match io.stage {
            Stage::Timer(After::Deliver(outcome)) => self.deliver(id, outcome, now, vring),
            Stage::Timer(After::Resend(fixed)) => self.send(id, fixed, now, vring),
            _ => false,
        }
    }

    /// Whether the tick must run: parked parts, or a part on a path with
    /// an io-timeout to watch.
    pub(super) fn tick_needed(&self) -> bool {
        !self.parked.is_empty()
            || self
                .ios
                .iter()
                .any(|(_, io)| watched(io) && self.disk.io_timeout(io.path).is_some())
    }

    /// A part older than its path's io-timeout-ms means the path is failing:
    /// it is marked failed at once, so nothing new goes there. The kernel's
    /// own timeout fires later (its block-layer timer runs up to
    /// `roundup_pow_of_two(HZ)` jiffies late) and requests sent while its
    /// error recovery runs would wait for the next reconnect. What is in
    /// flight still completes through the kernel and fails over then.
    fn check_overdue(&mut self, now: Nanos) {
        let engine = &self.disk.engine;
        for (_, io) in self.ios.iter() {
            if !watched(io) || engine.path(io.path).state() != PathState::Usable {
                continue;
            }
            let Some(limit) = self.disk.io_timeout(io.path) else {
                continue;
            };
            let age = now.saturating_sub(io.started);
            if age > limit {
                self.path_errors.warn(format_args!(
                    "path {}: a command is {} ms old (io-timeout-ms {}): marking the path failed",
                    engine.path(io.path).name,
                    age / 1_000_000,
                    limit / 1_000_000
                ));
                engine.mark_failed_at(io.path, now);
            }
        }
    }

    /// Bounds a hung command by its path's io-timeout-ms: a command on the
    /// device past it is cancelled, once. One the kernel can still stop (file
    /// and block-device I/O not yet running in the device) completes with
    /// `-ECANCELED` and fails over as timed out; NVMe passthrough commands
    /// carry the same timeout to the kernel, which aborts them itself.
    pub(super) fn cancel_overdue(&mut self, now: Nanos) {
        for (id, io) in self.ios.iter_mut() {
            if io.stage != Stage::OnDevice || io.cancelled {
                continue;
            }
            let Some(limit) = self.disk.io_timeout(io.path) else {
                continue;
            };
            if now.saturating_sub(io.started) > limit
                && self
                    .ring
                    .push_cancel(user_data(TAG_PART, id), user_data(TAG_CANCEL, id))
                    .is_ok()
            {
                io.cancelled = true;
            }
        }
    }

    /// Whether a part held by a lab `hang` is overdue by more than the
    /// kernel's timeout would let it be: it then times out as a command on
    /// a dead link does (so a drain waiting for it is bounded the same way).
    fn held_timed_out(&self, io: &Io, now: Nanos) -> bool {
        self.disk.io_timeout(io.path).is_some_and(|limit| {
            now.saturating_sub(io.started) > limit.saturating_add(KERNEL_TIMER_SLACK)
        })
    }

    pub(super) fn arm_tick(&mut self) {
        if self.tick_armed {
            return;
        }
        let ptr: *const io_uring::types::Timespec = &*self.tick;
        // SAFETY: the tick's timespec lives as long as the worker.
        match unsafe { self.ring.push_timeout(ptr, user_data(TAG_TICK, 0)) } {
            Ok(()) => self.tick_armed = true,
            Err(e) => self.path_errors.warn(format_args!("io_uring tick: {e}")),
        }
    }

    pub(super) fn tick_fired(&mut self, now: Nanos, vring: &VringRwLock) -> bool {
        self.tick_armed = false;
        self.check_overdue(now);
        self.cancel_overdue(now);
        let mut used = false;
        for id in std::mem::take(&mut self.parked) {
            let Some(io) = self.ios.get(id) else { continue };
            match io.stage {
                Stage::Held(outcome) => {
                    let shaping = self.disk.shaping(io.path);
                    if shaping.hang() {
                        if self.held_timed_out(io, now) {
                            let timed_out = IoOutcome::Errno(libc::ETIMEDOUT);
                            used |= self.deliver(id, timed_out, now, vring);
                        } else {
                            self.parked.push(id);
                        }
                        continue;
                    }
                    // Released: a path turned to failing meanwhile fails
                    // what it held, as a link that times out does.
                    let outcome = shaping.get().fail.map_or(outcome, |f| f.outcome());
                    used |= self.shape_completion(id, outcome, now, vring);
                }
                Stage::NoPath { since } => {
                    if self.may_send(id) {
                        self.disk.engine.note_no_path_done(true);
                        self.ios[id].stage = Stage::OnDevice;
                        used |= self.send(id, None, now, vring);
                    } else {
                        used |= self.no_path(id, since, now, vring);
                        if matches!(
                            self.ios.get(id).map(|i| i.stage),
                            Some(Stage::NoPath { .. })
                        ) {
                            self.parked.push(id);
                        }
                    }
                }
                _ => {}
            }
        }
        if self.tick_needed() {
            self.arm_tick();
        }
        used
    }
}

/// How late the kernel's block-layer timer may fire past a command's
/// timeout (`roundup_pow_of_two(HZ)` jiffies: 1.024 s at HZ=250).
const KERNEL_TIMER_SLACK: Nanos = 1_024_000_000;

/// A part waiting on its path: on the device, or held by a lab `hang`.
fn watched(io: &Io) -> bool {
    matches!(io.stage, Stage::OnDevice | Stage::Held(_))
}
