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

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use rustix::fs::{AtFlags, Gid, Mode, OFlags};
use rustix::net::{self, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

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
    let addr = SocketAddrUnix::new(path).map_err(|e| {
        format!(
            "{}: not usable as a socket path (longer than 107 bytes, or a NUL byte): {e}",
            path.display()
        )
    })?;
    let sock = net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| err(e.into()))?;
    // The mode bind gives the socket's file (see the module's comment).
    rustix::fs::fchmod(&sock, Mode::from_raw_mode(0o600)).map_err(|e| err(e.into()))?;
    net::bind(&sock, &addr).map_err(|e| err(e.into()))?;
    if let Err(e) = net::listen(&sock, 128) {
        let _ = std::fs::remove_file(path);
        return Err(err(e.into()));
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
    // O_PATH opens the name itself; with O_NOFOLLOW a symlink put there
    // since `bind` is opened as the link (and refused below).
    let fd = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.file_type().is_socket() || meta.uid() != daemon_uid() {
        return Err(io::Error::other(
            "replaced by something else while being created",
        ));
    }
    // AT_EMPTY_PATH with an empty path changes the file `file` refers to
    // (the socket checked above); no uid leaves the owner.
    rustix::fs::chownat(
        &file,
        "",
        None,
        Some(Gid::from_raw(gid)),
        AtFlags::EMPTY_PATH,
    )?;
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
        let cred = net::sockopt::socket_peercred(stream)?;
        let groups = mpath_io::os::peer_groups(stream.as_fd());
        Ok(Peer {
            pid: cred.pid.as_raw_nonzero().get(),
            uid: cred.uid.as_raw(),
            gid: cred.gid.as_raw(),
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

pub use mpath_io::os::inherited_fd;

/// The daemon's effective uid.
pub fn daemon_uid() -> u32 {
    rustix::process::geteuid().as_raw()
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
