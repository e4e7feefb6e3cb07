//! A queue thread serves one or more queues (`--queue-threads`): it waits on
//! each queue's kick fd, its worker's io_uring completion eventfd and a wake
//! event (the queue was started: serve what is already available or to be
//! resubmitted), and on an exit event.
//!
//! A thread with several queues gives each worker a second epoll set with
//! the other queues' fds (`siblings`): a worker spinning for its own guest
//! stops as soon as another queue has work, so one queue's spin never
//! delays the others.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use log::warn;
use vhost_user_backend::{VringRwLock, VringT};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::device::BlkDevice;
use crate::queue_status::QueueCounters;
use crate::worker::spin::{default_spin, Spin};

// Event ids: a queue's slot in the thread times `KINDS`, plus its kind.
const KICK: u64 = 0;
const COMPLETION: u64 = 1;
const WAKE: u64 = 2;
const KINDS: u64 = 3;
const EXIT: u64 = u64::MAX;

/// One queue a thread serves.
struct Slot {
    queue: usize,
    wake: Arc<EventFd>,
    /// The kick fd registered with epoll, if any.
    kick: Option<RawFd>,
    /// The other queues' fds, for this queue's worker to look at while it
    /// spins (only when the thread serves several queues).
    siblings: Option<Arc<Epoll>>,
}

pub struct QueueThread {
    epoll: Arc<Epoll>,
    slots: Vec<Slot>,
    exit: EventFd,
    thread: Option<JoinHandle<()>>,
}

/// The kick fd of a queue: edge-triggered, so every write to the eventfd
/// wakes the thread once without reading it (one system call less per
/// wake-up). The counter it leaves is never read and cannot fill (2^64 - 2
/// kicks).
fn kick_event(id: u64) -> EpollEvent {
    EpollEvent::new(EventSet::IN | EventSet::EDGE_TRIGGERED, id)
}

fn id(slot: usize, kind: u64) -> u64 {
    slot as u64 * KINDS + kind
}

impl QueueThread {
    /// A thread serving `queues` (queue index and its vring), named after
    /// its first queue.
    pub fn spawn(dev: BlkDevice, queues: Vec<(usize, VringRwLock)>) -> io::Result<Self> {
        let epoll = Arc::new(Epoll::new()?);
        let exit = EventFd::new(EFD_NONBLOCK)?;
        let level = |ep: &Epoll, fd: RawFd, id: u64| {
            ep.ctl(ControlOperation::Add, fd, EpollEvent::new(EventSet::IN, id))
        };
        let mut slots = Vec::with_capacity(queues.len());
        for (s, (queue, _)) in queues.iter().enumerate() {
            let wake = Arc::new(EventFd::new(EFD_NONBLOCK)?);
            level(&epoll, dev.ring_eventfd(*queue), id(s, COMPLETION))?;
            level(&epoll, wake.as_raw_fd(), id(s, WAKE))?;
            slots.push(Slot {
                queue: *queue,
                wake,
                kick: None,
                siblings: None,
            });
        }
        level(&epoll, exit.as_raw_fd(), EXIT)?;
        if slots.len() > 1 {
            for s in 0..slots.len() {
                let ep = Arc::new(Epoll::new()?);
                for (o, other) in slots.iter().enumerate().filter(|(o, _)| *o != s) {
                    level(&ep, dev.ring_eventfd(other.queue), id(o, COMPLETION))?;
                    level(&ep, other.wake.as_raw_fd(), id(o, WAKE))?;
                }
                dev.set_siblings(slots[s].queue, Some(ep.clone()));
                slots[s].siblings = Some(ep);
            }
        }
        let name = format!("queue{}", queues.first().map_or(0, |q| q.0));
        let ep = epoll.clone();
        let wakes: Vec<Arc<EventFd>> = slots.iter().map(|s| s.wake.clone()).collect();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(&ep, &wakes, &dev, &queues))?;
        Ok(Self {
            epoll,
            slots,
            exit,
            thread: Some(thread),
        })
    }

    fn slot_of(&self, queue: usize) -> Option<usize> {
        self.slots.iter().position(|s| s.queue == queue)
    }

    /// Listens to `queue`'s kicks on `fd`, or stops listening (`None`).
    pub fn set_kick(&mut self, queue: usize, fd: Option<RawFd>) {
        let Some(s) = self.slot_of(queue) else {
            return;
        };
        if self.slots[s].kick == fd {
            return;
        }
        let sets: Vec<Arc<Epoll>> = std::iter::once(self.epoll.clone())
            .chain(
                self.slots
                    .iter()
                    .enumerate()
                    .filter(|(o, _)| *o != s)
                    .filter_map(|(_, o)| o.siblings.clone()),
            )
            .collect();
        if let Some(old) = self.slots[s].kick.take() {
            for ep in &sets {
                // It may already be closed (and so gone from the set).
                let _ = ep.ctl(ControlOperation::Delete, old, kick_event(id(s, KICK)));
            }
        }
        if let Some(new) = fd {
            // Each epoll set has its own ready list: an edge the spinning
            // sibling saw is still reported to the thread's own set.
            let added = sets
                .iter()
                .try_for_each(|ep| ep.ctl(ControlOperation::Add, new, kick_event(id(s, KICK))));
            match added {
                Ok(()) => self.slots[s].kick = Some(new),
                Err(e) => {
                    // Rate-limited: SET_VRING_KICK refuses an fd epoll cannot
                    // watch (`check_kick_fd`), but what is left (a full
                    // max_user_watches) may repeat with each message.
                    crate::worker::vring_warn(format_args!(
                        "listening to queue {queue}'s kick fd: {e}"
                    ));
                    for ep in &sets {
                        let _ = ep.ctl(ControlOperation::Delete, new, kick_event(id(s, KICK)));
                    }
                }
            }
        }
    }

    /// Has the thread look at `queue` as if the guest had kicked.
    pub fn wake(&self, queue: usize) {
        if let Some(s) = self.slot_of(queue) {
            let _ = self.slots[s].wake.write(1);
        }
    }

    /// Ends the thread and waits for it.
    pub fn stop(&mut self) {
        let _ = self.exit.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for QueueThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Refuses a kick fd that epoll cannot watch (a regular file, /dev/null):
/// the spec's kick fd is an eventfd, and a ring on such an fd would never
/// hear a kick. Tried on a set of its own, before the ring takes the fd.
pub fn check_kick_fd(fd: &impl AsRawFd) -> io::Result<()> {
    let probe = Epoll::new()?;
    probe.ctl(ControlOperation::Add, fd.as_raw_fd(), kick_event(0))
}

/// Looks at the thread's fds without blocking for up to the spin's window:
/// two busy queues on one thread leave it idle for moments too short to be
/// worth a sleep and the guest's kick that ends it (2 queues at 4k QD32,
/// null path: 1.11-1.14x the IOPS of sleeping at once, docs/history/benchmarks-issue-10.md).
/// The window adapts as a worker's own spin does (`Spin`).
/// The time it looked is counted as spin on `counters` (`get_queues`).
fn poll(
    epoll: &Epoll,
    events: &mut [EpollEvent],
    spin: &mut Spin,
    counters: Option<&QueueCounters>,
) -> Option<usize> {
    if spin.window.is_zero() {
        return None;
    }
    let start = Instant::now();
    let found = loop {
        if let Ok(n @ 1..) = epoll.wait(0, events) {
            break Some(n);
        }
        if start.elapsed() >= spin.window || crate::shutdown::requested() {
            spin.waited_since(start);
            break None;
        }
    };
    if let Some(c) = counters {
        c.spun_since(start);
    }
    found
}

/// Blocks until a queue of the thread has work; tells the spin how long
/// that took.
fn sleep(epoll: &Epoll, events: &mut [EpollEvent], spin: Option<&mut Spin>) -> io::Result<usize> {
    let Some(spin) = spin else {
        return epoll.wait(-1, events);
    };
    spin.armed();
    let n = epoll.wait(-1, events);
    spin.woken();
    n
}

fn run(epoll: &Epoll, wakes: &[Arc<EventFd>], dev: &BlkDevice, queues: &[(usize, VringRwLock)]) {
    let mut events = vec![EpollEvent::default(); 8 * queues.len().max(1)];
    // A thread of several queues polls them all before it sleeps (each
    // worker's own spin ends as soon as another queue has work).
    let mut spin = (queues.len() > 1).then(|| Spin::new(default_spin()));
    // A thread's poll counts on its first queue (one writer: this thread).
    let first = queues.first().and_then(|(q, _)| dev.counters(*q));
    loop {
        let polled = spin
            .as_mut()
            .and_then(|s| poll(epoll, &mut events, s, first));
        let n = match polled.map_or_else(|| sleep(epoll, &mut events, spin.as_mut()), Ok) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                warn!("queue thread: epoll: {e}; its queues stop");
                return;
            }
        };
        for ev in &events[..n] {
            if ev.data() == EXIT {
                return;
            }
            let evset = EventSet::from_bits_truncate(ev.events);
            let slot = (ev.data() / KINDS) as usize;
            let Some((queue, vring)) = queues.get(slot) else {
                continue;
            };
            let vrings = std::slice::from_ref(vring);
            match ev.data() % KINDS {
                KICK => {
                    dev.count_kick(*queue);
                    // Edge-triggered: nothing to consume. A disabled ring is
                    // not served.
                    if vring.get_ref().is_enabled() {
                        let _ = dev.handle_event(0, evset, vrings, *queue);
                    }
                }
                WAKE => {
                    let _ = wakes[slot].read();
                    if vring.get_ref().is_enabled() {
                        let _ = dev.handle_event(0, evset, vrings, *queue);
                    }
                }
                _ => {
                    let id = dev.completion_event_id();
                    let _ = dev.handle_event(id as u16, evset, vrings, *queue);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_thread_poll_finds_pending_work_and_gives_up_after_its_window() {
        let epoll = Epoll::new().expect("epoll");
        let fd = EventFd::new(EFD_NONBLOCK).expect("eventfd");
        epoll
            .ctl(
                ControlOperation::Add,
                fd.as_raw_fd(),
                EpollEvent::new(EventSet::IN, 7),
            )
            .expect("add");
        let mut events = vec![EpollEvent::default(); 4];
        let mut spin = Spin::new(Duration::from_micros(200));
        let c = QueueCounters::default();
        let spun = || c.spin_ns.load(std::sync::atomic::Ordering::Relaxed);
        // A closed window: no polling at all.
        assert_eq!(poll(&epoll, &mut events, &mut spin, Some(&c)), None);
        assert_eq!(spun(), 0);
        spin.window = Duration::from_micros(100);
        let start = Instant::now();
        assert_eq!(poll(&epoll, &mut events, &mut spin, Some(&c)), None);
        assert!(start.elapsed() >= Duration::from_micros(100));
        // Its whole window counts as spin, and no more than it took.
        let first = spun();
        assert!(first >= 100_000, "{first} ns counted");
        assert!(first <= start.elapsed().as_nanos() as u64);
        fd.write(1).expect("signal");
        assert_eq!(poll(&epoll, &mut events, &mut spin, Some(&c)), Some(1));
        assert_eq!(events[0].data(), 7);
        assert!(spun() >= first);
        // A sleep that ends within the bound opens a closed window.
        spin.window = Duration::ZERO;
        assert_eq!(sleep(&epoll, &mut events, Some(&mut spin)).ok(), Some(1));
        assert!(!spin.window.is_zero());
    }
}
