//! What the engine reports: per-path counters summed over the workers'
//! shards, latency quantiles, the policy's estimates, and the no-path
//! counters.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::path::PathId;
use crate::stats::{PathStatsSnapshot, PathTotals};

use super::{Engine, NoPathStats};

impl Engine {
    pub fn no_path_stats(&self) -> NoPathStats {
        let n = &self.no_path;
        NoPathStats {
            waiting: n.waiting.load(Ordering::Relaxed),
            parked: n.parked.load(Ordering::Relaxed),
            resumed: n.resumed.load(Ordering::Relaxed),
            timed_out: n.timed_out.load(Ordering::Relaxed),
        }
    }

    /// Zeroes the statistics of every path and the no-path counters. The
    /// workers' shards are not written (each has one writer): what they
    /// hold now becomes the base the totals are read against.
    pub fn reset_stats(&self) {
        let mut base = self.stats_base.lock().unwrap_or_else(|e| e.into_inner());
        for (i, p) in self.paths().iter().enumerate() {
            p.stats.reset();
            base[i] = self.shards.totals(i);
        }
        let n = &self.no_path;
        n.parked.store(0, Ordering::Relaxed);
        n.resumed.store(0, Ordering::Relaxed);
        n.timed_out.store(0, Ordering::Relaxed);
    }

    /// What the workers counted on `path` (summed over their shards) since
    /// start or the last `reset_stats`. Each shard only grows, so totals
    /// read one after the other never go down (until a reset).
    pub fn path_totals(&self, path: PathId) -> PathTotals {
        let base = self.stats_base.lock().unwrap_or_else(|e| e.into_inner());
        self.shards.totals(path.0).since(&base[path.0])
    }

    /// Counters, latency quantiles and the policy's estimates of a path.
    pub fn path_stats(&self, path: PathId) -> PathStatsSnapshot {
        let p = self.path(path);
        let s = &p.stats;
        let t = self.path_totals(path);
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let m = p.marginal.lock().unwrap_or_else(|e| e.into_inner()).rec;
        PathStatsSnapshot {
            name: p.name.to_string(),
            state: p.state().as_str(),
            ana_state: p.ana_state().as_str(),
            weight: p.weight(),
            preferred: p.preferred(),
            in_flight_requests: p.in_flight_requests(),
            in_flight_bytes: p.in_flight_bytes(),
            selected: t.selected,
            reads: t.reads,
            writes: t.writes,
            others: t.others,
            read_bytes: t.read_bytes,
            write_bytes: t.write_bytes,
            path_errors: t.path_errors,
            retries: t.retries,
            io_errors: t.io_errors,
            failures: get(&s.failures),
            recoveries: get(&s.recoveries),
            probes_ok: get(&s.probes_ok),
            probes_failed: get(&s.probes_failed),
            marginal: p.is_marginal(),
            marginal_marks: m.marks,
            marginal_returns: m.returns,
            marginal_rechecks_failed: m.rechecks_failed,
            marginal_err_rate: m.last_rate,
            read_latency: t.read_latency.summary(),
            write_latency: t.write_latency.summary(),
            estimates: self.policy.load().policy.estimates(path),
        }
    }
}
