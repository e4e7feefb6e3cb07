//! Reading a descriptor chain from its head, for requests resubmitted from
//! the inflight region after a restart: their place on the available ring
//! may be reused since, so virtio-queue's iterator (which starts from the
//! ring) cannot produce them. Same limits as virtio-queue's: at most the
//! table's size in descriptors, one level of indirect table, next indices
//! in range; a chain cut short is seen by `avail::Checked`.

use virtio_queue::desc::split::Descriptor;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Bytes of one split-ring descriptor.
const DESC: u64 = 16;

pub(super) struct ChainFromHead<'a> {
    mem: &'a GuestMemoryMmap,
    table: GuestAddress,
    /// Descriptors in the current table.
    size: u32,
    next: Option<u16>,
    read: u32,
    indirect: bool,
}

impl<'a> ChainFromHead<'a> {
    pub(super) fn new(
        mem: &'a GuestMemoryMmap,
        desc_table: GuestAddress,
        queue_size: u16,
        head: u16,
    ) -> Self {
        Self {
            mem,
            table: desc_table,
            size: u32::from(queue_size),
            next: Some(head),
            read: 0,
            indirect: false,
        }
    }

    fn read(&self, index: u16) -> Option<Descriptor> {
        let addr = self.table.0.checked_add(u64::from(index) * DESC)?;
        self.mem.read_obj(GuestAddress(addr)).ok()
    }
}

impl Iterator for ChainFromHead<'_> {
    type Item = Descriptor;

    fn next(&mut self) -> Option<Descriptor> {
        let index = self.next.take()?;
        if u32::from(index) >= self.size || self.read >= self.size {
            return None;
        }
        let d = self.read(index)?;
        self.read += 1;
        if d.refers_to_indirect_table() {
            let entries = u64::from(d.len()) / DESC;
            if self.indirect
                || d.has_next()
                || u64::from(d.len()) % DESC != 0
                || entries == 0
                || entries > u64::from(u16::MAX)
            {
                return None;
            }
            self.indirect = true;
            self.table = GuestAddress(d.addr().0);
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
