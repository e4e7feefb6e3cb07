//! vhost-inflight-bench: the cost of inflight I/O tracking (INFLIGHT_SHMFD).
//!
//! libblkio does not negotiate INFLIGHT_SHMFD, so this drives the daemon with
//! our own frontend (tests/src/adversary): one split ring of 256 entries in a
//! memfd, QD 32 random 4k reads or writes kept in flight, completions reaped
//! from the used ring (sleeping on the call eventfd when it is empty, as a
//! guest driver does with EVENT_IDX). The same client asks for inflight
//! tracking against the daemon as is and against `--no-inflight`; the two
//! alternate, round after round, on a null path and on a tmpfs file. Output:
//! IOPS and IOPS per server CPU-second (utime + stime from /proc), medians
//! and spreads over the rounds.
//!
//! Pinning as vhost-bench --pin: `VHOST_BENCH_SERVER_CPUS=1 taskset -c 0 vhost-inflight-bench`.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use vhost_mpath_tests::adversary::blk::{header, S_OK, T_IN, T_OUT, UNWRITTEN};
use vhost_mpath_tests::adversary::split_ring::AVAIL_RING;
use vhost_mpath_tests::adversary::{Adversary, AdversaryOptions, Desc};
use vhost_mpath_tests::locate::ours_binary;
use vhost_mpath_tests::pattern::pattern;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

use vhost_mpath_tests::{DiskSpec, Server, ServerKind, TempDir};

const USAGE: &str =
    "usage: vhost-inflight-bench [--seconds S] [--warmup S] [--rounds R] [--tmpfs-dir DIR]";
const QD: u16 = 32;
const BS: u32 = 4096;
const QUEUE_SIZE: u16 = 256;
const DISK_SIZE: u64 = 1 << 30;
/// Longest wait for one completion before the cell fails.
const STALL: Duration = Duration::from_secs(5);

struct Args {
    seconds: f64,
    warmup: f64,
    rounds: usize,
    tmpfs_dir: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        seconds: 5.0,
        warmup: 1.0,
        rounds: 3,
        tmpfs_dir: "/dev/shm".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || {
            v.parse::<f64>()
                .map_err(|_| format!("{flag} {v}: not a number"))
        };
        match flag.as_str() {
            "--seconds" => a.seconds = num()?,
            "--warmup" => a.warmup = num()?,
            "--rounds" => a.rounds = num()? as usize,
            "--tmpfs-dir" => a.tmpfs_dir = v.into(),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(a)
}

/// One request slot: descriptors 3i (header), 3i+1 (data), 3i+2 (status).
struct Slot {
    hdr: u64,
    data: u64,
}

impl Slot {
    fn status(&self) -> u64 {
        self.hdr + 16
    }
}

/// virtio 1.2 §2.7.10: whether moving the index from `old` to `new` passes `event`.
fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// Keeps QD 32 of 4k requests in flight for `warmup`, then for `dur` with the
/// server's CPU time read around it, then drains them.
fn drive(
    adv: &mut Adversary,
    server: &Server,
    write: bool,
    (warmup, dur): (Duration, Duration),
    seed: u64,
) -> Result<Sample, String> {
    let ring = adv.ring();
    let rtype = if write { T_OUT } else { T_IN };
    let slots: Vec<Slot> = (0..QD)
        .map(|i| {
            let slot = Slot {
                hdr: adv.scratch(4096, UNWRITTEN),
                data: adv.scratch(u64::from(BS), 0x5a),
            };
            let data = if write {
                Desc::r(slot.data, BS)
            } else {
                Desc::w(slot.data, BS)
            };
            adv.write_desc(3 * i, Desc::r(slot.hdr, 16).then(3 * i + 1));
            adv.write_desc(3 * i + 1, data.then(3 * i + 2));
            adv.write_desc(3 * i + 2, Desc::w(slot.status(), 1));
            slot
        })
        .collect();
    let epoll = Epoll::new().map_err(|e| format!("epoll: {e}"))?;
    epoll
        .ctl(
            ControlOperation::Add,
            adv.call().as_raw_fd(),
            EpollEvent::new(EventSet::IN, 0),
        )
        .map_err(|e| format!("epoll add: {e}"))?;
    let used_event = ring.base + AVAIL_RING + 4 + 2 * u64::from(ring.size);
    let blocks = adv.capacity_sectors / 8;
    let mut rng = seed | 1;
    let (mut avail, mut used_seen, mut done) = (0u16, 0u16, 0u64);
    let mut submit = |adv: &Adversary, avail: &mut u16, i: u16| {
        // xorshift64: a random 4k-aligned block.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let s = &slots[usize::from(i)];
        adv.ram.write(s.hdr, &header(rtype, (rng % blocks) * 8));
        adv.ram.write(s.status(), &[UNWRITTEN]);
        ring.set_avail_entry(&adv.ram, *avail, 3 * i);
        *avail = avail.wrapping_add(1);
    };
    let publish = |adv: &Adversary, old: u16, new: u16| {
        ring.publish_avail(&adv.ram, new);
        fence(Ordering::SeqCst);
        if !adv.event_idx() || need_event(ring.avail_event(&adv.ram), new, old) {
            adv.kick();
        }
    };
    for i in 0..QD {
        submit(adv, &mut avail, i);
    }
    publish(adv, 0, avail);
    let cpu_time = || {
        server
            .cpu_time()
            .map_err(|e| format!("server CPU time: {e}"))
    };
    let warm_end = Instant::now() + warmup;
    let end = warm_end + dur;
    let (mut running, mut measuring) = (true, false);
    let (mut t0, mut cpu0) = (Instant::now(), cpu_time()?);
    while used_seen != avail {
        let now = Instant::now();
        running = running && now < end;
        if !measuring && now >= warm_end {
            (measuring, done, t0, cpu0) = (true, 0, now, cpu_time()?);
        }
        let used = ring.used_idx(&adv.ram);
        if used == used_seen {
            // Ask for a call at the next completion, then look once more
            // before sleeping (the device may have completed meanwhile).
            adv.ram.store_u16(used_event, used_seen);
            fence(Ordering::SeqCst);
            if ring.used_idx(&adv.ram) == used_seen {
                wait_call(adv, &epoll)?;
            }
            continue;
        }
        let old = avail;
        while used_seen != used {
            let (id, _) = ring.used_entry(&adv.ram, used_seen);
            used_seen = used_seen.wrapping_add(1);
            let i = u16::try_from(id / 3)
                .ok()
                .filter(|i| *i < QD && id % 3 == 0)
                .ok_or_else(|| format!("used id {id}: no request of ours"))?;
            let status = adv.ram.read_u8(slots[usize::from(i)].status());
            if status != S_OK {
                return Err(format!("request {i}: status {status:#04x}"));
            }
            done += 1;
            if running {
                submit(adv, &mut avail, i);
            }
        }
        if avail != old {
            publish(adv, old, avail);
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = (cpu_time()? - cpu0).as_secs_f64();
    Ok(Sample {
        iops: done as f64 / secs,
        cpu_s: cpu,
        per_cpu: done as f64 / cpu.max(1e-3),
    })
}

/// Sleeps on the call eventfd until the device notifies (or fails after STALL).
fn wait_call(adv: &Adversary, epoll: &Epoll) -> Result<(), String> {
    let mut ev = [EpollEvent::default(); 1];
    let n = epoll
        .wait(STALL.as_millis() as i32, &mut ev)
        .map_err(|e| format!("epoll: {e}"))?;
    if n == 0 || adv.closed() {
        return Err("the device stopped completing requests".into());
    }
    let _ = adv.call().read();
    Ok(())
}

/// (backend, workload, inflight) and its samples over the rounds.
type Cells<'a> = Vec<((&'a str, &'a str, bool), Vec<Sample>)>;

struct Sample {
    iops: f64,
    cpu_s: f64,
    per_cpu: f64,
}

/// One cell on a fresh connection: warm-up, then the measured run with the
/// server's CPU time read around it.
fn measure(
    server: &Server,
    inflight: bool,
    write: bool,
    a: &Args,
    seed: u64,
) -> Result<Sample, String> {
    let opts = AdversaryOptions {
        queue_size: QUEUE_SIZE,
        indirect: false,
        inflight: true,
        ..AdversaryOptions::default()
    };
    let mut adv = Adversary::connect(server.socket(), &opts)?;
    if adv.tracks_inflight() != inflight {
        return Err(format!(
            "inflight tracking negotiated: {}",
            adv.tracks_inflight()
        ));
    }
    let phases = (
        Duration::from_secs_f64(a.warmup),
        Duration::from_secs_f64(a.seconds),
    );
    drive(&mut adv, server, write, phases, seed)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn fill_file(path: &std::path::Path) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    let chunk = pattern(1, 0, 1 << 20);
    for _ in 0..DISK_SIZE / chunk.len() as u64 {
        f.write_all(&chunk)?;
    }
    Ok(())
}

fn run(a: &Args) -> Result<(), String> {
    let shm = TempDir::new_in(&a.tmpfs_dir, "inflight-bench").map_err(|e| e.to_string())?;
    let file = shm.path().join("disk.img");
    fill_file(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let backends = [
        ("null", DiskSpec::null(DISK_SIZE)),
        ("tmpfs", DiskSpec::file(&file)),
    ];
    let mut cells: Cells = Vec::new();
    for round in 0..a.rounds {
        for (backend, spec) in &backends {
            let mut order = [true, false];
            if round % 2 == 1 {
                order.reverse();
            }
            for inflight in order {
                let mut spec = spec.clone();
                if !inflight {
                    spec.ours_extra.push("--no-inflight".into());
                }
                let server = spec
                    .launch_with(ServerKind::Ours, &ours_binary())
                    .map_err(|e| format!("starting the daemon: {e}"))?;
                for (workload, write) in [("4k QD32 randread", false), ("4k QD32 randwrite", true)]
                {
                    let s =
                        measure(&server, inflight, write, a, round as u64 * 7919).map_err(|e| {
                            format!(
                                "{backend} {workload} inflight={inflight}: {e}\n{}",
                                server.log()
                            )
                        })?;
                    eprintln!(
                        "[{}/{}] {backend:<5} {workload:<18} inflight={:<3} {:>9.0} IOPS {:>5.2} CPU s",
                        round + 1,
                        a.rounds,
                        if inflight { "on" } else { "off" },
                        s.iops,
                        s.cpu_s
                    );
                    let key = (*backend, workload, inflight);
                    match cells.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, v)) => v.push(s),
                        None => cells.push((key, vec![s])),
                    }
                }
            }
        }
    }
    print_table(&cells, a);
    Ok(())
}

fn print_table(cells: &Cells, a: &Args) {
    println!(
        "\n{:<7} {:<18} {:<8} {:>9} {:>15} {:>7} {:>10} {:>17} {:>11} {:>13}",
        "backend",
        "workload",
        "inflight",
        "IOPS",
        "IOPS min-max",
        "CPU s",
        "IOPS/CPUs",
        "IOPS/CPUs min-max",
        "IOPS on/off",
        "perCPU on/off"
    );
    let stat = |v: &[Sample], f: fn(&Sample) -> f64| {
        let x: Vec<f64> = v.iter().map(f).collect();
        let lo = x.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = x.iter().copied().fold(0.0, f64::max);
        (median(x), lo, hi)
    };
    let per_cpu = |s: &Sample| s.per_cpu;
    for ((backend, workload, _), v) in cells.iter().filter(|((_, _, on), _)| *on) {
        let off = cells
            .iter()
            .find(|(k, _)| *k == (*backend, *workload, false))
            .map(|(_, v)| v);
        for (on, v) in [(true, Some(v)), (false, off)] {
            let Some(v) = v else { continue };
            let (iops, ilo, ihi) = stat(v, |s| s.iops);
            let (pc, plo, phi) = stat(v, per_cpu);
            let (cpu, _, _) = stat(v, |s| s.cpu_s);
            print!(
                "{backend:<7} {workload:<18} {:<8} {iops:>9.0} {:>15} {cpu:>7.2} {pc:>10.0} {:>17}",
                if on { "on" } else { "off" },
                format!("{ilo:.0}-{ihi:.0}"),
                format!("{plo:.0}-{phi:.0}"),
            );
            match (on, off) {
                (true, Some(off)) => println!(
                    " {:>10.3}x {:>12.3}x",
                    iops / stat(off, |s| s.iops).0,
                    pc / stat(off, per_cpu).0
                ),
                _ => println!(),
            }
        }
    }
    println!(
        "CPU s = daemon utime+stime over a {:.1} s cell; medians of {} alternating round(s)",
        a.seconds, a.rounds
    );
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vhost-inflight-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
