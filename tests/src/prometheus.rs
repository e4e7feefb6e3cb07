//! A real Prometheus server (Debian's `prometheus` package, installed by
//! `tests/install-deps`) scraping the daemon's `/metrics`, and a small client
//! of its HTTP API (`/api/v1/query_range`, `/api/v1/series`): the dashboard
//! test runs every panel's PromQL through it.
//!
//! The server runs with a temporary configuration and storage directory on a
//! free port and is killed on drop. HTTP is plain HTTP/1.0 over a
//! `TcpStream` (one request per connection): the tests need nothing more.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::TempDir;

/// The `prometheus` binary: `$PROMETHEUS_BIN`, else the first on `$PATH`; an
/// error that says how to get it when there is none.
pub fn binary() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("PROMETHEUS_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "prometheus not found on $PATH (nor $PROMETHEUS_BIN): run tests/install-deps, \
             which installs Debian's prometheus package"
                .to_string()
        })
}

/// Seconds since the epoch, as the HTTP API takes times.
pub fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A running Prometheus; killed (and its storage removed) on drop.
pub struct Prometheus {
    child: Child,
    /// `127.0.0.1:PORT` of its web server.
    pub addr: String,
    log: PathBuf,
    _dir: TempDir,
}

/// A port nothing listens on now (the kernel's pick for port 0).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

impl Prometheus {
    /// Starts `bin` scraping `targets` (`ADDR:PORT`, job `job`) every
    /// `scrape_interval` (`1s`) and waits until its API answers.
    pub fn start(bin: &Path, job: &str, targets: &[String], scrape_interval: &str) -> Prometheus {
        let dir = TempDir::new("vhost-mpath-prometheus").expect("temp dir");
        let config = dir.path().join("prometheus.yml");
        let list: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {scrape_interval}\n\
                 scrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: [{}]\n",
                list.join(", ")
            ),
        )
        .expect("write prometheus.yml");
        let addr = format!("127.0.0.1:{}", free_port());
        let log = dir.path().join("prometheus.log");
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("log file"))
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut p = Prometheus {
            child,
            addr,
            log,
            _dir: dir,
        };
        p.wait_ready(Duration::from_secs(20));
        p
    }

    /// What Prometheus logged (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_ready(&mut self, limit: Duration) {
        let start = Instant::now();
        loop {
            if let Ok((200, _)) = http_get(&self.addr, "/-/ready") {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("prometheus exited ({status}):\n{}", self.log());
            }
            assert!(
                start.elapsed() < limit,
                "prometheus not ready after {limit:?}:\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// `GET path` on the API; the `data` of a `"status": "success"` answer.
    pub fn api(&self, path: &str) -> Result<Value, String> {
        let (status, body) = http_get(&self.addr, path)?;
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
        if v["status"] != "success" {
            return Err(format!("HTTP {status}: {v}"));
        }
        Ok(v["data"].clone())
    }

    /// The series `expr` returns over `[start, end]` at `step` seconds
    /// (`/api/v1/query_range`), each `{"metric": {...}, "values": [[t, "v"], ...]}`.
    pub fn query_range(
        &self,
        expr: &str,
        start: f64,
        end: f64,
        step: f64,
    ) -> Result<Vec<Value>, String> {
        let data = self.api(&format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={step}",
            encode(expr)
        ))?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// The values of `label` on the series `selector` matches
    /// (`/api/v1/series`: what Grafana's `label_values(selector, label)` asks).
    pub fn label_values(&self, selector: &str, label: &str) -> Result<Vec<String>, String> {
        let data = self.api(&format!("/api/v1/series?match[]={}", encode(selector)))?;
        let mut out: Vec<String> = data
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s[label].as_str().map(str::to_string))
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Waits until every target of `job` was scraped successfully (`up == 1`).
    pub fn wait_up(&self, job: &str, limit: Duration) {
        let start = Instant::now();
        let expr = format!("up{{job=\"{job}\"}} == 1");
        loop {
            let t = now_s();
            if self
                .query_range(&expr, t - 1.0, t, 1.0)
                .is_ok_and(|r| !r.is_empty())
            {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "prometheus never scraped {job} after {limit:?}:\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("--- prometheus log ---\n{}", self.log());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter (everything but RFC 3986's unreserved).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `GET path` over HTTP/1.0: the status code and the body.
pub fn http_get(addr: &str, path: &str) -> Result<(u16, String), String> {
    let err = |e: std::io::Error| format!("GET http://{addr}{path}: {e}");
    let mut s = TcpStream::connect(addr).map_err(err)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(err)?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(err)?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(err)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: not an HTTP response: {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("GET {path}: no status in {head:?}"))?;
    Ok((status, body.to_string()))
}
