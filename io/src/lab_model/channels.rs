//! A device with internal parallelism (`channels`, `service-us`,
//! `service-dist`): an NVMe SSD serves many commands at once across its
//! dies and channels, so its latency stays flat as the queue depth grows
//! until every channel is busy; beyond that commands wait, FIFO, for the
//! first channel to free up (an M/D/c or M/M/c queue). Stalls pause the
//! channels' service. The simulator's `Device` is the same.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::stall::Stall;
use super::{Rng, ServiceDist};

/// The most channels a path may have (the heap is per path and small).
pub(super) const MAX_CHANNELS: u32 = 4096;

/// Sigma of the log-normal service time (its mean is `service-us`): flash
/// read latencies spread about this much around their median (as the
/// simulator's `LOGNORMAL_SIGMA`).
const LOGNORMAL_SIGMA: f64 = 0.5;

#[derive(Debug)]
pub(super) struct Channels {
    /// When each channel is next free (ns); the earliest on top.
    free_at: BinaryHeap<Reverse<u64>>,
    service_ns: u64,
    dist: ServiceDist,
}

impl Channels {
    pub(super) fn new(n: u32, service_us: u64, dist: ServiceDist) -> Channels {
        Channels {
            free_at: (0..n).map(|_| Reverse(0)).collect(),
            service_ns: service_us.saturating_mul(1000),
            dist,
        }
    }

    fn service(&self, rng: &mut Rng) -> u64 {
        let mean = self.service_ns as f64;
        match self.dist {
            ServiceDist::Fixed => self.service_ns,
            ServiceDist::Exponential => (-rng.unit().ln() * mean) as u64,
            ServiceDist::Lognormal => {
                // Box-Muller: one standard normal from two uniforms.
                let (u1, u2) = (rng.unit(), rng.unit());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let s = LOGNORMAL_SIGMA;
                (mean.ln() - s * s / 2.0 + s * z).exp() as u64
            }
        }
    }

    /// When a command that arrives at `t` is served: on the channel that
    /// frees first, as soon as it does, paused by `stall`'s pauses.
    pub(super) fn serve(&mut self, t: u64, rng: &mut Rng, stall: Option<&mut Stall>) -> u64 {
        let service = self.service(rng);
        let mut first = self.free_at.peek_mut().expect("at least one channel");
        let start = t.max(first.0);
        let end = start.saturating_add(service);
        let done = stall.map_or(end, |s| s.apply(start, end).1);
        first.0 = done;
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    /// A closed loop of `qd` commands for 1 s: (commands per second, mean
    /// latency in ns).
    fn closed_loop(c: &mut Channels, qd: usize) -> (f64, f64) {
        let mut rng = Rng(0);
        let end = T0 + 1_000 * MS;
        let mut ready = vec![T0; qd];
        let (mut n, mut sum) = (0u64, 0u64);
        loop {
            let (i, &t) = ready.iter().enumerate().min_by_key(|(_, t)| **t).unwrap();
            if t >= end {
                break;
            }
            let done = c.serve(t, &mut rng, None);
            ready[i] = done;
            n += 1;
            sum += done - t;
        }
        (n as f64, sum as f64 / n as f64)
    }

    #[test]
    fn latency_flat_until_every_channel_is_busy_then_a_queue() {
        for qd in [1, 2, 4] {
            let mut c = Channels::new(4, 1000, ServiceDist::Fixed);
            let (iops, lat) = closed_loop(&mut c, qd);
            assert_eq!(lat, MS as f64, "QD{qd}: flat at the service time");
            assert!(
                (iops - 1000.0 * qd as f64).abs() <= qd as f64,
                "QD{qd}: {iops}"
            );
        }
        // QD16 on 4 channels of 1 ms: 4000 IOPS, each waits 3 services.
        let mut c = Channels::new(4, 1000, ServiceDist::Fixed);
        let (iops, lat) = closed_loop(&mut c, 16);
        assert!((iops - 4000.0).abs() <= 16.0, "{iops}");
        assert!((lat - 4.0 * MS as f64).abs() < 0.05 * MS as f64, "{lat}");
    }

    #[test]
    fn random_service_times_keep_their_mean() {
        for dist in [ServiceDist::Exponential, ServiceDist::Lognormal] {
            let mut c = Channels::new(1, 1000, dist);
            let (iops, lat) = closed_loop(&mut c, 1);
            assert!((900.0..1100.0).contains(&iops), "{dist}: {iops}");
            assert!((0.9e6..1.1e6).contains(&lat), "{dist}: {lat}");
        }
    }

    #[test]
    fn fifo_after_saturation() {
        // Two channels of 1 ms, five arrivals at once: 1, 1, 2, 2, 3 ms.
        let mut c = Channels::new(2, 1000, ServiceDist::Fixed);
        let mut rng = Rng(0);
        let done: Vec<u64> = (0..5).map(|_| c.serve(T0, &mut rng, None) - T0).collect();
        assert_eq!(done, vec![MS, MS, 2 * MS, 2 * MS, 3 * MS]);
    }

    #[test]
    fn a_stall_pauses_the_service() {
        // 10 ms pause every 100 ms: a 2 ms service from 99 ms ends at 111.
        let mut c = Channels::new(1, 2000, ServiceDist::Fixed);
        let mut s = Stall::new(100, 10, false);
        let mut rng = Rng(0);
        assert_eq!(c.serve(T0, &mut rng, Some(&mut s)), T0 + 2 * MS);
        assert_eq!(c.serve(T0 + 99 * MS, &mut rng, Some(&mut s)), T0 + 111 * MS);
    }
}
