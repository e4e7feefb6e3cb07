//! Scenario files: paths, workloads and timed changes, in TOML.

use std::time::Duration;

use serde::Deserialize;

use crate::health::Failback;
use crate::policy::{PolicyConfig, PolicyName};

/// One simulated experiment: the same paths and workloads run under each
/// policy in turn.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seed of the jitter and workload random numbers.
    #[serde(default = "one")]
    pub seed: u64,
    /// Virtual time simulated per policy and workload.
    pub duration_ms: u64,
    /// Completions before this are not measured (warm-up).
    #[serde(default)]
    pub ramp_ms: u64,
    /// Policies to run, by name; empty: all.
    #[serde(default)]
    pub policies: Vec<String>,
    #[serde(default)]
    pub policy: PolicyTunables,
    #[serde(rename = "path")]
    pub paths: Vec<PathModel>,
    #[serde(rename = "workload", deserialize_with = "one_or_many")]
    pub workloads: Vec<Workload>,
    /// Changes to the paths at given times (a path slowing down...).
    #[serde(default, rename = "change")]
    pub changes: Vec<PathChange>,
}

fn one() -> u64 {
    1
}

/// Optional policy tunables (`PolicyConfig` defaults otherwise).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyTunables {
    pub rr_min_io: Option<u32>,
    pub ewma_shift: Option<u32>,
    pub weight_period_ms: Option<u64>,
    pub failback: Option<String>,
}

/// A path as a server: `slots` commands at a time (the target's queue
/// depth; more wait on the host), each moved over a link of
/// `bandwidth_mib_s` shared by the path in submission order, then held for
/// `base_latency_us` (device and network, with +-`jitter` uniform spread)
/// plus `delay_us` (an added delay, as `tc netem` would).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathModel {
    pub name: String,
    pub bandwidth_mib_s: f64,
    pub base_latency_us: f64,
    #[serde(default)]
    pub delay_us: f64,
    #[serde(default = "default_slots")]
    pub slots: u32,
    /// Relative spread of the base latency, 0..1.
    #[serde(default)]
    pub jitter: f64,
    /// Link transfer times: `fixed` (bytes / bandwidth) or `exponential`
    /// (random with that mean, as from a server whose work per I/O varies).
    #[serde(default)]
    pub transfer: Transfer,
    /// `relative_throughput` (service-time).
    #[serde(default = "default_weight")]
    pub weight: u32,
    #[serde(default)]
    pub preferred: bool,
    pub numa_node: Option<u32>,
    pub ana: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transfer {
    #[default]
    Fixed,
    Exponential,
}

fn default_slots() -> u32 {
    128
}

fn default_weight() -> u32 {
    1
}

/// A fio-like closed-loop workload: `jobs` x `iodepth` I/Os always in flight.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    #[serde(default)]
    pub name: String,
    /// Block size, or `bssplit` as `[[bytes, percent], ...]`.
    pub bs: Option<u64>,
    #[serde(default)]
    pub bssplit: Vec<(u64, u32)>,
    /// Percentage of reads (fio `rwmixread`).
    #[serde(default = "hundred")]
    pub read_pct: u32,
    pub iodepth: u32,
    #[serde(default = "one_u32")]
    pub jobs: u32,
    /// NUMA node of the submitting workers (the `numa` policy's input).
    pub numa_node: Option<u32>,
}

fn hundred() -> u32 {
    100
}

fn one_u32() -> u32 {
    1
}

/// At `at_ms`, change a path's model (only the fields given).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathChange {
    pub at_ms: u64,
    pub path: String,
    pub bandwidth_mib_s: Option<f64>,
    pub base_latency_us: Option<f64>,
    pub delay_us: Option<f64>,
    /// `usable`, `offline`.
    pub state: Option<String>,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Workload>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(Workload),
        Many(Vec<Workload>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(w) => vec![w],
        OneOrMany::Many(v) => v,
    })
}

impl Scenario {
    pub fn parse(text: &str) -> Result<Self, String> {
        let s: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        s.check()?;
        Ok(s)
    }

    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn check(&self) -> Result<(), String> {
        if self.paths.is_empty() {
            return Err("no [[path]]".into());
        }
        if self.duration_ms <= self.ramp_ms {
            return Err("duration_ms must exceed ramp_ms".into());
        }
        for p in &self.paths {
            if p.bandwidth_mib_s <= 0.0 || p.slots == 0 {
                return Err(format!(
                    "path {}: bandwidth and slots must be positive",
                    p.name
                ));
            }
            if !(0.0..1.0).contains(&p.jitter) {
                return Err(format!("path {}: jitter must be in 0..1", p.name));
            }
            if let Some(a) = &p.ana {
                crate::path::AnaState::parse(a)
                    .ok_or_else(|| format!("path {}: unknown ANA state {a:?}", p.name))?;
            }
        }
        for w in &self.workloads {
            if w.bs.is_none() == w.bssplit.is_empty() {
                return Err("a workload needs exactly one of bs and bssplit".into());
            }
            if w.iodepth == 0 || w.jobs == 0 || w.read_pct > 100 {
                return Err("a workload needs iodepth, jobs > 0 and read_pct <= 100".into());
            }
        }
        for c in &self.changes {
            if !self.paths.iter().any(|p| p.name == c.path) {
                return Err(format!(
                    "change at {} ms: unknown path {:?}",
                    c.at_ms, c.path
                ));
            }
        }
        self.policy_names()?;
        self.policy_config(PolicyName::RoundRobin)?;
        Ok(())
    }

    /// The policies to run, in order.
    pub fn policy_names(&self) -> Result<Vec<PolicyName>, String> {
        if self.policies.is_empty() {
            return Ok(PolicyName::ALL.to_vec());
        }
        self.policies
            .iter()
            .map(|n| PolicyName::parse(n).ok_or_else(|| format!("unknown policy {n:?}")))
            .collect()
    }

    pub fn policy_config(&self, name: PolicyName) -> Result<PolicyConfig, String> {
        let mut c = PolicyConfig::new(name);
        let t = &self.policy;
        if let Some(v) = t.rr_min_io {
            c.rr_min_io = v;
        }
        if let Some(v) = t.ewma_shift {
            c.ewma_shift = v;
        }
        if let Some(v) = t.weight_period_ms {
            c.weight_period = Duration::from_millis(v);
        }
        if let Some(f) = &t.failback {
            c.failback = Failback::parse(f).ok_or_else(|| format!("bad failback {f:?}"))?;
        }
        Ok(c)
    }
}

impl Workload {
    /// A short fio-like description: `4k randread qd64x4`.
    pub fn label(&self) -> String {
        if !self.name.is_empty() {
            return self.name.clone();
        }
        let size = |b: u64| {
            if b.is_multiple_of(1024) {
                format!("{}k", b / 1024)
            } else {
                b.to_string()
            }
        };
        let sizes = match self.bs {
            Some(b) => size(b),
            None => self
                .bssplit
                .iter()
                .map(|(b, p)| format!("{}/{p}", size(*b)))
                .collect::<Vec<_>>()
                .join(":"),
        };
        let rw = match self.read_pct {
            100 => "randread".to_string(),
            0 => "randwrite".to_string(),
            r => format!("randrw{r}"),
        };
        format!("{sizes} {rw} qd{}x{}", self.iodepth, self.jobs)
    }
}
