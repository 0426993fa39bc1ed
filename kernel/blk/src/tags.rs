//! Tag allocation: a lock-free bitmap allocator with per-CPU search hints (Linux's `sbitmap`),
//! and tag sets made of a reserved (admin) pool and a normal pool.
//!
//! Who may call what concurrently: `alloc` and `free` from any CPU at any time, including
//! interrupt context; neither blocks. A tag is owned by whoever `alloc` returned it to until
//! that owner calls `free` once.

use crate::driver::Platform;
use crate::error::BlkError;
use crate::sync::{AtomicU32, AtomicU64, CachePadded, Ordering, SpinLock, fence_after_rmw};
use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
pub use core::sync::atomic::AtomicU32 as HintU32;

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
    /// Bits per word less one (a power of two less one): a tag's bit in its word is
    /// `tag & bit_mask`, with no subtraction on the hot paths.
    bit_mask: u32,
    /// log2(bits_per_word): the hot paths shift instead of dividing.
    word_shift: u32,
    base: u32,
}

/// The bits of word `word` that are tags of a pool of `nbits` with `bits_per_word` per word.
fn valid_mask_of(nbits: u32, bits_per_word: u32, word: usize) -> u64 {
    let first = word as u32 * bits_per_word;
    let n = nbits.saturating_sub(first).min(bits_per_word);
    if n == 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// Where CPU `cpu`'s first search starts in a pool of `nbits` with `bits_per_word` per word: CPUs
/// start in different words.
fn first_hint_of(cpu: usize, bits_per_word: u32, nbits: u32) -> u32 {
    ((cpu as u64 * u64::from(bits_per_word)) % u64::from(nbits.max(1))) as u32
}

/// `i` folded into `0..len` (`len > 0`) without a division in the common case `i < len`: a
/// hardware divide costs more than the rest of a tag allocation.
#[inline]
pub(crate) fn fold(i: usize, len: usize) -> usize {
    if i < len { i } else { i % len }
}

impl TagBitmap {
    /// A bitmap handing out tags `base..base + nbits`, with one search hint per CPU.
    pub fn new(base: u32, nbits: u32, ncpus: usize) -> Self {
        // Like sbitmap: about depth/4 bits per word (a power of two, 1..=64), so that a small
        // pool still spans several cache lines.
        let per_word = (nbits / 4).clamp(1, 64);
        let bits_per_word = 1u32 << (31 - per_word.leading_zeros());
        let nwords = nbits.div_ceil(bits_per_word).max(1) as usize;
        // The bits past the pool's end (in its last word, or all of an empty pool's only word)
        // start set and are never freed: taken for good, they need no range test in `alloc`'s
        // fast path.
        let words: Vec<_> = (0..nwords)
            .map(|w| CachePadded(AtomicU64::new(!valid_mask_of(nbits, bits_per_word, w))))
            .collect();
        let hints: Vec<_> = (0..ncpus.max(1))
            .map(|cpu| CachePadded(HintU32::new(first_hint_of(cpu, bits_per_word, nbits))))
            .collect();
        Self {
            words: words.into_boxed_slice(),
            hints: hints.into_boxed_slice(),
            nbits,
            bit_mask: bits_per_word - 1,
            word_shift: bits_per_word.trailing_zeros(),
            base,
        }
    }

    fn bits_per_word(&self) -> u32 {
        self.bit_mask + 1
    }

    /// Number of tags in the pool.
    pub fn capacity(&self) -> u32 {
        self.nbits
    }

    /// The first value of CPU `cpu`'s hint (as the pool's own hints start): a caller that keeps
    /// its hints itself ([`TagBitmap::alloc_hinted`]) starts its CPUs in different words too.
    pub fn first_hint(&self, cpu: usize) -> u32 {
        first_hint_of(cpu, self.bits_per_word(), self.nbits)
    }

    /// First tag number of the pool.
    pub fn base(&self) -> u32 {
        self.base
    }

    fn valid_mask(&self, word: usize) -> u64 {
        valid_mask_of(self.nbits, self.bits_per_word(), word)
    }

    /// Allocates a free tag, searching from `cpu`'s hint. `None` when every tag is taken.
    #[inline(always)]
    pub fn alloc(&self, cpu: usize) -> Option<u32> {
        self.alloc_hinted(self.hint(cpu))
    }

    /// The pool's own search hint of CPU `cpu` (CPUs past the hints share them).
    #[inline(always)]
    fn hint(&self, cpu: usize) -> &HintU32 {
        &self.hints[fold(cpu, self.hints.len())]
    }

    /// [`TagBitmap::alloc`] searching from a hint the caller keeps (the block layer keeps one
    /// in each CPU's counters block, which its submissions have at hand: no lookup in
    /// `hints`). Any value is a valid hint.
    #[inline(always)]
    pub fn alloc_hinted(&self, hint_slot: &HintU32) -> Option<u32> {
        match self.alloc_at_hint(hint_slot) {
            Some(tag) => Some(tag),
            None => self.alloc_past_hint(hint_slot),
        }
    }

    /// [`TagBitmap::alloc_hinted`]'s fast path alone: the hint's own tag, if free.
    #[inline(always)]
    pub fn alloc_at_hint(&self, hint_slot: &HintU32) -> Option<u32> {
        let hint = hint_slot.load(core::sync::atomic::Ordering::Relaxed);
        // Fast path: the hint is usually the tag this CPU freed last, still free. One word,
        // one bit, no search (a third of the instructions of the loop below). No range test:
        // a hint past the pool's end (at most `nbits`, after its last tag was taken) finds no
        // word, or a bit past the end, which is always set.
        let mask = 1u64 << (hint & self.bit_mask);
        if let Some(word) = self.words.get((hint >> self.word_shift) as usize)
            && word.load(Ordering::Relaxed) & mask == 0
            // Acquire pairs with the Release `fetch_and` in `free`, as below.
            && word.fetch_or(mask, Ordering::Acquire) & mask == 0
        {
            hint_slot.store(hint + 1, core::sync::atomic::Ordering::Relaxed);
            return Some(self.base + hint);
        }
        None
    }

    /// [`TagBitmap::alloc_hinted`] after [`TagBitmap::alloc_at_hint`] found the hint's tag
    /// taken: the search. The hint is unchanged by a failed fast path.
    #[inline(always)]
    pub fn alloc_past_hint(&self, hint_slot: &HintU32) -> Option<u32> {
        self.alloc_searching(hint_slot, hint_slot.load(core::sync::atomic::Ordering::Relaxed))
    }

    /// [`TagBitmap::alloc`] past its fast path: every word from the hint's on, round to it.
    #[inline(never)]
    fn alloc_searching(&self, hint_slot: &HintU32, hint: u32) -> Option<u32> {
        let hint = if hint >= self.nbits { 0 } else { hint };
        let nwords = self.words.len();
        let start_word = (hint >> self.word_shift) as usize;
        let start_bit = hint & self.bit_mask;
        // Visit the start word twice: first from the hint, at the end from bit 0.
        let mut w = start_word;
        for step in 0..=nwords {
            if step != 0 {
                w = if w + 1 == nwords { 0 } else { w + 1 };
            }
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
                    let tag = w as u32 * self.bits_per_word() + bit;
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
    #[inline(always)]
    pub fn free(&self, cpu: usize, tag: u32) -> bool {
        match tag.checked_sub(self.base) {
            Some(rel) => self.free_relative(self.hint(cpu), rel),
            None => false,
        }
    }

    /// Frees the tag `rel` above the pool's base, then makes it the hint in `hint_slot` (see
    /// [`TagBitmap::alloc_hinted`]). `false` as for [`TagBitmap::free`].
    #[inline(always)]
    fn free_relative(&self, hint_slot: &HintU32, rel: u32) -> bool {
        if rel >= self.nbits {
            return false;
        }
        let w = (rel >> self.word_shift) as usize;
        debug_assert!(w < self.words.len());
        // SAFETY: `rel < nbits`, so `w = rel / bits_per_word < nbits.div_ceil(bits_per_word)`,
        // which is at most the number of words (`new`).
        let word = unsafe { self.words.get_unchecked(w) };
        let mask = 1u64 << (rel & self.bit_mask);
        // Release pairs with the Acquire `fetch_or` in `alloc`.
        let prev = word.fetch_and(!mask, Ordering::Release);
        // A recently freed tag is cache-hot on this CPU: try it first next time.
        hint_slot.store(rel, core::sync::atomic::Ordering::Relaxed);
        prev & mask != 0
    }

    /// Tags currently allocated (a racy snapshot).
    pub fn in_use(&self) -> u32 {
        self.words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.load(Ordering::Relaxed) & self.valid_mask(i)).count_ones())
            .sum()
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
    #[inline(always)]
    pub fn alloc(&self, cpu: usize, reserved: bool) -> Option<u32> {
        self.alloc_hinted(cpu, self.normal.hint(cpu), reserved)
    }

    /// Frees a tag from whichever pool it belongs to; `false` if it was not allocated.
    #[inline(always)]
    pub fn free(&self, cpu: usize, tag: u32) -> bool {
        self.free_hinted(cpu, self.normal.hint(cpu), tag)
    }

    /// [`TagBitmap::first_hint`] of the normal pool.
    pub fn first_hint(&self, cpu: usize) -> u32 {
        self.normal.first_hint(cpu)
    }

    /// [`TagSet::alloc`] with the normal pool searched from `hint` (see
    /// [`TagBitmap::alloc_hinted`]); the reserved pool keeps its own hints.
    #[inline(always)]
    pub fn alloc_hinted(&self, cpu: usize, hint: &HintU32, reserved: bool) -> Option<u32> {
        if reserved {
            self.reserved.alloc(cpu)
        } else {
            self.normal.alloc_hinted(hint)
        }
    }

    /// [`TagSet::alloc_hinted`] of a normal tag, its fast path alone
    /// ([`TagBitmap::alloc_at_hint`]); [`TagSet::alloc_past_hint`] searches.
    #[inline(always)]
    pub fn alloc_at_hint(&self, hint: &HintU32) -> Option<u32> {
        self.normal.alloc_at_hint(hint)
    }

    /// [`TagSet::alloc_hinted`] of a normal tag after [`TagSet::alloc_at_hint`] failed.
    #[inline(always)]
    pub fn alloc_past_hint(&self, hint: &HintU32) -> Option<u32> {
        self.normal.alloc_past_hint(hint)
    }

    /// [`TagSet::free`] for a tag whose normal-pool allocation used `hint`.
    #[inline(always)]
    pub fn free_hinted(&self, cpu: usize, hint: &HintU32, tag: u32) -> bool {
        let reserved = self.reserved.capacity();
        if tag < reserved {
            self.reserved.free(cpu, tag)
        } else {
            // The normal pool starts where the reserved one ends: no second range test below.
            self.normal.free_relative(hint, tag - reserved)
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

/// Deepest tag set: a tag must fit the 16 bits it has in an [`crate::IssueToken`].
pub const MAX_DEPTH: u32 = 1 << 16;

/// Most queues that may share one [`HostTags`].
pub const MAX_SHARERS: usize = 256;

/// Words of restart bits: one bit per possible sharer.
const RESTART_WORDS: usize = MAX_SHARERS.div_ceil(64);

/// Search hints of a host-wide set: one per CPU up to this many, then CPUs share them.
const HOST_HINTS: usize = 64;

/// A tag set shared by several [`crate::Queue`]s: Linux's `host_tagset`. One controller with
/// several logical drives gives each drive its own queue, and all of them allocate from this
/// one tag space, so a tag (the firmware context) is unique controller-wide and a busy drive
/// may use every tag. Each queue with its own tags also holds one of these, unshared.
///
/// What sharing adds, and how it stays live:
/// - **Restart across queues.** A queue whose driver turned requests away (`Busy`) is waiting
///   for resources that any sharer's completion may free. Every tag free bumps
///   [`HostTags::freed_seq`]; a queue that turns requests away sets its bit in the restart
///   bitmap and then re-reads the sequence (rerunning itself if it moved); a freer bumps the
///   sequence and then reads the restart bits, and for each other sharer's bit raises that
///   queue's completion softirq on its own CPU ([`Platform::raise_completion_softirq`]), whose
///   [`crate::Queue::run_completions`] reruns the waiting queue. Both sides put a full fence
///   between their store and their load (the store-buffer pattern), so either the waiter sees
///   the free or the freer sees the waiter: no lost wake-up (loom model
///   `host_tags_free_wakes_a_busy_sharer`).
/// - **No starvation on tags.** A queue whose `submit_wait` finds no tag registers as waiting;
///   while another queue waits, a queue already holding its fair share
///   (`pool / (waiting queues + 1)`, rounded up) gets `TagsExhausted` instead of a tag, so the
///   tags the busy queue frees go to the waiter.
pub struct HostTags {
    set: TagSet,
    /// Bumped by every tag free; read by the restart protocol.
    freed: CachePadded<AtomicU32>,
    /// One bit per sharer: that queue holds requests its driver turned away.
    restart: [AtomicU64; RESTART_WORDS],
    /// Queues with a `submit_wait` in progress that found no tag (a fairness heuristic: orders
    /// nothing, so a plain `core` atomic).
    waiting: CachePadded<core::sync::atomic::AtomicU32>,
    /// Each sharer's platform, for the restart kick. Taken with `try_lock` on the kick path, so
    /// an interrupt never spins on it.
    sharers: SpinLock<Vec<Option<Arc<dyn Platform>>>>,
}

impl core::fmt::Debug for HostTags {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostTags")
            .field("depth", &self.depth())
            .field("reserved", &self.reserved())
            .field("in_use", &self.in_use())
            .finish()
    }
}

impl HostTags {
    /// A host-wide set of `depth` tags (`1..=65536`), the first `reserved` of them kept for
    /// admin commands (`reserved < depth`).
    pub fn new(depth: u32, reserved: u32) -> Result<Arc<Self>, BlkError> {
        if depth == 0 || depth > MAX_DEPTH {
            return Err(BlkError::InvalidConfig {
                field: "host tag depth",
                value: depth.into(),
                accepted: "1..=65536",
            });
        }
        if reserved >= depth {
            return Err(BlkError::InvalidConfig {
                field: "host reserved tags",
                value: reserved.into(),
                accepted: "less than the depth (at least one normal tag)",
            });
        }
        Ok(Arc::new(Self::with_hints(depth, reserved, HOST_HINTS)))
    }

    /// A set for one queue's own use (validated by the queue's config).
    pub(crate) fn with_hints(depth: u32, reserved: u32, ncpus: usize) -> Self {
        Self {
            set: TagSet::new(depth, reserved, ncpus),
            freed: CachePadded(AtomicU32::new(0)),
            restart: core::array::from_fn(|_| AtomicU64::new(0)),
            waiting: CachePadded(core::sync::atomic::AtomicU32::new(0)),
            sharers: SpinLock::new(Vec::new()),
        }
    }

    /// The tags.
    pub fn tags(&self) -> &TagSet {
        &self.set
    }

    /// Total number of tags.
    pub fn depth(&self) -> u32 {
        self.set.depth()
    }

    /// Number of reserved tags.
    pub fn reserved(&self) -> u32 {
        self.set.reserved()
    }

    /// Tags currently allocated, by every sharer (racy snapshot).
    pub fn in_use(&self) -> u32 {
        self.set.in_use()
    }

    /// Queues sharing the set.
    pub fn sharers(&self) -> usize {
        self.sharers.lock().iter().filter(|s| s.is_some()).count()
    }

    /// The "tags freed" sequence. Acquire pairs with the Release bump in `free`: a dispatcher
    /// that sees a bump also sees whatever the freer's driver released before it (the frame or
    /// slot its `Busy` was waiting for). Without it, a dispatcher could read the bumped value
    /// before calling `queue_rq`, still find the resource taken, and then never notice a change
    /// (loom model `host_tags_free_wakes_a_busy_sharer` found exactly that).
    #[inline]
    pub fn freed_seq(&self) -> u32 {
        self.freed.load(Ordering::Acquire)
    }

    /// Registers a queue; returns its sharer id.
    pub(crate) fn register(&self, platform: Arc<dyn Platform>) -> Result<u32, BlkError> {
        let mut sharers = self.sharers.lock();
        if let Some(id) = sharers.iter().position(Option::is_none) {
            sharers[id] = Some(platform);
            return Ok(id as u32);
        }
        if sharers.len() >= MAX_SHARERS {
            return Err(BlkError::InvalidConfig {
                field: "host_tags",
                value: sharers.len() as u64,
                accepted: "at most 256 queues per host tag set",
            });
        }
        sharers.push(Some(platform));
        Ok(sharers.len() as u32 - 1)
    }

    /// Removes a queue (when it is dropped).
    pub(crate) fn unregister(&self, id: u32) {
        self.restart[id as usize / 64].fetch_and(!(1 << (id % 64)), Ordering::Relaxed);
        if let Some(s) = self.sharers.lock().get_mut(id as usize) {
            *s = None;
        }
    }

    /// Frees `tag` on CPU `cpu`, bumps the freed sequence and, on behalf of sharer `me` of a set
    /// shared by several queues, kicks every other sharer waiting for a restart (`None`: a queue's
    /// own set, whose restart bits nobody sets, so there is nothing to kick). `false` if the tag
    /// was not allocated.
    #[inline(always)]
    pub(crate) fn free(&self, cpu: usize, tag: u32, me: Option<u32>) -> bool {
        self.free_hinted(cpu, self.set.normal.hint(cpu), tag, me)
    }

    /// [`HostTags::free`] for a tag whose normal-pool allocation used `hint`
    /// ([`TagSet::alloc_hinted`]).
    #[inline(always)]
    pub(crate) fn free_hinted(&self, cpu: usize, hint: &HintU32, tag: u32, me: Option<u32>) -> bool {
        let freed = self.set.free_hinted(cpu, hint, tag);
        // Release pairs with the Acquire in `freed_seq`.
        self.freed.fetch_add(1, Ordering::Release);
        // Full fence. Pairs with the fence in `Queue::dispatch_once`'s restart protocol (after
        // it sets its restart bit): either it sees our bump, or we see its bit below.
        fence_after_rmw();
        if let Some(me) = me {
            self.kick_waiters(cpu, me);
        }
        freed
    }

    #[inline(always)]
    fn kick_waiters(&self, cpu: usize, me: u32) {
        // Every free comes here and almost never finds a waiter: one branch-free pass over the
        // (few, fixed) words, the walk only when some sharer (perhaps we ourselves) waits.
        if self
            .restart
            .iter()
            .fold(0, |any, word| any | word.load(Ordering::Relaxed))
            != 0
        {
            self.kick_other_waiters(cpu, me);
        }
    }

    #[cold]
    #[inline(never)]
    fn kick_other_waiters(&self, cpu: usize, me: u32) {
        for (w, word) in self.restart.iter().enumerate() {
            let mut bits = word.load(Ordering::Relaxed);
            if w == me as usize / 64 {
                bits &= !(1 << (me % 64));
            }
            if bits == 0 {
                continue;
            }
            // The registry lock is only held briefly by queue creation and drop; if we meet it
            // taken, the sharer being (un)registered has no turned-away requests to restart,
            // and any other set bit stays set, so the next free kicks it.
            let Some(sharers) = self.sharers.try_lock() else {
                return;
            };
            while bits != 0 {
                let id = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if let Some(Some(p)) = sharers.get(id) {
                    p.raise_completion_softirq(cpu);
                }
            }
        }
    }

    /// Sharer `me` holds turned-away requests: ask freers to kick it. The caller fences next.
    #[inline]
    pub(crate) fn want_restart(&self, me: u32) {
        self.restart[me as usize / 64].fetch_or(1 << (me % 64), Ordering::Relaxed);
    }

    /// Consumes sharer `me`'s restart request; `true` if there was one.
    #[inline]
    pub(crate) fn take_restart(&self, me: u32) -> bool {
        let word = &self.restart[me as usize / 64];
        let bit = 1 << (me % 64);
        // Cheap check first: this runs on every `run_completions`.
        word.load(Ordering::Relaxed) & bit != 0 && word.fetch_and(!bit, Ordering::Relaxed) & bit != 0
    }

    /// A queue's `submit_wait` starts waiting for a tag.
    pub(crate) fn waiter_enter(&self) {
        self.waiting.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    }

    /// A queue's `submit_wait` stops waiting.
    pub(crate) fn waiter_exit(&self) {
        self.waiting.fetch_sub(1, core::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a queue holding `held()` tags must leave the next free tag to a waiting queue
    /// (`held` is asked only when another queue waits).
    /// `self_waiting`: the asking queue is itself one of the waiters.
    #[inline]
    pub(crate) fn over_fair_share(&self, held: impl FnOnce() -> usize, self_waiting: bool) -> bool {
        let waiting = self.waiting.load(core::sync::atomic::Ordering::Relaxed);
        let others = waiting.saturating_sub(u32::from(self_waiting));
        if others == 0 {
            return false;
        }
        let contenders = waiting + u32::from(!self_waiting);
        let share = self.set.pool_size(false).div_ceil(contenders.max(1)).max(1);
        held() >= share as usize
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

    /// The bits past a pool's end start set and stay set: an empty pool hands out nothing, a
    /// hint left at the end (after the last tag) never yields a tag past it, and `in_use` does
    /// not count them.
    #[test]
    fn the_bits_past_the_end_are_never_handed_out_or_counted() {
        let empty = TagBitmap::new(3, 0, 2);
        assert_eq!(empty.alloc(0), None);
        assert_eq!(empty.alloc(1), None);
        assert_eq!(empty.in_use(), 0);
        for depth in [5u32, 65, 70, 130] {
            let b = TagBitmap::new(10, depth, 1);
            for round in 0..3 {
                // One CPU takes the pool in order: its hint walks to the end and past it.
                let tags: Vec<u32> = (0..depth).map(|_| b.alloc(0).expect("tag available")).collect();
                assert!(
                    tags.iter().all(|t| (10..10 + depth).contains(t)),
                    "depth {depth}: {tags:?}"
                );
                assert_eq!(tags.iter().collect::<BTreeSet<_>>().len(), depth as usize);
                assert_eq!(b.alloc(0), None, "depth {depth} round {round}: nothing past the end");
                assert_eq!(b.in_use(), depth);
                for t in tags {
                    assert!(b.free(0, t));
                }
                assert_eq!(b.in_use(), 0, "depth {depth} round {round}");
            }
        }
    }

    /// The hint's tag alone, then the search when it is taken, hands out what `alloc_hinted`
    /// does, tag for tag, and leaves the same hint; a taken hint's tag leaves the hint as it was.
    #[test]
    fn the_hint_fast_path_then_the_search_is_alloc_hinted() {
        for depth in [1u32, 3, 64, 65, 130] {
            let (a, b) = (TagSet::new(depth + 2, 2, 1), TagSet::new(depth + 2, 2, 1));
            let (hint_a, hint_b) = (HintU32::new(0), HintU32::new(0));
            for round in 0..2 * depth {
                // Free every third tag taken so far, in both, so the hint finds some taken.
                if round % 3 == 2 {
                    let tag = 2 + round / 2 % depth;
                    assert_eq!(a.free_hinted(0, &hint_a, tag), b.free_hinted(0, &hint_b, tag));
                }
                let before = hint_b.load(Ordering::Relaxed);
                let fast = b.alloc_at_hint(&hint_b);
                if fast.is_none() {
                    assert_eq!(hint_b.load(Ordering::Relaxed), before, "depth {depth} round {round}");
                }
                let split = fast.or_else(|| b.alloc_past_hint(&hint_b));
                assert_eq!(a.alloc_hinted(0, &hint_a, false), split, "depth {depth} round {round}");
                assert_eq!(hint_a.load(Ordering::Relaxed), hint_b.load(Ordering::Relaxed));
            }
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

    #[test]
    fn a_queue_over_its_fair_share_yields_to_waiters() {
        let h = HostTags::new(5, 1).unwrap();
        // Pool of 4 normal tags. Nobody waits: a queue may hold all of them.
        assert!(!h.over_fair_share(|| 4, false));
        h.waiter_enter();
        // One other queue waits: we get ceil(4 / 2) = 2.
        assert!(!h.over_fair_share(|| 1, false));
        assert!(h.over_fair_share(|| 2, false));
        // The waiter itself is not limited by its own waiting.
        assert!(!h.over_fair_share(|| 3, true));
        h.waiter_enter();
        // Two waiters, we are one of them: share ceil(4 / 2) = 2.
        assert!(h.over_fair_share(|| 2, true));
        // Two others wait: share ceil(4 / 3) = 2.
        assert!(h.over_fair_share(|| 2, false) && !h.over_fair_share(|| 1, false));
        h.waiter_exit();
        h.waiter_exit();
        assert!(!h.over_fair_share(|| 4, false));
    }
}
