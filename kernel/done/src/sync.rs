//! Synchronisation facade: the board's atomics are `core`'s in the kernel and loom's
//! model-checked ones under `--cfg loom`. The refusal counter is a statistic and stays a plain
//! `core` atomic, so it adds no states to the model.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU8, AtomicU64, Ordering};
