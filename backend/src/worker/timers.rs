//! Everything that waits: timers for delayed completions and re-sends, and
//! a periodic tick (while anything is parked or a path is failed) that
//! re-tries parked parts, releases held ones and probes failed paths.

use std::time::Duration;

use log::{info, warn};
use mpath::{Nanos, PathId, PathState, ProbeOutcome};
use mpath_io::{Admission, IoOp};
use vhost_user_backend::VringRwLock;

use super::{timespec, user_data, After, Io, Stage, Worker, TAG_PROBE, TAG_TICK, TAG_TIMER};
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
            warn!("io_uring timer: {e}");
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

    /// Whether the tick must run: parked parts, a failed path to probe, or
    /// a part on a path with an io-timeout to watch.
    fn tick_needed(&self) -> bool {
        !self.parked.is_empty()
            || self
                .disk
                .engine
                .paths()
                .iter()
                .any(|p| p.state() == PathState::Failed)
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

    pub(super) fn arm_tick(&mut self) {
        if self.tick_armed {
            return;
        }
        let ptr: *const io_uring::types::Timespec = &*self.tick;
        // SAFETY: the tick's timespec lives as long as the worker.
        match unsafe { self.ring.push_timeout(ptr, user_data(TAG_TICK, 0)) } {
            Ok(()) => self.tick_armed = true,
            Err(e) => warn!("io_uring tick: {e}"),
        }
    }

    pub(super) fn tick_fired(&mut self, now: Nanos, vring: &VringRwLock) -> bool {
        self.tick_armed = false;
        self.check_overdue(now);
        let mut used = false;
        for id in std::mem::take(&mut self.parked) {
            let Some(io) = self.ios.get(id) else { continue };
            match io.stage {
                Stage::Held(outcome) => {
                    let shaping = self.disk.shaping(io.path);
                    if shaping.hang() {
                        self.parked.push(id);
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
        self.start_probes(now);
        if self.tick_needed() {
            self.arm_tick();
        }
        used
    }

    /// Probes failed paths whose probe is due: a one-block read through the
    /// path's own driver (and its lab faults).
    fn start_probes(&mut self, now: Nanos) {
        let engine = &self.disk.engine;
        for path in engine.probes_due(now) {
            if !self.disk.begin_probe(path) {
                continue; // another worker probes it, or it left `failed`
            }
            let Some(driver) = self.disk.driver(path) else {
                self.record_probe(path, false, now);
                continue;
            };
            if let Admission::Fail(_) = self.disk.shaping(path).admit() {
                self.record_probe(path, false, now);
                continue;
            }
            let len = u64::from(self.disk.block_size);
            // SAFETY: the probe buffer belongs to the worker, which waits for
            // its probes before it is dropped; its contents are never read.
            let entry = unsafe {
                driver.prepare(
                    IoOp::Read,
                    0,
                    len,
                    &self.probe_buf.iov,
                    1,
                    user_data(TAG_PROBE, path.0),
                )
            };
            // SAFETY: as above.
            match unsafe { self.ring.push(&entry) } {
                Ok(()) => self.probes_on_ring += 1,
                Err(_) => self.record_probe(path, false, now),
            }
        }
    }

    pub(super) fn probe_done(&mut self, path: PathId, res: i32, big: [u64; 2], now: Nanos) {
        self.probes_on_ring = self.probes_on_ring.saturating_sub(1);
        let len = u64::from(self.disk.block_size);
        let outcome = match self.disk.driver(path) {
            Some(driver) => driver.decode(IoOp::Read, len, res, big),
            None => mpath::IoOutcome::Errno(libc::ENODEV),
        };
        self.record_probe(path, outcome == mpath::IoOutcome::Ok, now);
    }

    fn record_probe(&mut self, path: PathId, ok: bool, now: Nanos) {
        self.disk.end_probe(path);
        let name = &self.disk.engine.path(path).name;
        match self.disk.engine.probe_result(path, ok, now) {
            ProbeOutcome::Recovered => info!("path {name} recovered: usable again"),
            ProbeOutcome::StillFailed => self
                .path_errors
                .warn(format_args!("path {name}: probe failed, still failed")),
            _ => {}
        }
    }
}

/// A part waiting on its path: on the device, or held by a lab `hang`.
fn watched(io: &Io) -> bool {
    matches!(io.stage, Stage::OnDevice | Stage::Held(_))
}
