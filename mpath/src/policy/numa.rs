//! `numa` (the Linux default): the candidate whose device is nearest the
//! submitting worker's NUMA node; ties go to the first path. The backend
//! reads the nodes from sysfs and passes them in (`Path::set_numa_node`,
//! `SubmitContext::numa_node`, `PolicyConfig::numa_distances`). On one node
//! every path is equally near: it behaves like active-standby on the first
//! usable path.

use super::{indices, Policy, SubmitContext};
use crate::engine::IoInfo;
use crate::path::{Path, PathId};

/// The kernel's `LOCAL_DISTANCE` / `REMOTE_DISTANCE`.
const LOCAL: u32 = 10;
const REMOTE: u32 = 20;

#[derive(Debug)]
pub(crate) struct Numa {
    distances: Vec<Vec<u32>>,
}

impl Numa {
    pub fn new(distances: Vec<Vec<u32>>) -> Self {
        Self { distances }
    }

    /// Distance from the worker's node to a path's node; an unknown worker
    /// node makes every path equally near.
    fn distance(&self, worker: Option<u32>, path: Option<u32>) -> u32 {
        let (Some(w), Some(p)) = (worker, path) else {
            return if worker.is_none() { LOCAL } else { REMOTE };
        };
        let table = self
            .distances
            .get(w as usize)
            .and_then(|row| row.get(p as usize));
        match table {
            Some(&d) => d,
            None if w == p => LOCAL,
            None => REMOTE,
        }
    }
}

impl Policy for Numa {
    fn select(
        &self,
        paths: &[Path],
        candidates: u64,
        _: &IoInfo,
        ctx: &SubmitContext,
    ) -> Option<PathId> {
        indices(candidates)
            .min_by_key(|&i| self.distance(ctx.numa_node, paths[i].numa_node()))
            .map(PathId)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn on(node: u32) -> SubmitContext {
        SubmitContext {
            now: 0,
            numa_node: Some(node),
        }
    }

    #[test]
    fn nearest_path_to_the_worker() {
        let ps = paths(3);
        ps[0].set_numa_node(Some(0));
        ps[1].set_numa_node(Some(1));
        ps[2].set_numa_node(Some(1));
        let p = Numa::new(vec![]);
        let io = read(4096);
        assert_eq!(p.select(&ps, 0b111, &io, &on(1)), Some(PathId(1)));
        assert_eq!(p.select(&ps, 0b111, &io, &on(0)), Some(PathId(0)));
        // the local path failed: the first remote one
        assert_eq!(p.select(&ps, 0b110, &io, &on(0)), Some(PathId(1)));
        assert_eq!(p.select(&ps, 0b101, &io, &on(1)), Some(PathId(2)));
    }

    #[test]
    fn distance_table() {
        let ps = paths(2);
        ps[0].set_numa_node(Some(2));
        ps[1].set_numa_node(Some(1));
        let p = Numa::new(vec![vec![10, 21, 31], vec![21, 10, 21], vec![31, 21, 10]]);
        assert_eq!(p.select(&ps, 0b11, &read(1), &on(0)), Some(PathId(1)));
    }

    #[test]
    fn one_node_is_active_standby_on_the_first_path() {
        let ps = paths(3);
        let p = Numa::new(vec![]);
        for _ in 0..5 {
            assert_eq!(pick(&p, &ps, all(&ps), &read(4096), 0), 0);
        }
        assert_eq!(pick(&p, &ps, 0b110, &read(4096), 0), 1);
        assert_eq!(p.select(&ps, 0b111, &read(1), &on(0)), Some(PathId(0)));
    }
}
