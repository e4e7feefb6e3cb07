//! CPU time of a process from `/proc/PID/stat` (all its threads, user + system).

use std::fs;
use std::io;
use std::time::Duration;

/// utime + stime of process `pid`.
pub fn process_cpu_time(pid: u32) -> io::Result<Duration> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may contain spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad /proc/PID/stat"))?;
    // After ")": field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> io::Result<u64> {
        fields
            .get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad /proc/PID/stat"))
    };
    let total = ticks(11)? + ticks(12)?;
    Ok(Duration::from_secs_f64(
        total as f64 / clock_ticks_per_second(),
    ))
}

/// USER_HZ: the unit of utime/stime in /proc, 100 on every mainstream Linux
/// architecture (it is fixed for userspace, whatever the kernel's HZ).
fn clock_ticks_per_second() -> f64 {
    100.0
}

/// How many times the threads of process `pid` went to sleep so far
/// (voluntary context switches, summed over `/proc/PID/task/*/status`):
/// where wake-ups are dear, a server's or client's sleeps per request say
/// much of its CPU per request. Threads that ended are not counted.
pub fn process_sleeps(pid: u32) -> io::Result<u64> {
    let mut total = 0;
    for task in fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(status) = fs::read_to_string(task?.path().join("status")) else {
            // The thread ended meanwhile.
            continue;
        };
        total += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad /proc status"))?;
    }
    Ok(total)
}

/// How many times the calling thread went to sleep so far (voluntary
/// context switches).
pub fn thread_sleeps() -> u64 {
    // SAFETY: getrusage only writes into the rusage it is given.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut u) != 0 {
            return 0;
        }
        u
    };
    usage.ru_nvcsw as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_sleeps_counts_its_sleeps() {
        let before = thread_sleeps();
        let proc_before = process_sleeps(std::process::id()).unwrap();
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(thread_sleeps() >= before + 3);
        assert!(process_sleeps(std::process::id()).unwrap() >= proc_before + 3);
    }
}
