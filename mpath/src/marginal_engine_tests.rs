//! Marginal paths through the engine, for every policy: a path failing a
//! tenth of its I/O is set aside while a healthy path is usable, carries
//! everything when it is the last, never costs the guest an error, and
//! returns once its errors stop.

use std::time::Duration;

use crate::{
    Attempts, Disposition, Engine, EngineOptions, IoInfo, IoKind, IoOutcome, MarginalConfig,
    PathConfig, PathId, PathState, PolicyName, Selection, StatsShard, SubmitContext,
};

const MS: u64 = 1_000_000;
const READ: IoInfo = IoInfo {
    kind: IoKind::Read,
    bytes: 4096,
};
const EIO: IoOutcome = IoOutcome::Errno(5);

struct Run {
    e: Engine,
    /// Three workers' statistics shards: requests take turns on them, so
    /// the detector's windows are summed over shards.
    shards: Vec<StatsShard>,
    rng: u64,
    /// Path `b` fails this fraction of its I/O and probes.
    fail_rate: f64,
    guest_errors: u64,
    on_b: u64,
    total: u64,
}

/// Whether `path` fails this result (`b` at `fail_rate`).
fn fails(rng: &mut u64, fail_rate: f64, path: PathId) -> bool {
    *rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
    path == PathId(1) && ((*rng >> 11) as f64 / (1u64 << 53) as f64) < fail_rate
}

impl Run {
    fn new(policy: PolicyName, marginal: MarginalConfig) -> Self {
        let mut o = EngineOptions::new(policy);
        o.marginal = marginal;
        let cfg: Vec<PathConfig> = ["a", "b"]
            .iter()
            .map(|n| PathConfig {
                name: n.to_string(),
                weight: 1,
                preferred: false,
            })
            .collect();
        let e = Engine::with_options(&cfg, o).unwrap();
        Self {
            shards: (0..3).map(|_| e.stats_shard()).collect(),
            e,
            rng: 0x9e37_79b9_7f4a_7c15,
            fail_rate: 0.0,
            guest_errors: 0,
            on_b: 0,
            total: 0,
        }
    }

    fn fails(&mut self, path: PathId) -> bool {
        fails(&mut self.rng, self.fail_rate, path)
    }

    /// One request at `now` (1 ms each, one at a time), as a worker does it.
    fn request(&mut self, now: u64) {
        let ctx = SubmitContext {
            now,
            numa_node: None,
        };
        let mut att = Attempts::new(now);
        let mut retries = 0;
        let shard = &self.shards[(now / MS) as usize % self.shards.len()];
        let mut sel = self.e.select_attempt(&READ, &mut att, &ctx, shard);
        for _ in 0..32 {
            let p = match sel {
                Selection::Path(p) => p,
                Selection::Wait => return, // re-sent later: no error
                Selection::Exhausted => break,
            };
            let outcome = if fails(&mut self.rng, self.fail_rate, p) {
                EIO
            } else {
                IoOutcome::Ok
            };
            let d = self.e.complete_attempt_at(
                p,
                &READ,
                (0, 0),
                Duration::ZERO,
                outcome,
                retries,
                &mut att,
                now,
                shard,
            );
            match d {
                Disposition::Done => {
                    self.total += 1;
                    self.on_b += u64::from(p == PathId(1));
                    return;
                }
                Disposition::RetrySamePath { .. } => {
                    retries += 1;
                    sel = if self.e.select_path_at(p, &READ, now, shard) {
                        Selection::Path(p)
                    } else {
                        self.e.select_attempt(&READ, &mut att, &ctx, shard)
                    };
                }
                Disposition::Failover => sel = self.e.select_attempt(&READ, &mut att, &ctx, shard),
                Disposition::Fail => break,
            }
        }
        self.guest_errors += 1;
    }

    /// Runs from `from` to `to` ms: a request each ms, probes when due.
    fn run(&mut self, from: u64, to: u64) {
        for t in from..to {
            let now = t * MS;
            for id in self.e.probes_due(now) {
                let ok = !self.fails(id);
                self.e.probe_result(id, ok, now);
            }
            self.request(now);
        }
    }

    fn marginal(&self) -> bool {
        self.e.path(PathId(1)).is_marginal()
    }
}

fn config() -> MarginalConfig {
    MarginalConfig {
        err_rate: 0.05,
        sample_time: Duration::from_secs(1),
        recheck_gap: Duration::from_secs(5),
    }
}

#[test]
fn a_flaky_path_is_set_aside_used_when_last_and_returns() {
    for &policy in PolicyName::ALL.iter() {
        let mut r = Run::new(policy, config());
        r.fail_rate = 0.1;
        // b alone first (every policy sends it I/O then): it is judged.
        r.e.set_path_state(PathId(0), PathState::Offline);
        r.run(1, 2000);
        assert!(
            r.marginal(),
            "{policy}: b is marginal: {:?}",
            r.e.path_stats(PathId(1))
        );
        assert_eq!(r.e.path_stats(PathId(1)).marginal_marks, 1);
        r.e.set_path_state(PathId(0), PathState::Usable);
        r.run(2000, 6000);
        // Set aside: only the recheck trickle (16 a second) while a works.
        let (b0, t0) = (r.on_b, r.total);
        r.run(6000, 12_000);
        let share = (r.on_b - b0) as f64 / (r.total - t0) as f64;
        assert!(share < 0.03, "{policy}: marginal b carried {share}");
        assert!(r.marginal(), "{policy}: a bad recheck keeps b marginal");
        // The last usable path: b carries everything.
        r.e.set_path_state(PathId(0), PathState::Offline);
        let (b0, t0) = (r.on_b, r.total);
        r.run(12_000, 16_000);
        assert!(r.total - t0 > 3900, "{policy}: b served {}", r.total - t0);
        assert_eq!(r.on_b - b0, r.total - t0, "{policy}: all on b");
        // a back, b healed: a clean recheck returns it.
        r.e.set_path_state(PathId(0), PathState::Usable);
        r.fail_rate = 0.0;
        r.run(16_000, 30_000);
        assert!(!r.marginal(), "{policy}: b returned");
        assert_eq!(r.e.path_stats(PathId(1)).marginal_returns, 1);
        assert_eq!(r.guest_errors, 0, "{policy}: guest errors");
        if policy == PolicyName::RoundRobin {
            let (b0, t0) = (r.on_b, r.total);
            r.run(30_000, 32_000);
            let share = (r.on_b - b0) as f64 / (r.total - t0) as f64;
            assert!(share > 0.4, "returned b takes its share: {share}");
        }
    }
}

#[test]
fn without_detection_the_flaky_path_is_never_marginal() {
    let mut r = Run::new(PolicyName::RoundRobin, MarginalConfig::default());
    r.fail_rate = 0.1;
    r.run(1, 10_000);
    assert!(!r.marginal());
    assert_eq!(r.e.path_stats(PathId(1)).marginal_marks, 0);
}

#[test]
fn a_path_override_turns_detection_on_for_that_path_only() {
    let mut r = Run::new(PolicyName::RoundRobin, MarginalConfig::default());
    r.e.set_path_marginal(PathId(1), Some(config()));
    assert_eq!(r.e.marginal_config(PathId(1)), config());
    assert!(!r.e.marginal_config(PathId(0)).enabled());
    r.fail_rate = 0.1;
    r.run(1, 6000);
    assert!(r.marginal());
    assert!(!r.e.path(PathId(0)).is_marginal());
    // Turning it off returns the path at once.
    r.e.set_path_marginal(PathId(1), Some(MarginalConfig::default()));
    assert!(!r.marginal());
}
