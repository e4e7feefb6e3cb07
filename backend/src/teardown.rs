//! A frontend connection's end, as the stop signal sees it: a signal that
//! comes while a connection is being torn down, or after its frontend hung
//! up but before the serve loop noticed, waits for that teardown to finish
//! (its queues stopped, its closing lines logged) before the process exits.

use std::os::fd::RawFd;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use log::warn;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

struct State {
    /// The connected frontend's socket (open until `begin`).
    fd: Option<RawFd>,
    /// A teardown runs.
    running: bool,
    /// Teardowns finished so far.
    ended: u64,
}

static STATE: (Mutex<State>, Condvar) = (
    Mutex::new(State {
        fd: None,
        running: false,
        ended: 0,
    }),
    Condvar::new(),
);

fn lock() -> MutexGuard<'static, State> {
    STATE.0.lock().unwrap_or_else(|p| p.into_inner())
}

/// A frontend is connected on `fd`, which the serve loop keeps open until
/// it calls [`begin`].
pub fn connected(fd: RawFd) {
    lock().fd = Some(fd);
}

/// Runs `f` on the connected frontend's socket, if one is connected, while
/// the socket is sure to stay open (`begin` waits).
pub fn with_connection(f: impl FnOnce(RawFd)) {
    let s = lock();
    if let Some(fd) = s.fd {
        f(fd);
    }
}

/// The connection ended and its teardown begins; call it before the
/// connection's socket is closed.
pub fn begin() {
    let mut s = lock();
    s.fd = None;
    s.running = true;
}

/// The teardown is over.
pub fn end() {
    let mut s = lock();
    s.running = false;
    s.ended += 1;
    STATE.1.notify_all();
}

/// For the stop signal: waits (up to `limit`) for a teardown that runs, or
/// is about to (the frontend hung up), to end.
pub fn wait(limit: Duration) {
    let s = lock();
    // The lock keeps the socket open while it is looked at: `begin`, which
    // precedes its closing, waits for it.
    if !(s.running || s.fd.is_some_and(hung_up)) {
        return;
    }
    let ended = s.ended;
    let (_s, r) = STATE
        .1
        .wait_timeout_while(s, limit, |s| s.ended == ended)
        .unwrap_or_else(|p| p.into_inner());
    if r.timed_out() {
        warn!("a frontend's teardown still runs after {limit:?}; exiting");
    }
}

/// Whether the peer of socket `fd` hung up (or the socket failed).
fn hung_up(fd: RawFd) -> bool {
    let Ok(ep) = Epoll::new() else {
        return false;
    };
    let gone = EventSet::HANG_UP | EventSet::READ_HANG_UP | EventSet::ERROR;
    if ep
        .ctl(ControlOperation::Add, fd, EpollEvent::new(gone, 0))
        .is_err()
    {
        return false;
    }
    let mut events = [EpollEvent::default(); 1];
    matches!(ep.wait(0, &mut events), Ok(n) if n > 0)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    use super::*;

    // One test: the state is the process's.
    #[test]
    fn a_stop_waits_for_a_hung_up_frontends_teardown_and_not_for_a_live_one() {
        let (ours, peer) = UnixStream::pair().unwrap();
        connected(ours.as_raw_fd());
        let t = Instant::now();
        wait(Duration::from_secs(5));
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "waited for a live frontend"
        );

        // The frontend hangs up; the serve loop has not noticed yet.
        drop(peer);
        let serve_loop = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            begin();
            drop(ours);
            std::thread::sleep(Duration::from_millis(100));
            end();
        });
        let t = Instant::now();
        wait(Duration::from_secs(5));
        let waited = t.elapsed();
        serve_loop.join().unwrap();
        assert!(
            waited >= Duration::from_millis(190) && waited < Duration::from_secs(4),
            "waited {waited:?}, not until the teardown ended"
        );

        // A teardown that runs is waited for, one that ended is not.
        begin();
        let serve_loop = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            end();
        });
        let t = Instant::now();
        wait(Duration::from_secs(5));
        assert!(
            t.elapsed() >= Duration::from_millis(90),
            "{:?}",
            t.elapsed()
        );
        serve_loop.join().unwrap();
        let t = Instant::now();
        wait(Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_millis(500));
    }
}
