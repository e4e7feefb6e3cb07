//! Shared fixtures for the disk tests: a sparse image in a temp dir, served by the
//! server that `TEST_SERVER` selects (our daemon unless `TEST_SERVER=qsd`).

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vhost_mpath_tests::pattern::pattern;
use vhost_mpath_tests::rpc::RpcClient;
use vhost_mpath_tests::verify::{VerifyLoad, VerifyReport};
use vhost_mpath_tests::{
    Client, ClientOptions, DiskSpec, OpError, PathSpec, Server, ServerKind, TempDir,
};

pub const DISK_SIZE: u64 = 64 << 20;
pub const K: usize = 1024;
pub const M: usize = 1024 * 1024;

pub fn kind() -> ServerKind {
    ServerKind::from_env()
}

/// A backing image and the server that serves it.
pub struct Fixture {
    pub server: Server,
    pub img: PathBuf,
    _dir: TempDir,
}

impl Fixture {
    /// A `DISK_SIZE` sparse image, one path (`name=a`), shaped by `customize`.
    pub fn new(customize: impl FnOnce(DiskSpec) -> DiskSpec) -> Fixture {
        Fixture::sized(DISK_SIZE, customize)
    }

    pub fn sized(size: u64, customize: impl FnOnce(DiskSpec) -> DiskSpec) -> Fixture {
        Fixture::in_dir(&std::env::temp_dir(), size, customize)
    }

    /// As [`Fixture::sized`], the image in a fresh directory under `base`
    /// (`/dev/shm`: a file in memory).
    pub fn in_dir(
        base: &std::path::Path,
        size: u64,
        customize: impl FnOnce(DiskSpec) -> DiskSpec,
    ) -> Fixture {
        let dir = TempDir::new_in(base, "vhost-mpath-test").expect("temp dir");
        let img = dir.sparse_file("disk.img", size).expect("image");
        let spec = customize(DiskSpec::file(&img));
        let server = launch(&spec);
        Fixture {
            server,
            img,
            _dir: dir,
        }
    }

    /// The same image served through two paths, `a` and `b`.
    pub fn two_paths(num_queues: u16) -> Fixture {
        Fixture::new(|spec| {
            let mut paths = spec.paths.clone();
            if let Some(PathSpec::File { file, .. }) = spec.paths.first() {
                paths.push(PathSpec::File {
                    file: file.clone(),
                    name: "b".into(),
                });
            }
            DiskSpec::with_paths(paths).num_queues(num_queues)
        })
    }

    pub fn connect(&self, num_queues: usize) -> Client {
        connect(&self.server, num_queues)
    }

    /// Reads the backing file directly, bypassing the server.
    pub fn file_bytes(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        File::open(&self.img)
            .expect("open image")
            .read_exact_at(&mut buf, offset)
            .expect("read image");
        buf
    }

    pub fn file_len(&self) -> u64 {
        std::fs::metadata(&self.img).expect("stat image").len()
    }

    /// Writes `pattern(seed, offset, len)` straight into the backing file.
    pub fn seed_file(&self, seed: u64, offset: u64, len: usize) {
        File::options()
            .write(true)
            .open(&self.img)
            .expect("open image")
            .write_all_at(&pattern(seed, offset, len), offset)
            .expect("write image");
    }
}

impl Drop for Fixture {
    /// A failing test shows what the server printed.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- server log ---\n{}", self.server.log());
        }
    }
}

pub fn launch(spec: &DiskSpec) -> Server {
    spec.launch(kind())
        .unwrap_or_else(|e| panic!("starting the {} server: {e}", kind().name()))
}

pub fn connect(server: &Server, num_queues: usize) -> Client {
    connect_with(
        server,
        &ClientOptions {
            num_queues,
            ..ClientOptions::default()
        },
    )
}

pub fn connect_with(server: &Server, opts: &ClientOptions) -> Client {
    Client::connect_with(server.socket(), opts).unwrap_or_else(|e| {
        panic!(
            "connecting to {}: {e} (errno {})\n--- server log ---\n{}",
            server.socket().display(),
            e.errno(),
            server.log()
        )
    })
}

/// Asserts equal bytes, reporting the first difference instead of two huge dumps.
#[track_caller]
pub fn assert_bytes(actual: &[u8], expected: &[u8], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    if let Some(i) = actual.iter().zip(expected).position(|(a, e)| a != e) {
        panic!(
            "{what}: first difference at byte {i}: got {:#04x}, expected {:#04x}",
            actual[i], expected[i]
        );
    }
}

#[track_caller]
pub fn assert_zeroes(actual: &[u8], what: &str) {
    assert_bytes(actual, &vec![0u8; actual.len()], what);
}

/// Writes each `(offset, len)` with a pattern, flushes, reads it back and checks the
/// backing file too.
pub fn write_flush_verify(fx: &Fixture, client: &mut Client, extents: &[(u64, usize)]) {
    for (i, &(offset, len)) in extents.iter().enumerate() {
        client
            .write(offset, &pattern(i as u64, offset, len))
            .unwrap_or_else(|e| panic!("write {len} at {offset}: {e}"));
    }
    client.flush().expect("flush");
    for (i, &(offset, len)) in extents.iter().enumerate() {
        let expected = pattern(i as u64, offset, len);
        let got = client.read(offset, len).expect("read");
        assert_bytes(&got, &expected, &format!("read {len} at {offset}"));
        assert_bytes(&fx.file_bytes(offset, len), &expected, "backing file");
    }
}

#[track_caller]
pub fn assert_device_error(r: Result<impl std::fmt::Debug, OpError>, what: &str) {
    match r {
        Err(e) => assert!(e.from_device() && e.errno == libc::EIO, "{what}: {e}"),
        Ok(v) => panic!("{what}: succeeded ({v:?})"),
    }
}

/// Our daemon with two file paths, `a` and `b`, on one image, two queues,
/// the JSON-RPC socket and `--lab` (runtime faults).
pub struct Lab {
    pub server: Server,
    pub img: PathBuf,
    pub rpc: PathBuf,
    pub dir: TempDir,
}

impl Lab {
    /// Paths `a` and `b` on one image; `a_opts`/`b_opts` are extra path options.
    pub fn start(a_opts: &str, b_opts: &str, extra: &[&str]) -> Option<Lab> {
        if kind() == ServerKind::Qsd {
            eprintln!("skipped: multipath failover is ours only");
            return None;
        }
        let dir = TempDir::new("vhost-mpath-lab").unwrap();
        let img = dir.sparse_file("disk.img", DISK_SIZE).unwrap();
        let rpc = dir.path().join("rpc.sock");
        let spec =
            |name: &str, opts: &str| PathSpec::Raw(format!("{},name={name}{opts}", img.display()));
        let mut disk =
            DiskSpec::with_paths(vec![spec("a", a_opts), spec("b", b_opts)]).num_queues(2);
        disk.ours_extra = vec![
            "--rpc-socket".into(),
            rpc.display().to_string(),
            "--lab".into(),
            "--recovery-probes".into(),
            "1".into(),
        ];
        disk.ours_extra.extend(extra.iter().map(|s| s.to_string()));
        let server = launch(&disk);
        Some(Lab {
            server,
            img,
            rpc,
            dir,
        })
    }

    pub fn rpc(&self) -> RpcClient {
        RpcClient::connect(&self.rpc).expect("rpc socket")
    }

    pub fn client(&self) -> Client {
        connect(&self.server, 2)
    }

    /// Runs `during` on another thread after `after`, while the load runs
    /// for `total` on this one.
    pub fn load_with(
        &self,
        total: Duration,
        after: Duration,
        during: impl FnOnce(RpcClient) + Send + 'static,
    ) -> VerifyReport {
        let mut client = self.client();
        let rpc = self.rpc();
        let t = thread::spawn(move || {
            thread::sleep(after);
            during(rpc);
        });
        let load = VerifyLoad::new(0, 64 * K, 64);
        let report = load.run(&mut client, total);
        t.join().expect("fault thread");
        eprintln!("{report:?}");
        // The backing file holds the last round.
        let last = report.rounds - 1;
        for i in [0, 31, 63] {
            assert_bytes(
                &self.file_bytes((i * 64 * K) as u64, 64 * K),
                &load.expected(last, i),
                "backing file after the load",
            );
        }
        report
    }

    pub fn file_bytes(&self, offset: u64, len: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&self.img).unwrap();
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, offset).unwrap();
        buf
    }

    pub fn stats(&self) -> Value {
        self.rpc().ok("get_stats", json!({}))
    }
}

impl Drop for Lab {
    /// A failing test shows what the daemon printed.
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("--- server log ---\n{}", self.server.log());
        }
    }
}

pub fn assert_clean(r: &VerifyReport) {
    assert_eq!(r.errors, 0, "the client saw errors: {r:?}");
    assert_eq!(r.corrupt_sectors, 0, "corrupt sectors: {r:?}");
    assert!(r.rounds >= 2, "the load barely ran: {r:?}");
}

pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}
