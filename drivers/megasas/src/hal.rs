//! The hardware the driver needs, as traits the kernel implements (and the fake implements on the host).

use core::ptr::NonNull;

use crate::Error;

/// 32-bit register access to the controller's register window (the MMIO BAR, or the I/O-port BAR,
/// which mirrors offsets 0x00-0xFF).
///
/// Implementations must perform exactly one 32-bit access per call, in program order with respect to
/// other calls and to earlier stores to DMA memory (on x86 a volatile access to an uncached mapping
/// does this). The driver never needs a 64-bit access: QEMU splits those low word first, which breaks
/// the IQPL/IQPH pair (pitfall 9).
pub trait Mmio {
    /// Reads the 32-bit register at byte `offset`.
    fn read32(&self, offset: u32) -> u32;
    /// Writes the 32-bit register at byte `offset`.
    fn write32(&self, offset: u32, value: u32);
}

/// A block of DMA-capable memory: a CPU pointer and the bus address the device uses for it.
#[derive(Debug)]
pub struct DmaRegion {
    /// CPU address of the first byte.
    pub virt: NonNull<u8>,
    /// Bus (physical) address of the first byte, as the device sees it.
    pub phys: u64,
    /// Length in bytes.
    pub len: usize,
}

/// Allocator of DMA memory.
///
/// # Safety
///
/// For every `Ok(region)` returned by `alloc_zeroed(size, align)`:
/// - `region.len >= size`, the memory is zero-filled, and `virt` and `phys` are both aligned to `align`;
/// - `virt..virt+len` is valid for reads and writes and is used by nothing but the caller and the
///   device for as long as this allocator value (or a clone sharing its memory) is alive;
/// - `phys..phys+len` is the device's view of exactly those bytes (physically contiguous), and
///   memory accesses through `virt` are coherent with device DMA.
///
/// The driver writes frames through `virt` and hands `phys` to the device; a wrong mapping lets the
/// device scribble over unrelated memory, which is why implementing this trait is `unsafe`.
pub unsafe trait Dma {
    /// Allocates `size` zeroed bytes aligned to `align` (a power of two).
    fn alloc_zeroed(&self, size: usize, align: usize) -> Result<DmaRegion, Error>;
}

/// Busy-wait hook for the bounded polls of bring-up and polled commands.
pub trait Delay {
    /// Waits at least `us` microseconds.
    fn delay_us(&self, us: u32);
}
