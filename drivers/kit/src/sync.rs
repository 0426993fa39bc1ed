//! Synchronisation facade: the gate's and the window's atomics are `core`'s in the kernel and
//! loom's model-checked ones under `--cfg loom` (`tests/loom.rs`). The barrier helpers are the
//! block layer's (`blk::barrier`), the same code under loom.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};

pub(crate) use blk::barrier::{fence_after_rmw, spin_loop};
