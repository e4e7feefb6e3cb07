//! Decisions about failed paths and waiting requests: when to probe a failed
//! path, when it is usable again, how long a flapping path is held down, and
//! how long a request may wait for a usable path. Pure functions over
//! timestamps: the backend does the probing and the waiting.

use std::time::Duration;

use crate::time::{nanos, Nanos};

/// How failed paths come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryConfig {
    /// Consecutive good probes before a failed path is usable again.
    pub recovery_probes: u32,
    /// Time between probes of a failed path.
    pub probe_interval: Duration,
    /// A path that fails again within this long of recovering is flapping.
    pub flap_window: Duration,
    /// Hold-down of the first flap; each further flap doubles it.
    pub quarantine: Duration,
    /// Longest hold-down.
    pub max_quarantine: Duration,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        Self {
            recovery_probes: 3,
            probe_interval: Duration::from_secs(1),
            flap_window: Duration::from_secs(60),
            quarantine: Duration::from_secs(5),
            max_quarantine: Duration::from_secs(600),
        }
    }
}

/// What a probe result did to a failed path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// Not failed: nothing to do.
    NotFailed,
    /// Good probe, more needed (`good` of `needed` so far).
    Counting { good: u32, needed: u32 },
    /// Bad probe: the count starts again.
    StillFailed,
    /// Enough good probes: the path is usable again.
    Recovered,
}

/// The recovery record of one path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathHealth {
    pub failed: bool,
    pub failed_at: Nanos,
    /// When the path last became usable after probing (0 = never).
    pub recovered_at: Nanos,
    /// Consecutive good probes since the failure.
    pub good_probes: u32,
    /// Consecutive quick re-failures (flaps); reset by a calm period.
    pub flaps: u32,
    /// No probe before this time (the quarantine).
    pub held_until: Nanos,
    pub next_probe: Nanos,
}

impl PathHealth {
    /// The path failed at `now`. A failure soon after a recovery is a flap:
    /// the path is held down for `quarantine * 2^(flaps-1)` (capped).
    pub fn on_failure(&mut self, now: Nanos, cfg: &RecoveryConfig) {
        if self.failed {
            return;
        }
        let flapping = self.recovered_at != 0
            && now.saturating_sub(self.recovered_at) < nanos(cfg.flap_window);
        self.flaps = if flapping { self.flaps + 1 } else { 0 };
        self.failed = true;
        self.failed_at = now;
        self.good_probes = 0;
        self.held_until = now.saturating_add(quarantine(self.flaps, cfg));
        self.next_probe = self
            .held_until
            .max(now.saturating_add(nanos(cfg.probe_interval)));
    }

    /// Whether a probe should be sent now.
    pub fn probe_due(&self, now: Nanos) -> bool {
        self.failed && now >= self.next_probe
    }

    /// Accounts a probe's result.
    pub fn on_probe(&mut self, ok: bool, now: Nanos, cfg: &RecoveryConfig) -> ProbeOutcome {
        if !self.failed {
            return ProbeOutcome::NotFailed;
        }
        self.next_probe = now.saturating_add(nanos(cfg.probe_interval));
        if !ok {
            self.good_probes = 0;
            return ProbeOutcome::StillFailed;
        }
        self.good_probes += 1;
        if self.good_probes < cfg.recovery_probes.max(1) || now < self.held_until {
            return ProbeOutcome::Counting {
                good: self.good_probes,
                needed: cfg.recovery_probes.max(1),
            };
        }
        self.failed = false;
        self.good_probes = 0;
        self.recovered_at = now;
        ProbeOutcome::Recovered
    }

    /// The operator forced the path back (or the path was re-added).
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// Hold-down after the `flaps`-th consecutive flap (0: none).
pub fn quarantine(flaps: u32, cfg: &RecoveryConfig) -> Nanos {
    if flaps == 0 {
        return 0;
    }
    let q = nanos(cfg.quarantine).saturating_mul(1u64 << (flaps - 1).min(32));
    q.min(nanos(cfg.max_quarantine))
}

/// What to do with a request that found no usable path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoPathDecision {
    /// Keep it parked; re-send the moment a path is usable, fail at `deadline`.
    Wait { deadline: Nanos },
    /// Complete it with an I/O error now.
    Fail,
}

/// `no_path_timeout` (0 = fail at once) applied to a request waiting since
/// `since`.
pub fn no_path_decision(since: Nanos, now: Nanos, timeout: Duration) -> NoPathDecision {
    if timeout.is_zero() {
        return NoPathDecision::Fail;
    }
    let deadline = since.saturating_add(nanos(timeout));
    if now >= deadline {
        NoPathDecision::Fail
    } else {
        NoPathDecision::Wait { deadline }
    }
}

/// When a path that failed should take I/O again under `active-standby`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failback {
    /// As soon as it is usable.
    Immediate,
    /// Only when the operator asks.
    Manual,
    /// Once it has been usable this long.
    Delay(Duration),
}

impl Failback {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "immediate" => Some(Self::Immediate),
            "manual" => Some(Self::Manual),
            _ => s.parse::<u64>().ok().map(|n| {
                if n == 0 {
                    Self::Immediate
                } else {
                    Self::Delay(Duration::from_secs(n))
                }
            }),
        }
    }

    /// Whether a path usable since `usable_since` (0 = unknown, long ago)
    /// may take I/O back at `now`; `requested`: the operator asked.
    pub fn allows(self, usable_since: Nanos, now: Nanos, requested: bool) -> bool {
        match self {
            Self::Immediate => true,
            Self::Manual => requested,
            Self::Delay(d) => requested || now.saturating_sub(usable_since) >= nanos(d),
        }
    }
}

impl std::fmt::Display for Failback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Immediate => f.write_str("immediate"),
            Self::Manual => f.write_str("manual"),
            Self::Delay(d) => write!(f, "{}", d.as_secs()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    fn cfg() -> RecoveryConfig {
        RecoveryConfig::default()
    }

    #[test]
    fn three_good_probes_recover() {
        let c = cfg();
        let mut h = PathHealth::default();
        assert!(!h.probe_due(10 * S));
        h.on_failure(10 * S, &c);
        assert!(h.failed);
        assert!(!h.probe_due(10 * S), "first probe after the interval");
        assert!(h.probe_due(11 * S));
        assert_eq!(
            h.on_probe(true, 11 * S, &c),
            ProbeOutcome::Counting { good: 1, needed: 3 }
        );
        assert!(!h.probe_due(11 * S + 1));
        assert_eq!(
            h.on_probe(true, 12 * S, &c),
            ProbeOutcome::Counting { good: 2, needed: 3 }
        );
        assert_eq!(h.on_probe(true, 13 * S, &c), ProbeOutcome::Recovered);
        assert!(!h.failed);
        assert_eq!(h.on_probe(true, 14 * S, &c), ProbeOutcome::NotFailed);
    }

    #[test]
    fn a_bad_probe_restarts_the_count() {
        let c = cfg();
        let mut h = PathHealth::default();
        h.on_failure(0, &c);
        h.on_probe(true, S, &c);
        h.on_probe(true, 2 * S, &c);
        assert_eq!(h.on_probe(false, 3 * S, &c), ProbeOutcome::StillFailed);
        h.on_probe(true, 4 * S, &c);
        h.on_probe(true, 5 * S, &c);
        assert_eq!(h.on_probe(true, 6 * S, &c), ProbeOutcome::Recovered);
    }

    #[test]
    fn flapping_is_held_down_exponentially() {
        let c = cfg();
        let mut h = PathHealth::default();
        let mut now = 100 * S;
        let mut holds = vec![];
        for _ in 0..4 {
            h.on_failure(now, &c);
            holds.push((h.held_until - now) / S);
            // probes succeed as soon as allowed
            while h.failed {
                now = now.max(h.next_probe);
                h.on_probe(true, now, &c);
            }
            now += 2 * S; // fails again 2 s after recovering
        }
        assert_eq!(holds, vec![0, 5, 10, 20]);
        // a calm minute resets the flap count
        now += 61 * S;
        h.on_failure(now, &c);
        assert_eq!(h.held_until, now);
        assert_eq!(h.flaps, 0);
    }

    #[test]
    fn quarantine_is_capped() {
        let c = cfg();
        assert_eq!(quarantine(0, &c), 0);
        assert_eq!(quarantine(1, &c), 5 * S);
        assert_eq!(quarantine(40, &c), 600 * S);
    }

    #[test]
    fn no_path_timeout() {
        let t = Duration::from_secs(30);
        assert_eq!(
            no_path_decision(S, S, t),
            NoPathDecision::Wait { deadline: 31 * S }
        );
        assert_eq!(
            no_path_decision(S, 30 * S, t),
            NoPathDecision::Wait { deadline: 31 * S }
        );
        assert_eq!(no_path_decision(S, 31 * S, t), NoPathDecision::Fail);
        assert_eq!(no_path_decision(S, S, Duration::ZERO), NoPathDecision::Fail);
    }

    #[test]
    fn failback_modes() {
        assert_eq!(Failback::parse("immediate"), Some(Failback::Immediate));
        assert_eq!(Failback::parse("manual"), Some(Failback::Manual));
        assert_eq!(
            Failback::parse("15"),
            Some(Failback::Delay(Duration::from_secs(15)))
        );
        assert_eq!(Failback::parse("soon"), None);
        assert!(Failback::Immediate.allows(10 * S, 10 * S, false));
        assert!(!Failback::Manual.allows(0, 100 * S, false));
        assert!(Failback::Manual.allows(0, 100 * S, true));
        let d = Failback::Delay(Duration::from_secs(15));
        assert!(!d.allows(10 * S, 24 * S, false));
        assert!(d.allows(10 * S, 25 * S, false));
        assert_eq!(d.to_string(), "15");
    }
}
