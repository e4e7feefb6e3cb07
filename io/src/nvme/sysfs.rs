//! What sysfs says about an NVMe character device: namespace node of one
//! controller, multipath head, or controller node; the controller's
//! transport and address; the namespace's queue limits.

use std::fs;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A per-controller namespace node `ngXnY`; `ctrl` is the controller's sysfs folder.
    Namespace { name: String, ctrl: PathBuf },
    /// The kernel's multipath head `ngXnY` (parent: an `nvme-subsystem`).
    Head { name: String },
    /// A controller node `/dev/nvmeX`.
    Controller { name: String },
    /// Some other character device (its sysfs class).
    Other { class: String },
    /// sysfs is not mounted or does not know the device.
    Unknown,
}

fn link_name(p: &Path) -> Option<String> {
    let t = fs::read_link(p).ok()?;
    Some(t.file_name()?.to_string_lossy().into_owned())
}

/// Classifies the character device `major:minor` under sysfs root `sys`.
pub fn classify(sys: &Path, major: u32, minor: u32) -> NodeKind {
    let Ok(dir) = fs::canonicalize(sys.join(format!("dev/char/{major}:{minor}"))) else {
        return NodeKind::Unknown;
    };
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(class) = link_name(&dir.join("subsystem")) else {
        return NodeKind::Unknown;
    };
    match class.as_str() {
        "nvme-generic" => {
            let Some(parent) = dir.parent() else {
                return NodeKind::Unknown;
            };
            if link_name(&parent.join("subsystem")).as_deref() == Some("nvme-subsystem") {
                NodeKind::Head { name }
            } else {
                NodeKind::Namespace {
                    name,
                    ctrl: parent.to_path_buf(),
                }
            }
        }
        "nvme" => NodeKind::Controller { name },
        _ => NodeKind::Other { class },
    }
}

fn read_trimmed(p: &Path) -> Option<String> {
    fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// "pcie 0000:01:00.0 (nvme0)" / "tcp traddr=...,trsvcid=4420 (nvme2)".
pub fn describe_controller(ctrl: &Path) -> String {
    let name = ctrl
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let transport = read_trimmed(&ctrl.join("transport")).unwrap_or_else(|| "?".into());
    let address = read_trimmed(&ctrl.join("address")).unwrap_or_default();
    format!("{transport} {address} ({name})")
}

/// The namespace's block queue limits: `(max_hw_sectors_kb * 1024, max_segments)`.
/// `ngXnY` shares the limits of its block device `nvmeXnY` (present when
/// the kernel's multipath is off).
pub fn queue_limits(sys: &Path, ctrl: Option<&Path>, ng_name: &str) -> Option<(u64, u32)> {
    let blk = format!("nvme{}", ng_name.strip_prefix("ng")?);
    let mut candidates = Vec::new();
    if let Some(c) = ctrl {
        candidates.push(c.join(&blk).join("queue"));
    }
    candidates.push(sys.join("block").join(&blk).join("queue"));
    candidates.into_iter().find_map(|q| {
        let kb: u64 = read_trimmed(&q.join("max_hw_sectors_kb"))?.parse().ok()?;
        let segs: u32 = read_trimmed(&q.join("max_segments"))?.parse().ok()?;
        Some((kb * 1024, segs))
    })
}

/// Whether the namespace's block queue completes polled I/O on poll queues
/// (`queue/io_poll` = 1: the controller was given `nvme.poll_queues`).
pub fn io_poll(sys: &Path, ctrl: Option<&Path>, ng_name: &str) -> bool {
    let Some(n) = ng_name.strip_prefix("ng") else {
        return false;
    };
    let blk = format!("nvme{n}");
    let mut candidates = Vec::new();
    if let Some(c) = ctrl {
        candidates.push(c.join(&blk).join("queue"));
    }
    candidates.push(sys.join("block").join(&blk).join("queue"));
    candidates
        .into_iter()
        .find_map(|q| read_trimmed(&q.join("io_poll")))
        .is_some_and(|v| v == "1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fake sysfs: two controller namespace nodes, a head and a controller node.
    fn fake_sys() -> PathBuf {
        let root = std::env::temp_dir().join(format!(
            "mpath-io-sysfs-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&root);
        let d = |p: &str| {
            let p = root.join(p);
            fs::create_dir_all(&p).unwrap();
            p
        };
        let class = d("class");
        for c in ["nvme", "nvme-generic", "nvme-subsystem", "misc"] {
            fs::create_dir_all(class.join(c)).unwrap();
        }
        let ctrl = d("devices/pci0000:00/0000:00:1c.0/0000:01:00.0/nvme/nvme0");
        symlink(class.join("nvme"), ctrl.join("subsystem")).unwrap();
        fs::write(ctrl.join("transport"), "pcie\n").unwrap();
        fs::write(ctrl.join("address"), "0000:01:00.0\n").unwrap();
        let ng = d("devices/pci0000:00/0000:00:1c.0/0000:01:00.0/nvme/nvme0/ng0n1");
        symlink(class.join("nvme-generic"), ng.join("subsystem")).unwrap();
        let q = d("devices/pci0000:00/0000:00:1c.0/0000:01:00.0/nvme/nvme0/nvme0n1/queue");
        fs::write(q.join("max_hw_sectors_kb"), "512\n").unwrap();
        fs::write(q.join("max_segments"), "127\n").unwrap();
        let subsys = d("devices/virtual/nvme-subsystem/nvme-subsys1");
        symlink(class.join("nvme-subsystem"), subsys.join("subsystem")).unwrap();
        let head = d("devices/virtual/nvme-subsystem/nvme-subsys1/ng1n1");
        symlink(class.join("nvme-generic"), head.join("subsystem")).unwrap();
        let misc = d("devices/virtual/misc/fuse");
        symlink(class.join("misc"), misc.join("subsystem")).unwrap();
        let chr = d("dev/char");
        symlink(&ng, chr.join("242:0")).unwrap();
        symlink(&ctrl, chr.join("241:0")).unwrap();
        symlink(&head, chr.join("242:1")).unwrap();
        symlink(&misc, chr.join("10:229")).unwrap();
        root
    }

    #[test]
    fn node_kinds_and_limits() {
        let sys = fake_sys();
        let ctrl =
            fs::canonicalize(sys.join("devices/pci0000:00/0000:00:1c.0/0000:01:00.0/nvme/nvme0"))
                .unwrap();
        assert_eq!(
            classify(&sys, 242, 0),
            NodeKind::Namespace {
                name: "ng0n1".into(),
                ctrl: ctrl.clone()
            }
        );
        assert_eq!(
            classify(&sys, 241, 0),
            NodeKind::Controller {
                name: "nvme0".into()
            }
        );
        assert_eq!(
            classify(&sys, 242, 1),
            NodeKind::Head {
                name: "ng1n1".into()
            }
        );
        assert_eq!(
            classify(&sys, 10, 229),
            NodeKind::Other {
                class: "misc".into()
            }
        );
        assert_eq!(classify(&sys, 1, 1), NodeKind::Unknown);
        assert_eq!(describe_controller(&ctrl), "pcie 0000:01:00.0 (nvme0)");
        assert_eq!(
            queue_limits(&sys, Some(&ctrl), "ng0n1"),
            Some((512 * 1024, 127))
        );
        assert_eq!(queue_limits(&sys, Some(&ctrl), "ng0n2"), None);
        let _ = fs::remove_dir_all(&sys);
    }
}
