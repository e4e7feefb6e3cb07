//! The backend request channel (`VHOST_USER_PROTOCOL_F_BACKEND_REQ`): how
//! the daemon tells the frontend that the config space changed (a resize).
//! QEMU then re-reads it with GET_CONFIG and, when the capacity differs,
//! interrupts the guest (`vhost_user_blk_handle_config_change`).
//!
//! The `vhost` crate (0.18) receives the channel (SET_BACKEND_REQ_FD) and
//! hands the handler a `Backend` that sends shared-object and shmem
//! messages only, over a socket it keeps private. So the serve loop takes a
//! descriptor of its own for that socket by peeking at each message before
//! the crate reads it (MSG_PEEK delivers a duplicate of the descriptors a
//! message carries), and the handler keeps it once the crate accepted the
//! message. The crate keeps its message header type private too: the
//! 12-byte header (request, flags, size) is written here, with the crate's
//! request codes and flag bits.

use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Duration;

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use vhost::vhost_user::message::{
    BackendReq, FrontendReq, VhostUserHeaderFlag, VhostUserMsgValidator, VhostUserU64,
};
use vm_memory::ByteValued;

/// The protocol version in every header's flags.
const VERSION_1: u32 = 0x1;

/// A message header (vhost-user spec, "Message Specification"): request
/// code, flags (version, REPLY, NEED_REPLY), payload size; native endian.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Header {
    request: u32,
    flags: u32,
    size: u32,
}

impl Header {
    const LEN: usize = 12;

    fn new(request: u32, flags: u32, size: u32) -> Self {
        Self {
            request,
            flags: flags | VERSION_1,
            size,
        }
    }

    fn bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&self.request.to_ne_bytes());
        b[4..8].copy_from_slice(&self.flags.to_ne_bytes());
        b[8..12].copy_from_slice(&self.size.to_ne_bytes());
        b
    }

    fn parse(b: &[u8; Self::LEN]) -> Self {
        let word = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Self {
            request: word(0),
            flags: word(4),
            size: word(8),
        }
    }

    /// A reply to `req`: same request, REPLY set, version 1.
    fn is_reply_for(&self, req: &Header) -> bool {
        self.request == req.request
            && self.flags & VhostUserHeaderFlag::REPLY.bits() != 0
            && self.flags & 0x3 == VERSION_1
    }
}

/// How long the frontend may take to acknowledge a message: QEMU answers
/// after its GET_CONFIG round trip, from its main loop.
const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// The frontend's end of the channel, ours to send on.
#[derive(Debug)]
pub struct BackendChannel {
    sock: Mutex<UnixStream>,
    /// REPLY_ACK negotiated: every message asks for an answer.
    reply_ack: bool,
}

impl BackendChannel {
    pub fn new(fd: OwnedFd, reply_ack: bool) -> io::Result<Self> {
        let sock = UnixStream::from(fd);
        sock.set_read_timeout(Some(ACK_TIMEOUT))?;
        sock.set_write_timeout(Some(ACK_TIMEOUT))?;
        Ok(Self {
            sock: Mutex::new(sock),
            reply_ack,
        })
    }

    /// VHOST_USER_BACKEND_CONFIG_CHANGE_MSG; with REPLY_ACK, returns once
    /// the frontend has handled it (QEMU has re-read the config space).
    pub fn send_config_change(&self) -> io::Result<()> {
        let mut sock = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        let flags = if self.reply_ack {
            VhostUserHeaderFlag::NEED_REPLY.bits()
        } else {
            0
        };
        let hdr = Header::new(BackendReq::CONFIG_CHANGE_MSG.into(), flags, 0);
        sock.write_all(&hdr.bytes())?;
        if !self.reply_ack {
            return Ok(());
        }
        let mut raw = [0u8; Header::LEN];
        sock.read_exact(&mut raw)?;
        let reply = Header::parse(&raw);
        let mut body = VhostUserU64::default();
        if reply.size as usize != std::mem::size_of::<VhostUserU64>() {
            return Err(io::Error::other(
                "a reply of the wrong size to CONFIG_CHANGE_MSG",
            ));
        }
        sock.read_exact(body.as_mut_slice())?;
        if !reply.is_reply_for(&hdr) || !body.is_valid() {
            return Err(io::Error::other("not a reply to CONFIG_CHANGE_MSG"));
        }
        if body.value != 0 {
            return Err(io::Error::other(format!(
                "the frontend failed CONFIG_CHANGE_MSG ({})",
                body.value
            )));
        }
        Ok(())
    }
}

/// Waits for the frontend's next message on `conn` and, when it is
/// SET_BACKEND_REQ_FD with one descriptor, returns a duplicate of it; the
/// message stays for the crate to read. `None` for any other message (the
/// duplicates of its descriptors are closed) and at the end of the stream.
pub fn peek_backend_req_fd(conn: BorrowedFd<'_>) -> Option<OwnedFd> {
    let mut raw = [0u8; Header::LEN];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [io::IoSliceMut::new(&mut raw)];
    let got = rustix::net::recvmsg(
        conn,
        &mut iov,
        &mut control,
        RecvFlags::PEEK | RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    if got.bytes != Header::LEN
        || Header::parse(&raw).request != u32::from(FrontendReq::SET_BACKEND_REQ_FD)
    {
        return None;
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = msg {
            fds.extend(rights);
        }
    }
    (fds.len() == 1).then(|| fds.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_config_change_is_the_crates_message_and_waits_for_the_ack() {
        let (ours, mut frontend) = UnixStream::pair().unwrap();
        let ch = BackendChannel::new(ours.into(), true).unwrap();
        let answer = std::thread::spawn(move || {
            let mut raw = [0u8; Header::LEN];
            frontend.read_exact(&mut raw).unwrap();
            // BACKEND_CONFIG_CHANGE_MSG = 2, version 1, NEED_REPLY (0x8), no payload.
            assert_eq!(
                Header::parse(&raw),
                Header {
                    request: 2,
                    flags: 0x9,
                    size: 0
                }
            );
            let reply = Header::new(2, VhostUserHeaderFlag::REPLY.bits(), 8);
            frontend.write_all(&reply.bytes()).unwrap();
            frontend.write_all(VhostUserU64::new(1).as_slice()).unwrap();
        });
        let e = ch.send_config_change().unwrap_err();
        assert!(e.to_string().contains("failed"), "{e}");
        answer.join().unwrap();
    }

    #[test]
    fn the_peek_takes_the_channel_and_leaves_the_message() {
        let (conn, qemu) = UnixStream::pair().unwrap();
        let (chan, _qemu_end) = UnixStream::pair().unwrap();
        let hdr = Header::new(FrontendReq::SET_BACKEND_REQ_FD.into(), 0, 8);
        let fds = [chan.as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
        rustix::net::sendmsg(
            &qemu,
            &[io::IoSlice::new(&hdr.bytes())],
            &mut control,
            rustix::net::SendFlags::empty(),
        )
        .unwrap();
        assert!(peek_backend_req_fd(conn.as_fd()).is_some());
        // Still there for the crate.
        let mut again = [0u8; Header::LEN];
        (&conn).read_exact(&mut again).unwrap();
        assert_eq!(Header::parse(&again), hdr);
    }
}
