//! The seed experiments through the real daemon: two or three lab-shaped null paths
//! (added latency, bandwidth caps), the blkio client as the workload, every
//! policy in turn (switched over JSON-RPC), one table per scenario in the
//! simulator's format (`mpath-sim`), so the two can be compared side by side.
//!
//! usage: policy-bench [--seconds N] [--scenario NAME] [--ours-bin PATH]

use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;
use vhost_mpath_tests::client::{Client, ClientOptions};
use vhost_mpath_tests::loadgen::{self, Workload};
use vhost_mpath_tests::locate::ours_binary;
use vhost_mpath_tests::rpc::{path_stats, RpcClient, POLICIES};
use vhost_mpath_tests::{DiskSpec, PathSpec, ServerKind, TempDir};

struct Scenario {
    name: &'static str,
    what: &'static str,
    /// (name, path options)
    paths: Vec<(&'static str, &'static str)>,
    workload: Workload,
}

/// The four seed setups, scaled to what two cores serve: the ratios
/// between paths follow the seeds (REFERENCE §4), the absolute speeds do not.
fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "service-time-uniform",
            what: "slow path at 1/4 bandwidth (token bucket); 4k randread QD128",
            paths: vec![
                ("fast", "bw-mbps=100,delay-us=100,weight=4"),
                ("slow", "bw-mbps=25,delay-us=100,weight=1"),
            ],
            workload: Workload::new(4096, 128, false),
        },
        Scenario {
            name: "service-time-mixed",
            what: "slow path at 1/4 bandwidth; 4k/128k 50/50 randread QD64",
            paths: vec![
                ("fast", "bw-mbps=400,delay-us=100,weight=4"),
                ("slow", "bw-mbps=100,delay-us=100,weight=1"),
            ],
            workload: Workload::mixed(4096, 128 * 1024, 64, false),
        },
        Scenario {
            name: "adaptive-delay",
            what: "one path +30 ms; 4k randread QD128",
            paths: vec![("delayed", "delay-us=32000"), ("fast", "delay-us=2000")],
            workload: Workload::new(4096, 128, false),
        },
        Scenario {
            name: "active-active",
            what: "two equal ports; 128k read QD32",
            paths: vec![
                ("port0", "bw-mbps=200,delay-us=100"),
                ("port1", "bw-mbps=200,delay-us=100"),
            ],
            workload: Workload::new(128 * 1024, 32, false),
        },
        // Issue 11: equal links, one longer or congested (NVMe/TCP). All
        // on the near link it saturates with its queue (5 ms) below the
        // far link's latency; the far link's bandwidth is then unused.
        Scenario {
            name: "bw-delay-2",
            what: "two equal 100 MB/s links, one +8 ms; 16k randread QD32",
            paths: vec![
                ("near", "bw-mbps=100,delay-us=100"),
                ("far", "bw-mbps=100,delay-us=8000"),
            ],
            workload: Workload::new(16 * 1024, 32, false),
        },
        Scenario {
            name: "bw-delay-3",
            what: "three equal 100 MB/s links, one +20 ms; 64k randread QD48",
            paths: vec![
                ("near0", "bw-mbps=100,delay-us=100"),
                ("near1", "bw-mbps=100,delay-us=100"),
                ("far", "bw-mbps=100,delay-us=20000"),
            ],
            workload: Workload::new(64 * 1024, 48, false),
        },
        Scenario {
            name: "bw-delay-2-write",
            what: "two equal 100 MB/s links, one +3 ms; 64k randwrite QD16",
            paths: vec![
                ("near", "bw-mbps=100,delay-us=100"),
                ("far", "bw-mbps=100,delay-us=3000"),
            ],
            workload: Workload::new(64 * 1024, 16, true),
        },
    ]
}

fn main() -> ExitCode {
    let mut seconds = 3.0;
    let mut only: Option<String> = None;
    let mut bin = ours_binary();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--seconds", Some(v)) => seconds = v.parse().unwrap_or(3.0),
            ("--scenario", Some(v)) => only = Some(v),
            ("--ours-bin", Some(v)) => bin = v.into(),
            _ => {
                eprintln!("usage: policy-bench [--seconds N] [--scenario NAME] [--ours-bin PATH]");
                return ExitCode::from(2);
            }
        }
    }
    for sc in scenarios() {
        if only.as_deref().is_some_and(|o| o != sc.name) {
            continue;
        }
        if let Err(e) = run(&sc, Duration::from_secs_f64(seconds), &bin) {
            eprintln!("policy-bench: {}: {e}", sc.name);
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn run(sc: &Scenario, duration: Duration, bin: &std::path::Path) -> Result<(), String> {
    let dir = TempDir::new("policy-bench").map_err(|e| e.to_string())?;
    let rpc_sock = dir.path().join("rpc.sock");
    let paths = sc
        .paths
        .iter()
        .map(|(name, opts)| PathSpec::Raw(format!("null:1G,name={name},{opts}")))
        .collect();
    let mut disk = DiskSpec::with_paths(paths);
    disk.ours_extra = vec![
        "--rpc-socket".into(),
        rpc_sock.display().to_string(),
        "--log-level".into(),
        "warn".into(),
        // The paths are lab-shaped.
        "--lab".into(),
    ];
    let server = disk
        .launch_with(ServerKind::Ours, bin)
        .map_err(|e| e.to_string())?;
    let w = &sc.workload;
    let opts = ClientOptions {
        num_queues: 1,
        mem_size: w.block_size.max(w.mixed_block_size.unwrap_or(0)) * w.queue_depth,
        ..ClientOptions::default()
    };
    let mut client = Client::connect_with(server.socket(), &opts).map_err(|e| e.to_string())?;
    let mut rpc = RpcClient::connect(&rpc_sock).map_err(|e| e.to_string())?;
    println!(
        "\n{} — {} ({}, {:.0} s per policy)",
        sc.name,
        sc.what,
        w.name,
        duration.as_secs_f64()
    );
    let names: Vec<&str> = sc.paths.iter().map(|(n, _)| *n).collect();
    let names = names.join(":");
    println!(
        "{:<16}{:>10}{:>10}{:>11}{:>11}{:>11}  I/O split ({names})",
        "policy", "IOPS", "MiB/s", "mean us", "stddev us", "p99 us"
    );
    let mut mib_s = vec![];
    for policy in POLICIES {
        rpc.call("set_policy", json!({"policy": policy}))
            .map_err(|e| format!("set_policy {policy}: {e}"))?;
        // Warm-up lets adaptive and auto measure the paths first.
        loadgen::run(&mut client, w, duration / 4, 1).map_err(|e| e.to_string())?;
        rpc.call("reset_stats", json!({}))
            .map_err(|e| e.to_string())?;
        let r = loadgen::run(&mut client, w, duration, 2).map_err(|e| e.to_string())?;
        let stats = rpc
            .call("get_stats", json!({}))
            .map_err(|e| e.to_string())?;
        let split: Vec<String> = sc
            .paths
            .iter()
            .map(|(n, _)| {
                let p = path_stats(&stats, n);
                (p["reads"].as_u64().unwrap_or(0) + p["writes"].as_u64().unwrap_or(0)).to_string()
            })
            .collect();
        println!(
            "{:<16}{:>10.0}{:>10.1}{:>11.1}{:>11.1}{:>11.1}  {}",
            policy,
            r.iops(),
            r.mib_per_s(),
            r.latency_ns.mean() / 1000.0,
            r.latency_ns.stdev() / 1000.0,
            r.latency_us(0.99),
            split.join(":")
        );
        mib_s.push((policy, r.mib_per_s()));
    }
    // auto against every other policy: its MiB/s over theirs.
    let auto = mib_s
        .iter()
        .find(|(p, _)| *p == "auto")
        .map_or(0.0, |r| r.1);
    let ratios: Vec<String> = mib_s
        .iter()
        .filter(|(p, _)| *p != "auto")
        .map(|(p, m)| format!("{p} {:.2}x", auto / m.max(1e-9)))
        .collect();
    println!("auto vs: {}", ratios.join(", "));
    Ok(())
}
