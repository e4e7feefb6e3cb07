//! Every policy side by side on paths that are not lab pipes (issue 45,
//! item 2): O_DIRECT file paths on this machine's own disk (two equal, or
//! one also lab-delayed), a loop device (`losetup --direct-io=on`) beside a
//! direct file path over the same image (two kernel stacks over one image),
//! and null paths shaped by the lab path models (a device with channels, a
//! token bucket, stalls, a lossy fabric link). The blkio client is the
//! workload; each round runs every policy in turn (the order rotated by
//! one each round), and the table gives each metric's median over the
//! rounds in policy-bench's format, then each policy's MiB/s over the best
//! other policy's in the same round, median over the rounds (ratios within
//! one round: this machine is shared, its absolute speed drifts).
//!
//! usage: policy-bench-real [--seconds N] [--rounds N] [--scenario NAME]
//!        [--disk-dir DIR] [--ours-bin PATH]
//! The loop scenarios need root (losetup); they are skipped without it.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use serde_json::json;
use vhost_mpath_tests::client::{Client, ClientOptions};
use vhost_mpath_tests::loadgen::{self, Workload};
use vhost_mpath_tests::locate::ours_binary;
use vhost_mpath_tests::rpc::{path_stats, RpcClient, POLICIES};
use vhost_mpath_tests::{DiskSpec, PathSpec, ServerKind, TempDir};

/// The image the disk scenarios share: written through, not sparse (a
/// hole reads as zeroes without touching the device).
const IMAGE_MIB: u64 = 512;

/// Where a path's device comes from.
#[derive(Clone, Copy)]
enum Device {
    /// The image file on the disk.
    Image,
    /// A loop device over the image (`--direct-io=on`).
    Loop,
    /// A null path.
    Null,
}

struct Scenario {
    name: &'static str,
    what: &'static str,
    /// (name, device, path options)
    paths: Vec<(&'static str, Device, &'static str)>,
    workload: Workload,
}

fn scenarios() -> Vec<Scenario> {
    use Device::*;
    vec![
        Scenario {
            name: "disk-2",
            what: "two equal O_DIRECT file paths on the machine's disk; 4k randread QD32",
            paths: vec![("a", Image, ""), ("b", Image, "")],
            workload: Workload::new(4096, 32, false),
        },
        Scenario {
            name: "disk-2-write",
            what: "two equal O_DIRECT file paths on the machine's disk; 64k randwrite QD8",
            paths: vec![("a", Image, ""), ("b", Image, "")],
            workload: Workload::new(64 * 1024, 8, true),
        },
        Scenario {
            name: "disk-2-delayed",
            what: "two O_DIRECT file paths on the disk, b also +1 ms (delay-us); 4k randread QD32",
            paths: vec![("a", Image, ""), ("b", Image, "delay-us=1000")],
            workload: Workload::new(4096, 32, false),
        },
        Scenario {
            name: "loop-vs-file",
            what:
                "a loop device (direct-io) beside a direct file path, one image; 4k randread QD32",
            paths: vec![("loop", Loop, ""), ("file", Image, "")],
            workload: Workload::new(4096, 32, false),
        },
        Scenario {
            name: "loop-vs-file-write",
            what:
                "a loop device (direct-io) beside a direct file path, one image; 64k randwrite QD8",
            paths: vec![("loop", Loop, ""), ("file", Image, "")],
            workload: Workload::new(64 * 1024, 8, true),
        },
        Scenario {
            name: "channels-vs-pipe",
            what: "a device of 8 channels x 1 ms (8000 IOPS, flat to QD8) beside a pipe of \
                   200 us + 16 MB/s (3900 IOPS of 4k); 4k randread QD32",
            paths: vec![
                ("device", Null, "channels=8,service-us=1000"),
                ("pipe", Null, "delay-us=200,bw-mbps=16"),
            ],
            workload: Workload::new(4096, 32, false),
        },
        Scenario {
            name: "bucket-vs-free",
            what: "a token bucket of 2000 IOPS (100 ms burst) in front of a fast device beside an \
                   unthrottled device of 2 channels x 500 us (4000 IOPS); 4k randread QD32",
            paths: vec![
                (
                    "bucket",
                    Null,
                    "bucket-iops=2000,channels=16,service-us=200",
                ),
                ("free", Null, "channels=2,service-us=500"),
            ],
            workload: Workload::new(4096, 32, false),
        },
        Scenario {
            name: "stall-writes",
            what:
                "two devices of 4 channels x 500 us, one pausing writes 50 ms every 250 ms (GC); \
                   4k randwrite QD16",
            paths: vec![
                (
                    "stalls",
                    Null,
                    "channels=4,service-us=500,stall-every-ms=250,stall-ms=50,stall-writes-only",
                ),
                ("steady", Null, "channels=4,service-us=500"),
            ],
            workload: Workload::new(4096, 16, true),
        },
        Scenario {
            name: "lossy-fabric",
            what: "two TCP-like links, 1 ms RTT, 256 KiB window; one loses 1 segment in 1000; \
                   64k randread QD16",
            paths: vec![
                ("lossy", Null, "rtt-us=1000,window-kib=256,loss-ppm=1000"),
                ("clean", Null, "rtt-us=1000,window-kib=256"),
            ],
            workload: Workload::new(64 * 1024, 16, false),
        },
    ]
}

/// One policy's run in one round.
#[derive(Clone, Default)]
struct Sample {
    iops: f64,
    mib_s: f64,
    mean_us: f64,
    stddev_us: f64,
    p99_us: f64,
    split: Vec<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A loop device over `image`, detached when dropped.
struct LoopDev(PathBuf);

impl LoopDev {
    fn attach(image: &Path) -> Result<LoopDev, String> {
        let out = Command::new("losetup")
            .args(["--direct-io=on", "--show", "-f"])
            .arg(image)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // The loop device must really do direct I/O to the image, or its
        // page cache would be a third copy of the data.
        let name = dev.trim_start_matches("/dev/");
        let dio =
            std::fs::read_to_string(format!("/sys/block/{name}/loop/dio")).unwrap_or_default();
        let lo = LoopDev(dev.into());
        if dio.trim() != "1" {
            return Err(format!("{}: direct I/O is off", lo.0.display()));
        }
        Ok(lo)
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

/// The filesystem type of `dir` (statfs `f_type`), refusing memory ones:
/// the disk scenarios are about the machine's own disk.
fn check_on_disk(dir: &Path) -> Result<(), String> {
    let out = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir)
        .output()
        .map_err(|e| format!("stat -f: {e}"))?;
    let fs = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if fs == "tmpfs" || fs == "ramfs" || fs.is_empty() {
        return Err(format!(
            "{}: filesystem {fs:?} is not a disk (--disk-dir)",
            dir.display()
        ));
    }
    eprintln!("disk dir {} on {fs}", dir.display());
    Ok(())
}

/// Writes the image through (every block allocated and written).
fn write_image(dir: &TempDir) -> Result<PathBuf, String> {
    let img = dir.path().join("disk.img");
    let status = Command::new("dd")
        .args(["if=/dev/urandom", "bs=1M", "oflag=direct", "status=none"])
        .arg(format!("of={}", img.display()))
        .arg(format!("count={IMAGE_MIB}"))
        .status()
        .map_err(|e| format!("dd: {e}"))?;
    if !status.success() {
        return Err("dd failed".into());
    }
    Ok(img)
}

struct Opts {
    seconds: f64,
    rounds: usize,
    only: Option<String>,
    disk_dir: PathBuf,
    bin: PathBuf,
}

fn main() -> ExitCode {
    let mut o = Opts {
        seconds: 2.0,
        rounds: 3,
        only: None,
        disk_dir: PathBuf::from("/var/tmp"),
        bin: ours_binary(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--seconds", Some(v)) => o.seconds = v.parse().unwrap_or(2.0),
            ("--rounds", Some(v)) => o.rounds = v.parse().unwrap_or(3).max(1),
            ("--scenario", Some(v)) => o.only = Some(v),
            ("--disk-dir", Some(v)) => o.disk_dir = v.into(),
            ("--ours-bin", Some(v)) => o.bin = v.into(),
            _ => {
                eprintln!(
                    "usage: policy-bench-real [--seconds N] [--rounds N] [--scenario NAME] \
                     [--disk-dir DIR] [--ours-bin PATH]"
                );
                return ExitCode::from(2);
            }
        }
    }
    match run_all(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("policy-bench-real: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_all(o: &Opts) -> Result<(), String> {
    let chosen: Vec<Scenario> = scenarios()
        .into_iter()
        .filter(|s| o.only.as_deref().is_none_or(|n| n == s.name))
        .collect();
    let needs = |d: fn(&Device) -> bool| chosen.iter().any(|s| s.paths.iter().any(|p| d(&p.1)));
    let mut image = None;
    let mut _dir = None;
    if needs(|d| !matches!(d, Device::Null)) {
        check_on_disk(&o.disk_dir)?;
        let dir = TempDir::new_in(&o.disk_dir, "policy-bench-real").map_err(|e| e.to_string())?;
        image = Some(write_image(&dir)?);
        _dir = Some(dir);
    }
    let lo = match &image {
        Some(img) if needs(|d| matches!(d, Device::Loop)) => match LoopDev::attach(img) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("skipping the loop scenarios: {e}");
                None
            }
        },
        _ => None,
    };
    for sc in &chosen {
        let uses_loop = sc.paths.iter().any(|p| matches!(p.1, Device::Loop));
        if uses_loop && lo.is_none() {
            continue;
        }
        let device = |d: Device| match d {
            Device::Image => image.as_ref().expect("image").display().to_string(),
            Device::Loop => lo.as_ref().expect("loop").0.display().to_string(),
            Device::Null => format!("null:{IMAGE_MIB}M"),
        };
        let specs: Vec<String> = sc
            .paths
            .iter()
            .map(|(name, d, opts)| {
                let mut s = format!("{},name={name}", device(*d));
                if !opts.is_empty() {
                    s = format!("{s},{opts}");
                }
                s
            })
            .collect();
        run(sc, &specs, o).map_err(|e| format!("{}: {e}", sc.name))?;
    }
    Ok(())
}

fn run(sc: &Scenario, specs: &[String], o: &Opts) -> Result<(), String> {
    let duration = Duration::from_secs_f64(o.seconds);
    let dir = TempDir::new("policy-bench-real").map_err(|e| e.to_string())?;
    let rpc_sock = dir.path().join("rpc.sock");
    let paths = specs.iter().map(|s| PathSpec::Raw(s.clone())).collect();
    let mut disk = DiskSpec::with_paths(paths);
    disk.ours_extra = vec![
        "--rpc-socket".into(),
        rpc_sock.display().to_string(),
        "--log-level".into(),
        "warn".into(),
        "--lab".into(),
    ];
    let server = disk
        .launch_with(ServerKind::Ours, &o.bin)
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
        "\n{} — {} ({}, {:.0} s per policy, {} rounds)",
        sc.name,
        sc.what,
        w.name,
        duration.as_secs_f64(),
        o.rounds
    );
    for s in specs {
        println!("  --path {s}");
    }
    // samples[round][policy]
    let mut samples = vec![vec![Sample::default(); POLICIES.len()]; o.rounds];
    for (round, row) in samples.iter_mut().enumerate() {
        for k in 0..POLICIES.len() {
            let i = (k + round) % POLICIES.len();
            row[i] = one(&mut client, &mut rpc, sc, POLICIES[i], duration)?;
        }
        let line: Vec<String> = POLICIES
            .iter()
            .zip(row.iter())
            .map(|(p, s)| format!("{p} {:.1}", s.mib_s))
            .collect();
        eprintln!("  round {}: MiB/s {}", round + 1, line.join(", "));
    }
    print_table(sc, &samples);
    Ok(())
}

/// One policy for one round: a warm-up (adaptive and auto measure the
/// paths first), then the measured run.
fn one(
    client: &mut Client,
    rpc: &mut RpcClient,
    sc: &Scenario,
    policy: &str,
    duration: Duration,
) -> Result<Sample, String> {
    let w = &sc.workload;
    rpc.call("set_policy", json!({"policy": policy}))
        .map_err(|e| format!("set_policy {policy}: {e}"))?;
    loadgen::run(client, w, duration / 4, 1).map_err(|e| e.to_string())?;
    rpc.call("reset_stats", json!({}))
        .map_err(|e| e.to_string())?;
    let r = loadgen::run(client, w, duration, 2).map_err(|e| e.to_string())?;
    let stats = rpc
        .call("get_stats", json!({}))
        .map_err(|e| e.to_string())?;
    let split = sc
        .paths
        .iter()
        .map(|(n, _, _)| {
            let p = path_stats(&stats, n);
            (p["reads"].as_u64().unwrap_or(0) + p["writes"].as_u64().unwrap_or(0)) as f64
        })
        .collect();
    Ok(Sample {
        iops: r.iops(),
        mib_s: r.mib_per_s(),
        mean_us: r.latency_ns.mean() / 1000.0,
        stddev_us: r.latency_ns.stdev() / 1000.0,
        p99_us: r.latency_us(0.99),
        split,
    })
}

/// The medians over the rounds in policy-bench's table, then each policy
/// over the best other in its round.
fn print_table(sc: &Scenario, samples: &[Vec<Sample>]) {
    let names: Vec<&str> = sc.paths.iter().map(|(n, _, _)| *n).collect();
    println!(
        "{:<16}{:>10}{:>10}{:>11}{:>11}{:>11}  I/O split ({}), medians of {} rounds",
        "policy",
        "IOPS",
        "MiB/s",
        "mean us",
        "stddev us",
        "p99 us",
        names.join(":"),
        samples.len()
    );
    let col = |i: usize, f: fn(&Sample) -> f64| median(samples.iter().map(|r| f(&r[i])).collect());
    for (i, policy) in POLICIES.iter().enumerate() {
        let split: Vec<String> = (0..names.len())
            .map(|p| {
                format!(
                    "{:.0}",
                    median(samples.iter().map(|r| r[i].split[p]).collect())
                )
            })
            .collect();
        println!(
            "{:<16}{:>10.0}{:>10.1}{:>11.1}{:>11.1}{:>11.1}  {}",
            policy,
            col(i, |s| s.iops),
            col(i, |s| s.mib_s),
            col(i, |s| s.mean_us),
            col(i, |s| s.stddev_us),
            col(i, |s| s.p99_us),
            split.join(":")
        );
    }
    let ratios: Vec<String> = POLICIES
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let per_round = samples
                .iter()
                .map(|r| {
                    let best_other = r
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != i)
                        .map(|(_, s)| s.mib_s)
                        .fold(0.0, f64::max);
                    r[i].mib_s / best_other.max(1e-9)
                })
                .collect();
            format!("{p} {:.2}x", median(per_round))
        })
        .collect();
    println!(
        "policy / best other (MiB/s, same round; median): {}",
        ratios.join(", ")
    );
}
