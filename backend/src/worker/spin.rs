//! The adaptive spin before a worker re-arms the guest's kicks and sleeps.

use std::time::{Duration, Instant};

/// How long a worker that emptied the available ring keeps looking at it
/// before re-arming the guest's kicks and sleeping: a kick costs the guest a
/// system call and the worker a wake-up, where a request that arrives during
/// the spin costs neither. The window adapts like QEMU's AioContext
/// polling: it grows (from `START`, doubling, up to `max`) when the guest's
/// next kick came less than `max` after the worker started waiting (a
/// longer spin would have caught it), shrinks (halving, then off) when it
/// came later than `max` (spinning would only have burnt CPU), and stays when
/// the spin caught the requests. With `max` zero it never spins.
pub(crate) struct Spin {
    /// The current window (zero: re-arm at once).
    pub(crate) window: Duration,
    max: Duration,
    /// When the worker began waiting (spin start), if it went to sleep.
    waiting_since: Option<Instant>,
    /// Start of the last spin that ran out.
    spun_since: Option<Instant>,
    /// No spinning before this: another queue of the thread had work
    /// during the last spin (`yielded`).
    quiet_until: Option<Instant>,
}

impl Spin {
    const START: Duration = Duration::from_micros(2);

    pub(crate) fn new(max: Duration) -> Self {
        Self {
            window: Duration::ZERO,
            max,
            waiting_since: None,
            spun_since: None,
            quiet_until: None,
        }
    }

    /// Another queue of the worker's thread had work while it spun: with
    /// two busy queues on one thread a spin on either only delays the
    /// other (the thread serves one at a time), so the window closes and
    /// stays closed for `YIELD_QUIET`; a queue whose siblings are idle
    /// keeps spinning. (2 queues at 4k QD32 on one thread: no spin gave
    /// 1.14x the IOPS of the spin, docs/history/benchmarks-issue-10.md.)
    pub(crate) fn yielded(&mut self, now: Instant) {
        self.window = Duration::ZERO;
        self.quiet_until = Some(now + YIELD_QUIET);
    }

    /// A spin ran out at `start`'s window: the worker goes on to sleep.
    pub(crate) fn waited_since(&mut self, start: Instant) {
        self.spun_since = Some(start);
    }

    /// Kicks were re-armed: the worker sleeps from now (or since its spin
    /// began).
    pub(crate) fn armed(&mut self) {
        if self.max.is_zero() {
            return;
        }
        self.waiting_since = Some(self.spun_since.take().unwrap_or_else(Instant::now));
    }

    /// The guest kicked (or the queue was woken): adapt to how long the
    /// worker waited for it.
    pub(crate) fn woken(&mut self) {
        if let Some(since) = self.waiting_since.take() {
            self.adapt(since.elapsed());
        }
    }

    /// Adapts the window to a wait of `waited` for the guest's kick.
    fn adapt(&mut self, waited: Duration) {
        if let Some(until) = self.quiet_until {
            if Instant::now() < until {
                return;
            }
            self.quiet_until = None;
        }
        if waited <= self.window {
            // Just missed by the spin (the kick came while re-arming): fine.
        } else if waited > self.max {
            self.window /= 2;
            if self.window < Self::START {
                self.window = Duration::ZERO;
            }
        } else if self.window < self.max {
            self.window = if self.window.is_zero() {
                Self::START
            } else {
                (self.window * 2).min(self.max)
            };
        }
    }
}

/// The spin's upper bound: 50 us, or `VHOST_MPATH_SPIN_US` (0: never spin).
/// 20 us was measured best on a host whose wake-ups are fast; where a
/// wake-up itself takes tens of microseconds, every wait counts as longer
/// than 20 us and the window never opens (docs/history/benchmarks-issue-10.md, "The spin's
/// bound": 50 us gave 1.3-3.2x the IOPS of 20 us on the null cells, QEMU's
/// own poll-max-ns is 32 us).
pub(crate) fn default_spin() -> Duration {
    let us = std::env::var("VHOST_MPATH_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_SPIN_US);
    Duration::from_micros(us)
}

const DEFAULT_SPIN_US: u64 = 50;

/// How long a worker does not spin after a sibling queue's work ended its
/// spin (`Spin::yielded`).
const YIELD_QUIET: Duration = Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;

    /// The worker slept `waited` before the next kick.
    fn kick_after(s: &mut Spin, waited: Duration) {
        s.adapt(waited);
    }

    #[test]
    fn the_window_grows_while_kicks_come_within_the_bound() {
        let mut s = Spin::new(Duration::from_micros(20));
        kick_after(&mut s, Duration::from_micros(10));
        assert_eq!(s.window, Spin::START);
        for _ in 0..10 {
            kick_after(&mut s, Duration::from_micros(19));
        }
        assert_eq!(s.window, Duration::from_micros(20), "capped at the bound");
    }

    #[test]
    fn a_spin_a_busy_sibling_ended_closes_the_window_for_a_while() {
        let mut s = Spin::new(Duration::from_micros(50));
        s.window = Duration::from_micros(32);
        s.yielded(Instant::now());
        assert_eq!(s.window, Duration::ZERO);
        // Kicks that a spin would have caught do not reopen it meanwhile.
        for _ in 0..10 {
            kick_after(&mut s, Duration::from_micros(5));
        }
        assert_eq!(s.window, Duration::ZERO);
        // Once the quiet time is over it adapts again.
        s.quiet_until = Some(Instant::now() - Duration::from_millis(1));
        kick_after(&mut s, Duration::from_micros(5));
        assert_eq!(s.window, Spin::START);
    }

    #[test]
    fn the_window_shrinks_to_zero_when_kicks_come_later() {
        let mut s = Spin::new(Duration::from_micros(20));
        s.window = Duration::from_micros(16);
        kick_after(&mut s, Duration::from_millis(1));
        assert_eq!(s.window, Duration::from_micros(8));
        for _ in 0..4 {
            kick_after(&mut s, Duration::from_millis(1));
        }
        assert_eq!(s.window, Duration::ZERO);
    }

    #[test]
    fn without_a_bound_it_never_spins() {
        let mut s = Spin::new(Duration::ZERO);
        s.armed();
        assert!(s.waiting_since.is_none());
        s.woken();
        assert_eq!(s.window, Duration::ZERO);
    }

    #[test]
    fn a_spin_that_ran_out_counts_from_its_start() {
        let mut s = Spin::new(Duration::from_micros(20));
        let start = Instant::now() - Duration::from_millis(5);
        s.waited_since(start);
        s.armed();
        assert_eq!(s.waiting_since, Some(start));
    }
}
