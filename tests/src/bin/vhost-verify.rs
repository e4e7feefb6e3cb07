//! vhost-verify: write a pattern over a region of a vhost-user-blk disk, flush,
//! read it back and compare; print what the device reports and the rates seen.
//! Exits non-zero on any request error, any mismatch, or a device that does not
//! match `--expect-capacity` / `--expect-block-size`.
//!
//! Made for the QEMU guest scenarios (tests/vm): it runs inside the guest next to
//! the daemon, driving it with libblkio's vhost-user frontend. With
//! `--duration-s` it repeats passes (a new seed each pass, so stale data from an
//! earlier pass is caught) until the time is up: a load to fail paths under.
//!
//! Every other write is gathered from three buffers and every other read
//! scattered into three (multi-segment requests), the rest use one buffer.
//!
//! Output lines start with `VERIFY` (`VERIFY-ERROR` for failures).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use vhost_mpath_tests::{Client, ClientOptions, Op, OpError, Output};

const USAGE: &str = "usage: vhost-verify --socket PATH [--queues N] [--qd N] [--req-kib N]
       [--region-mib N] [--offset-mib N] [--seed N] [--passes N | --duration-s S]
       [--expect-capacity BYTES] [--expect-block-size BYTES] [--no-zeroes] [--timeout-s S]";

struct Args {
    socket: PathBuf,
    queues: usize,
    qd: usize,
    req: usize,
    region: u64,
    offset: u64,
    seed: u64,
    passes: u32,
    duration: Option<Duration>,
    expect_capacity: Option<u64>,
    expect_block_size: Option<u32>,
    zeroes: bool,
    timeout: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        socket: PathBuf::new(),
        queues: 2,
        qd: 16,
        req: 64 << 10,
        region: 8 << 20,
        offset: 0,
        seed: 1,
        passes: 1,
        duration: None,
        expect_capacity: None,
        expect_block_size: None,
        zeroes: true,
        timeout: Duration::from_secs(90),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--no-zeroes" {
            a.zeroes = false;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || {
            v.parse::<u64>()
                .map_err(|_| format!("{flag} {v}: not a number"))
        };
        match flag.as_str() {
            "--socket" => a.socket = PathBuf::from(&v),
            "--queues" => a.queues = num()?.max(1) as usize,
            "--qd" => a.qd = num()?.max(1) as usize,
            "--req-kib" => a.req = (num()? as usize) << 10,
            "--region-mib" => a.region = num()? << 20,
            "--offset-mib" => a.offset = num()? << 20,
            "--seed" => a.seed = num()?,
            "--passes" => a.passes = num()?.max(1) as u32,
            "--duration-s" => a.duration = Some(Duration::from_secs_f64(num()? as f64)),
            "--expect-capacity" => a.expect_capacity = Some(num()?),
            "--expect-block-size" => a.expect_block_size = Some(num()? as u32),
            "--timeout-s" => a.timeout = Duration::from_secs(num()?),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.socket.as_os_str().is_empty() {
        return Err("--socket is required".into());
    }
    if a.req == 0 || a.region == 0 {
        return Err("--req-kib and --region-mib must be positive".into());
    }
    Ok(a)
}

/// The expected content: one splitmix64 value per 8-byte word of the disk, so
/// data depends only on (seed, disk offset) and generating it is cheap under TCG.
fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    debug_assert!(offset.is_multiple_of(8) && buf.len().is_multiple_of(8));
    let base = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        let mut z = base
            .wrapping_add(offset / 8 + i as u64)
            .wrapping_add(0x632b_e59b_d9b4_e019);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        w.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
}

#[derive(Default)]
struct Tally {
    ops: u64,
    bytes: u64,
    errors: u64,
    mismatches: u64,
    busy: Duration,
    /// The longest batch (a stall while a path fails shows here).
    slowest_batch: Duration,
}

impl Tally {
    /// Runs one batch, counting its time as busy and keeping the slowest.
    fn timed<R>(&mut self, batch: impl FnOnce() -> R) -> R {
        let t0 = Instant::now();
        let r = batch();
        let dt = t0.elapsed();
        self.busy += dt;
        self.slowest_batch = self.slowest_batch.max(dt);
        r
    }

    fn add(&mut self, other: &Tally) {
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.errors += other.errors;
        self.mismatches += other.mismatches;
        self.busy += other.busy;
        self.slowest_batch = self.slowest_batch.max(other.slowest_batch);
    }

    fn rates(&self) -> String {
        let s = self.busy.as_secs_f64().max(1e-9);
        format!(
            "{} ops {:.0} IOPS {:.1} MiB/s slowest batch {:.0} ms",
            self.ops,
            self.ops as f64 / s,
            self.bytes as f64 / s / f64::from(1 << 20),
            self.slowest_batch.as_secs_f64() * 1e3
        )
    }
}

struct Verifier {
    client: Client,
    a: Args,
    block_size: usize,
    error_lines: u32,
}

impl Verifier {
    fn report_error(&mut self, what: &str, offset: u64, e: &OpError) {
        self.error_lines += 1;
        if self.error_lines <= 20 {
            println!("VERIFY-ERROR {what} at {offset}: {e}");
        }
    }

    /// The requests of one pass over the region, `qd` at a time, spread over the queues.
    fn chunks(&self) -> Vec<(u64, usize)> {
        let mut v = Vec::new();
        let mut off = self.a.offset;
        let end = self.a.offset + self.a.region;
        while off < end {
            let n = (self.a.req as u64).min(end - off) as usize;
            v.push((off, n));
            off += n as u64;
        }
        v
    }

    fn write_pass(&mut self, seed: u64) -> Tally {
        let mut t = Tally::default();
        let chunks = self.chunks();
        for batch in chunks.chunks(self.a.qd) {
            let data: Vec<Vec<u8>> = batch
                .iter()
                .map(|&(off, n)| {
                    let mut b = vec![0u8; n];
                    fill(seed, off, &mut b);
                    b
                })
                .collect();
            // Every other request is gathered from three buffers (a multi-segment
            // request: NVMe paths send it with NVME_URING_CMD_IO_VEC).
            let bs = self.block_size;
            let segs: Vec<[&[u8]; 3]> = data
                .iter()
                .map(|d| {
                    let (head, rest) = d.split_at(bs.min(d.len()));
                    let (mid, tail) = rest.split_at(rest.len().saturating_sub(bs));
                    [head, mid, tail]
                })
                .collect();
            let ops: Vec<(usize, Op)> = batch
                .iter()
                .zip(&data)
                .zip(&segs)
                .enumerate()
                .map(|(i, ((&(offset, _), d), s))| {
                    let op = if i % 2 == 1 && d.len() >= 3 * bs {
                        Op::Writev {
                            offset,
                            segments: s,
                        }
                    } else {
                        Op::Write { offset, data: d }
                    };
                    (i % self.a.queues, op)
                })
                .collect();
            let res = t.timed(|| self.client.batch(&ops));
            for (r, &(off, n)) in res.iter().zip(batch) {
                t.ops += 1;
                t.bytes += n as u64;
                if let Err(e) = r {
                    t.errors += 1;
                    self.report_error("write", off, e);
                }
            }
        }
        t
    }

    fn read_pass(&mut self, seed: u64) -> Tally {
        let mut t = Tally::default();
        let chunks = self.chunks();
        let mut want = Vec::new();
        let bs = self.block_size;
        for batch in chunks.chunks(self.a.qd) {
            let lens: Vec<[usize; 3]> = batch
                .iter()
                .map(|&(_, n)| [bs, n.saturating_sub(2 * bs), bs])
                .collect();
            let ops: Vec<(usize, Op)> = batch
                .iter()
                .zip(&lens)
                .enumerate()
                .map(|(i, (&(offset, len), l))| {
                    // Every other read scatters into three buffers (see write_pass).
                    let op = if i % 2 == 0 && len >= 3 * bs {
                        Op::Readv { offset, lens: l }
                    } else {
                        Op::Read { offset, len }
                    };
                    (i % self.a.queues, op)
                })
                .collect();
            let res = t.timed(|| self.client.batch(&ops));
            for (r, &(off, n)) in res.into_iter().zip(batch) {
                t.ops += 1;
                t.bytes += n as u64;
                match r {
                    Ok(Output::Data(got)) => {
                        want.resize(n, 0);
                        fill(seed, off, &mut want);
                        if got != want {
                            t.mismatches += 1;
                            let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
                            if t.mismatches <= 10 {
                                println!(
                                    "VERIFY-ERROR mismatch in the {n}-byte read at {off}: first differing byte at {} (got {:#04x}, want {:#04x})",
                                    off + at as u64,
                                    got[at],
                                    want[at]
                                );
                            }
                        }
                    }
                    Ok(Output::Done) => unreachable!("a read returns data"),
                    Err(e) => {
                        t.errors += 1;
                        self.report_error("read", off, &e);
                    }
                }
            }
        }
        t
    }

    fn flush(&mut self) -> u64 {
        match self.client.run_on(0, Op::Flush) {
            Ok(_) => 0,
            Err(e) => {
                self.report_error("flush", 0, &e);
                1
            }
        }
    }

    /// Write-zeroes (with and without unmap) and discard on the first
    /// requests of the region; the zeroed ranges must read back as zeroes.
    fn zeroes(&mut self) -> u64 {
        let info = self.client.info().clone();
        let mut errors = 0;
        let len = (self.a.req as u64)
            .min(self.a.region / 4)
            .max(u64::from(info.request_alignment));
        let base = self.a.offset;
        if info.max_write_zeroes_len > 0 {
            for (i, unmap) in [(0u64, false), (1, true)] {
                let off = base + i * len;
                match self.client.run_on(
                    0,
                    Op::WriteZeroes {
                        offset: off,
                        len,
                        unmap,
                    },
                ) {
                    Ok(_) => {
                        match self.client.read_on(0, off, len as usize) {
                            Ok(d) if d.iter().all(|&b| b == 0) => {}
                            Ok(_) => {
                                errors += 1;
                                println!("VERIFY-ERROR write-zeroes (unmap {unmap}) at {off}: data not zero");
                            }
                            Err(e) => {
                                errors += 1;
                                self.report_error("read after write-zeroes", off, &e);
                            }
                        }
                    }
                    Err(e) => {
                        errors += 1;
                        self.report_error("write-zeroes", off, &e);
                    }
                }
            }
            println!("VERIFY write-zeroes: 2 x {len} bytes (unmap off/on) read back as zeroes");
        } else {
            println!("VERIFY write-zeroes: not offered");
        }
        if info.max_discard_len > 0 {
            let off = base + 2 * len;
            match self.client.run_on(0, Op::Discard { offset: off, len }) {
                Ok(_) => println!("VERIFY discard: {len} bytes at {off} ok"),
                Err(e) => {
                    errors += 1;
                    self.report_error("discard", off, &e);
                }
            }
        } else {
            println!("VERIFY discard: not offered");
        }
        errors
    }
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("vhost-verify: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let opts = ClientOptions {
        num_queues: a.queues,
        mem_size: (2 * a.qd * a.req).max(8 << 20),
        timeout: a.timeout,
        ..ClientOptions::default()
    };
    let client = match Client::connect_with(&a.socket, &opts) {
        Ok(c) => c,
        Err(e) => {
            println!("VERIFY-ERROR connect to {}: {e}", a.socket.display());
            return ExitCode::FAILURE;
        }
    };
    let info = client.info().clone();
    println!(
        "VERIFY device: capacity {} bytes, block size {}, queues {} (max {}), max transfer {}, \
         max segments {}, discard {}, write-zeroes {}, flush {}",
        info.capacity,
        info.request_alignment,
        client.num_queues(),
        info.max_queues,
        info.max_transfer,
        info.max_segments,
        info.max_discard_len,
        info.max_write_zeroes_len,
        info.flush_needed
    );
    let mut failed = false;
    if let Some(c) = a.expect_capacity {
        if c != info.capacity {
            println!("VERIFY-ERROR capacity {} != expected {c}", info.capacity);
            failed = true;
        }
    }
    if let Some(b) = a.expect_block_size {
        if b != info.request_alignment {
            println!(
                "VERIFY-ERROR block size {} != expected {b}",
                info.request_alignment
            );
            failed = true;
        }
    }
    let bs = u64::from(info.request_alignment.max(512));
    if !a.offset.is_multiple_of(bs)
        || !(a.req as u64).is_multiple_of(bs)
        || a.offset + a.region > info.capacity
    {
        println!(
            "VERIFY-ERROR region {}+{} (requests of {}) is not aligned to {bs} or beyond the disk",
            a.offset, a.region, a.req
        );
        return ExitCode::FAILURE;
    }
    if info.max_transfer != 0 && a.req > info.max_transfer as usize {
        println!(
            "VERIFY-ERROR requests of {} bytes exceed the device's max transfer {}",
            a.req, info.max_transfer
        );
        return ExitCode::FAILURE;
    }

    let zeroes = a.zeroes;
    let mut v = Verifier {
        client,
        a,
        block_size: bs as usize,
        error_lines: 0,
    };
    let start = Instant::now();
    let (mut writes, mut reads) = (Tally::default(), Tally::default());
    let mut flush_errors = 0;
    let mut pass = 0u32;
    loop {
        let seed = v.a.seed.wrapping_add(u64::from(pass));
        let w = v.write_pass(seed);
        flush_errors += v.flush();
        let r = v.read_pass(seed);
        println!(
            "VERIFY pass {pass} (seed {seed}, t={:.1} s): write {}; read {}; errors {} mismatches {}",
            start.elapsed().as_secs_f64(),
            w.rates(),
            r.rates(),
            w.errors + r.errors,
            r.mismatches
        );
        writes.add(&w);
        reads.add(&r);
        pass += 1;
        let more = match v.a.duration {
            Some(d) => start.elapsed() < d,
            None => pass < v.a.passes,
        };
        if !more {
            break;
        }
    }
    let zero_errors = if zeroes { v.zeroes() } else { 0 };
    let errors = writes.errors + reads.errors + flush_errors + zero_errors;
    println!(
        "VERIFY total: {pass} passes over {} MiB in {:.1} s; write {}; read {}; errors {errors} mismatches {}",
        v.a.region >> 20,
        start.elapsed().as_secs_f64(),
        writes.rates(),
        reads.rates(),
        reads.mismatches
    );
    if failed || errors > 0 || reads.mismatches > 0 {
        println!("VERIFY-RESULT FAIL");
        ExitCode::FAILURE
    } else {
        println!("VERIFY-RESULT OK");
        ExitCode::SUCCESS
    }
}
