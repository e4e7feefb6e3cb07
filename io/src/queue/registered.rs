//! What a queue registers with its ring: guest memory as fixed buffers and
//! the paths' files in the ring's file table.
//!
//! **Fixed buffers.** The caller names its current guest memory with
//! [`IoQueue::set_memory`]: the keep-alive its [`crate::GuestBufs`] carry and
//! the regions' host addresses. The first command after that which could use
//! a fixed buffer registers the regions, cut into chunks of at most
//! [`MAX_CHUNK`] (the kernel refuses larger buffers), into the ring's sparse
//! buffer table, one slot per chunk, and clears the slots the previous memory
//! used beyond them. Replacing a slot never waits: the kernel drops an old
//! buffer's pages when the last command using it completes. A command uses
//! fixed buffer `i` when its buffers are of the registered memory (same
//! keep-alive) and its one iovec lies wholly inside chunk `i`; anything else
//! (several iovecs, a bounce buffer, older memory, a chunk that failed) goes
//! with plain addresses. When registration fails (RLIMIT_MEMLOCK without
//! CAP_IPC_LOCK, a kernel without sparse tables, memory that cannot be
//! pinned) one line is logged per process and those chunks go unregistered;
//! the next memory table tries again.
//!
//! A driver may bound the buffers it can use ([`crate::PathDriver::fixed_buffer_window`]):
//! NVMe passthrough maps a fixed buffer from the command's first page to the
//! end of the registered buffer, and kernels before the block layer's
//! rework of `blk_rq_map_user_bvec` refuse that with EINVAL when it spans
//! more pages than the queue's `max_segments` (observed on Debian's 6.1: a
//! 4 KiB write in a 16 MiB registered buffer fails, in a 64 KiB one it
//! works). The memory is then registered as overlapping windows of that
//! many pages at a stride of half a window, so every command of up to half
//! a window lies wholly in one window and never spans more pages to its end.
//! The queue holds the keep-alive of the
//! memory it registered, so no other mapping can appear at those addresses
//! while the table describes them.
//!
//! **Registered files.** Slot `p` of the ring's file table holds path `p`'s
//! file ([`crate::PathDriver::ring_file`]) from the path's first command on.
//! A re-opened path (a new [`crate::RingFile::id`], even if its fd number is
//! the old one) replaces its slot at its next command, and the tick clears
//! the slots of paths that are gone or re-opened, so the ring does not keep
//! a removed controller's node open for long. Commands in flight on the old
//! file keep it until they complete (the kernel's doing).

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::{PathDriver, PathTable, Ring, RingFile};

/// The largest buffer the kernel registers (SZ_1G in io_uring's rsrc.c).
pub const MAX_CHUNK: usize = 1 << 30;
/// Slots of a ring's fixed-buffer table (IORING_MAX_REG_BUFFERS; chunks
/// beyond go unregistered).
pub const BUF_SLOTS: u32 = 1 << 14;
/// Slots of a ring's file table (paths with a higher index go unregistered).
pub const FILE_SLOTS: u32 = 256;

/// The page the kernel pins buffers in (x86-64, arm64 with 4 KiB pages).
const PAGE: usize = 4096;

/// A guest memory region at a host address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostRegion {
    pub host: usize,
    pub len: usize,
}

/// What a queue registers with its ring (all off by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegOptions {
    /// Guest memory as fixed buffers, for drivers that take them (NVMe).
    pub fixed_buffers: bool,
    /// The paths' files in the ring's file table, for drivers that offer one.
    pub registered_files: bool,
    /// Reads and writes of drivers whose device polls ([`crate::PathDriver::io_poll`])
    /// go to a second ring set up with IORING_SETUP_IOPOLL, which the
    /// worker polls while they are in flight (see `IoQueue::polling`).
    pub io_poll: bool,
}

/// What registration did, counted per queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegStats {
    /// Reads and writes on drivers that take fixed buffers, sent with one.
    pub fixed_buf: u64,
    /// The same sent with plain addresses (several iovecs, a bounce, not in
    /// registered memory, registration off or failed).
    pub plain_buf: u64,
    /// Commands sent with a registered file.
    pub fixed_file: u64,
    /// Commands sent on the polled ring.
    pub polled: u64,
    /// Times guest memory was registered (memory tables seen in use).
    pub registrations: u64,
    /// Bytes of guest memory registered now.
    pub registered_bytes: u64,
}

impl std::ops::AddAssign for RegStats {
    fn add_assign(&mut self, o: Self) {
        self.fixed_buf += o.fixed_buf;
        self.plain_buf += o.plain_buf;
        self.fixed_file += o.fixed_file;
        self.polled += o.polled;
        self.registrations += o.registrations;
        self.registered_bytes += o.registered_bytes;
    }
}

/// The regions as buffers of at most `max` bytes starting every `stride`
/// bytes (`stride == max`: back to back; less: overlapping), in order;
/// the last buffer of a region ends at the region's end.
pub fn chunks(regions: &[HostRegion], max: usize, stride: usize) -> Vec<libc::iovec> {
    let stride = stride.clamp(1, max.max(1));
    let mut v = Vec::new();
    for r in regions {
        let mut at = 0;
        while at < r.len {
            let len = (r.len - at).min(max);
            v.push(libc::iovec {
                iov_base: (r.host + at) as *mut libc::c_void,
                iov_len: len,
            });
            if at + len == r.len {
                break;
            }
            at += stride;
        }
    }
    v
}

/// Buffers of at most `window` bytes (when a driver bounds them) or
/// `max`: `(size, stride)`. A window smaller than `max` overlaps by half
/// (page aligned), so anything up to half a window fits one buffer.
pub fn geometry(window: Option<usize>, max: usize) -> (usize, usize) {
    match window {
        Some(w) if w < max => {
            let w = w.max(2 * PAGE);
            let stride = (w / 2) & !(PAGE - 1);
            (w, stride.max(PAGE))
        }
        _ => (max, max),
    }
}

/// The kernel's table on this ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Table {
    /// Not created yet (nothing needed it).
    None,
    Created,
    /// The kernel refused to create it: nothing is registered on this ring.
    Refused,
}

/// One failure line per process for each kind of registration.
static BUF_FAILURE_LOGGED: AtomicBool = AtomicBool::new(false);
static FILE_FAILURE_LOGGED: AtomicBool = AtomicBool::new(false);

fn log_failure(flag: &AtomicBool, what: std::fmt::Arguments<'_>) {
    if !flag.swap(true, Ordering::Relaxed) {
        log::warn!("{what} (logged once)");
    } else {
        log::debug!("{what}");
    }
}

/// A registered chunk: host range and slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chunk {
    start: usize,
    len: usize,
    slot: u16,
}

/// The fixed-buffer side.
pub(crate) struct Buffers {
    enabled: bool,
    table: Table,
    /// The memory named last, and its id ([`crate::GuestBufs::memory_id`]).
    keep: Option<Arc<dyn Any + Send + Sync>>,
    id: usize,
    regions: Vec<HostRegion>,
    /// The named memory's chunks are in the table (as far as they went).
    registered: bool,
    /// Registered chunks of that memory, by host address.
    chunks: Vec<Chunk>,
    /// One-page buffers over the whole memory, when a bounded driver asked
    /// and they fit the table (see `register`), by host address.
    pages: Vec<Chunk>,
    /// Slots `0..filled` may hold a buffer in the kernel's table.
    filled: u32,
    /// Largest chunk ([`MAX_CHUNK`]; smaller in tests).
    pub(crate) max_chunk: usize,
    /// The window the memory was registered for (`None`: unbounded).
    window: Option<usize>,
}

impl Buffers {
    pub(crate) fn new() -> Self {
        Self {
            enabled: false,
            table: Table::None,
            keep: None,
            id: 0,
            regions: Vec::new(),
            registered: false,
            chunks: Vec::new(),
            pages: Vec::new(),
            filled: 0,
            max_chunk: MAX_CHUNK,
            window: None,
        }
    }

    pub(crate) fn enable(&mut self, on: bool) {
        self.enabled = on;
    }

    /// The current guest memory; registered with the next command that
    /// could use it. The same memory again changes nothing.
    pub(crate) fn set_memory(&mut self, keep: Arc<dyn Any + Send + Sync>, regions: &[HostRegion]) {
        let id = Arc::as_ptr(&keep).cast::<()>() as usize;
        if self.keep.is_some() && id == self.id {
            return;
        }
        self.keep = Some(keep);
        self.id = id;
        self.regions.clear();
        self.regions.extend_from_slice(regions);
        self.registered = false;
        self.chunks.clear();
        self.pages.clear();
    }

    /// The id (`GuestBufs::memory_id`) of the memory named last, if any.
    pub(crate) fn named_id(&self) -> Option<usize> {
        self.keep.as_ref().map(|_| self.id)
    }

    /// The memory named last (to name it to another ring's table too).
    pub(crate) fn named(&self) -> Option<(Arc<dyn Any + Send + Sync>, Vec<HostRegion>)> {
        Some((self.keep.clone()?, self.regions.clone()))
    }

    /// Drops the memory (a frontend left): its slots are cleared, its
    /// keep-alive released.
    pub(crate) fn forget_memory(&mut self, ring: &Ring) {
        self.keep = None;
        self.id = 0;
        self.regions.clear();
        self.chunks.clear();
        self.pages.clear();
        self.registered = false;
        self.clear_from(ring, 0);
    }

    /// The fixed buffer holding `iov` wholly, for buffers of memory `id`
    /// and a driver that takes buffers of at most `window` bytes; registers
    /// the named memory first if that is still to do (or again, in smaller
    /// windows, for a driver with a smaller bound).
    pub(crate) fn index(
        &mut self,
        ring: &Ring,
        id: usize,
        iov: &libc::iovec,
        window: Option<usize>,
        stats: &mut RegStats,
    ) -> Option<u16> {
        if !self.enabled || id != self.id || self.keep.is_none() {
            return None;
        }
        let narrower = match (window, self.window) {
            (Some(w), Some(r)) => w < r,
            (Some(_), None) => self.registered,
            _ => false,
        };
        if !self.registered || narrower {
            self.window = window.or(self.window);
            self.register(ring, stats);
        }
        self.lookup(iov.iov_base as usize, iov.iov_len)
    }

    /// The registered chunk holding `len` bytes at `base`: a one-page
    /// buffer when there are such and it fits one, else a window.
    pub(crate) fn lookup(&self, base: usize, len: usize) -> Option<u16> {
        if len <= PAGE {
            if let Some(slot) = find(&self.pages, base, len) {
                return Some(slot);
            }
        }
        find(&self.chunks, base, len)
    }

    fn register(&mut self, ring: &Ring, stats: &mut RegStats) {
        self.registered = true;
        if self.table == Table::None {
            self.table = match ring.register_buffer_table(BUF_SLOTS) {
                Ok(()) => Table::Created,
                Err(e) => {
                    log_failure(
                        &BUF_FAILURE_LOGGED,
                        format_args!(
                            "io_uring fixed buffers unavailable ({e}): NVMe commands use unregistered guest buffers"
                        ),
                    );
                    Table::Refused
                }
            };
        }
        if self.table != Table::Created {
            return;
        }
        let (size, stride) = geometry(self.window, self.max_chunk);
        let mut iovs = chunks(&self.regions, size, stride);
        let windows = iovs.len();
        // With bounded windows, a command's buffer still counts as every
        // page from its first to the window's end (the request's segment
        // count, which sends a one-page command down the NVMe driver's
        // scatter-gather path instead of its single-page one): where the
        // table has room, every page is registered on its own as well, and
        // a command within one page uses that.
        if self.window.is_some() {
            let pages: usize = self.regions.iter().map(|r| r.len.div_ceil(PAGE)).sum();
            if windows + pages <= BUF_SLOTS as usize {
                iovs.extend(chunks(&self.regions, PAGE, PAGE));
            }
        }
        let mut bytes = 0u64;
        let mut failed = 0usize;
        let mut first_error = None;
        let n = iovs.len().min(BUF_SLOTS as usize);
        self.chunks.clear();
        self.pages.clear();
        // All at once; one by one only when that fails (to see which).
        // SAFETY: every chunk lies in a region of the memory whose
        // keep-alive `self.keep` holds until its slot is replaced.
        let batch_ok = n > 0 && unsafe { ring.update_buffers(0, &iovs[..n]) }.is_ok();
        if batch_ok {
            for (slot, v) in iovs.iter().take(n).enumerate() {
                self.keep_chunk(slot, v, windows, &mut bytes);
            }
        }
        for (slot, v) in iovs.iter().take(n).enumerate() {
            if batch_ok {
                break;
            }
            // SAFETY: the chunk lies in a region of the memory whose
            // keep-alive `self.keep` holds until the slot is replaced.
            match unsafe { ring.update_buffer(slot as u32, *v) } {
                Ok(()) => self.keep_chunk(slot, v, windows, &mut bytes),
                Err(e) => {
                    // A refused update leaves the slot's old buffer there
                    // (the kernel pins before it replaces): clear it.
                    // SAFETY: an empty iovec points to no memory.
                    let _ = unsafe { ring.update_buffer(slot as u32, empty_iovec()) };
                    failed += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
        let old = self.filled;
        self.filled = n as u32;
        self.clear_range(ring, n as u32, old);
        self.chunks.sort_by_key(|c| c.start);
        self.pages.sort_by_key(|c| c.start);
        stats.registrations += 1;
        stats.registered_bytes = bytes;
        if let Some(e) = first_error {
            log_failure(
                &BUF_FAILURE_LOGGED,
                format_args!(
                    "io_uring fixed buffers: {failed} of {} guest memory chunks not registered ({e}; \
                     RLIMIT_MEMLOCK without CAP_IPC_LOCK?): commands in them use unregistered buffers",
                    iovs.len()
                ),
            );
        } else if iovs.len() > n {
            log_failure(
                &BUF_FAILURE_LOGGED,
                format_args!(
                    "io_uring fixed buffers: guest memory in {} chunks, the table holds {n}: the rest \
                     use unregistered buffers",
                    iovs.len()
                ),
            );
        }
        log::debug!(
            "io_uring fixed buffers: {bytes} bytes of guest memory in {} chunks",
            self.chunks.len()
        );
    }

    /// Records registered slot `slot` (a window below `windows`, else a page).
    fn keep_chunk(&mut self, slot: usize, v: &libc::iovec, windows: usize, bytes: &mut u64) {
        let c = Chunk {
            start: v.iov_base as usize,
            len: v.iov_len,
            slot: slot as u16,
        };
        if slot < windows {
            *bytes += v.iov_len as u64;
            self.chunks.push(c);
        } else {
            self.pages.push(c);
        }
    }

    fn clear_from(&mut self, ring: &Ring, from: u32) {
        let old = self.filled;
        self.filled = self.filled.min(from);
        self.clear_range(ring, from, old);
    }

    fn clear_range(&self, ring: &Ring, from: u32, to: u32) {
        if self.table != Table::Created {
            return;
        }
        for slot in from..to {
            // SAFETY: an empty iovec points to no memory.
            let _ = unsafe { ring.update_buffer(slot, empty_iovec()) };
        }
    }
}

/// The chunk of `sorted` (by start, not nested) holding `len` bytes at `base`.
fn find(sorted: &[Chunk], base: usize, len: usize) -> Option<u16> {
    let i = sorted.partition_point(|c| c.start <= base);
    let c = sorted.get(i.checked_sub(1)?)?;
    let end = base.checked_add(len)?;
    (end <= c.start + c.len).then_some(c.slot)
}

fn empty_iovec() -> libc::iovec {
    libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }
}

/// The registered-file side.
pub(crate) struct Files {
    enabled: bool,
    table: Table,
    /// The `RingFile::id` in each slot (slot = path index).
    slots: Vec<Option<u64>>,
}

impl Files {
    pub(crate) fn new() -> Self {
        Self {
            enabled: false,
            table: Table::None,
            slots: Vec::new(),
        }
    }

    pub(crate) fn enable(&mut self, on: bool) {
        self.enabled = on;
    }

    /// The file-table slot holding `file` of path `path`, put there first
    /// if it is not.
    pub(crate) fn slot(&mut self, ring: &Ring, path: usize, file: RingFile) -> Option<u32> {
        if !self.enabled || path >= FILE_SLOTS as usize {
            return None;
        }
        if self.slots.get(path).copied().flatten() == Some(file.id) {
            return Some(path as u32);
        }
        if self.table == Table::None {
            self.table = match ring.register_file_table(FILE_SLOTS) {
                Ok(()) => Table::Created,
                Err(e) => {
                    log_failure(
                        &FILE_FAILURE_LOGGED,
                        format_args!(
                            "io_uring registered files unavailable ({e}): commands use plain fds"
                        ),
                    );
                    Table::Refused
                }
            };
        }
        if self.table != Table::Created {
            return None;
        }
        if self.slots.len() <= path {
            self.slots.resize(path + 1, None);
        }
        match ring.update_file(path as u32, file.fd) {
            Ok(()) => {
                self.slots[path] = Some(file.id);
                Some(path as u32)
            }
            Err(e) => {
                if self.slots[path].take().is_some() {
                    let _ = ring.update_file(path as u32, -1);
                }
                log_failure(
                    &FILE_FAILURE_LOGGED,
                    format_args!("io_uring: registering path {path}'s file failed ({e}): its commands use its fd"),
                );
                None
            }
        }
    }

    /// Clears the slots of paths that are gone or whose file changed.
    pub(crate) fn sweep<P: PathTable>(&mut self, ring: &Ring, paths: &P) {
        for (path, s) in self.slots.iter_mut().enumerate() {
            let Some(id) = *s else { continue };
            let current = paths
                .driver(path)
                .and_then(|d| PathDriver::ring_file(&*d))
                .map(|f| f.id);
            if current != Some(id) && ring.update_file(path as u32, -1).is_ok() {
                *s = None;
            }
        }
    }

    /// The `RingFile::id` registered for `path` (tests).
    #[cfg(test)]
    pub(crate) fn registered(&self, path: usize) -> Option<u64> {
        self.slots.get(path).copied().flatten()
    }
}

#[cfg(test)]
impl Buffers {
    pub(crate) fn pages_of(&self) -> usize {
        self.pages.len()
    }

    pub(crate) fn filled(&self) -> u32 {
        self.filled
    }

    pub(crate) fn slots_of(&self) -> Vec<(usize, usize, u16)> {
        self.chunks
            .iter()
            .map(|c| (c.start, c.len, c.slot))
            .collect()
    }
}
