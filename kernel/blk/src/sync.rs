//! Synchronisation facade.
//!
//! Every atomic that takes part in the block layer's lock-free protocols is imported from here, so
//! that the same code runs on `core` atomics in the kernel and on loom's model-checked atomics
//! under `--cfg loom` (the pattern `tokio-rs/bytes` uses). Statistics counters deliberately do
//! not go through this module: they carry no synchronisation, and keeping them out of the model
//! keeps loom's state space small.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};

/// A full fence placed immediately after an atomic read-modify-write (Linux's
/// `smp_mb__after_atomic`): in the protocols it stands for `fence(SeqCst)`, and under loom and
/// on other targets it is exactly that. On x86-64 every atomic RMW is a `lock`-prefixed
/// instruction, which is itself a full barrier (Intel SDM vol. 3, 9.2.2: locked instructions
/// are not reordered with earlier or later loads and stores), so only the compiler must be
/// kept from moving memory accesses across it. Callers must not put any other memory access
/// between their RMW and this call.
#[inline]
pub fn fence_after_rmw() {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    fence(Ordering::SeqCst);
}

/// Busy-wait hint. Under loom it yields to the model scheduler, which is what lets loom explore
/// spin loops at all.
#[inline]
pub fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::hint::spin_loop();
}

/// Pads and aligns a value to 128 bytes, two cache lines, so that per-CPU hot words do not share
/// a line (x86 prefetches lines in adjacent pairs, hence 128 rather than 64).
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct CachePadded<T>(pub T);

impl<T> Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for CachePadded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// A minimal test-and-test-and-set spinlock.
///
/// It exists for two cold paths (freeze depth, the "locked" quiesce variant's queue lock) and
/// for the deliberately locked quiesce check that reproduces the regressing Linux design. It
/// never blocks in the scheduler sense, so it may be taken in interrupt context as long as the
/// holder cannot be interrupted by a path that takes it again.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `value` to one holder at a time (see `lock`), so sharing
// the lock between threads is sound whenever the protected value may be sent between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the value; no thread-affine state is involved.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// Creates an unlocked lock around `value`.
    pub fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock if it is free; never spins.
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        // Acquire pairs with the Release store in `SpinGuard::drop`.
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then_some(SpinGuard { lock: self })
    }

    /// Spins until the lock is free, then takes it.
    pub fn lock(&self) -> SpinGuard<'_, T> {
        loop {
            // Acquire pairs with the Release store in `SpinGuard::drop`: the previous holder's
            // writes to `value` are visible once we own the lock.
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return SpinGuard { lock: self };
            }
            while self.locked.load(Ordering::Relaxed) {
                spin_loop();
            }
        }
    }
}

/// Proof of holding a [`SpinLock`]; unlocks on drop.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while `locked` is held by us, so no other reference to
        // `value` exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference derived from the
        // guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        // Release pairs with the Acquire CAS in `SpinLock::lock`.
        self.lock.locked.store(false, Ordering::Release);
    }
}
