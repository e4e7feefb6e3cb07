//! Guest memory of the adversarial frontend: a memfd mapped shared here and
//! handed to the daemon with SET_MEM_TABLE, as a VMM's memory backend does.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryMmap};

/// Where the daemon is told the region lives in "our" address space. Only
/// vring addresses are given in it; any consistent base works.
pub const QVA_BASE: u64 = 0x7f00_0000_0000;

pub struct GuestRam {
    mem: GuestMemoryMmap,
    file: File,
    size: u64,
}

impl GuestRam {
    /// `size` bytes at guest physical address 0, zero-filled.
    pub fn new(size: u64) -> io::Result<GuestRam> {
        // SAFETY: the name is a NUL-terminated string; memfd_create only
        // returns a new descriptor (or -1), touching no memory of ours.
        let fd = unsafe { libc::memfd_create(c"adversary-guest".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and nothing else owns it.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(size)?;
        let mem = GuestMemoryMmap::from_ranges_with_files([(
            GuestAddress(0),
            size as usize,
            Some(FileOffset::new(file.try_clone()?, 0)),
        )])
        .map_err(|e| io::Error::other(format!("mapping guest memory: {e:?}")))?;
        Ok(GuestRam { mem, file, size })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    pub fn write(&self, gpa: u64, data: &[u8]) {
        self.mem
            .write_slice(data, GuestAddress(gpa))
            .expect("write inside guest memory");
    }

    pub fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.mem
            .read_slice(&mut out, GuestAddress(gpa))
            .expect("read inside guest memory");
        out
    }

    pub fn fill(&self, gpa: u64, len: usize, byte: u8) {
        self.write(gpa, &vec![byte; len]);
    }

    pub fn write_u16(&self, gpa: u64, v: u16) {
        self.write(gpa, &v.to_le_bytes());
    }

    pub fn write_u32(&self, gpa: u64, v: u32) {
        self.write(gpa, &v.to_le_bytes());
    }

    pub fn write_u64(&self, gpa: u64, v: u64) {
        self.write(gpa, &v.to_le_bytes());
    }

    pub fn read_u8(&self, gpa: u64) -> u8 {
        self.read(gpa, 1)[0]
    }

    pub fn read_u32(&self, gpa: u64) -> u32 {
        u32::from_le_bytes(self.read(gpa, 4).try_into().unwrap_or_default())
    }

    /// A ring index the daemon updates concurrently.
    pub fn load_u16(&self, gpa: u64) -> u16 {
        let v: u16 = self
            .mem
            .load(GuestAddress(gpa), Ordering::Acquire)
            .expect("ring index inside guest memory");
        u16::from_le(v)
    }

    /// Publishes a ring index after the entries it covers.
    pub fn store_u16(&self, gpa: u64, v: u16) {
        self.mem
            .store(v.to_le(), GuestAddress(gpa), Ordering::Release)
            .expect("ring index inside guest memory");
    }
}
