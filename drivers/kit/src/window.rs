//! The adaptive mode's polling window: open means the controller's vector is masked and the
//! submitters poll. Opening (mask, then mark open) and closing (mark closed, then unmask) each run
//! under a try-lock that is never spun on: an interrupt that finds a switch in progress simply
//! opens no window, and a poll that finds one tries again on its next pass. Without it, an
//! interrupt opening a window on one CPU and a poll closing it on another could interleave
//! "closed, unmask" between "mask" and "open" and leave the vector masked with the window closed:
//! no one would poll and no interrupt would come. `tests/loom.rs` checks the invariant.

use crate::sync::{AtomicBool, Ordering};

/// One polling window (see the module docs).
pub struct PollWindow {
    open: AtomicBool,
    switching: AtomicBool,
}

impl Default for PollWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl PollWindow {
    pub fn new() -> Self {
        Self {
            open: AtomicBool::new(false),
            switching: AtomicBool::new(false),
        }
    }

    /// Whether the window is open. Acquire pairs with the Release stores in `open`/`close`: a
    /// poller that sees it open also sees the mask write made before.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    fn try_switch(&self) -> bool {
        // Acquire pairs with the Release in `end_switch`: the previous switch's mask write and
        // `open` store are seen before this one decides.
        self.switching
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    fn end_switch(&self) {
        self.switching.store(false, Ordering::Release);
    }

    /// Masks (through `mask`) and opens the window. False when it was already open or another
    /// switch was running (nothing done).
    pub fn open(&self, mask: impl FnOnce()) -> bool {
        if self.is_open() || !self.try_switch() {
            return false;
        }
        let opened = !self.open.load(Ordering::Relaxed);
        if opened {
            mask();
            self.open.store(true, Ordering::Release);
        }
        self.end_switch();
        opened
    }

    /// Closes the window and unmasks (through `unmask`). False when it was not open or another
    /// switch was running (nothing done; the caller retries on its next pass).
    pub fn close(&self, unmask: impl FnOnce()) -> bool {
        if !self.try_switch() {
            return false;
        }
        let closed = self.open.load(Ordering::Relaxed);
        if closed {
            self.open.store(false, Ordering::Release);
            unmask();
        }
        self.end_switch();
        closed
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn open_and_close_switch_once_each() {
        let w = PollWindow::new();
        let mut masks = 0;
        assert!(w.open(|| masks += 1));
        assert!(!w.open(|| masks += 1), "already open");
        assert!(w.is_open());
        let mut unmasks = 0;
        assert!(w.close(|| unmasks += 1));
        assert!(!w.close(|| unmasks += 1), "already closed");
        assert_eq!((masks, unmasks), (1, 1));
        assert!(!w.is_open());
    }

    #[test]
    fn a_switch_in_progress_makes_open_and_close_back_off() {
        let w = PollWindow::new();
        assert!(w.try_switch());
        assert!(!w.open(|| panic!("masked during a switch")));
        w.end_switch();
        assert!(w.open(|| {}));
        assert!(w.try_switch());
        assert!(!w.close(|| panic!("unmasked during a switch")));
        assert!(w.is_open(), "the closer retries on its next pass");
        w.end_switch();
        assert!(w.close(|| {}));
    }
}
