//! Parts of requests on paths: sending, completing, retrying, failing over.

use std::time::Duration;

use log::{debug, warn};
use mpath::{Disposition, IoOutcome, Nanos, NoPathDecision, PathId, Selection, SubmitContext};
use mpath_io::{Admission, Bounce, IoOp};
use vhost_user_backend::VringRwLock;

use super::{
    modifies, split_user_data, user_data, After, Stage, Worker, TAG_PART, TAG_TICK, TAG_TIMER,
};
use crate::request::{STATUS_IOERR, STATUS_OK};

impl Worker {
    /// Sends part `id`: a flush command where mpath's flush rules say; else
    /// on `fixed` when it is selectable, else on the policy's pick among
    /// paths it has not failed on in this round. Without a path it waits for
    /// one (up to its no-path deadline); once it tried every path in every
    /// round it fails. `true` if this completed its request.
    pub(super) fn send(
        &mut self,
        id: usize,
        fixed: Option<PathId>,
        now: Nanos,
        vring: &VringRwLock,
    ) -> bool {
        let engine = &self.disk.engine;
        let io = &mut self.ios[id];
        let ctx = SubmitContext {
            now,
            numa_node: self.numa_node,
        };
        let selection = match (&io.flush, fixed) {
            (Some(f), _) => engine.select_flush(f.target, &io.info, &mut io.att, &ctx),
            (None, Some(p)) if engine.select_path_at(p, &io.info, now) => Selection::Path(p),
            (None, _) => engine.select_attempt(&io.info, &mut io.att, &ctx),
        };
        let path = match selection {
            Selection::Path(p) => p,
            Selection::Wait => {
                let born = io.att.born;
                return self.no_path(id, born, now, vring);
            }
            Selection::Exhausted => {
                self.path_errors.warn(format_args!(
                    "a {:?} request failed on every path in {} rounds: failing it",
                    io.op,
                    mpath::MAX_ROUNDS
                ));
                return self.finish(id, STATUS_IOERR, vring);
            }
        };
        if let Some(f) = io.flush.as_mut() {
            // The writes this command covers: those completed by now.
            engine.flush_sent(f);
        }
        io.path = path;
        io.started = now;
        io.cancelled = false;
        // A removed path's driver is closed once it drained; a part that
        // finds it so fails over like one that saw the device go.
        let admission = match self.disk.driver(path) {
            None => Err(IoOutcome::Errno(libc::ENODEV)),
            Some(driver) => match self
                .disk
                .shaping(path)
                .admit_io(io.op, io.offset, io.info.bytes)
            {
                Admission::Fail(outcome) => Err(outcome),
                Admission::Send => Ok(driver),
            },
        };
        let pushed = match admission {
            Err(outcome) => {
                // The fault travels through the ring like a real completion.
                io.stage = Stage::Injected(outcome);
                self.ring.push_nop(user_data(TAG_PART, id))
            }
            Ok(driver) => {
                io.stage = Stage::OnDevice;
                let req = &self.reqs[io.req];
                let guest: &[libc::iovec] = match io.op {
                    IoOp::Read | IoOp::Write { .. } => {
                        let (start, count) = (io.iov.0 as usize, io.iov.1 as usize);
                        req.iovecs.get(start..start + count).unwrap_or(&[])
                    }
                    _ => &[],
                };
                if let Some(align) = driver.bounce_alignment(io.op, io.offset, io.info.bytes, guest)
                {
                    // SAFETY: the guest memory stays mapped by the request's
                    // `mem` Arc, and the request outlives its parts.
                    io.bounce = unsafe { Bounce::new(io.op, guest, align) };
                    if io.bounce.is_none() {
                        // No memory for it: this request fails, the path does not.
                        self.path_errors.warn(format_args!(
                            "no memory for a bounce buffer: failing the request"
                        ));
                        let io = &self.ios[id];
                        self.disk.engine.release(path, &io.info);
                        return self.finish(id, STATUS_IOERR, vring);
                    }
                }
                let (iov, iovcnt) = match &io.bounce {
                    Some(b) => (b.iovec(), 1),
                    None if guest.is_empty() => (std::ptr::null(), 0),
                    None => (guest.as_ptr(), guest.len()),
                };
                // SAFETY: the iovecs live in `self.reqs[io.req]` (or the
                // part's bounce), removed only after this part completes;
                // they point into guest memory kept mapped by that request's
                // `mem` Arc (or the bounce's own buffer).
                let entry = unsafe {
                    driver.prepare(
                        io.op,
                        io.offset,
                        io.info.bytes,
                        iov,
                        iovcnt,
                        user_data(TAG_PART, id),
                    )
                };
                // SAFETY: as above, everything the entry points to outlives it.
                unsafe { self.ring.push(&entry) }
            }
        };
        if let Err(e) = pushed {
            self.path_errors
                .warn(format_args!("io_uring submission failed: {e}"));
            let io = &self.ios[id];
            self.disk.engine.release(path, &io.info);
            return self.finish(id, STATUS_IOERR, vring);
        }
        if self.disk.io_timeout(path).is_some() {
            // The tick watches for overdue commands (see `check_overdue`).
            self.arm_tick();
        }
        false
    }

    /// No usable path for part `id` (submitted first at `since`): keep it
    /// parked until one returns, or fail it at the no-path timeout counted
    /// from then (a failover does not restart the clock).
    pub(super) fn no_path(
        &mut self,
        id: usize,
        since: Nanos,
        now: Nanos,
        vring: &VringRwLock,
    ) -> bool {
        let engine = &self.disk.engine;
        let first = !matches!(self.ios[id].stage, Stage::NoPath { .. });
        match engine.no_path_decision(since, now) {
            NoPathDecision::Fail => {
                self.path_errors.warn(format_args!(
                    "no usable path for a {:?} request: failing it",
                    self.ios[id].op
                ));
                if !first {
                    engine.note_no_path_done(false);
                }
                self.finish(id, STATUS_IOERR, vring)
            }
            NoPathDecision::Wait { .. } => {
                if first {
                    engine.note_no_path_parked();
                    self.path_errors.warn(format_args!(
                        "no usable path: queueing requests for up to {:?}",
                        engine.no_path_timeout()
                    ));
                    self.ios[id].stage = Stage::NoPath { since };
                    self.parked.push(id);
                    self.arm_tick();
                }
                false
            }
        }
    }

    /// Whether parked part `id` could be sent now: a flush command that must
    /// reach its own path waits for that path, anything else for any path.
    pub(super) fn may_send(&self, id: usize) -> bool {
        let engine = &self.disk.engine;
        match &self.ios[id].flush {
            Some(f) => engine.flush_can_go(f.target),
            None => engine.any_usable(),
        }
    }

    /// The device finished part `id` (or its injected fault came back).
    fn device_done(
        &mut self,
        id: usize,
        res: i32,
        big: [u64; 2],
        now: Nanos,
        vring: &VringRwLock,
    ) -> bool {
        let Some(io) = self.ios.get_mut(id) else {
            warn!("completion for unknown I/O {id}");
            return false;
        };
        if let Some(bounce) = io.bounce.take() {
            if io.op == IoOp::Read && res > 0 {
                // SAFETY: the completion is reaped: the kernel no longer
                // writes the bounce. The guest buffers are written here,
                // before the request can complete.
                unsafe { bounce.copy_out(res as usize) };
            }
        }
        let io = &self.ios[id];
        let outcome = match io.stage {
            Stage::Injected(o) => o,
            // Cancelled for being past io-timeout-ms: it timed out.
            _ if io.cancelled && res == -libc::ECANCELED => IoOutcome::Errno(libc::ETIMEDOUT),
            _ => match self.disk.driver(io.path) {
                Some(driver) => driver.decode(io.op, io.info.bytes, res, big),
                None => IoOutcome::Errno(libc::ENODEV),
            },
        };
        self.shape_completion(id, outcome, now, vring)
    }

    /// Lab shaping of a completion: hold it, delay it, or deliver it now.
    pub(super) fn shape_completion(
        &mut self,
        id: usize,
        outcome: IoOutcome,
        now: Nanos,
        vring: &VringRwLock,
    ) -> bool {
        let io = &mut self.ios[id];
        let shaping = self.disk.shaping(io.path);
        if shaping.hang() {
            io.stage = Stage::Held(outcome);
            self.parked.push(id);
            self.arm_tick();
            return false;
        }
        let delay = shaping.completion_delay(io.info.bytes, now) + shaping.op_delay(io.op);
        if !delay.is_zero() {
            return self.start_timer(id, delay, After::Deliver(outcome), vring);
        }
        self.deliver(id, outcome, now, vring)
    }

    /// Hands a completion to the engine and acts on its decision.
    pub(super) fn deliver(
        &mut self,
        id: usize,
        outcome: IoOutcome,
        now: Nanos,
        vring: &VringRwLock,
    ) -> bool {
        let engine = &self.disk.engine;
        let io = &mut self.ios[id];
        let path = io.path;
        let latency = Duration::from_nanos(now.saturating_sub(io.started));
        let range = (io.offset, io.info.bytes);
        let d = engine.complete_attempt_at(
            path,
            &io.info,
            range,
            latency,
            outcome,
            io.retries,
            &mut io.att,
            now,
        );
        match d {
            Disposition::Done => {
                if modifies(io.op) {
                    engine.path(path).note_write_done();
                }
                if let Some(f) = &io.flush {
                    engine.flush_done(f);
                }
                self.finish(id, STATUS_OK, vring)
            }
            Disposition::RetrySamePath { after } => {
                io.retries += 1;
                if after.is_zero() {
                    self.send(id, Some(path), now, vring)
                } else {
                    self.start_timer(id, after, After::Resend(Some(path)), vring)
                }
            }
            Disposition::Failover => {
                let name = &engine.path(path).name;
                self.path_errors.warn(format_args!(
                    "path {name} failed ({outcome:?}); failing {:?} over",
                    io.op
                ));
                // Ghost-write guard: a cancelled write may still land on the
                // old path; wait out its quiesce time before re-sending.
                let guard = engine.failover_delay(path, &io.info, outcome);
                if guard.is_zero() {
                    self.send(id, None, now, vring)
                } else {
                    self.start_timer(id, guard, After::Resend(None), vring)
                }
            }
            Disposition::Fail if mpath::is_ambiguous(outcome) => {
                // An EIO that every path returned for this request (or for
                // its range lately): a bad block, not a path failure.
                self.path_errors.warn(format_args!(
                    "{:?} of {} bytes at {} failed on every path ({outcome:?}): \
                     an I/O error for this request; the paths stay in service",
                    io.op, io.info.bytes, io.offset
                ));
                self.finish(id, STATUS_IOERR, vring)
            }
            Disposition::Fail => {
                debug!(
                    "{:?} failed on path {}: {outcome:?}",
                    io.op,
                    engine.path(path).name
                );
                // A failed flush credits nothing: its paths keep owing.
                self.finish(id, STATUS_IOERR, vring)
            }
        }
    }

    /// Part `id` is over with `status`; `true` if that completed its request.
    pub(super) fn finish(&mut self, id: usize, status: u8, vring: &VringRwLock) -> bool {
        let io = self.ios.remove(id);
        let req = &mut self.reqs[io.req];
        if status != STATUS_OK {
            req.status = status;
        }
        req.remaining -= 1;
        if req.remaining > 0 {
            return false;
        }
        let req = self.reqs.remove(io.req);
        if req.status != STATUS_OK {
            self.disk
                .guest_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // The kernel wrote the read data: mark it before the guest can
        // see the request done.
        if req.reads {
            self.log_read_data(&req.mem, &req.iovecs);
        }
        self.write_status(&req.mem, req.status, req.status_addr);
        self.publish_used(vring, req.head, req.used_len);
        self.in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        true
    }

    /// The ring's eventfd fired: handle every completion on it.
    pub fn process_completions(&mut self, vring: &VringRwLock) {
        self.ring.clear_event();
        if self.reap_all(vring) {
            self.notify(vring);
        }
    }

    /// Handles every completion on the ring, submitting what they re-send;
    /// `true` if a request completed.
    pub(super) fn reap_all(&mut self, vring: &VringRwLock) -> bool {
        let mut used = false;
        loop {
            let mut reaped = std::mem::take(&mut self.reaped);
            if self.ring.reap(|ud, res, big| reaped.push((ud, res, big))) == 0 {
                self.reaped = reaped;
                break;
            }
            let now = self.disk.engine.now();
            for &(ud, res, big) in &reaped {
                let (tag, index) = split_user_data(ud);
                used |= match tag {
                    TAG_PART => self.device_done(index, res, big, now, vring),
                    TAG_TIMER => self.timer_fired(index, now, vring),
                    TAG_TICK => self.tick_fired(now, vring),
                    _ => false,
                };
            }
            reaped.clear();
            self.reaped = reaped;
            self.submit();
        }
        used
    }
}
