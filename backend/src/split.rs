//! Splitting a request at a device's transfer limits. The kernel never
//! splits NVMe passthrough commands: a command over the controller's
//! maximum transfer, or touching more memory pages than its segment limit,
//! fails with EINVAL. Parts stay multiples of the block size.

pub const PAGE: u64 = 4096;

/// Limits of the device a request goes to (0: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitLimits {
    pub max_transfer: u64,
    /// Most memory pages one command may touch.
    pub max_pages: u64,
    pub block_size: u64,
}

/// Pages of memory `v` touches.
fn pages(base: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let first = base / PAGE;
    let last = (base + len - 1) / PAGE;
    last - first + 1
}

/// Whether `len` bytes in `iovecs` exceed `limits` (cheap; most requests don't).
pub fn needs_split(iovecs: &[libc::iovec], len: u64, limits: &SplitLimits) -> bool {
    if limits.max_transfer > 0 && len > limits.max_transfer {
        return true;
    }
    // Each iovec touches at most len/PAGE + 2 pages: count exactly only
    // when that bound is over the limit.
    limits.max_pages > 0
        && len / PAGE + 2 * iovecs.len() as u64 > limits.max_pages
        && iovecs
            .iter()
            .map(|v| pages(v.iov_base as u64, v.iov_len as u64))
            .sum::<u64>()
            > limits.max_pages
}

/// One part: `(byte offset into the request, length, its iovecs)`.
pub type SplitPart = (u64, u64, Vec<libc::iovec>);

/// Cuts `iovecs` (a request of whole blocks) into parts within `limits`;
/// `None` if the request cannot be cut into whole blocks within them (for
/// example one block scattered over more pages than a command may touch).
/// A request within the limits comes back as one part.
pub fn split(iovecs: &[libc::iovec], limits: SplitLimits) -> Option<Vec<SplitPart>> {
    let bs = limits.block_size.max(1);
    let max_len = if limits.max_transfer == 0 {
        u64::MAX
    } else {
        limits.max_transfer - limits.max_transfer % bs
    };
    let max_pages = if limits.max_pages == 0 {
        u64::MAX
    } else {
        limits.max_pages
    };
    if max_len == 0 {
        return None;
    }
    let mut parts: Vec<SplitPart> = Vec::new();
    let mut cur: Vec<libc::iovec> = Vec::new();
    let (mut cur_len, mut cur_pages, mut offset) = (0u64, 0u64, 0u64);
    // The pieces still to place, front first.
    let mut queue: std::collections::VecDeque<(u64, u64)> = iovecs
        .iter()
        .map(|v| (v.iov_base as u64, v.iov_len as u64))
        .filter(|&(_, l)| l > 0)
        .collect();
    while let Some((base, len)) = queue.pop_front() {
        let room = max_len - cur_len;
        let mut take = len.min(room);
        // Stay within the page budget: only the pages that fit.
        let p = pages(base, take);
        if cur_pages + p > max_pages {
            let left = max_pages - cur_pages;
            // Bytes up to the end of the `left`-th page this piece touches.
            let fit = if left == 0 {
                0
            } else {
                (base / PAGE + left) * PAGE - base
            };
            take = take.min(fit);
        }
        if take > 0 {
            cur.push(libc::iovec {
                iov_base: base as *mut libc::c_void,
                iov_len: take as usize,
            });
            cur_len += take;
            cur_pages += pages(base, take);
        }
        if take < len {
            queue.push_front((base + take, len - take));
        }
        let full = cur_len == max_len || cur_pages >= max_pages || take < len;
        if full && !queue.is_empty() {
            // Close the part on a block boundary: give back the unaligned tail.
            let mut tail = cur_len % bs;
            if tail == cur_len {
                return None;
            }
            while tail > 0 {
                let last = cur.last_mut()?;
                let cut = tail.min(last.iov_len as u64);
                let keep = last.iov_len as u64 - cut;
                queue.push_front((last.iov_base as u64 + keep, cut));
                if keep == 0 {
                    cur.pop();
                } else {
                    last.iov_len = keep as usize;
                }
                cur_len -= cut;
                tail -= cut;
            }
            parts.push((offset, cur_len, std::mem::take(&mut cur)));
            offset += cur_len;
            cur_len = 0;
            cur_pages = 0;
        }
    }
    if cur_len > 0 {
        if cur_len % bs != 0 {
            return None;
        }
        parts.push((offset, cur_len, cur));
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iov(base: u64, len: usize) -> libc::iovec {
        libc::iovec {
            iov_base: base as *mut libc::c_void,
            iov_len: len,
        }
    }

    fn check(iovecs: &[libc::iovec], limits: SplitLimits) -> Vec<SplitPart> {
        let parts = split(iovecs, limits).expect("splittable");
        // The parts cover the request exactly, in order, within the limits.
        let flat_in: Vec<(u64, u64)> = iovecs
            .iter()
            .map(|v| (v.iov_base as u64, v.iov_len as u64))
            .collect();
        let mut bytes_in = Vec::new();
        for (b, l) in flat_in {
            bytes_in.extend((0..l).map(|i| b + i));
        }
        let mut bytes_out = Vec::new();
        let mut expect_off = 0;
        for (off, len, vs) in &parts {
            assert_eq!(*off, expect_off);
            assert_eq!(*len, vs.iter().map(|v| v.iov_len as u64).sum::<u64>());
            assert_eq!(len % limits.block_size, 0, "part not whole blocks");
            if limits.max_transfer > 0 {
                assert!(*len <= limits.max_transfer);
            }
            if limits.max_pages > 0 {
                let p: u64 = vs
                    .iter()
                    .map(|v| pages(v.iov_base as u64, v.iov_len as u64))
                    .sum();
                assert!(p <= limits.max_pages, "{p} pages");
            }
            for v in vs {
                bytes_out.extend((0..v.iov_len as u64).map(|i| v.iov_base as u64 + i));
            }
            expect_off += len;
        }
        assert_eq!(bytes_in, bytes_out);
        parts
    }

    #[test]
    fn within_limits_is_one_part() {
        let l = SplitLimits {
            max_transfer: 1 << 20,
            max_pages: 64,
            block_size: 512,
        };
        assert_eq!(check(&[iov(0x10000, 65536)], l).len(), 1);
    }

    #[test]
    fn splits_at_max_transfer() {
        let l = SplitLimits {
            max_transfer: 516096,
            max_pages: 127,
            block_size: 4096,
        };
        let parts = check(&[iov(0x100000, 1 << 20)], l);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].1, 516096);
    }

    #[test]
    fn splits_by_pages_and_keeps_whole_blocks() {
        // 40 scattered 1536-byte segments, 4 pages per command, 512-byte blocks.
        let segs: Vec<_> = (0..40)
            .map(|i| iov(0x200000 + i * 8192 + 100, 1536))
            .collect();
        let l = SplitLimits {
            max_transfer: 0,
            max_pages: 4,
            block_size: 512,
        };
        assert!(check(&segs, l).len() >= 10);
        // 4 KiB blocks made of 2 KiB segments.
        let segs: Vec<_> = (0..16).map(|i| iov(0x400000 + i * 16384, 2048)).collect();
        let l = SplitLimits {
            max_transfer: 0,
            max_pages: 5,
            block_size: 4096,
        };
        check(&segs, l);
    }

    #[test]
    fn impossible_split_is_refused() {
        // One 4 KiB block over 8 pages, at most 4 pages per command.
        let segs: Vec<_> = (0..8).map(|i| iov(0x600000 + i * 8192, 512)).collect();
        let l = SplitLimits {
            max_transfer: 0,
            max_pages: 4,
            block_size: 4096,
        };
        assert!(split(&segs, l).is_none());
    }
}
