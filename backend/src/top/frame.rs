//! What one frame of `vhost-mpath top` shows, computed from two `get_stats`
//! answers `secs` apart and the `get_device` answer: per-second rates from
//! the counters' growth, the mean latency of the interval from the growth
//! of each histogram's count and sum, and the percentiles as `get_stats`
//! gives them (since start or `reset_stats`).

use crate::client::find_path;
use serde_json::Value;

/// One path's row.
#[derive(Debug, Clone, PartialEq)]
pub struct PathRow {
    pub name: String,
    pub state: String,
    pub ana_state: String,
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    /// Bytes read and written per second.
    pub bytes_per_s: f64,
    /// Mean completion latency of the reads and writes of the interval
    /// (µs); `None` when none completed.
    pub await_us: Option<f64>,
    pub read_p50_us: Option<f64>,
    pub read_p99_us: Option<f64>,
    pub write_p50_us: Option<f64>,
    pub write_p99_us: Option<f64>,
    pub in_flight: u64,
    /// Errors of every class (path, retry, media) per second.
    pub errors_per_s: f64,
    /// Errors since start: path (failed over), retry, media.
    pub errors_total: [u64; 3],
}

impl PathRow {
    pub fn iops(&self) -> f64 {
        self.reads_per_s + self.writes_per_s
    }
}

/// A whole frame: the disk on top, then its paths.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Wall-clock time of the frame (`HH:MM:SS`, UTC).
    pub clock: String,
    pub interval_s: f64,
    pub policy: String,
    pub capacity_bytes: u64,
    pub num_queues: u64,
    pub paths: Vec<PathRow>,
    /// Requests waiting for a usable path now.
    pub no_path_waiting: u64,
    /// Requests waiting for the QoS limits now.
    pub qos_holding: u64,
    /// Requests completed to the guest with an error, per second.
    pub guest_errors_per_s: f64,
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("-").to_string()
}

fn errors(p: &Value) -> [u64; 3] {
    let e = &p["errors"];
    [num(&e["path"]), num(&e["retry"]), num(&e["media"])]
}

/// Completions and their summed latency (µs) of one direction.
fn latency_sum(l: &Value) -> (u64, f64) {
    let count = num(&l["count"]);
    (count, l["mean"].as_f64().unwrap_or(0.0) * count as f64)
}

fn row(prev: &Value, p: &Value, secs: f64) -> PathRow {
    let empty = Value::Null;
    let q = find_path(prev, p).unwrap_or(&empty);
    // Counters only grow, except at reset_stats: then the interval starts at 0.
    let grown = |k: &str| {
        let (a, b) = (num(&q[k]), num(&p[k]));
        if b >= a {
            b - a
        } else {
            b
        }
    };
    let rate = |n: u64| n as f64 / secs;
    let (mut count, mut sum) = (0u64, 0.0f64);
    for dir in ["read", "write"] {
        let (c1, s1) = latency_sum(&p["latency_us"][dir]);
        let (c0, s0) = latency_sum(&q["latency_us"][dir]);
        if c1 >= c0 {
            count += c1 - c0;
            sum += (s1 - s0).max(0.0);
        } else {
            count += c1;
            sum += s1;
        }
    }
    let (e0, e1) = (errors(q), errors(p));
    let new_errors: u64 = e1
        .iter()
        .zip(&e0)
        .map(|(b, a)| if b >= a { b - a } else { *b })
        .sum();
    let pct = |dir: &str, k: &str| p["latency_us"][dir][k].as_f64();
    PathRow {
        name: text(&p["name"]),
        state: text(&p["state"]),
        ana_state: text(&p["ana_state"]),
        reads_per_s: rate(grown("reads")),
        writes_per_s: rate(grown("writes")),
        bytes_per_s: rate(grown("bytes_read") + grown("bytes_written")),
        await_us: (count > 0).then(|| sum / count as f64),
        read_p50_us: pct("read", "p50"),
        read_p99_us: pct("read", "p99"),
        write_p50_us: pct("write", "p50"),
        write_p99_us: pct("write", "p99"),
        in_flight: num(&p["in_flight_requests"]),
        errors_per_s: rate(new_errors),
        errors_total: e1,
    }
}

/// The frame for two `get_stats` answers `secs` apart and a `get_device`
/// answer.
pub fn frame(prev: &Value, now: &Value, device: &Value, secs: f64, clock: String) -> Frame {
    let secs = secs.max(1e-3);
    let paths = now["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| row(prev, p, secs))
        .collect();
    let d = &now["device"];
    let guest = |v: &Value| num(&v["device"]["errors_to_guest"]);
    Frame {
        clock,
        interval_s: secs,
        policy: text(&device["policy"]["name"]),
        capacity_bytes: num(&d["capacity_bytes"]),
        num_queues: num(&device["num_queues"]),
        paths,
        no_path_waiting: num(&d["no_path_waiting"]),
        qos_holding: num(&d["qos_held"]["holding"]),
        guest_errors_per_s: guest(now).saturating_sub(guest(prev)) as f64 / secs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(reads: u64, bytes: u64, lat_count: u64, lat_mean: f64, path_errors: u64) -> Value {
        json!({"name": "a", "state": "usable", "ana_state": "optimized",
               "reads": reads, "writes": 0, "bytes_read": bytes, "bytes_written": 0,
               "errors": {"path": path_errors, "retry": 0, "media": 0},
               "in_flight_requests": 3,
               "latency_us": {"read": {"count": lat_count, "mean": lat_mean, "p50": 90.0, "p99": 400.0},
                              "write": {"count": 0, "mean": 0.0}}})
    }

    #[test]
    fn rates_and_interval_latency_from_two_answers() {
        let prev =
            json!({"device": {"errors_to_guest": 0}, "paths": [path(100, 409_600, 100, 100.0, 0)]});
        let now = json!({"device": {"errors_to_guest": 2, "no_path_waiting": 1, "qos_held": {"holding": 4}},
                         "paths": [path(300, 1_228_800, 300, 200.0, 1)]});
        let device = json!({"policy": {"name": "queue-depth"}, "num_queues": 2});
        let f = frame(&prev, &now, &device, 2.0, "12:00:00".into());
        let a = &f.paths[0];
        assert_eq!(a.reads_per_s, 100.0);
        assert_eq!(a.bytes_per_s, 409_600.0);
        // 100 at 100 µs, then 300 at 200 µs on average: the 200 new ones took 250 µs.
        assert_eq!(a.await_us, Some(250.0));
        assert_eq!(a.read_p99_us, Some(400.0));
        assert_eq!(a.write_p50_us, None);
        assert_eq!(a.errors_per_s, 0.5);
        assert_eq!(a.errors_total, [1, 0, 0]);
        assert_eq!(f.guest_errors_per_s, 1.0);
        assert_eq!((f.no_path_waiting, f.qos_holding), (1, 4));
        assert_eq!(f.policy, "queue-depth");
    }

    #[test]
    fn a_reset_starts_the_interval_at_zero() {
        let prev = json!({"paths": [path(1000, 4_096_000, 1000, 100.0, 5)]});
        let now = json!({"paths": [path(10, 40_960, 10, 50.0, 0)]});
        let f = frame(&prev, &now, &json!({}), 1.0, String::new());
        assert_eq!(f.paths[0].reads_per_s, 10.0);
        assert_eq!(f.paths[0].await_us, Some(50.0));
        assert_eq!(f.paths[0].errors_per_s, 0.0);
    }

    #[test]
    fn an_idle_path_has_no_interval_latency() {
        let a = json!({"paths": [path(5, 20_480, 5, 80.0, 0)]});
        let f = frame(&a, &a, &json!({}), 1.0, String::new());
        assert_eq!(f.paths[0].iops(), 0.0);
        assert_eq!(f.paths[0].await_us, None);
    }
}
