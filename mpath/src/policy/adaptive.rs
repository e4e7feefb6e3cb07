//! `adaptive` (the kernel's adaptive/latency policy series): per path and
//! per I/O group (read, write, other), completion latencies are batched;
//! every `weight_period` each batch mean is folded into an EWMA
//! `slat = (slat * (2^shift - 1) + mean) >> shift`, the score `1e9 / slat`
//! gives the weight `max(1, score * 64 / sum of scores)`, and I/O goes out
//! by credit-based weighted round-robin. A path not measured yet (weight 0)
//! gets I/O like a weight-1 path so that it is measured; samples over 1 s
//! are ignored. Only usable paths count in the normalisation; a path that
//! leaves `usable` (failed, offline, removed) loses its measurements, as the
//! kernel resets a path's statistics when it clears it, and is measured
//! afresh when it returns.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use super::{has, indices, Policy, PolicyLocal, SubmitContext};
use crate::engine::{IoInfo, IoKind};
use crate::path::{Path, PathId, PathState};
use crate::stats::PolicyEstimates;
use crate::time::{nanos, Nanos, NANOS_PER_SEC};

const GROUPS: usize = 3;
const WEIGHT_SCALE: u64 = 64;
const MAX_SAMPLE: Nanos = NANOS_PER_SEC;

#[derive(Debug, Default)]
struct Group {
    batch_sum: AtomicU64,
    batch_count: AtomicU64,
    /// Smoothed latency, ns; 0 = not measured yet.
    ewma: AtomicU64,
    /// 1..=64; 0 = not measured yet.
    weight: AtomicU32,
    credit: AtomicI64,
}

#[derive(Debug)]
pub(crate) struct Adaptive {
    shift: u32,
    period: Nanos,
    last_fold: AtomicU64,
    /// `groups[path][group]`.
    groups: Vec<[Group; GROUPS]>,
    /// The path whose credit is being spent, per group.
    cursor: [AtomicUsize; GROUPS],
}

fn group(kind: IoKind) -> usize {
    match kind {
        IoKind::Read => 0,
        IoKind::Write => 1,
        IoKind::Other => 2,
    }
}

impl Adaptive {
    pub fn new(paths: usize, shift: u32, period: Duration) -> Self {
        Self {
            shift: shift.min(16),
            period: nanos(period).max(1),
            last_fold: AtomicU64::new(0),
            groups: (0..paths).map(|_| Default::default()).collect(),
            cursor: Default::default(),
        }
    }

    /// Folds every batch into its EWMA and recomputes the weights, at most
    /// once per period (whoever wins the race does it).
    fn maybe_fold(&self, paths: &[Path], now: Nanos) {
        let last = self.last_fold.load(Relaxed);
        if now.saturating_sub(last) < self.period
            || self
                .last_fold
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        let live = |i: usize| paths.get(i).is_some_and(|p| p.state() == PathState::Usable);
        for g in 0..GROUPS {
            let mut total_score = 0u64;
            for (i, path) in self.groups.iter().enumerate() {
                let s = &path[g];
                let count = s.batch_count.swap(0, Relaxed);
                let sum = s.batch_sum.swap(0, Relaxed);
                if !live(i) {
                    s.ewma.store(0, Relaxed);
                    continue;
                }
                if let Some(mean) = sum.checked_div(count) {
                    let old = s.ewma.load(Relaxed);
                    let new = if old == 0 {
                        mean
                    } else {
                        (old * ((1 << self.shift) - 1) + mean) >> self.shift
                    };
                    s.ewma.store(new.max(1), Relaxed);
                }
                total_score += score(s.ewma.load(Relaxed));
            }
            for path in &self.groups {
                let s = &path[g];
                let score = score(s.ewma.load(Relaxed));
                let w = if score == 0 {
                    0
                } else {
                    (score * WEIGHT_SCALE / total_score).max(1)
                };
                s.weight.store(w as u32, Relaxed);
            }
        }
    }
}

fn score(ewma: Nanos) -> u64 {
    NANOS_PER_SEC.checked_div(ewma).unwrap_or(0)
}

impl Policy for Adaptive {
    fn select(
        &self,
        paths: &[Path],
        candidates: u64,
        io: &IoInfo,
        ctx: &SubmitContext,
    ) -> Option<PathId> {
        self.maybe_fold(paths, ctx.now);
        let g = group(io.kind);
        let cursor = &self.cursor[g];
        let n = paths.len();
        // At most one refill per path before giving up on credit.
        for _ in 0..=2 * n {
            let i = cursor.load(Relaxed) % n;
            let s = &self.groups[i][g];
            if has(candidates, i) {
                if s.credit.fetch_sub(1, Relaxed) > 0 {
                    return Some(PathId(i));
                }
                let w = s.weight.load(Relaxed).max(1);
                s.credit.store(i64::from(w), Relaxed);
            }
            let _ = cursor.compare_exchange(i, (i + 1) % n, Relaxed, Relaxed);
        }
        indices(candidates).next().map(PathId)
    }

    fn completed(
        &self,
        paths: &[Path],
        path: PathId,
        io: &IoInfo,
        latency: Nanos,
        now: Nanos,
        _local: Option<&mut PolicyLocal>,
    ) {
        if latency <= MAX_SAMPLE {
            let s = &self.groups[path.0][group(io.kind)];
            s.batch_sum.fetch_add(latency, Relaxed);
            s.batch_count.fetch_add(1, Relaxed);
        }
        self.maybe_fold(paths, now);
    }

    fn estimates(&self, path: PathId) -> PolicyEstimates {
        let g = &self.groups[path.0];
        let ewma = [0, 1, 2].map(|i| Some(g[i].ewma.load(Relaxed)).filter(|&v| v > 0));
        PolicyEstimates {
            ewma_latency_ns: ewma,
            adaptive_weight: [0, 1, 2].map(|i| Some(g[i].weight.load(Relaxed))),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    const MS: Nanos = 1_000_000;

    fn feed(p: &Adaptive, ps: &[Path], path: usize, lat: Nanos, n: usize, now: Nanos) {
        for _ in 0..n {
            p.completed(ps, PathId(path), &read(4096), lat, now, None);
        }
    }

    #[test]
    fn unmeasured_paths_share_evenly() {
        let ps = paths(2);
        let p = Adaptive::new(2, 3, Duration::from_millis(100));
        let mut n = [0; 2];
        for _ in 0..100 {
            n[pick(&p, &ps, all(&ps), &read(4096), 0)] += 1;
        }
        assert_eq!(n, [50, 50]);
    }

    #[test]
    fn weights_follow_inverse_latency() {
        let ps = paths(2);
        let p = Adaptive::new(2, 3, Duration::from_millis(100));
        feed(&p, &ps, 0, MS, 10, 0);
        feed(&p, &ps, 1, 3 * MS, 10, 0);
        p.maybe_fold(&ps, 200 * MS);
        // scores 1000 and 333: weights 48 and 15 (of 64)
        let e0 = p.estimates(PathId(0));
        let e1 = p.estimates(PathId(1));
        assert_eq!(e0.adaptive_weight[0], Some(48));
        assert_eq!(e1.adaptive_weight[0], Some(15));
        assert_eq!(e0.ewma_latency_ns[0], Some(MS));
        assert_eq!(e1.adaptive_weight[1], Some(0), "writes not measured");
        let mut n = [0; 2];
        for _ in 0..63 * 10 {
            n[pick(&p, &ps, all(&ps), &read(4096), 200 * MS)] += 1;
        }
        assert!((470..=490).contains(&n[0]), "{n:?}");
        assert!((145..=160).contains(&n[1]), "{n:?}");
    }

    #[test]
    fn ewma_folds_batch_means_once_per_period() {
        let ps = paths(1);
        let p = Adaptive::new(1, 3, Duration::from_millis(100));
        feed(&p, &ps, 0, 8 * MS, 4, 0);
        p.maybe_fold(&ps, 100 * MS);
        assert_eq!(p.estimates(PathId(0)).ewma_latency_ns[0], Some(8 * MS));
        feed(&p, &ps, 0, 16 * MS, 4, 150 * MS); // within the period: batched
        assert_eq!(p.estimates(PathId(0)).ewma_latency_ns[0], Some(8 * MS));
        p.maybe_fold(&ps, 200 * MS);
        // (8 * 7 + 16) / 8 = 9 ms
        assert_eq!(p.estimates(PathId(0)).ewma_latency_ns[0], Some(9 * MS));
    }

    #[test]
    fn samples_over_one_second_are_ignored() {
        let ps = paths(1);
        let p = Adaptive::new(1, 3, Duration::from_millis(100));
        feed(&p, &ps, 0, 2 * NANOS_PER_SEC, 5, 0);
        p.maybe_fold(&ps, 200 * MS);
        assert_eq!(p.estimates(PathId(0)).ewma_latency_ns[0], None);
    }

    #[test]
    fn minimum_weight_one_keeps_probing() {
        let ps = paths(2);
        let p = Adaptive::new(2, 0, Duration::from_millis(100));
        feed(&p, &ps, 0, 10_000, 1, 0);
        feed(&p, &ps, 1, 900 * MS, 1, 0);
        p.maybe_fold(&ps, 200 * MS);
        assert_eq!(p.estimates(PathId(1)).adaptive_weight[0], Some(1));
        let slow = (0..650)
            .filter(|_| pick(&p, &ps, all(&ps), &read(4096), 200 * MS) == 1)
            .count();
        assert_eq!(slow, 10);
    }

    #[test]
    fn skips_non_candidates() {
        let ps = paths(3);
        let p = Adaptive::new(3, 3, Duration::from_millis(100));
        for _ in 0..10 {
            assert_ne!(pick(&p, &ps, 0b101, &read(4096), 0), 1);
        }
        assert_eq!(p.select(&ps, 0, &read(1), &at(0)), None);
    }

    #[test]
    fn only_usable_paths_count_and_a_returning_path_is_measured_afresh() {
        let ps = paths(3);
        let p = Adaptive::new(3, 3, Duration::from_millis(100));
        for i in 0..3 {
            feed(&p, &ps, i, MS, 10, 0);
        }
        p.maybe_fold(&ps, 100 * MS);
        assert_eq!(p.estimates(PathId(0)).adaptive_weight[0], Some(21));
        // Path 2 fails: the two left share the whole scale.
        ps[2].set_state(PathState::Failed);
        feed(&p, &ps, 0, MS, 10, 150 * MS);
        feed(&p, &ps, 1, MS, 10, 150 * MS);
        p.maybe_fold(&ps, 200 * MS);
        assert_eq!(p.estimates(PathId(0)).adaptive_weight[0], Some(32));
        assert_eq!(p.estimates(PathId(2)).adaptive_weight[0], Some(0));
        assert_eq!(p.estimates(PathId(2)).ewma_latency_ns[0], None);
        // Back: unmeasured (weight 0) until its own samples come in.
        ps[2].set_state(PathState::Usable);
        p.maybe_fold(&ps, 300 * MS);
        assert_eq!(p.estimates(PathId(2)).adaptive_weight[0], Some(0));
        feed(&p, &ps, 2, 3 * MS, 10, 350 * MS);
        p.maybe_fold(&ps, 400 * MS);
        // scores 1000, 1000, 333: weights 27, 27, 9
        assert_eq!(p.estimates(PathId(2)).adaptive_weight[0], Some(9));
    }
}
