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

use crate::attempts::{Attempts, BadRanges, Selection};
use crate::classify::{classify, ghost_write_delay, is_ambiguous, Disposition, IoOutcome};
use crate::health::{no_path_decision, NoPathDecision, ProbeOutcome, RecoveryConfig};
use crate::marginal::{MarginalChange, MarginalConfig};
use crate::path::{AnaState, MarginalState, Path, PathId, PathState};
use crate::policy::{self, Policy, PolicyConfig, PolicyLocal, PolicyName, SubmitContext};
use crate::shard::{Arena, Cells, StatsShard};
use crate::stats::{bump, PathStatsSnapshot, PathTotals};
use crate::time::{nanos, Clock, MonotonicClock, Nanos};

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
    marginal: MarginalConfig,
    clock: Arc<dyn Clock>,
    /// The workers' statistics shards (see `shard`).
    shards: Arc<Arena>,
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

    /// Selectable paths of the best ANA group, minus `exclude`.
    fn candidates(paths: &[Path], exclude: u64) -> u64 {
        Self::candidates_and_aside(paths, exclude).0
    }

    /// [`Engine::candidates`], and the marginal paths of the same group set
    /// aside from them (what `trickle` looks at), in one pass over the paths.
    fn candidates_and_aside(paths: &[Path], exclude: u64) -> (u64, u64) {
        let mut optimized = 0u64;
        let mut non_optimized = 0u64;
        let mut marginal = 0u64;
        for (i, p) in paths.iter().enumerate() {
            if exclude & (1 << i) != 0 {
                continue;
            }
            // One load for the state, the ANA state and the marginal flag.
            let s = p.standing();
            if s.optimized() {
                optimized |= 1 << i;
            } else if s.non_optimized() {
                non_optimized |= 1 << i;
            } else {
                continue;
            }
            if s.marginal() {
                marginal |= 1 << i;
            }
        }
        let all = if optimized != 0 {
            optimized
        } else {
            non_optimized
        };
        // Marginal paths only when no healthy one is usable.
        let healthy = all & !marginal;
        if healthy != 0 {
            (healthy, all & marginal)
        } else {
            (all, 0)
        }
    }

    /// [`Engine::candidates`] before marginal paths are set aside.
    fn accessible(paths: &[Path], exclude: u64) -> u64 {
        let mut optimized = 0u64;
        let mut non_optimized = 0u64;
        for (i, p) in paths.iter().enumerate() {
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

    /// Whether any path could take I/O now.
    pub fn any_usable(&self) -> bool {
        Self::candidates(self.paths(), 0) != 0
    }

    // Inlined into the selections: a call of its own spilled half its
    // arguments.
    #[inline(always)]
    fn select_in(
        &self,
        io: &IoInfo,
        exclude: u64,
        ctx: &SubmitContext,
        cells: &Cells,
        policy: &Installed,
    ) -> Option<PathId> {
        let paths = self.paths();
        let (candidates, aside) = Self::candidates_and_aside(paths, exclude);
        if candidates == 0 {
            return None;
        }
        let trickled = match aside {
            0 => None,
            _ => self.trickle(paths, aside, ctx.now),
        };
        let id = match trickled {
            Some(id) => id,
            None => policy.policy.select(paths, candidates, io, ctx)?,
        };
        let p = &paths[id.0];
        p.acquire(io.bytes, ctx.now);
        // The drain handshake: the path may have gone offline or been
        // removed since `candidates` looked at it.
        if p.state() == PathState::Usable {
            cells.add(&cells.path(id.0).selected, 1);
            return Some(id);
        }
        p.unacquire(io.bytes, ctx.now);
        self.reselect(io, exclude | 1 << id.0, ctx, cells, policy)
    }

    /// [`Engine::select_in`] out of line, for the rare second selections:
    /// without a path that went out of service as it was picked (at most
    /// once per path: the mask fills), and in a new round. Apart, so that
    /// the common case keeps its registers.
    #[cold]
    #[inline(never)]
    fn reselect(
        &self,
        io: &IoInfo,
        exclude: u64,
        ctx: &SubmitContext,
        cells: &Cells,
        policy: &Installed,
    ) -> Option<PathId> {
        self.select_in(io, exclude, ctx, cells, policy)
    }

    /// Accounts `io` on a path chosen by the caller (a flush that must reach
    /// that path, a retry on the same path), counted in `shard`. `false` if
    /// it is not selectable.
    pub fn select_path_at(
        &self,
        path: PathId,
        io: &IoInfo,
        now: Nanos,
        shard: &StatsShard,
    ) -> bool {
        let Some(p) = self.paths().get(path.0) else {
            return false;
        };
        if !p.selectable() {
            return false;
        }
        p.acquire(io.bytes, now);
        // The drain handshake, as in `select_in`.
        if p.state() != PathState::Usable {
            p.unacquire(io.bytes, now);
            return false;
        }
        let cells = shard.cells_in(&self.shards);
        cells.add(&cells.path(path.0).selected, 1);
        true
    }

    /// Releases `io`'s load on `path` without classifying (an I/O dropped
    /// after its frontend went away).
    pub fn release(&self, path: PathId, io: &IoInfo) {
        self.path(path).release(io.bytes, self.now());
    }

    /// Accounts a success: the load released, a good result
    /// for the marginal detector, the statistics, and the policy's sample.
    // Inlined: a separate call passed its arguments on every completion.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn account_done(
        &self,
        path: PathId,
        io: &IoInfo,
        latency: Duration,
        now: Nanos,
        cells: &Cells,
        policy: &Installed,
        local: Option<&mut PolicyLocal>,
    ) {
        self.path(path).release(io.bytes, now);
        self.note_marginal(path, Disposition::Done, IoOutcome::Ok, now, cells);
        let s = cells.path(path.0);
        let lat = nanos(latency);
        match io.kind {
            IoKind::Read => {
                cells.add(&s.reads, 1);
                cells.add(&s.read_bytes, io.bytes);
                cells.record(&s.read_latency, lat);
            }
            IoKind::Write => {
                cells.add(&s.writes, 1);
                cells.add(&s.write_bytes, io.bytes);
                cells.record(&s.write_latency, lat);
            }
            IoKind::Other => cells.add(&s.others, 1),
        }
        policy
            .policy
            .completed(self.paths(), path, io, lat, now, local);
    }

    /// Accounts any other disposition: the load released, the statistics,
    /// and a path error marks the path failed (out of line: rare).
    #[inline(never)]
    fn account_error(
        &self,
        path: PathId,
        io: &IoInfo,
        d: Disposition,
        outcome: IoOutcome,
        now: Nanos,
        cells: &Cells,
    ) {
        let p = self.path(path);
        p.release(io.bytes, now);
        self.note_marginal(path, d, outcome, now, cells);
        let s = cells.path(path.0);
        match d {
            Disposition::Done => unreachable!("a success is accounted by account_done"),
            Disposition::Failover => {
                cells.add(&s.errors, 1);
                cells.add(&s.path_errors, 1);
                // With marginal detection on, an EIO fails the request
                // over and counts in the path's error rate; the rate, not
                // one error, decides (marginal, or failed when nothing
                // succeeds for a whole window).
                if !(p.marginal_on() && is_ambiguous(outcome)) {
                    self.mark_failed_at(path, now);
                }
            }
            Disposition::RetrySamePath { .. } => {
                cells.add(&s.errors, 1);
                cells.add(&s.retries, 1);
            }
            Disposition::Fail => {
                cells.add(&s.errors, 1);
                cells.add(&s.io_errors, 1);
            }
        }
    }

    /// Accounts the completion of one try of a request that keeps its
    /// [`Attempts`] across paths; `range` is its (offset, length) in bytes
    /// (length 0: none). An ambiguous error (EIO) is the request's, not the
    /// path's, when every other path in service already failed this request
    /// the same way, or when the range failed on every path lately: it
    /// completes with an I/O error and the path stays usable. A path error
    /// otherwise fails the path and counts it as tried in this round.
    #[allow(clippy::too_many_arguments)]
    pub fn complete_attempt_at(
        &self,
        path: PathId,
        io: &IoInfo,
        range: (u64, u64),
        latency: Duration,
        outcome: IoOutcome,
        retries: u32,
        att: &mut Attempts,
        now: Nanos,
        shard: &StatsShard,
    ) -> Disposition {
        let (cells, cache) = shard.bind(&self.shards);
        if outcome != IoOutcome::Ok {
            // None of the error rules apply to the success nearly every
            // completion is (nor do the path's retry delays need loading),
            // and an error is never a success.
            let d = self.attempt_error(path, range, outcome, retries, att, now);
            self.account_error(path, io, d, outcome, now, cells);
            return d;
        }
        let policy = self.installed(cache);
        let mut local = cache.map(PolicyCache::local);
        self.account_done(path, io, latency, now, cells, &policy, local.as_deref_mut());
        Disposition::Done
    }

    /// What [`Engine::complete_attempt_at`] decides for a try that failed
    /// with `outcome`, and the request's bookkeeping of it in `att`.
    fn attempt_error(
        &self,
        path: PathId,
        range: (u64, u64),
        outcome: IoOutcome,
        retries: u32,
        att: &mut Attempts,
        now: Nanos,
    ) -> Disposition {
        let mut d = classify(outcome, retries, self.max_retries, self.path(path).crdt());
        if d == Disposition::Failover && is_ambiguous(outcome) {
            att.ambiguous |= 1 << path.0;
            let everywhere =
                att.ambiguous.count_ones() >= 2 && self.in_service() & !att.ambiguous == 0;
            if everywhere {
                self.bad_ranges.remember(range.0, range.1, now);
            }
            if everywhere || self.bad_ranges.overlaps(range.0, range.1, now) {
                d = Disposition::Fail;
            }
        }
        let d = self.marginal_disposition(path, outcome, retries, d);
        if d == Disposition::Failover {
            att.tried |= 1 << path.0;
        }
        d
    }

    /// Paths a request could be sent to now or once they recover: usable
    /// (and ANA-accessible) or failed; not offline or removed.
    fn in_service(&self) -> u64 {
        self.paths()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.selectable() || p.state() == PathState::Failed)
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    /// Picks a path for a request with `att` (never one that failed it in
    /// this round; a new round once every usable path did) and accounts
    /// `io` on it.
    pub fn select_attempt(
        &self,
        io: &IoInfo,
        att: &mut Attempts,
        ctx: &SubmitContext,
        shard: &StatsShard,
    ) -> Selection {
        let (cells, cache) = shard.bind(&self.shards);
        let policy = self.installed(cache);
        if let Some(p) = self.select_in(io, att.tried, ctx, cells, &policy) {
            return Selection::Path(p);
        }
        if !self.any_usable() {
            // Waiting is pointless when every path that could come back
            // already failed it in the last round.
            let last = att.round >= crate::attempts::MAX_ROUNDS;
            if last && self.in_service() & !att.tried == 0 {
                return Selection::Exhausted;
            }
            return Selection::Wait;
        }
        if !att.next_round() {
            return Selection::Exhausted;
        }
        self.reselect(io, 0, ctx, cells, &policy)
            .map_or(Selection::Wait, Selection::Path)
    }

    /// Picks the path for a flush command for `target`: `target` itself
    /// while it is usable; through any path when that covers it; else it
    /// waits for `target`.
    pub fn select_flush(
        &self,
        target: PathId,
        io: &IoInfo,
        att: &mut Attempts,
        ctx: &SubmitContext,
        shard: &StatsShard,
    ) -> Selection {
        if self.path(target).selectable() {
            if att.tried & (1 << target.0) != 0 && !att.next_round() {
                return Selection::Exhausted;
            }
            if self.select_path_at(target, io, ctx.now, shard) {
                return Selection::Path(target);
            }
        }
        if self.flush_goes_anywhere(target) {
            return self.select_attempt(io, att, ctx, shard);
        }
        let last = att.round >= crate::attempts::MAX_ROUNDS;
        if last && att.tried & (1 << target.0) != 0 {
            Selection::Exhausted
        } else {
            Selection::Wait
        }
    }

    /// Ghost-write guard: how long to wait before re-sending `io`, which
    /// failed over from `path` with `outcome` (0 for all but writes that
    /// were cancelled or timed out). See [`ghost_write_delay`].
    pub fn failover_delay(&self, path: PathId, io: &IoInfo, outcome: IoOutcome) -> Duration {
        let delay = self.path(path).write_failover_delay();
        ghost_write_delay(io.kind == IoKind::Write, outcome, delay)
    }

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

    pub fn no_path_stats(&self) -> NoPathStats {
        let n = &self.no_path;
        NoPathStats {
            waiting: n.waiting.load(Ordering::Relaxed),
            parked: n.parked.load(Ordering::Relaxed),
            resumed: n.resumed.load(Ordering::Relaxed),
            timed_out: n.timed_out.load(Ordering::Relaxed),
        }
    }

    /// Zeroes the statistics of every path and the no-path counters. The
    /// workers' shards are not written (each has one writer): what they
    /// hold now becomes the base the totals are read against.
    pub fn reset_stats(&self) {
        let mut base = self.stats_base.lock().unwrap_or_else(|e| e.into_inner());
        for (i, p) in self.paths().iter().enumerate() {
            p.stats.reset();
            base[i] = self.shards.totals(i);
        }
        let n = &self.no_path;
        n.parked.store(0, Ordering::Relaxed);
        n.resumed.store(0, Ordering::Relaxed);
        n.timed_out.store(0, Ordering::Relaxed);
    }

    /// What the workers counted on `path` (summed over their shards) since
    /// start or the last `reset_stats`. Each shard only grows, so totals
    /// read one after the other never go down (until a reset).
    pub fn path_totals(&self, path: PathId) -> PathTotals {
        let base = self.stats_base.lock().unwrap_or_else(|e| e.into_inner());
        self.shards.totals(path.0).since(&base[path.0])
    }

    /// Counters, latency quantiles and the policy's estimates of a path.
    pub fn path_stats(&self, path: PathId) -> PathStatsSnapshot {
        let p = self.path(path);
        let s = &p.stats;
        let t = self.path_totals(path);
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let m = p.marginal.lock().unwrap_or_else(|e| e.into_inner()).rec;
        PathStatsSnapshot {
            name: p.name.to_string(),
            state: p.state().as_str(),
            ana_state: p.ana_state().as_str(),
            weight: p.weight(),
            preferred: p.preferred(),
            in_flight_requests: p.in_flight_requests(),
            in_flight_bytes: p.in_flight_bytes(),
            selected: t.selected,
            reads: t.reads,
            writes: t.writes,
            others: t.others,
            read_bytes: t.read_bytes,
            write_bytes: t.write_bytes,
            path_errors: t.path_errors,
            retries: t.retries,
            io_errors: t.io_errors,
            failures: get(&s.failures),
            recoveries: get(&s.recoveries),
            probes_ok: get(&s.probes_ok),
            probes_failed: get(&s.probes_failed),
            marginal: p.is_marginal(),
            marginal_marks: m.marks,
            marginal_returns: m.returns,
            marginal_rechecks_failed: m.rechecks_failed,
            marginal_err_rate: m.last_rate,
            read_latency: t.read_latency.summary(),
            write_latency: t.write_latency.summary(),
            estimates: self.policy.load().policy.estimates(path),
        }
    }
}

/// Marginal paths (see `marginal`): what the engine feeds the per-path
/// records, the recheck trickle, and the settings.
impl Engine {
    /// The disk's marginal settings (a path may override them).
    pub fn marginal_defaults(&self) -> MarginalConfig {
        self.marginal
    }

    /// The marginal settings in force on `path`.
    pub fn marginal_config(&self, path: PathId) -> MarginalConfig {
        let m = self
            .path(path)
            .marginal
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        m.config.unwrap_or(self.marginal)
    }

    /// Gives `path` its own marginal settings (`None`: the disk's). With
    /// detection off the path is healthy at once.
    pub fn set_path_marginal(&self, path: PathId, config: Option<MarginalConfig>) {
        let p = self.path(path);
        let mut m = p.marginal.lock().unwrap_or_else(|e| e.into_inner());
        self.absorb_marginal(path, &mut m, self.now());
        m.config = config;
        let cfg = config.unwrap_or(self.marginal);
        let on = cfg.enabled();
        if !on {
            m.rec.disable();
        }
        p.set_marginal_flag(m.rec.marginal);
        p.set_marginal_due(m.rec.judge_due(&cfg));
        p.set_marginal_on(on);
    }

    /// Takes the results the shards counted on `path` since the last time
    /// into its marginal record (under its lock).
    fn absorb_marginal(&self, path: PathId, m: &mut MarginalState, now: Nanos) {
        let (ok, bad) = self.shards.marginal_results(path.0);
        let new_ok = ok.saturating_sub(m.seen.0);
        let new_bad = bad.saturating_sub(m.seen.1);
        m.seen = (ok, bad);
        m.rec.absorb(new_ok + new_bad, new_bad, now);
    }

    /// Accounts one probe result in `path`'s marginal record.
    fn record_marginal(&self, path: PathId, ok: bool, now: Nanos) -> MarginalChange {
        let p = self.path(path);
        if !p.marginal_on() {
            return MarginalChange::None;
        }
        let mut m = p.marginal.lock().unwrap_or_else(|e| e.into_inner());
        let cfg = m.config.unwrap_or(self.marginal);
        self.absorb_marginal(path, &mut m, now);
        let change = m.rec.record(ok, now, &cfg);
        p.set_marginal_flag(m.rec.marginal);
        p.set_marginal_due(m.rec.judge_due(&cfg));
        change
    }

    /// Accounts a completion's result for the marginal detector: counted in
    /// the worker's shard; the record is locked only when its window may be
    /// judged (or opened), which takes in every shard's results. A dead
    /// window fails the path.
    #[inline]
    fn record_marginal_io(&self, path: PathId, ok: bool, now: Nanos, cells: &Cells) {
        // Detection is off by default: the check stays in the caller.
        if self.path(path).marginal_on() {
            self.count_marginal_io(path, ok, now, cells);
        }
    }

    /// [`Engine::record_marginal_io`] with detection on.
    #[inline(never)]
    fn count_marginal_io(&self, path: PathId, ok: bool, now: Nanos, cells: &Cells) {
        let p = self.path(path);
        let c = cells.path(path.0);
        cells.add(if ok { &c.marginal_ok } else { &c.marginal_bad }, 1);
        if !p.marginal_judge_due(now) {
            return;
        }
        let change = {
            let mut m = p.marginal.lock().unwrap_or_else(|e| e.into_inner());
            let cfg = m.config.unwrap_or(self.marginal);
            self.absorb_marginal(path, &mut m, now);
            let change = m.rec.judge(now, &cfg);
            p.set_marginal_flag(m.rec.marginal);
            p.set_marginal_due(m.rec.judge_due(&cfg));
            change
        };
        if change == MarginalChange::Dead {
            self.mark_failed_at(path, now);
        }
    }

    /// Feeds a completion's disposition to the marginal record: done is a
    /// good result, a path error (or an EIO retried on its only path) a
    /// bad one; other retries and request errors say nothing about the path.
    fn note_marginal(
        &self,
        path: PathId,
        d: Disposition,
        outcome: IoOutcome,
        now: Nanos,
        cells: &Cells,
    ) {
        match d {
            Disposition::Done => self.record_marginal_io(path, true, now, cells),
            Disposition::Failover => self.record_marginal_io(path, false, now, cells),
            // An EIO kept on its only path (`marginal_disposition`).
            Disposition::RetrySamePath { .. } if is_ambiguous(outcome) => {
                self.record_marginal_io(path, false, now, cells)
            }
            _ => {}
        }
    }

    /// An EIO on a path under marginal detection that is the only usable
    /// one is retried there (up to `max_retries`) before the round ends:
    /// the path may fail some I/O and is all there is.
    fn marginal_disposition(
        &self,
        path: PathId,
        outcome: IoOutcome,
        retries: u32,
        d: Disposition,
    ) -> Disposition {
        let p = self.path(path);
        if d != Disposition::Failover
            || !is_ambiguous(outcome)
            || !p.marginal_on()
            || retries >= self.max_retries
            || Self::accessible(self.paths(), 1 << path.0) != 0
        {
            return d;
        }
        Disposition::RetrySamePath {
            after: Duration::ZERO,
        }
    }

    /// A marginal path (set aside from `candidates`) whose recheck trickle
    /// is due takes this request. (Out of line: only with marginal paths.)
    #[inline(never)]
    fn trickle(&self, paths: &[Path], aside: u64, now: Nanos) -> Option<PathId> {
        for i in policy::indices(aside) {
            let p = &paths[i];
            if !p.is_marginal() {
                continue;
            }
            let mut m = p.marginal.lock().unwrap_or_else(|e| e.into_inner());
            let cfg = m.config.unwrap_or(self.marginal);
            if !m.rec.trickle_due(now, &cfg) {
                continue;
            }
            // The first trickle of a recheck empties the window: what the
            // shards counted before it must be taken in (and dropped) first.
            self.absorb_marginal(PathId(i), &mut m, now);
            if m.rec.trickle(now, &cfg) {
                p.set_marginal_due(m.rec.judge_due(&cfg));
                return Some(PathId(i));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attempts::MAX_ROUNDS;
    use crate::time::ManualClock;

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
    const WRITE: IoInfo = IoInfo {
        kind: IoKind::Write,
        bytes: 4096,
    };
    const S: Nanos = 1_000_000_000;

    fn manual(names: &[&str], policy: PolicyName) -> (Engine, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(S));
        let mut o = EngineOptions::new(policy);
        o.clock = clock.clone();
        (Engine::with_options(&cfg(names), o).unwrap(), clock)
    }

    /// A worker's calls, as the daemon's worker makes them (the attempt
    /// API), one request each, on a shard of its own.
    trait Worker {
        /// A path for a new request, never one in `exclude`.
        fn pick(&self, io: &IoInfo, exclude: u64) -> Option<PathId>;
        fn pick_at(&self, io: &IoInfo, exclude: u64, ctx: &SubmitContext) -> Option<PathId>;
        /// `io` accounted on `path` (a retry on the same path).
        fn take(&self, path: PathId, io: &IoInfo) -> bool;
        /// The completion of `io` on `path`, without a byte range.
        fn done(
            &self,
            path: PathId,
            io: &IoInfo,
            latency: Duration,
            outcome: IoOutcome,
            retries: u32,
        ) -> Disposition;
    }

    impl Worker for Engine {
        fn pick(&self, io: &IoInfo, exclude: u64) -> Option<PathId> {
            let ctx = SubmitContext {
                now: self.now(),
                numa_node: None,
            };
            self.pick_at(io, exclude, &ctx)
        }

        fn pick_at(&self, io: &IoInfo, exclude: u64, ctx: &SubmitContext) -> Option<PathId> {
            let mut att = Attempts::new(ctx.now);
            att.tried = exclude;
            match self.select_attempt(io, &mut att, ctx, &self.stats_shard()) {
                Selection::Path(p) => Some(p),
                _ => None,
            }
        }

        fn take(&self, path: PathId, io: &IoInfo) -> bool {
            self.select_path_at(path, io, self.now(), &self.stats_shard())
        }

        fn done(
            &self,
            path: PathId,
            io: &IoInfo,
            latency: Duration,
            outcome: IoOutcome,
            retries: u32,
        ) -> Disposition {
            let now = self.now();
            let mut att = Attempts::new(now);
            let shard = self.stats_shard();
            self.complete_attempt_at(
                path,
                io,
                (0, 0),
                latency,
                outcome,
                retries,
                &mut att,
                now,
                &shard,
            )
        }
    }

    #[test]
    fn engine_is_shared_by_workers() {
        fn sync<T: Send + Sync>() {}
        sync::<Engine>();
    }

    #[test]
    fn round_robin_alternates_and_accounts() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        let picks: Vec<_> = (0..4).map(|_| e.pick(&READ, 0).unwrap().0).collect();
        assert_eq!(picks, vec![0, 1, 0, 1]);
        assert_eq!(e.path(PathId(0)).in_flight_requests(), 2);
        assert_eq!(e.path(PathId(1)).in_flight_bytes(), 8192);
    }

    #[test]
    fn failover_marks_failed_and_excludes() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        let p = e.pick(&READ, 0).unwrap();
        let d = e.done(p, &READ, Duration::ZERO, IoOutcome::Errno(19), 0);
        assert_eq!(d, Disposition::Failover);
        assert_eq!(e.path(p).state(), PathState::Failed);
        assert_eq!(e.path_stats(p).path_errors, 1);
        assert_eq!(e.path_stats(p).failures, 1);
        for _ in 0..4 {
            assert_ne!(e.pick(&READ, 0), Some(p));
        }
        e.path(PathId(1 - p.0)).set_state(PathState::Offline);
        assert_eq!(e.pick(&READ, 0), None);
        assert!(!e.any_usable());
    }

    #[test]
    fn optimized_before_non_optimized() {
        for policy in PolicyName::ALL {
            let e = Engine::new(&cfg(&["a", "b", "c"]), policy).unwrap();
            e.path(PathId(0)).set_ana_state(AnaState::NonOptimized);
            e.path(PathId(2)).set_ana_state(AnaState::Inaccessible);
            for _ in 0..8 {
                assert_eq!(e.pick(&READ, 0), Some(PathId(1)), "{policy}");
            }
            assert_eq!(e.pick(&READ, 1 << 1), Some(PathId(0)), "{policy}");
            e.path(PathId(0)).set_ana_state(AnaState::Change);
            e.path(PathId(1)).set_ana_state(AnaState::PersistentLoss);
            assert_eq!(e.pick(&READ, 0), None, "{policy}");
        }
    }

    #[test]
    fn never_failed_offline_or_removed() {
        for policy in PolicyName::ALL {
            let e = Engine::new(&cfg(&["a", "b", "c", "d"]), policy).unwrap();
            e.path(PathId(0)).set_state(PathState::Failed);
            e.path(PathId(1)).set_state(PathState::Offline);
            e.path(PathId(2)).set_state(PathState::Removed);
            for _ in 0..20 {
                assert_eq!(e.pick(&READ, 0), Some(PathId(3)), "{policy}");
            }
        }
    }

    #[test]
    fn select_path_refuses_unselectable_paths() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        assert!(e.take(PathId(1), &READ));
        assert_eq!(e.path(PathId(1)).in_flight_requests(), 1);
        e.path(PathId(0)).set_state(PathState::Failed);
        assert!(!e.take(PathId(0), &READ));
        assert!(!e.take(PathId(7), &READ));
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

    #[test]
    fn policy_swaps_while_io_is_in_flight() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        let p = e.pick(&READ, 0).unwrap();
        e.set_policy(PolicyConfig::new(PolicyName::QueueDepth));
        assert_eq!(e.policy_name(), PolicyName::QueueDepth);
        assert_eq!(e.pick(&READ, 0), Some(PathId(1 - p.0)), "load survives");
        assert_eq!(
            e.done(p, &READ, Duration::ZERO, IoOutcome::Ok, 0),
            Disposition::Done
        );
        assert_eq!(e.path(p).in_flight_requests(), 0);
    }

    #[test]
    fn retries_follow_the_path_crdt_and_the_bound() {
        let e = Engine::new(&cfg(&["a"]), PolicyName::RoundRobin).unwrap();
        e.path(PathId(0)).set_crdt([3, 0, 0]);
        let status = IoOutcome::Nvme(0x006 | (1 << 11));
        let mut retries = 0;
        loop {
            assert!(e.take(PathId(0), &READ));
            match e.done(PathId(0), &READ, Duration::ZERO, status, retries) {
                Disposition::RetrySamePath { after } => {
                    assert_eq!(after, Duration::from_millis(300));
                    retries += 1;
                }
                d => {
                    assert_eq!(d, Disposition::Fail);
                    break;
                }
            }
        }
        assert_eq!(retries, 3);
        let s = e.path_stats(PathId(0));
        assert_eq!((s.retries, s.io_errors), (3, 1));
        assert_eq!(e.path(PathId(0)).state(), PathState::Usable);
    }

    #[test]
    fn statistics_per_path() {
        let (e, clock) = manual(&["a"], PolicyName::RoundRobin);
        for i in 1..=100u64 {
            let io = if i % 2 == 0 { WRITE } else { READ };
            let p = e.pick(&io, 0).unwrap();
            clock.advance(Duration::from_micros(i));
            e.done(p, &io, Duration::from_micros(i * 10), IoOutcome::Ok, 0);
        }
        let s = e.path_stats(PathId(0));
        assert_eq!((s.reads, s.writes, s.read_bytes), (50, 50, 50 * 4096));
        assert_eq!(s.read_latency.count, 50);
        assert_eq!(s.write_latency.max_ns, 1_000_000);
        assert!(s.read_latency.p50_ns >= 490_000 && s.read_latency.p50_ns <= 520_000);
        assert!(s.write_latency.p99_ns >= 980_000);
        assert_eq!(s.in_flight_requests, 0);
    }

    #[test]
    fn probing_brings_a_failed_path_back() {
        let (e, clock) = manual(&["a", "b"], PolicyName::RoundRobin);
        let a = PathId(0);
        assert!(e.take(a, &READ));
        e.done(a, &READ, Duration::ZERO, IoOutcome::Errno(5), 0);
        assert_eq!(e.path(a).state(), PathState::Failed);
        assert!(e.probes_due(clock.now()).is_empty());
        clock.advance(Duration::from_secs(1));
        assert_eq!(e.probes_due(clock.now()), vec![a]);
        for i in 0..3 {
            let out = e.probe_result(a, true, clock.now());
            if i < 2 {
                assert!(matches!(out, ProbeOutcome::Counting { .. }), "{out:?}");
                assert_eq!(e.path(a).state(), PathState::Failed);
            } else {
                assert_eq!(out, ProbeOutcome::Recovered);
            }
            clock.advance(Duration::from_secs(1));
        }
        assert_eq!(e.path(a).state(), PathState::Usable);
        assert_eq!(e.path(a).usable_since(), 4 * S);
        assert_eq!(e.path_stats(a).recoveries, 1);
        // fails again two seconds later: flapping, held down 5 s
        clock.advance(Duration::from_secs(1));
        e.mark_failed_at(a, clock.now());
        assert_eq!(e.path(a).health().held_until, clock.now() + 5 * S);
        assert!(!e.probe_due(a, clock.now() + 4 * S));
        assert!(e.probe_due(a, clock.now() + 5 * S));
    }

    #[test]
    fn operator_states() {
        let (e, _) = manual(&["a", "b"], PolicyName::RoundRobin);
        e.set_path_state(PathId(0), PathState::Offline);
        assert_eq!(e.probe_result(PathId(0), true, 0), ProbeOutcome::NotFailed);
        assert!(!e.probe_due(PathId(0), u64::MAX));
        e.set_path_state(PathId(0), PathState::Usable);
        assert_eq!(e.path(PathId(0)).state(), PathState::Usable);
        e.set_path_state(PathId(1), PathState::Failed);
        assert!(e.path(PathId(1)).health().failed);
    }

    #[test]
    fn ghost_write_guard_uses_the_path_delay() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        let d = Duration::from_millis(40);
        e.path(PathId(0)).set_write_failover_delay(d);
        let eintr = IoOutcome::Errno(4);
        assert_eq!(e.failover_delay(PathId(0), &WRITE, eintr), d);
        assert_eq!(e.failover_delay(PathId(0), &READ, eintr), Duration::ZERO);
        assert_eq!(e.failover_delay(PathId(1), &WRITE, eintr), Duration::ZERO);
        assert_eq!(
            e.failover_delay(PathId(0), &WRITE, IoOutcome::Errno(19)),
            Duration::ZERO
        );
    }

    #[test]
    fn no_path_bookkeeping() {
        let mut o = EngineOptions::new(PolicyName::RoundRobin);
        o.no_path_timeout = Duration::from_secs(2);
        let e = Engine::with_options(&cfg(&["a"]), o).unwrap();
        assert_eq!(
            e.no_path_decision(S, S),
            NoPathDecision::Wait { deadline: 3 * S }
        );
        assert_eq!(e.no_path_decision(S, 3 * S), NoPathDecision::Fail);
        e.note_no_path_parked();
        e.note_no_path_parked();
        e.note_no_path_done(true);
        e.note_no_path_done(false);
        e.note_no_path_done(false);
        assert_eq!(
            e.no_path_stats(),
            NoPathStats {
                waiting: 0,
                parked: 2,
                resumed: 1,
                timed_out: 2
            }
        );
    }

    #[test]
    fn numa_uses_the_submitting_node() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::Numa).unwrap();
        e.path(PathId(0)).set_numa_node(Some(0));
        e.path(PathId(1)).set_numa_node(Some(1));
        let on = |n| SubmitContext {
            now: S,
            numa_node: Some(n),
        };
        assert_eq!(e.pick_at(&READ, 0, &on(1)), Some(PathId(1)));
        assert_eq!(e.pick_at(&READ, 0, &on(0)), Some(PathId(0)));
        assert_eq!(e.pick(&READ, 0), Some(PathId(0)), "unknown node: first");
    }

    #[test]
    fn manual_failback_through_the_engine() {
        let mut o = EngineOptions::new(PolicyName::ActiveStandby);
        o.policy.failback = crate::health::Failback::Manual;
        let clock = Arc::new(ManualClock::new(S));
        o.clock = clock.clone();
        let e = Engine::with_options(&cfg(&["a", "b"]), o).unwrap();
        assert_eq!(e.pick(&READ, 0), Some(PathId(0)));
        e.mark_failed_at(PathId(0), clock.now());
        assert_eq!(e.pick(&READ, 0), Some(PathId(1)));
        e.set_path_state(PathId(0), PathState::Usable);
        assert_eq!(e.pick(&READ, 0), Some(PathId(1)));
        assert_eq!(e.request_failback(), Ok(PathId(0)));
        assert_eq!(e.pick(&READ, 0), Some(PathId(0)));
    }

    #[test]
    fn failback_is_refused_without_active_standby_or_a_usable_home() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        assert!(matches!(
            e.request_failback(),
            Err(FailbackError::NotActiveStandby(PolicyName::RoundRobin))
        ));
        let mut o = EngineOptions::new(PolicyName::ActiveStandby);
        o.policy.failback = crate::health::Failback::Manual;
        let e = Engine::with_options(&cfg(&["a", "b"]), o).unwrap();
        e.path(PathId(1)).set_preferred(true);
        assert_eq!(e.request_failback(), Ok(PathId(1)));
        e.set_path_state(PathId(1), PathState::Offline);
        assert_eq!(
            e.request_failback(),
            Err(FailbackError::PreferredNotUsable("b is offline".into()))
        );
        e.path(PathId(1)).set_preferred(false);
        assert_eq!(
            e.request_failback(),
            Ok(PathId(0)),
            "no preferred: the first"
        );
        e.set_path_state(PathId(0), PathState::Offline);
        assert_eq!(e.request_failback(), Err(FailbackError::NoUsablePath));
    }

    #[test]
    fn paths_added_at_runtime_take_io_after_init() {
        let e = Engine::new(&cfg(&["a"]), PolicyName::RoundRobin).unwrap();
        let mut seen_in_init = None;
        let id = e
            .add_path(&cfg(&["b"])[0], |id, p| {
                // Not visible to workers yet.
                seen_in_init = Some((id, e.paths().len(), p.name.to_string()));
                p.set_write_failover_delay(Duration::from_millis(5));
            })
            .unwrap();
        assert_eq!(seen_in_init, Some((PathId(1), 1, "b".to_string())));
        assert_eq!(e.paths().len(), 2);
        assert_eq!(e.path_id("b"), Some(id));
        let picks: Vec<_> = (0..4).map(|_| e.pick(&READ, 0).unwrap().0).collect();
        assert_eq!(picks, vec![0, 1, 0, 1]);
        assert!(matches!(
            e.add_path(&cfg(&["a"])[0], |_, _| {}),
            Err(EngineError::DuplicateName(_))
        ));
        assert!(matches!(
            e.add_path(&cfg(&[""])[0], |_, _| {}),
            Err(EngineError::EmptyName)
        ));
    }

    #[test]
    fn every_policy_serves_added_paths() {
        for policy in PolicyName::ALL {
            let e = Engine::new(&cfg(&["a"]), policy).unwrap();
            e.set_path_state(PathId(0), PathState::Offline);
            let b = e.add_path(&cfg(&["b"])[0], |_, _| {}).unwrap();
            for _ in 0..8 {
                let p = e.pick(&READ, 0).unwrap();
                assert_eq!(p, b, "{policy}");
                e.done(p, &READ, Duration::from_micros(50), IoOutcome::Ok, 0);
            }
        }
    }

    #[test]
    fn removed_slots_are_kept_and_names_can_return() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        e.set_path_state(PathId(0), PathState::Removed);
        e.set_path_state(PathId(0), PathState::Usable);
        assert_eq!(e.path(PathId(0)).state(), PathState::Removed, "final");
        assert_eq!(e.path_id("a"), Some(PathId(0)), "still readable");
        let again = e.add_path(&cfg(&["a"])[0], |_, _| {}).unwrap();
        assert_eq!(again, PathId(2));
        assert_eq!(e.path_id("a"), Some(again), "the live one wins");
        for _ in 0..6 {
            assert_ne!(e.pick(&READ, 0), Some(PathId(0)));
        }
        assert_eq!(e.usable_paths_except(None), 2);
        assert_eq!(e.usable_paths_except(Some(again)), 1);
        // Slots are not reused: the table fills up.
        for i in 3..MAX_PATHS {
            e.add_path(&cfg(&[&format!("p{i}")])[0], |_, _| {}).unwrap();
        }
        assert!(matches!(
            e.add_path(&cfg(&["z"])[0], |_, _| {}),
            Err(EngineError::NoFreeSlot)
        ));
        assert_eq!(e.paths().len(), MAX_PATHS);
        assert!(e.pick(&READ, 0).is_some());
    }

    #[test]
    fn drain_waits_for_in_flight_io_only() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        let a = e.pick(&READ, 0).unwrap();
        assert_eq!(a, PathId(0));
        e.set_path_state(a, PathState::Offline);
        assert!(!e.drained(a), "one I/O still in flight");
        for _ in 0..4 {
            assert_eq!(e.pick(&READ, 0), Some(PathId(1)), "nothing new");
        }
        assert!(!e.take(a, &READ));
        e.done(a, &READ, Duration::ZERO, IoOutcome::Ok, 0);
        assert!(e.drained(a));
        assert_eq!(e.path_stats(a).reads, 1);
    }

    #[test]
    fn selection_racing_a_drain_never_lands_on_the_drained_path() {
        // Workers select and complete in a loop while the control plane
        // takes path a offline and waits for the drain; a worker handed
        // path a after the drain completed is a violation.
        use std::sync::atomic::AtomicBool;
        for round in 0..20 {
            let e = Arc::new(Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap());
            let stop = Arc::new(AtomicBool::new(false));
            let drained = Arc::new(AtomicBool::new(false));
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    let (e, stop, drained) = (e.clone(), stop.clone(), drained.clone());
                    std::thread::spawn(move || {
                        let mut violations = 0;
                        while !stop.load(Ordering::Relaxed) {
                            if let Some(p) = e.pick(&READ, 0) {
                                if p == PathId(0) && drained.load(Ordering::SeqCst) {
                                    violations += 1;
                                }
                                e.done(p, &READ, Duration::ZERO, IoOutcome::Ok, 0);
                            }
                        }
                        violations
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_micros(200 + round * 50));
            e.set_path_state(PathId(0), PathState::Offline);
            while !e.drained(PathId(0)) {
                std::hint::spin_loop();
            }
            drained.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(2));
            stop.store(true, Ordering::Relaxed);
            for w in workers {
                assert_eq!(w.join().unwrap(), 0, "I/O sent after the drain");
            }
        }
    }

    const EIO: IoOutcome = IoOutcome::Errno(5);
    const ENODEV: IoOutcome = IoOutcome::Errno(19);

    /// One try of a request with `att` at `range`: where it went and what
    /// the engine decided.
    fn attempt(
        e: &Engine,
        att: &mut Attempts,
        range: (u64, u64),
        outcome: IoOutcome,
    ) -> Option<(PathId, Disposition)> {
        let ctx = SubmitContext {
            now: S,
            numa_node: None,
        };
        match e.select_attempt(&READ, att, &ctx, &e.stats_shard()) {
            Selection::Path(p) => {
                let d = e.complete_attempt_at(
                    p,
                    &READ,
                    range,
                    Duration::ZERO,
                    outcome,
                    0,
                    att,
                    S,
                    &e.stats_shard(),
                );
                Some((p, d))
            }
            _ => None,
        }
    }

    #[test]
    fn an_eio_on_every_path_is_the_requests_error_not_the_paths() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        let bad = (8192, 4096);
        let mut r1 = Attempts::new(S);
        assert_eq!(
            attempt(&e, &mut r1, bad, EIO),
            Some((PathId(0), Disposition::Failover)),
            "the first path cannot tell a bad block from a dead path"
        );
        assert_eq!(
            attempt(&e, &mut r1, bad, EIO),
            Some((PathId(1), Disposition::Fail)),
            "every path failed this request: a data error"
        );
        assert_eq!(e.path(PathId(1)).state(), PathState::Usable);
        assert_eq!(e.path_stats(PathId(1)).io_errors, 1);
        // The range is remembered: the next request to it fails at once
        // without failing the path it reached.
        let mut r2 = Attempts::new(S);
        assert_eq!(
            attempt(&e, &mut r2, (8192 + 512, 512), EIO),
            Some((PathId(1), Disposition::Fail))
        );
        assert_eq!(e.path_stats(PathId(1)).failures, 0);
        // Elsewhere, an EIO on the only usable path while the other one is
        // down (not by this request) is a path failure: a dead disk still
        // fails its paths.
        let mut r3 = Attempts::new(S);
        assert_eq!(
            attempt(&e, &mut r3, (0, 4096), EIO),
            Some((PathId(1), Disposition::Failover))
        );
        assert_eq!(e.path(PathId(1)).state(), PathState::Failed);
        assert_eq!(attempt(&e, &mut r3, (0, 4096), EIO), None);
    }

    #[test]
    fn unambiguous_path_errors_fail_every_path() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        let mut r = Attempts::new(S);
        for want in [0, 1] {
            assert_eq!(
                attempt(&e, &mut r, (0, 4096), ENODEV),
                Some((PathId(want), Disposition::Failover))
            );
        }
        assert!(!e.any_usable());
        let ctx = SubmitContext {
            now: S,
            numa_node: None,
        };
        assert_eq!(
            e.select_attempt(&READ, &mut r, &ctx, &e.stats_shard()),
            Selection::Wait
        );
    }

    #[test]
    fn a_single_path_eio_fails_the_path() {
        let e = Engine::new(&cfg(&["a"]), PolicyName::RoundRobin).unwrap();
        let mut r = Attempts::new(S);
        assert_eq!(
            attempt(&e, &mut r, (0, 4096), EIO),
            Some((PathId(0), Disposition::Failover)),
            "one path proves nothing about the block"
        );
    }

    #[test]
    fn offline_paths_are_not_in_service() {
        let e = Engine::new(&cfg(&["a", "b", "c"]), PolicyName::RoundRobin).unwrap();
        e.set_path_state(PathId(2), PathState::Offline);
        let mut r = Attempts::new(S);
        assert_eq!(
            attempt(&e, &mut r, (0, 4096), EIO).unwrap().1,
            Disposition::Failover
        );
        assert_eq!(
            attempt(&e, &mut r, (0, 4096), EIO).unwrap().1,
            Disposition::Fail
        );
    }

    #[test]
    fn failovers_are_capped_at_max_rounds() {
        // Every path fails the request and comes back (probes) at once: it
        // goes to each path once per round, then fails.
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        let mut r = Attempts::new(S);
        let mut sends = 0;
        while let Some((p, d)) = attempt(&e, &mut r, (0, 4096), ENODEV) {
            assert_eq!(d, Disposition::Failover);
            sends += 1;
            assert!(sends <= 10, "no cap");
            if e.usable_paths_except(None) == 0 {
                e.set_path_state(PathId(0), PathState::Usable);
                e.set_path_state(PathId(1), PathState::Usable);
            }
            let _ = p;
        }
        assert_eq!(sends, 2 * MAX_ROUNDS);
        let ctx = SubmitContext {
            now: S,
            numa_node: None,
        };
        assert_eq!(
            e.select_attempt(&READ, &mut r, &ctx, &e.stats_shard()),
            Selection::Exhausted
        );
        // All down after the last round: no point waiting either.
        e.set_path_state(PathId(0), PathState::Failed);
        e.set_path_state(PathId(1), PathState::Failed);
        let mut r2 = r;
        r2.tried = 0b11;
        assert_eq!(
            e.select_attempt(&READ, &mut r2, &ctx, &e.stats_shard()),
            Selection::Exhausted
        );
    }

    #[test]
    fn flush_commands_go_to_their_path_or_through_any_or_wait() {
        let e = Engine::new(&cfg(&["a", "b"]), PolicyName::RoundRobin).unwrap();
        let ctx = SubmitContext {
            now: S,
            numa_node: None,
        };
        let flush = IoInfo {
            kind: IoKind::Other,
            bytes: 0,
        };
        let a = PathId(0);
        let mut r = Attempts::new(S);
        assert_eq!(
            e.select_flush(a, &flush, &mut r, &ctx, &e.stats_shard()),
            Selection::Path(a)
        );
        e.mark_failed_at(a, S);
        assert_eq!(
            e.select_flush(a, &flush, &mut r, &ctx, &e.stats_shard()),
            Selection::Path(PathId(1)),
            "a flush through b covers a"
        );
        e.path(a).set_flush_via_any(false);
        assert_eq!(
            e.select_flush(a, &flush, &mut r, &ctx, &e.stats_shard()),
            Selection::Wait
        );
    }
}
