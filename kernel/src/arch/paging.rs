//! Identity mappings for device memory.
//!
//! The boot page tables map 0-4 GiB with 2 MiB pages, write-back below
//! 3 GiB. A device BAR or ECAM window must be uncached, and 64-bit BARs may
//! sit above 4 GiB: [`map_mmio`] marks the covering 2 MiB pages uncached
//! (PCD | PWT) below 4 GiB and creates uncached identity mappings above it.
//!
//! This module only edits page tables: the frames for new page directories
//! come from the caller (`arch::memory`, which owns the frame allocator), so
//! paging sits below memory and imports nothing of it.

use core::fmt;

const PRESENT: u64 = 1;
const WRITABLE: u64 = 1 << 1;
const WRITE_THROUGH: u64 = 1 << 3;
const CACHE_DISABLE: u64 = 1 << 4;
const HUGE: u64 = 1 << 7;
const ADDR_MASK: u64 = 0x000F_FFFF_FFFF_F000;
const PAGE_2M: u64 = 2 << 20;
/// One PML4 entry (512 GiB) is all baremq maps.
const LIMIT: u64 = 512 << 30;

/// Why a mapping failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// The range ends above the 512 GiB baremq can map.
    TooHigh { phys: u64, len: u64 },
    /// No frame for a page directory.
    NoMemory,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::TooHigh { phys, len } => {
                write!(f, "MMIO range {phys:#x}+{len:#x} lies above the 512 GiB baremq maps")
            }
            MapError::NoMemory => write!(f, "no memory for a page directory"),
        }
    }
}

static LOCK: spin::Mutex<()> = spin::Mutex::new(());

fn table(phys: u64) -> *mut u64 {
    phys as *mut u64
}

/// A source of 4 KiB frames below 4 GiB for new page directories (they must
/// be reachable through the boot identity map).
pub type TableFrames<'a> = &'a mut dyn FnMut() -> Option<u64>;

/// Makes `[phys, phys + len)` an uncached identity mapping and returns the
/// pointer to `phys`. Page-table changes are flushed on this CPU; call it at
/// init, before other CPUs touch the range.
pub fn map_uncached(phys: u64, len: u64, frames: TableFrames<'_>) -> Result<*mut u8, MapError> {
    map_identity(phys, len, CACHE_DISABLE | WRITE_THROUGH, frames)
}

/// Identity-maps RAM above 4 GiB (write-back), whole 2 MiB pages inside
/// `[start, end)` only. Returns the mapped sub-range, empty if none fits.
pub fn map_ram(start: u64, end: u64, frames: TableFrames<'_>) -> Result<(u64, u64), MapError> {
    let s = start.next_multiple_of(PAGE_2M);
    let e = end & !(PAGE_2M - 1);
    if s >= e {
        return Ok((s, s));
    }
    map_identity(s, e - s, 0, frames)?;
    Ok((s, e))
}

fn map_identity(phys: u64, len: u64, cache_bits: u64, frames: TableFrames<'_>) -> Result<*mut u8, MapError> {
    let end = phys.checked_add(len.max(1)).ok_or(MapError::TooHigh { phys, len })?;
    if end > LIMIT {
        return Err(MapError::TooHigh { phys, len });
    }
    let _guard = LOCK.lock();
    let pml4 = table(boot::boot_pml4_address());
    // SAFETY: the boot PML4 is identity-mapped static memory; entry 0 always
    // points at the boot PDPT (set up by the boot assembly).
    let pdpt = table(unsafe { *pml4 } & ADDR_MASK);
    let mut page = phys & !(PAGE_2M - 1);
    while page < end {
        let gib = (page >> 30) as usize;
        // SAFETY: `gib` < 512 (checked against LIMIT), so the entry is in the PDPT page.
        let pdpte = unsafe { pdpt.add(gib) };
        // SAFETY: reading a page-table entry of the identity-mapped tables.
        let mut entry = unsafe { *pdpte };
        if entry & PRESENT == 0 {
            // Page tables come from low memory, which is mapped from boot on.
            let pd = frames()
                .filter(|a| a % 4096 == 0 && a + 4096 <= 1 << 32)
                .ok_or(MapError::NoMemory)?;
            // SAFETY: a fresh, exclusively owned, identity-mapped frame.
            unsafe { core::ptr::write_bytes(pd as *mut u8, 0, 4096) };
            entry = pd | PRESENT | WRITABLE;
            // SAFETY: installing a new, zeroed page directory for an unmapped GiB.
            unsafe { *pdpte = entry };
        }
        let pd = table(entry & ADDR_MASK);
        let index = ((page >> 21) & 511) as usize;
        // SAFETY: index < 512 within this page directory.
        unsafe { *pd.add(index) = page | PRESENT | WRITABLE | HUGE | cache_bits };
        page += PAGE_2M;
    }
    // SAFETY: reloading CR3 with its current value flushes this CPU's TLB.
    unsafe {
        let (frame, flags) = x86_64::registers::control::Cr3::read();
        x86_64::registers::control::Cr3::write(frame, flags);
    }
    Ok(phys as *mut u8)
}
