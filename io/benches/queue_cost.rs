//! queue-cost: an I/O queue's own cost per command on the ring path, without
//! a worker or a device: `--depth` commands at a time (4 KiB writes with
//! their guest buffers, as far as the queue can tell, each a NOP on the
//! ring), submitted, waited for and reaped, the buffers used again.
//!
//! The null path's inline completions are what `worker_cost` measures; this
//! is the other half (slots, ring entries, completions). Under `valgrind
//! --tool=callgrind --toggle-collect='*queue_cost*round*'` its instructions
//! per command are deterministic (the kernel's work is not counted) unless
//! `--io-timeout-ms` arms the periodic tick, whose firings depend on time.
//!
//! `cargo bench -p mpath-io --bench queue_cost -- [--commands N]
//! [--depth D] [--io-timeout-ms MS]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use io_uring::{opcode, squeue};
use mpath::IoOutcome;
use mpath_io::{
    Command, DeviceInfo, Event, GuestBufs, IoOp, IoQueue, PathDriver, PathTable, Shaping,
};

const BS: usize = 4096;

/// Every command is a NOP on the ring.
#[derive(Debug)]
struct NopDriver(DeviceInfo);

impl PathDriver for NopDriver {
    fn kind(&self) -> &'static str {
        "nop"
    }
    fn info(&self) -> &DeviceInfo {
        &self.0
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
        if res < 0 {
            IoOutcome::Errno(-res)
        } else {
            IoOutcome::Ok
        }
    }
}

struct OnePath {
    driver: Arc<dyn PathDriver>,
    shaping: Shaping,
    io_timeout: Option<u64>,
    generation: AtomicU64,
}

impl PathTable for OnePath {
    fn driver(&self, _path: usize) -> Option<Arc<dyn PathDriver>> {
        Some(self.driver.clone())
    }
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
    fn shaping(&self, _path: usize) -> &Shaping {
        &self.shaping
    }
    fn io_timeout(&self, _path: usize) -> Option<u64> {
        self.io_timeout
    }
}

struct Opts {
    commands: u64,
    depth: u32,
    io_timeout_ms: u64,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        commands: 1_000_000,
        depth: 32,
        io_timeout_ms: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|_| format!("not a number: {s}"));
        match a.as_str() {
            "--commands" => o.commands = num(val("--commands")?)?,
            "--depth" => o.depth = num(val("--depth")?)? as u32,
            "--io-timeout-ms" => o.io_timeout_ms = num(val("--io-timeout-ms")?)?,
            // What `cargo bench` adds.
            "--bench" => {}
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.depth == 0 || o.depth > 4096 {
        return Err("--depth: 1 to 4096".into());
    }
    Ok(o)
}

/// One batch: every buffer of `free` out as a command, all of them back.
#[inline(never)]
fn round(q: &mut IoQueue<OnePath>, free: &mut Vec<GuestBufs>, now: u64) {
    let n = free.len();
    for (tag, bufs) in free.drain(..).enumerate() {
        let cmd = Command {
            tag: tag as u64,
            path: 0,
            op: IoOp::Write { fua: false },
            offset: (tag * BS) as u64,
            len: BS as u64,
            bufs: Some(bufs),
        };
        if let Err(r) = q.submit(cmd, now) {
            panic!("submission refused: {}", r.error);
        }
    }
    while free.len() < n {
        q.wait().expect("wait");
        q.clear_event();
        q.reap(now, |e| match e {
            Event::Done {
                outcome: IoOutcome::Ok,
                bufs: Some(b),
                ..
            } => free.push(b),
            Event::Done { tag, outcome, .. } => panic!("command {tag}: {outcome:?}"),
            _ => {}
        });
    }
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("queue-cost: {e}");
            std::process::exit(2);
        }
    };
    let paths = Arc::new(OnePath {
        driver: Arc::new(NopDriver(DeviceInfo::default())),
        shaping: Shaping::default(),
        io_timeout: (o.io_timeout_ms > 0).then(|| o.io_timeout_ms * 1_000_000),
        generation: AtomicU64::new(0),
    });
    let mut q = IoQueue::new(paths, o.depth, 2 * o.depth).expect("io_uring");
    let depth = o.depth as usize;
    let memory = Arc::new(vec![0u8; depth * BS]);
    let mut free: Vec<GuestBufs> = (0..depth)
        .map(|i| {
            let iov = vec![libc::iovec {
                iov_base: memory[i * BS..].as_ptr() as *mut libc::c_void,
                iov_len: BS,
            }];
            // SAFETY: the Arc keeps the buffer alive as long as the iovec;
            // the NOPs never touch it.
            unsafe { GuestBufs::new(memory.clone(), iov) }
        })
        .collect();
    let start = Instant::now();
    let rounds = o.commands.div_ceil(o.depth as u64);
    for r in 0..rounds {
        round(&mut q, &mut free, r);
    }
    let took = start.elapsed();
    let done = rounds * o.depth as u64;
    println!(
        "queue-cost: {done} commands at depth {}: {:.0} ns/command",
        o.depth,
        took.as_nanos() as f64 / done as f64
    );
}
