use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::attempts::{Attempts, Selection, MAX_ROUNDS};
use crate::classify::{Disposition, IoOutcome};
use crate::health::{NoPathDecision, ProbeOutcome};
use crate::path::{AnaState, PathId, PathState};
use crate::policy::{PolicyConfig, PolicyName, SubmitContext};
use crate::time::ManualClock;
fn cfg(names: &[&str]) -> Vec<PathConfig> {
    names
        .iter()
        .map(|n| PathConfig {
            name: n.to_string(),
            weight: 1,
            preferred: false,
        })
        .collect()
}

const READ: IoInfo = IoInfo {
    kind: IoKind::Read,
    bytes: 4096,
};
const WRITE: IoInfo = IoInfo {
    kind: IoKind::Write,
    bytes: 4096,
};
const S: Nanos = 1_000_000_000;

fn manual(names: &[&str], policy: PolicyName) -> (Engine, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(S));
    let mut o = EngineOptions::new(policy);
    o.clock = clock.clone();
    (Engine::with_options(&cfg(names), o).unwrap(), clock)
}

/// A worker's calls, as the daemon's worker makes them (the attempt
/// API), one request each, on a shard of its own.
trait Worker {
    /// A path for a new request that failed on the paths in `exclude`
    /// (one of them only in a new round, when no other is usable).
    fn pick(&self, io: &IoInfo, exclude: u64) -> Option<PathId>;
    fn pick_at(&self, io: &IoInfo, exclude: u64, ctx: &SubmitContext) -> Option<PathId>;
    /// `io` accounted on `path` (a retry on the same path).
    fn take(&self, path: PathId, io: &IoInfo) -> bool;
    /// The completion of `io` on `path`, without a byte range.
    fn done(
        &self,
        path: PathId,
        io: &IoInfo,
        latency: Duration,
        outcome: IoOutcome,
        retries: u32,
    ) -> Disposition;
}

impl Worker for Engine {
    fn pick(&self, io: &IoInfo, exclude: u64) -> Option<PathId> {
        let ctx = SubmitContext {
            now: self.now(),
            numa_node: None,
        };
        self.pick_at(io, exclude, &ctx)
    }

    fn pick_at(&self, io: &IoInfo, exclude: u64, ctx: &SubmitContext) -> Option<PathId> {
        let mut att = Attempts::new(ctx.now);
        att.tried = exclude;
        match self.select_attempt(io, &mut att, ctx, &self.stats_shard()) {
            Selection::Path(p) => Some(p),
            _ => None,
        }
    }

    fn take(&self, path: PathId, io: &IoInfo) -> bool {
        self.select_path_at(path, io, self.now(), &self.stats_shard())
    }

    fn done(
        &self,
        path: PathId,
        io: &IoInfo,
        latency: Duration,
        outcome: IoOutcome,
        retries: u32,
    ) -> Disposition {
        let now = self.now();
        let mut att = Attempts::new(now);
        let shard = self.stats_shard();
        self.complete_attempt_at(
            path,
            io,
            (0, 0),
            latency,
            outcome,
            retries,
            &mut att,
            now,
            &shard,
        )
    }
}

#[test]
fn engine_is_shared_by_workers() {
    fn sync<T: Send + Sync>() {}
    sync::<Engine>();
}

#[test]
fn round_robin_alternates_and_accounts() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    let picks: Vec<_> = (0..4).map(|_| e.pick(&READ, 0).unwrap().0).collect();
    assert_eq!(picks, vec![0, 1, 0, 1]);
    assert_eq!(e.path(PathId(0)).in_flight_requests(), 2);
    assert_eq!(e.path(PathId(1)).in_flight_bytes(), 8192);
}

#[test]
fn failover_marks_failed_and_excludes() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    let p = e.pick(&READ, 0).unwrap();
    let d = e.done(p, &READ, Duration::ZERO, IoOutcome::Errno(19), 0);
    assert_eq!(d, Disposition::Failover);
    assert_eq!(e.path(p).state(), PathState::Failed);
    assert_eq!(e.path_stats(p).path_errors, 1);
    assert_eq!(e.path_stats(p).failures, 1);
    for _ in 0..4 {
        assert_ne!(e.pick(&READ, 0), Some(p));
    }
    e.path(PathId(1 - p.0)).set_state(PathState::Offline);
    assert_eq!(e.pick(&READ, 0), None);
    assert!(!e.any_usable());
}

#[test]
fn optimized_before_non_optimized() {
    for policy in PolicyName::ALL {
        let e = Engine::new(&cfg(&["a", "b", "c"]), policy).unwrap();
        e.path(PathId(0)).set_ana_state(AnaState::NonOptimized);
        e.path(PathId(2)).set_ana_state(AnaState::Inaccessible);
        for _ in 0..8 {
            assert_eq!(e.pick(&READ, 0), Some(PathId(1)), "{policy}");
        }
        assert_eq!(e.pick(&READ, 1 << 1), Some(PathId(0)), "{policy}");
        e.path(PathId(0)).set_ana_state(AnaState::Change);
        e.path(PathId(1)).set_ana_state(AnaState::PersistentLoss);
        assert_eq!(e.pick(&READ, 0), None, "{policy}");
    }
}

#[test]
fn never_failed_offline_or_removed() {
    for policy in PolicyName::ALL {
        let e = Engine::new(&cfg(&["a", "b", "c", "d"]), policy).unwrap();
        e.path(PathId(0)).set_state(PathState::Failed);
        e.path(PathId(1)).set_state(PathState::Offline);
        e.path(PathId(2)).set_state(PathState::Removed);
        for _ in 0..20 {
            assert_eq!(e.pick(&READ, 0), Some(PathId(3)), "{policy}");
        }
    }
}

#[test]
fn select_path_refuses_unselectable_paths() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    assert!(e.take(PathId(1), &READ));
    assert_eq!(e.path(PathId(1)).in_flight_requests(), 1);
    e.path(PathId(0)).set_state(PathState::Failed);
    assert!(!e.take(PathId(0), &READ));
    assert!(!e.take(PathId(7), &READ));
}

#[test]
fn rejects_bad_path_sets() {
    assert!(matches!(
        Engine::new(&[], PolicyName::RoundRobin),
        Err(EngineError::NoPaths)
    ));
    assert!(matches!(
        Engine::new(&cfg(&["a", "a"]), PolicyName::RoundRobin),
        Err(EngineError::DuplicateName(_))
    ));
}

#[test]
fn policy_swaps_while_io_is_in_flight() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    let p = e.pick(&READ, 0).unwrap();
    e.set_policy(PolicyConfig::new(PolicyName::QueueDepth));
    assert_eq!(e.policy_name(), PolicyName::QueueDepth);
    assert_eq!(e.pick(&READ, 0), Some(PathId(1 - p.0)), "load survives");
    assert_eq!(
        e.done(p, &READ, Duration::ZERO, IoOutcome::Ok, 0),
        Disposition::Done
    );
    assert_eq!(e.path(p).in_flight_requests(), 0);
}

#[test]
fn retries_follow_the_path_crdt_and_the_bound() {
    let e = Engine::new(&cfg(&["a"]), PolicyName::RoundRobin).unwrap();
    e.path(PathId(0)).set_crdt([3, 0, 0]);
    let status = IoOutcome::Nvme(0x006 | (1 << 11));
    let mut retries = 0;
    loop {
        assert!(e.take(PathId(0), &READ));
        match e.done(PathId(0), &READ, Duration::ZERO, status, retries) {
            Disposition::RetrySamePath { after } => {
                assert_eq!(after, Duration::from_millis(300));
                retries += 1;
            }
            d => {
                assert_eq!(d, Disposition::Fail);
                break;
            }
        }
    }
    assert_eq!(retries, 3);
    let s = e.path_stats(PathId(0));
    assert_eq!((s.retries, s.io_errors), (3, 1));
    assert_eq!(e.path(PathId(0)).state(), PathState::Usable);
}

#[test]
fn statistics_per_path() {
    let (e, clock) = manual(&["a"], PolicyName::RoundRobin);
    for i in 1..=100u64 {
        let io = if i % 2 == 0 { WRITE } else { READ };
        let p = e.pick(&io, 0).unwrap();
        clock.advance(Duration::from_micros(i));
        e.done(p, &io, Duration::from_micros(i * 10), IoOutcome::Ok, 0);
    }
    let s = e.path_stats(PathId(0));
    assert_eq!((s.reads, s.writes, s.read_bytes), (50, 50, 50 * 4096));
    assert_eq!(s.read_latency.count, 50);
    assert_eq!(s.write_latency.max_ns, 1_000_000);
    assert!(s.read_latency.p50_ns >= 490_000 && s.read_latency.p50_ns <= 520_000);
    assert!(s.write_latency.p99_ns >= 980_000);
    assert_eq!(s.in_flight_requests, 0);
}

#[test]
fn probing_brings_a_failed_path_back() {
    let (e, clock) = manual(&["a", "b"], PolicyName::RoundRobin);
    let a = PathId(0);
    assert!(e.take(a, &READ));
    e.done(a, &READ, Duration::ZERO, IoOutcome::Errno(5), 0);
    assert_eq!(e.path(a).state(), PathState::Failed);
    assert!(e.probes_due(clock.now()).is_empty());
    clock.advance(Duration::from_secs(1));
    assert_eq!(e.probes_due(clock.now()), vec![a]);
    for i in 0..3 {
        let out = e.probe_result(a, true, clock.now());
        if i < 2 {
            assert!(matches!(out, ProbeOutcome::Counting { .. }), "{out:?}");
            assert_eq!(e.path(a).state(), PathState::Failed);
        } else {
            assert_eq!(out, ProbeOutcome::Recovered);
        }
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(e.path(a).state(), PathState::Usable);
    assert_eq!(e.path(a).usable_since(), 4 * S);
    assert_eq!(e.path_stats(a).recoveries, 1);
    // fails again two seconds later: flapping, held down 5 s
    clock.advance(Duration::from_secs(1));
    e.mark_failed_at(a, clock.now());
    assert_eq!(e.path(a).health().held_until, clock.now() + 5 * S);
    assert!(!e.probe_due(a, clock.now() + 4 * S));
    assert!(e.probe_due(a, clock.now() + 5 * S));
}

#[test]
fn operator_states() {
    let (e, _) = manual(&["a", "b"], PolicyName::RoundRobin);
    e.set_path_state(PathId(0), PathState::Offline);
    assert_eq!(e.probe_result(PathId(0), true, 0), ProbeOutcome::NotFailed);
    assert!(!e.probe_due(PathId(0), u64::MAX));
    e.set_path_state(PathId(0), PathState::Usable);
    assert_eq!(e.path(PathId(0)).state(), PathState::Usable);
    e.set_path_state(PathId(1), PathState::Failed);
    assert!(e.path(PathId(1)).health().failed);
}

#[test]
fn ghost_write_guard_uses_the_path_delay() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    let d = Duration::from_millis(40);
    e.path(PathId(0)).set_write_failover_delay(d);
    let eintr = IoOutcome::Errno(4);
    assert_eq!(e.failover_delay(PathId(0), &WRITE, eintr), d);
    assert_eq!(e.failover_delay(PathId(0), &READ, eintr), Duration::ZERO);
    assert_eq!(e.failover_delay(PathId(1), &WRITE, eintr), Duration::ZERO);
    assert_eq!(
        e.failover_delay(PathId(0), &WRITE, IoOutcome::Errno(19)),
        Duration::ZERO
    );
}

#[test]
fn no_path_bookkeeping() {
    let mut o = EngineOptions::new(PolicyName::RoundRobin);
    o.no_path_timeout = Duration::from_secs(2);
    let e = Engine::with_options(&cfg(&["a"]), o).unwrap();
    assert_eq!(
        e.no_path_decision(S, S),
        NoPathDecision::Wait { deadline: 3 * S }
    );
    assert_eq!(e.no_path_decision(S, 3 * S), NoPathDecision::Fail);
    e.note_no_path_parked();
    e.note_no_path_parked();
    e.note_no_path_done(true);
    e.note_no_path_done(false);
    e.note_no_path_done(false);
    assert_eq!(
        e.no_path_stats(),
        NoPathStats {
            waiting: 0,
            parked: 2,
            resumed: 1,
            timed_out: 2
        }
    );
}

#[test]
fn numa_uses_the_submitting_node() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::Numa).unwrap();
    e.path(PathId(0)).set_numa_node(Some(0));
    e.path(PathId(1)).set_numa_node(Some(1));
    let on = |n| SubmitContext {
        now: S,
        numa_node: Some(n),
    };
    assert_eq!(e.pick_at(&READ, 0, &on(1)), Some(PathId(1)));
    assert_eq!(e.pick_at(&READ, 0, &on(0)), Some(PathId(0)));
    assert_eq!(e.pick(&READ, 0), Some(PathId(0)), "unknown node: first");
}

#[test]
fn manual_failback_through_the_engine() {
    let mut o = EngineOptions::new(PolicyName::ActiveStandby);
    o.policy.failback = crate::health::Failback::Manual;
    let clock = Arc::new(ManualClock::new(S));
    o.clock = clock.clone();
    let e = Engine::with_options(&cfg(&["a", "b"]), o).unwrap();
    assert_eq!(e.pick(&READ, 0), Some(PathId(0)));
    e.mark_failed_at(PathId(0), clock.now());
    assert_eq!(e.pick(&READ, 0), Some(PathId(1)));
    e.set_path_state(PathId(0), PathState::Usable);
    assert_eq!(e.pick(&READ, 0), Some(PathId(1)));
    assert_eq!(e.request_failback(), Ok(PathId(0)));
    assert_eq!(e.pick(&READ, 0), Some(PathId(0)));
}

#[test]
fn failback_is_refused_without_active_standby_or_a_usable_home() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    assert!(matches!(
        e.request_failback(),
        Err(FailbackError::NotActiveStandby(PolicyName::RoundRobin))
    ));
    let mut o = EngineOptions::new(PolicyName::ActiveStandby);
    o.policy.failback = crate::health::Failback::Manual;
    let e = Engine::with_options(&cfg(&["a", "b"]), o).unwrap();
    e.path(PathId(1)).set_preferred(true);
    assert_eq!(e.request_failback(), Ok(PathId(1)));
    e.set_path_state(PathId(1), PathState::Offline);
    assert_eq!(
        e.request_failback(),
        Err(FailbackError::PreferredNotUsable("b is offline".into()))
    );
    e.path(PathId(1)).set_preferred(false);
    assert_eq!(
        e.request_failback(),
        Ok(PathId(0)),
        "no preferred: the first"
    );
    e.set_path_state(PathId(0), PathState::Offline);
    assert_eq!(e.request_failback(), Err(FailbackError::NoUsablePath));
}

#[test]
fn paths_added_at_runtime_take_io_after_init() {
    let e = Engine::new(&cfg(&["a"]), PolicyName::RoundRobin).unwrap();
    let mut seen_in_init = None;
    let id = e
        .add_path(&cfg(&["b"])[0], |id, p| {
            // Not visible to workers yet.
            seen_in_init = Some((id, e.paths().len(), p.name.to_string()));
            p.set_write_failover_delay(Duration::from_millis(5));
        })
        .unwrap();
    assert_eq!(seen_in_init, Some((PathId(1), 1, "b".to_string())));
    assert_eq!(e.paths().len(), 2);
    assert_eq!(e.path_id("b"), Some(id));
    let picks: Vec<_> = (0..4).map(|_| e.pick(&READ, 0).unwrap().0).collect();
    assert_eq!(picks, vec![0, 1, 0, 1]);
    assert!(matches!(
        e.add_path(&cfg(&["a"])[0], |_, _| {}),
        Err(EngineError::DuplicateName(_))
    ));
    assert!(matches!(
        e.add_path(&cfg(&[""])[0], |_, _| {}),
        Err(EngineError::EmptyName)
    ));
}

#[test]
fn every_policy_serves_added_paths() {
    for policy in PolicyName::ALL {
        let e = Engine::new(&cfg(&["a"]), policy).unwrap();
        e.set_path_state(PathId(0), PathState::Offline);
        let b = e.add_path(&cfg(&["b"])[0], |_, _| {}).unwrap();
        for _ in 0..8 {
            let p = e.pick(&READ, 0).unwrap();
            assert_eq!(p, b, "{policy}");
            e.done(p, &READ, Duration::from_micros(50), IoOutcome::Ok, 0);
        }
    }
}

#[test]
fn removed_slots_are_kept_and_names_can_return() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    e.set_path_state(PathId(0), PathState::Removed);
    e.set_path_state(PathId(0), PathState::Usable);
    assert_eq!(e.path(PathId(0)).state(), PathState::Removed, "final");
    assert_eq!(e.path_id("a"), Some(PathId(0)), "still readable");
    let again = e.add_path(&cfg(&["a"])[0], |_, _| {}).unwrap();
    assert_eq!(again, PathId(2));
    assert_eq!(e.path_id("a"), Some(again), "the live one wins");
    for _ in 0..6 {
        assert_ne!(e.pick(&READ, 0), Some(PathId(0)));
    }
    assert_eq!(e.usable_paths_except(None), 2);
    assert_eq!(e.usable_paths_except(Some(again)), 1);
    // Slots are not reused: the table fills up.
    for i in 3..MAX_PATHS {
        e.add_path(&cfg(&[&format!("p{i}")])[0], |_, _| {}).unwrap();
    }
    assert!(matches!(
        e.add_path(&cfg(&["z"])[0], |_, _| {}),
        Err(EngineError::NoFreeSlot)
    ));
    assert_eq!(e.paths().len(), MAX_PATHS);
    assert!(e.pick(&READ, 0).is_some());
}

#[test]
fn drain_waits_for_in_flight_io_only() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    let a = e.pick(&READ, 0).unwrap();
    assert_eq!(a, PathId(0));
    e.set_path_state(a, PathState::Offline);
    assert!(!e.drained(a), "one I/O still in flight");
    for _ in 0..4 {
        assert_eq!(e.pick(&READ, 0), Some(PathId(1)), "nothing new");
    }
    assert!(!e.take(a, &READ));
    e.done(a, &READ, Duration::ZERO, IoOutcome::Ok, 0);
    assert!(e.drained(a));
    assert_eq!(e.path_stats(a).reads, 1);
}

#[test]
fn selection_racing_a_drain_never_lands_on_the_drained_path() {
    // Workers select and complete in a loop while the control plane
    // takes path a offline and waits for the drain; a worker handed
    // path a after the drain completed is a violation.
    use std::sync::atomic::AtomicBool;
    for round in 0..20 {
        let e = Arc::new(Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let drained = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (e, stop, drained) = (e.clone(), stop.clone(), drained.clone());
                std::thread::spawn(move || {
                    let mut violations = 0;
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(p) = e.pick(&READ, 0) {
                            if p == PathId(0) && drained.load(Ordering::SeqCst) {
                                violations += 1;
                            }
                            e.done(p, &READ, Duration::ZERO, IoOutcome::Ok, 0);
                        }
                    }
                    violations
                })
            })
            .collect();
        std::thread::sleep(Duration::from_micros(200 + round * 50));
        e.set_path_state(PathId(0), PathState::Offline);
        while !e.drained(PathId(0)) {
            std::hint::spin_loop();
        }
        drained.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(2));
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            assert_eq!(w.join().unwrap(), 0, "I/O sent after the drain");
        }
    }
}

const EIO: IoOutcome = IoOutcome::Errno(5);
const ENODEV: IoOutcome = IoOutcome::Errno(19);

/// One try of a request with `att` at `range`: where it went and what
/// the engine decided.
fn attempt(
    e: &Engine,
    att: &mut Attempts,
    range: (u64, u64),
    outcome: IoOutcome,
) -> Option<(PathId, Disposition)> {
    let ctx = SubmitContext {
        now: S,
        numa_node: None,
    };
    match e.select_attempt(&READ, att, &ctx, &e.stats_shard()) {
        Selection::Path(p) => {
            let d = e.complete_attempt_at(
                p,
                &READ,
                range,
                Duration::ZERO,
                outcome,
                0,
                att,
                S,
                &e.stats_shard(),
            );
            Some((p, d))
        }
        _ => None,
    }
}

#[test]
fn an_eio_on_every_path_is_the_requests_error_not_the_paths() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    let bad = (8192, 4096);
    let mut r1 = Attempts::new(S);
    assert_eq!(
        attempt(&e, &mut r1, bad, EIO),
        Some((PathId(0), Disposition::Failover)),
        "the first path cannot tell a bad block from a dead path"
    );
    assert_eq!(
        attempt(&e, &mut r1, bad, EIO),
        Some((PathId(1), Disposition::Fail)),
        "every path failed this request: a data error"
    );
    assert_eq!(e.path(PathId(1)).state(), PathState::Usable);
    assert_eq!(e.path_stats(PathId(1)).io_errors, 1);
    // The range is remembered: the next request to it fails at once
    // without failing the path it reached.
    let mut r2 = Attempts::new(S);
    assert_eq!(
        attempt(&e, &mut r2, (8192 + 512, 512), EIO),
        Some((PathId(1), Disposition::Fail))
    );
    assert_eq!(e.path_stats(PathId(1)).failures, 0);
    // Elsewhere, an EIO on the only usable path while the other one is
    // down (not by this request) is a path failure: a dead disk still
    // fails its paths.
    let mut r3 = Attempts::new(S);
    assert_eq!(
        attempt(&e, &mut r3, (0, 4096), EIO),
        Some((PathId(1), Disposition::Failover))
    );
    assert_eq!(e.path(PathId(1)).state(), PathState::Failed);
    assert_eq!(attempt(&e, &mut r3, (0, 4096), EIO), None);
}

#[test]
fn unambiguous_path_errors_fail_every_path() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    let mut r = Attempts::new(S);
    for want in [0, 1] {
        assert_eq!(
            attempt(&e, &mut r, (0, 4096), ENODEV),
            Some((PathId(want), Disposition::Failover))
        );
    }
    assert!(!e.any_usable());
    let ctx = SubmitContext {
        now: S,
        numa_node: None,
    };
    assert_eq!(
        e.select_attempt(&READ, &mut r, &ctx, &e.stats_shard()),
        Selection::Wait
    );
}

#[test]
fn a_single_path_eio_fails_the_path() {
    let e = Engine::new(&cfg(&["a"]), PolicyName::RoundRobin).unwrap();
    let mut r = Attempts::new(S);
    assert_eq!(
        attempt(&e, &mut r, (0, 4096), EIO),
        Some((PathId(0), Disposition::Failover)),
        "one path proves nothing about the block"
    );
}

#[test]
fn offline_paths_are_not_in_service() {
    let e = Engine::new(&cfg(&["a", "b", "c"]), PolicyName::RoundRobin).unwrap();
    e.set_path_state(PathId(2), PathState::Offline);
    let mut r = Attempts::new(S);
    assert_eq!(
        attempt(&e, &mut r, (0, 4096), EIO).unwrap().1,
        Disposition::Failover
    );
    assert_eq!(
        attempt(&e, &mut r, (0, 4096), EIO).unwrap().1,
        Disposition::Fail
    );
}

#[test]
fn failovers_are_capped_at_max_rounds() {
    // Every path fails the request and comes back (probes) at once: it
    // goes to each path once per round, then fails.
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    let mut r = Attempts::new(S);
    let mut sends = 0;
    while let Some((p, d)) = attempt(&e, &mut r, (0, 4096), ENODEV) {
        assert_eq!(d, Disposition::Failover);
        sends += 1;
        assert!(sends <= 10, "no cap");
        if e.usable_paths_except(None) == 0 {
            e.set_path_state(PathId(0), PathState::Usable);
            e.set_path_state(PathId(1), PathState::Usable);
        }
        let _ = p;
    }
    assert_eq!(sends, 2 * MAX_ROUNDS);
    let ctx = SubmitContext {
        now: S,
        numa_node: None,
    };
    assert_eq!(
        e.select_attempt(&READ, &mut r, &ctx, &e.stats_shard()),
        Selection::Exhausted
    );
    // All down after the last round: no point waiting either.
    e.set_path_state(PathId(0), PathState::Failed);
    e.set_path_state(PathId(1), PathState::Failed);
    let mut r2 = r;
    r2.tried = 0b11;
    assert_eq!(
        e.select_attempt(&READ, &mut r2, &ctx, &e.stats_shard()),
        Selection::Exhausted
    );
}

#[test]
fn flush_commands_go_to_their_path_or_through_any_or_wait() {
    let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
    let ctx = SubmitContext {
        now: S,
        numa_node: None,
    };
    let flush = IoInfo {
        kind: IoKind::Other,
        bytes: 0,
    };
    let a = PathId(0);
    let mut r = Attempts::new(S);
    assert_eq!(
        e.select_flush(a, &flush, &mut r, &ctx, &e.stats_shard()),
        Selection::Path(a)
    );
    e.mark_failed_at(a, S);
    assert_eq!(
        e.select_flush(a, &flush, &mut r, &ctx, &e.stats_shard()),
        Selection::Path(PathId(1)),
        "a flush through b covers a"
    );
    e.path(a).set_flush_via_any(false);
    assert_eq!(
        e.select_flush(a, &flush, &mut r, &ctx, &e.stats_shard()),
        Selection::Wait
    );
}
