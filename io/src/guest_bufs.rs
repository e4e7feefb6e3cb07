//! Data buffers in a guest's memory, as a submission takes them.

use std::any::Any;
use std::sync::Arc;

/// Iovecs into memory that `keep` keeps mapped (a guest's memory map): the
/// one way guest buffers reach an [`crate::IoQueue`]. Holding them keeps the
/// memory alive, so the queue can hand them to the kernel safely.
pub struct GuestBufs {
    iov: Vec<libc::iovec>,
    _keep: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the iovecs are plain addresses into memory that `_keep` keeps
// mapped (`GuestBufs::new`'s contract); whoever owns the value is the only
// user of them, on whichever thread.
unsafe impl Send for GuestBufs {}

impl std::fmt::Debug for GuestBufs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestBufs")
            .field("segments", &self.iov.len())
            .field("bytes", &self.len())
            .finish()
    }
}

impl GuestBufs {
    /// # Safety
    /// Every iovec of `iov` must describe memory, readable and writable,
    /// that stays mapped (and is not freed or remapped) for as long as
    /// `keep` lives. Nothing else of the process may rely on that memory's
    /// contents while I/O runs on it (it belongs to the guest).
    pub unsafe fn new(keep: Arc<dyn Any + Send + Sync>, iov: Vec<libc::iovec>) -> Self {
        Self { iov, _keep: keep }
    }

    pub fn iovecs(&self) -> &[libc::iovec] {
        &self.iov
    }

    /// Total bytes described.
    pub fn len(&self) -> usize {
        self.iov.iter().map(|v| v.iov_len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gives the iovec array back for reuse (the keep-alive is dropped).
    pub fn into_vec(self) -> Vec<libc::iovec> {
        self.iov
    }

    /// Fills every buffer with zeroes.
    pub fn zero(&mut self) {
        for v in &self.iov {
            // SAFETY: `new`'s contract: each iovec is writable memory kept
            // mapped by `_keep`, which `self` holds.
            unsafe { std::ptr::write_bytes(v.iov_base.cast::<u8>(), 0, v.iov_len) };
        }
    }
}
