//! A vhost-user-blk client: libblkio's `virtio-blk-vhost-user` driver, as a VMM uses it.

use crate::memory::Memory;
use blkio::{Blkio, Blkioq};
use std::fmt;
use std::path::Path;
use std::time::Duration;

pub use blkio::Error as BlkioError;

/// How to connect.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Interrupt-driven queues to start (blkio property `num-queues`).
    pub num_queues: usize,
    /// Must be true to start on a read-only device (blkio refuses otherwise, EROFS).
    pub read_only: bool,
    /// Bytes of shared buffer memory (one region, sent with ADD_MEM_REG).
    pub mem_size: usize,
    /// Virtqueue size; blkio's default is 256.
    pub queue_size: Option<i32>,
    /// How long a request may take before the helpers give up (panic).
    pub timeout: Duration,
    /// Start `num_queues` poll queues (blkio `num-poll-queues`) instead:
    /// the client busy-polls the used ring and never asks for a call, as a
    /// guest's virtio-blk poll queues do under io_uring IOPOLL.
    pub poll: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            num_queues: 1,
            read_only: false,
            mem_size: 8 << 20,
            queue_size: None,
            timeout: Duration::from_secs(30),
            poll: false,
        }
    }
}

/// What the device told the client (read from the config space while connecting).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub capacity: u64,
    /// The device's logical block size (VIRTIO_BLK_F_BLK_SIZE, else 512).
    pub request_alignment: u32,
    pub optimal_io_alignment: u32,
    pub optimal_io_size: u32,
    pub max_queues: u32,
    /// seg_max (1 when VIRTIO_BLK_F_SEG_MAX is not offered).
    pub max_segments: u32,
    /// size_max (0 when VIRTIO_BLK_F_SIZE_MAX is not offered).
    pub max_segment_len: u32,
    /// size_max * seg_max; 0 when either is not offered.
    pub max_transfer: u32,
    /// 0 when VIRTIO_BLK_F_DISCARD is not offered.
    pub max_discard_len: u64,
    pub discard_alignment: u32,
    /// 0 when VIRTIO_BLK_F_WRITE_ZEROES is not offered.
    pub max_write_zeroes_len: u64,
    pub max_mem_regions: u64,
    /// Whether the device has a volatile write cache (writeback / FLUSH).
    pub flush_needed: bool,
}

impl DeviceInfo {
    fn read(blkio: &Blkio) -> blkio::Result<DeviceInfo> {
        let i32_prop = |name: &str| blkio.get_i32(name).map(|v| v.max(0) as u32);
        Ok(DeviceInfo {
            capacity: blkio.get_u64("capacity")?,
            request_alignment: i32_prop("request-alignment")?,
            optimal_io_alignment: i32_prop("optimal-io-alignment")?,
            optimal_io_size: i32_prop("optimal-io-size")?,
            max_queues: i32_prop("max-queues")?,
            max_segments: i32_prop("max-segments")?,
            max_segment_len: i32_prop("max-segment-len")?,
            max_transfer: i32_prop("max-transfer")?,
            max_discard_len: blkio.get_u64("max-discard-len")?,
            discard_alignment: i32_prop("discard-alignment")?,
            max_write_zeroes_len: blkio.get_u64("max-write-zeroes-len")?,
            max_mem_regions: blkio.get_u64("max-mem-regions")?,
            flush_needed: blkio.get_bool("flush-needed")?,
        })
    }
}

/// A failed request: `errno` is positive (EIO for VIRTIO_BLK_S_IOERR, ENOTSUP for
/// VIRTIO_BLK_S_UNSUPP, EPROTO for any other status byte).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpError {
    pub errno: i32,
    /// Set when blkio refused the request itself, before it reached the device
    /// (e.g. EINVAL "invalid start offset", EBADF "device is read-only").
    pub message: Option<String>,
}

impl OpError {
    /// True when the device completed the request with an error status.
    pub fn from_device(&self) -> bool {
        self.message.is_none()
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let what = std::io::Error::from_raw_os_error(self.errno);
        match &self.message {
            Some(m) => write!(f, "refused by blkio: {m} ({what})"),
            None => write!(f, "failed by the device: {what}"),
        }
    }
}

impl std::error::Error for OpError {}

/// A connected and started client with its buffer memory mapped.
pub struct Client {
    // Drop order: queues, then the memory view, then the device (frees the memory).
    pub(crate) queues: Vec<Blkioq>,
    pub(crate) memory: Memory,
    _blkio: Blkio,
    info: DeviceInfo,
    pub(crate) timeout: Duration,
}

impl Client {
    /// Connects with `num_queues` queues and default options.
    pub fn connect(socket: &Path, num_queues: usize) -> blkio::Result<Client> {
        Client::connect_with(
            socket,
            &ClientOptions {
                num_queues,
                ..ClientOptions::default()
            },
        )
    }

    pub fn connect_with(socket: &Path, opts: &ClientOptions) -> blkio::Result<Client> {
        let mut blkio = Blkio::new("virtio-blk-vhost-user")?;
        blkio.set_str("path", &socket.to_string_lossy())?;
        blkio.set_bool("read-only", opts.read_only)?;
        blkio.connect()?;
        let info = DeviceInfo::read(&blkio)?;
        if opts.poll {
            blkio.set_i32("num-queues", 0)?;
            blkio.set_i32("num-poll-queues", opts.num_queues as i32)?;
        } else {
            blkio.set_i32("num-queues", opts.num_queues as i32)?;
        }
        if let Some(size) = opts.queue_size {
            blkio.set_i32("queue-size", size)?;
        }
        let started = blkio.start()?;
        let queues = if opts.poll {
            started.poll_queues
        } else {
            started.queues
        };
        // Buffer memory can only be mapped once started.
        let region = blkio.alloc_mem_region(opts.mem_size)?;
        blkio.map_mem_region(&region)?;
        Ok(Client {
            queues,
            memory: Memory::new(region),
            _blkio: blkio,
            info,
            timeout: opts.timeout,
        })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    pub fn capacity(&self) -> u64 {
        self.info.capacity
    }

    pub fn request_alignment(&self) -> u32 {
        self.info.request_alignment
    }

    pub fn num_queues(&self) -> usize {
        self.queues.len()
    }

    /// Bytes of buffer memory available to one batch of requests.
    pub fn mem_size(&self) -> usize {
        self.memory.len()
    }
}
