//! A split virtqueue through host addresses resolved once: the guest's
//! memory regions once per memory table, the descriptor table and the
//! available and used rings once per ring layout (addresses and size). Every
//! access after that is a bounds check against the queue size and one load
//! or store, where vm-memory's `Bytes` looks the region up and builds a
//! slice iterator for each descriptor, ring entry and index.
//!
//! The queue's state (ready, size, addresses, `next_avail`, `next_used`,
//! EVENT_IDX) stays in virtio-queue's `Queue`, which the vhost-user handler
//! sets; only its memory accesses are done here, with the same barriers as
//! virtio-queue: the available index is loaded with acquire, the used index
//! stored with release, and a full fence separates the used ring's updates
//! from reading `used_event` (and the avail_event/flags update from
//! re-reading the available index) as the virtio spec requires.
//!
//! All `unsafe` of the ring accesses is in this module: host addresses are
//! produced only by `GuestMap::host`, which checks that the whole access lies
//! in one mapped region, and the map holds the `Arc` of the guest memory that
//! keeps those mappings alive.

use std::num::Wrapping;
use std::sync::atomic::{fence, AtomicU16, AtomicU32, Ordering};
use std::sync::Arc;

use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueT};
use vm_memory::{
    Address, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress,
};

/// Bytes of one descriptor, and of one used-ring element.
const DESC: u64 = 16;
const USED_ELEM: u64 = 8;
/// `flags` and `idx` before each ring's entries.
const RING_HEADER: u64 = 4;
/// Used ring flag: the device does not want kicks (without EVENT_IDX).
const VRING_USED_F_NO_NOTIFY: u16 = 1;

/// One mapped region: guest-physical start, length, host address.
struct Region {
    gpa: u64,
    len: u64,
    host: usize,
}

/// The guest's memory regions by host address, for one memory table.
pub struct GuestMap {
    /// Keeps every region mapped while host addresses into it are used.
    mem: Arc<GuestMemoryMmap>,
    regions: Vec<Region>,
}

impl GuestMap {
    pub fn new(mem: Arc<GuestMemoryMmap>) -> Self {
        let regions = mem
            .iter()
            .filter_map(|r| {
                let host = r.get_host_address(MemoryRegionAddress(0)).ok()?;
                Some(Region {
                    gpa: r.start_addr().raw_value(),
                    len: r.len(),
                    host: host as usize,
                })
            })
            .collect();
        Self { mem, regions }
    }

    /// Whether this map is of `mem` (the same table, not an equal one).
    pub fn is(&self, mem: &GuestMemoryMmap) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.mem), mem)
    }

    /// The host address of `len` bytes at guest-physical `gpa`, if they all
    /// lie in one region.
    pub fn host(&self, gpa: u64, len: u64) -> Option<usize> {
        self.regions.iter().find_map(|r| {
            let off = gpa.checked_sub(r.gpa)?;
            (off < r.len && len <= r.len - off).then(|| r.host + off as usize)
        })
    }

    /// Reads `buf.len()` bytes at `gpa` (one region).
    pub fn read(&self, gpa: u64, buf: &mut [u8]) -> bool {
        let Some(at) = self.host(gpa, buf.len() as u64) else {
            return false;
        };
        // SAFETY: `host` checked that the bytes lie in a region `self.mem`
        // keeps mapped; a volatile copy, as the guest may write meanwhile.
        unsafe { copy_from_guest(at, buf) };
        true
    }

    /// Writes one byte at `gpa`.
    pub fn write_u8(&self, gpa: u64, v: u8) -> bool {
        let Some(at) = self.host(gpa, 1) else {
            return false;
        };
        // SAFETY: one byte inside a region `self.mem` keeps mapped (checked
        // by `host`); guest memory is shared, hence volatile.
        unsafe { std::ptr::write_volatile(at as *mut u8, v) };
        true
    }
}

/// A hint to load the line at `at` (no access: any address will do).
#[inline(always)]
fn prefetch(at: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is in every x86_64 CPU; a prefetch is a hint that
        // reads nothing and cannot fault, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at as *const i8) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// # Safety
/// `buf.len()` bytes at `at` must be mapped for reading.
unsafe fn copy_from_guest(at: usize, buf: &mut [u8]) {
    // Word by word where aligned (a request header is 16 bytes, 8-aligned
    // from every driver seen): a volatile byte loop costs 4 instructions a
    // byte.
    let mut i = 0;
    if at.is_multiple_of(8) {
        while i + 8 <= buf.len() {
            // SAFETY: 8 bytes within the caller's range, 8-aligned.
            let w = unsafe { std::ptr::read_volatile((at + i) as *const u64) };
            buf[i..i + 8].copy_from_slice(&w.to_ne_bytes());
            i += 8;
        }
    }
    for (j, b) in buf.iter_mut().enumerate().skip(i) {
        // SAFETY: within the caller's range.
        *b = unsafe { std::ptr::read_volatile((at + j) as *const u8) };
    }
}

/// The host addresses of one ring layout.
#[derive(Clone, Copy)]
struct Layout {
    key: (u64, u64, u64, u16),
    size: u16,
    desc: usize,
    avail: usize,
    used: usize,
}

impl Layout {
    fn resolve(map: &GuestMap, key: (u64, u64, u64, u16)) -> Result<Layout, &'static str> {
        let (desc, avail, used, size) = key;
        if size == 0 {
            return Err("queue size 0");
        }
        // virtio 1.2, 2.7: 16-, 2- and 4-byte alignment (virtio-queue
        // refuses others already; the atomics below need it).
        if desc % 16 != 0 || avail % 2 != 0 || used % 4 != 0 {
            return Err("misaligned ring");
        }
        let n = u64::from(size);
        let desc = map
            .host(desc, DESC * n)
            .ok_or("descriptor table outside guest memory")?;
        // flags, idx, ring[size], used_event
        let avail = map
            .host(avail, RING_HEADER + 2 * n + 2)
            .ok_or("available ring outside guest memory")?;
        // flags, idx, ring[size], avail_event
        let used = map
            .host(used, RING_HEADER + USED_ELEM * n + 2)
            .ok_or("used ring outside guest memory")?;
        // The host addresses too: a region whose guest-physical start is off
        // alignment shifts them (the memory table refuses such regions).
        if !desc.is_multiple_of(16) || !avail.is_multiple_of(2) || !used.is_multiple_of(4) {
            return Err("ring misaligned in host memory");
        }
        Ok(Layout {
            key,
            size,
            desc,
            avail,
            used,
        })
    }

    /// The u16 at `off` bytes into the ring at `base`.
    ///
    /// # Safety
    /// `base + off` must be a 2-aligned u16 of a resolved ring, used only
    /// while the map it was resolved in is held.
    unsafe fn u16_at<'a>(base: usize, off: u64) -> &'a AtomicU16 {
        // SAFETY: the caller's; AtomicU16 has u16's layout.
        unsafe { &*((base + off as usize) as *const AtomicU16) }
    }

    fn avail_idx(&self, order: Ordering) -> u16 {
        // SAFETY: `idx` at 2 of the available ring, resolved with the ring
        // (2-aligned base); the map holding the memory outlives `self`'s use.
        u16::from_le(unsafe { Self::u16_at(self.avail, 2) }.load(order))
    }

    /// The head in slot `i` (`i < size`).
    fn avail_entry(&self, i: u16) -> u16 {
        debug_assert!(i < self.size);
        // SAFETY: `ring[i]`, i < size, inside the resolved available ring.
        u16::from_le(
            unsafe { Self::u16_at(self.avail, RING_HEADER + 2 * u64::from(i)) }
                .load(Ordering::Relaxed),
        )
    }

    fn used_event(&self) -> u16 {
        let off = RING_HEADER + 2 * u64::from(self.size);
        // SAFETY: `used_event` after `ring[size]`, inside the resolved ring.
        u16::from_le(unsafe { Self::u16_at(self.avail, off) }.load(Ordering::Relaxed))
    }

    fn set_used_flags(&self, flags: u16) {
        // SAFETY: `flags` at 0 of the resolved used ring.
        unsafe { Self::u16_at(self.used, 0) }.store(flags.to_le(), Ordering::Relaxed)
    }

    fn set_avail_event(&self, v: u16) {
        let off = RING_HEADER + USED_ELEM * u64::from(self.size);
        // SAFETY: `avail_event` after `ring[size]`, inside the resolved ring.
        unsafe { Self::u16_at(self.used, off) }.store(v.to_le(), Ordering::Relaxed)
    }

    /// Writes used element `slot` (`slot < size`), unpublished.
    fn put_used_elem(&self, slot: u16, id: u32, len: u32) {
        debug_assert!(slot < self.size);
        let at = self.used + (RING_HEADER + USED_ELEM * u64::from(slot)) as usize;
        // SAFETY: element `slot` < size of the resolved used ring; 4-aligned
        // (4-aligned ring, 4 + 8 * slot).
        let (id_cell, len_cell) =
            unsafe { (&*(at as *const AtomicU32), &*((at + 4) as *const AtomicU32)) };
        id_cell.store(id.to_le(), Ordering::Relaxed);
        len_cell.store(len.to_le(), Ordering::Relaxed);
    }

    /// Publishes the used elements before `idx`.
    fn set_used_idx(&self, idx: u16) {
        // Release: the elements are visible before the index that publishes them.
        // SAFETY: `idx` at 2 of the resolved used ring.
        unsafe { Self::u16_at(self.used, 2) }.store(idx.to_le(), Ordering::Release);
    }
}

/// # Safety
/// 16 bytes at `at` must be mapped for reading.
unsafe fn read_desc(at: usize) -> Descriptor {
    // Two word loads where aligned (the ring's table always is; an indirect
    // table is where the driver put it): a volatile [u8; 16] is 16 byte loads.
    let (lo, hi) = if at.is_multiple_of(8) {
        // SAFETY: the caller's; 8-aligned.
        unsafe {
            (
                std::ptr::read_volatile(at as *const u64),
                std::ptr::read_volatile((at + 8) as *const u64),
            )
        }
    } else {
        let mut b = [0u8; 16];
        // SAFETY: the caller's.
        unsafe { copy_from_guest(at, &mut b) };
        let (lo, hi) = b.split_at(8);
        (
            u64::from_ne_bytes(lo.try_into().unwrap_or_default()),
            u64::from_ne_bytes(hi.try_into().unwrap_or_default()),
        )
    };
    let (addr, hi) = (u64::from_le(lo), u64::from_le(hi));
    // len u32 @8, flags u16 @12, next u16 @14.
    Descriptor::new(addr, hi as u32, (hi >> 32) as u16, (hi >> 48) as u16)
}

/// What `RingView::pop` found.
#[cfg(test)]
#[derive(Debug, PartialEq)]
pub enum Pop {
    /// The head of the next chain (in range); `next_avail` moved past it.
    Head(u16),
    Empty,
    /// The driver broke the ring: what it did.
    Broken(String),
}

/// What `RingView::pop_batch` took: `taken` heads, then what broke the
/// ring if something did.
#[derive(Debug, PartialEq)]
pub struct Batch {
    pub taken: usize,
    pub broken: Option<String>,
}

/// One worker's view of its queue's rings (see the module comment).
#[derive(Default)]
pub struct RingView {
    map: Option<GuestMap>,
    layout: Option<Layout>,
    /// Used entries added since the last notification check (virtio-queue's
    /// `num_added`; counting too many only costs a spurious interrupt).
    added: u32,
}

impl RingView {
    /// The layout of `q` in the table `mem`, resolved if either changed
    /// since the last call (a pointer comparison: the caller holds the
    /// table it serves with, no atomic load per ring access).
    fn resolve(&mut self, mem: &Arc<GuestMemoryMmap>, q: &Queue) -> Result<Layout, &'static str> {
        if !self.map.as_ref().is_some_and(|m| m.is(mem)) {
            self.map = Some(GuestMap::new(mem.clone()));
            self.layout = None;
        }
        let key = (q.desc_table(), q.avail_ring(), q.used_ring(), q.size());
        match self.layout {
            Some(l) if l.key == key => Ok(l),
            _ => {
                let map = self.map.as_ref().ok_or("no guest memory")?;
                let l = Layout::resolve(map, key)?;
                self.layout = Some(l);
                Ok(l)
            }
        }
    }

    /// Takes the next available head, checking what a driver can get wrong:
    /// an available index more than the queue size ahead, a head out of
    /// range, rings outside guest memory. (The worker takes them in batches,
    /// `pop_batch`; the ring's tests read them one at a time.)
    #[cfg(test)]
    pub fn pop(&mut self, mem: &Arc<GuestMemoryMmap>, q: &mut Queue) -> Pop {
        let mut head = [0u16; 1];
        match self.pop_batch(mem, q, &mut head) {
            Batch {
                broken: Some(why), ..
            } => Pop::Broken(why),
            Batch { taken: 1, .. } => Pop::Head(head[0]),
            _ => Pop::Empty,
        }
    }

    /// Takes up to `heads.len()` available heads at once (one read of the
    /// available index, one resolution of the rings), with `pop`'s checks:
    /// the heads before one out of range are taken, then the ring is broken.
    pub fn pop_batch(
        &mut self,
        mem: &Arc<GuestMemoryMmap>,
        q: &mut Queue,
        heads: &mut [u16],
    ) -> Batch {
        let broken = |taken, why: String| Batch {
            taken,
            broken: Some(why),
        };
        let l = match self.resolve(mem, q) {
            Ok(l) => l,
            Err(why) => return broken(0, why.into()),
        };
        let avail = Wrapping(l.avail_idx(Ordering::Acquire));
        let mut next = q.next_avail();
        let pending = (avail - Wrapping(next)).0;
        if pending > l.size {
            return broken(
                0,
                format!(
                    "available index {} is {pending} entries past the device's {next} (queue size {})",
                    avail.0, l.size
                ),
            );
        }
        let want = usize::from(pending).min(heads.len());
        for (i, slot) in heads[..want].iter_mut().enumerate() {
            // Ordered after the index by its acquire load.
            let head = l.avail_entry(next % l.size);
            next = next.wrapping_add(1);
            q.set_next_avail(next);
            if head >= l.size {
                return broken(
                    i,
                    format!("head {head} out of range (queue size {})", l.size),
                );
            }
            *slot = head;
        }
        self.prefetch_chains(l, &heads[..want]);
        Batch {
            taken: want,
            broken: None,
        }
    }

    /// Asks for the lines the batch's chains start with, all at once: each
    /// first descriptor, then the request header it points to. The driver
    /// wrote them on its CPU; fetched one chain at a time they are two
    /// misses in a row per request, asked together they overlap.
    fn prefetch_chains(&self, l: Layout, heads: &[u16]) {
        if heads.len() < 2 {
            // Nothing to overlap with: the chain's reads come next anyway.
            return;
        }
        for &h in heads {
            prefetch(l.desc + DESC as usize * usize::from(h));
        }
        let Some(map) = self.map.as_ref() else {
            return;
        };
        for &h in heads {
            // SAFETY: `h < size` (checked by the caller) in the descriptor
            // table resolved with `l`, in a map `self.map` holds.
            let d = unsafe { read_desc(l.desc + DESC as usize * usize::from(h)) };
            if let Some(at) = map.host(d.addr().0, 1) {
                prefetch(at);
            }
        }
    }

    /// Whether the driver made entries available that are not popped
    /// (`None`: the rings are not in guest memory).
    pub fn has_avail(&mut self, mem: &Arc<GuestMemoryMmap>, q: &Queue) -> Option<bool> {
        let l = self.resolve(mem, q).ok()?;
        Some(l.avail_idx(Ordering::Acquire) != q.next_avail())
    }

    /// Resolves the rings of `q` without popping, for chains read from a
    /// known head (requests resubmitted from the inflight region, whose
    /// place on the available ring may have been reused).
    pub fn resolve_queue(
        &mut self,
        mem: &Arc<GuestMemoryMmap>,
        q: &Queue,
    ) -> Result<(), &'static str> {
        self.resolve(mem, q).map(|_| ())
    }

    /// The chain from `head`, in the layout of the last `pop` (or of the
    /// last call that resolved it).
    pub fn chain(&self, head: u16) -> Chain<'_> {
        Chain {
            map: self.map.as_ref(),
            table: self.layout.map(|l| l.desc).unwrap_or(0),
            size: self.layout.map_or(0, |l| u32::from(l.size)),
            next: Some(head),
            read: 0,
            indirect: false,
            cut_short: false,
        }
    }

    /// Publishes a used entry (element, then index with release) and moves
    /// `next_used`.
    pub fn add_used(
        &mut self,
        mem: &Arc<GuestMemoryMmap>,
        q: &mut Queue,
        head: u16,
        len: u32,
    ) -> Result<(), &'static str> {
        let l = self.resolve(mem, q)?;
        if head >= l.size {
            return Err("head out of range");
        }
        let next = q.next_used();
        let idx = next.wrapping_add(1);
        l.put_used_elem(next % l.size, u32::from(head), len);
        l.set_used_idx(idx);
        q.set_next_used(idx);
        self.added = self.added.saturating_add(1);
        Ok(())
    }

    /// Publishes several used entries (head, length) with one store of the
    /// used index: the driver, polling it on another CPU, sees the line
    /// change once per batch rather than once per entry. A head out of
    /// range is skipped (and reported); the others are published.
    pub fn add_used_batch(
        &mut self,
        mem: &Arc<GuestMemoryMmap>,
        q: &mut Queue,
        entries: &[(u16, u32)],
    ) -> Result<(), &'static str> {
        let l = self.resolve(mem, q)?;
        let mut next = q.next_used();
        let mut result = Ok(());
        for &(head, len) in entries {
            if head >= l.size {
                result = Err("head out of range");
                continue;
            }
            l.put_used_elem(next % l.size, u32::from(head), len);
            next = next.wrapping_add(1);
        }
        let added = next.wrapping_sub(q.next_used());
        if added > 0 {
            l.set_used_idx(next);
            q.set_next_used(next);
            self.added = self.added.saturating_add(u32::from(added));
        }
        result
    }

    /// Turns the driver's kicks on or off (avail_event with EVENT_IDX, the
    /// used ring's NO_NOTIFY flag without). Turning them on returns whether
    /// entries arrived meanwhile (after a full fence: a kick that came
    /// before the update was seen either way).
    pub fn set_notification(
        &mut self,
        mem: &Arc<GuestMemoryMmap>,
        q: &Queue,
        enable: bool,
    ) -> Result<bool, &'static str> {
        let l = self.resolve(mem, q)?;
        if q.event_idx_enabled() {
            if !enable {
                return Ok(false);
            }
            l.set_avail_event(q.next_avail());
        } else {
            l.set_used_flags(if enable { 0 } else { VRING_USED_F_NO_NOTIFY });
        }
        if !enable {
            return Ok(false);
        }
        fence(Ordering::SeqCst);
        Ok(l.avail_idx(Ordering::Relaxed) != q.next_avail())
    }

    /// Whether the driver wants an interrupt for the entries added since the
    /// last call (always without EVENT_IDX, as virtio-queue).
    pub fn needs_notification(
        &mut self,
        mem: &Arc<GuestMemoryMmap>,
        q: &Queue,
    ) -> Result<bool, &'static str> {
        let added = std::mem::take(&mut self.added);
        if !q.event_idx_enabled() {
            return Ok(true);
        }
        let l = self.resolve(mem, q)?;
        // The used index stores before reading used_event (spec 2.7.10).
        fence(Ordering::SeqCst);
        let used = Wrapping(q.next_used());
        let event = Wrapping(l.used_event());
        Ok(u32::from((used - event - Wrapping(1)).0) < added)
    }

    /// The guest memory map of the last resolution (header, status).
    pub fn map(&self) -> Option<&GuestMap> {
        self.map.as_ref()
    }
}

/// A chain's descriptors, from any head: at most the table's size of them
/// (a loop ends there), one level of indirect table (a multiple of 16 bytes,
/// 1 to 65535 entries, wholly in one memory region, not chained), next
/// indices in range. It ends silently where any of that fails, and then says
/// it was cut short.
pub struct Chain<'a> {
    map: Option<&'a GuestMap>,
    /// Host address of the current table.
    table: usize,
    size: u32,
    next: Option<u16>,
    read: u32,
    indirect: bool,
    cut_short: bool,
}

impl Chain<'_> {
    /// After the chain was read to its end: it ended before its last
    /// descriptor said so (a loop, a next index out of range, a bad indirect
    /// table, a head out of range).
    pub fn cut_short(&self) -> bool {
        self.cut_short
    }

    fn cut(&mut self) -> Option<Descriptor> {
        self.cut_short = true;
        None
    }
}

impl Iterator for Chain<'_> {
    type Item = Descriptor;

    fn next(&mut self) -> Option<Descriptor> {
        let index = self.next.take()?;
        if u32::from(index) >= self.size || self.read >= self.size {
            return self.cut();
        }
        // SAFETY: `table` is the host address of `size` descriptors checked
        // by `GuestMap::host` (ring table or indirect table) in a map that
        // `self.map` keeps alive; index < size.
        let d = unsafe { read_desc(self.table + (DESC * u64::from(index)) as usize) };
        self.read += 1;
        if d.refers_to_indirect_table() {
            let entries = u64::from(d.len()) / DESC;
            if self.indirect
                || d.has_next()
                || u64::from(d.len()) % DESC != 0
                || entries == 0
                || entries > u64::from(u16::MAX)
            {
                return self.cut();
            }
            let Some(table) = self.map.and_then(|m| m.host(d.addr().0, entries * DESC)) else {
                return self.cut();
            };
            self.table = table;
            self.indirect = true;
            self.size = entries as u32;
            self.read = 0;
            self.next = Some(0);
            return self.next();
        }
        if d.has_next() {
            self.next = Some(d.next());
        }
        Some(d)
    }
}

#[cfg(test)]
mod tests;
