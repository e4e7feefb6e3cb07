//! Random I/O at a fixed queue depth on one queue, for the benchmark.

use crate::client::{Client, OpError};
use crate::ops::completion_result;
use crate::pattern::{pattern, Rng};
use blkio::{Completion, ReqFlags};
use hdrhistogram::Histogram;
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

/// One benchmark workload: random reads or writes of `block_size` bytes, `queue_depth`
/// requests in flight on queue 0.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: String,
    pub block_size: usize,
    pub queue_depth: usize,
    pub write: bool,
    /// Half of the requests use this size instead (fio `bssplit` 50/50).
    pub mixed_block_size: Option<usize>,
}

impl Workload {
    pub fn new(block_size: usize, queue_depth: usize, write: bool) -> Workload {
        let rw = if write { "randwrite" } else { "randread" };
        Workload {
            name: format!("{}k QD{queue_depth} {rw}", block_size / 1024),
            block_size,
            queue_depth,
            write,
            mixed_block_size: None,
        }
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

/// Runs `w` for `duration` on queue 0 (submitting stops then; in-flight requests are
/// reaped). The first failed request ends the run with its error.
pub fn run(
    client: &mut Client,
    w: &Workload,
    duration: Duration,
    seed: u64,
) -> Result<LoadResult, OpError> {
    let bs = w.slot_size();
    assert!(
        bs * w.queue_depth <= client.mem_size(),
        "{}: needs {} bytes of buffer memory",
        w.name,
        bs * w.queue_depth
    );
    let blocks = client.capacity() / bs as u64;
    let mut sizes = vec![w.block_size; w.queue_depth];
    assert!(blocks > 0, "disk smaller than one block");
    if w.write {
        for slot in 0..w.queue_depth {
            client
                .memory
                .copy_in(slot * bs, &pattern(seed, slot as u64, bs));
        }
    }
    let mut rng = Rng::new(seed);
    let mut latency_ns = Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
    let mut started = vec![Instant::now(); w.queue_depth];
    let mut completions: Vec<MaybeUninit<Completion>> =
        (0..w.queue_depth).map(|_| MaybeUninit::uninit()).collect();

    let begin = Instant::now();
    let end = begin + duration;
    let pick = |rng: &mut Rng| match w.mixed_block_size {
        Some(other) if rng.below(2) == 1 => other,
        _ => w.block_size,
    };
    for (slot, start) in started.iter_mut().enumerate() {
        *start = Instant::now();
        sizes[slot] = pick(&mut rng);
        submit(client, w, slot, sizes[slot], rng.below(blocks) * bs as u64);
    }
    let mut in_flight = w.queue_depth;
    let mut ios = 0u64;
    let mut bytes = 0u64;
    while in_flight > 0 {
        let mut timeout = client.timeout;
        let n = client.queues[0]
            .do_io(&mut completions, 1, Some(&mut timeout), None)
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
                sizes[slot] = pick(&mut rng);
                submit(client, w, slot, sizes[slot], rng.below(blocks) * bs as u64);
            } else {
                in_flight -= 1;
            }
        }
    }
    Ok(LoadResult {
        ios,
        bytes,
        elapsed: begin.elapsed(),
        latency_ns,
    })
}

fn submit(client: &mut Client, w: &Workload, slot: usize, len: usize, offset: u64) {
    let buf = client.memory.ptr(slot * w.slot_size(), len);
    let queue = &mut client.queues[0];
    if w.write {
        queue.write(offset, buf, len, slot, ReqFlags::empty());
    } else {
        queue.read(offset, buf, len, slot, ReqFlags::empty());
    }
}
