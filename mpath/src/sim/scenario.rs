//! Scenario files: paths, workloads and timed changes, in TOML.

use std::time::Duration;

use serde::Deserialize;

use super::models::{ServiceDist, Stalls};
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
/// plus `delay_us` (an added delay, as `tc netem` would). The keys from
/// `channels` on add the models of [`super::models`] (a device, a token
/// bucket, stalls, a TCP link, a heavy tail); all are off by default.
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
    /// Device with internal parallelism ([`super::models::Device`]):
    /// commands in service at once; 0: no device stage (a pipe).
    #[serde(default)]
    pub channels: u32,
    /// Mean service time of one command on a channel.
    #[serde(default)]
    pub service_us: f64,
    /// How the service time is drawn: `fixed`, `exponential`, `lognormal`.
    #[serde(default)]
    pub service_dist: ServiceDist,
    /// Token bucket ([`super::models::Bucket`]): commands per second; 0: none.
    #[serde(default)]
    pub bucket_iops: f64,
    /// Token bucket: MiB per second; 0: none.
    #[serde(default)]
    pub bucket_mib_s: f64,
    /// Bucket capacity in time at its rate (QEMU's 100 ms if not given).
    pub bucket_burst_ms: Option<f64>,
    /// Periodic pauses ([`super::models::Stalls`]): their period; 0: none.
    #[serde(default)]
    pub stall_every_ms: f64,
    /// The length of each pause.
    #[serde(default)]
    pub stall_ms: f64,
    /// Pauses hold writes only.
    #[serde(default)]
    pub stall_writes_only: bool,
    /// TCP-like link ([`super::models::Tcp`]): round-trip time; 0 (and no
    /// `window_kib`): the plain FIFO link.
    #[serde(default)]
    pub rtt_us: f64,
    /// Largest congestion window (4 MiB if not given).
    #[serde(default)]
    pub window_kib: f64,
    /// Segments lost per million.
    #[serde(default)]
    pub loss_ppm: f64,
    /// Heavy-tailed extra delay ([`super::models::tail_delay`]): Pareto
    /// shape, > 1; used when `tail_us` > 0.
    #[serde(default)]
    pub tail_alpha: f64,
    /// Scale of the extra delay; 0: none.
    #[serde(default)]
    pub tail_us: f64,
}

impl PathModel {
    pub(crate) fn check_models(&self) -> Result<(), String> {
        let bad = |what: &str| Err(format!("path {}: {what}", self.name));
        let values = [
            self.service_us,
            self.bucket_iops,
            self.bucket_mib_s,
            self.bucket_burst_ms.unwrap_or(0.0),
            self.stall_every_ms,
            self.stall_ms,
            self.rtt_us,
            self.window_kib,
            self.loss_ppm,
            self.tail_us,
        ];
        if values.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return bad("model keys must be finite and >= 0");
        }
        if self.channels > 0 && self.service_us <= 0.0 {
            return bad("channels need service_us > 0");
        }
        if self.stall_ms > 0.0 && self.stall_ms >= self.stall_every_ms {
            return bad("stall_ms must be shorter than stall_every_ms");
        }
        if self.loss_ppm >= 1e6 {
            return bad("loss_ppm must be below 1000000");
        }
        if self.has_tail() && self.tail_alpha <= 1.0 {
            return bad("tail_alpha must exceed 1 (a finite mean)");
        }
        if self.window_kib > 0.0 && self.window_kib * 1024.0 < 2.0 * super::models::MSS {
            return bad("window_kib must hold two segments");
        }
        Ok(())
    }

    /// A pipe: the given link and latency, every other key at its default.
    pub fn pipe(name: &str, bandwidth_mib_s: f64, base_latency_us: f64) -> Self {
        Self {
            name: name.to_string(),
            bandwidth_mib_s,
            base_latency_us,
            delay_us: 0.0,
            slots: default_slots(),
            jitter: 0.0,
            transfer: Transfer::Fixed,
            weight: default_weight(),
            preferred: false,
            numa_node: None,
            ana: None,
            channels: 0,
            service_us: 0.0,
            service_dist: ServiceDist::Fixed,
            bucket_iops: 0.0,
            bucket_mib_s: 0.0,
            bucket_burst_ms: None,
            stall_every_ms: 0.0,
            stall_ms: 0.0,
            stall_writes_only: false,
            rtt_us: 0.0,
            window_kib: 0.0,
            loss_ppm: 0.0,
            tail_alpha: 0.0,
            tail_us: 0.0,
        }
    }

    pub fn has_bucket(&self) -> bool {
        self.bucket_iops > 0.0 || self.bucket_mib_s > 0.0
    }

    pub fn has_tcp(&self) -> bool {
        self.rtt_us > 0.0 || self.window_kib > 0.0
    }

    pub fn has_tail(&self) -> bool {
        self.tail_us > 0.0
    }

    pub fn stalls(&self) -> Stalls {
        Stalls {
            every_ms: self.stall_every_ms,
            stall_ms: self.stall_ms,
            writes_only: self.stall_writes_only,
        }
    }

    /// The models beyond the pipe, in short (`32ch 80us exponential, ...`);
    /// empty for a pipe.
    pub fn models(&self) -> String {
        let mut m = vec![];
        if self.channels > 0 {
            m.push(format!(
                "device {}ch {:.0}us {:?}",
                self.channels, self.service_us, self.service_dist
            ));
        }
        if self.has_bucket() {
            let mut b = "bucket".to_string();
            if self.bucket_iops > 0.0 {
                b += &format!(" {:.0} IOPS", self.bucket_iops);
            }
            if self.bucket_mib_s > 0.0 {
                b += &format!(" {:.0} MiB/s", self.bucket_mib_s);
            }
            if let Some(ms) = self.bucket_burst_ms {
                b += &format!(" burst {ms:.0} ms");
            }
            m.push(b);
        }
        if self.stall_every_ms > 0.0 && self.stall_ms > 0.0 {
            m.push(format!(
                "stall {:.1}/{:.0} ms{}",
                self.stall_ms,
                self.stall_every_ms,
                if self.stall_writes_only {
                    " writes"
                } else {
                    ""
                }
            ));
        }
        if self.has_tcp() {
            m.push(format!(
                "tcp rtt {:.0}us win {:.0}k loss {:.0}ppm",
                self.rtt_us, self.window_kib, self.loss_ppm
            ));
        }
        if self.has_tail() {
            m.push(format!(
                "tail {:.0}us a{:.1}",
                self.tail_us, self.tail_alpha
            ));
        }
        m.join(", ")
    }
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
            p.check_models()?;
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
