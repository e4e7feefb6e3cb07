//! vhost-load: random-I/O throughput of a vhost-user-blk disk, per policy.
//!
//! Made for the QEMU guest scenarios and benchmarks (tests/vm): it runs inside the
//! guest next to the daemon and drives it with libblkio's vhost-user frontend
//! (the same queue-depth-N loop as vhost-bench: queue 0, random offsets, or
//! consecutive ones with `--seq`).
//!
//! Without `--policies` it measures once. With `--rpc-socket` and `--policies
//! a,b,...` it switches the daemon's policy over JSON-RPC (`set_policy`) before each
//! measurement, warms up (adaptive and auto learn the paths), resets the daemon's
//! statistics, measures, and reads the per-path I/O split back (`get_stats`).
//!
//! `--rounds R` repeats the whole list R times, interleaved (p1, p2, ..., p1, p2, ...),
//! so that a slow drift of the machine (TCG guests drift a lot) hits every policy alike.
//! `--rotate` starts round r at the list's (r mod n)-th policy, so that no policy
//! always follows the same one (a path with memory, such as a token bucket refilled
//! while the previous policy left it idle, otherwise favours one policy every round).
//!
//! Output: one line per measurement,
//! `LOAD-ROUND round=R label=L iops=N ...`, then one line per label over all rounds,
//! `LOAD label=L iops=N median_iops=N rounds=N1/N2/.. mibs=X mean_us=X stddev_us=X p99_us=X max_us=X split=a:N,b:N`
//! (iops and latencies over all rounds together, median_iops the median round), then a
//! table. Exits non-zero when a request fails or the daemon refuses a call.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;
use vhost_mpath_tests::client::{Client, ClientOptions};
use vhost_mpath_tests::loadgen::{self, LoadResult, Workload};
use vhost_mpath_tests::rpc::RpcClient;

const USAGE: &str = "usage: vhost-load --socket PATH [--bs-kib N] [--qd N] [--write] [--seq]
       [--seconds S] [--warmup S] [--label NAME]
       [--rpc-socket PATH [--policies P1,P2,...]] [--rounds R] [--rotate] [--seed N] [--timeout-s S]";

struct Args {
    socket: PathBuf,
    rpc: Option<PathBuf>,
    policies: Vec<String>,
    bs: usize,
    qd: usize,
    write: bool,
    seq: bool,
    seconds: Duration,
    warmup: Duration,
    label: String,
    rounds: usize,
    rotate: bool,
    seed: u64,
    timeout: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        socket: PathBuf::new(),
        rpc: None,
        policies: Vec::new(),
        bs: 4096,
        qd: 32,
        write: false,
        seq: false,
        seconds: Duration::from_secs(5),
        warmup: Duration::from_secs(1),
        label: String::new(),
        rounds: 1,
        rotate: false,
        seed: 1,
        timeout: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--write" => {
                a.write = true;
                continue;
            }
            "--seq" => {
                a.seq = true;
                continue;
            }
            "--rotate" => {
                a.rotate = true;
                continue;
            }
            "-h" | "--help" => return Err(String::new()),
            _ => {}
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| format!("{flag} {v}: not a number"))
        };
        match flag.as_str() {
            "--socket" => a.socket = PathBuf::from(&v),
            "--rpc-socket" => a.rpc = Some(PathBuf::from(&v)),
            "--policies" => {
                a.policies = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            }
            "--bs-kib" => a.bs = (num()? as usize) << 10,
            "--qd" => a.qd = (num()? as usize).max(1),
            "--seconds" => a.seconds = Duration::from_secs_f64(num()?),
            "--warmup" => a.warmup = Duration::from_secs_f64(num()?),
            "--label" => a.label = v.clone(),
            "--seed" => a.seed = num()? as u64,
            "--rounds" => a.rounds = (num()? as usize).max(1),
            "--timeout-s" => a.timeout = Duration::from_secs_f64(num()?),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.socket.as_os_str().is_empty() {
        return Err("--socket is required".into());
    }
    if a.bs == 0 || a.seconds.is_zero() {
        return Err("--bs-kib and --seconds must be positive".into());
    }
    if !a.policies.is_empty() && a.rpc.is_none() {
        return Err("--policies needs --rpc-socket".into());
    }
    Ok(a)
}

/// One label over all its rounds.
struct Row {
    label: String,
    ios: u64,
    bytes: u64,
    elapsed: Duration,
    latency_ns: hdrhistogram::Histogram<u64>,
    round_iops: Vec<f64>,
    /// (path name, requests) summed from get_stats, when the daemon was asked.
    split: Vec<(String, u64)>,
}

impl Row {
    fn new(label: String) -> Row {
        Row {
            label,
            ios: 0,
            bytes: 0,
            elapsed: Duration::ZERO,
            latency_ns: hdrhistogram::Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("bounds"),
            round_iops: Vec::new(),
            split: Vec::new(),
        }
    }

    fn add(&mut self, r: &LoadResult, split: &[(String, u64)]) {
        self.ios += r.ios;
        self.bytes += r.bytes;
        self.elapsed += r.elapsed;
        self.latency_ns
            .add(&r.latency_ns)
            .expect("same histogram bounds");
        self.round_iops.push(r.iops());
        for (name, n) in split {
            match self.split.iter_mut().find(|(m, _)| m == name) {
                Some((_, c)) => *c += n,
                None => self.split.push((name.clone(), *n)),
            }
        }
    }

    fn iops(&self) -> f64 {
        self.ios as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn mib_s(&self) -> f64 {
        self.bytes as f64 / f64::from(1 << 20) / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn median_iops(&self) -> f64 {
        let mut v = self.round_iops.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            0.0
        } else if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    fn split_text(&self) -> String {
        split_text(&self.split)
    }
}

fn split_text(split: &[(String, u64)]) -> String {
    if split.is_empty() {
        return "-".into();
    }
    split
        .iter()
        .map(|(n, c)| format!("{n}:{c}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("vhost-load: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("LOAD-ERROR {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> Result<(), String> {
    let mut w = Workload::new(a.bs, a.qd, a.write);
    if a.seq {
        w = w.sequential();
    }
    let opts = ClientOptions {
        num_queues: 1,
        mem_size: (a.bs * a.qd).max(1 << 20),
        timeout: a.timeout,
        ..ClientOptions::default()
    };
    let mut client = Client::connect_with(&a.socket, &opts)
        .map_err(|e| format!("connect to {}: {e}", a.socket.display()))?;
    let mut rpc = match &a.rpc {
        Some(p) => Some(RpcClient::connect(p).map_err(|e| format!("rpc {}: {e}", p.display()))?),
        None => None,
    };
    let runs: Vec<Option<String>> = if a.policies.is_empty() {
        vec![None]
    } else {
        a.policies.iter().cloned().map(Some).collect()
    };
    println!(
        "LOAD workload: {} on a {} MiB disk, {:.1} s per row after {:.1} s warm-up",
        w.name,
        client.capacity() >> 20,
        a.seconds.as_secs_f64(),
        a.warmup.as_secs_f64()
    );
    let label_of = |policy: &Option<String>| match (policy, a.label.is_empty()) {
        (Some(p), true) => p.clone(),
        (Some(p), false) => format!("{}/{p}", a.label),
        (None, false) => a.label.clone(),
        (None, true) => w.name.replace(' ', "-"),
    };
    let mut rows: Vec<Row> = runs.iter().map(|p| Row::new(label_of(p))).collect();
    let mut n = 0u64;
    for round in 0..a.rounds {
        let first = if a.rotate { round % runs.len() } else { 0 };
        for k in (first..runs.len()).chain(0..first) {
            let (policy, row) = (&runs[k], &mut rows[k]);
            if let (Some(p), Some(rpc)) = (policy, rpc.as_mut()) {
                rpc.call("set_policy", json!({ "policy": p }))
                    .map_err(|e| format!("set_policy {p}: {e}"))?;
            }
            let seed = a.seed.wrapping_add(2 * n);
            n += 1;
            if !a.warmup.is_zero() {
                loadgen::run(&mut client, &w, a.warmup, seed)
                    .map_err(|e| format!("warm-up: {e}"))?;
            }
            if let Some(rpc) = rpc.as_mut() {
                rpc.call("reset_stats", json!({}))
                    .map_err(|e| format!("reset_stats: {e}"))?;
            }
            let r =
                loadgen::run(&mut client, &w, a.seconds, seed + 1).map_err(|e| e.to_string())?;
            let mut split = Vec::new();
            if let Some(rpc) = rpc.as_mut() {
                let stats = rpc
                    .call("get_stats", json!({}))
                    .map_err(|e| format!("get_stats: {e}"))?;
                for p in stats["paths"].as_array().into_iter().flatten() {
                    let n = p["reads"].as_u64().unwrap_or(0) + p["writes"].as_u64().unwrap_or(0);
                    split.push((p["name"].as_str().unwrap_or("?").to_string(), n));
                }
            }
            println!(
                "LOAD-ROUND round={round} label={} iops={:.0} mean_us={:.0} p99_us={:.0} split={}",
                row.label,
                r.iops(),
                r.latency_ns.mean() / 1000.0,
                r.latency_us(0.99),
                split_text(&split)
            );
            row.add(&r, &split);
        }
    }
    for row in &rows {
        let q = |x: f64| row.latency_ns.value_at_quantile(x) as f64 / 1000.0;
        println!(
            "LOAD label={} iops={:.0} median_iops={:.0} rounds={} mibs={:.2} mean_us={:.0} stddev_us={:.0} p99_us={:.0} max_us={:.0} split={}",
            row.label,
            row.iops(),
            row.median_iops(),
            row.round_iops
                .iter()
                .map(|v| format!("{v:.0}"))
                .collect::<Vec<_>>()
                .join("/"),
            row.mib_s(),
            row.latency_ns.mean() / 1000.0,
            row.latency_ns.stdev() / 1000.0,
            q(0.99),
            row.latency_ns.max() as f64 / 1000.0,
            row.split_text()
        );
    }
    println!(
        "{:<24}{:>9}{:>9}{:>11}{:>11}{:>11}  I/O split",
        "policy", "IOPS", "MiB/s", "mean us", "stddev us", "p99 us"
    );
    for row in &rows {
        println!(
            "{:<24}{:>9.0}{:>9.2}{:>11.0}{:>11.0}{:>11.0}  {}",
            row.label,
            row.iops(),
            row.mib_s(),
            row.latency_ns.mean() / 1000.0,
            row.latency_ns.stdev() / 1000.0,
            row.latency_ns.value_at_quantile(0.99) as f64 / 1000.0,
            row.split_text()
        );
    }
    Ok(())
}
