//! A worker's I/O queue: owns its [`Ring`], the commands in flight, their
//! bounce buffers, timers, deferred re-sends, io-timeout cancellation and
//! lab shaping, behind a safe API:
//!
//! - [`IoQueue::submit`] sends one command (its buffers as [`GuestBufs`]),
//! - [`IoQueue::defer`] comes back with a [`Event::Timer`] after a while,
//! - [`IoQueue::reap`] hands out what happened: [`Event::Done`] once per
//!   submitted command (with its buffers back), timers, and on the
//!   periodic tick [`Event::Overdue`] commands and [`Event::Tick`].
//!
//! Lab shaping (`fail*` at submission; `hang`, `delay-us`, `bw-mbps`,
//! `flush-delay-us` and the path models at completion) happens in here:
//! the caller only ever sees outcomes, later or different ones. Nothing
//! here sleeps: every wait is an io_uring timeout on the ring.

mod drivers;
mod registered;
mod shaping;
#[cfg(test)]
mod tests;
mod timers;

use std::io;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use io_uring::types::Timespec;
use mpath::IoOutcome;
use slab::Slab;

use crate::{Bounce, GuestBufs, IoOp, PathDriver, Registered, Ring, Shaping};
use registered::{Buffers, Files};
pub use registered::{HostRegion, RegOptions, RegStats};

/// What a queue needs to know of its paths, by index.
pub trait PathTable: Send + Sync + 'static {
    /// The path's driver; `None` once it is gone (its commands then fail
    /// with `ENODEV`). A queue keeps what it got while [`generation`] stays
    /// the same.
    ///
    /// [`generation`]: PathTable::generation
    fn driver(&self, path: usize) -> Option<Arc<dyn PathDriver>>;
    /// Changes whenever a path's driver is replaced or dropped (an atomic
    /// load: it is read on every submission and completion).
    fn generation(&self) -> u64;
    /// The path's lab shaping (inactive unless configured).
    fn shaping(&self, path: usize) -> &Shaping;
    /// Commands older than this (ns) are overdue (`io-timeout-ms`). Read
    /// when a command goes to the ring, and for one that completed at
    /// submission only if shaping holds it.
    fn io_timeout(&self, path: usize) -> Option<u64>;
}

/// One command for [`IoQueue::submit`].
#[derive(Debug)]
pub struct Command {
    /// The caller's name for it, given back in its events.
    pub tag: u64,
    pub path: usize,
    pub op: IoOp,
    pub offset: u64,
    pub len: u64,
    /// Data of a read or write.
    pub bufs: Option<GuestBufs>,
}

/// A command the queue could not take (no memory for a bounce buffer, the
/// ring refused it): it is not in flight, and no event will come for it.
#[derive(Debug)]
pub struct Refused {
    pub error: io::Error,
    pub bufs: Option<GuestBufs>,
}

/// What [`IoQueue::reap`] reports.
///
/// With a tag byte of its own (`repr(u8)`: 64 bytes, not 56): the caller's
/// match on an event reads the tag, where the variants packed into the
/// buffers' niche took a range check and a jump table.
#[derive(Debug)]
#[repr(u8)]
pub enum Event {
    /// Command `tag` is over with `outcome`; its buffers come back.
    Done {
        tag: u64,
        outcome: IoOutcome,
        bufs: Option<GuestBufs>,
    },
    /// The time given to [`IoQueue::defer`] for `tag` passed.
    Timer { tag: u64 },
    /// On a tick: command `tag` (on its device, or held by a lab `hang`)
    /// is older than its path's io-timeout (`age` ns).
    Overdue { tag: u64, age: u64 },
    /// The periodic tick fired (after its `Overdue` events).
    Tick,
}

/// How often the tick fires while armed.
pub const TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// What a completion on the ring is about (top byte of `user_data`).
const KIND_SHIFT: u32 = 56;
const KIND_CMD: u64 = 0;
const KIND_TIMER: u64 = 1;
const KIND_TICK: u64 = 2;
/// A cancellation of an overdue command (its own completion is ignored).
const KIND_CANCEL: u64 = 4;

fn user_data(kind: u64, slot: usize) -> u64 {
    (kind << KIND_SHIFT) | slot as u64
}

fn split_user_data(ud: u64) -> (u64, usize) {
    (ud >> KIND_SHIFT, (ud & ((1 << KIND_SHIFT) - 1)) as usize)
}

/// Where a command (or deferral) is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    /// Its I/O is on the ring.
    OnDevice,
    /// Completed without the ring (a [`ReadyCmd`] reaped), being shaped.
    Ready(IoOutcome),
    /// Held by a `hang` path with this result.
    Held(IoOutcome),
    /// A delay timer is on the ring; then this result is delivered.
    Delayed(IoOutcome),
    /// A caller's deferral is on the ring.
    Deferred,
}

struct Slot {
    tag: u64,
    path: usize,
    op: IoOp,
    len: u64,
    started: u64,
    timeout: Option<u64>,
    state: State,
    /// A cancellation was sent (overdue past its io-timeout).
    cancelled: bool,
    bufs: Option<GuestBufs>,
    /// The aligned copy of `bufs` the I/O uses instead, while on the ring
    /// (boxed: rare, and the slot is copied on every submission).
    bounce: Option<Box<Bounce>>,
    /// A timer's duration while one is on the ring (boxed: its address is
    /// read by the kernel at submission and must not move).
    ts: Option<Box<Timespec>>,
    /// On the polled ring (until its completion).
    polled: bool,
}

/// A command completed at submission (inline driver, injected fault, gone
/// path), until the next reap. Kept out of `slots`: it would enter and
/// leave the table within one batch, and only shaping needs a slot for it
/// (its io-timeout is read then: it matters only to a held command).
struct ReadyCmd {
    tag: u64,
    path: usize,
    op: IoOp,
    len: u64,
    started: u64,
    outcome: IoOutcome,
    /// Taken when the command is reaped. Without drop glue, so that the
    /// reap's clearing of the array is a store of its length, not a look
    /// at every entry; [`Ready`] drops what was never reaped.
    bufs: ManuallyDrop<Option<GuestBufs>>,
}

/// The commands completed at submission, in order (a plain array: it is
/// only pushed to, and a reap takes it whole).
#[derive(Default)]
struct Ready(Vec<ReadyCmd>);

impl Drop for Ready {
    fn drop(&mut self) {
        for r in &mut self.0 {
            drop(r.bufs.take());
        }
    }
}

impl std::ops::Deref for Ready {
    type Target = Vec<ReadyCmd>;
    fn deref(&self) -> &Vec<ReadyCmd> {
        &self.0
    }
}

impl std::ops::DerefMut for Ready {
    fn deref_mut(&mut self) -> &mut Vec<ReadyCmd> {
        &mut self.0
    }
}

impl ReadyCmd {
    fn new(cmd: Command, started: u64, outcome: IoOutcome) -> Self {
        Self {
            tag: cmd.tag,
            path: cmd.path,
            op: cmd.op,
            len: cmd.len,
            started,
            outcome,
            bufs: ManuallyDrop::new(cmd.bufs),
        }
    }
}

pub struct IoQueue<P: PathTable> {
    ring: Ring,
    paths: Arc<P>,
    slots: Slab<Slot>,
    /// Commands completed without the ring, in order.
    ready: Ready,
    /// Slots held by a `hang` path.
    held: Vec<usize>,
    /// Commands on a path with an io-timeout put on a ring since the last
    /// flush ([`IoQueue::flush_stamped`]).
    unstamped: Vec<usize>,
    tick_armed: bool,
    tick: Box<Timespec>,
    /// Ring completions, gathered before they are handled.
    cqes: Vec<(u64, i32, [u64; 2])>,
    /// Guest memory as fixed buffers (see `registered`).
    bufs: Buffers,
    /// The paths' files in the ring's file table.
    files: Files,
    reg_stats: RegStats,
    /// The polled ring, once a command needed it (`RegOptions::io_poll`).
    poll: Option<PollSide>,
    opts: RegOptions,
    /// Ring sizes, for the polled ring.
    sizes: (u32, u32),
    /// Setting up the polled ring failed: nothing is polled.
    poll_refused: bool,
    /// The paths' drivers as this queue holds them (see `drivers`).
    drivers: drivers::Drivers,
}

/// The polled ring with its own registrations (a ring's fixed buffers and
/// files are its own).
struct PollSide {
    ring: Ring,
    bufs: Buffers,
    files: Files,
    /// Commands on it, not yet completed: while any is, the ring is polled.
    in_flight: usize,
}

impl<P: PathTable> std::fmt::Debug for IoQueue<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoQueue")
            .field("in_flight", &self.len())
            .finish()
    }
}

pub(crate) fn timespec(d: std::time::Duration) -> Box<Timespec> {
    Box::new(Timespec::new().sec(d.as_secs()).nsec(d.subsec_nanos()))
}

impl<P: PathTable> IoQueue<P> {
    /// A queue on a ring of `sq` submission and `cq` completion entries.
    pub fn new(paths: Arc<P>, sq: u32, cq: u32) -> io::Result<Self> {
        Ok(Self {
            ring: Ring::with_sizes(sq, cq)?,
            paths,
            slots: Slab::with_capacity(sq as usize),
            ready: Ready::default(),
            held: Vec::new(),
            unstamped: Vec::new(),
            tick_armed: false,
            tick: timespec(TICK),
            cqes: Vec::with_capacity(cq as usize),
            bufs: Buffers::new(),
            files: Files::new(),
            reg_stats: RegStats::default(),
            poll: None,
            opts: RegOptions::default(),
            sizes: (sq, cq),
            poll_refused: false,
            drivers: drivers::Drivers::default(),
        })
    }

    /// Lets go of drivers the path table replaced or dropped since this
    /// queue took them (and of their registered files), so that a removed
    /// path's device closes: called when the table wakes the queue.
    pub fn refresh_drivers(&mut self) {
        if self.drivers.refresh(&*self.paths) {
            self.files.sweep(&self.ring, &*self.paths);
            if let Some(p) = &mut self.poll {
                p.files.sweep(&p.ring, &*self.paths);
            }
        }
    }

    /// A handle that wakes this queue's waiter from any thread (its
    /// eventfd, duplicated): for the path table to announce a new
    /// generation.
    pub fn waker(&self) -> io::Result<vmm_sys_util::eventfd::EventFd> {
        self.ring.eventfd_clone()
    }

    /// Whether commands are in flight on the polled ring: the caller must
    /// keep reaping (`has_completions` polls the device) instead of
    /// sleeping on the eventfd, which their completions do not signal.
    pub fn polling(&self) -> bool {
        self.poll.as_ref().is_some_and(|p| p.in_flight > 0)
    }

    /// What to register with the ring (see `registered`; all off unless set).
    pub fn set_registration(&mut self, opts: RegOptions) {
        self.opts = opts;
        self.bufs.enable(opts.fixed_buffers);
        self.files.enable(opts.registered_files);
        if let Some(p) = &mut self.poll {
            p.bufs.enable(opts.fixed_buffers);
            p.files.enable(opts.registered_files);
        }
    }

    /// The guest memory that `GuestBufs` made with `keep` lie in, as host
    /// regions: registered as fixed buffers (when enabled) with the next
    /// command that can use them. Call it whenever the memory table
    /// changes; the same `keep` again costs nothing.
    pub fn set_memory(
        &mut self,
        keep: Arc<dyn std::any::Any + Send + Sync>,
        regions: &[HostRegion],
    ) {
        if let Some(p) = &mut self.poll {
            p.bufs.set_memory(keep.clone(), regions);
        }
        self.bufs.set_memory(keep, regions);
    }

    /// The memory last named with [`IoQueue::set_memory`] (the address of
    /// its keep-alive, as [`GuestBufs::memory_id`]), if any.
    pub fn named_memory(&self) -> Option<usize> {
        self.bufs.named_id()
    }

    /// Releases the registered memory (the frontend left).
    pub fn forget_memory(&mut self) {
        self.bufs.forget_memory(&self.ring);
        if let Some(p) = &mut self.poll {
            p.bufs.forget_memory(&p.ring);
        }
    }

    /// What registration did so far on this queue.
    pub fn reg_stats(&self) -> RegStats {
        self.reg_stats
    }

    /// The fd that becomes readable when completions arrive.
    pub fn eventfd(&self) -> std::os::fd::RawFd {
        self.ring.eventfd()
    }

    /// Makes the eventfd readable (to come back and try a refused
    /// submission again).
    pub fn wake(&self) {
        self.ring.wake();
    }

    /// Consumes the eventfd's counter (before reaping: no wakeup is lost).
    pub fn clear_event(&self) {
        self.ring.clear_event();
    }

    /// [`IoQueue::clear_event`] only where the eventfd can have been
    /// signalled (see `Ring::clear_event_if_signalled`): no
    /// system call for a batch that completed inline. A caller that was
    /// woken by the eventfd uses `clear_event`.
    pub fn clear_event_if_signalled(&self) {
        self.ring.clear_event_if_signalled();
    }

    /// Commands and deferrals in flight.
    pub fn len(&self) -> usize {
        self.slots.len() + self.ready.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.ready.is_empty()
    }

    /// Work queued for the kernel or completed inline, not reaped yet.
    pub fn pending(&mut self) -> usize {
        self.ring.unsubmitted()
            + self.ready.len()
            + self.poll.as_mut().map_or(0, |p| p.ring.unsubmitted())
    }

    /// Whether [`IoQueue::reap`] has something now (no system call, except
    /// one enter that polls the device while commands are on the polled
    /// ring).
    pub fn has_completions(&mut self) -> bool {
        if !self.ready.is_empty() || self.ring.has_completions() {
            return true;
        }
        match &mut self.poll {
            Some(p) => {
                if p.in_flight == 0 && p.ring.unsubmitted() == 0 {
                    return p.ring.has_completions();
                }
                // Polls the device (one enter, waiting for nothing).
                let _ = p.ring.poll();
                p.ring.has_completions()
            }
            None => false,
        }
    }

    /// Hands what is queued to the kernel. An error leaves it queued.
    /// Commands on a path with an io-timeout count their age from the
    /// `now` given at [`IoQueue::submit`].
    pub fn flush(&mut self) -> io::Result<usize> {
        let n = self.flush_rings()?;
        self.unstamped.clear();
        Ok(n)
    }

    /// As [`IoQueue::flush`], and commands on a path with an io-timeout
    /// count their age from `clock()`, read after the system call (only
    /// when such a command was flushed): their own time on the path, not
    /// the time the worker took to parse the rest of their batch or to be
    /// scheduled before the call.
    pub fn flush_stamped(&mut self, clock: impl FnOnce() -> u64) -> io::Result<usize> {
        let n = self.flush_rings()?;
        if !self.unstamped.is_empty() {
            let now = clock();
            for id in self.unstamped.drain(..) {
                if let Some(s) = self.slots.get_mut(id) {
                    if s.state == State::OnDevice {
                        s.started = s.started.max(now);
                    }
                }
            }
        }
        Ok(n)
    }

    fn flush_rings(&mut self) -> io::Result<usize> {
        let n = match &mut self.poll {
            Some(p) => p.ring.submit()?,
            None => 0,
        };
        Ok(n + self.ring.submit()?)
    }

    /// Submits what is queued and blocks until something can be reaped.
    pub fn wait(&mut self) -> io::Result<()> {
        if !self.ready.is_empty() {
            return self.flush().map(|_| ());
        }
        if self.polling() {
            // Nothing signals the polled ring's completions: poll it (and
            // look at the other ring) until something is there.
            self.flush()?;
            while !self.has_completions() {
                std::hint::spin_loop();
            }
            return Ok(());
        }
        self.ring.wait()
    }

    /// Sends `cmd` (its shaping first: an injected fault completes it
    /// without the device). `now`: the caller's clock (ns), from which its
    /// io-timeout counts. Its [`Event::Done`] comes from a later `reap`.
    pub fn submit(&mut self, mut cmd: Command, now: u64) -> Result<(), Refused> {
        let paths = &*self.paths;
        let Some(driver) = self.drivers.get(paths, cmd.path) else {
            // A removed path's driver is closed once it drained: the
            // command fails over like one that saw the device go.
            let outcome = IoOutcome::Errno(libc::ENODEV);
            self.ready.push(ReadyCmd::new(cmd, now, outcome));
            return Ok(());
        };
        // No shaping active in the process (the common case): one load, no
        // lookup of the path's.
        if let crate::Admission::Fail(outcome) = shaping_of(paths, cmd.path)
            .map_or(crate::Admission::Send, |s| {
                s.admit_io(cmd.op, cmd.offset, cmd.len)
            })
        {
            self.ready.push(ReadyCmd::new(cmd, now, outcome));
            return Ok(());
        }
        if let Some(outcome) =
            driver.complete_inline(cmd.op, cmd.offset, cmd.len, cmd.bufs.as_mut())
        {
            self.ready.push(ReadyCmd::new(cmd, now, outcome));
            return Ok(());
        }
        let timeout = paths.io_timeout(cmd.path);
        let mut slot = Slot {
            tag: cmd.tag,
            path: cmd.path,
            op: cmd.op,
            len: cmd.len,
            started: now,
            timeout,
            state: State::OnDevice,
            cancelled: false,
            bufs: cmd.bufs,
            bounce: None,
            ts: None,
            polled: false,
        };
        let guest: &[libc::iovec] = match (cmd.op, &slot.bufs) {
            (IoOp::Read | IoOp::Write { .. }, Some(b)) => b.iovecs(),
            _ => &[],
        };
        if let Some(align) = driver.bounce_alignment(cmd.op, cmd.offset, cmd.len, guest) {
            // SAFETY: `GuestBufs` keeps its memory mapped, and the slot
            // keeps the `GuestBufs` for as long as it keeps the bounce.
            slot.bounce = unsafe { Bounce::new(cmd.op, guest, align) }.map(Box::new);
            if slot.bounce.is_none() {
                return Err(Refused {
                    error: io::Error::from_raw_os_error(libc::ENOMEM),
                    bufs: slot.bufs,
                });
            }
        }
        let (iov, iovcnt) = match &slot.bounce {
            Some(b) => (b.iovec(), 1),
            None if guest.is_empty() => (std::ptr::null(), 0),
            None => (guest.as_ptr(), guest.len()),
        };
        let polled = self.opts.io_poll
            && matches!(cmd.op, IoOp::Read | IoOp::Write { .. })
            && driver.io_poll()
            && ensure_poll(
                &mut self.poll,
                &mut self.poll_refused,
                &self.bufs,
                self.opts,
                self.sizes,
            );
        let (ring, bufs, files) = match &mut self.poll {
            Some(p) if polled => (&mut p.ring, &mut p.bufs, &mut p.files),
            _ => (&mut self.ring, &mut self.bufs, &mut self.files),
        };
        let mut reg = Registered::default();
        // Whether this command counts as one that could take a fixed buffer.
        let mut buf_capable = false;
        if let Some(file) = driver.ring_file() {
            reg.file = files.slot(ring, cmd.path, file);
        }
        if driver.fixed_buffers() && matches!(cmd.op, IoOp::Read | IoOp::Write { .. }) {
            buf_capable = true;
            reg.buf = match (&slot.bounce, &slot.bufs, guest) {
                (None, Some(b), [one]) => {
                    let window = driver.fixed_buffer_window();
                    bufs.index(ring, b.memory_id(), one, window, &mut self.reg_stats)
                }
                _ => None,
            };
        }
        let id = self.slots.vacant_key();
        // SAFETY: the iovec array and the memory it describes belong to the
        // slot (its `GuestBufs`, whose heap array does not move, or its
        // bounce), which stays in the table until the completion is reaped;
        // `reg` holds only slots filled for this driver's file and for
        // memory that holds the one iovec wholly.
        let entry = unsafe {
            driver.prepare_registered(
                cmd.op,
                cmd.offset,
                cmd.len,
                iov,
                iovcnt,
                user_data(KIND_CMD, id),
                reg,
            )
        };
        // SAFETY: as above.
        if let Err(error) = unsafe { ring.push(&entry) } {
            return Err(Refused {
                error,
                bufs: slot.bufs,
            });
        }
        slot.polled = polled;
        if polled {
            if let Some(p) = &mut self.poll {
                p.in_flight += 1;
            }
            self.reg_stats.polled += 1;
        }
        self.slots.insert(slot);
        if timeout.is_some() {
            self.unstamped.push(id);
        }
        if reg.file.is_some() {
            self.reg_stats.fixed_file += 1;
        }
        match (buf_capable, reg.buf) {
            (true, Some(_)) => self.reg_stats.fixed_buf += 1,
            (true, None) => self.reg_stats.plain_buf += 1,
            _ => {}
        }
        if timeout.is_some() {
            // The tick watches for overdue commands.
            self.arm_tick();
        }
        Ok(())
    }

    /// Comes back with [`Event::Timer`] for `tag` after `after`.
    pub fn defer(&mut self, tag: u64, after: std::time::Duration) -> io::Result<()> {
        let id = self.slots.insert(Slot {
            tag,
            path: usize::MAX,
            op: IoOp::Flush,
            len: 0,
            started: 0,
            timeout: None,
            state: State::Deferred,
            cancelled: false,
            bufs: None,
            bounce: None,
            ts: None,
            polled: false,
        });
        self.start_timer(id, after)
    }

    /// Hands every event available now to `f`; the number handled.
    /// `now`: the caller's clock (ns), for shaping and timeouts.
    #[inline]
    pub fn reap(&mut self, now: u64, mut f: impl FnMut(Event)) -> usize {
        // Inline when nothing is on the rings to look at (a reap that
        // finds nothing, as a caller's last one does; a batch completed at
        // submission, handed out here): no call, no look at the rings.
        if self.poll.is_none() && !self.ring.has_completions() {
            return self.reap_ready(now, true, &mut f);
        }
        self.reap_with(now, true, f)
    }

    /// Hands out the commands completed at submission.
    #[inline]
    fn reap_ready(&mut self, now: u64, shaped: bool, f: &mut impl FnMut(Event)) -> usize {
        let mut n = 0;
        // In place, by index, and cleared after (no drain or pop: their
        // cost per reap and per command showed; every entry's buffers are
        // taken, and clearing drops nothing). Only `submit` adds to the
        // array, which the handling cannot call.
        // Whether any shaping is active, read once for the batch (as if a
        // shaping set meanwhile had been set after this reap).
        let shaped = shaped && Shaping::any_active();
        for i in 0..self.ready.len() {
            n += self.ready_done(i, now, shaped, f);
        }
        self.ready.clear();
        n
    }

    /// As [`IoQueue::reap`] for a queue being emptied: completions skip
    /// lab shaping (nothing more is held or delayed) and ticks only cancel
    /// overdue commands.
    pub fn reap_discarding(&mut self, now: u64, f: impl FnMut(Event)) -> usize {
        self.reap_with(now, false, f)
    }

    #[inline(never)]
    fn reap_with(&mut self, now: u64, shaped: bool, mut f: impl FnMut(Event)) -> usize {
        let mut n = self.reap_ready(now, shaped, &mut f);
        let cqes = &mut self.cqes;
        self.ring.reap(|ud, res, big| cqes.push((ud, res, big)));
        if let Some(p) = &mut self.poll {
            if p.in_flight > 0 || p.ring.unsubmitted() > 0 {
                let _ = p.ring.poll();
            }
            // Only commands go there.
            p.ring.reap(|ud, res, big| cqes.push((ud, res, big)));
        }
        if self.cqes.is_empty() {
            return n;
        }
        // By index: handling one touches `self` but never `cqes` (its
        // allocation is kept: no malloc per batch).
        let mut tick = false;
        for i in 0..self.cqes.len() {
            let (ud, res, big) = self.cqes[i];
            let (kind, id) = split_user_data(ud);
            n += match kind {
                KIND_CMD => self.device_done(id, res, big, now, shaped, &mut f),
                KIND_TIMER => self.timer_fired(id, now, &mut f),
                KIND_TICK => {
                    tick = true;
                    0
                }
                _ => 0,
            };
        }
        self.cqes.clear();
        // The tick after the batch's completions: a command that completed
        // while the worker was not running is not overdue because the
        // tick's entry came first.
        if tick {
            n += self.tick_fired(now, shaped, &mut f);
        }
        n
    }

    /// The device finished command `id`.
    fn device_done(
        &mut self,
        id: usize,
        res: i32,
        big: [u64; 2],
        now: u64,
        shaped: bool,
        f: &mut impl FnMut(Event),
    ) -> usize {
        let Some(slot) = self.slots.get_mut(id) else {
            log::warn!("completion for unknown I/O {id}");
            return 0;
        };
        if std::mem::take(&mut slot.polled) {
            if let Some(p) = &mut self.poll {
                p.in_flight = p.in_flight.saturating_sub(1);
            }
        }
        if let Some(bounce) = slot.bounce.take() {
            if slot.op == IoOp::Read && res > 0 {
                // SAFETY: the completion is reaped: the kernel no longer
                // writes the bounce; the guest buffers are kept mapped by
                // the slot's `GuestBufs`.
                unsafe { bounce.copy_out(res as usize) };
            }
        }
        let outcome = if slot.cancelled && res == -libc::ECANCELED {
            // Cancelled for being past its io-timeout: it timed out.
            IoOutcome::Errno(libc::ETIMEDOUT)
        } else {
            match self.drivers.get(&*self.paths, slot.path) {
                Some(driver) => driver.decode(slot.op, slot.len, res, big),
                None => IoOutcome::Errno(libc::ENODEV),
            }
        };
        self.completed(id, outcome, now, shaped, f)
    }

    /// Command `ready[i]`, completed at submission, is reaped: shaped (in
    /// a slot, where shaping is configured), then delivered. Its buffers
    /// are taken; the entry itself stays until the reap clears the array.
    #[inline]
    fn ready_done(&mut self, i: usize, now: u64, shaped: bool, f: &mut impl FnMut(Event)) -> usize {
        let r = &mut self.ready[i];
        if shaped && self.paths.shaping(r.path).is_active() {
            return self.ready_shaped(i, now, f);
        }
        // Taken where it is handed over: the buffers go straight into the
        // event, not through a copy on the stack.
        f(Event::Done {
            tag: r.tag,
            outcome: r.outcome,
            bufs: r.bufs.take(),
        });
        1
    }

    /// [`IoQueue::ready_done`] on a path with shaping configured: the
    /// command takes a slot to be shaped in.
    #[inline(never)]
    fn ready_shaped(&mut self, i: usize, now: u64, f: &mut impl FnMut(Event)) -> usize {
        let r = &mut self.ready[i];
        let (outcome, path) = (r.outcome, r.path);
        let slot = Slot {
            tag: r.tag,
            path,
            op: r.op,
            len: r.len,
            started: r.started,
            timeout: self.paths.io_timeout(path),
            state: State::Ready(outcome),
            cancelled: false,
            bufs: r.bufs.take(),
            bounce: None,
            ts: None,
            polled: false,
        };
        let id = self.slots.insert(slot);
        self.shape_completion(id, outcome, now, f)
    }

    /// Command `id` is over with `outcome` for the caller.
    #[inline(always)]
    fn deliver(&mut self, id: usize, outcome: IoOutcome, f: &mut impl FnMut(Event)) -> usize {
        let slot = self.slots.remove(id);
        f(Event::Done {
            tag: slot.tag,
            outcome,
            bufs: slot.bufs,
        });
        1
    }
}

/// Path `path`'s shaping, unless no shaping in the process is active
/// ([`Shaping::any_active`]: one load, where looking the path's up in the
/// table took a dozen instructions on every submission and completion).
#[inline]
fn shaping_of<P: PathTable>(paths: &P, path: usize) -> Option<&Shaping> {
    Shaping::any_active().then(|| paths.shaping(path))
}

/// Whether path `path`'s shaping is active (see [`shaping_of`]).
#[inline]
pub(super) fn shaping_active<P: PathTable>(paths: &P, path: usize) -> bool {
    shaping_of(paths, path).is_some_and(Shaping::is_active)
}

/// Sets up the polled ring on first use; `false` if it cannot be (logged
/// once per queue, and never tried again).
fn ensure_poll(
    poll: &mut Option<PollSide>,
    refused: &mut bool,
    main: &Buffers,
    opts: RegOptions,
    (sq, cq): (u32, u32),
) -> bool {
    if poll.is_some() {
        return true;
    }
    if *refused {
        return false;
    }
    match Ring::polled(sq, cq) {
        Ok(ring) => {
            let mut bufs = Buffers::new();
            bufs.enable(opts.fixed_buffers);
            if let Some((keep, regions)) = main.named() {
                bufs.set_memory(keep, &regions);
            }
            let mut files = Files::new();
            files.enable(opts.registered_files);
            log::info!("io_uring: polled ring (IOPOLL) set up for reads and writes on poll queues");
            *poll = Some(PollSide {
                ring,
                bufs,
                files,
                in_flight: 0,
            });
            true
        }
        Err(e) => {
            log::warn!(
                "io_uring: no polled ring (IORING_SETUP_IOPOLL: {e}): completions by interrupt"
            );
            *refused = true;
            false
        }
    }
}
