//! latency-oracle: the daemon's per-path latency (`get_stats`, `/metrics`)
//! against a blkio client's end-to-end latency of the same requests, cell by
//! cell, and the io-timeout run (io-timeout-ms at 20x the client's p99: no
//! path may be marked failed). Prints markdown tables; exits 1 when the
//! daemon's numbers are outside the client's (`vhost_mpath_tests::latency`).
//!
//! `latency-oracle [--bin PATH] [--backings null,tmpfs,direct] [--poll-us 0,50]
//!  [--qd 1,8,32,128] [--seconds S] [--timeout-seconds S (0: no io-timeout run)]
//!  [--timeout-backings direct]`

use std::path::PathBuf;
use std::process::ExitCode;

use vhost_mpath_tests::latency::{self, Backing};
use vhost_mpath_tests::loadgen::Workload;

struct Args {
    bin: PathBuf,
    backings: Vec<Backing>,
    polls: Vec<u32>,
    depths: Vec<usize>,
    secs: f64,
    timeout_secs: f64,
    timeout_backings: Vec<Backing>,
}

fn list<T>(v: &str, f: impl Fn(&str) -> Option<T>) -> Result<Vec<T>, String> {
    v.split(',')
        .map(|s| f(s.trim()).ok_or_else(|| format!("bad list item {s:?}")))
        .collect()
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        bin: vhost_mpath_tests::locate::ours_binary(),
        backings: vec![Backing::Null, Backing::Tmpfs, Backing::Direct],
        polls: vec![0, 50],
        depths: vec![1, 8, 32, 128],
        secs: 2.0,
        timeout_secs: 30.0,
        timeout_backings: vec![Backing::Direct],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--bin" => a.bin = PathBuf::from(v),
            "--backings" => a.backings = list(&v, Backing::parse)?,
            "--poll-us" => a.polls = list(&v, |s| s.parse().ok())?,
            "--qd" => a.depths = list(&v, |s| s.parse().ok())?,
            "--seconds" => a.secs = v.parse().map_err(|_| "bad --seconds")?,
            "--timeout-seconds" => {
                a.timeout_secs = v.parse().map_err(|_| "bad --timeout-seconds")?
            }
            "--timeout-backings" => a.timeout_backings = list(&v, Backing::parse)?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "{e}\nusage: latency-oracle [--bin PATH] [--backings null,tmpfs,direct] \
                 [--poll-us 0,50] [--qd 1,8,32,128] [--seconds S] [--timeout-seconds S] \
                 [--timeout-backings direct]"
            );
            return ExitCode::from(2);
        }
    };
    let (bad, rows) = latency::run_matrix(
        &a.bin,
        &a.backings,
        &a.polls,
        &latency::workloads(&a.depths),
        a.secs,
    );
    println!("{}", latency::TABLE_HEADER);
    for r in &rows {
        println!("{r}");
    }
    let mut failed = !bad.is_empty();
    for b in &bad {
        eprintln!("VIOLATION {b}");
    }
    if a.timeout_secs > 0.0 {
        println!("\n{}", latency::TIMEOUT_HEADER);
        for &b in &a.timeout_backings {
            let run =
                latency::io_timeout_run(&a.bin, b, &Workload::new(4096, 32, false), a.timeout_secs);
            println!("{}", run.row(b));
            if run.failures > 0 || run.no_path_waits > 0 {
                eprintln!(
                    "VIOLATION {}: paths marked failed {} times, {} no-path waits",
                    b.name(),
                    run.failures,
                    run.no_path_waits
                );
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
