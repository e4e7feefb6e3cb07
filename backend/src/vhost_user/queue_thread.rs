//! One thread per queue: waits on the guest's kick fd, the worker's
//! io_uring completion eventfd, a wake event (the queue was started: serve
//! what is already available or to be resubmitted) and an exit event.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::thread::JoinHandle;

use log::warn;
use vhost_user_backend::{VringRwLock, VringT};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::device::BlkDevice;

const KICK: u64 = 0;
const COMPLETION: u64 = 1;
const WAKE: u64 = 2;
const EXIT: u64 = 3;

pub struct QueueThread {
    epoll: Arc<Epoll>,
    wake: Arc<EventFd>,
    exit: EventFd,
    /// The kick fd registered with epoll, if any.
    kick: Option<RawFd>,
    thread: Option<JoinHandle<()>>,
}

impl QueueThread {
    pub fn spawn(dev: BlkDevice, queue: usize, vring: VringRwLock) -> io::Result<Self> {
        let epoll = Arc::new(Epoll::new()?);
        let wake = Arc::new(EventFd::new(EFD_NONBLOCK)?);
        let exit = EventFd::new(EFD_NONBLOCK)?;
        let add = |fd: RawFd, id: u64| {
            epoll.ctl(ControlOperation::Add, fd, EpollEvent::new(EventSet::IN, id))
        };
        add(dev.ring_eventfd(queue), COMPLETION)?;
        add(wake.as_raw_fd(), WAKE)?;
        add(exit.as_raw_fd(), EXIT)?;
        let (ep, wk) = (epoll.clone(), wake.clone());
        let thread = std::thread::Builder::new()
            .name(format!("queue{queue}"))
            .spawn(move || run(&ep, &wk, &dev, queue, &vring))?;
        Ok(Self {
            epoll,
            wake,
            exit,
            kick: None,
            thread: Some(thread),
        })
    }

    /// Listens to the guest's kicks on `fd`, or stops listening (`None`).
    pub fn set_kick(&mut self, fd: Option<RawFd>) {
        if self.kick == fd {
            return;
        }
        if let Some(old) = self.kick.take() {
            // It may already be closed (and so gone from the set).
            let _ = self.epoll.ctl(
                ControlOperation::Delete,
                old,
                EpollEvent::new(EventSet::IN, KICK),
            );
        }
        if let Some(new) = fd {
            // Edge-triggered: every write to an eventfd is an edge, so each
            // kick wakes the thread once without reading the fd (one system
            // call less per wakeup). The counter it leaves is never read and
            // cannot fill (2^64 - 2 kicks).
            match self.epoll.ctl(
                ControlOperation::Add,
                new,
                EpollEvent::new(EventSet::IN | EventSet::EDGE_TRIGGERED, KICK),
            ) {
                Ok(()) => self.kick = Some(new),
                Err(e) => warn!("listening to a queue's kick fd: {e}"),
            }
        }
    }

    /// Has the thread look at the queue as if the guest had kicked.
    pub fn wake(&self) {
        let _ = self.wake.write(1);
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

fn run(epoll: &Epoll, wake: &EventFd, dev: &BlkDevice, queue: usize, vring: &VringRwLock) {
    let mut events = vec![EpollEvent::default(); 8];
    let vrings = std::slice::from_ref(vring);
    loop {
        let n = match epoll.wait(-1, &mut events) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                warn!("queue {queue}: epoll: {e}; the queue stops");
                return;
            }
        };
        for ev in &events[..n] {
            let evset = EventSet::from_bits_truncate(ev.events);
            match ev.data() {
                KICK => {
                    // Edge-triggered: nothing to consume. A disabled ring is
                    // not served.
                    if vring.get_ref().is_enabled() {
                        let _ = dev.handle_event(0, evset, vrings, queue);
                    }
                }
                WAKE => {
                    let _ = wake.read();
                    if vring.get_ref().is_enabled() {
                        let _ = dev.handle_event(0, evset, vrings, queue);
                    }
                }
                COMPLETION => {
                    let id = dev.completion_event_id();
                    let _ = dev.handle_event(id as u16, evset, vrings, queue);
                }
                _ => return,
            }
        }
    }
}
