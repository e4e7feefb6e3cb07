//! A worker's io_uring: SQE128/CQE32, completions signalled on an eventfd so
//! the ring joins the worker's epoll loop.
//!
//! Nothing here spins on the kernel: when the completion queue overflows the
//! kernel may refuse new submissions (EBUSY) until completions are reaped, so
//! an entry that finds the submission queue full then waits in a deferred list
//! and goes in with a later submit, after the caller reaped.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

pub struct Ring {
    ring: IoUring<squeue::Entry128, cqueue::Entry32>,
    eventfd: EventFd,
    /// Entries that found the submission queue full while the kernel took
    /// none (completion queue overflow): queued before anything newer.
    deferred: VecDeque<squeue::Entry128>,
    /// Entries queued and not yet reaped: their completions may still
    /// signal the eventfd. Every entry queued completes once (no multishot
    /// or skipped completions here): with none outstanding there is no
    /// completion to look for.
    outstanding: u64,
    /// The eventfd may have been signalled since it was last read: a
    /// completion was reaped, or `wake` wrote it.
    maybe_signalled: std::cell::Cell<bool>,
}

/// The largest rings the kernel accepts (IORING_MAX_ENTRIES, _CQ_ENTRIES).
pub const MAX_SQ_ENTRIES: u32 = 32768;
pub const MAX_CQ_ENTRIES: u32 = 2 * MAX_SQ_ENTRIES;

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("entries", &self.ring.params().sq_entries())
            .finish()
    }
}

impl Ring {
    /// A ring with room for `entries` submissions (rounded up to a power of
    /// two by the kernel) and twice as many completions.
    pub fn new(entries: u32) -> io::Result<Self> {
        Self::with_sizes(entries, entries.saturating_mul(2))
    }

    /// A ring with `sq` submission and `cq` completion entries (the kernel
    /// rounds both up to powers of two and clamps them to its maxima).
    pub fn with_sizes(sq: u32, cq: u32) -> io::Result<Self> {
        let sq = sq.clamp(1, MAX_SQ_ENTRIES);
        let ring = IoUring::<squeue::Entry128, cqueue::Entry32>::builder()
            .setup_cqsize(cq.clamp(sq, MAX_CQ_ENTRIES))
            .setup_clamp()
            .build(sq)?;
        let eventfd = EventFd::new(EFD_NONBLOCK)?;
        // Not register_eventfd_async: that one stays silent for completions
        // delivered by task work (O_DIRECT), which would then be lost.
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        Ok(Self {
            ring,
            eventfd,
            deferred: VecDeque::new(),
            outstanding: 0,
            maybe_signalled: std::cell::Cell::new(false),
        })
    }

    /// A polled ring (IORING_SETUP_IOPOLL) of `sq` / `cq` entries: its
    /// completions are found only by [`Ring::poll`] (no eventfd), and it
    /// takes only I/O to devices that poll (NVMe passthrough on poll
    /// queues), no timers or cancellations.
    pub fn polled(sq: u32, cq: u32) -> io::Result<Self> {
        let sq = sq.clamp(1, MAX_SQ_ENTRIES);
        let ring = IoUring::<squeue::Entry128, cqueue::Entry32>::builder()
            .setup_cqsize(cq.clamp(sq, MAX_CQ_ENTRIES))
            .setup_clamp()
            .setup_iopoll()
            .build(sq)?;
        Ok(Self {
            ring,
            eventfd: EventFd::new(EFD_NONBLOCK)?,
            deferred: VecDeque::new(),
            outstanding: 0,
            maybe_signalled: std::cell::Cell::new(false),
        })
    }

    /// A polled ring: submits what is queued and polls the device once
    /// for completions (an enter with GETEVENTS, waiting for none).
    pub fn poll(&mut self) -> io::Result<()> {
        self.refill();
        match self.ring.submit_and_wait(0) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) || busy(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The fd that becomes readable when completions arrive.
    pub fn eventfd(&self) -> RawFd {
        self.eventfd.as_raw_fd()
    }

    /// Makes the eventfd readable, so the worker's loop comes back (to try
    /// a refused submission again).
    /// The eventfd, duplicated: writing it wakes this ring's waiter from
    /// another thread (and reads as completions to look at).
    pub fn eventfd_clone(&self) -> std::io::Result<EventFd> {
        self.eventfd.try_clone()
    }

    pub fn wake(&self) {
        self.maybe_signalled.set(true);
        let _ = self.eventfd.write(1);
    }

    /// Consumes the eventfd's counter (call before reaping so no wakeup is lost).
    pub fn clear_event(&self) {
        self.maybe_signalled.set(false);
        let _ = self.eventfd.read();
    }

    /// As [`Ring::clear_event`], but without the system call when nothing
    /// can have signalled the eventfd since it was last read: no entry is
    /// outstanding, none was reaped and no `wake` came (a worker whose
    /// requests all complete inline). A signal this misses (one racing the
    /// last read) leaves the eventfd readable: the caller's loop then wakes
    /// for it once and clears it with `clear_event`.
    #[inline]
    pub fn clear_event_if_signalled(&self) {
        if self.outstanding > 0 || self.maybe_signalled.get() {
            self.clear_event();
        }
    }

    /// Queues one entry; submits first when the submission queue is full.
    /// If the kernel takes nothing then (its completion queue overflows
    /// until the caller reaps), the entry is deferred to a later submit.
    ///
    /// # Safety
    /// Every buffer and iovec array the entry points to must stay valid (and
    /// not be otherwise accessed in a conflicting way) until its completion
    /// has been reaped.
    #[inline]
    pub unsafe fn push(&mut self, entry: &squeue::Entry128) -> io::Result<()> {
        self.outstanding += 1;
        if self.deferred.is_empty() && self.try_push(entry) {
            return Ok(());
        }
        self.push_when_full(entry);
        Ok(())
    }

    /// [`Ring::push`] when the submission queue is full (or entries wait
    /// deferred), out of line; `push`'s caller vouched for the entry.
    #[inline(never)]
    fn push_when_full(&mut self, entry: &squeue::Entry128) {
        // An error here leaves the queued entries where they are; this one
        // waits with them.
        let _ = self.submit();
        if !(self.deferred.is_empty() && self.try_push(entry)) {
            self.deferred.push_back(entry.clone());
        }
    }

    #[inline]
    fn try_push(&mut self, entry: &squeue::Entry128) -> bool {
        // SAFETY: `push`'s caller guarantees the entry's buffers outlive the I/O.
        unsafe { self.ring.submission().push(entry) }.is_ok()
    }

    /// Moves deferred entries into the submission queue while it has room.
    fn refill(&mut self) {
        while let Some(e) = self.deferred.front() {
            // SAFETY: deferred by `push`, whose caller vouched for its buffers.
            if unsafe { self.ring.submission().push(e) }.is_err() {
                break;
            }
            self.deferred.pop_front();
        }
    }

    /// Queues a NOP: completes with `res == 0` on the next submit (an
    /// injected fault travels through the ring like real I/O).
    pub fn push_nop(&mut self, user_data: u64) -> io::Result<()> {
        let e: squeue::Entry128 = opcode::Nop::new().build().user_data(user_data).into();
        // SAFETY: a NOP points to no memory.
        unsafe { self.push(&e) }
    }

    /// Queues a cancellation of the entry submitted with `target` (an
    /// overdue command): that one completes with `-ECANCELED` if the kernel
    /// can still stop it, this one with 0, `-ENOENT` or `-EALREADY`.
    pub fn push_cancel(&mut self, target: u64, user_data: u64) -> io::Result<()> {
        let e: squeue::Entry128 = opcode::AsyncCancel::new(target)
            .build()
            .user_data(user_data)
            .into();
        // SAFETY: a cancellation points to no memory.
        unsafe { self.push(&e) }
    }

    /// Queues a timer that completes (with `-ETIME`) after `ts`.
    ///
    /// # Safety
    /// `ts` must stay valid until the entry has been submitted.
    pub unsafe fn push_timeout(
        &mut self,
        ts: *const types::Timespec,
        user_data: u64,
    ) -> io::Result<()> {
        let e: squeue::Entry128 = opcode::Timeout::new(ts).build().user_data(user_data).into();
        // SAFETY: the caller keeps the timespec alive until submission.
        unsafe { self.push(&e) }
    }

    /// Hands the queued entries to the kernel (one system call per
    /// submission queue's worth). EBUSY (completion queue full) leaves them
    /// queued: reap, then submit again. Other errors leave them queued too.
    #[inline]
    pub fn submit(&mut self) -> io::Result<usize> {
        // Inline: nothing queued (a batch that completed inline), no call;
        // with nothing outstanding, nothing can be queued.
        if self.outstanding == 0 || (self.deferred.is_empty() && self.ring.submission().is_empty())
        {
            return Ok(0);
        }
        self.submit_queued()
    }

    #[inline(never)]
    fn submit_queued(&mut self) -> io::Result<usize> {
        let mut total = 0;
        loop {
            self.refill();
            if self.ring.submission().is_empty() {
                return Ok(total);
            }
            match self.ring.submit() {
                Ok(0) => return Ok(total),
                Ok(n) => {
                    total += n;
                    if self.deferred.is_empty() {
                        return Ok(total);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if busy(&e) => return Ok(total),
                Err(e) => return Err(e),
            }
        }
    }

    /// Number of entries queued but not yet submitted.
    #[inline]
    pub fn unsubmitted(&mut self) -> usize {
        // An entry queued is outstanding until its completion is reaped.
        if self.outstanding == 0 {
            return 0;
        }
        self.ring.submission().len() + self.deferred.len()
    }

    /// Calls `f(user_data, res, big_cqe)` for every completion available now.
    /// Completions the kernel kept aside when the completion queue was full
    /// are flushed into it once there is room, so this reaps those too.
    #[inline]
    pub fn reap(&mut self, f: impl FnMut(u64, i32, [u64; 2])) -> usize {
        // Inline: nothing to reap (all completed inline), no call; with
        // nothing outstanding, not even a look at the completion queue.
        if !self.has_completions() {
            return 0;
        }
        self.reap_some(f)
    }

    #[inline(never)]
    fn reap_some(&mut self, mut f: impl FnMut(u64, i32, [u64; 2])) -> usize {
        let mut n = 0;
        loop {
            let mut cq = self.ring.completion();
            cq.sync();
            if cq.is_empty() {
                drop(cq);
                if !self.overflowed() {
                    break;
                }
                // The queue is empty now: an enter with GETEVENTS (which
                // the crate adds when the overflow flag is up) moves the
                // kept completions in. Pending entries go in with it.
                self.refill();
                match self.ring.submit() {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(_) => break,
                }
                if self.ring.completion().is_empty() {
                    break;
                }
                continue;
            }
            for cqe in &mut cq {
                f(cqe.user_data(), cqe.result(), *cqe.big_cqe());
                n += 1;
            }
        }
        if n > 0 {
            debug_assert!(
                n as u64 <= self.outstanding,
                "more completions than entries"
            );
            self.outstanding = self.outstanding.saturating_sub(n as u64);
            self.maybe_signalled.set(true);
        }
        n
    }

    /// The kernel holds completions that did not fit the completion queue.
    #[inline]
    fn overflowed(&mut self) -> bool {
        self.ring.submission().cq_overflow()
    }

    /// Whether completions are waiting to be reaped (no system call).
    #[inline]
    pub fn has_completions(&mut self) -> bool {
        // Nothing outstanding (a batch that completed inline): one load,
        // where the queues' indexes took a dozen and a store.
        self.outstanding > 0 && (!self.ring.completion().is_empty() || self.overflowed())
    }

    /// Registers an empty table of `n` fixed buffers (filled by
    /// [`Ring::update_buffer`]).
    pub fn register_buffer_table(&self, n: u32) -> io::Result<()> {
        self.ring.submitter().register_buffers_sparse(n)
    }

    /// Puts `iov` into slot `slot` of the fixed-buffer table (an empty
    /// iovec clears the slot). The pages are pinned until the slot is
    /// replaced and no command in flight uses the old buffer any more: the
    /// kernel releases an old buffer only after its last user completes,
    /// so this never waits for I/O.
    ///
    /// # Safety
    /// `iov` must describe memory that stays mapped while commands use
    /// this slot (pinning keeps the pages, not the mapping's contents
    /// meaningful to the caller).
    pub unsafe fn update_buffer(&self, slot: u32, iov: libc::iovec) -> io::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.ring
                .submitter()
                .register_buffers_update(slot, std::slice::from_ref(&iov), None)
        }
    }

    /// Puts `iov[i]` into slot `first + i` of the fixed-buffer table, in
    /// one call (see [`Ring::update_buffer`]).
    ///
    /// # Safety
    /// As [`Ring::update_buffer`], for every iovec.
    pub unsafe fn update_buffers(&self, first: u32, iov: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.ring
                .submitter()
                .register_buffers_update(first, iov, None)
        }
    }

    /// Registers an empty table of `n` files (filled by [`Ring::update_file`]).
    pub fn register_file_table(&self, n: u32) -> io::Result<()> {
        self.ring.submitter().register_files_sparse(n)
    }

    /// Puts `fd` into slot `slot` of the file table (-1 clears it). The
    /// ring keeps its own reference to the file until the slot changes.
    pub fn update_file(&self, slot: u32, fd: RawFd) -> io::Result<()> {
        self.ring
            .submitter()
            .register_files_update(slot, &[fd])
            .map(drop)
    }

    /// Blocks until at least one completion is available.
    pub fn wait(&mut self) -> io::Result<()> {
        self.refill();
        match self.ring.submit_and_wait(1) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(()),
            // Completions are waiting (in overflow): reaping flushes them.
            Err(e) if busy(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The kernel takes nothing until completions are reaped: its completion
/// queue is full and overflowing (EBUSY). The caller is reaping anyway.
fn busy(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EBUSY)
}

#[cfg(test)]
mod tests;
