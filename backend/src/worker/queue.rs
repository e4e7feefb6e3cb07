//! The available ring: popping chains, turning requests into parts.

use std::time::{Duration, Instant};

use mpath::{Attempts, FlushPart, Nanos, PathId};
use mpath_io::{GuestBufs, IoOp};
use smallvec::SmallVec;
use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::QueueT;

use super::avail::Popped;
use super::{guest_bufs, vring_warn, Io, Mem, Req, Stage, Worker};
use crate::request::{Kind, Rejected, Request, STATUS_IOERR, STATUS_OK};
use crate::split::{needs_split, split};
use crate::virtio::SECTOR_SHIFT;

/// A burst is also handed over once its requests carry this many bytes:
/// large requests that complete inline (null reads zero-filled, page-cache
/// copies) cost microseconds each, and the guest should see the first
/// before the last is done (128k reads at QD8 otherwise went in lockstep).
pub(super) const SUBMIT_BATCH_BYTES: u64 = 64 * 1024;

/// Of a long burst's early hand-overs made for their bytes
/// (`SUBMIT_BATCH_BYTES`) that completed requests, every this many calls
/// the guest; all publish their used entries at once, and the burst's end
/// calls for what is left. A call costs the daemon 3-4 us of CPU when it
/// wakes a sleeping guest; one per such hand-over woke the guest for a
/// single 128k completion (0.75x the IOPS at null 128k reads). A hand-over
/// of a full batch of requests (`--submit-batch`) calls at once: the guest
/// then wakes while the rest of the burst is parsed, and a call to a guest
/// that has just gone to sleep costs a fraction of one to a guest asleep
/// for long (1.07-1.37x the IOPS at null 4k QD32, docs/history/benchmarks-issue-10.md).
pub(super) const EARLY_HANDOVERS_PER_CALL: u32 = 2;

/// A part to send: operation, offset, length, the flush command it is (for
/// flushes), and its data.
type Part = (IoOp, u64, u64, Option<Box<FlushPart>>, Option<GuestBufs>);

impl Worker {
    /// Drains the available ring, then submits the batch at once. With
    /// `rearm` the guest's kicks are re-enabled afterwards (without it the
    /// caller keeps polling the ring instead). A ring the driver broke is
    /// left alone (see `avail`); what is in flight still completes.
    pub fn process_queue(&mut self, vring: &VringRwLock, rearm: bool) {
        if rearm {
            self.spin.woken();
        }
        let mem: Mem = self.table.clone();
        self.name_memory(&mem);
        if !self.numa_known {
            // On the worker's thread, once: a machine without NUMA nodes in
            // sysfs must not pay a directory scan per batch.
            self.numa_known = true;
            self.numa_node = super::current_numa_node();
        }
        let mut used = false;
        // Requests are checked against the capacity now (`resize`): one
        // load per batch; `send` checks every part again.
        self.limits.capacity_sectors = self.disk.capacity_bytes() >> SECTOR_SHIFT;
        // A stopped queue (GET_VRING_BASE) is not touched until it restarts.
        let mut stopped = !vring.get_ref().get_queue().ready();
        if !self.broken && !stopped && !self.resubmit.is_empty() {
            let now = self.disk.engine.now();
            used |= self.resubmit_inflight(vring, &mem, now);
        }
        while !self.broken && !stopped {
            if let Err(why) = self.set_notification(vring, false) {
                self.mark_broken(why);
                break;
            }
            loop {
                let head = match self.pop(vring) {
                    Popped::Chain(h) => h,
                    Popped::Empty => break,
                    Popped::Stopped => {
                        stopped = true;
                        break;
                    }
                    Popped::Broken(why) => {
                        self.mark_broken(&why);
                        break;
                    }
                };
                self.mark_inflight(head);
                let mut checked = self.view.chain(head);
                let parsed =
                    self.parser
                        .parse_mapped(&mut checked, &mem, self.view.map(), &self.limits);
                if checked.cut_short() {
                    self.mark_broken(&format!(
                        "descriptor chain of head {head} cut short (loop, next index out of range or bad indirect table)"
                    ));
                    self.untake(vring);
                    break;
                }
                if let Ok(r) = &parsed {
                    self.burst_bytes += r.len;
                }
                // Stamped with the clock read when its batch was taken off
                // the ring (`Taken::at`): not with one read when this call
                // began, which a busy guest keeps going for seconds.
                used |= self.start(head, parsed, &mem, self.taken.at);
                let full_batch = self.queue.pending() >= self.submit_batch;
                if full_batch || self.burst_bytes >= self.submit_batch_bytes {
                    self.burst_bytes = 0;
                    // Hand a part of a long burst over early and let the
                    // guest see its completions while the rest is parsed:
                    // both sides work at once instead of in lockstep.
                    self.submit();
                    if self.reap_all(vring) {
                        self.early_uncalled += 1;
                        if full_batch || self.early_uncalled >= EARLY_HANDOVERS_PER_CALL {
                            self.notify(vring);
                            // The call covers all published so far.
                            used = false;
                        } else {
                            // Published for a guest that looks; called by
                            // the next hand-over or the burst's end.
                            used = true;
                        }
                    }
                }
            }
            if self.broken || stopped || !rearm {
                break;
            }
            if self.spin.window > Duration::ZERO {
                // Hand what was popped over and let the guest see its
                // completions, then wait briefly for its next requests
                // with kicks still off (see `Spin`).
                self.burst_bytes = 0;
                self.submit();
                if std::mem::take(&mut used) | self.reap_all(vring) {
                    self.notify(vring);
                }
                if self.spin_for_avail(vring) {
                    continue;
                }
            }
            match self.set_notification(vring, true) {
                Ok(true) => continue,
                Ok(false) => {
                    self.spin.armed();
                    break;
                }
                Err(why) => self.mark_broken(why),
            }
        }
        self.burst_bytes = 0;
        self.submit();
        // I/O that completed inline during the submit (null paths, page
        // cache hits) is finished now, without another wakeup. Clearing the
        // eventfd before reaping loses nothing: a later completion signals
        // again. Skipped (no system call) when nothing went to the kernel.
        self.queue.clear_event_if_signalled();
        used |= self.reap_all(vring);
        if used {
            self.notify(vring);
        }
    }

    /// Waits up to the spin window for the guest to make requests
    /// available, handling completions meanwhile; `true` if it did.
    fn spin_for_avail(&mut self, vring: &VringRwLock) -> bool {
        let start = Instant::now();
        let deadline = start + self.spin.window;
        let mut polls = 0u32;
        loop {
            if self.has_avail(vring) {
                self.counters.spun_since(start);
                return true;
            }
            if self.queue.has_completions() && self.reap_all(vring) {
                self.notify(vring);
            }
            polls += 1;
            // The clock every few polls: it costs more than a poll.
            if polls.is_multiple_of(8) {
                if self.sibling_has_work() {
                    // Another queue of the thread is busy: spinning here
                    // would only keep it waiting (`Spin::yielded`).
                    self.spin.yielded(start);
                    self.counters.spun_since(start);
                    return false;
                }
                let now = Instant::now();
                if now >= deadline || crate::shutdown::requested() {
                    self.spin.waited_since(start);
                    self.counters.spun_since(start);
                    return false;
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Turns the guest's kicks off or on; on: whether requests arrived
    /// meanwhile. A stopped queue has nothing to turn.
    fn set_notification(
        &mut self,
        vring: &VringRwLock,
        enable: bool,
    ) -> Result<bool, &'static str> {
        let state = vring.get_ref();
        let q = state.get_queue();
        if !q.ready() {
            return Ok(false);
        }
        let r = self.view.set_notification(&self.table, q, enable);
        if r.is_ok() {
            // What that wrote of the used ring: avail_event (EVENT_IDX,
            // turning kicks on) or used.flags (without EVENT_IDX, either way).
            if !q.event_idx_enabled() {
                self.log_used_ring(super::dirty::USED_FLAGS_OFFSET, 2);
            } else if enable {
                self.log_used_ring(super::dirty::avail_event_offset(q.size()), 2);
            }
        }
        r
    }

    /// Signals the guest if EVENT_IDX says it wants to hear (always without it).
    pub(super) fn notify(&mut self, vring: &VringRwLock) {
        self.flush_used(vring);
        self.early_uncalled = 0;
        let needs = {
            let state = vring.get_ref();
            self.view.needs_notification(&self.table, state.get_queue())
        };
        match needs {
            Ok(true) => {
                crate::diag::die_before_call();
                crate::queue_status::QueueCounters::count(&self.counters.calls);
                match vring.signal_used_queue() {
                    // A full (non-blocking) eventfd: the guest is signalled.
                    Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => {
                        vring_warn(format_args!("signal used queue: {e}"))
                    }
                    _ => {}
                }
            }
            Ok(false) => {}
            Err(e) => vring_warn(format_args!("needs_notification: {e}")),
        }
    }

    /// Serves the heads the inflight region held at queue start, in the
    /// order they were first popped, before anything new.
    fn resubmit_inflight(&mut self, vring: &VringRwLock, mem: &Mem, now: Nanos) -> bool {
        let mut used = false;
        while let Some(head) = self.resubmit.pop_front() {
            let resolved = self
                .view
                .resolve_queue(&self.table, vring.get_ref().get_queue());
            if let Err(why) = resolved {
                self.mark_broken(&format!("resubmitting head {head}: {why}"));
                self.resubmit.clear();
                break;
            }
            let mut checked = self.view.chain(head);
            let parsed = self
                .parser
                .parse_mapped(&mut checked, mem, self.view.map(), &self.limits);
            if checked.cut_short() {
                self.mark_broken(&format!(
                    "resubmitted descriptor chain of head {head} cut short"
                ));
                self.resubmit.clear();
                break;
            }
            used |= self.start(head, parsed, mem, now);
        }
        used
    }

    /// Whether the guest has made requests available that are not popped
    /// yet, on a queue that is started and not broken.
    fn has_avail(&mut self, vring: &VringRwLock) -> bool {
        if self.broken {
            return false;
        }
        let state = vring.get_ref();
        let q = state.get_queue();
        q.ready() && self.view.has_avail(&self.table, q) == Some(true)
    }

    /// Adaptive polling, as QEMU's AioContext and SPDK do: after work, keep
    /// checking the available ring and the completion queue for `window`
    /// (restarted whenever something arrives) instead of sleeping, with the
    /// guest's kicks off. Then re-arm kicks and handle any late arrival.
    pub fn poll(&mut self, vring: &VringRwLock, window: Duration) {
        let start = Instant::now();
        let mut deadline = start + window;
        // The idle stretch so far: from the last work to the last look
        // that found none (counted as spin, `get_queues`).
        let (mut idle_from, mut idle_to) = (start, start);
        loop {
            let mut progressed = false;
            if self.has_avail(vring) {
                self.process_queue(vring, false);
                progressed = true;
            }
            if self.queue.has_completions() {
                self.process_completions(vring);
                progressed = true;
            }
            let now = Instant::now();
            if progressed {
                self.counters
                    .spun(idle_to.saturating_duration_since(idle_from));
                (idle_from, idle_to) = (now, now);
                deadline = now + window;
            } else {
                idle_to = now;
                if crate::shutdown::requested()
                    || (!self.queue.polling() && (now >= deadline || self.sibling_has_work()))
                {
                    break;
                }
            }
            std::hint::spin_loop();
        }
        self.counters
            .spun(idle_to.saturating_duration_since(idle_from));
        if crate::shutdown::requested() {
            return;
        }
        self.process_queue(vring, true)
    }

    /// Starts one request; `true` if it completed at once.
    fn start(
        &mut self,
        head: u16,
        parsed: Result<Request, Rejected>,
        mem: &Mem,
        now: Nanos,
    ) -> bool {
        if parsed.is_err() {
            self.disk
                .bad_requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let req = match parsed {
            Ok(r) => r,
            Err(Rejected::NoStatus { why }) => {
                self.bad_input
                    .warn(format_args!("bad request (head {head}): {why}"));
                self.publish_used(head, 0);
                return true;
            }
            Err(Rejected::Status {
                status_addr,
                status,
                why,
            }) => {
                self.bad_input.warn(format_args!(
                    "bad request (head {head}): {why}; status {status}"
                ));
                self.write_status(mem, status, status_addr);
                self.publish_used(head, 1);
                return true;
            }
        };
        self.admit(head, req, mem, now)
    }

    /// Starts a parsed request that the QoS budget let go (see `hold`);
    /// `true` if it completed at once.
    pub(super) fn start_parsed(
        &mut self,
        head: u16,
        mut req: Request,
        mem: &Mem,
        now: Nanos,
    ) -> bool {
        let mut used_len = 1u32;
        let mut parts: SmallVec<[Part; 1]> = SmallVec::new();
        match req.kind {
            Kind::GetId => {
                let mut written = 0usize;
                for &(addr, len) in &req.id_area {
                    let src = &self.disk.serial[written..written + len as usize];
                    if !self.write_guest(mem, src, addr) {
                        break;
                    }
                    written += len as usize;
                }
                used_len += written as u32;
            }
            Kind::Read | Kind::Write => {
                if req.len > 0 {
                    let op = if req.kind == Kind::Read {
                        IoOp::Read
                    } else {
                        IoOp::Write { fua: false }
                    };
                    let lim = self.disk.split_limits();
                    if needs_split(&req.iovecs, req.len, &lim) {
                        // The kernel never splits passthrough commands: cut
                        // the request at the paths' limits here.
                        let Some(cut) = split(&req.iovecs, lim) else {
                            self.bad_input.warn(format_args!(
                                "request (head {head}) cannot be cut into whole blocks within the device limits"
                            ));
                            self.write_status(mem, STATUS_IOERR, req.status_addr);
                            self.publish_used(head, 1);
                            return true;
                        };
                        for (off, len, vs) in cut {
                            let bufs = guest_bufs(mem, self.keep_alive(mem), vs);
                            parts.push((op, req.offset + off, len, None, Some(bufs)));
                        }
                        self.parser.recycle(std::mem::take(&mut req.iovecs));
                    } else {
                        // The common case, one part: no part list to fill
                        // and drain.
                        let keep = self.keep_alive(mem);
                        let bufs = guest_bufs(mem, keep, std::mem::take(&mut req.iovecs));
                        let part = (op, req.offset, req.len, None, Some(bufs));
                        if req.kind == Kind::Read {
                            used_len += req.len as u32;
                        }
                        let r = Req::new(head, req.status_addr, used_len, req.kind == Kind::Read);
                        return self.launch(r, std::iter::once(part), mem, now);
                    }
                }
                if req.kind == Kind::Read {
                    used_len += req.len as u32;
                }
            }
            Kind::Flush => {
                // Every path that completed a write before this flush was
                // received and has not been flushed successfully since
                // (mpath's flush bookkeeping says where each command goes).
                // Whether a flush through another path covers a path is the
                // driver's to say (a block device node that took buffered
                // writes has a page cache of its own); it can only have
                // changed with a write that completed before this flush.
                let engine = &self.disk.engine;
                for (i, p) in engine.paths().iter().enumerate() {
                    if let Some(d) = self.disk.driver(PathId(i)) {
                        if p.flush_via_any() != d.flush_via_any() {
                            p.set_flush_via_any(d.flush_via_any());
                        }
                    }
                }
                for f in engine.flush_plan() {
                    parts.push((IoOp::Flush, 0, 0, Some(Box::new(f)), None));
                }
            }
            Kind::Discard | Kind::WriteZeroes => {
                for s in &req.segments {
                    let op = if req.kind == Kind::Discard {
                        IoOp::Discard
                    } else {
                        IoOp::WriteZeroes { unmap: s.unmap }
                    };
                    parts.push((op, s.offset, s.len, None, None));
                }
            }
        }
        if parts.is_empty() {
            self.write_status(mem, STATUS_OK, req.status_addr);
            self.publish_used(head, used_len);
            return true;
        }
        let r = Req::new(head, req.status_addr, used_len, req.kind == Kind::Read);
        self.launch(r, parts.into_iter(), mem, now)
    }

    /// Records request `r` (parsed in `mem`) and sends its parts; `true` if
    /// that completed it.
    fn launch(
        &mut self,
        mut r: Req,
        parts: impl ExactSizeIterator<Item = Part>,
        mem: &Mem,
        now: Nanos,
    ) -> bool {
        r.remaining = parts.len() as u32;
        r.table = self.tables.hold(mem);
        let rid = self.reqs.insert(r);
        self.count_in_flight(1);
        let mut done = false;
        for (op, offset, len, flush, bufs) in parts {
            let id = self.ios.insert(Io {
                req: rid as u32,
                path: PathId(usize::MAX),
                op,
                offset,
                len,
                att: Attempts::new(now),
                flush,
                retries: 0,
                started: now,
                stage: Stage::Sent,
                bufs,
            });
            done |= self.send(id, None, now);
        }
        done
    }
}
