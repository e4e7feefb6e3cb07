//! The TOML configuration file and its merge with the command line into the
//! settings the daemon runs with.

use std::path::{Path, PathBuf};

use std::time::Duration;

use mpath::{Failback, MarginalConfig, PolicyConfig, PolicyName};
use serde::Deserialize;

use crate::cli::Args;
use crate::path_spec::PathSpec;

/// The configuration file. Relative paths are relative to the file's folder.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct ConfigFile {
    pub socket_path: Option<PathBuf>,
    pub socket_group: Option<String>,
    pub read_only: Option<bool>,
    pub serial: Option<String>,
    pub num_queues: Option<u16>,
    pub queue_size: Option<u16>,
    pub poll_us: Option<u32>,
    pub submit_batch: Option<usize>,
    pub queue_threads: Option<usize>,
    pub fixed_buffers: Option<bool>,
    pub registered_files: Option<bool>,
    pub io_poll: Option<bool>,
    pub rpc_socket: Option<PathBuf>,
    pub rpc_socket_group: Option<String>,
    pub metrics_listen: Option<String>,
    pub lab: Option<bool>,
    pub no_inflight: Option<bool>,
    pub policy: Option<String>,
    pub rr_min_io: Option<u32>,
    pub ewma_shift: Option<u32>,
    pub weight_period_ms: Option<u64>,
    pub failback: Option<String>,
    pub no_path_timeout: Option<DurationValue>,
    pub recovery_probes: Option<u32>,
    pub max_retries: Option<u32>,
    pub marginal_err_rate: Option<f64>,
    pub marginal_sample_time: Option<DurationValue>,
    pub marginal_recheck_gap: Option<DurationValue>,
    pub log_level: Option<String>,
    /// QoS limits (libvirt's `<iotune>` names; `--qos` overrides per key).
    pub qos: Option<mpath::QosLimits>,
    /// A sparse image to create when missing (the demo's disk).
    pub image: Option<ImageSpec>,
    #[serde(default, rename = "path")]
    pub paths: Vec<PathSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSpec {
    pub file: PathBuf,
    pub size: String,
}

/// A duration in the file: a number of seconds or text like `500ms`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum DurationValue {
    Seconds(f64),
    Text(String),
}

impl DurationValue {
    fn parse(&self) -> Result<Duration, String> {
        match self {
            DurationValue::Seconds(s) if s.is_finite() && *s >= 0.0 => {
                Ok(Duration::from_secs_f64(*s))
            }
            DurationValue::Seconds(s) => Err(format!("bad duration {s}")),
            DurationValue::Text(t) => parse_duration(t),
        }
    }
}

/// `30`, `30s`, `1.5s`, `500ms`, `0`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * scale < 1e9 => {
            Ok(Duration::from_secs_f64(v * scale))
        }
        _ => Err(format!("bad duration {s:?} (examples: 30s, 500ms, 0)")),
    }
}

/// Where the daemon listens.
#[derive(Clone, Debug, PartialEq)]
pub enum Socket {
    Path(PathBuf),
    Fd(i32),
}

/// Everything the daemon runs with, after merging file and flags.
#[derive(Clone, Debug)]
pub struct Settings {
    pub socket: Socket,
    /// Group allowed to use the vhost-user socket (0660 instead of 0600).
    pub socket_group: Option<String>,
    pub read_only: bool,
    pub serial: Option<String>,
    pub num_queues: u16,
    pub queue_size: u16,
    pub poll_us: u32,
    pub submit_batch: usize,
    /// Threads serving the queues; 0: one per queue, at most one per CPU
    /// the daemon may run on (see `queue_threads`).
    pub queue_threads: usize,
    /// What each worker's ring registers (fixed buffers, files).
    pub registration: mpath_io::RegOptions,
    pub rpc_socket: Option<PathBuf>,
    pub rpc_socket_group: Option<String>,
    /// `ADDR:PORT` of the Prometheus endpoint.
    pub metrics_listen: Option<String>,
    pub lab: bool,
    /// Offer inflight I/O tracking (off: `--no-inflight`).
    pub inflight: bool,
    /// The configuration file, for `save_config`.
    pub config_file: Option<PathBuf>,
    pub policy: PolicyConfig,
    pub no_path_timeout: Duration,
    pub recovery_probes: u32,
    pub max_retries: u32,
    /// Marginal-path detection, the disk's defaults (a path may override).
    pub marginal: MarginalConfig,
    pub log_level: Option<String>,
    pub paths: Vec<PathSpec>,
    pub image: Option<(PathBuf, u64)>,
    /// The disk's QoS limits (none set: no limit).
    pub qos: mpath::QosLimits,
}

pub const MAX_QUEUE_SIZE: u16 = 1024;
pub const MAX_QUEUES: u16 = 64;
/// The policy that did best across the scenarios in docs/POLICIES.md.
pub const DEFAULT_POLICY: &str = "auto";
/// Off by default: on few cores a spinning worker steals the CPU the
/// frontend needs, and IOPS per CPU-second drop (docs/history/benchmarks-issue-10.md).
pub const DEFAULT_POLL_US: u32 = 0;
/// See docs/history/benchmarks-issue-10.md for the measurement behind it.
pub const DEFAULT_SUBMIT_BATCH: usize = 8;

impl Settings {
    /// How many threads serve the queues: as configured, else one per
    /// queue but no more than the CPUs this process may run on (more
    /// threads than CPUs only take turns on them, each paying its own
    /// wake-ups; SPDK likewise runs one reactor per core it is given).
    pub fn queue_threads(&self) -> usize {
        let queues = usize::from(self.num_queues).max(1);
        if self.queue_threads > 0 {
            return self.queue_threads.min(queues);
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        queues.min(cpus)
    }
}

fn resolve(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

impl ConfigFile {
    pub fn load(path: &Path) -> Result<Self, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("config {}: {e}", path.display()))?;
        let mut cfg: ConfigFile =
            toml::from_str(&text).map_err(|e| format!("config {}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(s) = &cfg.socket_path {
            cfg.socket_path = Some(resolve(base, s));
        }
        if let Some(s) = &cfg.rpc_socket {
            cfg.rpc_socket = Some(resolve(base, s));
        }
        if let Some(img) = &mut cfg.image {
            img.file = resolve(base, &img.file);
        }
        for p in &mut cfg.paths {
            if !p.device.starts_with("null:") {
                p.device = resolve(base, Path::new(&p.device)).display().to_string();
            }
            p.validate()?;
        }
        Ok(cfg)
    }
}

impl Settings {
    /// Merges the configuration file (if any) with the flags; flags win.
    pub fn from_args(args: &Args) -> Result<Self, String> {
        Self::from_args_activated(args, None)
    }

    /// As `from_args`, with the socket systemd passed (`activated`, from
    /// `systemd::take_listen_fd`): used unless `--fd` or `--socket-path`
    /// says otherwise, and before the config file's `socket_path` (which
    /// systemd's socket unit is then listening on).
    pub fn from_args_activated(args: &Args, activated: Option<i32>) -> Result<Self, String> {
        let file = match &args.config {
            Some(p) => ConfigFile::load(p)?,
            None => ConfigFile::default(),
        };
        let socket = match (args.fd, &args.socket_path, activated, &file.socket_path) {
            (Some(fd), _, _, _) => Socket::Fd(fd),
            (None, Some(p), _, _) => Socket::Path(p.clone()),
            (None, None, Some(fd), _) => Socket::Fd(fd),
            (None, None, None, Some(p)) => Socket::Path(p.clone()),
            (None, None, None, None) => {
                return Err(
                    "no socket: give --socket-path PATH or --fd N, or start under systemd socket activation"
                        .into(),
                )
            }
        };
        let mut paths: Vec<PathSpec> = args
            .paths
            .iter()
            .map(|s| PathSpec::parse(s))
            .collect::<Result<_, _>>()?;
        if let Some(f) = &args.blk_file {
            paths.push(PathSpec {
                device: f.clone(),
                ..Default::default()
            });
        }
        if paths.is_empty() {
            paths = file.paths;
        }
        if paths.is_empty() {
            return Err("no paths: give --path DEVICE (repeatable) or [[path]] in --config".into());
        }
        let lab = args.lab || file.lab.unwrap_or(false);
        for p in &paths {
            p.check_lab(lab)?;
        }
        let num_queues = args.num_queues.or(file.num_queues).unwrap_or(1);
        if num_queues == 0 || num_queues > MAX_QUEUES {
            return Err(format!(
                "--num-queues {num_queues}: must be 1 to {MAX_QUEUES}"
            ));
        }
        let queue_size = args.queue_size.or(file.queue_size).unwrap_or(256);
        if !queue_size.is_power_of_two() || !(4..=MAX_QUEUE_SIZE).contains(&queue_size) {
            return Err(format!(
                "--queue-size {queue_size}: must be a power of two from 4 to {MAX_QUEUE_SIZE}"
            ));
        }
        let serial = args.serial.clone().or(file.serial);
        if let Some(s) = &serial {
            if s.len() > 20 {
                return Err(format!("--serial {s:?}: at most 20 bytes"));
            }
        }
        let name = args
            .policy
            .clone()
            .or(file.policy.clone())
            .unwrap_or_else(|| DEFAULT_POLICY.into());
        let mut policy = PolicyConfig::new(PolicyName::parse(&name).ok_or_else(|| {
            format!(
                "unknown policy {name:?} (known: {})",
                PolicyName::all().join(", ")
            )
        })?);
        if let Some(n) = args.rr_min_io.or(file.rr_min_io) {
            if n == 0 {
                return Err("rr_min_io must be at least 1".into());
            }
            policy.rr_min_io = n;
        }
        if let Some(n) = args.ewma_shift.or(file.ewma_shift) {
            if !(1..=16).contains(&n) {
                return Err(format!("ewma_shift {n}: must be 1 to 16"));
            }
            policy.ewma_shift = n;
        }
        if let Some(ms) = args.weight_period_ms.or(file.weight_period_ms) {
            if ms == 0 {
                return Err("weight_period_ms must be at least 1".into());
            }
            policy.weight_period = Duration::from_millis(ms);
        }
        if let Some(f) = args.failback.clone().or(file.failback.clone()) {
            policy.failback = Failback::parse(&f)
                .ok_or_else(|| format!("failback {f:?}: expected immediate, manual or seconds"))?;
        }
        let no_path_timeout = match (&args.no_path_timeout, &file.no_path_timeout) {
            (Some(t), _) => parse_duration(t)?,
            (None, Some(v)) => v.parse()?,
            (None, None) => Duration::from_secs(30),
        };
        let marginal = marginal_settings(
            args,
            file.marginal_err_rate,
            &file.marginal_sample_time,
            &file.marginal_recheck_gap,
        )?;
        let recovery_probes = args.recovery_probes.or(file.recovery_probes).unwrap_or(3);
        if recovery_probes == 0 {
            return Err("recovery_probes must be at least 1".into());
        }
        let image = match file.image {
            Some(img) => {
                let size = mpath_io::parse_size(&img.size)
                    .filter(|&n| n > 0 && n % 512 == 0)
                    .ok_or_else(|| format!("image size {:?}: not a multiple of 512", img.size))?;
                Some((img.file, size))
            }
            None => None,
        };
        let socket_group = args.socket_group.clone().or(file.socket_group);
        if socket_group.is_some() && matches!(socket, Socket::Fd(_)) {
            return Err(
                "socket_group applies to --socket-path, not to an inherited --fd or an activated socket \
                 (set SocketGroup= in the .socket unit)"
                    .into(),
            );
        }
        let qos = match &args.qos {
            Some(spec) => crate::qos::parse_limits(file.qos.unwrap_or_default(), spec)?,
            None => {
                let q = file.qos.unwrap_or_default();
                q.validate().map_err(|e| format!("[qos]: {e}"))?;
                q
            }
        };
        Ok(Settings {
            qos,
            socket,
            socket_group,
            read_only: args.read_only || file.read_only.unwrap_or(false),
            serial,
            num_queues,
            queue_size,
            poll_us: args.poll_us.or(file.poll_us).unwrap_or(DEFAULT_POLL_US),
            submit_batch: args
                .submit_batch
                .or(file.submit_batch)
                .unwrap_or(DEFAULT_SUBMIT_BATCH),
            queue_threads: args.queue_threads.or(file.queue_threads).unwrap_or(0),
            registration: mpath_io::RegOptions {
                fixed_buffers: args.fixed_buffers.or(file.fixed_buffers).unwrap_or(true),
                registered_files: args
                    .registered_files
                    .or(file.registered_files)
                    .unwrap_or(true),
                io_poll: args.io_poll.or(file.io_poll).unwrap_or(false),
            },
            rpc_socket: args.rpc_socket.clone().or(file.rpc_socket),
            rpc_socket_group: args.rpc_socket_group.clone().or(file.rpc_socket_group),
            metrics_listen: args.metrics_listen.clone().or(file.metrics_listen),
            lab,
            inflight: !(args.no_inflight || file.no_inflight.unwrap_or(false)),
            config_file: args.config.clone(),
            policy,
            no_path_timeout,
            recovery_probes,
            max_retries: args.max_retries.or(file.max_retries).unwrap_or(3),
            marginal,
            log_level: args.log_level.clone().or(file.log_level),
            paths,
            image,
        })
    }
}

/// `--marginal-*` over the file's `marginal_*` over the defaults.
fn marginal_settings(
    args: &Args,
    err_rate: Option<f64>,
    sample_time: &Option<DurationValue>,
    recheck_gap: &Option<DurationValue>,
) -> Result<MarginalConfig, String> {
    let mut m = MarginalConfig::default();
    if let Some(r) = args.marginal_err_rate.or(err_rate) {
        m.err_rate = r;
    }
    let duration = |a: &Option<String>, f: &Option<DurationValue>| match (a, f) {
        (Some(t), _) => parse_duration(t).map(Some),
        (None, Some(v)) => v.parse().map(Some),
        (None, None) => Ok(None),
    };
    if let Some(d) = duration(&args.marginal_sample_time, sample_time)? {
        m.sample_time = d;
    }
    if let Some(d) = duration(&args.marginal_recheck_gap, recheck_gap)? {
        m.recheck_gap = d;
    }
    m.validate()?;
    Ok(m)
}

/// Creates the sparse image the configuration asks for, when it is missing.
pub fn ensure_image(file: &Path, size: u64) -> Result<(), String> {
    if file.exists() {
        return Ok(());
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let f = std::fs::File::create(file).map_err(|e| format!("{}: {e}", file.display()))?;
    f.set_len(size)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    log::info!("created sparse image {} ({size} bytes)", file.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_config_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.extension().and_then(|x| x.to_str()) != Some("toml") {
                continue;
            }
            let cfg = ConfigFile::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(!cfg.paths.is_empty(), "{}: no paths", p.display());
            for spec in &cfg.paths {
                spec.validate().unwrap();
            }
            n += 1;
        }
        assert!(n >= 3, "configs/ has the demo and the NVMe examples");
    }

    #[test]
    fn queue_threads_are_capped_by_queues_and_by_default_by_cpus() {
        use clap::Parser;
        let settings = |extra: &[&str]| {
            let mut argv = vec!["vhost-mpath", "--socket-path", "/tmp/q.sock"];
            argv.extend_from_slice(&["--path", "null:1M"]);
            argv.extend_from_slice(extra);
            Settings::from_args(&Args::parse_from(argv)).unwrap()
        };
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(
            settings(&["--num-queues", "4"]).queue_threads(),
            cpus.min(4)
        );
        assert_eq!(settings(&[]).queue_threads(), 1, "one queue, one thread");
        let given =
            |q: &str, t: &str| settings(&["--num-queues", q, "--queue-threads", t]).queue_threads();
        assert_eq!(given("4", "2"), 2);
        assert_eq!(given("4", "1"), 1);
        // Never more threads than queues, whatever the CPUs.
        assert_eq!(given("2", "8"), 2);
    }

    #[test]
    fn activated_socket_precedence() {
        use clap::Parser;
        let dir = std::env::temp_dir().join(format!("vmp-cfg-act-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("disk0.toml");
        std::fs::write(
            &cfg,
            "socket_path = \"/run/x.sock\"\n[[path]]\ndevice = \"/dev/null\"\n",
        )
        .unwrap();
        let settings = |extra: &[&str], act| {
            let mut argv = vec!["vhost-mpath", "--config", cfg.to_str().unwrap()];
            argv.extend_from_slice(extra);
            Settings::from_args_activated(&Args::parse_from(argv), act)
        };
        // The socket unit listens on the file's socket_path: activation wins.
        assert_eq!(settings(&[], Some(3)).unwrap().socket, Socket::Fd(3));
        assert_eq!(
            settings(&[], None).unwrap().socket,
            Socket::Path("/run/x.sock".into())
        );
        // What the command line says wins over activation.
        assert_eq!(
            settings(&["--socket-path", "/tmp/y.sock"], Some(3))
                .unwrap()
                .socket,
            Socket::Path("/tmp/y.sock".into())
        );
        assert_eq!(
            settings(&["--fd", "7"], Some(3)).unwrap().socket,
            Socket::Fd(7)
        );
        let e = settings(&["--socket-group", "kvm"], Some(3)).unwrap_err();
        assert!(e.contains("SocketGroup="), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["", "-1", "x", "1h", "nan"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
