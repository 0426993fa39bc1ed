//! Identity mappings for device memory and RAM above 4 GiB.
//!
//! The boot page tables map 0-4 GiB with 2 MiB pages, write-back below
//! 3 GiB. A device BAR or ECAM window must be uncached, and 64-bit BARs may
//! sit anywhere up to the CPU's physical address width (1 TiB and 32 TiB on
//! real servers): [`map_mmio`] marks the covering 2 MiB pages uncached
//! (PCD | PWT) below 4 GiB and creates uncached identity mappings above it,
//! in whatever PML4 slot the address falls (a PDPT per slot on demand). RAM
//! above 4 GiB is mapped with 1 GiB pages where the CPU has them
//! (`pdpe1gb`). What the map can reach and which pages cover a range is
//! `platform::paging`, host-tested.
//!
//! This module only edits page tables: the frames for new tables come from
//! the caller (`arch::memory`, which owns the frame allocator), so paging
//! sits below memory and imports nothing of it.

use core::fmt;
use platform::paging::{PAGE_2M, Page};

const PRESENT: u64 = 1;
const WRITABLE: u64 = 1 << 1;
const WRITE_THROUGH: u64 = 1 << 3;
const CACHE_DISABLE: u64 = 1 << 4;
const HUGE: u64 = 1 << 7;
const ADDR_MASK: u64 = 0x000F_FFFF_FFFF_F000;
/// The 1 GiB-aligned address in a huge PDPT entry.
const GIB_ADDR_MASK: u64 = 0x000F_FFFF_C000_0000;

/// What the CPU lets the identity map reach, and whether it has 1 GiB pages.
struct Reach {
    limit: u64,
    gib_pages: bool,
}

fn reach() -> &'static Reach {
    static REACH: spin::Once<Reach> = spin::Once::new();
    REACH.call_once(|| {
        let id = raw_cpuid::CpuId::new();
        let bits = id
            .get_processor_capacity_feature_info()
            .map(|c| c.physical_address_bits());
        Reach {
            limit: platform::paging::mappable_limit(bits),
            gib_pages: id
                .get_extended_processor_and_feature_identifiers()
                .is_some_and(|f| f.has_1gib_pages()),
        }
    })
}

/// The end of what the identity map can reach on this CPU.
pub fn limit() -> u64 {
    reach().limit
}

/// Why a mapping failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// The range ends above what this CPU's page tables can reach.
    TooHigh {
        what: &'static str,
        phys: u64,
        len: u64,
        limit: u64,
    },
    /// No frame for a page table.
    NoMemory,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::TooHigh { what, phys, len, limit } => write!(
                f,
                "{what} range {phys:#x}+{len:#x} ends above {} GiB, the end of what this CPU's physical address width lets baremq map",
                limit >> 30
            ),
            MapError::NoMemory => write!(f, "no memory for a page table"),
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
    let end = phys.checked_add(len.max(1)).filter(|&e| e <= limit());
    if end.is_none() {
        return Err(MapError::TooHigh {
            what: "MMIO",
            phys,
            len,
            limit: limit(),
        });
    }
    let pages = platform::paging::pages(phys, phys + len.max(1), false);
    map_pages(pages, CACHE_DISABLE | WRITE_THROUGH, frames)?;
    Ok(phys as *mut u8)
}

/// Identity-maps RAM above 4 GiB (write-back), whole 2 MiB pages inside
/// `[start, end)` and below the limit only (a range across the limit is
/// clipped, not dropped). Returns the mapped sub-range, empty if none fits.
pub fn map_ram(start: u64, end: u64, frames: TableFrames<'_>) -> Result<(u64, u64), MapError> {
    let Some((s, e)) = platform::paging::clip_ram(start, end, limit()) else {
        return Ok((start, start));
    };
    map_pages(platform::paging::pages(s, e, reach().gib_pages), 0, frames)?;
    Ok((s, e))
}

/// A fresh zeroed page-table frame.
fn new_table(frames: TableFrames<'_>) -> Result<u64, MapError> {
    // Page tables come from low memory, which is mapped from boot on.
    let frame = frames()
        .filter(|a| a % 4096 == 0 && a + 4096 <= 1 << 32)
        .ok_or(MapError::NoMemory)?;
    // SAFETY: a fresh, exclusively owned, identity-mapped frame.
    unsafe { core::ptr::write_bytes(frame as *mut u8, 0, 4096) };
    Ok(frame)
}

/// The table an entry points at, created (zeroed) when the entry is empty.
///
/// # Safety
/// `entry` points at a valid entry of the live identity-mapped tables and the
/// caller holds [`LOCK`].
unsafe fn next_table(entry: *mut u64, frames: TableFrames<'_>) -> Result<*mut u64, MapError> {
    // SAFETY: per the contract.
    let value = unsafe { *entry };
    if value & PRESENT != 0 {
        return Ok(table(value & ADDR_MASK));
    }
    let frame = new_table(frames)?;
    // SAFETY: per the contract; installing a new, zeroed table.
    unsafe { *entry = frame | PRESENT | WRITABLE };
    Ok(table(frame))
}

fn map_pages(pages: impl Iterator<Item = Page>, cache_bits: u64, frames: TableFrames<'_>) -> Result<(), MapError> {
    let _guard = LOCK.lock();
    let pml4 = table(boot::boot_pml4_address());
    for page in pages {
        let (i4, i3, i2) = platform::paging::indices(page.addr);
        // SAFETY: indices are below 512, inside the 4 KiB tables; the boot
        // PML4 and every table reached from it are identity-mapped; LOCK held.
        let pdpt = unsafe { next_table(pml4.add(i4), frames)? };
        // SAFETY: as above.
        let pdpte = unsafe { pdpt.add(i3) };
        // SAFETY: reading an entry of the live tables.
        let current = unsafe { *pdpte };
        if page.gib && current & PRESENT == 0 {
            // SAFETY: an unused PDPT entry becomes a 1 GiB page of this identity map.
            unsafe { *pdpte = page.addr | PRESENT | WRITABLE | HUGE | cache_bits };
            continue;
        }
        if current & PRESENT != 0 && current & HUGE != 0 {
            if page.gib {
                continue; // the same GiB, identity-mapped already
            }
            // A 2 MiB page inside a 1 GiB page: split it into a directory of
            // 2 MiB pages with the same attributes first.
            let pd = new_table(frames)?;
            let base = current & GIB_ADDR_MASK;
            let attributes = current & !GIB_ADDR_MASK;
            for i in 0..512u64 {
                // SAFETY: the fresh directory, 512 entries.
                unsafe { *table(pd).add(i as usize) = (base + i * PAGE_2M) | attributes };
            }
            // SAFETY: replacing the 1 GiB entry with an equivalent directory.
            unsafe { *pdpte = pd | PRESENT | WRITABLE };
        }
        // 2 MiB pages: the whole GiB for a 1 GiB page whose slot already has a directory.
        let (first, count) = if page.gib { (page.addr, 512) } else { (page.addr, 1) };
        // SAFETY: as above.
        let pd = unsafe { next_table(pdpte, frames)? };
        for k in 0..count {
            let addr = first + k * PAGE_2M;
            // SAFETY: i2 + k < 512 (a 1 GiB page starts at directory index 0).
            unsafe { *pd.add(i2 + k as usize) = addr | PRESENT | WRITABLE | HUGE | cache_bits };
        }
    }
    // SAFETY: reloading CR3 with its current value flushes this CPU's TLB.
    unsafe {
        let (frame, flags) = x86_64::registers::control::Cr3::read();
        x86_64::registers::control::Cr3::write(frame, flags);
    }
    Ok(())
}
