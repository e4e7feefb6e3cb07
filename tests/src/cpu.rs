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
