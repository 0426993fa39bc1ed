//! Bounds-checked access to DMA memory shared with the device. All `unsafe` for DMA lives here.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicU32};

use crate::Error;
use crate::{Dma, DmaRegion};

/// A DMA region owned by the driver. Offsets passed to the accessors are driver constants or
/// values already validated; an out-of-range offset is a driver bug and panics.
pub(crate) struct DmaBuf {
    virt: NonNull<u8>,
    phys: u64,
    len: usize,
}

// SAFETY: `DmaBuf` is a pointer to memory that the `Dma` contract reserves for the driver and the
// device. Every access goes through volatile or atomic operations on offsets that distinct callers
// keep disjoint (one frame per tag; the reply ring only under the reaper flag), so sharing the handle
// between CPUs is sound.
unsafe impl Send for DmaBuf {}
// SAFETY: see the `Send` impl: all accesses are volatile/atomic on disjoint or synchronised offsets.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocates `size` bytes aligned to `align` and checks what the allocator returned.
    pub(crate) fn alloc<D: Dma>(dma: &D, size: usize, align: usize) -> Result<Self, Error> {
        let DmaRegion { virt, phys, len } = dma.alloc_zeroed(size, align)?;
        let misaligned = !(virt.as_ptr() as usize).is_multiple_of(align) || !phys.is_multiple_of(align as u64);
        if len < size || misaligned || phys.checked_add(len as u64).is_none() {
            return Err(Error::DmaContract { size, align, len, phys });
        }
        Ok(Self { virt, phys, len: size })
    }

    /// Bus address of byte `off`.
    pub(crate) fn phys(&self, off: usize) -> u64 {
        assert!(off <= self.len, "DMA offset {off} past length {}", self.len);
        self.phys + off as u64
    }

    fn ptr(&self, off: usize, size: usize) -> *mut u8 {
        assert!(
            off.checked_add(size).is_some_and(|end| end <= self.len),
            "DMA access {off}+{size} past length {}",
            self.len
        );
        // SAFETY: `off + size <= len`, so the result stays inside the allocation.
        unsafe { self.virt.as_ptr().add(off) }
    }

    /// Writes `bytes` at `off`.
    pub(crate) fn write_bytes(&self, off: usize, bytes: &[u8]) {
        let p = self.ptr(off, bytes.len());
        for (i, b) in bytes.iter().enumerate() {
            // SAFETY: `ptr` checked that `off..off+len` lies inside the region, which the `Dma`
            // contract makes valid for writes.
            unsafe { p.add(i).write_volatile(*b) };
        }
    }

    /// Fills `len` bytes at `off` with `byte`.
    pub(crate) fn fill(&self, off: usize, len: usize, byte: u8) {
        let p = self.ptr(off, len);
        for i in 0..len {
            // SAFETY: inside the region, checked by `ptr`.
            unsafe { p.add(i).write_volatile(byte) };
        }
    }

    /// Copies `dst.len()` bytes starting at `off` into `dst`.
    pub(crate) fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        let p = self.ptr(off, dst.len());
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: inside the region, checked by `ptr`; valid for reads by the `Dma` contract.
            *d = unsafe { p.add(i).read_volatile() };
        }
    }

    /// Writes a little-endian u32 (no alignment needed).
    pub(crate) fn write_u32(&self, off: usize, v: u32) {
        self.write_bytes(off, &v.to_le_bytes());
    }

    /// Writes a little-endian u64 (no alignment needed).
    pub(crate) fn write_u64(&self, off: usize, v: u64) {
        self.write_bytes(off, &v.to_le_bytes());
    }

    /// Reads one byte.
    pub(crate) fn read_u8(&self, off: usize) -> u8 {
        let mut b = [0u8; 1];
        self.read_bytes(off, &mut b);
        b[0]
    }

    /// A word the device updates concurrently (producer index, reply entries), as an atomic.
    pub(crate) fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        let p = self.ptr(off, 4);
        assert!(
            (p as usize).is_multiple_of(4),
            "unaligned atomic DMA word at offset {off}"
        );
        // SAFETY: the pointer is in bounds, 4-byte aligned, valid for the lifetime of `self`, and the
        // word is only ever accessed atomically (by the driver and the device model) while shared.
        unsafe { AtomicU32::from_ptr(p.cast::<u32>()) }
    }

    /// A byte the device updates concurrently (the frame's `cmd_status`), as an atomic.
    pub(crate) fn atomic_u8(&self, off: usize) -> &AtomicU8 {
        let p = self.ptr(off, 1);
        // SAFETY: in bounds, valid for the lifetime of `self`; byte alignment is always satisfied.
        unsafe { AtomicU8::from_ptr(p) }
    }
}
