//! The queue usage counter behind freeze (Linux's `q_usage_counter` percpu_ref, as one atomic).
//!
//! One `usize`: the low bits count requests inside the queue (from `submit` until the request
//! is finished), the top bit says "frozen". Entering is one `fetch_add`; a frozen queue turns
//! the entry back. Freezing sets the bit; the freezer then waits until the count is zero.
//!
//! Who may call what concurrently: `try_enter`/`exit` from any CPU and interrupt context;
//! `set_frozen`/`clear_frozen` from the (serialised) freeze path; `is_drained` from anywhere.

use crate::sync::{AtomicUsize, Ordering};

const FROZEN: usize = 1 << (usize::BITS - 1);

/// Usage counter with a frozen flag.
pub struct UsageCounter {
    count: AtomicUsize,
}

impl Default for UsageCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl UsageCounter {
    /// Not frozen, no users.
    pub fn new() -> Self {
        Self {
            count: AtomicUsize::new(0),
        }
    }

    /// Enters the queue unless it is frozen. A `true` must be matched by one `exit`.
    #[inline]
    pub fn try_enter(&self) -> bool {
        // The increment and the FROZEN test are one RMW, so it is totally ordered with
        // `set_frozen`'s RMW: either we entered before the freeze (and the freezer waits for
        // our exit) or we see the bit and back out.
        let prev = self.count.fetch_add(1, Ordering::Acquire);
        if prev & FROZEN != 0 {
            self.exit();
            return false;
        }
        true
    }

    /// Leaves the queue.
    #[inline]
    pub fn exit(&self) {
        // Release pairs with the Acquire load in `is_drained`: everything the request did is
        // visible to the freezer once it sees the count reach zero.
        self.count.fetch_sub(1, Ordering::Release);
    }

    /// Blocks new entries.
    pub fn set_frozen(&self) {
        self.count.fetch_or(FROZEN, Ordering::AcqRel);
    }

    /// Admits new entries again.
    pub fn clear_frozen(&self) {
        self.count.fetch_and(!FROZEN, Ordering::AcqRel);
    }

    /// Frozen and no user left inside.
    pub fn is_drained(&self) -> bool {
        // Acquire pairs with the Release in `exit`.
        self.count.load(Ordering::Acquire) == FROZEN
    }

    /// Whether the frozen bit is set.
    pub fn is_frozen(&self) -> bool {
        self.count.load(Ordering::Relaxed) & FROZEN != 0
    }

    /// Users inside (racy snapshot; may include entries that are about to back out).
    pub fn in_flight(&self) -> usize {
        self.count.load(Ordering::Relaxed) & !FROZEN
    }
}
