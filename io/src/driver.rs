//! The driver interface every kind of path implements, and `open_path`,
//! which picks the driver from the device's type.

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::Arc;

use io_uring::squeue;
use mpath::{AnaState, IoOutcome};

use crate::file::FileDriver;
use crate::null::NullDriver;
use crate::nvme::NvmeDriver;
use crate::size::parse_size;

/// What a path's device offers; every path of a disk must agree on
/// capacity and block size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub capacity_bytes: u64,
    /// Logical block size in bytes (512 or 4096).
    pub block_size: u32,
    pub discard: bool,
    pub write_zeroes: bool,
    /// Largest single transfer in bytes the device takes (0: no limit).
    pub max_transfer: u32,
    /// Identity used to derive the default serial and to check that every
    /// path reaches the same disk: the canonical path for files, `null:SIZE`,
    /// and for NVMe the subsystem NQN, namespace id and the namespace's
    /// NGUID / EUI-64 / UUID (the same on every controller of the namespace).
    pub identity: String,
    /// The device has a volatile write cache: writes need a flush to be durable.
    pub volatile_write_cache: bool,
    /// Most data segments (pages) one transfer may use (0: no limit).
    pub max_segments: u32,
    /// Largest single discard / write-zeroes command in bytes (0: no limit).
    pub max_discard_bytes: u64,
    pub max_write_zeroes_bytes: u64,
    /// Bytes of caller-provided scratch a `Discard` needs (0: none): one
    /// writable iovec of at least this size, alive until the completion. A
    /// caller that cannot provide it must treat discard as unsupported.
    pub discard_scratch: u32,
    /// Command Retry Delay Times (NVMe CRDT1-3, units of 100 ms; zeroes elsewhere).
    pub crdt: [u16; 3],
    /// Command Quiesce Time in ms (NVMe 2.1 CQT; 0: not reported): how long
    /// the target may keep executing a command the host gave up on.
    pub command_quiesce_time_ms: u32,
    /// ANA state at open (`Optimized` for devices without ANA reporting).
    pub ana_state: AnaState,
    /// ANA group of the namespace (0: no ANA reporting).
    pub ana_group: u32,
    /// Where this path goes, for logs and statistics (NVMe: transport,
    /// address, controller id; empty for files).
    pub controller: String,
    /// Regular files: the file's (st_dev, st_ino).
    pub file: Option<(u64, u64)>,
    /// Some I/O of this path may go through the page cache of `file`
    /// (its filesystem has no O_DIRECT, or needs a larger offset alignment
    /// than the block size): every path must then be that same file.
    pub buffered: bool,
    /// A file in memory served by the caller's thread, not the ring
    /// ([`PathOptions::inline`]).
    pub inline: bool,
}

impl Default for DeviceInfo {
    fn default() -> Self {
        Self {
            capacity_bytes: 0,
            block_size: 512,
            discard: false,
            write_zeroes: false,
            max_transfer: 0,
            identity: String::new(),
            volatile_write_cache: true,
            max_segments: 0,
            max_discard_bytes: 0,
            max_write_zeroes_bytes: 0,
            discard_scratch: 0,
            crdt: [0; 3],
            command_quiesce_time_ms: 0,
            ana_state: AnaState::Optimized,
            ana_group: 0,
            controller: String::new(),
            file: None,
            buffered: false,
            inline: false,
        }
    }
}

/// One operation on one path. Offsets and lengths are in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    Read,
    Write { fua: bool },
    Flush,
    Discard,
    WriteZeroes { unmap: bool },
}

/// What a ring has registered for one entry (see
/// [`PathDriver::prepare_registered`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Registered {
    /// The path's file is at this index of the ring's file table.
    pub file: Option<u32>,
    /// The entry's one data buffer lies wholly in this fixed buffer.
    pub buf: Option<u16>,
}

/// A path's file as a ring's file table takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingFile {
    pub fd: std::os::fd::RawFd,
    /// Unique to this open of the device in the process (a re-opened path
    /// has another, even when the fd number is reused).
    pub id: u64,
}

/// A fresh [`RingFile::id`].
pub fn next_ring_file_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Options from a `--path` spec that drivers understand.
#[derive(Clone, Debug, Default)]
pub struct PathOptions {
    pub read_only: bool,
    /// Logical block size for file and null paths (default 512).
    pub block_size: Option<u32>,
    /// Null paths: fill read buffers with zeroes (default true).
    pub read_zeroes: Option<bool>,
    /// File paths: use O_DIRECT when the filesystem allows it (default
    /// true). Block devices take O_DIRECT only: `false` is refused there.
    pub direct: Option<bool>,
    /// File paths in memory (tmpfs, ramfs): reads, writes and the rest are
    /// done by the calling thread instead of the ring (default true). The
    /// kernel hands such files' ring requests to a worker thread of its own
    /// (they cannot be done without blocking in its sense), which costs two
    /// context switches per request for the same copy.
    pub inline: Option<bool>,
    /// NVMe paths: the command timeout (`timeout_ms` of each passthrough
    /// command; None or 0: the kernel's default, nvme_core.io_timeout).
    pub io_timeout_ms: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{device}: {source}")]
    Io {
        device: String,
        source: std::io::Error,
    },
    #[error("{device}: {why}")]
    Invalid { device: String, why: String },
}

/// A path's driver: builds submission entries and decodes completions. One
/// driver is shared by every worker; the ring is the worker's own.
pub trait PathDriver: Send + Sync + std::fmt::Debug {
    /// `file`, `null` or `nvme`.
    fn kind(&self) -> &'static str;
    fn info(&self) -> &DeviceInfo;

    /// Builds the entry for `op` on `len` bytes at `offset`, data in
    /// `iovcnt` iovecs at `iov` (none for flush, discard, write-zeroes).
    ///
    /// # Safety
    /// `iov[..iovcnt]` and the memory it describes must stay valid until the
    /// entry's completion is reaped; for reads that memory must be writable.
    unsafe fn prepare(
        &self,
        op: IoOp,
        offset: u64,
        len: u64,
        iov: *const libc::iovec,
        iovcnt: usize,
        user_data: u64,
    ) -> squeue::Entry128;

    /// As [`PathDriver::prepare`], using what the ring registered: the
    /// path's file in its file table ([`PathDriver::ring_file`]) and, for a
    /// read or write of one iovec, the fixed buffer holding it (offered
    /// only to drivers that answer [`PathDriver::fixed_buffers`]).
    ///
    /// # Safety
    /// As [`PathDriver::prepare`]; `reg.buf`, when given, is a registered
    /// buffer that holds the whole of `iov[0]`, and `reg.file` the slot
    /// holding this driver's [`PathDriver::ring_file`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn prepare_registered(
        &self,
        op: IoOp,
        offset: u64,
        len: u64,
        iov: *const libc::iovec,
        iovcnt: usize,
        user_data: u64,
        _reg: Registered,
    ) -> squeue::Entry128 {
        // SAFETY: the caller's contract is `prepare`'s.
        unsafe { self.prepare(op, offset, len, iov, iovcnt, user_data) }
    }

    /// The file a ring may register for this path (and pass as a fixed
    /// file to [`PathDriver::prepare_registered`]); `None`: not registered.
    fn ring_file(&self) -> Option<RingFile> {
        None
    }

    /// Whether [`PathDriver::prepare_registered`] uses fixed buffers.
    fn fixed_buffers(&self) -> bool {
        false
    }

    /// Whether its reads and writes may go to a polled ring
    /// (IORING_SETUP_IOPOLL): the device completes them on queues the
    /// kernel polls (NVMe with `nvme.poll_queues`).
    fn io_poll(&self) -> bool {
        false
    }

    /// The largest fixed buffer this driver's commands can use, if bounded
    /// (see the queue's registration: NVMe passthrough on kernels that
    /// check a fixed buffer's pages to its end against `max_segments`).
    fn fixed_buffer_window(&self) -> Option<usize> {
        None
    }

    /// Completes `op` on `len` bytes at `offset` at once, without the ring,
    /// where the driver can (the null driver; files in memory, see
    /// [`PathOptions::inline`]): its outcome, or `None` to go through
    /// `prepare`.
    fn complete_inline(
        &self,
        _op: IoOp,
        _offset: u64,
        _len: u64,
        _bufs: Option<&mut crate::GuestBufs>,
    ) -> Option<IoOutcome> {
        None
    }

    /// Decodes the completion of an entry this driver prepared for `len` bytes.
    fn decode(&self, op: IoOp, len: u64, res: i32, big_cqe: [u64; 2]) -> IoOutcome;

    /// For a read or write whose buffers `iovs` this path cannot take as
    /// they are: the alignment of the [`crate::Bounce`] to send it through
    /// instead (block devices under O_DIRECT). The caller passes the
    /// bounce's iovec to `prepare`, keeps the bounce until the completion is
    /// reaped, and for a read copies it out before completing the request.
    fn bounce_alignment(
        &self,
        _op: IoOp,
        _offset: u64,
        _len: u64,
        _iovs: &[libc::iovec],
    ) -> Option<usize> {
        None
    }

    /// This path took writes through a cache of its own (buffered I/O on a
    /// regular file): a flush owed for them must be sent on this path, not
    /// through another one.
    fn took_buffered_writes(&self) -> bool {
        false
    }

    /// Whether a flush through another path of the disk makes the writes
    /// this path completed durable: true where the volatile cache is the
    /// device's (an NVMe Flush applies to the namespace, O_DIRECT writes to
    /// a LUN) or one page cache is shared by every path (a regular file).
    fn flush_via_any(&self) -> bool {
        !self.took_buffered_writes()
    }

    /// Re-reads the path's ANA state from the device (NVMe: the ANA log
    /// page). Blocking: call it from a control or probing thread, not a
    /// worker. `Ok(None)`: the device has no ANA reporting.
    fn read_ana_state(&self) -> std::io::Result<Option<AnaState>> {
        Ok(None)
    }

    /// Re-reads the device's size in bytes (a file's length, a block
    /// device's size, an NVMe namespace's capacity): how the path checker
    /// and `resize` notice a grown device. Blocking, like
    /// [`PathDriver::read_ana_state`]. Fixed-size devices answer their size
    /// at open.
    fn read_capacity(&self) -> std::io::Result<u64> {
        Ok(self.info().capacity_bytes)
    }
}

/// Opens the device of a path: `null:SIZE`, an NVMe namespace node
/// (`/dev/ngXnY`, any character device) or a regular file or block device.
pub fn open_path(device: &str, opts: &PathOptions) -> Result<Arc<dyn PathDriver>, OpenError> {
    let invalid = |why: String| OpenError::Invalid {
        device: device.to_string(),
        why,
    };
    let block_size = opts.block_size.unwrap_or(512);
    if !(block_size.is_power_of_two() && (512..=65536).contains(&block_size)) {
        return Err(invalid(format!(
            "block size {block_size} must be a power of two from 512 to 65536"
        )));
    }
    if let Some(size) = device.strip_prefix("null:") {
        let bytes = parse_size(size).ok_or_else(|| invalid(format!("bad size {size:?}")))?;
        if bytes == 0 || bytes % u64::from(block_size) != 0 {
            return Err(invalid(format!(
                "size {bytes} must be a non-zero multiple of the block size {block_size}"
            )));
        }
        return Ok(Arc::new(NullDriver::new(
            bytes,
            block_size,
            opts.read_zeroes.unwrap_or(true),
        )));
    }
    let path = PathBuf::from(device);
    // A character device is an NVMe passthrough path (/dev/ngXnY).
    if std::fs::metadata(&path).is_ok_and(|m| m.file_type().is_char_device()) {
        return Ok(Arc::new(NvmeDriver::open(&path, opts)?));
    }
    let driver = FileDriver::open(&path, opts, block_size).map_err(|e| match e {
        crate::file::FileOpenError::Io(source) => OpenError::Io {
            device: device.to_string(),
            source,
        },
        crate::file::FileOpenError::Invalid(why) => invalid(why),
    })?;
    Ok(Arc::new(driver))
}
