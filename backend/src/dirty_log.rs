//! Dirty-page logging for live migration (vhost-user spec, "Migration").
//!
//! While migration runs QEMU hands over a shared bitmap (`SET_LOG_BASE`):
//! one bit per 4 KiB guest-physical page, bit `p % 8` of byte `p / 8`. Every
//! byte the daemon writes into guest memory must mark its page, or the
//! destination resumes with stale contents there. vm-memory's bitmap sees
//! only writes made through `Bytes`; the data io_uring DMAs into guest
//! buffers for reads is written by the kernel, so the worker marks those
//! pages itself (from the host iovecs, see [`guest_ranges`]) when the read
//! completes, before its used entry is published.

use std::fs::File;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use vm_memory::mmap::MmapRegion;
use vm_memory::{FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// Guest pages per bit of the log.
pub const LOG_PAGE_SHIFT: u32 = 12;

/// The `VHOST_F_LOG_ALL` feature bit: set in `SET_FEATURES` while logging.
pub const VHOST_F_LOG_ALL: u64 = 1 << 26;

/// One mapped log region (`SET_LOG_BASE`).
pub struct DirtyLog {
    /// The mapping's SIGBUS registration: dropped before `map` is unmapped
    /// (field order).
    guard: Option<crate::vhost_user::sigbus::Guard>,
    map: MmapRegion<()>,
    /// Where the bitmap starts in `map` (the offset's distance from the
    /// page boundary the mapping had to start at).
    start: usize,
    /// Bitmap bytes: pages `0 .. len * 8` can be logged.
    len: usize,
    /// Writes to guest addresses beyond the log (ignored, counted).
    beyond: AtomicU64,
}

impl std::fmt::Debug for DirtyLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirtyLog")
            .field("len", &self.len)
            .field("beyond", &self.beyond.load(Ordering::Relaxed))
            .finish()
    }
}

impl Drop for DirtyLog {
    fn drop(&mut self) {
        // Once per log: what a frontend's too small log made us skip.
        let beyond = self.beyond();
        if beyond > 0 {
            log::warn!("dirty log: {beyond} writes beyond the log's last page were not logged");
        }
    }
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

impl DirtyLog {
    /// Maps `size` bytes of `file` from `offset` (as `SET_LOG_BASE` gives them).
    pub fn map(file: File, size: u64, offset: u64) -> std::io::Result<Self> {
        let invalid = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        if size == 0 {
            return Err(invalid("empty dirty log"));
        }
        crate::fd_range::check_holds(&file, offset, size, "dirty log")?;
        crate::fd_range::seal_shrink(&file, "dirty log");
        // mmap wants a page-aligned file offset.
        let aligned = offset - offset % page_size();
        let start = (offset - aligned) as usize;
        let total = usize::try_from(size)
            .ok()
            .and_then(|s| s.checked_add(start))
            .ok_or_else(|| invalid("dirty log size overflows"))?;
        let map = MmapRegion::build(
            Some(FileOffset::new(file, aligned)),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
        )
        .map_err(|e| std::io::Error::other(format!("mapping the dirty log: {e}")))?;
        Ok(Self {
            guard: crate::vhost_user::sigbus::register(
                &map,
                format!("dirty log ({size:#x} bytes)"),
            ),
            map,
            start,
            len: size as usize,
            beyond: AtomicU64::new(0),
        })
    }

    /// Bitmap bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the log has a bit for guest-physical address `last` (and
    /// so for every address below it).
    pub fn covers(&self, last: u64) -> bool {
        (last >> LOG_PAGE_SHIFT) < (self.len as u64) << 3
    }

    /// Whether a SIGBUS hit the log (the frontend truncated its fd): its
    /// lost pages read zeros now, marks there are lost.
    pub fn broken(&self) -> bool {
        self.guard
            .as_ref()
            .is_some_and(crate::vhost_user::sigbus::Guard::broken)
    }

    /// Writes ignored because their guest address lies beyond the log.
    pub fn beyond(&self) -> u64 {
        self.beyond.load(Ordering::Relaxed)
    }

    fn byte(&self, index: usize) -> Option<&AtomicU8> {
        if index >= self.len {
            return None;
        }
        // SAFETY: `start + index` lies inside the mapping (checked above
        // and at map time), which lives as long as `self`; a byte has no
        // alignment requirement, and every access to the shared log, ours
        // and QEMU's, is atomic.
        Some(unsafe { AtomicU8::from_ptr(self.map.as_ptr().add(self.start + index)) })
    }

    /// Marks every page `len` bytes from guest-physical `addr` touch. A
    /// range (partly) beyond the log marks what is inside and is counted.
    pub fn mark(&self, addr: u64, len: u64) {
        if len == 0 {
            return;
        }
        let first = addr >> LOG_PAGE_SHIFT;
        let last = addr.saturating_add(len - 1) >> LOG_PAGE_SHIFT;
        let pages = (self.len as u64) << 3;
        if last >= pages || addr.checked_add(len - 1).is_none() {
            self.beyond.fetch_add(1, Ordering::Relaxed);
        }
        if first >= pages {
            return;
        }
        let last = last.min(pages - 1);
        // One fetch_or per bitmap byte, with the bits of this range in it.
        let mut page = first;
        while page <= last {
            let byte = page >> 3;
            let end = last.min((byte << 3) | 7);
            let lo = (page & 7) as u32;
            let hi = (end & 7) as u32;
            let mask = ((0xffu32 << lo) & (0xffu32 >> (7 - hi))) as u8;
            if let Some(b) = self.byte(byte as usize) {
                b.fetch_or(mask, Ordering::SeqCst);
            }
            page = end + 1;
        }
    }

    /// Whether guest page `page` is marked (tests, diagnostics).
    pub fn is_marked(&self, page: u64) -> bool {
        self.byte((page >> 3) as usize)
            .is_some_and(|b| b.load(Ordering::SeqCst) & (1 << (page & 7)) != 0)
    }
}

/// The guest-physical ranges behind host iovecs that point into `mem` (as
/// the parser made them: each iovec lies inside one region). An iovec
/// outside every region (a bounce buffer, say) yields nothing.
pub fn guest_ranges<'a>(
    mem: &'a GuestMemoryMmap,
    iovecs: &'a [libc::iovec],
) -> impl Iterator<Item = (GuestAddress, u64)> + 'a {
    iovecs.iter().filter_map(move |v| {
        let host = v.iov_base as usize;
        let len = v.iov_len;
        mem.iter().find_map(|r| {
            let base = r.as_ptr() as usize;
            let rlen = r.len() as usize;
            let off = host.checked_sub(base)?;
            (off < rlen && len <= rlen - off)
                .then(|| (GuestAddress(r.start_addr().0 + off as u64), len as u64))
        })
    })
}

/// What every worker consults before writing guest memory: the log while
/// migration logs (`LOG_ALL` negotiated and a log mapped), else nothing.
/// The request handler switches it; workers only load it.
#[derive(Debug, Default)]
pub struct LogSwitch {
    /// The mapped log (`SET_LOG_BASE`), whether or not logging is on.
    base: std::sync::Mutex<Option<Arc<DirtyLog>>>,
    log_all: std::sync::atomic::AtomicBool,
    active: ArcSwapOption<DirtyLog>,
    /// Whether `active` holds a log: one plain load per guest write while
    /// logging is off, where loading `active` itself took 2.9% of a worker
    /// at null 4k QD32 (arc_swap's debt slots, three loads per request).
    on: std::sync::atomic::AtomicBool,
    /// Diagnostic only: do not mark the pages reads DMA into (the
    /// migration test's negative control). Never for production.
    skip_reads: bool,
    /// Benchmark only: log into a private bitmap from the start, whatever
    /// the frontend says (the cost of logging with a client that cannot
    /// migrate, such as libblkio).
    forced: bool,
}

/// Environment variable that turns off marking of read buffers (diagnostic:
/// the migration test shows that migration then corrupts guest memory).
pub const NO_DIRTY_LOG_READS_ENV: &str = "VHOST_MPATH_DIAG_NO_DIRTY_LOG_READS";

/// Environment variable that logs every write into a private bitmap from
/// the start (benchmark of the logging cost; never for production).
pub const DIRTY_LOG_ALWAYS_ENV: &str = "VHOST_MPATH_DIAG_DIRTY_LOG_ALWAYS";

/// A private log for the benchmark: 4 GiB of sparse memfd, one bit per page
/// of a 47-bit guest address space (libblkio's guest addresses are its own
/// virtual addresses); only the bytes touched take memory.
fn private_log() -> std::io::Result<DirtyLog> {
    let file = File::from(rustix::fs::memfd_create(
        "vhost-mpath-dirty-log",
        rustix::fs::MemfdFlags::CLOEXEC,
    )?);
    let size = 1u64 << (47 - LOG_PAGE_SHIFT - 3);
    file.set_len(size)?;
    DirtyLog::map(file, size, 0)
}

impl LogSwitch {
    pub fn new() -> Self {
        let on = |var| std::env::var_os(var).is_some_and(|v| v == "1");
        let mut s = Self::with_read_marking(!on(NO_DIRTY_LOG_READS_ENV));
        if on(DIRTY_LOG_ALWAYS_ENV) {
            match private_log() {
                Ok(log) => {
                    log::info!("{DIRTY_LOG_ALWAYS_ENV}: logging every write into a private bitmap");
                    s.set_base(log);
                    s.set_features(VHOST_F_LOG_ALL);
                    s.forced = true;
                }
                Err(e) => log::warn!("{DIRTY_LOG_ALWAYS_ENV}: no private log: {e}"),
            }
        }
        s
    }

    /// Logging into the benchmark's private bitmap (see [`DIRTY_LOG_ALWAYS_ENV`]).
    pub fn forced(&self) -> bool {
        self.forced
    }

    /// `false` only for the diagnostic (see [`NO_DIRTY_LOG_READS_ENV`]).
    pub fn with_read_marking(mark_reads: bool) -> Self {
        Self {
            skip_reads: !mark_reads,
            ..Self::default()
        }
    }

    fn update(&self, base: &Option<Arc<DirtyLog>>) {
        let on = self.log_all.load(Ordering::SeqCst);
        let log = if on { base.clone() } else { None };
        let some = log.is_some();
        self.active.store(log);
        // After the store: a worker that sees `on` finds the log.
        self.on.store(some, Ordering::SeqCst);
    }

    /// `SET_LOG_BASE`: a new log replaces the old one.
    pub fn set_base(&self, log: DirtyLog) {
        if self.forced {
            return;
        }
        let mut base = self.base.lock().unwrap_or_else(|p| p.into_inner());
        *base = Some(Arc::new(log));
        self.update(&base);
    }

    /// `SET_FEATURES`: logging follows the `VHOST_F_LOG_ALL` bit.
    pub fn set_features(&self, features: u64) {
        if self.forced {
            return;
        }
        let base = self.base.lock().unwrap_or_else(|p| p.into_inner());
        self.log_all
            .store(features & VHOST_F_LOG_ALL != 0, Ordering::SeqCst);
        self.update(&base);
    }

    /// The frontend went away: no log, no logging.
    pub fn reset(&self) {
        if self.forced {
            return;
        }
        let mut base = self.base.lock().unwrap_or_else(|p| p.into_inner());
        *base = None;
        self.log_all.store(false, Ordering::SeqCst);
        self.update(&base);
    }

    /// Whether the log in force, if logging is on, covers guest-physical
    /// address `last`.
    pub fn covers(&self, last: u64) -> bool {
        self.active().is_none_or(|log| log.covers(last))
    }

    /// The log to mark now, if logging is on.
    pub fn active(&self) -> Option<Arc<DirtyLog>> {
        if !self.on.load(Ordering::Acquire) {
            return None;
        }
        self.active.load_full()
    }

    /// Whether read buffers are marked (always, but for the diagnostic).
    pub fn marks_reads(&self) -> bool {
        !self.skip_reads
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom};

    fn memfd(len: u64) -> File {
        let f = File::from(
            rustix::fs::memfd_create("dirty-log-test", rustix::fs::MemfdFlags::empty()).unwrap(),
        );
        f.set_len(len).unwrap();
        f
    }

    fn bytes_of(f: &File, offset: u64, len: usize) -> Vec<u8> {
        let mut f = f.try_clone().unwrap();
        f.seek(SeekFrom::Start(offset)).unwrap();
        let mut v = vec![0u8; len];
        f.read_exact(&mut v).unwrap();
        v
    }

    #[test]
    fn marks_the_pages_a_range_touches_in_the_shared_file() {
        let f = memfd(64);
        let log = DirtyLog::map(f.try_clone().unwrap(), 64, 0).unwrap();
        // Bytes 0x1fff..0x2001 touch pages 1 and 2.
        log.mark(0x1fff, 2);
        // Pages 5..=20: a range crossing two bitmap bytes boundaries.
        log.mark(5 << 12, 16 << 12);
        // One byte of page 100.
        log.mark((100 << 12) + 17, 1);
        let b = bytes_of(&f, 0, 16);
        assert_eq!(b[0], 0b1110_0110);
        assert_eq!(b[1], 0xff);
        assert_eq!(b[2], 0b0001_1111);
        assert_eq!(b[12], 1 << 4);
        assert!(log.is_marked(100) && !log.is_marked(99) && !log.is_marked(101));
        assert_eq!(log.beyond(), 0);
    }

    #[test]
    fn addresses_beyond_the_log_are_counted_never_a_panic() {
        let f = memfd(8192);
        let log = DirtyLog::map(f.try_clone().unwrap(), 2, 0).unwrap();
        // 16 pages logged; page 15 is the last.
        log.mark(15 << 12, 2 << 12);
        assert!(log.is_marked(15));
        assert_eq!(log.beyond(), 1);
        log.mark(1 << 40, 4096);
        log.mark(u64::MAX - 10, 100);
        log.mark(u64::MAX, 1);
        assert_eq!(log.beyond(), 4);
        log.mark(0, 0);
        assert_eq!(log.beyond(), 4);
        assert_eq!(bytes_of(&f, 0, 3), vec![0, 0x80, 0]);
    }

    #[test]
    fn an_unaligned_offset_is_honoured() {
        let f = memfd(3 * 4096);
        let log = DirtyLog::map(f.try_clone().unwrap(), 16, 4096 + 100).unwrap();
        log.mark(0, 1);
        log.mark(127 << 12, 1);
        let b = bytes_of(&f, 4096 + 100, 16);
        assert_eq!(b[0], 1);
        assert_eq!(b[15], 0x80);
        assert_eq!(bytes_of(&f, 4096 + 99, 1), vec![0]);
    }

    #[test]
    fn a_log_covers_one_page_per_bit() {
        let log = DirtyLog::map(memfd(2), 2, 0).unwrap();
        assert!(log.covers(0) && log.covers((16 << 12) - 1));
        assert!(!log.covers(16 << 12) && !log.covers(u64::MAX));
    }

    #[test]
    fn an_empty_log_is_refused() {
        assert!(DirtyLog::map(memfd(4096), 0, 0).is_err());
    }

    #[test]
    fn host_iovecs_map_back_to_guest_addresses() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[
            (GuestAddress(0), 0x10000),
            (GuestAddress(0x100000), 0x10000),
        ])
        .unwrap();
        let host = |g: u64| mem.get_host_address(GuestAddress(g)).unwrap();
        let outside = [0u8; 16];
        let iovecs = [
            libc::iovec {
                iov_base: host(0x1234).cast(),
                iov_len: 0x2000,
            },
            libc::iovec {
                iov_base: outside.as_ptr() as *mut libc::c_void,
                iov_len: 16,
            },
            libc::iovec {
                iov_base: host(0x10f000).cast(),
                iov_len: 0x1000,
            },
            // Runs past its region's end: not from the parser, not trusted.
            libc::iovec {
                iov_base: host(0xf000).cast(),
                iov_len: 0x2000,
            },
        ];
        let got: Vec<_> = guest_ranges(&mem, &iovecs).collect();
        assert_eq!(
            got,
            vec![
                (GuestAddress(0x1234), 0x2000),
                (GuestAddress(0x10f000), 0x1000)
            ]
        );
    }

    #[test]
    fn the_switch_logs_only_with_log_all_and_a_base() {
        let s = LogSwitch::new();
        assert!(s.active().is_none());
        s.set_features(VHOST_F_LOG_ALL);
        assert!(s.active().is_none(), "no base yet");
        s.set_base(DirtyLog::map(memfd(64), 64, 0).unwrap());
        assert!(s.active().is_some());
        s.set_features(0);
        assert!(s.active().is_none(), "LOG_ALL cleared");
        s.set_features(VHOST_F_LOG_ALL);
        assert!(s.active().is_some());
        s.reset();
        assert!(s.active().is_none());
    }
}
