//! How far one request may go through the paths: a deadline from its first
//! submission, rounds over the paths, and the rule that an error every path
//! returns for the same request is the request's (a bad block under a
//! shared image), not the paths'.
//!
//! What others do: dm-multipath fails the path on every error
//! `blk_path_error` calls a path error (a plain `BLK_STS_IOERR` included)
//! and requeues with no cap, so an EIO every path returns for one sector
//! fails all paths, the checker reinstates them, and it repeats; only
//! `no_path_retry` bounds the time queued with no path. The kernel's NVMe
//! multipath fails over on path-class statuses only (media errors complete
//! at once) and also without a cap. SPDK's bdev_nvme caps the retries of an
//! I/O, failovers included (`bdev_retry_count`, 3 by default). Here: each
//! path is tried at most once per round, at most [`MAX_ROUNDS`] rounds;
//! waiting for a path ends at the no-path timeout counted from the first
//! submission; and an ambiguous error (`EIO`: "it failed", not why) seen on
//! every path in service for one request completes it with an I/O error
//! without failing the last path. A disk that is really dead still fails its
//! paths: the next request fails the path it reaches, because the other
//! paths did not fail *that* request. A range that failed on every path is
//! remembered for a while, so that requests to it fail at their first EIO
//! without failing a path again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::time::Nanos;

/// Rounds over the paths a request may make (each path once per round).
pub const MAX_ROUNDS: u32 = 3;

/// How long a range that failed on every path is remembered.
pub const BAD_RANGE_MEMORY: Nanos = 60 * crate::time::NANOS_PER_SEC;

/// Ranges remembered at most (the oldest is forgotten first).
const BAD_RANGES: usize = 16;

/// One request's tries over the paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempts {
    /// When the request was first submitted: its no-path deadline counts
    /// from here, however often it fails over.
    pub born: Nanos,
    /// The round of tries over the paths, from 1.
    pub(crate) round: u32,
    /// Paths that failed it in this round (not picked again in it).
    pub(crate) tried: u64,
    /// Paths that failed it with an ambiguous error (EIO), in any round.
    pub(crate) ambiguous: u64,
}

impl Attempts {
    pub fn new(born: Nanos) -> Self {
        Self {
            born,
            round: 1,
            tried: 0,
            ambiguous: 0,
        }
    }

    pub fn round(&self) -> u32 {
        self.round
    }

    /// Paths that failed the request in this round (a mask).
    pub fn tried(&self) -> u64 {
        self.tried
    }

    /// Starts the next round if one is left.
    pub(crate) fn next_round(&mut self) -> bool {
        if self.round >= MAX_ROUNDS {
            return false;
        }
        self.round += 1;
        self.tried = 0;
        true
    }
}

/// Where a request goes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Send it on this path (its load is accounted).
    Path(crate::path::PathId),
    /// No path for it now: wait under the no-path rules.
    Wait,
    /// Tried every path in every round: complete it with an I/O error.
    Exhausted,
}

/// Byte ranges that recently failed on every path.
#[derive(Debug, Default)]
pub(crate) struct BadRanges {
    /// Entries in use (read without the lock: the common case is none).
    len: AtomicUsize,
    /// (start, end exclusive, remembered until).
    ranges: Mutex<Vec<(u64, u64, Nanos)>>,
}

impl BadRanges {
    pub(crate) fn remember(&self, offset: u64, len: u64, now: Nanos) {
        if len == 0 {
            return;
        }
        let mut r = self.ranges.lock().unwrap_or_else(|e| e.into_inner());
        r.retain(|&(_, _, until)| until > now);
        if r.len() == BAD_RANGES {
            r.remove(0);
        }
        r.push((offset, offset.saturating_add(len), now + BAD_RANGE_MEMORY));
        self.len.store(r.len(), Ordering::Release);
    }

    pub(crate) fn overlaps(&self, offset: u64, len: u64, now: Nanos) -> bool {
        if len == 0 || self.len.load(Ordering::Acquire) == 0 {
            return false;
        }
        let end = offset.saturating_add(len);
        let r = self.ranges.lock().unwrap_or_else(|e| e.into_inner());
        r.iter()
            .any(|&(s, e, until)| until > now && offset < e && s < end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_are_bounded() {
        let mut a = Attempts::new(5);
        assert_eq!(a.round(), 1);
        a.tried = 0b11;
        for r in 2..=MAX_ROUNDS {
            assert!(a.next_round());
            assert_eq!((a.round(), a.tried()), (r, 0));
        }
        assert!(!a.next_round());
        assert_eq!(a.born, 5);
    }

    #[test]
    fn bad_ranges_overlap_expire_and_are_bounded() {
        let b = BadRanges::default();
        assert!(!b.overlaps(0, 4096, 0));
        b.remember(8192, 4096, 0);
        assert!(b.overlaps(8192, 512, 1));
        assert!(b.overlaps(4096, 4097, 1));
        assert!(!b.overlaps(4096, 4096, 1), "adjacent is not overlapping");
        assert!(!b.overlaps(12288, 4096, 1));
        assert!(!b.overlaps(8192, 0, 1));
        assert!(!b.overlaps(8192, 512, BAD_RANGE_MEMORY), "forgotten");
        for i in 0..BAD_RANGES as u64 + 1 {
            b.remember(i * 1_000_000, 1, 10);
        }
        assert!(!b.overlaps(0, 1, 11), "the oldest went first");
        assert!(b.overlaps(BAD_RANGES as u64 * 1_000_000, 1, 11));
    }
}
