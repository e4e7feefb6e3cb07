//! The queue's API against the null driver, NOPs and a pipe nobody writes:
//! submit, defer, reap, shaping, io-timeout cancellation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types};
use mpath::IoOutcome;

use super::{Command, Event, IoQueue, PathTable};
use crate::{Fault, GuestBufs, IoOp, NullDriver, PathDriver, ShapeConfig, Shaping};

/// Completes every command through the ring (a NOP).
#[derive(Debug)]
struct NopDriver;

impl PathDriver for NopDriver {
    fn kind(&self) -> &'static str {
        "nop"
    }
    fn info(&self) -> &crate::DeviceInfo {
        unimplemented!()
    }
    unsafe fn prepare(
        &self,
        _op: IoOp,
        _offset: u64,
        _len: u64,
        _iov: *const libc::iovec,
        _iovcnt: usize,
        user_data: u64,
    ) -> squeue::Entry128 {
        opcode::Nop::new().build().user_data(user_data).into()
    }
    fn decode(&self, _op: IoOp, _len: u64, res: i32, _big: [u64; 2]) -> IoOutcome {
        if res >= 0 {
            IoOutcome::Ok
        } else {
            IoOutcome::Errno(-res)
        }
    }
}

/// Reads from a pipe that nobody writes: never completes by itself.
#[derive(Debug)]
struct PipeDriver(i32);

impl PathDriver for PipeDriver {
    fn kind(&self) -> &'static str {
        "pipe"
    }
    fn info(&self) -> &crate::DeviceInfo {
        unimplemented!()
    }
    unsafe fn prepare(
        &self,
        _op: IoOp,
        _offset: u64,
        _len: u64,
        iov: *const libc::iovec,
        iovcnt: usize,
        user_data: u64,
    ) -> squeue::Entry128 {
        opcode::Readv::new(types::Fd(self.0), iov, iovcnt as u32)
            .build()
            .user_data(user_data)
            .into()
    }
    fn decode(&self, _op: IoOp, _len: u64, res: i32, _big: [u64; 2]) -> IoOutcome {
        if res >= 0 {
            IoOutcome::Ok
        } else {
            IoOutcome::Errno(-res)
        }
    }
}

struct TestPath {
    driver: Mutex<Option<Arc<dyn PathDriver>>>,
    shaping: Shaping,
    timeout: Option<u64>,
}

struct Paths(Vec<TestPath>, AtomicU64);

impl Paths {
    /// Replaces (or drops) path `path`'s driver, as a path table does.
    fn set_driver(&self, path: usize, driver: Option<Arc<dyn PathDriver>>) {
        *self.0[path].driver.lock().unwrap() = driver;
        self.1.fetch_add(1, Ordering::Release);
    }
}

impl PathTable for Paths {
    fn driver(&self, path: usize) -> Option<Arc<dyn PathDriver>> {
        self.0[path].driver.lock().unwrap().clone()
    }
    fn generation(&self) -> u64 {
        self.1.load(Ordering::Acquire)
    }
    fn shaping(&self, path: usize) -> &Shaping {
        &self.0[path].shaping
    }
    fn io_timeout(&self, path: usize) -> Option<u64> {
        self.0[path].timeout
    }
}

fn path(driver: Arc<dyn PathDriver>, timeout: Option<u64>) -> TestPath {
    TestPath {
        driver: Mutex::new(Some(driver)),
        shaping: Shaping::default(),
        timeout,
    }
}

fn queue(paths: Vec<TestPath>) -> (IoQueue<Paths>, Arc<Paths>) {
    let paths = Arc::new(Paths(paths, AtomicU64::new(0)));
    (
        IoQueue::new(paths.clone(), 16, 32).expect("io_uring"),
        paths,
    )
}

fn null() -> Arc<dyn PathDriver> {
    Arc::new(NullDriver::new(1 << 20, 512, true))
}

fn now(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

/// Buffers over `data` (kept alive by the Arc).
fn bufs(data: &Arc<Vec<u8>>) -> GuestBufs {
    let iov = vec![libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    }];
    // SAFETY: the Arc keeps the vector's buffer alive; the tests write it
    // only through the queue.
    unsafe { GuestBufs::new(data.clone(), iov) }
}

fn read(tag: u64, path: usize, b: Option<GuestBufs>) -> Command {
    Command {
        tag,
        path,
        op: IoOp::Read,
        offset: 0,
        len: b.as_ref().map_or(0, |b| b.len() as u64),
        bufs: b,
    }
}

/// Waits and reaps until `want` events of interest came (or 5 s passed).
fn collect(
    q: &mut IoQueue<Paths>,
    start: Instant,
    want: usize,
    keep: impl Fn(&Event) -> bool,
) -> Vec<Event> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        q.wait().expect("wait");
        q.reap(now(start), |e| {
            if keep(&e) {
                got.push(e)
            }
        });
    }
    got
}

fn done(e: &Event) -> Option<(u64, IoOutcome)> {
    match e {
        Event::Done { tag, outcome, .. } => Some((*tag, *outcome)),
        _ => None,
    }
}

#[test]
fn a_null_read_completes_inline_zeroed_with_its_buffers_back() {
    let (mut q, _) = queue(vec![path(null(), None)]);
    let data = Arc::new(vec![0xa5u8; 8192]);
    q.submit(read(7, 0, Some(bufs(&data))), 0).expect("submit");
    assert_eq!(q.pending(), 1, "nothing went to the ring");
    assert!(data.iter().all(|&b| b == 0), "not zero-filled");
    let mut events = Vec::new();
    assert_eq!(q.reap(0, |e| events.push(e)), 1);
    match &events[..] {
        [Event::Done {
            tag: 7,
            outcome: IoOutcome::Ok,
            bufs: Some(b),
        }] => assert_eq!(b.len(), 8192),
        e => panic!("{e:?}"),
    }
    assert!(q.is_empty());
}

#[test]
fn commands_completed_at_submission_count_in_flight_and_come_back_in_order() {
    let (mut q, paths) = queue(vec![path(null(), None), path(null(), None)]);
    paths.0[1].shaping.set(&ShapeConfig {
        fail: Some(Fault::Errno(libc::EIO)),
        ..Default::default()
    });
    for tag in 0..6 {
        q.submit(read(tag, (tag % 2) as usize, None), 0)
            .expect("submit");
    }
    assert_eq!((q.len(), q.is_empty(), q.pending()), (6, false, 6));
    let mut got = Vec::new();
    assert_eq!(q.reap(0, |e| got.extend(done(&e))), 6);
    let eio = IoOutcome::Errno(libc::EIO);
    assert_eq!(
        got,
        [
            (0, IoOutcome::Ok),
            (1, eio),
            (2, IoOutcome::Ok),
            (3, eio),
            (4, IoOutcome::Ok),
            (5, eio)
        ]
    );
    assert!(q.is_empty());
    assert_eq!(q.reap(0, |_| panic!("reaped twice")), 0);
}

#[test]
fn buffers_of_commands_completed_at_submission_are_let_go_of_reaped_or_not() {
    let (mut q, _) = queue(vec![path(null(), None)]);
    let data = Arc::new(vec![0u8; 512]);
    q.submit(read(1, 0, Some(bufs(&data))), 0).expect("submit");
    q.submit(read(2, 0, Some(bufs(&data))), 0).expect("submit");
    let mut events = Vec::new();
    assert_eq!(q.reap(0, |e| events.push(e)), 2);
    assert_eq!(
        Arc::strong_count(&data),
        3,
        "the reaped ones are handed out"
    );
    drop(events);
    assert_eq!(Arc::strong_count(&data), 1);
    // Not reaped: the queue drops them with itself.
    q.submit(read(3, 0, Some(bufs(&data))), 0).expect("submit");
    q.submit(read(4, 0, Some(bufs(&data))), 0).expect("submit");
    assert_eq!(Arc::strong_count(&data), 3);
    drop(q);
    assert_eq!(Arc::strong_count(&data), 1, "kept by a dropped queue");
}

#[test]
fn read_zeroes_off_leaves_the_buffers_alone() {
    let (mut q, _) = queue(vec![path(
        Arc::new(NullDriver::new(1 << 20, 512, false)),
        None,
    )]);
    let data = Arc::new(vec![0xa5u8; 512]);
    q.submit(read(1, 0, Some(bufs(&data))), 0).expect("submit");
    assert_eq!(q.reap(0, |_| {}), 1);
    assert!(data.iter().all(|&b| b == 0xa5));
}

#[test]
fn a_ring_command_completes_through_reap() {
    let start = Instant::now();
    let (mut q, _) = queue(vec![path(Arc::new(NopDriver), None)]);
    for tag in 0..40 {
        q.submit(read(tag, 0, None), now(start)).expect("submit");
    }
    let mut tags: Vec<u64> = collect(&mut q, start, 40, |e| done(e).is_some())
        .iter()
        .filter_map(done)
        .map(|(t, o)| {
            assert_eq!(o, IoOutcome::Ok);
            t
        })
        .collect();
    tags.sort_unstable();
    assert_eq!(tags, (0..40).collect::<Vec<_>>());
    assert!(q.is_empty());
}

#[test]
fn defer_comes_back_after_its_time() {
    let start = Instant::now();
    let (mut q, _) = queue(vec![]);
    q.defer(3, Duration::from_millis(30)).expect("defer");
    assert_eq!(q.len(), 1);
    let got = collect(&mut q, start, 1, |e| matches!(e, Event::Timer { .. }));
    assert!(matches!(got[..], [Event::Timer { tag: 3 }]), "{got:?}");
    assert!(start.elapsed() >= Duration::from_millis(30));
    assert!(q.is_empty());
}

#[test]
fn an_injected_fault_never_reaches_the_device() {
    let (mut q, paths) = queue(vec![path(Arc::new(PipeDriver(-1)), None)]);
    paths.0[0].shaping.set(&ShapeConfig {
        fail: Some(Fault::Errno(libc::ENOLINK)),
        ..Default::default()
    });
    q.submit(read(5, 0, None), 0).expect("submit");
    let mut got = Vec::new();
    q.reap(0, |e| got.push(done(&e)));
    assert_eq!(got, [Some((5, IoOutcome::Errno(libc::ENOLINK)))]);
}

#[test]
fn a_removed_driver_fails_with_enodev() {
    let (mut q, paths) = queue(vec![path(null(), None)]);
    paths.set_driver(0, None);
    q.submit(read(2, 0, None), 0).expect("submit");
    let mut got = Vec::new();
    q.reap(0, |e| got.push(done(&e)));
    assert_eq!(got, [Some((2, IoOutcome::Errno(libc::ENODEV)))]);
}

#[test]
fn a_driver_removed_after_use_fails_with_enodev() {
    let (mut q, paths) = queue(vec![path(null(), None)]);
    q.submit(read(1, 0, None), 0).expect("submit");
    let mut got = Vec::new();
    q.reap(0, |e| got.push(done(&e)));
    // The queue holds the driver now; the table's new generation says it
    // is gone.
    paths.set_driver(0, None);
    q.submit(read(2, 0, None), 0).expect("submit");
    q.reap(0, |e| got.push(done(&e)));
    assert_eq!(
        got,
        [
            Some((1, IoOutcome::Ok)),
            Some((2, IoOutcome::Errno(libc::ENODEV)))
        ]
    );
}

#[test]
fn refreshing_lets_go_of_a_removed_driver() {
    let driver = null();
    let (mut q, paths) = queue(vec![path(driver.clone(), None)]);
    q.submit(read(1, 0, None), 0).expect("submit");
    q.reap(0, |_| {});
    // Ours, the table's and the queue's.
    assert_eq!(Arc::strong_count(&driver), 3);
    paths.set_driver(0, None);
    q.refresh_drivers();
    // The device would be closed now, with no I/O to the queue.
    assert_eq!(Arc::strong_count(&driver), 1);
}

#[test]
fn delay_us_holds_a_completion_back() {
    let start = Instant::now();
    let (mut q, paths) = queue(vec![path(null(), None)]);
    paths.0[0].shaping.set(&ShapeConfig {
        delay_us: 40_000,
        ..Default::default()
    });
    q.submit(read(1, 0, None), now(start)).expect("submit");
    // Reaped at once, it is not delivered: it waits on a timer.
    assert_eq!(q.reap(now(start), |_| panic!("delivered undelayed")), 0);
    assert_eq!(q.len(), 1);
    let got = collect(&mut q, start, 1, |e| done(e).is_some());
    assert_eq!(done(&got[0]), Some((1, IoOutcome::Ok)));
    assert!(start.elapsed() >= Duration::from_millis(40));
}

#[test]
fn a_channel_model_queues_what_its_channels_cannot_take() {
    // One channel of 20 ms: three commands at once come back 20, 40 and
    // 60 ms later, in order, on the ring's timers.
    let start = Instant::now();
    let (mut q, paths) = queue(vec![path(null(), None)]);
    paths.0[0].shaping.set(&ShapeConfig {
        model: crate::ModelConfig {
            channels: 1,
            service_us: 20_000,
            ..Default::default()
        },
        ..Default::default()
    });
    for tag in 1..=3 {
        q.submit(read(tag, 0, None), now(start)).expect("submit");
    }
    let mut order = Vec::new();
    while order.len() < 3 && start.elapsed() < Duration::from_secs(5) {
        q.wait().expect("wait");
        q.reap(now(start), |e| {
            if let Some((tag, outcome)) = done(&e) {
                assert_eq!(outcome, IoOutcome::Ok);
                order.push((tag, start.elapsed()));
            }
        });
    }
    let tags: Vec<u64> = order.iter().map(|o| o.0).collect();
    assert_eq!(tags, [1, 2, 3]);
    for (i, (_, at)) in order.iter().enumerate() {
        let want = Duration::from_millis(20 * (i as u64 + 1));
        assert!(*at >= want, "command {i} after {at:?}, before {want:?}");
    }
}

#[test]
fn hang_holds_until_released_and_then_fails_with_the_path_fault() {
    let start = Instant::now();
    let (mut q, paths) = queue(vec![path(null(), None)]);
    let shaping = &paths.0[0].shaping;
    shaping.set(&ShapeConfig {
        hang: true,
        ..Default::default()
    });
    q.submit(read(9, 0, None), now(start)).expect("submit");
    // Ticks come and go; the command stays held.
    let ticks = collect(&mut q, start, 3, |e| matches!(e, Event::Tick));
    assert_eq!(ticks.len(), 3);
    assert_eq!(q.len(), 1);
    // Released into a failing path: it fails as a link that times out does.
    shaping.set(&ShapeConfig {
        fail: Some(Fault::Errno(libc::EIO)),
        ..Default::default()
    });
    let got = collect(&mut q, start, 1, |e| done(e).is_some());
    assert_eq!(done(&got[0]), Some((9, IoOutcome::Errno(libc::EIO))));
}

#[test]
fn a_held_command_is_overdue_then_times_out() {
    let ms = 1_000_000;
    let (mut q, paths) = queue(vec![path(null(), Some(5 * ms))]);
    paths.0[0].shaping.set(&ShapeConfig {
        hang: true,
        ..Default::default()
    });
    q.submit(read(4, 0, None), 0).expect("submit");
    // Its io-timeout passed: each tick reports it overdue.
    let mut got = Vec::new();
    while !got.iter().any(|e| matches!(e, Event::Tick)) {
        q.wait().unwrap();
        q.reap(10 * ms, |e| got.push(e));
    }
    assert!(
        matches!(got[..], [Event::Overdue { tag: 4, age }, Event::Tick] if age == 10 * ms),
        "{got:?}"
    );
    // Past the kernel's own timer slack too: it times out.
    let mut got = Vec::new();
    while got.is_empty() {
        q.wait().unwrap();
        q.reap(2_000 * ms, |e| got.extend(done(&e)));
    }
    assert_eq!(got, [(4, IoOutcome::Errno(libc::ETIMEDOUT))]);
}

#[test]
fn an_overdue_command_on_the_device_is_cancelled_as_timed_out() {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let start = Instant::now();
    let (mut q, _) = queue(vec![path(Arc::new(PipeDriver(fds[0])), Some(1_000_000))]);
    let data = Arc::new(vec![0u8; 512]);
    q.submit(read(6, 0, Some(bufs(&data))), now(start))
        .expect("submit");
    let got = collect(&mut q, start, 1, |e| done(e).is_some());
    assert_eq!(done(&got[0]), Some((6, IoOutcome::Errno(libc::ETIMEDOUT))));
    assert!(q.is_empty());
    // SAFETY: both descriptors are ours and no longer used.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

/// A pipe whose reads never complete until written.
fn pipe() -> [i32; 2] {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    fds
}

fn close(fds: [i32; 2]) {
    // SAFETY: both descriptors are ours and no longer used.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

#[test]
fn io_timeout_counts_from_the_flush_when_stamped() {
    let ms = 1_000_000;
    let fds = pipe();
    let (mut q, _) = queue(vec![path(Arc::new(PipeDriver(fds[0])), Some(5 * ms))]);
    let data = Arc::new(vec![0u8; 512]);
    // Stamped 0 when it was queued (the worker's batch clock), handed to
    // the kernel at 8 ms: at 12 ms it is 4 ms on its path, not 12.
    q.submit(read(7, 0, Some(bufs(&data))), 0).expect("submit");
    q.flush_stamped(|| 8 * ms).expect("flush");
    let mut got = Vec::new();
    while !got.iter().any(|e| matches!(e, Event::Tick)) {
        q.wait().unwrap();
        q.reap(12 * ms, |e| got.push(e));
    }
    assert!(matches!(got[..], [Event::Tick]), "{got:?}");
    // Past its timeout from the flush: overdue.
    let mut got = Vec::new();
    while !got.iter().any(|e| matches!(e, Event::Tick)) {
        q.wait().unwrap();
        q.reap(14 * ms, |e| got.push(e));
    }
    assert!(
        matches!(got[..], [Event::Overdue { tag: 7, age }, Event::Tick] if age == 6 * ms),
        "{got:?}"
    );
    close(fds);
}

#[test]
fn a_command_completed_before_its_tick_is_handled_is_not_overdue() {
    let ms = 1_000_000;
    let fds = pipe();
    let (mut q, _) = queue(vec![path(Arc::new(PipeDriver(fds[0])), Some(5 * ms))]);
    let data = Arc::new(vec![0u8; 512]);
    q.submit(read(8, 0, Some(bufs(&data))), 0).expect("submit");
    q.flush().expect("flush");
    // The tick fires while the worker is away; then the command completes:
    // its completion is behind the tick's on the ring.
    std::thread::sleep(Duration::from_millis(30));
    // SAFETY: writes 512 bytes from a live buffer to our pipe.
    let n = unsafe { libc::write(fds[1], data.as_ptr().cast(), 512) };
    assert_eq!(n, 512);
    std::thread::sleep(Duration::from_millis(5));
    let mut got = Vec::new();
    while !got.iter().any(|e| matches!(e, Event::Tick)) {
        q.wait().unwrap();
        q.reap(40 * ms, |e| got.push(e));
    }
    assert!(
        matches!(
            got[..],
            [
                Event::Done {
                    tag: 8,
                    outcome: IoOutcome::Ok,
                    ..
                },
                Event::Tick
            ]
        ),
        "{got:?}"
    );
    close(fds);
}

#[test]
fn discarding_skips_shaping_and_take_held_drops_what_is_held() {
    let start = Instant::now();
    let (mut q, paths) = queue(vec![path(null(), None), path(Arc::new(NopDriver), None)]);
    paths.0[0].shaping.set(&ShapeConfig {
        hang: true,
        ..Default::default()
    });
    q.submit(read(1, 0, None), 0).expect("submit");
    assert_eq!(q.reap(0, |_| {}), 0, "held");
    paths.0[1].shaping.set(&ShapeConfig {
        delay_us: 10_000_000,
        ..Default::default()
    });
    q.submit(read(2, 1, None), 0).expect("submit");
    assert_eq!(q.take_held(), [1]);
    // The 10 s delay does not apply to a queue being emptied.
    let mut got = Vec::new();
    while got.is_empty() && start.elapsed() < Duration::from_secs(5) {
        q.wait().unwrap();
        q.reap_discarding(now(start), |e| got.extend(done(&e)));
    }
    assert_eq!(got, [(2, IoOutcome::Ok)]);
    assert!(q.is_empty());
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn expired_timers_come_back_at_once() {
    let start = Instant::now();
    let (mut q, paths) = queue(vec![path(null(), None)]);
    paths.0[0].shaping.set(&ShapeConfig {
        delay_us: 10_000_000,
        ..Default::default()
    });
    q.submit(read(1, 0, None), 0).expect("submit");
    q.reap(0, |_| panic!("delivered undelayed"));
    q.defer(2, Duration::from_secs(10)).expect("defer");
    q.flush().expect("submit");
    q.expire_timers();
    let got = collect(&mut q, start, 2, |e| !matches!(e, Event::Tick));
    assert!(
        matches!(
            got[..],
            [Event::Done { tag: 1, .. }, Event::Timer { tag: 2 }]
                | [Event::Timer { tag: 2 }, Event::Done { tag: 1, .. }]
        ),
        "{got:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
}

mod inline_file;
mod registered;
