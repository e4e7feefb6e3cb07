//! The ring view against a plain guest memory and virtio-queue's `Queue`
//! state, as the handler sets it: well-formed rings, and what a driver can
//! get wrong.

use super::*;
use vm_memory::{Bytes, GuestAddress};

const SIZE: u16 = 8;
const DESC_AT: u64 = 0x1000;
const AVAIL_AT: u64 = 0x2000;
const USED_AT: u64 = 0x3000;
const IND: u64 = 0x4000;
const NEXT: u16 = 1;
const WRITE: u16 = 2;
const INDIRECT: u16 = 4;

struct Bench {
    mem: std::sync::Arc<GuestMemoryMmap>,
    q: Queue,
    view: RingView,
}

fn memory() -> GuestMemoryMmap {
    // 64 KiB at 0 and 64 KiB right after it (two regions, adjacent).
    GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), 0x1_0000),
        (GuestAddress(0x1_0000), 0x1_0000),
    ])
    .expect("memory")
}

impl Bench {
    fn new() -> Bench {
        Bench::at(DESC_AT, AVAIL_AT, USED_AT)
    }

    fn at(desc: u64, avail: u64, used: u64) -> Bench {
        let mut q = Queue::new(SIZE).expect("queue");
        q.set_size(SIZE);
        q.try_set_desc_table_address(GuestAddress(desc))
            .expect("desc");
        q.try_set_avail_ring_address(GuestAddress(avail))
            .expect("avail");
        q.try_set_used_ring_address(GuestAddress(used))
            .expect("used");
        q.set_ready(true);
        Bench {
            mem: std::sync::Arc::new(memory()),
            q,
            view: RingView::default(),
        }
    }

    fn m(&self) -> &GuestMemoryMmap {
        &self.mem
    }

    fn put_desc(&self, table: u64, i: u16, d: Descriptor) {
        self.m()
            .write_obj(d, GuestAddress(table + u64::from(i) * 16))
            .expect("descriptor");
    }

    fn put_u16(&self, at: u64, v: u16) {
        self.m().write_obj(v, GuestAddress(at)).expect("u16");
    }

    fn get_u16(&self, at: u64) -> u16 {
        self.m().read_obj(GuestAddress(at)).expect("u16")
    }

    fn get_u32(&self, at: u64) -> u32 {
        self.m().read_obj(GuestAddress(at)).expect("u32")
    }

    /// Makes `heads` available from slot `from` on.
    fn offer(&self, from: u16, heads: &[u16]) {
        for (k, &h) in heads.iter().enumerate() {
            let slot = (from as usize + k) % usize::from(SIZE);
            self.put_u16(AVAIL_AT + 4 + 2 * slot as u64, h);
        }
        self.put_u16(AVAIL_AT + 2, from.wrapping_add(heads.len() as u16));
    }

    fn pop(&mut self) -> Pop {
        self.view.pop(&self.mem, &mut self.q)
    }

    /// The chain's descriptor addresses, and whether it was cut short (as
    /// the chain says; checked against what its descriptors say: empty, or
    /// ended on one that says more follow).
    fn walk(&mut self, head: u16) -> (Vec<u64>, bool) {
        let mut chain = self.view.chain(head);
        let d: Vec<Descriptor> = chain.by_ref().collect();
        let cut = chain.cut_short();
        assert_eq!(cut, d.last().is_none_or(|l| l.has_next()));
        (d.iter().map(|d| d.addr().0).collect(), cut)
    }
}

#[test]
fn pops_heads_in_order_then_is_empty() {
    let mut b = Bench::new();
    b.offer(0, &[3, 1, 7]);
    assert_eq!(b.pop(), Pop::Head(3));
    assert_eq!(b.pop(), Pop::Head(1));
    assert_eq!(b.pop(), Pop::Head(7));
    assert_eq!(b.pop(), Pop::Empty);
    assert_eq!(b.q.next_avail(), 3);
}

#[test]
fn pops_across_the_wrap_of_the_index() {
    let mut b = Bench::new();
    b.q.set_next_avail(u16::MAX);
    b.offer(u16::MAX, &[2, 5]);
    assert_eq!(b.pop(), Pop::Head(2));
    assert_eq!(b.pop(), Pop::Head(5));
    assert_eq!(b.pop(), Pop::Empty);
    assert_eq!(b.q.next_avail(), 1);
}

#[test]
fn an_index_more_than_queue_size_ahead_breaks_the_ring() {
    let mut b = Bench::new();
    b.put_u16(AVAIL_AT + 2, SIZE + 1);
    assert!(matches!(b.pop(), Pop::Broken(w) if w.contains("past")));
    // Exactly queue_size ahead is fine.
    let mut b = Bench::new();
    b.put_u16(AVAIL_AT + 2, SIZE);
    assert_eq!(b.pop(), Pop::Head(0));
}

#[test]
fn a_head_out_of_range_breaks_the_ring() {
    let mut b = Bench::new();
    b.offer(0, &[SIZE]);
    assert!(matches!(b.pop(), Pop::Broken(w) if w.contains("out of range")));
}

#[test]
fn rings_outside_guest_memory_or_across_regions_break_the_ring() {
    for (d, a, u) in [
        (0x10_0000, AVAIL_AT, USED_AT),
        (DESC_AT, 0x1_fff0, USED_AT),
        (DESC_AT, AVAIL_AT, 0x2_0000),
        // Straddles the two regions: not one host mapping.
        (0x1_0000 - 64, AVAIL_AT, USED_AT),
    ] {
        let mut b = Bench::at(d, a, u);
        assert!(matches!(b.pop(), Pop::Broken(_)), "{d:#x} {a:#x} {u:#x}");
        let (mem, q) = (&b.mem, &mut b.q);
        assert!(b.view.add_used(mem, q, 0, 1).is_err());
        assert!(b.view.set_notification(mem, q, true).is_err());
        assert_eq!(b.view.has_avail(mem, q), None);
    }
}

#[test]
fn used_entries_are_written_then_the_index() {
    let mut b = Bench::new();
    b.q.set_next_used(SIZE - 1);
    let (mem, q) = (&b.mem, &mut b.q);
    b.view.add_used(mem, q, 5, 4097).expect("used");
    b.view.add_used(mem, q, 6, 1).expect("used");
    assert_eq!(b.q.next_used(), SIZE + 1);
    let last = USED_AT + 4 + 8 * u64::from(SIZE - 1);
    assert_eq!((b.get_u32(last), b.get_u32(last + 4)), (5, 4097));
    assert_eq!((b.get_u32(USED_AT + 4), b.get_u32(USED_AT + 8)), (6, 1));
    assert_eq!(b.get_u16(USED_AT + 2), SIZE + 1);
    let (mem, q) = (&b.mem, &mut b.q);
    assert!(
        b.view.add_used(mem, q, SIZE, 1).is_err(),
        "head out of range"
    );
    assert_eq!(b.q.next_used(), SIZE + 1);
}

#[test]
fn notifications_follow_used_event_with_event_idx() {
    let mut b = Bench::new();
    b.q.set_event_idx(true);
    let used_event = AVAIL_AT + 4 + 2 * u64::from(SIZE);
    // The driver wants to hear when entry 1 is used (used index 2).
    b.put_u16(used_event, 1);
    let (mem, q) = (&b.mem, &mut b.q);
    b.view.add_used(mem, q, 0, 1).expect("used");
    assert!(!b.view.needs_notification(mem, q).expect("check"));
    b.view.add_used(mem, q, 1, 1).expect("used");
    assert!(b.view.needs_notification(mem, q).expect("check"));
    // Nothing added since: no interrupt.
    assert!(!b.view.needs_notification(mem, q).expect("check"));
    // Several at once passing used_event: one interrupt.
    b.put_u16(used_event, 3);
    let (mem, q) = (&b.mem, &mut b.q);
    for h in 2..6 {
        b.view.add_used(mem, q, h, 1).expect("used");
    }
    assert!(b.view.needs_notification(mem, q).expect("check"));
    // Without EVENT_IDX: always.
    q.set_event_idx(false);
    assert!(b.view.needs_notification(mem, q).expect("check"));
}

#[test]
fn kicks_are_turned_on_and_off_by_avail_event_or_the_used_flag() {
    let mut b = Bench::new();
    let avail_event = USED_AT + 4 + 8 * u64::from(SIZE);
    // Without EVENT_IDX: the used ring's NO_NOTIFY flag.
    let (mem, q) = (&b.mem, &mut b.q);
    assert!(!b.view.set_notification(mem, q, false).expect("off"));
    assert_eq!(b.get_u16(USED_AT), 1);
    assert!(!b.view.set_notification(mem, &b.q, true).expect("on"));
    assert_eq!(b.get_u16(USED_AT), 0);
    // With it: avail_event is the next index to pop; entries that arrived
    // meanwhile are reported.
    b.q.set_event_idx(true);
    b.q.set_next_avail(4);
    b.offer(4, &[1]);
    assert!(b.view.set_notification(&b.mem, &b.q, true).expect("on"));
    assert_eq!(b.get_u16(avail_event), 4);
    assert_eq!(b.get_u16(USED_AT), 0, "flags untouched with EVENT_IDX");
}

#[test]
fn a_new_memory_table_is_resolved_again() {
    let mut b = Bench::new();
    b.offer(0, &[2]);
    assert_eq!(b.pop(), Pop::Head(2));
    // The same layout in a new table whose ring says something else.
    let fresh = memory();
    fresh
        .write_obj(1u16, GuestAddress(AVAIL_AT + 2))
        .expect("idx");
    fresh
        .write_obj(6u16, GuestAddress(AVAIL_AT + 4))
        .expect("slot 0");
    fresh
        .write_obj(4u16, GuestAddress(AVAIL_AT + 6))
        .expect("slot 1");
    fresh
        .write_obj(2u16, GuestAddress(AVAIL_AT + 2))
        .expect("idx");
    b.mem = std::sync::Arc::new(fresh);
    assert_eq!(b.pop(), Pop::Head(4));
    // And a new layout (queue size) is resolved too: head 6 is out of
    // range of a ring of 4.
    b.q.set_size(4);
    b.q.set_next_avail(0);
    assert!(matches!(b.pop(), Pop::Broken(w) if w.contains("queue size 4")));
}

#[test]
fn direct_and_indirect_chains() {
    let mut b = Bench::new();
    b.put_desc(DESC_AT, 5, Descriptor::new(0x100, 16, NEXT, 2));
    b.put_desc(DESC_AT, 2, Descriptor::new(0x200, 512, NEXT | WRITE, 7));
    b.put_desc(DESC_AT, 7, Descriptor::new(0x300, 1, WRITE, 0));
    b.put_desc(DESC_AT, 3, Descriptor::new(IND, 48, INDIRECT, 0));
    b.put_desc(IND, 0, Descriptor::new(0x400, 16, NEXT, 1));
    b.put_desc(IND, 1, Descriptor::new(0x500, 512, NEXT, 2));
    b.put_desc(IND, 2, Descriptor::new(0x600, 1, WRITE, 0));
    b.offer(0, &[5, 3]);
    assert_eq!(b.pop(), Pop::Head(5));
    assert_eq!(b.walk(5), (vec![0x100, 0x200, 0x300], false));
    let d: Vec<_> = b
        .view
        .chain(5)
        .map(|d| (d.len(), d.is_write_only()))
        .collect();
    assert_eq!(d, [(16, false), (512, true), (1, true)]);
    assert_eq!(b.pop(), Pop::Head(3));
    assert_eq!(b.walk(3), (vec![0x400, 0x500, 0x600], false));
}

#[test]
fn bad_chains_are_cut_short() {
    let mut b = Bench::new();
    b.offer(0, &[0]);
    assert_eq!(b.pop(), Pop::Head(0));
    // A loop.
    b.put_desc(DESC_AT, 1, Descriptor::new(0x100, 16, NEXT, 1));
    assert!(b.walk(1).1, "loop");
    // Next index out of range, after one good descriptor.
    b.put_desc(DESC_AT, 2, Descriptor::new(0x100, 16, NEXT, SIZE + 3));
    assert_eq!(b.walk(2), (vec![0x100], true));
    // Nested indirect table.
    b.put_desc(DESC_AT, 4, Descriptor::new(IND, 16, INDIRECT, 0));
    b.put_desc(IND, 0, Descriptor::new(IND + 0x100, 16, INDIRECT, 0));
    assert!(b.walk(4).1, "nested");
    // Odd length, empty, chained, outside memory, across regions.
    for (addr, len, flags) in [
        (IND, 40, INDIRECT),
        (IND, 0, INDIRECT),
        (IND, 16, INDIRECT | NEXT),
        (0x10_0000, 48, INDIRECT),
        (0x1_0000 - 16, 48, INDIRECT),
        (IND, 16 << 16, INDIRECT),
    ] {
        b.put_desc(IND + 0x200, 0, Descriptor::new(0x700, 1, WRITE, 0));
        b.put_desc(IND + 0x200, 1, Descriptor::new(0x700, 1, WRITE, 0));
        b.put_desc(IND + 0x200, 2, Descriptor::new(0x700, 1, WRITE, 0));
        b.put_desc(DESC_AT, 6, Descriptor::new(addr, len, flags, 0));
        assert!(b.walk(6).1, "indirect {addr:#x} {len} {flags}");
    }
    // An indirect table after a data buffer, outside memory: the buffer,
    // then cut.
    b.put_desc(DESC_AT, 0, Descriptor::new(0x800, 513, NEXT | WRITE, 3));
    b.put_desc(DESC_AT, 3, Descriptor::new(0x10_0000, 48, INDIRECT, 0));
    assert_eq!(b.walk(0), (vec![0x800], true));
    // A head out of range.
    assert!(b.walk(SIZE).1);
}

#[test]
fn a_chain_from_a_head_never_popped_after_resolve_queue() {
    // Inflight resubmission: the head's slot on the available ring was
    // reused, so the chain is read from the head alone.
    let mut b = Bench::new();
    b.put_desc(DESC_AT, 6, Descriptor::new(0x100, 16, NEXT, 1));
    b.put_desc(DESC_AT, 1, Descriptor::new(0x200, 1, WRITE, 0));
    assert_eq!(b.walk(6), (vec![], true), "nothing resolved yet");
    b.view.resolve_queue(&b.mem, &b.q).expect("resolved");
    assert_eq!(b.walk(6), (vec![0x100, 0x200], false));
    // Rings outside guest memory do not resolve.
    let mut far = Bench::at(0x10_0000, AVAIL_AT, USED_AT);
    assert!(far.view.resolve_queue(&far.mem, &far.q).is_err());
    assert_eq!(far.walk(0).0, Vec::<u64>::new());
}

#[test]
fn a_chain_before_any_resolution_is_empty() {
    let v = RingView::default();
    assert_eq!(v.chain(0).count(), 0);
}

#[test]
fn guest_map_reads_and_writes_within_one_region() {
    let m = Arc::new(memory());
    let map = GuestMap::new(m.clone());
    assert!(map.write_u8(0x1_0005, 0xab));
    assert_eq!(
        m.read_obj::<u8>(GuestAddress(0x1_0005)).expect("byte"),
        0xab
    );
    let mut buf = [0u8; 4];
    m.write_slice(&[1, 2, 3, 4], GuestAddress(0x10))
        .expect("write");
    assert!(map.read(0x10, &mut buf));
    assert_eq!(buf, [1, 2, 3, 4]);
    assert!(!map.read(0x1_0000 - 2, &mut buf), "across regions");
    assert!(!map.read(0x2_0000 - 2, &mut buf), "past the end");
    assert!(!map.write_u8(0x2_0000, 1));
    assert!(!map.read(u64::MAX - 1, &mut buf));
}
