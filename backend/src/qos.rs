//! The disk's QoS budget, shared by all its queues and paths: the buckets
//! (`mpath::Throttle`) behind a lock taken only while a limit is set (or
//! requests are held), and the counters of what was held.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use mpath::{Nanos, QosDir, QosLimits, Throttle, QOS_FIELDS};

#[derive(Debug, Default)]
pub struct DiskQos {
    /// Any limit set: read without the lock on every request.
    on: AtomicBool,
    throttle: Mutex<Throttle>,
    /// Requests that had to wait, their bytes, and the time they waited.
    held_requests: AtomicU64,
    held_bytes: AtomicU64,
    held_ns: AtomicU64,
    /// Requests waiting now (all queues).
    holding: AtomicU64,
}

/// What was held, for `get_stats`, `get_qos` and `/metrics`.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeldStats {
    pub requests: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub holding: u64,
}

impl DiskQos {
    /// A budget with `limits` (validated by the caller).
    pub fn new(limits: QosLimits) -> Self {
        let q = Self::default();
        q.set(limits, 0);
        q
    }

    /// New limits, with empty buckets (as QEMU does on a change).
    pub fn set(&self, limits: QosLimits, now: Nanos) {
        let mut t = self.lock();
        *t = Throttle::new(limits, now);
        self.on.store(limits.any(), Ordering::Release);
    }

    pub fn limits(&self) -> QosLimits {
        *self.lock().limits()
    }

    /// Whether any limit is set (one relaxed load: the hot path's cost
    /// without limits).
    #[inline]
    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Lets a request of `bytes` go now (counted) or says how long it must
    /// wait. Without limits it always goes.
    pub fn admit(&self, dir: QosDir, bytes: u64, now: Nanos) -> Result<(), Nanos> {
        if !self.on() {
            return Ok(());
        }
        self.lock().admit(dir, bytes, now)
    }

    pub fn note_held(&self, bytes: u64) {
        self.held_requests.fetch_add(1, Ordering::Relaxed);
        self.held_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.holding.fetch_add(1, Ordering::Relaxed);
    }

    /// A held request left the hold after `waited` ns (sent, or dropped
    /// with its queue).
    pub fn note_released(&self, waited: Nanos) {
        self.held_ns.fetch_add(waited, Ordering::Relaxed);
        self.holding.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn held(&self) -> HeldStats {
        HeldStats {
            requests: self.held_requests.load(Ordering::Relaxed),
            bytes: self.held_bytes.load(Ordering::Relaxed),
            seconds: self.held_ns.load(Ordering::Relaxed) as f64 / 1e9,
            holding: self.holding.load(Ordering::Relaxed),
        }
    }

    pub fn reset_stats(&self) {
        self.held_requests.store(0, Ordering::Relaxed);
        self.held_bytes.store(0, Ordering::Relaxed);
        self.held_ns.store(0, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Throttle> {
        self.throttle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `KEY=VALUE[,KEY=VALUE...]` (the `--qos` flag, the `qos` command) over
/// `base`; 0 removes a limit.
pub fn parse_limits(base: QosLimits, spec: &str) -> Result<QosLimits, String> {
    let mut l = base;
    for kv in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("qos {kv:?}: expected KEY=VALUE"))?;
        let field = l.field_mut(k.trim()).ok_or_else(|| {
            format!(
                "qos: unknown limit {k:?} (known: {})",
                QOS_FIELDS.join(", ")
            )
        })?;
        *field = v
            .trim()
            .parse()
            .map_err(|_| format!("qos {k}: {v:?} is not a whole number"))?;
    }
    l.validate()?;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let l = parse_limits(
            QosLimits::default(),
            "total_iops_sec=500, write_bytes_sec=8000000",
        )
        .unwrap();
        assert_eq!((l.total_iops_sec, l.write_bytes_sec), (500, 8_000_000));
        let l = parse_limits(l, "total_iops_sec=0").unwrap();
        assert_eq!((l.total_iops_sec, l.write_bytes_sec), (0, 8_000_000));
        assert!(parse_limits(l, "iops=5").is_err());
        assert!(parse_limits(l, "read_iops_sec=x").is_err());
        assert!(parse_limits(l, "total_iops_sec_max=5").is_err());
    }

    #[test]
    fn off_without_limits() {
        let q = DiskQos::new(QosLimits::default());
        assert!(!q.on());
        assert_eq!(q.admit(QosDir::Read, 1 << 30, 0), Ok(()));
        q.set(
            parse_limits(QosLimits::default(), "read_iops_sec=1").unwrap(),
            0,
        );
        assert!(q.on());
    }
}
