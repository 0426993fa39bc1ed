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

use alloc::alloc::{Layout, alloc_zeroed, dealloc};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ptr::NonNull;

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
            }),
        })
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
        let mut inner = self.inner.lock();
        match inner.translate(phys, buf.len()) {
            Some(p) => {
                for (i, b) in buf.iter_mut().enumerate() {
                    // SAFETY: `translate` checked that `p..p+len` is inside a live allocation.
                    *b = unsafe { p.add(i).read_volatile() };
                }
                true
            }
            None => {
                let v = alloc::format!(
                    "{what}: device read of {} bytes at {phys:#x} outside DMA memory",
                    buf.len()
                );
                inner.violations.push(v);
                false
            }
        }
    }

    /// Device write of `data` at `phys`. Returns false (and records a violation naming `what`)
    /// when the range is not inside one allocation; memory is then left untouched.
    pub fn write(&self, what: &str, phys: u64, data: &[u8]) -> bool {
        let mut inner = self.inner.lock();
        match inner.translate(phys, data.len()) {
            Some(p) => {
                for (i, b) in data.iter().enumerate() {
                    // SAFETY: `translate` checked that `p..p+len` is inside a live allocation.
                    unsafe { p.add(i).write_volatile(*b) };
                }
                true
            }
            None => {
                let v = alloc::format!(
                    "{what}: device write of {} bytes at {phys:#x} outside DMA memory",
                    data.len()
                );
                inner.violations.push(v);
                false
            }
        }
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
