//! Lab path models that are not pipes (issue 45): a device with internal
//! parallelism, a token bucket, periodic stalls, a TCP-like fabric link and
//! heavy-tailed jitter. The simulator (`mpath-sim`) models paths with the
//! same names and semantics, so that the daemon can be driven through the
//! same paths the sweep draws.
//!
//! A model is a stage after the device on a virtual clock: a command enters
//! it when the device completes it (for a null path, at submission) and is
//! delivered when the model lets it out, so the model's latency adds to the
//! device's own, as `delay-us` does. The stages run in the simulator's
//! order: token bucket, fabric link, channels (which stalls pause; without
//! channels a command arriving in a pause waits for its end), tail. Every
//! stage decides in the order commands enter it (the order their
//! completions are handled), and nothing sleeps: the caller turns the
//! latency into a timer on its ring.

mod bucket;
mod channels;
mod fabric;
mod stall;
mod tail;

use crate::IoOp;
use bucket::Bucket;
use channels::Channels;
use fabric::Fabric;
use stall::Stall;
use tail::Tail;

/// How a channel's per-command service time is drawn around `service-us`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceDist {
    /// Every command takes exactly `service-us`.
    #[default]
    Fixed,
    /// Exponential with mean `service-us` (an M/M/c device).
    Exponential,
    /// Log-normal with mean `service-us` (sigma 0.5: flash latencies).
    Lognormal,
}

impl ServiceDist {
    pub fn parse(s: &str) -> Option<ServiceDist> {
        match s.trim() {
            "fixed" => Some(ServiceDist::Fixed),
            "exponential" => Some(ServiceDist::Exponential),
            "lognormal" => Some(ServiceDist::Lognormal),
            _ => None,
        }
    }
}

impl std::fmt::Display for ServiceDist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServiceDist::Fixed => "fixed",
            ServiceDist::Exponential => "exponential",
            ServiceDist::Lognormal => "lognormal",
        })
    }
}

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
    /// `window-kib`: the link's largest congestion window.
    pub window_kib: u64,
    /// `loss-ppm`: the chance (parts per million) that a command's transfer
    /// loses a segment.
    pub loss_ppm: u32,
    /// `tail-alpha` in thousandths (1500: alpha 1.5).
    pub tail_alpha_milli: u32,
    /// `tail-us`: the Pareto (Lomax) scale.
    pub tail_us: u64,
}

/// The token bucket's size when `bucket-burst-ms` is not given: 100 ms of
/// its rate, as QEMU's throttle groups default `bps_max`/`iops_max` to a
/// tenth of the rate (`throttle_fix_bucket`, util/throttle.c).
pub const DEFAULT_BURST_MS: u64 = 100;

/// The fabric link's largest window when `window-kib` is not given: Linux's
/// default largest send buffer (`net.ipv4.tcp_wmem`, 4 MiB).
pub const DEFAULT_WINDOW_KIB: u64 = 4096;

impl ModelConfig {
    pub fn is_active(&self) -> bool {
        *self != ModelConfig::default()
    }

    /// Refuses settings that name half a model.
    pub fn validate(&self) -> Result<(), String> {
        if self.channels > channels::MAX_CHANNELS {
            return Err(format!(
                "channels={}: at most {}",
                self.channels,
                channels::MAX_CHANNELS
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
        if self.loss_ppm > 1_000_000 {
            return Err(format!("loss-ppm={}: at most 1000000", self.loss_ppm));
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

/// The models of one path with their state, shared by its workers (behind
/// the shaping's lock).
#[derive(Debug)]
pub(crate) struct Model {
    stall: Option<Stall>,
    bucket: Option<Bucket>,
    fabric: Option<Fabric>,
    channels: Option<Channels>,
    tail: Option<Tail>,
    rng: Rng,
}

impl Model {
    pub(crate) fn new(cfg: &ModelConfig) -> Model {
        let some = |on: bool| on.then_some(());
        Model {
            stall: some(cfg.stall_every_ms > 0)
                .map(|()| Stall::new(cfg.stall_every_ms, cfg.stall_ms, cfg.stall_writes_only)),
            bucket: Bucket::new(cfg.bucket_iops, cfg.bucket_mib_s, cfg.bucket_burst_ms),
            fabric: some(cfg.rtt_us > 0).map(|()| {
                let window = if cfg.window_kib > 0 {
                    cfg.window_kib
                } else {
                    DEFAULT_WINDOW_KIB
                };
                Fabric::new(cfg.rtt_us, window, cfg.loss_ppm)
            }),
            channels: some(cfg.service_us > 0)
                .map(|()| Channels::new(cfg.channels.max(1), cfg.service_us, cfg.service_dist)),
            tail: some(cfg.tail_us > 0).map(|()| Tail::new(cfg.tail_alpha_milli, cfg.tail_us)),
            rng: Rng(0),
        }
    }

    /// How long (ns) the models hold a command of `bytes` that enters them
    /// at `at` (ns, monotonic).
    pub(crate) fn latency(&mut self, op: IoOp, bytes: u64, at: u64) -> u64 {
        let mut t = at;
        let stall = self.stall.as_mut().filter(|s| s.applies(op));
        if let Some(b) = &mut self.bucket {
            t = b.admit(t, bytes);
        }
        if let Some(f) = &mut self.fabric {
            t = f.transfer(t, bytes, &mut self.rng);
        }
        t = match (&mut self.channels, stall) {
            (Some(c), stall) => c.serve(t, &mut self.rng, stall),
            (None, Some(s)) => s.apply(t, t).1,
            (None, None) => t,
        };
        if let Some(tl) = &self.tail {
            t = t.saturating_add(tl.draw(&mut self.rng));
        }
        t - at
    }
}

/// A reproducible draw per command (splitmix64 over a counter): the same
/// configuration gives the same sequence after every reset.
#[derive(Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1]: never 0, so that `ln` and negative powers stay
    /// finite.
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_refuses_half_models() {
        let ok = ModelConfig {
            channels: 4,
            service_us: 100,
            ..Default::default()
        };
        assert!(ok.validate().is_ok());
        for bad in [
            ModelConfig {
                channels: 4,
                ..Default::default()
            },
            ModelConfig {
                stall_ms: 5,
                ..Default::default()
            },
            ModelConfig {
                stall_every_ms: 5,
                stall_ms: 5,
                ..Default::default()
            },
            ModelConfig {
                window_kib: 64,
                ..Default::default()
            },
            ModelConfig {
                tail_us: 10,
                ..Default::default()
            },
            ModelConfig {
                tail_us: 10,
                tail_alpha_milli: 900,
                ..Default::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn stages_add_up_in_order() {
        // A bucket of 1000 IOPS with no burst (the first passes, then one
        // per ms) in front of one channel of 500 us: the bucket paces, the
        // channel never queues, each takes its bucket wait plus 500 us.
        let mut m = Model::new(&ModelConfig {
            bucket_iops: 1000,
            service_us: 500,
            ..Default::default()
        });
        let t0 = 1_000_000_000;
        let lat: Vec<u64> = (0..4).map(|_| m.latency(IoOp::Read, 4096, t0)).collect();
        assert_eq!(lat, vec![500_000, 1_500_000, 2_500_000, 3_500_000]);
    }

    #[test]
    fn rng_is_reproducible_and_in_range() {
        let (mut a, mut b) = (Rng(0), Rng(0));
        for _ in 0..1000 {
            let u = a.unit();
            assert!(u > 0.0 && u <= 1.0);
            assert_eq!(u, b.unit());
        }
    }
}
