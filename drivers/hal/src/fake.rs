//! A DMA address space in plain memory for fake devices (host tests only).
//!
//! Every allocation gets a bus address of its own (with a 4 KiB hole after it, so an overrun is
//! caught instead of landing in the next block). A fake device reaches memory only through
//! [`FakeMemory::read`] / [`FakeMemory::write`], which translate the bus address and check that the
//! whole access lies inside one allocation; anything else is recorded as a violation (see
//! [`FakeMemory::violations`]) and touches nothing, so a test can assert that a driver never pointed
//! its device anywhere wrong.
//!
//! Device accesses copy with volatile byte reads and writes: the driver writes descriptors through
//! its `virt` pointers and the fake reads them when the driver rings a doorbell, as a device would.
//! Words and bytes the driver polls atomically while the device may write them (status bytes,
//! producer indices, ring entries) are written with [`FakeMemory::store_u32_atomic`] /
//! [`FakeMemory::store_u8_atomic`] instead, so both sides access them atomically.

use alloc::alloc::{Layout, alloc_zeroed, dealloc};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ops::Range;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use spin::Mutex;

use crate::{Dma, DmaError, DmaRegion};

struct Allocation {
    phys: u64,
    ptr: NonNull<u8>,
    layout: Layout,
}

struct Inner {
    allocs: Vec<Allocation>,
    next_phys: u64,
    limit: Option<u64>,
    violations: Vec<String>,
    /// `(bus address, CPU hint)` of each allocation made through [`Dma::alloc_zeroed_for_cpu`].
    cpu_hints: Vec<(u64, Option<usize>)>,
}

// SAFETY: the allocations are plain heap blocks owned by `Inner`; the fake reaches their contents
// only through `FakeMemory`'s bounds-checked copies while holding the lock.
unsafe impl Send for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        for a in self.allocs.drain(..) {
            // SAFETY: `ptr` came from `alloc_zeroed(layout)` in `FakeMemory::alloc_zeroed` and is
            // freed once, here, when the last handle to the memory is gone.
            unsafe { dealloc(a.ptr.as_ptr(), a.layout) };
        }
    }
}

impl Inner {
    fn translate(&self, phys: u64, len: usize) -> Option<*mut u8> {
        let end = phys.checked_add(len as u64)?;
        self.allocs.iter().find_map(|a| {
            let a_end = a.phys + a.layout.size() as u64;
            if phys >= a.phys && end <= a_end {
                // SAFETY: `phys - a.phys + len <= size`, so the offset stays inside the block.
                Some(unsafe { a.ptr.as_ptr().add((phys - a.phys) as usize) })
            } else {
                None
            }
        })
    }
}

/// The bus address space of one fake device (or of several that share a host).
pub struct FakeMemory {
    inner: Mutex<Inner>,
}

impl FakeMemory {
    /// An empty address space whose first allocation gets bus address `phys_base` (rounded up to
    /// its alignment).
    pub fn new(phys_base: u64) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                allocs: Vec::new(),
                next_phys: phys_base,
                limit: None,
                violations: Vec::new(),
                cpu_hints: Vec::new(),
            }),
        })
    }

    /// The CPU hint the allocation at bus address `phys` was made with: `None` when it was not
    /// made through [`Dma::alloc_zeroed_for_cpu`], `Some(None)` for a call without a CPU.
    pub fn cpu_hint_of(&self, phys: u64) -> Option<Option<usize>> {
        self.inner
            .lock()
            .cpu_hints
            .iter()
            .find(|&&(p, _)| p == phys)
            .map(|&(_, cpu)| cpu)
    }

    /// Refuses allocations that would end above `limit` (e.g. `1 << 32` for a device that can
    /// only address 32 bits), to test a driver's handling of exhausted DMA memory.
    pub fn set_limit(&self, limit: Option<u64>) {
        self.inner.lock().limit = limit;
    }

    /// Allocates `size` zeroed bytes aligned to `align`.
    pub fn alloc_zeroed(&self, size: usize, align: usize) -> Result<DmaRegion, DmaError> {
        if size == 0 || !align.is_power_of_two() {
            return Err(DmaError::BadRequest { size, align });
        }
        let oom = DmaError::OutOfMemory { size, align };
        let align = align.max(8);
        let layout = Layout::from_size_align(size, align).map_err(|_| oom.clone())?;
        let mut inner = self.inner.lock();
        let phys = inner.next_phys.next_multiple_of(align as u64);
        let end = phys.checked_add(size as u64).ok_or(oom.clone())?;
        if inner.limit.is_some_and(|l| end > l) {
            return Err(oom);
        }
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(oom)?;
        // A 4 KiB hole after each block, so an overrun is caught as a violation, not absorbed.
        inner.next_phys = end + 4096;
        inner.allocs.push(Allocation { phys, ptr, layout });
        Ok(DmaRegion {
            virt: ptr,
            phys,
            len: size,
        })
    }

    /// Whether `phys..phys+len` lies inside one allocation.
    pub fn contains(&self, phys: u64, len: usize) -> bool {
        self.inner.lock().translate(phys, len).is_some()
    }

    /// Device read of `buf.len()` bytes at `phys`. Returns false (and records a violation naming
    /// `what`) when the range is not inside one allocation; `buf` is then left untouched.
    pub fn read(&self, what: &str, phys: u64, buf: &mut [u8]) -> bool {
        self.try_read(phys, buf) || self.stray(what, "read", phys, buf.len())
    }

    /// Device write of `data` at `phys`. Returns false (and records a violation naming `what`)
    /// when the range is not inside one allocation; memory is then left untouched.
    pub fn write(&self, what: &str, phys: u64, data: &[u8]) -> bool {
        self.try_write(phys, data) || self.stray(what, "write", phys, data.len())
    }

    /// A device data transfer between `medium` (the backing bytes of a disk, from the transfer's
    /// first byte) and memory, over `runs` of (bus address, bytes) that cover `medium` in order: a
    /// write command reads memory into `medium` (`"write data"`), a read command writes `medium`
    /// to memory (`"read data"`). Stops at the first run outside DMA memory, as a device aborts
    /// a transfer on a DMA error: false, with the violation recorded and later runs untouched.
    ///
    /// Panics when the runs cover more than `medium` (a bug in the fake, which sizes `medium`).
    pub fn transfer(&self, write: bool, runs: impl IntoIterator<Item = (u64, usize)>, medium: &mut [u8]) -> bool {
        let mut done = 0usize;
        for (addr, len) in runs {
            let bytes = &mut medium[done..done + len];
            let ok = if write {
                self.read("write data", addr, bytes)
            } else {
                self.write("read data", addr, bytes)
            };
            if !ok {
                return false;
            }
            done += len;
        }
        true
    }

    /// As [`FakeMemory::read`], but a stray address is only reported by the `false`, not recorded:
    /// for a fake device that keeps its own log of what its driver did wrong.
    pub fn try_read(&self, phys: u64, buf: &mut [u8]) -> bool {
        let inner = self.inner.lock();
        let Some(p) = inner.translate(phys, buf.len()) else {
            return false;
        };
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: `translate` checked that `p..p+len` is inside a live allocation.
            *b = unsafe { p.add(i).read_volatile() };
        }
        true
    }

    /// As [`FakeMemory::write`], but a stray address is only reported by the `false`, not recorded.
    pub fn try_write(&self, phys: u64, data: &[u8]) -> bool {
        let inner = self.inner.lock();
        let Some(p) = inner.translate(phys, data.len()) else {
            return false;
        };
        for (i, b) in data.iter().enumerate() {
            // SAFETY: `translate` checked that `p..p+len` is inside a live allocation.
            unsafe { p.add(i).write_volatile(*b) };
        }
        true
    }

    /// Device store of the 4-byte-aligned word at `phys` as one atomic access (Release: it
    /// publishes the device's earlier writes to the driver, whose Acquire load of the same word
    /// pairs with it), for words the driver polls atomically (producer indices, ring entries).
    /// False, recording nothing and touching nothing, when the word is outside one allocation or
    /// misaligned.
    pub fn store_u32_atomic(&self, phys: u64, value: u32) -> bool {
        let inner = self.inner.lock();
        match inner.translate(phys, 4) {
            Some(p) if (p as usize).is_multiple_of(4) => {
                // SAFETY: in bounds of a live allocation and 4-byte aligned; the driver accesses
                // this word only atomically, so no access races non-atomically with this one.
                unsafe { AtomicU32::from_ptr(p.cast::<u32>()) }.store(value, Ordering::Release);
                true
            }
            _ => false,
        }
    }

    /// Device load of the 4-byte-aligned word at `phys` as one atomic access (Acquire: pairs with
    /// the driver's Release store of the word, so what the driver wrote before it is visible).
    /// None, recording nothing, when outside one allocation or misaligned.
    pub fn load_u32_atomic(&self, phys: u64) -> Option<u32> {
        let inner = self.inner.lock();
        match inner.translate(phys, 4) {
            Some(p) if (p as usize).is_multiple_of(4) => {
                // SAFETY: in bounds and aligned, accessed atomically on both sides.
                Some(unsafe { AtomicU32::from_ptr(p.cast::<u32>()) }.load(Ordering::Acquire))
            }
            _ => None,
        }
    }

    /// Device store of the 8-byte-aligned word at `phys` as one atomic access (Release), for
    /// descriptors the driver polls as one 64-bit word (a real device writes an aligned 8-byte
    /// descriptor in one transaction; byte by byte, a poller could take a half-written one).
    /// False, recording nothing, when outside one allocation or misaligned.
    pub fn store_u64_atomic(&self, phys: u64, value: u64) -> bool {
        let inner = self.inner.lock();
        match inner.translate(phys, 8) {
            Some(p) if (p as usize).is_multiple_of(8) => {
                // SAFETY: in bounds of a live allocation and 8-byte aligned; the driver accesses
                // this word only atomically.
                unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }.store(value, Ordering::Release);
                true
            }
            _ => false,
        }
    }

    /// Device load of the 8-byte-aligned word at `phys` as one atomic access (Acquire: pairs
    /// with the driver's store of the word). None, recording nothing, when outside one
    /// allocation or misaligned.
    pub fn load_u64_atomic(&self, phys: u64) -> Option<u64> {
        let inner = self.inner.lock();
        match inner.translate(phys, 8) {
            Some(p) if (p as usize).is_multiple_of(8) => {
                // SAFETY: in bounds and aligned, accessed atomically on both sides.
                Some(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }.load(Ordering::Acquire))
            }
            _ => None,
        }
    }

    /// Device store of the byte at `phys` as one atomic access (Release: publishes the device's
    /// earlier writes, e.g. a frame's other status fields, to the driver's Acquire poll of this
    /// byte). False, recording nothing, when outside every allocation.
    pub fn store_u8_atomic(&self, phys: u64, value: u8) -> bool {
        let inner = self.inner.lock();
        let Some(p) = inner.translate(phys, 1) else {
            return false;
        };
        // SAFETY: in bounds of a live allocation (any address is aligned for a byte); the driver
        // accesses this byte only atomically.
        unsafe { AtomicU8::from_ptr(p) }.store(value, Ordering::Release);
        true
    }

    /// Records a stray device access; always false, the result of the access.
    fn stray(&self, what: &str, access: &str, phys: u64, len: usize) -> bool {
        let v = alloc::format!("{what}: device {access} of {len} bytes at {phys:#x} outside DMA memory");
        self.inner.lock().violations.push(v);
        false
    }

    /// Reads a little-endian `u32` (None after recording a violation).
    pub fn read_u32(&self, what: &str, phys: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.read(what, phys, &mut b).then(|| u32::from_le_bytes(b))
    }

    /// Reads a little-endian `u64` (None after recording a violation).
    pub fn read_u64(&self, what: &str, phys: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(what, phys, &mut b).then(|| u64::from_le_bytes(b))
    }

    /// Writes a little-endian `u32`.
    pub fn write_u32(&self, what: &str, phys: u64, value: u32) -> bool {
        self.write(what, phys, &value.to_le_bytes())
    }

    /// Writes a little-endian `u64`.
    pub fn write_u64(&self, what: &str, phys: u64, value: u64) -> bool {
        self.write(what, phys, &value.to_le_bytes())
    }

    /// Records a protocol violation found by the fake device (not only stray DMA).
    pub fn record_violation(&self, violation: String) {
        self.inner.lock().violations.push(violation);
    }

    /// Every violation recorded so far.
    pub fn violations(&self) -> Vec<String> {
        self.inner.lock().violations.clone()
    }

    /// A [`Dma`] allocator handing out memory of this address space.
    pub fn dma(self: &Arc<Self>) -> FakeDma {
        FakeDma(Arc::clone(self))
    }
}

/// The little-endian `u16` at byte `offset` of a descriptor a fake device read (panics past the
/// end: the fake reads whole descriptors, so that is a bug in the fake).
pub fn le_u16(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

/// The little-endian `u32` at byte `offset` (panics past the end, as [`le_u16`]).
pub fn le_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(b)
}

/// The little-endian `u64` at byte `offset` (panics past the end, as [`le_u16`]).
pub fn le_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(b)
}

/// How a `len`-byte transfer lies over a scatter/gather list of `(bus address, length)` segments:
/// each segment's address with the range of the transfer it carries, in order, stopping once
/// `len` bytes are placed (the last piece is cut short; segments past it are not visited). A
/// list shorter than `len` simply places fewer bytes: the caller sees it in the last range's end.
pub fn sgl_pieces(sgl: &[(u64, u32)], len: usize) -> impl Iterator<Item = (u64, Range<usize>)> + '_ {
    let mut placed = 0usize;
    sgl.iter().map_while(move |&(addr, seg_len)| {
        if placed >= len {
            return None;
        }
        let n = (seg_len as usize).min(len - placed);
        let piece = placed..placed + n;
        placed += n;
        Some((addr, piece))
    })
}

/// [`Dma`] over a [`FakeMemory`].
#[derive(Clone)]
pub struct FakeDma(Arc<FakeMemory>);

impl FakeDma {
    /// The address space this allocator serves.
    pub fn memory(&self) -> &Arc<FakeMemory> {
        &self.0
    }
}

// SAFETY: every region is a fresh zeroed heap block of at least `size` bytes aligned to `align`,
// owned by the `FakeMemory` until its last `Arc` (held by this allocator) is dropped. Its bus
// address is unique and aligned, and the fake translates that address back to exactly this block,
// so `phys` is the device's view of `virt`.
unsafe impl Dma for FakeDma {
    fn alloc_zeroed(&self, size: usize, align: usize) -> Result<DmaRegion, DmaError> {
        self.0.alloc_zeroed(size, align)
    }

    /// One address space has no nodes: the hint is only recorded, for tests to check.
    fn alloc_zeroed_for_cpu(&self, size: usize, align: usize, cpu: Option<usize>) -> Result<DmaRegion, DmaError> {
        let region = self.0.alloc_zeroed(size, align)?;
        self.0.inner.lock().cpu_hints.push((region.phys, cpu));
        Ok(region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_access_is_translated_and_bounds_checked() {
        let mem = FakeMemory::new(0x1000);
        let r = mem.alloc_zeroed(64, 64).unwrap();
        assert_eq!(r.phys % 64, 0);
        assert!(mem.write_u32("t", r.phys + 60, 0xDEAD_BEEF));
        // SAFETY: the region is 64 bytes long and alive while `mem` is.
        let seen = unsafe { r.virt.as_ptr().add(60).cast::<u32>().read_unaligned() };
        assert_eq!(seen, 0xDEAD_BEEF);
        assert_eq!(mem.read_u32("t", r.phys + 60), Some(0xDEAD_BEEF));
        // One byte past the end is outside (the hole), and nothing is written.
        assert!(!mem.write_u32("overrun", r.phys + 61, 1));
        assert_eq!(mem.read_u64("wrap", u64::MAX - 3), None);
        let v = mem.violations();
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].starts_with("overrun:"));
        // The unrecorded and atomic accesses check the same bounds but leave the log alone.
        assert!(!mem.try_write(r.phys + 61, &[0; 4]));
        assert!(!mem.try_read(r.phys + 64, &mut [0; 1]));
        assert!(mem.store_u32_atomic(r.phys + 4, 7));
        assert_eq!(mem.load_u32_atomic(r.phys + 4), Some(7));
        assert_eq!(mem.read_u32("t", r.phys + 4), Some(7));
        assert!(!mem.store_u32_atomic(r.phys + 2, 7), "misaligned word");
        assert_eq!(mem.load_u32_atomic(r.phys + 62), None, "word crossing the end");
        assert!(mem.store_u8_atomic(r.phys + 63, 0x5A));
        assert!(!mem.store_u8_atomic(r.phys + 64, 0x5A));
        let mut b = [0u8; 1];
        assert!(mem.try_read(r.phys + 63, &mut b));
        assert_eq!(b, [0x5A]);
        assert_eq!(mem.violations().len(), 2);
    }

    #[test]
    fn transfer_moves_runs_in_order_and_stops_at_a_stray_run() {
        let mem = FakeMemory::new(0x1000);
        let a = mem.alloc_zeroed(8, 8).unwrap();
        let b = mem.alloc_zeroed(8, 8).unwrap();
        let mut disk = [1, 2, 3, 4, 5, 6];
        assert!(mem.transfer(false, [(b.phys + 4, 2), (a.phys, 4)], &mut disk));
        let mut seen = [0u8; 8];
        assert!(mem.read("t", a.phys, &mut seen));
        assert_eq!(seen, [3, 4, 5, 6, 0, 0, 0, 0]);
        assert!(mem.read("t", b.phys, &mut seen));
        assert_eq!(seen, [0, 0, 0, 0, 1, 2, 0, 0]);
        assert!(mem.write("t", a.phys, &[9; 8]));
        let mut back = [0u8; 6];
        assert!(!mem.transfer(true, [(a.phys, 2), (a.phys + 7, 2), (a.phys, 2)], &mut back));
        assert_eq!(
            back,
            [9, 9, 0, 0, 0, 0],
            "the stray run and the ones after it are not moved"
        );
        let v = mem.violations();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("write data:"), "{v:?}");
    }

    #[test]
    fn le_fields_and_sgl_pieces() {
        let b = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09];
        assert_eq!(le_u16(&b, 1), 0x0302);
        assert_eq!(le_u32(&b, 5), 0x0908_0706);
        assert_eq!(le_u64(&b, 1), 0x0908_0706_0504_0302);
        let sgl = [(0x1000, 4), (0x2000, 0), (0x3000, 8), (0x4000, 8)];
        let pieces: Vec<_> = sgl_pieces(&sgl, 10).collect();
        assert_eq!(pieces, [(0x1000, 0..4), (0x2000, 4..4), (0x3000, 4..10)]);
        let short: Vec<_> = sgl_pieces(&sgl[..1], 10).collect();
        assert_eq!(short, [(0x1000, 0..4)]);
        assert_eq!(sgl_pieces(&sgl, 0).count(), 0);
    }

    #[test]
    fn allocations_are_distinct_aligned_and_limited() {
        let mem = FakeMemory::new(0x10);
        let a = mem.alloc_zeroed(100, 4096).unwrap();
        let b = mem.alloc_zeroed(100, 4096).unwrap();
        assert_eq!(a.phys % 4096, 0);
        assert!(b.phys >= a.phys + 100 + 4096);
        assert_eq!(
            mem.alloc_zeroed(0, 8).unwrap_err(),
            DmaError::BadRequest { size: 0, align: 8 }
        );
        assert!(matches!(mem.alloc_zeroed(8, 3), Err(DmaError::BadRequest { .. })));
        mem.set_limit(Some(b.phys + 4096));
        assert!(matches!(
            mem.alloc_zeroed(1 << 20, 8),
            Err(DmaError::OutOfMemory { .. })
        ));
    }
}
