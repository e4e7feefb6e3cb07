//! Issue 11: `auto` against every other policy on a seeded sweep of
//! randomized scenarios (`mpath-sim sweep`).
//!
//! The target of the issue is at least 0.95 of the best policy's MiB/s in
//! at least 98% of the scenarios and never below 0.85. This test asserts
//! that target on its seed, which was not used to tune `auto`: measured
//! 100.0% within 0.95, minimum 0.962 after issue 11's fifteenth round
//! (100.0% and 0.958 after the fourteenth, 100.0% and 0.951 after the
//! thirteenth, 99.0% and 0.941 after the eleventh, 99.0% and 0.904 after
//! the fifth to tenth, 98.5% and 0.860 after the fourth; before the fourth
//! 96.0% and 0.886, which fails it). The
//! fresh-seed acceptance runs of 1000 scenarios are in docs/POLICIES.md.

use mpath::sim;
use mpath::PolicyName;

const SEED: u64 = 11;
const COUNT: u64 = 200;
/// The target (see above).
const SHARE_95: f64 = 0.98;
const MIN: f64 = 0.85;

#[test]
fn auto_is_near_the_best_policy_on_a_randomized_sweep() {
    let cases = sim::sweep(SEED, COUNT).unwrap();
    let report = sim::report(&cases, 10);
    let auto = sim::distribution(&cases, PolicyName::Auto);
    assert!(auto.share_95 >= SHARE_95, "{report}");
    assert!(auto.min >= MIN, "{report}");
    // ... and it is ahead of every other policy
    for &p in &PolicyName::ALL {
        let d = sim::distribution(&cases, p);
        assert!(auto.share_95 >= d.share_95, "{p}\n{report}");
    }
}

#[test]
fn the_sweep_is_reproducible_and_varied() {
    let a = sim::generate(5, 3);
    let b = sim::generate(5, 3);
    assert_eq!(a.description, b.description);
    assert_eq!(a.workloads[0].label(), b.workloads[0].label());
    let scenarios: Vec<_> = (0..200).map(|i| sim::generate(5, i)).collect();
    let paths = |n| scenarios.iter().filter(|s| s.paths.len() == n).count();
    assert!(paths(2) > 0 && paths(3) > 0 && paths(4) > 0);
    assert!(scenarios.iter().any(|s| !s.changes.is_empty()));
    assert!(scenarios
        .iter()
        .any(|s| s.paths.iter().any(|p| p.delay_us > 0.0)));
    let depths: Vec<u32> = scenarios
        .iter()
        .map(|s| s.workloads[0].iodepth * s.workloads[0].jobs)
        .collect();
    assert!(depths.iter().any(|&d| d <= 2) && depths.iter().any(|&d| d >= 64));
    assert!(scenarios.iter().any(|s| s.workloads[0].read_pct == 0));
    assert!(scenarios.iter().any(|s| !s.workloads[0].bssplit.is_empty()));
}
