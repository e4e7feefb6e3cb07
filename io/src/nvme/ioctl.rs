//! Synchronous NVMe ioctls on a namespace node, used at open and when the
//! ANA state is re-read: `NVME_IOCTL_ID` and `NVME_IOCTL_ADMIN_CMD`.

use std::fmt;
use std::io;
use std::os::fd::RawFd;

use super::cmd::{NvmeCmd, NVME_IOCTL_ADMIN_CMD, NVME_IOCTL_ID};
use super::status::NvmeStatus;

/// An admin command that did not succeed.
#[derive(Debug)]
pub enum AdminError {
    /// The ioctl failed (`EACCES` without CAP_SYS_ADMIN, `ENOTTY`, ...).
    Os(io::Error),
    /// The controller completed the command with an error status.
    Status(NvmeStatus),
}

impl AdminError {
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Self::Os(e) => e.raw_os_error(),
            Self::Status(_) => None,
        }
    }
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Os(e) => e.fmt(f),
            Self::Status(s) => s.fmt(f),
        }
    }
}

/// The namespace id of the namespace node `fd` (`ENOTTY` on a controller node).
pub fn namespace_id(fd: RawFd) -> io::Result<u32> {
    // SAFETY: NVME_IOCTL_ID takes no argument and only returns a value.
    let r = unsafe { libc::ioctl(fd, NVME_IOCTL_ID as _) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as u32)
}

/// Runs admin command `cmd` with `buf` as its data buffer (controller to host);
/// returns the command's result dword.
pub fn admin(fd: RawFd, cmd: &NvmeCmd, buf: &mut [u8]) -> Result<u32, AdminError> {
    let mut c = *cmd;
    c.addr = buf.as_mut_ptr() as u64;
    c.data_len = u32::try_from(buf.len())
        .map_err(|_| AdminError::Os(io::Error::from_raw_os_error(libc::EINVAL)))?;
    let mut raw = c.to_passthru();
    // SAFETY: `raw` is a complete `struct nvme_passthru_cmd` (72 bytes) the
    // kernel reads and writes `result` into; its `addr`/`data_len` describe
    // `buf`, which is valid and writable for the whole synchronous call.
    let r = unsafe { libc::ioctl(fd, NVME_IOCTL_ADMIN_CMD as _, raw.as_mut_ptr()) };
    if r < 0 {
        return Err(AdminError::Os(io::Error::last_os_error()));
    }
    if r > 0 {
        return Err(AdminError::Status(NvmeStatus(r as u16)));
    }
    Ok(u32::from_le_bytes([raw[68], raw[69], raw[70], raw[71]]))
}
