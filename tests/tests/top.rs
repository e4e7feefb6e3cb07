//! `vhost-mpath top` against a running daemon under load: the blkio client's
//! verified load on two queues over paths `a` and `b`, and `top --count 2`
//! into a pipe (stdout is not a terminal): two plain snapshots, each with the
//! policy on top and a row per path that moves I/O.

mod support;

use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::*;
use vhost_mpath_tests::locate::ours_binary;

/// The rows of one snapshot under its `NAME` header, as column name -> cell.
fn rows(snapshot: &str) -> Vec<Vec<(String, String)>> {
    let mut lines = snapshot.lines().skip_while(|l| !l.starts_with("NAME"));
    let header: Vec<String> = lines
        .next()
        .expect("a NAME header")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    lines
        .take_while(|l| !l.starts_with("AWAIT:"))
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split_whitespace().map(str::to_string))
                .collect()
        })
        .collect()
}

fn cell<'a>(row: &'a [(String, String)], column: &str) -> &'a str {
    &row.iter()
        .find(|(c, _)| c == column)
        .unwrap_or_else(|| panic!("no column {column} in {row:?}"))
        .1
}

#[test]
fn top_shows_every_path_moving_io() {
    let Some(lab) = Lab::start("", "", &["--policy", "queue-depth"]) else {
        return;
    };
    let socket = lab.rpc.clone();
    let (tx, rx) = mpsc::channel();
    // top starts 0.5 s into a 6 s load: its two frames (one second each)
    // fall inside it, with room for a slow start on a busy machine.
    let report = lab.load_with(
        Duration::from_secs(6),
        Duration::from_millis(500),
        move |_rpc| {
            let start = Instant::now();
            let out = Command::new(ours_binary())
                .args(["top", "--count", "2", "--rpc-socket"])
                .arg(&socket)
                .stdin(Stdio::null())
                .output()
                .expect("run vhost-mpath top");
            tx.send((out, start.elapsed())).unwrap();
        },
    );
    assert_clean(&report);
    let (out, took) = rx.recv().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "top failed: {:?}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("top --count 2 took {took:.1?}:\n{stdout}");
    // Two rounds one second apart, the first after one interval.
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_millis(5500),
        "two 1 s rounds took {took:?}"
    );
    assert!(
        !stdout.contains('\x1b'),
        "escape codes into a pipe: {stdout:?}"
    );
    let snapshots: Vec<&str> = stdout
        .split("vhost-mpath top ")
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(snapshots.len(), 2, "{stdout}");
    for snap in snapshots {
        assert!(snap.contains("policy queue-depth"), "{snap}");
        let rows = rows(snap);
        let names: Vec<&str> = rows.iter().map(|r| cell(r, "NAME")).collect();
        assert_eq!(names, ["a", "b"], "{snap}");
        for r in &rows {
            assert_eq!(cell(r, "STATE"), "usable", "{snap}");
            assert_eq!(cell(r, "ANA"), "optimized", "{snap}");
            let iops: f64 = cell(r, "IOPS").parse().unwrap();
            let mib: f64 = cell(r, "MiB/s").parse().unwrap();
            // The load is 64 KiB writes and reads: bytes follow the I/Os.
            assert!(
                iops > 0.0 && mib > 0.0,
                "path {} idle under load: {snap}",
                cell(r, "NAME")
            );
            let await_us: f64 = cell(r, "AWAIT-us").parse().unwrap();
            assert!(await_us > 0.0, "{snap}");
            assert_eq!(cell(r, "ERR(P/R/M)"), "0/0/0", "{snap}");
        }
    }
}
