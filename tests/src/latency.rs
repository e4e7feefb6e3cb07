//! The outside-clock oracle: the daemon's per-path latency (`get_stats` and
//! the `/metrics` histograms) against the end-to-end latency a blkio client
//! measured for the same requests.
//!
//! Why it must hold: the client stamps a request before it makes it
//! available and its completion after it sees the used entry; the daemon
//! stamps a part after reading the available index that showed it and its
//! completion before publishing the used entry. So every request's daemon
//! latency is below its client latency. Above any value, then, a path (or
//! all paths) has no more requests than the client has, up to the
//! histograms' precision ([`SLACK`]):
//! - a path's `get_stats` quantile q of n requests is reached by its
//!   n - ceil(q n) + 1 slowest: as many client requests reach it (for a
//!   path that carried all requests, its quantile is at most the client's;
//!   for one that carried half, its p99 at most the client's p99.5);
//! - above each `/metrics` bucket bound, per path and all paths summed;
//! - the paths' counts add up to the client's requests (4 KiB: one part each).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::json;

use crate::client::{Client, ClientOptions};
use crate::disk::{DiskSpec, PathSpec, ServerKind};
use crate::loadgen::{self, LoadResult, Workload};
use crate::rpc::RpcClient;
use crate::server::Server;
use crate::tempdir::TempDir;

/// Slack for the precision of the two histograms: 3 significant digits on
/// the client, 1.6 % buckets on ours (a sample is counted up to a bucket
/// above its value), and a microsecond at the low end.
pub const SLACK: f64 = 0.02;
pub const SLACK_US: f64 = 1.0;

/// What the two paths of the disk are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// `null:` paths (completed inline at submission).
    Null,
    /// One image in /dev/shm, both paths through the page cache.
    Tmpfs,
    /// One image on this machine's disk, both paths `direct=on` (O_DIRECT).
    Direct,
}

impl Backing {
    pub fn name(self) -> &'static str {
        match self {
            Backing::Null => "null",
            Backing::Tmpfs => "tmpfs",
            Backing::Direct => "direct",
        }
    }

    pub fn parse(s: &str) -> Option<Backing> {
        [Backing::Null, Backing::Tmpfs, Backing::Direct]
            .into_iter()
            .find(|b| b.name() == s)
    }
}

/// The image size: large enough that random 4 KiB reads on the O_DIRECT
/// paths go to the disk, small enough to write in a moment.
pub const IMAGE_SIZE: u64 = 64 << 20;

/// Our daemon over two paths `a` and `b` of one backing, with its JSON-RPC
/// socket and metrics endpoint.
pub struct Daemon {
    pub server: Server,
    pub backing: Backing,
    pub poll_us: u32,
    rpc: PathBuf,
    metrics: String,
    _dir: TempDir,
}

impl Daemon {
    /// Starts `bin` (our daemon) over two paths of `backing`, each with
    /// `path_opts` appended (`,io-timeout-ms=N`), polling `poll_us`.
    pub fn start(bin: &Path, backing: Backing, poll_us: u32, path_opts: &str) -> Daemon {
        let base = match backing {
            Backing::Tmpfs => PathBuf::from("/dev/shm"),
            // Not tmpfs on the machines here; O_DIRECT needs a real disk.
            Backing::Direct => PathBuf::from("/var/tmp"),
            Backing::Null => std::env::temp_dir(),
        };
        let dir = TempDir::new_in(&base, "vhost-mpath-latency").expect("temp dir");
        let path = |name: &str| -> PathSpec {
            match backing {
                Backing::Null => {
                    PathSpec::Raw(format!("null:{}M,name={name}{path_opts}", IMAGE_SIZE >> 20))
                }
                Backing::Tmpfs | Backing::Direct => {
                    let img = dir.path().join("disk.img");
                    let direct = if backing == Backing::Direct {
                        ",direct=on"
                    } else {
                        ""
                    };
                    PathSpec::Raw(format!("{},name={name}{direct}{path_opts}", img.display()))
                }
            }
        };
        if backing != Backing::Null {
            // Written, not sparse: O_DIRECT reads of a hole never reach the disk.
            let block = vec![0x5au8; 1 << 20];
            let mut f = std::fs::File::create(dir.path().join("disk.img")).expect("image");
            for _ in 0..(IMAGE_SIZE >> 20) {
                f.write_all(&block).expect("write image");
            }
            f.sync_all().expect("sync image");
        }
        let rpc = dir.path().join("rpc.sock");
        let mut spec = DiskSpec::with_paths(vec![path("a"), path("b")]);
        spec.ours_extra = vec![
            "--rpc-socket".into(),
            rpc.display().to_string(),
            "--metrics-listen".into(),
            "127.0.0.1:0".into(),
            "--poll-us".into(),
            poll_us.to_string(),
        ];
        let server = spec
            .launch_with(ServerKind::Ours, bin)
            .unwrap_or_else(|e| panic!("starting the daemon: {e}"));
        let mut rpc_client = RpcClient::connect(&rpc).expect("rpc socket");
        let metrics = rpc_client.ok("get_device", json!({}))["metrics_listen"]
            .as_str()
            .expect("the metrics address in get_device")
            .to_string();
        Daemon {
            server,
            backing,
            poll_us,
            rpc,
            metrics,
            _dir: dir,
        }
    }

    pub fn rpc(&self) -> RpcClient {
        RpcClient::connect(&self.rpc).expect("rpc socket")
    }

    pub fn client(&self) -> Client {
        Client::connect_with(
            self.server.socket(),
            &ClientOptions {
                num_queues: 1,
                queue_size: Some(256),
                ..ClientOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("connecting: {e}\n{}", self.server.log()))
    }

    /// The body of `GET /metrics`.
    pub fn metrics(&self) -> String {
        let mut s = TcpStream::connect(&self.metrics).expect("metrics endpoint");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n", self.metrics).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).expect("metrics response");
        text.split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
            .unwrap_or_default()
    }
}

/// Quantiles in microseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quantiles {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// One path's latency as the daemon reports it.
#[derive(Clone, Debug)]
pub struct PathLatency {
    pub name: String,
    /// From `get_stats`.
    pub stats: Quantiles,
    /// From `/metrics`: (bucket bound in seconds, cumulative count); the
    /// last bound is infinity.
    pub buckets: Vec<(f64, u64)>,
}

/// One cell: what the client and the daemon measured.
pub struct Measured {
    pub workload: Workload,
    pub client: Quantiles,
    client_hist: Histogram<u64>,
    pub paths: Vec<PathLatency>,
    pub iops: f64,
}

fn client_quantiles(r: &LoadResult) -> Quantiles {
    let h = &r.latency_ns;
    let us = |ns: u64| ns as f64 / 1000.0;
    Quantiles {
        count: r.ios,
        p50: us(h.value_at_quantile(0.50)),
        p90: us(h.value_at_quantile(0.90)),
        p99: us(h.value_at_quantile(0.99)),
        max: us(h.max()),
    }
}

/// Runs `w` for `secs` from a clean slate of statistics and reads back what
/// both sides measured.
pub fn measure(d: &Daemon, client: &mut Client, w: &Workload, secs: f64) -> Measured {
    let mut rpc = d.rpc();
    rpc.ok("reset_stats", json!({}));
    let r = loadgen::run(client, w, Duration::from_secs_f64(secs), 7)
        .unwrap_or_else(|e| panic!("{}: the load failed: {e}\n{}", w.name, d.server.log()));
    let stats = rpc.ok("get_stats", json!({}));
    let body = d.metrics();
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .unwrap_or_else(|e| panic!("not Prometheus text: {e}"));
    let dir = if w.write { "write" } else { "read" };
    let paths = ["a", "b"]
        .iter()
        .map(|name| {
            let s = crate::rpc::path_stats(&stats, name);
            let l = &s["latency_us"][dir];
            let f = |k: &str| l[k].as_f64().unwrap_or(f64::NAN);
            PathLatency {
                name: name.to_string(),
                stats: Quantiles {
                    count: l["count"].as_u64().unwrap_or(0),
                    p50: f("p50"),
                    p90: f("p90"),
                    p99: f("p99"),
                    max: f("max"),
                },
                buckets: buckets(&scrape, &body, name, dir),
            }
        })
        .collect();
    Measured {
        workload: w.clone(),
        client: client_quantiles(&r),
        iops: r.iops(),
        client_hist: r.latency_ns,
        paths,
    }
}

/// The cumulative buckets of `vhost_mpath_path_latency_seconds` for one
/// path and direction, in bound order.
fn buckets(
    scrape: &prometheus_parse::Scrape,
    body: &str,
    path: &str,
    dir: &str,
) -> Vec<(f64, u64)> {
    for s in &scrape.samples {
        if s.metric == "vhost_mpath_path_latency_seconds"
            && s.labels.get("path") == Some(path)
            && s.labels.get("direction") == Some(dir)
        {
            if let prometheus_parse::Value::Histogram(h) = &s.value {
                let mut v: Vec<(f64, u64)> =
                    h.iter().map(|b| (b.less_than, b.count as u64)).collect();
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                return v;
            }
        }
    }
    panic!("no latency histogram for path {path} {dir} in\n{body}")
}

impl Measured {
    /// Client requests slower than `us` microseconds less the slack.
    fn client_above(&self, us: f64) -> u64 {
        let ns = (us * 1e3 * (1.0 - SLACK) - SLACK_US * 1e3).max(0.0) as u64;
        self.client.count - self.client_hist.count_between(0, ns)
    }

    /// What the oracle found wrong; empty when the daemon's numbers are
    /// within the client's.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        let c = &self.client;
        let name = &self.workload.name;
        let stats_count: u64 = self.paths.iter().map(|p| p.stats.count).sum();
        if stats_count != c.count {
            v.push(format!(
                "{name}: get_stats counts {stats_count} requests, the client {}",
                c.count
            ));
        }
        let total = |p: &PathLatency| p.buckets.last().map_or(0, |b| b.1);
        let metrics_count: u64 = self.paths.iter().map(total).sum();
        if metrics_count != c.count {
            v.push(format!(
                "{name}: /metrics counts {metrics_count} requests, the client {}",
                c.count
            ));
        }
        // get_stats: a path's quantile q is a value that its slowest
        // n - ceil(q n) + 1 requests reach; as many client requests must.
        for p in &self.paths {
            let (s, n) = (&p.stats, p.stats.count);
            if n == 0 {
                continue;
            }
            for (q, label, us) in [
                (0.50, "p50", s.p50),
                (0.90, "p90", s.p90),
                (0.99, "p99", s.p99),
                (1.0, "max", s.max),
            ] {
                let slowest = n - ((q * n as f64).ceil() as u64).max(1) + 1;
                let theirs = self.client_above(us);
                if theirs < slowest {
                    v.push(format!(
                        "{name}: path {} {label} is {us:.1} us (its {slowest} slowest of {n} \
                         requests), the client saw only {theirs} of {} that slow",
                        p.name, c.count
                    ));
                }
            }
        }
        // /metrics: above each bucket bound, per path and the paths summed.
        let bounds: Vec<f64> = self.paths[0].buckets.iter().map(|b| b.0).collect();
        for (i, &bound) in bounds.iter().enumerate() {
            if !bound.is_finite() {
                continue;
            }
            let theirs = self.client_above(bound * 1e6);
            let above = |p: &PathLatency| total(p) - p.buckets[i].1;
            let all: u64 = self.paths.iter().map(above).sum();
            let each = self.paths.iter().map(|p| (p.name.as_str(), above(p)));
            for (who, ours) in each.chain([("all", all)]) {
                if ours > theirs {
                    v.push(format!(
                        "{name}: /metrics has {ours} requests of path {who} above {:.0} us, \
                         the client {theirs}",
                        bound * 1e6
                    ));
                }
            }
        }
        v
    }

    /// A table row: the client's and each path's p50 / p99 / max.
    pub fn row(&self, label: &str) -> String {
        let q = |q: &Quantiles| format!("{:.0} / {:.0} / {:.0}", q.p50, q.p99, q.max);
        let paths: Vec<String> = self
            .paths
            .iter()
            .map(|p| format!("{}: {}", p.name, q(&p.stats)))
            .collect();
        format!(
            "| {label} | {} | {:.0} | {} | {} |",
            self.workload.name,
            self.iops,
            q(&self.client),
            paths.join("; ")
        )
    }
}

/// The table's header (see [`Measured::row`]).
pub const TABLE_HEADER: &str = "| paths, poll-us | load | IOPS | client p50 / p99 / max (us) | daemon get_stats p50 / p99 / max (us), per path |\n|---|---|---|---|---|";

/// Starts a daemon per backing and poll setting and measures every
/// workload on it; each cell's violations, and a table row per cell.
pub fn run_matrix(
    bin: &Path,
    backings: &[Backing],
    polls: &[u32],
    workloads: &[Workload],
    secs: f64,
) -> (Vec<String>, Vec<String>) {
    let (mut bad, mut rows) = (Vec::new(), Vec::new());
    for &b in backings {
        for &poll in polls {
            let d = Daemon::start(bin, b, poll, "");
            let mut client = d.client();
            for w in workloads {
                let m = measure(&d, &mut client, w, secs);
                let label = format!("{}, {poll}", b.name());
                rows.push(m.row(&label));
                bad.extend(m.violations().into_iter().map(|s| format!("{label}: {s}")));
            }
        }
    }
    (bad, rows)
}

/// The matrix's workloads: 4 KiB random reads and writes at `depths`.
pub fn workloads(depths: &[usize]) -> Vec<Workload> {
    depths
        .iter()
        .flat_map(|&qd| [false, true].map(|write| Workload::new(4096, qd, write)))
        .collect()
}

/// The io-timeout run: paths of `backing` with `io-timeout-ms` set to 20x
/// the p99 the client measured on them first, under `w` for `secs`.
pub struct TimeoutRun {
    pub workload: Workload,
    /// The client's p99 on the paths without a timeout (microseconds).
    pub p99_before_us: f64,
    pub io_timeout_ms: u64,
    pub client: Quantiles,
    pub iops: f64,
    /// Times a path was marked failed, all paths.
    pub failures: u64,
    pub no_path_waits: u64,
}

/// io-timeout as a multiple of the client's p99.
pub const TIMEOUT_TIMES_P99: f64 = 20.0;

pub fn io_timeout_run(bin: &Path, backing: Backing, w: &Workload, secs: f64) -> TimeoutRun {
    let p99_before_us = {
        let d = Daemon::start(bin, backing, 0, "");
        let mut client = d.client();
        let r = loadgen::run(&mut client, w, Duration::from_secs(3), 11)
            .unwrap_or_else(|e| panic!("{}: {e}", w.name));
        r.latency_us(0.99)
    };
    let io_timeout_ms = ((p99_before_us * TIMEOUT_TIMES_P99 / 1000.0).ceil() as u64).max(1);
    let d = Daemon::start(bin, backing, 0, &format!(",io-timeout-ms={io_timeout_ms}"));
    let mut client = d.client();
    let r = loadgen::run(&mut client, w, Duration::from_secs_f64(secs), 13)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", w.name, d.server.log()));
    let stats = d.rpc().ok("get_stats", json!({}));
    let failures = stats["paths"].as_array().map_or(0, |ps| {
        ps.iter().map(|p| p["failures"].as_u64().unwrap_or(0)).sum()
    });
    TimeoutRun {
        workload: w.clone(),
        p99_before_us,
        io_timeout_ms,
        client: client_quantiles(&r),
        iops: r.iops(),
        failures,
        no_path_waits: stats["device"]["no_path_waits"].as_u64().unwrap_or(0),
    }
}

impl TimeoutRun {
    pub fn row(&self, backing: Backing) -> String {
        format!(
            "| {} | {} | {:.0} | {} | {:.0} | {:.0} / {:.0} / {:.0} | {} | {} |",
            backing.name(),
            self.workload.name,
            self.p99_before_us,
            self.io_timeout_ms,
            self.iops,
            self.client.p50,
            self.client.p99,
            self.client.max,
            self.failures,
            self.no_path_waits
        )
    }
}

pub const TIMEOUT_HEADER: &str = "| paths | load | client p99 before (us) | io-timeout-ms | IOPS | client p50 / p99 / max (us) | paths marked failed | no-path waits |\n|---|---|---|---|---|---|---|---|";
