//! A uniquely named directory that is removed (with its contents) on drop.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A temporary directory, removed recursively when dropped.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a fresh directory under `std::env::temp_dir()`.
    pub fn new(prefix: &str) -> io::Result<TempDir> {
        Self::new_in(&std::env::temp_dir(), prefix)
    }

    /// Creates a fresh directory under `base` (e.g. `/dev/shm` for a tmpfs file).
    pub fn new_in(base: &Path, prefix: &str) -> io::Result<TempDir> {
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("{prefix}-{}-{n}", std::process::id()));
            match fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir { path }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates a sparse file of `size` bytes in this directory and returns its path.
    pub fn sparse_file(&self, name: &str, size: u64) -> io::Result<PathBuf> {
        let path = self.path.join(name);
        fs::File::create(&path)?.set_len(size)?;
        Ok(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}
