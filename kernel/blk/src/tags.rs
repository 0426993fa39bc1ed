//! Tag allocation: a lock-free bitmap allocator with per-CPU search hints (Linux's `sbitmap`),
//! and tag sets made of a reserved (admin) pool and a normal pool.
//!
//! Who may call what concurrently: `alloc` and `free` from any CPU at any time, including
//! interrupt context; neither blocks. A tag is owned by whoever `alloc` returned it to until
//! that owner calls `free` once.

use crate::sync::{AtomicU64, CachePadded, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::AtomicU32 as HintU32;

/// A fixed-size lock-free bitmap of tags `base..base + nbits`.
///
/// The bits are spread over several cache-line-padded words (at least four when the pool is
/// large enough), and each CPU starts its search where it last succeeded, so CPUs tend to
/// allocate from different words instead of all hammering word 0.
pub struct TagBitmap {
    words: Box<[CachePadded<AtomicU64>]>,
    /// Per-CPU next bit to try. Plain `core` atomic: a hint is only a performance guess, any
    /// value is safe, so it stays out of the loom model.
    hints: Box<[CachePadded<HintU32>]>,
    nbits: u32,
    bits_per_word: u32,
    base: u32,
}

impl TagBitmap {
    /// A bitmap handing out tags `base..base + nbits`, with one search hint per CPU.
    pub fn new(base: u32, nbits: u32, ncpus: usize) -> Self {
        // Like sbitmap: about depth/4 bits per word (a power of two, 1..=64), so that a small
        // pool still spans several cache lines.
        let per_word = (nbits / 4).clamp(1, 64);
        let bits_per_word = 1u32 << (31 - per_word.leading_zeros());
        let nwords = nbits.div_ceil(bits_per_word).max(1) as usize;
        let words: Vec<_> = (0..nwords).map(|_| CachePadded(AtomicU64::new(0))).collect();
        let hints: Vec<_> = (0..ncpus.max(1))
            .map(|cpu| {
                // Start CPUs in different words.
                let start = ((cpu as u64 * u64::from(bits_per_word)) % u64::from(nbits.max(1))) as u32;
                CachePadded(HintU32::new(start))
            })
            .collect();
        Self {
            words: words.into_boxed_slice(),
            hints: hints.into_boxed_slice(),
            nbits,
            bits_per_word,
            base,
        }
    }

    /// Number of tags in the pool.
    pub fn capacity(&self) -> u32 {
        self.nbits
    }

    /// First tag number of the pool.
    pub fn base(&self) -> u32 {
        self.base
    }

    fn valid_mask(&self, word: usize) -> u64 {
        let first = word as u32 * self.bits_per_word;
        let n = (self.nbits - first).min(self.bits_per_word);
        if n == 64 { u64::MAX } else { (1u64 << n) - 1 }
    }

    /// Allocates a free tag, searching from `cpu`'s hint. `None` when every tag is taken.
    pub fn alloc(&self, cpu: usize) -> Option<u32> {
        if self.nbits == 0 {
            return None;
        }
        let hint_slot = &self.hints[cpu % self.hints.len()];
        let mut hint = hint_slot.load(core::sync::atomic::Ordering::Relaxed);
        if hint >= self.nbits {
            hint = 0;
        }
        let nwords = self.words.len();
        let start_word = (hint / self.bits_per_word) as usize;
        let start_bit = hint % self.bits_per_word;
        // Visit the start word twice: first from the hint, at the end from bit 0.
        for step in 0..=nwords {
            let w = (start_word + step) % nwords;
            let from = if step == 0 { start_bit } else { 0 };
            let allowed = self.valid_mask(w) & (u64::MAX << from);
            let word = &self.words[w];
            let mut cur = word.load(Ordering::Relaxed);
            loop {
                let free = !cur & allowed;
                if free == 0 {
                    break;
                }
                let bit = free.trailing_zeros();
                let mask = 1u64 << bit;
                // Acquire pairs with the Release `fetch_and` in `free`: the previous owner's
                // use of the tag happens before ours.
                let prev = word.fetch_or(mask, Ordering::Acquire);
                if prev & mask == 0 {
                    let tag = w as u32 * self.bits_per_word + bit;
                    hint_slot.store(tag + 1, core::sync::atomic::Ordering::Relaxed);
                    return Some(self.base + tag);
                }
                // Lost the race for this bit; look again at what the word holds now.
                cur = prev | mask;
            }
        }
        None
    }

    /// Frees `tag`. Returns `false` (and changes nothing) if the tag is outside the pool or was
    /// not allocated, so a double free is detected rather than corrupting the bitmap.
    pub fn free(&self, cpu: usize, tag: u32) -> bool {
        let Some(rel) = tag.checked_sub(self.base).filter(|t| *t < self.nbits) else {
            return false;
        };
        let w = (rel / self.bits_per_word) as usize;
        let mask = 1u64 << (rel % self.bits_per_word);
        // Release pairs with the Acquire `fetch_or` in `alloc`.
        let prev = self.words[w].fetch_and(!mask, Ordering::Release);
        // A recently freed tag is cache-hot on this CPU: try it first next time.
        self.hints[cpu % self.hints.len()].store(rel, core::sync::atomic::Ordering::Relaxed);
        prev & mask != 0
    }

    /// Tags currently allocated (a racy snapshot).
    pub fn in_use(&self) -> u32 {
        self.words.iter().map(|w| w.load(Ordering::Relaxed).count_ones()).sum()
    }
}

/// One tag set: tags `0..reserved` are for admin commands, `reserved..depth` for normal I/O.
/// For MegaRAID the tag is the firmware context, so the numbering is exactly `0..depth`.
pub struct TagSet {
    reserved: TagBitmap,
    normal: TagBitmap,
}

impl TagSet {
    /// A tag set of `depth` tags, the first `reserved` of them reserved.
    pub fn new(depth: u32, reserved: u32, ncpus: usize) -> Self {
        let reserved = reserved.min(depth);
        Self {
            reserved: TagBitmap::new(0, reserved, ncpus),
            normal: TagBitmap::new(reserved, depth - reserved, ncpus),
        }
    }

    /// Total number of tags.
    pub fn depth(&self) -> u32 {
        self.reserved.capacity() + self.normal.capacity()
    }

    /// Number of reserved tags.
    pub fn reserved(&self) -> u32 {
        self.reserved.capacity()
    }

    /// Allocates from the reserved or the normal pool.
    pub fn alloc(&self, cpu: usize, reserved: bool) -> Option<u32> {
        if reserved {
            self.reserved.alloc(cpu)
        } else {
            self.normal.alloc(cpu)
        }
    }

    /// Frees a tag from whichever pool it belongs to; `false` if it was not allocated.
    pub fn free(&self, cpu: usize, tag: u32) -> bool {
        if tag < self.reserved.capacity() {
            self.reserved.free(cpu, tag)
        } else {
            self.normal.free(cpu, tag)
        }
    }

    /// Size of the pool `alloc(_, reserved)` draws from.
    pub fn pool_size(&self, reserved: bool) -> u32 {
        if reserved {
            self.reserved.capacity()
        } else {
            self.normal.capacity()
        }
    }

    /// Tags currently allocated in both pools (racy snapshot).
    pub fn in_use(&self) -> u32 {
        self.reserved.in_use() + self.normal.in_use()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    extern crate std;
    use std::collections::BTreeSet;

    #[test]
    fn hands_out_every_tag_once_then_none() {
        for depth in [1u32, 2, 3, 7, 64, 65, 130, 1024] {
            let b = TagBitmap::new(5, depth, 3);
            let mut seen = BTreeSet::new();
            for i in 0..depth {
                let t = b.alloc(i as usize % 3).expect("tag available");
                assert!((5..5 + depth).contains(&t), "tag {t} outside pool");
                assert!(seen.insert(t), "tag {t} handed out twice");
            }
            assert_eq!(b.alloc(0), None, "depth {depth}: pool should be exhausted");
            assert_eq!(b.in_use(), depth);
        }
    }

    #[test]
    fn free_detects_double_free_and_foreign_tags() {
        let b = TagBitmap::new(4, 8, 1);
        let t = b.alloc(0).unwrap();
        assert!(b.free(0, t));
        assert!(!b.free(0, t), "double free must be reported");
        assert!(!b.free(0, 3), "tag below the pool");
        assert!(!b.free(0, 12), "tag above the pool");
        assert_eq!(b.in_use(), 0);
    }

    #[test]
    fn reserved_pool_is_separate() {
        let s = TagSet::new(6, 2, 1);
        let r: BTreeSet<_> = (0..2).map(|_| s.alloc(0, true).unwrap()).collect();
        assert_eq!(r, BTreeSet::from([0, 1]));
        assert_eq!(s.alloc(0, true), None);
        let n: BTreeSet<_> = (0..4).map(|_| s.alloc(0, false).unwrap()).collect();
        assert_eq!(n, BTreeSet::from([2, 3, 4, 5]));
        assert_eq!(s.alloc(0, false), None);
        assert!(s.free(0, 1));
        assert_eq!(
            s.alloc(0, false),
            None,
            "a freed reserved tag must not serve normal I/O"
        );
        assert_eq!(s.alloc(0, true), Some(1));
    }
}
