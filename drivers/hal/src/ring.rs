//! [`DmaRing`]: a ring of fixed-size entries over one [`DmaBuf`], its geometry checked once when
//! it is made, so a queue's per-entry accesses test only the index against the entry count, not
//! an offset's bounds and alignment at every load and store.

use core::marker::PhantomData;
use core::ptr::NonNull;

use crate::DmaBuf;

/// Why [`DmaRing::new`] refused a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// The entry size is not a power of two of at least 8 bytes.
    EntrySize(usize),
    /// No entries, or more than the buffer holds.
    Entries { entries: u32, len: usize },
    /// The buffer does not start on an entry boundary.
    Unaligned,
}

/// `entries` entries of `S` bytes each (a power of two, at least 8) at the start of a
/// [`DmaBuf`], which the ring owns. Entry `i`'s words are accessed with volatile 32- and 64-bit
/// operations through [`DmaRing::entry`], whose only check is `i < entries`: the buffer's length
/// and the alignment of every entry were checked by [`DmaRing::new`].
#[derive(Debug)]
pub struct DmaRing<const S: usize> {
    buf: DmaBuf,
    entries: u32,
}

impl<const S: usize> DmaRing<S> {
    /// A ring of `entries` entries over the start of `buf`: refused unless `S` is a power of
    /// two of at least 8 bytes, `1 <= entries` and `entries × S <= buf.len()`, and `buf` starts
    /// on an `S`-byte boundary in memory.
    pub fn new(buf: DmaBuf, entries: u32) -> Result<Self, RingError> {
        if !S.is_power_of_two() || S < 8 {
            return Err(RingError::EntrySize(S));
        }
        let len = buf.len();
        if entries == 0 || (entries as usize).checked_mul(S).is_none_or(|n| n > len) {
            return Err(RingError::Entries { entries, len });
        }
        if !(buf.virt().as_ptr() as usize).is_multiple_of(S) {
            return Err(RingError::Unaligned);
        }
        Ok(Self { buf, entries })
    }

    /// The buffer under the ring (its bus address, zeroing it on a reset).
    pub fn buf(&self) -> &DmaBuf {
        &self.buf
    }

    /// The number of entries.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// The ring's base and entry count, copied out so a loop keeps them in registers (a fence
    /// in the loop would otherwise reload them from the ring's owner).
    #[inline(always)]
    pub fn view(&self) -> RingView<'_, S> {
        RingView {
            base: self.buf.virt(),
            entries: self.entries,
            _ring: PhantomData,
        }
    }

    /// Entry `i`, checked against the entry count (panics past it: a driver bug).
    #[inline(always)]
    pub fn entry(&self, i: u32) -> RingEntry<'_, S> {
        self.view().entry(i)
    }
}

/// A [`DmaRing`]'s base and entry count, borrowed (see [`DmaRing::view`]).
#[derive(Clone, Copy, Debug)]
pub struct RingView<'a, const S: usize> {
    base: NonNull<u8>,
    entries: u32,
    _ring: PhantomData<&'a DmaBuf>,
}

impl<'a, const S: usize> RingView<'a, S> {
    /// The number of entries.
    #[inline(always)]
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Entry `i`, checked against the entry count (panics past it: a driver bug).
    #[inline(always)]
    pub fn entry(&self, i: u32) -> RingEntry<'a, S> {
        if i >= self.entries {
            past_ring(i, self.entries);
        }
        RingEntry {
            // SAFETY: `i < entries` and `entries × S` bytes lie inside the buffer
            // (`DmaRing::new`), so the entry's `S` bytes do too; inside an allocation, never null.
            start: unsafe { NonNull::new_unchecked(self.base.as_ptr().add(i as usize * S)) },
            _ring: PhantomData,
        }
    }
}

/// The panic of an index past a ring's end (a driver bug), out of line.
#[cold]
#[inline(never)]
#[track_caller]
fn past_ring(i: u32, entries: u32) -> ! {
    panic!("ring entry {i} of {entries}")
}

/// One entry of a [`DmaRing`]: `S` bytes, `S`-aligned, inside the ring's buffer.
#[derive(Clone, Copy, Debug)]
pub struct RingEntry<'a, const S: usize> {
    start: NonNull<u8>,
    _ring: PhantomData<&'a DmaBuf>,
}

impl<const S: usize> RingEntry<'_, S> {
    /// Little-endian u32 word `k` of the entry, one 32-bit volatile load (a word the device
    /// writes whole is never seen half-written). `k < S / 4`, checked (free for a constant `k`).
    #[inline(always)]
    pub fn read_u32(&self, k: usize) -> u32 {
        assert!(k < S / 4, "word {k} of a {S}-byte entry");
        // SAFETY: `4 k + 4 <= S`, inside the entry; 4-byte aligned since the entry is
        // `S`-aligned (`S >= 8`).
        u32::from_le(unsafe { self.start.as_ptr().cast::<u32>().add(k).read_volatile() })
    }

    /// Writes `N` little-endian u64 words from the entry's start, one 64-bit volatile store each,
    /// straight from the caller's values. `N <= S / 8`, checked at compile time.
    #[inline(always)]
    pub fn write_u64s<const N: usize>(&self, words: [u64; N]) {
        const { assert!(N <= S / 8, "more words than the entry holds") };
        for (k, word) in words.into_iter().enumerate() {
            // SAFETY: `8 k + 8 <= 8 N <= S`, inside the entry; 8-byte aligned since the entry is
            // `S`-aligned (`S >= 8`).
            unsafe { self.start.as_ptr().cast::<u64>().add(k).write_volatile(word.to_le()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeMemory;

    #[test]
    fn entries_hold_the_same_bytes_as_the_buffer_accessors() {
        let mem = FakeMemory::new(0x4000);
        let ring = DmaRing::<64>::new(DmaBuf::alloc(&mem.dma(), 5 * 64, 64).unwrap(), 5).unwrap();
        assert_eq!(ring.entries(), 5);
        let words = [1u64, 2, 3, 0x0102_0304_0506_0708, 5, 6, 7, 0xFFFF_0000_FFFF_0000];
        for i in 0..5 {
            let w = words.map(|x| x ^ u64::from(i) << 40);
            ring.entry(i).write_u64s(w);
            let mut fresh = [0u8; 64];
            for (k, x) in w.iter().enumerate() {
                fresh[8 * k..8 * k + 8].copy_from_slice(&x.to_le_bytes());
            }
            let mut back = [0u8; 64];
            ring.buf().read_bytes(i as usize * 64, &mut back);
            assert_eq!(back, fresh, "entry {i}");
            assert_eq!(mem.read_u64("t", ring.buf().phys_at(i as usize * 64 + 24)), Some(w[3]));
        }
        // A shorter run leaves the rest of the entry alone.
        ring.entry(1).write_u64s([9]);
        assert_eq!(ring.buf().read_u64(64), 9);
        assert_eq!(ring.buf().read_u64(72), words[1] ^ 1 << 40);
        // Reads agree with the buffer's words, wherever the device put them.
        let cq = DmaRing::<16>::new(DmaBuf::alloc(&mem.dma(), 4 * 16, 16).unwrap(), 3).unwrap();
        for i in 0..3u32 {
            for k in 0..4 {
                let off = i as usize * 16 + 4 * k;
                mem.write_u32("dev", cq.buf().phys_at(off), 0xA000_0000 | (i << 8) | k as u32);
                assert_eq!(cq.entry(i).read_u32(k), cq.buf().read_u32(off));
                assert_eq!(cq.view().entry(i).read_u32(k), 0xA000_0000 | (i << 8) | k as u32);
            }
        }
        assert!(mem.violations().is_empty());
    }

    #[test]
    fn a_geometry_the_buffer_cannot_hold_is_refused() {
        let mem = FakeMemory::new(0x4000);
        let buf = || DmaBuf::alloc(&mem.dma(), 4 * 16, 16).unwrap();
        assert_eq!(
            DmaRing::<16>::new(buf(), 0).unwrap_err(),
            RingError::Entries { entries: 0, len: 64 }
        );
        assert_eq!(
            DmaRing::<16>::new(buf(), 5).unwrap_err(),
            RingError::Entries { entries: 5, len: 64 }
        );
        assert_eq!(
            DmaRing::<16>::new(buf(), u32::MAX).unwrap_err(),
            RingError::Entries {
                entries: u32::MAX,
                len: 64
            }
        );
        assert_eq!(DmaRing::<12>::new(buf(), 1).unwrap_err(), RingError::EntrySize(12));
        assert_eq!(DmaRing::<4>::new(buf(), 1).unwrap_err(), RingError::EntrySize(4));
        assert!(DmaRing::<16>::new(buf(), 4).is_ok());
    }

    #[test]
    fn a_buffer_off_an_entry_boundary_is_refused() {
        /// Hands out regions 16 bytes into a 64-aligned allocation.
        struct Offset(alloc::sync::Arc<FakeMemory>);
        // SAFETY: test allocator; the region it returns lies inside the one it got.
        unsafe impl crate::Dma for Offset {
            fn alloc_zeroed(&self, size: usize, _align: usize) -> Result<crate::DmaRegion, crate::DmaError> {
                let r = self.0.alloc_zeroed(size + 64, 64)?;
                // SAFETY: 16 < 64 <= the region's length.
                let virt = unsafe { NonNull::new_unchecked(r.virt.as_ptr().add(16)) };
                Ok(crate::DmaRegion {
                    virt,
                    phys: r.phys + 16,
                    len: size,
                })
            }
        }
        let mem = FakeMemory::new(0x4000);
        let buf = DmaBuf::alloc(&Offset(mem.clone()), 128, 16).unwrap();
        assert_eq!(DmaRing::<64>::new(buf, 2).unwrap_err(), RingError::Unaligned);
        let buf = DmaBuf::alloc(&Offset(mem), 128, 16).unwrap();
        assert!(DmaRing::<16>::new(buf, 8).is_ok());
    }

    #[test]
    #[should_panic(expected = "ring entry 3 of 3")]
    fn an_index_past_the_ring_panics() {
        let mem = FakeMemory::new(0x4000);
        let ring = DmaRing::<16>::new(DmaBuf::alloc(&mem.dma(), 4 * 16, 16).unwrap(), 3).unwrap();
        let _ = ring.entry(core::hint::black_box(3));
    }

    #[test]
    #[should_panic(expected = "word 4 of a 16-byte entry")]
    fn a_word_past_the_entry_panics() {
        let mem = FakeMemory::new(0x4000);
        let ring = DmaRing::<16>::new(DmaBuf::alloc(&mem.dma(), 16, 16).unwrap(), 1).unwrap();
        let _ = ring.entry(0).read_u32(core::hint::black_box(4));
    }
}
