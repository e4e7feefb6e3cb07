//! Live migration's dirty log through the socket, with a frontend of our
//! own doing what QEMU does when it migrates: SET_LOG_BASE with a memfd
//! bitmap, VHOST_F_LOG_ALL in SET_FEATURES, used rings logged
//! (VHOST_VRING_F_LOG). Every page the daemon writes must be marked while
//! logging is on, and none once LOG_ALL is cleared. (The whole migration
//! under QEMU: `tests/vm/run migrate`.)
//!
//! `TEST_SERVER=qsd` runs the same case against qemu-storage-daemon.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use vhost_mpath_tests::adversary::blk::{S_OK, T_IN};
use vhost_mpath_tests::adversary::split_ring::USED_RING;
use vhost_mpath_tests::adversary::{AdversaryOptions, Desc, Outcome, Scene};

fn marked(log: &File, page: u64) -> bool {
    let mut b = [0u8; 1];
    log.read_exact_at(&mut b, page / 8).expect("read log");
    b[0] & (1 << (page % 8)) != 0
}

fn pages(addr: u64, len: u64) -> std::ops::RangeInclusive<u64> {
    (addr >> 12)..=((addr + len - 1) >> 12)
}

/// A read of `len` bytes into a fresh buffer: (buffer, status) once done.
fn read(s: &mut Scene, len: u32) -> (u64, u64) {
    let hdr = s.header(T_IN, 16);
    let buf = s.buffer(u64::from(len));
    let st = s.status();
    s.publish(&[Desc::r(hdr, 16), Desc::w(buf, len), Desc::w(st, 1)]);
    let o = s.adv().wait_used(Duration::from_secs(10));
    assert!(
        matches!(o, Outcome::Used { .. }),
        "read not completed: {o:?}"
    );
    assert_eq!(s.adv().ram.read_u8(st), S_OK);
    (buf, st)
}

#[test]
fn while_migration_logs_every_page_the_daemon_writes_is_marked() {
    let opts = AdversaryOptions {
        dirty_log: true,
        ..AdversaryOptions::default()
    };
    let mut s = Scene::start("dirty log", &opts);
    let log = s.adv().start_dirty_log().expect("dirty logging");
    // Three pages' worth of read data, landing across page boundaries.
    let len = 3 * 4096;
    let (buf, st) = read(&mut s, len);
    for p in pages(buf, u64::from(len)) {
        assert!(marked(&log, p), "read data page {p:#x} not marked");
    }
    assert!(marked(&log, st >> 12), "status byte's page not marked");
    let used = s.adv().ring().base + USED_RING;
    assert!(marked(&log, used >> 12), "used ring not marked");
    // The descriptor table is only read by the device.
    assert!(!marked(&log, s.adv().ring().base >> 12));

    // Migration over: nothing more is marked.
    s.adv().stop_dirty_log().expect("LOG_ALL cleared");
    log.write_all_at(&vec![0u8; log.metadata().unwrap().len() as usize], 0)
        .unwrap();
    let (buf, st) = read(&mut s, 4096);
    assert!(!marked(&log, buf >> 12) && !marked(&log, st >> 12) && !marked(&log, used >> 12));
    s.healthy();
}
