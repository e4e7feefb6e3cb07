//! A request that fails on every path (issue 8, defect 5), through the real
//! daemon: two file paths to one image, a sector range that fails on both
//! (`fail-lba`, as a bad block under a shared image does). The request must
//! end within its deadline (the no-path timeout from its first submission)
//! after a bounded number of tries, an EIO every path returns for it is the
//! request's error and does not fail the paths again and again, and I/O
//! elsewhere keeps working without an error.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;
use vhost_mpath_tests::rpc::path_stats;
use vhost_mpath_tests::Op;

/// Sectors 65536-65543: the 4 KiB at 32 MiB, outside the verify load's
/// first 4 MiB.
const BAD: u64 = 32 << 20;
const BAD_SECTORS: &str = "65536-65543";

fn failures(stats: &Value) -> u64 {
    ["a", "b"]
        .iter()
        .map(|p| path_stats(stats, p)["failures"].as_u64().unwrap())
        .sum()
}

fn both_usable(lab: &Lab) -> bool {
    let s = lab.stats();
    ["a", "b"]
        .iter()
        .all(|p| path_stats(&s, p)["state"] == "usable")
}

#[test]
fn a_sector_failing_on_every_path_fails_the_request_not_the_paths() {
    let opts = format!(",fail-lba={BAD_SECTORS}");
    let Some(lab) = Lab::start(&opts, &opts, &["--no-path-timeout", "5s"]) else {
        return;
    };
    let mut client = lab.client();
    let start = Instant::now();
    assert_device_error(client.read(BAD, 4096), "a read of the bad sectors");
    let took = start.elapsed();
    eprintln!("the bad read failed after {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "the bad read took {took:?}, past its 5 s deadline"
    );
    let stats = lab.stats();
    assert!(
        failures(&stats) <= 1,
        "more than the first path failed for one bad block: {stats}"
    );
    // Again, and a write there: each fails at once, and no path fails again.
    for i in 0..5 {
        assert_device_error(client.read(BAD + 512, 512), &format!("bad read {i}"));
    }
    assert_device_error(
        client.write(BAD, &[7u8; 4096]),
        "a write to the bad sectors",
    );
    let stats = lab.stats();
    assert!(failures(&stats) <= 1, "paths failed again: {stats}");
    assert_eq!(stats["device"]["errors_to_guest"], 7, "{stats}");
    // The first path's failure was probed away; I/O elsewhere is clean.
    wait_for("both paths usable", Duration::from_secs(10), || {
        both_usable(&lab)
    });
    drop(client); // one frontend at a time: the load connects its own
    let r = lab.load_with(Duration::from_secs(2), Duration::ZERO, |_| {});
    assert_clean(&r);
    let stats = lab.stats();
    assert!(failures(&stats) <= 1, "{stats}");
    assert_eq!(stats["device"]["errors_to_guest"], 7, "{stats}");
    assert!(both_usable(&lab), "{stats}");
}

#[test]
fn a_request_failing_over_again_and_again_ends_within_its_deadline() {
    // ENODEV on every try: each is a path error, so the paths fail, probes
    // (sector 0) bring them back, and the request goes round again. Rounds
    // and the deadline from its first submission end it. (Without them,
    // every failover restarted the no-path clock: only the growing
    // quarantine of the flapping paths ended it, after 14 s here.)
    let opts = format!(",fail-lba={BAD_SECTORS}:ENODEV");
    let Some(lab) = Lab::start(&opts, &opts, &["--no-path-timeout", "8s"]) else {
        return;
    };
    let mut client = lab.client();
    client.write(0, &[3u8; 4096]).unwrap();
    let start = Instant::now();
    let r = client.batch(&[(
        0,
        Op::Read {
            offset: BAD,
            len: 4096,
        },
    )]);
    let took = start.elapsed();
    eprintln!("the request failing over ended after {took:?}: {:?}", r[0]);
    assert!(r[0].is_err(), "read of a sector failing on every path");
    assert!(
        took < Duration::from_secs(8) + Duration::from_millis(1500),
        "the request ended after {took:?}, past its 8 s deadline"
    );
    // The daemon still serves, once the flapping quarantine lets the paths
    // back: they failed three times within a minute, so the last hold-down
    // is 10 s (5 s, 10 s, ...), then one good probe.
    wait_for("both paths usable", Duration::from_secs(20), || {
        both_usable(&lab)
    });
    assert_eq!(client.read(0, 4096).unwrap(), vec![3u8; 4096]);
}

#[test]
fn eio_on_every_path_for_every_request_still_fails_the_paths() {
    // A dead disk: every I/O fails with EIO. The first request in flight
    // gets its error at once (every path failed it); the next one fails the
    // path it reaches, as the other path did not fail *it*, and waits for a
    // path up to the no-path timeout.
    let Some(lab) = Lab::start("", "", &["--no-path-timeout", "2s"]) else {
        return;
    };
    let mut client = lab.client();
    client.write(0, &[7u8; 4096]).unwrap();
    let mut rpc = lab.rpc();
    for p in ["a", "b"] {
        rpc.ok("inject_fault", json!({"name": p, "fail": "EIO"}));
    }
    let start = Instant::now();
    assert_device_error(client.write(8192, &[9u8; 4096]), "first write");
    assert!(
        start.elapsed() < Duration::from_millis(1000),
        "an EIO on every path took {:?}",
        start.elapsed()
    );
    let start = Instant::now();
    assert_device_error(client.write(16384, &[9u8; 4096]), "second write");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(1000) && waited <= Duration::from_millis(3500),
        "failed after {waited:?}, expected the 2 s no-path timeout"
    );
    let stats = lab.stats();
    for p in ["a", "b"] {
        assert_eq!(path_stats(&stats, p)["state"], "failed", "{stats}");
    }
    assert!(
        stats["device"]["no_path_timeouts"].as_u64().unwrap() >= 1,
        "{stats}"
    );
    rpc.ok("inject_fault", json!({"name": "a", "clear": true}));
    wait_for("path a to recover", Duration::from_secs(10), || {
        path_stats(&lab.stats(), "a")["state"] == "usable"
    });
    assert_eq!(client.read(0, 4096).unwrap(), vec![7u8; 4096]);
}
