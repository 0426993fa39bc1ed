//! The queue lock of the locked quiesce variants, with an optional sleeping slow path that
//! models PREEMPT_RT's `spinlock_t`.
//!
//! On PREEMPT_RT a `spinlock_t` is an rt_mutex and interrupt handlers run as threads: a CPU
//! that finds the lock taken does not spin, it blocks; the holder's unlock wakes the top
//! waiter, which must then be scheduled in again before it can retry. Every contended
//! acquisition therefore costs a sleep, a wake-up and a reschedule. That is what turned the
//! locked quiesce re-check (Linux commit 679b1874eba7) from a small cost into a large one.
//!
//! [`SleepLock`] has two ways to acquire it, usable together on the same lock:
//! - [`SleepLock::lock_spinning`]: test-and-test-and-set (the `Locked` variant, and cold
//!   paths);
//! - [`SleepLock::lock_sleeping`]: one CAS; if the lock is taken, the CPU registers in the
//!   per-CPU waiter count and parks in [`Platform::wait_for_wake`] until an unlock wakes it through
//!   [`Platform::wake`], then pays `reschedule_cost_ns` (spinning on the platform clock) before
//!   it retries, as a woken thread is scheduled in before it runs (the `Sleeping` variant).
//!
//! Every unlock wakes one registered waiter (the first after the unlocking CPU, round robin),
//! as rt_mutex wakes its top waiter. A woken waiter retries; if another CPU took the lock
//! first (the lock can be stolen, as rt_mutex allows), it parks again, still registered, and a
//! later unlock wakes it.
//!
//! Waiters are counted per CPU, not flagged: two contexts of one CPU (a thread and the interrupt
//! handler that preempted it; the stress tests' interrupt thread) may both wait. With one flag,
//! the first to get the lock cleared it while the other still slept, and no unlock ever woke
//! that one again (a freeze that never drained, about one run in ten under load).
//!
//! No lost wake-up: the waiter counts itself in, runs a full fence, then tries the lock; the
//! unlocker releases the lock, runs a full fence, then reads the counts. If the waiter's try saw
//! the lock held, that read is coherence-ordered before the release, so the waiter's fence
//! precedes the unlocker's in the single total order of SeqCst fences and the unlocker sees
//! the count (loom model `sleeping_lock_never_loses_a_wake_up`). The platform's part:
//! `wait_for_wake` must return if `wake` was called for that CPU since it last returned (a
//! per-CPU pending flag: a wake that comes before the wait is not lost).
//!
//! What it does **not** model: priorities and priority inheritance (every waiter is equal),
//! the scheduler's run queue (a woken CPU pays a fixed cost rather than waiting behind other
//! threads), adaptive spinning (RT's rt_mutex spins while the owner is running on another
//! CPU; this lock never spins in sleeping mode), and the cost of the threaded interrupt
//! handler itself beyond the reschedule. On a machine without a wake mechanism (the default
//! `Platform` hooks) `wait_for_wake` returns at once and the sleeping path degrades to spinning
//! with the reschedule cost charged per retry.

use crate::driver::Platform;
use crate::sync::{AtomicU32, Ordering, fence, spin_loop};
use alloc::boxed::Box;

/// What one sleeping acquisition cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Acquisition {
    /// The lock was taken on the first try.
    pub uncontended: bool,
    /// Times the CPU parked in `wait_for_wake`.
    pub sleeps: u32,
}

/// A lock with a spinning and a sleeping way in (see the module docs).
pub struct SleepLock {
    /// 1 while held.
    locked: AtomicU32,
    /// Per CPU, how many of its contexts are parked (or about to park) waiting for the lock.
    waiters: Box<[AtomicU32]>,
}

impl SleepLock {
    /// An unlocked lock for CPUs `0..ncpus`.
    pub fn new(ncpus: usize) -> Self {
        Self {
            locked: AtomicU32::new(0),
            waiters: (0..ncpus.max(1)).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    #[inline]
    fn try_take(&self) -> bool {
        // Acquire pairs with the Release store in `unlock`: the previous holder's critical
        // section happens before ours.
        self.locked
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Spins until the lock is free, then takes it. Returns whether it was free at once.
    pub fn lock_spinning(&self) -> bool {
        if self.try_take() {
            return true;
        }
        loop {
            while self.locked.load(Ordering::Relaxed) != 0 {
                spin_loop();
            }
            if self.try_take() {
                return false;
            }
        }
    }

    /// Takes the lock for CPU `cpu`, parking in `platform.wait_for_wake(cpu)` while it is
    /// held and paying `reschedule_cost_ns` after each wake-up. `cpu` must be below the
    /// `ncpus` the lock was made for.
    pub fn lock_sleeping(&self, cpu: usize, platform: &dyn Platform, reschedule_cost_ns: u64) -> Acquisition {
        if self.try_take() {
            return Acquisition {
                uncontended: true,
                sleeps: 0,
            };
        }
        let count = &self.waiters[cpu];
        count.fetch_add(1, Ordering::Relaxed);
        let mut sleeps = 0;
        loop {
            // Pairs with the fence in `unlock`: either our try below sees the lock free, or
            // the unlocker sees our count and wakes us.
            fence(Ordering::SeqCst);
            if self.try_take() {
                count.fetch_sub(1, Ordering::Relaxed);
                return Acquisition {
                    uncontended: false,
                    sleeps,
                };
            }
            platform.wait_for_wake(cpu);
            sleeps += 1;
            // The woken thread has to be scheduled in before it can run again.
            if reschedule_cost_ns != 0 {
                let woke = platform.now_ns();
                while platform.now_ns().saturating_sub(woke) < reschedule_cost_ns {
                    spin_loop();
                }
            }
        }
    }

    /// Releases the lock taken by CPU `cpu` (either way) and wakes one parked waiter, if any.
    /// Returns the CPU it woke.
    pub fn unlock(&self, cpu: usize, platform: &dyn Platform) -> Option<usize> {
        // Release pairs with the Acquire CAS in `try_take`.
        self.locked.store(0, Ordering::Release);
        // Pairs with the fence in `lock_sleeping`.
        fence(Ordering::SeqCst);
        // Round robin: the first waiting CPU after us, so that no CPU is always last; ourselves
        // last (another context of this CPU may wait).
        let n = self.waiters.len();
        for step in 1..=n {
            let target = (cpu + step) % n;
            if self.waiters[target].load(Ordering::Relaxed) != 0 {
                platform.wake(target);
                return Some(target);
            }
        }
        None
    }

    #[doc(hidden)]
    pub fn debug_waiters(&self) -> u64 {
        // The CPUs with a waiter, as a bitmap of the first 64.
        self.waiters
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, c)| c.load(Ordering::Relaxed) != 0)
            .fold(0, |bits, (i, _)| bits | 1 << i)
    }

    /// Whether the lock is held (a hint).
    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed) != 0
    }
}
