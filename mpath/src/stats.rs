//! Per-path statistics: counters and latency histograms. Completions are
//! counted in per-worker shards (`shard`), each written by its worker only
//! and summed when read; failures and probes in shared counters.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::time::Nanos;

/// Linear sub-buckets per power of two: 2^7 gives under 1.6 % error.
const SUB_BITS: u32 = 7;
const SUB: usize = 1 << SUB_BITS;
const HALF: usize = SUB / 2;
/// Values up to 2^42 ns (about 73 minutes); larger ones land in the top bucket.
const MAX_BITS: u32 = 42;
const BUCKETS: usize = SUB + (MAX_BITS - SUB_BITS) as usize * HALF;

/// A log-linear latency histogram (HdrHistogram's bucketing) over
/// nanoseconds. [`LatencyHistogram::record`] may run on several threads at
/// once; a statistics shard records with single-writer stores instead (see
/// `shard`). Readers fold it into [`HistogramCounts`].
pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
    max: AtomicU64,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count())
            .field("max", &self.max())
            .finish()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }
}

/// Values below `SUB` have a bucket each; above, each power of two is cut
/// into `HALF` equal buckets.
fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    if msb >= MAX_BITS {
        return BUCKETS - 1;
    }
    let shift = msb - (SUB_BITS - 1);
    let sub = (v >> shift) as usize; // in HALF..SUB
    SUB + (shift as usize - 1) * HALF + (sub - HALF)
}

/// The highest value that lands in bucket `b` (what quantiles report).
fn value_of(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let k = b - SUB;
    let shift = (k / HALF) as u32 + 1;
    let sub = (k % HALF + HALF) as u64;
    ((sub + 1) << shift) - 1
}

/// Adds `v` to a counter only this thread writes: a load and a store, no
/// read-modify-write (readers on other threads see each store whole).
#[inline]
pub(crate) fn add_owned(c: &AtomicU64, v: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

impl LatencyHistogram {
    /// Records a sample; safe to call from several threads at once.
    pub fn record(&self, v: Nanos) {
        self.buckets[bucket_of(v)].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
        self.max.fetch_max(v, Ordering::Relaxed);
    }

    /// Records a sample into a histogram that only the calling thread
    /// writes (a statistics shard): plain stores instead of locked
    /// instructions. Used from two threads at once it may lose samples.
    pub(crate) fn record_owned(&self, v: Nanos) {
        add_owned(&self.buckets[bucket_of(v)], 1);
        add_owned(&self.sum, v);
        if v > self.max.load(Ordering::Relaxed) {
            self.max.store(v, Ordering::Relaxed);
        }
    }

    /// The samples recorded so far, as plain numbers.
    pub fn counts(&self) -> HistogramCounts {
        let mut c = HistogramCounts::default();
        c.add(self);
        c
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    pub fn max(&self) -> Nanos {
        self.max.load(Ordering::Relaxed)
    }

    pub fn mean(&self) -> Nanos {
        self.counts().mean()
    }

    /// The value at quantile `q` (0..=1), within the bucket precision.
    pub fn quantile(&self, q: f64) -> Nanos {
        self.counts().quantile(q)
    }

    /// See [`HistogramCounts::cumulative`].
    pub fn cumulative(&self, bounds: &[Nanos]) -> CumulativeBuckets {
        self.counts().cumulative(bounds)
    }

    pub fn summary(&self) -> LatencySummary {
        self.counts().summary()
    }
}

/// A latency histogram read out (or several summed: a path's shards), for
/// quantiles and Prometheus buckets. The count is the sum of the buckets
/// read, so the two always agree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramCounts {
    /// Per fine bucket; empty while nothing was added.
    buckets: Vec<u64>,
    count: u64,
    sum: u64,
    max: Nanos,
}

impl HistogramCounts {
    /// Adds what `h` holds now.
    pub fn add(&mut self, h: &LatencyHistogram) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; BUCKETS];
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(h.buckets.iter()) {
            let c = theirs.load(Ordering::Relaxed);
            *mine += c;
            self.count += c;
        }
        self.sum = self.sum.wrapping_add(h.sum.load(Ordering::Relaxed));
        self.max = self.max.max(h.max.load(Ordering::Relaxed));
    }

    /// The samples in `self` that are not in `base` (an earlier reading of
    /// the same histograms: `reset_stats`). The maximum of what is left is
    /// exact when the all-time maximum is among it, else the upper bound of
    /// its highest bucket (the histogram's precision).
    pub fn since(&self, base: &HistogramCounts) -> HistogramCounts {
        if base.count == 0 {
            return self.clone();
        }
        let mut out = HistogramCounts {
            buckets: vec![0; BUCKETS],
            count: 0,
            sum: self.sum.saturating_sub(base.sum),
            max: 0,
        };
        for (b, o) in out.buckets.iter_mut().enumerate() {
            let now = self.buckets.get(b).copied().unwrap_or(0);
            *o = now.saturating_sub(base.buckets.get(b).copied().unwrap_or(0));
            out.count += *o;
        }
        if let Some(top) = out.buckets.iter().rposition(|&c| c > 0) {
            let exact = bucket_of(self.max) == top;
            out.max = if exact {
                self.max
            } else {
                value_of(top).min(self.max)
            };
        }
        out
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn max(&self) -> Nanos {
        self.max
    }

    pub fn mean(&self) -> Nanos {
        self.sum.checked_div(self.count).unwrap_or(0)
    }

    /// The value at quantile `q` (0..=1), within the bucket precision.
    pub fn quantile(&self, q: f64) -> Nanos {
        let total = self.count;
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return value_of(b).min(self.max);
            }
        }
        self.max
    }

    /// Cumulative counts at each of `bounds` (ascending, ns): how many
    /// samples are at most that value, as a Prometheus histogram's `le`
    /// buckets. A fine bucket counts under a bound when its lowest value is
    /// at most the bound (values up to 1.6 % above a bound may count under
    /// it: the histogram's precision). The total is the sum of the buckets
    /// read, so the last `+Inf` bucket and the count agree even while
    /// workers record.
    pub fn cumulative(&self, bounds: &[Nanos]) -> CumulativeBuckets {
        let mut le = vec![0u64; bounds.len()];
        let mut total = 0u64;
        let mut next = 0;
        for (b, &c) in self.buckets.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let low = if b == 0 { 0 } else { value_of(b - 1) + 1 };
            while next < bounds.len() && bounds[next] < low {
                le[next] = total;
                next += 1;
            }
            total += c;
        }
        for v in &mut le[next..] {
            *v = total;
        }
        CumulativeBuckets {
            le,
            count: total,
            sum_ns: self.sum,
        }
    }

    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            count: self.count,
            mean_ns: self.mean(),
            p50_ns: self.quantile(0.50),
            p90_ns: self.quantile(0.90),
            p99_ns: self.quantile(0.99),
            p999_ns: self.quantile(0.999),
            max_ns: self.max,
        }
    }
}

/// A histogram folded into cumulative buckets ([`LatencyHistogram::cumulative`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CumulativeBuckets {
    /// Samples at most each bound.
    pub le: Vec<u64>,
    pub count: u64,
    pub sum_ns: u64,
}

/// Latency quantiles of one histogram, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

/// The counters of one path that change outside the I/O path (failures,
/// probes: under the path's health lock), shared by every thread. What
/// completions count lives in the per-worker shards ([`PathTotals`]).
#[derive(Debug, Default)]
pub struct PathStats {
    /// Times this path went from usable to failed.
    pub failures: AtomicU64,
    /// Times this path came back after probing.
    pub recoveries: AtomicU64,
    /// Good and bad probes.
    pub probes_ok: AtomicU64,
    pub probes_failed: AtomicU64,
}

impl PathStats {
    /// Zeroes every counter (`reset_stats`).
    pub fn reset(&self) {
        for c in [
            &self.failures,
            &self.recoveries,
            &self.probes_ok,
            &self.probes_failed,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// What the workers counted on one path, summed over their shards (since
/// start or the last `reset_stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathTotals {
    /// Requests the policy (or a retry, a flush) sent down the path.
    pub selected: u64,
    pub reads: u64,
    pub writes: u64,
    pub others: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Completions with an error of any class.
    pub errors: u64,
    /// Path errors: the I/O failed over to another path.
    pub path_errors: u64,
    /// Retryable errors: the I/O was retried on this path.
    pub retries: u64,
    /// Media, DNR and other errors that reached the guest.
    pub io_errors: u64,
    pub read_latency: HistogramCounts,
    pub write_latency: HistogramCounts,
}

impl PathTotals {
    /// The counts in `self` that are not in `base`, an earlier reading.
    pub fn since(&self, base: &PathTotals) -> PathTotals {
        PathTotals {
            selected: self.selected.saturating_sub(base.selected),
            reads: self.reads.saturating_sub(base.reads),
            writes: self.writes.saturating_sub(base.writes),
            others: self.others.saturating_sub(base.others),
            read_bytes: self.read_bytes.saturating_sub(base.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(base.write_bytes),
            errors: self.errors.saturating_sub(base.errors),
            path_errors: self.path_errors.saturating_sub(base.path_errors),
            retries: self.retries.saturating_sub(base.retries),
            io_errors: self.io_errors.saturating_sub(base.io_errors),
            read_latency: self.read_latency.since(&base.read_latency),
            write_latency: self.write_latency.since(&base.write_latency),
        }
    }
}

/// A copy of a path's counters and of the policy's estimates for it, for
/// the statistics API.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PathStatsSnapshot {
    pub name: String,
    pub state: &'static str,
    pub ana_state: &'static str,
    pub weight: u32,
    pub preferred: bool,
    pub in_flight_requests: u64,
    pub in_flight_bytes: u64,
    /// Requests the policy (or a retry, a flush) sent down the path.
    pub selected: u64,
    pub reads: u64,
    pub writes: u64,
    pub others: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub path_errors: u64,
    pub retries: u64,
    pub io_errors: u64,
    pub failures: u64,
    pub recoveries: u64,
    pub probes_ok: u64,
    pub probes_failed: u64,
    /// Marginal: used only when no healthy path is usable.
    pub marginal: bool,
    /// Times the path became marginal, returned, failed a recheck.
    pub marginal_marks: u64,
    pub marginal_returns: u64,
    pub marginal_rechecks_failed: u64,
    /// Error rate (0-1) of the last judged sample window.
    pub marginal_err_rate: f64,
    pub read_latency: LatencySummary,
    pub write_latency: LatencySummary,
    pub estimates: PolicyEstimates,
}

/// What the current policy has learned about a path (absent: not measured
/// or not used by this policy).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct PolicyEstimates {
    /// `adaptive`: smoothed completion latency per I/O group (read, write, other).
    pub ewma_latency_ns: [Option<u64>; 3],
    /// `adaptive`: the weight (1..64) per I/O group; 0 = not measured yet.
    pub adaptive_weight: [Option<u32>; 3],
    /// `auto`: learned bandwidth of the path.
    pub bandwidth_bytes_per_s: Option<u64>,
    /// `auto`: learned base latency of the path.
    pub base_latency_ns: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_precise() {
        let mut last = 0;
        let powers = (0..42).flat_map(|s| [(1u64 << s) - 1, 1 << s]);
        for (n, v) in (0..200_000u64).chain(powers).enumerate() {
            let b = bucket_of(v);
            let hi = value_of(b);
            assert!(hi >= v, "{v} -> bucket {b} tops at {hi}");
            assert!(hi - v <= v / 64 + 1, "{v} -> {hi}: too coarse");
            if n < 200_000 {
                assert!(b >= last, "buckets grow with values");
                last = b;
            }
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn cumulative_buckets() {
        let h = LatencyHistogram::default();
        for v in [5u64, 100, 1_000, 1_000, 50_000, 2_000_000, u64::MAX / 2] {
            h.record(v);
        }
        let c = h.cumulative(&[0, 10, 1_000, 60_000, 1_000_000_000]);
        assert_eq!(c.le, vec![0, 1, 4, 5, 6]);
        assert_eq!(c.count, 7);
        let empty = LatencyHistogram::default().cumulative(&[1, 2]);
        assert_eq!(empty.le, vec![0, 0]);
        assert_eq!(empty.count, 0);
    }

    #[test]
    fn quantiles() {
        let h = LatencyHistogram::default();
        assert_eq!(h.quantile(0.5), 0);
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let s = h.summary();
        assert_eq!(s.count, 1000);
        assert_eq!(s.max_ns, 1_000_000);
        assert!((s.p50_ns as i64 - 500_000).abs() < 10_000, "{s:?}");
        assert!((s.p99_ns as i64 - 990_000).abs() < 20_000, "{s:?}");
        assert_eq!(s.p999_ns.min(1_000_000), s.p999_ns);
        assert_eq!(s.mean_ns, 500_500);
    }
}
