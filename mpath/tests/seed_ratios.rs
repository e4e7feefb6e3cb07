//! The seed experiments of REFERENCE §4, run in the simulator on the real
//! engine. Durations are shortened from the scenario files (virtual time;
//! debug builds) where the results are already steady.
//!
//! What reproduces within 10% is asserted as a ratio; what the model cannot
//! reproduce honestly is asserted in direction only, with the reason.

use std::path::PathBuf;

use mpath::sim::{self, Scenario, SimResult};
use mpath::PolicyName::{self, *};

fn scenario(name: &str, duration_ms: u64, ramp_ms: u64) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../configs/scenarios")
        .join(format!("{name}.toml"));
    let mut s = Scenario::load(&path).unwrap();
    s.duration_ms = duration_ms;
    s.ramp_ms = ramp_ms;
    s
}

fn run(s: &Scenario, workload: usize, policy: PolicyName) -> SimResult {
    sim::run(s, &s.workloads[workload], policy).unwrap()
}

fn within(actual: f64, seed: f64, tolerance: f64) -> bool {
    (actual / seed - 1.0).abs() <= tolerance
}

/// Seed: service-time 4:1 vs queue-depth = +3.4% IOPS, latency stddev -57%.
#[test]
fn service_time_uniform() {
    let s = scenario("service-time-uniform", 300, 50);
    let qd = run(&s, 0, QueueDepth);
    let st = run(&s, 0, ServiceTime);
    let iops = st.iops / qd.iops;
    assert!(
        within(iops, 1.034, 0.10),
        "IOPS ratio {iops:.3} (seed 1.034)"
    );
    // Both saturate both links; service-time keeps the latency of the two
    // paths equal. The simulated links serve without the noise of real
    // NVMe/TCP and tc-tbf, so the cut in stddev is larger than the seed's
    // -57%: reproduced in direction, not in size.
    let stddev = st.lat_stddev_us / qd.lat_stddev_us;
    assert!(stddev < 1.0 - 0.57, "stddev ratio {stddev:.3} (seed 0.43)");
    assert!(within(st.path_share("slow"), 0.2, 0.10), "{st:?}");
}

/// Seed: weight 0 on the slow path, I/O split 118052:0.
#[test]
fn service_time_weight_zero_is_standby() {
    let mut s = scenario("service-time-uniform", 100, 10);
    s.paths[1].weight = 0;
    let st = run(&s, 0, ServiceTime);
    assert_eq!(st.path_ios[1], ("slow".to_string(), 0), "{st:?}");
    assert!(st.path_ios[0].1 > 10_000, "{st:?}");
}

/// Seed: mixed 4k/128k, service-time 4:1 vs queue-depth latency stddev -41%.
#[test]
fn service_time_mixed() {
    let s = scenario("service-time-mixed", 400, 50);
    let qd = run(&s, 0, QueueDepth);
    let st = run(&s, 0, ServiceTime);
    let stddev = st.lat_stddev_us / qd.lat_stddev_us;
    // Direction reproduced, size larger than the seed's (see above).
    assert!(stddev < 1.0 - 0.41, "stddev ratio {stddev:.3} (seed 0.59)");
    assert!(st.iops >= qd.iops * 0.97, "{st:?} vs {qd:?}");
}

/// Seed (MiB/s): numa 50, round-robin 105, queue-depth 230, adaptive 350.
#[test]
fn adaptive_delay() {
    let s = scenario("adaptive-delay", 2000, 700);
    let [numa, rr, qd, adaptive] = [Numa, RoundRobin, QueueDepth, Adaptive].map(|p| run(&s, 0, p));
    // numa and queue-depth calibrate the scenario (its comments say how):
    assert!(within(numa.mib_s, 50.0, 0.10), "{numa:?}");
    assert!(within(qd.mib_s, 230.0, 0.10), "{qd:?}");
    // The order reproduces. Round-robin alternates, so it cannot beat
    // twice numa (seed: 2.1x; here 1.8x), and adaptive's weights, being
    // inverse to latency, keep the same bytes in flight on each path as
    // queue-depth does (Little's law): it only edges queue-depth out
    // (seed: 1.52x), through the rounding of its weights.
    assert!(numa.mib_s < rr.mib_s, "{numa:?} {rr:?}");
    assert!(rr.mib_s < qd.mib_s, "{rr:?} {qd:?}");
    assert!(qd.mib_s <= adaptive.mib_s, "{qd:?} {adaptive:?}");
    assert!(within(rr.mib_s / numa.mib_s, 2.1, 0.20));
}

/// Seed (MB/s): active-standby -> round-robin, 128k seqread 1707 -> 3414.
#[test]
fn active_active_128k_read() {
    let s = scenario("active-active", 100, 20);
    let rr = run(&s, 0, RoundRobin);
    let standby = run(&s, 0, ActiveStandby);
    let ratio = rr.mib_s / standby.mib_s;
    assert!(within(ratio, 3414.0 / 1707.0, 0.10), "ratio {ratio:.3}");
    assert_eq!(standby.path_ios[1].1, 0);
}

/// `auto` is within 5% of the best policy's throughput in every scenario.
#[test]
fn auto_is_within_5_percent_of_the_best() {
    let scenarios = [
        scenario("service-time-uniform", 200, 50),
        scenario("service-time-mixed", 300, 50),
        scenario("adaptive-delay", 1200, 500),
        scenario("active-active", 60, 20),
    ];
    for s in &scenarios {
        for (w, workload) in s.workloads.iter().enumerate() {
            let results: Vec<_> = PolicyName::ALL.iter().map(|&p| run(s, w, p)).collect();
            let best = results
                .iter()
                .max_by(|a, b| a.iops.total_cmp(&b.iops))
                .unwrap();
            let auto = results.iter().find(|r| r.policy == "auto").unwrap();
            assert!(
                auto.iops >= best.iops * 0.95,
                "{} {}: auto {:.0} IOPS, {} {:.0}",
                s.name,
                workload.label(),
                auto.iops,
                best.policy,
                best.iops
            );
        }
    }
}

/// A path slowing down by 30 ms half a second in: `auto` and `adaptive`
/// (default period) move I/O away within 1 s.
#[test]
fn auto_and_adaptive_adapt_within_one_second() {
    let s = Scenario::parse(
        r#"
        name = "slowdown"
        duration_ms = 2500
        ramp_ms = 1500
        [[path]]
        name = "a"
        bandwidth_mib_s = 400
        base_latency_us = 200
        jitter = 0.2
        [[path]]
        name = "b"
        bandwidth_mib_s = 400
        base_latency_us = 200
        jitter = 0.2
        [workload]
        bs = 65536
        iodepth = 8
        jobs = 2
        [[change]]
        at_ms = 500
        path = "b"
        delay_us = 30000
        "#,
    )
    .unwrap();
    let mut alone = s.clone();
    alone.changes[0].delay_us = None;
    alone.changes[0].state = Some("offline".into());
    let one_path = run(&alone, 0, RoundRobin);
    for policy in [Auto, Adaptive] {
        let r = run(&s, 0, policy);
        // measured from 1 s after the change on
        assert!(r.path_share("b") < 0.05, "{r:?}");
        assert!(r.mib_s > one_path.mib_s * 0.6, "{r:?} vs {one_path:?}");
    }
    let auto = run(&s, 0, Auto);
    assert!(
        auto.mib_s > one_path.mib_s * 0.95,
        "{auto:?} vs {one_path:?}"
    );
}

/// The same path recovering a second later: `auto` gives it its share back
/// within half a second (measured from 0.5 s after the recovery on).
#[test]
fn auto_regains_a_recovered_path_within_half_a_second() {
    let s = Scenario::parse(
        r#"
        name = "recovery"
        duration_ms = 2500
        ramp_ms = 2000
        [[path]]
        name = "a"
        bandwidth_mib_s = 400
        base_latency_us = 200
        jitter = 0.2
        [[path]]
        name = "b"
        bandwidth_mib_s = 400
        base_latency_us = 200
        jitter = 0.2
        [workload]
        bs = 65536
        iodepth = 8
        jobs = 2
        [[change]]
        at_ms = 500
        path = "b"
        delay_us = 30000
        [[change]]
        at_ms = 1500
        path = "b"
        delay_us = 0
        "#,
    )
    .unwrap();
    let mut steady = s.clone();
    steady.changes.clear();
    let both = run(&steady, 0, RoundRobin);
    let auto = run(&s, 0, Auto);
    assert!(auto.path_share("b") > 0.4, "{auto:?}");
    assert!(auto.mib_s > both.mib_s * 0.95, "{auto:?} vs {both:?}");
}
