//! Path-selection policies. Each is a short function over the candidate
//! paths, as in dm-ps-* and the kernel's nvme multipath; one file each.
//!
//! The engine has already filtered the candidates to usable paths of the
//! best ANA group (optimized, else non-optimized), so a policy only ranks.

use std::fmt;
use std::time::Duration;

use crate::engine::IoInfo;
use crate::health::Failback;
use crate::path::{Path, PathId};
use crate::stats::PolicyEstimates;
use crate::time::Nanos;

/// A worker's own state for the installed policy: sums it adds up before
/// they go to the policy's shared ones (only `auto` keeps any).
pub(crate) use auto_local::Local as PolicyLocal;

mod active_standby;
mod adaptive;
mod auto;
mod auto_local;
mod auto_trial;
mod auto_tuning;
mod numa;
mod queue_depth;
mod round_robin;
mod service_time;

/// Names accepted by `--policy`, the configuration and the control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyName {
    RoundRobin,
    QueueDepth,
    ServiceTime,
    Adaptive,
    Numa,
    ActiveStandby,
    Auto,
}

impl PolicyName {
    pub const ALL: [PolicyName; 7] = [
        Self::RoundRobin,
        Self::QueueDepth,
        Self::ServiceTime,
        Self::Adaptive,
        Self::Numa,
        Self::ActiveStandby,
        Self::Auto,
    ];

    /// The canonical names, plus the anchors' aliases (`queue-length`,
    /// `failover`, `active-passive`, `latency`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "round-robin" => Some(Self::RoundRobin),
            "queue-depth" | "queue-length" => Some(Self::QueueDepth),
            "service-time" => Some(Self::ServiceTime),
            "adaptive" | "latency" => Some(Self::Adaptive),
            "numa" => Some(Self::Numa),
            "active-standby" | "failover" | "active-passive" => Some(Self::ActiveStandby),
            "auto" => Some(Self::Auto),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::RoundRobin => "round-robin",
            Self::QueueDepth => "queue-depth",
            Self::ServiceTime => "service-time",
            Self::Adaptive => "adaptive",
            Self::Numa => "numa",
            Self::ActiveStandby => "active-standby",
            Self::Auto => "auto",
        }
    }

    pub fn all() -> &'static [&'static str] {
        &[
            "round-robin",
            "queue-depth",
            "service-time",
            "adaptive",
            "numa",
            "active-standby",
            "auto",
        ]
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy and its tunables.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    pub name: PolicyName,
    /// `round-robin`: I/Os sent down a path before moving on (SPDK `rr_min_io`).
    pub rr_min_io: u32,
    /// `adaptive`: EWMA shift (new = (old * (2^shift - 1) + batch mean) >> shift).
    pub ewma_shift: u32,
    /// `adaptive`: how often batch means are folded and weights recomputed.
    /// The anchor uses 15 s; ours re-weights within 1 s of a change.
    pub weight_period: Duration,
    /// `active-standby`: when a recovered preferred path takes I/O back.
    pub failback: Failback,
    /// NUMA distance table (`distances[a][b]`, as in
    /// `/sys/devices/system/node/nodeN/distance`); empty: 10 local, 20 remote.
    pub numa_distances: Vec<Vec<u32>>,
}

impl PolicyConfig {
    pub fn new(name: PolicyName) -> Self {
        Self {
            name,
            rr_min_io: 1,
            ewma_shift: 3,
            weight_period: Duration::from_millis(100),
            failback: Failback::Immediate,
            numa_distances: Vec::new(),
        }
    }
}

impl From<PolicyName> for PolicyConfig {
    fn from(name: PolicyName) -> Self {
        Self::new(name)
    }
}

/// Who submits an I/O, and when.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubmitContext {
    pub now: Nanos,
    /// NUMA node of the submitting worker (`numa` policy); `None`: unknown.
    pub numa_node: Option<u32>,
}

/// A policy chooses one path among `candidates` (a bit mask over path
/// indices, already filtered to selectable paths of the best ANA group).
pub(crate) trait Policy: Send + Sync + fmt::Debug {
    fn select(
        &self,
        paths: &[Path],
        candidates: u64,
        io: &IoInfo,
        ctx: &SubmitContext,
    ) -> Option<PathId>;

    /// A successful completion of `io` on `path`, `latency` after its
    /// submission (the load is already released). `local`: the completing
    /// worker's own state for this policy, where it has one.
    fn completed(
        &self,
        _paths: &[Path],
        _path: PathId,
        _io: &IoInfo,
        _latency: Nanos,
        _now: Nanos,
        _local: Option<&mut PolicyLocal>,
    ) {
    }

    /// The operator asked for failback (`active-standby` with manual failback).
    fn request_failback(&self) {}

    fn estimates(&self, _path: PathId) -> PolicyEstimates {
        PolicyEstimates::default()
    }
}

pub(crate) fn build(cfg: &PolicyConfig, paths: usize) -> Box<dyn Policy> {
    match cfg.name {
        PolicyName::RoundRobin => Box::new(round_robin::RoundRobin::new(cfg.rr_min_io)),
        PolicyName::QueueDepth => Box::new(queue_depth::QueueDepth::default()),
        PolicyName::ServiceTime => Box::new(service_time::ServiceTime::default()),
        PolicyName::Adaptive => Box::new(adaptive::Adaptive::new(
            paths,
            cfg.ewma_shift,
            cfg.weight_period,
        )),
        PolicyName::Numa => Box::new(numa::Numa::new(cfg.numa_distances.clone())),
        PolicyName::ActiveStandby => Box::new(active_standby::ActiveStandby::new(cfg.failback)),
        PolicyName::Auto => Box::new(auto::Auto::new(paths)),
    }
}

/// Path indices set in `mask`, lowest first.
pub(crate) fn indices(mask: u64) -> impl Iterator<Item = usize> {
    let mut m = mask;
    std::iter::from_fn(move || {
        if m == 0 {
            return None;
        }
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        Some(i)
    })
}

pub(crate) fn has(mask: u64, i: usize) -> bool {
    i < 64 && mask & (1 << i) != 0
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers for the policies' unit tests.
    use super::*;
    use crate::engine::IoKind;

    pub fn paths(n: usize) -> Vec<Path> {
        (0..n)
            .map(|i| Path::new(format!("p{i}"), 1, false))
            .collect()
    }

    pub fn all(paths: &[Path]) -> u64 {
        (1u64 << paths.len()) - 1
    }

    pub fn read(bytes: u64) -> IoInfo {
        IoInfo {
            kind: IoKind::Read,
            bytes,
        }
    }

    pub fn at(now: Nanos) -> SubmitContext {
        SubmitContext {
            now,
            numa_node: None,
        }
    }

    /// Selects and accounts like the engine does.
    pub fn pick(p: &dyn Policy, paths: &[Path], mask: u64, io: &IoInfo, now: Nanos) -> usize {
        let id = p.select(paths, mask, io, &at(now)).expect("a path");
        paths[id.0].acquire(io.bytes, now);
        id.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (n, s) in PolicyName::ALL.iter().zip(PolicyName::all()) {
            assert_eq!(n.as_str(), *s);
            assert_eq!(PolicyName::parse(s), Some(*n));
        }
        assert_eq!(
            PolicyName::parse("failover"),
            Some(PolicyName::ActiveStandby)
        );
        assert_eq!(
            PolicyName::parse("queue-length"),
            Some(PolicyName::QueueDepth)
        );
        assert_eq!(PolicyName::parse("fastest"), None);
    }

    #[test]
    fn indices_of_mask() {
        assert_eq!(indices(0b1011_0000).collect::<Vec<_>>(), vec![4, 5, 7]);
        assert_eq!(indices(0).count(), 0);
        assert_eq!(indices(1 << 63).collect::<Vec<_>>(), vec![63]);
    }
}
