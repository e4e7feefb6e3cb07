//! One fuzzing connection: an optional valid prefix (features, memory
//! table, running rings), then random messages. The session keeps the
//! `vhost` crate's view of the connection (features seen, REPLY_ACK) to know
//! which messages the daemon must answer: those it waits for, with a
//! deadline; the others it sends without waiting, as a hostile frontend
//! would. An answer is a reply or a hang-up; silence past the deadline is a
//! hang.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use super::rng::Rng;
use super::wire::{Answer, Wire, NEED_REPLY, VERSION};

/// Request codes (vhost-user spec, "Front-end message types").
pub mod code {
    pub const GET_FEATURES: u32 = 1;
    pub const SET_FEATURES: u32 = 2;
    pub const SET_OWNER: u32 = 3;
    pub const RESET_OWNER: u32 = 4;
    pub const SET_MEM_TABLE: u32 = 5;
    pub const SET_LOG_BASE: u32 = 6;
    pub const SET_LOG_FD: u32 = 7;
    pub const SET_VRING_NUM: u32 = 8;
    pub const SET_VRING_ADDR: u32 = 9;
    pub const SET_VRING_BASE: u32 = 10;
    pub const GET_VRING_BASE: u32 = 11;
    pub const SET_VRING_KICK: u32 = 12;
    pub const SET_VRING_CALL: u32 = 13;
    pub const SET_VRING_ERR: u32 = 14;
    pub const GET_PROTOCOL_FEATURES: u32 = 15;
    pub const SET_PROTOCOL_FEATURES: u32 = 16;
    pub const GET_QUEUE_NUM: u32 = 17;
    pub const SET_VRING_ENABLE: u32 = 18;
    pub const GET_CONFIG: u32 = 24;
    pub const SET_CONFIG: u32 = 25;
    pub const GET_INFLIGHT_FD: u32 = 31;
    pub const SET_INFLIGHT_FD: u32 = 32;
    pub const RESET_DEVICE: u32 = 34;
    pub const GET_MAX_MEM_SLOTS: u32 = 36;
    pub const ADD_MEM_REG: u32 = 37;
    pub const REM_MEM_REG: u32 = 38;
}

/// VHOST_USER_F_PROTOCOL_FEATURES and VHOST_F_LOG_ALL.
pub const PROTOCOL_FEATURES: u64 = 1 << 30;
pub const LOG_ALL: u64 = 1 << 26;

/// Protocol feature bits.
pub mod proto {
    pub const MQ: u64 = 1 << 0;
    pub const LOG_SHMFD: u64 = 1 << 1;
    pub const REPLY_ACK: u64 = 1 << 3;
    pub const CONFIG: u64 = 1 << 9;
    pub const INFLIGHT_SHMFD: u64 = 1 << 12;
    pub const RESET_DEVICE: u64 = 1 << 13;
    pub const CONFIGURE_MEM_SLOTS: u64 = 1 << 15;
}

/// Messages the `vhost` crate answers whatever REPLY_ACK says (or hangs
/// up on).
const ALWAYS_ANSWERED: [u32; 8] = [
    code::GET_FEATURES,
    code::GET_PROTOCOL_FEATURES,
    code::GET_QUEUE_NUM,
    code::GET_CONFIG,
    code::GET_MAX_MEM_SLOTS,
    code::GET_INFLIGHT_FD,
    code::GET_VRING_BASE,
    code::SET_LOG_BASE,
];

/// What the daemon offers (read once, by a first session).
#[derive(Clone, Copy, Debug)]
pub struct DaemonInfo {
    pub features: u64,
    pub protocol: u64,
    pub num_queues: u16,
    pub max_queue_size: u16,
}

/// One guest memory region the session shared (model of the table).
pub(super) struct Region {
    pub gpa: u64,
    pub size: u64,
    pub uaddr: u64,
    pub file: File,
}

/// Where a queue's rings lie (guest-physical) and the driver's index.
#[derive(Clone, Copy)]
pub(super) struct RingAt {
    pub desc: u64,
    pub avail: u64,
    pub size: u16,
    pub avail_idx: u16,
}

/// One message as it goes out.
pub(super) struct Msg {
    pub code: u32,
    pub payload: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

impl Msg {
    pub fn new(code: u32, payload: Vec<u8>) -> Msg {
        Msg {
            code,
            payload,
            fds: Vec::new(),
        }
    }

    pub fn with_fd(mut self, fd: OwnedFd) -> Msg {
        self.fds.push(fd);
        self
    }
}

/// How a session ended.
#[derive(Debug)]
pub enum SessionEnd {
    Done,
    /// The daemon neither answered nor hung up within the limit.
    Hung(String),
}

pub struct Session<'r> {
    pub(super) rng: &'r mut Rng,
    wire: Wire,
    pub(super) info: DaemonInfo,
    /// The `vhost` crate's view: GET_FEATURES seen, the acked bits.
    got_features: bool,
    pub(super) acked_features: u64,
    pub(super) acked_proto: u64,
    pub(super) regions: Vec<Region>,
    pub(super) rings: Vec<Option<RingAt>>,
    pub(super) kicks: Vec<Option<OwnedFd>>,
    /// The inflight region the daemon handed over (its message and fd).
    pub(super) inflight: Option<(Vec<u8>, OwnedFd)>,
    /// Other ends of pipes and sockets, open for the session.
    pub(super) keep: Vec<OwnedFd>,
    /// Messages sent, and answers received.
    pub sent: u64,
    pub answered: u64,
    hang: Option<String>,
    limit: Duration,
}

impl<'r> Session<'r> {
    /// Connects; `limit` bounds every wait for an answer.
    pub fn connect(
        socket: &Path,
        info: DaemonInfo,
        rng: &'r mut Rng,
        limit: Duration,
    ) -> std::io::Result<Session<'r>> {
        let n = usize::from(info.num_queues);
        Ok(Session {
            rng,
            wire: Wire::connect(socket)?,
            info,
            got_features: false,
            acked_features: 0,
            acked_proto: 0,
            regions: Vec::new(),
            rings: vec![None; n],
            kicks: (0..n).map(|_| None).collect(),
            inflight: None,
            keep: Vec::new(),
            sent: 0,
            answered: 0,
            hang: None,
            limit,
        })
    }

    /// What the daemon offers: GET_FEATURES and GET_PROTOCOL_FEATURES on a
    /// fresh connection (`queues` and `max_queue_size` are the test's).
    pub fn probe(
        socket: &Path,
        queues: u16,
        max_queue_size: u16,
        limit: Duration,
    ) -> Result<DaemonInfo, String> {
        let mut wire = Wire::connect(socket).map_err(|e| format!("connect: {e}"))?;
        let mut ask = |code: u32| -> Result<u64, String> {
            wire.send(code, VERSION, &[], &[]);
            match wire.answer(code, limit) {
                Answer::Reply { payload, .. } if payload.len() == 8 => {
                    Ok(u64::from_le_bytes(payload.try_into().unwrap_or_default()))
                }
                a => Err(format!("request {code}: {a:?}")),
            }
        };
        let features = ask(code::GET_FEATURES)?;
        let protocol = ask(code::GET_PROTOCOL_FEATURES)?;
        wire.finish(limit);
        Ok(DaemonInfo {
            features,
            protocol,
            num_queues: queues,
            max_queue_size,
        })
    }

    pub(super) fn reply_ack(&self) -> bool {
        self.got_features && self.acked_proto & proto::REPLY_ACK != 0
    }

    pub(super) fn closed(&self) -> bool {
        self.wire.closed() || self.hang.is_some()
    }

    /// The `vhost` crate's state after `m` (were it accepted).
    fn observe(&mut self, m: &Msg) {
        let value = || {
            (m.payload.len() == 8)
                .then(|| u64::from_le_bytes(m.payload[..8].try_into().unwrap_or_default()))
        };
        match m.code {
            code::GET_FEATURES if m.payload.is_empty() => self.got_features = true,
            code::SET_FEATURES => self.acked_features = value().unwrap_or(self.acked_features),
            code::SET_PROTOCOL_FEATURES => self.acked_proto = value().unwrap_or(self.acked_proto),
            _ => {}
        }
    }

    /// Sends `m` with `flags`; waits for its answer if one must come.
    /// Returns the reply, if there was one.
    pub(super) fn send_flags(&mut self, m: Msg, flags: u32) -> Option<(Vec<u8>, Vec<OwnedFd>)> {
        if self.closed() {
            return None;
        }
        self.observe(&m);
        let fds: Vec<_> = m.fds.iter().map(|f| f.as_fd()).collect();
        if !self.wire.send(m.code, flags, &m.payload, &fds) {
            return None;
        }
        self.sent += 1;
        let answered = ALWAYS_ANSWERED.contains(&m.code)
            || (self.reply_ack() && flags & NEED_REPLY != 0)
            // An invalid header is refused: the daemon hangs up.
            || flags & 0x3 != VERSION;
        if !answered {
            return None;
        }
        match self.wire.answer(m.code, self.limit) {
            Answer::Reply { payload, fds } => {
                self.answered += 1;
                Some((payload, fds))
            }
            Answer::Closed => {
                self.answered += 1;
                None
            }
            Answer::Silent => {
                self.hang = Some(format!(
                    "request {} (flags {flags:#x}, {} payload bytes {:02x?}, {} fds) got no \
                     answer within {:?} and the connection stayed open",
                    m.code,
                    m.payload.len(),
                    &m.payload[..m.payload.len().min(48)],
                    m.fds.len(),
                    self.limit
                ));
                None
            }
        }
    }

    /// Sends `m`, asking for an acknowledgement most of the time.
    pub(super) fn send(&mut self, m: Msg) -> Option<(Vec<u8>, Vec<OwnedFd>)> {
        let mut flags = VERSION;
        if self.rng.chance(80) {
            flags |= NEED_REPLY;
        }
        self.send_flags(m, flags)
    }

    /// The valid start of a connection, with random choices: owner,
    /// features, protocol features, a memory table, maybe the inflight
    /// region and a dirty log, the rings; maybe requests and a kick.
    fn prefix(&mut self) {
        self.send(Msg::new(code::SET_OWNER, Vec::new()));
        self.send(Msg::new(code::GET_FEATURES, Vec::new()));
        let mut features = self.info.features & self.rng.next_u64();
        if self.rng.chance(90) {
            features |= PROTOCOL_FEATURES;
        }
        if !self.rng.chance(10) {
            features &= !LOG_ALL;
        }
        self.send(Msg::new(
            code::SET_FEATURES,
            (features & self.info.features).to_le_bytes().to_vec(),
        ));
        self.send(Msg::new(code::GET_PROTOCOL_FEATURES, Vec::new()));
        let mut p = self.info.protocol & (self.rng.next_u64() | proto::MQ | proto::CONFIG);
        if self.rng.chance(90) {
            p |= proto::REPLY_ACK & self.info.protocol;
        }
        self.send(Msg::new(
            code::SET_PROTOCOL_FEATURES,
            p.to_le_bytes().to_vec(),
        ));
        if self.rng.chance(30) {
            self.send(Msg::new(code::GET_QUEUE_NUM, Vec::new()));
        }
        let table = self.valid_mem_table();
        self.send(table);
        if self.acked_proto & proto::INFLIGHT_SHMFD != 0 && self.rng.chance(40) {
            self.inflight_handshake();
        }
        if self.acked_proto & proto::LOG_SHMFD != 0 && self.rng.chance(25) {
            let log = self.valid_log_base();
            self.send(log);
        }
        for q in 0..self.info.num_queues {
            if self.rng.chance(85) {
                self.start_ring(q);
            }
        }
        if self.rng.chance(60) {
            self.scribble_and_kick();
        }
    }

    /// GET_INFLIGHT_FD, then SET_INFLIGHT_FD with what came back.
    fn inflight_handshake(&mut self) {
        let get = self.get_inflight_fd(true);
        if let Some((payload, mut fds)) = self.send(get) {
            if let Some(fd) = fds.pop() {
                let set = Msg::new(code::SET_INFLIGHT_FD, payload.clone())
                    .with_fd(fd.try_clone().expect("dup"));
                self.inflight = Some((payload, fd));
                self.send(set);
            }
        }
    }

    /// NUM, ADDR, BASE, CALL, ERR, KICK, ENABLE for queue `q`.
    fn start_ring(&mut self, q: u16) {
        let size = self.queue_size();
        let Some(addr) = self.ring_addr(q, size) else {
            return;
        };
        let q32 = u32::from(q);
        self.send(Msg::new(code::SET_VRING_NUM, state(q32, u32::from(size))));
        self.send(addr);
        self.send(Msg::new(code::SET_VRING_BASE, state(q32, 0)));
        let call = self.vring_fd_msg(code::SET_VRING_CALL, q, true);
        self.send(call);
        let err = self.vring_fd_msg(code::SET_VRING_ERR, q, true);
        self.send(err);
        let kick = self.vring_fd_msg(code::SET_VRING_KICK, q, true);
        self.send(kick);
        if self.acked_features & PROTOCOL_FEATURES != 0 {
            self.send(Msg::new(code::SET_VRING_ENABLE, state(q32, 1)));
        }
    }

    /// A queue size the daemon takes (a power of two up to its maximum).
    pub(super) fn queue_size(&mut self) -> u16 {
        let max_shift = self.info.max_queue_size.max(1).ilog2();
        1 << self.rng.below(u64::from(max_shift) + 1)
    }

    /// Runs the session: the prefix (most of the time), then `steps` random
    /// messages and ring kicks, then a hang-up. `careful` sessions send
    /// plausible messages only (long sessions: logging per message shows).
    pub fn run(mut self) -> (SessionEnd, u64, u64) {
        if self.rng.chance(85) {
            self.prefix();
        }
        let long = self.rng.chance(2);
        let steps = if long { 400 } else { self.rng.range(1, 48) };
        let careful = long || self.rng.chance(25);
        for _ in 0..steps {
            if self.closed() {
                break;
            }
            if self.rng.chance(10) {
                self.scribble_and_kick();
                continue;
            }
            let m = self.random_message(careful);
            if !careful && self.rng.chance(2) {
                // Flags the protocol does not have: a bad version, a reply bit.
                let flags = self
                    .rng
                    .pick(&[0, 0x2, 0x3, VERSION | 0x4, VERSION | 0x100]);
                self.send_flags(m, flags);
            } else {
                self.send(m);
            }
        }
        let (sent, answered) = (self.sent, self.answered);
        if let Some(h) = self.hang.take() {
            return (SessionEnd::Hung(h), sent, answered);
        }
        // Mostly an orderly hang-up that waits for the daemon's close;
        // sometimes just gone.
        let orderly = self.rng.chance(90);
        if orderly && !self.wire.finish(self.limit) {
            return (
                SessionEnd::Hung(format!(
                    "after {sent} messages and a hang-up the daemon kept the connection open \
                     for {:?}",
                    self.limit
                )),
                sent,
                answered,
            );
        }
        (SessionEnd::Done, sent, answered)
    }
}

/// A VhostUserVringState payload.
pub(super) fn state(index: u32, num: u32) -> Vec<u8> {
    let mut v = index.to_le_bytes().to_vec();
    v.extend_from_slice(&num.to_le_bytes());
    v
}
