//! A token bucket (`bucket-iops`, `bucket-mib-s`, `bucket-burst-ms`): how
//! QEMU throttle groups and cloud volumes limit a disk. The bucket fills at
//! its rate up to `burst-ms` of it and starts full, so a burst passes at
//! once; after it, commands leave at the rate. A command is admitted while
//! the bucket holds anything (QEMU's util/throttle.c checks the level
//! before it adds the request, so the last admitted command may overdraw
//! it); an empty bucket delays admission, in arrival order.
//!
//! Kept as the time at which the bucket would be empty again (the GCRA's
//! "theoretical arrival time", the same algorithm): admitted when
//! `tat - now <= burst`. The simulator's bucket (mpath/src/sim/models.rs)
//! is the same.

#[derive(Debug)]
pub(super) struct Bucket {
    /// Nanoseconds per command (0: no IOPS limit).
    ns_per_io: f64,
    /// Nanoseconds per byte (0: no byte limit).
    ns_per_byte: f64,
    burst_ns: f64,
    /// When each bucket's level is back to zero (ns).
    tat_io: f64,
    tat_bytes: f64,
    /// The last admission: admission is FIFO.
    last: u64,
}

impl Bucket {
    /// `None` when neither rate is set.
    pub(super) fn new(iops: u64, mib_s: u64, burst_ms: u64) -> Option<Bucket> {
        let per = |rate: f64| if rate > 0.0 { 1e9 / rate } else { 0.0 };
        (iops > 0 || mib_s > 0).then(|| Bucket {
            ns_per_io: per(iops as f64),
            ns_per_byte: per(mib_s as f64 * 1024.0 * 1024.0),
            burst_ns: burst_ms as f64 * 1e6,
            tat_io: 0.0,
            tat_bytes: 0.0,
            last: 0,
        })
    }

    /// When a command of `bytes` arriving at `t` passes the bucket.
    pub(super) fn admit(&mut self, t: u64, bytes: u64) -> u64 {
        let mut at = t.max(self.last) as f64;
        if self.ns_per_io > 0.0 {
            at = at.max(self.tat_io - self.burst_ns);
        }
        if self.ns_per_byte > 0.0 {
            at = at.max(self.tat_bytes - self.burst_ns);
        }
        let admitted = at.ceil() as u64;
        if self.ns_per_io > 0.0 {
            self.tat_io = self.tat_io.max(admitted as f64) + self.ns_per_io;
        }
        if self.ns_per_byte > 0.0 {
            self.tat_bytes = self.tat_bytes.max(admitted as f64) + bytes as f64 * self.ns_per_byte;
        }
        self.last = admitted;
        admitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 5_000_000_000;
    const NS: f64 = 1e9;

    /// A closed loop of `qd` commands on the bucket alone for `secs`:
    /// (commands done in the first 100 ms, commands per second after 1 s).
    fn closed_loop(b: &mut Bucket, qd: usize, bytes: u64, secs: f64) -> (usize, f64) {
        let end = T0 + (secs * NS) as u64;
        let mut ready = vec![T0; qd];
        let (mut early, mut late) = (0, 0);
        loop {
            // The next command goes when its slot's previous one came back.
            let (i, &t) = ready.iter().enumerate().min_by_key(|(_, t)| **t).unwrap();
            if t >= end {
                break;
            }
            let done = b.admit(t, bytes);
            ready[i] = done;
            if done < T0 + 100_000_000 {
                early += 1;
            }
            if done >= T0 + 1_000_000_000 && done < end {
                late += 1;
            }
        }
        (early, late as f64 / (secs - 1.0))
    }

    #[test]
    fn burst_then_rate() {
        // 500 IOPS, 100 ms burst: 51 commands pass at once (the level is
        // checked before the cost is taken), then 500/s.
        let mut b = Bucket::new(500, 0, 100).unwrap();
        let at: Vec<u64> = (0..60).map(|_| b.admit(T0, 4096)).collect();
        assert_eq!(at.iter().filter(|&&t| t == T0).count(), 51);
        assert_eq!(at[51], T0 + 2_000_000);
        let mut b = Bucket::new(500, 0, 100).unwrap();
        let (early, rate) = closed_loop(&mut b, 16, 4096, 3.0);
        assert!((51..=105).contains(&early), "{early} in the first 100 ms");
        assert!((rate - 500.0).abs() < 5.0, "{rate} IOPS");
    }

    #[test]
    fn byte_rate_counts_bytes() {
        // 8 MiB/s of 64 KiB commands: 128 per second.
        let mut b = Bucket::new(0, 8, 100).unwrap();
        let (_, rate) = closed_loop(&mut b, 4, 64 * 1024, 3.0);
        assert!((rate - 128.0).abs() < 2.0, "{rate} per second");
    }

    #[test]
    fn both_rates_the_stricter_wins() {
        // 1000 IOPS but 1 MiB/s of 64 KiB: 16 per second.
        let mut b = Bucket::new(1000, 1, 0).unwrap();
        let (_, rate) = closed_loop(&mut b, 4, 64 * 1024, 3.0);
        assert!((rate - 16.0).abs() < 1.0, "{rate} per second");
    }

    #[test]
    fn idle_refills_up_to_the_cap_only() {
        let mut b = Bucket::new(1000, 0, 10).unwrap();
        // 10 ms of 1000/s: 11 back-to-back commands pass, the 12th waits.
        for _ in 0..11 {
            assert_eq!(b.admit(T0, 0), T0);
        }
        assert_eq!(b.admit(T0, 0), T0 + 1_000_000);
        // A long idle refills the bucket, not more.
        let later = T0 + 10 * 1_000_000_000;
        for _ in 0..11 {
            assert_eq!(b.admit(later, 0), later);
        }
        assert!(b.admit(later, 0) > later);
        assert!(Bucket::new(0, 0, 100).is_none());
    }
}
