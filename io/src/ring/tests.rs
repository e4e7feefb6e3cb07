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
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("did not return within {limit:?}: the ring spins"))
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
