//! Parts of requests on paths: sending, completing, retrying, failing over.

use std::time::Duration;

use log::{debug, warn};
use mpath::{Disposition, IoOutcome, Nanos, NoPathDecision, PathId, Selection, SubmitContext};
use mpath_io::{Command, Event, GuestBufs};
use vhost_user_backend::VringRwLock;

use super::{modifies, Stage, Worker};
use crate::request::{STATUS_IOERR, STATUS_OK};

impl Worker {
    /// Sends part `id`: a flush command where mpath's flush rules say; else
    /// on `fixed` when it is selectable, else on the policy's pick among
    /// paths it has not failed on in this round. Without a path it waits for
    /// one (up to its no-path deadline); once it tried every path in every
    /// round it fails. `true` if this completed its request.
    pub(super) fn send(&mut self, id: usize, fixed: Option<PathId>, now: Nanos) -> bool {
        if self.past_the_end(id) {
            return self.finish(id, STATUS_IOERR);
        }
        let engine = &self.disk.engine;
        let shard = &self.stats;
        let io = &mut self.ios[id];
        let ctx = SubmitContext {
            now,
            numa_node: self.numa_node,
        };
        let selection = match (&io.flush, fixed) {
            (Some(f), _) => engine.select_flush(f.target, &io.info(), &mut io.att, &ctx, shard),
            (None, Some(p)) if engine.select_path_at(p, &io.info(), now, shard) => {
                Selection::Path(p)
            }
            (None, _) => engine.select_attempt(&io.info(), &mut io.att, &ctx, shard),
        };
        let path = match selection {
            Selection::Path(p) => p,
            Selection::Wait => return self.no_path(id, now),
            Selection::Exhausted => {
                self.path_errors.warn(format_args!(
                    "a {:?} request failed on every path in {} rounds: failing it",
                    io.op,
                    mpath::MAX_ROUNDS
                ));
                return self.finish(id, STATUS_IOERR);
            }
        };
        if let Some(f) = io.flush.as_mut() {
            // The writes this command covers: those completed by now.
            engine.flush_sent(f);
        }
        io.path = path;
        io.started = now;
        io.stage = Stage::Sent;
        let cmd = Command {
            tag: id as u64,
            path: path.0,
            op: io.op,
            offset: io.offset,
            len: io.len,
            bufs: io.bufs.take(),
        };
        if let Err(refused) = self.queue.submit(cmd, now) {
            // No memory for a bounce buffer, or the ring refused it: this
            // request fails, the path does not.
            self.path_errors.warn(format_args!(
                "I/O submission refused ({}): failing the request",
                refused.error
            ));
            let io = &mut self.ios[id];
            io.bufs = refused.bufs;
            self.disk.engine.release(path, &io.info());
            return self.finish(id, STATUS_IOERR);
        }
        false
    }

    /// Part `id` reaches past the disk's end: the disk shrank (`resize`
    /// with `force`) after its request was checked. It never reaches the
    /// device (a retry or failover neither).
    fn past_the_end(&self, id: usize) -> bool {
        let io = &self.ios[id];
        io.flush.is_none()
            && io.len > 0
            && io
                .offset
                .checked_add(io.len)
                .is_none_or(|end| end > self.disk.capacity_bytes())
    }

    /// No usable path for part `id` (submitted first at `since`): keep it
    /// parked until one returns, or fail it at the no-path timeout counted
    /// from then (a failover does not restart the clock).
    pub(super) fn no_path(&mut self, id: usize, now: Nanos) -> bool {
        let engine = &self.disk.engine;
        let io = &self.ios[id];
        let first = io.stage != Stage::NoPath;
        match engine.no_path_decision(io.att.born, now) {
            NoPathDecision::Fail => {
                self.path_errors.warn(format_args!(
                    "no usable path for a {:?} request: failing it",
                    self.ios[id].op
                ));
                if !first {
                    engine.note_no_path_done(false);
                }
                self.finish(id, STATUS_IOERR)
            }
            NoPathDecision::Wait { .. } => {
                if first {
                    engine.note_no_path_parked();
                    self.path_errors.warn(format_args!(
                        "no usable path: queueing requests for up to {:?}",
                        engine.no_path_timeout()
                    ));
                    self.ios[id].stage = Stage::NoPath;
                    self.parked.push(id);
                    self.queue.arm_tick();
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

    /// Part `id` came back from the I/O queue with `outcome` (lab shaping
    /// already applied there) and its buffers.
    fn part_done(
        &mut self,
        id: usize,
        outcome: IoOutcome,
        bufs: Option<GuestBufs>,
        now: Nanos,
    ) -> bool {
        let Some(io) = self.ios.get_mut(id) else {
            warn!("completion for unknown I/O {id}");
            return false;
        };
        io.bufs = bufs;
        self.deliver(id, outcome, now)
    }

    /// Hands a completion to the engine and acts on its decision.
    pub(super) fn deliver(&mut self, id: usize, outcome: IoOutcome, now: Nanos) -> bool {
        let engine = &self.disk.engine;
        let io = &mut self.ios[id];
        let path = io.path;
        let latency = Duration::from_nanos(now.saturating_sub(io.started));
        let range = (io.offset, io.len);
        let d = engine.complete_attempt_at(
            path,
            &io.info(),
            range,
            latency,
            outcome,
            io.retries,
            &mut io.att,
            now,
            &self.stats,
        );
        match d {
            Disposition::Done => {
                if modifies(io.op) {
                    engine.path(path).note_write_done();
                }
                if let Some(f) = &io.flush {
                    engine.flush_done(f);
                }
                self.finish(id, STATUS_OK)
            }
            Disposition::RetrySamePath { after } => {
                io.retries += 1;
                if after.is_zero() {
                    self.send(id, Some(path), now)
                } else {
                    self.defer_send(id, after, Stage::Retry)
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
                let guard = engine.failover_delay(path, &io.info(), outcome);
                if guard.is_zero() {
                    self.send(id, None, now)
                } else {
                    self.defer_send(id, guard, Stage::Failover)
                }
            }
            Disposition::Fail if mpath::is_ambiguous(outcome) => {
                // An EIO that every path returned for this request (or for
                // its range lately): a bad block, not a path failure.
                self.path_errors.warn(format_args!(
                    "{:?} of {} bytes at {} failed on every path ({outcome:?}): \
                     an I/O error for this request; the paths stay in service",
                    io.op, io.len, io.offset
                ));
                self.finish(id, STATUS_IOERR)
            }
            Disposition::Fail => {
                debug!(
                    "{:?} failed on path {}: {outcome:?}",
                    io.op,
                    engine.path(path).name
                );
                // A failed flush credits nothing: its paths keep owing.
                self.finish(id, STATUS_IOERR)
            }
        }
    }

    /// Part `id` is over with `status`; `true` if that completed its request.
    pub(super) fn finish(&mut self, id: usize, status: u8) -> bool {
        let io = self.ios.remove(id);
        let req = &mut self.reqs[io.req as usize];
        if status != STATUS_OK {
            req.status = status;
        }
        // The kernel wrote the read data: mark it before the guest can see
        // the request done.
        if let (true, Some(bufs)) = (req.reads, &io.bufs) {
            let table = req.table;
            self.log_read_data(self.tables.mem(table), bufs.iovecs());
        }
        if let Some(bufs) = io.bufs {
            self.parser.recycle(bufs.into_vec());
        }
        let req = &mut self.reqs[io.req as usize];
        req.remaining -= 1;
        if req.remaining > 0 {
            return false;
        }
        let req = self.reqs.remove(io.req as usize);
        if req.status != STATUS_OK {
            self.disk
                .guest_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.write_status(self.tables.mem(req.table), req.status, req.status_addr);
        self.tables.release(req.table);
        self.publish_used(req.head, req.used_len);
        self.count_in_flight(-1);
        true
    }

    /// The ring's eventfd fired: handle every completion on it.
    pub fn process_completions(&mut self, vring: &VringRwLock) {
        self.queue.clear_event();
        // Woken by the disk when a driver changed: a removed path's device
        // closes once no queue holds its driver.
        self.queue.refresh_drivers();
        if self.reap_all(vring) {
            self.notify(vring);
        }
    }

    /// Handles every event of the I/O queue, submitting what they re-send;
    /// `true` if a request completed.
    pub(super) fn reap_all(&mut self, vring: &VringRwLock) -> bool {
        let mut used = false;
        // A clock read per pass of the reap, before the pass looks at the
        // rings: a completion is stamped no earlier than its part was sent
        // and no later than the daemon saw it; re-sends from a pass start
        // at its read. The read per pass keeps a long reap (a completion
        // queue's worth of events each pass) from ageing its last ones.
        loop {
            let now = self.disk.engine.now();
            let mut events = std::mem::take(&mut self.events);
            if self.queue.reap(now, |e| events.push(e)) == 0 {
                self.events = events;
                // What the reap queued (a delayed completion's timer).
                self.submit();
                break;
            }
            for e in events.drain(..) {
                used |= match e {
                    Event::Done { tag, outcome, bufs } => {
                        self.part_done(tag as usize, outcome, bufs, now)
                    }
                    Event::Timer { tag } => self.timer_fired(tag as usize, now),
                    Event::Overdue { tag, age } => {
                        self.overdue(tag as usize, age, now);
                        false
                    }
                    Event::Tick => self.tick_fired(now),
                };
            }
            self.events = events;
            self.submit();
        }
        self.flush_used(vring);
        used
    }
}
