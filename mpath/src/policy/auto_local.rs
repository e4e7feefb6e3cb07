//! A worker's share of `auto`'s sums, not yet added to the shared ones.
//!
//! Every completion adds to a path's window sums (bytes, latency, count,
//! least latency, the size regression) and to the trial's epoch sums. On
//! the shared atomics that would be a dozen locked read-modify-writes per
//! completion on lines every worker touches; a worker adds to its own sums
//! instead and moves them to the shared ones every `flush_every`
//! completions, after `flush_age`, and always before it closes a window or
//! an epoch: with one worker the shared sums are what they would have
//! been; another worker's last few completions count in the next window,
//! as if they had come a little later.

use super::auto_tuning::TUNING as T;
use crate::time::Nanos;

/// One path's window sums (see `Learned` in `auto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindowSums {
    pub bytes: u64,
    pub latency_sum: u64,
    /// Sum of each completion's latency less its transfer time and its
    /// modelled wait behind the bytes in flight (`auto`'s free latency).
    pub free_sum: u64,
    pub count: u64,
    pub min_base: u64,
    /// `SizeSums`: x, xx, y, yy, xy (its n is `count`).
    pub fit: [u64; 5],
    /// When the oldest of these completed (0: none).
    pub since: Nanos,
}

impl Default for WindowSums {
    fn default() -> Self {
        Self {
            bytes: 0,
            latency_sum: 0,
            free_sum: 0,
            count: 0,
            min_base: u64::MAX,
            fit: [0; 5],
            since: 0,
        }
    }
}

impl WindowSums {
    /// Adds one completion of `cost` bytes after `latency`, `base` of it
    /// not spent moving data and `free` of that not spent waiting behind
    /// other requests (as modelled); `(x, y)` is its point of the size
    /// regression.
    pub fn add(
        &mut self,
        cost: u64,
        latency: Nanos,
        base: Nanos,
        free: Nanos,
        (x, y): (u64, u64),
        now: Nanos,
    ) {
        if self.count == 0 {
            self.since = now.max(1);
        }
        self.bytes = self.bytes.wrapping_add(cost);
        self.latency_sum = self.latency_sum.wrapping_add(latency);
        self.free_sum = self.free_sum.wrapping_add(free);
        self.count += 1;
        self.min_base = self.min_base.min(base);
        let f = &mut self.fit;
        f[0] = f[0].wrapping_add(x);
        f[1] = f[1].wrapping_add(x * x);
        f[2] = f[2].wrapping_add(y);
        f[3] = f[3].wrapping_add(y * y);
        f[4] = f[4].wrapping_add(x * y);
    }

    /// Whether these sums should go to the shared ones now.
    pub fn ripe(&self, now: Nanos) -> bool {
        self.count >= T.flush_every || now.saturating_sub(self.since) >= T.flush_age
    }
}

/// The trial's epoch sums, for the epoch that started at `epoch`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EpochSums {
    pub epoch: Nanos,
    pub bytes: u64,
    pub count: u64,
    pub since: Nanos,
}

impl EpochSums {
    /// Adds a completion of `bytes` to the epoch that started at `epoch`;
    /// sums of an earlier epoch are dropped (it was closed without them,
    /// as their completions would have been skipped or counted late).
    pub fn add(&mut self, epoch: Nanos, bytes: u64, now: Nanos) {
        if self.epoch != epoch {
            *self = Self {
                epoch,
                ..Self::default()
            };
        }
        if self.count == 0 {
            self.since = now.max(1);
        }
        self.bytes = self.bytes.wrapping_add(bytes);
        self.count += 1;
    }

    pub fn ripe(&self, now: Nanos) -> bool {
        self.count >= T.flush_every || now.saturating_sub(self.since) >= T.flush_age
    }

    /// Empties the sums, returning (bytes, count).
    pub fn take(&mut self) -> (u64, u64) {
        let out = (self.bytes, self.count);
        self.bytes = 0;
        self.count = 0;
        out
    }
}

/// A worker's unshared sums of one `auto` instance.
#[derive(Debug, Default)]
pub(crate) struct Local {
    paths: Vec<WindowSums>,
    trial: EpochSums,
}

impl Local {
    /// Path `i`'s window sums and the trial's epoch sums.
    #[inline]
    pub fn sums(&mut self, i: usize) -> (&mut WindowSums, &mut EpochSums) {
        if self.paths.len() <= i {
            self.grow(i);
        }
        (&mut self.paths[i], &mut self.trial)
    }

    /// Makes room for path `i`'s sums (once a path: out of line).
    #[cold]
    #[inline(never)]
    fn grow(&mut self, i: usize) {
        self.paths.resize(i + 1, WindowSums::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_ripen_by_count_or_age() {
        let mut s = WindowSums::default();
        for i in 0..T.flush_every - 1 {
            s.add(4096, 10_000, 9_000, 9_000, (8, 39), 100 + i);
            assert!(!s.ripe(100 + i));
        }
        assert!(s.ripe(100 + T.flush_age));
        s.add(4096, 10_000, 8_000, 8_000, (8, 39), 200);
        assert!(s.ripe(200));
        assert_eq!(s.count, T.flush_every);
        assert_eq!(s.bytes, 4096 * T.flush_every);
        assert_eq!(s.min_base, 8_000);
        assert_eq!(s.fit[0], 8 * T.flush_every);
        assert_eq!(s.fit[4], 8 * 39 * T.flush_every);
    }

    #[test]
    fn epoch_sums_of_an_earlier_epoch_are_dropped() {
        let mut s = EpochSums::default();
        s.add(10, 4096, 20);
        s.add(10, 4096, 21);
        assert_eq!((s.bytes, s.count), (8192, 2));
        s.add(30, 512, 31);
        assert_eq!((s.epoch, s.bytes, s.count, s.since), (30, 512, 1, 31));
        assert_eq!(s.take(), (512, 1));
        assert_eq!((s.bytes, s.count), (0, 0));
    }
}
