//! How big a worker's io_uring must be: every part of a full queue of the
//! worst-split requests, plus the tick and one probe per path, can be on the
//! ring at once without overflowing its completion queue.

use crate::disk::Disk;
use crate::virtio::{Limits, MAX_DISCARD_SEG};

/// Most parts one request can become with the disk's limits now.
pub(super) fn max_parts_per_request(disk: &Disk, limits: &Limits) -> u64 {
    let split = disk.split_limits();
    let len = limits.max_transfer();
    let by_len = if split.max_transfer == 0 {
        1
    } else {
        len.div_ceil(split.max_transfer)
    };
    // Each of the request's buffers may start and end in a page of its own.
    let pages = len.div_ceil(crate::split::PAGE) + 2 * u64::from(limits.seg_max);
    let by_pages = if split.max_pages == 0 {
        1
    } else {
        pages.div_ceil(split.max_pages)
    };
    // Cutting at whole blocks can leave one more part.
    let rw = by_len.max(by_pages) + u64::from(by_len > 1 || by_pages > 1);
    let segments = if limits.discard || limits.write_zeroes {
        u64::from(MAX_DISCARD_SEG)
    } else {
        1
    };
    // A flush is one part per dirty path.
    let paths = disk.engine.paths().len() as u64;
    rw.max(segments).max(paths)
}

/// Submission and completion queue sizes for a worker of `queue_size`.
///
/// The completion queue takes every part that can be in flight at once, so
/// it never overflows. The submission queue only holds what is queued
/// between two submits: when a split fills it, `Ring::push` submits (one
/// system call per queue's worth), so it is sized for a full queue of
/// unsplit requests and their timers, not for the worst split (whose
/// 128-byte entries would cost megabytes per queue).
pub(super) fn ring_size(disk: &Disk, limits: &Limits, queue_size: u16) -> (u32, u32) {
    let paths = disk.engine.paths().len() as u64;
    let parts = u64::from(queue_size) * max_parts_per_request(disk, limits) + paths + 1;
    let sq = (2 * u64::from(queue_size)).clamp(64, u64::from(mpath_io::MAX_SQ_ENTRIES));
    // The kernel takes at most MAX_CQ_ENTRIES; a bigger split than that
    // overflows into the kernel's list and is reaped from there, slower
    // but lossless.
    let cq = parts.clamp(2 * sq, u64::from(mpath_io::MAX_CQ_ENTRIES));
    (sq as u32, cq as u32)
}
