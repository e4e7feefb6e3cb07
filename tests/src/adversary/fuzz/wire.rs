//! vhost-user framing by hand: a 12-byte header (request, flags, size), the
//! payload, and fds as SCM_RIGHTS with the header, whatever the message
//! says. Every read has a deadline: the daemon answers or hangs up.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::Shutdown;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Header flags: protocol version 1, and "I want an answer".
pub const VERSION: u32 = 0x1;
pub const NEED_REPLY: u32 = 0x8;
const HEADER: usize = 12;
/// How long one read may block before the deadline is looked at again.
const POLL: Duration = Duration::from_millis(50);

/// What came back for a message.
#[derive(Debug)]
pub enum Answer {
    /// A reply frame to the request: its payload, and the fds it carried.
    Reply { payload: Vec<u8>, fds: Vec<OwnedFd> },
    /// The daemon hung up (it refused something).
    Closed,
    /// Nothing within the limit, the connection open: a hang.
    Silent,
}

pub struct Wire {
    sock: UnixStream,
    /// The daemon closed (a send failed or a read saw end of file).
    closed: bool,
}

impl Wire {
    pub fn connect(socket: &Path) -> std::io::Result<Wire> {
        let sock = UnixStream::connect(socket)?;
        sock.set_read_timeout(Some(POLL))?;
        // A daemon that stops reading must not block the fuzzer forever.
        sock.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(Wire {
            sock,
            closed: false,
        })
    }

    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Sends one message; false once the daemon hung up.
    pub fn send(&mut self, code: u32, flags: u32, payload: &[u8], fds: &[BorrowedFd<'_>]) -> bool {
        if self.closed {
            return false;
        }
        let mut hdr = [0u8; HEADER];
        hdr[0..4].copy_from_slice(&code.to_le_bytes());
        hdr[4..8].copy_from_slice(&flags.to_le_bytes());
        hdr[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
            panic!("more than 8 fds on one message");
        }
        let iov = [IoSlice::new(&hdr), IoSlice::new(payload)];
        let total = HEADER + payload.len();
        match rustix::net::sendmsg(&self.sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            // The rest without fds (a message is small: this is rare).
            Ok(n) if n < total => {
                let rest: Vec<u8> = hdr.iter().chain(payload).skip(n).copied().collect();
                self.send_plain(&rest)
            }
            Ok(_) => true,
            Err(_) => {
                self.closed = true;
                false
            }
        }
    }

    fn send_plain(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            match rustix::net::send(&self.sock, bytes, SendFlags::NOSIGNAL) {
                Ok(n) => bytes = &bytes[n..],
                Err(_) => {
                    self.closed = true;
                    return false;
                }
            }
        }
        true
    }

    /// Reads `buf.len()` bytes by `deadline`, keeping the fds that come
    /// with them: Ok(false) on end of file, Err on the deadline.
    fn read_exact(
        &mut self,
        buf: &mut [u8],
        fds: &mut Vec<OwnedFd>,
        deadline: Instant,
    ) -> Result<bool, ()> {
        let mut got = 0;
        while got < buf.len() {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut iov = [IoSliceMut::new(&mut buf[got..])];
            match rustix::net::recvmsg(&self.sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)
            {
                Ok(r) if r.bytes == 0 => {
                    self.closed = true;
                    return Ok(false);
                }
                Ok(r) => got += r.bytes,
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
                Err(_) => {
                    self.closed = true;
                    return Ok(false);
                }
            }
            for msg in control.drain() {
                if let RecvAncillaryMessage::ScmRights(received) = msg {
                    fds.extend(received);
                }
            }
            if got < buf.len() && Instant::now() >= deadline {
                return Err(());
            }
        }
        Ok(true)
    }

    /// Waits up to `limit` for the reply to request `code` (replies to
    /// other requests the model did not expect are skipped) or a hang-up.
    pub fn answer(&mut self, code: u32, limit: Duration) -> Answer {
        if self.closed {
            return Answer::Closed;
        }
        let deadline = Instant::now() + limit;
        loop {
            let mut hdr = [0u8; HEADER];
            let mut fds = Vec::new();
            match self.read_exact(&mut hdr, &mut fds, deadline) {
                Ok(true) => {}
                Ok(false) => return Answer::Closed,
                Err(()) => return Answer::Silent,
            }
            let word = |i: usize| u32::from_le_bytes([hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]]);
            let (got, size) = (word(0), word(8) as usize);
            // The daemon's replies are small; a huge size is a broken stream.
            if size > 0x1000 {
                self.closed = true;
                return Answer::Closed;
            }
            let mut payload = vec![0u8; size];
            match self.read_exact(&mut payload, &mut fds, deadline) {
                Ok(true) => {}
                Ok(false) => return Answer::Closed,
                Err(()) => return Answer::Silent,
            }
            if got == code {
                return Answer::Reply { payload, fds };
            }
        }
    }

    /// Hangs up the sending side and waits up to `limit` for the daemon to
    /// close: false if it kept the connection open (a hang).
    pub fn finish(&mut self, limit: Duration) -> bool {
        if self.closed {
            return true;
        }
        let _ = self.sock.shutdown(Shutdown::Write);
        let deadline = Instant::now() + limit;
        loop {
            let mut byte = [0u8; 1];
            let mut fds = Vec::new();
            match self.read_exact(&mut byte, &mut fds, deadline) {
                Ok(false) => return true,
                Ok(true) => {}
                Err(()) => return false,
            }
        }
    }
}
