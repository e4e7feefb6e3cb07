//! Time as the engine sees it: nanoseconds of a monotonic clock, passed in by
//! the caller (`*_at` methods) or read from an injectable [`Clock`]. The
//! simulator runs the same engine in virtual time this way.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Nanoseconds since an arbitrary origin of a monotonic clock.
pub type Nanos = u64;

pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Converts a duration to [`Nanos`], saturating.
pub fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A monotonic clock. The daemon uses [`MonotonicClock`]; tests and the
/// simulator use [`ManualClock`].
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> Nanos;
}

/// `Instant`-based wall clock, starting at 1 s so that 0 can mean "never".
#[derive(Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Nanos {
        NANOS_PER_SEC + nanos(self.origin.elapsed())
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(start: Nanos) -> Self {
        Self(AtomicU64::new(start))
    }

    pub fn set(&self, now: Nanos) {
        self.0.store(now, Ordering::Relaxed);
    }

    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(nanos(d), Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.0.load(Ordering::Relaxed)
    }
}
