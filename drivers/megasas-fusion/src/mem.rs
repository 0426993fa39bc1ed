//! Driver-side access to DMA memory through the CPU pointer of a [`DmaRegion`].

use devhal::{Dma, DmaRegion};

use crate::Error;

/// One DMA allocation, written and read with volatile accesses (the device reads it
/// asynchronously). Every access is bounds-checked; an out-of-range access is a driver bug and
/// panics rather than touching foreign memory.
#[derive(Debug)]
pub(crate) struct Region {
    region: DmaRegion,
}

// SAFETY: the memory is exclusively ours (Dma contract); all access is volatile and callers
// synchronise who writes which bytes (a frame belongs to one SMID owner at a time).
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// Allocates `len` zeroed bytes aligned to `align`, below 4 GiB and not crossing 4 GiB.
    pub fn alloc_low(dma: &dyn DmaAlloc, what: &'static str, len: usize, align: usize) -> Result<Self, Error> {
        let region = dma.alloc(len, align)?;
        let end = region.phys.checked_add(len as u64);
        if end.is_none_or(|e| e > 1 << 32) {
            return Err(Error::DmaAbove4G {
                what,
                phys: region.phys,
                len,
            });
        }
        Ok(Self { region })
    }

    pub fn phys(&self) -> u64 {
        self.region.phys
    }

    pub fn len(&self) -> usize {
        self.region.len
    }

    fn ptr(&self, off: usize, n: usize) -> *mut u8 {
        assert!(
            off.checked_add(n).is_some_and(|e| e <= self.region.len),
            "DMA access {off}+{n} beyond region of {}",
            self.region.len
        );
        // SAFETY: checked just above that off+n is inside the region.
        unsafe { self.region.virt.as_ptr().add(off) }
    }

    pub fn write_bytes(&self, off: usize, data: &[u8]) {
        let p = self.ptr(off, data.len());
        for (i, b) in data.iter().enumerate() {
            // SAFETY: inside the region (checked by `ptr`).
            unsafe { p.add(i).write_volatile(*b) };
        }
    }

    pub fn fill(&self, off: usize, len: usize, byte: u8) {
        let p = self.ptr(off, len);
        for i in 0..len {
            // SAFETY: inside the region (checked by `ptr`).
            unsafe { p.add(i).write_volatile(byte) };
        }
    }

    pub fn read_bytes(&self, off: usize, out: &mut [u8]) {
        let p = self.ptr(off, out.len());
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: inside the region (checked by `ptr`).
            *b = unsafe { p.add(i).read_volatile() };
        }
    }

    pub fn write_u8(&self, off: usize, v: u8) {
        self.write_bytes(off, &[v]);
    }
    pub fn write_u16(&self, off: usize, v: u16) {
        self.write_bytes(off, &v.to_le_bytes());
    }
    pub fn write_u32(&self, off: usize, v: u32) {
        self.write_bytes(off, &v.to_le_bytes());
    }
    pub fn write_u64(&self, off: usize, v: u64) {
        self.write_bytes(off, &v.to_le_bytes());
    }
    pub fn read_u8(&self, off: usize) -> u8 {
        let mut b = [0u8; 1];
        self.read_bytes(off, &mut b);
        b[0]
    }
    pub fn read_u32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read_bytes(off, &mut b);
        u32::from_le_bytes(b)
    }
    /// Reads an aligned 8-byte value with one 64-bit volatile load, so a reply descriptor the
    /// device stores as one 8-byte write is never seen half-written.
    pub fn read_u64_atomic(&self, off: usize) -> u64 {
        let p = self.ptr(off, 8);
        assert!((p as usize).is_multiple_of(8), "unaligned 8-byte DMA read");
        // SAFETY: inside the region and 8-byte aligned.
        unsafe { p.cast::<u64>().read_volatile() }
    }
    /// Stores an aligned 8-byte value with one 64-bit volatile store.
    pub fn write_u64_atomic(&self, off: usize, v: u64) {
        let p = self.ptr(off, 8);
        assert!((p as usize).is_multiple_of(8), "unaligned 8-byte DMA write");
        // SAFETY: inside the region and 8-byte aligned.
        unsafe { p.cast::<u64>().write_volatile(v) }
    }
}

/// Object-safe view of [`Dma`], so bring-up code need not be generic over the allocator.
pub(crate) trait DmaAlloc {
    fn alloc(&self, len: usize, align: usize) -> Result<DmaRegion, Error>;
}

impl<T: Dma> DmaAlloc for T {
    fn alloc(&self, len: usize, align: usize) -> Result<DmaRegion, Error> {
        let r = self.alloc_zeroed(len, align)?;
        if r.len < len || r.phys % align as u64 != 0 {
            return Err(Error::Limits {
                what: "DMA allocation",
                value: r.phys,
                expected: "the size and alignment asked for",
            });
        }
        Ok(r)
    }
}
