//! A bounce buffer: an aligned copy of a transfer's data for a path that
//! cannot take the caller's buffers as they are (O_DIRECT on a block device
//! with guest buffers that are not aligned for it).
//!
//! The bounce belongs to the in-flight I/O: the caller keeps it until the
//! completion is reaped, then (for reads) copies the data out to the
//! original buffers before it completes the request.

use std::alloc::Layout;
use std::ptr::NonNull;

use crate::driver::IoOp;

/// Buffers are at least page-aligned: what every O_DIRECT user accepts.
const MIN_ALIGN: usize = 4096;

#[derive(Debug)]
pub struct Bounce {
    buf: NonNull<u8>,
    layout: Layout,
    /// The one iovec `prepare` gets; boxed so that its address stays put
    /// while the bounce moves (the kernel may read it until completion).
    iov: Box<libc::iovec>,
    /// The caller's buffers, where a read's data goes on completion.
    dest: Vec<libc::iovec>,
}

// SAFETY: the buffer is owned by the bounce; the caller's iovecs are plain
// addresses whose validity `Bounce::new`'s contract covers, used only by the
// owner of the bounce, whichever thread that is.
unsafe impl Send for Bounce {}

impl Bounce {
    /// An aligned buffer (to `align`, at least a page) for `op` on the
    /// buffers `guest`, holding a copy of their data for a write. `None`
    /// for a transfer of no bytes or a size no allocation can have.
    ///
    /// # Safety
    /// Every iovec of `guest` must describe memory that stays valid for as
    /// long as the bounce lives: readable for a write, writable for a read.
    pub unsafe fn new(op: IoOp, guest: &[libc::iovec], align: usize) -> Option<Self> {
        let len = guest
            .iter()
            .try_fold(0usize, |n, v| n.checked_add(v.iov_len))?;
        if len == 0 {
            return None;
        }
        let layout = Layout::from_size_align(len, align.max(MIN_ALIGN).next_power_of_two()).ok()?;
        // SAFETY: the layout has a non-zero size. Zeroed: a short read leaves
        // no uninitialised bytes behind.
        let buf = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        if matches!(op, IoOp::Write { .. }) {
            let mut at = 0;
            for v in guest {
                // SAFETY: the caller guarantees `v` is readable; `buf` has
                // `len` bytes, the sum of all lengths, so `at + iov_len <= len`;
                // the two never overlap (`buf` is our own allocation).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        v.iov_base.cast::<u8>(),
                        buf.as_ptr().add(at),
                        v.iov_len,
                    )
                };
                at += v.iov_len;
            }
        }
        Some(Self {
            buf,
            layout,
            iov: Box::new(libc::iovec {
                iov_base: buf.as_ptr().cast(),
                iov_len: len,
            }),
            dest: if op == IoOp::Read {
                guest.to_vec()
            } else {
                Vec::new()
            },
        })
    }

    /// The iovec (one) to hand to `PathDriver::prepare` instead of the
    /// caller's; valid while the bounce lives.
    pub fn iovec(&self) -> *const libc::iovec {
        &*self.iov
    }

    /// Copies the first `done` bytes a read brought into the caller's
    /// buffers (nothing for a write).
    ///
    /// # Safety
    /// The I/O that used this bounce must be over (its completion reaped):
    /// the kernel must no longer write the buffer.
    pub unsafe fn copy_out(&self, done: usize) {
        let mut left = done.min(self.layout.size());
        let mut at = 0;
        for v in &self.dest {
            if left == 0 {
                break;
            }
            let n = v.iov_len.min(left);
            // SAFETY: `new`'s contract keeps `v` writable while the bounce
            // lives; `at + n <= done <= size` stays inside our buffer, which
            // no one else writes now (the caller's contract).
            unsafe {
                std::ptr::copy_nonoverlapping(self.buf.as_ptr().add(at), v.iov_base.cast::<u8>(), n)
            };
            at += n;
            left -= n;
        }
    }
}

impl Drop for Bounce {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the owner drops the
        // bounce only after its I/O completed (or was never submitted).
        unsafe { std::alloc::dealloc(self.buf.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iov(b: &mut [u8]) -> libc::iovec {
        libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        }
    }

    #[test]
    fn a_write_bounce_is_aligned_and_holds_the_guest_data_in_order() {
        let mut backing = vec![0u8; 1025];
        let (a, b) = backing[1..].split_at_mut(300);
        a.fill(1);
        b.fill(2);
        let guest = [iov(a), iov(b)];
        // SAFETY: `backing` outlives the bounce.
        let bounce = unsafe { Bounce::new(IoOp::Write { fua: false }, &guest, 512) }.unwrap();
        // SAFETY: `iovec()` points into the live bounce.
        let v = unsafe { *bounce.iovec() };
        assert_eq!(v.iov_len, 1024);
        assert!((v.iov_base as usize).is_multiple_of(4096));
        // SAFETY: the bounce's buffer has `iov_len` initialised bytes.
        let data = unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) };
        assert!(data[..300].iter().all(|&x| x == 1));
        assert!(data[300..].iter().all(|&x| x == 2));
    }

    #[test]
    fn a_read_bounce_copies_out_only_what_was_read() {
        let mut backing = vec![0u8; 1025];
        let (a, b) = backing[1..].split_at_mut(700);
        let guest = [iov(a), iov(b)];
        // SAFETY: `backing` outlives the bounce.
        let bounce = unsafe { Bounce::new(IoOp::Read, &guest, 4096) }.unwrap();
        // SAFETY: nothing else uses the buffer (no I/O here).
        let v = unsafe { *bounce.iovec() };
        // SAFETY: as above; stand in for the kernel filling the buffer.
        unsafe { std::ptr::write_bytes(v.iov_base.cast::<u8>(), 7, v.iov_len) };
        // SAFETY: no I/O uses the bounce.
        unsafe { bounce.copy_out(800) };
        drop(bounce);
        assert!(backing[1..801].iter().all(|&x| x == 7));
        assert!(backing[801..].iter().all(|&x| x == 0));
        assert_eq!(backing[0], 0);
    }

    #[test]
    fn an_empty_transfer_needs_no_bounce() {
        // SAFETY: no memory is described.
        assert!(unsafe { Bounce::new(IoOp::Read, &[], 512) }.is_none());
    }
}
