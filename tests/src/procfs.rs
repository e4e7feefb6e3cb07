//! What /proc says of a server process: its open files and its threads.

use std::path::Path;

/// Whether process `pid` holds `file` open (as seen in /proc/PID/fd).
pub fn holds_open(pid: u32, file: &Path) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    dir.flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == file))
}

/// Threads of process `pid` whose name starts with `prefix` (`queue`: the
/// queue threads).
pub fn threads_named(pid: u32, prefix: &str) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|comm| comm.starts_with(prefix))
        .count()
}

/// `threads_named` once it reached `want` (or `limit` passed), looked at
/// again 100 ms later: threads start one after the other, and each takes
/// its name itself when it first runs, which on a loaded machine can be a
/// while after it was started.
pub fn settled_threads_named(
    pid: u32,
    prefix: &str,
    want: usize,
    limit: std::time::Duration,
) -> usize {
    let deadline = std::time::Instant::now() + limit;
    while threads_named(pid, prefix) != want && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    threads_named(pid, prefix)
}
