//! The vhost-user side of the adversarial frontend: connect, negotiate, share
//! memory, set up one queue, then publish whatever the test lays out.
//! Every socket operation has a timeout, so a stuck daemon cannot hang a test.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserInflight, VhostUserProtocolFeatures,
    VhostUserVringAddrFlags,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserDirtyLogRegion, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::guest_memory::{GuestRam, QVA_BASE};
use super::split_ring::{SplitRing, RING_SPAN};

/// Guest memory size; rings and indirect tables live in the first MiB.
pub const MEM_SIZE: u64 = 8 << 20;
/// Queue q's rings at q * RING_SPAN.
pub const MAX_QUEUES: u16 = 4;
/// Indirect tables.
const INDIRECT_AREA: u64 = MAX_QUEUES as u64 * RING_SPAN;
pub(super) const INDIRECT_END: u64 = 0x10_0000;
/// Headers, status bytes, data buffers.
const SCRATCH_AREA: u64 = 0x10_0000;

/// How long one vhost-user message may take.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(3);

const PROTOCOL_FEATURES: u64 = 1 << 30;
/// VHOST_F_LOG_ALL: log every write into guest memory (migration).
const LOG_ALL: u64 = 1 << 26;

#[derive(Clone, Debug)]
pub struct AdversaryOptions {
    /// Queues to run (at most MAX_QUEUES; the daemon must offer them).
    pub num_queues: u16,
    pub queue_size: u16,
    /// Negotiate VIRTIO_RING_F_EVENT_IDX / VIRTIO_RING_F_INDIRECT_DESC if offered.
    pub event_idx: bool,
    pub indirect: bool,
    /// Negotiate INFLIGHT_SHMFD if offered, and keep the region across
    /// [`Adversary::reconnect`] as QEMU does.
    pub inflight: bool,
    /// Negotiate LOG_SHMFD (live migration's dirty log) if offered.
    pub dirty_log: bool,
    /// Negotiate CONFIGURE_MEM_SLOTS (ADD_MEM_REG / REM_MEM_REG) if offered.
    pub mem_slots: bool,
    /// Start this queue without SET_VRING_ADDR (a protocol probe).
    pub unaddressed: Option<u16>,
    /// Ask GET_INFLIGHT_FD for a region of (queues, queue size) other than
    /// the rings' own (a protocol probe).
    pub inflight_region: Option<(u16, u16)>,
    /// Negotiate RESET_DEVICE if offered.
    pub reset_device: bool,
}

impl Default for AdversaryOptions {
    fn default() -> Self {
        AdversaryOptions {
            num_queues: 1,
            queue_size: 256,
            event_idx: true,
            indirect: true,
            inflight: false,
            dirty_log: false,
            mem_slots: false,
            unaddressed: None,
            inflight_region: None,
            reset_device: false,
        }
    }
}

/// A piece of the adversary's guest RAM as a memory region.
#[derive(Clone, Copy, Debug)]
pub struct RamRegion {
    pub gpa: u64,
    pub size: u64,
    /// Where it starts in the guest RAM's memfd.
    pub ram_offset: u64,
}

/// What the device did with what was published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A used entry was published.
    Used { id: u32, len: u32 },
    /// The daemon closed the connection.
    Closed,
    /// Nothing within the wait.
    Quiet,
}

/// One running queue: its ring, eventfds and the driver's indexes.
pub(super) struct Queue {
    pub(super) ring: SplitRing,
    pub(super) kick: EventFd,
    call: EventFd,
    pub(super) err: EventFd,
    /// The driver's next available index (published or not).
    pub(super) avail_idx: u16,
    /// Used entries consumed so far.
    pub(super) used_seen: u16,
    pub(super) next_desc: u16,
}

/// A connected frontend with its queues running; ring operations act on
/// the selected queue (0 unless [`Adversary::select`] says otherwise).
pub struct Adversary {
    frontend: Frontend,
    /// The same socket, watched for the daemon hanging up.
    pub(super) hangup: Epoll,
    _sock: UnixStream,
    pub ram: GuestRam,
    queues: Vec<Queue>,
    current: usize,
    pub features: u64,
    pub capacity_sectors: u64,
    pub(super) next_indirect: u64,
    pub(super) next_scratch: u64,
    opts: AdversaryOptions,
    /// The inflight region the daemon gave (GET_INFLIGHT_FD), kept by the
    /// frontend across daemon restarts.
    inflight: Option<(VhostUserInflight, File)>,
}

/// What a frontend keeps when its backend goes away: guest memory, rings
/// and the inflight region.
struct Kept {
    ram: GuestRam,
    queues: Vec<Queue>,
    inflight: Option<(VhostUserInflight, File)>,
    next_indirect: u64,
    next_scratch: u64,
}

fn err(what: &str) -> impl Fn(vhost::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Adversary {
    pub fn connect(socket: &Path, opts: &AdversaryOptions) -> Result<Adversary, String> {
        Adversary::open(socket, opts, None)
    }

    /// What QEMU (`reconnect=1`) does when its backend died and a new one
    /// listens: connect again with the same guest memory, rings and inflight
    /// region; each ring resumes from its used index (QEMU rewinds the
    /// available index there when the backend dies).
    pub fn reconnect(self, socket: &Path) -> Result<Adversary, String> {
        let opts = self.opts.clone();
        let kept = Kept {
            ram: self.ram,
            queues: self.queues,
            inflight: self.inflight,
            next_indirect: self.next_indirect,
            next_scratch: self.next_scratch,
        };
        Adversary::open(socket, &opts, Some(kept))
    }

    /// Whether the daemon took inflight tracking (GET_INFLIGHT_FD answered).
    pub fn tracks_inflight(&self) -> bool {
        self.inflight.is_some()
    }

    fn open(
        socket: &Path,
        opts: &AdversaryOptions,
        kept: Option<Kept>,
    ) -> Result<Adversary, String> {
        let sock = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
        sock.set_read_timeout(Some(SOCKET_TIMEOUT))
            .and_then(|_| sock.set_write_timeout(Some(SOCKET_TIMEOUT)))
            .map_err(|e| format!("socket timeouts: {e}"))?;
        let hangup = Epoll::new().map_err(|e| format!("epoll: {e}"))?;
        hangup
            .ctl(
                ControlOperation::Add,
                sock.as_raw_fd(),
                EpollEvent::new(EventSet::READ_HANG_UP | EventSet::HANG_UP, 0),
            )
            .map_err(|e| format!("epoll add: {e}"))?;
        assert!(
            (1..=MAX_QUEUES).contains(&opts.num_queues),
            "1 to {MAX_QUEUES} queues"
        );
        let mut frontend = Frontend::from_stream(
            sock.try_clone().map_err(|e| format!("dup: {e}"))?,
            u64::from(opts.num_queues),
        );
        frontend.set_owner().map_err(err("SET_OWNER"))?;
        let offered = frontend.get_features().map_err(err("GET_FEATURES"))?;
        let mut wanted = 1u64 << VIRTIO_F_VERSION_1 | PROTOCOL_FEATURES;
        // The blk features the requests below rely on: size and segment
        // limits, block size, flush, multiqueue.
        wanted |= (1 << 1) | (1 << 2) | (1 << 6) | (1 << 9) | (1 << 12);
        if opts.event_idx {
            wanted |= 1 << VIRTIO_RING_F_EVENT_IDX;
        }
        if opts.indirect {
            wanted |= 1 << VIRTIO_RING_F_INDIRECT_DESC;
        }
        let features = offered & wanted;
        if features & PROTOCOL_FEATURES == 0 {
            return Err("the daemon does not offer VHOST_USER_F_PROTOCOL_FEATURES".into());
        }
        let proto = frontend
            .get_protocol_features()
            .map_err(err("GET_PROTOCOL_FEATURES"))?;
        let mut want_proto = VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::MQ;
        if opts.inflight {
            want_proto |= VhostUserProtocolFeatures::INFLIGHT_SHMFD;
        }
        if opts.mem_slots {
            want_proto |= VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS;
        }
        if opts.reset_device {
            want_proto |= VhostUserProtocolFeatures::RESET_DEVICE;
        }
        if opts.dirty_log {
            if !proto.contains(VhostUserProtocolFeatures::LOG_SHMFD) {
                return Err("the daemon does not offer LOG_SHMFD".into());
            }
            want_proto |= VhostUserProtocolFeatures::LOG_SHMFD;
        }
        frontend
            .set_protocol_features(proto & want_proto)
            .map_err(err("SET_PROTOCOL_FEATURES"))?;
        if proto.contains(VhostUserProtocolFeatures::REPLY_ACK) {
            // Every later message is acknowledged: errors surface where they happen.
            frontend.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        }
        frontend
            .set_features(features)
            .map_err(err("SET_FEATURES"))?;
        let capacity_sectors = if proto.contains(VhostUserProtocolFeatures::CONFIG) {
            let (_, cfg) = frontend
                .get_config(0, 8, VhostUserConfigFlags::WRITABLE, &[0u8; 8])
                .map_err(err("GET_CONFIG"))?;
            u64::from_le_bytes(
                cfg.get(0..8)
                    .and_then(|c| c.try_into().ok())
                    .unwrap_or([0; 8]),
            )
        } else {
            0
        };

        let (ram, queues, kept_inflight, next_indirect, next_scratch) = match kept {
            Some(k) => (
                k.ram,
                Some(k.queues),
                k.inflight,
                k.next_indirect,
                k.next_scratch,
            ),
            None => (
                GuestRam::new(MEM_SIZE).map_err(|e| format!("guest memory: {e}"))?,
                None,
                None,
                INDIRECT_AREA,
                SCRATCH_AREA,
            ),
        };
        // As QEMU's vhost-user-blk: the region is asked for once and given
        // back to every later backend.
        let inflight = if proto.contains(VhostUserProtocolFeatures::INFLIGHT_SHMFD) && opts.inflight
        {
            let region = match kept_inflight {
                Some(r) => r,
                None => {
                    let (queues, size) = opts
                        .inflight_region
                        .unwrap_or((opts.num_queues, opts.queue_size));
                    frontend
                        .get_inflight_fd(&VhostUserInflight::new(0, 0, queues, size))
                        .map_err(err("GET_INFLIGHT_FD"))?
                }
            };
            frontend
                .set_inflight_fd(&region.0, region.1.as_raw_fd())
                .map_err(err("SET_INFLIGHT_FD"))?;
            Some(region)
        } else {
            None
        };
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: ram.size(),
            userspace_addr: QVA_BASE,
            mmap_offset: 0,
            mmap_handle: ram.fd(),
        };
        frontend
            .set_mem_table(&[region])
            .map_err(err("SET_MEM_TABLE"))?;

        let restarted = queues.is_some();
        let mut adv = Adversary {
            frontend,
            hangup,
            _sock: sock,
            ram,
            queues: queues.unwrap_or_default(),
            current: 0,
            features,
            capacity_sectors,
            next_indirect,
            next_scratch,
            opts: opts.clone(),
            inflight,
        };
        if restarted {
            for q in 0..adv.queues.len() {
                let used = adv.queues[q].ring.used_idx(&adv.ram);
                adv.start_queue(q, used)?;
            }
            return Ok(adv);
        }
        let efd = || EventFd::new(EFD_NONBLOCK).map_err(|e| format!("eventfd: {e}"));
        for q in 0..opts.num_queues {
            adv.queues.push(Queue {
                ring: SplitRing {
                    size: opts.queue_size,
                    base: u64::from(q) * RING_SPAN,
                },
                kick: efd()?,
                call: efd()?,
                err: efd()?,
                avail_idx: 0,
                used_seen: 0,
                next_desc: 0,
            });
            adv.start_queue(usize::from(q), 0)?;
        }
        Ok(adv)
    }

    /// Dirty logging as QEMU turns it on to migrate: SET_LOG_BASE with a
    /// memfd bitmap covering guest memory (one bit per 4 KiB page), then
    /// VHOST_F_LOG_ALL in SET_FEATURES and every used ring logged at its
    /// guest address (SET_VRING_ADDR with VHOST_VRING_F_LOG on the running
    /// rings). Returns the log to read the bits from.
    pub fn start_dirty_log(&mut self) -> Result<File, String> {
        // SAFETY: the name is NUL-terminated; only a new fd is returned.
        let fd = unsafe { libc::memfd_create(c"adversary-log".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("memfd: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just created and nothing else owns it.
        let log = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let size = MEM_SIZE / 4096 / 8;
        log.set_len(size).map_err(|e| format!("log size: {e}"))?;
        self.frontend
            .set_log_base(
                0,
                Some(VhostUserDirtyLogRegion {
                    mmap_size: size,
                    mmap_offset: 0,
                    mmap_handle: log.as_raw_fd(),
                }),
            )
            .map_err(err("SET_LOG_BASE"))?;
        self.frontend
            .set_features(self.features | LOG_ALL)
            .map_err(err("SET_FEATURES(LOG_ALL)"))?;
        for q in 0..self.queues.len() {
            let (desc, used, avail) = self.queues[q].ring.addrs(QVA_BASE);
            let size = self.queues[q].ring.size;
            self.frontend
                .set_vring_addr(
                    q,
                    &VringConfigData {
                        queue_max_size: size,
                        queue_size: size,
                        flags: VhostUserVringAddrFlags::VHOST_VRING_F_LOG.bits(),
                        desc_table_addr: desc,
                        used_ring_addr: used,
                        avail_ring_addr: avail,
                        log_addr: Some(used - QVA_BASE),
                    },
                )
                .map_err(err("SET_VRING_ADDR(log)"))?;
        }
        Ok(log)
    }

    /// SET_MEM_TABLE of one region of `size` bytes at guest-physical 0 on
    /// `fd` (protocol probes: an fd shorter than the region).
    pub fn send_mem_table(&mut self, size: u64, fd: &File) -> Result<(), String> {
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: size,
            userspace_addr: QVA_BASE,
            mmap_offset: 0,
            mmap_handle: fd.as_raw_fd(),
        };
        self.frontend
            .set_mem_table(&[region])
            .map(|_| ())
            .map_err(err("SET_MEM_TABLE"))
    }

    /// SET_MEM_TABLE of pieces of the adversary's guest RAM placed where the
    /// test says (protocol probes: regions off the page grid); each at
    /// frontend address QVA_BASE + its guest-physical address.
    pub fn send_ram_regions(&mut self, regions: &[RamRegion]) -> Result<(), String> {
        let fd = self.ram.fd();
        let table: Vec<_> = regions
            .iter()
            .map(|r| VhostUserMemoryRegionInfo {
                guest_phys_addr: r.gpa,
                memory_size: r.size,
                userspace_addr: QVA_BASE + r.gpa,
                mmap_offset: r.ram_offset,
                mmap_handle: fd,
            })
            .collect();
        self.frontend
            .set_mem_table(&table)
            .map(|_| ())
            .map_err(err("SET_MEM_TABLE"))
    }

    /// SET_LOG_BASE of `size` bytes at `offset` of `fd` (needs
    /// `AdversaryOptions::dirty_log`).
    pub fn send_log_base(&mut self, size: u64, offset: u64, fd: &File) -> Result<(), String> {
        self.frontend
            .set_log_base(
                0,
                Some(VhostUserDirtyLogRegion {
                    mmap_size: size,
                    mmap_offset: offset,
                    mmap_handle: fd.as_raw_fd(),
                }),
            )
            .map_err(err("SET_LOG_BASE"))
    }

    /// SET_VRING_NUM on queue `q`.
    pub fn send_vring_num(&mut self, q: usize, num: u16) -> Result<(), String> {
        self.frontend
            .set_vring_num(q, num)
            .map_err(err("SET_VRING_NUM"))
    }

    /// ADD_MEM_REG of `size` bytes at guest-physical `gpa` on `fd` (needs
    /// `AdversaryOptions::mem_slots`).
    pub fn send_add_mem_region(&mut self, gpa: u64, size: u64, fd: &File) -> Result<(), String> {
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: gpa,
            memory_size: size,
            userspace_addr: QVA_BASE + gpa,
            mmap_offset: 0,
            mmap_handle: fd.as_raw_fd(),
        };
        self.frontend
            .add_mem_region(&region)
            .map(|_| ())
            .map_err(err("ADD_MEM_REG"))
    }

    /// SET_VRING_CALL on queue `q` with `fd` in place of the adversary's own.
    pub fn send_vring_call(&mut self, q: usize, fd: &EventFd) -> Result<(), String> {
        self.frontend
            .set_vring_call(q, fd)
            .map_err(err("SET_VRING_CALL"))
    }

    /// SET_VRING_KICK on queue `q` with `fd` in place of the adversary's own.
    pub fn send_vring_kick(&mut self, q: usize, fd: &EventFd) -> Result<(), String> {
        self.frontend
            .set_vring_kick(q, fd)
            .map_err(err("SET_VRING_KICK"))
    }

    /// The inflight region's fd as the daemon handed it over.
    pub fn inflight_file(&self) -> Option<&File> {
        self.inflight.as_ref().map(|(_, f)| f)
    }

    /// Migration over: SET_FEATURES without VHOST_F_LOG_ALL.
    pub fn stop_dirty_log(&mut self) -> Result<(), String> {
        self.frontend
            .set_features(self.features)
            .map_err(err("SET_FEATURES"))
    }

    /// SET_VRING_NUM/ADDR/BASE(base)/CALL/ERR/KICK/ENABLE for queue `q`.
    fn start_queue(&mut self, q: usize, base: u16) -> Result<(), String> {
        let Queue {
            ring,
            kick,
            call,
            err: err_fd,
            ..
        } = &self.queues[q];
        let (desc, used, avail) = ring.addrs(QVA_BASE);
        let f = &mut self.frontend;
        f.set_vring_num(q, ring.size)
            .map_err(err("SET_VRING_NUM"))?;
        if self.opts.unaddressed != Some(q as u16) {
            f.set_vring_addr(
                q,
                &VringConfigData {
                    queue_max_size: ring.size,
                    queue_size: ring.size,
                    flags: 0,
                    desc_table_addr: desc,
                    used_ring_addr: used,
                    avail_ring_addr: avail,
                    log_addr: None,
                },
            )
            .map_err(err("SET_VRING_ADDR"))?;
        }
        f.set_vring_base(q, base).map_err(err("SET_VRING_BASE"))?;
        f.set_vring_call(q, call).map_err(err("SET_VRING_CALL"))?;
        f.set_vring_err(q, err_fd).map_err(err("SET_VRING_ERR"))?;
        f.set_vring_kick(q, kick).map_err(err("SET_VRING_KICK"))?;
        f.set_vring_enable(q, true)
            .map_err(err("SET_VRING_ENABLE"))?;
        Ok(())
    }

    /// What a VMM does on a device reset: stop the selected queue
    /// (GET_VRING_BASE, bounded by the socket timeout), then start it again
    /// on zeroed rings. Returns the position the daemon reported.
    pub fn restart_queue(&mut self) -> Result<u32, String> {
        let q = self.current;
        let base = self
            .frontend
            .get_vring_base(q)
            .map_err(err("GET_VRING_BASE"))?;
        let queue = &mut self.queues[q];
        queue.ring.clear(&self.ram);
        queue.avail_idx = 0;
        queue.used_seen = 0;
        queue.next_desc = 0;
        self.start_queue(q, 0)?;
        Ok(base)
    }

    /// RESET_DEVICE (needs `AdversaryOptions::reset_device`).
    pub fn reset_device(&mut self) -> Result<(), String> {
        self.frontend.reset_device().map_err(err("RESET_DEVICE"))
    }

    /// What a VMM does to use the device again after RESET_DEVICE: the
    /// features once more, then every queue on zeroed rings from index 0.
    pub fn reinitialize(&mut self) -> Result<(), String> {
        self.frontend
            .set_features(self.features)
            .map_err(err("SET_FEATURES"))?;
        for q in 0..self.queues.len() {
            let queue = &mut self.queues[q];
            queue.ring.clear(&self.ram);
            queue.avail_idx = 0;
            queue.used_seen = 0;
            queue.next_desc = 0;
            self.start_queue(q, 0)?;
        }
        Ok(())
    }

    /// Makes queue `q` the one ring operations act on.
    pub fn select(&mut self, q: usize) {
        assert!(q < self.queues.len(), "queue {q} not running");
        self.current = q;
    }

    /// The selected queue.
    pub fn current(&self) -> usize {
        self.current
    }

    pub(super) fn q(&self) -> &Queue {
        &self.queues[self.current]
    }

    pub(super) fn qm(&mut self) -> &mut Queue {
        &mut self.queues[self.current]
    }

    /// The selected queue's ring.
    pub fn ring(&self) -> SplitRing {
        self.q().ring
    }

    pub fn has_feature(&self, bit: u32) -> bool {
        self.features & (1 << bit) != 0
    }

    pub fn event_idx(&self) -> bool {
        self.has_feature(VIRTIO_RING_F_EVENT_IDX)
    }

    pub fn indirect(&self) -> bool {
        self.has_feature(VIRTIO_RING_F_INDIRECT_DESC)
    }

    /// The selected queue's call eventfd (the device's used-buffer
    /// notifications), for a driver that sleeps until completions.
    pub fn call(&self) -> &EventFd {
        &self.q().call
    }

    /// Asks the daemon to stop the selected queue (GET_VRING_BASE) and
    /// returns its position; fails after the socket timeout if it is stuck.
    pub fn stop_queue(&mut self) -> Result<u32, String> {
        self.frontend
            .get_vring_base(self.current)
            .map_err(err("GET_VRING_BASE"))
    }
}
