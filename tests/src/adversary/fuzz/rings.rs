//! Random ring contents, then a kick: the worker reads descriptor chains
//! (direct, indirect, looping, out of range) with request headers of every
//! type, and reads and writes guest memory where they point.

use std::os::unix::fs::FileExt;

use super::session::Session;

/// Request types: in, out, flush, get-id, discard, write-zeroes, unknown.
const TYPES: [u32; 8] = [0, 1, 4, 8, 11, 13, 2, 0xdead];
const NEXT: u16 = 1;
const WRITE: u16 = 2;
const INDIRECT: u16 = 4;

impl Session<'_> {
    /// Writes `bytes` at guest-physical `gpa`, where the session's table
    /// has memory there (else nothing).
    fn poke(&self, gpa: u64, bytes: &[u8]) {
        if let Some(r) = self
            .regions
            .iter()
            .find(|r| gpa >= r.gpa && gpa.saturating_add(bytes.len() as u64) <= r.gpa + r.size)
        {
            let _ = r.file.write_at(bytes, gpa - r.gpa);
        }
    }

    /// A guest address: mostly inside the table, sometimes anywhere.
    fn some_gpa(&mut self, len: u64) -> u64 {
        if self.regions.is_empty() || self.rng.chance(5) {
            return self.rng.edgy_u64();
        }
        let r = &self.regions[self.rng.below(self.regions.len() as u64) as usize];
        let (gpa, size) = (r.gpa, r.size);
        gpa + self.rng.below(size.saturating_sub(len).max(1)) / 512 * 512
    }

    fn desc(&mut self, addr: u64, len: u32, flags: u16, next: u16) -> [u8; 16] {
        let mut d = [0u8; 16];
        d[0..8].copy_from_slice(&addr.to_le_bytes());
        d[8..12].copy_from_slice(&len.to_le_bytes());
        d[12..14].copy_from_slice(&flags.to_le_bytes());
        d[14..16].copy_from_slice(&next.to_le_bytes());
        d
    }

    /// A request header (type, reserved, sector) at a fresh guest address.
    fn header(&mut self) -> u64 {
        let at = self.some_gpa(16);
        let t = self.rng.pick(&TYPES);
        // Mostly inside the 16 MiB disk.
        let sector = if self.rng.chance(85) {
            self.rng.below(32 * 1024)
        } else {
            self.rng.edgy_u64()
        };
        let mut h = t.to_le_bytes().to_vec();
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&sector.to_le_bytes());
        self.poke(at, &h);
        at
    }

    /// Lays out up to 8 chains on a random started queue, makes them
    /// available (or publishes a wild index) and kicks.
    pub(super) fn scribble_and_kick(&mut self) {
        let n = self.rings.len() as u64;
        let q = self.rng.below(n) as usize;
        let Some(mut ring) = self.rings[q] else {
            return;
        };
        let size = ring.size;
        let chains = self.rng.range(1, 8) as u16;
        for _ in 0..chains {
            let head = self.rng.below(u64::from(size)) as u16;
            let n1 = self.rng.below(u64::from(size)) as u16;
            let n2 = self.rng.below(u64::from(size)) as u16;
            let hdr = self.header();
            let data_len = self
                .rng
                .pick(&[0u32, 1, 512, 4096, 8192, 65536, 0x1000_0000]);
            let data = self.some_gpa(u64::from(data_len).min(1 << 20));
            let status = self.some_gpa(1);
            let dflags = self.rng.pick(&[WRITE, 0, WRITE | INDIRECT, NEXT | WRITE]);
            let mut descs = [
                (head, self.desc(hdr, 16, NEXT, n1)),
                (n1, self.desc(data, data_len, dflags | NEXT, n2)),
                (n2, self.desc(status, 1, WRITE, 0)),
            ];
            if self.rng.chance(20) {
                // One descriptor of random bytes.
                let i = self.rng.below(3) as usize;
                let mut raw = [0u8; 16];
                raw[..8].copy_from_slice(&self.rng.next_u64().to_le_bytes());
                raw[8..].copy_from_slice(&self.rng.next_u64().to_le_bytes());
                descs[i].1 = raw;
            }
            if self.rng.chance(10) {
                // The whole chain through an indirect table elsewhere.
                let table = self.some_gpa(48) / 16 * 16;
                let inner = [
                    self.desc(hdr, 16, NEXT, 1),
                    self.desc(data, data_len, dflags | NEXT, 2),
                    self.desc(status, 1, WRITE, 0),
                ];
                self.poke(table, &inner.concat());
                descs[0].1 = self.desc(table, 48, INDIRECT, 0);
            }
            for (i, d) in descs {
                self.poke(ring.desc + 16 * u64::from(i), &d);
            }
            let slot = u64::from(ring.avail_idx % size);
            let entry = if self.rng.chance(3) {
                self.rng.next_u32() as u16
            } else {
                head
            };
            self.poke(ring.avail + 4 + 2 * slot, &entry.to_le_bytes());
            ring.avail_idx = ring.avail_idx.wrapping_add(1);
        }
        let idx = if self.rng.chance(5) {
            self.rng.next_u32() as u16
        } else {
            ring.avail_idx
        };
        self.poke(ring.avail + 2, &idx.to_le_bytes());
        self.rings[q] = Some(ring);
        if let Some(k) = &self.kicks[q] {
            let _ = rustix::io::write(k, &1u64.to_ne_bytes());
        }
    }
}
