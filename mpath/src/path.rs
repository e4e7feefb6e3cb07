//! One path to the disk: its identity, state, load counters and statistics.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::health::PathHealth;
use crate::marginal::{Marginal, MarginalConfig};
use crate::stats::PathStats;
use crate::time::{nanos, Nanos};

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

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Optimized,
            Self::NonOptimized,
            Self::Inaccessible,
            Self::PersistentLoss,
            Self::Change,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
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

const NO_NODE: u32 = u32::MAX;

/// `Path::selection`: the state (a `PathState`), the ANA state (an
/// `AnaState`, shifted) and the marginal flag.
const STATE_BITS: u8 = 0b11;
const ANA_SHIFT: u32 = 2;
const ANA_BITS: u8 = 0b111 << ANA_SHIFT;
const MARGINAL_BIT: u8 = 1 << 5;

/// A path's state, ANA state and marginal flag, read together
/// ([`Path::standing`]): what selection looks at for every path.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Standing(u8);

impl Standing {
    /// Usable, in the optimized ANA group.
    #[inline]
    pub fn optimized(self) -> bool {
        self.0 & (STATE_BITS | ANA_BITS)
            == PathState::Usable as u8 | (AnaState::Optimized as u8) << ANA_SHIFT
    }

    /// Usable, in the non-optimized ANA group.
    #[inline]
    pub fn non_optimized(self) -> bool {
        self.0 & (STATE_BITS | ANA_BITS)
            == PathState::Usable as u8 | (AnaState::NonOptimized as u8) << ANA_SHIFT
    }

    /// Marked marginal.
    #[inline]
    pub fn marginal(self) -> bool {
        self.0 & MARGINAL_BIT != 0
    }
}

/// A path's name: set once, when its slot in the engine is filled, and
/// immutable afterwards (logs and statistics may hold on to it).
#[derive(Default)]
pub struct PathName(OnceLock<String>);

impl PathName {
    pub fn as_str(&self) -> &str {
        self.0.get().map_or("", String::as_str)
    }
}

impl Deref for PathName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for PathName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for PathName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for PathName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for PathName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl serde::Serialize for PathName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A path with its load counters, shared by every worker (atomics only on
/// the I/O path; the health record is locked only on failures and probes).
/// What completions count lives in the workers' statistics shards
/// ([`crate::StatsShard`]); here only what every worker must see at once.
///
/// The engine allocates its paths up front as vacant slots and fills one
/// when a path is added ([`Path::occupy`]); the name is set then and never
/// changes.
#[derive(Debug)]
pub struct Path {
    pub name: PathName,
    /// What a selection looks at, in one byte read with one load: the
    /// state, the ANA state and the marginal flag (`STATE_BITS`,
    /// `ANA_BITS`, `MARGINAL_BIT`). Read and written SeqCst (the state's
    /// part of the drain handshake).
    selection: AtomicU8,
    /// `relative_throughput` of dm-ps-service-time: 0 (standby) to 100.
    weight: AtomicU32,
    preferred: AtomicBool,
    in_flight_requests: AtomicU64,
    in_flight_bytes: AtomicU64,
    /// Write generation: writes completed on the path (1 at start: data
    /// written before this process started may sit in a volatile cache).
    writes_done: AtomicU64,
    /// The write generation the last successful flush of the path covered:
    /// the path owes a flush while this is below `writes_done`.
    flushed: AtomicU64,
    /// A flush through any path of the disk makes this path's completed
    /// writes durable (the cache is the device's or the file's); false for
    /// a path with a cache of its own (a block device node's page cache).
    flush_via_any: AtomicBool,
    /// NUMA node of the path's device (`NO_NODE`: unknown).
    numa_node: AtomicU32,
    /// Ghost-write guard: how long a cancelled or timed-out write waits
    /// before it is re-sent on another path.
    write_failover_delay_ns: AtomicU64,
    /// Command Retry Delay Times (CRDT1-3, units of 100 ms).
    crdt: [AtomicU16; 3],
    /// Busy-time accounting: when the path last went from idle to busy,
    /// and the total time it had I/O in flight before that.
    busy_since: AtomicU64,
    busy_ns: AtomicU64,
    /// When the path last became usable (0: at start or unknown).
    usable_since: AtomicU64,
    pub stats: PathStats,
    pub(crate) health: Mutex<PathHealth>,
    /// Marginal detection is on for this path (skip the lock when off).
    marginal_on: AtomicBool,
    /// When a completion must take `marginal` to absorb the shards' results
    /// and judge the window (mirrors `Marginal::judge_due`; 0: at once).
    marginal_due: AtomicU64,
    pub(crate) marginal: Mutex<MarginalState>,
}

/// A path's marginal record and its own settings (`None`: the disk's).
#[derive(Debug, Default)]
pub(crate) struct MarginalState {
    pub rec: Marginal,
    pub config: Option<MarginalConfig>,
    /// The shards' results (good, bad) already taken into `rec`.
    pub seen: (u64, u64),
}

impl Path {
    pub fn new(name: impl Into<String>, weight: u32, preferred: bool) -> Self {
        let p = Self::vacant();
        p.occupy(name.into(), weight, preferred);
        p
    }

    /// A slot not holding a path yet (state `removed`, no name).
    pub(crate) fn vacant() -> Self {
        Self {
            name: PathName::default(),
            selection: AtomicU8::new(
                PathState::Removed as u8 | (AnaState::Optimized as u8) << ANA_SHIFT,
            ),
            weight: AtomicU32::new(1),
            preferred: AtomicBool::new(false),
            in_flight_requests: AtomicU64::new(0),
            in_flight_bytes: AtomicU64::new(0),
            // Data written before this process started may still sit in a
            // volatile cache: the first flush must reach every path.
            writes_done: AtomicU64::new(1),
            flushed: AtomicU64::new(0),
            flush_via_any: AtomicBool::new(true),
            numa_node: AtomicU32::new(NO_NODE),
            write_failover_delay_ns: AtomicU64::new(0),
            crdt: Default::default(),
            busy_since: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            usable_since: AtomicU64::new(0),
            stats: PathStats::default(),
            health: Mutex::new(PathHealth::default()),
            marginal_on: AtomicBool::new(false),
            marginal_due: AtomicU64::new(0),
            marginal: Mutex::new(MarginalState::default()),
        }
    }

    /// Fills a vacant slot: usable, with this name, weight and preference.
    /// Runs before the engine publishes the slot to the workers.
    pub(crate) fn occupy(&self, name: String, weight: u32, preferred: bool) {
        let fresh = self.name.0.set(name).is_ok();
        debug_assert!(fresh, "a path slot is filled once");
        self.set_weight(weight);
        self.set_preferred(preferred);
        self.set_state(PathState::Usable);
    }

    // The state is read and written SeqCst: together with the SeqCst
    // increment of the in-flight count in `acquire` this is the handshake
    // that lets the control plane drain a path (see `Engine::select_in`).
    pub fn state(&self) -> PathState {
        PathState::from_u8(self.selection.load(Ordering::SeqCst) & STATE_BITS)
    }

    /// Sets the state without a timestamp (prefer `Engine::set_path_state`).
    pub fn set_state(&self, s: PathState) {
        self.update_selection(STATE_BITS, s as u8);
    }

    pub(crate) fn set_state_at(&self, s: PathState, now: Nanos) {
        let old = self.update_selection(STATE_BITS, s as u8) & STATE_BITS;
        if s == PathState::Usable && old != s as u8 {
            self.usable_since.store(now, Ordering::Release);
        }
    }

    /// A path added while the disk runs became usable now.
    pub(crate) fn usable_since_now(&self, now: Nanos) {
        self.usable_since.store(now, Ordering::Release);
    }

    /// When the path last became usable (0: since start, or unknown).
    pub fn usable_since(&self) -> Nanos {
        self.usable_since.load(Ordering::Acquire)
    }

    pub fn ana_state(&self) -> AnaState {
        AnaState::from_u8((self.selection.load(Ordering::SeqCst) & ANA_BITS) >> ANA_SHIFT)
    }

    pub fn set_ana_state(&self, s: AnaState) {
        self.update_selection(ANA_BITS, (s as u8) << ANA_SHIFT);
    }

    /// Replaces the `bits` of `selection` with `value`; returns the old byte.
    fn update_selection(&self, bits: u8, value: u8) -> u8 {
        let set = |w: u8| Some(w & !bits | value);
        match self
            .selection
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, set)
        {
            Ok(old) | Err(old) => old,
        }
    }

    /// The state, ANA state and marginal flag as one load saw them.
    #[inline]
    pub(crate) fn standing(&self) -> Standing {
        Standing(self.selection.load(Ordering::SeqCst))
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

    /// NUMA node of the path's device, as the backend read it from sysfs.
    pub fn numa_node(&self) -> Option<u32> {
        match self.numa_node.load(Ordering::Relaxed) {
            NO_NODE => None,
            n => Some(n),
        }
    }

    pub fn set_numa_node(&self, node: Option<u32>) {
        self.numa_node
            .store(node.unwrap_or(NO_NODE), Ordering::Relaxed);
    }

    pub fn write_failover_delay(&self) -> Duration {
        Duration::from_nanos(self.write_failover_delay_ns.load(Ordering::Relaxed))
    }

    /// The ghost-write guard of this path (default 0; the backend sets the
    /// controller's Command Quiesce Time when it reports one).
    pub fn set_write_failover_delay(&self, d: Duration) {
        self.write_failover_delay_ns
            .store(nanos(d), Ordering::Relaxed);
    }

    /// Marked marginal: takes I/O only when no healthy path is usable.
    pub fn is_marginal(&self) -> bool {
        self.standing().marginal()
    }

    pub(crate) fn set_marginal_flag(&self, m: bool) {
        self.update_selection(MARGINAL_BIT, if m { MARGINAL_BIT } else { 0 });
    }

    pub(crate) fn marginal_on(&self) -> bool {
        self.marginal_on.load(Ordering::Relaxed)
    }

    pub(crate) fn set_marginal_on(&self, on: bool) {
        self.marginal_on.store(on, Ordering::Relaxed);
    }

    /// Whether a completion at `now` should look at the marginal window.
    #[inline]
    pub(crate) fn marginal_judge_due(&self, now: Nanos) -> bool {
        now >= self.marginal_due.load(Ordering::Relaxed)
    }

    pub(crate) fn set_marginal_due(&self, due: Nanos) {
        self.marginal_due.store(due, Ordering::Relaxed);
    }

    pub fn crdt(&self) -> [u16; 3] {
        [0, 1, 2].map(|i| self.crdt[i].load(Ordering::Relaxed))
    }

    /// The controller's Command Retry Delay Times (Identify Controller).
    pub fn set_crdt(&self, crdt: [u16; 3]) {
        for (a, v) in self.crdt.iter().zip(crdt) {
            a.store(v, Ordering::Relaxed);
        }
    }

    pub fn in_flight_requests(&self) -> u64 {
        self.in_flight_requests.load(Ordering::Relaxed)
    }

    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight_bytes.load(Ordering::Relaxed)
    }

    /// Total time this path had I/O in flight, up to `now`.
    pub fn busy_time(&self, now: Nanos) -> Nanos {
        let done = self.busy_ns.load(Ordering::Relaxed);
        if self.in_flight_requests() > 0 {
            done + now.saturating_sub(self.busy_since.load(Ordering::Relaxed))
        } else {
            done
        }
    }

    /// Usable by state and ANA: the policy may pick it.
    pub fn selectable(&self) -> bool {
        self.state() == PathState::Usable && self.ana_state().accessible()
    }

    pub(crate) fn acquire(&self, bytes: u64, now: Nanos) {
        // SeqCst: the drain handshake (a plain locked add on x86 either way).
        if self.in_flight_requests.fetch_add(1, Ordering::SeqCst) == 0 {
            self.busy_since.store(now, Ordering::Relaxed);
        }
        self.in_flight_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Takes back an `acquire` whose path turned out to be draining.
    pub(crate) fn unacquire(&self, bytes: u64, now: Nanos) {
        self.release(bytes, now);
    }

    /// No I/O accounted on the path: what a drain waits for.
    pub fn idle(&self) -> bool {
        self.in_flight_requests.load(Ordering::SeqCst) == 0
    }

    /// Releases load; clamps at zero because a counter may have been reset
    /// while requests were in flight.
    pub(crate) fn release(&self, bytes: u64, now: Nanos) {
        let prev = self
            .in_flight_requests
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(1))
            })
            .unwrap_or(0);
        if prev == 1 {
            let since = self.busy_since.load(Ordering::Relaxed);
            self.busy_ns
                .fetch_add(now.saturating_sub(since), Ordering::Relaxed);
        }
        let _ = self
            .in_flight_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(bytes))
            });
    }

    /// A write (or discard, write-zeroes) completed on the path: it owes a
    /// flush from now on. SeqCst with the reads in [`Path::owes_flush`]: a
    /// flush received after the guest saw this completion must see it.
    pub fn note_write_done(&self) {
        self.writes_done.fetch_add(1, Ordering::SeqCst);
    }

    /// Writes completed on the path so far (its write generation).
    pub fn write_generation(&self) -> u64 {
        self.writes_done.load(Ordering::SeqCst)
    }

    /// The write generation the path's flushes have made durable.
    pub fn flushed_generation(&self) -> u64 {
        self.flushed.load(Ordering::SeqCst)
    }

    /// Whether a write completed on the path since its last successful flush.
    pub fn owes_flush(&self) -> bool {
        self.flushed_generation() < self.write_generation()
    }

    /// A flush sent when the write generation was `gen` succeeded: every
    /// write up to it is durable. Concurrent flushes may finish in any
    /// order; the highest generation wins.
    pub fn flush_covered(&self, gen: u64) {
        self.flushed.fetch_max(gen, Ordering::SeqCst);
    }

    /// Whether a flush through another path of the disk makes this path's
    /// completed writes durable.
    pub fn flush_via_any(&self) -> bool {
        self.flush_via_any.load(Ordering::Relaxed)
    }

    pub fn set_flush_via_any(&self, v: bool) {
        self.flush_via_any.store(v, Ordering::Relaxed);
    }

    /// A copy of the health record (failed, probes, quarantine).
    pub fn health(&self) -> PathHealth {
        *self.health.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_clamps_at_zero() {
        let p = Path::new("a", 1, false);
        p.acquire(4096, 0);
        p.release(8192, 0);
        p.release(1, 0);
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
    fn state_ana_state_and_marginal_flag_are_set_apart() {
        let p = Path::new("a", 1, false);
        assert!(p.standing().optimized() && !p.standing().marginal());
        p.set_ana_state(AnaState::NonOptimized);
        p.set_marginal_flag(true);
        assert!(p.standing().non_optimized() && p.standing().marginal());
        p.set_state_at(PathState::Failed, 10);
        assert_eq!(p.state(), PathState::Failed);
        assert_eq!(p.ana_state(), AnaState::NonOptimized);
        assert!(p.is_marginal());
        let s = p.standing();
        assert!(!s.optimized() && !s.non_optimized(), "not usable");
        p.set_state_at(PathState::Usable, 20);
        assert_eq!(p.usable_since(), 20);
        p.set_marginal_flag(false);
        p.set_ana_state(AnaState::Change);
        assert_eq!(p.ana_state(), AnaState::Change);
        assert_eq!(p.state(), PathState::Usable);
        assert!(!p.is_marginal());
        let s = p.standing();
        assert!(!s.optimized() && !s.non_optimized(), "not accessible");
    }

    #[test]
    fn a_path_owes_a_flush_until_one_sent_after_its_writes_succeeds() {
        let p = Path::new("a", 1, false);
        assert!(p.owes_flush(), "a new path may hold data from before start");
        let sent = p.write_generation();
        p.flush_covered(sent);
        assert!(!p.owes_flush());
        p.note_write_done();
        assert!(p.owes_flush());
        // A flush sent before that write does not cover it.
        p.flush_covered(sent);
        assert!(p.owes_flush());
        // Two flushes finishing out of order: the later generation stays.
        let g = p.write_generation();
        p.note_write_done();
        let g2 = p.write_generation();
        p.flush_covered(g2);
        p.flush_covered(g);
        assert_eq!(p.flushed_generation(), g2);
        assert!(!p.owes_flush());
    }

    #[test]
    fn busy_time_counts_only_time_with_io_in_flight() {
        let p = Path::new("a", 1, false);
        p.acquire(1, 100);
        p.acquire(1, 150);
        assert_eq!(p.busy_time(170), 70);
        p.release(1, 200);
        p.release(1, 300);
        assert_eq!(p.busy_time(1000), 200);
        p.acquire(1, 2000);
        assert_eq!(p.busy_time(2050), 250);
    }

    #[test]
    fn options_round_trip() {
        let p = Path::new("a", 250, false);
        assert_eq!(p.weight(), 100, "weight is capped at 100");
        assert_eq!(p.numa_node(), None);
        p.set_numa_node(Some(1));
        assert_eq!(p.numa_node(), Some(1));
        p.set_crdt([1, 2, 3]);
        assert_eq!(p.crdt(), [1, 2, 3]);
        p.set_write_failover_delay(Duration::from_millis(20));
        assert_eq!(p.write_failover_delay(), Duration::from_millis(20));
        assert_eq!(
            AnaState::parse("non-optimized"),
            Some(AnaState::NonOptimized)
        );
        assert_eq!(AnaState::parse("x"), None);
    }
}
