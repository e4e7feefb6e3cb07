//! A guest that writes garbage: random descriptor tables, indirect tables,
//! request headers, segment lists, available rings and `used_event`, served
//! by the worker on null paths (one path; two that split requests; one
//! failing a fifth of its I/O beside a good one; 4 KiB blocks). Whatever the
//! guest wrote, the worker must not panic (these tests run with overflow
//! checks), must finish each kick, and must lose nothing: unless it
//! declared the ring broken, every head the guest made available gets its
//! used entry, and nothing stays in flight.

use fastrand::Rng;
use vhost_user_backend::VringT;
use vm_memory::{Bytes, GuestAddress};

use super::machine_tests::{disk, in_flight, Guest, QSIZE};

const MEM: u64 = 16 << 20;
/// Where descriptors point, mostly: past the rings, before the end.
const AREA: u64 = 1 << 20;
const F_NEXT: u16 = 1;
const F_WRITE: u16 = 2;
const F_INDIRECT: u16 = 4;
/// Request types: in, out, flush, get-id, discard, write-zeroes.
const TYPES: [u32; 6] = [0, 1, 4, 8, 11, 13];

/// A guest address: mostly inside memory, sometimes anywhere or across
/// its end.
fn addr(r: &mut Rng) -> u64 {
    match r.u64(..20) {
        0 => r.u64(..),
        1 => MEM - r.u64(..64),
        _ => AREA + r.u64(..MEM - 2 * AREA),
    }
}

/// A length: mostly whole sectors, sometimes tiny, odd, zero or huge.
fn len(r: &mut Rng) -> u32 {
    match r.u64(..10) {
        0 => r.u64(..) as u32,
        1 => 0,
        2 | 3 => 1 + r.u64(..24) as u32,
        4 => 1 + r.u64(..1 << 20) as u32,
        _ => 512 * (1 + r.u64(..128) as u32),
    }
}

fn flags(r: &mut Rng) -> u16 {
    if r.u64(..50) == 0 {
        return r.u64(..) as u16;
    }
    let mut f = 0;
    if r.u64(..4) != 0 {
        f |= F_NEXT;
    }
    if r.u64(..2) == 0 {
        f |= F_WRITE;
    }
    if r.u64(..15) == 0 {
        f |= F_INDIRECT;
    }
    f
}

fn next(r: &mut Rng, size: u64) -> u16 {
    if r.u64(..15) == 0 {
        r.u64(..) as u16
    } else {
        r.u64(..size) as u16
    }
}

/// Writes a descriptor at `at` with `flags` and `next` (random ones where
/// `None`), a random address and length, and behind the address a random
/// request header (or segment list) or, for an indirect descriptor, a
/// table of random descriptors (chained in order where `wild` is false).
fn descriptor(g: &Guest, r: &mut Rng, at: u64, link: Option<(u16, u16)>, wild: bool, nested: bool) {
    let size = u64::from(QSIZE);
    let (f, n) = link.unwrap_or_else(|| (flags(r), next(r, size)));
    let (mut a, mut l) = (addr(r), len(r));
    if f & F_INDIRECT != 0 && !nested && r.u64(..8) != 0 {
        // A plausible table (a multiple of 16 bytes) most of the time.
        let count = 1 + r.u64(..12);
        l = (16 * count) as u32;
        a = AREA + 16 * r.u64(..(MEM - 2 * AREA) / 16);
        for i in 0..count {
            let link = (!wild).then(|| {
                let more = if i + 1 < count { F_NEXT } else { 0 };
                (more | (flags(r) & F_WRITE), (i + 1) as u16)
            });
            descriptor(g, r, a + 16 * i, link, wild, true);
        }
    } else if a.checked_add(64).is_some_and(|end| end <= MEM) {
        let ty = if r.u64(..10) == 0 {
            r.u64(..) as u32
        } else {
            TYPES[r.u64(..TYPES.len() as u64) as usize]
        };
        let sector = if r.u64(..5) == 0 {
            r.u64(..)
        } else {
            r.u64(..4096)
        };
        let mut bytes = [0u8; 64];
        for b in bytes.iter_mut() {
            *b = r.u64(..) as u8;
        }
        bytes[..4].copy_from_slice(&ty.to_le_bytes());
        bytes[8..16].copy_from_slice(&sector.to_le_bytes());
        // A segment for discard and write-zeroes, inside the disk mostly.
        bytes[16..24].copy_from_slice(&r.u64(..4096).to_le_bytes());
        bytes[24..28].copy_from_slice(&(r.u64(..64) as u32).to_le_bytes());
        g.mem.write_slice(&bytes, GuestAddress(a)).expect("header");
    }
    put(g, at, a, l, f, n);
}

fn put(g: &Guest, at: u64, addr: u64, len: u32, flags: u16, next: u16) {
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&addr.to_le_bytes());
    d[8..12].copy_from_slice(&len.to_le_bytes());
    d[12..14].copy_from_slice(&flags.to_le_bytes());
    d[14..16].copy_from_slice(&next.to_le_bytes());
    g.mem.write_slice(&d, GuestAddress(at)).expect("descriptor");
}

/// A request as a driver makes it, from descriptor `first` on: header, 0-3
/// data buffers, status; random type, sector (sometimes past the disk's
/// end) and sizes (sometimes not whole sectors). Its length in descriptors.
fn request(g: &Guest, r: &mut Rng, first: u16, room: u16) -> u16 {
    let base = g.mock.desc_table_addr().0;
    let bufs = (r.u64(..4) as u16).min(room - 2);
    // Mostly reads and writes.
    let ty = match r.u64(..10) {
        0..=3 => 0,
        4..=7 => 1,
        _ => TYPES[r.u64(..TYPES.len() as u64) as usize],
    };
    let hdr = AREA + 64 * r.u64(..(MEM - 2 * AREA) / (1 << 17));
    let mut h = [0u8; 16];
    h[..4].copy_from_slice(&ty.to_le_bytes());
    h[8..16].copy_from_slice(&r.u64(..2048 + 256).to_le_bytes());
    g.mem.write_slice(&h, GuestAddress(hdr)).expect("header");
    put(g, base + 16 * u64::from(first), hdr, 16, F_NEXT, first + 1);
    let write = if ty == 1 || ty == 11 || ty == 13 {
        0
    } else {
        F_WRITE
    };
    for k in 1..=bufs {
        let len = if r.u64(..10) == 0 {
            1 + r.u64(..4096) as u32
        } else {
            512 * (1 + r.u64(..64) as u32)
        };
        let at = AREA + 512 * r.u64(..(MEM - 2 * AREA - (1 << 16)) / 512);
        if ty == 11 || ty == 13 {
            // Segments: sector, sectors, flags.
            let mut seg = [0u8; 16];
            seg[..8].copy_from_slice(&r.u64(..2048 + 64).to_le_bytes());
            seg[8..12].copy_from_slice(&(r.u64(..128) as u32).to_le_bytes());
            seg[12..16].copy_from_slice(&(r.u64(..4) as u32).to_le_bytes());
            g.mem.write_slice(&seg, GuestAddress(at)).expect("segment");
        }
        let i = first + k;
        put(g, base + 16 * u64::from(i), at, len, write | F_NEXT, i + 1);
    }
    let status = first + bufs + 1;
    let at = AREA + r.u64(..MEM - 2 * AREA);
    put(g, base + 16 * u64::from(status), at, 1, F_WRITE, 0);
    bufs + 2
}

/// Fills the descriptor table: wild (any flags, any next index: loops,
/// indices out of range, nested tables), or as chains of 1-5 descriptors
/// in table order whose contents are garbage. The chains' heads.
fn table(g: &Guest, r: &mut Rng, wild: bool) -> Vec<u16> {
    let base = g.mock.desc_table_addr().0;
    if wild {
        for i in 0..QSIZE {
            descriptor(g, r, base + 16 * u64::from(i), None, true, false);
        }
        return (0..QSIZE).collect();
    }
    let mut heads = Vec::new();
    let mut i = 0u16;
    while i < QSIZE {
        heads.push(i);
        if QSIZE - i >= 2 && r.u64(..2) == 0 {
            i += request(g, r, i, QSIZE - i);
            continue;
        }
        let n = (1 + r.u64(..5) as u16).min(QSIZE - i);
        for k in 0..n {
            let last = k + 1 == n;
            let mut f = flags(r) & (F_WRITE | F_INDIRECT);
            if n > 1 {
                // An indirect descriptor must be a chain's only one.
                f &= !F_INDIRECT;
            }
            if !last {
                f |= F_NEXT;
            }
            let link = Some((f, i + k + 1));
            descriptor(g, r, base + 16 * u64::from(i + k), link, false, false);
        }
        i += n;
    }
    heads
}

/// The disks the garbage goes to, by seed: one path; two paths that cut
/// requests at small limits (splits); a path failing a fifth of its I/O
/// beside a good one (failover); 4 KiB blocks (alignment).
fn garbage_disk(seed: u64) -> std::sync::Arc<crate::disk::Disk> {
    match seed % 4 {
        0 => disk(&["null:1M"], &[]),
        1 => disk(
            &[
                "null:1M,name=a,max-transfer=12k,max-segments=3",
                "null:1M,name=b,max-transfer=8k",
            ],
            &[],
        ),
        2 => disk(
            &[
                "null:1M,name=a,fail=ENOLINK,fail-rate=20%",
                "null:1M,name=b",
            ],
            &["--lab", "--policy", "round-robin", "--rr-min-io", "1"],
        ),
        _ => disk(&["null:1M,block-size=4096"], &[]),
    }
}

/// One guest, `rounds` kicks of garbage; the checks after each.
fn serve_garbage(seed: u64, rounds: usize) {
    let d = garbage_disk(seed);
    let g = Guest::new();
    // Half the seeds of each disk hand long bursts over early
    // (`--submit-batch 8`).
    let mut w = g.worker_with_batch(&d, if seed % 8 >= 4 { 8 } else { 0 });
    let mut r = Rng::with_seed(seed);
    // Half the seeds negotiate EVENT_IDX, whose used_event the guest then
    // writes as garbage too.
    let event_idx = seed % 16 >= 8;
    g.vring.set_queue_event_idx(event_idx);
    let avail = g.mock.avail_addr().0;
    let used_event = avail + 4 + 2 * u64::from(QSIZE);
    let mut avail_idx = 0u16;
    for round in 0..rounds {
        let wild = r.u64(..8) == 0;
        let heads = table(&g, &mut r, wild);
        // Mostly the chains' heads, sometimes an index far ahead of what
        // the ring can hold or a head out of range.
        let offered = if wild && r.u64(..8) == 0 {
            r.u64(..) as u16
        } else {
            1 + r.u64(..heads.len() as u64) as u16
        };
        let used_before = g.used_idx();
        let mut made = Vec::new();
        for k in 0..offered.min(QSIZE) {
            let slot = avail_idx.wrapping_add(k) % QSIZE;
            let head = if wild && r.u64(..10) == 0 {
                r.u64(..) as u16
            } else {
                heads[usize::from(k) % heads.len()]
            };
            made.push(u32::from(head));
            g.mem
                .write_obj(head.to_le(), GuestAddress(avail + 4 + 2 * u64::from(slot)))
                .expect("avail entry");
        }
        avail_idx = avail_idx.wrapping_add(offered);
        g.mem
            .write_obj(avail_idx.to_le(), GuestAddress(avail + 2))
            .expect("avail idx");
        if event_idx {
            let e = if r.u64(..2) == 0 {
                used_before.wrapping_add(r.u64(..u64::from(offered.min(QSIZE)) + 1) as u16)
            } else {
                r.u64(..) as u16
            };
            g.mem
                .write_obj(e.to_le(), GuestAddress(used_event))
                .expect("used_event");
        }
        w.process_queue(&g.vring, true);
        // Failovers may go through the completion queue.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while in_flight(&w) > 0 && std::time::Instant::now() < deadline {
            w.process_completions(&g.vring);
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        w.process_completions(&g.vring);
        if w.broken {
            // The ring is the frontend's to reset; what was in flight
            // still completed.
            assert_eq!(in_flight(&w), 0, "seed {seed} round {round}");
            return;
        }
        assert_eq!(
            g.used_idx(),
            avail_idx,
            "seed {seed} round {round}: every head made available got its used entry"
        );
        let mut used: Vec<u32> = (0..offered)
            .map(|k| {
                let slot = used_before.wrapping_add(k) % QSIZE;
                let at = g.used_addr.0 + 4 + 8 * u64::from(slot);
                g.mem.read_obj::<u32>(GuestAddress(at)).expect("used id")
            })
            .collect();
        made.sort_unstable();
        used.sort_unstable();
        assert_eq!(
            used, made,
            "seed {seed} round {round}: the used entries' heads"
        );
        assert_eq!(in_flight(&w), 0, "seed {seed} round {round}");
    }
}

#[test]
fn garbage_from_the_guest_breaks_nothing_and_loses_nothing() {
    for seed in 0..1000 {
        serve_garbage(seed, 12);
    }
}
