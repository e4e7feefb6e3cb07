//! The lab models through their real-clock glue ([`Model::latency`] on
//! monotonic times far from 0, as a worker's clock gives them): each
//! model's rates and latencies in the path keys' units. The arithmetic
//! itself is tested where it lives, in mpath/src/sim/models.rs.

use super::*;

const MS: u64 = 1_000_000;
/// A worker's clock: far from the models' time 0.
const T0: u64 = 7_000 * MS;
const READ: IoOp = IoOp::Read;
const WRITE: IoOp = IoOp::Write { fua: false };

fn model(cfg: ModelConfig) -> Model {
    Model::new(&cfg)
}

/// When a command of `bytes` entering at `t` leaves the models.
fn done(m: &mut Model, op: IoOp, bytes: u64, t: u64) -> u64 {
    t + m.latency(op, bytes, t)
}

/// A closed loop of `qd` reads of `bytes` from T0 for `ms`: each command's
/// (entry, exit), in the order they entered.
fn closed_loop(m: &mut Model, qd: usize, bytes: u64, ms: u64) -> Vec<(u64, u64)> {
    let end = T0 + ms * MS;
    let mut ready = vec![T0; qd];
    let mut out = vec![];
    loop {
        // The next command goes when its slot's previous one came back.
        let (i, &t) = ready.iter().enumerate().min_by_key(|(_, t)| **t).unwrap();
        if t >= end {
            return out;
        }
        ready[i] = done(m, READ, bytes, t);
        out.push((t, ready[i]));
    }
}

/// Commands that left in [from, to) ms after T0.
fn left_in(ios: &[(u64, u64)], from: u64, to: u64) -> usize {
    let (a, b) = (T0 + from * MS, T0 + to * MS);
    ios.iter().filter(|&&(_, d)| d >= a && d < b).count()
}

#[test]
fn validation_refuses_half_models() {
    let ok = ModelConfig {
        channels: 4,
        service_us: 100,
        ..Default::default()
    };
    assert!(ok.validate().is_ok());
    let link = |window_kib, loss_ppm| ModelConfig {
        rtt_us: 100,
        window_kib,
        loss_ppm,
        ..Default::default()
    };
    assert!(link(3, 999_999).validate().is_ok());
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
        // Under two segments; every segment lost (the simulator's limits).
        link(2, 0),
        link(0, 1_000_000),
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
    // A bucket of 1000 IOPS with no burst (the first passes, then one per
    // ms) in front of one channel of 500 us: the bucket paces, the channel
    // never queues, each takes its bucket wait plus 500 us.
    let mut m = model(ModelConfig {
        bucket_iops: 1000,
        service_us: 500,
        ..Default::default()
    });
    let lat: Vec<u64> = (0..4).map(|_| m.latency(READ, 4096, T0)).collect();
    assert_eq!(lat, vec![500_000, 1_500_000, 2_500_000, 3_500_000]);
}

fn bucket(iops: u64, mib_s: u64, burst_ms: u64) -> Model {
    model(ModelConfig {
        bucket_iops: iops,
        bucket_mib_s: mib_s,
        bucket_burst_ms: burst_ms,
        ..Default::default()
    })
}

#[test]
fn bucket_passes_its_burst_then_its_rate() {
    // 500 IOPS, 100 ms burst: 51 commands pass at once (the level is
    // checked before the cost is taken), then 500/s.
    let mut b = bucket(500, 0, 100);
    let at: Vec<u64> = (0..60).map(|_| done(&mut b, READ, 4096, T0)).collect();
    assert_eq!(at.iter().filter(|&&t| t == T0).count(), 51);
    assert_eq!(at[51], T0 + 2 * MS);
    let ios = closed_loop(&mut bucket(500, 0, 100), 16, 4096, 3000);
    let early = left_in(&ios, 0, 100);
    assert!((51..=105).contains(&early), "{early} in the first 100 ms");
    let rate = left_in(&ios, 1000, 3000) as f64 / 2.0;
    assert!((rate - 500.0).abs() < 5.0, "{rate} IOPS");
}

#[test]
fn bucket_of_bytes_counts_bytes_and_the_stricter_rate_wins() {
    // 8 MiB/s of 64 KiB commands: 128 per second.
    let ios = closed_loop(&mut bucket(0, 8, 100), 4, 64 * 1024, 3000);
    let rate = left_in(&ios, 1000, 3000) as f64 / 2.0;
    assert!((rate - 128.0).abs() < 2.0, "{rate} per second");
    // 1000 IOPS but 1 MiB/s of 64 KiB: 16 per second.
    let ios = closed_loop(&mut bucket(1000, 1, 0), 4, 64 * 1024, 3000);
    let rate = left_in(&ios, 1000, 3000) as f64 / 2.0;
    assert!((rate - 16.0).abs() < 1.0, "{rate} per second");
}

#[test]
fn bucket_refills_while_idle_up_to_its_cap_only() {
    let mut b = bucket(1000, 0, 10);
    // 10 ms of 1000/s: 11 back-to-back commands pass, the 12th waits.
    for _ in 0..11 {
        assert_eq!(b.latency(READ, 0, T0), 0);
    }
    assert_eq!(b.latency(READ, 0, T0), MS);
    // A long idle refills the bucket, not more.
    let later = T0 + 10_000 * MS;
    for _ in 0..11 {
        assert_eq!(b.latency(READ, 0, later), 0);
    }
    assert!(b.latency(READ, 0, later) > 0);
}

fn channels(n: u32, service_us: u64, dist: ServiceDist) -> Model {
    model(ModelConfig {
        channels: n,
        service_us,
        service_dist: dist,
        ..Default::default()
    })
}

/// A closed loop on the channels for 1 s: (commands per second, mean
/// latency in ns).
fn channel_loop(m: &mut Model, qd: usize) -> (f64, f64) {
    let ios = closed_loop(m, qd, 4096, 1000);
    let sum: u64 = ios.iter().map(|(t, d)| d - t).sum();
    (ios.len() as f64, sum as f64 / ios.len() as f64)
}

#[test]
fn channels_latency_flat_until_every_channel_is_busy_then_a_queue() {
    for qd in [1, 2, 4] {
        let (iops, lat) = channel_loop(&mut channels(4, 1000, ServiceDist::Fixed), qd);
        assert_eq!(lat, MS as f64, "QD{qd}: flat at the service time");
        assert!(
            (iops - 1000.0 * qd as f64).abs() <= qd as f64,
            "QD{qd}: {iops}"
        );
    }
    // QD16 on 4 channels of 1 ms: 4000 IOPS, each waits 3 services.
    let (iops, lat) = channel_loop(&mut channels(4, 1000, ServiceDist::Fixed), 16);
    assert!((iops - 4000.0).abs() <= 16.0, "{iops}");
    assert!((lat - 4.0 * MS as f64).abs() < 0.05 * MS as f64, "{lat}");
    // A `service-us` alone is one channel.
    let (iops, _) = channel_loop(&mut channels(0, 1000, ServiceDist::Fixed), 4);
    assert!((iops - 1000.0).abs() <= 4.0, "{iops}");
}

#[test]
fn random_service_times_keep_their_mean() {
    for dist in [ServiceDist::Exponential, ServiceDist::Lognormal] {
        let (iops, lat) = channel_loop(&mut channels(1, 1000, dist), 1);
        assert!((900.0..1100.0).contains(&iops), "{dist}: {iops}");
        assert!((0.9e6..1.1e6).contains(&lat), "{dist}: {lat}");
    }
}

#[test]
fn channels_fifo_after_saturation() {
    // Two channels of 1 ms, five arrivals at once: 1, 1, 2, 2, 3 ms.
    let mut c = channels(2, 1000, ServiceDist::Fixed);
    let lat: Vec<u64> = (0..5).map(|_| c.latency(READ, 4096, T0)).collect();
    assert_eq!(lat, vec![MS, MS, 2 * MS, 2 * MS, 3 * MS]);
}

fn stalls(service_us: u64, writes_only: bool) -> Model {
    model(ModelConfig {
        service_us,
        stall_every_ms: 100,
        stall_ms: 10,
        stall_writes_only: writes_only,
        ..Default::default()
    })
}

#[test]
fn a_stall_pauses_the_service() {
    // 10 ms pause every 100 ms from the first command: a 2 ms service
    // from 99 ms ends at 111.
    let mut c = stalls(2000, false);
    assert_eq!(done(&mut c, READ, 4096, T0), T0 + 2 * MS);
    assert_eq!(done(&mut c, READ, 4096, T0 + 99 * MS), T0 + 111 * MS);
}

#[test]
fn without_channels_commands_in_a_stall_leave_after_it() {
    // The pauses count from the first command: at 100, 200, 300 ms.
    let mut s = stalls(0, false);
    let mut at = |a: u64| (done(&mut s, READ, 4096, T0 + a * MS) - T0) / MS;
    assert_eq!(at(0), 0);
    assert_eq!(at(50), 50);
    assert_eq!(at(111), 111);
    assert_eq!(at(105), 110);
    assert_eq!(at(300), 310);
}

#[test]
fn stalls_writes_only_let_reads_pass() {
    let mut s = stalls(0, true);
    let t = T0 + 105 * MS;
    assert_eq!(s.latency(READ, 4096, T0), 0);
    assert_eq!(s.latency(READ, 4096, t), 0);
    assert_eq!(s.latency(IoOp::Flush, 0, t), 0);
    assert_eq!(s.latency(WRITE, 4096, t), 5 * MS);
    assert_eq!(s.latency(IoOp::Discard, 4096, t), 5 * MS);
    assert_eq!(
        s.latency(IoOp::WriteZeroes { unmap: false }, 4096, t),
        5 * MS
    );
}

#[test]
fn the_stalled_fraction_of_uniform_arrivals() {
    // Commands every 10 us for 10 s on a 5 ms pause every 100 ms: 5% land
    // in a pause, waiting 2.5 ms on average.
    let mut s = model(ModelConfig {
        stall_every_ms: 100,
        stall_ms: 5,
        ..Default::default()
    });
    let (mut stalled, mut wait) = (0u64, 0u64);
    let n = 1_000_000;
    for i in 0..n {
        let lat = s.latency(READ, 4096, T0 + i * 10_000);
        if lat > 0 {
            stalled += 1;
            wait += lat;
        }
    }
    let frac = stalled as f64 / n as f64;
    assert!((frac - 0.05).abs() < 0.001, "{frac}");
    let mean = wait as f64 / stalled as f64;
    assert!((mean - 2.5e6).abs() < 0.05e6, "{mean}");
}

fn link(rtt_us: u64, window_kib: u64, loss_ppm: u32) -> Model {
    model(ModelConfig {
        rtt_us,
        window_kib,
        loss_ppm,
        ..Default::default()
    })
}

/// Bytes per second over the last of `secs` seconds of a closed loop.
fn link_loop(m: &mut Model, qd: usize, bytes: u64, secs: u64) -> f64 {
    let ios = closed_loop(m, qd, bytes, secs * 1000);
    (left_in(&ios, (secs - 1) * 1000, secs * 1000) as u64 * bytes) as f64
}

#[test]
fn link_takes_one_round_trip_while_the_window_has_room() {
    let mut f = link(100, 1024, 0);
    assert_eq!(f.latency(READ, 4096, T0), 100_000);
    assert_eq!(f.latency(READ, 4096, T0), 100_000);
    // 8 KiB in flight of a 14480-byte window: 6288 bytes go now, the rest
    // after the first acknowledgement, a round trip later.
    assert_eq!(f.latency(READ, 8192, T0), 200_000);
    // Window 14480, doubling per round (slow start): 14480 + 28960 + 22096
    // bytes: three rounds for 64 KiB.
    let mut f = link(100, 1024, 0);
    assert_eq!(f.latency(READ, 64 * 1024, T0), 300_000);
}

#[test]
fn link_throughput_is_window_over_rtt_once_open() {
    // 64 KiB window, 1 ms: 64 MiB/s at a depth that fills it.
    let bps = link_loop(&mut link(1000, 64, 0), 64, 4096, 3);
    let want = 64.0 * 1024.0 * 1000.0;
    assert!((bps - want).abs() < want * 0.03, "{bps} vs {want}");
    // Too shallow a queue to fill it: the depth decides (8 x 4 KiB/ms).
    let bps = link_loop(&mut link(1000, 64, 0), 8, 4096, 3);
    let want = 8.0 * 4096.0 * 1000.0;
    assert!((bps - want).abs() < want * 0.02, "{bps} vs {want}");
}

#[test]
fn link_losses_halve_the_window_and_cost_a_round_trip() {
    // Every segment lost (past what validation lets through, to make the
    // draw certain): the window halves, the command takes two round trips.
    let mut f = link(1000, 64, 1_000_000);
    let w = f.tcp.cwnd;
    assert_eq!(f.latency(READ, 4096, T0), 2 * MS);
    assert_eq!(f.tcp.cwnd, w / 2.0);
    // With 1 segment in 1000 lost the window stays well below its cap:
    // less throughput than the clean link's.
    let clean = link_loop(&mut link(1000, 1024, 0), 256, 4096, 4);
    let lossy = link_loop(&mut link(1000, 1024, 1000), 256, 4096, 4);
    assert!(lossy < clean * 0.7, "lossy {lossy}, clean {clean}");
}

#[test]
fn tail_quantiles_follow_lomax() {
    let mut t = model(ModelConfig {
        tail_alpha_milli: 1500,
        tail_us: 100,
        ..Default::default()
    });
    let mut d: Vec<u64> = (0..200_000).map(|_| t.latency(READ, 4096, T0)).collect();
    d.sort_unstable();
    let q = |p: f64| d[(p * d.len() as f64) as usize] as f64;
    // Quantile: scale x ((1 - p)^(-1/alpha) - 1).
    for p in [0.5, 0.9, 0.99] {
        let want = 100_000.0 * ((1.0f64 - p).powf(-1.0 / 1.5) - 1.0);
        let got = q(p);
        assert!((got / want - 1.0).abs() < 0.05, "p{p}: {got} vs {want}");
    }
    // P(X > 10 x scale) = 11^-1.5, about 2.7%.
    let over = d.iter().filter(|&&x| x > 1_000_000).count() as f64 / d.len() as f64;
    assert!((over - 11f64.powf(-1.5)).abs() < 0.002, "{over}");
}
