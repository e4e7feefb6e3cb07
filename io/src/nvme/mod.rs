//! NVMe passthrough paths: a per-controller namespace node `/dev/ngXnY`
//! driven through io_uring `URING_CMD` (SQE128/CQE32), the data pointing
//! straight at the caller's (guest) memory.
//!
//! - [`cmd`]: `struct nvme_uring_cmd` encoding and the NVM commands.
//! - [`identify`]: Identify Namespace / Controller / descriptors parsing and
//!   the namespace identity every path of a disk must share.
//! - [`status`]: the NVMe status field of a completion.
//! - [`ana`]: the ANA log page.
//! - [`ioctl`]: `NVME_IOCTL_ID`, `NVME_IOCTL_ADMIN_CMD` (start-up, ANA re-reads).
//! - [`sysfs`]: which kind of node a device is, controller address, queue limits.
//!
//! Discard: NVMe's Dataset Management takes its range list from memory that
//! must stay valid until the command completes, and `decode` cannot tell
//! which command completed, so the driver cannot own per-command buffers
//! safely. A discard therefore goes (1) as Dataset Management with the range
//! written into a caller-provided scratch iovec of at least
//! [`DeviceInfo::discard_scratch`] bytes (the same lifetime contract as data
//! buffers), else (2) as Write Zeroes with DEAC (deallocate; reads return
//! zeroes afterwards, which a discard allows) when the controller supports
//! Write Zeroes. A controller with Dataset Management only reports
//! `discard_scratch = 16`: a caller without scratch must not offer discard.

pub mod ana;
pub mod cmd;
pub mod identify;
pub mod ioctl;
pub mod status;
pub mod sysfs;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use io_uring::{opcode, squeue, types};
use log::{info, warn};
use mpath::{AnaState, IoOutcome};

use crate::driver::{
    next_ring_file_id, DeviceInfo, IoOp, OpenError, PathDriver, PathOptions, Registered, RingFile,
};
use ana::AnaLog;
use cmd::{NvmeCmd, DSM_RANGE_LEN, MAX_NLB, NVME_URING_CMD_IO, NVME_URING_CMD_IO_VEC};
use identify::{IdController, IdNamespace, NsDescriptors, IDENTIFY_LEN};
use ioctl::AdminError;
use sysfs::NodeKind;

/// Used when neither sysfs nor MDTS bounds a transfer.
const FALLBACK_MAX_TRANSFER: u64 = 128 << 10;
/// NVME_NSID_ALL, the namespace id for controller-wide log pages.
const NSID_ALL: u32 = 0xffff_ffff;

const PERMISSION_HELP: &str = "permission denied. NVMe passthrough needs read-write access to the \
     namespace node (read access with --read-only) and, for the admin commands run at start-up \
     (Identify, the ANA log page) and for any passthrough I/O on kernels before 6.2, \
     CAP_SYS_ADMIN: run the daemon as root or with CAP_SYS_ADMIN (systemd: \
     AmbientCapabilities=CAP_SYS_ADMIN); on 6.2 and later a udev rule giving the daemon's \
     group rw access to /dev/ng* is enough for I/O";

const MULTIPATH_HELP: &str = "the kernel's own NVMe multipath is on for this namespace: this \
     node is its multipath head and the per-controller nodes are hidden. Boot with \
     nvme_core.multipath=N (or `options nvme_core multipath=N` in /etc/modprobe.d/ and \
     reload nvme_core) so each controller gets its own /dev/ngXnY, then give one --path per \
     controller";

/// The driver of one NVMe passthrough path.
#[derive(Debug)]
pub struct NvmeDriver {
    info: DeviceInfo,
    file: File,
    device: String,
    nsid: u32,
    lba_shift: u32,
    /// The namespace's size (NSZE), re-read by `read_capacity`: a grown
    /// namespace takes commands past its old end from then on.
    capacity_lbas: AtomicU64,
    timeout_ms: u32,
    dsm: bool,
    write_zeroes: bool,
    vwc: bool,
    /// Controller reports ANA (CMIC bit 3).
    ana: bool,
    anagrpid: u32,
    nanagrpid: u32,
    nn: u32,
    refused: AtomicU64,
    /// This open's id in rings' file tables.
    ring_file_id: u64,
    /// The namespace's queue has poll queues (`queue/io_poll`).
    io_poll: bool,
}

/// What `prepare` sends.
#[derive(Debug, PartialEq, Eq)]
enum Encoded {
    Cmd {
        cmd_op: u32,
        cmd: NvmeCmd,
    },
    /// Completes at once with success (flush without a volatile write cache).
    Nop,
}

fn os_err(device: &str, source: io::Error) -> OpenError {
    OpenError::Io {
        device: device.to_string(),
        source,
    }
}

fn invalid(device: &str, why: impl Into<String>) -> OpenError {
    OpenError::Invalid {
        device: device.to_string(),
        why: why.into(),
    }
}

fn admin_err(device: &str, what: &str, e: AdminError) -> OpenError {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => {
            invalid(device, format!("{what}: {PERMISSION_HELP}"))
        }
        _ => invalid(device, format!("{what} failed: {e}")),
    }
}

fn identify(fd: RawFd, nsid: u32, cns: u8) -> Result<Vec<u8>, AdminError> {
    let mut buf = vec![0u8; IDENTIFY_LEN];
    ioctl::admin(fd, &NvmeCmd::identify(nsid, cns, 0), &mut buf)?;
    Ok(buf)
}

fn read_ana_log(fd: RawFd, nanagrpid: u32, nn: u32) -> Result<AnaLog, String> {
    let mut buf = vec![0u8; AnaLog::size_for(nanagrpid, nn)];
    let cmd = NvmeCmd::get_log_page(NSID_ALL, ana::LOG_ANA, 0, buf.len() as u32, 0);
    ioctl::admin(fd, &cmd, &mut buf).map_err(|e| format!("get log page 0x0c (ANA): {e}"))?;
    AnaLog::parse(&buf)
}

impl NvmeDriver {
    /// Opens the namespace node `path` (a character device) and reads what
    /// the disk needs from Identify and the ANA log page.
    pub fn open(path: &Path, opts: &PathOptions) -> Result<Self, OpenError> {
        let device = path.display().to_string();
        let dev = device.as_str();
        let meta = std::fs::metadata(path).map_err(|e| os_err(dev, e))?;
        if !meta.file_type().is_char_device() {
            return Err(invalid(dev, "not a character device"));
        }
        let rdev = meta.rdev();
        let kind = sysfs::classify(Path::new("/sys"), libc::major(rdev), libc::minor(rdev));
        let ctrl_dir = match &kind {
            NodeKind::Namespace { ctrl, .. } => Some(ctrl.clone()),
            NodeKind::Head { name } => {
                return Err(invalid(dev, format!("{name}: {MULTIPATH_HELP}")));
            }
            NodeKind::Controller { name } => {
                return Err(invalid(
                    dev,
                    format!(
                        "{name} is an NVMe controller node, which takes no I/O commands \
                         (ENOTTY); use a namespace node of that controller, /dev/ng{}nY \
                         (see /sys/class/nvme/{name}/ng*)",
                        name.trim_start_matches("nvme")
                    ),
                ));
            }
            NodeKind::Other { class } => {
                return Err(invalid(
                    dev,
                    format!("a character device of class {class}, not an NVMe namespace node (/dev/ngXnY)"),
                ));
            }
            NodeKind::Unknown => None,
        };

        let file = OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => invalid(dev, PERMISSION_HELP),
                _ => os_err(dev, e),
            })?;
        let fd = file.as_raw_fd();
        let nsid = ioctl::namespace_id(fd).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTTY) => invalid(
                dev,
                "NVME_IOCTL_ID answered ENOTTY: not an NVMe namespace node (a controller node \
                 /dev/nvmeX takes no I/O commands; use /dev/ngXnY)",
            ),
            _ => os_err(dev, e),
        })?;

        let ctrl_raw = identify(fd, 0, identify::CNS_CONTROLLER)
            .map_err(|e| admin_err(dev, "identify controller", e))?;
        let ctrl = IdController::parse(&ctrl_raw).map_err(|e| invalid(dev, e))?;
        let ns_raw = identify(fd, nsid, identify::CNS_NAMESPACE)
            .map_err(|e| admin_err(dev, "identify namespace", e))?;
        let ns = IdNamespace::parse(&ns_raw).map_err(|e| invalid(dev, e))?;
        // Optional (NVMe 1.3); unprivileged callers may be refused it on newer kernels.
        let desc = match identify(fd, nsid, identify::CNS_NS_DESCRIPTORS) {
            Ok(b) => NsDescriptors::parse(&b),
            Err(e) => {
                info!("{dev}: no namespace identification descriptors ({e}); using NGUID/EUI-64 of identify namespace");
                NsDescriptors::default()
            }
        };

        if ns.nsze == 0 {
            return Err(invalid(
                dev,
                format!("namespace {nsid} has no capacity (not attached or inactive)"),
            ));
        }
        if ns.metadata_size != 0 || ns.protection != 0 {
            return Err(invalid(
                dev,
                format!(
                    "namespace {nsid} is formatted with {} bytes of metadata per {}-byte block \
                     (LBA format {}, protection type {}): metadata formats are not supported; \
                     reformat with an LBA format without metadata (nvme format --lbaf=N)",
                    ns.metadata_size, ns.lba_size, ns.format, ns.protection
                ),
            ));
        }
        let lba_shift = ns.lba_size.trailing_zeros();
        let capacity_bytes = ns
            .nsze
            .checked_mul(u64::from(ns.lba_size))
            .ok_or_else(|| invalid(dev, "namespace size overflows 64 bits"))?;
        let block_size = opts.block_size.unwrap_or(ns.lba_size).max(ns.lba_size);

        // Transfer limits: the kernel never splits passthrough commands, so
        // a request over max_hw_sectors or max_segments fails with EINVAL.
        let page = page_size();
        let sys_limits =
            sysfs::queue_limits(Path::new("/sys"), ctrl_dir.as_deref(), &ns_name(&kind));
        let mut max_transfer = MAX_NLB << lba_shift;
        if let Some(m) = ctrl.max_transfer_bytes(page) {
            max_transfer = max_transfer.min(m);
        }
        let mut max_segments = 0u32;
        match sys_limits {
            Some((hw, segs)) => {
                max_transfer = max_transfer.min(hw);
                max_segments = segs;
                // An unaligned buffer spans one page more than its length.
                if segs > 1 {
                    max_transfer = max_transfer.min(u64::from(segs - 1) * page);
                }
            }
            None if ctrl.mdts == 0 => {
                warn!("{dev}: no queue limits in sysfs and no MDTS: transfers capped at {FALLBACK_MAX_TRANSFER} bytes");
                max_transfer = max_transfer.min(FALLBACK_MAX_TRANSFER);
            }
            None => {}
        }
        let max_transfer = (max_transfer & !(u64::from(block_size) - 1)).max(u64::from(block_size));
        let io_poll = sysfs::io_poll(Path::new("/sys"), ctrl_dir.as_deref(), &ns_name(&kind));

        let mut ana_state = AnaState::Optimized;
        if ctrl.reports_ana() {
            match read_ana_log(fd, ctrl.nanagrpid, ctrl.nn) {
                Ok(log) => match log.state_of(ns.anagrpid, nsid) {
                    Some(s) => ana_state = s,
                    None => warn!(
                        "{dev}: ANA log page has no state for group {} / namespace {nsid}",
                        ns.anagrpid
                    ),
                },
                Err(e) => warn!("{dev}: {e}; assuming ANA optimized"),
            }
        }

        let controller = match &ctrl_dir {
            Some(c) => format!("{} cntlid {}", sysfs::describe_controller(c), ctrl.cntlid),
            None => format!("cntlid {}", ctrl.cntlid),
        };
        let identity = identify::namespace_identity(&ctrl, nsid, &ns, &desc);
        let dsm = ctrl.supports_dsm();
        let write_zeroes = ctrl.supports_write_zeroes();
        let info = DeviceInfo {
            capacity_bytes,
            block_size,
            discard: dsm || write_zeroes,
            write_zeroes,
            max_transfer: u32::try_from(max_transfer).unwrap_or(!(block_size - 1)),
            identity,
            volatile_write_cache: ctrl.volatile_write_cache(),
            max_segments,
            max_discard_bytes: if write_zeroes {
                MAX_NLB << lba_shift
            } else {
                u64::from(u32::MAX) << lba_shift
            },
            max_write_zeroes_bytes: if write_zeroes {
                MAX_NLB << lba_shift
            } else {
                0
            },
            discard_scratch: if dsm && !write_zeroes {
                DSM_RANGE_LEN as u32
            } else {
                0
            },
            crdt: ctrl.crdt,
            command_quiesce_time_ms: u32::from(ctrl.cqt),
            ana_state,
            ana_group: if ctrl.reports_ana() { ns.anagrpid } else { 0 },
            controller,
            ..DeviceInfo::default()
        };
        info!(
            "{dev}: NVMe namespace {nsid} via {} ({} {}, fw {}): {} bytes in {}-byte blocks, \
             max transfer {} bytes / {} segments, discard {}, write zeroes {}, volatile cache {}, \
             CRDT {:?}, CQT {} ms, ANA {}, poll queues {}; identity {}",
            info.controller,
            ctrl.model,
            ctrl.serial,
            ctrl.firmware,
            info.capacity_bytes,
            ns.lba_size,
            info.max_transfer,
            info.max_segments,
            match (dsm, write_zeroes) {
                (_, true) => "write-zeroes+deac (dsm with caller scratch)",
                (true, false) => "dsm (needs caller scratch)",
                (false, false) => "no",
            },
            write_zeroes,
            info.volatile_write_cache,
            info.crdt,
            info.command_quiesce_time_ms,
            info.ana_state.as_str(),
            io_poll,
            info.identity
        );
        Ok(Self {
            info,
            file,
            device,
            nsid,
            lba_shift,
            capacity_lbas: AtomicU64::new(ns.nsze),
            timeout_ms: opts.io_timeout_ms.unwrap_or(0),
            dsm,
            write_zeroes,
            vwc: ctrl.volatile_write_cache(),
            ana: ctrl.reports_ana(),
            anagrpid: ns.anagrpid,
            nanagrpid: ctrl.nanagrpid,
            nn: ctrl.nn,
            refused: AtomicU64::new(0),
            ring_file_id: next_ring_file_id(),
            io_poll,
        })
    }

    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// Re-reads the ANA log page (a blocking admin command: call it from a
    /// control or probing thread, not from a worker). `Ok(None)`: the
    /// controller does not report ANA.
    pub fn read_ana_state(&self) -> io::Result<Option<AnaState>> {
        if !self.ana {
            return Ok(None);
        }
        let log = read_ana_log(self.file.as_raw_fd(), self.nanagrpid, self.nn)
            .map_err(io::Error::other)?;
        Ok(log.state_of(self.anagrpid, self.nsid))
    }

    /// Re-reads the namespace's size (Identify Namespace, a blocking admin
    /// command): after a Namespace Attribute Changed event the kernel has
    /// revalidated it, and the controller answers the new NSZE.
    pub fn read_capacity(&self) -> io::Result<u64> {
        let raw = identify(self.file.as_raw_fd(), self.nsid, identify::CNS_NAMESPACE)
            .map_err(|e| io::Error::other(format!("identify namespace: {e}")))?;
        let ns = IdNamespace::parse(&raw).map_err(io::Error::other)?;
        if ns.lba_size.trailing_zeros() != self.lba_shift {
            return Err(io::Error::other(format!(
                "namespace {} was reformatted ({}-byte blocks)",
                self.nsid, ns.lba_size
            )));
        }
        self.capacity_lbas.store(ns.nsze, Ordering::Relaxed);
        Ok(ns.nsze << self.lba_shift)
    }

    /// The blocks `offset..offset+len` as `(slba, nlb)`, checked.
    fn lbas(&self, offset: u64, len: u64) -> Result<(u64, u64), &'static str> {
        let mask = (1u64 << self.lba_shift) - 1;
        if offset & mask != 0 || len & mask != 0 {
            return Err("not aligned to the namespace's block size");
        }
        let (slba, nlb) = (offset >> self.lba_shift, len >> self.lba_shift);
        if nlb == 0 {
            return Err("zero length");
        }
        if slba
            .checked_add(nlb)
            .is_none_or(|end| end > self.capacity_lbas.load(Ordering::Relaxed))
        {
            return Err("beyond the end of the namespace");
        }
        Ok((slba, nlb))
    }

    /// The command for one I/O.
    ///
    /// # Safety
    /// `iov[..iovcnt]` must be valid; for a discard with scratch, `iov[0]`
    /// must describe at least 16 writable bytes.
    unsafe fn encode(
        &self,
        op: IoOp,
        offset: u64,
        len: u64,
        iov: *const libc::iovec,
        iovcnt: usize,
    ) -> Result<Encoded, &'static str> {
        let iovs: &[libc::iovec] = if iovcnt == 0 || iov.is_null() {
            &[]
        } else {
            // SAFETY: the caller guarantees `iov[..iovcnt]` is valid.
            unsafe { std::slice::from_raw_parts(iov, iovcnt) }
        };
        let mut cmd_op = NVME_URING_CMD_IO;
        let mut cmd = match op {
            IoOp::Read | IoOp::Write { .. } => {
                let (slba, nlb) = self.lbas(offset, len)?;
                if nlb > MAX_NLB {
                    return Err("more blocks than one command carries (65536)");
                }
                if iovs.iter().map(|v| v.iov_len as u64).sum::<u64>() != len {
                    return Err("data buffers do not add up to the length");
                }
                let (write, fua) = match op {
                    IoOp::Write { fua } => (true, fua),
                    _ => (false, false),
                };
                let mut c = NvmeCmd::rw(write, self.nsid, slba, nlb, fua);
                if let [one] = iovs {
                    c.addr = one.iov_base as u64;
                    c.data_len = len as u32;
                } else {
                    if iovs.len() > libc::UIO_MAXIOV as usize {
                        return Err("more than UIO_MAXIOV data buffers");
                    }
                    cmd_op = NVME_URING_CMD_IO_VEC;
                    c.addr = iov as u64;
                    c.data_len = iovs.len() as u32;
                }
                c
            }
            IoOp::Flush => {
                if !self.vwc {
                    // No volatile write cache: every completed write is durable.
                    return Ok(Encoded::Nop);
                }
                NvmeCmd::flush(self.nsid)
            }
            IoOp::WriteZeroes { unmap } => {
                if !self.write_zeroes {
                    return Err("the controller does not support Write Zeroes");
                }
                let (slba, nlb) = self.lbas(offset, len)?;
                if nlb > MAX_NLB {
                    return Err("more blocks than one Write Zeroes carries (65536)");
                }
                NvmeCmd::write_zeroes(self.nsid, slba, nlb, unmap)
            }
            IoOp::Discard => {
                let (slba, nlb) = self.lbas(offset, len)?;
                match iovs.first() {
                    Some(s) if self.dsm && s.iov_len >= DSM_RANGE_LEN && !s.iov_base.is_null() => {
                        let nlb =
                            u32::try_from(nlb).map_err(|_| "discard range over 2^32 blocks")?;
                        let range = cmd::dsm_range(slba, nlb);
                        // SAFETY: the caller provides `iov[0]` as at least 16
                        // writable bytes that live until the completion.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                range.as_ptr(),
                                s.iov_base.cast::<u8>(),
                                DSM_RANGE_LEN,
                            )
                        };
                        NvmeCmd::discard(self.nsid, s.iov_base as u64)
                    }
                    _ if self.write_zeroes => {
                        if nlb > MAX_NLB {
                            return Err("more blocks than one Write Zeroes carries (65536)");
                        }
                        NvmeCmd::write_zeroes(self.nsid, slba, nlb, true)
                    }
                    _ if self.dsm => {
                        return Err("discard needs a 16-byte scratch buffer on this controller")
                    }
                    _ => {
                        return Err(
                            "the controller supports neither Dataset Management nor Write Zeroes",
                        )
                    }
                }
            }
        };
        cmd.timeout_ms = self.timeout_ms;
        Ok(Encoded::Cmd { cmd_op, cmd })
    }

    fn refuse(&self, op: IoOp, offset: u64, len: u64, why: &str) {
        let n = self.refused.fetch_add(1, Ordering::Relaxed);
        if n < 10 || n.is_multiple_of(1000) {
            warn!(
                "{}: refusing {op:?} of {len} bytes at {offset}: {why} ({} refused so far)",
                self.device,
                n + 1
            );
        }
    }
}

fn ns_name(kind: &NodeKind) -> String {
    match kind {
        NodeKind::Namespace { name, .. } | NodeKind::Head { name } => name.clone(),
        _ => String::new(),
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

impl PathDriver for NvmeDriver {
    fn kind(&self) -> &'static str {
        "nvme"
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    unsafe fn prepare(
        &self,
        op: IoOp,
        offset: u64,
        len: u64,
        iov: *const libc::iovec,
        iovcnt: usize,
        user_data: u64,
    ) -> squeue::Entry128 {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            self.prepare_registered(
                op,
                offset,
                len,
                iov,
                iovcnt,
                user_data,
                Registered::default(),
            )
        }
    }

    unsafe fn prepare_registered(
        &self,
        op: IoOp,
        offset: u64,
        len: u64,
        iov: *const libc::iovec,
        iovcnt: usize,
        user_data: u64,
        reg: Registered,
    ) -> squeue::Entry128 {
        // SAFETY: forwarded from the caller's contract on `iov`.
        let encoded = unsafe { self.encode(op, offset, len, iov, iovcnt) };
        match encoded {
            Ok(Encoded::Cmd { cmd_op, cmd }) => {
                let uc = match reg.file {
                    Some(slot) => opcode::UringCmd80::new(types::Fixed(slot), cmd_op),
                    None => opcode::UringCmd80::new(types::Fd(self.file.as_raw_fd()), cmd_op),
                };
                // A fixed buffer only for one data buffer: the kernel
                // takes IORING_URING_CMD_FIXED with NVME_URING_CMD_IO only
                // (the vectored command answers EINVAL), and `addr` stays
                // the host address inside the registered buffer.
                let fixed = match op {
                    IoOp::Read | IoOp::Write { .. } if cmd_op == NVME_URING_CMD_IO => reg.buf,
                    _ => None,
                };
                uc.cmd(cmd.to_uring_cmd())
                    .buf_index(fixed)
                    .build()
                    .user_data(user_data)
            }
            Ok(Encoded::Nop) => opcode::Nop::new().build().user_data(user_data).into(),
            Err(why) => {
                self.refuse(op, offset, len, why);
                // An entry that fails at once with EBADF without touching the
                // device; `decode` reports it as EINVAL (not a path error).
                opcode::Read::new(types::Fd(-1), std::ptr::null_mut(), 0)
                    .build()
                    .user_data(user_data)
                    .into()
            }
        }
    }

    fn decode(&self, _op: IoOp, _len: u64, res: i32, _big_cqe: [u64; 2]) -> IoOutcome {
        decode_res(res)
    }

    fn ring_file(&self) -> Option<RingFile> {
        Some(RingFile {
            fd: self.file.as_raw_fd(),
            id: self.ring_file_id,
        })
    }

    fn fixed_buffers(&self) -> bool {
        true
    }

    fn io_poll(&self) -> bool {
        self.io_poll
    }

    fn fixed_buffer_window(&self) -> Option<usize> {
        // The kernel maps a fixed buffer from the command's first page to
        // the buffer's end and (before its rework of blk_rq_map_user_bvec)
        // refuses more pages than max_segments with EINVAL.
        match self.info.max_segments {
            0 => None,
            n => Some(n as usize * page_size() as usize),
        }
    }

    fn read_ana_state(&self) -> io::Result<Option<AnaState>> {
        NvmeDriver::read_ana_state(self)
    }

    fn read_capacity(&self) -> io::Result<u64> {
        NvmeDriver::read_capacity(self)
    }
}

/// `cqe.res` of a passthrough command: 0 success (not a byte count), > 0 the
/// NVMe status field, < 0 `-errno`.
fn decode_res(res: i32) -> IoOutcome {
    match res {
        0 => IoOutcome::Ok,
        r if r > 0 => IoOutcome::Nvme((r & 0x7fff) as u16),
        r if -r == libc::EBADF => IoOutcome::Errno(libc::EINVAL),
        r => IoOutcome::Errno(-r),
    }
}

#[cfg(test)]
mod tests;
