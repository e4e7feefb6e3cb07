//! Probes of failed paths on a ring of their own: a one-block read at
//! offset 0 through the path's own driver, bounded by a deadline. The
//! caller (the daemon's path checker) decides which path to probe and what
//! a result means; this type owns the buffers and the ring, so a probe's
//! memory lives until the kernel is done with it, even when the probe
//! outlives its deadline.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types};
use mpath::IoOutcome;

use crate::driver::{IoOp, PathDriver};
use crate::ring::Ring;

/// `user_data` of the wake-up timer and of cancellations (probes use their
/// slot index).
const UD_TICK: u64 = u64::MAX;
const UD_CANCEL: u64 = u64::MAX - 1;

/// What happened to a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeEvent {
    /// The probe in `slot` completed before its deadline; `ok`: the read
    /// succeeded.
    Done { slot: usize, ok: bool },
    /// The probe in `slot` passed its deadline: count it as failed. Its
    /// slot stays busy until the kernel gives the read back ([`Released`]).
    ///
    /// [`Released`]: ProbeEvent::Released
    TimedOut { slot: usize },
    /// A probe that had timed out finally completed: the slot is free.
    Released { slot: usize },
}

/// A block-aligned buffer that probe reads land in (contents ignored).
struct ProbeBuffer {
    ptr: *mut u8,
    layout: std::alloc::Layout,
    /// Boxed: its address goes to the kernel with the read.
    iov: Box<libc::iovec>,
}

// SAFETY: the buffer is owned by one prober and only the kernel writes it.
unsafe impl Send for ProbeBuffer {}

impl ProbeBuffer {
    fn new(len: u32) -> Self {
        let size = (len as usize).max(4096);
        let layout = std::alloc::Layout::from_size_align(size, 4096).expect("probe buffer layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Self {
            ptr,
            layout,
            iov: Box::new(libc::iovec {
                iov_base: ptr.cast(),
                iov_len: len as usize,
            }),
        }
    }
}

impl Drop for ProbeBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; a probe's buffer is
        // dropped only once its read was reaped.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// One probe on the ring.
struct Probe {
    /// The driver that prepared the read decodes it (a path re-opened
    /// meanwhile has another one), and keeps its device open until then.
    driver: Arc<dyn PathDriver>,
    buf: ProbeBuffer,
    len: u64,
    deadline: Instant,
    timed_out: bool,
}

/// Probes on their own ring; at most one per slot at a time.
pub struct Prober {
    ring: Ring,
    probes: Vec<Option<Probe>>,
    /// How long [`Prober::wait`] waits at most.
    tick: Box<types::Timespec>,
    tick_armed: bool,
    reaped: Vec<(u64, i32, [u64; 2])>,
}

impl Prober {
    /// A prober for `slots` paths that wakes at least every `period`.
    pub fn new(slots: usize, period: Duration) -> io::Result<Self> {
        let entries = u32::try_from(slots.saturating_mul(2) + 2)
            .unwrap_or(u32::MAX)
            .max(8);
        Ok(Self {
            ring: Ring::new(entries)?,
            probes: (0..slots).map(|_| None).collect(),
            tick: Box::new(
                types::Timespec::new()
                    .sec(period.as_secs())
                    .nsec(period.subsec_nanos()),
            ),
            tick_armed: false,
            reaped: Vec::new(),
        })
    }

    /// Whether a probe of `slot` is on the ring (possibly past its deadline).
    pub fn busy(&self, slot: usize) -> bool {
        self.probes.get(slot).is_some_and(Option::is_some)
    }

    /// Sends a read of `len` bytes at offset 0 through `driver` as the probe
    /// of `slot`, to be answered within `timeout`.
    pub fn start(
        &mut self,
        slot: usize,
        driver: Arc<dyn PathDriver>,
        len: u32,
        timeout: Duration,
    ) -> io::Result<()> {
        if slot >= self.probes.len() || self.busy(slot) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("probe slot {slot} is busy or out of range"),
            ));
        }
        let probe = self.probes[slot].insert(Probe {
            driver,
            buf: ProbeBuffer::new(len),
            len: u64::from(len),
            deadline: Instant::now() + timeout,
            timed_out: false,
        });
        // SAFETY: the iovec and the buffer it describes stay in the slot,
        // which is emptied only once this read's completion is reaped.
        let entry = unsafe {
            probe
                .driver
                .prepare(IoOp::Read, 0, probe.len, &*probe.buf.iov, 1, slot as u64)
        };
        // SAFETY: as above.
        if let Err(e) = unsafe { self.ring.push(&entry) } {
            self.probes[slot] = None;
            return Err(e);
        }
        Ok(())
    }

    /// Submits what was started and waits until a probe completes, a
    /// deadline passes or the period elapses; appends what happened to
    /// `events`.
    pub fn wait(&mut self, events: &mut Vec<ProbeEvent>) -> io::Result<()> {
        if !self.tick_armed {
            let e: squeue::Entry128 = opcode::Timeout::new(&*self.tick)
                .build()
                .user_data(UD_TICK)
                .into();
            // SAFETY: the timespec is boxed in the prober and outlives the
            // submission.
            unsafe { self.ring.push(&e)? };
            self.tick_armed = true;
        }
        self.ring.wait()?;
        self.ring.clear_event();
        let mut reaped = std::mem::take(&mut self.reaped);
        self.ring.reap(|ud, res, big| reaped.push((ud, res, big)));
        for &(ud, res, big) in &reaped {
            match ud {
                UD_TICK => self.tick_armed = false,
                UD_CANCEL => {}
                slot => self.completed(slot as usize, res, big, events),
            }
        }
        reaped.clear();
        self.reaped = reaped;
        self.expire(events)
    }

    fn completed(&mut self, slot: usize, res: i32, big: [u64; 2], events: &mut Vec<ProbeEvent>) {
        let Some(probe) = self.probes.get_mut(slot).and_then(Option::take) else {
            return;
        };
        events.push(if probe.timed_out {
            ProbeEvent::Released { slot }
        } else {
            let ok = probe.driver.decode(IoOp::Read, probe.len, res, big) == IoOutcome::Ok;
            ProbeEvent::Done { slot, ok }
        });
    }

    /// Probes past their deadline count as failed; the kernel is asked to
    /// cancel them (their memory stays until it answers).
    fn expire(&mut self, events: &mut Vec<ProbeEvent>) -> io::Result<()> {
        let now = Instant::now();
        for slot in 0..self.probes.len() {
            let Some(probe) = self.probes[slot].as_mut() else {
                continue;
            };
            if probe.timed_out || now < probe.deadline {
                continue;
            }
            probe.timed_out = true;
            events.push(ProbeEvent::TimedOut { slot });
            let cancel: squeue::Entry128 = opcode::AsyncCancel::new(slot as u64)
                .build()
                .user_data(UD_CANCEL)
                .into();
            // SAFETY: a cancellation points to no memory.
            unsafe { self.ring.push(&cancel)? };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{open_path, PathOptions};

    fn wait_for(p: &mut Prober, want: impl Fn(&ProbeEvent) -> bool) -> ProbeEvent {
        let start = Instant::now();
        let mut events = Vec::new();
        loop {
            p.wait(&mut events).unwrap();
            if let Some(e) = events.iter().find(|e| want(e)) {
                return *e;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "{events:?}");
        }
    }

    #[test]
    fn a_probe_of_a_working_path_succeeds() {
        let d = open_path("null:1M", &PathOptions::default()).unwrap();
        let mut p = Prober::new(4, Duration::from_millis(20)).unwrap();
        p.start(2, d.clone(), 512, Duration::from_secs(5)).unwrap();
        assert!(p.busy(2));
        assert!(
            p.start(2, d, 512, Duration::from_secs(5)).is_err(),
            "one at a time"
        );
        let e = wait_for(&mut p, |e| matches!(e, ProbeEvent::Done { .. }));
        assert_eq!(e, ProbeEvent::Done { slot: 2, ok: true });
        assert!(!p.busy(2));
    }

    #[test]
    fn waiting_without_probes_returns_after_the_period() {
        let mut p = Prober::new(1, Duration::from_millis(30)).unwrap();
        let start = Instant::now();
        let mut events = Vec::new();
        p.wait(&mut events).unwrap();
        assert!(events.is_empty());
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_probe_that_never_completes_times_out_and_keeps_its_slot() {
        // A read from an empty pipe never completes until it is cancelled.
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let d = Arc::new(PipeDriver(fds[0]));
        let mut p = Prober::new(1, Duration::from_millis(20)).unwrap();
        p.start(0, d, 512, Duration::from_millis(100)).unwrap();
        let start = Instant::now();
        let e = wait_for(&mut p, |_| true);
        assert_eq!(e, ProbeEvent::TimedOut { slot: 0 });
        assert!(start.elapsed() >= Duration::from_millis(100));
        // The cancellation gives the read back.
        let e = wait_for(&mut p, |e| matches!(e, ProbeEvent::Released { .. }));
        assert_eq!(e, ProbeEvent::Released { slot: 0 });
        assert!(!p.busy(0));
        // SAFETY: both descriptors are ours and no longer used.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    /// Reads from a pipe that nobody writes.
    #[derive(Debug)]
    struct PipeDriver(i32);

    impl PathDriver for PipeDriver {
        fn kind(&self) -> &'static str {
            "file"
        }
        fn info(&self) -> &crate::DeviceInfo {
            unimplemented!()
        }
        unsafe fn prepare(
            &self,
            _op: IoOp,
            _offset: u64,
            _len: u64,
            iov: *const libc::iovec,
            iovcnt: usize,
            user_data: u64,
        ) -> squeue::Entry128 {
            opcode::Readv::new(types::Fd(self.0), iov, iovcnt as u32)
                .build()
                .user_data(user_data)
                .into()
        }
        fn decode(&self, _op: IoOp, _len: u64, res: i32, _big: [u64; 2]) -> IoOutcome {
            if res >= 0 {
                IoOutcome::Ok
            } else {
                IoOutcome::Errno(-res)
            }
        }
    }
}
