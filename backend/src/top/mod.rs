//! `vhost-mpath top`: a live view of one disk and its paths over the control
//! socket, refreshed every `--interval` seconds like `iostat -x 1`. Each
//! round asks `get_device` (the policy) and `get_stats` (counters since start
//! or `reset_stats`); rates are the difference between two rounds over the
//! time between them. On a terminal each frame replaces the last; into a pipe
//! or file each round is one plain snapshot, without escape codes.

mod frame;
mod render;

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::client::{failed, CmdResult, Connection};

pub use frame::{frame, Frame, PathRow};
pub use render::render;

/// The shortest interval accepted: shorter ones measure the RPC, not the disk.
const MIN_INTERVAL_S: f64 = 0.1;

/// One round of answers and when they came.
struct Sample {
    at: Instant,
    device: Value,
    stats: Value,
}

fn sample(c: &mut Connection) -> Result<Sample, (i32, String)> {
    let device = c.call("get_device", json!({})).map_err(failed)?;
    let stats = c.call("get_stats", json!({})).map_err(failed)?;
    Ok(Sample {
        at: Instant::now(),
        device,
        stats,
    })
}

/// `HH:MM:SS` UTC of the wall clock, for the frame's title.
fn clock() -> String {
    let s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Runs the view: `count` frames (until interrupted without it), one every
/// `interval` seconds, the first after one interval (rates need two rounds).
pub fn run(socket: &Path, interval: f64, count: Option<u64>) -> CmdResult {
    if !(interval.is_finite() && interval >= MIN_INTERVAL_S) {
        return Err((
            2,
            format!("--interval {interval}: at least {MIN_INTERVAL_S} seconds"),
        ));
    }
    let mut c = Connection::open(socket).map_err(failed)?;
    let tty = std::io::stdout().is_terminal();
    let mut prev = sample(&mut c)?;
    let mut shown = 0u64;
    while count.is_none_or(|n| shown < n) {
        std::thread::sleep(Duration::from_secs_f64(interval));
        let now = sample(&mut c)?;
        let secs = now.at.duration_since(prev.at).as_secs_f64();
        let f = frame(&prev.stats, &now.stats, &now.device, secs, clock());
        let text = render(&f);
        let mut out = std::io::stdout().lock();
        let written = if tty {
            // Home and clear, then the frame: it replaces the last in place.
            write!(out, "\x1b[H\x1b[2J{text}")
        } else {
            // One snapshot per round, a blank line between them.
            writeln!(out, "{text}")
        };
        if written.and_then(|_| out.flush()).is_err() {
            return Ok(()); // stdout closed (a pipe to head)
        }
        prev = now;
        shown += 1;
    }
    Ok(())
}
