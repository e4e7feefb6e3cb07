//! The path checker's size watch: every second each path's size is read
//! again (a file's length, a block device's size, an NVMe namespace's
//! capacity by Identify, which the kernel revalidates on a Namespace
//! Attribute Changed event). When every path has grown to the same size
//! the disk grows (`resize`); a path that disagrees is logged once per
//! change, shown in `get_paths` (`size_bytes`), and the capacity stays.
//! Shrinking is never automatic. A thread of its own: an admin command on
//! a sick controller may block, and must not hold up the probes.

use std::sync::Arc;
use std::time::Duration;

use log::{info, warn};

use crate::disk::Disk;
use crate::resize::{decide, read_sizes, resize};

const PERIOD: Duration = Duration::from_secs(1);

/// The period, `VHOST_MPATH_SIZE_WATCH_MS` when set (0: no watch; tests
/// that drive `resize` alone).
fn period() -> Option<Duration> {
    match std::env::var("VHOST_MPATH_SIZE_WATCH_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(0) => None,
        Some(ms) => Some(Duration::from_millis(ms)),
        None => Some(PERIOD),
    }
}

/// Starts the size watch thread.
pub fn spawn(disk: Arc<Disk>) -> Result<(), String> {
    let Some(period) = period() else {
        return Ok(());
    };
    std::thread::Builder::new()
        .name("size-watch".into())
        .spawn(move || {
            let mut watch = SizeWatch::default();
            loop {
                std::thread::sleep(period);
                watch.check(&disk);
            }
        })
        .map(|_| ())
        .map_err(|e| format!("size watch: {e}"))
}

#[derive(Default)]
struct SizeWatch {
    /// The sizes last reported as refused: each state is logged once.
    reported: Option<Vec<Option<u64>>>,
}

impl SizeWatch {
    fn check(&mut self, disk: &Disk) {
        let sizes = read_sizes(disk);
        let current = disk.capacity_bytes();
        match decide(current, disk.block_size, &sizes, None, false) {
            Ok(new) if new > current => {
                info!("path checker: every path grew to {new} bytes");
                self.reported = None;
                if let Err(e) = resize(disk, None, false, "path checker") {
                    // The paths changed again between the two reads.
                    warn!("path checker: resize: {e}");
                }
            }
            Ok(_) => self.reported = None,
            Err(e) => {
                let state: Vec<Option<u64>> = sizes.iter().map(|p| p.size.clone().ok()).collect();
                if self.reported.as_ref() != Some(&state) {
                    warn!("path checker: capacity kept at {current} bytes: {e}");
                    self.reported = Some(state);
                }
            }
        }
    }
}
