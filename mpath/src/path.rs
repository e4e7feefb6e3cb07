//! One path to the disk: its identity, state and load counters.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Index of a path in the engine's path table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PathId(pub usize);

/// Whether the engine may send I/O down a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PathState {
    Usable = 0,
    Failed = 1,
    /// Taken out of service by the operator.
    Offline = 2,
    Removed = 3,
}

impl PathState {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Usable,
            1 => Self::Failed,
            2 => Self::Offline,
            _ => Self::Removed,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Usable => "usable",
            Self::Failed => "failed",
            Self::Offline => "offline",
            Self::Removed => "removed",
        }
    }
}

/// Asymmetric Namespace Access state of a path (NVMe ANA). File and null
/// paths are always `Optimized`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum AnaState {
    Optimized = 0,
    NonOptimized = 1,
    Inaccessible = 2,
    PersistentLoss = 3,
    Change = 4,
}

impl AnaState {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Optimized,
            1 => Self::NonOptimized,
            2 => Self::Inaccessible,
            3 => Self::PersistentLoss,
            _ => Self::Change,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Optimized => "optimized",
            Self::NonOptimized => "non-optimized",
            Self::Inaccessible => "inaccessible",
            Self::PersistentLoss => "persistent-loss",
            Self::Change => "change",
        }
    }

    /// Whether I/O may be sent on a path in this state at all.
    pub fn accessible(self) -> bool {
        matches!(self, Self::Optimized | Self::NonOptimized)
    }
}

/// A path with its load counters, shared by every worker (atomics only).
#[derive(Debug)]
pub struct Path {
    pub name: String,
    state: AtomicU8,
    ana: AtomicU8,
    /// `relative_throughput` of dm-ps-service-time: 0 (standby) to 100.
    weight: AtomicU32,
    preferred: AtomicBool,
    in_flight_requests: AtomicU64,
    in_flight_bytes: AtomicU64,
    /// Set when a write completes; cleared when a flush is sent to the path.
    dirty: AtomicBool,
    pub selected: AtomicU64,
    pub errors: AtomicU64,
}

impl Path {
    pub fn new(name: impl Into<String>, weight: u32, preferred: bool) -> Self {
        Self {
            name: name.into(),
            state: AtomicU8::new(PathState::Usable as u8),
            ana: AtomicU8::new(AnaState::Optimized as u8),
            weight: AtomicU32::new(weight.min(100)),
            preferred: AtomicBool::new(preferred),
            in_flight_requests: AtomicU64::new(0),
            in_flight_bytes: AtomicU64::new(0),
            // Data written before this process started may still sit in a
            // volatile cache: the first flush must reach every path.
            dirty: AtomicBool::new(true),
            selected: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    pub fn state(&self) -> PathState {
        PathState::from_u8(self.state.load(Ordering::Acquire))
    }

    pub fn set_state(&self, s: PathState) {
        self.state.store(s as u8, Ordering::Release);
    }

    pub fn ana_state(&self) -> AnaState {
        AnaState::from_u8(self.ana.load(Ordering::Acquire))
    }

    pub fn set_ana_state(&self, s: AnaState) {
        self.ana.store(s as u8, Ordering::Release);
    }

    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    pub fn set_weight(&self, w: u32) {
        self.weight.store(w.min(100), Ordering::Relaxed);
    }

    pub fn preferred(&self) -> bool {
        self.preferred.load(Ordering::Relaxed)
    }

    pub fn set_preferred(&self, p: bool) {
        self.preferred.store(p, Ordering::Relaxed);
    }

    pub fn in_flight_requests(&self) -> u64 {
        self.in_flight_requests.load(Ordering::Relaxed)
    }

    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight_bytes.load(Ordering::Relaxed)
    }

    /// Usable by state and ANA: the policy may pick it.
    pub fn selectable(&self) -> bool {
        self.state() == PathState::Usable && self.ana_state().accessible()
    }

    pub(crate) fn acquire(&self, bytes: u64) {
        self.in_flight_requests.fetch_add(1, Ordering::Relaxed);
        self.in_flight_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.selected.fetch_add(1, Ordering::Relaxed);
    }

    /// Releases load; clamps at zero because a counter may have been reset
    /// while requests were in flight.
    pub(crate) fn release(&self, bytes: u64) {
        let _ = self
            .in_flight_requests
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(1))
            });
        let _ = self
            .in_flight_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(bytes))
            });
    }

    pub fn mark_dirty(&self) {
        if !self.dirty.load(Ordering::Relaxed) {
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// Clears the dirty flag and says whether it was set: a flush must
    /// reach this path.
    pub fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_clamps_at_zero() {
        let p = Path::new("a", 1, false);
        p.acquire(4096);
        p.release(8192);
        p.release(1);
        assert_eq!(p.in_flight_bytes(), 0);
        assert_eq!(p.in_flight_requests(), 0);
    }

    #[test]
    fn selectable_needs_usable_and_accessible_ana() {
        let p = Path::new("a", 1, false);
        assert!(p.selectable());
        p.set_ana_state(AnaState::Inaccessible);
        assert!(!p.selectable());
        p.set_ana_state(AnaState::NonOptimized);
        assert!(p.selectable());
        p.set_state(PathState::Failed);
        assert!(!p.selectable());
    }

    #[test]
    fn dirty_is_taken_once() {
        let p = Path::new("a", 1, false);
        assert!(p.take_dirty(), "a new path is dirty");
        assert!(!p.take_dirty());
        p.mark_dirty();
        assert!(p.take_dirty());
        assert!(!p.take_dirty());
    }
}
