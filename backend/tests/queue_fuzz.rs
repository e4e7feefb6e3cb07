//! Seeded property test of the queue handling: random split rings (random
//! descriptor tables, available indexes and heads, flags, next pointers,
//! indirect tables, ring sizes and addresses) handed to a real worker's
//! `process_queue` (or its polling loop) over a null path, so virtio-queue's
//! iteration, our parser and the worker's request handling all see them. No
//! case may panic, hang or publish a used entry outside the ring.
//!
//! `QUEUE_FUZZ_CASES` (default 100000) and `QUEUE_FUZZ_SEED` change the run;
//! a failure names the case and the seed that reproduce it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser as _;
use fastrand::Rng;
use vhost_mpath::cli::Args;
use vhost_mpath::config::Settings;
use vhost_mpath::disk::Disk;
use vhost_mpath::virtio::Limits;
use vhost_mpath::worker::Worker;
use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::QueueT;
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};

const MAX_QUEUE: u16 = 64;
/// Guest memory: 64 KiB at 0 and 64 KiB at 1 MiB (a hole between).
const LOW: u64 = 0x1_0000;
const HIGH: u64 = 0x10_0000;
const DESC: u64 = 0x0;
const AVAIL: u64 = 0x800;
const USED: u64 = 0x1000;
const INDIRECT: u64 = 0x2000;
const HEADERS: u64 = 0x3000;
const DATA: u64 = 0x4000;
/// Null disk: 1 MiB.
const CAPACITY_SECTORS: u64 = 2048;
/// One case may take this long (debug build, loaded machine) before it
/// counts as a hang.
const CASE_LIMIT: Duration = Duration::from_secs(10);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn addr(r: &mut Rng) -> u64 {
    match r.u64(..10) {
        0..=2 => HEADERS + 16 * r.u64(..16),
        3..=6 => DATA + r.u64(..LOW - DATA),
        7 => INDIRECT + 16 * r.u64(..256),
        8 => HIGH + r.u64(..0x1_0000 + 0x1000),
        _ => match r.u64(..4) {
            0 => r.u64(..),
            1 => LOW - r.u64(..64),
            2 => u64::MAX - r.u64(..4096),
            _ => LOW + r.u64(..HIGH - LOW),
        },
    }
}

fn len(r: &mut Rng) -> u32 {
    match r.u64(..10) {
        0 => 0,
        1 => 1,
        2 => 16,
        3 => 512,
        4 => 513,
        5 => 4096,
        6 => (r.u64(..16) * 512) as u32,
        7 => r.u64(..) as u32,
        8 => u32::MAX - r.u64(..16) as u32,
        _ => r.u64(..9000) as u32,
    }
}

/// A descriptor with flags NEXT/WRITE/INDIRECT and a next index, random
/// around `size` entries.
fn desc(r: &mut Rng, size: u16) -> [u8; 16] {
    let mut flags = 0u16;
    if r.u64(..100) < 60 {
        flags |= 1; // NEXT
    }
    if r.u64(..100) < 50 {
        flags |= 2; // WRITE
    }
    let mut a = addr(r);
    let mut l = len(r);
    if r.u64(..100) < 8 {
        flags |= 4; // INDIRECT
        a = INDIRECT + 16 * r.u64(..256);
        l = match r.u64(..4) {
            0 => 16 * (1 + r.u64(..16)) as u32,
            1 => 1 + r.u64(..64) as u32,
            2 => 16 * r.u64(..0x2_0000) as u32,
            _ => len(r),
        };
    }
    let next = if r.u64(..100) < 90 {
        r.u64(..u64::from(size.max(1))) as u16
    } else {
        r.u64(..) as u16
    };
    let mut d = [0u8; 16];
    d[0..8].copy_from_slice(&a.to_le_bytes());
    d[8..12].copy_from_slice(&l.to_le_bytes());
    d[12..14].copy_from_slice(&flags.to_le_bytes());
    d[14..16].copy_from_slice(&next.to_le_bytes());
    d
}

fn header(r: &mut Rng) -> [u8; 16] {
    let types = [0u32, 1, 4, 8, 11, 13, 99, r.u64(..) as u32];
    let t = types[r.u64(..types.len() as u64) as usize];
    let sector = match r.u64(..4) {
        0 => r.u64(..CAPACITY_SECTORS),
        1 => CAPACITY_SECTORS - r.u64(..16),
        2 => r.u64(..),
        _ => r.u64(..16),
    };
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&t.to_le_bytes());
    h[8..16].copy_from_slice(&sector.to_le_bytes());
    h
}

/// Everything one case needs: a worker on a null disk and a vring over
/// guest memory, reused from case to case.
struct Bench {
    mem: GuestMemoryMmap,
    /// The case's view of [0, DATA): tables, rings, headers; written at once.
    image: Vec<u8>,
    vring: VringRwLock,
    worker: Worker,
    in_flight: Arc<AtomicUsize>,
}

impl Bench {
    fn new() -> Bench {
        let args = Args::parse_from([
            "vhost-mpath",
            "--socket-path",
            "/nonexistent/fuzz.sock",
            "--path",
            "null:1M",
            "--queue-size",
            "64",
        ]);
        let settings = Settings::from_args(&args).expect("settings");
        let disk = Arc::new(Disk::open(&settings).expect("null disk"));
        let mem = GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), LOW as usize),
            (GuestAddress(HIGH), 0x1_0000),
        ])
        .expect("guest memory");
        let atomic = GuestMemoryAtomic::new(mem.clone());
        let in_flight = Arc::new(AtomicUsize::new(0));
        let limits = Limits::new(&disk, MAX_QUEUE);
        let worker = Worker::new(
            disk,
            limits,
            MAX_QUEUE,
            atomic.clone(),
            in_flight.clone(),
            8,
        )
        .expect("worker (io_uring)");
        let vring = VringRwLock::new(atomic, MAX_QUEUE).expect("vring");
        Bench {
            mem,
            image: vec![0u8; DATA as usize],
            vring,
            worker,
            in_flight,
        }
    }

    /// Writes into the case's image of [0, DATA) (one copy per case is
    /// much cheaper than many small guest-memory writes in a debug build).
    fn put(&mut self, at: u64, bytes: &[u8]) {
        let at = at as usize;
        self.image[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// Runs one case; returns how many used entries it published.
    fn one_case(&mut self, r: &mut Rng) -> Result<u64, String> {
        let asked: u16 = match r.u64(..20) {
            0 => 0,
            1 => 3,
            2 => 128,
            3 => 1,
            4..=7 => 1 << r.u64(..6),
            _ => MAX_QUEUE,
        };
        // virtio-queue ignores an invalid size and keeps the previous one:
        // the rest of the case is laid out for the size in force.
        self.vring.set_queue_size(asked);
        let size = self.vring.get_ref().get_queue().size();
        let (desc_at, avail_at, used_at) = if r.u64(..100) < 3 {
            (addr(r), addr(r), addr(r))
        } else {
            (DESC, AVAIL, USED)
        };
        // Descriptor table, indirect area, headers.
        for i in 0..u64::from(size.clamp(1, MAX_QUEUE)) {
            self.put(DESC + 16 * i, &desc(r, size));
        }
        // Some well-formed requests among the garbage, so that whole
        // requests reach the path and complete: header, data, status.
        let table = u64::from(size.clamp(1, MAX_QUEUE));
        let mut requests = Vec::new();
        if table >= 3 && r.u64(..100) < 50 {
            for _ in 0..r.u64(..table / 3 + 1) {
                let i = r.u64(..table - 2);
                requests.push(i as u16);
                let write = r.u64(..100) < 50;
                let data_len = match r.u64(..4) {
                    0 => len(r),
                    _ => 512 * (1 + r.u64(..8)) as u32,
                };
                let data_flags = if write { 1 } else { 3 }; // NEXT, WRITE|NEXT
                let descs = [
                    (HEADERS + 16 * r.u64(..16), 16u32, 1u16),
                    (DATA + r.u64(..LOW - DATA - 0x1000), data_len, data_flags),
                    (DATA + r.u64(..LOW - DATA), 1, 2),
                ];
                for (k, (a, l, f)) in descs.into_iter().enumerate() {
                    let at = i + k as u64;
                    let mut d = [0u8; 16];
                    d[0..8].copy_from_slice(&a.to_le_bytes());
                    d[8..12].copy_from_slice(&l.to_le_bytes());
                    d[12..14].copy_from_slice(&f.to_le_bytes());
                    d[14..16].copy_from_slice(&((at + 1) as u16).to_le_bytes());
                    self.put(DESC + 16 * at, &d);
                }
            }
        }
        for i in 0..r.u64(..64) {
            let at = INDIRECT + 16 * r.u64(..256);
            let d = desc(r, (1 + i) as u16);
            self.put(at, &d);
        }
        for i in 0..16 {
            let h = header(r);
            self.put(HEADERS + 16 * i, &h);
        }
        // Rings: the device's position, the driver's index, the heads.
        let start = r.u64(..) as u16;
        let ahead: u16 = match r.u64(..10) {
            0 => r.u64(..) as u16,
            1 => size.wrapping_add(1 + r.u64(..4) as u16),
            2..=5 => r.u64(..u64::from(size) + 1) as u16,
            // Mostly a few chains: many cases beat long rings for coverage.
            _ => r.u64(..u64::from(size.min(4)) + 1) as u16,
        };
        let avail_idx = start.wrapping_add(ahead);
        let ring_len = u64::from(size.clamp(1, MAX_QUEUE));
        self.put(AVAIL, &(r.u64(..2) as u16).to_le_bytes());
        self.put(AVAIL + 2, &avail_idx.to_le_bytes());
        for i in 0..ring_len {
            let head = if !requests.is_empty() && r.u64(..100) < 40 {
                requests[r.u64(..requests.len() as u64) as usize]
            } else if r.u64(..100) < 93 {
                r.u64(..ring_len) as u16
            } else {
                r.u64(..) as u16
            };
            self.put(AVAIL + 4 + 2 * i, &head.to_le_bytes());
        }
        self.put(AVAIL + 4 + 2 * ring_len, &(r.u64(..) as u16).to_le_bytes());
        self.put(USED, &0u16.to_le_bytes());
        self.put(USED + 2, &start.to_le_bytes());

        self.mem
            .write_slice(&self.image, GuestAddress(0))
            .expect("image inside guest memory");
        let v = &self.vring;
        let _ = v.set_queue_info(desc_at, avail_at, used_at);
        v.set_queue_event_idx(r.u64(..100) < 50);
        v.set_queue_next_avail(start);
        v.set_queue_next_used(start);
        v.set_queue_ready(true);
        v.set_enabled(true);

        if r.u64(..100) < 15 {
            // The adaptive polling path (`--poll-us`).
            self.worker.poll(&self.vring, Duration::from_micros(20));
        } else {
            self.worker.process_queue(&self.vring, r.u64(..100) < 80);
        }
        // Null I/O completes through the ring: reap until nothing is in flight.
        while self.in_flight.load(Ordering::Acquire) > 0 {
            self.worker.process_completions(&self.vring);
            thread::yield_now();
        }
        // A device reset between cases: a queue the case broke (or stopped)
        // is served again by the next one, as after a frontend's reset.
        self.worker.drain_and_discard();
        // Every used entry names a descriptor of the ring.
        let mut published = 0;
        if (desc_at, avail_at, used_at) == (DESC, AVAIL, USED) && size > 0 && size <= MAX_QUEUE {
            let used_idx: u16 = self.mem.read_obj(GuestAddress(USED + 2)).unwrap_or(start);
            let n = used_idx.wrapping_sub(start);
            published = u64::from(n);
            if n > size {
                return Err(format!("published {n} used entries on a ring of {size}"));
            }
            for k in 0..n {
                let slot = u64::from(start.wrapping_add(k) % size);
                let id: u32 = self
                    .mem
                    .read_obj(GuestAddress(USED + 4 + 8 * slot))
                    .unwrap_or(0);
                if id >= u32::from(size) {
                    return Err(format!("used id {id} outside a ring of {size}"));
                }
            }
        }
        Ok(published)
    }
}

#[test]
fn random_rings_never_panic_hang_or_publish_out_of_range() {
    let cases = env_u64("QUEUE_FUZZ_CASES", 100_000);
    let seed = env_u64("QUEUE_FUZZ_SEED", 0x5eed_f00d_c0de);
    let done = Arc::new(AtomicU64::new(0));
    let d = done.clone();
    let start = Instant::now();
    let runner = thread::spawn(move || -> Result<(u64, u64), String> {
        let mut bench = Bench::new();
        // Used entries published, and cases that published any.
        let (mut used, mut served) = (0u64, 0u64);
        for case in 0..cases {
            // Each case from its own seed: a failure replays alone.
            let mut r = Rng::with_seed(seed ^ case.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            r.u64(..);
            let n = bench
                .one_case(&mut r)
                .map_err(|e| format!("case {case} (seed {seed:#x}): {e}"))?;
            used += n;
            served += u64::from(n > 0);
            d.store(case + 1, Ordering::Release);
        }
        bench.worker.drain_and_discard();
        Ok((used, served))
    });
    let mut last = (0, Instant::now());
    while !runner.is_finished() {
        thread::sleep(Duration::from_millis(50));
        let n = done.load(Ordering::Acquire);
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > CASE_LIMIT {
            panic!(
                "case {n} (seed {seed:#x}) did not finish within {CASE_LIMIT:?}: the queue \
                 handling hangs or spins (QUEUE_FUZZ_SEED={seed} and QUEUE_FUZZ_CASES={} \
                 replay it)",
                n + 1
            );
        }
    }
    match runner.join() {
        Ok(Ok((used, served))) => eprintln!(
            "{cases} random rings in {:.1} s (seed {seed:#x}): {served} published used \
             entries, {used} in all",
            start.elapsed().as_secs_f64()
        ),
        Ok(Err(e)) => panic!("{e}"),
        Err(p) => std::panic::resume_unwind(p),
    }
}
