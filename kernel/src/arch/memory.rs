//! Physical memory: a frame allocator over the sanitised boot memory map, the
//! kernel heap, and DMA buffers (physically contiguous, zeroed, with their
//! bus address) for devices.
//!
//! baremq identity-maps the low 4 GiB (boot page tables) and, at init, RAM
//! above 4 GiB (2 MiB pages, up to 512 GiB), so every physical address the
//! allocator hands out is also its virtual address. Low memory is handed out
//! first (first fit in address order).

use crate::arch::paging::{self, MapError};
use bootinfo::memmap::{self, FreeRanges, PAGE, Range};
use core::ptr::NonNull;
use linked_list_allocator::LockedHeap;

const IDENTITY_LIMIT: u64 = 1 << 32;
/// Free-list capacity: DMA buffers come and go per job, so allow fragmentation.
const MAX_RANGES: usize = 512;

#[global_allocator]
static HEAP: LockedHeap = LockedHeap::empty();

static FRAMES: spin::Mutex<FreeRanges<MAX_RANGES>> = spin::Mutex::new(FreeRanges::new());

/// Why a physical allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocError {
    /// No free range can hold `bytes` at `align`.
    OutOfMemory { bytes: u64, align: u64 },
    /// Alignment is zero or not a power of two.
    BadAlignment(u64),
    /// The free-range table is full (too fragmented to return memory).
    TooFragmented,
}

impl core::fmt::Display for AllocError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AllocError::OutOfMemory { bytes, align } => {
                write!(
                    f,
                    "out of physical memory: no free range for {bytes} bytes aligned to {align:#x}"
                )
            }
            AllocError::BadAlignment(a) => write!(f, "alignment {a:#x} is not a power of two"),
            AllocError::TooFragmented => write!(f, "physical free list is full"),
        }
    }
}

/// What `init` set up, for the platform report.
#[derive(Debug, Clone, Copy)]
pub struct MemoryReport {
    pub totals: memmap::MemoryTotals,
    pub free_bytes: u64,
    pub heap_bytes: u64,
    /// RAM above 4 GiB that was mapped and added to the allocator.
    pub above_4g_mapped: u64,
    /// RAM above 4 GiB that could not be mapped (beyond 512 GiB, partial 2 MiB pages).
    pub above_4g_unmapped: u64,
}

/// Builds the frame allocator and the heap. `reserved` holds ranges that must
/// never be handed out (low memory with the AP trampoline, the kernel image).
pub fn init(regions: &[bootinfo::MemoryRegion], reserved: &[Range]) -> Result<MemoryReport, AllocError> {
    let usable: heapless::Vec<Range, MAX_RANGES> =
        memmap::usable_ranges(regions, reserved).map_err(|_| AllocError::TooFragmented)?;
    let mut high = heapless::Vec::<Range, MAX_RANGES>::new();
    {
        let mut frames = FRAMES.lock();
        for r in &usable {
            if r.end > IDENTITY_LIMIT {
                let _ = high.push(Range {
                    start: r.start.max(IDENTITY_LIMIT),
                    end: r.end,
                });
            }
            let r = Range {
                start: r.start,
                end: r.end.min(IDENTITY_LIMIT),
            };
            if !r.is_empty() {
                frames.free(r.start, r.len()).map_err(|_| AllocError::TooFragmented)?;
            }
        }
    }
    // RAM above 4 GiB: map it (page tables come from the low memory just
    // added), then hand it out too.
    let (mut mapped, mut unmapped) = (0, 0);
    for r in high {
        match paging::map_ram(r.start, r.end, &mut page_table_frame) {
            Ok((s, e)) if s < e => {
                // One read at each end proves the new tables reach the range (a
                // broken mapping faults here, at boot, not in the middle of a job);
                // nothing else is touched, so untouched host memory stays untouched.
                for probe in [s, e - 8] {
                    // SAFETY: RAM just identity-mapped write-back, 8-byte aligned.
                    let _ = unsafe { core::ptr::read_volatile(probe as *const u64) };
                }
                FRAMES.lock().free(s, e - s).map_err(|_| AllocError::TooFragmented)?;
                mapped += e - s;
                unmapped += r.len() - (e - s);
                if e < r.end && r.end > paging::limit() {
                    log::warn!(
                        "memory: RAM at {:#x}..{:#x} above this CPU's {} GiB physical address reach is not used",
                        e.max(paging::limit()),
                        r.end,
                        paging::limit() >> 30
                    );
                }
            }
            Ok(_) => unmapped += r.len(),
            Err(e) => {
                log::warn!("memory: RAM at {:#x}..{:#x} not mapped: {e}", r.start, r.end);
                unmapped += r.len();
            }
        }
    }
    let top = regions
        .iter()
        .filter(|r| r.kind == bootinfo::MemoryKind::Usable && r.end() <= IDENTITY_LIMIT)
        .map(|r| r.end())
        .max()
        .unwrap_or(0);
    RAM_TOP_BELOW_4G.store(top.next_multiple_of(1 << 28), core::sync::atomic::Ordering::Relaxed);
    let totals = memmap::totals(regions);
    let free: u64 = free_bytes();
    // Heap: an eighth of free memory, between 4 MiB and 256 MiB.
    let heap_bytes = (free / 8).clamp(4 << 20, 256 << 20) & !(PAGE - 1);
    let heap = alloc_frames(heap_bytes, 2 << 20)?;
    // SAFETY: `heap` is identity-mapped RAM just taken from the frame
    // allocator, exclusively owned by the heap from now on.
    unsafe { HEAP.lock().init(heap as *mut u8, heap_bytes as usize) };
    Ok(MemoryReport {
        totals,
        free_bytes: free_bytes(),
        heap_bytes,
        above_4g_mapped: mapped,
        above_4g_unmapped: unmapped,
    })
}

static RAM_TOP_BELOW_4G: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// End of the highest memory-map region (of any kind) below 4 GiB that is
/// not in the 3-4 GiB device area: where a PCI hole can start.
pub fn ram_top_below_4g() -> u64 {
    RAM_TOP_BELOW_4G.load(core::sync::atomic::Ordering::Relaxed)
}

/// A frame for a new page directory (low memory: the boot identity map reaches it).
fn page_table_frame() -> Option<u64> {
    alloc_frames_below_4g(4096, 4096).ok()
}

/// Makes `[phys, phys + len)` (device memory: a BAR, ECAM, an I/O APIC) an
/// uncached identity mapping and returns the pointer to `phys`.
pub fn map_mmio(phys: u64, len: u64) -> Result<*mut u8, MapError> {
    paging::map_uncached(phys, len, &mut page_table_frame)
}

/// Bytes free on the kernel heap.
pub fn heap_free() -> usize {
    HEAP.lock().free()
}

/// Bytes still free in the frame allocator.
pub fn free_bytes() -> u64 {
    FRAMES.lock().free_bytes()
}

/// Takes `bytes` (rounded up to pages) of physically contiguous memory aligned
/// to `align` (at least a page). Returns the physical (= virtual) address.
pub fn alloc_frames(bytes: u64, align: u64) -> Result<u64, AllocError> {
    if align == 0 || !align.is_power_of_two() {
        return Err(AllocError::BadAlignment(align));
    }
    FRAMES.lock().alloc(bytes, align).map_err(|e| match e {
        bootinfo::Error::TooMany { .. } => AllocError::TooFragmented,
        _ => AllocError::OutOfMemory { bytes, align },
    })
}

/// Allocations that asked for a NUMA node's memory and got other memory.
static NODE_FALLBACKS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Like [`alloc_frames`], but from `node`'s memory (its SRAT ranges) when the
/// node is known; when that node has no room, from any memory, counted in
/// [`node_fallbacks`]. `None` (no SRAT, a CPU it does not list) is any memory.
pub fn alloc_frames_on_node(bytes: u64, align: u64, node: Option<u32>) -> Result<u64, AllocError> {
    if align == 0 || !align.is_power_of_two() {
        return Err(AllocError::BadAlignment(align));
    }
    match alloc_within_node(bytes, align, node, u64::MAX) {
        Some(start) => Ok(start),
        None => alloc_frames(bytes, align),
    }
}

/// [`alloc_frames_on_node`] below 4 GiB (AP stacks: the trampoline's boot page tables map only that).
pub fn alloc_frames_on_node_below_4g(bytes: u64, align: u64, node: Option<u32>) -> Result<u64, AllocError> {
    if align == 0 || !align.is_power_of_two() {
        return Err(AllocError::BadAlignment(align));
    }
    match alloc_within_node(bytes, align, node, IDENTITY_LIMIT) {
        Some(start) => Ok(start),
        None => alloc_frames_below_4g(bytes, align),
    }
}

/// Frames from `node`'s SRAT ranges below `limit`; `None` (a fallback counted when a node
/// was named) when the node is unknown or has no room there.
fn alloc_within_node(bytes: u64, align: u64, node: Option<u32>, limit: u64) -> Option<u64> {
    let ranges = node.and_then(|n| crate::arch::firmware::get().numa.as_ref()?.memory_of(n))?;
    let windows: alloc::vec::Vec<core::ops::Range<u64>> = ranges
        .iter()
        .filter(|r| r.start < limit)
        .map(|r| r.start..r.end.min(limit))
        .collect();
    let start = FRAMES.lock().alloc_within(bytes, align, Some(&windows)).ok();
    if start.is_none() {
        NODE_FALLBACKS.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    }
    start
}

/// How many node-bound allocations fell back to another node's memory since boot.
pub fn node_fallbacks() -> u64 {
    NODE_FALLBACKS.load(core::sync::atomic::Ordering::Relaxed)
}

/// Like [`alloc_frames`], but only memory below 4 GiB (for page tables and
/// devices limited to 32-bit DMA). Takes the lowest fit, as the allocator
/// always does, and refuses a result above 4 GiB.
pub fn alloc_frames_below_4g(bytes: u64, align: u64) -> Result<u64, AllocError> {
    let a = alloc_frames(bytes, align)?;
    if a + bytes.max(1).next_multiple_of(PAGE) > IDENTITY_LIMIT {
        free_frames(a, bytes);
        return Err(AllocError::OutOfMemory { bytes, align });
    }
    Ok(a)
}

/// Returns frames taken by [`alloc_frames`]. A double free or a full free
/// list is a kernel bug: it is logged and the range is not reused.
pub fn free_frames(start: u64, bytes: u64) {
    if let Err(e) = FRAMES.lock().free(start, bytes) {
        log::error!("memory: cannot return {start:#x}+{bytes:#x} to the frame allocator: {e}");
    }
}

/// A DMA buffer: physically contiguous, zeroed at allocation, identity
/// mapped (low memory first; above 4 GiB only when low memory is exhausted,
/// which 64-bit DMA devices such as MegaRAID handle). Freed when dropped.
#[derive(Debug)]
pub struct DmaBuffer {
    virt: NonNull<u8>,
    phys: u64,
    len: usize,
}

// SAFETY: the buffer is plain RAM owned exclusively by this value.
unsafe impl Send for DmaBuffer {}
// SAFETY: shared access only yields raw pointers and addresses.
unsafe impl Sync for DmaBuffer {}

impl DmaBuffer {
    /// Allocates `len` bytes aligned to `align` (rounded up to a page).
    pub fn new(len: usize, align: usize) -> Result<Self, AllocError> {
        Self::on_node(len, align, None)
    }

    /// Like [`new`](Self::new), from `node`'s memory where it has room (see
    /// [`alloc_frames_on_node`]).
    pub fn on_node(len: usize, align: usize, node: Option<u32>) -> Result<Self, AllocError> {
        let phys = alloc_frames_on_node(len as u64, align as u64, node)?;
        let virt = phys as *mut u8;
        // SAFETY: freshly allocated, identity-mapped, exclusively owned frames.
        unsafe { core::ptr::write_bytes(virt, 0, len.next_multiple_of(PAGE as usize)) };
        let virt = NonNull::new(virt).ok_or(AllocError::OutOfMemory {
            bytes: len as u64,
            align: align as u64,
        })?;
        Ok(DmaBuffer { virt, phys, len })
    }

    /// Bus/physical address devices use.
    pub fn phys(&self) -> u64 {
        self.phys
    }

    /// CPU pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.virt.as_ptr()
    }

    /// Gives up ownership without freeing (for buffers that live forever).
    pub fn leak(self) -> (NonNull<u8>, u64, usize) {
        let parts = (self.virt, self.phys, self.len);
        core::mem::forget(self);
        parts
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        free_frames(self.phys, self.len as u64);
    }
}

/// Reads firmware and loader structures (boot information, ACPI tables)
/// from the identity-mapped low 4 GiB, for both parsers that need it.
#[derive(Clone, Copy)]
pub struct IdentityMap;

impl IdentityMap {
    /// Copies `out.len()` bytes from physical `addr`; false when the range is
    /// not inside the identity map (or starts at the null page).
    fn copy(addr: u64, out: &mut [u8]) -> bool {
        match addr.checked_add(out.len() as u64) {
            Some(end) if end <= IDENTITY_LIMIT && addr != 0 => {
                // SAFETY: [addr, end) is inside the identity-mapped low 4 GiB;
                // these structures are plain memory and `out` is a distinct buffer.
                unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
                true
            }
            _ => false,
        }
    }
}

impl bootinfo::PhysMemory for IdentityMap {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), bootinfo::Error> {
        if Self::copy(addr, out) {
            Ok(())
        } else {
            Err(bootinfo::Error::UnreadableMemory { addr, len: out.len() })
        }
    }
}

impl platform::acpi::PhysMemory for IdentityMap {
    fn read_bytes(&self, phys: u64, out: &mut [u8]) -> platform::Result<()> {
        if Self::copy(phys, out) {
            Ok(())
        } else {
            Err(platform::Error::PhysRead { phys, len: out.len() })
        }
    }
}
