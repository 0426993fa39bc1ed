//! The single-consumer gate around reply-queue draining.
//!
//! Whoever finds the gate taken returns at once ("contended"); the holder, after releasing it,
//! re-checks for work and goes round again. Lock and unlock are both `AcqRel` swaps: a loser's swap
//! is a release that the holder's unlocking swap reads from, so everything the loser saw before
//! trying (the producer index that woke it) happens-before the holder's re-check. That is what
//! makes it impossible to strand a completion between "holder finished draining" and "holder
//! released the gate". The loom model below checks it.

// Loom is a dev-dependency, so only the crate's own test build can use it.
#[cfg(not(all(loom, test)))]
use core::sync::atomic::{AtomicBool, Ordering};
#[cfg(all(loom, test))]
use loom::sync::atomic::{AtomicBool, Ordering};

/// Outcome of [`ReapGate::run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GateOutcome {
    /// Drained until no work was left.
    Idle,
    /// Another context holds the gate; it will see this caller's work.
    Contended,
    /// Gave up after `rounds` with work still pending; call again.
    MorePending,
}

pub(crate) struct ReapGate {
    busy: AtomicBool,
}

impl ReapGate {
    pub(crate) fn new() -> Self {
        Self {
            busy: AtomicBool::new(false),
        }
    }

    /// Takes the gate if free (a controller reset holds it across the reset).
    pub(crate) fn try_lock(&self) -> bool {
        !self.busy.swap(true, Ordering::AcqRel)
    }

    /// Releases a gate taken with `try_lock`.
    pub(crate) fn unlock(&self) {
        self.busy.swap(false, Ordering::AcqRel);
    }

    /// Runs `drain` under the gate until `pending()` is false after a release, at most `rounds`
    /// times.
    pub(crate) fn run(&self, rounds: u32, mut drain: impl FnMut(), pending: impl Fn() -> bool) -> GateOutcome {
        for _ in 0..rounds {
            if self.busy.swap(true, Ordering::AcqRel) {
                return GateOutcome::Contended;
            }
            drain();
            self.busy.swap(false, Ordering::AcqRel);
            if !pending() {
                return GateOutcome::Idle;
            }
        }
        GateOutcome::MorePending
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use alloc::vec::Vec;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicU32;

    /// Two "interrupts" each publish one completion (producer index) and then reap. Whatever the
    /// interleaving, when both have returned everything produced has been consumed: no completion
    /// is stranded by a loser that returned `Contended`.
    #[test]
    fn no_completion_is_stranded() {
        loom::model(|| {
            let produced = Arc::new(AtomicU32::new(0));
            let consumed = Arc::new(AtomicU32::new(0));
            let gate = Arc::new(ReapGate::new());
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let (produced, consumed, gate) = (produced.clone(), consumed.clone(), gate.clone());
                    loom::thread::spawn(move || {
                        // The device's producer store (Release, like QEMU's PI write).
                        produced.fetch_add(1, Ordering::Release);
                        gate.run(
                            8,
                            || {
                                // Only the gate holder touches `consumed`.
                                let p = produced.load(Ordering::Acquire);
                                consumed.store(p, Ordering::Relaxed);
                            },
                            || produced.load(Ordering::Acquire) != consumed.load(Ordering::Relaxed),
                        )
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(consumed.load(Ordering::Relaxed), 2);
        });
    }
}
