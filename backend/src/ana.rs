//! Watching NVMe paths from a control thread (admin commands and sysfs
//! scans block, so they never run on a worker), once a second:
//! - ANA (Asymmetric Namespace Access): re-read each path's ANA log page and
//!   give the engine the path's state, so policies prefer optimized paths,
//!   fall back to non-optimized ones and never use inaccessible ones;
//! - a failed path whose controller went away (hot-unplug, lost fabric
//!   link) and came back under a new `ngXnY` name is re-opened there: found
//!   by controller (transport and address), checked to be the same
//!   namespace; its probes then bring it back.

use std::sync::Arc;
use std::time::Duration;

use log::{info, warn};
use mpath::{PathId, PathState};

use crate::disk::Disk;

const PERIOD: Duration = Duration::from_secs(1);

/// Starts the watcher if any path is an NVMe path.
pub fn spawn(disk: Arc<Disk>) {
    let any = (0..disk.engine.paths().len()).any(|i| disk.slot(PathId(i)).kind == "nvme");
    if !any {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("ana".into())
        .spawn(move || loop {
            std::thread::sleep(PERIOD);
            refresh(&disk);
            reopen_returned(&disk);
        });
    if let Err(e) = spawned {
        warn!("ANA watcher: {e}");
    }
}

/// Reads every open path's ANA state once.
pub fn refresh(disk: &Disk) {
    for i in 0..disk.engine.paths().len() {
        let id = PathId(i);
        let path = disk.engine.path(id);
        if path.state() == PathState::Removed {
            continue;
        }
        let Some(driver) = disk.driver(id) else {
            continue;
        };
        match driver.read_ana_state() {
            Ok(Some(state)) if state != path.ana_state() => {
                info!(
                    "path {}: ANA state {} -> {}",
                    path.name.as_ref() as &str,
                    path.ana_state().as_str(),
                    state.as_str()
                );
                path.set_ana_state(state);
            }
            Ok(_) => {}
            // A path that is gone fails its I/O and probes; nothing to add here.
            Err(_) => {}
        }
    }
}

/// Re-opens failed NVMe paths whose node is gone but whose controller is back.
pub fn reopen_returned(disk: &Disk) {
    for i in 0..disk.engine.paths().len() {
        let id = PathId(i);
        let slot = disk.slot(id);
        if slot.kind != "nvme" || disk.engine.path(id).state() != PathState::Failed {
            continue;
        }
        let now = slot
            .device_now
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default();
        if std::path::Path::new(&now).exists() {
            continue; // the node is there: probes tell whether it works
        }
        let Some(key) = controller_key(&slot.info.controller) else {
            continue;
        };
        let nsid = now.rsplit('n').next().unwrap_or_default().to_string();
        let Some(node) = find_node(&key, &nsid) else {
            continue;
        };
        match disk.reopen(id, &node) {
            Ok(()) => info!(
                "path {}: controller {key} is back as {node}; re-opened",
                disk.engine.path(id).name.as_ref() as &str
            ),
            Err(e) => warn!(
                "path {}: {node}: {e}",
                disk.engine.path(id).name.as_ref() as &str
            ),
        }
    }
}

/// "pcie 0000:02:00.0 (nvme1)" -> "pcie 0000:02:00.0": the controller
/// without its (unstable) name.
fn controller_key(controller: &str) -> Option<String> {
    let key = controller.split(" (").next()?.trim();
    (!key.is_empty() && !key.ends_with('?')).then(|| key.to_string())
}

/// The `/dev/ngXnY` node of namespace `nsid` through the controller `key`.
fn find_node(key: &str, nsid: &str) -> Option<String> {
    let dir = std::fs::read_dir("/sys/class/nvme-generic").ok()?;
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.rsplit('n').next() != Some(nsid) {
            continue;
        }
        let Ok(ctrl) = std::fs::canonicalize(e.path().join("device")) else {
            continue;
        };
        let read = |f: &str| {
            std::fs::read_to_string(ctrl.join(f))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        if format!("{} {}", read("transport"), read("address")) == key {
            return Some(format!("/dev/{name}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::controller_key;

    #[test]
    fn controller_keys() {
        assert_eq!(
            controller_key("pcie 0000:02:00.0 (nvme1)").as_deref(),
            Some("pcie 0000:02:00.0")
        );
        assert_eq!(
            controller_key("tcp traddr=10.0.0.1,trsvcid=4420 (nvme3)").as_deref(),
            Some("tcp traddr=10.0.0.1,trsvcid=4420")
        );
        assert_eq!(controller_key(""), None);
    }
}
