//! Synchronisation facade: the atomics of the SMID slot protocol and of the reset gate come
//! from here, so the same code runs on `core` atomics and, under `--cfg loom`, on loom's
//! model-checked ones.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};

/// Busy-wait hint; under loom, a yield to the model's scheduler.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// A full fence placed right after an atomic read-modify-write (Linux's
/// `smp_mb__after_atomic`): on x86-64 the RMW is a `lock`-prefixed instruction, itself a full
/// barrier, so only the compiler is held back; elsewhere, and under loom (whose SeqCst
/// accesses are not a total order, so Dekker's pattern needs the fence), `fence(SeqCst)`.
#[inline]
pub(crate) fn fence_after_rmw() {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    fence(Ordering::SeqCst);
}
