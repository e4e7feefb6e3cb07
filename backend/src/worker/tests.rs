//! The worker against a split ring laid out by hand in guest memory, as a
//! broken or hostile driver would lay it out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use clap::Parser as _;
use mpath::{PathId, PathState};
use mpath_io::{Fault, ShapeConfig};
use vhost_user_backend::{VringRwLock, VringT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};

use super::Worker;
use crate::cli::Args;
use crate::config::Settings;
use crate::device::BlkDevice;
use crate::disk::Disk;
use crate::request::{STATUS_IOERR, STATUS_OK};
use crate::virtio::Limits;

const QSIZE: u16 = 16;
const DESC: u64 = 0x0;
const AVAIL: u64 = 0x1000;
const USED: u64 = 0x2000;
const HDR: u64 = 0x10000;
const DATA: u64 = 0x20000;
const STATUS: u64 = 0x30000;
const F_NEXT: u16 = 1;
const F_WRITE: u16 = 2;
const F_INDIRECT: u16 = 4;
const UNSET: u8 = 0xff;
const MEM_SIZE: usize = 64 << 20;
/// Where big requests' data goes.
const BIG_DATA: u64 = 16 << 20;

/// Runs `f` on a thread; fails the test if it does not return in time.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("did not return within {limit:?} (spinning or hung)")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("failed (see above)"),
    }
}

fn disk(paths: &[&str], extra: &[&str]) -> Arc<Disk> {
    let mut args = vec!["vhost-mpath", "--socket-path", "/nonexistent/vmp.sock"];
    for p in paths {
        args.extend(["--path", p]);
    }
    args.extend(extra);
    let settings = Settings::from_args(&Args::parse_from(args)).expect("settings");
    Arc::new(Disk::open(&settings).expect("disk"))
}

/// The driver's side: guest memory and one split ring in it.
struct Guest {
    mem: GuestMemoryMmap,
    atomic: GuestMemoryAtomic<GuestMemoryMmap>,
    vring: VringRwLock,
    avail_idx: u16,
}

impl Guest {
    fn new() -> Self {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE)]).expect("memory");
        let atomic = GuestMemoryAtomic::new(mem.clone());
        let vring = VringRwLock::new(atomic.clone(), QSIZE).expect("vring");
        vring.set_queue_size(QSIZE);
        vring.set_queue_info(DESC, AVAIL, USED).expect("queue info");
        vring.set_queue_ready(true);
        vring.set_enabled(true);
        Self {
            mem,
            atomic,
            vring,
            avail_idx: 0,
        }
    }

    fn worker(&self, disk: &Arc<Disk>) -> Worker {
        self.worker_with_batch(disk, 0)
    }

    /// A worker that hands bursts over as `--submit-batch N` says.
    fn worker_with_batch(&self, disk: &Arc<Disk>, submit_batch: usize) -> Worker {
        let limits = Limits::new(disk, QSIZE);
        let in_flight = Arc::new(AtomicUsize::new(0));
        Worker::new(
            disk.clone(),
            limits,
            QSIZE,
            self.atomic.clone(),
            in_flight,
            submit_batch,
        )
        .expect("worker")
    }

    fn desc(&self, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let at = DESC + 16 * u64::from(i);
        let m = &self.mem;
        m.write_obj(addr.to_le(), GuestAddress(at)).unwrap();
        m.write_obj(len.to_le(), GuestAddress(at + 8)).unwrap();
        m.write_obj(flags.to_le(), GuestAddress(at + 12)).unwrap();
        m.write_obj(next.to_le(), GuestAddress(at + 14)).unwrap();
    }

    /// A one-sector read as request `n` in descriptors `first..first + 3`.
    fn read_request(&self, first: u16, n: u64) -> u16 {
        let hdr = [0u8; 16]; // VIRTIO_BLK_T_IN, sector 0
        self.mem
            .write_slice(&hdr, GuestAddress(HDR + 16 * n))
            .unwrap();
        self.mem.write_obj(UNSET, GuestAddress(STATUS + n)).unwrap();
        self.desc(first, HDR + 16 * n, 16, F_NEXT, first + 1);
        self.desc(first + 1, DATA + 512 * n, 512, F_WRITE | F_NEXT, first + 2);
        self.desc(first + 2, STATUS + n, 1, F_WRITE, 0);
        first
    }

    /// A read of `segs` descriptors of `seg_len` bytes each as request `n`
    /// (descriptors `first..first + segs + 2`).
    fn big_read(&self, first: u16, n: u64, segs: u16, seg_len: u32) -> u16 {
        let hdr = [0u8; 16];
        self.mem
            .write_slice(&hdr, GuestAddress(HDR + 16 * n))
            .unwrap();
        self.mem.write_obj(UNSET, GuestAddress(STATUS + n)).unwrap();
        self.desc(first, HDR + 16 * n, 16, F_NEXT, first + 1);
        let base = BIG_DATA + n * u64::from(segs) * u64::from(seg_len);
        for i in 0..segs {
            let addr = base + u64::from(i) * u64::from(seg_len);
            self.desc(
                first + 1 + i,
                addr,
                seg_len,
                F_WRITE | F_NEXT,
                first + 2 + i,
            );
        }
        self.desc(first + 1 + segs, STATUS + n, 1, F_WRITE, 0);
        first
    }

    /// Makes `head` available (the next available ring entry).
    fn publish(&mut self, head: u16) {
        let slot = u64::from(self.avail_idx % QSIZE);
        self.mem
            .write_obj(head.to_le(), GuestAddress(AVAIL + 4 + 2 * slot))
            .unwrap();
        self.set_avail_idx(self.avail_idx.wrapping_add(1));
    }

    fn set_avail_idx(&mut self, idx: u16) {
        self.avail_idx = idx;
        self.mem
            .write_obj(idx.to_le(), GuestAddress(AVAIL + 2))
            .unwrap();
    }

    fn status(&self, n: u64) -> u8 {
        self.mem.read_obj(GuestAddress(STATUS + n)).unwrap()
    }

    fn used_idx(&self) -> u16 {
        self.mem.read_obj(GuestAddress(USED + 2)).unwrap()
    }
}

/// Handles completions (as the worker's thread does on its eventfd) until
/// request `n` has a status or `limit` passed.
fn serve_until_done(w: &mut Worker, g: &Guest, n: u64, limit: Duration) -> u8 {
    let deadline = Instant::now() + limit;
    while g.status(n) == UNSET && Instant::now() < deadline {
        w.process_completions(&g.vring);
        std::thread::sleep(Duration::from_millis(2));
    }
    g.status(n)
}

#[test]
fn an_available_index_too_far_ahead_breaks_the_queue_without_spinning() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:1M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        g.set_avail_idx(QSIZE + 1);
        w.process_queue(&g.vring, true);
        assert!(w.is_broken());
        // More kicks: nothing popped, nothing used, no spin.
        w.process_queue(&g.vring, true);
        assert_eq!(g.vring.queue_next_avail(), 0);
        assert_eq!(g.used_idx(), 0);
        // A reset clears it: the re-initialised queue serves again.
        w.drain_and_discard();
        assert!(!w.is_broken());
        g.set_avail_idx(0);
        let head = g.read_request(0, 0);
        g.publish(head);
        w.process_queue(&g.vring, true);
        assert_eq!(
            serve_until_done(&mut w, &g, 0, Duration::from_secs(5)),
            STATUS_OK
        );
        assert_eq!(g.used_idx(), 1);
    });
}

#[test]
fn polling_a_broken_queue_returns() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:1M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        g.set_avail_idx(QSIZE + 1);
        w.poll(&g.vring, Duration::from_millis(20));
        assert!(w.is_broken());
    });
}

#[test]
fn polling_a_stopped_queue_with_requests_available_returns() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:1M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        let head = g.read_request(0, 0);
        g.publish(head);
        // GET_VRING_BASE stopped the ring with an entry still available.
        g.vring.set_queue_ready(false);
        w.poll(&g.vring, Duration::from_millis(20));
        w.process_queue(&g.vring, true);
        assert_eq!(g.vring.queue_next_avail(), 0, "popped from a stopped ring");
        assert!(!w.is_broken());
    });
}

#[test]
fn a_head_out_of_range_breaks_the_queue() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:1M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        g.publish(QSIZE + 4);
        w.process_queue(&g.vring, true);
        assert!(w.is_broken());
        assert_eq!(g.used_idx(), 0);
    });
}

#[test]
fn a_descriptor_loop_breaks_the_queue() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:1M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        g.read_request(0, 0);
        // The status descriptor points back at the header.
        g.desc(2, STATUS, 1, F_WRITE | F_NEXT, 0);
        g.publish(0);
        w.process_queue(&g.vring, true);
        assert!(w.is_broken());
        assert_eq!(g.status(0), UNSET);
        assert_eq!(g.used_idx(), 0);
    });
}

#[test]
fn heads_taken_after_a_chain_that_breaks_the_queue_stay_available() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:1M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        // A sound read, a looping chain, another sound read: all three are
        // available at once (the worker takes them in one batch).
        g.read_request(0, 0);
        g.read_request(3, 1);
        g.desc(5, STATUS + 1, 1, F_WRITE | F_NEXT, 3);
        g.read_request(6, 2);
        for head in [0, 3, 6] {
            g.publish(head);
        }
        w.process_queue(&g.vring, true);
        assert!(w.is_broken());
        assert_eq!(
            serve_until_done(&mut w, &g, 0, Duration::from_secs(5)),
            STATUS_OK
        );
        assert_eq!(g.status(1), UNSET);
        assert_eq!(g.status(2), UNSET, "served after the queue broke");
        // As when taken one at a time: the broken chain was taken, the
        // head after it was not.
        assert_eq!(g.vring.queue_next_avail(), 2);
        assert_eq!(g.used_idx(), 1);
    });
}

#[test]
fn an_indirect_table_of_odd_length_breaks_the_queue() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:1M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        g.desc(0, 0x40000, 17, F_INDIRECT, 0);
        g.publish(0);
        w.process_queue(&g.vring, true);
        assert!(w.is_broken());
    });
}

#[test]
fn a_bad_request_in_a_sound_ring_gets_an_error_status_not_a_broken_queue() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:1M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        // Header in a writable descriptor: the wrong direction.
        g.read_request(0, 0);
        g.desc(0, HDR, 16, F_WRITE | F_NEXT, 1);
        g.publish(0);
        w.process_queue(&g.vring, true);
        assert!(!w.is_broken());
        assert_eq!(g.status(0), STATUS_IOERR);
        assert_eq!(g.used_idx(), 1);
    });
}

#[test]
fn a_queue_split_into_more_parts_than_its_ring_holds_completes() {
    within(Duration::from_secs(60), || {
        let d = disk(&["null:64M,name=a"], &[]);
        let mut g = Guest::new();
        // Sized for the limits of the paths it started with.
        let mut w = g.worker(&d);
        // A path added later cuts requests far finer: a full queue of them
        // is many times what its completion queue holds (4096 parts).
        d.add_path(crate::path_spec::PathSpec {
            device: "null:64M".into(),
            name: Some("b".into()),
            max_transfer: Some(8192),
            ..Default::default()
        })
        .expect("add_path");
        let (n_reqs, segs) = (QSIZE / 4, 2);
        for n in 0..n_reqs {
            let head = g.big_read(n * (segs + 2), u64::from(n), segs, 4 << 20);
            g.publish(head);
        }
        w.process_queue(&g.vring, true);
        for n in 0..n_reqs {
            let status = serve_until_done(&mut w, &g, u64::from(n), Duration::from_secs(20));
            assert_eq!(status, STATUS_OK, "request {n}");
        }
        assert_eq!(g.used_idx(), n_reqs);
        assert_eq!(w.in_flight.load(Ordering::Acquire), 0);
    });
}

fn shape(d: &Disk, path: PathId, cfg: ShapeConfig) {
    d.shaping(path).set(&cfg);
}

#[test]
fn after_a_reset_the_tick_runs_again_and_a_waiting_request_completes() {
    within(Duration::from_secs(60), || {
        let d = disk(
            &[
                "null:1M,name=a,io-timeout-ms=5000",
                "null:1M,name=b,io-timeout-ms=5000",
            ],
            &["--no-path-timeout", "30s", "--recovery-probes", "1"],
        );
        let (a, b) = (PathId(0), PathId(1));
        let enodev = Some(Fault::Errno(libc::ENODEV));
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        // a failed; b slow, so the reset below waits out its completion
        // and reaps the tick (10 ms) meanwhile.
        shape(
            &d,
            a,
            ShapeConfig {
                fail: enodev,
                ..Default::default()
            },
        );
        d.engine.mark_failed_at(a, d.engine.now());
        shape(
            &d,
            b,
            ShapeConfig {
                delay_us: 100_000,
                ..Default::default()
            },
        );
        let head = g.read_request(0, 0);
        g.publish(head);
        w.process_queue(&g.vring, true);
        assert_eq!(w.in_flight.load(Ordering::Acquire), 1);
        w.drain_and_discard();
        assert_eq!(w.in_flight.load(Ordering::Acquire), 0);
        assert_eq!(g.status(0), UNSET, "a discarded request was completed");

        // b fails too: the next request waits for a path.
        shape(
            &d,
            b,
            ShapeConfig {
                fail: enodev,
                ..Default::default()
            },
        );
        let head = g.read_request(3, 1);
        g.publish(head);
        w.process_queue(&g.vring, true);
        assert_eq!(g.status(1), UNSET);
        // a comes back: the path checker probes it back to usable and the
        // worker's tick, re-armed after the reset, re-sends the waiting request.
        shape(&d, a, ShapeConfig::default());
        crate::checker::spawn(d.clone()).expect("path checker");
        let status = serve_until_done(&mut w, &g, 1, Duration::from_secs(15));
        assert_eq!(status, STATUS_OK, "the waiting request never completed");
        assert_eq!(d.engine.path(a).state(), PathState::Usable);
    });
}

#[test]
fn after_a_reset_io_timeout_still_takes_a_hung_path_out() {
    within(Duration::from_secs(60), || {
        let d = disk(
            &[
                "null:1M,name=a,io-timeout-ms=300",
                "null:1M,name=b,io-timeout-ms=300",
            ],
            &["--policy", "round-robin", "--rr-min-io", "1"],
        );
        let (a, b) = (PathId(0), PathId(1));
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        // Slow completions in flight across the reset: it reaps the tick.
        let slow = ShapeConfig {
            delay_us: 100_000,
            ..Default::default()
        };
        shape(&d, a, slow.clone());
        shape(&d, b, slow);
        for n in 0..2 {
            let head = g.read_request(3 * n as u16, n);
            g.publish(head);
        }
        w.process_queue(&g.vring, true);
        w.drain_and_discard();
        shape(&d, a, ShapeConfig::default());
        // After the reset b hangs: only the tick can see its command age.
        let hang = ShapeConfig {
            hang: true,
            ..Default::default()
        };
        shape(&d, b, hang);
        for n in 2..4 {
            let head = g.read_request(3 * (n as u16 - 2), n);
            g.publish(head);
        }
        w.process_queue(&g.vring, true);
        let deadline = Instant::now() + Duration::from_secs(10);
        while d.engine.path(b).state() == PathState::Usable && Instant::now() < deadline {
            w.process_completions(&g.vring);
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(
            d.engine.path(b).state(),
            PathState::Failed,
            "hung path never timed out"
        );
        // Its held command fails over to a and completes.
        assert_eq!(
            serve_until_done(&mut w, &g, 2, Duration::from_secs(10)),
            STATUS_OK
        );
        assert_eq!(
            serve_until_done(&mut w, &g, 3, Duration::from_secs(10)),
            STATUS_OK
        );
    });
}

#[test]
fn stopping_a_vring_completes_a_hung_command_by_its_io_timeout() {
    within(Duration::from_secs(30), || {
        let d = disk(
            &[
                "null:1M,name=a,io-timeout-ms=200",
                "null:1M,name=b,io-timeout-ms=200",
            ],
            &["--policy", "round-robin", "--rr-min-io", "1"],
        );
        let mut g = Guest::new();
        let dev = BlkDevice::new(d.clone(), 1, QSIZE, Duration::ZERO, 0, g.atomic.clone())
            .expect("device");
        // a holds what it gets, as a dead link does.
        shape(
            &d,
            PathId(0),
            ShapeConfig {
                hang: true,
                ..Default::default()
            },
        );
        for n in 0..2 {
            let head = g.read_request(3 * n as u16, n);
            g.publish(head);
        }
        let vrings = [g.vring.clone()];
        dev.handle_event(0, vmm_sys_util::epoll::EventSet::IN, &vrings, 0)
            .expect("handle_event");
        assert_eq!(dev.in_flight(), 1, "nothing held on the hung path");
        let start = Instant::now();
        g.vring.set_queue_ready(false);
        dev.stop_vring(0);
        // Reported stopped only once nothing can write guest memory: the
        // held command timed out and completed on b.
        assert_eq!(dev.in_flight(), 0);
        assert_eq!((g.status(0), g.status(1)), (STATUS_OK, STATUS_OK));
        assert_eq!(g.used_idx(), 2);
        let took = start.elapsed();
        assert!(took < Duration::from_secs(5), "took {took:?}");
    });
}

#[test]
fn the_ring_holds_a_full_queue_of_the_worst_split() {
    let d = disk(&["null:64M,max-transfer=128K"], &[]);
    let limits = Limits::new(&d, QSIZE);
    let (sq, cq) = super::ring_size::ring_size(&d, &limits, QSIZE);
    // 14 segments of up to 1 MiB cut at 128 KiB: 112 parts, one more for
    // the cut at whole blocks, per request; plus the tick and a probe.
    let parts = u32::from(QSIZE) * 113 + 2;
    assert!(cq >= parts, "completion queue {cq} < {parts}");
    assert!(sq >= 2 * u32::from(QSIZE) && cq >= sq);
}

/// A log for all of the test's guest memory, in a memfd as QEMU's is.
fn dirty_log(mark_reads: bool) -> Arc<crate::dirty_log::LogSwitch> {
    let f = std::fs::File::from(
        rustix::fs::memfd_create("dirty-log", rustix::fs::MemfdFlags::empty()).unwrap(),
    );
    let len = (MEM_SIZE >> 15) as u64;
    f.set_len(len).unwrap();
    let s = Arc::new(crate::dirty_log::LogSwitch::with_read_marking(mark_reads));
    s.set_base(crate::dirty_log::DirtyLog::map(f, len, 0).unwrap());
    s
}

fn page(addr: u64) -> u64 {
    addr >> 12
}

#[test]
fn while_logging_every_guest_write_marks_its_page() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:64M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        let log = dirty_log(true);
        w.set_dirty_log(log.clone());
        // The used ring logged at its own address (QEMU's log_guest_addr).
        w.set_used_log(Some(USED));
        log.set_features(crate::dirty_log::VHOST_F_LOG_ALL);
        // A read of 4 x 8 KiB segments at BIG_DATA: 8 pages of data.
        let head = g.big_read(0, 0, 4, 8192);
        g.publish(head);
        w.process_queue(&g.vring, true);
        assert_eq!(
            serve_until_done(&mut w, &g, 0, Duration::from_secs(5)),
            STATUS_OK
        );
        let l = log.active().expect("logging");
        for p in page(BIG_DATA)..page(BIG_DATA) + 8 {
            assert!(l.is_marked(p), "read data page {p:#x} not marked");
        }
        assert!(!l.is_marked(page(BIG_DATA) + 8));
        assert!(l.is_marked(page(STATUS)), "status byte not marked");
        assert!(l.is_marked(page(USED)), "used ring not marked");
        assert!(!l.is_marked(page(DESC)) && !l.is_marked(page(AVAIL)));
        assert!(!l.is_marked(page(HDR)), "the header is only read");
        assert_eq!(l.beyond(), 0);
    });
}

#[test]
fn without_log_all_nothing_is_marked() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:64M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        let log = dirty_log(true);
        w.set_dirty_log(log.clone());
        w.set_used_log(Some(USED));
        log.set_features(crate::dirty_log::VHOST_F_LOG_ALL);
        let l = log.active().expect("logging");
        // LOG_ALL cleared (migration over or cancelled).
        log.set_features(0);
        let head = g.big_read(0, 0, 4, 8192);
        g.publish(head);
        w.process_queue(&g.vring, true);
        assert_eq!(
            serve_until_done(&mut w, &g, 0, Duration::from_secs(5)),
            STATUS_OK
        );
        for p in [page(BIG_DATA), page(STATUS), page(USED)] {
            assert!(!l.is_marked(p), "page {p:#x} marked with logging off");
        }
    });
}

#[test]
fn the_diagnostic_switch_leaves_read_data_unmarked() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:64M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        let log = dirty_log(false);
        w.set_dirty_log(log.clone());
        log.set_features(crate::dirty_log::VHOST_F_LOG_ALL);
        let head = g.big_read(0, 0, 1, 4096);
        g.publish(head);
        w.process_queue(&g.vring, true);
        serve_until_done(&mut w, &g, 0, Duration::from_secs(5));
        let l = log.active().expect("logging");
        assert!(!l.is_marked(page(BIG_DATA)));
        assert!(l.is_marked(page(STATUS)));
    });
}

#[test]
fn the_worker_names_each_memory_table_to_its_io_queue() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:1M"], &[]);
        let mut g = Guest::new();
        let mut w = g.worker(&d);
        let current = |g: &Guest| {
            Arc::as_ptr(&vm_memory::GuestAddressSpace::memory(&g.atomic).into_inner()) as usize
        };
        // What the queue is named with: the worker's keep-alive of a table
        // (the one each request's buffers carry), as (table, keep-alive).
        let keep = |w: &Worker| {
            w.tables
                .current()
                .map(|(table, keep)| (Arc::as_ptr(table) as usize, Arc::as_ptr(keep) as usize))
        };
        // Off (the I/O queue's default): nothing is named, nothing pinned.
        g.read_request(0, 0);
        g.publish(0);
        w.process_queue(&g.vring, true);
        assert_eq!(g.status(0), STATUS_OK);
        assert_eq!(w.queue.named_memory(), None);
        w.set_registration(mpath_io::RegOptions {
            fixed_buffers: true,
            ..Default::default()
        });
        g.read_request(3, 1);
        g.publish(3);
        w.process_queue(&g.vring, true);
        let first = current(&g);
        let (table, first_keep) = keep(&w).expect("a keep-alive");
        assert_eq!(table, first);
        assert_eq!(w.queue.named_memory(), Some(first_keep));
        // A new memory table (what SET_MEM_TABLE, ADD_MEM_REG and
        // REM_MEM_REG do to the map the worker reads): named at the next batch.
        g.atomic.lock().unwrap().replace(g.mem.clone());
        w.set_memory(g.atomic.clone());
        let second = current(&g);
        assert_ne!(first, second);
        assert_eq!(
            w.queue.named_memory(),
            Some(first_keep),
            "not before a batch"
        );
        g.read_request(6, 2);
        g.publish(6);
        w.process_queue(&g.vring, true);
        assert_eq!(g.status(2), STATUS_OK);
        let (table, second_keep) = keep(&w).expect("a keep-alive");
        assert_eq!(table, second);
        assert_eq!(w.queue.named_memory(), Some(second_keep));
        // The frontend left: released.
        w.forget_memory();
        assert_eq!(w.queue.named_memory(), None);
    });
}

/// An eventfd the worker calls the guest on (to count with `calls`).
fn count_calls(g: &Guest) -> std::fs::File {
    let call = std::fs::File::from(
        rustix::event::eventfd(0, rustix::event::EventfdFlags::NONBLOCK).expect("eventfd"),
    );
    g.vring.set_call(Some(call.try_clone().expect("dup")));
    call
}

/// The calls signalled on `call` since it was last read.
fn calls(call: &std::fs::File) -> u64 {
    let mut count = [0u8; 8];
    match std::io::Read::read(&mut &*call, &mut count) {
        Ok(8) => u64::from_ne_bytes(count),
        _ => 0,
    }
}

#[test]
fn a_burst_of_large_inline_reads_is_handed_back_while_it_runs() {
    within(Duration::from_secs(20), || {
        // Zero-filled null reads of 128 KiB cost microseconds each: the
        // guest must see each as it is done, not the burst at its end
        // (at QD 8 that made guest and daemon work in lockstep).
        let d = disk(&["null:64M"], &[]);
        let mut g = Guest::new();
        let call = count_calls(&g);
        let mut w = g.worker_with_batch(&d, 8);
        for n in 0..4u16 {
            let head = g.big_read(n * 3, u64::from(n), 1, 128 << 10);
            g.publish(head);
        }
        w.process_queue(&g.vring, true);
        for n in 0..4 {
            assert_eq!(g.status(n), STATUS_OK, "request {n}");
        }
        // Without EVENT_IDX every second hand-over signals (one per
        // request publishes): 2 for 4 reads; the burst whole would be 1.
        let signals = calls(&call);
        assert!(
            signals >= 2,
            "{signals} signal(s) for 4 reads of 128 KiB: the burst was handed back whole"
        );
    });
}

#[test]
fn a_full_batch_of_small_requests_calls_the_guest_at_once() {
    within(Duration::from_secs(20), || {
        // A hand-over of a full batch wakes the guest while the rest of
        // the burst is parsed (a guest that has just gone to sleep is
        // cheap to wake); only hand-overs made for their bytes wait for a
        // second one (see the 128 KiB test above).
        let d = disk(&["null:64M"], &[]);
        let mut g = Guest::new();
        let call = count_calls(&g);
        let mut w = g.worker_with_batch(&d, 2);
        for n in 0..4u16 {
            let head = g.read_request(n * 3, u64::from(n));
            g.publish(head);
        }
        w.process_queue(&g.vring, true);
        for n in 0..4 {
            assert_eq!(g.status(n), STATUS_OK, "request {n}");
        }
        // Two hand-overs of two requests each, each called (without
        // EVENT_IDX every call signals); calling every second one would
        // signal once.
        let signals = calls(&call);
        assert_eq!(signals, 2, "signals for two full batches");
    });
}

/// A worker whose spin window is open, and whose thread has one other
/// queue: an eventfd in its sibling set, signalled or not (returned with
/// the worker: it must stay open while the worker looks at it).
fn spinning_worker_with_sibling(
    g: &Guest,
    d: &Arc<Disk>,
    sibling_busy: bool,
) -> (Worker, vmm_sys_util::eventfd::EventFd) {
    use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
    use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
    let mut w = g.worker(d);
    w.spin = super::spin::Spin::new(Duration::from_millis(50));
    w.spin.window = Duration::from_millis(20);
    let ep = Epoll::new().expect("epoll");
    let ev = EventFd::new(EFD_NONBLOCK).expect("eventfd");
    ep.ctl(
        ControlOperation::Add,
        std::os::fd::AsRawFd::as_raw_fd(&ev),
        EpollEvent::new(EventSet::IN, 1),
    )
    .expect("epoll add");
    if sibling_busy {
        ev.write(1).expect("signal the sibling");
    }
    w.set_siblings(Some(Arc::new(ep)));
    (w, ev)
}

/// Serves one read with kicks to be re-armed (so the worker spins after
/// it) beside a sibling queue busy or idle; the spin window afterwards.
fn window_after_one_read(d: &Arc<Disk>, sibling_busy: bool) -> Duration {
    let mut g = Guest::new();
    let (mut w, _sibling) = spinning_worker_with_sibling(&g, d, sibling_busy);
    g.read_request(0, 0);
    g.publish(0);
    w.process_queue(&g.vring, true);
    assert_eq!(g.status(0), STATUS_OK);
    w.spin.window
}

#[test]
fn a_spin_ends_and_its_window_closes_when_a_sibling_queue_has_work() {
    within(Duration::from_secs(20), || {
        let d = disk(&["null:1M"], &[]);
        assert_eq!(
            window_after_one_read(&d, true),
            Duration::ZERO,
            "the spin yielded to the busy sibling and closed its window"
        );
        // The control: with the sibling idle the spin runs out and keeps
        // its window.
        assert_eq!(window_after_one_read(&d, false), Duration::from_millis(20));
    });
}

#[test]
fn the_spin_for_the_guests_next_requests_is_counted() {
    within(Duration::from_secs(20), || {
        // One read, then a 20 ms window with nothing more: `get_queues`
        // shows the spin's time (what sleeping for free would give back).
        let d = disk(&["null:1M"], &[]);
        let mut g = Guest::new();
        let (mut w, _sibling) = spinning_worker_with_sibling(&g, &d, false);
        let spun = |w: &Worker| w.counters.spin_ns.load(Ordering::Relaxed);
        assert_eq!(spun(&w), 0);
        g.read_request(0, 0);
        g.publish(0);
        let start = Instant::now();
        w.process_queue(&g.vring, true);
        let took = start.elapsed().as_nanos() as u64;
        assert_eq!(g.status(0), STATUS_OK);
        assert!(
            (20_000_000..=took).contains(&spun(&w)),
            "{} ns of spin counted in a call of {took} ns with a 20 ms window",
            spun(&w)
        );
    });
}

#[test]
fn a_poll_with_nothing_to_do_counts_its_window_as_spin() {
    within(Duration::from_secs(20), || {
        // `--poll-us`: 20 ms with no request, all of it idle.
        let d = disk(&["null:1M"], &[]);
        let g = Guest::new();
        let mut w = g.worker(&d);
        let start = Instant::now();
        w.poll(&g.vring, Duration::from_millis(20));
        let took = start.elapsed().as_nanos() as u64;
        let spun = w.counters.spin_ns.load(Ordering::Relaxed);
        assert!(
            (20_000_000..=took).contains(&spun),
            "{spun} ns of spin counted in a poll of {took} ns with a 20 ms window"
        );
    });
}
