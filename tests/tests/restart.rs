//! A daemon killed with SIGKILL while requests are in flight, a new one
//! started on the same socket, and the frontend reconnecting as QEMU does
//! (`reconnect=1`: same guest memory, rings and inflight region; each ring
//! rewound to its used index). Completions are out of order (path b holds
//! what it gets), so only inflight tracking completes every request exactly
//! once. The same run with `--no-inflight` is the negative control.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vhost_mpath_tests::adversary::blk::{header, SECTOR, S_OK, T_OUT, UNWRITTEN};
use vhost_mpath_tests::adversary::health::kill;
use vhost_mpath_tests::adversary::{Adversary, AdversaryOptions, Desc, Outcome};
use vhost_mpath_tests::locate::ours_binary;
use vhost_mpath_tests::{Server, TempDir};

const DISK: u64 = 16 << 20;
const REQUESTS: u16 = 8;
const LEN: u32 = 4096;

fn daemon(n: u32, socket: &Path, img: &Path, hang_b: bool, extra: &[&str]) -> Server {
    let dir = TempDir::new(&format!("vhost-mpath-restart{n}")).expect("temp dir");
    let mut args: Vec<String> = vec![
        "--socket-path".into(),
        socket.display().to_string(),
        "--lab".into(),
        "--policy".into(),
        "round-robin".into(),
        "--rr-min-io".into(),
        "1".into(),
        "--path".into(),
        format!("{},name=a", img.display()),
        "--path".into(),
        format!(
            "{},name=b{}",
            img.display(),
            if hang_b { ",hang" } else { "" }
        ),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    Server::spawn(
        "vhost-mpath",
        &ours_binary(),
        &args,
        dir,
        socket.to_path_buf(),
    )
    .expect("daemon")
}

/// Writes `REQUESTS` 4 KiB blocks (block i filled with i + 1) on one queue;
/// the daemon is killed once the fast path's half completed; a new daemon
/// (`extra` args) serves the reconnected frontend. Returns how often each
/// head was completed, and the status bytes.
/// How the first daemon ends.
#[derive(Clone, Copy, PartialEq)]
enum Stop {
    Kill,
    /// SIGTERM: must exit within `TERM_EXIT` although b holds requests
    /// (the next daemon resubmits them), not wait for them.
    Term,
}

const TERM_EXIT: Duration = Duration::from_secs(5);

fn crash_with_writes_in_flight(
    stop: Stop,
    extra: &[&str],
) -> (BTreeMap<u32, u32>, Vec<u8>, PathBuf, TempDir) {
    let dir = TempDir::new("vhost-mpath-restart").expect("temp dir");
    let img = dir.sparse_file("disk.img", DISK).expect("image");
    let sock = dir.path().join("vhost.sock");
    let first = daemon(1, &sock, &img, true, extra);
    let opts = AdversaryOptions {
        inflight: true,
        ..AdversaryOptions::default()
    };
    let mut adv = Adversary::connect(&sock, &opts).expect("connect");
    let mut status_at = Vec::new();
    let mut heads = Vec::new();
    for i in 0..REQUESTS {
        let hdr = adv.scratch(16, 0);
        adv.ram
            .write(hdr, &header(T_OUT, u64::from(i) * u64::from(LEN) / SECTOR));
        let data = adv.scratch(u64::from(LEN), i as u8 + 1);
        let status = adv.scratch(1, UNWRITTEN);
        let head = adv.chain(&[Desc::r(hdr, 16), Desc::r(data, LEN), Desc::w(status, 1)]);
        heads.push(head);
        status_at.push(status);
    }
    for &h in &heads {
        adv.push(h);
    }
    // Round-robin one each: a completes half, b holds the other half.
    let mut done: BTreeMap<u32, u32> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while done.values().sum::<u32>() < u32::from(REQUESTS / 2) && Instant::now() < deadline {
        if let Outcome::Used { id, .. } = adv.wait_used(Duration::from_millis(100)) {
            *done.entry(id).or_default() += 1;
        }
    }
    assert_eq!(
        done.values().sum::<u32>(),
        u32::from(REQUESTS / 2),
        "the fast path's half did not complete before the kill\n{}",
        first.log()
    );
    match stop {
        Stop::Kill => {
            kill(first.pid());
            drop(first);
        }
        Stop::Term => {
            let t0 = Instant::now();
            let status = first.terminate().expect("SIGTERM");
            let took = t0.elapsed();
            assert!(status.success(), "exit status {status}");
            assert!(
                took < TERM_EXIT,
                "SIGTERM with requests held took {took:?} (it waits for them)"
            );
        }
    }
    let _ = std::fs::remove_file(&sock);
    let second = daemon(2, &sock, &img, false, extra);
    let mut adv = adv.reconnect(&sock).expect("reconnect");
    assert!(
        adv.tracks_inflight(),
        "the daemon did not take inflight tracking"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match adv.wait_used(Duration::from_millis(300)) {
            Outcome::Used { id, .. } => *done.entry(id).or_default() += 1,
            Outcome::Quiet if done.values().sum::<u32>() >= u32::from(REQUESTS) => break,
            _ => {}
        }
    }
    let statuses = status_at.iter().map(|&a| adv.ram.read_u8(a)).collect();
    drop(adv);
    let _ = second.terminate();
    (done, statuses, img, dir)
}

#[test]
fn sigkill_with_writes_in_flight_completes_each_once_after_restart() {
    every_write_once(Stop::Kill);
}

#[test]
fn sigterm_exits_at_once_and_the_next_daemon_completes_what_was_held() {
    every_write_once(Stop::Term);
}

fn every_write_once(stop: Stop) {
    let (done, statuses, img, _dir) = crash_with_writes_in_flight(stop, &[]);
    let want: BTreeMap<u32, u32> = (0..u32::from(REQUESTS)).map(|h| (h * 3, 1)).collect();
    assert_eq!(done, want, "head -> times completed");
    assert!(statuses.iter().all(|&s| s == S_OK), "statuses {statuses:?}");
    let disk = std::fs::read(&img).expect("image");
    for i in 0..usize::from(REQUESTS) {
        let block = &disk[i * LEN as usize..(i + 1) * LEN as usize];
        assert!(
            block.iter().all(|&b| b == i as u8 + 1),
            "block {i} does not hold its write"
        );
    }
}

/// One write in flight (QD1); the daemon dies right after publishing its
/// used entry and before signalling the guest
/// (`VHOST_MPATH_DIAG_DIE_BEFORE_CALL=1`): nothing is left to resubmit,
/// and only the next daemon's signal on the call fd it is given tells the
/// guest. A guest waiting for that interrupt (virtio-blk has no timeout of
/// its own) would otherwise wait forever.
#[test]
fn a_completion_published_before_a_crash_is_signalled_by_the_next_daemon() {
    let dir = TempDir::new("vhost-mpath-restart-call").expect("temp dir");
    let img = dir.sparse_file("disk.img", DISK).expect("image");
    let sock = dir.path().join("vhost.sock");
    let first_dir = TempDir::new("vhost-mpath-restart-call1").expect("temp dir");
    let bin = ours_binary();
    let args: Vec<String> = vec![
        "VHOST_MPATH_DIAG_DIE_BEFORE_CALL=1".into(),
        bin.display().to_string(),
        "--socket-path".into(),
        sock.display().to_string(),
        "--path".into(),
        format!("{},name=a", img.display()),
    ];
    let first = Server::spawn(
        "vhost-mpath",
        Path::new("/usr/bin/env"),
        &args,
        first_dir,
        sock.clone(),
    )
    .expect("daemon");
    let opts = AdversaryOptions {
        inflight: true,
        // Every completion calls: no used_event to get wrong.
        event_idx: false,
        ..AdversaryOptions::default()
    };
    let mut adv = Adversary::connect(&sock, &opts).expect("connect");
    // Whatever the connection itself signalled.
    let _ = adv.call().read();
    let hdr = adv.scratch(16, 0);
    adv.ram.write(hdr, &header(T_OUT, 0));
    let data = adv.scratch(u64::from(LEN), 0x5a);
    let status = adv.scratch(1, UNWRITTEN);
    let head = adv.chain(&[Desc::r(hdr, 16), Desc::r(data, LEN), Desc::w(status, 1)]);
    adv.push(head);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !adv.closed() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(adv.closed(), "the daemon did not die\n{}", first.log());
    assert!(
        adv.call().read().is_err(),
        "the dying daemon signalled the guest: the window was not hit"
    );
    assert_eq!(adv.ram.read_u8(status), S_OK, "the write was not completed");
    drop(first);
    let _ = std::fs::remove_file(&sock);

    let second = daemon(2, &sock, &img, false, &[]);
    let mut adv = adv.reconnect(&sock).expect("reconnect");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut signalled = false;
    while !signalled && Instant::now() < deadline {
        signalled = adv.call().read().is_ok();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        signalled,
        "no interrupt within 5 s of the restart: the guest would wait forever\n{}",
        second.log()
    );
    match adv.wait_used(Duration::from_secs(1)) {
        Outcome::Used { id, .. } => assert_eq!(id, u32::from(head)),
        o => panic!("no used entry after the interrupt: {o:?}"),
    }
    let _ = second.terminate();
}
