//! What a hostile frontend must not be able to grow in the daemon: its open
//! fds, its resident memory, its log.

use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Open fds of `pid` (/proc/PID/fd).
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// What each open fd of `pid` is (/proc/PID/fd links): names a leak.
pub fn fd_targets(pid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let mut v: Vec<String> = dir
        .flatten()
        .map(|e| {
            let target =
                std::fs::read_link(e.path()).map_or("?".into(), |t| t.display().to_string());
            format!("{}->{target}", e.file_name().to_string_lossy())
        })
        .collect();
    v.sort();
    v
}

/// Resident memory of `pid` in KiB (VmRSS of /proc/PID/status).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The fd count once it is at most `limit`, or the lowest seen within
/// `wait` (the daemon closes a connection's fds after the frontend sees
/// the hang-up).
pub fn settled_fds(pid: u32, limit: usize, wait: Duration) -> usize {
    let end = Instant::now() + wait;
    let mut low = usize::MAX;
    loop {
        low = low.min(fd_count(pid));
        if low <= limit || Instant::now() >= end {
            return low;
        }
        sleep(Duration::from_millis(10));
    }
}

/// The fd count once two looks 50 ms apart agree (an idle daemon).
pub fn idle_fds(pid: u32) -> usize {
    let mut last = fd_count(pid);
    for _ in 0..100 {
        sleep(Duration::from_millis(50));
        let now = fd_count(pid);
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

pub fn log_len(log: &Path) -> u64 {
    std::fs::metadata(log).map_or(0, |m| m.len())
}
