//! Flushes through the real daemon (issue 8, defect 2): a flush completes
//! with OK only after every path that completed a write before the flush
//! was received has been flushed successfully since that write. Two file
//! paths to one image, lab shaping of flushes only (`flush-delay-us`,
//! `flush_fail`), flushes counted on the device in `get_stats` (`other`).

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;
use vhost_mpath_tests::rpc::path_stats;
use vhost_mpath_tests::Op;

/// Flushes (and other non-read/write commands) that reached a device and
/// succeeded, over both paths.
fn device_flushes(lab: &Lab) -> u64 {
    let stats = lab.stats();
    ["a", "b"]
        .iter()
        .map(|p| path_stats(&stats, p)["other"].as_u64().unwrap())
        .sum()
}

#[test]
fn a_flush_received_while_another_runs_waits_for_a_flush_of_its_own() {
    const DELAY: Duration = Duration::from_millis(1000);
    let opts = format!(",flush-delay-us={}", DELAY.as_micros());
    let Some(lab) = Lab::start(&opts, &opts, &[]) else {
        return;
    };
    let mut client = lab.client();
    // Settle what every path owes from before start.
    client.write(0, &[1u8; 4096]).unwrap();
    client.flush().unwrap();
    client.write(4096, &[2u8; 4096]).unwrap();
    // A and B are popped together: B is received while A is in flight, and
    // A is not known to have made the write durable until it completes.
    let r = client.batch_timed(&[(0, Op::Flush), (0, Op::Flush)]);
    eprintln!("{r:?}");
    for (i, (res, at)) in r.iter().enumerate() {
        assert!(res.is_ok(), "flush {i}: {res:?}");
        assert!(
            *at >= DELAY * 8 / 10,
            "flush {i} completed after {at:?}, before any flush covering the write could ({DELAY:?})"
        );
    }
    // Nothing written since: the next flush has nothing to wait for.
    let start = Instant::now();
    client.flush().unwrap();
    assert!(
        start.elapsed() < DELAY / 2,
        "a flush with nothing to flush took {:?}",
        start.elapsed()
    );
}

#[test]
fn a_failed_flush_leaves_the_path_owing_a_flush() {
    let Some(lab) = Lab::start("", "", &["--no-path-timeout", "2s"]) else {
        return;
    };
    let mut client = lab.client();
    client.write(0, &[1u8; 4096]).unwrap();
    client.flush().unwrap();
    client.write(4096, &[2u8; 4096]).unwrap();
    let mut rpc = lab.rpc();
    for p in ["a", "b"] {
        rpc.ok("inject_fault", json!({"name": p, "flush_fail": "EIO"}));
    }
    assert_device_error(client.flush(), "a flush that failed on every path");
    for p in ["a", "b"] {
        rpc.ok("inject_fault", json!({"name": p, "clear": true}));
    }
    wait_for("both paths usable", Duration::from_secs(10), || {
        let s = lab.stats();
        ["a", "b"]
            .iter()
            .all(|p| path_stats(&s, p)["state"] == "usable")
    });
    let before = device_flushes(&lab);
    client.flush().unwrap();
    assert!(
        device_flushes(&lab) > before,
        "the flush after a failed one completed without reaching a device"
    );
    // And once it succeeded, nothing is owed any more.
    let before = device_flushes(&lab);
    client.flush().unwrap();
    assert_eq!(device_flushes(&lab), before, "flushed twice for one write");
}
