//! The null driver: every I/O completes at once without touching storage
//! (inline in an [`crate::IoQueue`], through the ring as a NOP for other
//! users); reads return zeroes unless `read-zeroes=off`. For overhead
//! measurements.

use io_uring::{opcode, squeue};
use mpath::IoOutcome;

use crate::driver::{DeviceInfo, IoOp, PathDriver};

#[derive(Debug)]
pub struct NullDriver {
    info: DeviceInfo,
    read_zeroes: bool,
}

impl NullDriver {
    pub fn new(capacity_bytes: u64, block_size: u32, read_zeroes: bool) -> Self {
        Self {
            info: DeviceInfo {
                capacity_bytes,
                block_size,
                discard: true,
                write_zeroes: true,
                max_transfer: 0,
                identity: format!("null:{capacity_bytes}"),
                volatile_write_cache: false,
                ..DeviceInfo::default()
            },
            read_zeroes,
        }
    }
}

impl PathDriver for NullDriver {
    fn kind(&self) -> &'static str {
        "null"
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    unsafe fn prepare(
        &self,
        op: IoOp,
        _offset: u64,
        _len: u64,
        iov: *const libc::iovec,
        iovcnt: usize,
        user_data: u64,
    ) -> squeue::Entry128 {
        if op == IoOp::Read && self.read_zeroes && iovcnt > 0 {
            // SAFETY: the caller guarantees `iov[..iovcnt]` is valid and
            // describes writable memory for the duration of the I/O.
            let iovs = unsafe { std::slice::from_raw_parts(iov, iovcnt) };
            for v in iovs {
                // SAFETY: as above, each iovec is a valid writable range.
                unsafe { std::ptr::write_bytes(v.iov_base.cast::<u8>(), 0, v.iov_len) };
            }
        }
        opcode::Nop::new().build().user_data(user_data).into()
    }

    fn complete_inline(
        &self,
        op: IoOp,
        _offset: u64,
        _len: u64,
        bufs: Option<&mut crate::GuestBufs>,
    ) -> Option<IoOutcome> {
        if op == IoOp::Read && self.read_zeroes {
            if let Some(b) = bufs {
                // memset per segment: the fastest fill there is.
                b.zero();
            }
        }
        Some(IoOutcome::Ok)
    }

    fn decode(&self, _op: IoOp, _len: u64, res: i32, _big_cqe: [u64; 2]) -> IoOutcome {
        if res < 0 {
            IoOutcome::Errno(-res)
        } else {
            IoOutcome::Ok
        }
    }
}
