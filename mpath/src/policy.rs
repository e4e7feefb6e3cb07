//! Path-selection policies. Each is a short function over the candidate
//! paths, as in dm-ps-* and the kernel's nvme multipath.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::engine::IoInfo;
use crate::path::{Path, PathId};

/// Names accepted by `--policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyName {
    RoundRobin,
}

impl PolicyName {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "round-robin" => Some(Self::RoundRobin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::RoundRobin => "round-robin",
        }
    }

    pub fn all() -> &'static [&'static str] {
        &["round-robin"]
    }
}

/// A policy chooses one path among `candidates` (a bit mask over path
/// indices, already filtered to selectable paths of the best ANA group).
pub(crate) trait Policy: Send + Sync + std::fmt::Debug {
    fn select(&self, paths: &[Path], candidates: u64, io: &IoInfo) -> Option<PathId>;
}

pub(crate) fn build(name: PolicyName) -> Box<dyn Policy> {
    match name {
        PolicyName::RoundRobin => Box::new(RoundRobin::default()),
    }
}

/// The next candidate after the last one chosen.
#[derive(Debug, Default)]
pub(crate) struct RoundRobin {
    next: AtomicUsize,
}

impl Policy for RoundRobin {
    fn select(&self, paths: &[Path], candidates: u64, _io: &IoInfo) -> Option<PathId> {
        if candidates == 0 {
            return None;
        }
        let n = paths.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| candidates & (1 << i) != 0)
            .map(PathId)
    }
}
