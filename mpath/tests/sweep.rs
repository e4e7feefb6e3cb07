//! Issue 11: `auto` against every other policy on a seeded sweep of
//! randomized scenarios (`mpath-sim sweep`).
//!
//! The target of the issue is at least 0.95 of the best policy's MiB/s in
//! at least 98% of the scenarios and never below 0.85. This test asserts
//! that target on its seed: measured 100.0% within 0.95, minimum 0.963
//! with rule 4's level and service-time rotating ties (57d8611); 99.5%
//! and 0.916 without the trial's *moves* and the *offer* (0.905 without the moves
//! only; 100.0% and 0.953 with both, with the *rest* rule); 99.5% and 0.949 after issue 45's rounds on `auto`
//! (7a8777b; they used it as a development seed);
//! 100.0% within 0.95, minimum 0.962 after issue 11's fifteenth round
//! (100.0% and 0.958 after the fourteenth, 100.0% and 0.951 after the
//! thirteenth, 99.0% and 0.941 after the eleventh, 99.0% and 0.904 after
//! the fifth to tenth, 98.5% and 0.860 after the fourth; before the fourth
//! 96.0% and 0.886, which fails it). The
//! fresh-seed acceptance runs of 1000 scenarios are in docs/POLICIES.md.

use mpath::sim::{self, Generator};
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

/// Issue 45's sweep of path models that are not pipes (a device with
/// channels, a token bucket, stalls, a TCP link, a heavy tail, alone and
/// mixed; `mpath-sim sweep --models all`), on a development seed. Its
/// fresh-seed runs and each policy's share are in docs/POLICIES.md.
const MODELS_SEED: u64 = 45;
/// 200 scenarios take about 9 s in the debug build (opt-level 2 for mpath).
const MODELS_COUNT: u64 = 200;
/// The daemon's default policy (backend's `DEFAULT_POLICY`).
const DEFAULT: PolicyName = PolicyName::Auto;
/// What the default holds on this seed, with a margin: `auto` measured
/// 96.5% within 0.95 and a minimum of 0.885 here with *Fell* on two epochs
/// (a7fc3bb); 97.0% and 0.885 with the *refill* rule
/// (96.5% and 0.903 at 57d8611, before it), and without the trial's
/// *moves* and the *offer* (0.829 without the moves only, 0.853 with
/// both, with the *rest* rule; 97.0% and 0.826 at 7a8777b; 86.5% and 0.315 before issue 45's rounds
/// on `auto`).
const MODELS_SHARE_95: f64 = 0.95;
const MODELS_MIN: f64 = 0.75;

/// What the model sweep holds the default policy to: every scenario runs
/// under every policy (no model starves a run), and the default is ahead of
/// every other policy both in the share of scenarios within 0.95 of the
/// best and in its mean ratio to the best, and holds `MODELS_SHARE_95` and
/// `MODELS_MIN`. (The 98% / 0.85 target is not met on this sweep's
/// fresh seeds; the measured shares are in docs/POLICIES.md.)
#[test]
fn the_default_policy_leads_on_the_path_model_sweep() {
    let cases = sim::sweep_with(Generator::Models, MODELS_SEED, MODELS_COUNT).unwrap();
    let report = sim::report(&cases, 10) + &sim::report_every_policy(&cases, 3);
    for c in &cases {
        assert!(
            c.mib_s.iter().all(|&m| m > 0.0),
            "{}: {:?}\n{report}",
            c.scenario.name,
            c.mib_s
        );
    }
    let default = sim::distribution(&cases, DEFAULT);
    assert!(default.share_95 >= MODELS_SHARE_95, "{report}");
    assert!(default.min >= MODELS_MIN, "{report}");
    for &p in &PolicyName::ALL {
        let d = sim::distribution(&cases, p);
        assert!(default.share_95 >= d.share_95, "{p}\n{report}");
        assert!(default.mean >= d.mean, "{p}\n{report}");
    }
}

#[test]
fn the_model_sweep_draws_every_model() {
    let scenarios: Vec<_> = (0..200).map(|i| sim::generate_models(5, i)).collect();
    let any = |f: &dyn Fn(&sim::PathModel) -> bool| scenarios.iter().any(|s| s.paths.iter().any(f));
    assert!(any(&|p| p.channels > 0));
    assert!(any(&|p| p.has_bucket()));
    assert!(any(&|p| p.stall_ms > 0.0));
    assert!(any(&|p| p.has_tcp()));
    assert!(any(&|p| p.has_tail()));
    assert!(any(&|p| p.models().is_empty()));
    // ... and none of the pipe sweep's scenarios
    assert_ne!(
        sim::generate_models(5, 3).description,
        sim::generate(5, 3).description
    );
}
