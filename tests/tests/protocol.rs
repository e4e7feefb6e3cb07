//! The vhost-user messages of a buggy or hostile frontend (issue 44): sizes
//! and fds that do not fit. Each must be refused (an error reply; the
//! daemon then closes the connection, as the vhost crate's request loop
//! does on a handler error), the daemon alive and idle, and the next
//! frontend served (`vhost_mpath_tests::adversary::Scene`). Before these
//! checks the daemon took each of them: it died of SIGBUS at the next
//! access on the first three and wrote past the driver's ring on the
//! fourth.

use std::fs::File;

use vhost_mpath_tests::adversary::blk::S_OK;
use vhost_mpath_tests::adversary::frontend::{RamRegion, MEM_SIZE};
use vhost_mpath_tests::adversary::{AdversaryOptions, Outcome, Scene};
use vhost_mpath_tests::ServerKind;

/// The scene, against our daemon only (these probe its own checks).
fn scene(name: &str, opts: AdversaryOptions) -> Option<Scene> {
    if ServerKind::from_env() == ServerKind::Qsd {
        eprintln!("skipped: these probe our daemon's fixes");
        return None;
    }
    Some(Scene::start(name, &opts))
}

/// A memfd of `len` bytes.
fn memfd(len: u64) -> File {
    let f = File::from(
        rustix::fs::memfd_create("protocol-probe", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd"),
    );
    f.set_len(len).expect("memfd size");
    f
}

#[test]
fn a_memory_region_longer_than_its_fd_is_refused() {
    let Some(mut s) = scene(
        "SET_MEM_TABLE past its fd's end",
        AdversaryOptions::default(),
    ) else {
        return;
    };
    let short = memfd(4096);
    if s.adv().send_mem_table(MEM_SIZE, &short).is_ok() {
        s.fail("a region of 8 MiB on a 4 KiB fd was accepted".into());
    }
    s.healthy();
}

#[test]
fn a_dirty_log_longer_than_its_fd_is_refused() {
    let opts = AdversaryOptions {
        dirty_log: true,
        ..AdversaryOptions::default()
    };
    let Some(mut s) = scene("SET_LOG_BASE past its fd's end", opts) else {
        return;
    };
    let short = memfd(64);
    if s.adv()
        .send_log_base(MEM_SIZE / 4096 / 8, 0, &short)
        .is_ok()
    {
        s.fail("a 256-byte log on a 64-byte fd was accepted".into());
    }
    s.healthy();
}

#[test]
fn the_inflight_region_cannot_be_truncated_under_the_daemon() {
    let opts = AdversaryOptions {
        inflight: true,
        ..AdversaryOptions::default()
    };
    let Some(mut s) = scene("ftruncate of the inflight region", opts) else {
        return;
    };
    let shrunk = s
        .adv()
        .inflight_file()
        .expect("inflight tracking negotiated")
        .set_len(0);
    if shrunk.is_ok() {
        s.fail("the frontend truncated the inflight region to 0 bytes".into());
    }
    // The next request marks the region: a truncated one kills the daemon.
    match s.probe() {
        (Outcome::Used { .. }, S_OK) => {}
        (o, st) => s.fail(format!(
            "after the truncation: a read got {o:?}, status {st}"
        )),
    }
    s.healthy();
}

#[test]
fn a_queue_size_that_is_not_a_power_of_two_is_refused() {
    let Some(mut s) = scene("SET_VRING_NUM 100", AdversaryOptions::default()) else {
        return;
    };
    if s.adv().send_vring_num(0, 100).is_ok() {
        s.fail("a queue size of 100 was accepted".into());
    }
    s.healthy();
}

#[test]
fn add_mem_reg_past_the_slots_offered_is_refused() {
    let opts = AdversaryOptions {
        mem_slots: true,
        ..AdversaryOptions::default()
    };
    let Some(mut s) = scene("600 ADD_MEM_REG", opts) else {
        return;
    };
    // The table from SET_MEM_TABLE holds one region: 508 more fit.
    let mut added = 0u64;
    let mut refused = false;
    for i in 0..600u64 {
        let fd = memfd(4096);
        match s.adv().send_add_mem_region(MEM_SIZE + i * 4096, 4096, &fd) {
            Ok(()) => added += 1,
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    if !refused || added != 508 {
        s.fail(format!(
            "{added} regions added beside the first, refused: {refused} (509 slots offered)"
        ));
    }
    s.healthy();
}

#[test]
fn a_full_blocking_call_eventfd_does_not_stall_the_queue() {
    let Some(mut s) = scene("a full blocking call eventfd", AdversaryOptions::default()) else {
        return;
    };
    // Blocking, and one short of its maximum: a write of 1 would block.
    let full = vmm_sys_util::eventfd::EventFd::new(0).expect("eventfd");
    full.write(u64::MAX - 1).expect("fill the eventfd");
    if let Err(e) = s.adv().send_vring_call(0, &full) {
        s.fail(format!("SET_VRING_CALL with a full eventfd: {e}"));
    }
    match s.probe() {
        (Outcome::Used { .. }, S_OK) => {}
        (o, st) => s.fail(format!("a read got {o:?}, status {st}")),
    }
    // The worker signalled (or tried to) after that completion; a worker
    // blocked in the write holds the queue, and GET_VRING_BASE never ends.
    if let Err(e) = s.adv().stop_queue() {
        s.fail(format!("GET_VRING_BASE after the completion: {e}"));
    }
    s.healthy();
}

#[test]
fn a_ring_started_without_addresses_is_not_served() {
    let opts = AdversaryOptions {
        num_queues: 2,
        unaddressed: Some(1),
        // Without EVENT_IDX a started ring's first kick writes used.flags.
        event_idx: false,
        ..AdversaryOptions::default()
    };
    let Some(mut s) = scene("a ring started without SET_VRING_ADDR", opts) else {
        return;
    };
    // Queue 0's descriptor table lies at guest-physical 0: the daemon never
    // writes there, unless it serves queue 1 at the addresses it never got.
    let before = s.adv().ram.read(0, 64);
    s.adv().select(1);
    s.adv().kick();
    std::thread::sleep(std::time::Duration::from_millis(500));
    s.adv().select(0);
    let after = s.adv().ram.read(0, 64);
    if before != after {
        s.fail(format!(
            "the daemon wrote guest memory at guest-physical 0: {:02x?} became {:02x?}",
            &before[..8],
            &after[..8]
        ));
    }
    s.healthy();
}

#[test]
fn a_memory_region_off_the_page_grid_is_refused() {
    let Some(mut s) = scene(
        "SET_MEM_TABLE with a region at guest-physical 0x2001",
        AdversaryOptions::default(),
    ) else {
        return;
    };
    // The running queue's rings stay at guest-physical 0 (descriptors),
    // 0x4000 (available) and 0x8000 (used): all aligned. The second region
    // starts at 0x2001 on page 2 of the RAM, so the available ring's host
    // address is odd. Taken, the next kick loads its index through a
    // misaligned atomic (the debug daemon aborts: found by the fuzzer).
    let regions = [
        RamRegion {
            gpa: 0,
            size: 0x2000,
            ram_offset: 0,
        },
        RamRegion {
            gpa: 0x2001,
            size: MEM_SIZE - 0x2000,
            ram_offset: 0x2000,
        },
    ];
    if s.adv().send_ram_regions(&regions).is_ok() {
        s.fail("a region at guest-physical 0x2001 was accepted".into());
        s.adv().kick();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    s.healthy();
}

#[test]
fn a_dirty_log_smaller_than_guest_memory_is_refused() {
    let opts = AdversaryOptions {
        dirty_log: true,
        ..AdversaryOptions::default()
    };
    let Some(mut s) = scene("SET_LOG_BASE for half of guest memory", opts) else {
        return;
    };
    // One bit per 4 KiB page: 8 MiB need 256 bytes. Taken, writes to the
    // upper half were never marked (counted, a warning when the log went).
    let half = MEM_SIZE / 4096 / 8 / 2;
    if s.adv().send_log_base(half, 0, &memfd(4096)).is_ok() {
        s.fail("a 128-byte log for 8 MiB of guest memory was accepted".into());
    }
    s.healthy();
}

#[test]
fn a_memory_table_outgrowing_the_dirty_log_is_refused() {
    let opts = AdversaryOptions {
        dirty_log: true,
        mem_slots: true,
        ..AdversaryOptions::default()
    };
    let Some(mut s) = scene("ADD_MEM_REG past the dirty log's end", opts) else {
        return;
    };
    // Logging on, the log covering the 8 MiB table exactly; QEMU would send
    // a larger log before a larger table.
    if let Err(e) = s.adv().start_dirty_log() {
        s.fail(format!("starting the dirty log: {e}"));
    }
    if s.adv()
        .send_add_mem_region(MEM_SIZE, 1 << 20, &memfd(1 << 20))
        .is_ok()
    {
        s.fail("a region past the dirty log's end was added while logging".into());
    }
    s.healthy();
}

/// A memfd of `len` bytes that allows sealing and has no seal yet (as a
/// frontend that could seal it and did not).
fn sealable_memfd(len: u64) -> File {
    let f = File::from(
        rustix::fs::memfd_create(
            "protocol-probe-sealable",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )
        .expect("memfd"),
    );
    f.set_len(len).expect("memfd size");
    f
}

/// Whether the daemon hangs up on the adversary within `limit`.
fn hangs_up(s: &mut Scene, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if s.adv().closed() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// What the daemon logs (once) when a frontend's memory broke under it.
const BROKE: &str = "the frontend broke its shared memory";

/// The connection of a frontend whose memory broke must be closed, with
/// one error line, and the daemon live on (then `Scene::healthy`).
fn closes_the_broken_connection(s: &mut Scene, what: &str) {
    if !hangs_up(s, std::time::Duration::from_secs(3)) {
        s.fail(format!(
            "the daemon kept the connection of a frontend that truncated its {what}"
        ));
    }
    let lines = s.daemon_log().matches(BROKE).count();
    if lines != 1 {
        s.fail(format!(
            "{lines} lines \"{BROKE}\" in the log, expected one"
        ));
    }
}

#[test]
fn guest_memory_truncated_after_set_mem_table_loses_the_connection_not_the_daemon() {
    let Some(mut s) = scene(
        "ftruncate of an unsealable guest memory fd after SET_MEM_TABLE",
        AdversaryOptions::default(),
    ) else {
        return;
    };
    // Without MFD_ALLOW_SEALING (F_SEAL_SEAL from the start: QEMU's
    // memory-backend-memfd with seal=off; a hugetlbfs or /dev/shm file
    // cannot be sealed either): the daemon cannot stop the truncation.
    let ram = memfd(MEM_SIZE);
    if let Err(e) = s.adv().send_mem_table(MEM_SIZE, &ram) {
        s.fail(format!("SET_MEM_TABLE of a well-sized memfd: {e}"));
    }
    if let Err(e) = ram.set_len(0) {
        s.fail(format!(
            "the test could not truncate its unsealable memfd: {e}"
        ));
    }
    // The kick has the worker read the available ring: a lost page. Before
    // the SIGBUS handler the daemon died here.
    s.adv().kick();
    closes_the_broken_connection(&mut s, "guest memory");
    s.healthy();
}

#[test]
fn a_dirty_log_truncated_while_logging_loses_the_connection_not_the_daemon() {
    let opts = AdversaryOptions {
        dirty_log: true,
        ..AdversaryOptions::default()
    };
    let Some(mut s) = scene("ftruncate of the dirty log while logging", opts) else {
        return;
    };
    // The adversary's log is a memfd without MFD_ALLOW_SEALING: unsealable.
    let log = match s.adv().start_dirty_log() {
        Ok(log) => log,
        Err(e) => panic!("starting the dirty log: {e}"),
    };
    if let Err(e) = log.set_len(0) {
        s.fail(format!(
            "the test could not truncate its unsealable log: {e}"
        ));
    }
    // A read marks its buffer's pages and the used ring's in the log: a
    // lost page. Before the SIGBUS handler the daemon died here.
    let (o, st) = s.probe();
    s.note(format!("the read after the truncation: {o:?}, status {st}"));
    closes_the_broken_connection(&mut s, "dirty log");
    s.healthy();
}

#[test]
fn a_sealable_guest_memory_fd_is_sealed_against_shrinking() {
    let Some(mut s) = scene(
        "ftruncate of a sealable guest memory fd after SET_MEM_TABLE",
        AdversaryOptions::default(),
    ) else {
        return;
    };
    let ram = sealable_memfd(MEM_SIZE);
    if let Err(e) = s.adv().send_mem_table(MEM_SIZE, &ram) {
        s.fail(format!("SET_MEM_TABLE of a well-sized memfd: {e}"));
    }
    match ram.set_len(0) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
        Err(e) => s.fail(format!("the truncation failed otherwise than sealed: {e}")),
        Ok(()) => s.fail("the frontend truncated a sealable memfd the daemon had mapped".into()),
    }
    // Growing stays allowed (QEMU seals it itself where it wants to).
    if let Err(e) = ram.set_len(2 * MEM_SIZE) {
        s.fail(format!("growing the memfd: {e}"));
    }
    s.adv().kick();
    s.healthy();
}

#[test]
fn a_sealable_dirty_log_fd_is_sealed_against_shrinking() {
    let opts = AdversaryOptions {
        dirty_log: true,
        ..AdversaryOptions::default()
    };
    let Some(mut s) = scene("ftruncate of a sealable dirty log after SET_LOG_BASE", opts) else {
        return;
    };
    let log = sealable_memfd(MEM_SIZE / 4096 / 8);
    if let Err(e) = s.adv().send_log_base(MEM_SIZE / 4096 / 8, 0, &log) {
        s.fail(format!("SET_LOG_BASE of a well-sized memfd: {e}"));
    }
    if log.set_len(0).is_ok() {
        s.fail("the frontend truncated a sealable log the daemon had mapped".into());
    }
    s.healthy();
}

#[test]
fn a_kick_fd_epoll_cannot_watch_is_refused_without_a_log_line_each() {
    let Some(mut s) = scene(
        "500 SET_VRING_KICK with /dev/null",
        AdversaryOptions::default(),
    ) else {
        return;
    };
    // Before the fix each one was taken and logged a warning (the fd cannot
    // join the queue thread's epoll set): one line per message.
    use std::os::fd::{FromRawFd, IntoRawFd};
    use vmm_sys_util::eventfd::EventFd;
    let mut taken = 0;
    for _ in 0..500 {
        let null = File::open("/dev/null").expect("/dev/null");
        // SAFETY: the fd is open and ours; the EventFd takes it over.
        let fd = unsafe { EventFd::from_raw_fd(null.into_raw_fd()) };
        if s.adv().send_vring_kick(0, &fd).is_err() {
            break;
        }
        taken += 1;
    }
    if taken > 0 {
        s.fail(format!("{taken} SET_VRING_KICK with /dev/null were taken"));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    // The refusal and the connection's end: a few lines, not one a message.
    let grown = s.log_grown();
    if grown > 600 {
        s.fail(format!(
            "the log grew by {grown} bytes (a few lines allowed)"
        ));
    }
    s.healthy();
}

/// The daemon's fds that are the adversary's guest memory (its memfd).
fn guest_memory_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| {
        d.flatten()
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|t| t.to_string_lossy().contains("memfd:adversary-guest"))
            })
            .count()
    })
}

#[test]
fn a_departed_frontends_guest_memory_is_unmapped_when_it_leaves() {
    // Found by the fuzzer: regions a worker's table still held when the
    // connection's memory table went stayed mapped, their fds open, until a
    // later frontend sent a table of its own: a departed guest's memory kept
    // alive by the daemon.
    let Some(mut s) = scene("a frontend leaves after I/O", AdversaryOptions::default()) else {
        return;
    };
    let pid = s.daemon_pid();
    if guest_memory_fds(pid) == 0 {
        s.fail("the daemon never mapped the adversary's guest memory".into());
    }
    s.disconnect();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut held = guest_memory_fds(pid);
    while held > 0 && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(20));
        held = guest_memory_fds(pid);
    }
    if held > 0 {
        s.fail(format!(
            "{held} fd(s) of the departed frontend's guest memory still open 3 s after it left"
        ));
    }
    s.healthy();
}
