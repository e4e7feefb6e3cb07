//! virtio-blk request parsing: one descriptor chain into a checked
//! [`Request`] whose data is a list of host iovecs straight into guest memory.
//!
//! Nothing the guest writes in a chain can make this panic or point outside
//! guest memory or the disk: every check fails into a [`Rejected`] that says
//! which status (if any) to report.

use virtio_bindings::virtio_blk::*;
use virtio_queue::desc::split::Descriptor;
use vm_memory::{Bytes, GuestAddress, GuestMemory, GuestMemoryMmap, Permissions};

use crate::virtio::{Limits, MAX_DISCARD_SEG, MAX_IOVECS, SECTOR_SHIFT};
use crate::vring::GuestMap;

pub const STATUS_OK: u8 = VIRTIO_BLK_S_OK as u8;
pub const STATUS_IOERR: u8 = VIRTIO_BLK_S_IOERR as u8;
pub const STATUS_UNSUPP: u8 = VIRTIO_BLK_S_UNSUPP as u8;

const HEADER_LEN: u64 = 16;
const SEGMENT_LEN: u64 = 16;

/// What the request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
    Flush,
    GetId,
    Discard,
    WriteZeroes,
}

/// One range of a discard or write-zeroes request, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub offset: u64,
    pub len: u64,
    pub unmap: bool,
}

/// A checked request. `iovecs` are host addresses inside the guest memory
/// the caller passed to [`Parser::parse`]; keep that memory alive while
/// they are in use.
#[derive(Debug)]
pub struct Request {
    pub kind: Kind,
    /// Byte offset on the disk (reads and writes).
    pub offset: u64,
    /// Data length in bytes (reads and writes).
    pub len: u64,
    pub iovecs: Vec<libc::iovec>,
    pub segments: Vec<Segment>,
    /// Writable data area (GET_ID).
    pub id_area: Vec<(GuestAddress, u64)>,
    pub status_addr: GuestAddress,
}

// SAFETY: the iovecs are plain addresses into guest memory that the worker
// keeps mapped (it holds an Arc of the memory) for as long as they are used.
unsafe impl Send for Request {}

/// A chain that cannot be served.
#[derive(Debug, PartialEq, Eq)]
pub enum Rejected {
    /// No writable status byte: complete the chain with used length 0.
    NoStatus { why: &'static str },
    /// Report `status` at `status_addr`.
    Status {
        status_addr: GuestAddress,
        status: u8,
        why: &'static str,
    },
}

/// Reusable scratch space: one per worker, so parsing allocates only the
/// request's own vectors (iovec arrays come from a pool when recycled).
#[derive(Debug, Default)]
pub struct Parser {
    readable: Vec<(GuestAddress, u64)>,
    writable: Vec<(GuestAddress, u64)>,
    /// Iovec arrays of finished requests, for the next ones.
    spare: mpath_io::IovecPool,
}

/// `len` bytes starting `skip` bytes into `ranges`, as sub-ranges.
fn sub_ranges(
    ranges: &[(GuestAddress, u64)],
    mut skip: u64,
    mut len: u64,
) -> impl Iterator<Item = (GuestAddress, u64)> + '_ {
    ranges.iter().filter_map(move |&(addr, rlen)| {
        if len == 0 {
            return None;
        }
        if skip >= rlen {
            skip -= rlen;
            return None;
        }
        let take = (rlen - skip).min(len);
        let r = (GuestAddress(addr.0.wrapping_add(skip)), take);
        len -= take;
        skip = 0;
        Some(r)
    })
}

/// Guest memory as the parser reads it: through the host addresses a
/// [`GuestMap`] resolved once per memory table where the caller has one for
/// this very table (no lookup per access), through vm-memory otherwise
/// (and for ranges that cross a region boundary).
#[derive(Clone, Copy)]
struct Access<'a> {
    mem: &'a GuestMemoryMmap,
    map: Option<&'a GuestMap>,
}

impl<'a> Access<'a> {
    fn new(mem: &'a GuestMemoryMmap, map: Option<&'a GuestMap>) -> Self {
        Self {
            mem,
            map: map.filter(|m| m.is(mem)),
        }
    }

    fn read(&self, ranges: &[(GuestAddress, u64)], skip: u64, buf: &mut [u8]) -> bool {
        // The common case: all of it in the first range (a request header
        // in its own descriptor, or in front of the data).
        if let (0, Some(&(addr, len)), Some(map)) = (skip, ranges.first(), self.map) {
            if len >= buf.len() as u64 && map.read(addr.0, buf) {
                return true;
            }
        }
        let mut done = 0usize;
        for (addr, len) in sub_ranges(ranges, skip, buf.len() as u64) {
            let end = done + len as usize;
            let part = &mut buf[done..end];
            let fast = self.map.is_some_and(|m| m.read(addr.0, part));
            if !fast && self.mem.read_slice(part, addr).is_err() {
                return false;
            }
            done = end;
        }
        done == buf.len()
    }

    fn writable_byte(&self, addr: GuestAddress) -> bool {
        self.map.is_some_and(|m| m.host(addr.0, 1).is_some())
            || self.mem.check_range(addr, 1, Permissions::Write)
    }

    /// Host iovecs for guest ranges, at most `seg_max` of them (counted
    /// here: no separate pass over the ranges); an error if there are more
    /// or if any byte is outside guest memory.
    fn iovecs(
        &self,
        ranges: impl Iterator<Item = (GuestAddress, u64)>,
        seg_max: u32,
        access: Permissions,
        mut out: Vec<libc::iovec>,
    ) -> Result<Vec<libc::iovec>, &'static str> {
        const OUTSIDE: &str = "data buffer outside guest memory";
        out.reserve(4);
        for (n, (addr, len)) in ranges.enumerate() {
            if n >= seg_max as usize {
                return Err("more segments than seg_max");
            }
            if len == 0 {
                continue;
            }
            if let Some(host) = self.map.and_then(|m| m.host(addr.0, len)) {
                out.push(libc::iovec {
                    iov_base: host as *mut libc::c_void,
                    iov_len: len as usize,
                });
            } else {
                // get_slices fails on any byte outside guest memory.
                let slices = self
                    .mem
                    .get_slices(addr, len as usize, access)
                    .map_err(|_| OUTSIDE)?;
                for slice in slices {
                    let slice = slice.map_err(|_| OUTSIDE)?;
                    out.push(libc::iovec {
                        iov_base: slice.ptr_guard_mut().as_ptr().cast(),
                        iov_len: slice.len(),
                    });
                    if out.len() > MAX_IOVECS {
                        return Err(OUTSIDE);
                    }
                }
            }
            if out.len() > MAX_IOVECS {
                return Err(OUTSIDE);
            }
        }
        Ok(out)
    }
}

impl Parser {
    /// Gives an iovec array back for a later request (its contents are
    /// dropped; the allocation is kept).
    pub fn recycle(&mut self, v: Vec<libc::iovec>) {
        self.spare.put(v);
    }

    /// Parses and checks one chain against the device's limits.
    pub fn parse(
        &mut self,
        chain: impl Iterator<Item = Descriptor>,
        mem: &GuestMemoryMmap,
        limits: &Limits,
    ) -> Result<Request, Rejected> {
        self.parse_mapped(chain, mem, None, limits)
    }

    /// As [`Parser::parse`], reading header and segments and resolving data
    /// buffers through `map` when it is of `mem`'s table (the worker's ring
    /// view has one): no region lookup per access.
    pub fn parse_mapped(
        &mut self,
        chain: impl Iterator<Item = Descriptor>,
        mem: &GuestMemoryMmap,
        map: Option<&GuestMap>,
        limits: &Limits,
    ) -> Result<Request, Rejected> {
        let guest = Access::new(mem, map);
        self.readable.clear();
        self.writable.clear();
        let mut order_ok = true;
        // Lengths and the status descriptor are gathered in the one pass
        // over the chain (u32 lengths: no u64 sum of a chain overflows).
        let (mut readable_len, mut writable_len) = (0u64, 0u64);
        let mut status = None;
        for d in chain {
            let r = (d.addr(), u64::from(d.len()));
            if d.is_write_only() {
                writable_len += r.1;
                if r.1 > 0 {
                    status = Some(r);
                }
                self.writable.push(r);
            } else {
                if !self.writable.is_empty() {
                    order_ok = false;
                }
                readable_len += r.1;
                self.readable.push(r);
            }
        }
        // The status byte: the last byte of the last non-empty writable descriptor.
        let Some((saddr, slen)) = status else {
            return Err(Rejected::NoStatus {
                why: "no writable status descriptor",
            });
        };
        let Some(status_addr) = saddr.0.checked_add(slen - 1).map(GuestAddress) else {
            return Err(Rejected::NoStatus {
                why: "status address overflows",
            });
        };
        if !guest.writable_byte(status_addr) {
            return Err(Rejected::NoStatus {
                why: "status byte outside guest memory",
            });
        }
        let bad = |status: u8, why: &'static str| Rejected::Status {
            status_addr,
            status,
            why,
        };
        if !order_ok {
            return Err(bad(
                STATUS_IOERR,
                "readable descriptor after a writable one",
            ));
        }
        let mut header = [0u8; HEADER_LEN as usize];
        if readable_len < HEADER_LEN || !guest.read(&self.readable, 0, &mut header) {
            return Err(bad(STATUS_IOERR, "missing or unreadable request header"));
        }
        let rtype = u32::from_le_bytes(header[0..4].try_into().unwrap_or_default());
        let sector = u64::from_le_bytes(header[8..16].try_into().unwrap_or_default());
        let out_len = readable_len - HEADER_LEN;
        // Everything writable except the status byte.
        let in_len = writable_len - 1;
        let mut req = Request {
            kind: Kind::Flush,
            offset: 0,
            len: 0,
            iovecs: Vec::new(),
            segments: Vec::new(),
            id_area: Vec::new(),
            status_addr,
        };
        match rtype {
            VIRTIO_BLK_T_IN | VIRTIO_BLK_T_OUT => {
                let write = rtype == VIRTIO_BLK_T_OUT;
                let (len, other, ranges, skip) = if write {
                    (out_len, in_len, &self.readable, HEADER_LEN)
                } else {
                    (in_len, out_len, &self.writable, 0)
                };
                if other != 0 {
                    return Err(bad(STATUS_IOERR, "data descriptor in the wrong direction"));
                }
                if write && limits.read_only {
                    return Err(bad(STATUS_IOERR, "write to a read-only disk"));
                }
                check_range(limits, sector, len).map_err(|why| bad(STATUS_IOERR, why))?;
                if len > limits.max_transfer() {
                    return Err(bad(STATUS_IOERR, "request larger than the device limit"));
                }
                // No per-descriptor size_max check: clients such as libblkio
                // merge adjacent buffers into one descriptor, and the total
                // is bounded above.
                let access = if write {
                    Permissions::Read
                } else {
                    Permissions::Write
                };
                let out = self.spare.take();
                req.iovecs = guest
                    .iovecs(sub_ranges(ranges, skip, len), limits.seg_max, access, out)
                    .map_err(|why| bad(STATUS_IOERR, why))?;
                req.kind = if write { Kind::Write } else { Kind::Read };
                req.offset = sector << SECTOR_SHIFT;
                req.len = len;
            }
            VIRTIO_BLK_T_FLUSH => {
                if out_len != 0 || in_len != 0 {
                    return Err(bad(STATUS_IOERR, "flush with a data buffer"));
                }
                req.kind = Kind::Flush;
            }
            VIRTIO_BLK_T_GET_ID => {
                if out_len != 0 || in_len == 0 {
                    return Err(bad(STATUS_IOERR, "get-id without a writable id buffer"));
                }
                req.kind = Kind::GetId;
                req.id_area = sub_ranges(
                    &self.writable,
                    0,
                    in_len.min(u64::from(VIRTIO_BLK_ID_BYTES)),
                )
                .collect();
            }
            VIRTIO_BLK_T_DISCARD | VIRTIO_BLK_T_WRITE_ZEROES => {
                let discard = rtype == VIRTIO_BLK_T_DISCARD;
                if (discard && !limits.discard) || (!discard && !limits.write_zeroes) {
                    return Err(bad(STATUS_UNSUPP, "discard or write-zeroes not offered"));
                }
                if limits.read_only {
                    return Err(bad(
                        STATUS_IOERR,
                        "discard or write-zeroes on a read-only disk",
                    ));
                }
                if in_len != 0 {
                    return Err(bad(STATUS_IOERR, "data descriptor in the wrong direction"));
                }
                let n = out_len / SEGMENT_LEN;
                if !out_len.is_multiple_of(SEGMENT_LEN) || n == 0 || n > u64::from(MAX_DISCARD_SEG)
                {
                    return Err(bad(STATUS_IOERR, "bad discard segment list"));
                }
                for i in 0..n {
                    let mut s = [0u8; SEGMENT_LEN as usize];
                    if !guest.read(&self.readable, HEADER_LEN + i * SEGMENT_LEN, &mut s) {
                        return Err(bad(STATUS_IOERR, "unreadable discard segment"));
                    }
                    let seg_sector = u64::from_le_bytes(s[0..8].try_into().unwrap_or_default());
                    let sectors = u32::from_le_bytes(s[8..12].try_into().unwrap_or_default());
                    let flags = u32::from_le_bytes(s[12..16].try_into().unwrap_or_default());
                    let unmap = flags & VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP != 0;
                    if flags & !VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP != 0 || (discard && unmap) {
                        return Err(bad(STATUS_UNSUPP, "unsupported discard segment flags"));
                    }
                    let max = if discard {
                        limits.max_discard_sectors
                    } else {
                        limits.max_write_zeroes_sectors
                    };
                    if sectors > max {
                        return Err(bad(STATUS_IOERR, "discard segment over the sector limit"));
                    }
                    let len = u64::from(sectors) << SECTOR_SHIFT;
                    check_range(limits, seg_sector, len).map_err(|why| bad(STATUS_IOERR, why))?;
                    req.segments.push(Segment {
                        offset: seg_sector << SECTOR_SHIFT,
                        len,
                        unmap,
                    });
                }
                req.kind = if discard {
                    Kind::Discard
                } else {
                    Kind::WriteZeroes
                };
            }
            _ => return Err(bad(STATUS_UNSUPP, "unknown request type")),
        }
        Ok(req)
    }
}

/// Checks that `len` bytes at `sector` are block aligned and inside the disk.
fn check_range(limits: &Limits, sector: u64, len: u64) -> Result<(), &'static str> {
    let bs = u64::from(limits.block_size);
    let bs_sectors = bs >> SECTOR_SHIFT;
    // Masks for the power-of-two sizes every device has: two divisions
    // per request otherwise.
    let aligned = if bs.is_power_of_two() && bs_sectors > 0 {
        (sector & (bs_sectors - 1)) | (len & (bs - 1)) == 0
    } else {
        sector.is_multiple_of(bs_sectors) && len.is_multiple_of(bs)
    };
    if !aligned {
        return Err("not aligned to the block size");
    }
    let end = sector
        .checked_add(len >> SECTOR_SHIFT)
        .ok_or("sector range overflows")?;
    if end > limits.capacity_sectors {
        return Err("sector range beyond the end of the disk");
    }
    Ok(())
}
