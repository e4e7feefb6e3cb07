//! Where the binaries under test live.

use std::path::PathBuf;

/// The workspace root (the parent of this crate's manifest directory).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Our daemon: `$VHOST_MPATH_BIN`, else `target/release/vhost-mpath` if it exists,
/// else `target/debug/vhost-mpath` (both under the workspace root).
pub fn ours_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("VHOST_MPATH_BIN") {
        return PathBuf::from(bin);
    }
    let target = workspace_root().join("target");
    let release = target.join("release/vhost-mpath");
    if release.exists() {
        release
    } else {
        target.join("debug/vhost-mpath")
    }
}

/// `qemu-storage-daemon`: `$QSD_BIN`, else the one on `$PATH`.
pub fn qsd_binary() -> PathBuf {
    std::env::var_os("QSD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("qemu-storage-daemon"))
}
