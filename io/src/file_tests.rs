//! File and block-device paths through a real ring: unaligned guest
//! buffers, coherence across two block-device nodes of one backing, and
//! who owes a flush. The block-device tests need loop devices (root and
//! `losetup`); where none can be made they say so and pass.

use std::path::{Path, PathBuf};
use std::process::Command;

use mpath::IoOutcome;

use crate::{open_path, Bounce, IoOp, PathDriver, PathOptions, Ring};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let d = std::env::temp_dir().join(format!("mpath-io-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loop device over a file, detached when dropped.
struct Loop(String);

impl Loop {
    fn new(backing: &Path) -> Option<Self> {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(backing)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "skipping: no loop device ({})",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Self(String::from_utf8(out.stdout).ok()?.trim().to_string()))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// `len` bytes whose address is 1 past a 4 KiB boundary: no O_DIRECT takes it.
struct Unaligned {
    v: Vec<u8>,
    at: usize,
    len: usize,
}

impl Unaligned {
    fn new(len: usize, fill: u8) -> Self {
        let mut v = vec![fill; len + 8192];
        let addr = v.as_mut_ptr() as usize;
        let at = (4096 - addr % 4096) % 4096 + 1;
        Self { v, at, len }
    }

    fn bytes(&mut self) -> &mut [u8] {
        &mut self.v[self.at..self.at + self.len]
    }

    /// Two segments, as a guest with a scattered buffer sends them.
    fn iovecs(&mut self) -> [libc::iovec; 2] {
        let half = self.len / 2 + 3;
        let (a, b) = self.bytes().split_at_mut(half);
        [
            libc::iovec {
                iov_base: a.as_mut_ptr().cast(),
                iov_len: a.len(),
            },
            libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            },
        ]
    }
}

/// One I/O as a worker does it: through a bounce when the driver asks for
/// one, copied out on completion.
fn io(
    d: &dyn PathDriver,
    ring: &mut Ring,
    op: IoOp,
    offset: u64,
    buf: &mut Unaligned,
) -> IoOutcome {
    let len = buf.len as u64;
    let guest = buf.iovecs();
    let bounce = d
        .bounce_alignment(op, offset, len, &guest)
        // SAFETY: `buf` outlives the bounce, which is dropped below.
        .map(|a| unsafe { Bounce::new(op, &guest, a) }.expect("bounce"));
    let (iov, cnt) = match &bounce {
        Some(b) => (b.iovec(), 1),
        None => (guest.as_ptr(), guest.len()),
    };
    // SAFETY: `guest`, `buf` and the bounce live until the completion is
    // reaped below.
    let e = unsafe { d.prepare(op, offset, len, iov, cnt, 1) };
    // SAFETY: as above.
    unsafe { ring.push(&e) }.unwrap();
    ring.wait().unwrap();
    let mut got = None;
    ring.reap(|_, res, big| got = Some((res, big)));
    let (res, big) = got.expect("a completion");
    if let (Some(b), true) = (&bounce, res > 0) {
        // SAFETY: the completion is reaped: the kernel is done with it.
        unsafe { b.copy_out(res as usize) };
    }
    d.decode(op, len, res, big)
}

fn flush(d: &dyn PathDriver, ring: &mut Ring) -> IoOutcome {
    // SAFETY: a flush points to no memory.
    let e = unsafe { d.prepare(IoOp::Flush, 0, 0, std::ptr::null(), 0, 2) };
    // SAFETY: as above.
    unsafe { ring.push(&e) }.unwrap();
    ring.wait().unwrap();
    let mut got = None;
    ring.reap(|_, res, big| got = Some((res, big)));
    let (res, big) = got.expect("a completion");
    d.decode(IoOp::Flush, 0, res, big)
}

fn image(dir: &TempDir, size: usize) -> PathBuf {
    let p = dir.0.join("img");
    std::fs::write(&p, vec![0u8; size]).unwrap();
    p
}

const WRITE: IoOp = IoOp::Write { fua: false };

#[test]
fn an_unaligned_guest_buffer_on_a_block_device_goes_o_direct_through_a_bounce() {
    let dir = TempDir::new("bounce");
    let img = image(&dir, 1 << 20);
    let Some(dev) = Loop::new(&img) else { return };
    let d = open_path(&dev.0, &PathOptions::default()).unwrap();
    let mut ring = Ring::new(8).unwrap();
    let mut data = Unaligned::new(8192, 0);
    for (i, b) in data.bytes().iter_mut().enumerate() {
        *b = (i % 251) as u8 + 1;
    }
    let guest = data.iovecs();
    assert!(
        d.bounce_alignment(WRITE, 4096, 8192, &guest).is_some(),
        "an unaligned buffer on a block device needs a bounce"
    );
    assert_eq!(io(&*d, &mut ring, WRITE, 4096, &mut data), IoOutcome::Ok);
    // O_DIRECT on the loop node reached the backing file at once; a
    // buffered write would still sit in the node's own page cache.
    let backing = std::fs::read(&img).unwrap();
    assert_eq!(
        &backing[4096..4096 + 8192],
        data.bytes(),
        "the write bypassed the node's cache"
    );
    let mut back = Unaligned::new(8192, 0xee);
    assert_eq!(
        io(&*d, &mut ring, IoOp::Read, 4096, &mut back),
        IoOutcome::Ok
    );
    assert_eq!(
        back.bytes(),
        data.bytes(),
        "data round-trips through the bounce"
    );
    // The bytes around the guest buffer were not touched by the copy-out.
    assert_eq!(back.v[back.at - 1], 0xee);
    assert_eq!(back.v[back.at + back.len], 0xee);
    assert!(!d.took_buffered_writes());
}

#[test]
fn two_block_device_nodes_of_one_backing_stay_coherent() {
    let dir = TempDir::new("coherent");
    let img = image(&dir, 1 << 20);
    let (Some(a), Some(b)) = (Loop::new(&img), Loop::new(&img)) else {
        return;
    };
    let pa = open_path(&a.0, &PathOptions::default()).unwrap();
    let pb = open_path(&b.0, &PathOptions::default()).unwrap();
    let mut ring = Ring::new(8).unwrap();
    // A read on B first: buffered, it would fill B's page cache with zeroes.
    let mut seen = Unaligned::new(4096, 0xee);
    assert_eq!(io(&*pb, &mut ring, IoOp::Read, 0, &mut seen), IoOutcome::Ok);
    assert!(seen.bytes().iter().all(|&x| x == 0));
    for round in 1..=3u8 {
        let (w, r) = if round % 2 == 1 {
            (&pa, &pb)
        } else {
            (&pb, &pa)
        };
        let mut data = Unaligned::new(4096, round);
        assert_eq!(io(&**w, &mut ring, WRITE, 0, &mut data), IoOutcome::Ok);
        // A flush sent on the other node covers the write.
        assert_eq!(flush(&**r, &mut ring), IoOutcome::Ok);
        let mut seen = Unaligned::new(4096, 0xee);
        assert_eq!(io(&**r, &mut ring, IoOp::Read, 0, &mut seen), IoOutcome::Ok);
        assert!(
            seen.bytes().iter().all(|&x| x == round),
            "round {round}: the other node reads what was written, not its stale cache"
        );
    }
    assert!(!pa.took_buffered_writes() && !pb.took_buffered_writes());
}

#[test]
fn block_devices_refuse_buffered_io() {
    let dir = TempDir::new("direct-off");
    let img = image(&dir, 1 << 20);
    let Some(dev) = Loop::new(&img) else { return };
    let opts = PathOptions {
        direct: Some(false),
        ..PathOptions::default()
    };
    let e = open_path(&dev.0, &opts).unwrap_err().to_string();
    assert!(e.contains("O_DIRECT only"), "{e}");
}

#[test]
fn a_regular_file_bounces_unaligned_buffers_where_it_has_o_direct() {
    let dir = TempDir::new("file");
    let img = image(&dir, 1 << 20);
    let d = open_path(img.to_str().unwrap(), &PathOptions::default()).unwrap();
    if d.info().buffered {
        eprintln!("skipping: no O_DIRECT on {}", dir.0.display());
        return;
    }
    let mut ring = Ring::new(8).unwrap();
    let mut data = Unaligned::new(4096, 5);
    let guest = data.iovecs();
    assert!(d.bounce_alignment(WRITE, 0, 4096, &guest).is_some());
    assert_eq!(io(&*d, &mut ring, WRITE, 0, &mut data), IoOutcome::Ok);
    let mut seen = Unaligned::new(4096, 0);
    assert_eq!(io(&*d, &mut ring, IoOp::Read, 0, &mut seen), IoOutcome::Ok);
    assert!(seen.bytes().iter().all(|&x| x == 5));
    assert!(!d.took_buffered_writes());
}

#[test]
fn a_path_without_o_direct_uses_the_files_page_cache_and_owes_a_flush() {
    let dir = TempDir::new("file-buffered");
    let img = image(&dir, 1 << 20);
    let buffered = PathOptions {
        direct: Some(false),
        ..PathOptions::default()
    };
    let d = open_path(img.to_str().unwrap(), &buffered).unwrap();
    assert!(d.info().buffered);
    let mut ring = Ring::new(8).unwrap();
    let mut data = Unaligned::new(4096, 5);
    let guest = data.iovecs();
    assert_eq!(d.bounce_alignment(WRITE, 0, 4096, &guest), None);
    let mut seen = Unaligned::new(4096, 0);
    assert_eq!(io(&*d, &mut ring, IoOp::Read, 0, &mut seen), IoOutcome::Ok);
    assert!(!d.took_buffered_writes(), "a buffered read owes nothing");
    assert_eq!(io(&*d, &mut ring, WRITE, 0, &mut data), IoOutcome::Ok);
    assert!(
        d.took_buffered_writes(),
        "the path remembers its buffered write"
    );
    assert_eq!(flush(&*d, &mut ring), IoOutcome::Ok);
    // A second path to the same file shares the page cache; one to a copy
    // of the file does not, and the pair is refused.
    let same = open_path(img.to_str().unwrap(), &PathOptions::default()).unwrap();
    let mut seen = Unaligned::new(4096, 0);
    assert_eq!(
        io(&*same, &mut ring, IoOp::Read, 0, &mut seen),
        IoOutcome::Ok
    );
    assert!(seen.bytes().iter().all(|&x| x == 5));
    assert!(crate::check_shared_cache(&[("a", d.info()), ("b", same.info())]).is_ok());
    let copy = dir.0.join("copy");
    std::fs::copy(&img, &copy).unwrap();
    let other = open_path(copy.to_str().unwrap(), &PathOptions::default()).unwrap();
    assert!(crate::check_shared_cache(&[("a", d.info()), ("b", other.info())]).is_err());
}

#[test]
fn read_capacity_follows_a_grown_file_and_a_grown_loop_device() {
    let dir = TempDir::new("capacity");
    let img = image(&dir, 1 << 20);
    let d = open_path(img.to_str().unwrap(), &PathOptions::default()).unwrap();
    assert_eq!(d.read_capacity().unwrap(), 1 << 20);
    std::fs::File::options()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(3 << 20)
        .unwrap();
    assert_eq!(d.read_capacity().unwrap(), 3 << 20);
    // What the device said at open stays: the disk's capacity is the backend's.
    assert_eq!(d.info().capacity_bytes, 1 << 20);

    let Some(lo) = Loop::new(&img) else {
        eprintln!("skipped the block-device half: no loop device");
        return;
    };
    let b = open_path(&lo.0, &PathOptions::default()).unwrap();
    assert_eq!(b.read_capacity().unwrap(), 3 << 20);
    std::fs::File::options()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(4 << 20)
        .unwrap();
    let ok = Command::new("losetup").args(["-c", &lo.0]).status();
    if ok.is_ok_and(|s| s.success()) {
        assert_eq!(b.read_capacity().unwrap(), 4 << 20);
    }
}
