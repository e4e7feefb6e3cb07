//! SIGINT/SIGTERM: stop taking requests, let in-flight I/O finish, exit 0.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Whether a signal asked the daemon to stop (workers stop popping requests).
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

pub fn request() {
    REQUESTED.store(true, Ordering::Relaxed);
}
