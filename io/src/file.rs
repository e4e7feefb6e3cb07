//! Regular files and block devices: readv/writev, fsync, fallocate for
//! discard and write-zeroes. O_DIRECT wherever the device or filesystem
//! takes it (guest buffers that do not fit go through a bounce); block
//! devices take O_DIRECT only; a regular file falls back to its page cache
//! only where O_DIRECT cannot serve the request (see `dio`).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use io_uring::{opcode, squeue, types};
use mpath::IoOutcome;

use crate::dio::{probe_dio_align, route, statx_dio_align, DioAlign, Route};
use crate::driver::{DeviceInfo, IoOp, PathDriver, PathOptions};

const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
const BLKSSZGET: libc::c_ulong = 0x1268;
const ENODATA: i32 = 61;
const ENOSPC: i32 = 28;
/// linux/magic.h (not in the libc crate).
pub(crate) const RAMFS_MAGIC: u32 = 0x8584_58f6;

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
    /// Buffered descriptor: always present, for fsync/fallocate, and for
    /// reads and writes of regular files O_DIRECT cannot take.
    buffered: File,
    /// O_DIRECT descriptor (always, for a block device) and its alignment.
    direct: Option<(File, DioAlign)>,
    block_device: bool,
    /// A write went through the page cache: a flush for it must be sent
    /// on this path.
    buffered_writes: AtomicBool,
    /// The filesystem supports FALLOC_FL_ZERO_RANGE (else write-zeroes punches).
    zero_range: bool,
}

/// Whether `f` lives in memory (tmpfs, ramfs): its reads and writes copy
/// pages and never wait for a device.
fn in_memory(f: &File) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: fstatfs fills the statfs it is given; the descriptor is ours.
    if unsafe { libc::fstatfs(f.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstatfs succeeded, so it filled the struct.
    let magic = unsafe { st.assume_init() }.f_type as u32;
    magic == libc::TMPFS_MAGIC as u32 || magic == RAMFS_MAGIC
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
        let block_device = ft.is_block_device();
        let inline = !block_device && opts.inline.unwrap_or(true) && in_memory(&buffered);
        let direct = if block_device {
            if opts.direct == Some(false) {
                return Err(FileOpenError::Invalid(
                    "direct=off: block devices are used with O_DIRECT only (each node of a \
                     LUN has its own page cache, which other paths do not see)"
                        .into(),
                ));
            }
            let f = open(path, opts.read_only, true)?;
            let align = match statx_dio_align(&f) {
                Some(Some(a)) => a,
                Some(None) => {
                    return Err(FileOpenError::Invalid(
                        "the block device does not support O_DIRECT".into(),
                    ))
                }
                // Before Linux 6.11: the logical block size for both.
                None => {
                    let lbs = block_device_geometry(&f)?.1;
                    DioAlign {
                        mem: lbs,
                        offset: lbs,
                    }
                }
            };
            Some((f, align))
        } else if opts.direct.unwrap_or(true) {
            // tmpfs and some others refuse O_DIRECT: fall back to buffered.
            open(path, opts.read_only, true).ok().and_then(|f| {
                let align = match statx_dio_align(&f) {
                    Some(a) => a,
                    None => probe_dio_align(&f),
                }?;
                Some((f, align))
            })
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
                file: (!block_device).then(|| (meta.dev(), meta.ino())),
                // Offsets and lengths are whole blocks: a bounce covers
                // every request unless the filesystem wants larger ones.
                buffered: !block_device
                    && direct.as_ref().is_none_or(|(_, a)| a.offset > block_size),
                inline,
                ..DeviceInfo::default()
            },
            buffered,
            direct,
            block_device,
            buffered_writes: AtomicBool::new(false),
            zero_range,
        })
    }

    /// fallocate's mode for a discard or write-zeroes.
    fn fallocate_mode(&self, op: IoOp) -> libc::c_int {
        let punch = match op {
            IoOp::Discard => true,
            // A punched hole reads as zeroes; without unmap keep the blocks allocated.
            IoOp::WriteZeroes { unmap } => (unmap && self.info.discard) || !self.zero_range,
            _ => false,
        };
        let mode = if punch {
            libc::FALLOC_FL_PUNCH_HOLE
        } else {
            libc::FALLOC_FL_ZERO_RANGE
        };
        mode | libc::FALLOC_FL_KEEP_SIZE
    }

    fn route(&self, offset: u64, len: u64, iovs: &[libc::iovec]) -> Route {
        let align = self.direct.as_ref().map(|d| d.1);
        route(align, self.block_device, offset, len, iovs)
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

    fn read_capacity(&self) -> io::Result<u64> {
        if self.block_device {
            Ok(block_device_geometry(&self.buffered)?.0)
        } else {
            Ok(self.buffered.metadata()?.len())
        }
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
        let rw_fd = match (&self.direct, self.route(offset, len, iovs)) {
            // Buffers that need a bounce and did not get one (the caller
            // skipped `bounce_alignment`): the kernel refuses them (EINVAL);
            // the page cache never sees them.
            (Some((direct, _)), Route::Direct | Route::Bounce) => direct,
            _ => {
                if matches!(op, IoOp::Write { .. }) {
                    self.buffered_writes.store(true, Ordering::Release);
                }
                &self.buffered
            }
        };
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
            IoOp::Discard | IoOp::WriteZeroes { .. } => opcode::Fallocate::new(meta_fd, len)
                .offset(offset)
                .mode(self.fallocate_mode(op))
                .build(),
        };
        e.user_data(user_data).into()
    }

    fn complete_inline(
        &self,
        op: IoOp,
        offset: u64,
        len: u64,
        bufs: Option<&mut crate::GuestBufs>,
    ) -> Option<IoOutcome> {
        if !self.info.inline {
            return None;
        }
        let res = match op {
            IoOp::Read | IoOp::Write { .. } => {
                let iovs = bufs?.iovecs();
                // The page cache is the file (tmpfs's O_DIRECT goes through
                // it too): no alignment to meet, nothing another path
                // misses, nothing a flush must reach on this path.
                let fd = self.buffered.as_raw_fd();
                let flags = match op {
                    IoOp::Write { fua: true } => libc::RWF_DSYNC,
                    _ => 0,
                };
                let (iov, n) = (iovs.as_ptr(), iovs.len() as libc::c_int);
                retry_eintr(|| match op {
                    // SAFETY: `GuestBufs` keeps the memory its iovecs
                    // describe mapped (and writable, for a read) while the
                    // caller holds it, which is across this call.
                    IoOp::Read => unsafe { libc::preadv2(fd, iov, n, offset as i64, flags) },
                    // SAFETY: as above; the kernel only reads the buffers.
                    _ => unsafe { libc::pwritev2(fd, iov, n, offset as i64, flags) },
                })
            }
            IoOp::Flush => {
                // SAFETY: fdatasync on our own descriptor.
                retry_eintr(|| unsafe { libc::fdatasync(self.buffered.as_raw_fd()) } as isize)
            }
            IoOp::Discard | IoOp::WriteZeroes { .. } => retry_eintr(|| {
                let (fd, mode) = (self.buffered.as_raw_fd(), self.fallocate_mode(op));
                // SAFETY: fallocate on our own descriptor, on a range the
                // caller checked against the capacity.
                unsafe { libc::fallocate(fd, mode, offset as i64, len as i64) as isize }
            }),
        };
        Some(outcome(op, len, res as i64))
    }

    fn decode(&self, op: IoOp, len: u64, res: i32, _big_cqe: [u64; 2]) -> IoOutcome {
        outcome(op, len, i64::from(res))
    }

    fn bounce_alignment(
        &self,
        op: IoOp,
        offset: u64,
        len: u64,
        iovs: &[libc::iovec],
    ) -> Option<usize> {
        let (_, align) = self.direct.as_ref()?;
        let data = matches!(op, IoOp::Read | IoOp::Write { .. });
        (data && self.route(offset, len, iovs) == Route::Bounce).then_some(align.mem as usize)
    }

    fn took_buffered_writes(&self) -> bool {
        self.buffered_writes.load(Ordering::Acquire)
    }
}

/// A system call's result, retried while a signal interrupts it; `-errno`
/// on failure, as the ring reports it.
fn retry_eintr(mut call: impl FnMut() -> isize) -> isize {
    loop {
        let r = call();
        if r >= 0 {
            return r;
        }
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if errno != libc::EINTR {
            return -(errno as isize);
        }
    }
}

/// The outcome of `op` on `len` bytes whose call returned `res` (bytes
/// moved, or `-errno`).
fn outcome(op: IoOp, len: u64, res: i64) -> IoOutcome {
    if res < 0 {
        return IoOutcome::Errno(i32::try_from(-res).unwrap_or(libc::EIO));
    }
    match op {
        // A short transfer is a data problem (file shrank, disk full), not a path error.
        IoOp::Read if (res as u64) < len => IoOutcome::Errno(ENODATA),
        IoOp::Write { .. } if (res as u64) < len => IoOutcome::Errno(ENOSPC),
        _ => IoOutcome::Ok,
    }
}
