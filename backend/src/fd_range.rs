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

/// Seals a memfd against shrinking where it allows it, so that the
/// frontend cannot truncate it under the daemon's mapping (`what` names it
/// in a debug line). QEMU's memory-backend-memfd creates its memfd with
/// MFD_ALLOW_SEALING and seals it F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL
/// itself (`seal=on`, the default; util/memfd.c, backends/hostmem-memfd.c);
/// with `seal=off` it omits MFD_ALLOW_SEALING, and such a memfd starts with
/// F_SEAL_SEAL: no seal can be added (EPERM). Nor can a file (hugetlbfs,
/// /dev/shm; EINVAL): those are contained instead (`vhost_user::sigbus`).
/// Only shrinking is sealed: growing is harmless to the mapping. Whether
/// the fd is sealed against shrinking now.
pub fn seal_shrink(file: &File, what: &str) -> bool {
    use rustix::fs::SealFlags;
    let sealed =
        |f: &File| rustix::fs::fcntl_get_seals(f).is_ok_and(|s| s.contains(SealFlags::SHRINK));
    if sealed(file) {
        return true;
    }
    // Fails with EPERM under F_SEAL_SEAL (the seals are then as they are).
    if rustix::fs::fcntl_add_seals(file, SealFlags::SHRINK).is_ok() || sealed(file) {
        return true;
    }
    log::debug!("{what}: its fd cannot be sealed against shrinking");
    false
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
    fn a_sealable_memfd_is_sealed_against_shrinking_only() {
        let f = File::from(
            rustix::fs::memfd_create(
                "fd-range-seal",
                rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
            )
            .unwrap(),
        );
        f.set_len(8192).unwrap();
        assert!(seal_shrink(&f, "x"));
        assert!(f.set_len(4096).is_err(), "shrunk after sealing");
        f.set_len(16384).unwrap();
        // Sealed already: nothing to add.
        assert!(seal_shrink(&f, "x"));
    }

    #[test]
    fn an_unsealable_memfd_is_taken_as_it_is() {
        // Without MFD_ALLOW_SEALING: F_SEAL_SEAL from the start.
        let f = memfd(8192);
        assert!(!seal_shrink(&f, "x"));
        f.set_len(4096).unwrap();
    }

    #[test]
    fn a_device_is_refused() {
        let null = File::open("/dev/null").unwrap();
        assert!(check_holds(&null, 0, 0, "x").is_err());
    }
}
