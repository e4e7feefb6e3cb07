//! Request parsing on chains built by `virtio_queue::mock::MockSplitQueue`,
//! including malformed chains a hostile guest could send.

use std::sync::Arc;
use vhost_mpath::request::{Kind, Parser, Rejected, Request, STATUS_IOERR, STATUS_UNSUPP};
use vhost_mpath::virtio::Limits;
use vhost_mpath::vring::GuestMap;
use virtio_bindings::virtio_blk::*;
use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const MEM_SIZE: u64 = 0x100_0000;
const HDR: u64 = 0x10_0000;
const DATA: u64 = 0x20_0000;
const STATUS: u64 = 0x30_0000;
const W: u16 = VRING_DESC_F_WRITE as u16;

fn limits() -> Limits {
    Limits {
        capacity_sectors: 2048, // 1 MiB
        block_size: 512,
        seg_max: 8,
        read_only: false,
        discard: true,
        write_zeroes: true,
        max_discard_sectors: 1 << 16,
        max_write_zeroes_sectors: 1 << 16,
    }
}

fn mem() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap()
}

fn header(mem: &GuestMemoryMmap, rtype: u32, sector: u64) {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&rtype.to_le_bytes());
    h[8..16].copy_from_slice(&sector.to_le_bytes());
    mem.write_slice(&h, GuestAddress(HDR)).unwrap();
}

fn d(addr: u64, len: u32, flags: u16) -> RawDescriptor {
    RawDescriptor::from(SplitDescriptor::new(addr, len, flags, 0))
}

fn parse_with(
    mem: &GuestMemoryMmap,
    descs: &[RawDescriptor],
    l: &Limits,
) -> Result<Request, Rejected> {
    let vq = MockSplitQueue::new(mem, 16);
    let chain = vq.build_desc_chain(descs).unwrap();
    let plain = Parser::default().parse(chain, mem, l);
    // The worker's path (host addresses from the ring view's map of this
    // very table) must decide exactly as vm-memory's.
    let shared = Arc::new(mem.clone());
    let map = GuestMap::new(shared.clone());
    let chain = vq.build_desc_chain(descs).unwrap();
    let mapped = Parser::default().parse_mapped(chain, &shared, Some(&map), l);
    assert_eq!(
        format!("{plain:?}"),
        format!("{mapped:?}"),
        "parse and parse_mapped differ"
    );
    plain
}

fn parse(mem: &GuestMemoryMmap, descs: &[RawDescriptor]) -> Result<Request, Rejected> {
    parse_with(mem, descs, &limits())
}

fn status_of(r: Result<Request, Rejected>) -> u8 {
    match r {
        Err(Rejected::Status {
            status,
            status_addr,
            ..
        }) => {
            assert_eq!(status_addr, GuestAddress(STATUS));
            status
        }
        other => panic!("expected a rejected request with status, got {other:?}"),
    }
}

#[test]
fn read_request_maps_guest_buffers() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 8);
    let r = parse(
        &m,
        &[
            d(HDR, 16, 0),
            d(DATA, 4096, W),
            d(DATA + 8192, 512, W),
            d(STATUS, 1, W),
        ],
    )
    .unwrap();
    assert_eq!(r.kind, Kind::Read);
    assert_eq!(r.offset, 8 * 512);
    assert_eq!(r.len, 4608);
    assert_eq!(r.iovecs.len(), 2);
    assert_eq!(r.iovecs[0].iov_len, 4096);
    assert_eq!(r.iovecs[1].iov_len, 512);
    assert_eq!(r.status_addr, GuestAddress(STATUS));
}

#[test]
fn write_request_with_header_and_data_in_one_descriptor() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_OUT, 0);
    let r = parse(&m, &[d(HDR, 16 + 1024, 0), d(STATUS, 1, W)]).unwrap();
    assert_eq!(r.kind, Kind::Write);
    assert_eq!(r.len, 1024);
    assert_eq!(r.iovecs.len(), 1);
}

#[test]
fn flush_get_id_and_discard() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_FLUSH, 0);
    assert_eq!(
        parse(&m, &[d(HDR, 16, 0), d(STATUS, 1, W)]).unwrap().kind,
        Kind::Flush
    );
    header(&m, VIRTIO_BLK_T_GET_ID, 0);
    let r = parse(&m, &[d(HDR, 16, 0), d(DATA, 20, W), d(STATUS, 1, W)]).unwrap();
    assert_eq!(r.kind, Kind::GetId);
    assert_eq!(r.id_area, vec![(GuestAddress(DATA), 20)]);
    header(&m, VIRTIO_BLK_T_DISCARD, 0);
    let mut seg = [0u8; 16];
    seg[0..8].copy_from_slice(&16u64.to_le_bytes());
    seg[8..12].copy_from_slice(&8u32.to_le_bytes());
    m.write_slice(&seg, GuestAddress(DATA)).unwrap();
    let r = parse(&m, &[d(HDR, 16, 0), d(DATA, 16, 0), d(STATUS, 1, W)]).unwrap();
    assert_eq!(r.kind, Kind::Discard);
    assert_eq!(r.segments.len(), 1);
    assert_eq!(
        (r.segments[0].offset, r.segments[0].len),
        (16 * 512, 8 * 512)
    );
}

#[test]
fn chain_too_short_has_no_status() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    assert!(matches!(
        parse(&m, &[d(HDR, 16, 0)]),
        Err(Rejected::NoStatus { .. })
    ));
}

#[test]
fn read_only_status_descriptor_is_rejected() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_FLUSH, 0);
    assert!(matches!(
        parse(&m, &[d(HDR, 16, 0), d(STATUS, 1, 0)]),
        Err(Rejected::NoStatus { .. })
    ));
}

#[test]
fn status_outside_guest_memory_is_rejected() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_FLUSH, 0);
    assert!(matches!(
        parse(&m, &[d(HDR, 16, 0), d(MEM_SIZE + 4096, 1, W)]),
        Err(Rejected::NoStatus { .. })
    ));
}

#[test]
fn header_in_write_only_descriptor_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    // Everything writable: no readable header at all.
    assert_eq!(
        status_of(parse(
            &m,
            &[d(HDR, 16, W), d(DATA, 512, W), d(STATUS, 1, W)]
        )),
        STATUS_IOERR
    );
}

#[test]
fn short_header_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    assert_eq!(
        status_of(parse(&m, &[d(HDR, 8, 0), d(DATA, 512, W), d(STATUS, 1, W)])),
        STATUS_IOERR
    );
}

#[test]
fn data_in_wrong_direction_is_ioerr() {
    let m = mem();
    // A read whose data buffer is device-readable.
    header(&m, VIRTIO_BLK_T_IN, 0);
    assert_eq!(
        status_of(parse(
            &m,
            &[d(HDR, 16, 0), d(DATA, 512, 0), d(STATUS, 1, W)]
        )),
        STATUS_IOERR
    );
    // A write whose data buffer is device-writable.
    header(&m, VIRTIO_BLK_T_OUT, 0);
    assert_eq!(
        status_of(parse(
            &m,
            &[d(HDR, 16, 0), d(DATA, 512, W), d(STATUS, 1, W)]
        )),
        STATUS_IOERR
    );
}

#[test]
fn readable_after_writable_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_OUT, 0);
    assert_eq!(
        status_of(parse(
            &m,
            &[
                d(HDR, 16, 0),
                d(DATA + 4096, 1, W),
                d(DATA, 512, 0),
                d(STATUS, 1, W)
            ]
        )),
        STATUS_IOERR
    );
}

#[test]
fn out_of_range_sector_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 2047);
    assert_eq!(
        status_of(parse(
            &m,
            &[d(HDR, 16, 0), d(DATA, 1024, W), d(STATUS, 1, W)]
        )),
        STATUS_IOERR
    );
    header(&m, VIRTIO_BLK_T_IN, u64::MAX - 1);
    assert_eq!(
        status_of(parse(
            &m,
            &[d(HDR, 16, 0), d(DATA, 1024, W), d(STATUS, 1, W)]
        )),
        STATUS_IOERR
    );
    // The last sector itself is fine.
    header(&m, VIRTIO_BLK_T_IN, 2047);
    assert!(parse(&m, &[d(HDR, 16, 0), d(DATA, 512, W), d(STATUS, 1, W)]).is_ok());
}

#[test]
fn misaligned_length_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_OUT, 0);
    assert_eq!(
        status_of(parse(
            &m,
            &[d(HDR, 16, 0), d(DATA, 513, 0), d(STATUS, 1, W)]
        )),
        STATUS_IOERR
    );
    // With 4k blocks, a 512-byte-aligned sector is not enough.
    let l = Limits {
        block_size: 4096,
        ..limits()
    };
    header(&m, VIRTIO_BLK_T_IN, 1);
    assert_eq!(
        status_of(parse_with(
            &m,
            &[d(HDR, 16, 0), d(DATA, 4096, W), d(STATUS, 1, W)],
            &l
        )),
        STATUS_IOERR
    );
}

#[test]
fn data_outside_guest_memory_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    assert_eq!(
        status_of(parse(
            &m,
            &[d(HDR, 16, 0), d(MEM_SIZE - 512, 1024, W), d(STATUS, 1, W)]
        )),
        STATUS_IOERR
    );
}

#[test]
fn too_many_segments_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    let mut descs = vec![d(HDR, 16, 0)];
    for i in 0..9 {
        descs.push(d(DATA + i * 512, 512, W));
    }
    descs.push(d(STATUS, 1, W));
    assert_eq!(status_of(parse(&m, &descs)), STATUS_IOERR);
}

#[test]
fn unknown_type_is_unsupp_and_read_only_refuses_writes() {
    let m = mem();
    header(&m, 0x7777, 0);
    assert_eq!(
        status_of(parse(&m, &[d(HDR, 16, 0), d(STATUS, 1, W)])),
        STATUS_UNSUPP
    );
    let ro = Limits {
        read_only: true,
        ..limits()
    };
    header(&m, VIRTIO_BLK_T_OUT, 0);
    assert_eq!(
        status_of(parse_with(
            &m,
            &[d(HDR, 16, 0), d(DATA, 512, 0), d(STATUS, 1, W)],
            &ro
        )),
        STATUS_IOERR
    );
}

#[test]
fn discard_not_offered_or_bad_segments() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_DISCARD, 0);
    let no = Limits {
        discard: false,
        ..limits()
    };
    assert_eq!(
        status_of(parse_with(
            &m,
            &[d(HDR, 16, 0), d(DATA, 16, 0), d(STATUS, 1, W)],
            &no
        )),
        STATUS_UNSUPP
    );
    // Not a whole number of segments.
    assert_eq!(
        status_of(parse(&m, &[d(HDR, 16, 0), d(DATA, 15, 0), d(STATUS, 1, W)])),
        STATUS_IOERR
    );
    // Unmap flag on a discard, and a segment past the end.
    let mut seg = [0u8; 16];
    seg[8..12].copy_from_slice(&8u32.to_le_bytes());
    seg[12..16].copy_from_slice(&1u32.to_le_bytes());
    m.write_slice(&seg, GuestAddress(DATA)).unwrap();
    assert_eq!(
        status_of(parse(&m, &[d(HDR, 16, 0), d(DATA, 16, 0), d(STATUS, 1, W)])),
        STATUS_UNSUPP
    );
    seg[0..8].copy_from_slice(&2044u64.to_le_bytes());
    seg[12..16].copy_from_slice(&0u32.to_le_bytes());
    m.write_slice(&seg, GuestAddress(DATA)).unwrap();
    assert_eq!(
        status_of(parse(&m, &[d(HDR, 16, 0), d(DATA, 16, 0), d(STATUS, 1, W)])),
        STATUS_IOERR
    );
}

#[test]
fn discard_segment_over_the_device_limit_is_ioerr() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_DISCARD, 0);
    let l = Limits {
        max_discard_sectors: 8,
        ..limits()
    };
    let mut seg = [0u8; 16];
    seg[8..12].copy_from_slice(&16u32.to_le_bytes());
    m.write_slice(&seg, GuestAddress(DATA)).unwrap();
    assert_eq!(
        status_of(parse_with(
            &m,
            &[d(HDR, 16, 0), d(DATA, 16, 0), d(STATUS, 1, W)],
            &l
        )),
        STATUS_IOERR
    );
}

#[test]
fn indirect_chain_is_followed() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    // Indirect table at 0x40_0000 with header, data, status.
    let table = 0x40_0000u64;
    let entries = [
        SplitDescriptor::new(HDR, 16, 1, 1),       // NEXT
        SplitDescriptor::new(DATA, 512, W | 1, 2), // WRITE|NEXT
        SplitDescriptor::new(STATUS, 1, W, 0),
    ];
    for (i, e) in entries.iter().enumerate() {
        m.write_obj(*e, GuestAddress(table + 16 * i as u64))
            .unwrap();
    }
    let r = parse(&m, &[d(table, 48, VRING_DESC_F_INDIRECT as u16)]).unwrap();
    assert_eq!(r.kind, Kind::Read);
    assert_eq!(r.len, 512);
}

#[test]
fn garbage_chains_never_panic() {
    // A crude fuzz: random descriptors and headers must only ever produce
    // Ok or a rejection.
    let m = mem();
    let mut x: u64 = 0x1234_5678_9abc_def0;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..5000 {
        let rtype = [0, 1, 4, 8, 11, 13, 99][(next() % 7) as usize];
        header(&m, rtype, next() % 4096);
        let n = 1 + next() % 6;
        let descs: Vec<_> = (0..n)
            .map(|_| {
                let addr = next() % (MEM_SIZE + 0x1000);
                let len = (next() % 9000) as u32;
                let flags = if next() % 2 == 0 { W } else { 0 };
                d(addr, len, flags)
            })
            .collect();
        let _ = parse(&m, &descs);
    }
}

#[test]
fn buffers_across_two_regions_are_split_on_both_paths() {
    // Two adjacent regions: a header and a data buffer straddling the
    // boundary take vm-memory's path; parse_with checks the mapped path
    // agrees.
    let half = MEM_SIZE / 2;
    let m = GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), half as usize),
        (GuestAddress(half), half as usize),
    ])
    .unwrap();
    let hdr = half - 8;
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&VIRTIO_BLK_T_IN.to_le_bytes());
    h[8..16].copy_from_slice(&8u64.to_le_bytes());
    m.write_slice(&h, GuestAddress(hdr)).unwrap();
    let r = parse(
        &m,
        &[
            d(hdr, 16, 0),
            d(half - 1024, 2048, W),
            d(DATA, 512, W),
            d(STATUS, 1, W),
        ],
    )
    .unwrap();
    assert_eq!(r.offset, 8 * 512);
    assert_eq!(r.len, 2560);
    let lens: Vec<usize> = r.iovecs.iter().map(|v| v.iov_len).collect();
    assert_eq!(lens, [1024, 1024, 512]);
}
