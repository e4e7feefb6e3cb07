//! Online resize (issue 46) through the real daemon: `resize` with and
//! without a size, paths that disagree, a shrink refused without `force`,
//! a request past a shrunk end failed without reaching the device, the
//! capacity in `get_stats` and `/metrics`, and the path checker growing
//! the disk by itself once every path grew. (blkio reads the capacity once,
//! at connect: the guest's view is tests/vm/scenarios/resize.sh.)

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use vhost_mpath_tests::locate::ours_binary;
use vhost_mpath_tests::rpc::RpcClient;
use vhost_mpath_tests::{DiskSpec, PathSpec, Server, ServerKind, TempDir};

const MIB: u64 = 1 << 20;

/// Paths `a` and `b` on two images of `DISK_SIZE`, the RPC socket and
/// metrics; `watch_ms`: the size watch's period (0: off).
struct Two {
    server: Server,
    a: PathBuf,
    b: PathBuf,
    rpc: PathBuf,
    dir: TempDir,
}

impl Two {
    fn start(watch_ms: u64) -> Option<Two> {
        if kind() == ServerKind::Qsd {
            eprintln!("skipped: resize is ours only");
            return None;
        }
        let dir = TempDir::new("vhost-mpath-resize").unwrap();
        let a = dir.sparse_file("a.img", DISK_SIZE).unwrap();
        let b = dir.sparse_file("b.img", DISK_SIZE).unwrap();
        let rpc = dir.path().join("rpc.sock");
        let file = |f: &Path, n: &str| PathSpec::File {
            file: f.to_path_buf(),
            name: n.into(),
        };
        let mut spec = DiskSpec::with_paths(vec![file(&a, "a"), file(&b, "b")]);
        spec.ours_extra = vec![
            "--rpc-socket".into(),
            rpc.display().to_string(),
            "--metrics-listen".into(),
            "127.0.0.1:0".into(),
        ];
        let srv_dir = TempDir::new("vhost-mpath-srv").unwrap();
        let socket = srv_dir.path().join("vhost-user-blk.sock");
        // The size watch's period is an environment knob: through env(1).
        let mut args = vec![
            format!("VHOST_MPATH_SIZE_WATCH_MS={watch_ms}"),
            ours_binary().display().to_string(),
        ];
        args.extend(spec.ours_args(&socket));
        let server = Server::spawn(
            "vhost-mpath",
            Path::new("/usr/bin/env"),
            &args,
            srv_dir,
            socket,
        )
        .expect("starting the daemon");
        Some(Two {
            server,
            a,
            b,
            rpc,
            dir,
        })
    }

    fn rpc(&self) -> RpcClient {
        RpcClient::connect(&self.rpc).expect("rpc socket")
    }

    fn capacity(&self) -> u64 {
        self.rpc().ok("get_device", json!({}))["capacity_bytes"]
            .as_u64()
            .unwrap()
    }
}

impl Drop for Two {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- server log ---\n{}", self.server.log());
        }
    }
}

fn grow(file: &Path, size: u64) {
    std::fs::File::options()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(size)
        .unwrap();
}

#[track_caller]
fn refused(r: Result<Value, Value>, code: i64, what: &str) {
    let e = r.expect_err("refused");
    assert_eq!(e["code"], code, "{e}");
    let m = e["message"].as_str().unwrap_or_default();
    assert!(m.contains(what), "the message must say {what:?}: {m}");
}

fn path_size(rpc: &mut RpcClient, name: &str) -> u64 {
    let v = rpc.ok("get_paths", json!({}));
    v["paths"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap()["size_bytes"]
        .as_u64()
        .unwrap()
}

fn metrics_capacity(rpc: &mut RpcClient) -> u64 {
    let addr = rpc.ok("get_device", json!({}))["metrics_listen"]
        .as_str()
        .unwrap()
        .to_string();
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("vhost_mpath_device_capacity_bytes "))
        .unwrap_or_else(|| panic!("no capacity in /metrics:\n{text}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn resize_takes_the_size_every_path_agrees_on_and_refuses_the_rest() {
    let Some(t) = Two::start(0) else { return };
    let mut rpc = t.rpc();
    let dev =
        |rpc: &mut RpcClient| rpc.ok("get_stats", json!({}))["device"]["capacity_bytes"].clone();
    assert_eq!(dev(&mut rpc), DISK_SIZE);
    let r = rpc.ok("resize", json!({}));
    assert_eq!(r["changed"], false, "{r}");

    // One path grown: they disagree, nothing changes; get_paths shows it.
    grow(&t.a, 96 * MIB);
    refused(rpc.call("resize", json!({})), -32000, "disagree");
    assert_eq!(t.capacity(), DISK_SIZE);
    assert_eq!(path_size(&mut rpc, "a"), 96 * MIB);
    assert_eq!(path_size(&mut rpc, "b"), DISK_SIZE);
    // A size asked for must be held by every path.
    refused(
        rpc.call("resize", json!({"size": 96 * MIB})),
        -32000,
        "path b holds",
    );

    // Both grown: taken, in get_device, get_stats and /metrics.
    grow(&t.b, 96 * MIB);
    let r = rpc.ok("resize", json!({}));
    assert_eq!(
        (
            r["old_capacity_bytes"].as_u64(),
            r["capacity_bytes"].as_u64()
        ),
        (Some(DISK_SIZE), Some(96 * MIB)),
        "{r}"
    );
    assert_eq!(r["changed"], true, "{r}");
    // No frontend connected: nobody to tell.
    assert_eq!(r["frontend"], "no-channel", "{r}");
    assert_eq!(dev(&mut rpc), 96 * MIB);
    assert_eq!(metrics_capacity(&mut rpc), 96 * MIB);
    let log = t.server.log();
    assert!(
        log.contains(&format!(
            "capacity changed from {DISK_SIZE} to {}",
            96 * MIB
        )),
        "{log}"
    );

    // Bad sizes and fields.
    refused(
        rpc.call("resize", json!({"size": 96 * MIB + 100})),
        -32602,
        "block size",
    );
    refused(rpc.call("resize", json!({"colour": 1})), -32602, "colour");
    // A new path must have the new size.
    let small = t.dir.sparse_file("small.img", DISK_SIZE).unwrap();
    refused(
        rpc.call(
            "add_path",
            json!({"device": small.display().to_string(), "name": "c"}),
        ),
        -32602,
        "differs",
    );

    // The two images are two disks' worth of data: I/O on one path only.
    rpc.ok("set_path", json!({"name": "b", "state": "offline"}));
    // A client that connects now sees 96 MiB; the last MiB is writable.
    let mut client = connect(&t.server, 1);
    assert_eq!(client.capacity(), 96 * MIB);
    let data = vec![0x5au8; 4096];
    client
        .write(95 * MIB, &data)
        .expect("write in the grown region");
    assert_eq!(client.read(95 * MIB, 4096).expect("read back"), data);

    // Shrinking: refused without force, the capacity stays.
    refused(
        rpc.call("resize", json!({"size": DISK_SIZE})),
        -32000,
        "force",
    );
    assert_eq!(t.capacity(), 96 * MIB);
    let r = rpc.ok("resize", json!({"size": DISK_SIZE, "force": true}));
    assert_eq!(r["capacity_bytes"], DISK_SIZE, "{r}");
    // blkio still believes 96 MiB: a request past the new end fails and
    // never reaches the device.
    let at_95 = || {
        let mut b = vec![0u8; 4096];
        std::fs::File::open(&t.a)
            .unwrap()
            .read_exact_at(&mut b, 95 * MIB)
            .unwrap();
        b
    };
    let before = at_95();
    assert_device_error(
        client.write(95 * MIB, &[0xa5u8; 4096]),
        "write past the shrunk end",
    );
    assert_device_error(client.read(95 * MIB, 4096), "read past the shrunk end");
    assert_eq!(before, at_95(), "the device was written past the new end");
    // Within the end, as before.
    client.write(0, &data).expect("write within the end");
    assert_eq!(dev(&mut rpc), DISK_SIZE);
    assert_eq!(metrics_capacity(&mut rpc), DISK_SIZE);
}

#[test]
fn the_checker_grows_the_disk_once_every_path_grew() {
    let Some(t) = Two::start(200) else { return };
    let mut rpc = t.rpc();
    grow(&t.a, 80 * MIB);
    // Only one: the capacity stays, the disagreement is shown and logged once.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(t.capacity(), DISK_SIZE);
    assert_eq!(path_size(&mut rpc, "a"), 80 * MIB);
    let log = t.server.log();
    assert_eq!(log.matches("capacity kept at").count(), 1, "{log}");

    grow(&t.b, 80 * MIB);
    wait_for(
        "the checker to grow the disk",
        Duration::from_secs(5),
        || t.capacity() == 80 * MIB,
    );
    let log = t.server.log();
    assert!(log.contains("every path grew to 83886080 bytes"), "{log}");
    assert_eq!(
        log.matches("capacity changed from").count(),
        1,
        "logged once: {log}"
    );
    // Shrunk files are not followed without force.
    grow(&t.a, DISK_SIZE);
    grow(&t.b, DISK_SIZE);
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(t.capacity(), 80 * MIB);
    assert!(t.server.log().contains("refused"), "{}", t.server.log());
}
