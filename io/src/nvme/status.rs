//! The NVMe status field as a positive `cqe.res` (or an admin ioctl's return
//! value) carries it: SC bits 0-7, SCT 8-10, CRD 11-12, More 13, DNR 14.

use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NvmeStatus(pub u16);

impl NvmeStatus {
    /// Status Code.
    pub fn sc(self) -> u8 {
        self.0 as u8
    }

    /// Status Code Type: 0 generic, 1 command specific, 2 media and data
    /// integrity, 3 path related, 7 vendor specific.
    pub fn sct(self) -> u8 {
        ((self.0 >> 8) & 0x7) as u8
    }

    /// Command Retry Delay: 0 none, 1-3 select CRDT1-3.
    pub fn crd(self) -> u8 {
        ((self.0 >> 11) & 0x3) as u8
    }

    pub fn more(self) -> bool {
        self.0 & (1 << 13) != 0
    }

    /// Do Not Retry.
    pub fn dnr(self) -> bool {
        self.0 & (1 << 14) != 0
    }

    /// SCT and SC together, as the specification tables write them (0x370).
    pub fn code(self) -> u16 {
        self.0 & 0x7ff
    }

    /// A path error: the command may succeed through another controller.
    pub fn is_path_error(self) -> bool {
        self.sct() == 3
    }

    /// An ANA state error (0x301-0x303): re-read the ANA log page.
    pub fn is_ana_error(self) -> bool {
        matches!(self.code(), 0x301..=0x303)
    }

    /// The specification's name for the common codes.
    pub fn name(self) -> &'static str {
        match self.code() {
            0x000 => "successful completion",
            0x001 => "invalid command opcode",
            0x002 => "invalid field in command",
            0x004 => "data transfer error",
            0x006 => "internal error",
            0x007 => "command abort requested",
            0x00b => "invalid namespace or format",
            0x080 => "LBA out of range",
            0x081 => "capacity exceeded",
            0x082 => "namespace not ready",
            0x280 => "write fault",
            0x281 => "unrecovered read error",
            0x282 => "end-to-end guard check error",
            0x283 => "end-to-end application tag check error",
            0x284 => "end-to-end reference tag check error",
            0x285 => "compare failure",
            0x286 => "access denied",
            0x287 => "deallocated or unwritten logical block",
            0x300 => "internal path error",
            0x301 => "asymmetric access persistent loss",
            0x302 => "asymmetric access inaccessible",
            0x303 => "asymmetric access transition",
            0x360..=0x36f => "controller pathing error",
            0x370 => "host pathing error",
            0x371 => "command aborted by host",
            0x372..=0x37f => "host path error",
            _ => match self.sct() {
                0 => "generic command status",
                1 => "command specific status",
                2 => "media and data integrity error",
                3 => "path related status",
                7 => "vendor specific status",
                _ => "reserved status code type",
            },
        }
    }
}

impl fmt::Display for NvmeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NVMe status {:#05x} ({})", self.code(), self.name())?;
        if self.crd() != 0 {
            write!(f, " crd={}", self.crd())?;
        }
        if self.more() {
            f.write_str(" more")?;
        }
        if self.dnr() {
            f.write_str(" dnr")?;
        }
        Ok(())
    }
}

impl fmt::Debug for NvmeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        // Host pathing error with DNR and CRD 2.
        let s = NvmeStatus(0x4000 | 0x1000 | 0x370);
        assert_eq!(s.sc(), 0x70);
        assert_eq!(s.sct(), 3);
        assert_eq!(s.crd(), 2);
        assert!(s.dnr());
        assert!(!s.more());
        assert!(s.is_path_error());
        assert_eq!(s.code(), 0x370);
        assert_eq!(
            s.to_string(),
            "NVMe status 0x370 (host pathing error) crd=2 dnr"
        );

        let ana = NvmeStatus(0x302);
        assert!(ana.is_ana_error() && ana.is_path_error());
        let media = NvmeStatus(0x281 | 0x2000);
        assert_eq!(media.sct(), 2);
        assert!(media.more() && !media.is_path_error());
        assert_eq!(media.name(), "unrecovered read error");
        assert_eq!(NvmeStatus(0x080).name(), "LBA out of range");
        assert_eq!(NvmeStatus(0x1c0).name(), "command specific status");
    }
}
