//! One queue's worker: pops descriptor chains, sends each request through
//! the engine to a path's driver on this worker's own io_uring ring, and
//! completes requests when every part is done. Failed parts fail over to
//! another path here, so the guest never sees a path error.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{debug, warn};
use mpath::{Disposition, IoInfo, IoKind, PathId};
use mpath_io::{IoOp, Ring};
use slab::Slab;
use smallvec::SmallVec;
use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::QueueT;
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

use crate::disk::Disk;
use crate::ratelimit::RateLimitedLog;
use crate::request::{Kind, Parser, Rejected, Request, STATUS_IOERR, STATUS_OK};
use crate::virtio::Limits;

type Mem = Arc<GuestMemoryMmap>;

/// Requests submitted (and inline completions reaped) per part of a burst.
const SUB_BATCH: usize = 8;

/// A guest request being served: completes when `remaining` parts are done.
struct Req {
    head: u16,
    status_addr: GuestAddress,
    used_len: u32,
    status: u8,
    remaining: u32,
    /// Keeps the guest memory mapped while the data iovecs are in use.
    mem: Mem,
    iovecs: Vec<libc::iovec>,
}

// SAFETY: the iovecs are addresses into the guest memory that `mem` keeps
// mapped; only the owning worker uses them, whichever thread holds it.
unsafe impl Send for Req {}

/// One part of a request on one path.
#[derive(Clone, Copy)]
struct Io {
    req: usize,
    path: PathId,
    op: IoOp,
    offset: u64,
    info: IoInfo,
    /// Paths this part already failed on.
    excluded: u64,
    retries: u32,
    started: Instant,
}

pub struct Worker {
    disk: Arc<Disk>,
    limits: Limits,
    ring: Ring,
    parser: Parser,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    reqs: Slab<Req>,
    ios: Slab<Io>,
    /// Requests in flight, read without the worker's lock (drain, shutdown).
    in_flight: Arc<AtomicUsize>,
    event_idx: bool,
    reaped: Vec<(u64, i32, [u64; 2])>,
    bad_input: RateLimitedLog,
    path_errors: RateLimitedLog,
}

fn op_kind(op: IoOp) -> IoKind {
    match op {
        IoOp::Read => IoKind::Read,
        IoOp::Write { .. } => IoKind::Write,
        _ => IoKind::Other,
    }
}

fn modifies(op: IoOp) -> bool {
    matches!(
        op,
        IoOp::Write { .. } | IoOp::Discard | IoOp::WriteZeroes { .. }
    )
}

impl Worker {
    pub fn new(
        disk: Arc<Disk>,
        limits: Limits,
        queue_size: u16,
        mem: GuestMemoryAtomic<GuestMemoryMmap>,
        in_flight: Arc<AtomicUsize>,
    ) -> std::io::Result<Self> {
        Ok(Self {
            disk,
            limits,
            ring: Ring::new(u32::from(queue_size).max(64))?,
            parser: Parser::default(),
            mem,
            reqs: Slab::with_capacity(usize::from(queue_size)),
            ios: Slab::with_capacity(usize::from(queue_size)),
            in_flight,
            event_idx: false,
            reaped: Vec::with_capacity(usize::from(queue_size)),
            bad_input: RateLimitedLog::new(),
            path_errors: RateLimitedLog::new(),
        })
    }

    pub fn ring_eventfd(&self) -> std::os::fd::RawFd {
        self.ring.eventfd()
    }

    pub fn set_event_idx(&mut self, on: bool) {
        self.event_idx = on;
    }

    pub fn set_memory(&mut self, mem: GuestMemoryAtomic<GuestMemoryMmap>) {
        self.mem = mem;
    }

    /// Drains the available ring, then submits the batch at once. With
    /// `rearm` the guest's kicks are re-enabled afterwards (without it the
    /// caller keeps polling the ring instead).
    pub fn process_queue(&mut self, vring: &VringRwLock, rearm: bool) -> std::io::Result<()> {
        let mem: Mem = self.mem.memory().into_inner();
        // One timestamp per batch: latency at batch granularity is plenty,
        // and clock reads per I/O showed up in profiles.
        let now = Instant::now();
        let mut used = false;
        loop {
            vring
                .disable_notification()
                .map_err(std::io::Error::other)?;
            loop {
                let chain = vring
                    .get_mut()
                    .get_queue_mut()
                    .pop_descriptor_chain(mem.clone());
                let Some(chain) = chain else { break };
                let head = chain.head_index();
                let parsed = self.parser.parse(chain, &mem, &self.limits);
                used |= self.start(head, parsed, &mem, vring, now);
                if self.ring.unsubmitted() >= SUB_BATCH {
                    // Hand a part of a long burst over early and let the
                    // guest see its completions while the rest is parsed:
                    // both sides work at once instead of in lockstep.
                    self.ring.submit()?;
                    if self.reap_all(vring)? {
                        notify(vring);
                    }
                }
            }
            if !rearm || !vring.enable_notification().map_err(std::io::Error::other)? {
                break;
            }
        }
        self.ring.submit()?;
        // I/O that completed inline during the submit (null paths, page
        // cache hits) is finished now, without another wakeup. Clearing the
        // eventfd before reaping loses nothing: a later completion signals again.
        self.ring.clear_event();
        used |= self.reap_all(vring)?;
        if used {
            notify(vring);
        }
        Ok(())
    }

    /// Whether the guest has made requests available that are not popped yet.
    fn has_avail(&self, vring: &VringRwLock) -> bool {
        let mem = self.mem.memory();
        let state = vring.get_ref();
        let q = state.get_queue();
        q.avail_idx(&*mem, std::sync::atomic::Ordering::Acquire)
            .is_ok_and(|idx| idx.0 != q.next_avail())
    }

    /// Adaptive polling, as QEMU's AioContext and SPDK do: after work, keep
    /// checking the available ring and the completion queue for `window`
    /// (restarted whenever something arrives) instead of sleeping, with the
    /// guest's kicks off. Then re-arm kicks and handle any late arrival.
    pub fn poll(&mut self, vring: &VringRwLock, window: Duration) -> std::io::Result<()> {
        let mut deadline = Instant::now() + window;
        loop {
            let mut progressed = false;
            if self.has_avail(vring) {
                self.process_queue(vring, false)?;
                progressed = true;
            }
            if self.ring.has_completions() {
                self.process_completions(vring)?;
                progressed = true;
            }
            let now = Instant::now();
            if progressed {
                deadline = now + window;
            } else if now >= deadline || crate::shutdown::requested() {
                break;
            }
            std::hint::spin_loop();
        }
        if crate::shutdown::requested() {
            return Ok(());
        }
        self.process_queue(vring, true)
    }

    /// Starts one request; `true` if it completed at once.
    fn start(
        &mut self,
        head: u16,
        parsed: Result<Request, Rejected>,
        mem: &Mem,
        vring: &VringRwLock,
        now: Instant,
    ) -> bool {
        let req = match parsed {
            Ok(r) => r,
            Err(Rejected::NoStatus { why }) => {
                self.bad_input
                    .warn(format_args!("bad request (head {head}): {why}"));
                add_used(vring, head, 0);
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
                let _ = mem.write_obj(status, status_addr);
                add_used(vring, head, 1);
                return true;
            }
        };
        let mut used_len = 1u32;
        let mut parts: SmallVec<[(IoOp, u64, u64, Option<PathId>); 1]> = SmallVec::new();
        match req.kind {
            Kind::GetId => {
                let mut written = 0usize;
                for &(addr, len) in &req.id_area {
                    let src = &self.disk.serial[written..written + len as usize];
                    if mem.write_slice(src, addr).is_err() {
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
                    parts.push((op, req.offset, req.len, None));
                }
                if req.kind == Kind::Read {
                    used_len += req.len as u32;
                }
            }
            Kind::Flush => {
                // Every path that completed writes since the last flush; a
                // dirty path that is down is flushed through another path
                // (all paths reach the same namespace).
                let mut via_any = false;
                for (i, p) in self.disk.engine.paths().iter().enumerate() {
                    if p.take_dirty() {
                        if p.selectable() {
                            parts.push((IoOp::Flush, 0, 0, Some(PathId(i))));
                        } else {
                            via_any = true;
                        }
                    }
                }
                if via_any && parts.is_empty() {
                    parts.push((IoOp::Flush, 0, 0, None));
                }
            }
            Kind::Discard | Kind::WriteZeroes => {
                for s in &req.segments {
                    let op = if req.kind == Kind::Discard {
                        IoOp::Discard
                    } else {
                        IoOp::WriteZeroes { unmap: s.unmap }
                    };
                    parts.push((op, s.offset, s.len, None));
                }
            }
        }
        if parts.is_empty() {
            let _ = mem.write_obj(STATUS_OK, req.status_addr);
            add_used(vring, head, used_len);
            return true;
        }
        let rid = self.reqs.insert(Req {
            head,
            status_addr: req.status_addr,
            used_len,
            status: STATUS_OK,
            remaining: parts.len() as u32,
            mem: mem.clone(),
            iovecs: req.iovecs,
        });
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let mut done = false;
        for (op, offset, len, path) in parts {
            let io = Io {
                req: rid,
                path: PathId(usize::MAX),
                op,
                offset,
                info: IoInfo {
                    kind: op_kind(op),
                    bytes: len,
                },
                excluded: 0,
                retries: 0,
                started: now,
            };
            done |= self.dispatch(io, path, vring);
        }
        done
    }

    /// Picks a path (or takes `fixed`) and queues the part on the ring. On
    /// no usable path the part fails; `true` if that completed its request.
    fn dispatch(&mut self, mut io: Io, fixed: Option<PathId>, vring: &VringRwLock) -> bool {
        let engine = &self.disk.engine;
        let path = match fixed {
            Some(p) if engine.select_path(p, &io.info) => Some(p),
            _ => engine.select(&io.info, io.excluded),
        };
        let Some(path) = path else {
            self.path_errors
                .warn(format_args!("no usable path for a {:?} request", io.op));
            return self.finish_part(io.req, STATUS_IOERR, vring);
        };
        io.path = path;
        let req = &self.reqs[io.req];
        let (iov, iovcnt) = match io.op {
            IoOp::Read | IoOp::Write { .. } => (req.iovecs.as_ptr(), req.iovecs.len()),
            _ => (std::ptr::null(), 0),
        };
        let driver = &self.disk.drivers[path.0];
        let id = self.ios.insert(io);
        // SAFETY: the iovecs live in `self.reqs[io.req]`, which is removed
        // only after this part completes; they point into guest memory kept
        // mapped by that request's `mem` Arc.
        let entry =
            unsafe { driver.prepare(io.op, io.offset, io.info.bytes, iov, iovcnt, id as u64) };
        // SAFETY: as above, everything the entry points to outlives its completion.
        if let Err(e) = unsafe { self.ring.push(&entry) } {
            warn!("io_uring submission failed: {e}");
            self.ios.remove(id);
            engine.release(path, &io.info);
            return self.finish_part(io.req, STATUS_IOERR, vring);
        }
        false
    }

    /// One part of request `rid` is done with `status`; completes the
    /// request when it was the last. `true` if the request completed.
    fn finish_part(&mut self, rid: usize, status: u8, vring: &VringRwLock) -> bool {
        let req = &mut self.reqs[rid];
        if status != STATUS_OK {
            req.status = status;
        }
        req.remaining -= 1;
        if req.remaining > 0 {
            return false;
        }
        let req = self.reqs.remove(rid);
        let _ = req.mem.write_obj(req.status, req.status_addr);
        add_used(vring, req.head, req.used_len);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        true
    }

    /// The ring's eventfd fired: reap every completion, account it in the
    /// engine, fail over what failed on a path, complete what is done.
    pub fn process_completions(&mut self, vring: &VringRwLock) -> std::io::Result<()> {
        self.ring.clear_event();
        if self.reap_all(vring)? {
            notify(vring);
        }
        Ok(())
    }

    /// Handles every completion on the ring, submitting re-sent parts;
    /// `true` if a request completed.
    fn reap_all(&mut self, vring: &VringRwLock) -> std::io::Result<bool> {
        let mut used = false;
        loop {
            let mut reaped = std::mem::take(&mut self.reaped);
            if self.ring.reap(|ud, res, big| reaped.push((ud, res, big))) == 0 {
                self.reaped = reaped;
                break;
            }
            let now = Instant::now();
            for &(ud, res, big) in &reaped {
                used |= self.complete_part(ud as usize, res, big, vring, now);
            }
            reaped.clear();
            self.reaped = reaped;
            self.ring.submit()?;
        }
        Ok(used)
    }

    fn complete_part(
        &mut self,
        id: usize,
        res: i32,
        big: [u64; 2],
        vring: &VringRwLock,
        now: Instant,
    ) -> bool {
        let Some(mut io) = self.ios.try_remove(id) else {
            warn!("completion for unknown I/O {id}");
            return false;
        };
        let engine = &self.disk.engine;
        let outcome = self.disk.drivers[io.path.0].decode(io.op, io.info.bytes, res, big);
        let latency = now.saturating_duration_since(io.started);
        let d = engine.complete(io.path, &io.info, latency, outcome, io.retries);
        match d {
            Disposition::Done => {
                if modifies(io.op) {
                    engine.path(io.path).mark_dirty();
                }
                self.finish_part(io.req, STATUS_OK, vring)
            }
            Disposition::RetrySamePath { .. } => {
                io.retries += 1;
                io.started = now;
                let path = io.path;
                self.dispatch(io, Some(path), vring)
            }
            Disposition::Failover => {
                let name = &engine.path(io.path).name;
                self.path_errors.warn(format_args!(
                    "path {name} failed ({outcome:?}); failing {:?} over",
                    io.op
                ));
                io.excluded |= 1 << io.path.0;
                io.started = now;
                self.dispatch(io, None, vring)
            }
            Disposition::Fail => {
                debug!(
                    "{:?} failed on path {}: {outcome:?}",
                    io.op,
                    engine.path(io.path).name
                );
                if io.op == IoOp::Flush {
                    engine.path(io.path).mark_dirty();
                }
                self.finish_part(io.req, STATUS_IOERR, vring)
            }
        }
    }

    /// The frontend is gone or reset the device: wait for every I/O on the
    /// ring and drop the results without touching guest memory or rings.
    pub fn drain_and_discard(&mut self) {
        while !self.ios.is_empty() {
            if let Err(e) = self.ring.submit().and_then(|_| self.ring.wait()) {
                warn!("waiting for in-flight I/O: {e}");
                break;
            }
            let mut reaped = std::mem::take(&mut self.reaped);
            self.ring.reap(|ud, res, big| reaped.push((ud, res, big)));
            for &(ud, _, _) in &reaped {
                if let Some(io) = self.ios.try_remove(ud as usize) {
                    self.disk.engine.release(io.path, &io.info);
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
    }
}

fn add_used(vring: &VringRwLock, head: u16, len: u32) {
    if let Err(e) = vring.add_used(head, len) {
        warn!("add_used({head}): {e:?}");
    }
}

/// Signals the guest if EVENT_IDX says it wants to hear (always without it).
fn notify(vring: &VringRwLock) {
    match vring.needs_notification() {
        Ok(true) => {
            if let Err(e) = vring.signal_used_queue() {
                warn!("signal used queue: {e}");
            }
        }
        Ok(false) => {}
        Err(e) => warn!("needs_notification: {e:?}"),
    }
}
