//! Two block-device paths with page caches of their own (two loop devices
//! over one image, as two SCSI paths of one LUN): with guest buffers that
//! O_DIRECT cannot take as they are, every read sees the last write
//! whichever path carries each. Needs root and `losetup`; skipped without.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;
use vhost_mpath_tests::pattern::pattern;
use vhost_mpath_tests::{DiskSpec, PathSpec, TempDir};

/// A loop device over a file, detached when dropped.
struct Loop(String);

impl Loop {
    fn new(backing: &std::path::Path) -> Option<Loop> {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(backing)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "skipped: no loop device ({})",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Loop(String::from_utf8(out.stdout).ok()?.trim().to_string()))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn unaligned_guest_buffers_stay_coherent_across_two_block_device_paths() {
    if kind() == vhost_mpath_tests::ServerKind::Qsd {
        eprintln!("skipped: multipath is ours only");
        return;
    }
    let dir = TempDir::new("coherence").unwrap();
    let img = dir.sparse_file("lun.img", 16 * M as u64).unwrap();
    let (Some(a), Some(b)) = (Loop::new(&img), Loop::new(&img)) else {
        return;
    };
    let mut spec = DiskSpec::with_paths(vec![
        PathSpec::Raw(format!("{},name=a", a.0)),
        PathSpec::Raw(format!("{},name=b", b.0)),
    ]);
    // Each request on the other path than the one before.
    spec.ours_extra = vec!["--policy".into(), "round-robin".into()];
    let server = launch(&spec);
    let mut client = connect(&server, 1);
    // Segment lengths no O_DIRECT takes (the total is whole sectors).
    let write_lens = [100usize, 412, 1000, 24, 3000, 584];
    let read_lens = [584usize, 3000, 24, 1000, 412, 100];
    let total: usize = write_lens.iter().sum();
    for round in 0..3u64 {
        for i in 0..8u64 {
            let offset = i * 64 * K as u64;
            let data = pattern(round * 100 + i, offset, total);
            let mut segments = Vec::new();
            let mut at = 0;
            for &len in &write_lens {
                segments.push(&data[at..at + len]);
                at += len;
            }
            client.writev(offset, &segments).expect("writev");
            // Twice: the read lands on each path once.
            for _ in 0..2 {
                let got = client.readv(offset, &read_lens).expect("readv");
                assert_bytes(
                    &got,
                    &data,
                    &format!("round {round}, extent {i}: read after write"),
                );
            }
        }
    }
    client.flush().expect("flush");
    // Written through to the image (nothing left in one node's page cache).
    let f = std::fs::File::open(&img).unwrap();
    for i in 0..8u64 {
        use std::os::unix::fs::FileExt;
        let offset = i * 64 * K as u64;
        let mut got = vec![0u8; total];
        f.read_exact_at(&mut got, offset).unwrap();
        assert_bytes(
            &got,
            &pattern(200 + i, offset, total),
            "the image after flush",
        );
    }
}

/// A path that may use its file's page cache (`direct=off`, or a filesystem
/// without O_DIRECT) beside a path to another file (another mount of the
/// image, a block device) would not see that path's writes: refused, at
/// start-up and by `add_path`.
#[test]
fn a_page_cache_beside_another_file_is_refused() {
    if kind() == vhost_mpath_tests::ServerKind::Qsd {
        eprintln!("skipped: multipath is ours only");
        return;
    }
    let dir = TempDir::new("coherence-cache").unwrap();
    let a = dir.sparse_file("a.img", 4 * M as u64).unwrap();
    let b = dir.sparse_file("b.img", 4 * M as u64).unwrap();
    let sock = dir.path().join("s.sock");
    let log = dir.path().join("log");
    let mut child = Command::new(vhost_mpath_tests::locate::ours_binary())
        .arg("--socket-path")
        .arg(&sock)
        .arg("--path")
        .arg(format!("{},direct=off", a.display()))
        .arg("--path")
        .arg(&b)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the daemon started: {}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("page cache") && err.contains("not the same file"),
        "{err}"
    );

    // Through the control plane: the lab's paths share one image.
    let Some(lab) = Lab::start("", "", &[]) else {
        return;
    };
    let other = lab.dir.sparse_file("other.img", DISK_SIZE).unwrap();
    let mut rpc = lab.rpc();
    let e = rpc
        .call(
            "add_path",
            serde_json::json!({"device": other.display().to_string(), "name": "c", "direct": false}),
        )
        .expect_err("a page-cache path to another file");
    assert!(e.to_string().contains("page cache"), "{e}");
    // The same image without O_DIRECT is one page cache: fine.
    rpc.ok(
        "add_path",
        serde_json::json!({"device": lab.img.display().to_string(), "name": "d", "direct": false}),
    );
}
