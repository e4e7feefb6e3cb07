//! Per-disk QoS limits: one leaky bucket per limit, as QEMU's throttling
//! (util/throttle.c) and libvirt's `<iotune>` define them, so the names mean
//! what operators know them to mean.
//!
//! - A bucket's level rises by what a request costs (bytes, or operations)
//!   and leaks at the limit (`*_sec`) as time passes.
//! - A request may go while every bucket it touches is at or below its
//!   size; it then adds its cost (it may overfill: the next one waits for
//!   the overflow to leak away). The size is a tenth of a second at the
//!   limit without a burst, else `*_max` times `*_max_length` seconds.
//! - With a burst longer than a second a second bucket, leaking at
//!   `*_max`, holds the burst's own rate to `*_max` (a tenth of a second's
//!   worth at a time).
//! - `size_iops_sec`: a request of N bytes counts as N / size_iops_sec
//!   operations when larger than that.
//!
//! Pure logic with the clock as a parameter; the caller holds requests that
//! must wait and asks again when the wait is over.

use serde::{Deserialize, Serialize};

use crate::time::{Nanos, NANOS_PER_SEC};

/// The limits, by libvirt's names; 0 is no limit. Lengths are seconds
/// (0: the default, 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QosLimits {
    pub total_bytes_sec: u64,
    pub read_bytes_sec: u64,
    pub write_bytes_sec: u64,
    pub total_iops_sec: u64,
    pub read_iops_sec: u64,
    pub write_iops_sec: u64,
    pub total_bytes_sec_max: u64,
    pub read_bytes_sec_max: u64,
    pub write_bytes_sec_max: u64,
    pub total_iops_sec_max: u64,
    pub read_iops_sec_max: u64,
    pub write_iops_sec_max: u64,
    pub total_bytes_sec_max_length: u64,
    pub read_bytes_sec_max_length: u64,
    pub write_bytes_sec_max_length: u64,
    pub total_iops_sec_max_length: u64,
    pub read_iops_sec_max_length: u64,
    pub write_iops_sec_max_length: u64,
    pub size_iops_sec: u64,
}

/// Every field name of [`QosLimits`] (RPC parameters, the command line).
pub const QOS_FIELDS: [&str; 19] = [
    "total_bytes_sec",
    "read_bytes_sec",
    "write_bytes_sec",
    "total_iops_sec",
    "read_iops_sec",
    "write_iops_sec",
    "total_bytes_sec_max",
    "read_bytes_sec_max",
    "write_bytes_sec_max",
    "total_iops_sec_max",
    "read_iops_sec_max",
    "write_iops_sec_max",
    "total_bytes_sec_max_length",
    "read_bytes_sec_max_length",
    "write_bytes_sec_max_length",
    "total_iops_sec_max_length",
    "read_iops_sec_max_length",
    "write_iops_sec_max_length",
    "size_iops_sec",
];

/// QEMU's upper bound on a limit (THROTTLE_VALUE_MAX).
pub const QOS_VALUE_MAX: u64 = 1_000_000_000_000_000;

/// Which limits a request counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosDir {
    Read,
    Write,
}

// Bucket order: bytes total/read/write, then operations total/read/write.
const BYTES: usize = 0;
const OPS: usize = 3;
const TOTAL: usize = 0;
const READ: usize = 1;
const WRITE: usize = 2;
const BUCKET_NAMES: [&str; 6] = [
    "total_bytes_sec",
    "read_bytes_sec",
    "write_bytes_sec",
    "total_iops_sec",
    "read_iops_sec",
    "write_iops_sec",
];

impl QosLimits {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.buckets().iter().any(|b| b.0 > 0)
    }

    /// Field `name` (one of [`QOS_FIELDS`]), for setting it.
    pub fn field_mut(&mut self, name: &str) -> Option<&mut u64> {
        let f = match name {
            "total_bytes_sec" => &mut self.total_bytes_sec,
            "read_bytes_sec" => &mut self.read_bytes_sec,
            "write_bytes_sec" => &mut self.write_bytes_sec,
            "total_iops_sec" => &mut self.total_iops_sec,
            "read_iops_sec" => &mut self.read_iops_sec,
            "write_iops_sec" => &mut self.write_iops_sec,
            "total_bytes_sec_max" => &mut self.total_bytes_sec_max,
            "read_bytes_sec_max" => &mut self.read_bytes_sec_max,
            "write_bytes_sec_max" => &mut self.write_bytes_sec_max,
            "total_iops_sec_max" => &mut self.total_iops_sec_max,
            "read_iops_sec_max" => &mut self.read_iops_sec_max,
            "write_iops_sec_max" => &mut self.write_iops_sec_max,
            "total_bytes_sec_max_length" => &mut self.total_bytes_sec_max_length,
            "read_bytes_sec_max_length" => &mut self.read_bytes_sec_max_length,
            "write_bytes_sec_max_length" => &mut self.write_bytes_sec_max_length,
            "total_iops_sec_max_length" => &mut self.total_iops_sec_max_length,
            "read_iops_sec_max_length" => &mut self.read_iops_sec_max_length,
            "write_iops_sec_max_length" => &mut self.write_iops_sec_max_length,
            "size_iops_sec" => &mut self.size_iops_sec,
            _ => return None,
        };
        Some(f)
    }

    /// (limit, burst limit, burst length) per bucket, in bucket order.
    fn buckets(&self) -> [(u64, u64, u64); 6] {
        [
            (
                self.total_bytes_sec,
                self.total_bytes_sec_max,
                self.total_bytes_sec_max_length,
            ),
            (
                self.read_bytes_sec,
                self.read_bytes_sec_max,
                self.read_bytes_sec_max_length,
            ),
            (
                self.write_bytes_sec,
                self.write_bytes_sec_max,
                self.write_bytes_sec_max_length,
            ),
            (
                self.total_iops_sec,
                self.total_iops_sec_max,
                self.total_iops_sec_max_length,
            ),
            (
                self.read_iops_sec,
                self.read_iops_sec_max,
                self.read_iops_sec_max_length,
            ),
            (
                self.write_iops_sec,
                self.write_iops_sec_max,
                self.write_iops_sec_max_length,
            ),
        ]
    }

    /// QEMU's and libvirt's rules: a total limit excludes the read and
    /// write ones of its kind, a burst needs its limit and is not below it,
    /// a burst length needs a burst.
    pub fn validate(&self) -> Result<(), String> {
        let b = self.buckets();
        for (i, &(avg, max, len)) in b.iter().enumerate() {
            let n = BUCKET_NAMES[i];
            if avg > QOS_VALUE_MAX || max > QOS_VALUE_MAX {
                return Err(format!("{n}: at most {QOS_VALUE_MAX}"));
            }
            if max > 0 && avg == 0 {
                return Err(format!("{n}_max needs {n}"));
            }
            if max > 0 && max < avg {
                return Err(format!("{n}_max ({max}) is below {n} ({avg})"));
            }
            if len > 1 && max == 0 {
                return Err(format!("{n}_max_length needs {n}_max"));
            }
            if len > 86_400 {
                return Err(format!("{n}_max_length: at most 86400 seconds"));
            }
        }
        for kind in [BYTES, OPS] {
            let (t, r, w) = (b[kind + TOTAL], b[kind + READ], b[kind + WRITE]);
            if (t.0 > 0 && (r.0 > 0 || w.0 > 0)) || (t.1 > 0 && (r.1 > 0 || w.1 > 0)) {
                return Err(format!(
                    "{} cannot be combined with {} or {}",
                    BUCKET_NAMES[kind + TOTAL],
                    BUCKET_NAMES[kind + READ],
                    BUCKET_NAMES[kind + WRITE]
                ));
            }
        }
        if self.size_iops_sec > QOS_VALUE_MAX {
            return Err(format!("size_iops_sec: at most {QOS_VALUE_MAX}"));
        }
        Ok(())
    }
}

/// One limit's buckets.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    /// Units per second it leaks (the limit); 0: no limit.
    avg: f64,
    /// The burst limit (units per second); 0: none.
    max: f64,
    /// Seconds a burst at `max` may last (at least 1).
    length: f64,
    level: f64,
    /// The burst's own level, leaking at `max` (with `length` over 1).
    burst_level: f64,
}

impl Bucket {
    fn new(avg: u64, max: u64, length: u64) -> Self {
        Self {
            avg: avg as f64,
            max: max as f64,
            length: length.max(1) as f64,
            level: 0.0,
            burst_level: 0.0,
        }
    }

    fn bursts(&self) -> bool {
        self.length > 1.0
    }

    fn leak(&mut self, dt: Nanos) {
        let secs = dt as f64 / NANOS_PER_SEC as f64;
        self.level = (self.level - self.avg * secs).max(0.0);
        if self.bursts() {
            self.burst_level = (self.burst_level - self.max * secs).max(0.0);
        }
    }

    /// How long until a request may go (0: now).
    fn wait(&self) -> Nanos {
        if self.avg == 0.0 {
            return 0;
        }
        // Without a burst, a tenth of a second's worth may go at once (a
        // guest's I/O comes in clumps; every other request would wait).
        let (size, burst_size) = if self.max == 0.0 {
            (self.avg / 10.0, 0.0)
        } else {
            (self.max * self.length, self.max / 10.0)
        };
        let extra = self.level - size;
        if extra > 0.0 {
            return secs_for(extra, self.avg);
        }
        if self.bursts() {
            let extra = self.burst_level - burst_size;
            if extra > 0.0 {
                return secs_for(extra, self.max);
            }
        }
        0
    }

    fn add(&mut self, units: f64) {
        if self.avg == 0.0 {
            return;
        }
        self.level += units;
        if self.bursts() {
            self.burst_level += units;
        }
    }
}

/// Nanoseconds for `extra` units to leak at `rate` per second (rounded up:
/// a timer at the computed time must find the request allowed).
fn secs_for(extra: f64, rate: f64) -> Nanos {
    let ns = (extra / rate * NANOS_PER_SEC as f64).ceil();
    if ns >= u64::MAX as f64 {
        u64::MAX
    } else {
        (ns as Nanos).max(1)
    }
}

/// A disk's budget: the buckets of its limits and when they last leaked.
#[derive(Clone, Debug, Default)]
pub struct Throttle {
    limits: QosLimits,
    buckets: [Bucket; 6],
    last: Nanos,
}

impl Throttle {
    /// Empty buckets for `limits` (validated by the caller), as of `now`.
    pub fn new(limits: QosLimits, now: Nanos) -> Self {
        let b = limits.buckets();
        Self {
            limits,
            buckets: b.map(|(avg, max, len)| Bucket::new(avg, max, len)),
            last: now,
        }
    }

    pub fn limits(&self) -> &QosLimits {
        &self.limits
    }

    /// Leaks what the time since the last call lets go. A clock that went
    /// back leaks nothing (and counts from its new reading); a jump ahead
    /// empties buckets at most: it never gives more than one bucket's worth.
    fn leak(&mut self, now: Nanos) {
        let dt = now.saturating_sub(self.last);
        self.last = now;
        if dt > 0 {
            for b in &mut self.buckets {
                b.leak(dt);
            }
        }
    }

    /// Operations a request of `bytes` counts as.
    fn units(&self, bytes: u64) -> f64 {
        let size = self.limits.size_iops_sec;
        if size > 0 && bytes > size {
            bytes as f64 / size as f64
        } else {
            1.0
        }
    }

    fn touched(dir: QosDir) -> [usize; 4] {
        let d = match dir {
            QosDir::Read => READ,
            QosDir::Write => WRITE,
        };
        [BYTES + TOTAL, BYTES + d, OPS + TOTAL, OPS + d]
    }

    /// How long a request in direction `dir` must wait at `now` (0: it may
    /// go now).
    pub fn wait(&mut self, dir: QosDir, now: Nanos) -> Nanos {
        self.leak(now);
        Self::touched(dir)
            .iter()
            .map(|&i| self.buckets[i].wait())
            .max()
            .unwrap_or(0)
    }

    /// Counts a request of `bytes` in direction `dir` that goes now.
    pub fn account(&mut self, dir: QosDir, bytes: u64) {
        let units = self.units(bytes);
        let [bt, bd, ot, od] = Self::touched(dir);
        self.buckets[bt].add(bytes as f64);
        self.buckets[bd].add(bytes as f64);
        self.buckets[ot].add(units);
        self.buckets[od].add(units);
    }

    /// Lets the request go (accounting it) or says how long it must wait.
    pub fn admit(&mut self, dir: QosDir, bytes: u64, now: Nanos) -> Result<(), Nanos> {
        match self.wait(dir, now) {
            0 => {
                self.account(dir, bytes);
                Ok(())
            }
            w => Err(w),
        }
    }
}
