//! An adversarial frontend against the daemon: a driver of our own lays out
//! a split virtqueue by hand and publishes what a hostile or buggy guest
//! could. Each case must end within a second with an error status (IOERR or
//! UNSUPP written and the used entry published), a completion without status
//! where none may be written, or the queue stopped / the connection closed;
//! then the daemon must be idle, its log bounded, and a next frontend (blkio)
//! served with a write and its read-back. See `vhost_mpath_tests::adversary`.
//!
//! `TEST_SERVER=qsd` runs the same cases against qemu-storage-daemon.

use vhost_mpath_tests::adversary::blk::{header, T_FLUSH, T_IN, T_OUT};
use vhost_mpath_tests::adversary::frontend::MEM_SIZE;
use vhost_mpath_tests::adversary::{AdversaryOptions, Desc, Expect, Scene};

fn scene(name: &str) -> Scene {
    Scene::start(name, &AdversaryOptions::default())
}

// The harness itself: well-formed requests complete, the daemon stays healthy.

#[test]
fn well_formed_requests_with_event_idx_and_indirect_descriptors() {
    let mut s = scene("well-formed, EVENT_IDX + indirect");
    assert!(s.adv().event_idx(), "EVENT_IDX was not negotiated");
    assert!(
        s.adv().indirect(),
        "indirect descriptors were not negotiated"
    );
    s.healthy();
}

#[test]
fn well_formed_requests_without_event_idx_or_indirect_descriptors() {
    let opts = AdversaryOptions {
        event_idx: false,
        indirect: false,
        ..AdversaryOptions::default()
    };
    let mut s = Scene::start("well-formed, plain ring", &opts);
    assert!(!s.adv().event_idx() && !s.adv().indirect());
    s.healthy();
}

// Broken rings.

#[test]
fn available_index_more_than_queue_size_ahead_stops_the_queue() {
    let mut s = scene("available index queue_size + 1 ahead");
    let idx = s.adv().avail_idx().wrapping_add(s.adv().ring().size + 1);
    s.adv().publish_avail_idx(idx);
    s.judge(Expect::broken_ring("an available index queue_size + 1 ahead").no_probe());
}

#[test]
fn available_index_more_than_queue_size_ahead_stops_the_queue_when_polling() {
    let mut s = Scene::start_with(
        "available index queue_size + 1 ahead, --poll-us",
        &AdversaryOptions::default(),
        &["--poll-us", "1000"],
    );
    let idx = s.adv().avail_idx().wrapping_add(s.adv().ring().size + 1);
    s.adv().publish_avail_idx(idx);
    s.judge(Expect::broken_ring("an available index queue_size + 1 ahead").no_probe());
}

#[test]
fn broken_queue_leaves_the_other_queue_serving() {
    let opts = AdversaryOptions {
        num_queues: 2,
        ..AdversaryOptions::default()
    };
    let mut s = Scene::start_with("one of two queues broken", &opts, &[]);
    let idx = s.adv().avail_idx().wrapping_add(s.adv().ring().size + 1);
    s.adv().publish_avail_idx(idx);
    s.judge(
        Expect::broken_ring("an available index queue_size + 1 ahead on queue 0")
            .no_probe()
            .other_queue_serves(1),
    );
}

#[test]
fn broken_queue_serves_again_after_the_frontend_restarts_it() {
    let mut s = scene("broken queue restarted");
    let idx = s.adv().avail_idx().wrapping_add(s.adv().ring().size + 1);
    s.adv().publish_avail_idx(idx);
    s.judge(
        Expect::broken_ring("an available index queue_size + 1 ahead")
            .no_probe()
            .then_restart(),
    );
}

#[test]
fn entries_on_a_stopped_queue_do_not_make_a_polling_worker_spin() {
    // With a long polling window the worker is still polling when the
    // frontend stops the queue (GET_VRING_BASE); the guest then publishes
    // more: nothing may be served, and nothing may spin.
    let mut s = Scene::start_with(
        "entries on a stopped queue, --poll-us",
        &AdversaryOptions::default(),
        &["--poll-us", "200000"],
    );
    let (o, st) = s.probe();
    assert!(
        matches!(o, vhost_mpath_tests::adversary::Outcome::Used { .. }) && st == 0,
        "a good read before the stop: {o:?}, status {st}"
    );
    if let Err(e) = s.adv().stop_queue() {
        s.fail(format!("GET_VRING_BASE while polling: {e}"));
    }
    let hdr = s.header(T_IN, 0);
    let buf = s.buffer(512);
    let st = s.status();
    s.publish(&[Desc::r(hdr, 16), Desc::w(buf, 512), Desc::w(st, 1)]);
    s.judge(
        Expect::broken_ring("a read published after GET_VRING_BASE")
            .stopped_by_frontend()
            .no_probe()
            .untouched(buf, 512)
            .untouched(st, 1),
    );
}

#[test]
fn head_index_out_of_range_stops_the_queue() {
    let mut s = scene("head out of range");
    let size = s.adv().ring().size;
    s.adv().push(size);
    s.judge(Expect::broken_ring("head index = queue size").head(size));
}

#[test]
fn descriptor_loop_back_to_the_head_is_not_served() {
    let mut s = scene("descriptor loop back to the head");
    let hdr = s.header(T_IN, 0);
    let buf = s.buffer(512);
    let st = s.status();
    let first = s.adv().alloc_descs(3);
    s.adv().write_desc(first, Desc::r(hdr, 16).then(first + 1));
    s.adv()
        .write_desc(first + 1, Desc::w(buf, 512).then(first + 2));
    // The status descriptor points back at the header.
    s.adv().write_desc(first + 2, Desc::w(st, 1).then(first));
    s.adv().push(first);
    s.judge(
        Expect::not_served(
            "a read whose status descriptor loops to the head",
            first,
            st,
        )
        .untouched(buf, 512),
    );
}

#[test]
fn descriptor_loop_that_parses_when_cut_is_not_served() {
    // A header in three readable pieces, then one writable buffer whose next
    // is itself. A device that follows the loop until queue_size
    // descriptors and parses what it got sees a well-formed read: the
    // length is chosen so that (queue_size - 3) * len - 1 is a multiple of 512.
    let mut s = scene("descriptor loop that parses when cut");
    let size = u64::from(s.adv().ring().size);
    let k = size - 3;
    let len = (1..512u64).find(|l| (k * l) % 512 == 1).expect("k is odd");
    let hdr = s.header(T_IN, 0);
    let buf = s.buffer(len);
    let first = s.adv().alloc_descs(4);
    s.adv().write_desc(first, Desc::r(hdr, 8).then(first + 1));
    s.adv()
        .write_desc(first + 1, Desc::r(hdr + 8, 4).then(first + 2));
    s.adv()
        .write_desc(first + 2, Desc::r(hdr + 12, 4).then(first + 3));
    s.adv()
        .write_desc(first + 3, Desc::w(buf, len as u32).then(first + 3));
    s.adv().push(first);
    s.judge(
        Expect::not_served(
            "a read whose data descriptor loops to itself",
            first,
            buf + len - 1,
        )
        .untouched(buf, len as usize - 1),
    );
}

// Indirect tables.

#[test]
fn indirect_table_outside_guest_memory_is_not_served() {
    let mut s = scene("indirect table outside guest memory");
    let head = s.publish(&[Desc::indirect(MEM_SIZE + 0x1000, 48)]);
    s.judge(Expect::no_status(
        "an indirect table past the end of guest memory",
        head,
    ));
}

#[test]
fn indirect_table_of_odd_length_is_not_served() {
    let mut s = scene("indirect table of odd length");
    let hdr = s.header(T_IN, 0);
    let buf = s.buffer(512);
    let st = s.status();
    let (table, len) =
        s.adv()
            .indirect_table(&[Desc::r(hdr, 16), Desc::w(buf, 512), Desc::w(st, 1)]);
    // 40 bytes: two and a half descriptors.
    let head = s.publish(&[Desc::indirect(table, len - 8)]);
    s.judge(Expect::not_served("an indirect table of 40 bytes", head, st).untouched(buf, 512));
}

#[test]
fn indirect_table_outside_guest_memory_after_a_data_buffer_is_not_served() {
    // Header and a 513-byte writable buffer, then an indirect descriptor
    // whose table is outside guest memory: cut before the table, the chain
    // reads as a well-formed 512-byte read with its status in the last byte.
    let mut s = scene("indirect table out of range after a data buffer");
    let hdr = s.header(T_IN, 0);
    let buf = s.buffer(513);
    let head = s.publish(&[
        Desc::r(hdr, 16),
        Desc::w(buf, 513),
        Desc::indirect(MEM_SIZE + 0x1000, 48),
    ]);
    s.judge(
        Expect::not_served(
            "a read chain ending in an indirect table outside guest memory",
            head,
            buf + 512,
        )
        .untouched(buf, 512),
    );
}

#[test]
fn indirect_table_longer_than_65535_descriptors_is_not_served() {
    let mut s = scene("indirect table of 65536 descriptors");
    let hdr = s.header(T_IN, 0);
    let buf = s.buffer(512);
    let st = s.status();
    let (table, _) = s
        .adv()
        .indirect_table(&[Desc::r(hdr, 16), Desc::w(buf, 512), Desc::w(st, 1)]);
    let head = s.publish(&[Desc::indirect(table, 16 << 16)]);
    s.judge(
        Expect::not_served("an indirect table of 65536 descriptors", head, st).untouched(buf, 512),
    );
}

#[test]
fn nested_indirect_table_is_not_served() {
    // An indirect table whose last entry refers to another table (the spec
    // forbids it): cut there, the chain reads as a 512-byte read with its
    // status in the last byte of the buffer.
    let mut s = scene("nested indirect table");
    let hdr = s.header(T_IN, 0);
    let buf = s.buffer(513);
    let st = s.status();
    let (inner, inner_len) = s.adv().indirect_table(&[Desc::w(st, 1)]);
    let head = s.publish_indirect(&[
        Desc::r(hdr, 16),
        Desc::w(buf, 513),
        Desc::indirect(inner, inner_len),
    ]);
    s.judge(
        Expect::not_served("an indirect table nested in another", head, buf + 512)
            .allow_status_at(st)
            .untouched(buf, 512),
    );
}

#[test]
fn next_index_out_of_range_is_not_served() {
    // Header and a 513-byte writable buffer whose next is past the table:
    // cut there, the chain reads as a well-formed 512-byte read.
    let mut s = scene("next index out of range");
    let size = s.adv().ring().size;
    let hdr = s.header(T_IN, 0);
    let buf = s.buffer(513);
    let first = s.adv().alloc_descs(2);
    s.adv().write_desc(first, Desc::r(hdr, 16).then(first + 1));
    s.adv()
        .write_desc(first + 1, Desc::w(buf, 513).then(size + 7));
    s.adv().push(first);
    s.judge(
        Expect::not_served(
            "a read chain whose next index is out of range",
            first,
            buf + 512,
        )
        .untouched(buf, 512),
    );
}

// Header and status.

#[test]
fn header_missing_is_ioerr() {
    let mut s = scene("header missing");
    let st = s.status();
    let head = s.publish(&[Desc::w(st, 1)]);
    s.judge(Expect::error_status(
        "a chain of only a status byte",
        head,
        st,
    ));
}

#[test]
fn header_in_a_device_writable_descriptor_is_ioerr() {
    let mut s = scene("header device-writable");
    let hdr = s.buffer(16);
    s.adv().ram.write(hdr, &header(T_IN, 0));
    let buf = s.buffer(512);
    let st = s.status();
    let head = s.publish(&[Desc::w(hdr, 16), Desc::w(buf, 512), Desc::w(st, 1)]);
    s.judge(
        Expect::error_status("a read whose header is device-writable", head, st)
            .untouched(buf, 512),
    );
}

#[test]
fn status_missing_completes_without_status() {
    let mut s = scene("status missing");
    let hdr = s.header(T_FLUSH, 0);
    let head = s.publish(&[Desc::r(hdr, 16)]);
    s.judge(Expect::no_status(
        "a flush without a status descriptor",
        head,
    ));
}

#[test]
fn status_in_a_device_readable_descriptor_is_left_alone() {
    let mut s = scene("status device-readable");
    let hdr = s.header(T_OUT, 0);
    let buf = s.buffer(512);
    let st = s.status();
    let head = s.publish(&[Desc::r(hdr, 16), Desc::r(buf, 512), Desc::r(st, 1)]);
    s.judge(
        Expect::no_status("a write whose status byte is device-readable", head).untouched(st, 1),
    );
}

#[test]
fn zero_length_status_descriptor_completes_without_status() {
    let mut s = scene("zero-length status descriptor");
    let hdr = s.header(T_FLUSH, 0);
    let st = s.status();
    let head = s.publish(&[Desc::r(hdr, 16), Desc::w(st, 0)]);
    s.judge(
        Expect::no_status("a flush whose status descriptor has length 0", head).untouched(st, 1),
    );
}

// Sizes.

#[test]
fn sector_past_capacity_is_ioerr() {
    let mut s = scene("sector past capacity");
    let cap = s.capacity_sectors();
    assert!(cap > 0, "GET_CONFIG gave no capacity");
    let hdr = s.header(T_IN, cap);
    let buf = s.buffer(512);
    let st = s.status();
    let head = s.publish(&[Desc::r(hdr, 16), Desc::w(buf, 512), Desc::w(st, 1)]);
    s.judge(Expect::error_status("a read at the capacity", head, st).untouched(buf, 512));
}

#[test]
fn sector_range_overflow_is_ioerr() {
    let mut s = scene("sector range overflow");
    let hdr = s.header(T_IN, u64::MAX - 1);
    let buf = s.buffer(1024);
    let st = s.status();
    let head = s.publish(&[Desc::r(hdr, 16), Desc::w(buf, 1024), Desc::w(st, 1)]);
    s.judge(Expect::error_status("a read at sector 2^64-2", head, st).untouched(buf, 1024));
}

#[test]
fn length_not_a_multiple_of_512_is_ioerr() {
    let mut s = scene("length not a multiple of 512");
    let hdr = s.header(T_OUT, 0);
    let buf = s.buffer(1000);
    let st = s.status();
    let head = s.publish(&[Desc::r(hdr, 16), Desc::r(buf, 1000), Desc::w(st, 1)]);
    s.judge(Expect::error_status("a write of 1000 bytes", head, st));
}

#[test]
fn zero_length_data_is_answered() {
    // 0 is a multiple of 512: the spec does not forbid an empty transfer,
    // and qemu-storage-daemon completes it OK. Either answer, but an answer.
    let mut s = scene("zero-length data");
    let hdr = s.header(T_IN, 0);
    let buf = s.buffer(16);
    let st = s.status();
    let head = s.publish(&[Desc::r(hdr, 16), Desc::w(buf, 0), Desc::w(st, 1)]);
    s.judge(
        Expect::error_status("a read with a zero-length data descriptor", head, st)
            .allow(vhost_mpath_tests::adversary::blk::S_OK)
            .untouched(buf, 16),
    );
}

#[test]
fn huge_length_is_ioerr() {
    let mut s = scene("huge length");
    let hdr = s.header(T_IN, 0);
    let buf = s.buffer(4096);
    let st = s.status();
    let head = s.publish(&[Desc::r(hdr, 16), Desc::w(buf, 0x8000_0000), Desc::w(st, 1)]);
    s.judge(Expect::error_status("a read of 2 GiB", head, st).untouched(buf, 4096));
}

#[test]
fn data_outside_guest_memory_is_ioerr() {
    let mut s = scene("data outside guest memory");
    let hdr = s.header(T_IN, 0);
    let st = s.status();
    let head = s.publish(&[
        Desc::r(hdr, 16),
        Desc::w(MEM_SIZE - 512, 4096),
        Desc::w(st, 1),
    ]);
    s.judge(Expect::error_status(
        "a read into a buffer crossing the end of guest memory",
        head,
        st,
    ));
}

#[test]
fn chain_longer_than_4_gib_is_not_served() {
    // The spec forbids chains over 4 GiB in total. Cut where the total
    // overflows, this one reads as a well-formed 512-byte read with its
    // status in the last byte of the first buffer.
    let mut s = scene("chain longer than 4 GiB");
    let hdr = s.header(T_IN, 0);
    let buf = s.buffer(513);
    let st = s.status();
    let head = s.publish(&[
        Desc::r(hdr, 16),
        Desc::w(buf, 513),
        Desc::w(0x20_0000, u32::MAX),
        Desc::w(st, 1),
    ]);
    s.judge(
        Expect::not_served("a read chain of 4 GiB + 530 bytes", head, buf + 512)
            .allow_status_at(st)
            .untouched(buf, 512),
    );
}

#[test]
fn unknown_request_type_is_unsupp() {
    let mut s = scene("unknown request type");
    let hdr = s.header(0x7777, 0);
    let st = s.status();
    let head = s.publish(&[Desc::r(hdr, 16), Desc::w(st, 1)]);
    s.judge(Expect::error_status("request type 0x7777", head, st));
}
