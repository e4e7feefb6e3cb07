//! A worker's io_uring: SQE128/CQE32, completions signalled on an eventfd so
//! the ring joins the worker's epoll loop.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

pub struct Ring {
    ring: IoUring<squeue::Entry128, cqueue::Entry32>,
    eventfd: EventFd,
    unsubmitted: usize,
}

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
        let ring = IoUring::<squeue::Entry128, cqueue::Entry32>::builder()
            .setup_cqsize(entries.saturating_mul(2))
            .build(entries)?;
        let eventfd = EventFd::new(EFD_NONBLOCK)?;
        // Not register_eventfd_async: that one stays silent for completions
        // delivered by task work (O_DIRECT), which would then be lost.
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        Ok(Self {
            ring,
            eventfd,
            unsubmitted: 0,
        })
    }

    /// The fd that becomes readable when completions arrive.
    pub fn eventfd(&self) -> RawFd {
        self.eventfd.as_raw_fd()
    }

    /// Consumes the eventfd's counter (call before reaping so no wakeup is lost).
    pub fn clear_event(&self) {
        let _ = self.eventfd.read();
    }

    /// Queues one entry; submits first when the submission queue is full.
    ///
    /// # Safety
    /// Every buffer and iovec array the entry points to must stay valid (and
    /// not be otherwise accessed in a conflicting way) until its completion
    /// has been reaped.
    pub unsafe fn push(&mut self, entry: &squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: the caller guarantees the entry's buffers outlive the I/O.
            let pushed = unsafe { self.ring.submission().push(entry) };
            if pushed.is_ok() {
                self.unsubmitted += 1;
                return Ok(());
            }
            self.submit()?;
        }
    }

    /// Queues a NOP: completes with `res == 0` on the next submit (an
    /// injected fault travels through the ring like real I/O).
    pub fn push_nop(&mut self, user_data: u64) -> io::Result<()> {
        let e: squeue::Entry128 = opcode::Nop::new().build().user_data(user_data).into();
        // SAFETY: a NOP points to no memory.
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

    /// Hands every queued entry to the kernel with one system call.
    pub fn submit(&mut self) -> io::Result<usize> {
        if self.unsubmitted == 0 {
            return Ok(0);
        }
        loop {
            match self.ring.submit() {
                Ok(n) => {
                    self.unsubmitted = self.unsubmitted.saturating_sub(n);
                    return Ok(n);
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // The completion queue is full: the caller must reap first.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(0),
                Err(e) => return Err(e),
            }
        }
    }

    /// Number of entries queued but not yet submitted.
    pub fn unsubmitted(&self) -> usize {
        self.unsubmitted
    }

    /// Calls `f(user_data, res, big_cqe)` for every completion available now.
    pub fn reap(&mut self, mut f: impl FnMut(u64, i32, [u64; 2])) -> usize {
        let mut n = 0;
        let mut cq = self.ring.completion();
        loop {
            cq.sync();
            if cq.is_empty() {
                break;
            }
            for cqe in &mut cq {
                f(cqe.user_data(), cqe.result(), *cqe.big_cqe());
                n += 1;
            }
        }
        n
    }

    /// Whether completions are waiting to be reaped (no system call).
    pub fn has_completions(&mut self) -> bool {
        !self.ring.completion().is_empty()
    }

    /// Blocks until at least one completion is available.
    pub fn wait(&mut self) -> io::Result<()> {
        match self.ring.submit_and_wait(1) {
            Ok(n) => {
                self.unsubmitted = self.unsubmitted.saturating_sub(n);
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
