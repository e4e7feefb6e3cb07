//! The control plane through the real daemon: every JSON-RPC method with
//! good and bad parameters, each error code, batches, oversized and stalled
//! clients, the socket's mode; paths added, removed and taken offline under
//! a write + read-back verification load; `save_config` and a restart; the
//! Prometheus endpoint parsed by a Prometheus text-format parser; and the
//! command-line client (`rpc`, `paths`, `stats`).

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use vhost_mpath_tests::locate::ours_binary;
use vhost_mpath_tests::procfs::holds_open;
use vhost_mpath_tests::rpc::{path_stats, RpcClient};
use vhost_mpath_tests::{DiskSpec, PathSpec, Server, ServerKind, TempDir};

/// The error object's code and message of a failed call.
#[track_caller]
fn rpc_err(r: Result<Value, Value>) -> (i64, String) {
    match r {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => (
            e["code"].as_i64().unwrap_or_else(|| panic!("no code: {e}")),
            e["message"].as_str().unwrap_or_default().to_string(),
        ),
    }
}

/// Asserts an invalid-params error whose message names `what`.
#[track_caller]
fn assert_invalid(r: Result<Value, Value>, what: &str) {
    let (code, msg) = rpc_err(r);
    assert_eq!(code, -32602, "{msg}");
    assert!(msg.contains(what), "the message must name {what:?}: {msg}");
}

/// Requests completed on path `name` so far.
fn completed(rpc: &mut RpcClient, name: &str) -> u64 {
    let s = rpc.ok("get_stats", json!({ "name": name }));
    let p = &s["paths"][0];
    ["reads", "writes", "other"]
        .iter()
        .map(|k| p[*k].as_u64().unwrap())
        .sum()
}

fn path_entry(rpc: &mut RpcClient, name: &str) -> Value {
    let v = rpc.ok("get_paths", json!({}));
    v["paths"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no path {name}: {v}"))
}

/// Sends raw text and reads one response line.
fn raw(rpc: &mut RpcClient, text: &str) -> Value {
    rpc.send_raw(text.as_bytes()).unwrap();
    rpc.read_response().unwrap()
}

fn cli(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(ours_binary());
    c.args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run vhost-mpath")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `GET path` over HTTP/1.0: status and body.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    (status, body.to_string())
}

#[test]
fn every_method_with_good_and_bad_params() {
    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let other_size = lab.dir.sparse_file("small.img", DISK_SIZE / 2).unwrap();
    let img = lab.img.display().to_string();
    let mut rpc = lab.rpc();

    let v = rpc.ok("get_version", json!({}));
    assert_eq!(v["name"], "vhost-mpath", "{v}");
    assert!(v["version"].is_string(), "{v}");
    assert_invalid(rpc.call("get_version", json!({"x": 1})), "x");

    let methods = rpc.ok("get_methods", json!({}));
    for m in [
        "get_version",
        "get_methods",
        "get_device",
        "get_paths",
        "get_stats",
        "get_queues",
        "reset_stats",
        "set_policy",
        "set_path",
        "add_path",
        "remove_path",
        "failback",
        "inject_fault",
        "save_config",
    ] {
        assert!(
            methods.as_array().unwrap().contains(&json!(m)),
            "{m} missing from {methods}"
        );
    }

    let d = rpc.ok("get_device", json!({}));
    assert_eq!(d["capacity_bytes"], DISK_SIZE, "{d}");
    assert_eq!(d["block_size"], 512, "{d}");
    assert_eq!(d["num_queues"], 2, "{d}");
    assert_eq!(d["read_only"], false, "{d}");
    assert!(
        d["serial"].is_string() && d["policy"]["name"].is_string(),
        "{d}"
    );
    assert!(d["no_path_timeout_ms"].as_u64().is_some(), "{d}");

    let p = rpc.ok("get_paths", json!({}));
    let paths = p["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 2, "{p}");
    for (path, name) in paths.iter().zip(["a", "b"]) {
        assert_eq!(path["name"], name, "{p}");
        assert_eq!(path["device"], img.as_str(), "{p}");
        assert_eq!(path["driver"], "file", "{p}");
        assert_eq!(path["state"], "usable", "{p}");
        assert_eq!(path["ana_state"], "optimized", "{p}");
        for k in [
            "weight",
            "preferred",
            "in_flight_requests",
            "in_flight_bytes",
            "shaping",
        ] {
            assert!(path.get(k).is_some(), "{k} missing: {path}");
        }
    }

    let s = rpc.ok("get_stats", json!({"name": "b"}));
    assert_eq!(s["paths"].as_array().unwrap().len(), 1, "{s}");
    assert_eq!(s["paths"][0]["name"], "b", "{s}");
    for k in ["no_path_waits", "no_path_timeouts", "errors_to_guest"] {
        assert!(s["device"][k].is_u64(), "{k}: {s}");
    }
    let b = &s["paths"][0];
    for k in ["p50", "p90", "p99", "p999", "max", "mean"] {
        assert!(b["latency_us"]["read"][k].is_number(), "{k}: {b}");
        assert!(b["latency_us"]["write"][k].is_number(), "{k}: {b}");
    }
    assert_invalid(rpc.call("get_stats", json!({"name": "zz"})), "zz");
    assert_invalid(rpc.call("get_stats", json!({"name": 5})), "name");
    assert_eq!(rpc.ok("reset_stats", json!({})), json!(true));
    assert_invalid(rpc.call("reset_stats", json!({"all": true})), "all");

    let r = rpc.ok(
        "set_policy",
        json!({"policy": "round-robin", "rr_min_io": 2}),
    );
    assert_eq!(
        (r["name"].clone(), r["rr_min_io"].clone()),
        (json!("round-robin"), json!(2))
    );
    assert_invalid(
        rpc.call("set_policy", json!({"policy": "fastest"})),
        "policy",
    );
    assert_invalid(rpc.call("set_policy", json!({})), "policy");
    assert_invalid(
        rpc.call("set_policy", json!({"policy": "adaptive", "ewma_shift": 0})),
        "ewma_shift",
    );
    assert_invalid(
        rpc.call(
            "set_policy",
            json!({"policy": "active-standby", "failback": "later"}),
        ),
        "failback",
    );

    let r = rpc.ok(
        "set_path",
        json!({"name": "a", "weight": 50, "preferred": true}),
    );
    assert_eq!(
        (r["weight"].clone(), r["preferred"].clone()),
        (json!(50), json!(true))
    );
    assert_invalid(rpc.call("set_path", json!({"name": "zz"})), "zz");
    assert_invalid(rpc.call("set_path", json!({})), "name");
    assert_invalid(
        rpc.call("set_path", json!({"name": "a", "weight": 101})),
        "weight",
    );
    assert_invalid(
        rpc.call("set_path", json!({"name": "a", "state": "sideways"})),
        "state",
    );
    assert_invalid(
        rpc.call("set_path", json!({"name": "a", "colour": "red"})),
        "colour",
    );

    assert_invalid(rpc.call("add_path", json!({})), "device");
    assert_invalid(
        rpc.call(
            "add_path",
            json!({"device": other_size.display().to_string(), "name": "x"}),
        ),
        "differs",
    );
    assert_invalid(
        rpc.call("add_path", json!({"device": "/nonexistent/x.img"})),
        "/nonexistent/x.img",
    );
    assert_invalid(
        rpc.call("add_path", json!({"device": img, "name": "a"})),
        "exists",
    );
    assert_invalid(
        rpc.call("add_path", json!({"device": img, "weight": "x"})),
        "weight",
    );
    assert_invalid(
        rpc.call("add_path", json!({"device": img, "fail": "EWHAT"})),
        "EWHAT",
    );
    let c = rpc.ok("add_path", json!({"device": img, "name": "c", "weight": 7}));
    assert_eq!(
        (c["name"].clone(), c["state"].clone(), c["weight"].clone()),
        (json!("c"), json!("usable"), json!(7)),
        "{c}"
    );
    let unnamed = rpc.ok("add_path", json!({"device": img}));
    assert!(
        unnamed["name"].as_str().unwrap().starts_with("path"),
        "{unnamed}"
    );

    let r = rpc.ok("remove_path", json!({"name": "c"}));
    assert_eq!(
        (r["drained"].clone(), r["closed"].clone()),
        (json!(true), json!(true)),
        "{r}"
    );
    assert_eq!(path_entry(&mut rpc, "c")["state"], "removed");
    assert_invalid(rpc.call("remove_path", json!({"name": "c"})), "removed");
    assert_invalid(
        rpc.call("set_path", json!({"name": "c", "weight": 1})),
        "removed",
    );
    assert_invalid(rpc.call("remove_path", json!({"name": "nope"})), "nope");
    assert_invalid(
        rpc.call("remove_path", json!({"name": "a", "force": "yes"})),
        "force",
    );
    rpc.ok("remove_path", json!({"name": unnamed["name"]}));
    rpc.ok("remove_path", json!({"name": "b"}));
    assert_invalid(rpc.call("remove_path", json!({"name": "a"})), "last");

    let r = rpc.ok("inject_fault", json!({"name": "a", "delay_us": 10}));
    assert_eq!(r["delay_us"], 10, "{r}");
    rpc.ok("inject_fault", json!({"name": "a", "clear": true}));
    assert_invalid(
        rpc.call("inject_fault", json!({"name": "a", "fail": "EWHAT"})),
        "fail",
    );
    assert_invalid(
        rpc.call("inject_fault", json!({"name": "a", "hang": 1})),
        "hang",
    );

    let (code, msg) = rpc_err(rpc.call("save_config", json!({})));
    assert_eq!(code, -32000, "{msg}");
    assert!(msg.contains("--config"), "{msg}");
}

#[test]
fn error_codes_batches_and_back_to_back_requests() {
    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let mut rpc = lab.rpc();
    let code = |v: &Value| v["error"]["code"].as_i64().unwrap_or(0);

    let v = raw(&mut rpc, "hello\n");
    assert_eq!(code(&v), -32700, "{v}");
    let v = raw(
        &mut rpc,
        r#"{"jsonrpc":"2.0","method":"get_version","id":2,}"#,
    );
    assert_eq!(code(&v), -32700, "{v}");
    let v = raw(&mut rpc, "[]");
    assert_eq!(code(&v), -32600, "{v}");
    let v = raw(&mut rpc, r#"{"method":"get_version","id":3}"#);
    assert_eq!((code(&v), v["id"].clone()), (-32600, json!(3)), "{v}");
    let v = raw(&mut rpc, r#"{"jsonrpc":"2.0","method":5,"id":4}"#);
    assert_eq!(code(&v), -32600, "{v}");
    let v = raw(
        &mut rpc,
        r#"{"jsonrpc":"2.0","method":"get_version","id":{"a":1}}"#,
    );
    assert_eq!(code(&v), -32600, "{v}");
    let v = raw(&mut rpc, r#"{"jsonrpc":"2.0","method":"nope","id":5}"#);
    assert_eq!((code(&v), v["id"].clone()), (-32601, json!(5)), "{v}");
    let v = raw(
        &mut rpc,
        r#"{"jsonrpc":"2.0","method":"get_version","params":[1],"id":6}"#,
    );
    assert_eq!(code(&v), -32602, "{v}");

    // A batch: a result, a notification (no answer), an error, an invalid entry.
    let v = raw(
        &mut rpc,
        r#"[{"jsonrpc":"2.0","method":"get_version","id":10},
            {"jsonrpc":"2.0","method":"reset_stats"},
            {"jsonrpc":"2.0","method":"nope","id":11},
            5]"#,
    );
    let items = v
        .as_array()
        .unwrap_or_else(|| panic!("a batch answer: {v}"));
    assert_eq!(items.len(), 3, "{v}");
    assert_eq!(items[0]["id"], 10);
    assert_eq!(items[0]["result"]["name"], "vhost-mpath");
    assert_eq!(
        (items[1]["id"].clone(), code(&items[1])),
        (json!(11), -32601)
    );
    assert_eq!(
        (items[2]["id"].clone(), code(&items[2])),
        (Value::Null, -32600)
    );

    // Requests one after another without newlines, in one write; the
    // answers come in order, one per line.
    rpc.send_raw(
        br#"{"jsonrpc":"2.0","method":"get_version","id":20}{"jsonrpc":"2.0","method":"get_paths","id":21}"#,
    )
    .unwrap();
    assert_eq!(rpc.read_response().unwrap()["id"], 20);
    assert_eq!(rpc.read_response().unwrap()["id"], 21);
    // A notification alone gets no answer: the next answer is the next call's.
    rpc.send_raw(br#"{"jsonrpc":"2.0","method":"reset_stats"}"#)
        .unwrap();
    assert_eq!(rpc.ok("get_version", json!({}))["name"], "vhost-mpath");
}

#[test]
fn oversized_stalled_and_many_clients_leave_others_served() {
    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let mode = std::fs::metadata(&lab.rpc).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");

    // A client that sends half a request and stalls.
    let mut stalled = lab.rpc();
    stalled
        .send_raw(br#"{"jsonrpc":"2.0","method":"get_ver"#)
        .unwrap();

    // A request over 1 MiB: refused, and that connection closed.
    let mut big = lab.rpc();
    let mut text = br#"{"jsonrpc":"2.0","method":"get_version","params":{"x":""#.to_vec();
    text.extend(std::iter::repeat_n(b'a', (1 << 20) + 4096));
    text.extend_from_slice(br#""},"id":1}"#);
    let _ = big.send_raw(&text); // the daemon may close before reading it all
    let v = big.read_response().expect("an answer before the close");
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(
        big.read_response().is_err(),
        "the connection must be closed"
    );

    // Many clients at once, while the guest's I/O goes on.
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let mut c = lab.rpc();
            thread::spawn(move || {
                for _ in 0..20 {
                    c.ok("get_stats", json!({}));
                }
            })
        })
        .collect();
    let mut guest = lab.client();
    for i in 0..32u64 {
        let data = vec![i as u8; 4096];
        guest.write(i * 4096, &data).unwrap();
        assert_eq!(guest.read(i * 4096, 4096).unwrap(), data);
    }
    for c in clients {
        c.join().expect("a client failed");
    }

    // The stalled client finishes its request and is answered.
    stalled.send_raw(br#"sion","id":9}"#).unwrap();
    let v = stalled.read_response().unwrap();
    assert_eq!(
        (v["id"].clone(), v["result"]["name"].clone()),
        (json!(9), json!("vhost-mpath"))
    );
}

#[test]
fn paths_added_removed_and_offlined_under_load() {
    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let img = lab.img.display().to_string();
    let r = lab.load_with(
        Duration::from_secs(4),
        Duration::from_millis(300),
        move |mut rpc| {
            let settle = || thread::sleep(Duration::from_millis(50));
            let watch = || thread::sleep(Duration::from_millis(400));

            let c = rpc.ok("add_path", json!({"device": img, "name": "c"}));
            assert_eq!(c["state"], "usable", "{c}");
            watch();
            assert!(completed(&mut rpc, "c") > 0, "the added path takes no I/O");

            let r = rpc.ok("set_path", json!({"name": "a", "state": "offline"}));
            assert_eq!(
                (r["drained"].clone(), r["in_flight_requests"].clone()),
                (json!(true), json!(0)),
                "{r}"
            );
            settle();
            let before = completed(&mut rpc, "a");
            watch();
            assert_eq!(
                completed(&mut rpc, "a"),
                before,
                "I/O sent to an offline path"
            );
            assert_eq!(path_entry(&mut rpc, "a")["in_flight_requests"], 0);
            rpc.ok("set_path", json!({"name": "a", "state": "online"}));

            let r = rpc.ok("remove_path", json!({"name": "b"}));
            assert_eq!(
                (r["drained"].clone(), r["closed"].clone()),
                (json!(true), json!(true)),
                "{r}"
            );
            settle();
            let before = completed(&mut rpc, "b");
            watch();
            assert_eq!(
                completed(&mut rpc, "b"),
                before,
                "I/O sent to a removed path"
            );

            rpc.ok("remove_path", json!({"name": "c"}));
            assert_invalid(rpc.call("remove_path", json!({"name": "a"})), "last");
            // A name comes back on a new path.
            rpc.ok("add_path", json!({"device": img, "name": "b"}));
            watch();
            assert!(
                completed(&mut rpc, "b") > 0,
                "the re-added path takes no I/O"
            );
        },
    );
    assert_clean(&r);
    let stats = lab.stats();
    assert_eq!(stats["device"]["errors_to_guest"], 0, "{stats}");
    let states: Vec<(String, String)> = stats["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().into(),
                p["state"].as_str().unwrap().into(),
            )
        })
        .collect();
    let expected = [
        ("a", "usable"),
        ("b", "removed"),
        ("c", "removed"),
        ("b", "usable"),
    ];
    assert_eq!(
        states,
        expected.map(|(n, s)| (n.to_string(), s.to_string())),
        "{stats}"
    );
}

#[test]
fn a_hung_path_removed_closes_once_its_io_is_released() {
    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let r = lab.load_with(
        Duration::from_secs(3),
        Duration::from_millis(300),
        |mut rpc| {
            rpc.ok("inject_fault", json!({"name": "a", "hang": true}));
            thread::sleep(Duration::from_millis(300));
            let r = rpc.ok("remove_path", json!({"name": "a", "timeout_ms": 200}));
            assert_eq!(r["drained"], false, "{r}");
            assert_eq!(r["closed"], false, "{r}");
            assert!(r["in_flight_requests"].as_u64().unwrap() > 0, "{r}");
            assert_eq!(path_entry(&mut rpc, "a")["open"], true);
            // Released: the held requests complete, then the device closes.
            rpc.ok("inject_fault", json!({"name": "a", "hang": false}));
            wait_for("path a to close", Duration::from_secs(5), || {
                path_entry(&mut rpc, "a")["open"] == false
            });
        },
    );
    assert_clean(&r);
    let a = path_stats(&lab.stats(), "a");
    assert_eq!(
        (a["state"].clone(), a["in_flight_requests"].clone()),
        (json!("removed"), json!(0)),
        "{a}"
    );
}

#[test]
fn save_config_then_restart_restores_paths_and_policy() {
    if kind() == ServerKind::Qsd {
        return;
    }
    let dir = TempDir::new("vhost-mpath-save").unwrap();
    dir.sparse_file("disk.img", DISK_SIZE).unwrap();
    let cfg = dir.path().join("vhost-mpath.toml");
    std::fs::write(
        &cfg,
        "# kept across save_config\nrpc_socket = \"rpc.sock\"\nnum_queues = 2\npolicy = \"round-robin\"\n\n\
         [[path]]\ndevice = \"disk.img\"\nname = \"a\"\n\n[[path]]\ndevice = \"disk.img\"\nname = \"b\"\n",
    )
    .unwrap();
    let rpc_sock = dir.path().join("rpc.sock");
    let start = || {
        let srv = TempDir::new("vhost-mpath-srv").unwrap();
        let sock = srv.path().join("vu.sock");
        let args = vec![
            "--config".to_string(),
            cfg.display().to_string(),
            "--socket-path".into(),
            sock.display().to_string(),
        ];
        Server::spawn("vhost-mpath", &ours_binary(), &args, srv, sock).unwrap()
    };
    let server = start();
    let mut rpc = RpcClient::connect(&rpc_sock).unwrap();
    // Without --lab there is no inject_fault.
    assert_eq!(
        rpc_err(rpc.call("inject_fault", json!({"name": "a"}))).0,
        -32601
    );
    rpc.ok(
        "set_policy",
        json!({"policy": "service-time", "rr_min_io": 3, "weight_period_ms": 250}),
    );
    rpc.ok(
        "add_path",
        json!({"device": dir.path().join("disk.img").display().to_string(), "name": "c",
               "weight": 7, "preferred": true, "direct": false, "inline": false}),
    );
    rpc.ok("set_path", json!({"name": "b", "weight": 50}));
    rpc.ok("remove_path", json!({"name": "a"}));
    let saved = rpc.ok("save_config", json!({}));
    assert_eq!(
        (saved["paths"].clone(), saved["policy"].clone()),
        (json!(2), json!("service-time")),
        "{saved}"
    );
    let before_paths = rpc.ok("get_paths", json!({}));
    let before_policy = rpc.ok("get_device", json!({}))["policy"].clone();
    drop(rpc);
    let status = server.terminate().unwrap();
    assert!(status.success(), "{status}");

    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("# kept across save_config"), "{text}");
    assert!(
        text.contains("inline = false"),
        "add_path's options saved: {text}"
    );

    let server = start();
    let mut rpc = RpcClient::connect(&rpc_sock).unwrap();
    let paths = rpc.ok("get_paths", json!({}));
    let summary = |v: &Value| -> Vec<Value> {
        v["paths"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["state"] != "removed")
            .map(|p| {
                json!([
                    p["name"],
                    p["device"],
                    p["weight"],
                    p["preferred"],
                    p["state"]
                ])
            })
            .collect()
    };
    assert_eq!(summary(&paths), summary(&before_paths), "{paths}");
    assert_eq!(summary(&paths).len(), 2);
    assert_eq!(rpc.ok("get_device", json!({}))["policy"], before_policy);
    // It serves the guest.
    let mut guest = connect(&server, 2);
    guest.write(0, &[5u8; 4096]).unwrap();
    assert_eq!(guest.read(0, 4096).unwrap(), vec![5u8; 4096]);
}

#[test]
fn metrics_are_prometheus_text_with_per_path_series() {
    let Some(lab) = Lab::start("", "", &["--metrics-listen", "127.0.0.1:0"]) else {
        return;
    };
    let mut guest = lab.client();
    for i in 0..64u64 {
        guest.write(i * 4096, &[1u8; 4096]).unwrap();
        guest.read(i * 4096, 4096).unwrap();
    }
    let mut rpc = lab.rpc();
    rpc.ok("set_path", json!({"name": "b", "state": "offline"}));
    let addr = rpc.ok("get_device", json!({}))["metrics_listen"]
        .as_str()
        .expect("the metrics address in get_device")
        .to_string();
    let (status, body) = http_get(&addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert_eq!(http_get(&addr, "/nothing").0, 404);

    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .unwrap_or_else(|e| panic!("not Prometheus text: {e}\n{body}"));
    let find = |metric: &str, labels: &[(&str, &str)]| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .unwrap_or_else(|| panic!("no {metric} {labels:?} in\n{body}"))
    };
    use prometheus_parse::Value as P;
    let mut total_reads = 0.0;
    for path in ["a", "b"] {
        match find(
            "vhost_mpath_path_requests_total",
            &[("path", path), ("direction", "read")],
        )
        .value
        {
            P::Counter(n) => total_reads += n,
            ref v => panic!("not a counter: {v:?}"),
        }
        for k in [
            "vhost_mpath_path_in_flight_requests",
            "vhost_mpath_path_in_flight_bytes",
            "vhost_mpath_path_weight",
        ] {
            assert!(
                matches!(find(k, &[("path", path)]).value, P::Gauge(_)),
                "{k}"
            );
        }
        assert!(matches!(
            find(
                "vhost_mpath_path_errors_total",
                &[("path", path), ("class", "path")]
            )
            .value,
            P::Counter(_)
        ));
        for dir in ["read", "write"] {
            let h = find(
                "vhost_mpath_path_latency_seconds",
                &[("path", path), ("direction", dir)],
            );
            let P::Histogram(buckets) = &h.value else {
                panic!("not a histogram: {h:?}")
            };
            assert_eq!(buckets.len(), 21, "{buckets:?}");
            assert!(
                buckets.windows(2).all(|w| w[0].count <= w[1].count),
                "{buckets:?}"
            );
            assert!(buckets.last().unwrap().less_than.is_infinite());
        }
    }
    assert_eq!(total_reads, 64.0, "{body}");
    let state =
        |path: &str, s: &str| match find("vhost_mpath_path_state", &[("path", path), ("state", s)])
            .value
        {
            P::Gauge(v) => v,
            ref v => panic!("{v:?}"),
        };
    assert_eq!(
        (
            state("a", "usable"),
            state("b", "usable"),
            state("b", "offline")
        ),
        (1.0, 0.0, 1.0)
    );
    assert!(matches!(
        find("vhost_mpath_path_ana_state", &[("path", "a"), ("state", "optimized")]).value,
        P::Gauge(v) if v == 1.0
    ));
    for k in [
        "vhost_mpath_device_no_path_timeouts_total",
        "vhost_mpath_device_guest_errors_total",
    ] {
        assert!(
            matches!(find(k, &[]).value, P::Counter(v) if v == 0.0),
            "{k}"
        );
    }
}

#[test]
fn command_line_client() {
    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let sock = lab.rpc.display().to_string();
    let s = sock.as_str();

    let o = cli(&["rpc", "--rpc-socket", s, "get_version"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["name"], "vhost-mpath");
    let o = cli(
        &[
            "rpc",
            "--rpc-socket",
            s,
            "set_path",
            r#"{"name": "a", "weight": 3}"#,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&o)).unwrap()["weight"],
        3
    );

    let o = cli(&["rpc", "--rpc-socket", s, "no_such_method"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("method not found"), "{}", stderr(&o));
    let o = cli(
        &["rpc", "--rpc-socket", s, "set_path", r#"{"name": "zz"}"#],
        &[],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("zz"), "{}", stderr(&o));
    let o = cli(&["rpc", "--rpc-socket", s, "get_paths", "{bad"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = cli(
        &["rpc", "--rpc-socket", "/nonexistent/rpc.sock", "get_paths"],
        &[],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot connect"), "{}", stderr(&o));

    // Some I/O for the statistics.
    let mut guest = lab.client();
    for i in 0..16u64 {
        guest.write(i * 4096, &[2u8; 4096]).unwrap();
    }

    // The table: a header and one aligned row per path; the socket from
    // the environment.
    let o = cli(&["paths"], &[("VHOST_MPATH_RPC_SOCKET", &lab.rpc)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("STATE"),
        "{table}"
    );
    let col = lines[0].find("STATE").unwrap();
    for (line, name) in lines[1..].iter().zip(["a", "b"]) {
        assert!(line.starts_with(name), "{table}");
        assert_eq!(line.find("usable"), Some(col), "misaligned:\n{table}");
    }
    let o = cli(&["paths", "--rpc-socket", s, "--json"], &[]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["paths"].as_array().unwrap().len(), 2, "{v}");

    // One row per queue, after the writes above on queue 0: its indexes
    // agree.
    let o = cli(&["queues", "--rpc-socket", s], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].split_whitespace().eq([
            "QUEUE",
            "READY",
            "ENABLED",
            "AVAIL",
            "NEXT-AVAIL",
            "USED",
            "NEXT-USED",
            "USED-EVENT",
            "AVAIL-EVENT",
            "IN-FLIGHT",
            "KICKS",
            "CALLS",
            "SPIN-US"
        ]),
        "{out}"
    );
    let q0: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&q0[..3], ["0", "yes", "yes"], "{out}");
    assert!(
        q0[3] != "0" && q0[3..7].iter().all(|c| *c == q0[3]) && q0[9] == "0",
        "{out}"
    );
    let o = cli(&["queues", "--rpc-socket", s, "--json"], &[]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["queues"].as_array().unwrap().len(), 2, "{v}");

    // The socket from the daemon's configuration file (relative to the file);
    // a file without one is a usage error.
    let cfg = lab.dir.path().join("client.toml");
    let rel = lab
        .rpc
        .strip_prefix(lab.dir.path())
        .unwrap()
        .display()
        .to_string();
    std::fs::write(&cfg, format!("rpc_socket = {rel:?}\n")).unwrap();
    let c = cfg.display().to_string();
    let o = cli(&["paths", "--config", &c, "--json"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["paths"].as_array().unwrap().len(), 2, "{v}");
    std::fs::write(&cfg, "policy = \"auto\"\n").unwrap();
    let o = cli(&["rpc", "--config", &c, "get_version"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no rpc_socket"), "{}", stderr(&o));

    let o = cli(&["stats", "--rpc-socket", s, "--json"], &[]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let writes: u64 = v["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["writes"].as_u64().unwrap())
        .sum();
    assert_eq!(writes, 16, "{v}");
    let o = cli(&["stats", "--rpc-socket", s], &[]);
    let table = stdout(&o);
    assert!(
        table.starts_with("NAME") && table.contains("WRITES"),
        "{table}"
    );
    assert_eq!(
        table
            .lines()
            .filter(|l| l.starts_with("a ") || l.starts_with("b "))
            .count(),
        2,
        "{table}"
    );

    let o = cli(
        &["stats", "--rpc-socket", s, "--watch", "0.2", "--count", "2"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.matches("READS/s").count(), 2, "{out}");
    let o = cli(
        &[
            "stats",
            "--rpc-socket",
            s,
            "--json",
            "--watch",
            "0.1",
            "--count",
            "1",
        ],
        &[],
    );
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert!(v["paths"][0]["reads_per_s"].is_number(), "{v}");
}

/// Our daemon on `paths` with the JSON-RPC socket, without `--lab`;
/// `None` against qsd. The socket lies in `dir`.
fn daemon_without_lab(dir: &TempDir, paths: Vec<PathSpec>) -> Option<(Server, RpcClient)> {
    if kind() == ServerKind::Qsd {
        return None;
    }
    let rpc_sock = dir.path().join("rpc.sock");
    let mut disk = DiskSpec::with_paths(paths);
    disk.ours_extra = vec!["--rpc-socket".into(), rpc_sock.display().to_string()];
    let server = launch(&disk);
    let rpc = RpcClient::connect(&rpc_sock).unwrap();
    Some((server, rpc))
}

/// Starts the daemon with `args` (a socket is added), which must refuse to
/// start: exit code 2 and one line on stderr, returned.
fn refused_at_start(dir: &TempDir, args: &[&str]) -> String {
    let sock = dir.path().join("refused.sock");
    let log = dir.path().join("refused.log");
    let mut child = Command::new(ours_binary())
        .arg("--socket-path")
        .arg(&sock)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("run vhost-mpath");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} started and served instead of refusing to start");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(2), "{args:?} must not start: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    err
}

fn names(rpc: &mut RpcClient) -> Vec<String> {
    rpc.ok("get_paths", json!({}))["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn lab_keys_are_refused_without_lab_at_start_up_and_in_add_path() {
    let dir = TempDir::new("vhost-mpath-nolab").unwrap();
    let img = dir.sparse_file("disk.img", DISK_SIZE).unwrap();
    let i = img.display().to_string();
    for opt in [
        "fail=EIO",
        "hang",
        "delay-us=100",
        "bw-mbps=10",
        "fail-after=5",
    ] {
        let err = refused_at_start(&dir, &["--path", &format!("{i},{opt}")]);
        let key = opt.split('=').next().unwrap();
        assert!(err.contains(key) && err.contains("--lab"), "{opt}: {err}");
    }
    // The configuration file follows the same rule (`lab = true` allows them).
    let cfg = dir.path().join("lab.toml");
    std::fs::write(&cfg, format!("[[path]]\ndevice = {i:?}\nhang = true\n")).unwrap();
    let err = refused_at_start(&dir, &["--config", cfg.to_str().unwrap()]);
    assert!(err.contains("hang") && err.contains("--lab"), "{err}");

    let a = PathSpec::File {
        file: img.clone(),
        name: "a".into(),
    };
    let Some((_server, mut rpc)) = daemon_without_lab(&dir, vec![a]) else {
        return;
    };
    for (key, v) in [
        ("hang", json!(true)),
        ("fail", json!("EIO")),
        ("delay_us", json!(100)),
        ("bw_mbps", json!(10)),
        ("fail_after", json!(5)),
    ] {
        let (code, msg) = rpc_err(rpc.call("add_path", json!({"device": i, "name": "c", key: v})));
        assert_eq!(code, -32602, "{key}: {msg}");
        assert!(msg.contains(key) && msg.contains("--lab"), "{key}: {msg}");
    }
    assert_eq!(names(&mut rpc), ["a"], "nothing was added");
    rpc.ok("add_path", json!({"device": i, "name": "c"}));
}

#[test]
fn paths_of_one_disk_are_of_one_kind() {
    let dir = TempDir::new("vhost-mpath-kind").unwrap();
    let img = dir.sparse_file("disk.img", DISK_SIZE).unwrap();
    let i = img.display().to_string();
    // A null path acknowledges writes and drops them: never beside storage.
    for args in [
        ["--path", i.as_str(), "--path", "null:64M,name=n"],
        ["--path", "null:64M,name=n", "--path", i.as_str()],
    ] {
        let err = refused_at_start(&dir, &args);
        assert!(err.contains("null") && err.contains("one kind"), "{err}");
    }
    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let mut rpc = lab.rpc();
    assert_invalid(
        rpc.call("add_path", json!({"device": "null:64M", "name": "n"})),
        "one kind",
    );
    assert_eq!(names(&mut rpc), ["a", "b"], "nothing was added");

    // Null paths go with null paths.
    let ndir = TempDir::new("vhost-mpath-kind-null").unwrap();
    let Some((_server, mut rpc)) =
        daemon_without_lab(&ndir, vec![PathSpec::Null { size: DISK_SIZE }])
    else {
        return;
    };
    rpc.ok("add_path", json!({"device": "null:64M", "name": "n"}));
    assert_invalid(
        rpc.call("add_path", json!({"device": i, "name": "f"})),
        "one kind",
    );
}

#[test]
fn transfer_and_segment_limits_no_request_could_meet_are_refused() {
    let dir = TempDir::new("vhost-mpath-limits").unwrap();
    let img = dir.sparse_file("disk.img", DISK_SIZE).unwrap();
    let i = img.display().to_string();
    for (opt, key) in [
        ("max-transfer=4k", "max-transfer"),
        ("max-transfer=512", "max-transfer"),
        ("max-segments=1", "max-segments"),
    ] {
        let err = refused_at_start(&dir, &["--path", &format!("{i},{opt}")]);
        assert!(err.contains(key), "{opt}: {err}");
    }
    let big = dir.sparse_file("big-blocks.img", DISK_SIZE).unwrap();
    let err = refused_at_start(
        &dir,
        &[
            "--path",
            &format!("{},block-size=16384,max-segments=4", big.display()),
        ],
    );
    assert!(
        err.contains("max-segments"),
        "a 16 KiB block spans 5 pages: {err}"
    );

    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let mut rpc = lab.rpc();
    assert_invalid(
        rpc.call(
            "add_path",
            json!({"device": i, "name": "c", "max_transfer": 4096}),
        ),
        "max_transfer",
    );
    assert_invalid(
        rpc.call(
            "add_path",
            json!({"device": i, "name": "c", "max_segments": 1}),
        ),
        "max_segments",
    );
    assert_eq!(names(&mut rpc), ["a", "b"], "nothing was added");
    // The smallest limits allowed still serve every request (cut to fit).
    let lab_img = lab.img.display().to_string();
    rpc.ok(
        "add_path",
        json!({"device": lab_img, "name": "c", "max_transfer": 8192, "max_segments": 2}),
    );
    let mut guest = lab.client();
    let data: Vec<u8> = (0..256 * K).map(|n| (n % 251) as u8).collect();
    guest
        .write(512, &data)
        .expect("a write cut to the smallest limits");
    assert_eq!(guest.read(512, data.len()).unwrap(), data);
    let s = lab.stats();
    assert_eq!(s["device"]["errors_to_guest"], 0, "{s}");
}

#[test]
fn set_path_offline_keeps_the_last_usable_path_unless_forced() {
    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let mut rpc = lab.rpc();
    rpc.ok("set_path", json!({"name": "a", "state": "offline"}));
    assert_invalid(
        rpc.call(
            "set_path",
            json!({"name": "b", "state": "offline", "weight": 9}),
        ),
        "last usable",
    );
    let b = path_entry(&mut rpc, "b");
    assert_eq!(
        (b["state"].clone(), b["weight"].clone()),
        (json!("usable"), json!(1)),
        "a refused call changes nothing: {b}"
    );
    assert_invalid(
        rpc.call(
            "set_path",
            json!({"name": "b", "state": "offline", "force": "yes"}),
        ),
        "force",
    );
    let mut guest = lab.client();
    guest.write(0, &[7u8; 4096]).unwrap();
    let r = rpc.ok(
        "set_path",
        json!({"name": "b", "state": "offline", "force": true}),
    );
    assert_eq!(r["state"], "offline", "{r}");
    rpc.ok("set_path", json!({"name": "a", "state": "online"}));
    assert_eq!(guest.read(0, 4096).unwrap(), vec![7u8; 4096]);
}

#[test]
fn failback_moves_io_back_to_the_preferred_path() {
    let Some(lab) = Lab::start(
        ",preferred",
        "",
        &["--policy", "active-standby", "--failback", "manual"],
    ) else {
        return;
    };
    let sock = lab.rpc.display().to_string();
    let mut rpc = lab.rpc();
    let mut guest = lab.client();
    let io = |guest: &mut vhost_mpath_tests::Client| {
        for n in 0..16u64 {
            guest.write(n * 4096, &[n as u8; 4096]).unwrap();
        }
    };
    io(&mut guest);
    assert_eq!(completed(&mut rpc, "b"), 0, "active-standby: all on a");

    rpc.ok("inject_fault", json!({"name": "a", "fail": "EIO"}));
    io(&mut guest);
    assert_eq!(path_entry(&mut rpc, "a")["state"], "failed");
    rpc.ok("inject_fault", json!({"name": "a", "clear": true}));
    wait_for("a to pass its probes", Duration::from_secs(10), || {
        path_entry(&mut rpc, "a")["state"] == "usable"
    });
    // Manual failback: a is usable again but takes nothing yet.
    let a_before = completed(&mut rpc, "a");
    io(&mut guest);
    assert_eq!(
        completed(&mut rpc, "a"),
        a_before,
        "no failback before asked"
    );

    let o = cli(&["failback", "--rpc-socket", &sock], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("path a"), "{}", stdout(&o));
    let (a0, b0) = (completed(&mut rpc, "a"), completed(&mut rpc, "b"));
    io(&mut guest);
    assert_eq!(completed(&mut rpc, "a"), a0 + 16, "I/O back on a");
    assert_eq!(completed(&mut rpc, "b"), b0, "nothing more on b");
    assert_eq!(rpc.ok("failback", json!({})), json!({"name": "a"}));
    assert_invalid(rpc.call("failback", json!({"name": "a"})), "name");

    // No usable preferred path: a clear error, over RPC and from the client.
    rpc.ok("set_path", json!({"name": "a", "state": "offline"}));
    let (code, msg) = rpc_err(rpc.call("failback", json!({})));
    assert_eq!(code, -32000, "{msg}");
    assert!(
        msg.contains("preferred") && msg.contains("a is offline"),
        "{msg}"
    );
    let o = cli(&["failback", "--rpc-socket", &sock], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("preferred"), "{}", stderr(&o));
    rpc.ok("set_path", json!({"name": "a", "state": "online"}));

    // Another policy: failback means nothing there.
    rpc.ok("set_policy", json!({"policy": "round-robin"}));
    let (code, msg) = rpc_err(rpc.call("failback", json!({})));
    assert_eq!(code, -32000, "{msg}");
    assert!(msg.contains("active-standby"), "{msg}");
}

/// A removed path's device is closed by the time `remove_path` answers
/// `closed`, even though the I/O queues that used it hold on to its driver
/// while idle: the disk wakes them to let go.
#[test]
fn remove_path_closes_the_device_of_a_path_idle_queues_used() {
    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let img2 = lab.dir.path().join("disk2.img");
    std::fs::copy(&lab.img, &img2).unwrap();
    let img2 = std::fs::canonicalize(&img2).unwrap();
    let mut rpc = lab.rpc();
    rpc.ok(
        "add_path",
        json!({"device": img2.display().to_string(), "name": "c"}),
    );
    // Only c is usable: every queue's I/O goes there.
    for p in ["a", "b"] {
        rpc.ok("set_path", json!({"name": p, "state": "offline"}));
    }
    let mut guest = lab.client();
    for q in 0..2 {
        for i in 0..8u64 {
            guest.read_on(q, i * 4096, 4096).unwrap();
        }
    }
    assert!(completed(&mut rpc, "c") >= 16, "c took no I/O");
    for p in ["a", "b"] {
        rpc.ok("set_path", json!({"name": p, "state": "online"}));
    }
    let pid = lab.server.pid();
    assert!(holds_open(pid, &img2), "c's file is not open");
    // The queues are idle from here on.
    let r = rpc.ok("remove_path", json!({"name": "c"}));
    assert_eq!(r["closed"], json!(true), "{r}");
    assert!(
        !holds_open(pid, &img2),
        "remove_path answered closed, but the daemon still holds c's file open"
    );
    // The disk still serves.
    guest.read(0, 4096).unwrap();
}

/// `get_queues` shows a queue's rings as the guest left them beside what the
/// daemon reached: requests held by hung paths were taken and are in flight
/// (taken, not used), and once released everything made available is used.
#[test]
fn get_queues_shows_held_requests_and_settles_once_they_complete() {
    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let wrap = |a: &Value, b: &Value| {
        (a.as_u64().unwrap() as u16).wrapping_sub(b.as_u64().unwrap() as u16)
    };
    let r = lab.load_with(
        Duration::from_secs(3),
        Duration::from_millis(300),
        move |mut rpc| {
            for p in ["a", "b"] {
                rpc.ok("inject_fault", json!({"name": p, "hang": true}));
            }
            thread::sleep(Duration::from_millis(300));
            let queues = rpc.ok("get_queues", json!({}))["queues"].clone();
            // Released before asserting, so that a failed assertion does not
            // leave the load waiting on hung paths until its timeout.
            for p in ["a", "b"] {
                rpc.ok("inject_fault", json!({"name": p, "hang": false}));
            }
            // The load waits for a whole batch, spread over both queues, so
            // when the paths hang one queue may have finished its share:
            // the held requests are counted over the queues.
            let mut held = 0;
            for q in queues.as_array().unwrap() {
                assert_eq!(
                    (&q["ready"], &q["enabled"], &q["event_idx"]),
                    (&json!(true), &json!(true), &json!(true)),
                    "{q}"
                );
                let in_flight = q["in_flight"].as_u64().unwrap();
                assert_eq!(
                    q["avail_idx"], q["next_avail"],
                    "a request made available was not taken: {q}"
                );
                assert_eq!(q["used_idx"], q["next_used"], "{q}");
                assert_eq!(
                    u64::from(wrap(&q["next_avail"], &q["next_used"])),
                    in_flight,
                    "{q}"
                );
                held += in_flight;
            }
            assert!(held > 0, "no request held: {queues}");
        },
    );
    assert_clean(&r);
    // The load's frontend has gone (the next connection's queues are not
    // set up yet); a new one makes 8 requests and waits for each.
    let mut guest = lab.client();
    for i in 0..8u64 {
        guest.read(i * 4096, 4096).unwrap();
    }
    let mut rpc = lab.rpc();
    let queues = rpc.ok("get_queues", json!({}))["queues"].clone();
    assert_eq!(queues.as_array().unwrap().len(), 2, "{queues}");
    let q = &queues[0];
    for k in ["avail_idx", "next_avail", "used_idx", "next_used"] {
        assert_eq!(q[k], 8, "{k}: {q}");
    }
    assert_eq!(q["in_flight"], 0, "{q}");
    assert!(
        q["kicks"].as_u64().unwrap() > 0 && q["calls"].as_u64().unwrap() > 0,
        "{q}"
    );
    assert!(q["spin_us"].is_u64(), "{q}");
    assert_invalid(rpc.call("get_queues", json!({"x": 1})), "x");
}
