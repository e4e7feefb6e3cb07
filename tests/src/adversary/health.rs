//! Is the daemon still healthy after a hostile frontend? Idle CPU, a bounded
//! log, and a next frontend served. A watchdog kills a daemon whose log runs
//! away or that outlives the test's budget, so no case can fill the disk or
//! hang.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::cpu::process_cpu_time;
use crate::pattern::pattern;
use crate::Client;

/// Kills `pid` (SIGKILL). The caller must still hold the unreaped child.
pub fn kill(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Kills the daemon once its log passes `log_cap` bytes or `lifetime` ends.
/// Stop it (drop) before the daemon's child handle is reaped.
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    why: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(pid: u32, log: PathBuf, log_cap: u64, lifetime: Duration) -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let why = Arc::new(Mutex::new(None));
        let (s, w) = (stop.clone(), why.clone());
        let thread = thread::spawn(move || {
            let end = Instant::now() + lifetime;
            while !s.load(Ordering::Acquire) {
                let len = file_len(&log);
                let reason = if len > log_cap {
                    Some(format!("its log passed {log_cap} bytes ({len})"))
                } else if Instant::now() > end {
                    Some(format!("it outlived the test's budget of {lifetime:?}"))
                } else {
                    None
                };
                if let Some(r) = reason {
                    kill(pid);
                    *w.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                    return;
                }
                thread::sleep(Duration::from_millis(20));
            }
        });
        Watchdog {
            stop,
            why,
            thread: Some(thread),
        }
    }

    /// Why the watchdog killed the daemon, if it did.
    pub fn killed(&self) -> Option<String> {
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The share of one core that `pid` used over `window`.
pub fn cpu_share(pid: u32, window: Duration) -> Result<f64, String> {
    let t0 = process_cpu_time(pid).map_err(|e| format!("cpu time: {e}"))?;
    let start = Instant::now();
    thread::sleep(window);
    let t1 = process_cpu_time(pid).map_err(|e| format!("cpu time: {e}"))?;
    Ok((t1 - t0).as_secs_f64() / start.elapsed().as_secs_f64())
}

/// Connects a blkio client, writes 64 KiB at `offset` and reads it back.
/// Runs on its own thread: gives up after `limit` (the daemon may never
/// answer); `on_timeout` then unblocks the client (kill the daemon).
pub fn serves_next_frontend(
    socket: &Path,
    offset: u64,
    limit: Duration,
    on_timeout: impl FnOnce(),
) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    let socket = socket.to_path_buf();
    let t = thread::spawn(move || {
        let r = (|| -> Result<(), String> {
            let mut c = Client::connect(&socket, 1).map_err(|e| format!("connect: {e}"))?;
            let data = pattern(77, offset, 64 << 10);
            c.write(offset, &data).map_err(|e| format!("write: {e}"))?;
            let got = c
                .read(offset, data.len())
                .map_err(|e| format!("read: {e}"))?;
            if got != data {
                return Err("read back other data than written".into());
            }
            Ok(())
        })();
        let _ = tx.send(r);
    });
    match rx.recv_timeout(limit) {
        Ok(r) => {
            let _ = t.join();
            r
        }
        Err(_) => {
            on_timeout();
            // Killing the daemon ends the client's wait; don't wait long for it.
            let _ = rx.recv_timeout(Duration::from_secs(5));
            Err(format!("not served within {limit:?}"))
        }
    }
}
