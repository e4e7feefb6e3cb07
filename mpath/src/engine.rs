//! The engine: paths plus a policy. Workers call `select` on submission and
//! `complete` on completion; nothing here takes a lock.

use std::time::Duration;

use crate::classify::{classify, Disposition, IoOutcome};
use crate::path::{AnaState, Path, PathId, PathState};
use crate::policy::{self, Policy, PolicyName};

/// At most this many paths per disk (candidate sets are `u64` masks).
pub const MAX_PATHS: usize = 64;

/// The I/O group of a request (adaptive policies keep separate statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
    Other,
}

/// What a policy may look at when choosing a path.
#[derive(Clone, Copy, Debug)]
pub struct IoInfo {
    pub kind: IoKind,
    pub bytes: u64,
}

/// How a path is configured at start-up.
#[derive(Clone, Debug)]
pub struct PathConfig {
    pub name: String,
    pub weight: u32,
    pub preferred: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("no paths given")]
    NoPaths,
    #[error("too many paths: {0} (at most {MAX_PATHS})")]
    TooManyPaths(usize),
    #[error("duplicate path name {0:?}")]
    DuplicateName(String),
}

#[derive(Debug)]
pub struct Engine {
    paths: Vec<Path>,
    policy: Box<dyn Policy>,
    policy_name: PolicyName,
    max_retries: u32,
}

impl Engine {
    pub fn new(configs: &[PathConfig], policy: PolicyName) -> Result<Self, EngineError> {
        if configs.is_empty() {
            return Err(EngineError::NoPaths);
        }
        if configs.len() > MAX_PATHS {
            return Err(EngineError::TooManyPaths(configs.len()));
        }
        for (i, c) in configs.iter().enumerate() {
            if configs[..i].iter().any(|o| o.name == c.name) {
                return Err(EngineError::DuplicateName(c.name.clone()));
            }
        }
        Ok(Self {
            paths: configs
                .iter()
                .map(|c| Path::new(c.name.clone(), c.weight, c.preferred))
                .collect(),
            policy: policy::build(policy),
            policy_name: policy,
            max_retries: 3,
        })
    }

    pub fn paths(&self) -> &[Path] {
        &self.paths
    }

    pub fn path(&self, id: PathId) -> &Path {
        &self.paths[id.0]
    }

    pub fn policy_name(&self) -> PolicyName {
        self.policy_name
    }

    /// Selectable paths of the best ANA group, minus `exclude`.
    fn candidates(&self, exclude: u64) -> u64 {
        let mut optimized = 0u64;
        let mut non_optimized = 0u64;
        for (i, p) in self.paths.iter().enumerate() {
            if exclude & (1 << i) != 0 || p.state() != PathState::Usable {
                continue;
            }
            match p.ana_state() {
                AnaState::Optimized => optimized |= 1 << i,
                AnaState::NonOptimized => non_optimized |= 1 << i,
                _ => {}
            }
        }
        if optimized != 0 {
            optimized
        } else {
            non_optimized
        }
    }

    /// Picks a path for `io` (never one in `exclude`, a mask of path
    /// indices) and accounts the I/O on it. `None`: no usable path.
    pub fn select(&self, io: &IoInfo, exclude: u64) -> Option<PathId> {
        let candidates = self.candidates(exclude);
        let id = self.policy.select(&self.paths, candidates, io)?;
        self.paths[id.0].acquire(io.bytes);
        Some(id)
    }

    /// Accounts `io` on a path chosen by the caller (a flush that must reach
    /// that path, a retry on the same path). `false` if it is not selectable.
    pub fn select_path(&self, path: PathId, io: &IoInfo) -> bool {
        let Some(p) = self.paths.get(path.0) else {
            return false;
        };
        if !p.selectable() {
            return false;
        }
        p.acquire(io.bytes);
        true
    }

    /// Releases `io`'s load on `path` without classifying (an I/O dropped
    /// after its frontend went away).
    pub fn release(&self, path: PathId, io: &IoInfo) {
        self.paths[path.0].release(io.bytes);
    }

    /// Accounts the completion of `io` on `path` and decides what happens
    /// next. A path error marks the path failed.
    pub fn complete(
        &self,
        path: PathId,
        io: &IoInfo,
        _latency: Duration,
        outcome: IoOutcome,
        retries: u32,
    ) -> Disposition {
        let p = &self.paths[path.0];
        p.release(io.bytes);
        let d = classify(outcome, retries, self.max_retries, [0; 3]);
        match d {
            Disposition::Done => {}
            Disposition::Failover => {
                p.errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                p.set_state(PathState::Failed);
            }
            Disposition::Fail | Disposition::RetrySamePath { .. } => {
                p.errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn round_robin_alternates_and_accounts() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        let picks: Vec<_> = (0..4).map(|_| e.select(&READ, 0).unwrap().0).collect();
        assert_eq!(picks, vec![0, 1, 0, 1]);
        assert_eq!(e.path(PathId(0)).in_flight_requests(), 2);
        assert_eq!(e.path(PathId(1)).in_flight_bytes(), 8192);
    }

    #[test]
    fn failover_marks_failed_and_excludes() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        let p = e.select(&READ, 0).unwrap();
        let d = e.complete(p, &READ, Duration::ZERO, IoOutcome::Errno(19), 0);
        assert_eq!(d, Disposition::Failover);
        assert_eq!(e.path(p).state(), PathState::Failed);
        for _ in 0..4 {
            assert_ne!(e.select(&READ, 0), Some(p));
        }
        e.path(PathId(1 - p.0)).set_state(PathState::Offline);
        assert_eq!(e.select(&READ, 0), None);
    }

    #[test]
    fn optimized_before_non_optimized() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        e.path(PathId(0)).set_ana_state(AnaState::NonOptimized);
        for _ in 0..4 {
            assert_eq!(e.select(&READ, 0), Some(PathId(1)));
        }
        assert_eq!(e.select(&READ, 1 << 1), Some(PathId(0)));
        e.path(PathId(0)).set_ana_state(AnaState::Inaccessible);
        assert_eq!(e.select(&READ, 1 << 1), None);
    }

    #[test]
    fn select_path_refuses_unselectable_paths() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        assert!(e.select_path(PathId(1), &READ));
        assert_eq!(e.path(PathId(1)).in_flight_requests(), 1);
        e.path(PathId(0)).set_state(PathState::Failed);
        assert!(!e.select_path(PathId(0), &READ));
        assert!(!e.select_path(PathId(7), &READ));
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
}
