//! `auto` (ours): send each I/O where it is expected to complete first.
//!
//! estimated completion = base latency + (in-flight bytes + incoming bytes) / bandwidth
//!
//! Both terms are learned per path from completions, with no hand-set
//! weights. Over short windows (at least 16 completions and 5 ms, or 50 ms)
//! a path's bandwidth is the bytes it completed per second of busy time
//! (time with I/O in flight: the link rate of a path limited by bandwidth,
//! the delivered rate of one limited by latency) and its base latency is
//! the lowest latency seen in the window (what an I/O costs with the least
//! queueing); both are smoothed (1/4 new). A path that slows down sees its
//! completions thin out and its latencies rise at once: its estimate rises
//! within a few windows (well under 1 s).
//!
//! A path without measurements takes up to 4 I/Os at a time until it has
//! some; a path left idle for 100 ms gets one I/O so that a path that sped
//! up again is noticed. Samples over 1 s are ignored.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{indices, Policy, SubmitContext};
use crate::engine::IoInfo;
use crate::path::{Path, PathId};
use crate::stats::PolicyEstimates;
use crate::time::{Nanos, NANOS_PER_SEC};

const MS: Nanos = 1_000_000;
const MIN_SAMPLES: u64 = 16;
const MIN_WINDOW: Nanos = 5 * MS;
const MAX_WINDOW: Nanos = 50 * MS;
const PROBE_DEPTH: u64 = 4;
const PROBE_INTERVAL: Nanos = 100 * MS;
const MAX_SAMPLE: Nanos = NANOS_PER_SEC;
/// Flushes and other zero-byte commands still cost something.
const MIN_COST: u64 = 512;

#[derive(Debug, Default)]
struct Learned {
    window_start: AtomicU64,
    busy_at_start: AtomicU64,
    bytes: AtomicU64,
    count: AtomicU64,
    min_latency: AtomicU64,
    /// Bytes per second; 0 = not measured yet.
    bandwidth: AtomicU64,
    base: AtomicU64,
    last_used: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct Auto {
    learned: Vec<Learned>,
}

impl Auto {
    pub fn new(paths: usize) -> Self {
        let learned = (0..paths)
            .map(|_| Learned {
                min_latency: AtomicU64::new(u64::MAX),
                ..Default::default()
            })
            .collect();
        Self { learned }
    }

    /// Closes `path`'s window: one bandwidth and one base-latency sample.
    fn fold(&self, path: &Path, l: &Learned, now: Nanos) {
        let busy_now = path.busy_time(now);
        let busy = busy_now.saturating_sub(l.busy_at_start.swap(busy_now, Relaxed));
        let bytes = l.bytes.swap(0, Relaxed);
        let count = l.count.swap(0, Relaxed);
        let min_latency = l.min_latency.swap(u64::MAX, Relaxed);
        if count == 0 || busy == 0 || min_latency == u64::MAX {
            return;
        }
        let bandwidth = u128::from(bytes) * u128::from(NANOS_PER_SEC) / u128::from(busy);
        smooth(
            &l.bandwidth,
            bandwidth.clamp(1, u128::from(u64::MAX)) as u64,
        );
        smooth(&l.base, min_latency);
    }
}

/// Time to move `bytes` at `bandwidth` bytes per second, in ns.
fn transfer_time(bytes: u64, bandwidth: u64) -> Nanos {
    (u128::from(bytes) * u128::from(NANOS_PER_SEC) / u128::from(bandwidth.max(1)))
        .min(u128::from(u64::MAX)) as u64
}

fn smooth(a: &AtomicU64, sample: u64) {
    let old = a.load(Relaxed);
    let new = if old == 0 {
        sample
    } else {
        (old / 4) * 3 + sample / 4
    };
    a.store(new.max(1), Relaxed);
}

impl Policy for Auto {
    fn select(
        &self,
        paths: &[Path],
        candidates: u64,
        io: &IoInfo,
        ctx: &SubmitContext,
    ) -> Option<PathId> {
        let cost = io.bytes.max(MIN_COST);
        let mut best: Option<(Nanos, usize)> = None;
        let mut unmeasured: Option<(u64, usize)> = None;
        for i in indices(candidates) {
            let (p, l) = (&paths[i], &self.learned[i]);
            let bandwidth = l.bandwidth.load(Relaxed);
            if bandwidth == 0 {
                if p.in_flight_requests() < PROBE_DEPTH {
                    return Some(PathId(i));
                }
                if unmeasured.is_none_or(|(b, _)| p.in_flight_bytes() < b) {
                    unmeasured = Some((p.in_flight_bytes(), i));
                }
                continue;
            }
            let last = l.last_used.load(Relaxed);
            if p.in_flight_requests() == 0
                && ctx.now.saturating_sub(last) >= PROBE_INTERVAL
                && l.last_used
                    .compare_exchange(last, ctx.now, Relaxed, Relaxed)
                    .is_ok()
            {
                return Some(PathId(i));
            }
            let estimate =
                l.base.load(Relaxed) + transfer_time(p.in_flight_bytes() + cost, bandwidth);
            if best.is_none_or(|(e, _)| estimate < e) {
                best = Some((estimate, i));
            }
        }
        best.or(unmeasured).map(|(_, i)| PathId(i))
    }

    fn completed(&self, paths: &[Path], path: PathId, io: &IoInfo, latency: Nanos, now: Nanos) {
        let (p, l) = (&paths[path.0], &self.learned[path.0]);
        l.last_used.store(now, Relaxed);
        if latency > MAX_SAMPLE {
            return;
        }
        let cost = io.bytes.max(MIN_COST);
        l.bytes.fetch_add(cost, Relaxed);
        let count = l.count.fetch_add(1, Relaxed) + 1;
        l.min_latency.fetch_min(latency, Relaxed);
        let start = l.window_start.load(Relaxed);
        if start == 0 {
            // The first window starts with the first I/O of the path.
            let first = now.saturating_sub(latency).max(1);
            if l.window_start
                .compare_exchange(0, first, Relaxed, Relaxed)
                .is_ok()
            {
                l.busy_at_start
                    .store(p.busy_time(first).min(p.busy_time(now)), Relaxed);
            }
            return;
        }
        let age = now.saturating_sub(start);
        let due = (count >= MIN_SAMPLES && age >= MIN_WINDOW) || age >= MAX_WINDOW;
        if due
            && l.window_start
                .compare_exchange(start, now, Relaxed, Relaxed)
                .is_ok()
        {
            self.fold(p, l, now);
        }
    }

    fn estimates(&self, path: PathId) -> PolicyEstimates {
        let l = &self.learned[path.0];
        let bw = l.bandwidth.load(Relaxed);
        PolicyEstimates {
            bandwidth_bytes_per_s: Some(bw).filter(|&b| b > 0),
            base_latency_ns: Some(l.base.load(Relaxed)).filter(|_| bw > 0),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    /// Drives `p` over two FIFO links in virtual time: each path serves its
    /// queue at `bw` bytes/s after `base` ns. Returns the I/O split.
    fn run(p: &Auto, ps: &[Path], links: &[(u64, Nanos)], ios: usize, depth: usize) -> Vec<usize> {
        let mut now: Nanos = 1;
        let mut link_free = vec![0; links.len()];
        let mut in_flight: Vec<(Nanos, usize, Nanos)> = vec![]; // done, path, submitted
        let mut split = vec![0; links.len()];
        let io = read(64 * 1024);
        for _ in 0..ios {
            while in_flight.len() < depth {
                let i = pick(p, ps, all(ps), &io, now);
                let (bw, base) = links[i];
                let start = now.max(link_free[i]);
                link_free[i] = start + transfer_time(io.bytes, bw);
                in_flight.push((link_free[i] + base, i, now));
                split[i] += 1;
            }
            in_flight.sort();
            let (done, i, sub) = in_flight.remove(0);
            now = done;
            ps[i].release(io.bytes, now);
            p.completed(ps, PathId(i), &io, now - sub, now);
        }
        split
    }

    #[test]
    fn learns_bandwidth_and_base_latency() {
        let ps = paths(2);
        let p = Auto::new(2);
        let links = [(400 << 20, MS), (100 << 20, MS)];
        let split = run(&p, &ps, &links, 20_000, 64);
        let e0 = p.estimates(PathId(0));
        let bw = e0.bandwidth_bytes_per_s.unwrap() as f64 / f64::from(400 << 20);
        assert!((0.9..1.1).contains(&bw), "{e0:?}");
        // the least latency seen: with 64 I/Os always queued, the fixed
        // 1 ms plus the shortest queue (about 8 ms of 64k at 500 MiB/s)
        let base = e0.base_latency_ns.unwrap() as f64 / MS as f64;
        assert!((1.0..10.0).contains(&base), "{e0:?}");
        // in-flight bytes follow bandwidth: about 4:1
        let ratio = split[0] as f64 / split[1] as f64;
        assert!((3.0..5.0).contains(&ratio), "{split:?}");
    }

    #[test]
    fn learns_the_fixed_latency_of_a_lightly_used_path() {
        let ps = paths(1);
        let p = Auto::new(1);
        // one 4k read every 10 ms on a 2 ms path: idle most of the time
        let io = read(4096);
        let mut now = 1;
        for _ in 0..200 {
            pick(&p, &ps, 1, &io, now);
            now += 2 * MS;
            ps[0].release(io.bytes, now);
            p.completed(&ps, PathId(0), &io, 2 * MS, now);
            now += 8 * MS;
        }
        let e = p.estimates(PathId(0));
        let base = e.base_latency_ns.unwrap() as f64 / MS as f64;
        assert!((1.5..2.1).contains(&base), "{e:?}");
    }

    #[test]
    fn avoids_a_path_that_slows_down_and_still_probes_it() {
        let ps = paths(2);
        let p = Auto::new(2);
        let links = [(400 << 20, MS), (400 << 20, 30 * MS)];
        let split = run(&p, &ps, &links, 20_000, 16);
        assert!(split[1] * 20 < split[0], "{split:?}");
        assert!(split[1] > 0, "{split:?}");
    }

    #[test]
    fn unmeasured_paths_get_probe_io() {
        let ps = paths(2);
        let p = Auto::new(2);
        let picks: Vec<_> = (0..10)
            .map(|_| pick(&p, &ps, all(&ps), &read(4096), 1))
            .collect();
        assert_eq!(&picks[..8], &[0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(p.select(&ps, 0, &read(1), &at(0)), None);
    }
}
