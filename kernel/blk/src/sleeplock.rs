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
//!   waiter bitmap and parks in [`Platform::wait_for_wake`] until an unlock wakes it through
//!   [`Platform::wake`], then pays `reschedule_cost_ns` (spinning on the platform clock) before
//!   it retries, as a woken thread is scheduled in before it runs (the `Sleeping` variant).
//!
//! Every unlock wakes one registered waiter (the first after the unlocking CPU, round robin),
//! as rt_mutex wakes its top waiter. A woken waiter retries; if another CPU took the lock
//! first (the lock can be stolen, as rt_mutex allows), it parks again, still registered, and a
//! later unlock wakes it.
//!
//! No lost wake-up: the waiter sets its bit, runs a full fence, then tries the lock; the
//! unlocker releases the lock, runs a full fence, then reads the bits. If the waiter's try saw
//! the lock held, that read is coherence-ordered before the release, so the waiter's fence
//! precedes the unlocker's in the single total order of SeqCst fences and the unlocker sees
//! the bit (loom model `sleeping_lock_never_loses_a_wake_up`). The platform's part:
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
use crate::sync::{AtomicU32, AtomicU64, Ordering, fence, spin_loop};
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
    /// One bit per CPU parked (or about to park) waiting for the lock.
    waiters: Box<[AtomicU64]>,
}

impl SleepLock {
    /// An unlocked lock for CPUs `0..ncpus`.
    pub fn new(ncpus: usize) -> Self {
        Self {
            locked: AtomicU32::new(0),
            waiters: (0..ncpus.max(1).div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
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
        let word = &self.waiters[cpu / 64];
        let bit = 1u64 << (cpu % 64);
        let mut sleeps = 0;
        loop {
            word.fetch_or(bit, Ordering::Relaxed);
            // Pairs with the fence in `unlock`: either our try below sees the lock free, or
            // the unlocker sees our bit and wakes us.
            fence(Ordering::SeqCst);
            if self.try_take() {
                word.fetch_and(!bit, Ordering::Relaxed);
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
        // Round robin: the first waiter after us, so that no CPU is always last.
        let nwords = self.waiters.len();
        let start = (cpu / 64 + 1) % nwords;
        let own_bit = cpu % 64;
        for step in 0..=nwords {
            let w = (start + step) % nwords;
            let mut bits = self.waiters[w].load(Ordering::Relaxed);
            if w == cpu / 64 {
                // In our own word, prefer CPUs above us, then wrap to those below.
                let above = if own_bit == 63 {
                    0
                } else {
                    bits & (u64::MAX << (own_bit + 1))
                };
                bits = if step < nwords && above != 0 { above } else { bits };
            }
            if bits != 0 {
                let target = w * 64 + bits.trailing_zeros() as usize;
                platform.wake(target);
                return Some(target);
            }
        }
        None
    }

    #[doc(hidden)]
    pub fn debug_waiters(&self) -> u64 {
        self.waiters[0].load(Ordering::Relaxed)
    }

    /// Whether the lock is held (a hint).
    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed) != 0
    }
}
