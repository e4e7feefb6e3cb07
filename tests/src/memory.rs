//! The client's I/O buffer memory: one blkio-allocated region, shared with the
//! server over the vhost-user socket (ADD_MEM_REG).

use blkio::MemoryRegion;

/// A mapped blkio memory region. Valid as long as the `Blkio` that allocated it
/// lives (the owning `Client` drops this before, or together with, the `Blkio`).
///
/// The server reads and writes this memory while requests are in flight, so we
/// never hand out references into it: data is copied in before a request is
/// submitted and copied out after it completes.
pub(crate) struct Memory {
    region: MemoryRegion,
}

impl Memory {
    pub(crate) fn new(region: MemoryRegion) -> Memory {
        Memory { region }
    }

    pub(crate) fn len(&self) -> usize {
        self.region.len
    }

    /// Address of `len` bytes at `offset`, bounds-checked.
    pub(crate) fn ptr(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(
            offset
                .checked_add(len)
                .is_some_and(|end| end <= self.region.len),
            "buffer {offset}+{len} beyond the {}-byte memory region",
            self.region.len
        );
        (self.region.addr + offset) as *mut u8
    }

    /// Copies `data` to `offset`. No request in flight may use that range.
    pub(crate) fn copy_in(&self, offset: usize, data: &[u8]) {
        let dst = self.ptr(offset, data.len());
        // SAFETY: `ptr` checked that the range lies inside the mapped region, which
        // cannot overlap `data` (a Rust allocation); no request in flight uses it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
    }

    /// Copies `len` bytes from `offset`. No request in flight may use that range.
    pub(crate) fn copy_out(&self, offset: usize, len: usize) -> Vec<u8> {
        let src = self.ptr(offset, len);
        let mut out = vec![0u8; len];
        // SAFETY: as in `copy_in`, with the roles of the two ranges swapped.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), len) };
        out
    }

    /// Fills `len` bytes at `offset` with `byte` (to see what a read overwrote).
    pub(crate) fn fill(&self, offset: usize, len: usize, byte: u8) {
        let dst = self.ptr(offset, len);
        // SAFETY: as in `copy_in`.
        unsafe { std::ptr::write_bytes(dst, byte, len) };
    }
}
