//! Path models that are not pipes: the stages a command may cross on a
//! simulated path besides the FIFO link and the fixed latency of
//! [`super::PathModel`]. Each is off by default (its rate, channel count or
//! RTT is 0), so a scenario without these keys is today's pipe, draw for
//! draw.
//!
//! A command that gets one of the path's `slots` crosses, in order:
//! 1. a token [`Bucket`] (`bucket_iops`, `bucket_mib_s`, `bucket_burst_ms`):
//!    admission waits while the bucket is empty;
//! 2. the link: the pipe's FIFO at `bandwidth_mib_s`, or a [`Tcp`] link
//!    (`rtt_us`, `window_kib`, `loss_ppm`) whose bytes in flight are bounded
//!    by a congestion window;
//! 3. a [`Device`] with `channels` commands in service at once, each for a
//!    drawn `service_us` ([`ServiceDist`]), then a FIFO queue;
//! 4. the latency: `base_latency_us` (+-`jitter`) + `delay_us` + a heavy
//!    tailed extra delay ([`tail_delay`], `tail_alpha`, `tail_us`).
//!
//! Periodic [`Stalls`] (`stall_every_ms`, `stall_ms`, `stall_writes_only`)
//! pause the device's channels, or for a path without channels the link
//! and the latency part.
//!
//! The daemon's lab path models (mpath-io's `lab_model`, `--lab`) run these
//! same structs and functions on its real clock, so a model is written
//! once: keep them free of the simulator's own types.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::Deserialize;

use crate::time::Nanos;

const MIB: f64 = 1024.0 * 1024.0;

/// QEMU's bucket size when no burst is configured: a tenth of a second of
/// the average rate (`bucket_size = avg / 10` in util/throttle.c).
pub const DEFAULT_BURST_MS: f64 = 100.0;

/// Maximum segment size of the TCP model: a 1500-byte MTU less IPv4, TCP
/// and timestamp headers.
pub const MSS: f64 = 1448.0;

/// Initial window, 10 segments (RFC 6928).
pub const INITIAL_WINDOW: f64 = 10.0 * MSS;

/// The window when `window_kib` is not given: Linux's default
/// `net.ipv4.tcp_wmem` maximum, 4 MiB.
pub const DEFAULT_WINDOW_KIB: f64 = 4096.0;

/// Sigma of the log-normal service time (its mean is `service_us`):
/// flash read latencies spread about this much around their median.
pub const LOGNORMAL_SIGMA: f64 = 0.5;

/// How a device's per-command service time is drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceDist {
    /// Always `service_us`.
    #[default]
    Fixed,
    /// Exponential with mean `service_us` (memoryless work per command).
    Exponential,
    /// Log-normal with mean `service_us` and sigma [`LOGNORMAL_SIGMA`].
    Lognormal,
}

impl ServiceDist {
    /// A service time of mean `mean_ns` from uniforms `u1`, `u2` in [0, 1).
    pub fn draw(self, mean_ns: f64, u1: f64, u2: f64) -> f64 {
        match self {
            Self::Fixed => mean_ns,
            Self::Exponential => -mean_ns * (1.0 - u1).ln(),
            Self::Lognormal => {
                // Box-Muller: one standard normal from two uniforms.
                let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let s = LOGNORMAL_SIGMA;
                (mean_ns.ln() - s * s / 2.0 + s * z).exp()
            }
        }
    }

    /// Whether [`Self::draw`] uses its uniforms (a fixed time draws none,
    /// so the random stream of older scenarios stays the same).
    pub fn random(self) -> bool {
        self != Self::Fixed
    }

    /// The name a scenario (and the daemon's `service-dist` path key) gives
    /// it: `fixed`, `exponential`, `lognormal`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "fixed" => Some(Self::Fixed),
            "exponential" => Some(Self::Exponential),
            "lognormal" => Some(Self::Lognormal),
            _ => None,
        }
    }
}

impl std::fmt::Display for ServiceDist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Fixed => "fixed",
            Self::Exponential => "exponential",
            Self::Lognormal => "lognormal",
        })
    }
}

/// A token bucket, as a QEMU throttle group or a cloud volume's IOPS and
/// throughput limits: it fills at `rate` up to `rate x burst`; a command is
/// admitted while the bucket holds anything (QEMU's util/throttle.c checks
/// the level before it adds the request, so the last admitted command may
/// overdraw it) and takes its cost from it. An empty bucket delays
/// admission until it has leaked enough, in arrival order.
///
/// Kept as the time at which the bucket would be empty again (the
/// "theoretical arrival time" of the GCRA, which is the same algorithm):
/// level = (tat - now) x rate, admitted when tat - now <= burst.
#[derive(Clone, Debug, Default)]
pub struct Bucket {
    /// When the IOPS bucket's level is back to zero (ns, fractional).
    tat_iops: f64,
    /// When the bytes bucket's level is back to zero.
    tat_bytes: f64,
    /// The last admission (admission is FIFO).
    last: Nanos,
}

impl Bucket {
    /// When a command of `bytes` arriving at `now` is admitted. `iops` and
    /// `mib_s` of 0 are no limit.
    pub fn admit(&mut self, now: Nanos, bytes: u64, iops: f64, mib_s: f64, burst_ms: f64) -> Nanos {
        let burst = burst_ms * 1e6;
        let mut at = now.max(self.last) as f64;
        if iops > 0.0 {
            at = at.max(self.tat_iops - burst);
        }
        if mib_s > 0.0 {
            at = at.max(self.tat_bytes - burst);
        }
        let admitted = at.ceil() as Nanos;
        if iops > 0.0 {
            self.tat_iops = self.tat_iops.max(admitted as f64) + 1e9 / iops;
        }
        if mib_s > 0.0 {
            self.tat_bytes =
                self.tat_bytes.max(admitted as f64) + bytes as f64 * 1e9 / (mib_s * MIB);
        }
        self.last = admitted;
        admitted
    }
}

/// Periodic pauses, as flash garbage collection: every `every_ms` of
/// virtual time (at each multiple of it) the device stops for `stall_ms`.
/// A command arriving during a pause starts when it ends; a command in
/// service when a pause begins finishes that much later. With
/// `writes_only` reads pass (GC stalls writes on drives that serve reads
/// from other dies; others stall both).
#[derive(Clone, Copy, Debug)]
pub struct Stalls {
    pub every_ms: f64,
    pub stall_ms: f64,
    pub writes_only: bool,
}

impl Stalls {
    /// The end of a service that would run from `start` to `end`, paused by
    /// the stalls it meets; `start` moves to the end of a pause it falls in.
    pub fn apply(&self, start: Nanos, end: Nanos, write: bool) -> (Nanos, Nanos) {
        if self.every_ms <= 0.0 || self.stall_ms <= 0.0 || (self.writes_only && !write) {
            return (start, end);
        }
        let every = (self.every_ms * 1e6) as Nanos;
        let stall = (self.stall_ms * 1e6) as Nanos;
        let (mut start, mut end) = (start, end);
        // Arriving inside a pause: wait for its end.
        let window = start / every * every;
        if window > 0 && start < window + stall {
            let shift = window + stall - start;
            start += shift;
            end += shift;
        }
        // Each pause that begins during the service pauses it.
        let mut next = (start / every + 1) * every;
        while next < end {
            end += stall;
            next += every;
        }
        (start, end)
    }
}

/// A device with internal parallelism (an NVMe SSD serves many commands at
/// once across its dies and channels; the NVMe spec lets a controller run
/// commands from its queues concurrently and datasheets quote latency at
/// QD1 and IOPS at high depth): `channels` commands in service at once,
/// each for a drawn service time; latency is flat while a channel is free,
/// then commands queue in arrival order.
#[derive(Clone, Debug, Default)]
pub struct Device {
    /// When each channel is free, the earliest on top (a heap: a daemon's
    /// lab path may have thousands of channels; which of several equally
    /// free channels serves makes no difference to any time).
    free: BinaryHeap<Reverse<Nanos>>,
}

impl Device {
    pub fn new(channels: u32) -> Self {
        Self {
            free: (0..channels).map(|_| Reverse(0)).collect(),
        }
    }

    /// Serves a command arriving at `arrive` for `service` ns; returns when
    /// it is done. Arrivals must come in time order (they do: the stages
    /// before are FIFO).
    pub fn serve(&mut self, arrive: Nanos, service: Nanos, write: bool, stalls: &Stalls) -> Nanos {
        let mut first = self.free.peek_mut().expect("a device has channels");
        let start = arrive.max(first.0);
        let (_, end) = stalls.apply(start, start.saturating_add(service), write);
        first.0 = end;
        end
    }
}

/// A TCP-like fabric link (NVMe/TCP, iSCSI): the bytes in flight are
/// bounded by a congestion window that starts at [`INITIAL_WINDOW`], grows
/// by what is acknowledged while below the slow-start threshold (doubling
/// per RTT) and by one segment per RTT above it (additive increase), up to
/// `window_kib`, and halves on a loss (multiplicative decrease, RFC 5681
/// section 3.1 with fast recovery); the lost segment's retransmission costs
/// the command one more RTT. Data is sent in order at the link's bandwidth;
/// a command is done one RTT after its last byte is sent (request out,
/// data and completion back). Not modelled: the idle restart of RFC 5681
/// section 4.1 and retransmission timeouts.
#[derive(Clone, Debug)]
pub struct Tcp {
    pub cwnd: f64,
    ssthresh: f64,
    in_flight: f64,
    /// (acknowledged at, bytes), earliest first.
    acks: BinaryHeap<Reverse<(Nanos, u64)>>,
}

impl Tcp {
    pub fn new(window_kib: f64) -> Self {
        let max = window_bytes(window_kib);
        Self {
            cwnd: INITIAL_WINDOW.min(max),
            ssthresh: max,
            in_flight: 0.0,
            acks: BinaryHeap::new(),
        }
    }

    fn on_ack(&mut self, bytes: u64, max: f64) {
        let b = bytes as f64;
        self.in_flight -= b;
        if self.cwnd < self.ssthresh {
            self.cwnd += b;
        } else {
            self.cwnd += MSS * b / self.cwnd;
        }
        self.cwnd = self.cwnd.min(max);
    }

    /// Sends a command of `bytes` arriving at `arrive`, taking `transfer`
    /// ns at the link's bandwidth; `link_free` is when the link is free.
    /// Returns when the command is done with the link. `lost`: one of its
    /// segments is lost.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        arrive: Nanos,
        link_free: &mut Nanos,
        bytes: u64,
        transfer: f64,
        rtt_us: f64,
        window_kib: f64,
        lost: bool,
    ) -> Nanos {
        let max = window_bytes(window_kib);
        let rtt = (rtt_us * 1e3).round() as Nanos;
        while let Some(&Reverse((t, b))) = self.acks.peek() {
            if t > arrive {
                break;
            }
            self.acks.pop();
            self.on_ack(b, max);
        }
        let mut at = arrive.max(*link_free);
        let mut left = bytes.max(1);
        let mut done = at;
        while left > 0 {
            // Wait for acknowledgements until a segment (or the rest) fits.
            let want = (left as f64).min(MSS);
            while self.cwnd - self.in_flight < want {
                let Some(Reverse((t, b))) = self.acks.pop() else {
                    break;
                };
                at = at.max(t);
                self.on_ack(b, max);
            }
            let room = (self.cwnd - self.in_flight).max(want).floor() as u64;
            let chunk = left.min(room.max(1));
            left -= chunk;
            at = at.max(*link_free);
            *link_free = at + (transfer * chunk as f64 / bytes.max(1) as f64).round() as Nanos;
            let mut ack = *link_free + rtt;
            if lost && left == 0 {
                // Fast retransmit: the window halves, the segment comes one
                // RTT later.
                self.ssthresh = (self.in_flight.max(self.cwnd) / 2.0).max(2.0 * MSS);
                self.cwnd = self.ssthresh;
                ack += rtt;
            }
            self.in_flight += chunk as f64;
            self.acks.push(Reverse((ack, chunk)));
            done = done.max(ack);
        }
        done
    }
}

/// The largest window in bytes (`window_kib`, or the default).
pub fn window_bytes(window_kib: f64) -> f64 {
    let kib = if window_kib > 0.0 {
        window_kib
    } else {
        DEFAULT_WINDOW_KIB
    };
    kib * 1024.0
}

/// Whether a command of `bytes` loses a segment, at `loss_ppm` losses per
/// million segments, from a uniform `u` in [0, 1).
pub fn loses(bytes: u64, loss_ppm: f64, u: f64) -> bool {
    let segments = (bytes as f64 / MSS).ceil().max(1.0);
    let p = 1.0 - (1.0 - loss_ppm * 1e-6).powf(segments);
    u < p
}

/// A heavy-tailed extra delay (ns): Pareto type II (Lomax) with shape
/// `alpha` and scale `tail_us`, so most commands get little and a few a lot
/// (P(X > x) = (1 + x / tail_us)^-alpha; mean tail_us / (alpha - 1)). The
/// tail latency literature (Dean and Barroso, "The Tail at Scale", CACM
/// 2013; Li et al., "Tales of the Tail", SoCC 2014) finds such power-law
/// tails in shared storage and networks.
pub fn tail_delay(alpha: f64, tail_us: f64, u: f64) -> f64 {
    // 1 - u in (0, 1]; floored so that a draw of 0 stays finite.
    let v = (1.0 - u).max(1e-12);
    tail_us * 1e3 * (v.powf(-1.0 / alpha) - 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn bucket_serves_its_burst_at_once_then_its_rate() {
        let mut b = Bucket::default();
        let t0 = 10 * MS;
        // 1000 IOPS, 50 ms burst: 50 commands of capacity.
        let at: Vec<Nanos> = (0..2000)
            .map(|_| b.admit(t0, 4096, 1000.0, 0.0, 50.0))
            .collect();
        let at_once = at.iter().filter(|&&t| t == t0).count();
        // The level is checked before the cost is taken: capacity + 1.
        assert_eq!(at_once, 51);
        // Long run: 1000 per second.
        let span = (at[1999] - at[999]) as f64 / 1e9;
        assert!((1000.0 / span - 1000.0).abs() < 1.0, "{span}");
    }

    #[test]
    fn bucket_of_bytes_limits_throughput() {
        let mut b = Bucket::default();
        let mut last = 0;
        for _ in 0..1000 {
            last = b.admit(0, 1 << 20, 0.0, 100.0, 10.0);
        }
        // 1000 MiB at 100 MiB/s, less the 1 MiB burst (and the overdraw).
        let secs = last as f64 / 1e9;
        assert!((secs - 9.98).abs() < 0.02, "{secs}");
    }

    #[test]
    fn bucket_refills_while_idle() {
        let mut b = Bucket::default();
        for _ in 0..200 {
            b.admit(0, 4096, 1000.0, 0.0, 10.0);
        }
        // Far later, a full bucket again: served at once.
        assert_eq!(b.admit(10_000 * MS, 4096, 1000.0, 0.0, 10.0), 10_000 * MS);
    }

    #[test]
    fn stall_delays_exactly_the_commands_in_its_window() {
        let s = Stalls {
            every_ms: 100.0,
            stall_ms: 10.0,
            writes_only: false,
        };
        // Before and after the pause at 100 ms: untouched.
        assert_eq!(s.apply(50 * MS, 60 * MS, true), (50 * MS, 60 * MS));
        assert_eq!(s.apply(111 * MS, 112 * MS, true), (111 * MS, 112 * MS));
        // Arriving in it: starts at its end.
        assert_eq!(s.apply(105 * MS, 106 * MS, true), (110 * MS, 111 * MS));
        // In service when it begins: 10 ms later.
        assert_eq!(s.apply(99 * MS, 101 * MS, true), (99 * MS, 111 * MS));
        // Writes only: reads pass.
        let w = Stalls {
            writes_only: true,
            ..s
        };
        assert_eq!(w.apply(105 * MS, 106 * MS, false), (105 * MS, 106 * MS));
        assert_eq!(w.apply(105 * MS, 106 * MS, true), (110 * MS, 111 * MS));
    }

    #[test]
    fn device_latency_is_flat_until_its_channels_are_busy() {
        let none = Stalls {
            every_ms: 0.0,
            stall_ms: 0.0,
            writes_only: false,
        };
        let mut d = Device::new(4);
        let done: Vec<Nanos> = (0..12).map(|_| d.serve(0, 100, false, &none)).collect();
        // Four at once take 100 ns; then each wave of four waits for one.
        assert_eq!(&done[..4], &[100; 4]);
        assert_eq!(&done[4..8], &[200; 4]);
        assert_eq!(&done[8..], &[300; 4]);
    }

    #[test]
    fn tcp_window_grows_and_halves_on_loss() {
        let mut t = Tcp::new(256.0);
        let mut free = 0;
        assert_eq!(t.cwnd, INITIAL_WINDOW);
        // Slow start: 64k per command, one RTT of 100 us each, the link
        // fast; the window grows to its maximum.
        let mut now = 0;
        for _ in 0..50 {
            now = t.send(now, &mut free, 65536, 10.0, 100.0, 256.0, false);
        }
        assert_eq!(t.cwnd, 256.0 * 1024.0);
        let before = t.cwnd;
        let done = t.send(now, &mut free, 65536, 10.0, 100.0, 256.0, true);
        assert_eq!(t.cwnd, before / 2.0);
        // The lost segment costs one more RTT.
        assert!(done - now >= 200_000, "{}", done - now);
    }

    #[test]
    fn tcp_window_bounds_throughput() {
        // 64 KiB window, 1 ms RTT, fast link: at most 64 MiB/s.
        let mut t = Tcp::new(64.0);
        let mut free = 0;
        let mut last = 0;
        for _ in 0..4000 {
            last = t.send(0, &mut free, 16384, 100.0, 1000.0, 64.0, false);
        }
        let mib_s = 4000.0 * 16384.0 / MIB / (last as f64 / 1e9);
        assert!(mib_s > 55.0 && mib_s <= 64.5, "{mib_s}");
    }

    #[test]
    fn tail_is_heavy() {
        let n = 100_000;
        let draws: Vec<f64> = (0..n)
            .map(|i| tail_delay(1.5, 100.0, (i as f64 + 0.5) / n as f64))
            .collect();
        let mean = draws.iter().sum::<f64>() / n as f64 / 1e3;
        // Mean tail_us / (alpha - 1) = 200 us (the sample truncates the tail).
        assert!(mean > 150.0 && mean < 210.0, "{mean}");
        // P(X > 10 x scale) = 11^-1.5, about 2.7%.
        let over = draws.iter().filter(|&&d| d > 1e6).count() as f64 / n as f64;
        assert!((over - 11f64.powf(-1.5)).abs() < 0.002, "{over}");
    }

    #[test]
    fn service_distributions_keep_their_mean() {
        let n = 200_000;
        for d in [
            ServiceDist::Fixed,
            ServiceDist::Exponential,
            ServiceDist::Lognormal,
        ] {
            let mut rng = crate::sim::Rng(7);
            let mean = (0..n)
                .map(|_| d.draw(100.0, rng.unit(), rng.unit()))
                .sum::<f64>()
                / n as f64;
            assert!((mean - 100.0).abs() < 1.0, "{d:?} {mean}");
        }
    }

    #[test]
    fn loss_probability_grows_with_segments() {
        assert!(!loses(4096, 0.0, 0.0));
        // 1000 ppm over 725 segments (1 MiB): about 52%.
        assert!(loses(1 << 20, 1000.0, 0.5));
        assert!(!loses(1 << 20, 1000.0, 0.53));
    }
}
