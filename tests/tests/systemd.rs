//! systemd: the daemon under socket activation (`systemd-socket-activate`,
//! as a `.socket` unit starts it) serves a real frontend on the inherited
//! socket; `sd_notify` says READY=1 only once the disk is open and the
//! socket accepts, STOPPING=1 on SIGTERM, WATCHDOG=1 every half of
//! WATCHDOG_USEC; `systemd-analyze verify` accepts the shipped units.

use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use vhost_mpath_tests::locate::{ours_binary, workspace_root};
use vhost_mpath_tests::pattern::pattern;
use vhost_mpath_tests::procfs::holds_open;
use vhost_mpath_tests::{Client, TempDir};

const DISK_SIZE: u64 = 64 << 20;

fn tool(name: &str) -> PathBuf {
    for dir in ["/usr/bin", "/bin", "/usr/sbin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!(
        "{name} not found: it is in Debian 12's systemd package (tests/install-deps installs it)"
    );
}

/// A NOTIFY_SOCKET the test reads.
struct Notify {
    sock: UnixDatagram,
}

impl Notify {
    fn bind(path: &Path) -> Notify {
        let sock = UnixDatagram::bind(path).expect("bind NOTIFY_SOCKET");
        Notify { sock }
    }

    /// The next datagram, or None after `within`.
    fn next(&self, within: Duration) -> Option<String> {
        self.sock.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 4096];
        match self.sock.recv(&mut buf) {
            Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(_) => None,
        }
    }

    /// Waits for `state`, skipping watchdog pings; panics after `within`.
    fn expect(&self, state: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left.max(Duration::from_millis(1))) {
                Some(s) if s == state => return,
                Some(s) if s == "WATCHDOG=1" => continue,
                Some(s) => panic!("expected {state}, got {s:?}"),
                None => panic!("no {state} within {within:?}"),
            }
        }
    }
}

/// A started process that is killed if the test ends without waiting for it.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl std::ops::Deref for Guard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Guard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

fn wait_exit(child: &mut Child, within: Duration) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("did not exit within {within:?}");
        }
        sleep(Duration::from_millis(20));
    }
}

fn wait_for(path: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        sleep(Duration::from_millis(20));
    }
}

fn log_of(dir: &TempDir) -> String {
    std::fs::read_to_string(dir.path().join("daemon.log")).unwrap_or_default()
}

/// `systemd-socket-activate -l SOCKET [-E VAR=VALUE...] vhost-mpath ARGS`:
/// the socket unit's way of starting the daemon.
fn socket_activate(dir: &TempDir, socket: &Path, env: &[String], args: &[&str]) -> Guard {
    let log = std::fs::File::create(dir.path().join("daemon.log")).unwrap();
    let mut cmd = Command::new(tool("systemd-socket-activate"));
    cmd.arg("-l").arg(socket);
    for e in env {
        cmd.arg("-E").arg(e);
    }
    cmd.arg(ours_binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    Guard(cmd.spawn().expect("spawn systemd-socket-activate"))
}

#[test]
fn socket_activated_daemon_serves_a_frontend_and_notifies() {
    let dir = TempDir::new("vmp-systemd").unwrap();
    let img = dir.sparse_file("disk.img", DISK_SIZE).unwrap();
    let sock = dir.path().join("vhost.sock");
    let notify = Notify::bind(&dir.path().join("notify.sock"));
    let env = [format!(
        "NOTIFY_SOCKET={}",
        dir.path().join("notify.sock").display()
    )];
    let img_arg = format!("{},name=a", img.display());
    // No --socket-path, no --fd: the socket is fd 3, LISTEN_FDS=1.
    let mut child = socket_activate(&dir, &sock, &env, &["--path", &img_arg]);
    wait_for(&sock, Duration::from_secs(10));
    // systemd-socket-activate starts the daemon on the first connection,
    // as a .socket unit does.
    assert!(
        notify.next(Duration::from_millis(300)).is_none(),
        "a notification before any connection: the daemon should not run yet"
    );
    let mut client = Client::connect(&sock, 1)
        .unwrap_or_else(|e| panic!("blkio on the activated socket: {e}\n{}", log_of(&dir)));
    notify.expect("READY=1", Duration::from_secs(10));
    assert!(
        holds_open(child.id(), &img),
        "READY=1 but the image is not open"
    );
    let data = pattern(9, 0, 256 << 10);
    client.write(1 << 20, &data).expect("write");
    client.flush().expect("flush");
    assert_eq!(client.read(1 << 20, data.len()).expect("read"), data);
    drop(client);
    let on_disk = std::fs::read(&img).unwrap();
    assert_eq!(&on_disk[1 << 20..(1 << 20) + data.len()], &data[..]);

    // A second frontend on the same activated socket (QEMU reconnecting).
    let mut client = Client::connect(&sock, 1).expect("second frontend");
    assert_eq!(client.read(1 << 20, 4096).expect("read"), &data[..4096]);
    drop(client);

    signal(&child, libc::SIGTERM);
    notify.expect("STOPPING=1", Duration::from_secs(10));
    let st = wait_exit(&mut child, Duration::from_secs(30));
    assert!(st.success(), "exit {st:?}\n{}", log_of(&dir));
}

#[test]
fn ready_only_once_the_disk_is_open_and_the_socket_accepts() {
    let dir = TempDir::new("vmp-systemd").unwrap();
    let img = dir.sparse_file("disk.img", DISK_SIZE).unwrap();
    let sock = dir.path().join("vhost.sock");
    // The abstract namespace (`@name`), as systemd itself uses.
    let name = format!("vmp-notify-{}-{:?}", std::process::id(), Instant::now());
    let addr =
        <std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(
            name.as_bytes(),
        )
        .unwrap();
    let notify = Notify {
        sock: UnixDatagram::bind_addr(&addr).unwrap(),
    };
    let log = std::fs::File::create(dir.path().join("daemon.log")).unwrap();
    let mut child = Guard(
        Command::new(ours_binary())
            .arg("--socket-path")
            .arg(&sock)
            .arg("--path")
            .arg(format!("{},name=a", img.display()))
            .env("NOTIFY_SOCKET", format!("@{name}"))
            .env("WATCHDOG_USEC", "400000")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    notify.expect("READY=1", Duration::from_secs(20));
    // Freeze the daemon where READY=1 left it: whatever holds now held
    // when it said ready.
    signal(&child, libc::SIGSTOP);
    let open = holds_open(child.id(), &img);
    let accepts = UnixStream::connect(&sock).is_ok();
    signal(&child, libc::SIGCONT);
    assert!(open, "READY=1 before the image was open");
    assert!(accepts, "READY=1 before the socket accepted connections");

    // WATCHDOG_USEC=400ms: a ping every 200 ms.
    let start = Instant::now();
    let mut pings = 0;
    while start.elapsed() < Duration::from_secs(2) {
        match notify.next(Duration::from_millis(500)) {
            Some(s) if s == "WATCHDOG=1" => pings += 1,
            Some(s) => panic!("unexpected notification {s:?}"),
            None => break,
        }
    }
    assert!(
        (5..=14).contains(&pings),
        "{pings} WATCHDOG=1 in 2 s with WATCHDOG_USEC=400000 (expected about 10)"
    );

    signal(&child, libc::SIGTERM);
    notify.expect("STOPPING=1", Duration::from_secs(10));
    let st = wait_exit(&mut child, Duration::from_secs(30));
    assert!(st.success(), "exit {st:?}\n{}", log_of(&dir));
}

#[test]
fn no_ready_when_start_up_fails() {
    let dir = TempDir::new("vmp-systemd").unwrap();
    let notify = Notify::bind(&dir.path().join("notify.sock"));
    let out = Command::new(ours_binary())
        .arg("--socket-path")
        .arg(dir.path().join("vhost.sock"))
        .arg("--path")
        .arg(dir.path().join("missing.img"))
        .env("NOTIFY_SOCKET", dir.path().join("notify.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(notify.next(Duration::from_millis(200)), None);
}

#[test]
fn more_than_one_activated_socket_is_refused() {
    let dir = TempDir::new("vmp-systemd").unwrap();
    let img = dir.sparse_file("disk.img", DISK_SIZE).unwrap();
    let (a, b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let log = std::fs::File::create(dir.path().join("daemon.log")).unwrap();
    let mut child = Guard(
        Command::new(tool("systemd-socket-activate"))
            .arg("-l")
            .arg(&a)
            .arg("-l")
            .arg(&b)
            .arg(ours_binary())
            .arg("--path")
            .arg(&img)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    wait_for(&b, Duration::from_secs(10));
    let _trigger = UnixStream::connect(&a).unwrap();
    let st = wait_exit(&mut child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(2), "{}", log_of(&dir));
    assert!(log_of(&dir).contains("LISTEN_FDS=2"), "{}", log_of(&dir));
}

#[test]
fn a_datagram_socket_is_refused() {
    let dir = TempDir::new("vmp-systemd").unwrap();
    let img = dir.sparse_file("disk.img", DISK_SIZE).unwrap();
    let sock = dir.path().join("dgram.sock");
    let log = std::fs::File::create(dir.path().join("daemon.log")).unwrap();
    // A .socket unit with ListenDatagram= instead of ListenStream=.
    let mut child = Guard(
        Command::new(tool("systemd-socket-activate"))
            .arg("--datagram")
            .arg("-l")
            .arg(&sock)
            .arg(ours_binary())
            .arg("--path")
            .arg(&img)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    wait_for(&sock, Duration::from_secs(10));
    UnixDatagram::unbound()
        .unwrap()
        .send_to(b"wake up", &sock)
        .unwrap();
    let st = wait_exit(&mut child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(2), "{}", log_of(&dir));
    assert!(
        log_of(&dir).contains("not a listening Unix stream socket"),
        "{}",
        log_of(&dir)
    );
}

/// `systemd-analyze verify` on a copy of the shipped units whose ExecStart
/// names the built binary (verify checks that it exists). Anything it
/// prints about our units is a failure: it only warns about a bad setting.
fn verify(dir: &Path, units: &[&str]) -> Result<(), String> {
    let paths: Vec<PathBuf> = units.iter().map(|u| dir.join(u)).collect();
    let out = Command::new(tool("systemd-analyze"))
        .arg("verify")
        .arg("--man=no")
        .args(&paths)
        .output()
        .map_err(|e| format!("systemd-analyze: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let about_ours: Vec<&str> = text.lines().filter(|l| l.contains("vhost-mpath")).collect();
    if !out.status.success() || !about_ours.is_empty() {
        return Err(format!("status {:?}:\n{text}", out.status));
    }
    Ok(())
}

#[test]
fn systemd_analyze_verify_accepts_the_shipped_units() {
    let analyze = tool("systemd-analyze");
    // Without systemd as PID 1 verify still loads units offline; if the
    // container cannot even do that, say so instead of passing.
    if Command::new(&analyze).arg("--version").output().is_err() {
        eprintln!("SKIPPED: systemd-analyze cannot run here");
        return;
    }
    let src = workspace_root().join("configs/systemd");
    let dir = TempDir::new("vmp-units").unwrap();
    let bin = ours_binary().canonicalize().expect("built daemon");
    for unit in ["vhost-mpath@.service", "vhost-mpath@.socket"] {
        let text = std::fs::read_to_string(src.join(unit)).unwrap();
        let text = text.replace(
            "ExecStart=/usr/local/bin/vhost-mpath ",
            &format!("ExecStart={} ", bin.display()),
        );
        std::fs::write(dir.path().join(unit), text).unwrap();
    }
    let service = std::fs::read_to_string(dir.path().join("vhost-mpath@.service")).unwrap();
    assert!(
        service.contains(&format!("ExecStart={} ", bin.display())),
        "the shipped service no longer starts /usr/local/bin/vhost-mpath: update this test"
    );
    for needed in [
        "Type=notify",
        "Restart=on-failure",
        "/etc/vhost-mpath/%i.toml",
        "DeviceAllow=char-nvme-generic rw",
    ] {
        assert!(service.contains(needed), "service lacks {needed}");
    }
    // A system call filter must let the data path's calls through: the first
    // (allow) list names them, and no later line takes them away.
    let filters: Vec<&str> = service
        .lines()
        .filter_map(|l| l.strip_prefix("SystemCallFilter="))
        .collect();
    assert!(!filters.is_empty(), "service lacks SystemCallFilter=");
    for call in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
        assert!(
            filters[0].split_whitespace().any(|w| w == call),
            "the allow list {:?} lacks {call}",
            filters[0]
        );
        assert!(
            !filters[1..]
                .iter()
                .any(|f| f.starts_with('~') && f.contains(call)),
            "a deny list takes {call} away: {filters:?}"
        );
    }
    verify(
        dir.path(),
        &[
            "vhost-mpath@.service",
            "vhost-mpath@.socket",
            "vhost-mpath@disk0.service",
            "vhost-mpath@disk0.socket",
        ],
    )
    .unwrap_or_else(|e| panic!("systemd-analyze verify refused the shipped units: {e}"));

    // The check can fail: a unit with a bad setting is refused.
    std::fs::write(
        dir.path().join("vhost-mpath@.service"),
        service.replace("Type=notify", "Type=notifyy"),
    )
    .unwrap();
    assert!(
        verify(dir.path(), &["vhost-mpath@disk0.service"]).is_err(),
        "systemd-analyze verify accepted Type=notifyy"
    );
}
