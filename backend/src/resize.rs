//! Online resize (issue 46): the disk's capacity follows its paths. The
//! `resize` method and the size watch (`size_watch`) re-read every path's
//! size; the capacity changes only when all paths agree (or all hold the
//! size asked for), and shrinking needs `force` (the guest may hold data
//! past the new end). The frontend learns of it through the backend
//! request channel and tells the guest.

use std::sync::atomic::Ordering;

use log::{info, warn};
use mpath::{PathId, PathState};

use crate::device::ConfigNotice;
use crate::disk::Disk;

/// One path's size as just read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathSize {
    pub name: String,
    pub size: Result<u64, String>,
}

/// Why a resize was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The size asked for is no size for this disk.
    BadSize(String),
    /// The paths do not allow it (they disagree, a size cannot be read,
    /// a shrink without `force`).
    Paths(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::BadSize(m) | Refused::Paths(m) => f.write_str(m),
        }
    }
}

/// What a resize did.
#[derive(Debug)]
pub struct Resized {
    pub old_bytes: u64,
    pub new_bytes: u64,
    /// How the frontend was told; `None`: nothing changed.
    pub notice: Option<ConfigNotice>,
}

/// The new capacity from the paths' sizes: `want`, if every path holds
/// it, else the size they all agree on. Pure: unit-tested below.
pub fn decide(
    current: u64,
    block_size: u32,
    sizes: &[PathSize],
    want: Option<u64>,
    force: bool,
) -> Result<u64, Refused> {
    let bs = u64::from(block_size.max(512));
    if sizes.is_empty() {
        return Err(Refused::Paths("no path to read a size from".into()));
    }
    let mut known = Vec::with_capacity(sizes.len());
    for p in sizes {
        match &p.size {
            Ok(n) => known.push((p.name.as_str(), *n)),
            Err(e) => {
                return Err(Refused::Paths(format!(
                    "path {}: cannot read its size: {e}",
                    p.name
                )))
            }
        }
    }
    let list = || {
        known
            .iter()
            .map(|(n, s)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let target = match want {
        Some(w) => {
            if w == 0 || w % bs != 0 {
                return Err(Refused::BadSize(format!(
                    "size: {w} is not a non-zero multiple of the block size {bs}"
                )));
            }
            if let Some((n, s)) = known.iter().find(|(_, s)| *s < w) {
                return Err(Refused::Paths(format!(
                    "path {n} holds {s} bytes, less than {w} (sizes: {})",
                    list()
                )));
            }
            w
        }
        None => {
            let first = known[0].1;
            if known.iter().any(|(_, s)| *s != first) {
                return Err(Refused::Paths(format!(
                    "the paths disagree on the size (bytes: {}); the capacity stays {current}",
                    list()
                )));
            }
            // A size past the last whole block is not the guest's.
            first - first % bs
        }
    };
    if target == 0 {
        return Err(Refused::Paths(format!(
            "the paths hold less than one block ({})",
            list()
        )));
    }
    if target < current && !force {
        return Err(Refused::Paths(format!(
            "shrinking from {current} to {target} bytes refused: the guest may hold data past \
             the new end (force: true to shrink anyway)"
        )));
    }
    Ok(target)
}

/// Every path in service (not removed), with its size read now; each
/// path's `size_now` is updated.
pub fn read_sizes(disk: &Disk) -> Vec<PathSize> {
    (0..disk.engine.paths().len())
        .map(PathId)
        .filter(|&id| disk.engine.path(id).state() != PathState::Removed)
        .filter_map(|id| {
            let driver = disk.driver_arc(id)?;
            let size = driver.read_capacity().map_err(|e| e.to_string());
            if let Ok(n) = size {
                disk.slot(id).size_now.store(n, Ordering::Relaxed);
            }
            Some(PathSize {
                name: disk.engine.path(id).name.to_string(),
                size,
            })
        })
        .collect()
}

/// Resizes the disk as `decide` says, under the control lock (so that a
/// path added meanwhile is checked against the new size). `why` goes to
/// the log line.
pub fn resize(disk: &Disk, want: Option<u64>, force: bool, why: &str) -> Result<Resized, Refused> {
    let _control = disk.control_lock();
    let sizes = read_sizes(disk);
    let old = disk.capacity_bytes();
    let new = decide(old, disk.block_size, &sizes, want, force)?;
    if new == old {
        return Ok(Resized {
            old_bytes: old,
            new_bytes: new,
            notice: None,
        });
    }
    disk.set_capacity(new);
    info!("capacity changed from {old} to {new} bytes ({why})");
    let notice = match crate::serve::current_device() {
        Some(dev) => dev.config_changed(),
        None => ConfigNotice::NoChannel,
    };
    match &notice {
        ConfigNotice::Sent => info!("the frontend was told of the new capacity"),
        ConfigNotice::NoChannel => {
            info!("no backend request channel: the guest sees the new capacity when it re-reads the config")
        }
        ConfigNotice::Failed(e) => warn!("telling the frontend of the new capacity: {e}"),
    }
    Ok(Resized {
        old_bytes: old,
        new_bytes: new,
        notice: Some(notice),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(v: &[(&str, u64)]) -> Vec<PathSize> {
        v.iter()
            .map(|(n, s)| PathSize {
                name: n.to_string(),
                size: Ok(*s),
            })
            .collect()
    }

    const M: u64 = 1 << 20;

    #[test]
    fn grows_when_every_path_agrees() {
        let s = sizes(&[("a", 96 * M), ("b", 96 * M)]);
        assert_eq!(decide(64 * M, 512, &s, None, false), Ok(96 * M));
        // Nothing new: the same size.
        let s = sizes(&[("a", 64 * M), ("b", 64 * M)]);
        assert_eq!(decide(64 * M, 512, &s, None, false), Ok(64 * M));
    }

    #[test]
    fn a_path_that_disagrees_keeps_the_old_capacity() {
        let s = sizes(&[("a", 96 * M), ("b", 64 * M)]);
        let e = decide(64 * M, 512, &s, None, false).unwrap_err();
        assert!(
            matches!(&e, Refused::Paths(m) if m.contains("disagree") && m.contains("b 67108864")),
            "{e}"
        );
        let s = vec![
            PathSize {
                name: "a".into(),
                size: Ok(96 * M),
            },
            PathSize {
                name: "b".into(),
                size: Err("EIO".into()),
            },
        ];
        let e = decide(64 * M, 512, &s, None, false).unwrap_err();
        assert!(
            e.to_string().contains("path b: cannot read its size: EIO"),
            "{e}"
        );
    }

    #[test]
    fn a_size_asked_for_must_be_held_by_every_path_and_whole_blocks() {
        let s = sizes(&[("a", 128 * M), ("b", 96 * M)]);
        assert_eq!(decide(64 * M, 512, &s, Some(96 * M), false), Ok(96 * M));
        let e = decide(64 * M, 512, &s, Some(100 * M), false).unwrap_err();
        assert!(
            matches!(&e, Refused::Paths(m) if m.contains("path b holds")),
            "{e}"
        );
        let e = decide(64 * M, 4096, &s, Some(64 * M + 512), false).unwrap_err();
        assert!(matches!(e, Refused::BadSize(_)), "{e}");
        assert!(matches!(
            decide(64 * M, 512, &s, Some(0), false),
            Err(Refused::BadSize(_))
        ));
    }

    #[test]
    fn shrinking_needs_force() {
        let s = sizes(&[("a", 32 * M), ("b", 32 * M)]);
        let e = decide(64 * M, 512, &s, None, false).unwrap_err();
        assert!(e.to_string().contains("force"), "{e}");
        assert_eq!(decide(64 * M, 512, &s, None, true), Ok(32 * M));
        let s = sizes(&[("a", 64 * M), ("b", 64 * M)]);
        assert!(decide(64 * M, 512, &s, Some(48 * M), false).is_err());
        assert_eq!(decide(64 * M, 512, &s, Some(48 * M), true), Ok(48 * M));
    }

    #[test]
    fn a_tail_short_of_a_block_is_not_the_guests() {
        let s = sizes(&[("a", 96 * M + 100), ("b", 96 * M + 100)]);
        assert_eq!(decide(64 * M, 4096, &s, None, false), Ok(96 * M));
    }
}
