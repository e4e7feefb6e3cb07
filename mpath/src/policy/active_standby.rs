//! `active-standby` (the 2018 seed, SPDK active_passive): one path takes
//! everything, the preferred path else the first usable one; the others
//! only when it fails. When the home path comes back, `failback` decides:
//! at once, after it has been usable for a delay, or when the operator asks.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::{has, indices, Policy, SubmitContext};
use crate::engine::IoInfo;
use crate::health::Failback;
use crate::path::{Path, PathId};

const NONE: usize = usize::MAX;

#[derive(Debug)]
pub(crate) struct ActiveStandby {
    failback: Failback,
    active: AtomicUsize,
    failback_requested: AtomicBool,
}

impl ActiveStandby {
    pub fn new(failback: Failback) -> Self {
        Self {
            failback,
            active: AtomicUsize::new(NONE),
            failback_requested: AtomicBool::new(false),
        }
    }
}

impl Policy for ActiveStandby {
    fn select(
        &self,
        paths: &[Path],
        candidates: u64,
        _: &IoInfo,
        ctx: &SubmitContext,
    ) -> Option<PathId> {
        let home = indices(candidates)
            .find(|&i| paths[i].preferred())
            .or_else(|| indices(candidates).next())?;
        let active = self.active.load(Ordering::Relaxed);
        let chosen = if active == home || !has(candidates, active) {
            // Already home: a failback request has nothing left to do and
            // must not fire after a later failover.
            if self.failback_requested.load(Ordering::Relaxed) {
                self.failback_requested.store(false, Ordering::Relaxed);
            }
            home
        } else if self.failback.allows(
            paths[home].usable_since(),
            ctx.now,
            self.failback_requested.load(Ordering::Relaxed),
        ) {
            self.failback_requested.store(false, Ordering::Relaxed);
            home
        } else {
            active
        };
        if chosen != active {
            self.active.store(chosen, Ordering::Relaxed);
        }
        Some(PathId(chosen))
    }

    fn request_failback(&self) {
        self.failback_requested.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::path::PathState;
    use std::time::Duration;

    const S: u64 = 1_000_000_000;

    #[test]
    fn preferred_else_first() {
        let ps = paths(3);
        let p = ActiveStandby::new(Failback::Immediate);
        assert_eq!(pick(&p, &ps, all(&ps), &read(1), 0), 0);
        ps[2].set_preferred(true);
        assert_eq!(pick(&p, &ps, all(&ps), &read(1), 0), 2);
        assert_eq!(pick(&p, &ps, 0b011, &read(1), 0), 0, "preferred failed");
    }

    #[test]
    fn immediate_failback() {
        let ps = paths(2);
        let p = ActiveStandby::new(Failback::Immediate);
        assert_eq!(pick(&p, &ps, 0b11, &read(1), S), 0);
        assert_eq!(pick(&p, &ps, 0b10, &read(1), 2 * S), 1);
        ps[0].set_state_at(PathState::Failed, 2 * S);
        ps[0].set_state_at(PathState::Usable, 3 * S);
        assert_eq!(pick(&p, &ps, 0b11, &read(1), 3 * S), 0);
    }

    #[test]
    fn manual_failback_waits_for_the_operator() {
        let ps = paths(2);
        let p = ActiveStandby::new(Failback::Manual);
        assert_eq!(pick(&p, &ps, 0b10, &read(1), S), 1);
        for t in 2..5 {
            assert_eq!(pick(&p, &ps, 0b11, &read(1), t * S), 1);
        }
        p.request_failback();
        assert_eq!(pick(&p, &ps, 0b11, &read(1), 6 * S), 0);
        assert_eq!(pick(&p, &ps, 0b11, &read(1), 7 * S), 0);
    }

    #[test]
    fn a_failback_request_while_home_does_not_linger() {
        let ps = paths(2);
        let p = ActiveStandby::new(Failback::Manual);
        assert_eq!(pick(&p, &ps, 0b11, &read(1), S), 0);
        p.request_failback();
        assert_eq!(pick(&p, &ps, 0b11, &read(1), 2 * S), 0);
        assert_eq!(pick(&p, &ps, 0b10, &read(1), 3 * S), 1);
        assert_eq!(
            pick(&p, &ps, 0b11, &read(1), 4 * S),
            1,
            "manual: no failback without a new request"
        );
    }

    #[test]
    fn delayed_failback() {
        let ps = paths(2);
        let p = ActiveStandby::new(Failback::Delay(Duration::from_secs(10)));
        assert_eq!(pick(&p, &ps, 0b01, &read(1), S), 0);
        ps[0].set_state_at(PathState::Failed, 2 * S);
        assert_eq!(pick(&p, &ps, 0b10, &read(1), 2 * S), 1);
        ps[0].set_state_at(PathState::Usable, 5 * S);
        assert_eq!(pick(&p, &ps, 0b11, &read(1), 6 * S), 1);
        assert_eq!(pick(&p, &ps, 0b11, &read(1), 14 * S), 1);
        assert_eq!(pick(&p, &ps, 0b11, &read(1), 15 * S), 0);
    }
}
