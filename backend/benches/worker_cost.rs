//! worker-cost: the worker's own cost per request, on one thread and without
//! a frontend: a split ring in process memory, filled with `--depth` requests
//! at a time, each batch handed to `Worker::process_queue` over a null path
//! (EVENT_IDX on, no call fd, no spin), its used entries checked.
//!
//! What it leaves out is what the side-by-side benchmark against
//! qemu-storage-daemon measures and cannot separate: lines the frontend
//! writes on another CPU, waking it, waiting for its kicks. What it keeps is
//! deterministic under `valgrind --tool=callgrind` (instructions per request:
//! `tests/scripts/worker-cost-ir`), so a change to the per-request path shows
//! what it buys without this machine's noise.
//!
//! `cargo bench -p vhost-mpath --bench worker_cost -- [--requests N]
//! [--depth D] [--bs BYTES] [--write] [--runs R] [--policy NAME]
//! [--path SPEC ...]` (paths as the daemon's `--path`; default `null:1G`,
//! every path must hold 1 GiB).

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser as _;
use vhost_mpath::cli::Args;
use vhost_mpath::config::Settings;
use vhost_mpath::disk::Disk;
use vhost_mpath::virtio::Limits;
use vhost_mpath::worker::Worker;
use vhost_user_backend::{VringRwLock, VringT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};

const QSIZE: u16 = 256;
const DESC: u64 = 0x0;
const AVAIL: u64 = 0x1000;
const USED: u64 = 0x2000;
const HDR: u64 = 0x4000;
const STATUS: u64 = 0x6000;
const DATA: u64 = 0x10_0000;
const F_NEXT: u16 = 1;
const F_WRITE: u16 = 2;
const VIRTIO_BLK_T_IN: u32 = 0;
const VIRTIO_BLK_T_OUT: u32 = 1;
const DISK_SECTORS: u64 = (1 << 30) / 512;

struct Opts {
    requests: u64,
    depth: u16,
    bs: u32,
    write: bool,
    runs: usize,
    policy: String,
    /// The disk's paths (`--path` as the daemon takes it; default one null path).
    paths: Vec<String>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        requests: 2_000_000,
        depth: 32,
        bs: 4096,
        write: false,
        runs: 5,
        policy: "auto".into(),
        paths: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--requests" => o.requests = num(&val("--requests")?)?,
            "--depth" => o.depth = num(&val("--depth")?)?,
            "--bs" => o.bs = num(&val("--bs")?)?,
            "--runs" => o.runs = num(&val("--runs")?)?,
            "--policy" => o.policy = val("--policy")?,
            "--path" => o.paths.push(val("--path")?),
            "--write" => o.write = true,
            // cargo bench passes this to every bench target.
            "--bench" => {}
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.paths.is_empty() {
        o.paths.push("null:1G".into());
    }
    if o.depth == 0 || o.depth > QSIZE / 3 {
        return Err(format!("--depth must be 1..={}", QSIZE / 3));
    }
    if o.bs == 0 || !o.bs.is_multiple_of(512) || o.bs > 1 << 20 {
        return Err("--bs must be a multiple of 512 up to 1 MiB".into());
    }
    Ok(o)
}

fn num<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("not a number: {s}"))
}

/// The driver's side: guest memory, one split ring, requests in fixed slots.
struct Guest {
    mem: GuestMemoryMmap,
    vring: VringRwLock,
    avail_idx: u16,
    used_seen: u16,
    rng: u64,
}

impl Guest {
    fn new(o: &Opts) -> Guest {
        let size = DATA as usize + usize::from(o.depth) * o.bs as usize;
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size)]).expect("memory");
        let vring = VringRwLock::new(GuestMemoryAtomic::new(mem.clone()), QSIZE).expect("vring");
        vring.set_queue_size(QSIZE);
        vring.set_queue_info(DESC, AVAIL, USED).expect("queue info");
        vring.set_queue_event_idx(true);
        vring.set_queue_ready(true);
        vring.set_enabled(true);
        let g = Guest {
            mem,
            vring,
            avail_idx: 0,
            used_seen: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
        };
        // Slot s: descriptors 3s (header), 3s+1 (data), 3s+2 (status).
        for s in 0..o.depth {
            let n = u64::from(s);
            let data_flags = if o.write { F_NEXT } else { F_WRITE | F_NEXT };
            g.desc(3 * s, HDR + 16 * n, 16, F_NEXT, 3 * s + 1);
            g.desc(
                3 * s + 1,
                DATA + n * u64::from(o.bs),
                o.bs,
                data_flags,
                3 * s + 2,
            );
            g.desc(3 * s + 2, STATUS + n, 1, F_WRITE, 0);
        }
        g
    }

    fn desc(&self, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let at = GuestAddress(DESC + 16 * u64::from(i));
        let mut d = [0u8; 16];
        d[0..8].copy_from_slice(&addr.to_le_bytes());
        d[8..12].copy_from_slice(&len.to_le_bytes());
        d[12..14].copy_from_slice(&flags.to_le_bytes());
        d[14..16].copy_from_slice(&next.to_le_bytes());
        self.mem.write_slice(&d, at).expect("descriptor");
    }

    fn next_sector(&mut self, bs: u32) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let blocks = DISK_SECTORS * 512 / u64::from(bs);
        (self.rng % blocks) * u64::from(bs) / 512
    }

    /// Makes every slot's request available again, with a new sector each.
    fn offer(&mut self, o: &Opts) {
        let kind = if o.write {
            VIRTIO_BLK_T_OUT
        } else {
            VIRTIO_BLK_T_IN
        };
        for s in 0..o.depth {
            let n = u64::from(s);
            let mut h = [0u8; 16];
            h[0..4].copy_from_slice(&kind.to_le_bytes());
            h[8..16].copy_from_slice(&self.next_sector(o.bs).to_le_bytes());
            self.mem
                .write_slice(&h, GuestAddress(HDR + 16 * n))
                .expect("header");
            let slot = u64::from(self.avail_idx % QSIZE);
            self.mem
                .write_obj((3 * s).to_le(), GuestAddress(AVAIL + 4 + 2 * slot))
                .expect("avail entry");
            self.avail_idx = self.avail_idx.wrapping_add(1);
        }
        self.mem
            .write_obj(self.avail_idx.to_le(), GuestAddress(AVAIL + 2))
            .expect("avail idx");
    }

    /// Takes the used entries, as a driver does before it sleeps (and
    /// asks to be called at the next one).
    fn take_used(&mut self, o: &Opts) -> Result<(), String> {
        let used: u16 = self.mem.read_obj(GuestAddress(USED + 2)).expect("used idx");
        let n = used.wrapping_sub(self.used_seen);
        if n != o.depth {
            return Err(format!("{n} used entries for {} requests", o.depth));
        }
        for s in 0..u64::from(o.depth) {
            let st: u8 = self.mem.read_obj(GuestAddress(STATUS + s)).expect("status");
            if st != 0 {
                return Err(format!("request {s}: status {st}"));
            }
        }
        self.used_seen = used;
        // used_event (after the available ring's entries): call at the
        // next used entry.
        let used_event = GuestAddress(AVAIL + 4 + 2 * u64::from(QSIZE));
        self.mem
            .write_obj(used.to_le(), used_event)
            .expect("used_event");
        Ok(())
    }
}

fn worker(o: &Opts, g: &Guest) -> Worker {
    let qsize = QSIZE.to_string();
    let mut args = vec![
        "vhost-mpath",
        "--socket-path",
        "/nonexistent/worker-cost.sock",
        "--policy",
        &o.policy,
        "--queue-size",
        &qsize,
    ];
    for p in &o.paths {
        args.extend(["--path", p]);
    }
    let args = Args::parse_from(args);
    let settings = Settings::from_args(&args).expect("settings");
    let disk = Arc::new(Disk::open(&settings).expect("null disk"));
    let limits = Limits::new(&disk, QSIZE);
    let mem = GuestMemoryAtomic::new(g.mem.clone());
    Worker::new(disk, limits, QSIZE, mem, Arc::new(AtomicUsize::new(0)), 8)
        .expect("worker (io_uring)")
}

/// One run: `o.requests` requests in batches of `o.depth`; the time spent
/// in `process_queue` only.
fn run(o: &Opts) -> Result<Duration, String> {
    let mut g = Guest::new(o);
    let mut w = worker(o, &g);
    let batches = o.requests.div_ceil(u64::from(o.depth));
    let mut spent = Duration::ZERO;
    for _ in 0..batches {
        g.offer(o);
        let t = Instant::now();
        w.process_queue(&g.vring, true);
        spent += t.elapsed();
        g.take_used(o)?;
    }
    Ok(spent)
}

fn main() -> std::process::ExitCode {
    // No spin: the bench has no frontend to wait for.
    std::env::set_var("VHOST_MPATH_SPIN_US", "0");
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("worker-cost: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut per_req = Vec::with_capacity(o.runs);
    for _ in 0..o.runs {
        match run(&o) {
            Ok(d) => {
                let batches = o.requests.div_ceil(u64::from(o.depth));
                per_req.push(d.as_nanos() as f64 / (batches * u64::from(o.depth)) as f64)
            }
            Err(e) => {
                eprintln!("worker-cost: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    per_req.sort_by(f64::total_cmp);
    let median = per_req[per_req.len() / 2];
    println!(
        "{:<24} {:>10} {:>8} {:>10} {:>10}",
        "workload", "requests", "runs", "ns/req", "min ns"
    );
    println!(
        "{:<24} {:>10} {:>8} {:>10.1} {:>10.1}",
        format!(
            "{}k QD{} {} {}",
            o.bs / 1024,
            o.depth,
            if o.write { "write" } else { "read" },
            o.policy
        ),
        o.requests,
        o.runs,
        median,
        per_req[0]
    );
    std::process::ExitCode::SUCCESS
}
