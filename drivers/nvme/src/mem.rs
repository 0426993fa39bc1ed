//! DMA memory the driver owns for the life of the controller (queues, identify buffer, PRP
//! lists), with bounds-checked volatile access.

use core::ptr::NonNull;

use devhal::{Dma, DmaRegion};

use crate::Error;

/// A block of DMA memory. Never freed: queues and PRP lists live as long as the controller, and
/// after a reset the same memory is zeroed and handed to the device again.
pub(crate) struct DmaBuf {
    virt: NonNull<u8>,
    phys: u64,
    len: usize,
}

// SAFETY: the memory is owned by this value (the `Dma` contract: used by nothing but the caller
// and the device); every access goes through the methods below, which the driver calls only
// while holding the lock that guards the structure the buffer belongs to (queue locks), or on
// parts of it that a held block-layer tag makes exclusive (PRP list pages).
unsafe impl Send for DmaBuf {}
// SAFETY: as above.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    pub fn alloc(dma: &impl Dma, size: usize, align: usize) -> Result<Self, Error> {
        let DmaRegion { virt, phys, len } = dma.alloc_zeroed(size, align)?;
        let misaligned = !(virt.as_ptr() as usize).is_multiple_of(align) || !phys.is_multiple_of(align as u64);
        if len < size || misaligned || phys.checked_add(size as u64).is_none() {
            return Err(Error::Unsupported {
                what: "DMA allocation (short or misaligned)",
                value: phys,
            });
        }
        Ok(Self { virt, phys, len: size })
    }

    pub fn phys(&self) -> u64 {
        self.phys
    }

    fn ptr(&self, offset: usize, width: usize) -> *mut u8 {
        assert!(
            offset.checked_add(width).is_some_and(|end| end <= self.len),
            "DMA buffer access at {offset} (+{width}) beyond {} bytes",
            self.len
        );
        // SAFETY: `offset + width <= len`, inside the allocation.
        unsafe { self.virt.as_ptr().add(offset) }
    }

    pub fn read32(&self, offset: usize) -> u32 {
        let p = self.ptr(offset, 4).cast::<u32>();
        // SAFETY: in bounds (checked by `ptr`); the device may write this memory, hence volatile;
        // offsets are multiples of 4 of a buffer aligned to at least 4 bytes.
        u32::from_le(unsafe { p.read_volatile() })
    }

    pub fn write32(&self, offset: usize, value: u32) {
        let p = self.ptr(offset, 4).cast::<u32>();
        // SAFETY: as in `read32`.
        unsafe { p.write_volatile(value.to_le()) }
    }

    pub fn read_u64(&self, offset: usize) -> u64 {
        u64::from(self.read32(offset)) | u64::from(self.read32(offset + 4)) << 32
    }

    pub fn read_u8(&self, offset: usize) -> u8 {
        let p = self.ptr(offset, 1);
        // SAFETY: in bounds (checked by `ptr`).
        unsafe { p.read_volatile() }
    }

    pub fn zero(&self) {
        for off in (0..self.len & !3).step_by(4) {
            self.write32(off, 0);
        }
    }

    /// `len / 8` entries of list memory starting at `offset`, as a mutable slice.
    ///
    /// # Safety
    /// The caller has exclusive use of `offset..offset + 8 * entries` for the life of the slice
    /// (no other slice over it, and the device does not read it meanwhile).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn u64_slice(&self, offset: usize, entries: usize) -> &mut [u64] {
        let bytes = entries.checked_mul(8).expect("PRP list size overflow");
        let p = self.ptr(offset, bytes);
        assert_eq!(p as usize % 8, 0, "PRP list not 8-byte aligned");
        // SAFETY: in bounds and aligned (checked above); exclusivity is the caller's promise.
        unsafe { core::slice::from_raw_parts_mut(p.cast::<u64>(), entries) }
    }
}
