//! The lab path models' settings as the path keys name them, and the
//! combinations they refuse. The keys are the simulator's scenario keys
//! (mpath/src/sim/scenario.rs) in whole units.

use mpath::sim::models;

pub use models::ServiceDist;

/// The token bucket's size when `bucket-burst-ms` is not given: 100 ms of
/// its rate, as QEMU's throttle groups default `bps_max`/`iops_max` to a
/// tenth of the rate (`throttle_fix_bucket`, util/throttle.c); the
/// simulator's default.
pub const DEFAULT_BURST_MS: u64 = models::DEFAULT_BURST_MS as u64;

/// The most channels a path may have (the heap is per path and small).
const MAX_CHANNELS: u32 = 4096;

/// The models' settings as the path keys name them (0: that model off).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelConfig {
    /// `channels`: commands the device serves at once (a `service-us`
    /// alone means 1).
    pub channels: u32,
    /// `service-us`: per-command service time of one channel.
    pub service_us: u64,
    /// `service-dist`.
    pub service_dist: ServiceDist,
    /// `bucket-iops`: token bucket refill in commands per second.
    pub bucket_iops: u64,
    /// `bucket-mib-s`: token bucket refill in MiB per second.
    pub bucket_mib_s: u64,
    /// `bucket-burst-ms`: the bucket holds this many ms of its rate (and
    /// starts full).
    pub bucket_burst_ms: u64,
    /// `stall-every-ms`, `stall-ms`: a pause of `stall-ms` begins every
    /// `stall-every-ms`, counted from the first command.
    pub stall_every_ms: u64,
    pub stall_ms: u64,
    /// `stall-writes-only`: only writes (and discards, write-zeroes) stall.
    pub stall_writes_only: bool,
    /// `rtt-us`: the fabric link's round trip.
    pub rtt_us: u64,
    /// `window-kib`: the link's largest congestion window (0: the
    /// simulator's default, Linux's `tcp_wmem` maximum).
    pub window_kib: u64,
    /// `loss-ppm`: the chance (parts per million) that a segment is lost.
    pub loss_ppm: u32,
    /// `tail-alpha` in thousandths (1500: alpha 1.5).
    pub tail_alpha_milli: u32,
    /// `tail-us`: the Pareto (Lomax) scale.
    pub tail_us: u64,
}

impl ModelConfig {
    pub fn is_active(&self) -> bool {
        *self != ModelConfig::default()
    }

    /// Refuses settings that name half a model, and what the simulator's
    /// scenarios refuse (a window under two segments, a link that loses
    /// every segment).
    pub fn validate(&self) -> Result<(), String> {
        if self.channels > MAX_CHANNELS {
            return Err(format!(
                "channels={}: at most {MAX_CHANNELS}",
                self.channels
            ));
        }
        if self.channels > 0 && self.service_us == 0 {
            return Err("channels needs service-us".into());
        }
        if (self.stall_every_ms > 0) != (self.stall_ms > 0) {
            return Err("stall-every-ms and stall-ms go together".into());
        }
        if self.stall_every_ms > 0 && self.stall_ms >= self.stall_every_ms {
            return Err("stall-ms must be shorter than stall-every-ms".into());
        }
        if self.stall_writes_only && self.stall_ms == 0 {
            return Err("stall-writes-only needs stall-every-ms and stall-ms".into());
        }
        if (self.window_kib > 0 || self.loss_ppm > 0) && self.rtt_us == 0 {
            return Err("window-kib and loss-ppm need rtt-us".into());
        }
        if self.window_kib > 0 && (self.window_kib as f64 * 1024.0) < 2.0 * models::MSS {
            return Err(format!(
                "window-kib={}: it must hold two segments of {} bytes",
                self.window_kib,
                models::MSS
            ));
        }
        if self.loss_ppm >= 1_000_000 {
            return Err(format!("loss-ppm={}: below 1000000", self.loss_ppm));
        }
        if (self.tail_alpha_milli > 0) != (self.tail_us > 0) {
            return Err("tail-alpha and tail-us go together".into());
        }
        if self.tail_alpha_milli > 0 && self.tail_alpha_milli <= 1000 {
            return Err("tail-alpha must be over 1 (a finite mean)".into());
        }
        Ok(())
    }
}
