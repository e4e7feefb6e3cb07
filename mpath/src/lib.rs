//! The multipath logic behind one disk: the set of paths, their states and
//! loads, the path-selection policies, the classification of completions
//! into done / retry / failover / fail, failover bookkeeping (attempt
//! rounds, deadlines, flush generations), recovery, marginal-path and
//! no-path decisions, QoS budgets, per-path statistics, and a simulator
//! (`mpath-sim`) that drives the same engine in virtual time.
//!
//! Pure logic: no I/O, no threads of its own, no `unsafe`. A worker holds a
//! [`StatsShard`] and, for each try of a request, calls
//! [`Engine::select_attempt`] (or [`Engine::select_path_at`] for a retry
//! on the same path, [`Engine::select_flush`] for a flush) when it submits
//! it and [`Engine::complete_attempt_at`] when its completion comes back;
//! the simulator makes the same calls.

#![forbid(unsafe_code)]

mod attempts;
mod classify;
mod engine;
mod flush;
mod health;
mod marginal;
#[cfg(test)]
mod marginal_engine_tests;
mod path;
mod policy;
mod policy_cache;
mod qos;
#[cfg(test)]
mod qos_tests;
mod shard;
pub mod sim;
mod stats;
mod time;

pub use attempts::{Attempts, Selection, BAD_RANGE_MEMORY, MAX_ROUNDS};
pub use classify::{classify, ghost_write_delay, is_ambiguous, Disposition, IoOutcome};
pub use engine::{
    Engine, EngineError, EngineOptions, FailbackError, IoInfo, IoKind, NoPathStats, PathConfig,
    MAX_PATHS,
};
pub use flush::FlushPart;
pub use health::{
    no_path_decision, quarantine, Failback, NoPathDecision, PathHealth, ProbeOutcome,
    RecoveryConfig,
};
pub use marginal::{Marginal, MarginalChange, MarginalConfig, MIN_SAMPLES, RECHECK_SAMPLES};
pub use path::{AnaState, Path, PathId, PathName, PathState};
pub use policy::{PolicyConfig, PolicyName, SubmitContext};
pub use qos::{QosDir, QosLimits, Throttle, QOS_FIELDS, QOS_VALUE_MAX};
pub use shard::StatsShard;
pub use stats::{
    CumulativeBuckets, HistogramCounts, LatencyHistogram, LatencySummary, PathStats,
    PathStatsSnapshot, PathTotals, PolicyEstimates,
};
pub use time::{nanos, Clock, ManualClock, MonotonicClock, Nanos, NANOS_PER_SEC};
