//! `round-robin` (Linux, dm, SPDK): the next candidate after the last one
//! chosen, `rr_min_io` I/Os at a time (SPDK).

use std::sync::atomic::{AtomicU64, Ordering};

use super::{has, Policy, SubmitContext};
use crate::engine::IoInfo;
use crate::path::{Path, PathId};

#[derive(Debug)]
pub(crate) struct RoundRobin {
    rr_min_io: u64,
    /// I/Os selected so far; `n / rr_min_io` names the turn's path.
    issued: AtomicU64,
}

impl RoundRobin {
    pub fn new(rr_min_io: u32) -> Self {
        Self {
            rr_min_io: u64::from(rr_min_io.max(1)),
            issued: AtomicU64::new(0),
        }
    }
}

impl Policy for RoundRobin {
    fn select(
        &self,
        paths: &[Path],
        candidates: u64,
        _: &IoInfo,
        _: &SubmitContext,
    ) -> Option<PathId> {
        if candidates == 0 {
            return None;
        }
        let n = paths.len();
        let turn = self.issued.fetch_add(1, Ordering::Relaxed) / self.rr_min_io;
        let start = (turn % n as u64) as usize;
        // `(start + i) % n` without a division a step (both are below n).
        (start..n)
            .chain(0..start)
            .find(|&i| has(candidates, i))
            .map(PathId)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn alternates() {
        let ps = paths(3);
        let p = RoundRobin::new(1);
        let picks: Vec<_> = (0..6)
            .map(|_| pick(&p, &ps, all(&ps), &read(4096), 0))
            .collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn rr_min_io_keeps_a_path_for_n_ios() {
        let ps = paths(2);
        let p = RoundRobin::new(3);
        let picks: Vec<_> = (0..8)
            .map(|_| pick(&p, &ps, all(&ps), &read(4096), 0))
            .collect();
        assert_eq!(picks, vec![0, 0, 0, 1, 1, 1, 0, 0]);
    }

    #[test]
    fn skips_non_candidates() {
        let ps = paths(3);
        let p = RoundRobin::new(1);
        let picks: Vec<_> = (0..4)
            .map(|_| pick(&p, &ps, 0b101, &read(4096), 0))
            .collect();
        assert_eq!(picks, vec![0, 2, 2, 0]);
        assert_eq!(p.select(&ps, 0, &read(1), &at(0)), None);
    }
}
