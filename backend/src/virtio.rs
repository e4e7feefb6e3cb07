//! What the guest's virtio-blk device offers: feature bits, the config
//! space, and the limits requests are checked against.

use virtio_bindings::virtio_blk::*;
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

use crate::disk::Disk;

pub const SECTOR_SHIFT: u32 = 9;
pub const SECTOR_SIZE: u64 = 1 << SECTOR_SHIFT;
/// Largest data segment (one descriptor) the guest may send. File paths
/// have no per-segment limit; this bounds what one descriptor may pin, and
/// keeps `size_max * seg_max` within what clients compute in 32 bits.
pub const SIZE_MAX: u32 = 1 << 20;
/// Largest data transfer of one request (keeps the used length in 32 bits).
pub const MAX_TRANSFER: u64 = 1 << 30;
/// Largest discard / write-zeroes request, in sectors (a 32-bit byte count fits).
pub const MAX_DISCARD_SECTORS: u32 = (1 << 22) - 8;
/// Segments per discard / write-zeroes request.
pub const MAX_DISCARD_SEG: u32 = 32;
/// Host iovecs per request (IOV_MAX).
pub const MAX_IOVECS: usize = 1024;

/// The device's limits, derived once from the disk and the queue size.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub capacity_sectors: u64,
    pub block_size: u32,
    pub seg_max: u32,
    pub read_only: bool,
    pub discard: bool,
    pub write_zeroes: bool,
    /// Largest discard / write-zeroes segment in sectors.
    pub max_discard_sectors: u32,
    pub max_write_zeroes_sectors: u32,
}

impl Limits {
    pub fn new(disk: &Disk, queue_size: u16) -> Self {
        Self {
            capacity_sectors: disk.capacity_bytes() >> SECTOR_SHIFT,
            block_size: disk.block_size,
            // Two descriptors carry the header and the status.
            seg_max: u32::from(queue_size).saturating_sub(2).max(1),
            read_only: disk.read_only,
            discard: disk.discard,
            write_zeroes: disk.write_zeroes,
            max_discard_sectors: sectors_cap(disk.max_discard_bytes, disk.block_size),
            max_write_zeroes_sectors: sectors_cap(disk.max_write_zeroes_bytes, disk.block_size),
        }
    }

    /// Largest data transfer of one request, in bytes.
    pub fn max_transfer(&self) -> u64 {
        (u64::from(self.seg_max) * u64::from(SIZE_MAX)).min(MAX_TRANSFER)
    }
}

/// A device's byte limit as whole blocks in sectors, at most MAX_DISCARD_SECTORS.
fn sectors_cap(bytes: u64, block_size: u32) -> u32 {
    let bs = u64::from(block_size.max(512));
    let cap = u64::from(MAX_DISCARD_SECTORS) << SECTOR_SHIFT;
    let bytes = if bytes == 0 { cap } else { bytes.min(cap) };
    ((bytes - bytes % bs) >> SECTOR_SHIFT) as u32
}

pub fn features(limits: &Limits, num_queues: u16) -> u64 {
    let mut f = 1u64 << VIRTIO_F_VERSION_1
        | 1 << VIRTIO_RING_F_EVENT_IDX
        | 1 << VIRTIO_RING_F_INDIRECT_DESC
        | 1 << VIRTIO_BLK_F_SIZE_MAX
        | 1 << VIRTIO_BLK_F_SEG_MAX
        | 1 << VIRTIO_BLK_F_BLK_SIZE
        | 1 << VIRTIO_BLK_F_FLUSH
        | 1 << VIRTIO_BLK_F_TOPOLOGY
        | vhost::vhost_user::message::VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
    if num_queues > 1 {
        f |= 1 << VIRTIO_BLK_F_MQ;
    }
    if limits.read_only {
        f |= 1 << VIRTIO_BLK_F_RO;
    }
    if limits.discard {
        f |= 1 << VIRTIO_BLK_F_DISCARD;
    }
    if limits.write_zeroes {
        f |= 1 << VIRTIO_BLK_F_WRITE_ZEROES;
    }
    f
}

/// `struct virtio_blk_config` (virtio 1.2 §5.2.4), little endian, up to and
/// including `write_zeroes_may_unmap` and its padding: 60 bytes.
pub fn config_space(limits: &Limits, num_queues: u16) -> Vec<u8> {
    let mut c = vec![0u8; 60];
    let put32 =
        |c: &mut Vec<u8>, off: usize, v: u32| c[off..off + 4].copy_from_slice(&v.to_le_bytes());
    c[0..8].copy_from_slice(&limits.capacity_sectors.to_le_bytes());
    put32(&mut c, 8, SIZE_MAX);
    put32(&mut c, 12, limits.seg_max);
    // geometry (16..20) left zero.
    put32(&mut c, 20, limits.block_size);
    // topology: physical_block_exp, alignment_offset, min_io_size (in logical blocks), opt_io_size.
    c[24] = 0;
    c[25] = 0;
    c[26..28].copy_from_slice(&1u16.to_le_bytes());
    put32(&mut c, 28, 0);
    c[32] = 1; // writeback: the guest must flush.
    c[34..36].copy_from_slice(&num_queues.to_le_bytes());
    let lbs_sectors = limits.block_size >> SECTOR_SHIFT;
    if limits.discard {
        put32(&mut c, 36, limits.max_discard_sectors);
        put32(&mut c, 40, MAX_DISCARD_SEG);
        put32(&mut c, 44, lbs_sectors);
    }
    if limits.write_zeroes {
        put32(&mut c, 48, limits.max_write_zeroes_sectors);
        put32(&mut c, 52, MAX_DISCARD_SEG);
        c[56] = u8::from(limits.discard);
    }
    c
}

/// The JSON capability document of `--print-capabilities`.
pub fn capabilities() -> &'static str {
    "{\n  \"type\": \"block\",\n  \"features\": [\n    \"read-only-config\",\n    \"blk-file\"\n  ]\n}"
}
