//! The command-line client of the control plane: `vhost-mpath rpc`,
//! `vhost-mpath paths`, `queues`, `stats`, `failback`, `resize` and `qos`
//! talk JSON-RPC to a running daemon over its socket. Tables have one row per path and aligned
//! columns, as `multipathd show paths` prints them; `--json` prints the
//! method's result for scripts.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cli::Command;

/// An RPC that failed: the daemon's error object, or why none came.
#[derive(Debug)]
pub enum CallError {
    /// The daemon answered with a JSON-RPC error.
    Rpc { code: i64, message: String },
    /// No answer (socket missing, connection dropped, bad response).
    Io(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Rpc { code, message } => write!(f, "{message} (error {code})"),
            CallError::Io(m) => f.write_str(m),
        }
    }
}

/// One connection to the daemon.
pub struct Connection {
    socket: PathBuf,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Connection {
    pub fn open(socket: &Path) -> Result<Self, CallError> {
        let s = UnixStream::connect(socket).map_err(|e| {
            CallError::Io(format!(
                "cannot connect to {}: {e} (is the daemon running with --rpc-socket {0}?)",
                socket.display()
            ))
        })?;
        // remove_path and set_path offline wait for a drain (10 s by default).
        let _ = s.set_read_timeout(Some(Duration::from_secs(700)));
        Ok(Self {
            socket: socket.to_path_buf(),
            reader: BufReader::new(s),
            next_id: 1,
        })
    }

    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, CallError> {
        let id = self.next_id;
        self.next_id += 1;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut text = serde_json::to_vec(&req).map_err(|e| CallError::Io(e.to_string()))?;
        text.push(b'\n');
        let io = |e: std::io::Error| CallError::Io(format!("{}: {e}", self.socket.display()));
        // A daemon that refuses us (SO_PEERCRED) answers and hangs up
        // before reading: its answer may wait behind a failed write.
        let sent = self.reader.get_mut().write_all(&text);
        let mut line = String::new();
        let n = match self.reader.read_line(&mut line) {
            Ok(n) => n,
            Err(e) => return Err(io(sent.err().unwrap_or(e))),
        };
        if n == 0 {
            sent.map_err(io)?;
            return Err(CallError::Io(format!(
                "{}: the daemon closed the connection",
                self.socket.display()
            )));
        }
        let resp: Value = serde_json::from_str(&line)
            .map_err(|e| CallError::Io(format!("bad response {line:?}: {e}")))?;
        if let Some(err) = resp.get("error") {
            return Err(CallError::Rpc {
                code: err["code"].as_i64().unwrap_or(0),
                message: err["message"].as_str().unwrap_or("").to_string(),
            });
        }
        Ok(resp.get("result").cloned().unwrap_or(Value::Null))
    }
}

/// Runs a client command; returns the process exit code (0 ok, 1 the
/// daemon answered with an error or could not be reached, 2 bad usage).
pub fn run(cmd: &Command) -> i32 {
    let socket = match cmd {
        Command::Rpc { socket, .. }
        | Command::Paths { socket, .. }
        | Command::Queues { socket, .. }
        | Command::Stats { socket, .. }
        | Command::Top { socket, .. }
        | Command::Failback { socket }
        | Command::Resize { socket, .. }
        | Command::Qos { socket, .. } => socket.path(),
        // The generators need no daemon.
        Command::Man { out_dir } => return crate::manpage::run_man(out_dir),
        Command::Completions { shell } => return crate::manpage::run_completions(*shell),
    };
    let socket = match socket {
        Ok(p) => p,
        Err(msg) => {
            eprintln!("vhost-mpath: {msg}");
            return 2;
        }
    };
    let result = match cmd {
        Command::Rpc { method, params, .. } => rpc(&socket, method, params.as_deref()),
        Command::Paths { json, .. } => show(&socket, "get_paths", *json, paths_table),
        Command::Queues { json, .. } => show(&socket, "get_queues", *json, queues_table),
        Command::Stats {
            json,
            name,
            watch,
            count,
            ..
        } => stats(&socket, *json, name.as_deref(), *watch, *count),
        Command::Top {
            interval, count, ..
        } => crate::top::run(&socket, *interval, *count),
        Command::Failback { .. } => failback(&socket),
        Command::Resize { size, force, .. } => resize(&socket, size.as_deref(), *force),
        Command::Qos { set, json, .. } => crate::client_qos::qos(&socket, set.as_deref(), *json),
        Command::Man { .. } | Command::Completions { .. } => unreachable!("returned above"),
    };
    match result {
        Ok(()) => 0,
        Err((code, msg)) => {
            eprintln!("vhost-mpath: {msg}");
            code
        }
    }
}

pub(crate) type CmdResult = Result<(), (i32, String)>;

pub(crate) fn failed(e: CallError) -> (i32, String) {
    (1, e.to_string())
}

pub(crate) fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

fn rpc(socket: &Path, method: &str, params: Option<&str>) -> CmdResult {
    let params = match params {
        None => json!({}),
        Some(text) => serde_json::from_str(text)
            .map_err(|e| (2, format!("PARAMS_JSON {text:?} is not JSON: {e}")))?,
    };
    let mut c = Connection::open(socket).map_err(failed)?;
    let v = c.call(method, params).map_err(failed)?;
    print_json(&v);
    Ok(())
}

fn failback(socket: &Path) -> CmdResult {
    let mut c = Connection::open(socket).map_err(failed)?;
    let v = c.call("failback", json!({})).map_err(failed)?;
    println!("I/O moves back to path {}", text(&v["name"]));
    Ok(())
}

fn resize(socket: &Path, size: Option<&str>, force: bool) -> CmdResult {
    let mut params = json!({ "force": force });
    if let Some(s) = size {
        let bytes =
            mpath_io::parse_size(s).ok_or_else(|| (2, format!("--size {s:?}: not a size")))?;
        params["size"] = json!(bytes);
    }
    let mut c = Connection::open(socket).map_err(failed)?;
    let v = c.call("resize", params).map_err(failed)?;
    println!(
        "capacity {} -> {} bytes (frontend: {})",
        text(&v["old_capacity_bytes"]),
        text(&v["capacity_bytes"]),
        text(&v["frontend"])
    );
    Ok(())
}

/// Prints `method`'s result as `table` draws it, or as JSON.
fn show(socket: &Path, method: &str, as_json: bool, table: fn(&Value) -> String) -> CmdResult {
    let mut c = Connection::open(socket).map_err(failed)?;
    let v = c.call(method, json!({})).map_err(failed)?;
    if as_json {
        print_json(&v);
    } else {
        print!("{}", table(&v));
    }
    Ok(())
}

/// `get_queues` as rows: the guest's index beside the daemon's for each
/// ring, then what each side asked to be notified at.
pub fn queues_table(v: &Value) -> String {
    let mut t = Table::new(&[
        ("QUEUE", true),
        ("READY", false),
        ("ENABLED", false),
        ("AVAIL", true),
        ("NEXT-AVAIL", true),
        ("USED", true),
        ("NEXT-USED", true),
        ("USED-EVENT", true),
        ("AVAIL-EVENT", true),
        ("IN-FLIGHT", true),
        ("KICKS", true),
        ("CALLS", true),
        ("SPIN-US", true),
    ]);
    for q in v["queues"].as_array().into_iter().flatten() {
        t.row(
            [
                "queue",
                "ready",
                "enabled",
                "avail_idx",
                "next_avail",
                "used_idx",
                "next_used",
                "used_event",
                "avail_event",
                "in_flight",
                "kicks",
                "calls",
                "spin_us",
            ]
            .map(|k| text(&q[k]))
            .to_vec(),
        );
    }
    t.render()
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        Value::Bool(true) => "yes".into(),
        Value::Bool(false) => "no".into(),
        other => other.to_string(),
    }
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// `1536` -> `1.5K` (powers of 1024).
pub fn human_bytes(n: f64) -> String {
    let units = ["", "K", "M", "G", "T", "P"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}{}", units[u])
    }
}

fn micros(v: &Value) -> String {
    match v.as_f64() {
        Some(us) if us >= 100.0 => format!("{us:.0}"),
        Some(us) => format!("{us:.1}"),
        None => "-".into(),
    }
}

/// Aligned columns: text left, numbers right, two spaces between.
pub struct Table {
    header: Vec<&'static str>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: &[(&'static str, bool)]) -> Self {
        Self {
            header: columns.iter().map(|c| c.0).collect(),
            right: columns.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        for cells in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, c) in cells.iter().enumerate() {
                let w = widths[i];
                let pad = w.saturating_sub(c.chars().count());
                if i > 0 {
                    line.push_str("  ");
                }
                if self.right[i] {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    if i + 1 < cells.len() {
                        line.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

pub fn paths_table(v: &Value) -> String {
    let mut t = Table::new(&[
        ("NAME", false),
        ("DEVICE", false),
        ("DRIVER", false),
        ("STATE", false),
        ("MARGINAL", false),
        ("ANA", false),
        ("WEIGHT", true),
        ("PREFERRED", false),
        ("IN-FLIGHT", true),
        ("IN-FLIGHT-BYTES", true),
    ]);
    for p in v["paths"].as_array().into_iter().flatten() {
        t.row(vec![
            text(&p["name"]),
            text(&p["device"]),
            text(&p["driver"]),
            text(&p["state"]),
            marginal_cell(p),
            text(&p["ana_state"]),
            text(&p["weight"]),
            text(&p["preferred"]),
            text(&p["in_flight_requests"]),
            human_bytes(num(&p["in_flight_bytes"]) as f64),
        ]);
    }
    t.render()
}

/// `yes` / `no`, or `-` where detection is off on the path.
fn marginal_cell(p: &Value) -> String {
    if p["marginal"] == true {
        "yes".into()
    } else if p["marginal_config"]["err_rate"].as_f64().unwrap_or(0.0) > 0.0 {
        "no".into()
    } else {
        "-".into()
    }
}

fn errors_cell(p: &Value) -> String {
    let e = &p["errors"];
    format!(
        "{}/{}/{}",
        num(&e["path"]),
        num(&e["retry"]),
        num(&e["media"])
    )
}

fn device_line(v: &Value) -> String {
    let d = &v["device"];
    format!(
        "no-path: {} waiting, {} waits, {} timeouts; errors to the guest: {}\n",
        num(&d["no_path_waiting"]),
        num(&d["no_path_waits"]),
        num(&d["no_path_timeouts"]),
        num(&d["errors_to_guest"])
    )
}

/// Totals of `get_stats`.
pub fn stats_table(v: &Value) -> String {
    let mut t = Table::new(&[
        ("NAME", false),
        ("STATE", false),
        ("SELECTED", true),
        ("READS", true),
        ("WRITES", true),
        ("OTHER", true),
        ("READ", true),
        ("WRITTEN", true),
        ("ERR(P/R/M)", true),
        ("FAILOVERS", true),
        ("R-P50us", true),
        ("R-P99us", true),
        ("W-P50us", true),
        ("W-P99us", true),
        ("IN-FLIGHT", true),
    ]);
    for p in v["paths"].as_array().into_iter().flatten() {
        let (r, w) = (&p["latency_us"]["read"], &p["latency_us"]["write"]);
        t.row(vec![
            text(&p["name"]),
            text(&p["state"]),
            text(&p["selected"]),
            text(&p["reads"]),
            text(&p["writes"]),
            text(&p["other"]),
            human_bytes(num(&p["bytes_read"]) as f64),
            human_bytes(num(&p["bytes_written"]) as f64),
            errors_cell(p),
            text(&p["failovers"]),
            micros(&r["p50"]),
            micros(&r["p99"]),
            micros(&w["p50"]),
            micros(&w["p99"]),
            text(&p["in_flight_requests"]),
        ]);
    }
    t.render() + &device_line(v)
}

/// `p`'s entry in an earlier `get_stats` result (a name can return after
/// a removal: removed entries match removed ones first).
pub(crate) fn find_path<'a>(v: &'a Value, p: &Value) -> Option<&'a Value> {
    let list = v["paths"].as_array()?;
    let removed = |x: &Value| x["state"] == "removed";
    let same = |q: &&'a Value| q["name"] == p["name"];
    list.iter()
        .filter(same)
        .find(|q| removed(q) == removed(p))
        .or_else(|| list.iter().find(same))
}

/// Per-second rates between two `get_stats` results `secs` apart
/// (latency percentiles are since start or the last `reset_stats`).
pub fn rates(prev: &Value, now: &Value, secs: f64) -> Value {
    let secs = secs.max(1e-3);
    let rate = |a: &Value, b: &Value| (num(b).saturating_sub(num(a))) as f64 / secs;
    let paths: Vec<Value> = now["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let empty = json!({});
            let q = find_path(prev, p).unwrap_or(&empty);
            let errors = |x: &Value| {
                json!(
                    num(&x["errors"]["path"])
                        + num(&x["errors"]["retry"])
                        + num(&x["errors"]["media"])
                )
            };
            json!({
                "name": p["name"],
                "state": p["state"],
                "reads_per_s": rate(&q["reads"], &p["reads"]),
                "writes_per_s": rate(&q["writes"], &p["writes"]),
                "read_bytes_per_s": rate(&q["bytes_read"], &p["bytes_read"]),
                "write_bytes_per_s": rate(&q["bytes_written"], &p["bytes_written"]),
                "errors_per_s": rate(&errors(q), &errors(p)),
                "failovers_per_s": rate(&q["failovers"], &p["failovers"]),
                "latency_us": p["latency_us"],
                "in_flight_requests": p["in_flight_requests"],
            })
        })
        .collect();
    json!({"interval_s": secs, "device": now["device"], "paths": paths})
}

pub fn rates_table(v: &Value) -> String {
    let mut t = Table::new(&[
        ("NAME", false),
        ("STATE", false),
        ("READS/s", true),
        ("WRITES/s", true),
        ("READ/s", true),
        ("WRITE/s", true),
        ("ERRORS/s", true),
        ("FAILOVERS/s", true),
        ("R-P50us", true),
        ("R-P99us", true),
        ("W-P50us", true),
        ("W-P99us", true),
        ("IN-FLIGHT", true),
    ]);
    let f = |x: &Value| format!("{:.0}", x.as_f64().unwrap_or(0.0));
    for p in v["paths"].as_array().into_iter().flatten() {
        let (r, w) = (&p["latency_us"]["read"], &p["latency_us"]["write"]);
        t.row(vec![
            text(&p["name"]),
            text(&p["state"]),
            f(&p["reads_per_s"]),
            f(&p["writes_per_s"]),
            human_bytes(p["read_bytes_per_s"].as_f64().unwrap_or(0.0)),
            human_bytes(p["write_bytes_per_s"].as_f64().unwrap_or(0.0)),
            f(&p["errors_per_s"]),
            f(&p["failovers_per_s"]),
            micros(&r["p50"]),
            micros(&r["p99"]),
            micros(&w["p50"]),
            micros(&w["p99"]),
            text(&p["in_flight_requests"]),
        ]);
    }
    t.render() + &device_line(v)
}

fn stats(
    socket: &Path,
    as_json: bool,
    name: Option<&str>,
    watch: Option<f64>,
    count: Option<u64>,
) -> CmdResult {
    let params = match name {
        Some(n) => json!({"name": n}),
        None => json!({}),
    };
    let mut c = Connection::open(socket).map_err(failed)?;
    let Some(interval) = watch else {
        let v = c.call("get_stats", params).map_err(failed)?;
        if as_json {
            print_json(&v);
        } else {
            print!("{}", stats_table(&v));
        }
        return Ok(());
    };
    if !(interval.is_finite() && interval >= 0.05) {
        return Err((2, format!("--watch {interval}: at least 0.05 seconds")));
    }
    let tty = std::io::stdout().is_terminal();
    let mut prev = c.call("get_stats", params.clone()).map_err(failed)?;
    let mut at = Instant::now();
    let mut shown = 0u64;
    while count.is_none_or(|n| shown < n) {
        std::thread::sleep(Duration::from_secs_f64(interval));
        let now = c.call("get_stats", params.clone()).map_err(failed)?;
        let elapsed = at.elapsed().as_secs_f64();
        at = Instant::now();
        let r = rates(&prev, &now, elapsed);
        let mut out = std::io::stdout().lock();
        let written = if as_json {
            writeln!(out, "{r}")
        } else if tty {
            // Redraw in place, as watch(1) and iostat do on a terminal.
            write!(out, "\x1b[H\x1b[2J{}", rates_table(&r))
        } else {
            writeln!(out, "{}", rates_table(&r))
        };
        if written.and_then(|_| out.flush()).is_err() {
            return Ok(()); // stdout closed (a pipe to head)
        }
        prev = now;
        shown += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let v = json!({"paths": [
            {"name": "a", "device": "/tmp/x.img", "driver": "file", "state": "usable",
             "ana_state": "optimized", "weight": 1, "preferred": false,
             "in_flight_requests": 12, "in_flight_bytes": 49152},
            {"name": "longer-name", "device": "null:1G", "driver": "null", "state": "offline",
             "ana_state": "optimized", "weight": 100, "preferred": true,
             "in_flight_requests": 0, "in_flight_bytes": 0},
        ]});
        let t = paths_table(&v);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("NAME         DEVICE"), "{t}");
        // Right-aligned numbers end in the same column.
        let end = |l: &str, s: &str| l.find(s).unwrap() + s.len();
        assert_eq!(end(lines[1], "  1  "), end(lines[2], "100  "), "{t}");
        assert!(lines[1].contains("48.0K"), "{t}");
    }

    #[test]
    fn marginal_column() {
        let v = json!({"paths": [
            {"name": "a", "device": "null:1G", "driver": "null", "state": "usable", "marginal": true,
             "marginal_config": {"err_rate": 0.05}},
            {"name": "b", "device": "null:1G", "driver": "null", "state": "usable", "marginal": false,
             "marginal_config": {"err_rate": 0.05}},
            {"name": "c", "device": "null:1G", "driver": "null", "state": "usable", "marginal": false,
             "marginal_config": {"err_rate": 0.0}},
        ]});
        let t = paths_table(&v);
        assert!(
            t.lines().next().unwrap().contains("STATE   MARGINAL"),
            "{t}"
        );
        let cells: Vec<String> = t
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().nth(4).unwrap().to_string())
            .collect();
        assert_eq!(cells, ["yes", "no", "-"], "{t}");
    }

    #[test]
    fn rates_per_second() {
        let a = json!({"device": {}, "paths": [{"name": "a", "state": "usable", "reads": 10, "writes": 0,
            "bytes_read": 4096, "bytes_written": 0, "errors": {"path": 0, "retry": 0, "media": 0}, "failovers": 0}]});
        let b = json!({"device": {}, "paths": [{"name": "a", "state": "usable", "reads": 30, "writes": 4,
            "bytes_read": 4096 * 21, "bytes_written": 0, "errors": {"path": 1, "retry": 1, "media": 0}, "failovers": 1}]});
        let r = rates(&a, &b, 2.0);
        let p = &r["paths"][0];
        assert_eq!(p["reads_per_s"], 10.0);
        assert_eq!(p["writes_per_s"], 2.0);
        assert_eq!(p["read_bytes_per_s"], 40960.0);
        assert_eq!(p["errors_per_s"], 1.0);
        assert!(rates_table(&r).contains("40.0K"));
        assert_eq!(human_bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.0G");
    }
}
