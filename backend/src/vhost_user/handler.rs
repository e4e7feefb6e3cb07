//! The frontend's messages, one method each (`VhostUserBackendReqHandlerMut`).
//! Protocol framing, REPLY_ACK/NEED_REPLY and feature checks of the
//! messages themselves are the `vhost` crate's; what they do to the device,
//! its vrings and memory is here.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use log::{debug, warn};
use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserConfigFlags, VhostUserInflight,
    VhostUserLog, VhostUserMemoryRegion, VhostUserProtocolFeatures, VhostUserShMemConfig,
    VhostUserSharedMsg, VhostUserSingleMemoryRegion, VhostUserVirtioFeatures,
    VhostUserVringAddrFlags, VhostUserVringState,
};
use vhost::vhost_user::{Backend, Error, GpuBackend, Result, VhostUserBackendReqHandlerMut};
use vhost::VhostUserMemoryRegionBase;
use vhost_user_backend::{VringRwLock, VringT};
use virtio_bindings::bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
use virtio_queue::QueueT;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

use super::inflight::{self, InflightRegion};
use super::memory::MemoryTable;
use super::queue_thread::QueueThread;
use crate::device::BlkDevice;
use crate::dirty_log::DirtyLog;

pub struct Handler {
    dev: BlkDevice,
    mem: MemoryTable,
    vrings: Vec<VringRwLock>,
    threads: Vec<QueueThread>,
    /// The thread serving each queue.
    thread_of: Vec<usize>,
    owned: bool,
    acked_features: u64,
    acked_protocol_features: u64,
    /// Queues whose ring addresses the frontend set (SET_VRING_ADDR): only
    /// these are started, never one at guest-physical 0 by default.
    addressed: Vec<bool>,
    /// The inflight region's queues and descriptors per queue, once the
    /// frontend gave one: every ring started must fit in it.
    inflight_dims: Option<InflightDims>,
}

/// What an inflight region covers (`VhostUserInflight`).
#[derive(Clone, Copy, Debug)]
struct InflightDims {
    num_queues: u16,
    queue_size: u16,
}

fn internal(e: io::Error) -> Error {
    Error::ReqHandlerError(e)
}

impl Handler {
    /// A handler for one frontend connection, its queues served by
    /// `threads` threads (at least one, at most one per queue): queue `q` by
    /// thread `q % threads`.
    pub fn new(
        dev: BlkDevice,
        mem: GuestMemoryAtomic<GuestMemoryMmap>,
        threads: usize,
    ) -> io::Result<Self> {
        let queues = dev.num_queues();
        let n = threads.clamp(1, queues.max(1));
        let mut vrings = Vec::new();
        let mut served: Vec<Vec<(usize, VringRwLock)>> = vec![Vec::new(); n];
        for q in 0..queues {
            let vring = VringRwLock::new(mem.clone(), dev.queue_size())
                .map_err(|e| io::Error::other(format!("vring: {e:?}")))?;
            served[q % n].push((q, vring.clone()));
            vrings.push(vring);
        }
        dev.set_vrings(vrings.clone());
        let threads = served
            .into_iter()
            .filter(|s| !s.is_empty())
            .map(|s| QueueThread::spawn(dev.clone(), s))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Self {
            dev,
            mem: MemoryTable::new(mem),
            vrings,
            threads,
            thread_of: (0..queues).map(|q| q % n).collect(),
            owned: false,
            acked_features: 0,
            acked_protocol_features: 0,
            addressed: vec![false; queues],
            inflight_dims: None,
        })
    }

    /// Ends the queue threads (the connection ended).
    pub fn stop_threads(&mut self) {
        for t in &mut self.threads {
            t.stop();
        }
    }

    fn vring(&self, index: u32) -> Result<&VringRwLock> {
        self.vrings.get(index as usize).ok_or(Error::InvalidParam)
    }

    /// Kicks are listened to only while the ring is started and enabled:
    /// the spec's ring states.
    fn update_kick(&mut self, index: usize) {
        let fd = {
            let st = self.vrings[index].get_ref();
            let live = st.get_queue().ready() && st.is_enabled();
            st.get_kick()
                .as_ref()
                .filter(|_| live)
                .map(|k| k.as_raw_fd())
        };
        let t = self.thread_of[index];
        self.threads[t].set_kick(index, fd);
        if fd.is_some() {
            // Requests made available before the kick fd was listened to.
            self.threads[t].wake(index);
        }
    }

    /// A ring starts once it has a kick fd (SET_VRING_KICK/CALL). One the
    /// inflight region does not cover is refused: its requests would be
    /// neither marked nor resubmitted, yet a stop (SIGTERM) leaves what is
    /// in flight to the next daemon as if they were.
    fn start_if_ready(&mut self, index: usize) -> Result<()> {
        let needs_start = self.addressed[index] && {
            let st = self.vrings[index].get_ref();
            !st.get_queue().ready() && st.get_kick().is_some()
        };
        if needs_start {
            let size = self.vrings[index].get_ref().get_queue().size();
            self.check_inflight_covers(index, size)?;
            self.vrings[index].set_queue_ready(true);
            // Before the first kick is served: what a previous daemon left
            // in flight goes first.
            self.dev.restore_inflight(index, &self.vrings[index]);
            self.update_kick(index);
        }
        Ok(())
    }

    /// Whether ring `index` of `size` descriptors fits in the inflight
    /// region (if there is one); refused loudly if not.
    fn check_inflight_covers(&self, index: usize, size: u16) -> Result<()> {
        let Some(d) = self.inflight_dims else {
            return Ok(());
        };
        if index >= usize::from(d.num_queues) || size > d.queue_size {
            warn!(
                "vring {index} of {size} descriptors refused: the inflight region covers {} queues of {} descriptors (its requests would not survive a restart)",
                d.num_queues, d.queue_size
            );
            return Err(Error::InvalidParam);
        }
        Ok(())
    }

    /// The inflight region is taken only while no ring is started: the
    /// workers' marks of requests in flight are in the region they have.
    fn check_rings_stopped(&self, what: &str) -> Result<()> {
        let started =
            (0..self.vrings.len()).find(|&i| self.vrings[i].get_ref().get_queue().ready());
        if let Some(i) = started {
            warn!(
                "{what} refused: vring {i} is started (the region is set before the rings start)"
            );
            return Err(Error::InvalidOperation(
                "inflight region set on a started ring",
            ));
        }
        Ok(())
    }

    /// A memory table reaching guest-physical `last` must fit the dirty log
    /// in force, or the marks past its end are lost: QEMU, while logging,
    /// sends the larger log before the larger table (vhost_commit).
    fn check_log_covers(&self, last: Option<u64>) -> Result<()> {
        match last {
            Some(last) if !self.dev.dirty_log().covers(last) => {
                debug!("memory table reaching {last:#x} refused: the dirty log ends before");
                Err(Error::InvalidParam)
            }
            _ => Ok(()),
        }
    }

    fn inflight_negotiated(&self) -> bool {
        self.dev
            .protocol_features()
            .contains(VhostUserProtocolFeatures::INFLIGHT_SHMFD)
            && self.acked_protocol_features & VhostUserProtocolFeatures::INFLIGHT_SHMFD.bits() != 0
    }

    fn has_feature(&self, f: VhostUserVirtioFeatures) -> bool {
        self.acked_features & f.bits() != 0
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

impl VhostUserBackendReqHandlerMut for Handler {
    fn set_owner(&mut self) -> Result<()> {
        if self.owned {
            return Err(Error::InvalidOperation("already claimed"));
        }
        self.owned = true;
        Ok(())
    }

    fn reset_owner(&mut self) -> Result<()> {
        self.owned = false;
        self.acked_features = 0;
        self.acked_protocol_features = 0;
        Ok(())
    }

    fn reset_device(&mut self) -> Result<()> {
        // Every ring stopped, not only disabled: a stopped ring is neither
        // popped nor polled (`process_queue`, `has_avail` check `ready`),
        // and the next SET_VRING_ADDR / KICK starts it afresh (the used
        // index read from the ring, the inflight region initialised again).
        for i in 0..self.vrings.len() {
            self.vrings[i].set_queue_ready(false);
            self.vrings[i].set_enabled(false);
            self.update_kick(i);
        }
        // What was in flight is dropped, the inflight region forgets it.
        self.dev.reset_device();
        // The rings' state as at connection: size, addresses, indexes and
        // fds. The acked features stay (as libvhost-user's
        // vu_reset_device_exec keeps them); so does EVENT_IDX with them.
        let event_idx = self.acked_features & (1 << VIRTIO_RING_F_EVENT_IDX) != 0;
        for i in 0..self.vrings.len() {
            let vring = &self.vrings[i];
            vring.get_mut().get_queue_mut().reset();
            vring.set_queue_event_idx(event_idx);
            vring.set_kick(None);
            vring.set_call(None);
            vring.set_err(None);
            self.dev.set_used_log(i, None);
            self.dev.set_error_fd(i, None);
            self.addressed[i] = false;
        }
        Ok(())
    }

    fn get_features(&mut self) -> Result<u64> {
        Ok(self.dev.features())
    }

    fn set_features(&mut self, features: u64) -> Result<()> {
        if features & !self.dev.features() != 0 {
            return Err(Error::InvalidParam);
        }
        self.acked_features = features;
        // Dirty logging follows VHOST_F_LOG_ALL: on while QEMU migrates.
        self.dev.dirty_log().set_features(features);
        // Without PROTOCOL_FEATURES rings are enabled at once (spec, "Ring
        // states"); with it they wait for SET_VRING_ENABLE.
        let enable_all = !self.has_feature(VhostUserVirtioFeatures::PROTOCOL_FEATURES);
        let event_idx = features & (1 << VIRTIO_RING_F_EVENT_IDX) != 0;
        for i in 0..self.vrings.len() {
            self.vrings[i].set_queue_event_idx(event_idx);
            if enable_all {
                self.vrings[i].set_enabled(true);
                self.update_kick(i);
            }
        }
        Ok(())
    }

    fn set_mem_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
        postcopy_listening: Option<bool>,
    ) -> Result<Option<Vec<VhostUserMemoryRegionBase>>> {
        if postcopy_listening.is_some() {
            return Err(Error::InvalidOperation("postcopy not supported"));
        }
        let regions = ctx.iter().map(|r| (r.guest_phys_addr, r.memory_size));
        self.check_log_covers(super::memory::last_gpa(regions))?;
        self.mem.set_table(ctx, files).map_err(internal)?;
        self.dev.update_memory(self.mem.atomic().clone());
        Ok(None)
    }

    fn set_vring_num(&mut self, index: u32, num: u32) -> Result<()> {
        let max = u32::from(self.dev.queue_size());
        let vring = self.vring(index)?;
        // A split ring's size is a power of two (virtio 1.x 2.7); virtio-queue
        // ignores any other and would keep serving the old, larger size past
        // the end of the driver's rings.
        if num == 0 || num > max || !num.is_power_of_two() {
            debug!("vring {index}: queue size {num} refused (a power of two, 1-{max})");
            return Err(Error::InvalidParam);
        }
        // A started ring resized past the inflight region too.
        self.check_inflight_covers(index as usize, num as u16)?;
        vring.set_queue_size(num as u16);
        Ok(())
    }

    fn set_vring_addr(
        &mut self,
        index: u32,
        flags: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        log: u64,
    ) -> Result<()> {
        // The used ring is logged at `log` (guest-physical) when asked to.
        let used_log = flags
            .contains(VhostUserVringAddrFlags::VHOST_VRING_F_LOG)
            .then_some(log);
        let vring = self.vring(index)?;
        let gpa = |va| self.mem.to_gpa(va).ok_or(Error::InvalidParam);
        let (desc, avail, used) = (gpa(descriptor)?, gpa(available)?, gpa(used)?);
        // The logging benchmark logs the used ring where it is.
        let used_log = used_log.or(self.dev.dirty_log().forced().then_some(used));
        self.dev.set_used_log(index as usize, used_log);
        // Migration sends SET_VRING_ADDR again on a started ring, same
        // addresses, to turn used-ring logging on: its worker owns the used
        // index then, and resetting it here could race with a completion
        // being published.
        let unchanged = {
            let st = vring.get_ref();
            let q = st.get_queue();
            q.ready() && (q.desc_table(), q.avail_ring(), q.used_ring()) == (desc, avail, used)
        };
        if unchanged {
            return Ok(());
        }
        vring
            .set_queue_info(desc, avail, used)
            .map_err(|_| Error::InvalidParam)?;
        // SET_VRING_BASE carries only the available index: the used index
        // is the ring's own (as libvhost-user does).
        let idx = vring.queue_used_idx().map_err(|_| Error::InvalidParam)?;
        vring.set_queue_next_used(idx);
        self.addressed[index as usize] = true;
        // A frontend that sent SET_VRING_KICK first starts the ring now.
        self.start_if_ready(index as usize)
    }

    fn set_vring_base(&mut self, index: u32, base: u32) -> Result<()> {
        self.vring(index)?.set_queue_next_avail(base as u16);
        Ok(())
    }

    fn get_vring_base(&mut self, index: u32) -> Result<VhostUserVringState> {
        let i = index as usize;
        self.vring(index)?.set_queue_ready(false);
        self.update_kick(i);
        // Reported stopped only once nothing of the queue can write guest
        // memory: the worker completes everything in flight, under its lock.
        self.dev.stop_vring(i);
        let vring = &self.vrings[i];
        let next_avail = vring.queue_next_avail();
        vring.set_kick(None);
        vring.set_call(None);
        Ok(VhostUserVringState::new(index, u32::from(next_avail)))
    }

    fn set_vring_kick(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        let i = usize::from(index);
        self.vring(u32::from(index))?;
        if let Some(f) = &fd {
            // Refused, not warned about per message: the connection ends.
            super::queue_thread::check_kick_fd(f).map_err(|e| {
                internal(io::Error::new(
                    e.kind(),
                    format!("queue {i}'s kick fd cannot be polled (not an eventfd): {e}"),
                ))
            })?;
        }
        // Off the epoll set before the old fd closes (its number may return).
        self.threads[self.thread_of[i]].set_kick(i, None);
        self.vrings[i].set_kick(fd);
        self.start_if_ready(i)?;
        self.update_kick(i);
        Ok(())
    }

    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        let vring = self.vring(u32::from(index))?;
        if let Some(f) = &fd {
            crate::fd_range::set_nonblocking(f).map_err(internal)?;
        }
        let signal = fd.is_some();
        vring.set_call(fd);
        if signal {
            // Once, whatever the ring holds, as libvhost-user does "in case
            // of I/O hang after reconnecting": a daemon that died after
            // publishing a used entry and before signalling left a
            // completion the guest was never told of, and that nothing
            // resubmits (its inflight entry is cleared). A spurious
            // interrupt costs the driver one look at its used ring.
            match vring.signal_used_queue() {
                // Rate-limited: a frontend may send SET_VRING_CALL in a loop.
                Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => crate::worker::vring_warn(
                    format_args!("signalling queue {index}'s new call fd: {e}"),
                ),
                _ => {}
            }
        }
        self.start_if_ready(usize::from(index))
    }

    fn set_vring_err(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        let vring = self.vring(u32::from(index))?;
        if let Some(f) = &fd {
            crate::fd_range::set_nonblocking(f).map_err(internal)?;
        }
        // The worker signals its own copy when the driver breaks the queue
        // (the framework's vring keeps the fd only as something to read).
        let ours = match &fd {
            Some(f) => Some(f.try_clone().map_err(internal)?),
            None => None,
        };
        vring.set_err(fd);
        self.dev.set_error_fd(usize::from(index), ours);
        Ok(())
    }

    fn set_backend_req_fd(&mut self, _backend: Backend) {
        // The crate's `Backend` cannot send CONFIG_CHANGE_MSG: the device
        // keeps its own descriptor of the channel (`backend_channel`).
        let reply_ack =
            self.acked_protocol_features & VhostUserProtocolFeatures::REPLY_ACK.bits() != 0;
        self.dev.open_backend_channel(reply_ack);
    }

    fn get_protocol_features(&mut self) -> Result<VhostUserProtocolFeatures> {
        Ok(self.dev.protocol_features())
    }

    fn set_protocol_features(&mut self, features: u64) -> Result<()> {
        self.acked_protocol_features = features;
        Ok(())
    }

    fn get_queue_num(&mut self) -> Result<u64> {
        Ok(self.vrings.len() as u64)
    }

    fn set_vring_enable(&mut self, index: u32, enable: bool) -> Result<()> {
        if !self.has_feature(VhostUserVirtioFeatures::PROTOCOL_FEATURES) {
            return Err(Error::InactiveFeature(
                VhostUserVirtioFeatures::PROTOCOL_FEATURES,
            ));
        }
        self.vring(index)?.set_enabled(enable);
        self.update_kick(index as usize);
        Ok(())
    }

    fn get_config(
        &mut self,
        offset: u32,
        size: u32,
        _flags: VhostUserConfigFlags,
    ) -> Result<Vec<u8>> {
        Ok(self.dev.get_config(offset, size))
    }

    fn set_config(
        &mut self,
        _offset: u32,
        _buf: &[u8],
        _flags: VhostUserConfigFlags,
    ) -> Result<()> {
        // The block configuration space is read-only here (no writeback toggle).
        Err(Error::InvalidOperation("config space is read-only"))
    }

    fn set_gpu_socket(&mut self, _gpu_backend: GpuBackend) -> Result<()> {
        Err(Error::InvalidOperation("not a gpu"))
    }

    fn get_shared_object(&mut self, _uuid: VhostUserSharedMsg) -> Result<File> {
        Err(Error::InvalidOperation("no shared objects"))
    }

    fn get_inflight_fd(
        &mut self,
        inflight: &VhostUserInflight,
    ) -> Result<(VhostUserInflight, File)> {
        if !self.inflight_negotiated() {
            return Err(Error::InvalidOperation("inflight tracking not negotiated"));
        }
        self.check_rings_stopped("GET_INFLIGHT_FD")?;
        let (num_queues, queue_size) = (inflight.num_queues, inflight.queue_size);
        let (region, file) = InflightRegion::create(num_queues, queue_size).map_err(internal)?;
        let size = (inflight::queue_area(queue_size) * usize::from(num_queues)) as u64;
        // Tracked from now on; SET_INFLIGHT_FD normally follows with this fd.
        self.dev.set_inflight(Some(Arc::new(region)));
        self.inflight_dims = Some(InflightDims {
            num_queues,
            queue_size,
        });
        Ok((
            VhostUserInflight::new(size, 0, num_queues, queue_size),
            file,
        ))
    }

    fn set_inflight_fd(&mut self, inflight: &VhostUserInflight, file: File) -> Result<()> {
        if !self.inflight_negotiated() {
            return Err(Error::InvalidOperation("inflight tracking not negotiated"));
        }
        self.check_rings_stopped("SET_INFLIGHT_FD")?;
        let region = InflightRegion::map(
            file,
            inflight.mmap_offset,
            inflight.mmap_size,
            inflight.num_queues,
            inflight.queue_size,
        )
        .map_err(internal)?;
        self.dev.set_inflight(Some(Arc::new(region)));
        self.inflight_dims = Some(InflightDims {
            num_queues: inflight.num_queues,
            queue_size: inflight.queue_size,
        });
        Ok(())
    }

    fn get_max_mem_slots(&mut self) -> Result<u64> {
        Ok(super::memory::MAX_MEM_SLOTS)
    }

    fn add_mem_region(
        &mut self,
        region: &VhostUserSingleMemoryRegion,
        fd: File,
        postcopy_listening: Option<bool>,
    ) -> Result<Option<VhostUserMemoryRegionBase>> {
        if postcopy_listening.is_some() {
            return Err(Error::InvalidOperation("postcopy not supported"));
        }
        let added = (region.guest_phys_addr, region.memory_size);
        self.check_log_covers(self.mem.last_gpa_with(std::iter::once(added)))?;
        self.mem.add(region, fd).map_err(internal)?;
        self.dev.update_memory(self.mem.atomic().clone());
        Ok(None)
    }

    fn remove_mem_region(&mut self, region: &VhostUserSingleMemoryRegion) -> Result<()> {
        self.mem.remove(region).map_err(internal)?;
        self.dev.update_memory(self.mem.atomic().clone());
        Ok(())
    }

    fn set_device_state_fd(
        &mut self,
        _direction: VhostTransferStateDirection,
        _phase: VhostTransferStatePhase,
        _fd: File,
    ) -> Result<Option<File>> {
        Err(Error::InvalidOperation("no device state transfer"))
    }

    fn check_device_state(&mut self) -> Result<()> {
        Err(Error::InvalidOperation("no device state transfer"))
    }

    fn get_shmem_config(&mut self) -> Result<VhostUserShMemConfig> {
        Err(Error::InvalidOperation("no shared memory regions"))
    }

    fn set_log_base(&mut self, log: &VhostUserLog, file: File) -> Result<()> {
        // Mapped now; marked while LOG_ALL is negotiated (see `dirty_log`).
        let map = DirtyLog::map(file, log.mmap_size, log.mmap_offset).map_err(internal)?;
        // One bit for every page of the table, or marks are dropped: QEMU
        // sizes the log to the table (vhost_get_log_size).
        if let Some(last) = self.mem.last_gpa_with(std::iter::empty()) {
            if !map.covers(last) {
                debug!(
                    "dirty log of {} bytes refused: guest memory reaches {last:#x}",
                    map.len()
                );
                return Err(Error::InvalidParam);
            }
        }
        self.dev.set_log_base(map);
        Ok(())
    }
}
