//! The queue usage counter behind freeze (Linux's `q_usage_counter`, a `percpu_ref`): per CPU.
//!
//! Every request is counted from `submit` until it is finished. A single shared counter would
//! put one cache line that every submitting and every completing CPU writes, twice per I/O, on
//! the hot path: on a two-socket box, a line bouncing between sockets at every I/O. So each CPU
//! has its own padded count, *entries on this CPU minus exits on this CPU* (wrapping: a CPU
//! that completes more than it submits goes "negative"); the number of requests inside is the
//! sum over CPUs. A `frozen` flag refuses new entries.
//!
//! The protocol (Dekker's, with one full barrier on each side):
//! - **enter** (`try_enter`): increment this CPU's count with a read-modify-write (on x86 a
//!   locked instruction, itself a full barrier: `fence_after_rmw`), then read `frozen`; if set,
//!   back out (decrement) and refuse.
//! - **freeze** (`set_frozen`): set `frozen`, full fence; then `is_drained` sums the counts.
//!
//! Either the entry sees `frozen` (and backs out) or the freezer, reading after its fence, sees
//! the entry's increment: every entry that was admitted is in the freezer's sum. An exit can
//! only lower the sum after its entry was counted, so a sum of zero means every admitted
//! request has exited; a sum read while exits are still on their way reads high, never low
//! (the freezer waits longer, never too little). An exit is a Release decrement of the exiting
//! CPU's own count (no barrier needed: nothing is decided on it), paired with the Acquire loads
//! of the sum, so everything a request did happens before the freezer sees it drained.
//!
//! Only a CPU writes its own count (the `cpu` a caller passes is the CPU it runs on). On bare
//! metal, where the kernel also enters with interrupts off, the exit is therefore a plain
//! decrement (no `lock`); host tests run several threads under one CPU number and keep locked
//! decrements. Reading the number inside means summing every CPU's count: the freezer does, and
//! the tag-sharing fairness, but only while another queue is starved of tags.
//!
//! Who may call what concurrently: `try_enter`/`exit` from any CPU and interrupt context;
//! `set_frozen`/`clear_frozen` from the (serialised) freeze path; `is_drained` from anywhere.

use crate::sync::{AtomicBool, AtomicUsize, CachePadded, Ordering, fence, fence_after_rmw};

/// Usage counter with a frozen flag. The per-CPU counts are the caller's (the queue keeps
/// each CPU's in that CPU's block of counters, which a submission and a completion already
/// hold): `count` is the calling CPU's, `counts` all of them.
pub struct UsageCounter {
    frozen: CachePadded<AtomicBool>,
}

impl Default for UsageCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl UsageCounter {
    /// Not frozen.
    pub fn new() -> Self {
        Self {
            frozen: CachePadded(AtomicBool::new(false)),
        }
    }

    /// Enters the queue through the calling CPU's `count` unless it is frozen. A `true` must be
    /// matched by one `exit` (on any CPU, through that CPU's count).
    #[inline]
    pub fn try_enter(&self, count: &AtomicUsize) -> bool {
        count.fetch_add(1, Ordering::Relaxed);
        // Full fence after the increment (free after x86's locked add). Pairs with the fence in
        // `set_frozen`: either we see `frozen` below, or the freezer's sum sees our increment.
        fence_after_rmw();
        // Acquire pairs with `clear_frozen`'s Release: an entry admitted after an unfreeze sees
        // what was done while the queue was frozen (as the drivers' reset gate's readers after a reset).
        if self.frozen.load(Ordering::Acquire) {
            Self::back_out(count);
            return false;
        }
        true
    }

    /// [`UsageCounter::try_enter`] for `n` users at once (a batch's requests): one increment
    /// and one look at `frozen` for all of them. A `true` must be matched by `n` exits, one by
    /// one or through [`UsageCounter::exit_n`].
    #[inline]
    pub fn try_enter_n(&self, count: &AtomicUsize, n: usize) -> bool {
        count.fetch_add(n, Ordering::Relaxed);
        // The same protocol as `try_enter`, for the `n` entries together.
        fence_after_rmw();
        if self.frozen.load(Ordering::Acquire) {
            Self::back_out_n(count, n);
            return false;
        }
        true
    }

    #[cold]
    fn back_out(count: &AtomicUsize) {
        Self::back_out_n(count, 1);
    }

    #[cold]
    fn back_out_n(count: &AtomicUsize, n: usize) {
        // Release, like `exit`: the freezer may be summing.
        count.fetch_sub(n, Ordering::Release);
    }

    /// Leaves the queue through the calling CPU's `count` (not necessarily the entering CPU's).
    #[inline]
    pub fn exit(&self, count: &AtomicUsize) {
        // Release pairs with the Acquire loads in `is_drained`: everything the request did is
        // visible to the freezer once it sees this exit. Only this CPU writes its count, with
        // interrupts off on bare metal: a plain decrement (see the module).
        #[cfg(all(target_os = "none", not(loom)))]
        count.store(count.load(Ordering::Relaxed).wrapping_sub(1), Ordering::Release);
        #[cfg(not(all(target_os = "none", not(loom))))]
        count.fetch_sub(1, Ordering::Release);
    }

    /// [`UsageCounter::exit`] of `n` users at once (entries of a batch that were not used).
    #[inline]
    pub fn exit_n(&self, count: &AtomicUsize, n: usize) {
        // As `exit`: Release, and a plain update on bare metal.
        #[cfg(all(target_os = "none", not(loom)))]
        count.store(count.load(Ordering::Relaxed).wrapping_sub(n), Ordering::Release);
        #[cfg(not(all(target_os = "none", not(loom))))]
        count.fetch_sub(n, Ordering::Release);
    }

    /// Blocks new entries.
    pub fn set_frozen(&self) {
        self.frozen.store(true, Ordering::Relaxed);
        // Pairs with the fence after `try_enter`'s increment (see the module).
        fence(Ordering::SeqCst);
    }

    /// Admits new entries again.
    pub fn clear_frozen(&self) {
        self.frozen.store(false, Ordering::Release);
    }

    /// The per-CPU counts' sum: requests inside, reading high while exits are on their way.
    fn sum<'c>(counts: impl Iterator<Item = &'c AtomicUsize>) -> usize {
        // Acquire pairs with the Release in `exit`.
        counts.fold(0usize, |sum, c| sum.wrapping_add(c.load(Ordering::Acquire)))
    }

    /// Frozen and no user left inside.
    pub fn is_drained<'c>(&self, counts: impl Iterator<Item = &'c AtomicUsize>) -> bool {
        self.frozen.load(Ordering::Relaxed) && Self::sum(counts) == 0
    }

    /// Whether the frozen flag is set.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Relaxed)
    }

    /// Users inside (racy snapshot; may include entries that are about to back out): the sum
    /// over CPUs, a negative transient read as 0.
    pub fn in_flight<'c>(&self, counts: impl Iterator<Item = &'c AtomicUsize>) -> usize {
        let sum = Self::sum(counts);
        if sum > usize::MAX / 2 { 0 } else { sum }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn counts(n: usize) -> alloc::vec::Vec<AtomicUsize> {
        (0..n).map(|_| AtomicUsize::new(0)).collect()
    }

    #[test]
    fn a_request_counts_until_it_exits_on_any_cpu() {
        let (usage, cpu) = (UsageCounter::new(), counts(4));
        assert!(usage.try_enter(&cpu[0]));
        assert!(usage.try_enter(&cpu[2]));
        assert_eq!(usage.in_flight(cpu.iter()), 2);
        // Completed on another CPU than they entered on: CPU 3's count goes "negative".
        usage.exit(&cpu[3]);
        assert_eq!(usage.in_flight(cpu.iter()), 1);
        usage.set_frozen();
        assert!(!usage.is_drained(cpu.iter()), "one request is still inside");
        usage.exit(&cpu[3]);
        assert!(usage.is_drained(cpu.iter()));
        assert_eq!(usage.in_flight(cpu.iter()), 0);
    }

    #[test]
    fn a_frozen_counter_refuses_and_counts_nothing() {
        let (usage, cpu) = (UsageCounter::new(), counts(2));
        usage.set_frozen();
        assert!(!usage.try_enter(&cpu[1]));
        assert!(usage.is_drained(cpu.iter()), "a refused entry backs out");
        assert_eq!(usage.in_flight(cpu.iter()), 0);
        usage.clear_frozen();
        assert!(!usage.is_drained(cpu.iter()), "drained means frozen and empty");
        assert!(usage.try_enter(&cpu[1]));
        assert_eq!(usage.in_flight(cpu.iter()), 1);
        usage.exit(&cpu[0]);
        assert_eq!(usage.in_flight(cpu.iter()), 0);
    }

    #[test]
    fn a_batch_enters_at_once_and_exits_one_by_one_or_together() {
        let (usage, cpu) = (UsageCounter::new(), counts(2));
        assert!(usage.try_enter_n(&cpu[0], 5));
        assert_eq!(usage.in_flight(cpu.iter()), 5);
        usage.exit(&cpu[1]);
        usage.exit_n(&cpu[0], 3);
        assert_eq!(usage.in_flight(cpu.iter()), 1);
        usage.set_frozen();
        assert!(!usage.try_enter_n(&cpu[0], 4), "frozen: refused and backed out");
        assert_eq!(usage.in_flight(cpu.iter()), 1);
        usage.exit(&cpu[1]);
        assert!(usage.is_drained(cpu.iter()));
    }

    #[test]
    fn a_negative_transient_reads_as_empty() {
        let (usage, cpu) = (UsageCounter::new(), counts(2));
        // An exit seen before its entry (another CPU's count not yet summed) must not read as
        // a huge number of requests.
        usage.exit(&cpu[1]);
        assert_eq!(usage.in_flight(cpu.iter()), 0);
        assert!(usage.try_enter(&cpu[0]));
        assert_eq!(usage.in_flight(cpu.iter()), 0);
    }
}
