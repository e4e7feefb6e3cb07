//! Who can reach the daemon: the vhost-user and JSON-RPC sockets are born
//! 0600 (0660 for a group) whatever the umask, nothing at their paths is
//! followed or clobbered, the JSON-RPC server serves only root, its own
//! user and the group, and the metrics endpoint neither grows threads nor
//! keeps silent clients.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::json;
use vhost_mpath_tests::listen::is_listening;
use vhost_mpath_tests::locate::ours_binary;
use vhost_mpath_tests::rpc::RpcClient;
use vhost_mpath_tests::TempDir;

/// The `nobody` user and group.
const NOBODY: u32 = 65534;
/// A group that exists everywhere and that `nobody` is not in.
const GROUP: &str = "daemon";

/// Switching users and giving files away need root (the tests' usual user).
fn root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned));
    if euid.as_deref() != Some("0") {
        eprintln!("skipped: needs root");
        return false;
    }
    true
}

fn group_id() -> u32 {
    std::fs::read_to_string("/etc/group")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&GROUP)).then(|| f.get(2)?.parse().ok())?
        })
        .expect("a daemon group in /etc/group")
}

/// A daemon started through `sh` with umask 000.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Starts the daemon under umask 000 and waits for `wait_for` to listen;
    /// `Err(log)` when it exits instead.
    fn start(dir: &Path, args: &[&str], wait_for: &[&Path]) -> Result<Daemon, String> {
        let log = dir.join("daemon.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new("sh")
            .arg("-c")
            .arg("umask 0; exec \"$0\" \"$@\"")
            .arg(ours_binary())
            .args(["--path", "null:8M"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn the daemon");
        let mut d = Daemon { child, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = d.child.try_wait().unwrap() {
                return Err(format!("exited with {status}: {}", d.log()));
            }
            if wait_for.iter().all(|p| is_listening(p)) {
                return Ok(d);
            }
            assert!(Instant::now() < deadline, "not listening: {}", d.log());
            sleep(Duration::from_millis(10));
        }
    }

    /// Starts the daemon and waits for it to exit; its log if it did
    /// within 20 s, `None` if it kept running.
    fn refused(dir: &Path, args: &[&str]) -> Option<String> {
        let mut d = match Daemon::start(dir, args, &[]) {
            Ok(d) => d,
            Err(exited) => return Some(exited),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if d.child.try_wait().unwrap().is_some() {
                return Some(d.log());
            }
            sleep(Duration::from_millis(10));
        }
        None
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.child.id()))
            .unwrap()
            .count()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn sockets(dir: &TempDir) -> (PathBuf, PathBuf) {
    (dir.path().join("vhost.sock"), dir.path().join("rpc.sock"))
}

fn args<'a>(vhost: &'a Path, rpc: &'a Path) -> Vec<&'a str> {
    vec![
        "--socket-path",
        vhost.to_str().unwrap(),
        "--rpc-socket",
        rpc.to_str().unwrap(),
    ]
}

#[test]
fn sockets_are_0600_even_under_umask_000() {
    let dir = TempDir::new("sockets-umask").unwrap();
    let (vhost, rpc) = sockets(&dir);
    let d = Daemon::start(dir.path(), &args(&vhost, &rpc), &[&vhost, &rpc]).unwrap();
    assert_eq!(mode(&vhost), 0o600, "vhost-user socket; log: {}", d.log());
    assert_eq!(mode(&rpc), 0o600, "JSON-RPC socket; log: {}", d.log());
}

#[test]
fn the_group_options_make_the_sockets_0660_for_the_group() {
    if !root() {
        return;
    }
    let dir = TempDir::new("sockets-group").unwrap();
    let (vhost, rpc) = sockets(&dir);
    let mut a = args(&vhost, &rpc);
    a.extend(["--socket-group", GROUP, "--rpc-socket-group", GROUP]);
    let d = Daemon::start(dir.path(), &a, &[&vhost, &rpc]).unwrap();
    for p in [&vhost, &rpc] {
        assert_eq!(mode(p), 0o660, "{}; log: {}", p.display(), d.log());
        assert_eq!(
            std::fs::metadata(p).unwrap().gid(),
            group_id(),
            "{}",
            p.display()
        );
    }
    drop(d);

    // The configuration file's key does the same.
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, format!("socket_group = \"{GROUP}\"\n")).unwrap();
    let d = Daemon::start(
        dir.path(),
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--socket-path",
            vhost.to_str().unwrap(),
        ],
        &[&vhost],
    )
    .unwrap();
    assert_eq!(mode(&vhost), 0o660, "log: {}", d.log());
    assert_eq!(std::fs::metadata(&vhost).unwrap().gid(), group_id());
}

#[test]
fn nothing_at_a_socket_path_is_followed_or_clobbered() {
    let dir = TempDir::new("sockets-symlink").unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (vhost, rpc) = sockets(&dir);
    let other = dir.path().join("other.sock");
    let unchanged = |what: &str| {
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious",
            "{what}"
        );
        assert_eq!(mode(&victim), 0o644, "{what}");
    };
    for (at, name) in [(&vhost, "vhost-user"), (&rpc, "JSON-RPC")] {
        // A symlink: refused, left in place, its target untouched.
        std::os::unix::fs::symlink(&victim, at).unwrap();
        let (v, r) = if at == &vhost {
            (&vhost, &other)
        } else {
            (&other, &rpc)
        };
        let err = Daemon::start(dir.path(), &args(v, r), &[v, r])
            .err()
            .unwrap_or_else(|| panic!("{name}: the daemon started over a symlink"));
        assert!(err.contains("symlink"), "{name}: {err}");
        assert!(std::fs::symlink_metadata(at)
            .unwrap()
            .file_type()
            .is_symlink());
        unchanged(name);
        std::fs::remove_file(at).unwrap();
        let _ = std::fs::remove_file(&other);

        // A regular file (an image given as the socket by mistake): kept.
        std::fs::write(at, "an image").unwrap();
        let err = Daemon::start(dir.path(), &args(v, r), &[v, r])
            .err()
            .unwrap_or_else(|| panic!("{name}: the daemon replaced a regular file"));
        assert!(err.contains("not a socket"), "{name}: {err}");
        assert_eq!(std::fs::read_to_string(at).unwrap(), "an image");
        std::fs::remove_file(at).unwrap();
        let _ = std::fs::remove_file(&other);
    }

    // A live socket is someone's: refused. A stale one is replaced.
    let live = UnixListener::bind(&vhost).unwrap();
    // Judged by the daemon exiting: the live listener answers for it.
    let err =
        Daemon::refused(dir.path(), &args(&vhost, &rpc)).expect("the daemon took a live socket");
    assert!(err.contains("listening"), "{err}");
    drop(live); // the file stays: now stale
    let _ = std::fs::remove_file(&rpc);
    let d = Daemon::start(dir.path(), &args(&vhost, &rpc), &[&vhost, &rpc]).unwrap();
    assert_eq!(mode(&vhost), 0o600, "{}", d.log());
}

/// `vhost-mpath rpc ... get_version` run as `nobody` with primary group `gid`.
fn rpc_as_nobody(rpc: &Path, gid: u32) -> Output {
    Command::new(ours_binary())
        .args(["rpc", "--rpc-socket", rpc.to_str().unwrap(), "get_version"])
        .uid(NOBODY)
        .gid(gid)
        .stdin(Stdio::null())
        .output()
        .expect("run the client as nobody")
}

#[test]
fn a_peer_with_another_uid_is_refused() {
    if !root() {
        return;
    }
    let dir = TempDir::new("sockets-peer").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (vhost, rpc) = sockets(&dir);
    let mut a = args(&vhost, &rpc);
    a.extend(["--rpc-socket-group", GROUP]);
    let d = Daemon::start(dir.path(), &a, &[&vhost, &rpc]).unwrap();
    // Even a socket an operator opened up to everyone serves no stranger.
    std::fs::set_permissions(&rpc, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = rpc_as_nobody(&rpc, NOBODY);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "nobody was served: {err}");
    assert!(
        err.contains("permission denied") && err.contains(&format!("uid {NOBODY}")),
        "a clear refusal expected: {err}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(d.log().contains("refused a client"), "{}", d.log());

    // A member of the configured group is served, as are root and the daemon's user.
    let out = rpc_as_nobody(&rpc, group_id());
    assert!(
        out.status.success(),
        "a group member: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut root = RpcClient::connect(&rpc).unwrap();
    assert_eq!(root.ok("get_version", json!({}))["name"], "vhost-mpath");
}

fn metrics_address(rpc: &Path) -> String {
    RpcClient::connect(rpc).unwrap().ok("get_device", json!({}))["metrics_listen"]
        .as_str()
        .expect("metrics_listen in get_device")
        .to_string()
}

#[test]
fn metrics_neither_grow_threads_nor_keep_silent_clients() {
    let dir = TempDir::new("sockets-metrics").unwrap();
    let (vhost, rpc) = sockets(&dir);
    let mut a = args(&vhost, &rpc);
    a.extend(["--metrics-listen", "127.0.0.1:0"]);
    let d = Daemon::start(dir.path(), &a, &[&vhost, &rpc]).unwrap();
    let addr = metrics_address(&rpc);
    let before = d.threads();
    let mut silent: Vec<TcpStream> = (0..16)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    sleep(Duration::from_millis(500));
    let during = d.threads();
    eprintln!("threads: {before} before 16 silent clients, {during} with them");
    assert!(
        during <= before + 1,
        "16 silent clients made {} threads from {before}",
        during
    );
    // A scraper is still answered, at worst after the silent ones queued
    // before it were dropped at their read deadline (5 s, a few threads).
    let t = Instant::now();
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.split(' ').nth(1) == Some("200"), "{text}");
    assert!(text.contains("vhost_mpath_path_requests_total"), "{text}");
    eprintln!(
        "scrape answered after {:?} behind 16 silent clients",
        t.elapsed()
    );
    // Every silent client was hung up on by now.
    for c in &mut silent {
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 16];
        match c.read(&mut b) {
            Ok(0) => {}
            Ok(n) => panic!("a silent client got {n} bytes"),
            Err(e) => assert!(
                e.kind() == std::io::ErrorKind::ConnectionReset,
                "a silent client is still held: {e}"
            ),
        }
    }
}
