//! Periodic stalls (`stall-every-ms`, `stall-ms`, `stall-writes-only`):
//! flash garbage collection pauses a device (or its writes) for some ms
//! every so often. Counted from the first command the model sees (the
//! simulator's time 0): at each multiple of `every` the device stops for
//! `stall-ms`. A command arriving during a pause starts when it ends; a
//! command in service when a pause begins finishes that much later. With
//! `writes-only` reads pass (drives that serve reads from other dies).
//! The simulator's stalls (mpath/src/sim/models.rs) are the same.

use crate::IoOp;

#[derive(Debug)]
pub(super) struct Stall {
    every_ns: u64,
    len_ns: u64,
    writes_only: bool,
    /// The first command's arrival: the period counts from it.
    epoch: Option<u64>,
}

impl Stall {
    pub(super) fn new(every_ms: u64, len_ms: u64, writes_only: bool) -> Stall {
        Stall {
            every_ns: every_ms.saturating_mul(1_000_000).max(1),
            len_ns: len_ms.saturating_mul(1_000_000),
            writes_only,
            epoch: None,
        }
    }

    /// Whether commands of `op` stall.
    pub(super) fn applies(&self, op: IoOp) -> bool {
        !self.writes_only
            || matches!(
                op,
                IoOp::Write { .. } | IoOp::Discard | IoOp::WriteZeroes { .. }
            )
    }

    /// A service from `start` to `end` (ns), paused by the stalls it meets:
    /// (its start, its end).
    pub(super) fn apply(&mut self, start: u64, end: u64) -> (u64, u64) {
        let epoch = *self.epoch.get_or_insert(start);
        if start < epoch {
            return (start, end);
        }
        let (every, len) = (self.every_ns, self.len_ns);
        let (mut s, mut e) = (start - epoch, end - epoch);
        // Arriving inside a pause: wait for its end.
        let window = s / every * every;
        if window > 0 && s < window + len {
            let shift = window + len - s;
            s += shift;
            e += shift;
        }
        // Each pause that begins during the service pauses it.
        let mut next = (s / every + 1) * every;
        while next < e {
            e += len;
            next += every;
        }
        (epoch + s, epoch + e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const T0: u64 = 7_000 * MS;

    #[test]
    fn commands_in_a_stall_complete_after_it() {
        // 10 ms pause every 100 ms after the first command.
        let mut s = Stall::new(100, 10, false);
        let at = |s: &mut Stall, a: u64, b: u64| {
            let (x, y) = s.apply(T0 + a * MS, T0 + b * MS);
            ((x - T0) / MS, (y - T0) / MS)
        };
        assert_eq!(at(&mut s, 0, 1), (0, 1));
        assert_eq!(at(&mut s, 50, 60), (50, 60));
        assert_eq!(at(&mut s, 111, 112), (111, 112));
        // Arriving in it: starts at its end.
        assert_eq!(at(&mut s, 105, 106), (110, 111));
        // In service when it begins: 10 ms later.
        assert_eq!(at(&mut s, 99, 101), (99, 111));
        assert_eq!(at(&mut s, 300, 300), (310, 310));
    }

    #[test]
    fn the_stalled_fraction_of_uniform_arrivals() {
        // Zero-length commands every 10 us for 10 s on a 5 ms pause every
        // 100 ms: 5% land in a pause, waiting 2.5 ms on average.
        let mut s = Stall::new(100, 5, false);
        let (mut stalled, mut wait) = (0u64, 0u64);
        let n = 1_000_000;
        for i in 0..n {
            let t = T0 + i * 10_000;
            let (c, _) = s.apply(t, t);
            if c > t {
                stalled += 1;
                wait += c - t;
            }
        }
        let frac = stalled as f64 / n as f64;
        assert!((frac - 0.05).abs() < 0.001, "{frac}");
        let mean = wait as f64 / stalled as f64;
        assert!((mean - 2.5e6).abs() < 0.05e6, "{mean}");
    }

    #[test]
    fn writes_only() {
        let s = Stall::new(100, 5, true);
        assert!(!s.applies(IoOp::Read));
        assert!(!s.applies(IoOp::Flush));
        assert!(s.applies(IoOp::Write { fua: false }));
        assert!(s.applies(IoOp::Discard));
        assert!(Stall::new(100, 5, false).applies(IoOp::Read));
    }
}
