//! File paths in memory (tmpfs) through the queue: done on the caller's
//! thread, with the ring's outcomes; `inline=off` and files elsewhere go
//! through the ring.

use std::path::PathBuf;

use super::*;
use crate::{open_path, PathOptions};

/// A file of `size` bytes of 0x11 under `dir`, removed when dropped.
struct Image(PathBuf);

impl Image {
    fn new(dir: &str, name: &str, size: usize) -> Self {
        let p = PathBuf::from(dir).join(format!("mpath-io-{name}-{}", std::process::id()));
        std::fs::write(&p, vec![0x11u8; size]).unwrap();
        Self(p)
    }

    fn open(&self, inline: Option<bool>) -> Arc<dyn PathDriver> {
        let opts = PathOptions {
            inline,
            ..PathOptions::default()
        };
        open_path(self.0.to_str().unwrap(), &opts).expect("open")
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn fs_magic(dir: &str) -> u32 {
    let c = std::ffi::CString::new(dir).unwrap();
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: statfs fills the struct it is given.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) }, 0);
    // SAFETY: statfs succeeded.
    unsafe { st.assume_init() }.f_type as u32
}

fn is_tmpfs(dir: &str) -> bool {
    fs_magic(dir) == libc::TMPFS_MAGIC as u32
}

fn cmd(tag: u64, op: IoOp, offset: u64, len: u64, b: Option<GuestBufs>) -> Command {
    Command {
        tag,
        path: 0,
        op,
        offset,
        len,
        bufs: b,
    }
}

/// Submits `c` and reaps at once, without waiting: what completed inline.
fn inline_now(q: &mut IoQueue<Paths>, c: Command) -> Vec<(u64, IoOutcome)> {
    q.submit(c, 0).expect("submit");
    let mut got = Vec::new();
    q.reap(0, |e| got.extend(done(&e)));
    got
}

#[test]
fn a_file_in_memory_is_written_read_flushed_and_discarded_inline() {
    if !is_tmpfs("/dev/shm") {
        eprintln!("skipping: /dev/shm is not tmpfs");
        return;
    }
    let img = Image::new("/dev/shm", "inline", 64 << 10);
    let driver = img.open(None);
    assert!(driver.info().inline);
    let (mut q, _) = queue(vec![path(driver, None)]);
    let data = Arc::new((0..8192u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let w = cmd(1, IoOp::Write { fua: true }, 4096, 8192, Some(bufs(&data)));
    assert_eq!(inline_now(&mut q, w), [(1, IoOutcome::Ok)]);
    let on_disk = std::fs::read(&img.0).unwrap();
    assert_eq!(&on_disk[4096..12288], &data[..]);
    assert!(on_disk[..4096].iter().all(|&b| b == 0x11));

    let back = Arc::new(vec![0u8; 8192]);
    let r = cmd(2, IoOp::Read, 4096, 8192, Some(bufs(&back)));
    assert_eq!(inline_now(&mut q, r), [(2, IoOutcome::Ok)]);
    assert_eq!(back, data);

    assert_eq!(
        inline_now(&mut q, cmd(3, IoOp::Flush, 0, 0, None)),
        [(3, IoOutcome::Ok)]
    );
    let d = cmd(4, IoOp::Discard, 4096, 4096, None);
    assert_eq!(inline_now(&mut q, d), [(4, IoOutcome::Ok)]);
    let z = cmd(5, IoOp::WriteZeroes { unmap: false }, 8192, 4096, None);
    assert_eq!(inline_now(&mut q, z), [(5, IoOutcome::Ok)]);
    let on_disk = std::fs::read(&img.0).unwrap();
    assert_eq!(on_disk.len(), 64 << 10, "the size is kept");
    assert!(on_disk[4096..12288].iter().all(|&b| b == 0));
    assert!(on_disk[12288..].iter().all(|&b| b == 0x11));
    assert!(q.is_empty());
}

#[test]
fn a_short_inline_read_is_a_data_error_as_through_the_ring() {
    if !is_tmpfs("/dev/shm") {
        eprintln!("skipping: /dev/shm is not tmpfs");
        return;
    }
    let img = Image::new("/dev/shm", "inline-short", 16 << 10);
    let (mut q, _) = queue(vec![path(img.open(None), None)]);
    // The file shrinks under the path: the read ends early.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&img.0)
        .unwrap()
        .set_len(8192)
        .unwrap();
    let back = Arc::new(vec![0u8; 8192]);
    let r = cmd(1, IoOp::Read, 4096, 8192, Some(bufs(&back)));
    assert_eq!(
        inline_now(&mut q, r),
        [(1, IoOutcome::Errno(libc::ENODATA))]
    );
}

#[test]
fn inline_off_and_files_not_in_memory_go_through_the_ring() {
    let mut images = Vec::new();
    if is_tmpfs("/dev/shm") {
        images.push((Image::new("/dev/shm", "ring", 16 << 10), Some(false)));
    }
    // The crate's own directory: on the disk the sources are on.
    let here = env!("CARGO_MANIFEST_DIR");
    let magic = fs_magic(here);
    if magic != libc::TMPFS_MAGIC as u32 && magic != crate::file::RAMFS_MAGIC {
        images.push((Image::new(here, "ring", 16 << 10), None));
    }
    assert!(
        !images.is_empty(),
        "neither /dev/shm nor {here} can be used"
    );
    let start = Instant::now();
    for (img, inline) in &images {
        let driver = img.open(*inline);
        assert!(!driver.info().inline, "{:?}", img.0);
        let (mut q, _) = queue(vec![path(driver, None)]);
        let back = Arc::new(vec![0u8; 4096]);
        let r = cmd(1, IoOp::Read, 0, 4096, Some(bufs(&back)));
        assert_eq!(inline_now(&mut q, r), [], "{:?} completed inline", img.0);
        let got = collect(&mut q, start, 1, |e| done(e).is_some());
        assert_eq!(
            got.iter().filter_map(done).collect::<Vec<_>>(),
            [(1, IoOutcome::Ok)]
        );
        assert!(back.iter().all(|&b| b == 0x11));
    }
}
