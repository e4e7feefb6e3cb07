//! A path's health: failing it, operator states, probes of a failed path
//! and its recovery, failback, and requests that wait for a usable path.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::health::{no_path_decision, NoPathDecision, ProbeOutcome};
use crate::path::{PathId, PathState};
use crate::policy::{self, PolicyName};
use crate::stats::bump;
use crate::time::Nanos;

use super::{Engine, FailbackError};

impl Engine {
    /// Marks a usable path failed (a path error, or the backend saw the
    /// device go); starts its recovery record.
    pub fn mark_failed_at(&self, path: PathId, now: Nanos) {
        let p = self.path(path);
        let mut h = p.health.lock().unwrap_or_else(|e| e.into_inner());
        if p.state() != PathState::Usable {
            return;
        }
        p.set_state_at(PathState::Failed, now);
        h.on_failure(now, &self.recovery);
        bump(&p.stats.failures);
    }

    /// Operator action (offline, online, remove). Bringing a path online
    /// clears its recovery record. `removed` is final: a removed path never
    /// changes state again. Offline and removed stop new I/O at once; what
    /// is in flight finishes ([`Engine::drained`] says when).
    pub fn set_path_state(&self, path: PathId, state: PathState) {
        let now = self.now();
        let p = self.path(path);
        let mut h = p.health.lock().unwrap_or_else(|e| e.into_inner());
        if p.state() == PathState::Removed {
            return;
        }
        match state {
            PathState::Usable => {
                h.reset();
                let mut m = p.marginal.lock().unwrap_or_else(|e| e.into_inner());
                // What the shards counted before the reset is forgotten too.
                self.absorb_marginal(path, &mut m, now);
                m.rec.reset();
                p.set_marginal_flag(false);
                p.set_marginal_due(0);
            }
            PathState::Failed if p.state() == PathState::Usable => {
                h.on_failure(now, &self.recovery);
                bump(&p.stats.failures);
            }
            _ => {}
        }
        p.set_state_at(state, now);
    }

    /// Failed paths whose next probe is due at `now`.
    pub fn probes_due(&self, now: Nanos) -> Vec<PathId> {
        (0..self.paths().len())
            .map(PathId)
            .filter(|&id| self.probe_due(id, now))
            .collect()
    }

    pub fn probe_due(&self, path: PathId, now: Nanos) -> bool {
        let p = self.path(path);
        p.state() == PathState::Failed && p.health().probe_due(now)
    }

    /// Accounts a probe of a failed path; after `recovery_probes` good ones
    /// in a row (and past any quarantine) the path is usable again.
    pub fn probe_result(&self, path: PathId, ok: bool, now: Nanos) -> ProbeOutcome {
        let p = self.path(path);
        let mut h = p.health.lock().unwrap_or_else(|e| e.into_inner());
        if p.state() != PathState::Failed {
            return ProbeOutcome::NotFailed;
        }
        bump(if ok {
            &p.stats.probes_ok
        } else {
            &p.stats.probes_failed
        });
        // Lock order: health, then marginal (as in `set_path_state`).
        self.record_marginal(path, ok, now);
        let outcome = h.on_probe(ok, now, &self.recovery);
        if outcome == ProbeOutcome::Recovered {
            p.set_state_at(PathState::Usable, now);
            bump(&p.stats.recoveries);
        }
        outcome
    }

    /// `active-standby`: move I/O back to the home path (the first usable
    /// preferred path, else the first usable path) from the next request
    /// on, whatever the failback setting. Returns the home path; an error
    /// when the policy is another one or the home path is not usable.
    pub fn request_failback(&self) -> Result<PathId, FailbackError> {
        let installed = self.policy.load();
        if installed.config.name != PolicyName::ActiveStandby {
            return Err(FailbackError::NotActiveStandby(installed.config.name));
        }
        let paths = self.paths();
        let candidates = Self::candidates(paths, 0);
        let preferred: Vec<usize> = (0..paths.len())
            .filter(|&i| paths[i].preferred() && paths[i].state() != PathState::Removed)
            .collect();
        let home = if preferred.is_empty() {
            policy::indices(candidates)
                .next()
                .ok_or(FailbackError::NoUsablePath)?
        } else {
            preferred
                .iter()
                .copied()
                .find(|&i| policy::has(candidates, i))
                .ok_or_else(|| {
                    let states: Vec<String> = preferred
                        .iter()
                        .map(|&i| format!("{} is {}", paths[i].name, paths[i].state().as_str()))
                        .collect();
                    FailbackError::PreferredNotUsable(states.join(", "))
                })?
        };
        installed.policy.request_failback();
        Ok(PathId(home))
    }

    pub fn no_path_timeout(&self) -> Duration {
        self.no_path_timeout
    }

    /// Whether a request waiting since `since` keeps waiting or fails.
    pub fn no_path_decision(&self, since: Nanos, now: Nanos) -> NoPathDecision {
        no_path_decision(since, now, self.no_path_timeout)
    }

    /// The backend parked a request for want of a usable path.
    pub fn note_no_path_parked(&self) {
        self.no_path.waiting.fetch_add(1, Ordering::Relaxed);
        bump(&self.no_path.parked);
    }

    /// A parked request left: re-sent (`resumed`) or failed at the timeout.
    pub fn note_no_path_done(&self, resumed: bool) {
        let _ = self
            .no_path
            .waiting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(1))
            });
        bump(if resumed {
            &self.no_path.resumed
        } else {
            &self.no_path.timed_out
        });
    }
}
