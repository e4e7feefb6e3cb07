//! Shared fixtures for the disk tests: a sparse image in a temp dir, served by the
//! server that `TEST_SERVER` selects (our daemon unless `TEST_SERVER=qsd`).

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use vhost_mpath_tests::pattern::pattern;
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
        let dir = TempDir::new("vhost-mpath-test").expect("temp dir");
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
