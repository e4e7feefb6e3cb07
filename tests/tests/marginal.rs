//! Marginal paths through the real daemon (issue 11, part 4): path `b`
//! fails a tenth of its I/O (`fail-rate=0.1`). The guest never sees an
//! error; `b` is marked marginal and carries almost nothing while `a`
//! works, everything when `a` is taken offline, and returns to its share
//! once the fault is cleared.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use vhost_mpath_tests::rpc::path_stats;

const EXTRA: &[&str] = &[
    "--marginal-err-rate",
    "0.03",
    "--marginal-sample-time",
    "500ms",
    "--marginal-recheck-gap",
    "2s",
];

/// Successful I/O of path `p` so far.
fn done(stats: &Value, p: &str) -> u64 {
    let s = path_stats(stats, p);
    s["reads"].as_u64().unwrap() + s["writes"].as_u64().unwrap()
}

fn marginal(stats: &Value, p: &str) -> Value {
    path_stats(stats, p)["marginal"].clone()
}

/// Runs the verified load for `secs`; returns `b`'s share of the I/O done
/// and the I/O done on each path.
fn share_of_b(lab: &Lab, secs: u64) -> (f64, u64, u64) {
    let before = lab.stats();
    let r = lab.load_with(Duration::from_secs(secs), Duration::ZERO, |_| {});
    assert_clean(&r);
    let after = lab.stats();
    let a = done(&after, "a") - done(&before, "a");
    let b = done(&after, "b") - done(&before, "b");
    (b as f64 / (a + b).max(1) as f64, a, b)
}

#[test]
fn a_flaky_path_is_marginal_used_last_and_returns() {
    let Some(lab) = Lab::start("", ",fail-rate=0.1", EXTRA) else {
        return;
    };
    let mut rpc = lab.rpc();
    let paths = rpc.ok("get_paths", json!({}));
    assert_eq!(paths["paths"][1]["shaping"]["fail_rate"], 0.1, "{paths}");
    assert_eq!(paths["paths"][1]["marginal_config"]["err_rate"], 0.03);

    // Both paths take I/O until b's first windows are judged.
    let (_, _, b_first) = share_of_b(&lab, 2);
    let s = lab.stats();
    eprintln!("first load: b did {b_first}; b {}", path_stats(&s, "b"));
    assert_eq!(marginal(&s, "b")["marginal"], true, "{s}");
    assert_eq!(marginal(&s, "b")["marked"], 1, "{s}");
    assert_eq!(
        path_stats(&s, "b")["state"],
        "usable",
        "EIOs did not fail b: {s}"
    );
    assert_eq!(marginal(&s, "a")["marginal"], false, "{s}");
    let paths = rpc.ok("get_paths", json!({}));
    assert_eq!(paths["paths"][1]["marginal"], true, "{paths}");

    // A healthy path is usable: b gets only the recheck trickle.
    let (share, a, b) = share_of_b(&lab, 3);
    eprintln!("marginal b beside a: a {a}, b {b}, share {share:.4}");
    assert!(a > 100, "the load ran on a: {a}");
    assert!(
        share < 0.05,
        "marginal b carried {share:.3} of the I/O; b now: {}",
        path_stats(&lab.stats(), "b")
    );

    // b is the last usable path: it carries everything, still no error.
    rpc.ok(
        "set_path",
        json!({"name": "a", "state": "offline", "force": true}),
    );
    let (share, a, b) = share_of_b(&lab, 3);
    eprintln!("b alone: a {a}, b {b}");
    assert_eq!(a, 0, "a is offline");
    assert!(b > 100 && share == 1.0, "b carried it all: {b}");
    rpc.ok("set_path", json!({"name": "a", "state": "online"}));

    // The fault is cleared: a clean recheck window returns b.
    let r = rpc.ok("inject_fault", json!({"name": "b", "fail_rate": 0}));
    assert_eq!(r["fail_rate"], 0.0, "{r}");
    let mut returned = false;
    for _ in 0..20 {
        share_of_b(&lab, 1);
        if marginal(&lab.stats(), "b")["marginal"] == false {
            returned = true;
            break;
        }
    }
    let s = lab.stats();
    assert!(returned, "b did not return: {s}");
    assert_eq!(marginal(&s, "b")["returned"], 1, "{s}");
    let (share, a, b) = share_of_b(&lab, 2);
    eprintln!("b returned: a {a}, b {b}, share {share:.3}");
    assert!(share > 0.2, "b takes its share again: {share:.3}");
    assert_eq!(s["device"]["errors_to_guest"], 0, "{s}");
    assert_eq!(lab.stats()["device"]["errors_to_guest"], 0);
}

#[test]
fn without_marginal_detection_nothing_is_marginal() {
    let Some(lab) = Lab::start("", ",fail-rate=0.1", &[]) else {
        return;
    };
    let (_, _, _) = share_of_b(&lab, 2);
    let s = lab.stats();
    assert_eq!(marginal(&s, "b")["marginal"], false, "{s}");
    assert_eq!(marginal(&s, "b")["marked"], 0, "{s}");
    let paths = lab.rpc().ok("get_paths", json!({}));
    assert_eq!(paths["paths"][1]["marginal_config"]["err_rate"], 0.0);
}
