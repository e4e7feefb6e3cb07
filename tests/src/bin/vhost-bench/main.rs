//! vhost-bench: our daemon against qemu-storage-daemon, both driven by libblkio's
//! vhost-user-blk frontend, on a null device and on a tmpfs file.
//!
//! For each backend and workload: IOPS, MiB/s, p50/p99 latency, server CPU seconds,
//! IOPS per server CPU-second, and the ratios ours/qsd. `--repeat R` alternates the
//! servers R times and reports medians.

mod args;
mod report;

use args::{Args, USAGE};
use report::{Results, Sample};
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use vhost_mpath_tests::cpu::{process_cpu_time, process_sleeps};
use vhost_mpath_tests::loadgen::{self, Workload};
use vhost_mpath_tests::pattern::pattern;
use vhost_mpath_tests::rpc::RpcClient;
use vhost_mpath_tests::{Client, ClientOptions, DiskSpec, Server, ServerKind, TempDir};

const NULL_SIZE: u64 = 1 << 30;
/// The daemon's benchmark switch: log every write into a private bitmap.
const DIRTY_LOG_ALWAYS_ENV: &str = "VHOST_MPATH_DIAG_DIRTY_LOG_ALWAYS";

fn workloads() -> Vec<Workload> {
    let mut v = Vec::new();
    for write in [false, true] {
        v.push(Workload::new(4096, 1, write));
        v.push(Workload::new(4096, 32, write));
        v.push(Workload::new(128 * 1024, 8, write));
    }
    // Two queues at once, one client thread each (a 2-vCPU guest).
    v.push(Workload::new(4096, 32, false).on_queues(2));
    v
}

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vhost-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Pins this process (the client) to `client` and every server to `server`.
fn pin(client: usize, server: usize) -> Result<(), String> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write into it,
    // and sched_setaffinity reads it.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(client, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        return Err(format!(
            "pinning to CPU {client}: {}",
            std::io::Error::last_os_error()
        ));
    }
    std::env::set_var("VHOST_BENCH_SERVER_CPUS", server.to_string());
    Ok(())
}

fn run(args: &Args) -> Result<(), String> {
    if args.pin {
        pin(0, 1)?;
    }
    let (a_kind, a_name) = if args.ours_qsd {
        (ServerKind::Qsd, "ours(qsd)")
    } else {
        (ServerKind::Ours, "ours")
    };
    // The second server: qsd, or ours logging every write (--dirty-log-ab).
    let (b_kind, b_name) = if args.dirty_log_ab {
        (ServerKind::Ours, "ours+log")
    } else if args.base_bin.is_some() {
        (ServerKind::Ours, "base")
    } else if args.qsd_iothread {
        (ServerKind::Qsd, "qsd+iot")
    } else {
        (ServerKind::Qsd, "qsd")
    };
    let shm = TempDir::new_in(&args.tmpfs_dir, "vhost-bench").map_err(|e| e.to_string())?;
    let mut backends: Vec<(&str, DiskSpec)> = Vec::new();
    if args.null {
        backends.push(("null", DiskSpec::null(NULL_SIZE).num_queues(2)));
    }
    if args.tmpfs {
        let file = shm.path().join("disk.img");
        fill_file(&file, args.file_size).map_err(|e| format!("{}: {e}", file.display()))?;
        backends.push(("tmpfs", DiskSpec::file(&file).num_queues(2)));
    }
    for (_, spec) in &mut backends {
        spec.qsd_iothread = args.qsd_iothread;
        spec.qsd_aio = args.qsd_aio.clone();
        spec.null_read_zeroes = args.read_zeroes;
    }
    println!(
        "vhost-bench: {:.1} s per cell (+{:.1} s warm-up), {} repeat(s), 1 queue unless the cell says 2q; ours = {}",
        args.seconds.as_secs_f64(),
        args.warmup.as_secs_f64(),
        args.repeat,
        if args.ours_qsd {
            "qemu-storage-daemon".into()
        } else {
            args.ours_bin.display().to_string()
        }
    );
    if let Some(base) = &args.base_bin {
        println!("base = {}", base.display());
    } else {
        // The peer's version moves its numbers: Debian's qsd 10.0.2 clears
        // about 48 KiB per request in libvhost-user, 7.2 does not
        // (docs/BENCHMARKS.md).
        println!("qsd = {}", qsd_version());
    }
    // How costly a wake-up is moves every cell that sleeps (qsd's most of
    // all): a guest whose haltpoll idle does not poll pays an exit to the
    // host per wake-up (docs/BENCHMARKS.md, "The guest's idle path").
    println!("idle = {}", idle_path());
    if args.qsd_aio != "io_uring" && args.tmpfs {
        // The table says "qsd" either way.
        println!("qsd: aio={} for the tmpfs file", args.qsd_aio);
    }
    let mut workloads = workloads();
    if args.dirty_log_ab {
        workloads.retain(|w| w.block_size == 4096 && w.queue_depth == 32);
    }
    if args.base_bin.is_some() && args.cells.is_empty() {
        workloads.retain(|w| w.block_size == 4096);
    }
    if !args.cells.is_empty() {
        workloads.retain(|w| args.cells.iter().any(|c| w.name.contains(c.as_str())));
    }
    if workloads.is_empty() {
        return Err("no workload matches --cells".into());
    }
    // Ours answers `get_queues` here: the time it spun (`spin s`).
    let rpc_dir = TempDir::new("vhost-bench-rpc").map_err(|e| e.to_string())?;
    let mut results = Results::default();
    for rep in 0..args.repeat {
        for (backend, spec) in &backends {
            let mut order = [(a_kind, a_name), (b_kind, b_name)];
            if rep % 2 == 1 {
                order.reverse();
            }
            for (kind, name) in order {
                // Read by the daemon at start: only "ours+log" logs.
                if name == "ours+log" {
                    std::env::set_var(DIRTY_LOG_ALWAYS_ENV, "1");
                } else {
                    std::env::remove_var(DIRTY_LOG_ALWAYS_ENV);
                }
                let bin = match (&args.base_bin, name) {
                    (Some(base), "base") => base,
                    _ => &args.ours_bin,
                };
                let rpc = (kind == ServerKind::Ours)
                    .then(|| rpc_dir.path().join(format!("{name}-{backend}-{rep}.sock")));
                let mut spec = spec.clone();
                if let Some(r) = &rpc {
                    spec.ours_extra
                        .extend(["--rpc-socket".into(), r.display().to_string()]);
                }
                let server = spec
                    .launch_with(kind, bin)
                    .map_err(|e| format!("starting {name} on {backend}: {e}"))?;
                for (i, w) in workloads.iter().enumerate() {
                    let s = measure(&server, w, args, rep as u64, rpc.as_deref())
                        .map_err(|e| format!("{name} {backend} {}: {e}", w.name))?;
                    eprintln!(
                        "[{}/{}] {name:<9} {backend:<5} {:<18} {:>9.0} IOPS",
                        rep + 1,
                        args.repeat,
                        w.name,
                        s.iops
                    );
                    results.add(backend, i, &w.name, name, s);
                }
                drop(server);
            }
        }
    }
    let names: Vec<&str> = backends.iter().map(|(b, _)| *b).collect();
    println!();
    results.print(&names, a_name, b_name);
    println!(
        "\na/b = {a_name}/{b_name}; CPU s = server utime+stime during the cell, spin s = the part of it ours spent \
         spinning for the client's next requests (get_queues spin_us; - unknown), perBusy = IOPS per CPU-second \
         less the spin; calls, kicks = ours' used-buffer notifications to the client and its \
         available-buffer notifications to us, per I/O (get_queues); cli s = the client's (this process); \
         cli/srv slp = sleeps per I/O of the client's queue threads and of the server's threads \
         (voluntary context switches: each sleep costs a wake-up); medians of {} run(s)",
        args.repeat
    );
    Ok(())
}

/// One cell on a fresh connection: warm-up, then the measured run with the
/// server's CPU time read before and after.
fn measure(
    server: &Server,
    w: &Workload,
    args: &Args,
    seed: u64,
    rpc: Option<&Path>,
) -> Result<Sample, String> {
    let opts = ClientOptions {
        num_queues: w.queues,
        mem_size: w.mem_size(),
        poll: args.client_poll,
        ..ClientOptions::default()
    };
    let mut client = Client::connect_with(server.socket(), &opts)
        .map_err(|e| format!("connect: {e}\n--- server log ---\n{}", server.log()))?;
    if !args.warmup.is_zero() {
        loadgen::run(&mut client, w, args.warmup, seed).map_err(|e| e.to_string())?;
    }
    let cpu = || {
        server
            .cpu_time()
            .map_err(|e| format!("server CPU time: {e}"))
    };
    let client_cpu =
        || process_cpu_time(std::process::id()).map_err(|e| format!("client CPU time: {e}"));
    let server_sleeps = || process_sleeps(server.pid()).map_err(|e| format!("server sleeps: {e}"));
    let counted = || rpc.map_or(Ok(Counted::UNKNOWN), Counted::read);
    let (cpu0, client0, sleeps0, counted0) = (cpu()?, client_cpu()?, server_sleeps()?, counted()?);
    let r = loadgen::run(&mut client, w, args.seconds, seed + 1).map_err(|e| e.to_string())?;
    let cpu_s = (cpu()? - cpu0).as_secs_f64();
    let client_cpu_s = (client_cpu()? - client0).as_secs_f64();
    let server_sleeps = server_sleeps()? - sleeps0;
    let counted = counted()?.since(&counted0);
    let spin_s = counted.spin_s;
    let busy_s = if spin_s.is_nan() {
        cpu_s
    } else {
        cpu_s - spin_s
    };
    let per_io = |n: f64| n / r.ios.max(1) as f64;
    // I/Os per second of `s` (infinite if none was used).
    let rate = |s: f64| {
        if s > 0.0 {
            r.ios as f64 / s
        } else {
            f64::INFINITY
        }
    };
    Ok(Sample {
        iops: r.iops(),
        mib_s: r.mib_per_s(),
        p50_us: r.latency_us(0.50),
        p99_us: r.latency_us(0.99),
        cpu_s,
        iops_per_cpu: rate(cpu_s),
        spin_s,
        calls_per_io: per_io(counted.calls),
        kicks_per_io: per_io(counted.kicks),
        iops_per_busy_cpu: rate(busy_s),
        client_cpu_s,
        client_sleeps_per_io: per_io(r.sleeps as f64),
        server_sleeps_per_io: per_io(server_sleeps as f64),
    })
}

/// Creates the file with data in every block, so reads hit real tmpfs pages.
fn fill_file(path: &std::path::Path, size: u64) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    let chunk = pattern(1, 0, 1 << 20);
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// The CPU idle driver, and `guest_halt_poll_ns` where it is haltpoll.
fn idle_path() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let driver =
        read("/sys/devices/system/cpu/cpuidle/current_driver").unwrap_or_else(|| "unknown".into());
    match read("/sys/module/haltpoll/parameters/guest_halt_poll_ns") {
        Some(ns) if driver == "haltpoll" => {
            format!("cpuidle driver {driver}, guest_halt_poll_ns {ns}")
        }
        _ => format!("cpuidle driver {driver}"),
    }
}

/// The qemu-storage-daemon the cells run, and its version line.
fn qsd_version() -> String {
    let bin = vhost_mpath_tests::locate::qsd_binary();
    let version = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "version unknown".into());
    format!("{} ({version})", bin.display())
}

/// Our server's queue counters summed over its queues (`get_queues`):
/// spin seconds, calls and kicks; NaN from a server or build without them.
struct Counted {
    spin_s: f64,
    calls: f64,
    kicks: f64,
}

impl Counted {
    const UNKNOWN: Counted = Counted {
        spin_s: f64::NAN,
        calls: f64::NAN,
        kicks: f64::NAN,
    };

    fn read(socket: &Path) -> Result<Counted, String> {
        let mut rpc =
            RpcClient::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
        let v = rpc
            .call("get_queues", serde_json::json!({}))
            .map_err(|e| format!("get_queues: {e}"))?;
        let sum = |k: &str| -> f64 {
            let mut n = 0u64;
            for q in v["queues"].as_array().into_iter().flatten() {
                match q[k].as_u64() {
                    Some(x) => n += x,
                    None => return f64::NAN,
                }
            }
            n as f64
        };
        Ok(Counted {
            spin_s: sum("spin_us") / 1e6,
            calls: sum("calls"),
            kicks: sum("kicks"),
        })
    }

    fn since(&self, before: &Counted) -> Counted {
        Counted {
            spin_s: self.spin_s - before.spin_s,
            calls: self.calls - before.calls,
            kicks: self.kicks - before.kicks,
        }
    }
}
