//! The path checker, like multipathd's checker loop: failed paths are
//! probed from a thread of its own, on a ring of its own, whether or not a
//! frontend is connected, so a path's state is true whenever an operator
//! reads it (between two VM connections too). A probe is a one-block read
//! through the path's own driver and its lab faults; the engine decides
//! when a probe is due and when enough good ones in a row (past any
//! flapping quarantine) make the path usable again.

use std::sync::Arc;
use std::time::Duration;

use log::info;
use mpath::{PathId, ProbeOutcome, MAX_PATHS};
use mpath_io::{Admission, ProbeEvent, Prober};

use crate::disk::Disk;
use crate::ratelimit::RateLimitedLog;

/// How often due probes are looked for (probes themselves are due every
/// second: `RecoveryConfig::probe_interval`).
const PERIOD: Duration = Duration::from_millis(100);
/// How long a probe may take on a path without `io-timeout-ms`: a path
/// that cannot read one block in this long is not back.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

struct Checker {
    disk: Arc<Disk>,
    prober: Prober,
    log: RateLimitedLog,
}

/// Starts the checker thread.
pub fn spawn(disk: Arc<Disk>) -> Result<(), String> {
    let disk_for_sizes = Arc::clone(&disk);
    let prober =
        Prober::new(MAX_PATHS, PERIOD).map_err(|e| format!("path checker: io_uring: {e}"))?;
    let mut checker = Checker {
        disk,
        prober,
        log: RateLimitedLog::new(),
    };
    std::thread::Builder::new()
        .name("checker".into())
        .spawn(move || checker.run())
        .map_err(|e| format!("path checker: {e}"))?;
    // Sizes are read on a thread of their own (see `size_watch`).
    crate::size_watch::spawn(Arc::clone(&disk_for_sizes))
}

impl Checker {
    fn run(&mut self) -> ! {
        let mut events = Vec::new();
        loop {
            self.start_due();
            events.clear();
            let waited = self.prober.wait(&mut events);
            for &e in &events {
                self.handle(e);
            }
            if let Err(e) = waited {
                self.log
                    .warn(format_args!("path checker: io_uring: {e}; retrying"));
                std::thread::sleep(PERIOD);
            }
        }
    }

    /// Sends the probes the engine says are due.
    fn start_due(&mut self) {
        let disk = Arc::clone(&self.disk);
        for path in disk.engine.probes_due(disk.engine.now()) {
            if self.prober.busy(path.0) || !disk.begin_probe(path) {
                continue; // one still out (past its deadline), or no longer failed
            }
            let Some(driver) = disk.driver_arc(path) else {
                self.record(path, false, true);
                continue;
            };
            // Lab faults apply to probes as to any I/O.
            if let Admission::Fail(_) = disk.shaping(path).admit() {
                self.record(path, false, true);
                continue;
            }
            let timeout = disk
                .io_timeout(path)
                .map_or(PROBE_TIMEOUT, Duration::from_nanos);
            if let Err(e) = self.prober.start(path.0, driver, disk.block_size, timeout) {
                self.log.warn(format_args!(
                    "path {}: cannot send a probe: {e}",
                    disk.engine.path(path).name
                ));
                self.record(path, false, true);
            }
        }
    }

    fn handle(&mut self, e: ProbeEvent) {
        match e {
            ProbeEvent::Done { slot, ok } => self.record(PathId(slot), ok, true),
            ProbeEvent::TimedOut { slot } => {
                let path = PathId(slot);
                self.log.warn(format_args!(
                    "path {}: probe not answered in time",
                    self.disk.engine.path(path).name
                ));
                // Failed; the path stays claimed until the read comes back.
                self.record(path, false, false);
            }
            ProbeEvent::Released { slot } => self.disk.end_probe(PathId(slot)),
        }
    }

    /// Accounts a probe of `path`; `end`: it is off the ring.
    fn record(&mut self, path: PathId, ok: bool, end: bool) {
        let disk = &self.disk;
        if end {
            disk.end_probe(path);
        }
        let name = &disk.engine.path(path).name;
        match disk.engine.probe_result(path, ok, disk.engine.now()) {
            ProbeOutcome::Recovered => info!("path {name} recovered: usable again"),
            ProbeOutcome::StillFailed => self
                .log
                .warn(format_args!("path {name}: probe failed, still failed")),
            _ => {}
        }
    }
}
