//! The interrupt vector allocator.
//!
//! One allocator covers one CPU's vector space: the kernel keeps one per CPU
//! (as Linux does), so the 192 device vectors are available on every CPU
//! and a device with one vector per CPU takes one from each.

use core::sync::atomic::{AtomicU16, AtomicU64, Ordering};

use crate::error::{Error, Result};

/// First vector handed to devices (0x20..=0x2F stay free for the legacy PIC remap).
pub const FIRST_DEVICE_VECTOR: u8 = 0x30;
/// Last vector handed to devices (0xF0..=0xFF are left for the kernel: timer, IPIs, spurious).
pub const LAST_DEVICE_VECTOR: u8 = 0xEF;

/// Tracks which vectors in `first..=last` are taken. All methods take
/// `&self` and are safe to call concurrently.
///
/// Ordering: the bitmap only arbitrates ownership of vector numbers; no other
/// data is published through it (handlers are published by
/// [`super::IrqTable::register`] with Release/Acquire), so Relaxed
/// compare-exchange is enough: atomicity alone guarantees two callers never
/// own the same bit.
#[derive(Debug)]
pub struct VectorAllocator {
    words: [AtomicU64; 4],
    first: u8,
    last: u8,
}

impl Default for VectorAllocator {
    fn default() -> Self {
        VectorAllocator::new()
    }
}

impl VectorAllocator {
    /// Allocator over [`FIRST_DEVICE_VECTOR`]..=[`LAST_DEVICE_VECTOR`].
    pub const fn new() -> VectorAllocator {
        VectorAllocator::with_range(FIRST_DEVICE_VECTOR, LAST_DEVICE_VECTOR)
    }

    /// Allocator over `first..=last`. Panics at compile time (in a const
    /// context) if the range includes exception vectors or is empty.
    pub const fn with_range(first: u8, last: u8) -> VectorAllocator {
        assert!(
            first >= 0x20 && first <= last,
            "vector range must be non-empty and above 0x1f"
        );
        VectorAllocator {
            words: [const { AtomicU64::new(0) }; 4],
            first,
            last,
        }
    }

    fn check(&self, vector: u8) -> Result<()> {
        if (self.first..=self.last).contains(&vector) {
            Ok(())
        } else {
            Err(Error::VectorNotAllocatable {
                vector,
                first: self.first,
                last: self.last,
            })
        }
    }

    /// Tries to take the `count` bits at `vector` (all in one word).
    fn try_take(&self, vector: u8, count: u16) -> bool {
        let word = &self.words[usize::from(vector / 64)];
        let mask = if count >= 64 {
            u64::MAX
        } else {
            ((1u64 << count) - 1) << (vector % 64)
        };
        let mut current = word.load(Ordering::Relaxed);
        loop {
            if current & mask != 0 {
                return false;
            }
            // Relaxed: see the type's ordering note.
            match word.compare_exchange_weak(current, current | mask, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Marks a specific vector as taken (e.g. one the kernel uses itself).
    pub fn reserve(&self, vector: u8) -> Result<()> {
        self.check(vector)?;
        if self.try_take(vector, 1) {
            Ok(())
        } else {
            Err(Error::VectorInUse { vector })
        }
    }

    /// Takes the lowest free vector.
    pub fn allocate(&self) -> Result<u8> {
        self.allocate_block(1)
    }

    /// Takes `count` consecutive vectors starting at a multiple of `count`
    /// (`count` a power of two up to 32), as multi-message MSI requires:
    /// the device ORs the message number into the low data bits.
    pub fn allocate_block(&self, count: u16) -> Result<u8> {
        if !count.is_power_of_two() || count > 32 {
            return Err(Error::VectorsExhausted { requested: count });
        }
        let aligned_first = u16::from(self.first).next_multiple_of(count);
        let mut start = aligned_first;
        while start + count - 1 <= u16::from(self.last) {
            // An aligned block of at most 32 never straddles a 64-bit word.
            if self.try_take(start as u8, count) {
                return Ok(start as u8);
            }
            start += count;
        }
        Err(Error::VectorsExhausted { requested: count })
    }

    /// Returns a vector.
    pub fn free(&self, vector: u8) -> Result<()> {
        self.check(vector)?;
        let bit = 1u64 << (vector % 64);
        // Relaxed: see the type's ordering note.
        let previous = self.words[usize::from(vector / 64)].fetch_and(!bit, Ordering::Relaxed);
        if previous & bit == 0 {
            Err(Error::VectorNotAllocated { vector })
        } else {
            Ok(())
        }
    }

    /// Whether `vector` is taken.
    pub fn is_allocated(&self, vector: u8) -> bool {
        self.words[usize::from(vector / 64)].load(Ordering::Relaxed) & (1 << (vector % 64)) != 0
    }

    /// Number of free vectors in the range.
    pub fn free_count(&self) -> usize {
        (self.first..=self.last)
            .filter(|&vector| !self.is_allocated(vector))
            .count()
    }
}

/// Every CPU's device-vector space. A number is taken on one CPU only, but
/// numbers that no CPU uses are handed out first, so on a machine whose
/// devices fit in one space every vector number is still unique (listings
/// read as before); a number is reused on another CPU only once every
/// number is taken somewhere. A device with one vector per CPU then costs
/// one vector on each CPU, not one each from a shared pool.
#[derive(Debug)]
pub struct VectorSpaces<const CPUS: usize> {
    cpus: [VectorAllocator; CPUS],
    /// How many CPUs hold each vector number (a hint for the first pass; the
    /// per-CPU bitmaps alone decide ownership).
    users: [AtomicU16; 256],
}

impl<const CPUS: usize> Default for VectorSpaces<CPUS> {
    fn default() -> Self {
        VectorSpaces::new()
    }
}

impl<const CPUS: usize> VectorSpaces<CPUS> {
    /// Empty spaces over [`FIRST_DEVICE_VECTOR`]..=[`LAST_DEVICE_VECTOR`] on each CPU.
    pub const fn new() -> VectorSpaces<CPUS> {
        VectorSpaces {
            cpus: [const { VectorAllocator::new() }; CPUS],
            users: [const { AtomicU16::new(0) }; 256],
        }
    }

    /// CPU `cpu`'s space.
    pub fn of(&self, cpu: usize) -> Result<&VectorAllocator> {
        self.cpus.get(cpu).ok_or(Error::CpuOutOfRange {
            cpu: cpu as u32,
            limit: CPUS as u32,
        })
    }

    /// Takes one vector on `cpu`.
    pub fn allocate(&self, cpu: usize) -> Result<u8> {
        self.allocate_block(cpu, 1)
    }

    /// Takes `count` consecutive, `count`-aligned vectors on `cpu` (see
    /// [`VectorAllocator::allocate_block`]): a block no CPU uses if there is
    /// one, else any block free on `cpu`.
    pub fn allocate_block(&self, cpu: usize, count: u16) -> Result<u8> {
        let space = self.of(cpu)?;
        if !count.is_power_of_two() || count > 32 {
            return Err(Error::VectorsExhausted { requested: count });
        }
        let unused_everywhere =
            |start: u16| (start..start + count).all(|v| self.users[usize::from(v)].load(Ordering::Relaxed) == 0);
        let mut start = u16::from(space.first).next_multiple_of(count);
        while start + count - 1 <= u16::from(space.last) {
            if unused_everywhere(start) && space.try_take(start as u8, count) {
                self.count_users(start as u8, count, true);
                return Ok(start as u8);
            }
            start += count;
        }
        let start = space.allocate_block(count)?;
        self.count_users(start, count, true);
        Ok(start)
    }

    /// Takes exactly `start..start + count` on `cpu` if all are free there
    /// (re-aiming a vector keeps its number where it can).
    pub fn take_exact(&self, cpu: usize, start: u8, count: u16) -> bool {
        let Ok(space) = self.of(cpu) else { return false };
        let fits = count.is_power_of_two()
            && count <= 32
            && u16::from(start) % count == 0
            && start >= space.first
            && u16::from(start) + count - 1 <= u16::from(space.last);
        if fits && space.try_take(start, count) {
            self.count_users(start, count, true);
            true
        } else {
            false
        }
    }

    fn count_users(&self, start: u8, count: u16, taken: bool) {
        for v in u16::from(start)..u16::from(start) + count {
            let users = &self.users[usize::from(v)];
            if taken {
                users.fetch_add(1, Ordering::Relaxed);
            } else {
                users.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Returns `vector` on `cpu`.
    pub fn free(&self, cpu: usize, vector: u8) -> Result<()> {
        self.of(cpu)?.free(vector)?;
        self.count_users(vector, 1, false);
        Ok(())
    }

    /// Whether `vector` is taken on `cpu`.
    pub fn is_allocated(&self, cpu: usize, vector: u8) -> bool {
        self.of(cpu).is_ok_and(|space| space.is_allocated(vector))
    }

    /// How many CPUs hold `vector`.
    pub fn users(&self, vector: u8) -> usize {
        usize::from(self.users[usize::from(vector)].load(Ordering::Relaxed))
    }
}
