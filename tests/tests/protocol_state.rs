//! What the vhost-user messages do to the device's state (issue 44): a
//! device reset, an inflight region that does not cover the rings, the
//! dirty log of the used ring's notification fields. A frontend of our own
//! (`vhost_mpath_tests::adversary`) against the real daemon.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use vhost_mpath_tests::adversary::blk::{header, S_OK, T_IN, UNWRITTEN};
use vhost_mpath_tests::adversary::health::{kill, serves_next_frontend};
use vhost_mpath_tests::adversary::split_ring::USED_RING;
use vhost_mpath_tests::adversary::{Adversary, AdversaryOptions, Desc, Outcome, Scene};
use vhost_mpath_tests::{DiskSpec, Server, ServerKind, TempDir};

/// These probe our daemon's own state handling: skipped against qsd.
fn ours() -> bool {
    if ServerKind::from_env() == ServerKind::Qsd {
        eprintln!("skipped: these probe our daemon");
        return false;
    }
    true
}

/// Publishes a 512-byte read of sector 16; its head and status address.
fn publish_read(a: &mut Adversary) -> (u16, u64) {
    let hdr = a.scratch(16, 0);
    a.ram.write(hdr, &header(T_IN, 16));
    let buf = a.scratch(512, UNWRITTEN);
    let st = a.scratch(1, UNWRITTEN);
    let head = a.chain(&[Desc::r(hdr, 16), Desc::w(buf, 512), Desc::w(st, 1)]);
    a.push(head);
    (head, st)
}

/// The `version` of queue `q`'s area in the inflight region (areas of
/// `queue_size` descriptors, 64-byte aligned; `version` at byte 8).
fn inflight_version(f: &File, q: u64, queue_size: u64) -> u16 {
    let area = (16 + 16 * queue_size).div_ceil(64) * 64;
    let mut b = [0u8; 2];
    f.read_exact_at(&mut b, q * area + 8).expect("read region");
    u16::from_le_bytes(b)
}

#[test]
fn reset_device_stops_the_rings_and_a_reinitialised_queue_starts_at_index_0() {
    if !ours() {
        return;
    }
    let opts = AdversaryOptions {
        inflight: true,
        reset_device: true,
        ..AdversaryOptions::default()
    };
    // The scene's own requests leave the device's used index at 4.
    let mut s = Scene::start("RESET_DEVICE, then re-initialised", &opts);
    let used_at = s.adv().ring().base + USED_RING;
    s.adv().reset_device().expect("RESET_DEVICE");

    // Stopped: a kick after the reset is not served, and nothing of guest
    // memory is written (status byte, used ring).
    let used_before = s.adv().ram.read(used_at, 4 + 8 * 8);
    let (_, st) = publish_read(s.adv());
    std::thread::sleep(Duration::from_millis(500));
    if s.adv().wait_used(Duration::from_millis(100)) != Outcome::Quiet {
        s.fail("a request made after RESET_DEVICE was served".into());
    }
    if s.adv().ram.read_u8(st) != UNWRITTEN {
        s.fail("the daemon wrote a status byte after RESET_DEVICE".into());
    }
    if s.adv().ram.read(used_at, 4 + 8 * 8) != used_before {
        s.fail("the daemon wrote the used ring after RESET_DEVICE".into());
    }

    // Re-initialised on zeroed rings at the same addresses: the first
    // request is served at used index 0, as for a new device.
    s.adv().reinitialize().expect("re-initialising the device");
    let (head, st) = publish_read(s.adv());
    let o = s.adv().wait_used(Duration::from_secs(5));
    let ring = s.adv().ring();
    let used_idx = ring.used_idx(&s.adv().ram);
    let first = ring.used_entry(&s.adv().ram, 0);
    if used_idx != 1 || first != (u32::from(head), 513) {
        s.fail(format!(
            "after re-initialising: used index {used_idx} (want 1), entry 0 {first:?} (want \
             ({head}, 513)); the device went on from its old used index ({o:?})"
        ));
    }
    if s.adv().ram.read_u8(st) != S_OK {
        s.fail(format!(
            "the read after re-initialising: {o:?}, status not OK"
        ));
    }
    // The inflight region was initialised again when the queue restarted:
    // a region left at version 0 is taken by the next daemon for a fresh
    // one, and whatever is in flight then is lost.
    let version = inflight_version(s.adv().inflight_file().expect("region"), 0, 256);
    if version != 1 {
        s.fail(format!(
            "the inflight region's version is {version} after the restart (want 1)"
        ));
    }
    s.healthy();
}

/// Our daemon serving `queues` queues on a fresh image.
fn daemon(queues: u16) -> (Server, TempDir) {
    let dir = TempDir::new("vhost-mpath-state").expect("temp dir");
    let img = dir.sparse_file("disk.img", 16 << 20).expect("image");
    let server = DiskSpec::file(&img)
        .num_queues(queues)
        .launch(ServerKind::Ours)
        .expect("daemon");
    (server, dir)
}

/// The frontend is refused (`opts`), and the daemon goes on serving the
/// next one.
fn refused_then_serves_the_next(queues: u16, opts: AdversaryOptions, what: &str) {
    let (server, _dir) = daemon(queues);
    match Adversary::connect(server.socket(), &opts) {
        Ok(_) => panic!(
            "{what}: accepted; its requests would be neither marked nor resubmitted\n--- log ---\n{}",
            server.log()
        ),
        Err(e) => eprintln!("{what}: refused ({e})"),
    }
    let pid = server.pid();
    if let Err(e) = serves_next_frontend(server.socket(), 1 << 20, Duration::from_secs(15), || {
        kill(pid)
    }) {
        panic!(
            "{what}: the next frontend: {e}\n--- log ---\n{}",
            server.log()
        );
    }
}

#[test]
fn rings_larger_than_the_inflight_region_are_refused() {
    if !ours() {
        return;
    }
    let opts = AdversaryOptions {
        inflight: true,
        queue_size: 256,
        inflight_region: Some((1, 8)),
        ..AdversaryOptions::default()
    };
    refused_then_serves_the_next(1, opts, "rings of 256 in a region of 8 descriptors");
}

#[test]
fn queues_beyond_the_inflight_region_are_refused() {
    if !ours() {
        return;
    }
    let opts = AdversaryOptions {
        num_queues: 2,
        inflight: true,
        inflight_region: Some((1, 256)),
        ..AdversaryOptions::default()
    };
    refused_then_serves_the_next(2, opts, "2 queues in a region of 1");
}

#[test]
fn a_started_ring_cannot_grow_past_the_inflight_region() {
    if !ours() {
        return;
    }
    let opts = AdversaryOptions {
        inflight: true,
        queue_size: 128,
        ..AdversaryOptions::default()
    };
    let mut s = Scene::start("SET_VRING_NUM past the inflight region", &opts);
    if s.adv().send_vring_num(0, 256).is_ok() {
        s.fail("a started ring of 128 grew to 256 in a region of 128 descriptors".into());
    }
    s.healthy();
}

fn marked(log: &File, page: u64) -> bool {
    let mut b = [0u8; 1];
    log.read_exact_at(&mut b, page / 8).expect("read log");
    b[0] & (1 << (page % 8)) != 0
}

/// With logging on and the log cleared, a kick on an empty ring: the
/// daemon writes only the used ring's notification field (avail_event with
/// EVENT_IDX, used.flags without), and its page must be marked.
fn notification_field_is_logged(event_idx: bool) {
    let opts = AdversaryOptions {
        dirty_log: true,
        event_idx,
        ..AdversaryOptions::default()
    };
    let field = if event_idx {
        "avail_event"
    } else {
        "used.flags"
    };
    let mut s = Scene::start(&format!("dirty log of {field}"), &opts);
    let log = s.adv().start_dirty_log().expect("dirty logging");
    assert_eq!(s.adv().event_idx(), event_idx, "EVENT_IDX negotiated");
    // Whatever the daemon still does after the scene's requests ends.
    std::thread::sleep(Duration::from_millis(300));
    let len = log.metadata().expect("log size").len() as usize;
    log.write_all_at(&vec![0u8; len], 0).expect("clear log");
    let ring = s.adv().ring();
    let offset = if event_idx {
        4 + 8 * u64::from(ring.size)
    } else {
        0
    };
    let addr = ring.base + USED_RING + offset;
    let before = s.adv().ram.read(addr, 2);
    s.adv().kick();
    std::thread::sleep(Duration::from_millis(300));
    let written = s.adv().ram.read(addr, 2) != before;
    if !marked(&log, addr >> 12) {
        s.fail(format!(
            "{field} at {addr:#x} (written by the daemon since: {written}) is not marked in the log"
        ));
    }
    s.healthy();
}

#[test]
fn while_logging_avail_event_writes_are_marked() {
    notification_field_is_logged(true);
}

#[test]
fn while_logging_used_flags_writes_are_marked() {
    notification_field_is_logged(false);
}

/// Inflight repair (issue 44, item 13): the daemon publishes used entries
/// while tracking in batches of one (last_batch_head, used entry and index,
/// inflight cleared, region's used index), so a crash leaves the used ring
/// at most one entry ahead of the region, and the next daemon clears that
/// one entry. Here the first daemon dies in exactly that window
/// (`VHOST_MPATH_DIAG_DIE_BEFORE_INFLIGHT_USED=2`: its second used entry is
/// on the ring, the region not yet told) with a third write still to
/// complete; after the restart every write completes exactly once.
#[test]
fn a_crash_between_the_used_ring_and_the_inflight_region_completes_each_once() {
    if !ours() {
        return;
    }
    const WRITES: u16 = 3;
    let dir = TempDir::new("vhost-mpath-state-batch").expect("temp dir");
    let img = dir.sparse_file("disk.img", 16 << 20).expect("image");
    let sock = dir.path().join("vhost.sock");
    let spawn = |n: u32, env: &[&str]| {
        let mut args: Vec<String> = env.iter().map(|e| e.to_string()).collect();
        args.push(
            vhost_mpath_tests::locate::ours_binary()
                .display()
                .to_string(),
        );
        args.extend([
            "--socket-path".into(),
            sock.display().to_string(),
            "--path".into(),
            format!("{},name=a", img.display()),
        ]);
        let d = TempDir::new(&format!("vhost-mpath-state-batch{n}")).expect("temp dir");
        Server::spawn(
            "vhost-mpath",
            std::path::Path::new("/usr/bin/env"),
            &args,
            d,
            sock.clone(),
        )
        .expect("daemon")
    };
    let first = spawn(1, &["VHOST_MPATH_DIAG_DIE_BEFORE_INFLIGHT_USED=2"]);
    let opts = AdversaryOptions {
        inflight: true,
        ..AdversaryOptions::default()
    };
    let mut adv = Adversary::connect(&sock, &opts).expect("connect");
    let mut heads = Vec::new();
    let mut status_at = Vec::new();
    for i in 0..WRITES {
        let hdr = adv.scratch(16, 0);
        adv.ram.write(
            hdr,
            &header(vhost_mpath_tests::adversary::blk::T_OUT, u64::from(i) * 8),
        );
        let data = adv.scratch(4096, i as u8 + 1);
        let st = adv.scratch(1, UNWRITTEN);
        heads.push(adv.chain(&[Desc::r(hdr, 16), Desc::r(data, 4096), Desc::w(st, 1)]));
        status_at.push(st);
    }
    for &h in &heads {
        adv.push(h);
    }
    let mut done = std::collections::BTreeMap::<u32, u32>::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !adv.closed() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(adv.closed(), "the daemon did not die\n{}", first.log());
    while let Outcome::Used { id, .. } = adv.wait_used(Duration::from_millis(100)) {
        *done.entry(id).or_default() += 1;
    }
    assert_eq!(
        done.values().sum::<u32>(),
        2,
        "used entries on the ring when the daemon died: {done:?}"
    );
    drop(first);
    let _ = std::fs::remove_file(&sock);

    let second = spawn(2, &[]);
    let mut adv = adv.reconnect(&sock).expect("reconnect");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        match adv.wait_used(Duration::from_millis(300)) {
            Outcome::Used { id, .. } => *done.entry(id).or_default() += 1,
            Outcome::Quiet if done.values().sum::<u32>() >= u32::from(WRITES) => break,
            _ => {}
        }
    }
    let want: std::collections::BTreeMap<u32, u32> =
        heads.iter().map(|&h| (u32::from(h), 1)).collect();
    assert_eq!(done, want, "head -> times completed\n{}", second.log());
    for &st in &status_at {
        assert_eq!(adv.ram.read_u8(st), S_OK, "a write's status");
    }
    let disk = std::fs::read(&img).expect("image");
    for i in 0..usize::from(WRITES) {
        assert!(
            disk[i * 4096..(i + 1) * 4096]
                .iter()
                .all(|&b| b == i as u8 + 1),
            "block {i} does not hold its write"
        );
    }
    drop(adv);
    let _ = second.terminate();
}
