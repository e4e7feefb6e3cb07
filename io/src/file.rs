//! Regular files and block devices: readv/writev (O_DIRECT where the
//! filesystem allows it), fsync, fallocate for discard and write-zeroes.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use io_uring::{opcode, squeue, types};
use mpath::IoOutcome;

use crate::driver::{DeviceInfo, IoOp, PathDriver, PathOptions};

const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
const BLKSSZGET: libc::c_ulong = 0x1268;
const ENODATA: i32 = 61;
const ENOSPC: i32 = 28;

#[derive(Debug)]
pub(crate) enum FileOpenError {
    Io(io::Error),
    Invalid(String),
}

impl From<io::Error> for FileOpenError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

#[derive(Debug)]
pub struct FileDriver {
    info: DeviceInfo,
    /// Buffered descriptor: always present, used for I/O whose guest buffers
    /// are not aligned for O_DIRECT, and for fsync/fallocate.
    buffered: File,
    /// O_DIRECT descriptor when the filesystem supports it.
    direct: Option<File>,
    /// Memory and length alignment O_DIRECT needs.
    direct_align: u64,
    /// The filesystem supports FALLOC_FL_ZERO_RANGE (else write-zeroes punches).
    zero_range: bool,
    /// A block device node: its page cache is its own, not shared with the
    /// other nodes of the LUN.
    block_device: bool,
    /// A write went through the buffered descriptor of a block device.
    buffered_block_writes: AtomicBool,
}

fn open(path: &Path, read_only: bool, direct: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(!read_only);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
}

impl FileDriver {
    pub(crate) fn open(
        path: &Path,
        opts: &PathOptions,
        block_size: u32,
    ) -> Result<Self, FileOpenError> {
        let buffered = open(path, opts.read_only, false)?;
        let meta = buffered.metadata()?;
        let ft = meta.file_type();
        let (capacity_bytes, block_size, discard, zero_range) = if ft.is_block_device() {
            let (cap, lbs) = block_device_geometry(&buffered)?;
            let lbs = opts.block_size.unwrap_or(lbs).max(lbs);
            (cap, lbs, block_device_discards(&meta), true)
        } else if ft.is_file() {
            let cap = meta.len();
            let (d, z) = if opts.read_only {
                (false, false)
            } else {
                probe_fallocate(&buffered, cap)
            };
            (cap, block_size, d, z)
        } else if ft.is_char_device() {
            return Err(FileOpenError::Invalid(
                "character devices are NVMe passthrough paths, not supported yet".into(),
            ));
        } else {
            return Err(FileOpenError::Invalid(
                "not a regular file or block device".into(),
            ));
        };
        if capacity_bytes < u64::from(block_size) || capacity_bytes % u64::from(block_size) != 0 {
            return Err(FileOpenError::Invalid(format!(
                "size {capacity_bytes} is not a non-zero multiple of the block size {block_size}"
            )));
        }
        let direct = if opts.direct.unwrap_or(true) {
            // tmpfs and some others refuse O_DIRECT with EINVAL: fall back to buffered.
            open(path, opts.read_only, true).ok()
        } else {
            None
        };
        let identity = std::fs::canonicalize(path)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.display().to_string());
        Ok(Self {
            info: DeviceInfo {
                capacity_bytes,
                block_size,
                discard,
                write_zeroes: zero_range || discard,
                max_transfer: 0,
                identity,
                ..DeviceInfo::default()
            },
            buffered,
            direct,
            direct_align: u64::from(block_size.max(512)),
            zero_range,
            block_device: ft.is_block_device(),
            buffered_block_writes: AtomicBool::new(false),
        })
    }

    /// Whether this I/O may go through the O_DIRECT descriptor.
    fn direct_fd_for(&self, iovs: &[libc::iovec]) -> Option<&File> {
        let d = self.direct.as_ref()?;
        let a = self.direct_align;
        iovs.iter()
            .all(|v| (v.iov_base as u64).is_multiple_of(a) && (v.iov_len as u64).is_multiple_of(a))
            .then_some(d)
    }

    pub fn uses_direct_io(&self) -> bool {
        self.direct.is_some()
    }
}

fn block_device_geometry(f: &File) -> io::Result<(u64, u32)> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which is valid.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut lbs: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which is valid.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), BLKSSZGET, &mut lbs as *mut libc::c_int) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((size, lbs.max(512) as u32))
}

fn block_device_discards(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    std::fs::read_to_string(format!(
        "/sys/dev/block/{major}:{minor}/queue/discard_max_bytes"
    ))
    .ok()
    .and_then(|s| s.trim().parse::<u64>().ok())
    .is_some_and(|n| n > 0)
}

/// Probes punch-hole and zero-range past the end of the file (no data is
/// touched), then trims anything the probe allocated there.
fn probe_fallocate(f: &File, size: u64) -> (bool, bool) {
    let try_mode = |mode: libc::c_int| {
        // SAFETY: fallocate on our own descriptor; the range lies past EOF
        // and KEEP_SIZE keeps the file size, so no data changes.
        unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                mode | libc::FALLOC_FL_KEEP_SIZE,
                size as i64,
                4096,
            ) == 0
        }
    };
    let punch = try_mode(libc::FALLOC_FL_PUNCH_HOLE);
    let zero = try_mode(libc::FALLOC_FL_ZERO_RANGE);
    let _ = f.set_len(size);
    (punch, zero)
}

impl PathDriver for FileDriver {
    fn kind(&self) -> &'static str {
        "file"
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Not once a write went into this block device node's own page cache:
    /// an fsync through another node of the LUN does not write it back.
    fn flush_via_any(&self) -> bool {
        !self.buffered_block_writes.load(Ordering::Relaxed)
    }

    unsafe fn prepare(
        &self,
        op: IoOp,
        offset: u64,
        len: u64,
        iov: *const libc::iovec,
        iovcnt: usize,
        user_data: u64,
    ) -> squeue::Entry128 {
        let iovs: &[libc::iovec] = if iovcnt == 0 {
            &[]
        } else {
            // SAFETY: the caller guarantees `iov[..iovcnt]` is valid.
            unsafe { std::slice::from_raw_parts(iov, iovcnt) }
        };
        let direct_fd = self.direct_fd_for(iovs);
        if direct_fd.is_none()
            && self.block_device
            && matches!(op, IoOp::Write { .. })
            && !self.buffered_block_writes.load(Ordering::Relaxed)
        {
            self.buffered_block_writes.store(true, Ordering::Relaxed);
        }
        let rw_fd = direct_fd.unwrap_or(&self.buffered);
        let fd = types::Fd(rw_fd.as_raw_fd());
        let meta_fd = types::Fd(self.buffered.as_raw_fd());
        let e = match op {
            IoOp::Read => opcode::Readv::new(fd, iov, iovcnt as u32)
                .offset(offset)
                .build(),
            IoOp::Write { fua } => opcode::Writev::new(fd, iov, iovcnt as u32)
                .offset(offset)
                .rw_flags(if fua { libc::RWF_DSYNC } else { 0 })
                .build(),
            IoOp::Flush => opcode::Fsync::new(meta_fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            IoOp::Discard => opcode::Fallocate::new(meta_fd, len)
                .offset(offset)
                .mode(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)
                .build(),
            IoOp::WriteZeroes { unmap } => {
                // A punched hole reads as zeroes; without unmap keep the blocks allocated.
                let mode = if (unmap && self.info.discard) || !self.zero_range {
                    libc::FALLOC_FL_PUNCH_HOLE
                } else {
                    libc::FALLOC_FL_ZERO_RANGE
                };
                opcode::Fallocate::new(meta_fd, len)
                    .offset(offset)
                    .mode(mode | libc::FALLOC_FL_KEEP_SIZE)
                    .build()
            }
        };
        e.user_data(user_data).into()
    }

    fn decode(&self, op: IoOp, len: u64, res: i32, _big_cqe: [u64; 2]) -> IoOutcome {
        if res < 0 {
            return IoOutcome::Errno(-res);
        }
        match op {
            // A short transfer is a data problem (file shrank, disk full), not a path error.
            IoOp::Read if (res as u64) < len => IoOutcome::Errno(ENODATA),
            IoOp::Write { .. } if (res as u64) < len => IoOutcome::Errno(ENOSPC),
            _ => IoOutcome::Ok,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_block_device_that_took_buffered_writes_needs_its_own_flush() {
        let path = std::env::temp_dir().join(format!("mpath-io-flush-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
        let mut d = FileDriver::open(&path, &PathOptions::default(), 512).unwrap();
        let _ = std::fs::remove_file(&path);
        let mut buf = vec![0u8; 4096 + 1];
        // Not aligned for O_DIRECT: goes through the buffered descriptor.
        let unaligned = libc::iovec {
            iov_base: buf[1..].as_mut_ptr().cast(),
            iov_len: 512,
        };
        let write = IoOp::Write { fua: false };
        // SAFETY: the entries are built, never submitted.
        let prepare = |d: &FileDriver, op| unsafe { d.prepare(op, 0, 512, &unaligned, 1, 0) };
        prepare(&d, write);
        assert!(d.flush_via_any(), "a regular file's page cache is shared");
        d.block_device = true;
        prepare(&d, IoOp::Read);
        prepare(&d, IoOp::Flush);
        assert!(d.flush_via_any(), "reads leave nothing to write back");
        prepare(&d, write);
        assert!(!d.flush_via_any(), "dirty pages in this node's cache");
    }
}
