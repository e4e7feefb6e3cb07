//! The multipath engine: the set of paths behind one disk, their states and
//! loads, the path-selection policies, the classification of completions
//! into done / retry / failover / fail, recovery and no-path decisions,
//! per-path statistics, and a simulator that drives the same engine in
//! virtual time.
//!
//! Pure logic: no I/O, no threads of its own, no `unsafe`. The backend calls
//! [`Engine::select`] when it submits a request and [`Engine::complete`] when
//! the request's completion comes back (or the `*_at` variants, which take
//! the time and the submitting worker's NUMA node explicitly).

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
