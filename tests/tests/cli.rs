//! The daemon's command line and start-up, as an operator meets them:
//! capability document, clear one-line errors with exit code 2, an inherited
//! listening socket (`--fd`), the configuration file with its image, and a
//! `--version` that CHANGELOG.md describes.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use vhost_mpath_tests::locate::{ours_binary, workspace_root};
use vhost_mpath_tests::pattern::pattern;
use vhost_mpath_tests::procfs::settled_threads_named;
use vhost_mpath_tests::{Client, TempDir};

fn run(args: &[&str]) -> Output {
    Command::new(ours_binary())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run vhost-mpath")
}

/// Runs a command that must fail at start-up; returns its stderr.
fn start_error(args: &[&str]) -> String {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line expected: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn print_capabilities_is_the_vhost_user_document() {
    let out = run(&["--print-capabilities"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // The document vhost-user.rst describes: a type and a feature list.
    assert!(text.contains("\"type\": \"block\""), "{text}");
    assert!(text.contains("\"read-only-config\""), "{text}");
    let opens = text.matches('{').count();
    assert_eq!(opens, text.matches('}').count(), "{text}");
}

#[test]
fn start_up_errors_are_one_line_with_exit_code_2() {
    let dir = TempDir::new("cli").unwrap();
    let sock = dir.path().join("s.sock");
    let sock = sock.to_str().unwrap();
    let a = dir.sparse_file("a.img", 1 << 20).unwrap();
    let b = dir.sparse_file("b.img", 2 << 20).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());

    let err = start_error(&["--socket-path", sock, "--path", "/nonexistent/disk.img"]);
    assert!(err.contains("/nonexistent/disk.img"), "{err}");
    let err = start_error(&[
        "--socket-path",
        sock,
        "--path",
        a,
        "--path",
        &format!("{b},name=slow"),
    ]);
    assert!(
        err.contains("slow") && err.contains(b),
        "mismatch must name the path: {err}"
    );
    start_error(&["--socket-path", sock, "--path", &format!("{a},colour=blue")]);
    start_error(&["--socket-path", sock, "--path", a, "--policy", "fastest"]);
    start_error(&["--socket-path", sock, "--path", a, "--queue-size", "100"]);
    start_error(&["--socket-path", sock, "--path", a, "--num-queues", "0"]);
    start_error(&["--socket-path", sock, "--path", "null:12Q"]);
    start_error(&["--socket-path", sock]);
    start_error(&["--path", a]);
    start_error(&["--fd", "99", "--path", a]);
    assert!(!dir.path().join("s.sock").exists());
}

#[test]
fn serves_an_inherited_listening_socket() {
    let dir = TempDir::new("cli-fd").unwrap();
    let img = dir.sparse_file("d.img", 8 << 20).unwrap();
    let sock = dir.path().join("fd.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let fd = listener.as_raw_fd();
    // SAFETY: clearing FD_CLOEXEC on our own open descriptor so the child inherits it.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        assert!(flags >= 0);
        assert_eq!(libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC), 0);
    }
    let mut child = Command::new(ours_binary())
        .args(["--fd", &fd.to_string(), "--path", img.to_str().unwrap()])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(listener);
    let mut client = Client::connect(&sock, 1).expect("connect through the inherited socket");
    let data = pattern(5, 0, 64 * 1024);
    client.write(0, &data).unwrap();
    assert_eq!(client.read(0, data.len()).unwrap(), data);
    drop(client);
    // SAFETY: plain kill(2) on our child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn config_file_creates_the_image_and_flags_override_it() {
    let dir = TempDir::new("cli-config").unwrap();
    let cfg = dir.path().join("disk.toml");
    std::fs::write(
        &cfg,
        "socket_path = \"cfg.sock\"\nnum_queues = 2\npolicy = \"round-robin\"\n\
         [image]\nfile = \"state/disk.img\"\nsize = \"16M\"\n\
         [[path]]\ndevice = \"state/disk.img\"\nname = \"a\"\n\
         [[path]]\ndevice = \"state/disk.img\"\nname = \"b\"\n",
    )
    .unwrap();
    let sock = dir.path().join("flag.sock");
    let mut child = Command::new(ours_binary())
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "--socket-path",
            sock.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !sock.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "socket never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let img = dir.path().join("state/disk.img");
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 16 << 20);
    let client = Client::connect(&sock, 2).expect("connect");
    assert_eq!(client.capacity(), 16 << 20);
    assert_eq!(client.info().max_queues, 2);
    drop(client);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !dir.path().join("cfg.sock").exists(),
        "--socket-path overrides the file"
    );
}

#[test]
fn the_demo_config_parses() {
    // The embedded default must stay valid: a bad key or path fails here.
    let demo = workspace_root().join("configs/demo.toml");
    let text = std::fs::read_to_string(&demo).unwrap();
    assert!(text.contains("[[path]]"));
    let out = run(&[
        "--config",
        demo.to_str().unwrap(),
        "--socket-path",
        "/dev/null/x",
        "--path",
        "null:1M",
    ]);
    // It gets as far as the socket (the paths were overridden): a socket error, not a config error.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("socket"), "{err}");
}

/// By default a daemon limited to one CPU (`taskset`, systemd's
/// `CPUAffinity=`) serves all its queues from one thread; `--queue-threads`
/// says otherwise.
#[test]
fn queue_threads_follow_the_cpus_the_daemon_may_use() {
    let dir = TempDir::new("vmp-cli-threads").unwrap();
    // The count once it reached `want` (or after 10 s), and a moment later.
    let threads = |name: &str, pin: bool, extra: &[&str], want: usize| -> usize {
        let sock = dir.path().join(name);
        let mut cmd = if pin {
            let mut c = Command::new("taskset");
            c.args(["-c", "0"]).arg(ours_binary());
            c
        } else {
            Command::new(ours_binary())
        };
        let mut child = cmd
            .args(["--socket-path", sock.to_str().unwrap()])
            .args(["--path", "null:1M", "--num-queues", "2"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start vhost-mpath");
        // The queue threads start with the listening socket.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sock.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let n = settled_threads_named(child.id(), "queue", want, left);
        let _ = child.kill();
        let _ = child.wait();
        n
    };
    assert_eq!(
        threads("pinned.sock", true, &[], 1),
        1,
        "one CPU: one thread"
    );
    assert_eq!(
        threads("given.sock", true, &["--queue-threads", "2"], 2),
        2,
        "--queue-threads wins"
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(threads("free.sock", false, &[], cpus.min(2)), cpus.min(2));
}

/// The newest released version CHANGELOG.md names (`## [X.Y.Z] - DATE`, the
/// first heading after `## [Unreleased]`).
fn changelog_newest_release() -> String {
    let path = workspace_root().join("CHANGELOG.md");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.strip_prefix("## ["))
        .filter_map(|l| l.split_once(']').map(|(v, _)| v))
        .find(|v| *v != "Unreleased")
        .unwrap_or_else(|| panic!("{}: no released version", path.display()))
        .to_string()
}

/// A bug report quotes `--version`; it must be a version the changelog
/// describes, so the two cannot drift apart.
#[test]
fn version_is_the_changelog_s_newest_release() {
    let out = run(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    let newest = changelog_newest_release();
    assert_eq!(printed.trim(), format!("vhost-mpath {newest}"));
}
