//! The Grafana dashboard (configs/grafana/vhost-mpath.json) against a real
//! Prometheus: Debian's `prometheus` scrapes the daemon (two file paths, the
//! blkio client's verified load on two queues) every second while path `a`
//! fails (EIO: its requests fail over to `b`), both paths fail (requests wait
//! for a path), both recover, and a QoS limit holds requests. Then every panel's
//! and every annotation's PromQL, with the template variables resolved the
//! way Grafana resolves them (their own queries run through Prometheus too),
//! goes through the HTTP API and must return at least one series; the
//! failover annotation must fire. A copy of the dashboard with one metric
//! misspelt must be caught, so the check itself can fail.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;
use vhost_mpath_tests::locate::workspace_root;
use vhost_mpath_tests::prometheus::{self, now_s, Prometheus};
use vhost_mpath_tests::rpc::path_stats;

const JOB: &str = "vhost-mpath";

fn dashboard() -> Value {
    let path = workspace_root().join("configs/grafana/vhost-mpath.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One PromQL expression of the dashboard and where it comes from.
struct Query {
    what: String,
    expr: String,
    annotation: bool,
}

/// Every panel target's and every Prometheus annotation's expression, rows'
/// nested panels included. A panel (not a row) without a query is an error.
fn queries(dash: &Value) -> Vec<Query> {
    fn walk(panels: &Value, out: &mut Vec<Query>) {
        for p in panels.as_array().into_iter().flatten() {
            walk(&p["panels"], out);
            if p["type"] == "row" {
                continue;
            }
            let title = p["title"].as_str().unwrap_or("?");
            let before = out.len();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push(Query {
                        what: format!("panel {title:?} query {}", t["refId"]),
                        expr: expr.to_string(),
                        annotation: false,
                    });
                }
            }
            assert!(out.len() > before, "panel {title:?} has no PromQL query");
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    for a in dash["annotations"]["list"].as_array().into_iter().flatten() {
        if let Some(expr) = a["expr"].as_str() {
            out.push(Query {
                what: format!("annotation {}", a["name"]),
                expr: expr.to_string(),
                annotation: true,
            });
        }
    }
    out
}

/// Grafana's regex escape for Prometheus (a value inside `=~"..."`: the
/// backslash doubled for the PromQL string).
fn regex_escape(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars() {
        if r"\^$.|?*+()[]{}".contains(c) {
            out.push_str(r"\\");
        }
        out.push(c);
    }
    out
}

/// Resolves the dashboard's query variables through Prometheus as Grafana
/// does (`label_values(SELECTOR, LABEL)` asks `/api/v1/series`), in order,
/// each seeing the ones before: a single value regex-escaped, several as
/// `(a|b)`. `$__rate_interval` is Grafana's max(4 x scrape interval,
/// interval + scrape interval) for a 1 s scrape and a 1 s step.
fn variables(prom: &Prometheus, dash: &Value) -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = vec![("__rate_interval".into(), "4s".into())];
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        let name = v["name"].as_str().unwrap().to_string();
        match v["type"].as_str() {
            Some("datasource") => continue, // picks the data source, not in PromQL
            Some("query") => {}
            other => panic!("variable {name}: type {other:?} not handled by this test"),
        }
        let q = substitute(v["query"]["query"].as_str().unwrap(), &vars);
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {name}: {q:?} is not label_values(...)"));
        let (selector, label) = inner.rsplit_once(',').unwrap();
        let values = prom
            .label_values(selector.trim(), label.trim())
            .unwrap_or_else(|e| panic!("variable {name}: {q}: {e}"));
        assert!(!values.is_empty(), "variable {name}: {q} found no values");
        eprintln!("${name} = {values:?}");
        let value = if values.len() == 1 {
            regex_escape(&values[0])
        } else {
            let esc: Vec<String> = values.iter().map(|v| regex_escape(v)).collect();
            format!("({})", esc.join("|"))
        };
        vars.push((name, value));
    }
    vars
}

/// `$name` and `${name}` replaced, longest names first (`$path` before `$p`).
fn substitute(expr: &str, vars: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = vars.iter().collect();
    sorted.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    let mut out = expr.to_string();
    for (name, value) in sorted {
        out = out.replace(&format!("${{{name}}}"), value);
        out = out.replace(&format!("${name}"), value);
    }
    assert!(!out.contains('$'), "unresolved variable in {out}");
    out
}

/// The largest value a `query_range` result holds (NaN samples skipped).
fn max_value(series: &[Value]) -> f64 {
    series
        .iter()
        .flat_map(|s| s["values"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p[1].as_str().and_then(|v| v.parse::<f64>().ok()))
        .filter(|v| !v.is_nan())
        .fold(f64::NEG_INFINITY, f64::max)
}

/// Runs every query over `[start, end]`; returns the ones that found nothing
/// (or failed), and each query's largest value by its `what`.
fn check(
    prom: &Prometheus,
    dash: &Value,
    vars: &[(String, String)],
    start: f64,
    end: f64,
) -> (Vec<String>, Vec<(String, f64)>) {
    let mut empty = Vec::new();
    let mut maxima = Vec::new();
    let all = queries(dash);
    for q in &all {
        let expr = substitute(&q.expr, vars);
        match prom.query_range(&expr, start, end, 1.0) {
            Ok(series) if !series.is_empty() => maxima.push((q.what.clone(), max_value(&series))),
            Ok(_) => empty.push(format!("{}: no series for {expr}", q.what)),
            Err(e) => empty.push(format!("{}: {expr}: {e}", q.what)),
        }
    }
    (empty, maxima)
}

#[test]
fn every_dashboard_query_returns_series() {
    let t = Instant::now();
    // Missing prometheus is a failure that says what to install, never a skip.
    let bin = prometheus::binary().unwrap_or_else(|e| panic!("{e}"));
    let Some(lab) = Lab::start("", "", &["--metrics-listen", "127.0.0.1:0"]) else {
        return;
    };
    let metrics = lab.rpc().ok("get_device", json!({}))["metrics_listen"]
        .as_str()
        .expect("metrics_listen")
        .to_string();
    let prom = Prometheus::start(&bin, JOB, std::slice::from_ref(&metrics), "1s");
    prom.wait_up(JOB, Duration::from_secs(15));
    let start = now_s() - 1.0;

    // 9 s of verified load. At 2 s a fails with EIO (its requests fail over
    // to b); at 3.5 s b goes too (ENODEV: requests wait for a path); at 4.7 s
    // both are cleared (probes bring them back, the waiting requests resume);
    // from 6 s to 7.5 s a QoS limit of 100 IOPS holds requests.
    let report = lab.load_with(
        Duration::from_secs(9),
        Duration::from_millis(2000),
        |mut rpc| {
            rpc.ok("inject_fault", json!({"name": "a", "fail": "EIO"}));
            thread::sleep(Duration::from_millis(1500));
            rpc.ok("inject_fault", json!({"name": "b", "fail": "ENODEV"}));
            thread::sleep(Duration::from_millis(1200));
            rpc.ok("inject_fault", json!({"name": "b", "clear": true}));
            rpc.ok("inject_fault", json!({"name": "a", "clear": true}));
            thread::sleep(Duration::from_millis(1300));
            rpc.ok("set_qos", json!({"total_iops_sec": 100}));
            thread::sleep(Duration::from_millis(1500));
            rpc.ok("set_qos", json!({"total_iops_sec": 0}));
        },
    );
    assert_clean(&report);
    wait_for("a to recover", Duration::from_secs(10), || {
        let a = path_stats(&lab.stats(), "a");
        a["state"] == "usable" && a["recoveries"].as_u64().unwrap_or(0) >= 1
    });
    let a = path_stats(&lab.stats(), "a");
    assert!(a["failures"].as_u64().unwrap() >= 1, "{a}");
    assert!(a["failovers"].as_u64().unwrap() >= 1, "{a}");
    // Two more scrapes, so the recovery and the load's end are stored.
    thread::sleep(Duration::from_millis(2500));
    let end = now_s();

    let dash = dashboard();
    let vars = variables(&prom, &dash);
    let disk = &vars.iter().find(|(n, _)| n == "disk").expect("$disk").1;
    assert_eq!(disk, &regex_escape(&metrics), "$disk is the daemon we run");
    let path = &vars.iter().find(|(n, _)| n == "path").expect("$path").1;
    assert_eq!(path, "(a|b)", "$path holds both paths");

    let n = queries(&dash).len();
    assert!(
        n >= 20,
        "only {n} queries found in the dashboard: the walk is broken"
    );
    assert!(
        queries(&dash).iter().filter(|q| q.annotation).count() >= 2,
        "the failover and requeue annotations"
    );
    let (empty, maxima) = check(&prom, &dash, &vars, start, end);
    for (what, max) in &maxima {
        eprintln!("{what}: max {max}");
    }
    assert!(
        empty.is_empty(),
        "{} of {n} queries returned nothing:\n{}",
        empty.len(),
        empty.join("\n")
    );
    let max_of = |prefix: &str| {
        maxima
            .iter()
            .find(|(w, _)| w.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix}"))
            .1
    };
    assert!(
        max_of("annotation \"Path failed") > 0.0,
        "the failover annotation never fired"
    );
    assert!(
        max_of("annotation \"Requeues") > 0.0,
        "the requeue annotation never fired"
    );
    // The panels follow what happened: I/O, the no-path wait, the QoS holds.
    for (what, panel) in [
        ("IOPS under load", "panel \"IOPS per path\""),
        ("a failed path", "panel \"Path state\""),
        (
            "requests waiting for a path",
            "panel \"No-path queueing\" query \"B\"",
        ),
        ("requests held by QoS", "panel \"QoS holds\" query \"B\""),
    ] {
        assert!(max_of(panel) > 0.0, "{panel} never showed {what}");
    }

    // The check catches a panel that names a metric the daemon does not serve.
    let mut broken = dash.clone();
    let target = &mut broken["panels"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["title"] == "IOPS per path")
        .expect("the IOPS panel")["targets"][0]["expr"];
    let misspelt = target.as_str().unwrap().replace(
        "vhost_mpath_path_requests_total",
        "vhost_mpath_path_request_total",
    );
    *target = json!(misspelt);
    let (empty, _) = check(&prom, &broken, &vars, start, end);
    assert_eq!(empty.len(), 1, "{empty:?}");
    assert!(empty[0].contains("IOPS per path"), "{empty:?}");
    eprintln!("{n} queries checked in {:.1?}", t.elapsed());
}
