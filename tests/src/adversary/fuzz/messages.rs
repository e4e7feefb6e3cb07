//! One random payload per message. "Plausible" values are what a correct
//! frontend could send in this state (indexes in range, a table of memfds
//! that hold their regions, rings inside it); the others are anything, with
//! a bias to the edges. Fds: memfds of random (sometimes too short) sizes,
//! eventfds, pipes, sockets, or none.

use std::fs::File;
use std::os::fd::OwnedFd;

use super::session::{code, proto, state, Msg, Region, RingAt, Session, PROTOCOL_FEATURES};

/// Where the session says its guest memory lives in "its" address space.
const UADDR_BASE: u64 = 0x7f00_0000_0000;
const PAGE: u64 = 4096;

/// Codes that are no message the daemon has, or that it does not offer.
const UNKNOWN: [u32; 14] = [19, 20, 21, 22, 23, 26, 27, 28, 29, 30, 33, 35, 39, 40];

/// How often each message is picked (weights).
const MIX: [(u32, u64); 27] = [
    (code::GET_FEATURES, 2),
    (code::SET_FEATURES, 4),
    (code::SET_OWNER, 1),
    (code::RESET_OWNER, 2),
    (code::SET_MEM_TABLE, 6),
    (code::SET_LOG_BASE, 5),
    (code::SET_LOG_FD, 1),
    (code::SET_VRING_NUM, 5),
    (code::SET_VRING_ADDR, 7),
    (code::SET_VRING_BASE, 4),
    (code::GET_VRING_BASE, 5),
    (code::SET_VRING_KICK, 5),
    (code::SET_VRING_CALL, 5),
    (code::SET_VRING_ERR, 4),
    (code::GET_PROTOCOL_FEATURES, 2),
    (code::SET_PROTOCOL_FEATURES, 3),
    (code::GET_QUEUE_NUM, 2),
    (code::SET_VRING_ENABLE, 6),
    (code::GET_CONFIG, 3),
    (code::SET_CONFIG, 1),
    (code::GET_INFLIGHT_FD, 4),
    (code::SET_INFLIGHT_FD, 4),
    (code::RESET_DEVICE, 3),
    (code::GET_MAX_MEM_SLOTS, 2),
    (code::ADD_MEM_REG, 6),
    (code::REM_MEM_REG, 4),
    (0, 3), // an unknown code
];

/// Messages a careful session leaves out: refused whatever their values.
const ALWAYS_REFUSED: [u32; 4] = [code::SET_OWNER, code::SET_LOG_FD, code::SET_CONFIG, 0];

pub(super) fn memfd(len: u64) -> File {
    let f = File::from(
        rustix::fs::memfd_create("fuzz", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd"),
    );
    f.set_len(len).expect("memfd size");
    f
}

fn dup(f: &File) -> OwnedFd {
    OwnedFd::from(f.try_clone().expect("dup"))
}

pub(super) fn eventfd() -> OwnedFd {
    rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
    )
    .expect("eventfd")
}

fn region_bytes(gpa: u64, size: u64, uaddr: u64, offset: u64) -> Vec<u8> {
    [gpa, size, uaddr, offset]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

impl Session<'_> {
    /// An fd of a kind nobody should send for this message.
    fn junk_fd(&mut self) -> OwnedFd {
        match self.rng.below(5) {
            0 => {
                let (r, w) = std::io::pipe().expect("pipe");
                let (give, keep): (OwnedFd, OwnedFd) = if self.rng.chance(50) {
                    (r.into(), w.into())
                } else {
                    (w.into(), r.into())
                };
                self.keep.push(keep);
                give
            }
            1 => {
                let (a, b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
                self.keep.push(b.into());
                a.into()
            }
            2 => OwnedFd::from(File::open("/dev/null").expect("/dev/null")),
            3 => dup(&memfd(self.rng.below(3) * PAGE)),
            _ => eventfd(),
        }
    }

    /// A queue index: in range when plausible, else anything.
    fn index(&mut self, plausible: bool) -> u32 {
        let n = u64::from(self.info.num_queues);
        if plausible || self.rng.chance(50) {
            return self.rng.below(n) as u32;
        }
        let edge = [n, n + 1, 255, 256, u64::from(u32::MAX)];
        match self.rng.below(6) {
            5 => self.rng.next_u32(),
            i => edge[i as usize] as u32,
        }
    }

    /// The highest guest-physical end of the session's table.
    fn mem_end(&self) -> u64 {
        self.regions
            .iter()
            .map(|r| r.gpa + r.size)
            .max()
            .unwrap_or(0)
    }

    /// A region of fresh memfd at `gpa` (page-aligned sizes and addresses).
    fn new_region(&mut self, gpa: u64) -> Region {
        let size = 16 * PAGE * self.rng.range(1, 32);
        // Now and then a region off the page grid, consistent otherwise
        // (rings in it are where the driver put them, the host mapping not).
        let gpa = if self.rng.chance(3) {
            gpa + self.rng.pick(&[1, 2, 4, 8])
        } else {
            gpa
        };
        let uaddr = if self.rng.chance(50) {
            UADDR_BASE + gpa
        } else {
            0x5000_0000_0000 + (self.rng.below(1 << 20) << 16)
        };
        Region {
            gpa,
            size,
            uaddr,
            file: memfd(size),
        }
    }

    /// SET_MEM_TABLE of 1 to 3 well-formed regions; the session's table
    /// from now on.
    pub(super) fn valid_mem_table(&mut self) -> Msg {
        let n = self.rng.range(1, 3);
        let mut gpa = if self.rng.chance(10) {
            1 << 32
        } else {
            PAGE * self.rng.below(16)
        };
        let mut regions = Vec::new();
        for _ in 0..n {
            let r = self.new_region(gpa);
            gpa += r.size + PAGE * self.rng.below(64);
            regions.push(r);
        }
        let mut payload = (n as u32).to_le_bytes().to_vec();
        payload.extend_from_slice(&0u32.to_le_bytes());
        let mut m = Msg::new(code::SET_MEM_TABLE, Vec::new());
        for r in &regions {
            payload.extend(region_bytes(r.gpa, r.size, r.uaddr, 0));
            m.fds.push(dup(&r.file));
        }
        m.payload = payload;
        self.regions = regions;
        m
    }

    /// SET_MEM_TABLE with something wrong: counts, fds, sizes, alignment,
    /// overlaps, offsets.
    fn bad_mem_table(&mut self) -> Msg {
        let n = self.rng.below(5);
        let mut payload = Vec::new();
        let mut fds = Vec::new();
        let mut gpa = PAGE * self.rng.below(4);
        for _ in 0..n {
            let mut size = 16 * PAGE * self.rng.range(1, 8);
            let mut file_len = size;
            let mut offset = 0;
            let mut uaddr = UADDR_BASE.wrapping_add(gpa);
            match self.rng.below(8) {
                0 => file_len = self.rng.below(size),
                1 => gpa = gpa.wrapping_add(self.rng.range(1, 15)),
                2 => uaddr = uaddr.wrapping_add(self.rng.range(1, 15)),
                3 => size = self.rng.edgy_u64(),
                4 => offset = self.rng.edgy_u64(),
                5 => gpa = self.rng.edgy_u64(),
                6 => gpa = gpa.saturating_sub(PAGE * self.rng.below(8)),
                _ => {}
            }
            payload.extend(region_bytes(gpa, size, uaddr, offset));
            fds.push(if self.rng.chance(90) {
                dup(&memfd(file_len.min(64 << 20)))
            } else {
                self.junk_fd()
            });
            gpa = gpa.wrapping_add(size);
        }
        let mut count = n as u32;
        if self.rng.chance(20) {
            count = self.rng.pick(&[0, n as u32 + 1, 33, u32::MAX]);
        }
        if self.rng.chance(20) && !fds.is_empty() {
            fds.pop();
        }
        let mut head = count.to_le_bytes().to_vec();
        head.extend_from_slice(&0u32.to_le_bytes());
        head.extend(payload);
        let mut m = Msg::new(code::SET_MEM_TABLE, head);
        m.fds = fds;
        m
    }

    /// SET_LOG_BASE of a log that covers the session's table.
    pub(super) fn valid_log_base(&mut self) -> Msg {
        let pages = self.mem_end().div_ceil(PAGE);
        let size = pages.div_ceil(8).next_multiple_of(8).max(8) + 8 * self.rng.below(4);
        let file = memfd(size);
        let mut payload = size.to_le_bytes().to_vec();
        payload.extend_from_slice(&0u64.to_le_bytes());
        Msg::new(code::SET_LOG_BASE, payload).with_fd(dup(&file))
    }

    fn log_base(&mut self, plausible: bool) -> Msg {
        if plausible {
            return self.valid_log_base();
        }
        let any = self.rng.edgy_u64();
        let size = self.rng.pick(&[0, 1, 8, 64, PAGE, any]);
        let any = self.rng.edgy_u64();
        let offset = self.rng.pick(&[0, 1, PAGE, any]);
        let mut payload = size.to_le_bytes().to_vec();
        payload.extend_from_slice(&offset.to_le_bytes());
        let m = Msg::new(code::SET_LOG_BASE, payload);
        match self.rng.below(4) {
            0 => m,
            1 => {
                let fd = self.junk_fd();
                m.with_fd(fd)
            }
            _ => m.with_fd(dup(&memfd(self.rng.below(2 * PAGE)))),
        }
    }

    /// SET_VRING_ADDR placing queue `q`'s rings (`size` entries) in one
    /// region of the table, as the spec aligns them; recorded for kicks.
    pub(super) fn ring_addr(&mut self, q: u16, size: u16) -> Option<Msg> {
        if self.regions.is_empty() {
            return None;
        }
        let r = &self.regions[self.rng.below(self.regions.len() as u64) as usize];
        let n = u64::from(size);
        let span = 32 * n + 64;
        if span > r.size {
            return None;
        }
        let off = PAGE * self.rng.below((r.size - span) / PAGE + 1);
        let desc = (r.gpa + off).next_multiple_of(16);
        let avail = desc + 16 * n;
        let used = (avail + 6 + 2 * n).next_multiple_of(4);
        let va = |g: u64| g - r.gpa + r.uaddr;
        let log = self.rng.chance(10);
        let mut payload = u32::from(q).to_le_bytes().to_vec();
        payload.extend_from_slice(&u32::from(log).to_le_bytes());
        for v in [va(desc), va(used), va(avail), used] {
            payload.extend_from_slice(&v.to_le_bytes());
        }
        self.rings[usize::from(q)] = Some(RingAt {
            desc,
            avail,
            size,
            avail_idx: 0,
        });
        Some(Msg::new(code::SET_VRING_ADDR, payload))
    }

    fn vring_addr(&mut self, plausible: bool) -> Msg {
        let q = self.index(plausible);
        if plausible && q < u32::from(self.info.num_queues) {
            let size = self.rings[q as usize].map_or_else(|| self.queue_size(), |r| r.size);
            if let Some(m) = self.ring_addr(q as u16, size) {
                return m;
            }
        }
        let mut payload = q.to_le_bytes().to_vec();
        payload.extend_from_slice(&(self.rng.below(3) as u32).to_le_bytes());
        for align in [16u64, 4, 2, 1] {
            let mut v = if self.rng.chance(50) {
                UADDR_BASE + self.rng.below(8 << 20)
            } else {
                self.rng.edgy_u64()
            };
            if self.rng.chance(80) {
                v -= v % align;
            }
            payload.extend_from_slice(&v.to_le_bytes());
        }
        Msg::new(code::SET_VRING_ADDR, payload)
    }

    /// SET_VRING_KICK/CALL/ERR: an eventfd when plausible (a kick eventfd
    /// is kept to kick with), else any fd, none, or the no-fd flag wrong.
    pub(super) fn vring_fd_msg(&mut self, c: u32, q: u16, plausible: bool) -> Msg {
        let index = if plausible {
            u64::from(q)
        } else {
            u64::from(self.index(false) as u8)
        };
        if plausible || self.rng.chance(40) {
            let fd = eventfd();
            if c == code::SET_VRING_KICK && usize::from(q) < self.kicks.len() {
                self.kicks[usize::from(q)] = Some(fd.try_clone().expect("dup"));
            }
            return Msg::new(c, index.to_le_bytes().to_vec()).with_fd(fd);
        }
        let m = Msg::new(c, (index | 0x100).to_le_bytes().to_vec());
        match self.rng.below(4) {
            // The no-fd flag: polling (refused or taken as "no fd").
            0 => m,
            // The flag and an fd anyway.
            1 => m.with_fd(eventfd()),
            // No flag, no fd.
            2 => Msg::new(c, index.to_le_bytes().to_vec()),
            _ => {
                let fd = self.junk_fd();
                Msg::new(c, index.to_le_bytes().to_vec()).with_fd(fd)
            }
        }
    }

    /// GET_INFLIGHT_FD: the queues and size a frontend would ask for, or any.
    pub(super) fn get_inflight_fd(&mut self, plausible: bool) -> Msg {
        let (nq, qs) = if plausible {
            (
                self.rng.range(1, u64::from(self.info.num_queues)),
                u64::from(self.queue_size()),
            )
        } else {
            (self.rng.below(1 << 16), self.rng.below(1 << 16))
        };
        let mut payload = 0u64.to_le_bytes().to_vec();
        payload.extend_from_slice(&0u64.to_le_bytes());
        payload.extend_from_slice(&(nq as u16).to_le_bytes());
        payload.extend_from_slice(&(qs as u16).to_le_bytes());
        // repr(C): padded to 24 bytes.
        payload.extend_from_slice(&[0; 4]);
        Msg::new(code::GET_INFLIGHT_FD, payload)
    }

    fn set_inflight_fd(&mut self, plausible: bool) -> Msg {
        if plausible {
            if let Some((payload, fd)) = &self.inflight {
                let fd = fd.try_clone().expect("dup");
                return Msg::new(code::SET_INFLIGHT_FD, payload.clone()).with_fd(fd);
            }
        }
        let any = self.rng.edgy_u64();
        let mut payload = self.rng.pick(&[0, PAGE, any]).to_le_bytes().to_vec();
        let any = self.rng.edgy_u64();
        payload.extend_from_slice(&self.rng.pick(&[0, 64, any]).to_le_bytes());
        payload.extend_from_slice(&(self.rng.below(6) as u16).to_le_bytes());
        payload.extend_from_slice(
            &(self.rng.pick(&[0, 1, 128, 256, 1000, 65535]) as u16).to_le_bytes(),
        );
        payload.extend_from_slice(&[0; 4]);
        let fd = match self.rng.below(3) {
            0 => self.junk_fd(),
            _ => dup(&memfd(self.rng.below(16 * PAGE))),
        };
        Msg::new(code::SET_INFLIGHT_FD, payload).with_fd(fd)
    }

    /// ADD_MEM_REG: a new region past the table's end, or anything.
    fn add_mem_reg(&mut self, plausible: bool) -> Msg {
        let mut payload = 0u64.to_le_bytes().to_vec();
        if plausible {
            let gap = PAGE * self.rng.below(16);
            let r = self.new_region(self.mem_end() + gap);
            payload.extend(region_bytes(r.gpa, r.size, r.uaddr, 0));
            let m = Msg::new(code::ADD_MEM_REG, payload).with_fd(dup(&r.file));
            self.regions.push(r);
            return m;
        }
        let (gpa, size) = (self.rng.edgy_u64(), self.rng.edgy_u64());
        let any = self.rng.edgy_u64();
        let offset = self.rng.pick(&[0, 1, PAGE, any]);
        payload.extend(region_bytes(gpa, size, self.rng.edgy_u64(), offset));
        let m = Msg::new(code::ADD_MEM_REG, payload);
        match self.rng.below(4) {
            0 => m,
            1 => {
                let fd = self.junk_fd();
                m.with_fd(fd)
            }
            _ => m.with_fd(dup(&memfd(self.rng.below(64) * PAGE))),
        }
    }

    /// REM_MEM_REG: one of the session's regions, or anything.
    fn rem_mem_reg(&mut self, plausible: bool) -> Msg {
        let mut payload = 0u64.to_le_bytes().to_vec();
        if plausible && !self.regions.is_empty() {
            let i = self.rng.below(self.regions.len() as u64) as usize;
            let r = self.regions.swap_remove(i);
            payload.extend(region_bytes(r.gpa, r.size, r.uaddr, 0));
        } else {
            let (gpa, size) = (self.rng.edgy_u64(), self.rng.edgy_u64());
            payload.extend(region_bytes(gpa, size, self.rng.edgy_u64(), 0));
        }
        let m = Msg::new(code::REM_MEM_REG, payload);
        // The spec lets a frontend attach an fd the backend must close.
        if self.rng.chance(10) {
            m.with_fd(eventfd())
        } else {
            m
        }
    }

    /// GET_CONFIG / SET_CONFIG: offset, size, flags, then `size` bytes.
    fn config(&mut self, c: u32, plausible: bool) -> Msg {
        let (offset, size, flags) = if plausible {
            let offset = self.rng.below(60) as u32;
            (
                offset,
                self.rng.range(1, 60 - u64::from(offset)) as u32,
                0u32,
            )
        } else {
            let (any_offset, any_size) = (self.rng.next_u32(), self.rng.next_u32());
            (
                self.rng.pick(&[0, 8, 255, 256, u32::MAX, any_offset]),
                self.rng.pick(&[0, 1, 8, 256, 257, u32::MAX, any_size]),
                self.rng.below(4) as u32,
            )
        };
        let mut payload = offset.to_le_bytes().to_vec();
        payload.extend_from_slice(&size.to_le_bytes());
        payload.extend_from_slice(&flags.to_le_bytes());
        let body = if plausible || self.rng.chance(50) {
            size.min(256)
        } else {
            self.rng.below(300) as u32
        };
        payload.extend(std::iter::repeat_n(0xa5u8, body as usize));
        Msg::new(c, payload)
    }

    /// A u64 payload: plausible features or anything.
    fn features(&mut self, c: u32, plausible: bool) -> Msg {
        let v = if !plausible {
            self.rng.edgy_u64()
        } else if c == code::SET_FEATURES {
            let mut f = self.info.features & self.rng.next_u64();
            if self.rng.chance(90) {
                f |= PROTOCOL_FEATURES & self.info.features;
            }
            f
        } else {
            let mut p = self.info.protocol & self.rng.next_u64();
            if self.rng.chance(90) {
                p |= proto::REPLY_ACK & self.info.protocol;
            }
            p
        };
        Msg::new(c, v.to_le_bytes().to_vec())
    }

    /// Whether a plausible `c` can be taken now (careful sessions): not
    /// refused whatever it says, its protocol feature negotiated.
    fn allowed(&self, c: u32) -> bool {
        let needs = match c {
            code::GET_QUEUE_NUM => proto::MQ,
            code::GET_CONFIG => proto::CONFIG,
            code::SET_LOG_BASE => proto::LOG_SHMFD,
            code::GET_INFLIGHT_FD => proto::INFLIGHT_SHMFD,
            code::SET_INFLIGHT_FD if self.inflight.is_none() => return false,
            code::RESET_DEVICE => proto::RESET_DEVICE,
            code::GET_MAX_MEM_SLOTS | code::ADD_MEM_REG | code::REM_MEM_REG => {
                proto::CONFIGURE_MEM_SLOTS
            }
            code::SET_VRING_ENABLE if self.acked_features & PROTOCOL_FEATURES == 0 => return false,
            c if ALWAYS_REFUSED.contains(&c) => return false,
            _ => 0,
        };
        self.acked_proto & needs == needs
    }

    /// Any message of the protocol with random values (`careful`: only
    /// plausible ones, never a message refused whatever it says), sometimes
    /// with a wrong size or fds where none belong.
    pub(super) fn random_message(&mut self, careful: bool) -> Msg {
        let total: u64 = MIX.iter().map(|(_, w)| w).sum();
        let c = loop {
            let mut pick = self.rng.below(total);
            let c = MIX
                .iter()
                .find(|(_, w)| {
                    let hit = pick < *w;
                    pick = pick.saturating_sub(*w);
                    hit
                })
                .map_or(0, |(c, _)| *c);
            if !careful || self.allowed(c) {
                break c;
            }
        };
        let p = careful || self.rng.chance(60);
        let mut m = match c {
            code::SET_FEATURES | code::SET_PROTOCOL_FEATURES => self.features(c, p),
            code::SET_MEM_TABLE if p => self.valid_mem_table(),
            code::SET_MEM_TABLE => self.bad_mem_table(),
            code::SET_LOG_BASE => self.log_base(p),
            code::SET_LOG_FD => Msg::new(c, 0u64.to_le_bytes().to_vec()).with_fd(eventfd()),
            code::SET_VRING_NUM => {
                let q = self.index(p);
                let num = if p {
                    u32::from(self.queue_size())
                } else {
                    self.rng.edgy_u64() as u32
                };
                Msg::new(c, state(q, num))
            }
            code::SET_VRING_ADDR => self.vring_addr(p),
            code::SET_VRING_BASE => {
                let q = self.index(p);
                let base = if p {
                    self.rng.below(1 << 16)
                } else {
                    self.rng.edgy_u64()
                };
                Msg::new(c, state(q, base as u32))
            }
            code::GET_VRING_BASE => {
                let q = self.index(p);
                Msg::new(c, state(q, 0))
            }
            code::SET_VRING_KICK | code::SET_VRING_CALL | code::SET_VRING_ERR => {
                let q = self.index(true) as u16;
                self.vring_fd_msg(c, q, p)
            }
            code::SET_VRING_ENABLE => {
                let q = self.index(p);
                let on = if p || self.rng.chance(50) {
                    self.rng.below(2)
                } else {
                    self.rng.edgy_u64()
                };
                Msg::new(c, state(q, on as u32))
            }
            code::GET_CONFIG | code::SET_CONFIG => self.config(c, p),
            code::GET_INFLIGHT_FD => self.get_inflight_fd(p),
            code::SET_INFLIGHT_FD => self.set_inflight_fd(p),
            code::ADD_MEM_REG => self.add_mem_reg(p),
            code::REM_MEM_REG => self.rem_mem_reg(p),
            0 => {
                let c = if self.rng.chance(80) {
                    self.rng.pick(&UNKNOWN)
                } else {
                    self.rng.range(41, 1 << 20) as u32
                };
                let len = self.rng.below(48) as usize;
                let payload = (0..len).map(|_| self.rng.next_u32() as u8).collect();
                Msg::new(c, payload)
            }
            // GET_FEATURES, SET_OWNER, RESET_OWNER, GET_PROTOCOL_FEATURES,
            // GET_QUEUE_NUM, RESET_DEVICE, GET_MAX_MEM_SLOTS: no payload.
            c => Msg::new(c, Vec::new()),
        };
        if !careful {
            if self.rng.chance(4) {
                // A size the message does not have.
                let len = self.rng.below(48) as usize;
                if len != m.payload.len() {
                    m.payload = (0..len).map(|_| self.rng.next_u32() as u8).collect();
                }
            }
            if self.rng.chance(3) {
                if m.fds.is_empty() {
                    m.fds.push(eventfd());
                } else {
                    m.fds.clear();
                }
            }
        }
        m
    }
}
