//! Identify data: the namespace (CNS 0), the controller (CNS 1) and the
//! namespace identification descriptors (CNS 3), each a 4096-byte page.

use std::fmt::Write as _;

pub const IDENTIFY_LEN: usize = 4096;
pub const CNS_NAMESPACE: u8 = 0x00;
pub const CNS_CONTROLLER: u8 = 0x01;
pub const CNS_NS_DESCRIPTORS: u8 = 0x03;

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(v)
}

/// ASCII field padded with spaces (serial, model, firmware) or NULs (NQN).
fn ascii(b: &[u8]) -> String {
    let s: String = b
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                c as char
            } else {
                '?'
            }
        })
        .collect();
    s.trim_end().to_string()
}

fn nonzero<const N: usize>(b: &[u8]) -> Option<[u8; N]> {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a.iter().any(|&x| x != 0).then_some(a)
}

/// What the driver needs from Identify Namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdNamespace {
    /// Namespace size in logical blocks.
    pub nsze: u64,
    /// Index of the LBA format in use.
    pub format: u8,
    /// Logical block size in bytes.
    pub lba_size: u32,
    /// Metadata bytes per logical block of the format in use (0: none).
    pub metadata_size: u16,
    /// End-to-end protection type (DPS bits 0-2; 0: none).
    pub protection: u8,
    /// ANA group (0: none).
    pub anagrpid: u32,
    pub nguid: Option<[u8; 16]>,
    pub eui64: Option<[u8; 8]>,
}

impl IdNamespace {
    pub fn parse(b: &[u8]) -> Result<Self, String> {
        if b.len() < IDENTIFY_LEN {
            return Err(format!("identify namespace data is {} bytes", b.len()));
        }
        let nsze = u64_at(b, 0);
        let nlbaf = b[25];
        let flbas = b[26];
        // Bits 0-3, plus bits 5-6 as the high bits when there are more than 16 formats.
        let mut format = flbas & 0xf;
        if nlbaf >= 16 {
            format |= ((flbas >> 5) & 0x3) << 4;
        }
        if format > nlbaf {
            return Err(format!(
                "LBA format {format} in use but only {} formats described",
                u32::from(nlbaf) + 1
            ));
        }
        let lbaf = u32_at(b, 128 + 4 * usize::from(format));
        let metadata_size = lbaf as u16;
        let lbads = (lbaf >> 16) as u8;
        if !(9..=16).contains(&lbads) {
            return Err(format!(
                "LBA format {format}: block size 2^{lbads} is outside 512 bytes to 64 KiB"
            ));
        }
        Ok(Self {
            nsze,
            format,
            lba_size: 1 << lbads,
            metadata_size,
            protection: b[29] & 0x7,
            anagrpid: u32_at(b, 92),
            nguid: nonzero::<16>(&b[104..120]),
            eui64: nonzero::<8>(&b[120..128]),
        })
    }
}

/// What the driver needs from Identify Controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdController {
    pub serial: String,
    pub model: String,
    pub firmware: String,
    /// Controller Multi-path I/O and Namespace Sharing Capabilities.
    pub cmic: u8,
    /// Maximum Data Transfer Size as a power of two of the minimum page size (0: no limit).
    pub mdts: u8,
    pub cntlid: u16,
    /// Command Retry Delay Times 1-3, units of 100 ms.
    pub crdt: [u16; 3],
    /// ANA capabilities.
    pub anacap: u8,
    pub nanagrpid: u32,
    /// Command Quiesce Time (NVMe 2.1), ms; 0: not reported.
    pub cqt: u16,
    pub nn: u32,
    /// Optional NVM Command Support.
    pub oncs: u16,
    /// Volatile Write Cache.
    pub vwc: u8,
    pub subnqn: String,
}

impl IdController {
    pub fn parse(b: &[u8]) -> Result<Self, String> {
        if b.len() < IDENTIFY_LEN {
            return Err(format!("identify controller data is {} bytes", b.len()));
        }
        Ok(Self {
            serial: ascii(&b[4..24]),
            model: ascii(&b[24..64]),
            firmware: ascii(&b[64..72]),
            cmic: b[76],
            mdts: b[77],
            cntlid: u16_at(b, 78),
            crdt: [u16_at(b, 128), u16_at(b, 130), u16_at(b, 132)],
            anacap: b[343],
            nanagrpid: u32_at(b, 348),
            cqt: u16_at(b, 386),
            nn: u32_at(b, 516),
            oncs: u16_at(b, 520),
            vwc: b[525],
            subnqn: ascii(&b[768..1024]),
        })
    }

    /// ONCS bit 2: Dataset Management (deallocate).
    pub fn supports_dsm(&self) -> bool {
        self.oncs & (1 << 2) != 0
    }

    /// ONCS bit 3: Write Zeroes.
    pub fn supports_write_zeroes(&self) -> bool {
        self.oncs & (1 << 3) != 0
    }

    /// VWC bit 0: a volatile write cache is present.
    pub fn volatile_write_cache(&self) -> bool {
        self.vwc & 1 != 0
    }

    /// CMIC bit 3: the controller reports ANA.
    pub fn reports_ana(&self) -> bool {
        self.cmic & (1 << 3) != 0
    }

    /// MDTS in bytes for a minimum memory page size of `min_page` bytes
    /// (CAP.MPSMIN; 4096 unless known otherwise); `None`: no limit.
    pub fn max_transfer_bytes(&self, min_page: u64) -> Option<u64> {
        (self.mdts != 0).then(|| min_page << self.mdts.min(40))
    }
}

/// Namespace identifiers from the identification descriptor list (CNS 3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NsDescriptors {
    pub eui64: Option<[u8; 8]>,
    pub nguid: Option<[u8; 16]>,
    pub uuid: Option<[u8; 16]>,
}

impl NsDescriptors {
    pub fn parse(b: &[u8]) -> Self {
        let mut d = Self::default();
        let mut off = 0usize;
        while off + 4 <= b.len() {
            let (nidt, nidl) = (b[off], usize::from(b[off + 1]));
            if nidt == 0 || off + 4 + nidl > b.len() {
                break;
            }
            let nid = &b[off + 4..off + 4 + nidl];
            match (nidt, nidl) {
                (1, 8) => d.eui64 = nonzero::<8>(nid),
                (2, 16) => d.nguid = nonzero::<16>(nid),
                (3, 16) => d.uuid = nonzero::<16>(nid),
                _ => {} // command set identifier and future types
            }
            off += 4 + nidl;
        }
        d
    }
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

fn uuid(b: &[u8; 16]) -> String {
    let h = hex(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The identity of a namespace, the same through every controller that
/// reaches it: subsystem NQN, namespace id and the namespace's globally
/// unique identifiers (NGUID, EUI-64, UUID; whichever the controller reports).
pub fn namespace_identity(
    ctrl: &IdController,
    nsid: u32,
    ns: &IdNamespace,
    desc: &NsDescriptors,
) -> String {
    let mut s = format!("nvme:{}:nsid={nsid}", ctrl.subnqn);
    if let Some(g) = desc.nguid.or(ns.nguid) {
        let _ = write!(s, ":nguid={}", hex(&g));
    }
    if let Some(e) = desc.eui64.or(ns.eui64) {
        let _ = write!(s, ":eui64={}", hex(&e));
    }
    if let Some(u) = desc.uuid {
        let _ = write!(s, ":uuid={}", uuid(&u));
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Identify Namespace data as QEMU's nvme-ns reports a 1 GiB namespace
    /// with 4 KiB blocks (format 4 of 0-4 in use; others with metadata).
    pub(crate) fn id_ns_fixture(lbaf_in_use: u8) -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_LEN];
        b[0..8].copy_from_slice(&262_144u64.to_le_bytes()); // nsze
        b[8..16].copy_from_slice(&262_144u64.to_le_bytes()); // ncap
        b[25] = 7; // nlbaf: 8 formats
        b[26] = lbaf_in_use; // flbas
        b[92..96].copy_from_slice(&1u32.to_le_bytes()); // anagrpid
        b[104..120].copy_from_slice(&[0x11; 16]); // nguid
        b[120..128].copy_from_slice(&[0x52, 0x54, 0, 0, 0, 0, 0, 1]); // eui64
        let formats: [(u16, u8); 8] = [
            (0, 9),
            (8, 9),
            (16, 9),
            (64, 9),
            (0, 12),
            (8, 12),
            (16, 12),
            (64, 12),
        ];
        for (i, (ms, lbads)) in formats.iter().enumerate() {
            let v = u32::from(*ms) | u32::from(*lbads) << 16;
            b[128 + 4 * i..132 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    pub(crate) fn id_ctrl_fixture() -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_LEN];
        b[0..2].copy_from_slice(&0x1b36u16.to_le_bytes());
        b[4..24].copy_from_slice(b"SER0001             ");
        b[24..64].copy_from_slice(b"QEMU NVMe Ctrl                          ");
        b[64..72].copy_from_slice(b"7.2.22  ");
        b[76] = 0x2; // cmic: multi-controller, no ANA
        b[77] = 7; // mdts
        b[78..80].copy_from_slice(&1u16.to_le_bytes()); // cntlid
        b[128..130].copy_from_slice(&5u16.to_le_bytes()); // crdt1
        b[130..132].copy_from_slice(&10u16.to_le_bytes()); // crdt2
        b[132..134].copy_from_slice(&20u16.to_le_bytes()); // crdt3
        b[343] = 0;
        b[386..388].copy_from_slice(&250u16.to_le_bytes()); // cqt
        b[516..520].copy_from_slice(&256u32.to_le_bytes()); // nn
        b[520..522].copy_from_slice(&0x015du16.to_le_bytes()); // oncs: DSM, WZ, ...
        b[525] = 0x7; // vwc present, flush broadcast bits
        let nqn = b"nqn.2019-08.org.qemu:subsys0";
        b[768..768 + nqn.len()].copy_from_slice(nqn);
        b
    }

    #[test]
    fn namespace_geometry() {
        let ns = IdNamespace::parse(&id_ns_fixture(4)).unwrap();
        assert_eq!(ns.nsze, 262_144);
        assert_eq!(ns.format, 4);
        assert_eq!(ns.lba_size, 4096);
        assert_eq!(ns.metadata_size, 0);
        assert_eq!(ns.anagrpid, 1);
        assert_eq!(ns.nguid, Some([0x11; 16]));
        assert_eq!(ns.eui64, Some([0x52, 0x54, 0, 0, 0, 0, 0, 1]));

        let ns = IdNamespace::parse(&id_ns_fixture(0)).unwrap();
        assert_eq!((ns.lba_size, ns.metadata_size), (512, 0));
        let ns = IdNamespace::parse(&id_ns_fixture(3)).unwrap();
        assert_eq!((ns.lba_size, ns.metadata_size), (512, 64));

        // A format index beyond nlbaf is refused.
        assert!(IdNamespace::parse(&id_ns_fixture(9)).is_err());
        assert!(IdNamespace::parse(&[0u8; 100]).is_err());
    }

    #[test]
    fn many_formats_use_the_high_flbas_bits() {
        let mut b = id_ns_fixture(0);
        b[25] = 31; // 32 formats
                    // Format 0x12 = low nibble 2, high bits 1 in flbas bits 5-6.
        b[26] = 0x2 | 1 << 5;
        let v = 12u32 << 16;
        b[128 + 4 * 0x12..132 + 4 * 0x12].copy_from_slice(&v.to_le_bytes());
        let ns = IdNamespace::parse(&b).unwrap();
        assert_eq!(ns.format, 0x12);
        assert_eq!(ns.lba_size, 4096);
        // With 16 formats or fewer the high bits are not part of the index.
        b[25] = 15;
        b[26] = 0x4 | 1 << 5;
        assert_eq!(IdNamespace::parse(&b).unwrap().format, 4);
    }

    #[test]
    fn controller_fields() {
        let c = IdController::parse(&id_ctrl_fixture()).unwrap();
        assert_eq!(c.serial, "SER0001");
        assert_eq!(c.model, "QEMU NVMe Ctrl");
        assert_eq!(c.firmware, "7.2.22");
        assert_eq!(c.mdts, 7);
        assert_eq!(c.max_transfer_bytes(4096), Some(512 << 10));
        assert_eq!(c.cntlid, 1);
        assert_eq!(c.crdt, [5, 10, 20]);
        assert_eq!(c.cqt, 250);
        assert_eq!(c.nn, 256);
        assert!(c.supports_dsm() && c.supports_write_zeroes());
        assert!(c.volatile_write_cache());
        assert!(!c.reports_ana());
        assert_eq!(c.subnqn, "nqn.2019-08.org.qemu:subsys0");

        let mut b = id_ctrl_fixture();
        b[77] = 0;
        b[520] = 0;
        b[525] = 0;
        b[76] = 0x8;
        let c = IdController::parse(&b).unwrap();
        assert_eq!(c.max_transfer_bytes(4096), None);
        assert!(!c.supports_dsm() && !c.supports_write_zeroes());
        assert!(!c.volatile_write_cache());
        assert!(c.reports_ana());
    }

    #[test]
    fn descriptors_and_identity() {
        let mut b = vec![0u8; IDENTIFY_LEN];
        let mut off = 0;
        let mut put = |t: u8, v: &[u8]| {
            b[off] = t;
            b[off + 1] = v.len() as u8;
            b[off + 4..off + 4 + v.len()].copy_from_slice(v);
            off += 4 + v.len();
        };
        put(3, &[0xab; 16]); // uuid
        put(4, &[0]); // csi: ignored
        put(1, &[0; 8]); // all-zero eui64: ignored
        let d = NsDescriptors::parse(&b);
        assert_eq!(d.uuid, Some([0xab; 16]));
        assert_eq!(d.eui64, None);
        assert_eq!(d.nguid, None);

        let c = IdController::parse(&id_ctrl_fixture()).unwrap();
        let ns = IdNamespace::parse(&id_ns_fixture(4)).unwrap();
        assert_eq!(
            namespace_identity(&c, 1, &ns, &d),
            "nvme:nqn.2019-08.org.qemu:subsys0:nsid=1:nguid=11111111111111111111111111111111\
             :eui64=5254000000000001:uuid=abababab-abab-abab-abab-abababababab"
        );
        // Without any identifier: subsystem and namespace id only.
        let mut ns2 = ns.clone();
        ns2.nguid = None;
        ns2.eui64 = None;
        assert_eq!(
            namespace_identity(&c, 2, &ns2, &NsDescriptors::default()),
            "nvme:nqn.2019-08.org.qemu:subsys0:nsid=2"
        );
        // A truncated descriptor ends the list.
        let mut t = vec![0u8; 10];
        t[0] = 2;
        t[1] = 16;
        assert_eq!(NsDescriptors::parse(&t), NsDescriptors::default());
    }
}
