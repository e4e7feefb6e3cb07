//! held-reads: a guest-side check that read data the device put into guest memory
//! survives a live migration (the migrate scenario runs it in the guest).
//!
//! The only way a destination can hold wrong read data is a page the device wrote
//! (DMA, not the guest's CPU) after the page was last sent, with no dirty mark for the
//! write. fio looks at a read's buffer right after completion, on the source, so it
//! rarely sees that. This program holds what it read for several rounds and looks
//! again, so a stale page is seen on the destination whenever one exists:
//!
//! - a region of the disk (`--offset`, `--size`) is written once with a known pattern;
//! - `--buffers` buffers, each the region's size, are filled in turn, one per round:
//!   the round first verifies every buffer already filled, then poisons the next one
//!   with the CPU (so its pages are dirty and sent again), then reads the region into
//!   it with O_DIRECT reads of `--bs` bytes at queue depth 1, one after another.
//!   Poisoning and verifying touch two words of each page (see `PROBES`), so a round
//!   is nearly all reading.
//!
//! Without a dirty mark for the read data, a page sent between its poisoning and its
//! read reaches the destination poisoned; it is verified again within `--buffers`
//! rounds, before it is poisoned again. Verification only reads, so it never
//! dirties a page and hides nothing.
//!
//! Runs until `--stop-file` exists (or `--seconds`), then verifies every buffer once
//! more. Output: `HELD-STALE ...` at once on each stale buffer (the first pages named),
//! then `HELD-SUMMARY rounds=N checks=N stale_pages=N read_mib=N`. Exit 1 on a stale
//! page, 2 on an I/O error or bad arguments.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: held-reads --dev PATH --offset BYTES --size BYTES [--buffers N]
       [--bs BYTES] [--stop-file PATH] [--seconds S]";

const ALIGN: usize = 4096;
const PAGE: usize = 4096;
const WORD: usize = 8;
/// Marks a poisoned word; the low half carries the round that poisoned it.
const POISON: u64 = 0xdead_5eed_0000_0000;
/// The words of each page that are poisoned and checked: the first and the last. A
/// page the device wrote holds the pattern in both, a page sent before the read
/// holds the poison in both. Checking two words, not 512, keeps a round's CPU time
/// small, so that nearly all of it is spent reading (the window a missing dirty mark
/// shows in).
const PROBES: [usize; 2] = [0, PAGE / WORD - 1];

struct Args {
    dev: PathBuf,
    offset: u64,
    size: usize,
    buffers: usize,
    bs: usize,
    stop_file: Option<PathBuf>,
    seconds: Option<Duration>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        dev: PathBuf::new(),
        offset: 0,
        size: 0,
        buffers: 8,
        bs: 16 * 1024,
        stop_file: None,
        seconds: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--dev" => a.dev = PathBuf::from(value()?),
            "--offset" => a.offset = number(value()?)?,
            "--size" => a.size = number(value()?)? as usize,
            "--buffers" => a.buffers = number(value()?)? as usize,
            "--bs" => a.bs = number(value()?)? as usize,
            "--stop-file" => a.stop_file = Some(PathBuf::from(value()?)),
            "--seconds" => a.seconds = Some(Duration::from_secs(number(value()?)?)),
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if a.dev.as_os_str().is_empty() || a.size == 0 {
        return Err("--dev and --size are required".into());
    }
    if a.buffers < 2 {
        return Err("--buffers must be at least 2 (one is read while the others are held)".into());
    }
    if a.bs == 0
        || !a.bs.is_multiple_of(ALIGN)
        || !a.size.is_multiple_of(a.bs)
        || !a.offset.is_multiple_of(ALIGN as u64)
    {
        return Err(format!(
            "--bs must be a multiple of {ALIGN}, --size a multiple of --bs, --offset of {ALIGN}"
        ));
    }
    if a.stop_file.is_none() && a.seconds.is_none() {
        return Err("give --stop-file or --seconds".into());
    }
    Ok(a)
}

/// The word the region holds at disk byte offset `at` (a multiple of 8).
fn expected(at: u64) -> u64 {
    (at / WORD as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x4d49_4752_4154_4521
}

/// A page-aligned byte buffer for O_DIRECT, without unsafe: a larger Vec and the
/// aligned window inside it.
struct Aligned {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let raw = vec![0u8; len + ALIGN];
        let start = raw.as_ptr().align_offset(ALIGN);
        Aligned { raw, start, len }
    }
    fn bytes(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

fn word(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().unwrap_or_default())
}

/// One held buffer: what it holds, and since which round.
struct Held {
    buf: Aligned,
    filled_in: Option<u64>,
    /// Reported stale since it was filled: said once, counted once.
    reported: bool,
}

struct Checker {
    base: u64,
    checks: u64,
    stale_pages: u64,
}

impl Checker {
    /// Verifies a filled buffer page by page; reports a stale one at once.
    fn verify(&mut self, index: usize, held: &mut Held, round: u64) {
        let Some(filled_in) = held.filled_in else {
            return;
        };
        if held.reported {
            return;
        }
        self.checks += 1;
        let mut stale = Vec::new();
        for (p, page) in held.buf.bytes().chunks(PAGE).enumerate() {
            let at = self.base + (p * PAGE) as u64;
            let bad = PROBES
                .iter()
                .map(|&w| (w, word(&page[w * WORD..(w + 1) * WORD])))
                .find(|&(w, v)| v != expected(at + (w * WORD) as u64));
            if let Some((w, v)) = bad {
                stale.push((p, w, v));
            }
        }
        if stale.is_empty() {
            return;
        }
        held.reported = true;
        self.stale_pages += stale.len() as u64;
        let what = |v: u64| {
            if v & 0xffff_ffff_0000_0000 == POISON {
                format!("poison of round {}", v & 0xffff_ffff)
            } else {
                format!("{v:#018x}")
            }
        };
        let first: Vec<String> = stale
            .iter()
            .take(4)
            .map(|(p, w, v)| format!("page {p} word {w}: {}", what(*v)))
            .collect();
        println!(
            "HELD-STALE round {round}: buffer {index} (read in round {filled_in}) has {} of {} pages wrong: {}",
            stale.len(),
            held.buf.len / PAGE,
            first.join("; ")
        );
    }
}

fn write_region(f: &File, a: &Args) -> Result<(), String> {
    let mut buf = Aligned::new(a.bs);
    for chunk in 0..a.size / a.bs {
        let at = a.offset + (chunk * a.bs) as u64;
        for (w, b) in buf.bytes_mut().chunks_mut(WORD).enumerate() {
            b.copy_from_slice(&expected(at + (w * WORD) as u64).to_le_bytes());
        }
        f.write_all_at(buf.bytes(), at)
            .map_err(|e| format!("writing the region at {at}: {e}"))?;
    }
    f.sync_all().map_err(|e| format!("fsync: {e}"))
}

fn read_region(f: &File, a: &Args, buf: &mut Aligned) -> Result<(), String> {
    for (chunk, part) in buf.bytes_mut().chunks_mut(a.bs).enumerate() {
        let at = a.offset + (chunk * a.bs) as u64;
        f.read_exact_at(part, at)
            .map_err(|e| format!("reading the region at {at}: {e}"))?;
    }
    Ok(())
}

fn stop(a: &Args, t0: Instant) -> bool {
    a.stop_file.as_deref().is_some_and(Path::exists) || a.seconds.is_some_and(|s| t0.elapsed() >= s)
}

fn run(a: &Args) -> Result<bool, String> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&a.dev)
        .map_err(|e| format!("{}: {e}", a.dev.display()))?;
    write_region(&f, a)?;
    let mut held: Vec<Held> = (0..a.buffers)
        .map(|_| Held {
            buf: Aligned::new(a.size),
            filled_in: None,
            reported: false,
        })
        .collect();
    let mut checker = Checker {
        base: a.offset,
        checks: 0,
        stale_pages: 0,
    };
    let t0 = Instant::now();
    let mut round = 0u64;
    while !stop(a, t0) {
        for (i, h) in held.iter_mut().enumerate() {
            checker.verify(i, h, round);
        }
        let next = &mut held[(round % a.buffers as u64) as usize];
        let poison = (POISON | (round & 0xffff_ffff)).to_le_bytes();
        for page in next.buf.bytes_mut().chunks_mut(PAGE) {
            for w in PROBES {
                page[w * WORD..(w + 1) * WORD].copy_from_slice(&poison);
            }
        }
        read_region(&f, a, &mut next.buf)?;
        next.filled_in = Some(round);
        next.reported = false;
        round += 1;
    }
    for (i, h) in held.iter_mut().enumerate() {
        checker.verify(i, h, round);
    }
    println!(
        "HELD-SUMMARY rounds={round} checks={} stale_pages={} read_mib={} seconds={:.1}",
        checker.checks,
        checker.stale_pages,
        (round * a.size as u64) >> 20,
        t0.elapsed().as_secs_f64()
    );
    Ok(checker.stale_pages == 0)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("held-reads: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            println!("HELD-ERROR {e}");
            ExitCode::from(2)
        }
    }
}
