//! The Unix sockets the daemon listens on (vhost-user, JSON-RPC): born with
//! their final mode, never created or changed through a symlink, and the
//! credentials of a peer.
//!
//! How the mode is atomic: Linux creates a socket's file with the mode of
//! the socket's own inode less the umask (`unix_bind_bsd` in af_unix.c), so
//! a socket `fchmod`ed to 0600 before `bind` is born 0600 whatever the
//! umask, without touching the umask, which is process-wide and would race
//! with files other threads create. The group (and the group bits, for
//! 0660) are set afterwards on the file `bind` made, reached through an
//! `O_PATH | O_NOFOLLOW` descriptor that must be a socket we own: until
//! then the socket is 0600, never wider than asked. `bind` itself never
//! follows a symlink (an existing name fails with EADDRINUSE).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

/// Linux `SO_PEERGROUPS` (4.13+): the peer's supplementary groups.
const SO_PEERGROUPS: libc::c_int = 59;

/// A group given by name (from /etc/group) or number.
pub fn group_id(group: &str) -> Result<u32, String> {
    std::fs::read_to_string("/etc/group")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let mut f = l.split(':');
                (f.next() == Some(group)).then(|| f.nth(1)?.parse::<u32>().ok())?
            })
        })
        .or_else(|| group.parse().ok())
        .ok_or_else(|| format!("group {group}: no such group"))
}

/// A listening socket at `path`: mode 0600, or 0660 and group `gid`. A
/// stale socket there (nobody listening) is replaced; anything else there
/// (a symlink, a file, a live socket) is refused, never followed.
pub fn listen(path: &Path, gid: Option<u32>) -> Result<UnixListener, String> {
    let err = |e: io::Error| format!("{}: {e}", path.display());
    clear_stale(path)?;
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: contains a NUL byte", path.display()))?;
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = cpath.as_bytes_with_nul();
    if bytes.len() > addr.sun_path.len() {
        return Err(format!(
            "{}: longer than a socket path may be ({} bytes)",
            path.display(),
            addr.sun_path.len() - 1
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain system call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(err(io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a new descriptor nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fchmod on our own socket: sets the mode bind gives its file.
    if unsafe { libc::fchmod(sock.as_raw_fd(), 0o600) } != 0 {
        return Err(err(io::Error::last_os_error()));
    }
    // SAFETY: `addr` is a valid sockaddr_un of the given size.
    let r = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(err(io::Error::last_os_error()));
    }
    // SAFETY: plain system call on our socket.
    if unsafe { libc::listen(sock.as_raw_fd(), 128) } != 0 {
        let e = io::Error::last_os_error();
        let _ = std::fs::remove_file(path);
        return Err(err(e));
    }
    if let Some(gid) = gid {
        if let Err(e) = open_to_group(path, gid) {
            let _ = std::fs::remove_file(path);
            return Err(err(e));
        }
    }
    Ok(UnixListener::from(sock))
}

/// Removes a stale socket at `path`; refuses anything else there.
fn clear_stale(path: &Path) -> Result<(), String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let ft = meta.file_type();
    if ft.is_symlink() {
        return Err(format!(
            "{}: is a symlink; refusing to follow or replace it (remove it, or give the real path)",
            path.display()
        ));
    }
    if !ft.is_socket() {
        return Err(format!(
            "{}: exists and is not a socket; refusing to replace it",
            path.display()
        ));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(format!(
            "{}: another process is listening on it",
            path.display()
        ));
    }
    // A socket nobody listens on. If it was swapped for a symlink since,
    // unlink removes the link, never its target.
    std::fs::remove_file(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Gives the socket file at `path` group `gid` and mode 0660, through a
/// descriptor of the file itself that must be a socket owned by us.
fn open_to_group(path: &Path, gid: u32) -> io::Result<()> {
    let cpath = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: a valid C string; O_PATH opens the name itself, and with
    // O_NOFOLLOW a symlink put there since `bind` is opened as the link.
    let fd = unsafe {
        libc::open(
            cpath.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let meta = file.metadata()?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !meta.file_type().is_socket() || meta.uid() != me {
        return Err(io::Error::other(
            "replaced by something else while being created",
        ));
    }
    // SAFETY: AT_EMPTY_PATH with an empty path changes the file `fd` refers
    // to (the socket checked above); uid -1 leaves the owner.
    let r = unsafe {
        libc::fchownat(
            file.as_raw_fd(),
            c"".as_ptr(),
            u32::MAX,
            gid,
            libc::AT_EMPTY_PATH,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // chmod through the descriptor's /proc link: the same checked file.
    let proc = format!("/proc/self/fd/{}", file.as_raw_fd());
    std::fs::set_permissions(proc, std::os::unix::fs::PermissionsExt::from_mode(0o660))
}

/// The credentials of a connected peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (empty where the kernel does not say).
    pub groups: Vec<u32>,
}

impl Peer {
    /// SO_PEERCRED (and SO_PEERGROUPS): who connected, as of `connect`.
    pub fn of(stream: &UnixStream) -> io::Result<Peer> {
        let fd = stream.as_raw_fd();
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` is a valid ucred buffer of `len` bytes.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut groups = vec![0u32; 64];
        loop {
            let mut len = (groups.len() * 4) as libc::socklen_t;
            // SAFETY: `groups` holds `len` writable bytes.
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
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) && wanted > groups.len() {
                groups.resize(wanted, 0);
                continue;
            }
            groups.clear();
            break;
        }
        Ok(Peer {
            pid: cred.pid,
            uid: cred.uid,
            gid: cred.gid,
            groups,
        })
    }

    /// Root, the daemon's own user, or a member of `group`.
    pub fn allowed(&self, daemon_uid: u32, group: Option<u32>) -> bool {
        self.uid == 0
            || self.uid == daemon_uid
            || group.is_some_and(|g| self.gid == g || self.groups.contains(&g))
    }
}

/// The daemon's effective uid.
pub fn daemon_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_may_connect() {
        let peer = |uid, gid, groups: &[u32]| Peer {
            pid: 1,
            uid,
            gid,
            groups: groups.to_vec(),
        };
        assert!(peer(0, 0, &[]).allowed(1000, None), "root");
        assert!(
            peer(1000, 1000, &[]).allowed(1000, None),
            "the daemon's user"
        );
        assert!(!peer(1001, 1001, &[]).allowed(1000, None), "another user");
        assert!(
            !peer(1001, 1001, &[36]).allowed(1000, None),
            "no group option"
        );
        assert!(peer(1001, 36, &[]).allowed(1000, Some(36)), "primary group");
        assert!(
            peer(1001, 1001, &[5, 36]).allowed(1000, Some(36)),
            "supplementary"
        );
        assert!(
            !peer(1001, 1001, &[5]).allowed(1000, Some(36)),
            "other groups"
        );
    }

    #[test]
    fn groups_by_name_or_number() {
        assert_eq!(group_id("root"), Ok(0));
        assert_eq!(group_id("4242"), Ok(4242));
        assert!(group_id("no-such-group-here").is_err());
    }
}
