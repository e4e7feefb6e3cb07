//! `--metrics-listen ADDR:PORT`: `GET /metrics` in the Prometheus text
//! format (0.0.4): per-path counters, in-flight gauges, state and ANA state
//! as labelled 0/1 gauges, latency histograms by path and direction, and
//! device counters.
//!
//! Nothing is recorded twice: each scrape reads the engine's own lock-free
//! counters and folds its latency histograms (log-linear, 1.6 % precision)
//! into cumulative `le` buckets. HTTP is our own small server (`http.rs`:
//! a fixed pool of threads with read deadlines), the exposition format
//! `prometheus-client`; the server runs on threads of its own and never
//! touches the data path.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use log::{info, warn};
use mpath::{AnaState, Nanos, PathId, PathState, PathTotals};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::disk::Disk;

/// Latency bucket bounds in seconds: 5 µs to 10 s.
pub const LATENCY_BOUNDS_S: [f64; 20] = [
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

const STATES: [PathState; 4] = [
    PathState::Usable,
    PathState::Failed,
    PathState::Offline,
    PathState::Removed,
];

const ANA_STATES: [AnaState; 5] = [
    AnaState::Optimized,
    AnaState::NonOptimized,
    AnaState::Inaccessible,
    AnaState::PersistentLoss,
    AnaState::Change,
];

/// Reads the disk at each scrape.
#[derive(Debug)]
struct DiskCollector {
    disk: Arc<Disk>,
}

type Fmt = Result<(), std::fmt::Error>;

fn counter(m: &mut MetricEncoder, labels: &impl EncodeLabelSet, v: u64) -> Fmt {
    m.encode_family(labels)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
}

fn gauge<V: prometheus_client::encoding::EncodeGaugeValue>(
    m: &mut MetricEncoder,
    labels: &impl EncodeLabelSet,
    v: V,
) -> Fmt {
    m.encode_family(labels)?.encode_gauge(&v)
}

/// One family with a value per path (the label `path` holds the name). A
/// removed path whose name a later path took is left out: one series per name.
fn per_path<T>(
    e: &mut DescriptorEncoder,
    disk: &Disk,
    name: &str,
    help: &str,
    kind: MetricType,
    mut each: impl FnMut(&mut MetricEncoder, &str, PathId) -> Result<T, std::fmt::Error>,
) -> Fmt {
    let mut m = e.encode_descriptor(name, help, None, kind)?;
    for i in 0..disk.engine.paths().len() {
        let id = PathId(i);
        let name = disk.engine.path(id).name.as_str();
        if disk.engine.path_id(name) == Some(id) {
            each(&mut m, name, id)?;
        }
    }
    Ok(())
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl Collector for DiskCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> Fmt {
        use MetricType::{Counter, Gauge, Histogram};
        let d = &*self.disk;
        let engine = &d.engine;
        let paths = engine.paths();
        // What the workers' shards counted, summed once per scrape.
        let totals: Vec<PathTotals> = (0..paths.len())
            .map(|i| engine.path_totals(PathId(i)))
            .collect();
        let no_totals = PathTotals::default();
        let tot = |id: PathId| totals.get(id.0).unwrap_or(&no_totals);

        let policy = engine.policy_name();
        e.encode_descriptor("info", "The daemon and its current policy", None, Gauge)?
            .encode_family(&[
                ("version", env!("CARGO_PKG_VERSION")),
                ("policy", policy.as_str()),
            ])?
            .encode_gauge(&1u64)?;
        e.encode_descriptor("device_capacity_bytes", "Disk capacity", None, Gauge)?
            .encode_gauge(&d.capacity_bytes())?;
        e.encode_descriptor(
            "paths",
            "Paths in the table, removed ones included",
            None,
            Gauge,
        )?
        .encode_gauge(&paths.len())?;

        per_path(
            &mut e,
            d,
            "path_state",
            "1 for the path's state (usable, failed, offline, removed), 0 for the others",
            Gauge,
            |m, name, id| {
                let state = engine.path(id).state();
                for s in STATES {
                    gauge(
                        m,
                        &[("path", name), ("state", s.as_str())],
                        u64::from(s == state),
                    )?;
                }
                Ok(())
            },
        )?;
        per_path(
            &mut e,
            d,
            "path_marginal",
            "1 while the path is marginal (used only when no healthy path is usable)",
            Gauge,
            |m, name, id| {
                gauge(
                    m,
                    &[("path", name)],
                    u64::from(engine.path(id).is_marginal()),
                )
            },
        )?;
        per_path(
            &mut e,
            d,
            "path_marginal_events",
            "Marginal transitions: marked, returned, recheck_failed",
            Counter,
            |m, name, id| {
                let s = engine.path_stats(id);
                counter(m, &[("path", name), ("event", "marked")], s.marginal_marks)?;
                counter(
                    m,
                    &[("path", name), ("event", "returned")],
                    s.marginal_returns,
                )?;
                counter(
                    m,
                    &[("path", name), ("event", "recheck_failed")],
                    s.marginal_rechecks_failed,
                )
            },
        )?;
        per_path(
            &mut e,
            d,
            "path_marginal_error_rate",
            "Error rate (0-1) of the path's last judged marginal sample window",
            Gauge,
            |m, name, id| {
                gauge(
                    m,
                    &[("path", name)],
                    engine.path_stats(id).marginal_err_rate,
                )
            },
        )?;
        per_path(
            &mut e,
            d,
            "path_ana_state",
            "1 for the path's NVMe ANA state, 0 for the others",
            Gauge,
            |m, name, id| {
                let ana = engine.path(id).ana_state();
                for s in ANA_STATES {
                    gauge(
                        m,
                        &[("path", name), ("state", s.as_str())],
                        u64::from(s == ana),
                    )?;
                }
                Ok(())
            },
        )?;
        per_path(
            &mut e,
            d,
            "path_weight",
            "Relative throughput (0-100)",
            Gauge,
            |m, name, id| gauge(m, &[("path", name)], engine.path(id).weight()),
        )?;
        per_path(
            &mut e,
            d,
            "path_preferred",
            "1 for a preferred path",
            Gauge,
            |m, name, id| gauge(m, &[("path", name)], u64::from(engine.path(id).preferred())),
        )?;
        per_path(
            &mut e,
            d,
            "path_in_flight_requests",
            "Requests on the path now",
            Gauge,
            |m, name, id| gauge(m, &[("path", name)], engine.path(id).in_flight_requests()),
        )?;
        per_path(
            &mut e,
            d,
            "path_in_flight_bytes",
            "Bytes of the requests on the path now",
            Gauge,
            |m, name, id| gauge(m, &[("path", name)], engine.path(id).in_flight_bytes()),
        )?;
        per_path(
            &mut e,
            d,
            "path_selected",
            "Requests the policy sent down the path",
            Counter,
            |m, name, id| counter(m, &[("path", name)], tot(id).selected),
        )?;
        per_path(
            &mut e,
            d,
            "path_requests",
            "Requests completed on the path",
            Counter,
            |m, name, id| {
                let s = tot(id);
                counter(m, &[("path", name), ("direction", "read")], s.reads)?;
                counter(m, &[("path", name), ("direction", "write")], s.writes)?;
                counter(m, &[("path", name), ("direction", "other")], s.others)
            },
        )?;
        per_path(
            &mut e,
            d,
            "path_bytes",
            "Bytes transferred by completed requests",
            Counter,
            |m, name, id| {
                let s = tot(id);
                counter(m, &[("path", name), ("direction", "read")], s.read_bytes)?;
                counter(m, &[("path", name), ("direction", "write")], s.write_bytes)
            },
        )?;
        per_path(
            &mut e,
            d,
            "path_errors",
            "Errors by class: path (failed over), retry (retried on the path), media (returned)",
            Counter,
            |m, name, id| {
                let s = tot(id);
                counter(m, &[("path", name), ("class", "path")], s.path_errors)?;
                counter(m, &[("path", name), ("class", "retry")], s.retries)?;
                counter(m, &[("path", name), ("class", "media")], s.io_errors)
            },
        )?;
        per_path(
            &mut e,
            d,
            "path_failures",
            "Times the path went from usable to failed",
            Counter,
            |m, name, id| counter(m, &[("path", name)], load(&engine.path(id).stats.failures)),
        )?;
        per_path(
            &mut e,
            d,
            "path_recoveries",
            "Times the path came back after probing",
            Counter,
            |m, name, id| {
                counter(
                    m,
                    &[("path", name)],
                    load(&engine.path(id).stats.recoveries),
                )
            },
        )?;
        per_path(
            &mut e,
            d,
            "path_probes",
            "Probes of the failed path by result",
            Counter,
            |m, name, id| {
                let s = &engine.path(id).stats;
                counter(m, &[("path", name), ("result", "ok")], load(&s.probes_ok))?;
                counter(
                    m,
                    &[("path", name), ("result", "failed")],
                    load(&s.probes_failed),
                )
            },
        )?;
        let bounds_ns: Vec<Nanos> = LATENCY_BOUNDS_S
            .iter()
            .map(|s| (s * 1e9).round() as Nanos)
            .collect();
        per_path(
            &mut e,
            d,
            "path_latency_seconds",
            "Completion latency of successful requests",
            Histogram,
            |m, name, id| {
                let s = tot(id);
                for (dir, h) in [("read", &s.read_latency), ("write", &s.write_latency)] {
                    let c = h.cumulative(&bounds_ns);
                    // The encoder wants per-bucket counts; it accumulates them.
                    let mut buckets: Vec<(f64, u64)> = Vec::with_capacity(c.le.len() + 1);
                    let mut prev = 0;
                    for (&bound, &le) in LATENCY_BOUNDS_S.iter().zip(&c.le) {
                        buckets.push((bound, le - prev));
                        prev = le;
                    }
                    buckets.push((f64::INFINITY, c.count - prev));
                    m.encode_family(&[("path", name), ("direction", dir)])?
                        .encode_histogram::<NoLabelSet>(
                            c.sum_ns as f64 / 1e9,
                            c.count,
                            &buckets,
                            None,
                        )?;
                }
                Ok(())
            },
        )?;

        let np = engine.no_path_stats();
        e.encode_descriptor(
            "device_no_path_waiting",
            "Requests waiting for a usable path now",
            None,
            Gauge,
        )?
        .encode_gauge(&np.waiting)?;
        for (name, help, v) in [
            (
                "device_no_path_waits",
                "Requests that had to wait for a usable path",
                np.parked,
            ),
            (
                "device_no_path_resumed",
                "Waiting requests re-sent when a path came back",
                np.resumed,
            ),
            (
                "device_no_path_timeouts",
                "Waiting requests failed at the no-path timeout",
                np.timed_out,
            ),
            (
                "device_guest_errors",
                "Requests completed to the guest with an error",
                load(&d.guest_errors),
            ),
            (
                "device_bad_requests",
                "Malformed requests refused before any I/O",
                load(&d.bad_requests),
            ),
            (
                "device_qos_held_requests",
                "Requests held for the disk's QoS limits",
                d.qos.held().requests,
            ),
            (
                "device_qos_held_bytes",
                "Bytes of the requests held for the QoS limits",
                d.qos.held().bytes,
            ),
        ] {
            e.encode_descriptor(name, help, None, Counter)?
                .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
        }
        let held = d.qos.held();
        e.encode_descriptor(
            "device_qos_held_seconds",
            "Time requests waited for the QoS limits, summed",
            None,
            Counter,
        )?
        .encode_counter::<NoLabelSet, _, f64>(&held.seconds, None)?;
        e.encode_descriptor(
            "device_qos_holding",
            "Requests waiting for the QoS limits now",
            None,
            Gauge,
        )?
        .encode_gauge(&held.holding)?;
        Ok(())
    }
}

/// The exposition text of `disk`'s metrics.
pub fn render(disk: &Arc<Disk>) -> String {
    let mut registry = Registry::with_prefix("vhost_mpath");
    registry.register_collector(Box::new(DiskCollector { disk: disk.clone() }));
    let mut out = String::with_capacity(16 * 1024);
    if let Err(e) = prometheus_text::encode(&mut out, &registry) {
        warn!("metrics: encoding failed: {e}");
    }
    out
}

/// Serves `GET /metrics` on `addr` in the background; returns the address
/// bound (port 0 picks a free port).
pub fn spawn(addr: &str, disk: Arc<Disk>) -> Result<SocketAddr, String> {
    let listener =
        std::net::TcpListener::bind(addr).map_err(|e| format!("--metrics-listen {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("--metrics-listen {addr}: {e}"))?;
    info!("metrics on http://{bound}/metrics");
    let handler = move |method: &str, path: &str| {
        let get = matches!(method, "GET" | "HEAD");
        let text = "text/plain; charset=utf-8";
        let (status, content_type, body) = match (get, path) {
            (true, "/metrics") => (200, prometheus_text::CONTENT_TYPE, render(&disk)),
            (true, "/") => (200, text, "vhost-mpath: metrics at /metrics\n".into()),
            (false, _) => (405, text, "method not allowed\n".into()),
            _ => (404, text, "not found\n".into()),
        };
        crate::http::Response {
            status,
            content_type,
            body,
        }
    };
    crate::http::serve(listener, "metrics", Arc::new(handler))?;
    Ok(bound)
}
