//! Inflight I/O tracking (vhost-user spec, "Inflight I/O tracking", split
//! rings): a shared memfd that the frontend keeps across backend restarts.
//! Per queue a 16-byte header (`features` u64, `version` u16, `desc_num`
//! u16, `last_batch_head` u16, `used_idx` u16) and `desc_num` entries of 16
//! bytes (`inflight` u8, 5 bytes padding, `next` u16, `counter` u64). A
//! popped head is marked with an increasing counter; a used entry is
//! published with the spec's batch order (here batches of one, as
//! libvhost-user's `vu_queue_push`), so that a crash at any point leaves a
//! state the next daemon repairs and resubmits. The repair follows the
//! spec for a batch of any size (the `next` list from `last_batch_head`),
//! so a region another backend wrote in larger batches is repaired too.

use std::fs::File;
use std::io;
use std::sync::atomic::{fence, AtomicU16, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use vm_memory::AtomicInteger;
use vm_memory::{FileOffset, MmapRegion, VolatileMemory};

const HEADER: usize = 16;
const ENTRY: usize = 16;
/// Per-queue areas start on this alignment (as libvhost-user lays them out).
const ALIGN: usize = 64;
/// `version` of a region this daemon initialised.
const VERSION: u16 = 1;

// Offsets in a queue's header and in an entry.
const H_VERSION: usize = 8;
const H_DESC_NUM: usize = 10;
const H_LAST_BATCH_HEAD: usize = 12;
const H_USED_IDX: usize = 14;
const E_INFLIGHT: usize = 0;
const E_NEXT: usize = 6;
const E_COUNTER: usize = 8;

type Map = MmapRegion<()>;

/// Bytes of one queue's area for `queue_size` descriptors.
pub fn queue_area(queue_size: u16) -> usize {
    (HEADER + ENTRY * usize::from(queue_size)).div_ceil(ALIGN) * ALIGN
}

/// The mapped region of all queues.
pub struct InflightRegion {
    /// Unregistered before `map` is unmapped (field order).
    _guard: Option<super::sigbus::Guard>,
    map: Map,
    num_queues: u16,
    queue_size: u16,
}

impl InflightRegion {
    /// GET_INFLIGHT_FD: a new zeroed memfd for `num_queues` queues of
    /// `queue_size` descriptors, mapped here too.
    pub fn create(num_queues: u16, queue_size: u16) -> io::Result<(Self, File)> {
        let size = queue_area(queue_size) * usize::from(num_queues);
        if size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "inflight region of no queues or no descriptors",
            ));
        }
        let file = memfd(size as u64)?;
        let region = Self::map(file.try_clone()?, 0, size as u64, num_queues, queue_size)?;
        Ok((region, file))
    }

    /// SET_INFLIGHT_FD: maps the frontend's region; refuses one too small
    /// for what it says it holds.
    pub fn map(
        file: File,
        offset: u64,
        size: u64,
        num_queues: u16,
        queue_size: u16,
    ) -> io::Result<Self> {
        let need = (queue_area(queue_size) * usize::from(num_queues)) as u64;
        if need == 0 || size < need {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "inflight region of {size} bytes; {num_queues} queues of {queue_size} descriptors need {need}"
                ),
            ));
        }
        crate::fd_range::check_holds(&file, offset, size, "inflight region")?;
        // Ours is sealed (`memfd`); one a frontend made is sealed here if it
        // lets us, its SIGBUS contained if not.
        crate::fd_range::seal_shrink(&file, "inflight region");
        let map = Map::from_file(FileOffset::new(file, offset), size as usize)
            .map_err(|e| io::Error::other(format!("mapping the inflight region: {e}")))?;
        Ok(Self {
            _guard: super::sigbus::register(&map, format!("inflight region ({size:#x} bytes)")),
            map,
            num_queues,
            queue_size,
        })
    }

    pub fn num_queues(&self) -> u16 {
        self.num_queues
    }

    pub fn queue_size(&self) -> u16 {
        self.queue_size
    }
}

/// The region's file: sealed against shrinking and growing once sized, so
/// that the frontend it is handed to cannot truncate it under the mapping
/// (the next access would kill the daemon with SIGBUS).
fn memfd(size: u64) -> io::Result<File> {
    let file = File::from(rustix::fs::memfd_create(
        "vhost-mpath-inflight",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )?);
    file.set_len(size)?;
    rustix::fs::fcntl_add_seals(
        &file,
        rustix::fs::SealFlags::SHRINK | rustix::fs::SealFlags::GROW,
    )?;
    Ok(file)
}

/// What a restarted queue must do: the heads to resubmit (in the order
/// they were popped) and where its available index stands.
pub struct Recovered {
    pub resubmit: Vec<u16>,
    pub next_avail: u16,
}

/// One queue's view of the region, owned by its worker.
pub struct InflightQueue {
    region: Arc<InflightRegion>,
    base: usize,
    desc_num: u16,
    counter: u64,
}

impl InflightQueue {
    /// Queue `queue` of the region, if it has one.
    pub fn new(region: Arc<InflightRegion>, queue: u16) -> Option<Self> {
        if queue >= region.num_queues {
            return None;
        }
        let desc_num = region.queue_size;
        Some(Self {
            base: usize::from(queue) * queue_area(desc_num),
            region,
            desc_num,
            counter: 0,
        })
    }

    fn at<T: AtomicInteger>(&self, offset: usize) -> Option<&T> {
        // Every offset used is inside the area `map` checked the size of.
        self.region.map.get_atomic_ref::<T>(self.base + offset).ok()
    }

    fn entry<T: AtomicInteger>(&self, head: u16, field: usize) -> Option<&T> {
        if head >= self.desc_num {
            return None;
        }
        self.at(HEADER + ENTRY * usize::from(head) + field)
    }

    /// A head was popped: it is in flight until its used entry is published.
    pub fn get(&mut self, head: u16) {
        self.counter += 1;
        if let Some(c) = self.entry::<AtomicU64>(head, E_COUNTER) {
            c.store(self.counter, Ordering::Relaxed);
        }
        if let Some(f) = self.entry::<AtomicU8>(head, E_INFLIGHT) {
            f.store(1, Ordering::Release);
        }
    }

    /// Before the used entry of `head` is written: `head` joins the
    /// batch's list (spec: `desc[head].next = last_batch_head`, then
    /// `last_batch_head = head`).
    pub fn pre_put(&self, head: u16) {
        if let Some(h) = self.at::<AtomicU16>(H_LAST_BATCH_HEAD) {
            if let Some(n) = self.entry::<AtomicU16>(head, E_NEXT) {
                n.store(h.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            h.store(head, Ordering::Release);
        }
        fence(Ordering::SeqCst);
    }

    /// After the used ring's index moved to `used_idx`: the entry is no
    /// longer in flight, then the region's used index follows the ring's.
    pub fn post_put(&self, head: u16, used_idx: u16) {
        fence(Ordering::SeqCst);
        if let Some(f) = self.entry::<AtomicU8>(head, E_INFLIGHT) {
            f.store(0, Ordering::Release);
        }
        fence(Ordering::SeqCst);
        if let Some(u) = self.at::<AtomicU16>(H_USED_IDX) {
            u.store(used_idx, Ordering::Release);
        }
    }

    /// A device reset: nothing is in flight any more, and the next start
    /// initialises the queue's area again (the guest re-creates its rings).
    pub fn forget(&mut self) {
        for h in 0..self.desc_num {
            if let Some(f) = self.entry::<AtomicU8>(h, E_INFLIGHT) {
                f.store(0, Ordering::Relaxed);
            }
        }
        if let Some(v) = self.at::<AtomicU16>(H_VERSION) {
            v.store(0, Ordering::Release);
        }
        self.counter = 0;
    }

    /// At queue start (the used ring's index is `ring_used`): a fresh region
    /// is initialised; otherwise a batch published by the used ring but not
    /// by the region is finished (its entry cleared), and the entries still
    /// in flight are returned in counter order, to be served before any new
    /// request. The available index stands at used + in flight.
    pub fn recover(&mut self, ring_used: u16) -> Recovered {
        let (Some(version), Some(used)) = (
            self.at::<AtomicU16>(H_VERSION),
            self.at::<AtomicU16>(H_USED_IDX),
        ) else {
            return Recovered {
                resubmit: Vec::new(),
                next_avail: ring_used,
            };
        };
        if version.load(Ordering::Acquire) == 0 {
            if let Some(n) = self.at::<AtomicU16>(H_DESC_NUM) {
                n.store(self.desc_num, Ordering::Relaxed);
            }
            used.store(ring_used, Ordering::Relaxed);
            version.store(VERSION, Ordering::Release);
            self.counter = 0;
            return Recovered {
                resubmit: Vec::new(),
                next_avail: ring_used,
            };
        }
        let region_used = used.load(Ordering::Acquire);
        if region_used != ring_used {
            // Crashed between the used ring's index and the region's: the
            // last batch, `ring_used - region_used` entries listed from
            // `last_batch_head` through `next`, reached the guest. Not only
            // its head: a batch of several would otherwise be completed
            // twice (spec, "When reconnecting").
            let mut batch = ring_used.wrapping_sub(region_used);
            if batch > self.desc_num {
                // More than a ring's worth: not a batch cut short but a
                // region of other rings. Only its last head, as before.
                log::warn!(
                    "inflight region: used index {region_used}, the ring's {ring_used}: not one batch apart"
                );
                batch = 1;
            }
            let mut head = self
                .at::<AtomicU16>(H_LAST_BATCH_HEAD)
                .map_or(u16::MAX, |h| h.load(Ordering::Acquire));
            for _ in 0..batch {
                let Some(f) = self.entry::<AtomicU8>(head, E_INFLIGHT) else {
                    break; // a list out of range: nothing more to trust
                };
                f.store(0, Ordering::Release);
                head = self
                    .entry::<AtomicU16>(head, E_NEXT)
                    .map_or(u16::MAX, |n| n.load(Ordering::Acquire));
            }
            fence(Ordering::SeqCst);
            used.store(ring_used, Ordering::Release);
        }
        let mut marked: Vec<(u64, u16)> = (0..self.desc_num)
            .filter(|&h| {
                self.entry::<AtomicU8>(h, E_INFLIGHT)
                    .is_some_and(|f| f.load(Ordering::Acquire) == 1)
            })
            .map(|h| {
                let c = self
                    .entry::<AtomicU64>(h, E_COUNTER)
                    .map_or(0, |c| c.load(Ordering::Acquire));
                (c, h)
            })
            .collect();
        marked.sort_unstable();
        self.counter = marked.last().map_or(0, |&(c, _)| c);
        Recovered {
            next_avail: ring_used.wrapping_add(marked.len() as u16),
            resubmit: marked.into_iter().map(|(_, h)| h).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> InflightQueue {
        let (region, _file) = InflightRegion::create(2, 8).expect("memfd");
        InflightQueue::new(Arc::new(region), 1).expect("queue 1")
    }

    #[test]
    fn a_fresh_region_is_initialised_at_the_used_index() {
        let mut q = queue();
        let r = q.recover(7);
        assert!(r.resubmit.is_empty());
        assert_eq!(r.next_avail, 7);
    }

    #[test]
    fn heads_still_in_flight_come_back_in_pop_order() {
        let mut q = queue();
        q.recover(0);
        for h in [5, 2, 7, 0] {
            q.get(h);
        }
        // 2 completed (used index 1), the others not.
        q.pre_put(2);
        q.post_put(2, 1);
        let r = q.recover(1);
        assert_eq!(r.resubmit, vec![5, 7, 0]);
        assert_eq!(r.next_avail, 4);
        // New pops count after the resubmitted ones.
        q.get(3);
        q.pre_put(5);
        q.post_put(5, 2);
        assert_eq!(q.recover(2).resubmit, vec![7, 0, 3]);
    }

    #[test]
    fn a_batch_published_on_the_used_ring_only_is_finished() {
        let mut q = queue();
        q.recover(0);
        q.get(4);
        q.get(6);
        // Crash after the used ring's index moved to 1 for head 6, before
        // the region followed.
        q.pre_put(6);
        let r = q.recover(1);
        assert_eq!(r.resubmit, vec![4]);
        assert_eq!(r.next_avail, 2);
    }

    #[test]
    fn a_batch_of_several_published_on_the_used_ring_only_is_finished() {
        let mut q = queue();
        q.recover(0);
        for h in [3, 5, 1, 6] {
            q.get(h);
        }
        // A spec batch of three (5, 1, 6 listed through `next`), published
        // on the used ring (index 3) before a crash; the region's used
        // index still 0. Only head 3 is still in flight.
        for h in [5, 1, 6] {
            q.pre_put(h);
        }
        let r = q.recover(3);
        assert_eq!(r.resubmit, vec![3]);
        assert_eq!(r.next_avail, 4);
    }

    #[test]
    fn a_used_index_more_than_a_ring_apart_clears_only_the_last_head() {
        let mut q = queue();
        q.recover(0);
        for h in [3, 5, 1, 6] {
            q.get(h);
        }
        for h in [5, 1, 6] {
            q.pre_put(h);
        }
        // The ring's index behind the region's: not a batch of 65535.
        let r = q.recover(u16::MAX);
        assert_eq!(r.resubmit, vec![3, 5, 1]);
    }

    #[test]
    fn a_crash_before_the_used_ring_moved_resubmits_the_head() {
        let mut q = queue();
        q.recover(0);
        q.get(4);
        q.pre_put(4);
        let r = q.recover(0);
        assert_eq!(r.resubmit, vec![4]);
        assert_eq!(r.next_avail, 1);
    }

    #[test]
    fn a_device_reset_forgets_what_was_in_flight() {
        let mut q = queue();
        q.recover(0);
        q.get(1);
        q.get(2);
        q.forget();
        let r = q.recover(0);
        assert!(r.resubmit.is_empty());
        assert_eq!(r.next_avail, 0);
    }

    #[test]
    fn a_region_past_the_end_of_its_file_is_refused() {
        let (_region, file) = InflightRegion::create(1, 8).expect("memfd");
        let size = queue_area(8) as u64;
        assert!(InflightRegion::map(file, 64, size, 1, 8).is_err());
    }

    #[test]
    fn a_region_too_small_for_its_queues_is_refused() {
        let (_region, file) = InflightRegion::create(1, 8).expect("memfd");
        let size = queue_area(8) as u64;
        assert!(InflightRegion::map(file, 0, size, 2, 8).is_err());
    }
}
