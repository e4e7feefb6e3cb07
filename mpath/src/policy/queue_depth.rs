//! `queue-depth` (Linux, SPDK) / `queue-length` (dm): the candidate with the
//! fewest requests in flight; ties rotate, as dm's queue-length does.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::{has, Policy, SubmitContext};
use crate::engine::IoInfo;
use crate::path::{Path, PathId};

#[derive(Debug, Default)]
pub(crate) struct QueueDepth {
    rotor: AtomicUsize,
}

impl Policy for QueueDepth {
    fn select(
        &self,
        paths: &[Path],
        candidates: u64,
        _: &IoInfo,
        _: &SubmitContext,
    ) -> Option<PathId> {
        let n = paths.len();
        let start = self.rotor.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|i| (start + i) % n)
            .filter(|&i| has(candidates, i))
            .min_by_key(|&i| paths[i].in_flight_requests())
            .map(PathId)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn fewest_in_flight_wins() {
        let ps = paths(3);
        let p = QueueDepth::default();
        ps[0].acquire(4096, 0);
        ps[0].acquire(4096, 0);
        ps[1].acquire(1 << 20, 0); // bytes do not matter, requests do
        assert_eq!(pick(&p, &ps, all(&ps), &read(4096), 0), 2);
        assert_eq!(
            pick(&p, &ps, all(&ps), &read(4096), 0),
            1,
            "tie 1/2: rotates"
        );
        assert_eq!(pick(&p, &ps, 0b001, &read(4096), 0), 0);
    }

    #[test]
    fn ties_rotate() {
        let ps = paths(2);
        let p = QueueDepth::default();
        let picks: Vec<_> = (0..4)
            .map(|_| {
                let i = pick(&p, &ps, all(&ps), &read(4096), 0);
                ps[i].release(4096, 0);
                i
            })
            .collect();
        assert_eq!(picks, vec![0, 1, 0, 1]);
    }
}
