//! The multipath engine: the set of paths behind one disk, their states and
//! loads, the path-selection policies, and the classification of completions
//! into done / retry / failover / fail.
//!
//! Pure logic: no I/O, no threads of its own, no `unsafe`. The backend calls
//! [`Engine::select`] when it submits a request and [`Engine::complete`] when
//! the request's completion comes back.

mod classify;
mod engine;
mod path;
mod policy;

pub use classify::{classify, Disposition, IoOutcome};
pub use engine::{Engine, EngineError, IoInfo, IoKind, PathConfig};
pub use path::{AnaState, Path, PathId, PathState};
pub use policy::PolicyName;
