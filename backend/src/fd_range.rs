//! A frontend's fd must hold every byte it asks the daemon to map: a
//! mapping past the end of its file maps pages whose first access kills the
//! process with SIGBUS. Checked before mapping (guest memory regions, the
//! dirty log, the inflight region). And an fd it writes must never block.

use std::fs::File;
use std::io;

/// Whether `file` is a regular file (a memfd, shm or hugetlbfs file) that
/// holds `size` bytes from `offset`; an error naming `what` otherwise.
pub fn check_holds(file: &File, offset: u64, size: u64, what: &str) -> io::Result<()> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        // A device or a pipe has no size to check against.
        return Err(invalid(format!(
            "{what}: its fd is not a regular file or memfd ({:?})",
            meta.file_type()
        )));
    }
    let len = meta.len();
    match offset.checked_add(size) {
        Some(end) if end <= len => Ok(()),
        _ => Err(invalid(format!(
            "{what}: {size:#x} bytes at offset {offset:#x} lie past the end of its fd ({len:#x} bytes)"
        ))),
    }
}

/// Makes an fd the daemon writes (a call or error eventfd) non-blocking:
/// a frontend that hands over a full blocking eventfd or a pipe must not
/// stall the worker that signals it (EAGAIN then means "already
/// signalled"). The flag is on the open file, shared with the frontend, as
/// QEMU's own event notifiers already have it.
pub fn set_nonblocking(file: &File) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(file)?;
    rustix::fs::fcntl_setfl(file, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfd(len: u64) -> File {
        let f = File::from(
            rustix::fs::memfd_create("fd-range-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap(),
        );
        f.set_len(len).unwrap();
        f
    }

    #[test]
    fn a_range_within_the_file_is_held() {
        let f = memfd(8192);
        check_holds(&f, 0, 8192, "x").unwrap();
        check_holds(&f, 4096, 4096, "x").unwrap();
    }

    #[test]
    fn a_range_past_the_end_or_overflowing_is_refused() {
        let f = memfd(4096);
        assert!(check_holds(&f, 0, 8192, "x").is_err());
        assert!(check_holds(&f, 4096, 1, "x").is_err());
        assert!(check_holds(&f, u64::MAX, 2, "x").is_err());
    }

    #[test]
    fn a_device_is_refused() {
        let null = File::open("/dev/null").unwrap();
        assert!(check_holds(&null, 0, 0, "x").is_err());
    }
}
