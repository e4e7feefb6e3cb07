//! The outside-clock oracle (issue 48): under a blkio client's load, the
//! daemon's per-path latency (`get_stats`, `/metrics`) lies within what the
//! client measured end to end for the same requests, and its counts add up
//! to the client's; with io-timeout-ms at 20x the client's p99, no path is
//! marked failed. What must hold, and the slack, is in
//! `vhost_mpath_tests::latency`.

use vhost_mpath_tests::latency::{self, Backing};
use vhost_mpath_tests::loadgen::Workload;
use vhost_mpath_tests::locate::ours_binary;
use vhost_mpath_tests::ServerKind;

/// One test at a time: they share two CPUs and a disk, and the io-timeout
/// run must not see the matrix's load on the disk.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn ours() -> bool {
    if ServerKind::from_env() == ServerKind::Qsd {
        eprintln!("skipped: per-path latency is ours only");
        return false;
    }
    true
}

/// Null, tmpfs and O_DIRECT paths; QD1 to 128; reads and writes; with and
/// without `--poll-us`.
#[test]
fn per_path_latency_lies_within_the_clients() {
    if !ours() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (bad, rows) = latency::run_matrix(
        &ours_binary(),
        &[Backing::Null, Backing::Tmpfs, Backing::Direct],
        &[0, 50],
        &latency::workloads(&[1, 8, 32, 128]),
        0.5,
    );
    eprintln!("{}\n{}", latency::TABLE_HEADER, rows.join("\n"));
    assert!(
        bad.is_empty(),
        "the daemon's latency is outside the client's:\n{}",
        bad.join("\n")
    );
}

/// A 30 s run at QD32 on O_DIRECT paths with io-timeout-ms at 20x the p99
/// measured first: no path is marked failed, nothing waits for a path.
#[test]
fn io_timeout_at_20x_p99_fails_no_healthy_path() {
    if !ours() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let run = latency::io_timeout_run(
        &ours_binary(),
        Backing::Direct,
        &Workload::new(4096, 32, false),
        30.0,
    );
    eprintln!("{}\n{}", latency::TIMEOUT_HEADER, run.row(Backing::Direct));
    assert_eq!(run.failures, 0, "healthy paths marked failed");
    assert_eq!(run.no_path_waits, 0, "requests waited for a path");
}
