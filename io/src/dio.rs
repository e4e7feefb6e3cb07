//! O_DIRECT alignment: what the device or filesystem asks for, and how one
//! read or write of a file or block-device path travels given it.
//!
//! Page caches are per inode: two nodes of one LUN (two SCSI paths, two
//! loop devices over one image) or two mounts of one export each have
//! their own, so buffered I/O on one path is invisible to another and a
//! flush on one does not write back the other's dirty pages. Hence
//! O_DIRECT wherever the device or filesystem takes it, buffers that do
//! not fit going through an aligned bounce; the page cache only for a
//! regular file whose filesystem has no O_DIRECT or needs a larger offset
//! alignment than the disk's block size, and then every path must be that
//! same file (one page cache): see [`check_shared_cache`].

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The O_DIRECT constraints of one descriptor, in bytes (powers of two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DioAlign {
    /// Every buffer address.
    pub mem: u32,
    /// The file offset, the total length and every buffer length.
    pub offset: u32,
}

/// How one read or write goes to a file or block-device path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// O_DIRECT on the caller's buffers.
    Direct,
    /// O_DIRECT through an aligned bounce buffer.
    Bounce,
    /// Through the page cache (regular files only).
    Buffered,
}

impl DioAlign {
    fn offset_ok(&self, offset: u64, len: u64) -> bool {
        let a = u64::from(self.offset);
        offset.is_multiple_of(a) && len.is_multiple_of(a)
    }

    fn buffers_ok(&self, iovs: &[libc::iovec]) -> bool {
        let (m, o) = (self.mem as usize, self.offset as usize);
        iovs.iter()
            .all(|v| (v.iov_base as usize).is_multiple_of(m) && v.iov_len.is_multiple_of(o))
    }
}

/// Where a read or write of `len` bytes at `offset` from `iovs` goes:
/// `align` is the O_DIRECT descriptor's constraint (None: no O_DIRECT).
pub(crate) fn route(
    align: Option<DioAlign>,
    block_device: bool,
    offset: u64,
    len: u64,
    iovs: &[libc::iovec],
) -> Route {
    let Some(a) = align else {
        // A block device always has an O_DIRECT descriptor (open refuses
        // it otherwise); this arm is for regular files.
        return Route::Buffered;
    };
    let offset_ok = a.offset_ok(offset, len);
    if offset_ok && a.buffers_ok(iovs) {
        Route::Direct
    } else if offset_ok {
        Route::Bounce
    } else if block_device {
        // A bounce cannot fix the offset; the disk's block size is at least
        // the device's logical block size, so this is a caller bug the
        // kernel answers with EINVAL. Never the page cache.
        Route::Direct
    } else {
        Route::Buffered
    }
}

/// Refuses a set of paths where one uses a page cache that another does
/// not see: a path that may do buffered I/O (`DeviceInfo::buffered`) needs
/// every path to be the same file. `paths`: (name, info) of every path.
pub fn check_shared_cache(paths: &[(&str, &crate::DeviceInfo)]) -> Result<(), String> {
    let Some((name, cached)) = paths.iter().find(|(_, i)| i.buffered) else {
        return Ok(());
    };
    match paths
        .iter()
        .find(|(_, i)| i.file.is_none() || i.file != cached.file)
    {
        None => Ok(()),
        Some((other, _)) => Err(format!(
            "path {name} uses the page cache (its filesystem does not take O_DIRECT for \
             every request) and path {other} is not the same file: buffered I/O would not \
             be coherent across them"
        )),
    }
}

/// `statx(STATX_DIOALIGN)` (Linux 6.1+ for some filesystems, 6.11+ for
/// block devices): `None` when the kernel or filesystem does not say,
/// `Some(None)` when it says O_DIRECT is not supported.
pub(crate) fn statx_dio_align(f: &File) -> Option<Option<DioAlign>> {
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an empty path with AT_EMPTY_PATH stats the descriptor itself;
    // `st` is a valid, writable statx buffer.
    let r = unsafe {
        libc::statx(
            f.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut st,
        )
    };
    if r != 0 || st.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    let (mem, offset) = (st.stx_dio_mem_align, st.stx_dio_offset_align);
    if mem == 0 || offset == 0 {
        return Some(None);
    }
    Some(Some(DioAlign { mem, offset }))
}

/// Finds the smallest alignment an O_DIRECT descriptor of a regular file
/// takes by reading the first bytes with growing alignment (for kernels and
/// filesystems that do not report `STATX_DIOALIGN`). `None`: none works.
pub(crate) fn probe_dio_align(direct: &File) -> Option<DioAlign> {
    const MAX: usize = 64 * 1024;
    let layout = std::alloc::Layout::from_size_align(MAX, MAX).ok()?;
    // SAFETY: the layout has a non-zero size.
    let buf = unsafe { std::alloc::alloc_zeroed(layout) };
    if buf.is_null() {
        return None;
    }
    let mut found = None;
    let mut a = 512;
    while a <= MAX {
        // SAFETY: `buf` holds MAX >= a writable bytes.
        let r = unsafe { libc::pread(direct.as_raw_fd(), buf.cast(), a, 0) };
        if r >= 0 {
            found = Some(DioAlign {
                mem: a as u32,
                offset: a as u32,
            });
            break;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            break;
        }
        a *= 2;
    }
    // SAFETY: allocated above with this layout; nothing else holds it.
    unsafe { std::alloc::dealloc(buf, layout) };
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iov(addr: usize, len: usize) -> libc::iovec {
        libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        }
    }

    const NVME: DioAlign = DioAlign {
        mem: 4,
        offset: 512,
    };
    const STRICT: DioAlign = DioAlign {
        mem: 4096,
        offset: 4096,
    };

    #[test]
    fn aligned_buffers_go_direct_on_both_kinds() {
        let v = [iov(0x1000, 4096), iov(0x3000, 512)];
        assert_eq!(route(Some(NVME), true, 4096, 4608, &v), Route::Direct);
        assert_eq!(route(Some(NVME), false, 4096, 4608, &v), Route::Direct);
    }

    #[test]
    fn the_memory_alignment_is_the_devices_not_the_block_size() {
        // 4-byte aligned addresses are fine for a device that says so ...
        let v = [iov(0x1004, 512)];
        assert_eq!(route(Some(NVME), true, 0, 512, &v), Route::Direct);
        // ... and not for one that wants pages.
        let v = [iov(0x1004, 4096)];
        assert_eq!(route(Some(STRICT), true, 0, 4096, &v), Route::Bounce);
    }

    #[test]
    fn unaligned_buffers_bounce_on_both_kinds() {
        // Address off by one.
        let v = [iov(0x1001, 512)];
        assert_eq!(route(Some(NVME), true, 0, 512, &v), Route::Bounce);
        assert_eq!(route(Some(NVME), false, 0, 512, &v), Route::Bounce);
        // A segment length that is not a multiple of the offset alignment.
        let v = [iov(0x1000, 256), iov(0x2000, 256)];
        assert_eq!(route(Some(NVME), true, 0, 512, &v), Route::Bounce);
        assert_eq!(route(Some(NVME), false, 0, 512, &v), Route::Bounce);
    }

    fn file(dev: u64, ino: u64, buffered: bool) -> crate::DeviceInfo {
        crate::DeviceInfo {
            file: Some((dev, ino)),
            buffered,
            ..crate::DeviceInfo::default()
        }
    }

    #[test]
    fn a_page_cache_is_allowed_only_when_every_path_is_that_file() {
        let (x, y) = (file(1, 10, false), file(2, 10, false));
        let (xc, yc) = (file(1, 10, true), file(2, 10, true));
        let bdev = crate::DeviceInfo::default();
        // No page cache anywhere: any mix (two mounts, two LUN nodes).
        assert!(check_shared_cache(&[("a", &x), ("b", &y), ("c", &bdev)]).is_ok());
        // One file through one page cache, however many paths.
        assert!(check_shared_cache(&[("a", &xc), ("b", &x), ("c", &xc)]).is_ok());
        // A page cache next to another mount of the image, or a block device.
        let e = check_shared_cache(&[("a", &x), ("b", &yc)]).unwrap_err();
        assert!(
            e.contains("path b uses the page cache") && e.contains("path a"),
            "{e}"
        );
        assert!(check_shared_cache(&[("a", &xc), ("b", &bdev)]).is_err());
    }

    #[test]
    fn the_offset_is_checked_against_the_offset_alignment() {
        let v = [iov(0x1000, 4096)];
        // A regular file with a 4 KiB filesystem alignment behind a 512-byte
        // disk: a bounce cannot move the offset, the page cache can.
        assert_eq!(route(Some(STRICT), false, 512, 4096, &v), Route::Buffered);
        // A block device never goes buffered, even for an offset a bounce cannot fix.
        assert_eq!(route(Some(STRICT), true, 512, 4096, &v), Route::Direct);
        // The total length counts too.
        let v = [iov(0x1000, 512)];
        assert_eq!(route(Some(STRICT), false, 0, 512, &v), Route::Buffered);
    }

    #[test]
    fn without_o_direct_a_regular_file_goes_buffered() {
        let v = [iov(0x1000, 4096)];
        assert_eq!(route(None, false, 0, 4096, &v), Route::Buffered);
    }

    #[test]
    fn statx_or_probing_finds_the_alignment_of_a_file_here() {
        let dir = std::env::temp_dir().join(format!("mpath-dio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, vec![0u8; 65536]).unwrap();
        let f = File::open(&path).unwrap();
        let direct = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
        };
        if let Ok(d) = direct {
            let probed = probe_dio_align(&d).expect("an O_DIRECT descriptor reads aligned");
            assert!(probed.offset.is_power_of_two() && probed.offset >= 512);
            if let Some(Some(s)) = statx_dio_align(&f) {
                // The probe finds the offset alignment the filesystem reports
                // (it starts at 512).
                assert_eq!(probed.offset, s.offset.max(512));
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
