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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::avail::Checked;

    const NEXT: u16 = 1;
    const WRITE: u16 = 2;
    const INDIRECT: u16 = 4;
    const TABLE: u64 = 0x1000;
    const IND: u64 = 0x2000;

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("memory")
    }

    fn put(m: &GuestMemoryMmap, table: u64, i: u16, d: Descriptor) {
        m.write_obj(d, GuestAddress(table + u64::from(i) * DESC))
            .expect("descriptor");
    }

    /// The descriptors' addresses, and whether the chain was cut short.
    fn walk(m: &GuestMemoryMmap, head: u16) -> (Vec<u64>, bool) {
        let mut c = Checked::new(ChainFromHead::new(m, GuestAddress(TABLE), 8, head));
        let addrs = c.by_ref().map(|d| d.addr().0).collect();
        (addrs, c.cut_short())
    }

    #[test]
    fn a_direct_chain_from_any_head() {
        let m = mem();
        put(&m, TABLE, 5, Descriptor::new(0x100, 16, NEXT, 2));
        put(&m, TABLE, 2, Descriptor::new(0x200, 512, NEXT, 7));
        put(&m, TABLE, 7, Descriptor::new(0x300, 1, WRITE, 0));
        assert_eq!(walk(&m, 5), (vec![0x100, 0x200, 0x300], false));
    }

    #[test]
    fn an_indirect_table() {
        let m = mem();
        put(&m, TABLE, 3, Descriptor::new(IND, 48, INDIRECT, 0));
        put(&m, IND, 0, Descriptor::new(0x100, 16, NEXT, 1));
        put(&m, IND, 1, Descriptor::new(0x200, 512, NEXT, 2));
        put(&m, IND, 2, Descriptor::new(0x300, 1, WRITE, 0));
        assert_eq!(walk(&m, 3), (vec![0x100, 0x200, 0x300], false));
    }

    #[test]
    fn a_loop_a_nested_table_and_a_head_out_of_range_are_cut_short() {
        let m = mem();
        put(&m, TABLE, 1, Descriptor::new(0x100, 16, NEXT, 1));
        assert!(walk(&m, 1).1, "loop");
        put(&m, TABLE, 4, Descriptor::new(IND, 16, INDIRECT, 0));
        put(&m, IND, 0, Descriptor::new(IND, 16, INDIRECT, 0));
        assert!(walk(&m, 4).1, "nested indirect table");
        assert!(walk(&m, 8).1, "head out of range");
    }
}
