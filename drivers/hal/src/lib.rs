//! What a baremq device driver needs from the machine, as traits: [`Mmio`] (a register window),
//! [`Dma`] (memory with a bus address) and [`Delay`] (bounded waits), and [`DmaBuf`], the one
//! bounds-checked view of DMA memory every driver uses.
//!
//! The kernel implements them over volatile pointers, its frame allocator and the TSC; each
//! driver's host tests implement them over a fake device. [`fake::FakeMemory`] (feature `fake`)
//! is the DMA address space those fakes share: every device access is translated and
//! bounds-checked, and a stray one is recorded instead of touching memory. [`options`] splits the
//! `driver.key=value` words of the kernel command line that every driver parses.

#![no_std]

extern crate alloc;

use core::fmt;
use core::ptr::NonNull;

mod buf;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod options;
mod ring;

pub use buf::{DmaBuf, WordRun};
pub use ring::{DmaRing, RingEntry, RingError, RingView};

/// 32-bit register access to a device's register window.
///
/// Implementations perform exactly one 32-bit access per call, in program order with respect to
/// other calls and to earlier stores to DMA memory (on x86 a volatile access to an uncached
/// mapping does this). A 64-bit register is read as two 32-bit halves by the driver, which knows
/// the order the device needs.
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

/// Why a DMA allocation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DmaError {
    /// No memory of that size and alignment (in the window the allocator serves).
    OutOfMemory {
        /// Bytes asked for.
        size: usize,
        /// Alignment asked for.
        align: usize,
    },
    /// The allocator broke its contract: shorter or less aligned than asked, or wrapping.
    Contract {
        /// Bytes asked for.
        size: usize,
        /// Alignment asked for.
        align: usize,
        /// Bytes returned.
        len: usize,
        /// Bus address returned.
        phys: u64,
    },
    /// The buffer lies (partly) above 4 GiB, which the device cannot address.
    Above4G {
        /// Bus address of the buffer.
        phys: u64,
        /// Its length.
        len: usize,
    },
    /// The alignment is not a power of two, or the size is zero.
    BadRequest {
        /// Bytes asked for.
        size: usize,
        /// Alignment asked for.
        align: usize,
    },
}

impl fmt::Display for DmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfMemory { size, align } => {
                write!(f, "no DMA memory for {size} bytes aligned to {align}")
            }
            Self::Contract { size, align, len, phys } => write!(
                f,
                "DMA allocator returned {len} bytes at bus address {phys:#x} for a request of {size} bytes aligned to {align}"
            ),
            Self::Above4G { phys, len } => {
                write!(f, "DMA buffer of {len} bytes at {phys:#x} is not below 4 GiB")
            }
            Self::BadRequest { size, align } => {
                write!(
                    f,
                    "invalid DMA request: {size} bytes aligned to {align} (size must be non-zero, alignment a power of two)"
                )
            }
        }
    }
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
/// The driver writes descriptors through `virt` and hands `phys` to the device; a wrong mapping
/// lets the device scribble over unrelated memory, which is why implementing this trait is `unsafe`.
pub unsafe trait Dma {
    /// Allocates `size` zeroed bytes aligned to `align` (a power of two).
    fn alloc_zeroed(&self, size: usize, align: usize) -> Result<DmaRegion, DmaError>;

    /// As [`Dma::alloc_zeroed`], for memory that CPU `cpu` (kernel index) mostly touches (a
    /// queue's rings): an allocator that knows the machine's NUMA layout takes it from that
    /// CPU's node. The default ignores the hint. Same contract as `alloc_zeroed`.
    fn alloc_zeroed_for_cpu(&self, size: usize, align: usize, cpu: Option<usize>) -> Result<DmaRegion, DmaError> {
        let _ = cpu;
        self.alloc_zeroed(size, align)
    }
}

/// Busy-wait hook for bounded polls (bring-up, polled admin commands, resets).
pub trait Delay {
    /// Waits at least `us` microseconds.
    fn delay_us(&self, us: u32);
}
