//! Synchronisation facade: the atomics of the SMID slot protocol and of the reset gate come
//! from here, so the same code runs on `core` atomics and, under `--cfg loom`, on loom's
//! model-checked ones.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};

/// Busy-wait hint and the full fence after a read-modify-write: the block layer's, so that one
/// definition serves every protocol (see `blk::barrier`).
pub(crate) use blk::barrier::{fence_after_rmw, spin_loop};
