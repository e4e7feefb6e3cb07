//! Random I/O at a fixed queue depth on one queue (or on several, one client
//! thread each), for the benchmark.

use crate::client::{Client, OpError};
use crate::ops::completion_result;
use crate::pattern::{pattern, Rng};
use blkio::{Blkioq, Completion, ReqFlags};
use hdrhistogram::Histogram;
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

/// One benchmark workload: random (or, with `sequential`, consecutive) reads or writes
/// of `block_size` bytes, `queue_depth` requests in flight on each of `queues` queues.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: String,
    pub block_size: usize,
    pub queue_depth: usize,
    /// Queues driven at once (1: queue 0 on the caller's thread; more: one
    /// thread per queue, as a guest's vCPUs would).
    pub queues: usize,
    pub write: bool,
    /// Half of the requests use this size instead (fio `bssplit` 50/50).
    pub mixed_block_size: Option<usize>,
    /// Each queue walks the disk block after block (fio `rw=write`/`read`) instead of
    /// picking random blocks; queue q starts at q/queues of the disk.
    pub sequential: bool,
}

impl Workload {
    pub fn new(block_size: usize, queue_depth: usize, write: bool) -> Workload {
        let rw = if write { "randwrite" } else { "randread" };
        Workload {
            name: format!("{}k QD{queue_depth} {rw}", block_size / 1024),
            block_size,
            queue_depth,
            queues: 1,
            write,
            mixed_block_size: None,
            sequential: false,
        }
    }

    /// The same load at consecutive offsets (a streaming write or read).
    pub fn sequential(mut self) -> Workload {
        self.sequential = true;
        let rw = if self.write { "seqwrite" } else { "seqread" };
        self.name = format!("{}k QD{} {rw}", self.block_size / 1024, self.queue_depth);
        self
    }

    /// The same load on each of `n` queues at once.
    pub fn on_queues(mut self, n: usize) -> Workload {
        self.queues = n.max(1);
        if self.queues > 1 {
            self.name = format!("{} {}q", self.name, self.queues);
        }
        self
    }

    /// Buffer memory the client needs.
    pub fn mem_size(&self) -> usize {
        self.slot_size() * self.queue_depth * self.queues
    }

    /// Random 50/50 mix of `block_size` and `other`.
    pub fn mixed(block_size: usize, other: usize, queue_depth: usize, write: bool) -> Workload {
        let mut w = Workload::new(block_size, queue_depth, write);
        w.name = format!("{}k/{}k QD{queue_depth}", block_size / 1024, other / 1024);
        w.mixed_block_size = Some(other);
        w
    }

    /// The buffer space one slot needs.
    fn slot_size(&self) -> usize {
        self.block_size.max(self.mixed_block_size.unwrap_or(0))
    }
}

/// What one run measured.
pub struct LoadResult {
    pub ios: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// Per-request latency, submission to completion, in nanoseconds.
    pub latency_ns: Histogram<u64>,
    /// Times the client's queue threads went to sleep waiting for
    /// completions (voluntary context switches): each cost a wake-up.
    pub sleeps: u64,
}

impl LoadResult {
    pub fn iops(&self) -> f64 {
        self.ios as f64 / self.elapsed.as_secs_f64()
    }

    pub fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64 / self.elapsed.as_secs_f64()
    }

    pub fn latency_us(&self, quantile: f64) -> f64 {
        self.latency_ns.value_at_quantile(quantile) as f64 / 1000.0
    }
}

/// Runs `w` for `duration` on its queues (submitting stops then; in-flight
/// requests are reaped). The first failed request ends the run with its error.
pub fn run(
    client: &mut Client,
    w: &Workload,
    duration: Duration,
    seed: u64,
) -> Result<LoadResult, OpError> {
    let bs = w.slot_size();
    let slots = w.queue_depth * w.queues;
    assert!(
        w.mem_size() <= client.mem_size(),
        "{}: needs {} bytes of buffer memory",
        w.name,
        w.mem_size()
    );
    assert!(
        w.queues <= client.queues.len(),
        "{}: needs {} queues, the client has {}",
        w.name,
        w.queues,
        client.queues.len()
    );
    let blocks = client.capacity() / bs as u64;
    assert!(blocks > 0, "disk smaller than one block");
    if w.write {
        for slot in 0..slots {
            client
                .memory
                .copy_in(slot * bs, &pattern(seed, slot as u64, bs));
        }
    }
    // Buffer addresses, slot by slot (queue q owns slots q * QD ..).
    let bufs: Vec<usize> = (0..slots)
        .map(|slot| client.memory.ptr(slot * bs, bs) as usize)
        .collect();
    let timeout = client.timeout;
    let begin = Instant::now();
    let end = begin + duration;
    let mut parts = Vec::with_capacity(w.queues);
    if w.queues == 1 {
        parts.push(run_queue(
            &mut client.queues[0],
            w,
            &bufs,
            blocks,
            0,
            end,
            timeout,
            seed,
        ));
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = client.queues[..w.queues]
                .iter_mut()
                .zip(bufs.chunks(w.queue_depth))
                .enumerate()
                .map(|(q, (queue, bufs))| {
                    let seed = seed.wrapping_add((q as u64) << 32);
                    let first = blocks * q as u64 / w.queues as u64;
                    s.spawn(move || run_queue(queue, w, bufs, blocks, first, end, timeout, seed))
                })
                .collect();
            for h in handles {
                parts.push(h.join().expect("load thread"));
            }
        });
    }
    let mut total = Queued {
        ios: 0,
        bytes: 0,
        latency_ns: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds"),
        sleeps: 0,
    };
    for p in parts {
        let p = p?;
        total.sleeps += p.sleeps;
        total.ios += p.ios;
        total.bytes += p.bytes;
        total.latency_ns.add(&p.latency_ns).expect("same bounds");
    }
    Ok(LoadResult {
        ios: total.ios,
        bytes: total.bytes,
        elapsed: begin.elapsed(),
        latency_ns: total.latency_ns,
        sleeps: total.sleeps,
    })
}

/// What one queue's loop counted.
struct Queued {
    ios: u64,
    bytes: u64,
    latency_ns: Histogram<u64>,
    sleeps: u64,
}

/// The closed loop on one queue: `bufs.len()` requests in flight until `end`.
/// A sequential workload starts at block `first`.
#[allow(clippy::too_many_arguments)]
fn run_queue(
    queue: &mut Blkioq,
    w: &Workload,
    bufs: &[usize],
    blocks: u64,
    first: u64,
    end: Instant,
    timeout: Duration,
    seed: u64,
) -> Result<Queued, OpError> {
    let sleeps = crate::cpu::thread_sleeps();
    let bs = w.slot_size();
    let depth = bufs.len();
    let mut rng = Rng::new(seed);
    let mut latency_ns = Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
    let mut started = vec![Instant::now(); depth];
    let mut sizes = vec![w.block_size; depth];
    let mut completions: Vec<MaybeUninit<Completion>> =
        (0..depth).map(|_| MaybeUninit::uninit()).collect();
    let pick = |rng: &mut Rng| match w.mixed_block_size {
        Some(other) if rng.below(2) == 1 => other,
        _ => w.block_size,
    };
    // A new request in `slot`: its size, then a random block (or the next one).
    let mut next = first;
    let mut refill = |queue: &mut Blkioq, rng: &mut Rng, sizes: &mut [usize], slot: usize| {
        sizes[slot] = pick(rng);
        let block = if w.sequential {
            let b = next;
            next = (next + 1) % blocks;
            b
        } else {
            rng.below(blocks)
        };
        submit(
            queue,
            w.write,
            bufs[slot],
            slot,
            sizes[slot],
            block * bs as u64,
        );
    };
    for (slot, start) in started.iter_mut().enumerate() {
        *start = Instant::now();
        refill(queue, &mut rng, &mut sizes, slot);
    }
    let mut in_flight = depth;
    let mut ios = 0u64;
    let mut bytes = 0u64;
    while in_flight > 0 {
        let mut left = timeout;
        let n = queue
            .do_io(&mut completions, 1, Some(&mut left), None)
            .map_err(|e| OpError {
                errno: e.errno().raw_os_error(),
                message: Some(e.message().to_string()),
            })?;
        let now = Instant::now();
        for c in &completions[..n] {
            // SAFETY: do_io initialised the first `n` completions.
            let c = unsafe { c.assume_init_read() };
            completion_result(&c)?;
            let slot = c.user_data;
            latency_ns.saturating_record((now - started[slot]).as_nanos() as u64);
            ios += 1;
            bytes += sizes[slot] as u64;
            if now < end {
                started[slot] = now;
                refill(queue, &mut rng, &mut sizes, slot);
            } else {
                in_flight -= 1;
            }
        }
    }
    Ok(Queued {
        ios,
        bytes,
        latency_ns,
        sleeps: crate::cpu::thread_sleeps() - sleeps,
    })
}

fn submit(queue: &mut Blkioq, write: bool, buf: usize, slot: usize, len: usize, offset: u64) {
    let buf = buf as *mut u8;
    if write {
        queue.write(offset, buf, len, slot, ReqFlags::empty());
    } else {
        queue.read(offset, buf, len, slot, ReqFlags::empty());
    }
}
