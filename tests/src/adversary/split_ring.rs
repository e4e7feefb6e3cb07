//! A split virtqueue laid out by hand in guest memory (virtio 1.2 §2.7):
//! the descriptor table, the available ring (driver to device) and the used
//! ring (device to driver), written and read the way a guest driver does.

use super::guest_memory::GuestRam;

/// Offsets of the three parts from a queue's base (room for 1024 entries).
pub const DESC_TABLE: u64 = 0x0;
pub const AVAIL_RING: u64 = 0x4000;
pub const USED_RING: u64 = 0x8000;
/// Guest memory taken by one queue's rings.
pub const RING_SPAN: u64 = 0x1_0000;

pub const F_NEXT: u16 = 1;
pub const F_WRITE: u16 = 2;
pub const F_INDIRECT: u16 = 4;

/// One descriptor as the device reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    pub flags: u16,
    pub next: u16,
}

impl Desc {
    /// A device-readable buffer.
    pub fn r(addr: u64, len: u32) -> Desc {
        Desc {
            addr,
            len,
            flags: 0,
            next: 0,
        }
    }

    /// A device-writable buffer.
    pub fn w(addr: u64, len: u32) -> Desc {
        Desc {
            addr,
            len,
            flags: F_WRITE,
            next: 0,
        }
    }

    /// A descriptor pointing at an indirect table of `len` bytes.
    pub fn indirect(addr: u64, len: u32) -> Desc {
        Desc {
            addr,
            len,
            flags: F_INDIRECT,
            next: 0,
        }
    }

    /// This descriptor continued by descriptor `next`.
    pub fn then(self, next: u16) -> Desc {
        Desc {
            flags: self.flags | F_NEXT,
            next,
            ..self
        }
    }

    pub fn bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..14].copy_from_slice(&self.flags.to_le_bytes());
        b[14..16].copy_from_slice(&self.next.to_le_bytes());
        b
    }
}

/// A ring of `size` entries at guest address `base`.
#[derive(Clone, Copy, Debug)]
pub struct SplitRing {
    pub size: u16,
    pub base: u64,
}

impl SplitRing {
    pub fn write_desc(&self, ram: &GuestRam, index: u16, d: Desc) {
        ram.write(self.base + DESC_TABLE + 16 * u64::from(index), &d.bytes());
    }

    /// Writes entry `idx` (a free-running index) of the available ring.
    pub fn set_avail_entry(&self, ram: &GuestRam, idx: u16, head: u16) {
        let slot = u64::from(idx % self.size);
        ram.write_u16(self.base + AVAIL_RING + 4 + 2 * slot, head);
    }

    /// Makes the available entries before `idx` visible to the device.
    pub fn publish_avail(&self, ram: &GuestRam, idx: u16) {
        ram.store_u16(self.base + AVAIL_RING + 2, idx);
    }

    pub fn used_idx(&self, ram: &GuestRam) -> u16 {
        ram.load_u16(self.base + USED_RING + 2)
    }

    /// Entry `idx` (free-running) of the used ring: (id, len).
    pub fn used_entry(&self, ram: &GuestRam, idx: u16) -> (u32, u32) {
        let at = self.base + USED_RING + 4 + 8 * u64::from(idx % self.size);
        (ram.read_u32(at), ram.read_u32(at + 4))
    }

    /// With EVENT_IDX: where the device says it has read the available ring up to.
    pub fn avail_event(&self, ram: &GuestRam) -> u16 {
        ram.load_u16(self.base + USED_RING + 4 + 8 * u64::from(self.size))
    }

    /// vring addresses for SET_VRING_ADDR, in the frontend's address space.
    pub fn addrs(&self, qva_base: u64) -> (u64, u64, u64) {
        let at = qva_base + self.base;
        (at + DESC_TABLE, at + USED_RING, at + AVAIL_RING)
    }

    /// Zeroes the three parts (a fresh ring for a restarted queue).
    pub fn clear(&self, ram: &GuestRam) {
        ram.fill(self.base, RING_SPAN as usize, 0);
    }
}
