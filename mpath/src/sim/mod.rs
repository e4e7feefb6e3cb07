//! A deterministic discrete-event simulator of paths, driving the real
//! [`Engine`] (the same policy code as the daemon) in virtual time.
//!
//! Each path is a server: at most `slots` commands at a time (more wait on
//! the host, still counted in flight by the engine, as in the daemon), each
//! command's data crosses the path's link in submission order at the link's
//! bandwidth, then the command takes the path's base latency (spread by
//! `jitter`) plus any added delay. The workload is fio-like and closed-loop:
//! `jobs` x `iodepth` I/Os are always in flight; each completion submits the
//! next. Random numbers come from a fixed seed, so a run is reproducible.

pub mod models;
mod scenario;
mod sweep;
mod sweep_models;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

pub use models::ServiceDist;
pub use scenario::{PathChange, PathModel, PolicyTunables, Scenario, Transfer, Workload};
pub use sweep::{
    case, case_runs, case_with, distribution, generate, report, report_every_policy, sweep,
    sweep_runs, sweep_with, worst_cases, Distribution, Generator, Runs, SweepCase,
};
pub use sweep_models::generate_models;

use crate::attempts::{Attempts, Selection};
use crate::classify::IoOutcome;
use crate::engine::{Engine, EngineOptions, IoInfo, IoKind, PathConfig};
use crate::path::{AnaState, PathId, PathState};
use crate::policy::{PolicyName, SubmitContext};
use crate::shard::StatsShard;
use crate::stats::LatencyHistogram;
use crate::time::{ManualClock, Nanos, NANOS_PER_SEC};

const MS: Nanos = 1_000_000;
/// Virtual time starts here (0 means "never" to some engine records).
const T0: Nanos = NANOS_PER_SEC;

/// What one policy achieved on one workload.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SimResult {
    pub scenario: String,
    pub workload: String,
    pub policy: String,
    /// I/Os completed in the measured window.
    pub ios: u64,
    pub iops: f64,
    pub mib_s: f64,
    pub lat_mean_us: f64,
    pub lat_stddev_us: f64,
    pub lat_p99_us: f64,
    /// I/Os per path (submissions in the measured window), in path order.
    #[serde(serialize_with = "as_object")]
    pub path_ios: Vec<(String, u64)>,
    /// `auto`'s model of each path at the end of the run, in path order:
    /// (`B` bytes per second, `L` ns); empty under other policies.
    #[serde(skip)]
    pub auto_model: Vec<(Option<u64>, Option<u64>)>,
}

fn as_object<S: serde::Serializer>(v: &[(String, u64)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(v.len()))?;
    for (k, n) in v {
        m.serialize_entry(k, n)?;
    }
    m.end()
}

impl SimResult {
    pub fn path_share(&self, name: &str) -> f64 {
        let total: u64 = self.path_ios.iter().map(|(_, n)| n).sum();
        let n = self
            .path_ios
            .iter()
            .find(|(p, _)| p == name)
            .map_or(0, |(_, n)| *n);
        n as f64 / total.max(1) as f64
    }

    /// One line of JSON with the keys of the issue (plus scenario, workload, ios).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("plain data serializes")
    }
}

/// SplitMix64: small, fast, good enough for jitter and block sizes (and
/// the daemon's lab path models draw from it too).
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Debug)]
struct SimPath {
    model: PathModel,
    busy_slots: u32,
    waiting: VecDeque<usize>,
    link_free: Nanos,
    bucket: models::Bucket,
    tcp: models::Tcp,
    device: models::Device,
}

impl SimPath {
    fn new(model: &PathModel) -> Self {
        Self {
            model: model.clone(),
            busy_slots: 0,
            waiting: VecDeque::new(),
            link_free: 0,
            bucket: models::Bucket::default(),
            tcp: models::Tcp::new(model.window_kib),
            device: models::Device::new(model.channels),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct SimIo {
    info: IoInfo,
    job: usize,
    submitted: Nanos,
    path: usize,
    /// The request's tries over the paths (the engine's attempt API, as
    /// the daemon's worker keeps them).
    att: Attempts,
}

struct Run<'a> {
    engine: Engine,
    /// The one simulated worker's statistics shard (with its policy cache
    /// and its own sums of `auto`, as a daemon worker has).
    shard: StatsShard,
    paths: Vec<SimPath>,
    workload: &'a Workload,
    rng: Rng,
    ios: Vec<SimIo>,
    events: BinaryHeap<Reverse<(Nanos, u64, usize)>>,
    seq: u64,
}

impl Run<'_> {
    fn schedule(&mut self, at: Nanos, io: usize) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, io)));
    }

    fn draw_io(&mut self) -> IoInfo {
        let w = self.workload;
        let bytes = match w.bs {
            Some(b) => b,
            None => {
                let total: u32 = w.bssplit.iter().map(|(_, p)| p).sum();
                let mut r = (self.rng.unit() * f64::from(total.max(1))) as u32;
                let mut pick = w.bssplit[0].0;
                for &(b, p) in &w.bssplit {
                    pick = b;
                    if r < p {
                        break;
                    }
                    r -= p;
                }
                pick
            }
        };
        let kind = if self.rng.unit() * 100.0 < f64::from(w.read_pct) {
            IoKind::Read
        } else {
            IoKind::Write
        };
        IoInfo { kind, bytes }
    }

    /// Submits a new I/O in slot `io` (of job `job`) at `now`.
    fn submit(&mut self, io: usize, now: Nanos) {
        let info = self.draw_io();
        let job = self.ios[io].job;
        let ctx = SubmitContext {
            now,
            numa_node: self.workload.numa_node,
        };
        let mut att = Attempts::new(now);
        let Selection::Path(path) = self
            .engine
            .select_attempt(&info, &mut att, &ctx, &self.shard)
        else {
            // No usable path: try again in a millisecond (the backend parks
            // it; nothing here fails, so no request runs out of rounds).
            self.ios[io] = SimIo {
                info,
                job,
                submitted: now,
                path: usize::MAX,
                att,
            };
            self.schedule(now + MS, io);
            return;
        };
        self.ios[io] = SimIo {
            info,
            job,
            submitted: now,
            path: path.0,
            att,
        };
        let p = &mut self.paths[path.0];
        if p.busy_slots < p.model.slots {
            self.start(io, now);
        } else {
            p.waiting.push_back(io);
        }
    }

    /// The I/O gets a slot on its path: the stages of [`models`] (bucket,
    /// link, device), then latency. A pipe draws two random numbers per
    /// I/O; each model draws its own after them, only when it is on, so a
    /// pipe's runs stay the same.
    fn start(&mut self, io: usize, now: Nanos) {
        let SimIo { info, path, .. } = self.ios[io];
        let spread = self.rng.unit() * 2.0 - 1.0;
        let draw = self.rng.unit();
        let write = info.kind == IoKind::Write;
        let p = &mut self.paths[path];
        p.busy_slots += 1;
        let m = &p.model;
        let mut transfer = info.bytes as f64 / (m.bandwidth_mib_s * 1024.0 * 1024.0) * 1e9;
        if m.transfer == Transfer::Exponential {
            transfer *= -(1.0 - draw).ln();
        }
        let latency = (m.base_latency_us * (1.0 + m.jitter * spread) + m.delay_us) * 1e3;
        let stalls = m.stalls();
        let admitted = if m.has_bucket() {
            let burst = m.bucket_burst_ms.unwrap_or(models::DEFAULT_BURST_MS);
            p.bucket
                .admit(now, info.bytes, m.bucket_iops, m.bucket_mib_s, burst)
        } else {
            now
        };
        let linked = if m.has_tcp() {
            let lost = m.loss_ppm > 0.0 && models::loses(info.bytes, m.loss_ppm, self.rng.unit());
            p.tcp.send(
                admitted,
                &mut p.link_free,
                info.bytes,
                transfer,
                m.rtt_us,
                m.window_kib,
                lost,
            )
        } else {
            // A pipe's stalls stop its link too (no device stage to stop).
            let start = p.link_free.max(admitted);
            let end = start + transfer.round() as Nanos;
            p.link_free = if m.channels == 0 {
                stalls.apply(start, end, write).1
            } else {
                end
            };
            p.link_free
        };
        let served = if m.channels > 0 {
            let (u1, u2) = if m.service_dist.random() {
                (self.rng.unit(), self.rng.unit())
            } else {
                (0.0, 0.0)
            };
            let service = m.service_dist.draw(m.service_us * 1e3, u1, u2);
            p.device
                .serve(linked, service.round() as Nanos, write, &stalls)
        } else {
            linked
        };
        let mut latency = latency.max(0.0).round() as Nanos;
        if m.channels == 0 {
            latency = stalls.apply(served, served + latency, write).1 - served;
        }
        if m.has_tail() {
            let extra = models::tail_delay(m.tail_alpha, m.tail_us, self.rng.unit());
            latency += extra.round() as Nanos;
        }
        self.schedule(served + latency, io);
    }

    fn apply(&mut self, c: &PathChange) {
        let i = self
            .paths
            .iter()
            .position(|p| p.model.name == c.path)
            .expect("checked");
        let m = &mut self.paths[i].model;
        if let Some(v) = c.bandwidth_mib_s {
            m.bandwidth_mib_s = v;
        }
        if let Some(v) = c.base_latency_us {
            m.base_latency_us = v;
        }
        if let Some(v) = c.delay_us {
            m.delay_us = v;
        }
        match c.state.as_deref() {
            Some("offline") => self.engine.set_path_state(PathId(i), PathState::Offline),
            Some("usable") => self.engine.set_path_state(PathId(i), PathState::Usable),
            _ => {}
        }
    }
}

/// Accumulates latency statistics over the measured window.
#[derive(Default)]
struct Tally {
    count: u64,
    bytes: u64,
    sum: f64,
    sum_sq: f64,
    hist: LatencyHistogram,
}

impl Tally {
    fn add(&mut self, latency: Nanos, bytes: u64) {
        self.count += 1;
        self.bytes += bytes;
        let us = latency as f64 / 1e3;
        self.sum += us;
        self.sum_sq += us * us;
        self.hist.record(latency);
    }
}

/// Runs `workload` of `scenario` under `policy`.
pub fn run(
    scenario: &Scenario,
    workload: &Workload,
    policy: PolicyName,
) -> Result<SimResult, String> {
    let configs: Vec<PathConfig> = scenario
        .paths
        .iter()
        .map(|p| PathConfig {
            name: p.name.clone(),
            weight: p.weight,
            preferred: p.preferred,
        })
        .collect();
    let clock = Arc::new(ManualClock::new(T0));
    let mut opts = EngineOptions::new(scenario.policy_config(policy)?);
    opts.clock = clock.clone();
    let engine = Engine::with_options(&configs, opts).map_err(|e| e.to_string())?;
    for (i, m) in scenario.paths.iter().enumerate() {
        let p = engine.path(PathId(i));
        p.set_numa_node(m.numa_node);
        if let Some(a) = m.ana.as_deref().and_then(AnaState::parse) {
            p.set_ana_state(a);
        }
    }
    let slots = (workload.jobs * workload.iodepth) as usize;
    let mut run = Run {
        shard: engine.stats_shard(),
        engine,
        paths: scenario.paths.iter().map(SimPath::new).collect(),
        workload,
        rng: Rng(scenario.seed),
        ios: (0..slots)
            .map(|i| SimIo {
                info: IoInfo {
                    kind: IoKind::Read,
                    bytes: 0,
                },
                job: i / workload.iodepth as usize,
                submitted: T0,
                path: usize::MAX,
                att: Attempts::new(T0),
            })
            .collect(),
        events: BinaryHeap::with_capacity(slots + 1),
        seq: 0,
    };
    let mut changes = scenario.changes.clone();
    changes.sort_by_key(|c| c.at_ms);
    let mut changes = changes.into_iter().peekable();
    let ramp = T0 + scenario.ramp_ms * MS;
    let end = T0 + scenario.duration_ms * MS;
    let mut tally = Tally::default();
    let mut split = vec![0u64; run.paths.len()];

    for io in 0..slots {
        run.submit(io, T0);
    }
    while let Some(Reverse((now, _, io))) = run.events.pop() {
        if now > end {
            break;
        }
        clock.set(now);
        while let Some(c) = changes.next_if(|c| T0 + c.at_ms * MS <= now) {
            run.apply(&c);
        }
        let SimIo {
            info,
            submitted,
            path,
            mut att,
            ..
        } = run.ios[io];
        if path == usize::MAX {
            run.submit(io, now); // it was waiting for a usable path
            continue;
        }
        let p = &mut run.paths[path];
        p.busy_slots -= 1;
        if let Some(next) = p.waiting.pop_front() {
            run.start(next, now);
        }
        let latency = now - submitted;
        run.engine.complete_attempt_at(
            PathId(path),
            &info,
            (0, 0),
            Duration::from_nanos(latency),
            IoOutcome::Ok,
            0,
            &mut att,
            now,
            &run.shard,
        );
        if submitted >= ramp {
            split[path] += 1;
        }
        if now >= ramp {
            tally.add(latency, info.bytes);
        }
        run.submit(io, now);
    }

    let secs = (end - ramp) as f64 / 1e9;
    let mean = tally.sum / tally.count.max(1) as f64;
    let var = (tally.sum_sq / tally.count.max(1) as f64 - mean * mean).max(0.0);
    Ok(SimResult {
        scenario: scenario.name.clone(),
        workload: workload.label(),
        policy: policy.as_str().to_string(),
        ios: tally.count,
        iops: tally.count as f64 / secs,
        mib_s: tally.bytes as f64 / secs / (1024.0 * 1024.0),
        lat_mean_us: mean,
        lat_stddev_us: var.sqrt(),
        lat_p99_us: tally.hist.quantile(0.99) as f64 / 1e3,
        path_ios: scenario
            .paths
            .iter()
            .zip(split)
            .map(|(p, n)| (p.name.clone(), n))
            .collect(),
        auto_model: if policy == PolicyName::Auto {
            (0..scenario.paths.len())
                .map(|i| {
                    let e = run.engine.path_stats(PathId(i)).estimates;
                    (e.bandwidth_bytes_per_s, e.base_latency_ns)
                })
                .collect()
        } else {
            vec![]
        },
    })
}

/// Runs every workload of `scenario` under each of its policies.
pub fn run_all(scenario: &Scenario) -> Result<Vec<SimResult>, String> {
    let mut out = vec![];
    for w in &scenario.workloads {
        for p in scenario.policy_names()? {
            out.push(run(scenario, w, p)?);
        }
    }
    Ok(out)
}

/// The human-readable table of one scenario's results.
pub fn table(scenario: &Scenario, results: &[SimResult]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "scenario {}: {}", scenario.name, scenario.description);
    let names: Vec<&str> = scenario.paths.iter().map(|p| p.name.as_str()).collect();
    let mut last_workload = None;
    for r in results {
        if last_workload != Some(&r.workload) {
            let _ = writeln!(s, "\nworkload {}", r.workload);
            let _ = writeln!(
                s,
                "{:<15} {:>10} {:>9} {:>10} {:>10} {:>10}  I/O split ({})",
                "policy",
                "IOPS",
                "MiB/s",
                "mean us",
                "stddev us",
                "p99 us",
                names.join(":")
            );
            last_workload = Some(&r.workload);
        }
        let split: Vec<String> = r.path_ios.iter().map(|(_, n)| n.to_string()).collect();
        let _ = writeln!(
            s,
            "{:<15} {:>10.0} {:>9.1} {:>10.1} {:>10.1} {:>10.1}  {}",
            r.policy,
            r.iops,
            r.mib_s,
            r.lat_mean_us,
            r.lat_stddev_us,
            r.lat_p99_us,
            split.join(":")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_PATHS: &str = r#"
        name = "t"
        duration_ms = 200
        ramp_ms = 20
        [[path]]
        name = "a"
        bandwidth_mib_s = 400
        base_latency_us = 100
        jitter = 0.2
        [[path]]
        name = "b"
        bandwidth_mib_s = 400
        base_latency_us = 100
        jitter = 0.2
        [workload]
        bs = 4096
        iodepth = 16
        jobs = 2
    "#;

    #[test]
    fn deterministic() {
        let s = Scenario::parse(TWO_PATHS).unwrap();
        let a = run(&s, &s.workloads[0], PolicyName::QueueDepth).unwrap();
        let b = run(&s, &s.workloads[0], PolicyName::QueueDepth).unwrap();
        assert_eq!(a, b);
        assert!(a.ios > 0);
    }

    #[test]
    fn a_run_of_auto_reports_its_model_of_each_path() {
        let s = Scenario::parse(TWO_PATHS).unwrap();
        let auto = run(&s, &s.workloads[0], PolicyName::Auto).unwrap();
        assert_eq!(auto.auto_model.len(), 2);
        for (b, l) in &auto.auto_model {
            // Two 400 MiB/s links: learned, and within a factor of four.
            let b = b.expect("a loaded path is measured");
            assert!((100 << 20..1600 << 20).contains(&b), "{b}");
            assert!(l.is_some_and(|l| l > 0));
        }
        let other = run(&s, &s.workloads[0], PolicyName::ServiceTime).unwrap();
        assert!(other.auto_model.is_empty());
    }

    #[test]
    fn closed_loop_obeys_littles_law_and_bandwidth() {
        let s = Scenario::parse(TWO_PATHS).unwrap();
        let r = run(&s, &s.workloads[0], PolicyName::RoundRobin).unwrap();
        // 2 x 400 MiB/s of 4k: bandwidth-bound at about 800 MiB/s
        assert!((r.mib_s - 800.0).abs() < 20.0, "{r:?}");
        // Little: 32 in flight = IOPS x mean latency
        let in_flight = r.iops * r.lat_mean_us / 1e6;
        assert!((in_flight - 32.0).abs() < 1.0, "{in_flight}");
        assert!((r.path_share("a") - 0.5).abs() < 0.01);
        let line = r.to_json();
        for key in [
            "policy",
            "iops",
            "mib_s",
            "lat_mean_us",
            "lat_stddev_us",
            "lat_p99_us",
        ] {
            assert!(line.contains(&format!("\"{key}\":")), "{line}");
        }
        assert!(line.contains(r#""path_ios":{"a":"#), "{line}");
    }

    #[test]
    fn slots_limit_concurrency() {
        let mut s = Scenario::parse(TWO_PATHS).unwrap();
        for p in &mut s.paths {
            p.bandwidth_mib_s = 1e6; // latency-bound
            p.jitter = 0.0;
            p.slots = 4;
        }
        let r = run(&s, &s.workloads[0], PolicyName::RoundRobin).unwrap();
        // 8 slots of 100 us: 80k IOPS; the other 24 I/Os queue on the host
        assert!((r.iops - 80_000.0).abs() < 1000.0, "{r:?}");
        assert!((r.lat_mean_us - 400.0).abs() < 10.0, "{r:?}");
    }

    #[test]
    fn changes_apply_at_their_time() {
        let mut s = Scenario::parse(TWO_PATHS).unwrap();
        s.changes.push(PathChange {
            at_ms: 0,
            path: "b".into(),
            bandwidth_mib_s: None,
            base_latency_us: None,
            delay_us: None,
            state: Some("offline".into()),
        });
        let r = run(&s, &s.workloads[0], PolicyName::RoundRobin).unwrap();
        assert!(r.path_share("b") < 0.01, "{r:?}");
    }

    #[test]
    fn rejects_bad_scenarios() {
        assert!(Scenario::parse("name = 1").is_err());
        let bad = TWO_PATHS.replace("bs = 4096", "");
        assert!(Scenario::parse(&bad).unwrap_err().contains("bs"));
        let bad = TWO_PATHS.replace("ramp_ms = 20", "ramp_ms = 500");
        assert!(Scenario::parse(&bad).is_err());
    }
}
