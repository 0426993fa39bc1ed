//! 32-bit MMIO access through a small trait.
//!
//! Device registers that live in a BAR (the MSI-X table, an ECAM window) are
//! reached through [`Mmio32`], so the logic here is host-tested against a
//! fake while the kernel passes [`VolatileMmio`], a volatile-pointer accessor.
//! Accesses are bounds- and alignment-checked on every call: offsets often
//! come from device registers and must never reach outside the mapping.

use crate::error::{Error, Result};

/// A region of 32-bit registers, addressed by byte offset from its start.
pub trait Mmio32 {
    /// Length of the region in bytes.
    fn region_len(&self) -> usize;
    /// Reads the 32-bit register at `offset`. Errors if the access is unaligned or out of range.
    fn read32(&self, offset: usize) -> Result<u32>;
    /// Writes the 32-bit register at `offset`. Errors if the access is unaligned or out of range.
    fn write32(&self, offset: usize, value: u32) -> Result<()>;
}

impl<T: Mmio32 + ?Sized> Mmio32 for &T {
    fn region_len(&self) -> usize {
        (**self).region_len()
    }
    fn read32(&self, offset: usize) -> Result<u32> {
        (**self).read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) -> Result<()> {
        (**self).write32(offset, value)
    }
}

/// Checks that a `width`-byte access at `offset` is aligned and inside `region_len` bytes.
pub fn check_access(offset: usize, width: usize, region_len: usize) -> Result<()> {
    let in_range = offset.checked_add(width).is_some_and(|end| end <= region_len);
    if in_range && offset.is_multiple_of(width) {
        Ok(())
    } else {
        Err(Error::MmioRange {
            offset,
            width,
            region_len,
        })
    }
}

/// Volatile 32-bit accessor over a mapped region (the kernel's [`Mmio32`]).
///
/// Works on any memory, so the host tests run it over an ordinary buffer.
#[derive(Debug)]
pub struct VolatileMmio {
    base: *mut u32,
    len: usize,
}

// SAFETY: the struct is only an address range; every access is a single
// volatile 32-bit load or store, which is what device registers expect from
// any CPU. Ordering between CPUs is the caller's protocol, as for any MMIO.
unsafe impl Send for VolatileMmio {}
// SAFETY: as for Send: `&self` methods perform only single volatile accesses.
unsafe impl Sync for VolatileMmio {}

impl VolatileMmio {
    /// Wraps `len` bytes of mapped registers starting at `base`.
    ///
    /// # Safety
    /// `base` must be 4-byte aligned, and `base..base + len` must stay mapped
    /// (uncached for device memory) and valid for volatile 32-bit reads and
    /// writes for as long as the returned value is used. Nothing else may hold
    /// a Rust reference to that memory.
    pub unsafe fn new(base: *mut u8, len: usize) -> VolatileMmio {
        VolatileMmio {
            base: base.cast::<u32>(),
            len,
        }
    }
}

impl Mmio32 for VolatileMmio {
    fn region_len(&self) -> usize {
        self.len
    }

    fn read32(&self, offset: usize) -> Result<u32> {
        check_access(offset, 4, self.len)?;
        // SAFETY: `check_access` proved offset is 4-aligned and offset+4 <= len;
        // `new`'s contract makes base..base+len valid for volatile access.
        Ok(unsafe { self.base.byte_add(offset).read_volatile() })
    }

    fn write32(&self, offset: usize, value: u32) -> Result<()> {
        check_access(offset, 4, self.len)?;
        // SAFETY: as in `read32`.
        unsafe { self.base.byte_add(offset).write_volatile(value) };
        Ok(())
    }
}

impl VolatileMmio {
    /// Writes the 64-bit register at `offset` as one 8-byte store (a device register the
    /// device takes whole, e.g. MegaRAID Fusion's request descriptor port, which Linux writes
    /// with one `writeq`). Errors if the access is out of range or its address is not 8-byte
    /// aligned (an unaligned store could reach the device split).
    pub fn write64(&self, offset: usize, value: u64) -> Result<()> {
        check_access(offset, 8, self.len)?;
        let at = self.base.wrapping_byte_add(offset).cast::<u64>();
        if !at.is_aligned() {
            return Err(Error::MmioRange {
                offset,
                width: 8,
                region_len: self.len,
            });
        }
        // SAFETY: `check_access` proved offset+8 <= len and the address is 8-byte aligned
        // (checked just above); `new`'s contract makes base..base+len valid for volatile access.
        unsafe { at.write_volatile(value) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_mmio_reads_back_writes_and_rejects_bad_offsets() {
        let mut buffer = [0u32; 4];
        // SAFETY: the buffer is 16 aligned bytes that outlive `mmio` and are not otherwise referenced while used.
        let mmio = unsafe { VolatileMmio::new(buffer.as_mut_ptr().cast(), 16) };
        mmio.write32(12, 0xdead_beef).unwrap();
        assert_eq!(mmio.read32(12).unwrap(), 0xdead_beef);
        assert_eq!(mmio.read32(0).unwrap(), 0);
        assert_eq!(
            mmio.read32(16),
            Err(Error::MmioRange {
                offset: 16,
                width: 4,
                region_len: 16
            })
        );
        assert!(mmio.write32(2, 1).is_err());
        assert!(mmio.read32(usize::MAX - 1).is_err());
        assert_eq!(buffer[3], 0xdead_beef);
    }

    #[test]
    fn write64_is_one_little_endian_store_and_rejects_bad_offsets() {
        let mut buffer = [0u64; 2];
        // SAFETY: the buffer is 16 aligned bytes that outlive `mmio` and are not otherwise referenced while used.
        let mmio = unsafe { VolatileMmio::new(buffer.as_mut_ptr().cast(), 16) };
        mmio.write64(8, 0x1122_3344_5566_7788).unwrap();
        assert_eq!(mmio.read32(8).unwrap(), 0x5566_7788);
        assert_eq!(mmio.read32(12).unwrap(), 0x1122_3344);
        assert_eq!(mmio.read32(0).unwrap(), 0);
        assert!(mmio.write64(4, 1).is_err(), "unaligned");
        assert!(mmio.write64(16, 1).is_err(), "past the end");
        assert!(mmio.write64(12, 1).is_err(), "straddles the end");
        assert!(mmio.write64(usize::MAX - 3, 1).is_err());
        assert_eq!(buffer, [0, 0x1122_3344_5566_7788]);
    }
}
