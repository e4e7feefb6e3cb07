//! SIGBUS containment for the frontend's shared memory (issue 44).
//!
//! The daemon maps fds the frontend keeps: guest memory regions, the dirty
//! log, the inflight region. A frontend that truncates one after the daemon
//! mapped it (or a hugetlbfs file that runs out of huge pages) makes the next
//! access to the lost pages raise SIGBUS, whose default action kills the
//! whole daemon: every disk, not only this frontend's. A memfd is sealed
//! against shrinking where it allows it (`fd_range::seal_shrink`); a file
//! (hugetlbfs, /dev/shm, a memfd made without MFD_ALLOW_SEALING) cannot be.
//!
//! So every such mapping is registered here, in a fixed table of slots the
//! signal handler reads without locks (a seqlock per slot). A SIGBUS the
//! kernel raised for an address inside a registered mapping maps a private
//! anonymous page over the faulting page (mmap MAP_FIXED, a raw system call:
//! async-signal-safe) and returns, so the access completes, on zeros; the
//! registration is flagged and a watcher thread logs it once and hangs up on
//! the frontend (`teardown::hang_up`). Reads of the lost pages see zeros,
//! writes land in the private page and are lost: data of a frontend that
//! already broke the contract, whose connection is being closed. Any other
//! SIGBUS gets the action that was there before ours (the default: a real
//! bug still crashes, with its core).
//!
//! The same is done by systemd's sigbus.c (journal files) and Sapling's
//! indexedlog (mmapped logs on a failing filesystem): zero pages over the
//! faulting ones, then the caller checks a flag.
//!
//! A mapping is unregistered before it is unmapped ([`Guard`] is dropped
//! first): a stale slot would contain a SIGBUS of whatever is mapped there
//! next. Every access to a registered mapping is made by a thread that holds
//! it (an `Arc` of its table or log), so it cannot be unmapped, nor its slot
//! reused, while that thread is in the handler.

use std::fs::File;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};

use log::{error, warn};
use vm_memory::MmapRegion;

/// Mappings registered at once: 509 memory slots, the dirty log, the
/// inflight region, and regions of replaced tables still in use.
const SLOTS: usize = 2048;

/// hugetlbfs's `f_type` (linux/magic.h).
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;

struct Slot {
    /// Odd while the slot is written (a seqlock: the handler cannot wait).
    seq: AtomicU64,
    start: AtomicUsize,
    len: AtomicUsize,
    /// The size of the mapping's pages (a huge page on hugetlbfs: a part of
    /// one cannot be mapped over).
    page: AtomicUsize,
    /// A SIGBUS hit the mapping: the frontend broke its memory.
    broken: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    seq: AtomicU64::new(0),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    page: AtomicUsize::new(0),
    broken: AtomicBool::new(false),
};

static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Slots ever used: the handler looks at these only.
static USED: AtomicUsize = AtomicUsize::new(0);
/// What the watcher writes in its log line, per slot; also the writers' lock.
static LABELS: Mutex<Vec<Option<Label>>> = Mutex::new(Vec::new());
/// The eventfd the handler wakes the watcher with (never closed).
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// The SIGBUS action before ours, given back to a SIGBUS not ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

struct Label {
    what: String,
    reported: bool,
}

fn labels() -> MutexGuard<'static, Vec<Option<Label>>> {
    LABELS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A registered mapping; dropping it unregisters the mapping (drop it
/// before unmapping).
#[derive(Debug)]
pub struct Guard {
    slot: usize,
}

impl Guard {
    /// Whether a SIGBUS hit the mapping (its pages there now read zeros).
    pub fn broken(&self) -> bool {
        TABLE[self.slot].broken.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut labels = labels();
        write_slot(&TABLE[self.slot], 0, 0, 0);
        TABLE[self.slot].broken.store(false, Ordering::Release);
        labels[self.slot] = None;
    }
}

/// Writes a slot under the seqlock (callers hold `LABELS`).
fn write_slot(s: &Slot, start: usize, len: usize, page: usize) {
    let seq = s.seq.load(Ordering::Relaxed);
    s.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
    fence(Ordering::Release);
    s.start.store(start, Ordering::Relaxed);
    s.len.store(len, Ordering::Relaxed);
    s.page.store(page, Ordering::Relaxed);
    s.seq.store(seq.wrapping_add(2), Ordering::Release);
}

/// Registers `map` (a mapping of a frontend's fd; `what` names it in the
/// log line) until the guard drops: drop the guard before the mapping.
/// `None` when the table is full or the handler could not be installed: the
/// mapping is then served as before, uncontained (warned).
pub fn register(map: &MmapRegion<()>, what: String) -> Option<Guard> {
    if let Err(e) = init() {
        warn!("{what}: no SIGBUS containment: {e}");
        return None;
    }
    let base = rustix::param::page_size();
    let page = map.file_offset().map_or(base, |f| page_of(f.file()));
    let mut labels = labels();
    let free = labels.iter().position(Option::is_none);
    let slot = match free {
        Some(i) => i,
        None if labels.len() < SLOTS => {
            labels.push(None);
            labels.len() - 1
        }
        None => {
            warn!("{what}: all {SLOTS} SIGBUS slots in use: not contained");
            return None;
        }
    };
    TABLE[slot].broken.store(false, Ordering::Release);
    write_slot(&TABLE[slot], map.as_ptr() as usize, map.size(), page);
    USED.fetch_max(slot + 1, Ordering::Release);
    labels[slot] = Some(Label {
        what,
        reported: false,
    });
    Some(Guard { slot })
}

/// The page size of a mapping of `file`: a huge page on hugetlbfs.
fn page_of(file: &File) -> usize {
    let base = rustix::param::page_size();
    let huge = rustix::fs::fstatfs(file).is_ok_and(|s| s.f_type as u64 == HUGETLBFS_MAGIC);
    if !huge {
        return base;
    }
    rustix::fs::fstat(file)
        .ok()
        .and_then(|st| usize::try_from(st.st_blksize).ok())
        .filter(|b| b.is_power_of_two() && *b > base)
        .unwrap_or(base)
}

static INIT: Once = Once::new();
static INIT_ERROR: OnceLock<String> = OnceLock::new();

/// Installs the handler (once per process).
fn init() -> Result<(), String> {
    INIT.call_once(|| {
        if let Err(e) = install() {
            let _ = INIT_ERROR.set(e.to_string());
        }
    });
    match INIT_ERROR.get() {
        Some(e) => Err(e.clone()),
        None => Ok(()),
    }
}

fn install() -> io::Result<()> {
    let wake = rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
    )?;
    // Lives as long as the process: the handler may write it at any time.
    let wake = std::os::fd::IntoRawFd::into_raw_fd(wake);
    WAKE.store(wake, Ordering::Release);
    spawn_watcher(wake)?;
    // SAFETY: a zeroed sigaction is a valid value to be filled in; the
    // pointers given are to live locals; a null new action only reads.
    let previous = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        old
    };
    // Before ours is installed: the handler reads it.
    let _ = PREVIOUS.set(previous);
    // SAFETY: `on_sigbus` has the SA_SIGINFO signature and does only
    // async-signal-safe work (atomics, raw mmap, write, sigaction, raise).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The slot whose mapping holds `addr`, read under its seqlock.
fn find(addr: usize) -> Option<(&'static Slot, usize, usize, usize)> {
    let used = USED.load(Ordering::Acquire).min(SLOTS);
    TABLE[..used].iter().find_map(|s| {
        let seq = s.seq.load(Ordering::Acquire);
        if seq & 1 == 1 {
            // Being written: a mapping not yet (or no longer) accessed.
            return None;
        }
        let (start, len, page) = (
            s.start.load(Ordering::Relaxed),
            s.len.load(Ordering::Relaxed),
            s.page.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        let stable = s.seq.load(Ordering::Relaxed) == seq;
        let inside = addr >= start && addr - start < len;
        (stable && len > 0 && page > 0 && inside).then_some((s, start, len, page))
    })
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // si_code > 0: raised by the kernel for a fault (not kill(2) or tgkill).
    if code > 0 && contain(addr) {
        return;
    }
    // Not ours: the action before ours, and the fault again (returning
    // re-executes the access) or the signal again (one sent).
    // SAFETY: sigaction and raise are async-signal-safe; PREVIOUS was set
    // before the handler was installed.
    unsafe {
        match PREVIOUS.get() {
            Some(old) => libc::sigaction(libc::SIGBUS, old, std::ptr::null_mut()),
            None => libc::signal(libc::SIGBUS, libc::SIG_DFL) as libc::c_int,
        };
        if code <= 0 {
            libc::raise(libc::SIGBUS);
        }
    }
}

/// Maps a zero page over the page of `addr` if a registered mapping holds
/// it; whether it did.
fn contain(addr: usize) -> bool {
    let Some((slot, start, len, page)) = find(addr) else {
        return false;
    };
    let from = (addr & !(page - 1)).max(start);
    let to = (addr & !(page - 1)).saturating_add(page).min(start + len);
    // SAFETY: [from, to) lies inside a mapping registered as the frontend's
    // memory, which the faulting thread holds mapped; its pages there are
    // lost already (SIGBUS). A private anonymous page in their place is
    // what the access then reads and writes. A raw system call, no libc
    // state: async-signal-safe.
    let mapped = unsafe {
        rustix::mm::mmap_anonymous(
            from as *mut libc::c_void,
            to - from,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::FIXED,
        )
    };
    if mapped.is_err() {
        return false;
    }
    if !slot.broken.swap(true, Ordering::AcqRel) {
        let fd = WAKE.load(Ordering::Acquire);
        if fd >= 0 {
            // SAFETY: the eventfd is never closed once stored.
            let wake = unsafe { BorrowedFd::borrow_raw(fd) };
            let _ = rustix::io::write(wake, &1u64.to_ne_bytes());
        }
    }
    true
}

/// Starts the thread that logs a broken mapping (once per mapping) and
/// hangs up on the frontend: the serve loop then ends its connection (its
/// queues stopped, its I/O discarded) and serves the next one.
fn spawn_watcher(fd: std::os::fd::RawFd) -> io::Result<()> {
    // SAFETY: the eventfd is never closed once stored; a duplicate is ours.
    let wake: OwnedFd = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?;
    std::thread::Builder::new()
        .name("sigbus".into())
        .spawn(move || loop {
            wait_readable(&wake);
            let mut buf = [0u8; 8];
            match rustix::io::read(&wake, &mut buf) {
                Ok(_) | Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
                Err(e) => {
                    error!("SIGBUS watcher: {e}; broken frontend memory is no longer reported");
                    return;
                }
            }
            // Unit tests have no frontend (teardown's own test puts a socket
            // of its own there).
            if report() && !cfg!(test) {
                crate::teardown::with_connection(hang_up);
            }
        })?;
    Ok(())
}

/// Shuts the connected frontend's socket down: the serve loop's next read
/// ends as if the frontend had hung up.
fn hang_up(fd: std::os::fd::RawFd) {
    // SAFETY: `with_connection` calls this while the socket is open (its
    // lock keeps the serve loop from closing it); shutdown does not close it.
    let sock = unsafe { BorrowedFd::borrow_raw(fd) };
    if let Err(e) = rustix::net::shutdown(sock, rustix::net::Shutdown::Both) {
        warn!("hanging up on the frontend: {e}");
    }
}

/// Blocks until the eventfd can be read (it is non-blocking: the handler
/// must never block on it).
fn wait_readable(fd: &OwnedFd) {
    let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
    let _ = rustix::event::poll(&mut fds, None);
}

/// Logs every broken mapping not yet reported; whether there was one.
fn report() -> bool {
    let mut labels = labels();
    let mut any = false;
    for (i, label) in labels.iter_mut().enumerate() {
        let Some(l) = label else { continue };
        if l.reported || !TABLE[i].broken.load(Ordering::Acquire) {
            continue;
        }
        l.reported = true;
        any = true;
        error!(
            "the frontend broke its shared memory: {} lost pages under the daemon's mapping \
             (its fd was truncated, or its huge pages ran out); they read as zeros, writes there \
             are lost; closing the connection",
            l.what
        );
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_registered_mapping_reads_zeros_and_is_flagged() {
        // Without MFD_ALLOW_SEALING: it cannot be sealed.
        let file = File::from(
            rustix::fs::memfd_create("sigbus-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap(),
        );
        let page = rustix::param::page_size();
        file.set_len(4 * page as u64).unwrap();
        let map = vm_memory::MmapRegion::<()>::from_file(
            vm_memory::FileOffset::new(file.try_clone().unwrap(), 0),
            4 * page,
        )
        .unwrap();
        let base = map.as_ptr();
        // SAFETY: inside the 4-page mapping, which lives to the end.
        let at = |i: usize| unsafe { base.add(i) };
        // SAFETY: as above.
        unsafe { at(3 * page + 5).write_volatile(7) };
        let guard = register(&map, "a test mapping".into()).unwrap();
        assert!(!guard.broken());
        file.set_len(page as u64).unwrap();
        // SAFETY: as above; the page is gone from the file: SIGBUS, contained.
        let v = unsafe { at(3 * page + 5).read_volatile() };
        assert_eq!(v, 0);
        assert!(guard.broken());
        // The page held is still readable; written ones stay ours.
        // SAFETY: as above.
        unsafe {
            at(5).write_volatile(9);
            assert_eq!(at(5).read_volatile(), 9);
            at(2 * page).write_volatile(3);
            assert_eq!(at(2 * page).read_volatile(), 3);
        }
        drop(guard);
        drop(map);
    }
}
