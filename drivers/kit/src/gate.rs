//! A reset gate for drivers: submitters and reapers inside, or a reset alone.
//!
//! Every submission (and, for a driver that wants it, every reply-queue walk) runs inside the
//! gate; a controller reset closes it, waits until nobody is inside, and runs alone. A
//! reader-writer lock, or one count of submitters, does that with one counter that every CPU's
//! every I/O writes twice: one cache line shared by all the controller's MSI-X vectors and
//! submitters, crossing sockets on a two-socket box at every I/O (the very shape of the
//! PREEMPT_RT regression this project starts from). Here each *lane* (a reply queue, or a CPU,
//! folded into the lanes there are) has its own padded count. Both MegaRAID drivers use it: the
//! Fusion one with a lane per reply queue, the MFI one with a lane per submitting CPU.
//!
//! - **enter** (`try_enter(lane)`): an increment of the lane's count, a full fence (the locked
//!   increment itself on x86), then a read of `closed`; closed: decrement and refuse.
//! - **close**: win `closed` (false -> true; closers exclude each other), SeqCst fence, then
//!   wait for every lane's count to read zero ([`Gate::close`]; [`Gate::close_within`] gives up
//!   after the caller's bound and opens the gate again).
//!
//! Dekker's pattern: either the entering side sees `closed` or the closer sees its increment,
//! so no reader is inside once the closer saw every count at zero, and none enters until the
//! gate opens again. A reader's decrement is Release and the closer's loads Acquire: what the
//! reader did inside happens before the reset. Loom: `tests/loom.rs`,
//! `gate_reset_never_runs_with_a_reader_inside`.

use crate::sync::{AtomicBool, AtomicUsize, Ordering, fence, fence_after_rmw, spin_loop};
use alloc::boxed::Box;
use alloc::vec::Vec;

/// A lane's reader count, alone on its cache line.
#[repr(align(128))]
struct Lane(AtomicUsize);

/// See the module.
pub struct Gate {
    closed: AtomicBool,
    lanes: Box<[Lane]>,
}

/// A reader inside the gate (a submission section or a reply-queue walk).
pub struct Inside<'a> {
    count: &'a AtomicUsize,
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        // Release pairs with the closer's Acquire loads.
        self.count.fetch_sub(1, Ordering::Release);
    }
}

/// The gate closed: nobody inside until it is dropped.
pub struct Closed<'a> {
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
    pub fn new(lanes: usize) -> Self {
        let lanes: Vec<Lane> = (0..lanes.max(1)).map(|_| Lane(AtomicUsize::new(0))).collect();
        Self {
            closed: AtomicBool::new(false),
            lanes: lanes.into_boxed_slice(),
        }
    }

    /// Enters through lane `lane` (folded into range), unless the gate is closed.
    #[inline]
    pub fn try_enter(&self, lane: usize) -> Option<Inside<'_>> {
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
        // Acquire pairs with the Release that opened the gate again (`Closed`'s drop): a reader
        // that finds it open after a reset sees what the reset did. (Relaxed here let such a
        // reader race with the reset's last accesses; the model with a plain cell found it.)
        if self.closed.load(Ordering::Acquire) {
            count.fetch_sub(1, Ordering::Release);
            return None;
        }
        Some(Inside { count })
    }

    /// Closes the gate and waits until nobody is inside; another closer is waited for first.
    pub fn close(&self) -> Closed<'_> {
        match self.close_within(|| {
            spin_loop();
            true
        }) {
            Some(closed) => closed,
            None => unreachable!("a wait that never gives up"),
        }
    }

    /// [`Gate::close`] with a bounded wait: `wait()` runs between looks (at another closer, then
    /// at the readers) and says whether to go on looking; when it says no, the gate is left as it
    /// was (opened again if this call closed it) and `None` is returned.
    pub fn close_within(&self, mut wait: impl FnMut() -> bool) -> Option<Closed<'_>> {
        while self
            .closed
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            if !wait() {
                return None;
            }
        }
        // From here the gate is ours: dropping `closed` opens it, whichever way this returns.
        let closed = Closed { gate: self };
        fence(Ordering::SeqCst);
        for lane in self.lanes.iter() {
            // Acquire pairs with the Release decrement of each reader leaving.
            while lane.0.load(Ordering::Acquire) != 0 {
                if !wait() {
                    return None;
                }
            }
        }
        Some(closed)
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

    #[test]
    fn a_bounded_close_gives_up_and_opens_the_gate_again() {
        let gate = Gate::new(2);
        let reader = gate.try_enter(1).expect("open");
        let mut looks = 0;
        assert!(
            gate.close_within(|| {
                looks += 1;
                looks < 5
            })
            .is_none(),
            "a reader inside: the close gives up"
        );
        assert_eq!(looks, 5);
        assert!(gate.try_enter(0).is_some(), "given up: open again");
        drop(reader);
        assert!(gate.close_within(|| false).is_some(), "nobody inside: no wait needed");
    }
}
