//! Synchronisation facade: the atomics of the SMID slot protocol come from here, so the same
//! code runs on `core` atomics and, under `--cfg loom`, on loom's model-checked ones. (The reset
//! gate is `drvkit::gate`, model-checked there.)

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
