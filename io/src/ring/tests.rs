//! The ring under completion-queue overflow: nothing spins, nothing is lost.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::Ring;

/// Runs `f` on a thread and fails the test if it does not return in time
/// (a spinning ring would otherwise hang the test run).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("did not return within {limit:?}: the ring spins")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("failed (see above)"),
    }
}

/// Pushes `n` NOPs without reaping, then reaps until all came back.
fn push_then_reap(sq: u32, cq: u32, n: u64) -> Vec<u64> {
    let mut ring = Ring::with_sizes(sq, cq).expect("io_uring");
    for i in 0..n {
        ring.push_nop(i).expect("push");
    }
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while (seen.len() as u64) < n && Instant::now() < deadline {
        ring.submit().expect("submit");
        ring.reap(|ud, res, _| {
            assert_eq!(res, 0);
            seen.push(ud);
        });
    }
    seen
}

#[test]
fn push_past_a_full_completion_queue_returns_and_loses_nothing() {
    // 4 submission and 8 completion entries, 1000 NOPs never reaped while
    // pushing: the completion queue overflows many times over.
    let mut seen = within(Duration::from_secs(20), || push_then_reap(4, 8, 1000));
    seen.sort_unstable();
    assert_eq!(seen, (0..1000).collect::<Vec<_>>());
}

#[test]
fn reap_flushes_completions_kept_in_overflow() {
    let mut seen = within(Duration::from_secs(20), || {
        let mut ring = Ring::with_sizes(8, 8).expect("io_uring");
        // Three submission queues' worth, submitted (and completed inline)
        // without reaping: 16 of them cannot fit the completion queue.
        for i in 0..24 {
            ring.push_nop(i).expect("push");
        }
        ring.submit().expect("submit");
        assert!(ring.has_completions());
        let mut seen = Vec::new();
        // One reap, no other call in between: it must return everything.
        ring.reap(|ud, _, _| seen.push(ud));
        assert_eq!(ring.unsubmitted(), 0);
        seen
    });
    seen.sort_unstable();
    assert_eq!(seen, (0..24).collect::<Vec<_>>());
}

#[test]
fn wait_returns_when_completions_overflow() {
    within(Duration::from_secs(20), || {
        let mut ring = Ring::with_sizes(4, 4).expect("io_uring");
        for i in 0..16 {
            ring.push_nop(i).expect("push");
        }
        // Completions are waiting (some in overflow): no blocking, no error.
        ring.wait().expect("wait");
        let mut n = 0;
        while n < 16 {
            ring.submit().expect("submit");
            n += ring.reap(|_, _, _| {});
        }
    });
}

#[test]
fn cancel_stops_a_read_that_would_never_complete() {
    let (res_read, res_cancel) = within(Duration::from_secs(20), || {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let mut ring = Ring::new(8).expect("io_uring");
        let mut buf = [0u8; 16];
        // Nobody writes the pipe: a hung command.
        let read: io_uring::squeue::Entry128 =
            io_uring::opcode::Read::new(io_uring::types::Fd(fds[0]), buf.as_mut_ptr(), 16)
                .build()
                .user_data(1)
                .into();
        // SAFETY: `buf` outlives the read: it is reaped below.
        unsafe { ring.push(&read) }.expect("push");
        ring.submit().expect("submit");
        ring.push_cancel(1, 2).expect("cancel");
        let (mut res_read, mut res_cancel) = (None, None);
        while res_read.is_none() || res_cancel.is_none() {
            ring.wait().expect("wait");
            ring.reap(|ud, res, _| match ud {
                1 => res_read = Some(res),
                _ => res_cancel = Some(res),
            });
        }
        // SAFETY: both ends are ours and closed once.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        (res_read, res_cancel)
    });
    assert_eq!(res_read, Some(-libc::ECANCELED));
    assert_eq!(res_cancel, Some(0));
}

/// Whether the ring's eventfd is readable now.
fn signalled(ring: &Ring) -> bool {
    let mut p = libc::pollfd {
        fd: ring.eventfd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

#[test]
fn the_conditional_clear_reads_every_signal_it_can_know_of() {
    let mut ring = Ring::new(8).expect("io_uring");
    // Completed and reaped: the signal is read.
    ring.push_nop(1).expect("push");
    ring.submit().expect("submit");
    while ring.reap(|_, _, _| {}) == 0 {}
    assert!(signalled(&ring));
    ring.clear_event_if_signalled();
    assert!(!signalled(&ring), "a reaped completion's signal stayed");
    // Completed, not reaped yet: read too.
    ring.push_nop(2).expect("push");
    ring.submit().expect("submit");
    let t0 = Instant::now();
    while !signalled(&ring) && t0.elapsed() < Duration::from_secs(5) {}
    ring.clear_event_if_signalled();
    assert!(
        !signalled(&ring),
        "an outstanding completion's signal stayed"
    );
    while ring.reap(|_, _, _| {}) == 0 {}
    ring.clear_event();
    // A wake is read.
    ring.wake();
    ring.clear_event_if_signalled();
    assert!(!signalled(&ring), "a wake stayed");
    // Nothing since: nothing to read, and the eventfd stays quiet.
    ring.clear_event_if_signalled();
    assert!(!signalled(&ring));
}
