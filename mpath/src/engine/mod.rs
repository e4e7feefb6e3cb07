//! The engine: paths plus a policy. Workers call `select_attempt` on
//! submission and `complete_attempt_at` on completion; nothing there takes a lock (the policy is read
//! through an `ArcSwap`, loads are per-path atomics, statistics go to the
//! worker's own [`StatsShard`]). The health record of a path is locked only
//! when it fails or is probed; its marginal record (with detection on) once
//! per sample window, to take in what the shards counted.
//!
//! The path table is dynamic without locks on the I/O path: [`MAX_PATHS`]
//! slots are allocated up front and the first `count` are in use. A slot is
//! filled completely before `count` is raised (Release; readers load it
//! with Acquire), so a worker never sees a half-made path. Slots are never
//! reused: a removed path stays in its slot in state `removed` (its
//! statistics stay readable) until the process ends, so a [`PathId`] held
//! by an I/O, a timer or a probe always names the same path.
//!
//! By concern: `select` (candidates, the policy's pick, rounds), `complete`
//! (accounting a try, its disposition), `health` (failing, probing,
//! operator states, no-path waits), `stats` (what is reported); the
//! marginal-path glue is in `crate::marginal`.
//!
//! Draining (offline, remove) is a handshake without locks: a selection raises
//! the path's in-flight count and then re-reads its state; the control
//! plane stores the new state and then reads the in-flight count (all
//! SeqCst). Either the selecting worker sees the new state and backs out, or
//! the control plane sees its I/O and waits for it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

pub(crate) use crate::policy_cache::PolicyCache;
use crate::policy_cache::PolicyRef;

use crate::attempts::BadRanges;
use crate::health::RecoveryConfig;
use crate::marginal::MarginalConfig;
use crate::path::{Path, PathId, PathState};
use crate::policy::{self, Policy, PolicyConfig, PolicyName};
use crate::shard::{Arena, StatsShard};
use crate::stats::PathTotals;
use crate::time::{Clock, MonotonicClock, Nanos};

mod complete;
mod health;
mod select;
mod stats;
#[cfg(test)]
mod tests;

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

/// How a path is configured at start-up. Further per-path options (NUMA
/// node, CRDT, write failover delay) are set on the [`Path`] afterwards.
#[derive(Clone, Debug)]
pub struct PathConfig {
    pub name: String,
    pub weight: u32,
    pub preferred: bool,
}

/// Engine-wide settings.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub policy: PolicyConfig,
    /// Same-path retries of a retryable error before it fails (SPDK: 3).
    pub max_retries: u32,
    pub recovery: RecoveryConfig,
    /// How long a request waits for a usable path (0: fail at once).
    pub no_path_timeout: Duration,
    /// Marginal-path detection (off by default); a path may override it.
    pub marginal: MarginalConfig,
    pub clock: Arc<dyn Clock>,
}

impl EngineOptions {
    pub fn new(policy: impl Into<PolicyConfig>) -> Self {
        Self {
            policy: policy.into(),
            max_retries: 3,
            recovery: RecoveryConfig::default(),
            no_path_timeout: Duration::from_secs(30),
            marginal: MarginalConfig::default(),
            clock: Arc::new(MonotonicClock::default()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("no paths given")]
    NoPaths,
    #[error("too many paths: {0} (at most {MAX_PATHS})")]
    TooManyPaths(usize),
    #[error("duplicate path name {0:?}")]
    DuplicateName(String),
    #[error(
        "no free path slot: all {MAX_PATHS} are used (a removed path keeps its slot until the daemon restarts)"
    )]
    NoFreeSlot,
    #[error("a path name must not be empty")]
    EmptyName,
}

/// Why [`Engine::request_failback`] cannot move I/O back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FailbackError {
    #[error("failback applies to the active-standby policy only (the policy is {0})")]
    NotActiveStandby(PolicyName),
    #[error("no preferred path is usable ({0})")]
    PreferredNotUsable(String),
    #[error("no path is usable")]
    NoUsablePath,
}

/// Requests that found no usable path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NoPathStats {
    /// Waiting now.
    pub waiting: u64,
    /// Ever parked.
    pub parked: u64,
    /// Re-sent after a path came back.
    pub resumed: u64,
    /// Failed at `no_path_timeout`.
    pub timed_out: u64,
}

#[derive(Debug, Default)]
struct NoPathCounters {
    waiting: AtomicU64,
    parked: AtomicU64,
    resumed: AtomicU64,
    timed_out: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct Installed {
    config: PolicyConfig,
    policy: Box<dyn Policy>,
}

#[derive(Debug)]
pub struct Engine {
    /// `MAX_PATHS` slots; the first `count` hold paths.
    slots: Box<[Path]>,
    count: AtomicUsize,
    /// Serialises `add_path` (control plane only; never taken by workers).
    adding: Mutex<()>,
    policy: ArcSwap<Installed>,
    /// Bumped after every `set_policy` (see [`PolicyCache`]).
    policy_generation: AtomicU64,
    max_retries: u32,
    recovery: RecoveryConfig,
    no_path_timeout: Duration,
    no_path: NoPathCounters,
    /// Ranges that recently failed on every path (see `attempts`).
    bad_ranges: BadRanges,
    /// Marginal-path detection's settings (see `marginal`).
    pub(crate) marginal: MarginalConfig,
    clock: Arc<dyn Clock>,
    /// The workers' statistics shards (see `shard`).
    pub(crate) shards: Arc<Arena>,
    /// Per path slot: the totals at the last `reset_stats` (readers report
    /// what the shards counted since).
    stats_base: Mutex<Vec<PathTotals>>,
}

impl Engine {
    pub fn new(configs: &[PathConfig], policy: PolicyName) -> Result<Self, EngineError> {
        Self::with_options(configs, EngineOptions::new(policy))
    }

    pub fn with_options(configs: &[PathConfig], opts: EngineOptions) -> Result<Self, EngineError> {
        if configs.is_empty() {
            return Err(EngineError::NoPaths);
        }
        if configs.len() > MAX_PATHS {
            return Err(EngineError::TooManyPaths(configs.len()));
        }
        for (i, c) in configs.iter().enumerate() {
            if c.name.is_empty() {
                return Err(EngineError::EmptyName);
            }
            if configs[..i].iter().any(|o| o.name == c.name) {
                return Err(EngineError::DuplicateName(c.name.clone()));
            }
        }
        let slots: Box<[Path]> = (0..MAX_PATHS).map(|_| Path::vacant()).collect();
        for (p, c) in slots.iter().zip(configs) {
            p.occupy(c.name.clone(), c.weight, c.preferred);
        }
        for p in slots.iter() {
            p.set_marginal_on(opts.marginal.enabled());
        }
        Ok(Self {
            slots,
            count: AtomicUsize::new(configs.len()),
            adding: Mutex::new(()),
            // Policies keep per-path state for every slot, so paths added
            // later need no rebuild.
            policy: ArcSwap::from_pointee(Installed {
                policy: policy::build(&opts.policy, MAX_PATHS),
                config: opts.policy,
            }),
            policy_generation: AtomicU64::new(0),
            max_retries: opts.max_retries,
            recovery: opts.recovery,
            no_path_timeout: opts.no_path_timeout,
            no_path: NoPathCounters::default(),
            bad_ranges: BadRanges::default(),
            marginal: opts.marginal,
            clock: opts.clock,
            shards: Arena::new(),
            stats_base: Mutex::new(vec![PathTotals::default(); MAX_PATHS]),
        })
    }

    /// A statistics shard for a worker (one per worker, held for its life;
    /// see `shard`): what the worker's calls count goes there without a
    /// locked instruction. A dropped shard's counts stay in the totals.
    pub fn stats_shard(&self) -> StatsShard {
        self.shards.take()
    }

    /// Shards handed out so far (the common one included).
    #[cfg(test)]
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.shards().len()
    }

    /// The paths in use, removed ones included (they keep their slot).
    pub fn paths(&self) -> &[Path] {
        &self.slots[..self.count.load(Ordering::Acquire)]
    }

    pub fn path(&self, id: PathId) -> &Path {
        &self.slots[id.0]
    }

    /// The path named `name`: the one not removed, else the latest removed
    /// one of that name (its statistics stay readable).
    pub fn path_id(&self, name: &str) -> Option<PathId> {
        let paths = self.paths();
        paths
            .iter()
            .rposition(|p| p.name == name && p.state() != PathState::Removed)
            .or_else(|| paths.iter().rposition(|p| p.name == name))
            .map(PathId)
    }

    /// Adds a path while I/O runs, in the next free slot. `init` runs once
    /// the slot holds the path and before any worker can see it: the caller
    /// sets the path's options and its own per-path state (driver) there.
    /// Names must be unique among paths that are not removed.
    pub fn add_path(
        &self,
        config: &PathConfig,
        init: impl FnOnce(PathId, &Path),
    ) -> Result<PathId, EngineError> {
        let _adding = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        if config.name.is_empty() {
            return Err(EngineError::EmptyName);
        }
        let n = self.count.load(Ordering::Acquire);
        let taken = self.slots[..n]
            .iter()
            .any(|p| p.name == config.name.as_str() && p.state() != PathState::Removed);
        if taken {
            return Err(EngineError::DuplicateName(config.name.clone()));
        }
        if n == MAX_PATHS {
            return Err(EngineError::NoFreeSlot);
        }
        let id = PathId(n);
        let p = &self.slots[n];
        p.occupy(config.name.clone(), config.weight, config.preferred);
        p.usable_since_now(self.now());
        init(id, p);
        self.count.store(n + 1, Ordering::Release);
        Ok(id)
    }

    /// Paths in state `usable`, other than `except`.
    pub fn usable_paths_except(&self, except: Option<PathId>) -> usize {
        self.paths()
            .iter()
            .enumerate()
            .filter(|&(i, p)| Some(PathId(i)) != except && p.state() == PathState::Usable)
            .count()
    }

    /// Whether no I/O is accounted on `path` any more. After the path left
    /// `usable` (offline, removed), once this is true no worker will send
    /// it anything new: the drain is complete.
    pub fn drained(&self, path: PathId) -> bool {
        self.path(path).idle()
    }

    /// The engine's clock (the `*_at` methods take the time instead).
    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    pub fn policy_name(&self) -> PolicyName {
        self.policy.load().config.name
    }

    pub fn policy_config(&self) -> PolicyConfig {
        self.policy.load().config.clone()
    }

    /// Switches policy while I/O runs: loads live in the paths, so nothing
    /// in flight is lost; what the old policy learned is.
    pub fn set_policy(&self, config: PolicyConfig) {
        self.policy.store(Arc::new(Installed {
            policy: policy::build(&config, MAX_PATHS),
            config,
        }));
        // After the store: a worker that sees the new generation loads the
        // new policy.
        self.policy_generation.fetch_add(1, Ordering::Release);
    }

    /// The installed policy as a worker holds it in `cache` (`None`: a
    /// shard of another engine, which gets this engine's, loaded).
    #[inline]
    fn installed<'a>(&'a self, cache: Option<&'a PolicyCache>) -> PolicyRef<'a> {
        let Some(cache) = cache else {
            return PolicyRef::Loaded(self.policy.load());
        };
        let generation = self.policy_generation.load(Ordering::Acquire);
        PolicyRef::Cached(cache.get(generation, || self.policy.load_full()))
    }

    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    pub fn recovery(&self) -> &RecoveryConfig {
        &self.recovery
    }
}
