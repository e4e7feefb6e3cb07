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

    #[inline]
    pub fn iovecs(&self) -> &[libc::iovec] {
        &self.iov
    }

    /// Which memory these buffers are in: the address of the keep-alive
    /// they were made with (equal for every `GuestBufs` of one map).
    #[inline]
    pub fn memory_id(&self) -> usize {
        Arc::as_ptr(&self._keep).cast::<()>() as usize
    }

    /// Total bytes described.
    pub fn len(&self) -> usize {
        self.iov.iter().map(|v| v.iov_len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gives the iovec array back for reuse (the keep-alive is dropped).
    #[inline]
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

/// Empty iovec arrays kept for reuse: a request's array comes from here and
/// goes back when the request is done, so serving allocates none.
#[derive(Debug, Default)]
pub struct IovecPool(Vec<Vec<libc::iovec>>);

// SAFETY: the arrays kept are empty (only their allocations are): they
// hold no addresses.
unsafe impl Send for IovecPool {}

/// Most arrays a pool keeps (a queue's worth is plenty).
const POOL_MAX: usize = 1024;

impl IovecPool {
    /// An empty array, with room from an earlier use when there is one.
    #[inline]
    pub fn take(&mut self) -> Vec<libc::iovec> {
        self.0.pop().unwrap_or_default()
    }

    /// Keeps `v`'s allocation (its contents are dropped).
    #[inline]
    pub fn put(&mut self, mut v: Vec<libc::iovec>) {
        if self.0.len() < POOL_MAX && v.capacity() > 0 {
            v.clear();
            self.0.push(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_gives_back_the_allocations_it_was_given() {
        let mut pool = IovecPool::default();
        assert_eq!(pool.take().capacity(), 0, "an empty pool allocates nothing");
        let mut v = Vec::with_capacity(16);
        v.push(libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 1,
        });
        let at = v.as_ptr();
        pool.put(v);
        let again = pool.take();
        assert!(again.is_empty());
        assert_eq!((again.as_ptr(), again.capacity()), (at, 16));
    }

    #[test]
    fn guest_bufs_zero_and_give_their_array_back() {
        let data = Arc::new(vec![7u8; 100]);
        let iov = vec![
            libc::iovec {
                iov_base: data.as_ptr() as *mut libc::c_void,
                iov_len: 60,
            },
            libc::iovec {
                iov_base: data[60..].as_ptr() as *mut libc::c_void,
                iov_len: 40,
            },
        ];
        // SAFETY: the Arc keeps the vector's buffer alive; nothing else
        // touches it meanwhile.
        let mut b = unsafe { GuestBufs::new(data.clone(), iov) };
        assert_eq!(b.len(), 100);
        b.zero();
        assert!(data.iter().all(|&x| x == 0));
        assert_eq!(b.into_vec().len(), 2);
    }
}
