//! NVMe command encoding: `struct nvme_uring_cmd` / `struct nvme_passthru_cmd`
//! (the same 72-byte little-endian layout, `include/uapi/linux/nvme_ioctl.h`)
//! and the NVM command set commands this driver sends.

/// `_IOWR('N', 0x80, struct nvme_uring_cmd)`: one data buffer (`addr`, `data_len` bytes).
pub const NVME_URING_CMD_IO: u32 = 0xC048_4E80;
/// `_IOWR('N', 0x81, struct nvme_uring_cmd)`: `addr` = iovec array, `data_len` = count.
pub const NVME_URING_CMD_IO_VEC: u32 = 0xC048_4E81;
/// `_IO('N', 0x40)`: the namespace id of a namespace node.
pub const NVME_IOCTL_ID: libc::c_ulong = 0x4E40;
/// `_IOWR('N', 0x41, struct nvme_passthru_cmd)`: a synchronous admin command.
pub const NVME_IOCTL_ADMIN_CMD: libc::c_ulong = 0xC048_4E41;

/// NVM command set opcodes.
pub mod opcode {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;
}

/// Admin opcodes.
pub mod admin {
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const IDENTIFY: u8 = 0x06;
}

/// Read/Write CDW12 bit 30: Force Unit Access.
pub const CDW12_FUA: u32 = 1 << 30;
/// Write Zeroes CDW12 bit 25: deallocate.
pub const CDW12_DEAC: u32 = 1 << 25;
/// Dataset Management CDW11 bit 2: attribute deallocate.
pub const DSM_AD: u32 = 1 << 2;
/// One Dataset Management range: `{cattr u32, nlb u32, slba u64}`.
pub const DSM_RANGE_LEN: usize = 16;
/// Logical blocks per Read/Write/Write Zeroes command (NLB is 16 bits, 0-based).
pub const MAX_NLB: u64 = 1 << 16;

/// The fields of `struct nvme_uring_cmd` (and `nvme_passthru_cmd`, whose
/// last word is the `result` the ioctl writes back).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmeCmd {
    pub opcode: u8,
    pub flags: u8,
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub metadata: u64,
    pub addr: u64,
    pub metadata_len: u32,
    pub data_len: u32,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
    pub timeout_ms: u32,
}

/// Size of the command structure inside the 80-byte `UringCmd80` area.
pub const NVME_CMD_LEN: usize = 72;

impl NvmeCmd {
    /// The 72-byte structure at the start of the 80-byte `UringCmd80` area.
    pub fn to_uring_cmd(&self) -> [u8; 80] {
        let mut b = [0u8; 80];
        self.write(&mut b[..NVME_CMD_LEN]);
        b
    }

    /// The 72-byte structure as `NVME_IOCTL_ADMIN_CMD` takes it.
    pub fn to_passthru(&self) -> [u8; NVME_CMD_LEN] {
        let mut b = [0u8; NVME_CMD_LEN];
        self.write(&mut b);
        b
    }

    fn write(&self, b: &mut [u8]) {
        let put32 =
            |b: &mut [u8], off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_le_bytes());
        let put64 =
            |b: &mut [u8], off: usize, v: u64| b[off..off + 8].copy_from_slice(&v.to_le_bytes());
        b[0] = self.opcode;
        b[1] = self.flags;
        // rsvd1 u16 @2 stays zero.
        put32(b, 4, self.nsid);
        put32(b, 8, self.cdw2);
        put32(b, 12, self.cdw3);
        put64(b, 16, self.metadata);
        put64(b, 24, self.addr);
        put32(b, 32, self.metadata_len);
        put32(b, 36, self.data_len);
        put32(b, 40, self.cdw10);
        put32(b, 44, self.cdw11);
        put32(b, 48, self.cdw12);
        put32(b, 52, self.cdw13);
        put32(b, 56, self.cdw14);
        put32(b, 60, self.cdw15);
        put32(b, 64, self.timeout_ms);
        // rsvd2 / result u32 @68 stays zero.
    }

    /// Read (`write == false`) or Write of `nlb` blocks at `slba`; the data
    /// buffer (`addr`, `data_len`) is filled in by the caller.
    pub fn rw(write: bool, nsid: u32, slba: u64, nlb: u64, fua: bool) -> Self {
        debug_assert!((1..=MAX_NLB).contains(&nlb));
        let mut cdw12 = (nlb - 1) as u32;
        if fua {
            cdw12 |= CDW12_FUA;
        }
        Self {
            opcode: if write { opcode::WRITE } else { opcode::READ },
            nsid,
            cdw10: slba as u32,
            cdw11: (slba >> 32) as u32,
            cdw12,
            ..Self::default()
        }
    }

    pub fn flush(nsid: u32) -> Self {
        Self {
            opcode: opcode::FLUSH,
            nsid,
            ..Self::default()
        }
    }

    /// Write Zeroes of `nlb` blocks at `slba`; `deallocate` sets DEAC.
    pub fn write_zeroes(nsid: u32, slba: u64, nlb: u64, deallocate: bool) -> Self {
        debug_assert!((1..=MAX_NLB).contains(&nlb));
        let mut cdw12 = (nlb - 1) as u32;
        if deallocate {
            cdw12 |= CDW12_DEAC;
        }
        Self {
            opcode: opcode::WRITE_ZEROES,
            nsid,
            cdw10: slba as u32,
            cdw11: (slba >> 32) as u32,
            cdw12,
            ..Self::default()
        }
    }

    /// Dataset Management (deallocate) of one range, read from the 16 bytes at `ranges`.
    pub fn discard(nsid: u32, ranges: u64) -> Self {
        Self {
            opcode: opcode::DATASET_MANAGEMENT,
            nsid,
            addr: ranges,
            data_len: DSM_RANGE_LEN as u32,
            // Number of ranges, 0-based.
            cdw10: 0,
            cdw11: DSM_AD,
            ..Self::default()
        }
    }

    /// Identify with `cns` (0: namespace, 1: controller, 3: namespace
    /// identification descriptors) into a 4096-byte buffer at `addr`.
    pub fn identify(nsid: u32, cns: u8, addr: u64) -> Self {
        Self {
            opcode: admin::IDENTIFY,
            nsid,
            addr,
            data_len: 4096,
            cdw10: u32::from(cns),
            ..Self::default()
        }
    }

    /// Get Log Page `lid` of `len` bytes (a multiple of 4) at byte `offset`,
    /// with Retain Asynchronous Event set so the kernel's own ANA handling
    /// still sees the event.
    pub fn get_log_page(nsid: u32, lid: u8, addr: u64, len: u32, offset: u64) -> Self {
        debug_assert!(len >= 4 && len.is_multiple_of(4));
        let numd = len / 4 - 1;
        Self {
            opcode: admin::GET_LOG_PAGE,
            nsid,
            addr,
            data_len: len,
            cdw10: u32::from(lid) | (1 << 15) | ((numd & 0xffff) << 16),
            cdw11: numd >> 16,
            cdw12: offset as u32,
            cdw13: (offset >> 32) as u32,
            ..Self::default()
        }
    }
}

/// One Dataset Management range descriptor.
pub fn dsm_range(slba: u64, nlb: u32) -> [u8; DSM_RANGE_LEN] {
    let mut r = [0u8; DSM_RANGE_LEN];
    // Context attributes (bytes 0-3) stay zero.
    r[4..8].copy_from_slice(&nlb.to_le_bytes());
    r[8..16].copy_from_slice(&slba.to_le_bytes());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }

    #[test]
    fn ioctl_numbers_follow_the_uapi_macros() {
        // _IOC(dir, type, nr, size) = dir << 30 | size << 16 | type << 8 | nr.
        let ioc = |dir: u32, nr: u32, size: u32| dir << 30 | size << 16 | u32::from(b'N') << 8 | nr;
        assert_eq!(NVME_URING_CMD_IO, ioc(3, 0x80, 72));
        assert_eq!(NVME_URING_CMD_IO_VEC, ioc(3, 0x81, 72));
        assert_eq!(NVME_IOCTL_ADMIN_CMD as u32, ioc(3, 0x41, 72));
        assert_eq!(NVME_IOCTL_ID as u32, ioc(0, 0x40, 0));
    }

    #[test]
    fn write_fua_layout() {
        let mut c = NvmeCmd::rw(true, 1, 0x1_2345_6789, 8, true);
        c.addr = 0xdead_beef_0000;
        c.data_len = 4096;
        c.timeout_ms = 2500;
        let b = c.to_uring_cmd();
        let mut want = [0u8; 80];
        want[0] = 0x01; // opcode
        want[4] = 1; // nsid
        want[24..32].copy_from_slice(&0xdead_beef_0000u64.to_le_bytes()); // addr
        want[36..40].copy_from_slice(&4096u32.to_le_bytes()); // data_len
        want[40..44].copy_from_slice(&0x2345_6789u32.to_le_bytes()); // cdw10 SLBA low
        want[44..48].copy_from_slice(&1u32.to_le_bytes()); // cdw11 SLBA high
        want[48..52].copy_from_slice(&(7u32 | 1 << 30).to_le_bytes()); // cdw12 NLB-1 | FUA
        want[64..68].copy_from_slice(&2500u32.to_le_bytes()); // timeout_ms
        assert_eq!(b, want);
    }

    #[test]
    fn read_flush_zeroes_discard() {
        let r = NvmeCmd::rw(false, 3, 100, MAX_NLB, false).to_uring_cmd();
        assert_eq!(r[0], opcode::READ);
        assert_eq!(u32_at(&r, 4), 3);
        assert_eq!(u32_at(&r, 40), 100);
        assert_eq!(u32_at(&r, 48), 0xffff);

        let f = NvmeCmd::flush(3).to_uring_cmd();
        assert_eq!(f[0], opcode::FLUSH);
        assert_eq!(u32_at(&f, 4), 3);
        assert!(f[8..].iter().all(|&x| x == 0));

        let z = NvmeCmd::write_zeroes(1, 64, 16, true).to_uring_cmd();
        assert_eq!(z[0], opcode::WRITE_ZEROES);
        assert_eq!(u32_at(&z, 36), 0, "write zeroes carries no data");
        assert_eq!(u32_at(&z, 48), 15 | 1 << 25);
        let z = NvmeCmd::write_zeroes(1, 64, 16, false).to_uring_cmd();
        assert_eq!(u32_at(&z, 48), 15);

        let d = NvmeCmd::discard(1, 0x1000).to_uring_cmd();
        assert_eq!(d[0], opcode::DATASET_MANAGEMENT);
        assert_eq!(u32_at(&d, 24), 0x1000);
        assert_eq!(u32_at(&d, 36), 16);
        assert_eq!(u32_at(&d, 40), 0, "one range, 0-based");
        assert_eq!(u32_at(&d, 44), 1 << 2, "attribute deallocate");
        assert_eq!(
            dsm_range(0x1_0000_0002, 8),
            [0, 0, 0, 0, 8, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0]
        );
    }

    #[test]
    fn admin_commands() {
        let i = NvmeCmd::identify(0, 1, 0x5000).to_passthru();
        assert_eq!(i[0], admin::IDENTIFY);
        assert_eq!(u32_at(&i, 36), 4096);
        assert_eq!(u32_at(&i, 40), 1);

        // ANA log, 0x1_0004 bytes: NUMD = 0x4000 dwords - 1... split over NUMDL/NUMDU.
        let len = 0x4_0004u32;
        let numd = len / 4 - 1; // 0x1_0000
        let g = NvmeCmd::get_log_page(0xffff_ffff, 0x0c, 0x6000, len, 0x2_0000_0010).to_passthru();
        assert_eq!(g[0], admin::GET_LOG_PAGE);
        assert_eq!(u32_at(&g, 4), 0xffff_ffff);
        assert_eq!(u32_at(&g, 40), 0x0c | 1 << 15 | (numd & 0xffff) << 16);
        assert_eq!(u32_at(&g, 44), numd >> 16);
        assert_eq!(u32_at(&g, 48), 0x10);
        assert_eq!(u32_at(&g, 52), 2);
    }
}
