//! Descriptor-level system calls the daemon needs outside the data path
//! (the peer's groups on a control socket, descriptors inherited by number),
//! kept here so that `backend/` has `unsafe` only at the guest-memory
//! boundary.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Linux `SO_PEERGROUPS` (4.13+): the peer's supplementary groups.
const SO_PEERGROUPS: libc::c_int = 59;

/// The supplementary groups of a connected Unix socket's peer, as of its
/// `connect`; empty where the kernel does not say.
pub fn peer_groups(socket: BorrowedFd<'_>) -> Vec<u32> {
    let fd = socket.as_raw_fd();
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * 4) as libc::socklen_t;
        // SAFETY: `groups` holds `len` writable bytes; `fd` is borrowed open.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let wanted = len as usize / 4;
        if r == 0 {
            groups.truncate(wanted);
            return groups;
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ERANGE) && wanted > groups.len() {
            groups.resize(wanted, 0);
            continue;
        }
        return Vec::new();
    }
}

/// Takes ownership of a descriptor inherited by number (`--fd`, socket
/// activation), once it is known to be open.
pub fn inherited_fd(fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only reads the descriptor table; a number that is not
    // open fails with EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open (checked above) and was passed to this
    // process to own; nothing else in the daemon uses it by number.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_closed_number_is_refused_and_an_open_one_is_owned() {
        assert!(inherited_fd(-1).is_err());
        let (a, _b) = UnixStream::pair().unwrap();
        let raw = std::os::fd::IntoRawFd::into_raw_fd(a);
        let owned = inherited_fd(raw).unwrap();
        assert_eq!(owned.as_raw_fd(), raw);
    }

    #[test]
    fn a_peer_in_this_process_has_this_process_groups() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut mine = peer_groups(a.as_fd());
        mine.sort_unstable();
        // SAFETY: getgroups with size 0 only returns the count.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        assert_eq!(mine.len(), n as usize);
    }
}
