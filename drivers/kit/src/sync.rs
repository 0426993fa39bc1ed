//! Synchronisation facade: the gate's and the window's atomics are `core`'s in the kernel and
//! loom's model-checked ones under `--cfg loom` (`tests/loom.rs`).

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};

/// A full fence right after an atomic read-modify-write (Linux's `smp_mb__after_atomic`). On
/// x86-64 every atomic RMW is `lock`-prefixed and already a full barrier, so only the compiler
/// is kept from moving accesses across it; under loom and elsewhere it is `fence(SeqCst)`.
/// Callers put no other memory access between their RMW and this call.
#[inline]
pub(crate) fn fence_after_rmw() {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    fence(Ordering::SeqCst);
}

/// Busy-wait hint; under loom a yield to the model's scheduler, which lets it explore spin loops.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::hint::spin_loop();
}
