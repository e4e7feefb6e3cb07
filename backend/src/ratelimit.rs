//! Warnings about guest or path input, at most a few per second so a
//! misbehaving guest cannot flood the log.

use std::fmt::Arguments;
use std::time::{Duration, Instant};

const BURST: u32 = 5;
const WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct RateLimitedLog {
    window_start: Instant,
    in_window: u32,
    suppressed: u64,
}

impl Default for RateLimitedLog {
    fn default() -> Self {
        Self::new()
    }
}

impl RateLimitedLog {
    pub fn new() -> Self {
        Self {
            window_start: Instant::now(),
            in_window: 0,
            suppressed: 0,
        }
    }

    pub fn warn(&mut self, msg: Arguments<'_>) {
        let now = Instant::now();
        if now.duration_since(self.window_start) >= WINDOW {
            if self.suppressed > 0 {
                log::warn!("({} similar warnings suppressed)", self.suppressed);
            }
            self.window_start = now;
            self.in_window = 0;
            self.suppressed = 0;
        }
        if self.in_window < BURST {
            self.in_window += 1;
            log::warn!("{msg}");
        } else {
            self.suppressed += 1;
        }
    }
}
