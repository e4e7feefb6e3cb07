//! The guest's memory table: SET_MEM_TABLE, ADD_MEM_REG and REM_MEM_REG map
//! the frontend's fds; ring addresses arrive in the frontend's own virtual
//! addresses and are translated here to guest-physical ones.

use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex};

use vhost::vhost_user::message::{VhostUserMemoryRegion, VhostUserSingleMemoryRegion};
use vm_memory::{
    GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap, GuestRegionMmap,
};

use super::sigbus;

/// Memory slots offered with CONFIGURE_MEM_SLOTS (KVM's usual limit), and
/// the most regions the table takes.
pub const MAX_MEM_SLOTS: u64 = 509;

/// One region as the frontend sees it (for ring address translation).
struct Mapping {
    vmm_addr: u64,
    size: u64,
    gpa: u64,
}

/// A mapped region and its SIGBUS registration. Kept here until no table
/// holds the region any more: the registration goes first (field order),
/// then the mapping (the last `Arc`), never the other way round.
struct Held {
    _guard: Option<sigbus::Guard>,
    region: Arc<GuestRegionMmap>,
}

/// Regions of tables dropped while a request still held them, unmapped by a
/// later sweep.
static LEFT: Mutex<Vec<Held>> = Mutex::new(Vec::new());

/// Unmaps what only `held` holds still (no table, no request in flight).
fn sweep(held: &mut Vec<Held>) {
    held.retain(|h| Arc::strong_count(&h.region) > 1);
}

/// Unmaps the regions of ended connections that nothing holds any more. The
/// serve loop calls it once the old device (its workers' tables) is gone:
/// without it they stayed mapped, their fds open, until a later frontend's
/// table, keeping a departed guest's memory alive.
pub fn sweep_left() {
    sweep(&mut LEFT.lock().unwrap_or_else(|p| p.into_inner()));
}

pub struct MemoryTable {
    atomic: GuestMemoryAtomic<GuestMemoryMmap>,
    mappings: Vec<Mapping>,
    /// Every region this table mapped that may still be mapped.
    held: Vec<Held>,
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

fn map_region(region: &VhostUserMemoryRegion, file: File) -> io::Result<Held> {
    // Copied out: the message struct is packed.
    let (offset, size, gpa) = (
        region.mmap_offset,
        region.memory_size,
        region.guest_phys_addr,
    );
    // A region starts on a page (QEMU rounds every region to its page size;
    // libblkio's are its own mappings, sizes not rounded). One off the grid
    // maps an aligned guest-physical ring address to a misaligned host one:
    // the ring's atomics need alignment.
    let page = rustix::param::page_size() as u64;
    let user_addr = region.user_addr;
    if !gpa.is_multiple_of(page) || !user_addr.is_multiple_of(page) {
        return Err(invalid(format!(
            "memory region at {gpa:#x} (frontend address {user_addr:#x}) does not start on a page"
        )));
    }
    let what = format!("memory region at {gpa:#x}");
    crate::fd_range::check_holds(&file, offset, size, &what)?;
    crate::fd_range::seal_shrink(&file, &what);
    let mmap = region
        .mmap_region::<()>(file)
        .map_err(|e| invalid(format!("mapping a memory region: {e}")))?;
    // Before any worker can reach it: a truncation is contained from the
    // first access on.
    let guard = sigbus::register(&mmap, format!("{what} ({size:#x} bytes)"));
    let region = GuestRegionMmap::new(mmap, GuestAddress(gpa)).ok_or_else(|| {
        invalid(format!(
            "memory region at {gpa:#x} of {size:#x} bytes overflows"
        ))
    })?;
    Ok(Held {
        _guard: guard,
        region: Arc::new(region),
    })
}

/// The highest guest-physical address of regions (start, size).
pub fn last_gpa(regions: impl Iterator<Item = (u64, u64)>) -> Option<u64> {
    regions
        .filter(|&(_, size)| size > 0)
        .map(|(gpa, size)| gpa.saturating_add(size - 1))
        .max()
}

fn mapping(region: &VhostUserMemoryRegion) -> Mapping {
    Mapping {
        vmm_addr: region.user_addr,
        size: region.memory_size,
        gpa: region.guest_phys_addr,
    }
}

impl MemoryTable {
    pub fn new(atomic: GuestMemoryAtomic<GuestMemoryMmap>) -> Self {
        Self {
            atomic,
            mappings: Vec::new(),
            held: Vec::new(),
        }
    }

    /// The memory every worker and vring reads through.
    pub fn atomic(&self) -> &GuestMemoryAtomic<GuestMemoryMmap> {
        &self.atomic
    }

    fn publish(&mut self, mem: GuestMemoryMmap) {
        // Requests in flight hold an Arc of the old table: their mappings
        // stay valid until they complete.
        self.atomic
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(mem);
        sweep(&mut self.held);
        sweep(&mut LEFT.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// SET_MEM_TABLE: the whole table at once.
    pub fn set_table(
        &mut self,
        regions: &[VhostUserMemoryRegion],
        files: Vec<File>,
    ) -> io::Result<()> {
        if regions.len() != files.len() {
            return Err(invalid("memory regions and fds do not match".into()));
        }
        let mut mapped = Vec::with_capacity(regions.len());
        let mut mappings = Vec::with_capacity(regions.len());
        for (region, file) in regions.iter().zip(files) {
            mapped.push(map_region(region, file)?);
            mappings.push(mapping(region));
        }
        let mem =
            GuestMemoryMmap::from_arc_regions(mapped.iter().map(|h| h.region.clone()).collect())
                .map_err(|e| invalid(format!("memory table: {e}")))?;
        self.held.extend(mapped);
        self.publish(mem);
        self.mappings = mappings;
        Ok(())
    }

    /// ADD_MEM_REG (CONFIGURE_MEM_SLOTS): at most [`MAX_MEM_SLOTS`]
    /// regions in all (each holds an fd and a mapping).
    pub fn add(&mut self, region: &VhostUserSingleMemoryRegion, file: File) -> io::Result<()> {
        if self.mappings.len() as u64 >= MAX_MEM_SLOTS {
            return Err(invalid(format!(
                "all {MAX_MEM_SLOTS} memory slots are in use: region refused"
            )));
        }
        let mapped = map_region(region, file)?;
        let mem = self
            .atomic
            .memory()
            .insert_region(mapped.region.clone())
            .map_err(|e| invalid(format!("adding a memory region: {e}")))?;
        self.held.push(mapped);
        self.publish(mem);
        self.mappings.push(mapping(region));
        Ok(())
    }

    /// REM_MEM_REG.
    pub fn remove(&mut self, region: &VhostUserSingleMemoryRegion) -> io::Result<()> {
        let (mem, _) = self
            .atomic
            .memory()
            .remove_region(GuestAddress(region.guest_phys_addr), region.memory_size)
            .map_err(|e| invalid(format!("removing a memory region: {e}")))?;
        self.publish(mem);
        self.mappings.retain(|m| m.gpa != region.guest_phys_addr);
        Ok(())
    }

    /// The table's highest guest-physical address, were `more` regions
    /// (start, size) added to it.
    pub fn last_gpa_with(&self, more: impl Iterator<Item = (u64, u64)>) -> Option<u64> {
        last_gpa(self.mappings.iter().map(|m| (m.gpa, m.size)).chain(more))
    }

    /// A frontend virtual address (SET_VRING_ADDR) as a guest-physical one.
    pub fn to_gpa(&self, vmm_addr: u64) -> Option<u64> {
        self.mappings
            .iter()
            .find(|m| vmm_addr >= m.vmm_addr && vmm_addr - m.vmm_addr < m.size)
            .map(|m| vmm_addr - m.vmm_addr + m.gpa)
    }
}

impl Drop for MemoryTable {
    fn drop(&mut self) {
        // The connection is over: no table holds its regions any more (the
        // device's vrings may outlive the handler), so they are unmapped
        // now, or by a later sweep if a request still holds one.
        self.atomic
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(GuestMemoryMmap::new());
        sweep(&mut self.held);
        let mut left = LEFT.lock().unwrap_or_else(|p| p.into_inner());
        left.append(&mut self.held);
        sweep(&mut left);
    }
}
