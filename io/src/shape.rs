//! Lab shaping and fault injection for any path: added completion latency,
//! a bandwidth cap, the path models of `lab_model` (channels, token bucket,
//! stalls, fabric link, tail), injected failures and held completions.
//! Shared by every worker (atomics; the models' state behind a lock) and
//! changeable at runtime.
//!
//! The mechanics live in each worker's [`crate::IoQueue`] (timeouts on its
//! ring), never in sleeping threads: this type only decides what happens to
//! each I/O.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use mpath::IoOutcome;

use crate::lab_model::{Model, ModelConfig};
use crate::IoOp;

/// An injected failure: an errno or an NVMe status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Errno(i32),
    Nvme(u16),
}

impl Fault {
    pub fn outcome(self) -> IoOutcome {
        match self {
            Fault::Errno(e) => IoOutcome::Errno(e),
            Fault::Nvme(s) => IoOutcome::Nvme(s),
        }
    }

    /// `EIO`, `ENODEV`, ... or `-5` (errno), or `0x370` / `nvme:0x370` (NVMe status).
    pub fn parse(s: &str) -> Option<Fault> {
        let s = s.trim();
        if let Some(hex) = s
            .strip_prefix("nvme:")
            .or(Some(s))
            .and_then(|h| h.strip_prefix("0x"))
        {
            return u16::from_str_radix(hex, 16)
                .ok()
                .filter(|&v| v != 0)
                .map(Fault::Nvme);
        }
        if let Some(n) = s.strip_prefix('-') {
            return n.parse::<i32>().ok().filter(|&e| e > 0).map(Fault::Errno);
        }
        ERRNO_NAMES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(s))
            .map(|&(_, e)| Fault::Errno(e))
    }

    fn encode(self) -> i64 {
        match self {
            Fault::Errno(e) => -i64::from(e),
            Fault::Nvme(s) => i64::from(s),
        }
    }

    fn decode(v: i64) -> Option<Fault> {
        match v {
            0 => None,
            v if v < 0 => Some(Fault::Errno((-v) as i32)),
            v => Some(Fault::Nvme(v as u16)),
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Errno(e) => match ERRNO_NAMES.iter().find(|(_, v)| v == e) {
                Some((name, _)) => f.write_str(name),
                None => write!(f, "-{e}"),
            },
            Fault::Nvme(s) => write!(f, "0x{s:03x}"),
        }
    }
}

const ERRNO_NAMES: &[(&str, i32)] = &[
    ("EINTR", libc::EINTR),
    ("EIO", libc::EIO),
    ("ENXIO", libc::ENXIO),
    ("ENODEV", libc::ENODEV),
    ("EINVAL", libc::EINVAL),
    ("ENOSPC", libc::ENOSPC),
    ("ENOLINK", libc::ENOLINK),
    ("ECONNRESET", libc::ECONNRESET),
    ("ETIMEDOUT", libc::ETIMEDOUT),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
];

/// A failing sector range: I/O touching sectors `start..=end` (512 bytes,
/// as virtio-blk counts them) fails with `fault`, as a bad block under a
/// shared image fails on every path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LbaFault {
    pub start: u64,
    pub end: u64,
    pub fault: Fault,
}

impl LbaFault {
    /// `START-END[:FAULT]` (sectors, inclusive; FAULT as for `fail`,
    /// default `EIO`), or one sector `N[:FAULT]`.
    pub fn parse(s: &str) -> Option<LbaFault> {
        let (range, fault) = match s.split_once(':') {
            Some((r, f)) => (r, Fault::parse(f)?),
            None => (s, Fault::Errno(libc::EIO)),
        };
        let (start, end) = match range.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let n = range.trim().parse().ok()?;
                (n, n)
            }
        };
        (start <= end).then_some(LbaFault { start, end, fault })
    }

    /// Whether `len` bytes at byte `offset` touch the range.
    fn hits(&self, offset: u64, len: u64) -> bool {
        len > 0 && offset / 512 <= self.end && (offset + len - 1) / 512 >= self.start
    }
}

impl std::fmt::Display for LbaFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}:{}", self.start, self.end, self.fault)
    }
}

/// A snapshot of a path's shaping, for display and configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShapeConfig {
    pub delay_us: u64,
    pub bw_mbps: u64,
    pub fail: Option<Fault>,
    /// Fail from the N-th I/O on (counting from 1); 0 = off.
    pub fail_after: u64,
    pub hang: bool,
    /// Added completion latency of flushes only.
    pub flush_delay_us: u64,
    /// Flushes (only) fail this way.
    pub flush_fail: Option<Fault>,
    /// I/O touching these sectors fails.
    pub fail_lba: Option<LbaFault>,
    /// This fraction of the path's I/O fails (parts per million), with
    /// `fail`'s fault or EIO; the choice is pseudo-random but reproducible
    /// (the n-th I/O since the fault was set always gets the same draw).
    pub fail_rate_ppm: u32,
    /// The path models beyond the pipe (see `lab_model`).
    pub model: ModelConfig,
}

/// `fail-rate=P`: a fraction 0-1 (`0.1`) or a percentage (`10%`), in ppm.
pub fn parse_fail_rate(s: &str) -> Option<u32> {
    let s = s.trim();
    let v: f64 = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok()? / 100.0,
        None => s.parse().ok()?,
    };
    (0.0..=1.0)
        .contains(&v)
        .then(|| (v * 1_000_000.0).round() as u32)
}

/// A fail rate in ppm as the fraction operators wrote (`0.1`).
pub fn fail_rate_fraction(ppm: u32) -> f64 {
    f64::from(ppm) / 1_000_000.0
}

/// splitmix64: a well-mixed draw from a counter.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl ShapeConfig {
    pub fn is_active(&self) -> bool {
        *self != ShapeConfig::default()
    }
}

/// What happens to one I/O at submission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Send it to the device.
    Send,
    /// Do not touch the device; complete with this failure.
    Fail(IoOutcome),
}

/// How many [`Shaping`]s in the process are active, at least: counted
/// before one's flag rises and after it falls, so that while it reads 0 no
/// flag is up. An I/O queue reads it (one load) before looking up a path's
/// shaping at all.
static ACTIVE_ANYWHERE: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Default)]
pub struct Shaping {
    delay_us: AtomicU64,
    bw_bytes_per_s: AtomicU64,
    /// Token bucket as a virtual clock: when the link is next free (ns).
    link_free_at_ns: AtomicU64,
    fail: AtomicI64,
    fail_after: AtomicU64,
    count: AtomicU64,
    hang: AtomicBool,
    flush_delay_us: AtomicU64,
    flush_fail: AtomicI64,
    /// `fail_lba`: its fault (0: off) and sector range.
    lba_fault: AtomicI64,
    lba_start: AtomicU64,
    lba_end: AtomicU64,
    /// `fail_rate`, parts per million (0: off).
    fail_rate_ppm: AtomicU64,
    /// The path models: their settings and, while any is on, their state
    /// (shared by the path's workers; a lab path only, so a lock is fine).
    model: Mutex<ModelSlot>,
    /// Quick check for the hot path: anything configured at all.
    active: AtomicBool,
}

impl Shaping {
    pub fn new(cfg: &ShapeConfig) -> Self {
        let s = Self::default();
        s.set(cfg);
        s
    }

    /// Replaces the whole configuration; the I/O counter of `fail_after`
    /// restarts.
    pub fn set(&self, cfg: &ShapeConfig) {
        self.delay_us.store(cfg.delay_us, Ordering::Relaxed);
        self.bw_bytes_per_s
            .store(cfg.bw_mbps.saturating_mul(1_000_000), Ordering::Relaxed);
        self.fail
            .store(cfg.fail.map_or(0, Fault::encode), Ordering::Relaxed);
        self.fail_after.store(cfg.fail_after, Ordering::Relaxed);
        self.count.store(0, Ordering::Relaxed);
        self.hang.store(cfg.hang, Ordering::Release);
        self.flush_delay_us
            .store(cfg.flush_delay_us, Ordering::Relaxed);
        self.flush_fail
            .store(cfg.flush_fail.map_or(0, Fault::encode), Ordering::Relaxed);
        let lba = cfg.fail_lba;
        self.lba_start
            .store(lba.map_or(0, |l| l.start), Ordering::Relaxed);
        self.lba_end
            .store(lba.map_or(0, |l| l.end), Ordering::Relaxed);
        self.lba_fault
            .store(lba.map_or(0, |l| l.fault.encode()), Ordering::Relaxed);
        self.fail_rate_ppm
            .store(u64::from(cfg.fail_rate_ppm), Ordering::Relaxed);
        // A new setting starts the models afresh (full bucket, idle
        // channels, the first window).
        *self.model_slot() = ModelSlot {
            state: cfg.model.is_active().then(|| Model::new(&cfg.model)),
            cfg: cfg.model.clone(),
        };
        // The flag rises after it is counted and falls before the count
        // does (see `ACTIVE_ANYWHERE`); the swap tells which set turned it,
        // when several race.
        if cfg.is_active() {
            ACTIVE_ANYWHERE.fetch_add(1, Ordering::SeqCst);
            if self.active.swap(true, Ordering::SeqCst) {
                // Counted already.
                ACTIVE_ANYWHERE.fetch_sub(1, Ordering::SeqCst);
            }
        } else if self.active.swap(false, Ordering::SeqCst) {
            ACTIVE_ANYWHERE.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Whether any shaping in the process may be active: `false` means
    /// [`Shaping::is_active`] is `false` for every one (without finding
    /// the one that matters).
    #[inline]
    pub fn any_active() -> bool {
        ACTIVE_ANYWHERE.load(Ordering::SeqCst) > 0
    }

    pub fn get(&self) -> ShapeConfig {
        ShapeConfig {
            delay_us: self.delay_us.load(Ordering::Relaxed),
            bw_mbps: self.bw_bytes_per_s.load(Ordering::Relaxed) / 1_000_000,
            fail: Fault::decode(self.fail.load(Ordering::Relaxed)),
            fail_after: self.fail_after.load(Ordering::Relaxed),
            hang: self.hang.load(Ordering::Acquire),
            flush_delay_us: self.flush_delay_us.load(Ordering::Relaxed),
            flush_fail: Fault::decode(self.flush_fail.load(Ordering::Relaxed)),
            fail_lba: self.lba_fault(),
            fail_rate_ppm: self.fail_rate_ppm.load(Ordering::Relaxed) as u32,
            model: self.model_slot().cfg.clone(),
        }
    }

    /// The models' lock (a worker that panicked holding it left numbers,
    /// not broken invariants: go on with them).
    fn model_slot(&self) -> MutexGuard<'_, ModelSlot> {
        self.model.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long the path models hold `op` on `bytes`, which the device
    /// completed at `now_ns`: the models are a stage after the device, so
    /// this adds to [`Shaping::completion_delay`].
    pub fn model_delay(&self, op: IoOp, bytes: u64, now_ns: u64) -> Duration {
        if !self.is_active() {
            return Duration::ZERO;
        }
        let mut slot = self.model_slot();
        match &mut slot.state {
            Some(m) => Duration::from_nanos(m.latency(op, bytes, now_ns)),
            None => Duration::ZERO,
        }
    }

    fn lba_fault(&self) -> Option<LbaFault> {
        Some(LbaFault {
            fault: Fault::decode(self.lba_fault.load(Ordering::Relaxed))?,
            start: self.lba_start.load(Ordering::Relaxed),
            end: self.lba_end.load(Ordering::Relaxed),
        })
    }

    /// [`Shaping::admit`] for `op` on `len` bytes at byte `offset`: also
    /// the faults that hit flushes only or a sector range only.
    #[inline]
    pub fn admit_io(&self, op: IoOp, offset: u64, len: u64) -> Admission {
        // Inline (called from other crates on every submission): the
        // inactive case is one load, the rest out of line.
        if !self.is_active() {
            return Admission::Send;
        }
        self.admit_shaped(op, offset, len)
    }

    #[inline(never)]
    fn admit_shaped(&self, op: IoOp, offset: u64, len: u64) -> Admission {
        if let Admission::Fail(o) = self.admit() {
            return Admission::Fail(o);
        }
        if op == IoOp::Flush {
            if let Some(f) = Fault::decode(self.flush_fail.load(Ordering::Relaxed)) {
                return Admission::Fail(f.outcome());
            }
        }
        match self.lba_fault() {
            Some(l) if l.hits(offset, len) => Admission::Fail(l.fault.outcome()),
            _ => Admission::Send,
        }
    }

    /// Extra completion latency of `op` beyond [`Shaping::completion_delay`]
    /// (`flush_delay_us` for flushes).
    pub fn op_delay(&self, op: IoOp) -> Duration {
        if op != IoOp::Flush || !self.is_active() {
            return Duration::ZERO;
        }
        Duration::from_micros(self.flush_delay_us.load(Ordering::Relaxed))
    }

    #[inline]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Decides at submission whether the I/O reaches the device.
    pub fn admit(&self) -> Admission {
        if !self.is_active() {
            return Admission::Send;
        }
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let fail = Fault::decode(self.fail.load(Ordering::Relaxed));
        let after = self.fail_after.load(Ordering::Relaxed);
        if after > 0 && n >= after {
            return Admission::Fail(fail.unwrap_or(Fault::Errno(libc::EIO)).outcome());
        }
        let rate = self.fail_rate_ppm.load(Ordering::Relaxed);
        if rate > 0 {
            // `fail` is the fault of `fail_rate`, not a fault of every I/O.
            return if mix(n) % 1_000_000 < rate {
                Admission::Fail(fail.unwrap_or(Fault::Errno(libc::EIO)).outcome())
            } else {
                Admission::Send
            };
        }
        match fail {
            Some(f) if after == 0 => Admission::Fail(f.outcome()),
            _ => Admission::Send,
        }
    }

    /// Extra time before the completion of `bytes` (finished at `now_ns`
    /// on a monotonic clock) is delivered: the added delay plus the wait for
    /// the bandwidth cap's token bucket.
    pub fn completion_delay(&self, bytes: u64, now_ns: u64) -> Duration {
        if !self.is_active() {
            return Duration::ZERO;
        }
        let mut ns = self.delay_us.load(Ordering::Relaxed).saturating_mul(1000);
        let bw = self.bw_bytes_per_s.load(Ordering::Relaxed);
        if bw > 0 && bytes > 0 {
            let cost = (u128::from(bytes) * 1_000_000_000 / u128::from(bw)) as u64;
            let prev = self
                .link_free_at_ns
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                    Some(free.max(now_ns).saturating_add(cost))
                })
                .unwrap_or(now_ns);
            let done_at = prev.max(now_ns).saturating_add(cost);
            ns = ns.max(done_at.saturating_sub(now_ns));
        }
        Duration::from_nanos(ns)
    }

    /// Completions are held while this is set.
    pub fn hang(&self) -> bool {
        self.hang.load(Ordering::Acquire)
    }
}

/// The models' settings and state.
#[derive(Debug, Default)]
struct ModelSlot {
    cfg: ModelConfig,
    state: Option<Model>,
}

impl Drop for Shaping {
    fn drop(&mut self) {
        if *self.active.get_mut() {
            uncount_dropped();
        }
    }
}

/// An active shaping was dropped (out of line: rare, and the drop glue of
/// what holds a shaping stays small).
#[cold]
#[inline(never)]
fn uncount_dropped() {
    ACTIVE_ANYWHERE.fetch_sub(1, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_faults() {
        assert_eq!(Fault::parse("EIO"), Some(Fault::Errno(5)));
        assert_eq!(Fault::parse("enodev"), Some(Fault::Errno(19)));
        assert_eq!(Fault::parse("-110"), Some(Fault::Errno(110)));
        assert_eq!(Fault::parse("0x370"), Some(Fault::Nvme(0x370)));
        assert_eq!(Fault::parse("nvme:0x281"), Some(Fault::Nvme(0x281)));
        for bad in ["", "EWHAT", "0x", "0x0", "-0", "12", "nvme:370"] {
            assert_eq!(Fault::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Fault::Errno(5).to_string(), "EIO");
        assert_eq!(
            Fault::parse(&Fault::Nvme(0x371).to_string()),
            Some(Fault::Nvme(0x371))
        );
    }

    #[test]
    fn fail_and_fail_after() {
        let s = Shaping::new(&ShapeConfig {
            fail: Some(Fault::Errno(libc::ENODEV)),
            ..Default::default()
        });
        assert_eq!(s.admit(), Admission::Fail(IoOutcome::Errno(libc::ENODEV)));
        s.set(&ShapeConfig {
            fail_after: 3,
            ..Default::default()
        });
        assert_eq!(s.admit(), Admission::Send);
        assert_eq!(s.admit(), Admission::Send);
        assert_eq!(s.admit(), Admission::Fail(IoOutcome::Errno(libc::EIO)));
        assert_eq!(s.admit(), Admission::Fail(IoOutcome::Errno(libc::EIO)));
        s.set(&ShapeConfig::default());
        assert_eq!(s.admit(), Admission::Send);
        assert!(!s.is_active());
    }

    #[test]
    fn delay_and_bandwidth() {
        let s = Shaping::new(&ShapeConfig {
            delay_us: 500,
            ..Default::default()
        });
        assert_eq!(s.completion_delay(4096, 0), Duration::from_micros(500));
        // 1 MB/s: 1000 bytes cost 1 ms; back-to-back transfers queue up.
        s.set(&ShapeConfig {
            bw_mbps: 1,
            ..Default::default()
        });
        let t0 = 1_000_000_000;
        assert_eq!(s.completion_delay(1000, t0), Duration::from_millis(1));
        assert_eq!(s.completion_delay(1000, t0), Duration::from_millis(2));
        // After the link went idle, no backlog.
        assert_eq!(
            s.completion_delay(1000, t0 + 10_000_000),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn path_models_add_their_latency_and_restart_when_set() {
        let cfg = ShapeConfig {
            model: ModelConfig {
                channels: 2,
                service_us: 1000,
                ..Default::default()
            },
            ..Default::default()
        };
        let s = Shaping::new(&cfg);
        assert!(s.is_active());
        assert_eq!(s.get(), cfg);
        let t0 = 1_000_000_000;
        let ms = Duration::from_millis;
        let lat: Vec<Duration> = (0..3)
            .map(|_| s.model_delay(IoOp::Read, 4096, t0))
            .collect();
        assert_eq!(lat, [ms(1), ms(1), ms(2)]);
        // The same setting again: idle channels.
        s.set(&cfg);
        assert_eq!(s.model_delay(IoOp::Read, 4096, t0), ms(1));
        s.set(&ShapeConfig::default());
        assert_eq!(s.model_delay(IoOp::Read, 4096, t0), Duration::ZERO);
        assert!(!s.is_active());
    }

    #[test]
    fn flush_only_and_sector_range_faults() {
        let s = Shaping::new(&ShapeConfig {
            flush_delay_us: 700,
            flush_fail: Some(Fault::Errno(libc::EIO)),
            fail_lba: LbaFault::parse("8-15:ENOSPC"),
            ..Default::default()
        });
        let eio = Admission::Fail(IoOutcome::Errno(libc::EIO));
        let enospc = Admission::Fail(IoOutcome::Errno(libc::ENOSPC));
        assert_eq!(s.admit_io(IoOp::Flush, 0, 0), eio);
        assert_eq!(s.admit_io(IoOp::Read, 0, 4096), Admission::Send);
        assert_eq!(s.admit_io(IoOp::Read, 4096, 512), enospc);
        assert_eq!(s.admit_io(IoOp::Write { fua: false }, 0, 4097), enospc);
        assert_eq!(s.admit_io(IoOp::Read, 8192, 512), Admission::Send);
        assert_eq!(s.admit_io(IoOp::Discard, 7680, 1024), enospc);
        assert_eq!(s.admit(), Admission::Send, "probes are not guest I/O");
        assert_eq!(s.op_delay(IoOp::Flush), Duration::from_micros(700));
        assert_eq!(s.op_delay(IoOp::Read), Duration::ZERO);
        assert_eq!(s.get().fail_lba, LbaFault::parse("8-15:ENOSPC"));
        assert_eq!(
            LbaFault::parse("5"),
            Some(LbaFault {
                start: 5,
                end: 5,
                fault: Fault::Errno(libc::EIO)
            })
        );
        assert_eq!(
            LbaFault::parse(&LbaFault::parse("1-2:0x281").unwrap().to_string()),
            LbaFault::parse("1-2:0x281")
        );
        for bad in ["", "2-1", "a-b", "1-2:EWHAT", "-3", "1-"] {
            assert_eq!(LbaFault::parse(bad), None, "{bad:?}");
        }
        s.set(&ShapeConfig::default());
        assert_eq!(s.admit_io(IoOp::Flush, 0, 0), Admission::Send);
        assert_eq!(s.get(), ShapeConfig::default());
    }

    #[test]
    fn fail_rate_fails_that_fraction_reproducibly() {
        assert_eq!(parse_fail_rate("0.1"), Some(100_000));
        assert_eq!(parse_fail_rate("25%"), Some(250_000));
        assert_eq!(parse_fail_rate("0"), Some(0));
        assert_eq!(parse_fail_rate("1.5"), None);
        assert_eq!(parse_fail_rate("often"), None);
        let cfg = ShapeConfig {
            fail_rate_ppm: 100_000,
            ..Default::default()
        };
        let draws = |s: &Shaping| -> Vec<bool> {
            (0..10_000).map(|_| s.admit() != Admission::Send).collect()
        };
        let s = Shaping::new(&cfg);
        let a = draws(&s);
        let failed = a.iter().filter(|&&f| f).count();
        assert!((900..1100).contains(&failed), "{failed} of 10000");
        s.set(&cfg);
        assert_eq!(draws(&s), a, "the same draws after a reset");
        // With `fail` set, fail-rate fails that way (and only that fraction).
        let s = Shaping::new(&ShapeConfig {
            fail: Some(Fault::Errno(libc::ENODEV)),
            ..cfg
        });
        let outs: Vec<Admission> = (0..1000).map(|_| s.admit()).collect();
        assert!(outs.contains(&Admission::Fail(IoOutcome::Errno(libc::ENODEV))));
        assert!(outs.iter().filter(|o| **o == Admission::Send).count() > 800);
    }

    #[test]
    fn hang_toggles() {
        let s = Shaping::new(&ShapeConfig {
            hang: true,
            ..Default::default()
        });
        assert!(s.hang());
        s.set(&ShapeConfig::default());
        assert!(!s.hang());
    }
}
