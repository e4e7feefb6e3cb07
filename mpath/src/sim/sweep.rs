//! Randomized scenario sweep: many generated scenarios, every policy on
//! each, and per policy the distribution of its throughput relative to the
//! best policy of the same scenario.
//!
//! Scenarios are drawn over the ranges of real paths:
//! - local PCIe (dual-port SSDs, several controllers): 1.5-7 GiB/s,
//!   20-150 us, jitter 5-30%, 64-1024 slots;
//! - NVMe/TCP and other fabrics: 100 MiB/s (1 GbE) to 2.9 GiB/s (25 GbE),
//!   80-2000 us, jitter 10-40%, 32-128 slots.
//!
//! Paths of one scenario share a kind and differ by up to +-30%; half of
//! the scenarios make one path much slower (5 to 100 times the latency, as
//! a longer or congested link, or a third to a twentieth of the bandwidth),
//! and a third change one path's speed in the first half of the measured
//! part (such runs last at least [`CHANGE_MIN_MS`]). Workloads: one block size
//! from 4k to 1M or a mix of two or three, total queue depth 1-128 (log
//! uniform) over 1-4 jobs, reads, writes or a mix; link transfer times
//! fixed or exponential. Run lengths are sized to about
//! [`TARGET_IOS`] completions, within 150 ms and 2 s of virtual time; the
//! first quarter is not measured (warm-up).

use super::{run, PathChange, PathModel, PolicyTunables, Rng, Scenario, Transfer, Workload};
use crate::policy::PolicyName;

/// Measured completions aimed at per policy run.
pub const TARGET_IOS: f64 = 12_000.0;

/// Virtual time of a scenario whose path changes speed.
pub const CHANGE_MIN_MS: u64 = 800;

/// One generated scenario and every policy's MiB/s on it.
#[derive(Clone, Debug)]
pub struct SweepCase {
    pub scenario: Scenario,
    /// MiB/s per policy, in [`PolicyName::ALL`] order.
    pub mib_s: Vec<f64>,
}

impl SweepCase {
    pub fn best(&self) -> f64 {
        self.mib_s.iter().copied().fold(0.0, f64::max)
    }

    /// `policy`'s MiB/s over the best policy's.
    pub fn ratio(&self, policy: PolicyName) -> f64 {
        let i = PolicyName::ALL.iter().position(|&p| p == policy).unwrap();
        self.mib_s[i] / self.best().max(1e-9)
    }
}

/// The distribution of one policy's ratios.
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    pub policy: PolicyName,
    pub min: f64,
    pub p1: f64,
    pub p5: f64,
    pub median: f64,
    /// Share of scenarios at >= 0.95 of the best.
    pub share_95: f64,
    pub mean: f64,
}

impl Rng {
    pub(super) fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Log-uniform in [lo, hi].
    pub(super) fn log_range(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + (hi.ln() - lo.ln()) * self.unit()).exp()
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub(super) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// Scenario `index` of the sweep with `seed`: the same pair always gives
/// the same scenario.
pub fn generate(seed: u64, index: u64) -> Scenario {
    let mut rng = Rng(seed ^ index.wrapping_mul(0xd1b5_4a32_d192_ed03));
    rng.next();
    let pcie = rng.chance(0.4);
    let (bw, lat) = if pcie {
        (rng.log_range(1500.0, 7000.0), rng.log_range(20.0, 150.0))
    } else {
        (rng.log_range(100.0, 2900.0), rng.log_range(80.0, 2000.0))
    };
    let jitter = if pcie {
        rng.range(0.05, 0.3)
    } else {
        rng.range(0.1, 0.4)
    };
    let slots = if pcie {
        [64, 128, 256, 1024][rng.below(4) as usize]
    } else {
        [32, 64, 128][rng.below(3) as usize]
    };
    let transfer = if rng.chance(0.3) {
        Transfer::Exponential
    } else {
        Transfer::Fixed
    };
    let count = 2 + rng.below(3) as usize;
    let mut paths: Vec<PathModel> = (0..count)
        .map(|i| {
            let bandwidth_mib_s = bw * rng.range(0.7, 1.3);
            let base_latency_us = lat * rng.range(0.7, 1.3);
            PathModel {
                slots,
                jitter,
                transfer,
                preferred: i == 0,
                ..PathModel::pipe(&format!("p{i}"), bandwidth_mib_s, base_latency_us)
            }
        })
        .collect();
    let mut what = vec![format!(
        "{count} {} paths ~{bw:.0} MiB/s ~{lat:.0} us",
        if pcie { "PCIe" } else { "NVMe/TCP" }
    )];
    slow_one(&mut rng, &mut paths, &mut what);
    let workload = workload(&mut rng);
    // Sized to about TARGET_IOS completions at the best rate possible.
    let mean_bytes = workload.mean_bytes();
    let depth = f64::from(workload.iodepth * workload.jobs);
    let link: f64 = paths.iter().map(|p| p.bandwidth_mib_s).sum::<f64>() * 1024.0 * 1024.0;
    let fastest = paths
        .iter()
        .map(|p| {
            (p.base_latency_us + p.delay_us) * 1e-6 + mean_bytes / (p.bandwidth_mib_s * 1048576.0)
        })
        .fold(f64::MAX, f64::min);
    let iops = (link / mean_bytes).min(depth / fastest);
    let duration_ms = ((TARGET_IOS / iops) * 1000.0 / 0.75).clamp(150.0, 2000.0) as u64;
    assemble(
        &mut rng,
        format!("sweep-{seed}-{index}"),
        duration_ms,
        paths,
        workload,
        what,
    )
}

/// The scenario of a generator's draws: in a third of them one path changes
/// speed (and the run lasts at least [`CHANGE_MIN_MS`], long enough to see
/// the steady state after the change too); the first quarter is not measured.
pub(super) fn assemble(
    rng: &mut Rng,
    name: String,
    duration_ms: u64,
    paths: Vec<PathModel>,
    workload: Workload,
    mut what: Vec<String>,
) -> Scenario {
    let change = rng.chance(0.33);
    let duration_ms = if change {
        duration_ms.max(CHANGE_MIN_MS)
    } else {
        duration_ms
    };
    let ramp_ms = duration_ms / 4;
    let mut changes = vec![];
    if change {
        changes.push(change_one(rng, &paths, ramp_ms, duration_ms, &mut what));
    }
    Scenario {
        name,
        description: what.join(", "),
        seed: rng.next() | 1,
        duration_ms,
        ramp_ms,
        policies: vec![],
        policy: PolicyTunables::default(),
        paths,
        workloads: vec![workload],
        changes,
    }
}

/// Half the time, one path much slower, in latency or in bandwidth.
pub(super) fn slow_one(rng: &mut Rng, paths: &mut [PathModel], what: &mut Vec<String>) {
    let slow = rng.below(paths.len() as u64) as usize;
    if rng.chance(0.5) {
        let p = &mut paths[slow];
        if rng.chance(0.5) {
            p.delay_us = p.base_latency_us * rng.log_range(5.0, 100.0);
            what.push(format!("{} +{:.0} us", p.name, p.delay_us));
        } else {
            p.bandwidth_mib_s /= rng.log_range(3.0, 20.0);
            what.push(format!("{} at {:.0} MiB/s", p.name, p.bandwidth_mib_s));
        }
    }
}

/// A path changing speed in the first half of the measured part.
pub(super) fn change_one(
    rng: &mut Rng,
    paths: &[PathModel],
    ramp_ms: u64,
    duration_ms: u64,
    what: &mut Vec<String>,
) -> PathChange {
    let i = rng.below(paths.len() as u64) as usize;
    let at_ms = ramp_ms + ((duration_ms - ramp_ms) as f64 * rng.range(0.2, 0.5)) as u64;
    let mut c = PathChange {
        at_ms,
        path: paths[i].name.clone(),
        bandwidth_mib_s: None,
        base_latency_us: None,
        delay_us: None,
        state: None,
    };
    let p = &paths[i];
    match rng.below(3) {
        0 if p.delay_us > 0.0 => c.delay_us = Some(0.0),
        0 | 1 => c.delay_us = Some(p.base_latency_us * rng.log_range(5.0, 100.0)),
        _ => c.bandwidth_mib_s = Some(p.bandwidth_mib_s / rng.log_range(2.0, 10.0)),
    }
    what.push(format!(
        "at {at_ms} ms {}{}",
        c.path,
        match (c.delay_us, c.bandwidth_mib_s) {
            (Some(d), _) => format!(" delay {d:.0} us"),
            (_, Some(b)) => format!(" to {b:.0} MiB/s"),
            _ => String::new(),
        }
    ));
    c
}

const SIZES: [u64; 9] = [
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
];

pub(super) fn workload(rng: &mut Rng) -> Workload {
    let (bs, bssplit) = if rng.chance(0.65) {
        (Some(SIZES[rng.below(9) as usize]), vec![])
    } else {
        let n = 2 + rng.below(2) as usize;
        let mut split: Vec<(u64, u32)> = vec![];
        while split.len() < n {
            let b = SIZES[rng.below(9) as usize];
            if !split.iter().any(|&(s, _)| s == b) {
                split.push((b, 10 + rng.below(80) as u32));
            }
        }
        split.sort_unstable();
        (None, split)
    };
    let depth = rng.log_range(1.0, 128.999).floor() as u32;
    let jobs = match depth {
        0..=3 => 1,
        _ => [1, 2, 4][rng.below(3) as usize],
    };
    let read_pct = [100, 0, 70, 50][rng.below(4) as usize];
    Workload {
        name: String::new(),
        bs,
        bssplit,
        read_pct,
        iodepth: (depth / jobs).max(1),
        jobs,
        numa_node: None,
    }
}

impl Workload {
    pub(super) fn mean_bytes(&self) -> f64 {
        match self.bs {
            Some(b) => b as f64,
            None => {
                let total: u32 = self.bssplit.iter().map(|(_, p)| p).sum();
                self.bssplit
                    .iter()
                    .map(|&(b, p)| b as f64 * f64::from(p))
                    .sum::<f64>()
                    / f64::from(total.max(1))
            }
        }
    }
}

/// Which scenarios a sweep draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generator {
    /// Every path a pipe ([`generate`]; issue 11's sweep, kept so that its
    /// history stays reproducible).
    Pipes,
    /// Paths drawn from every model of [`super::models`], alone and mixed
    /// on one disk ([`super::generate_models`], issue 45).
    Models,
}

impl Generator {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pipes" => Some(Self::Pipes),
            "all" | "models" => Some(Self::Models),
            _ => None,
        }
    }

    /// Scenario `index` of the sweep with `seed`.
    pub fn generate(self, seed: u64, index: u64) -> Scenario {
        match self {
            Self::Pipes => generate(seed, index),
            Self::Models => super::generate_models(seed, index),
        }
    }
}

/// Runs scenarios `0..count` of `seed` under every policy, on every core
/// (each scenario is independent; the result does not depend on it).
pub fn sweep(seed: u64, count: u64) -> Result<Vec<SweepCase>, String> {
    sweep_with(Generator::Pipes, seed, count)
}

/// [`sweep`] over the scenarios of `generator`.
pub fn sweep_with(generator: Generator, seed: u64, count: u64) -> Result<Vec<SweepCase>, String> {
    sweep_runs(generator, seed, count, Runs::default())
}

/// How each scenario of a sweep is run: the check that a result is the
/// policy's and not its draw or its warm-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Runs {
    /// Independent draws of the run's randomness (jitter, tails, losses,
    /// request sizes) per policy; each policy keeps its median. The first
    /// draw is the sweep's own, so one draw is the plain sweep.
    pub draws: u64,
    /// The scenario this many times longer (warm-up and speed changes
    /// scaled alike): learning and trials weigh less in a longer run.
    pub longer: u64,
}

impl Default for Runs {
    fn default() -> Self {
        Self {
            draws: 1,
            longer: 1,
        }
    }
}

/// [`sweep_with`], each scenario run as `runs` says.
pub fn sweep_runs(
    generator: Generator,
    seed: u64,
    count: u64,
    runs: Runs,
) -> Result<Vec<SweepCase>, String> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mut cases: Vec<(u64, SweepCase)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (t..count)
                        .step_by(threads as usize)
                        .map(|i| case_runs(generator, seed, i, runs).map(|c| (i, c)))
                        .collect::<Result<Vec<_>, String>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err("a scenario panicked".into()))
            })
            .collect::<Result<Vec<_>, String>>()
            .map(|v| v.into_iter().flatten().collect())
    })?;
    cases.sort_by_key(|(i, _)| *i);
    Ok(cases.into_iter().map(|(_, c)| c).collect())
}

/// Generates and runs one scenario.
pub fn case(seed: u64, index: u64) -> Result<SweepCase, String> {
    case_with(Generator::Pipes, seed, index)
}

/// Generates and runs one scenario of `generator`.
pub fn case_with(generator: Generator, seed: u64, index: u64) -> Result<SweepCase, String> {
    case_runs(generator, seed, index, Runs::default())
}

/// [`case_with`], run as `runs` says.
pub fn case_runs(
    generator: Generator,
    seed: u64,
    index: u64,
    runs: Runs,
) -> Result<SweepCase, String> {
    let scenario = stretched(generator.generate(seed, index), runs.longer);
    let mib_s = PolicyName::ALL
        .iter()
        .map(|&p| {
            let mut draws = (0..runs.draws.max(1))
                .map(|d| {
                    let s = redrawn(scenario.clone(), d);
                    run(&s, &s.workloads[0], p).map(|r| r.mib_s)
                })
                .collect::<Result<Vec<f64>, String>>()?;
            draws.sort_by(f64::total_cmp);
            Ok(draws[draws.len() / 2])
        })
        .collect::<Result<_, String>>()?;
    Ok(SweepCase { scenario, mib_s })
}

/// `s` with its `d`-th independent draw of the run's randomness; draw 0 is
/// its own seed.
fn redrawn(mut s: Scenario, d: u64) -> Scenario {
    s.seed ^= d.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    s
}

/// `s` made `k` times longer: its warm-up and speed changes come at the
/// same share of the run.
fn stretched(mut s: Scenario, k: u64) -> Scenario {
    let k = k.max(1);
    s.duration_ms *= k;
    s.ramp_ms *= k;
    for c in &mut s.changes {
        c.at_ms *= k;
    }
    s
}

/// The ratio distribution of `policy` over `cases`.
pub fn distribution(cases: &[SweepCase], policy: PolicyName) -> Distribution {
    let mut r: Vec<f64> = cases.iter().map(|c| c.ratio(policy)).collect();
    r.sort_by(f64::total_cmp);
    let q = |f: f64| {
        if r.is_empty() {
            return 0.0;
        }
        r[((r.len() - 1) as f64 * f).round() as usize]
    };
    Distribution {
        policy,
        min: q(0.0),
        p1: q(0.01),
        p5: q(0.05),
        median: q(0.5),
        share_95: r.iter().filter(|&&x| x >= 0.95).count() as f64 / r.len().max(1) as f64,
        mean: r.iter().sum::<f64>() / r.len().max(1) as f64,
    }
}

/// The table of every policy's distribution and `auto`'s worst scenarios.
pub fn report(cases: &[SweepCase], worst: usize) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} scenarios; per policy: its MiB/s / the best policy's MiB/s\n",
        cases.len()
    );
    let _ = writeln!(
        s,
        "{:<15} {:>6} {:>6} {:>6} {:>7} {:>9}",
        "policy", "min", "p1", "p5", "median", ">=0.95"
    );
    for &p in &PolicyName::ALL {
        let d = distribution(cases, p);
        let _ = writeln!(
            s,
            "{:<15} {:>6.3} {:>6.3} {:>6.3} {:>7.3} {:>8.1}%",
            p.as_str(),
            d.min,
            d.p1,
            d.p5,
            d.median,
            d.share_95 * 100.0
        );
    }
    let _ = writeln!(s, "\nauto's worst scenarios:");
    s += &worst_cases(cases, PolicyName::Auto, worst);
    s
}

/// Each policy's mean ratio and its `worst` scenarios, after [`report`].
pub fn report_every_policy(cases: &[SweepCase], worst: usize) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "{:<15} {:>7}", "policy", "mean");
    for &p in &PolicyName::ALL {
        let _ = writeln!(s, "{:<15} {:>7.3}", p.as_str(), distribution(cases, p).mean);
    }
    for &p in &PolicyName::ALL {
        let _ = writeln!(s, "\n{p}'s worst scenarios:");
        s += &worst_cases(cases, p, worst);
    }
    s
}

/// The `worst` scenarios of `policy`, one line each, worst first.
pub fn worst_cases(cases: &[SweepCase], policy: PolicyName, worst: usize) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let mut order: Vec<&SweepCase> = cases.iter().collect();
    order.sort_by(|a, b| a.ratio(policy).total_cmp(&b.ratio(policy)));
    for c in order.iter().take(worst) {
        let best = PolicyName::ALL
            .iter()
            .zip(&c.mib_s)
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(p, _)| p.as_str())
            .unwrap_or("-");
        let _ = writeln!(
            s,
            "{:.3}  {}: {}; {}; best {best} {:.1} MiB/s, {policy} {:.1}",
            c.ratio(policy),
            c.scenario.name,
            c.scenario.description,
            c.scenario.workloads[0].label(),
            c.best(),
            c.best() * c.ratio(policy),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_longer_run_scales_its_warm_up_and_speed_changes_alike() {
        let s = (0..20)
            .map(|i| Generator::Models.generate(7, i))
            .find(|s| !s.changes.is_empty())
            .expect("a third of the scenarios change a path's speed");
        let long = stretched(s.clone(), 3);
        assert_eq!(long.duration_ms, 3 * s.duration_ms);
        assert_eq!(long.ramp_ms, 3 * s.ramp_ms);
        let at = |s: &Scenario| s.changes.iter().map(|c| c.at_ms).collect::<Vec<_>>();
        assert_eq!(at(&long), at(&s).iter().map(|a| 3 * a).collect::<Vec<_>>());
        assert_eq!(stretched(s.clone(), 1).duration_ms, s.duration_ms);
    }

    #[test]
    fn each_policy_keeps_the_median_of_its_draws() {
        let one = |d: u64| redrawn(Generator::Models.generate(7, 1), d);
        let three = case_runs(
            Generator::Models,
            7,
            1,
            Runs {
                draws: 3,
                longer: 1,
            },
        )
        .unwrap();
        assert_eq!(case_with(Generator::Models, 7, 1).unwrap().mib_s.len(), 7);
        for (i, &p) in PolicyName::ALL.iter().enumerate() {
            let mut each: Vec<f64> = (0..3)
                .map(|d| {
                    let s = one(d);
                    run(&s, &s.workloads[0], p).unwrap().mib_s
                })
                .collect();
            each.sort_by(f64::total_cmp);
            assert_eq!(three.mib_s[i], each[1], "{p}");
        }
        // The draws differ: the median is not the first draw by construction.
        let plain = case_with(Generator::Models, 7, 1).unwrap();
        assert_ne!(plain.mib_s, three.mib_s);
    }
}
