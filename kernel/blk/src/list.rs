//! Intrusive lock-free MPSC stack of request indices (Linux's `llist`).
//!
//! Entries are `u32` indices; their links live in a separate [`Links`] array owned by whoever
//! owns the indices (the queue's request slots, or a driver's own table). Used for the per-CPU
//! software queues and the per-CPU completion lists.
//!
//! Who may call what concurrently (as in `include/linux/llist.h`):
//!
//! | operation    | vs `push` | vs `take_all` |
//! |--------------|-----------|---------------|
//! | `push`       | yes       | yes           |
//! | `take_all`   | yes       | yes           |
//!
//! There is no single-element pop, so there is no ABA problem: `take_all` is one `swap`.
//! An index may be on at most one list at a time; the caller's ownership protocol (the request
//! state machine) guarantees that.

use crate::sync::{AtomicU32, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;

/// The "no entry" link value.
pub const EMPTY: u32 = u32::MAX;

/// One link word per index: the next entry of whatever list the index is on.
pub struct Links {
    next: Box<[AtomicU32]>,
}

impl Links {
    /// Links for indices `0..len`.
    pub fn new(len: usize) -> Self {
        let next: Vec<AtomicU32> = (0..len).map(|_| AtomicU32::new(EMPTY)).collect();
        Self {
            next: next.into_boxed_slice(),
        }
    }

    /// Number of indices covered.
    pub fn len(&self) -> usize {
        self.next.len()
    }

    /// Whether no index is covered.
    pub fn is_empty(&self) -> bool {
        self.next.is_empty()
    }

    /// Relaxed: links are published by the Release CAS of `push` (or by the owner of a private
    /// chain) and read after the Acquire `swap` of `take_all`.
    #[inline]
    pub(crate) fn get(&self, idx: u32) -> u32 {
        self.next[idx as usize].load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn set(&self, idx: u32, next: u32) {
        self.next[idx as usize].store(next, Ordering::Relaxed);
    }
}

/// Head of an intrusive multi-producer stack; consumers take the whole stack at once.
pub struct TagStack {
    head: AtomicU32,
}

impl Default for TagStack {
    fn default() -> Self {
        Self::new()
    }
}

impl TagStack {
    /// An empty stack.
    pub fn new() -> Self {
        Self {
            head: AtomicU32::new(EMPTY),
        }
    }

    /// Pushes `idx`. Returns `true` when the stack was empty before, which is the caller's cue to
    /// kick the consumer (raise the IPI, set the pending bit) exactly once per batch.
    ///
    /// # Panics
    /// If `idx` is [`EMPTY`] or not covered by `links`.
    #[inline]
    pub fn push(&self, idx: u32, links: &Links) -> bool {
        assert!(
            idx != EMPTY && (idx as usize) < links.len(),
            "index {idx} not covered by links"
        );
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            links.set(idx, head);
            // Release pairs with the Acquire swap in `take_all`: the consumer sees our link
            // and everything the producer wrote about the entry before pushing it.
            match self
                .head
                .compare_exchange_weak(head, idx, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return head == EMPTY,
                Err(current) => head = current,
            }
        }
    }

    /// Takes every entry and returns them oldest first (push order).
    #[inline]
    pub fn take_all<'a>(&self, links: &'a Links) -> TakenList<'a> {
        TakenList {
            links,
            cur: reverse_chain(self.take_newest_first(), links),
        }
    }

    /// Takes every entry as a raw chain, newest first.
    #[inline]
    pub(crate) fn take_newest_first(&self) -> u32 {
        // Acquire pairs with the Release CAS in `push`.
        self.head.swap(EMPTY, Ordering::Acquire)
    }

    /// Whether the stack looked empty at the time of the load (a hint only).
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed) == EMPTY
    }
}

/// Reverses a privately owned chain in place; returns the new head.
pub(crate) fn reverse_chain(mut cur: u32, links: &Links) -> u32 {
    let mut prev = EMPTY;
    while cur != EMPTY {
        let next = links.get(cur);
        links.set(cur, prev);
        prev = cur;
        cur = next;
    }
    prev
}

/// Entries taken from a [`TagStack`], oldest first. The link of an entry is read before the
/// entry is yielded, so the caller may push a yielded index onto another list at once.
pub struct TakenList<'a> {
    links: &'a Links,
    cur: u32,
}

impl Iterator for TakenList<'_> {
    type Item = u32;
    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.cur == EMPTY {
            return None;
        }
        let cur = self.cur;
        self.cur = self.links.get(cur);
        Some(cur)
    }
}

/// A FIFO of indices threaded through [`Links`], owned by a single context (the holder of a
/// hardware queue's run token). Not concurrent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fifo {
    head: u32,
    tail: u32,
}

impl Fifo {
    pub(crate) const fn new() -> Self {
        Self {
            head: EMPTY,
            tail: EMPTY,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.head == EMPTY
    }

    /// Appends a privately owned chain given newest first (as taken from a [`TagStack`]),
    /// reversing it so that the FIFO keeps push order.
    #[inline(always)]
    pub(crate) fn append_newest_first(&mut self, newest: u32, links: &Links) {
        if newest == EMPTY {
            return;
        }
        let first = reverse_chain(newest, links);
        let last = newest;
        if self.head == EMPTY {
            self.head = first;
        } else {
            links.set(self.tail, first);
        }
        self.tail = last;
    }

    pub(crate) fn pop_front(&mut self, links: &Links) -> Option<u32> {
        if self.head == EMPTY {
            return None;
        }
        let idx = self.head;
        self.head = links.get(idx);
        if self.head == EMPTY {
            self.tail = EMPTY;
        }
        Some(idx)
    }

    pub(crate) fn push_front(&mut self, idx: u32, links: &Links) {
        links.set(idx, self.head);
        if self.head == EMPTY {
            self.tail = idx;
        }
        self.head = idx;
    }
}
