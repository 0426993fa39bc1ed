//! The reset gate: submitters and reapers inside, or a reset alone.
//!
//! Every submission and every reply-queue walk runs inside the gate; a controller reset (and
//! the hand-back of a dead controller's requests) closes it, waits until nobody is inside, and
//! runs alone. A reader-writer lock does that with one reader count, which every CPU's every
//! I/O would then write twice: one cache line shared by all the controller's MSI-X vectors and
//! submitters, crossing sockets on a two-socket box at every I/O (the very shape of the
//! PREEMPT_RT regression this project starts from). Here each *lane* (a reply queue, which is
//! one CPU's or a few CPUs' in the vector-per-CPU layout) has its own padded count:
//!
//! - **enter** (`try_enter(lane)`): an increment of the lane's count, a full fence (the locked
//!   increment itself on x86), then a read of `closed`; closed: decrement and refuse.
//! - **close**: win `closed` (false -> true; closers exclude each other), SeqCst fence, then
//!   wait for every lane's count to read zero.
//!
//! Dekker's pattern: either the entering side sees `closed` or the closer sees its increment,
//! so no reader is inside once the closer saw every count at zero, and none enters until the
//! gate opens again. A reader's decrement is Release and the closer's loads Acquire: what the
//! reader did inside happens before the reset. Loom: `gate::loom_tests`.

use crate::sync::{AtomicBool, AtomicUsize, Ordering, fence, fence_after_rmw, spin_loop};
use alloc::boxed::Box;
use alloc::vec::Vec;

/// A lane's reader count, alone on its cache line.
#[repr(align(128))]
struct Lane(AtomicUsize);

/// See the module.
pub(crate) struct Gate {
    closed: AtomicBool,
    lanes: Box<[Lane]>,
}

/// A reader inside the gate (a submission section or a reply-queue walk).
pub(crate) struct Inside<'a> {
    count: &'a AtomicUsize,
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        // Release pairs with the closer's Acquire loads.
        self.count.fetch_sub(1, Ordering::Release);
    }
}

/// The gate closed: nobody inside until it is dropped.
pub(crate) struct Closed<'a> {
    gate: &'a Gate,
}

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        // Release: the reset's work happens before any later reader's (its SeqCst read).
        self.gate.closed.store(false, Ordering::Release);
    }
}

impl Gate {
    /// An open gate of `lanes` lanes (at least one).
    pub(crate) fn new(lanes: usize) -> Self {
        let lanes: Vec<Lane> = (0..lanes.max(1)).map(|_| Lane(AtomicUsize::new(0))).collect();
        Self {
            closed: AtomicBool::new(false),
            lanes: lanes.into_boxed_slice(),
        }
    }

    /// Enters through lane `lane` (folded into range), unless the gate is closed.
    #[inline]
    pub(crate) fn try_enter(&self, lane: usize) -> Option<Inside<'_>> {
        let count = &self.lanes[if lane < self.lanes.len() {
            lane
        } else {
            lane % self.lanes.len()
        }]
        .0;
        count.fetch_add(1, Ordering::Relaxed);
        // Full fence (free after x86's locked add): pairs with the closer's fence, so either we
        // see `closed` or the closer sees our increment (see the module).
        fence_after_rmw();
        if self.closed.load(Ordering::Relaxed) {
            count.fetch_sub(1, Ordering::Release);
            return None;
        }
        Some(Inside { count })
    }

    /// Closes the gate and waits until nobody is inside; another closer is waited for first.
    pub(crate) fn close(&self) -> Closed<'_> {
        while self
            .closed
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            spin_loop();
        }
        fence(Ordering::SeqCst);
        for lane in self.lanes.iter() {
            // Acquire pairs with the Release decrement of each reader leaving.
            while lane.0.load(Ordering::Acquire) != 0 {
                spin_loop();
            }
        }
        Closed { gate: self }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn readers_share_the_gate_and_a_closed_gate_refuses() {
        let gate = Gate::new(2);
        let a = gate.try_enter(0).expect("open");
        let b = gate.try_enter(7).expect("a lane past the end folds in");
        drop((a, b));
        let closed = gate.close();
        assert!(gate.try_enter(1).is_none(), "closed: nobody enters");
        drop(closed);
        assert!(gate.try_enter(1).is_some(), "open again");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// A reader on lane 1 and a closer: the closer never finds the reader inside (the reader
    /// marks its stay, the closer reads the mark once the gate is closed), a refused reader
    /// leaves no count behind (a second close does not wait forever), and the reader is not
    /// refused by a gate that was never closed while it tried.
    #[test]
    fn a_reset_never_runs_with_a_reader_inside() {
        loom::model(|| {
            let gate = Arc::new(Gate::new(2));
            let inside = Arc::new(AtomicUsize::new(0));
            let reader = {
                let (gate, inside) = (gate.clone(), inside.clone());
                thread::spawn(move || {
                    if let Some(_entered) = gate.try_enter(1) {
                        inside.store(1, Ordering::Relaxed);
                        inside.store(0, Ordering::Relaxed);
                        true
                    } else {
                        false
                    }
                })
            };
            let closed = gate.close();
            assert_eq!(inside.load(Ordering::Relaxed), 0, "a reader is inside a closed gate");
            drop(closed);
            reader.join().unwrap();
            let _closed = gate.close();
        });
    }
}
