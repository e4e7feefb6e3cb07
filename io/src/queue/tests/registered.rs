//! Registration bookkeeping against a real ring: which fixed buffer covers
//! an iovec (the kernel's `READ_FIXED` checks the index: a wrong one fails
//! with EFAULT), re-registration on a new memory table, the fallback when
//! registration fails, and the file table across re-opened and removed paths.

use std::io::Write as _;
use std::os::fd::AsRawFd;

use super::*;
use crate::queue::registered::{chunks, geometry, HostRegion, MAX_CHUNK};
use crate::{RegOptions, Registered, RingFile};

/// Reads a file; with a fixed buffer through `READ_FIXED` (which fails
/// unless the buffer index really holds the memory), with a registered
/// file through its slot.
#[derive(Debug)]
struct FileReader {
    file: std::fs::File,
    id: u64,
    window: Option<usize>,
}

impl FileReader {
    fn driver(file: std::fs::File) -> Arc<dyn PathDriver> {
        Self::windowed(file, None)
    }

    fn windowed(file: std::fs::File, window: Option<usize>) -> Arc<dyn PathDriver> {
        Arc::new(Self {
            file,
            id: crate::next_ring_file_id(),
            window,
        })
    }
}

impl PathDriver for FileReader {
    fn kind(&self) -> &'static str {
        "file-reader"
    }
    fn info(&self) -> &crate::DeviceInfo {
        unimplemented!()
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
        // SAFETY: the caller's contract.
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
        _op: IoOp,
        offset: u64,
        _len: u64,
        iov: *const libc::iovec,
        iovcnt: usize,
        user_data: u64,
        reg: Registered,
    ) -> squeue::Entry128 {
        let fd = self.file.as_raw_fd();
        match (reg.buf, reg.file) {
            (Some(i), file) => {
                // SAFETY: a fixed buffer is given only for one iovec.
                let v = unsafe { *iov };
                let e = match file {
                    Some(slot) => opcode::ReadFixed::new(
                        types::Fixed(slot),
                        v.iov_base.cast(),
                        v.iov_len as u32,
                        i,
                    ),
                    None => opcode::ReadFixed::new(
                        types::Fd(fd),
                        v.iov_base.cast(),
                        v.iov_len as u32,
                        i,
                    ),
                };
                e.offset(offset).build().user_data(user_data).into()
            }
            (None, Some(slot)) => opcode::Readv::new(types::Fixed(slot), iov, iovcnt as u32)
                .offset(offset)
                .build()
                .user_data(user_data)
                .into(),
            (None, None) => opcode::Readv::new(types::Fd(fd), iov, iovcnt as u32)
                .offset(offset)
                .build()
                .user_data(user_data)
                .into(),
        }
    }
    fn decode(&self, _op: IoOp, len: u64, res: i32, _big: [u64; 2]) -> IoOutcome {
        match res {
            r if r >= 0 && r as u64 == len => IoOutcome::Ok,
            r if r >= 0 => IoOutcome::Errno(libc::EIO),
            r => IoOutcome::Errno(-r),
        }
    }
    fn ring_file(&self) -> Option<RingFile> {
        Some(RingFile {
            fd: self.file.as_raw_fd(),
            id: self.id,
        })
    }
    fn fixed_buffers(&self) -> bool {
        true
    }
    fn fixed_buffer_window(&self) -> Option<usize> {
        self.window
    }
}

/// A file of `len` bytes, byte `i` = `i * 7 + seed`.
fn data_file(len: usize, seed: u8) -> std::fs::File {
    let path = std::env::temp_dir().join(format!(
        "mpath-io-reg-{}-{seed}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let mut f = std::fs::File::create(&path).unwrap();
    let bytes: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect();
    f.write_all(&bytes).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}

fn expected(at: usize, len: usize, seed: u8) -> Vec<u8> {
    (at..at + len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// Anonymous memory standing in for a guest's (page aligned, unmapped on drop).
struct Memory {
    at: usize,
    len: usize,
}

// SAFETY: plain memory owned by the value.
unsafe impl Send for Memory {}
// SAFETY: as above; the tests write it only through the queue.
unsafe impl Sync for Memory {}

impl Memory {
    fn new(len: usize) -> Arc<Self> {
        // SAFETY: a fresh private anonymous mapping; no existing memory involved.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Arc::new(Self {
            at: p as usize,
            len,
        })
    }

    fn region(&self) -> HostRegion {
        HostRegion {
            host: self.at,
            len: self.len,
        }
    }

    /// `GuestBufs` of `len` bytes at `off` (one iovec).
    fn bufs(self: &Arc<Self>, off: usize, len: usize) -> GuestBufs {
        assert!(off + len <= self.len);
        let iov = vec![libc::iovec {
            iov_base: (self.at + off) as *mut libc::c_void,
            iov_len: len,
        }];
        // SAFETY: the Arc keeps the mapping; only the queue writes it.
        unsafe { GuestBufs::new(self.clone(), iov) }
    }

    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        // SAFETY: inside the mapping; no I/O is running on it now.
        unsafe { std::slice::from_raw_parts((self.at + off) as *const u8, len).to_vec() }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: the mapping this value made; nothing uses it any more.
        unsafe { libc::munmap(self.at as *mut libc::c_void, self.len) };
    }
}

const CHUNK: usize = 64 << 10;

fn reg_queue(drivers: Vec<Arc<dyn PathDriver>>) -> (IoQueue<Paths>, Arc<Paths>) {
    let (mut q, paths) = queue(drivers.into_iter().map(|d| path(d, None)).collect());
    q.set_registration(RegOptions {
        fixed_buffers: true,
        registered_files: true,
        io_poll: false,
    });
    q.bufs.max_chunk = CHUNK;
    (q, paths)
}

/// Reads `len` bytes at file offset `off` into `b` on path `path`; the outcome.
fn read_one(q: &mut IoQueue<Paths>, path: usize, off: u64, b: GuestBufs) -> IoOutcome {
    let len = b.len() as u64;
    q.submit(
        Command {
            tag: 1,
            path,
            op: IoOp::Read,
            offset: off,
            len,
            bufs: Some(b),
        },
        0,
    )
    .expect("submit");
    let got = collect(q, Instant::now(), 1, |e| matches!(e, Event::Done { .. }));
    done(&got[0]).expect("done").1
}

#[test]
fn regions_are_cut_into_chunks_of_at_most_the_limit() {
    let g = 1usize << 30;
    let v = chunks(
        &[
            HostRegion {
                host: 0x1000_0000_0000,
                len: 2 * g + 4096,
            },
            HostRegion {
                host: 0x2000_0000_0000,
                len: 8192,
            },
        ],
        MAX_CHUNK,
        MAX_CHUNK,
    );
    let got: Vec<(usize, usize)> = v.iter().map(|c| (c.iov_base as usize, c.iov_len)).collect();
    assert_eq!(
        got,
        vec![
            (0x1000_0000_0000, g),
            (0x1000_0000_0000 + g, g),
            (0x1000_0000_0000 + 2 * g, 4096),
            (0x2000_0000_0000, 8192),
        ]
    );
    assert_eq!(MAX_CHUNK, g, "the kernel's per-buffer limit");
    assert!(chunks(&[], MAX_CHUNK, MAX_CHUNK).is_empty());
    // Windows of 4 pages every 2 pages: the last one ends at the region's end.
    let r = [HostRegion {
        host: 0x10_0000,
        len: 5 * 4096,
    }];
    let got: Vec<(usize, usize)> = chunks(&r, 4 * 4096, 2 * 4096)
        .iter()
        .map(|c| (c.iov_base as usize - 0x10_0000, c.iov_len))
        .collect();
    assert_eq!(got, vec![(0, 4 * 4096), (2 * 4096, 3 * 4096)]);
    assert_eq!(geometry(None, MAX_CHUNK), (MAX_CHUNK, MAX_CHUNK));
    assert_eq!(
        geometry(Some(127 * 4096), MAX_CHUNK),
        (127 * 4096, 63 * 4096),
        "NVMe with 127 segments: 127-page windows every 63 pages"
    );
    assert_eq!(geometry(Some(2 << 30), MAX_CHUNK), (MAX_CHUNK, MAX_CHUNK));
}

#[test]
fn the_buffer_holding_an_iovec_is_used_and_the_kernel_agrees() {
    let file = data_file(8 * CHUNK, 1);
    let (mut q, _) = reg_queue(vec![FileReader::driver(file)]);
    let mem = Memory::new(4 * CHUNK);
    q.set_memory(mem.clone(), &[mem.region()]);
    assert_eq!(q.reg_stats().registrations, 0, "registered lazily");
    // Inside chunk 2: READ_FIXED with index 2 (a wrong index is EFAULT).
    let out = read_one(&mut q, 0, 4096, mem.bufs(2 * CHUNK + 512, 8192));
    assert_eq!(out, IoOutcome::Ok);
    assert_eq!(mem.bytes(2 * CHUNK + 512, 8192), expected(4096, 8192, 1));
    let s = q.reg_stats();
    assert_eq!((s.fixed_buf, s.plain_buf, s.registrations), (1, 0, 1));
    assert_eq!(s.registered_bytes, 4 * CHUNK as u64);
    assert_eq!(s.fixed_file, 1, "and the file through its slot");
    let slots = q.bufs.slots_of();
    assert_eq!(slots.len(), 4);
    assert_eq!(slots[2], (mem.at + 2 * CHUNK, CHUNK, 2));
    // The last byte of chunk 0 and the first of chunk 3 are theirs.
    assert_eq!(
        read_one(&mut q, 0, 0, mem.bufs(CHUNK - 4096, 4096)),
        IoOutcome::Ok
    );
    assert_eq!(
        read_one(&mut q, 0, 0, mem.bufs(3 * CHUNK, 4096)),
        IoOutcome::Ok
    );
    assert_eq!(q.reg_stats().fixed_buf, 3);
    // Across the boundary of chunks 1 and 2: no buffer holds it: plain.
    let out = read_one(&mut q, 0, 8192, mem.bufs(2 * CHUNK - 4096, 8192));
    assert_eq!(out, IoOutcome::Ok);
    assert_eq!(mem.bytes(2 * CHUNK - 4096, 8192), expected(8192, 8192, 1));
    let s = q.reg_stats();
    assert_eq!((s.fixed_buf, s.plain_buf, s.registrations), (3, 1, 1));
}

#[test]
fn buffers_of_other_memory_go_plain() {
    let (mut q, _) = reg_queue(vec![FileReader::driver(data_file(CHUNK, 2))]);
    let mem = Memory::new(CHUNK);
    let other = Memory::new(CHUNK);
    q.set_memory(mem.clone(), &[mem.region()]);
    assert_eq!(read_one(&mut q, 0, 0, other.bufs(0, 4096)), IoOutcome::Ok);
    assert_eq!(other.bytes(0, 4096), expected(0, 4096, 2));
    let s = q.reg_stats();
    assert_eq!((s.fixed_buf, s.plain_buf), (0, 1));
    assert_eq!(s.registrations, 0, "nothing needed the registration yet");
    // Several iovecs: the vectored path.
    let iov = vec![
        libc::iovec {
            iov_base: mem.at as *mut libc::c_void,
            iov_len: 512,
        },
        libc::iovec {
            iov_base: (mem.at + 4096) as *mut libc::c_void,
            iov_len: 512,
        },
    ];
    // SAFETY: inside `mem`, kept by the Arc; only the queue writes it.
    let b = unsafe { GuestBufs::new(mem.clone(), iov) };
    assert_eq!(read_one(&mut q, 0, 0, b), IoOutcome::Ok);
    assert_eq!(q.reg_stats().plain_buf, 2);
    // Registration off: plain, nothing registered.
    q.set_registration(RegOptions::default());
    assert_eq!(read_one(&mut q, 0, 0, mem.bufs(0, 4096)), IoOutcome::Ok);
    let s = q.reg_stats();
    assert_eq!(
        (s.fixed_buf, s.plain_buf, s.registrations, s.fixed_file),
        (0, 3, 0, 2)
    );
}

#[test]
fn a_new_memory_table_is_registered_again_and_old_slots_cleared() {
    let (mut q, _) = reg_queue(vec![FileReader::driver(data_file(4 * CHUNK, 3))]);
    let first = Memory::new(4 * CHUNK);
    q.set_memory(first.clone(), &[first.region()]);
    assert_eq!(
        read_one(&mut q, 0, 0, first.bufs(3 * CHUNK, 4096)),
        IoOutcome::Ok
    );
    assert_eq!(q.bufs.filled(), 4);
    // A smaller table (one chunk): registered at the next command, the
    // old table's other three slots emptied.
    let second = Memory::new(CHUNK);
    q.set_memory(second.clone(), &[second.region()]);
    q.set_memory(second.clone(), &[second.region()]);
    assert_eq!(
        read_one(&mut q, 0, 4096, second.bufs(0, 4096)),
        IoOutcome::Ok
    );
    assert_eq!(second.bytes(0, 4096), expected(4096, 4096, 3));
    let s = q.reg_stats();
    assert_eq!(
        (s.fixed_buf, s.registrations),
        (2, 2),
        "the same memory twice is one registration"
    );
    assert_eq!(s.registered_bytes, CHUNK as u64);
    assert_eq!(q.bufs.filled(), 1);
    assert_eq!(q.bufs.slots_of(), vec![(second.at, CHUNK, 0)]);
    // A part parsed in the old table (a re-send) still works, unregistered.
    assert_eq!(
        read_one(&mut q, 0, 0, first.bufs(3 * CHUNK, 4096)),
        IoOutcome::Ok
    );
    assert_eq!(q.reg_stats().plain_buf, 1);
    // Slot 3 really is empty now: READ_FIXED on it fails.
    assert_eq!(
        raw_read_fixed(&mut q, first.at + 3 * CHUNK, 3),
        -libc::EFAULT
    );
    // The frontend left: everything cleared.
    q.forget_memory();
    assert_eq!(q.bufs.filled(), 0);
    assert_eq!(raw_read_fixed(&mut q, second.at, 0), -libc::EFAULT);
}

/// READ_FIXED of 512 bytes at `at` with buffer `index`, outside the queue's
/// bookkeeping: its result.
fn raw_read_fixed(q: &mut IoQueue<Paths>, at: usize, index: u16) -> i32 {
    let f = data_file(4096, 9);
    let e: squeue::Entry128 =
        opcode::ReadFixed::new(types::Fd(f.as_raw_fd()), at as *mut u8, 512, index)
            .build()
            .user_data(0xfeed)
            .into();
    // SAFETY: the kernel checks the index; `at` is mapped memory of the test.
    unsafe { q.ring.push(&e).unwrap() };
    q.ring.submit().unwrap();
    let mut res = None;
    while res.is_none() {
        q.ring.wait().unwrap();
        q.ring.reap(|ud, r, _| {
            if ud == 0xfeed {
                res = Some(r)
            }
        });
    }
    res.unwrap()
}

#[test]
fn failed_registration_falls_back_to_plain_buffers() {
    let (mut q, _) = reg_queue(vec![FileReader::driver(data_file(4 * CHUNK, 4))]);
    // Chunk 0 registered first, then a table whose chunk 0 cannot be
    // pinned (its second half is not accessible): the slot must not keep the
    // old buffer, and commands go plain.
    let good = Memory::new(CHUNK);
    q.set_memory(good.clone(), &[good.region()]);
    assert_eq!(read_one(&mut q, 0, 0, good.bufs(0, 4096)), IoOutcome::Ok);
    assert_eq!(q.reg_stats().fixed_buf, 1);
    let holey = Memory::new(CHUNK);
    // Its second half made inaccessible, not unmapped: an unmapped hole
    // could be handed to another test's mapping (an io_uring ring) before
    // the Memory's drop unmapped the whole range, and that ring with it.
    // SAFETY: the test's own mapping; nothing reads its second half.
    let rc = unsafe {
        libc::mprotect(
            (holey.at + CHUNK / 2) as *mut libc::c_void,
            CHUNK / 2,
            libc::PROT_NONE,
        )
    };
    assert_eq!(rc, 0);
    q.set_memory(holey.clone(), &[holey.region()]);
    assert_eq!(
        read_one(&mut q, 0, 4096, holey.bufs(0, 4096)),
        IoOutcome::Ok
    );
    assert_eq!(holey.bytes(0, 4096), expected(4096, 4096, 4));
    let s = q.reg_stats();
    assert_eq!((s.fixed_buf, s.plain_buf, s.registrations), (1, 1, 2));
    assert_eq!(s.registered_bytes, 0);
    assert!(q.bufs.slots_of().is_empty());
    assert_eq!(
        raw_read_fixed(&mut q, good.at, 0),
        -libc::EFAULT,
        "old buffer cleared"
    );
}

#[test]
fn the_file_table_follows_reopened_and_removed_paths() {
    let a = FileReader::driver(data_file(CHUNK, 5));
    let b = FileReader::driver(data_file(CHUNK, 6));
    let ida = a.ring_file().unwrap().id;
    let (mut q, paths) = reg_queue(vec![a, b]);
    let mem = Memory::new(CHUNK);
    q.set_memory(mem.clone(), &[mem.region()]);
    assert_eq!(read_one(&mut q, 1, 0, mem.bufs(0, 4096)), IoOutcome::Ok);
    assert_eq!(mem.bytes(0, 4096), expected(0, 4096, 6));
    assert_eq!(read_one(&mut q, 0, 0, mem.bufs(0, 4096)), IoOutcome::Ok);
    assert_eq!(mem.bytes(0, 4096), expected(0, 4096, 5));
    assert_eq!(q.files.registered(0), Some(ida));
    // Path 0 re-opened on other data (its fd number may be the old one):
    // the next command replaces the slot and reads the new file.
    let reopened = FileReader::driver(data_file(CHUNK, 7));
    let idr = reopened.ring_file().unwrap().id;
    paths.set_driver(0, Some(reopened));
    assert_eq!(read_one(&mut q, 0, 0, mem.bufs(0, 4096)), IoOutcome::Ok);
    assert_eq!(mem.bytes(0, 4096), expected(0, 4096, 7));
    assert_eq!(q.files.registered(0), Some(idr));
    assert_eq!(q.reg_stats().fixed_file, 3);
    // Path 1 removed: the tick clears its slot.
    paths.set_driver(1, None);
    q.arm_tick();
    collect(&mut q, Instant::now(), 1, |e| matches!(e, Event::Tick));
    assert_eq!(q.files.registered(1), None);
    assert_eq!(q.files.registered(0), Some(idr));
}

#[test]
fn registered_files_off_uses_plain_fds() {
    let (mut q, _) = reg_queue(vec![FileReader::driver(data_file(CHUNK, 8))]);
    q.set_registration(RegOptions {
        fixed_buffers: true,
        registered_files: false,
        io_poll: false,
    });
    let mem = Memory::new(CHUNK);
    q.set_memory(mem.clone(), &[mem.region()]);
    assert_eq!(read_one(&mut q, 0, 0, mem.bufs(0, 4096)), IoOutcome::Ok);
    let s = q.reg_stats();
    assert_eq!((s.fixed_buf, s.fixed_file), (1, 0));
    assert_eq!(q.files.registered(0), None);
}

#[test]
fn a_bounded_driver_gets_overlapping_windows() {
    const P: usize = 4096;
    let wide = FileReader::driver(data_file(16 * P, 10));
    let narrow = FileReader::windowed(data_file(16 * P, 11), Some(4 * P));
    let (mut q, _) = reg_queue(vec![narrow, wide]);
    let mem = Memory::new(8 * P);
    q.set_memory(mem.clone(), &[mem.region()]);
    // 4-page windows every 2 pages: [0,4) [2,6) [4,8).
    assert_eq!(
        read_one(&mut q, 0, 0, mem.bufs(3 * P, 2 * P)),
        IoOutcome::Ok
    );
    assert_eq!(mem.bytes(3 * P, 2 * P), expected(0, 2 * P, 11));
    assert_eq!(
        q.bufs.slots_of(),
        vec![
            (mem.at, 4 * P, 0),
            (mem.at + 2 * P, 4 * P, 1),
            (mem.at + 4 * P, 4 * P, 2)
        ]
    );
    // And every page on its own (8 more slots), for one-page commands.
    assert_eq!(q.bufs.pages_of(), 8);
    assert_eq!(q.bufs.filled(), 11);
    for page in 0..8 {
        assert_eq!(q.bufs.lookup(mem.at + page * P, P), Some(3 + page as u16));
        assert_eq!(
            q.bufs.lookup(mem.at + page * P + 512, 1024),
            Some(3 + page as u16)
        );
        assert_eq!(
            read_one(&mut q, 0, 0, mem.bufs(page * P, P)),
            IoOutcome::Ok,
            "one page at page {page}"
        );
        assert_eq!(mem.bytes(page * P, P), expected(0, P, 11));
    }
    assert_eq!(
        q.bufs.lookup(mem.at + P + 512, P),
        Some(0),
        "across pages: a window"
    );
    assert_eq!(q.reg_stats().fixed_buf, 9);
    // Any two pages fit a window, READ_FIXED agreeing on each index.
    for start in 0..7 {
        assert_eq!(
            read_one(&mut q, 0, P as u64, mem.bufs(start * P, 2 * P)),
            IoOutcome::Ok,
            "two pages at page {start}"
        );
        assert_eq!(mem.bytes(start * P, 2 * P), expected(P, 2 * P, 11));
    }
    let s = q.reg_stats();
    assert_eq!((s.fixed_buf, s.plain_buf, s.registrations), (16, 0, 1));
    // Four pages at page 1, [1,5), fit no window: plain.
    assert_eq!(read_one(&mut q, 0, 0, mem.bufs(P, 4 * P)), IoOutcome::Ok);
    assert_eq!(q.reg_stats().plain_buf, 1);
    // A driver without a bound uses the same (narrower) windows: no
    // re-registration.
    assert_eq!(
        read_one(&mut q, 1, 0, mem.bufs(4 * P, 4 * P)),
        IoOutcome::Ok
    );
    assert_eq!(mem.bytes(4 * P, 4 * P), expected(0, 4 * P, 10));
    assert_eq!(q.reg_stats().registrations, 1);
}

#[test]
fn a_narrower_driver_registers_again() {
    const P: usize = 4096;
    let wide = FileReader::driver(data_file(16 * P, 12));
    let narrow = FileReader::windowed(data_file(16 * P, 13), Some(4 * P));
    let (mut q, _) = reg_queue(vec![wide, narrow]);
    q.bufs.max_chunk = 8 * P;
    let mem = Memory::new(8 * P);
    q.set_memory(mem.clone(), &[mem.region()]);
    assert_eq!(read_one(&mut q, 0, 0, mem.bufs(P, 6 * P)), IoOutcome::Ok);
    assert_eq!(q.bufs.slots_of(), vec![(mem.at, 8 * P, 0)]);
    assert_eq!(
        read_one(&mut q, 1, 0, mem.bufs(5 * P, 2 * P)),
        IoOutcome::Ok
    );
    assert_eq!(mem.bytes(5 * P, 2 * P), expected(0, 2 * P, 13));
    assert_eq!(q.bufs.slots_of().len(), 3);
    assert_eq!(
        q.bufs.pages_of(),
        8,
        "pages registered with the bounded windows"
    );
    let s = q.reg_stats();
    assert_eq!((s.fixed_buf, s.registrations), (2, 2));
}

/// NOPs (as `NopDriver`), on a polled ring when asked to.
#[derive(Debug)]
struct PolledNop;

impl PathDriver for PolledNop {
    fn kind(&self) -> &'static str {
        "polled-nop"
    }
    fn info(&self) -> &crate::DeviceInfo {
        NopDriver.info()
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
        // SAFETY: the caller's contract, handed on.
        unsafe { NopDriver.prepare(op, offset, len, iov, iovcnt, user_data) }
    }
    fn decode(&self, op: IoOp, len: u64, res: i32, big: [u64; 2]) -> IoOutcome {
        NopDriver.decode(op, len, res, big)
    }
    fn io_poll(&self) -> bool {
        true
    }
}

#[test]
fn polled_commands_go_to_the_polled_ring_and_are_reaped_by_polling() {
    let (mut q, _) = reg_queue(vec![Arc::new(PolledNop), null()]);
    q.set_registration(RegOptions {
        fixed_buffers: true,
        registered_files: true,
        io_poll: true,
    });
    let mem = Memory::new(CHUNK);
    for tag in 0..4 {
        q.submit(
            Command {
                tag,
                path: 0,
                op: IoOp::Read,
                offset: 0,
                len: 4096,
                bufs: Some(mem.bufs(0, 4096)),
            },
            0,
        )
        .expect("submit");
    }
    // A flush is not polled.
    q.submit(
        Command {
            tag: 9,
            path: 0,
            op: IoOp::Flush,
            offset: 0,
            len: 0,
            bufs: None,
        },
        0,
    )
    .expect("submit");
    assert!(q.poll.is_some(), "the polled ring was set up");
    assert!(q.polling(), "commands in flight there");
    assert_eq!(q.reg_stats().polled, 4);
    let got = collect(&mut q, Instant::now(), 5, |e| {
        matches!(e, Event::Done { .. })
    });
    let mut tags: Vec<u64> = got.iter().filter_map(done).map(|(t, _)| t).collect();
    tags.sort();
    assert_eq!(tags, vec![0, 1, 2, 3, 9]);
    assert!(!q.polling(), "nothing left to poll");
    // Off: nothing more goes there.
    q.set_registration(RegOptions::default());
    q.submit(read(5, 0, None), 0).expect("submit");
    assert!(!q.polling());
    assert_eq!(q.reg_stats().polled, 4);
    collect(&mut q, Instant::now(), 1, |e| {
        matches!(e, Event::Done { .. })
    });
}
