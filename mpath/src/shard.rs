//! Per-worker statistics shards: what completions count (requests, bytes,
//! errors by class, latency histograms, the marginal detector's results) is
//! recorded by each worker in a shard of its own, with plain loads and
//! stores on cache lines no other thread writes; readers (JSON-RPC, metrics,
//! the marginal check) sum the shards. Only what policies and drains must
//! see across workers at once (in-flight counts, busy time, the write
//! generation) stays in the shared [`crate::Path`].
//!
//! A worker takes a [`StatsShard`] from the engine ([`crate::Engine::stats_shard`])
//! and passes it to the engine calls it makes. Shards live in an arena that
//! only grows: a dropped shard (its worker was rebuilt when the frontend
//! reconnected) goes back to a free list with its counts, and the next
//! worker continues it, so totals never go backwards and memory stays
//! bounded by the most workers alive at once. Callers without a shard (tests,
//! the simulator) record into a common shard with locked adds.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;

use crate::engine::MAX_PATHS;
use crate::stats::{add_owned, LatencyHistogram, PathTotals};
use crate::time::Nanos;

/// One path's counters in one shard.
#[derive(Debug, Default)]
pub(crate) struct PathCells {
    pub selected: AtomicU64,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub others: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub errors: AtomicU64,
    pub path_errors: AtomicU64,
    pub retries: AtomicU64,
    pub io_errors: AtomicU64,
    /// Results the marginal detector counts: good and bad (cumulative; the
    /// detector remembers what it has taken).
    pub marginal_ok: AtomicU64,
    pub marginal_bad: AtomicU64,
    pub read_latency: LatencyHistogram,
    pub write_latency: LatencyHistogram,
}

impl PathCells {
    fn add_to(&self, t: &mut PathTotals) {
        let get = |c: &AtomicU64| c.load(Relaxed);
        t.selected += get(&self.selected);
        t.reads += get(&self.reads);
        t.writes += get(&self.writes);
        t.others += get(&self.others);
        t.read_bytes += get(&self.read_bytes);
        t.write_bytes += get(&self.write_bytes);
        t.errors += get(&self.errors);
        t.path_errors += get(&self.path_errors);
        t.retries += get(&self.retries);
        t.io_errors += get(&self.io_errors);
        t.read_latency.add(&self.read_latency);
        t.write_latency.add(&self.write_latency);
    }
}

/// The counters of one shard for every path slot. A path's cells are
/// allocated on the shard's first use of the path (two histograms: about
/// 38 KiB).
pub(crate) struct Cells {
    /// Written by one thread only (a worker's [`StatsShard`]): stores; else
    /// (the common shard) locked adds.
    owned: bool,
    paths: Box<[OnceLock<Box<PathCells>>]>,
}

impl fmt::Debug for Cells {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let used = self.paths.iter().filter(|p| p.get().is_some()).count();
        f.debug_struct("Cells")
            .field("owned", &self.owned)
            .field("paths_used", &used)
            .finish()
    }
}

impl Cells {
    fn new(owned: bool) -> Self {
        Self {
            owned,
            paths: (0..MAX_PATHS).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The cells of path slot `i`, for the writer.
    #[inline]
    pub fn path(&self, i: usize) -> &PathCells {
        self.paths[i].get_or_init(Box::default)
    }

    /// The cells of path slot `i`, for a reader (`None`: never written).
    pub fn peek(&self, i: usize) -> Option<&PathCells> {
        self.paths[i].get().map(|b| &**b)
    }

    #[inline]
    pub fn add(&self, c: &AtomicU64, v: u64) {
        if self.owned {
            add_owned(c, v);
        } else {
            c.fetch_add(v, Relaxed);
        }
    }

    #[inline]
    pub fn record(&self, h: &LatencyHistogram, v: Nanos) {
        if self.owned {
            h.record_owned(v);
        } else {
            h.record(v);
        }
    }
}

/// Every shard an engine ever handed out, plus the common one.
#[derive(Debug)]
pub(crate) struct Arena {
    /// Only grows (index 0: the common shard); readers load it without a lock.
    all: ArcSwap<Vec<Arc<Cells>>>,
    /// Shards whose worker went away, with their counts, for the next one.
    free: Mutex<Vec<Arc<Cells>>>,
    common: Arc<Cells>,
}

impl Arena {
    pub fn new() -> Arc<Self> {
        let common = Arc::new(Cells::new(false));
        Arc::new(Self {
            all: ArcSwap::from_pointee(vec![common.clone()]),
            free: Mutex::new(Vec::new()),
            common,
        })
    }

    pub fn common(&self) -> &Cells {
        &self.common
    }

    /// A shard for a new worker: a retired one when there is one.
    pub fn take(self: &Arc<Self>) -> StatsShard {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let cells = free.pop().unwrap_or_else(|| {
            let c = Arc::new(Cells::new(true));
            self.all.rcu(|all| {
                let mut all = Vec::clone(all);
                all.push(c.clone());
                all
            });
            c
        });
        StatsShard {
            cells,
            arena: self.clone(),
            policy: Default::default(),
            _one_writer: PhantomData,
        }
    }

    /// Every shard (in use or retired).
    pub fn shards(&self) -> Arc<Vec<Arc<Cells>>> {
        self.all.load_full()
    }

    /// Path `i`'s counters summed over every shard.
    pub fn totals(&self, i: usize) -> PathTotals {
        let mut t = PathTotals::default();
        for s in self.shards().iter() {
            if let Some(c) = s.peek(i) {
                c.add_to(&mut t);
            }
        }
        t
    }

    /// Path `i`'s marginal results over every shard: (good, bad).
    pub fn marginal_results(&self, i: usize) -> (u64, u64) {
        let mut ok = 0;
        let mut bad = 0;
        for s in self.shards().iter() {
            if let Some(c) = s.peek(i) {
                // Each result bumps one of the two: no pair to tear.
                ok += c.marginal_ok.load(Relaxed);
                bad += c.marginal_bad.load(Relaxed);
            }
        }
        (ok, bad)
    }
}

/// A worker's statistics shard: pass it to the engine's `select_*` and
/// `complete_attempt_at`. Not `Sync` (one writer: the thread holding it);
/// dropping it retires it with its counts (see the module doc).
pub struct StatsShard {
    cells: Arc<Cells>,
    arena: Arc<Arena>,
    /// The engine's policy as this worker holds it.
    policy: crate::engine::PolicyCache,
    _one_writer: PhantomData<Cell<()>>,
}

impl fmt::Debug for StatsShard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatsShard")
            .field("cells", &self.cells)
            .finish()
    }
}

impl StatsShard {
    /// [`StatsShard::cells_in`], and this shard's policy cache when it
    /// belongs to `arena`'s engine, with one check.
    #[inline]
    pub(crate) fn bind<'a>(
        &'a self,
        arena: &'a Arena,
    ) -> (&'a Cells, Option<&'a crate::engine::PolicyCache>) {
        if std::ptr::eq(&*self.arena, arena) {
            (&self.cells, Some(&self.policy))
        } else {
            (arena.common(), None)
        }
    }

    /// This shard's cells when it belongs to `arena` (a shard of another
    /// engine counts in the common shard: nothing is lost).
    #[inline]
    pub(crate) fn cells_in<'a>(&'a self, arena: &'a Arena) -> &'a Cells {
        if std::ptr::eq(&*self.arena, arena) {
            &self.cells
        } else {
            arena.common()
        }
    }
}

impl Drop for StatsShard {
    fn drop(&mut self) {
        let mut free = self.arena.free.lock().unwrap_or_else(|e| e.into_inner());
        free.push(self.cells.clone());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{
        Attempts, Disposition, Engine, EngineOptions, IoInfo, IoKind, IoOutcome, ManualClock,
        MarginalConfig, PathConfig, PathId, PolicyName, Selection, StatsShard, SubmitContext,
    };

    const READ: IoInfo = IoInfo {
        kind: IoKind::Read,
        bytes: 4096,
    };
    const WRITE: IoInfo = IoInfo {
        kind: IoKind::Write,
        bytes: 512,
    };
    const A: PathId = PathId(0);

    fn engine(names: &[&str]) -> Engine {
        let cfg: Vec<PathConfig> = names
            .iter()
            .map(|n| PathConfig {
                name: n.to_string(),
                weight: 1,
                preferred: false,
            })
            .collect();
        Engine::new(&cfg, PolicyName::RoundRobin).unwrap()
    }

    /// One request on `shard`, completed with `outcome` after `lat_us`.
    fn request(e: &Engine, shard: &StatsShard, io: &IoInfo, outcome: IoOutcome, lat_us: u64) {
        let now = e.now();
        let ctx = SubmitContext {
            now,
            numa_node: None,
        };
        let mut att = Attempts::new(now);
        let Selection::Path(p) = e.select_attempt(io, &mut att, &ctx, shard) else {
            panic!("no path");
        };
        let lat = Duration::from_micros(lat_us);
        e.complete_attempt_at(p, io, (0, 0), lat, outcome, 0, &mut att, now, shard);
    }

    #[test]
    fn a_worker_that_holds_the_policy_follows_set_policy() {
        let e = engine(&["a", "b"]);
        let shard = e.stats_shard();
        let picks = |e: &Engine| -> Vec<usize> {
            (0..4)
                .map(|_| {
                    let now = e.now();
                    let ctx = SubmitContext {
                        now,
                        numa_node: None,
                    };
                    let mut att = Attempts::new(now);
                    let Selection::Path(p) = e.select_attempt(&READ, &mut att, &ctx, &shard) else {
                        panic!("no path");
                    };
                    let lat = Duration::from_micros(10);
                    e.complete_attempt_at(
                        p,
                        &READ,
                        (0, 0),
                        lat,
                        IoOutcome::Ok,
                        0,
                        &mut att,
                        now,
                        &shard,
                    );
                    p.0
                })
                .collect()
        };
        // Round-robin, held by the shard...
        assert_eq!(picks(&e), [0, 1, 0, 1]);
        // ...then active-standby: the next request already uses it.
        e.set_policy(PolicyName::ActiveStandby.into());
        assert_eq!(picks(&e), [0, 0, 0, 0]);
        e.set_policy(PolicyName::RoundRobin.into());
        let p = picks(&e);
        assert!(p.contains(&0) && p.contains(&1), "{p:?}");
    }

    #[test]
    fn totals_sum_every_shard_and_the_common_one() {
        let e = engine(&["a"]);
        let (s1, s2) = (e.stats_shard(), e.stats_shard());
        for i in 0..10 {
            request(&e, &s1, &READ, IoOutcome::Ok, 10 + i);
        }
        for i in 0..5 {
            request(&e, &s2, &WRITE, IoOutcome::Ok, 1000 + i);
        }
        request(&e, &s2, &READ, IoOutcome::Errno(61), 5); // ENODATA: media
                                                          // A shard of another engine counts in this one's common shard.
        let other = engine(&["a"]);
        request(&e, &other.stats_shard(), &READ, IoOutcome::Ok, 20);
        let t = e.path_totals(A);
        assert_eq!((t.selected, t.reads, t.writes), (17, 11, 5));
        assert_eq!((t.read_bytes, t.write_bytes), (11 * 4096, 5 * 512));
        assert_eq!((t.errors, t.io_errors), (1, 1));
        assert_eq!(t.read_latency.count(), 11);
        assert_eq!(t.write_latency.count(), 5);
        assert_eq!(t.read_latency.max(), 20_000);
        assert_eq!(t.write_latency.max(), 1_004_000);
        let s = e.path_stats(A);
        assert_eq!((s.selected, s.reads, s.writes, s.io_errors), (17, 11, 5, 1));
        assert_eq!(s.read_latency.count, 11);
        // In-flight counts stay shared: all back to zero.
        assert_eq!(s.in_flight_requests, 0);
    }

    #[test]
    fn a_retired_shard_keeps_its_counts_and_the_next_worker_continues_it() {
        let e = engine(&["a"]);
        let s1 = e.stats_shard();
        for _ in 0..7 {
            request(&e, &s1, &READ, IoOutcome::Ok, 50);
        }
        let before = e.path_totals(A);
        let arena = e.shard_count();
        // The frontend reconnects: the worker and its shard go away...
        drop(s1);
        assert_eq!(e.path_totals(A), before, "nothing lost with the worker");
        // ...and the new worker's shard continues the old one.
        let s2 = e.stats_shard();
        assert_eq!(e.shard_count(), arena, "the shard is reused");
        let mut last = e.path_totals(A).reads;
        for _ in 0..5 {
            request(&e, &s2, &READ, IoOutcome::Ok, 50);
            let now = e.path_totals(A).reads;
            assert_eq!(now, last + 1, "monotonic across the restart");
            last = now;
        }
        assert_eq!(e.path_totals(A).read_latency.count(), 12);
        // Two workers at once: two shards, summed.
        let s3 = e.stats_shard();
        request(&e, &s3, &READ, IoOutcome::Ok, 50);
        assert_eq!(e.shard_count(), arena + 1);
        assert_eq!(e.path_totals(A).reads, 13);
    }

    #[test]
    fn reset_reads_against_a_base_and_counts_go_on_from_zero() {
        let e = engine(&["a"]);
        let s = e.stats_shard();
        for i in 1..=100 {
            request(&e, &s, &READ, IoOutcome::Ok, i * 10);
        }
        assert_eq!(e.path_stats(A).read_latency.max_ns, 1_000_000);
        e.reset_stats();
        let t = e.path_totals(A);
        assert_eq!((t.selected, t.reads, t.read_bytes), (0, 0, 0));
        assert_eq!(t.read_latency.count(), 0);
        assert_eq!(e.path_stats(A).read_latency.max_ns, 0);
        for _ in 0..3 {
            request(&e, &s, &READ, IoOutcome::Ok, 7);
        }
        // A worker rebuilt after the reset: still counted against the base.
        drop(s);
        let s = e.stats_shard();
        request(&e, &s, &READ, IoOutcome::Ok, 9);
        let st = e.path_stats(A);
        assert_eq!((st.selected, st.reads), (4, 4));
        assert_eq!(st.read_latency.count, 4);
        // Since the reset the largest sample is 9 us (within the precision).
        let max = st.read_latency.max_ns;
        assert!((9_000..=9_000 + 9_000 / 64).contains(&max), "{max}");
        assert_eq!(st.read_latency.mean_ns, (3 * 7_000 + 9_000) / 4);
    }

    #[test]
    fn a_shard_of_another_engine_counts_in_the_common_shard() {
        let e = engine(&["a"]);
        let other = engine(&["x"]);
        let foreign = other.stats_shard();
        request(&e, &foreign, &READ, IoOutcome::Ok, 1);
        assert_eq!(e.path_totals(A).reads, 1);
        assert_eq!(other.path_totals(A).reads, 0);
    }

    #[test]
    fn shards_record_from_their_own_threads() {
        let e = std::sync::Arc::new(engine(&["a", "b"]));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let e = e.clone();
                std::thread::spawn(move || {
                    let s = e.stats_shard();
                    for _ in 0..1000 {
                        request(&e, &s, &READ, IoOutcome::Ok, 3);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let sum: u64 = [PathId(0), PathId(1)]
            .iter()
            .map(|&p| e.path_totals(p).reads)
            .sum();
        assert_eq!(sum, 4000, "no count lost: one writer per shard");
        assert!(e.paths().iter().all(|p| p.in_flight_requests() == 0));
    }

    /// The marginal detector's window is summed over shards: 16 results
    /// (the minimum), 8 bad on one worker and 8 good on another, make the
    /// path marginal although neither worker saw 16.
    #[test]
    fn the_marginal_window_adds_up_the_shards() {
        let clock = std::sync::Arc::new(ManualClock::new(1_000_000_000));
        let mut o = EngineOptions::new(PolicyName::RoundRobin);
        o.clock = clock.clone();
        o.marginal = MarginalConfig {
            err_rate: 0.3,
            sample_time: Duration::from_millis(100),
            recheck_gap: Duration::from_secs(5),
        };
        let cfg: Vec<PathConfig> = ["a", "b"]
            .iter()
            .map(|n| PathConfig {
                name: n.to_string(),
                weight: 1,
                preferred: false,
            })
            .collect();
        let e = Engine::with_options(&cfg, o).unwrap();
        let (good, bad) = (e.stats_shard(), e.stats_shard());
        let b = PathId(1);
        let one = |shard: &StatsShard, outcome: IoOutcome| {
            let now = e.now();
            assert!(e.select_path_at(b, &READ, now, shard));
            let mut att = Attempts::new(now);
            let d = e.complete_attempt_at(
                b,
                &READ,
                (0, 0),
                Duration::ZERO,
                outcome,
                0,
                &mut att,
                now,
                shard,
            );
            clock.advance(Duration::from_millis(10));
            d
        };
        for _ in 0..8 {
            assert_eq!(one(&good, IoOutcome::Ok), Disposition::Done);
            assert_eq!(one(&bad, IoOutcome::Errno(5)), Disposition::Failover);
        }
        assert!(e.path(b).is_marginal(), "{:?}", e.path_stats(b));
        let s = e.path_stats(b);
        assert_eq!(s.marginal_marks, 1);
        assert!((s.marginal_err_rate - 0.5).abs() < 1e-9, "{s:?}");
    }
}
