//! The adaptive mode's polling window: open means the controller's vector is masked and the
//! submitters poll. Opening (mask, then mark open) and closing (mark closed, then unmask) each run
//! under a try-lock that is never spun on: an interrupt that finds a switch in progress simply
//! opens no window, and a poll that finds one tries again on its next pass. Without it, an
//! interrupt opening a window on one CPU and a poll closing it on another could interleave
//! "closed, unmask" between "mask" and "open" and leave the vector masked with the window closed:
//! no one would poll and no interrupt would come. The loom model below checks the invariant.

#[cfg(not(all(loom, test)))]
use core::sync::atomic::{AtomicBool, Ordering};
#[cfg(all(loom, test))]
use loom::sync::atomic::{AtomicBool, Ordering};

pub(crate) struct PollWindow {
    open: AtomicBool,
    switching: AtomicBool,
}

impl PollWindow {
    pub(crate) fn new() -> Self {
        Self {
            open: AtomicBool::new(false),
            switching: AtomicBool::new(false),
        }
    }

    /// Whether the window is open. Acquire pairs with the Release stores in `open`/`close`: a
    /// poller that sees it open also sees the mask write made before.
    pub(crate) fn is_open(&self) -> bool {
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
    pub(crate) fn open(&self, mask: impl FnOnce()) -> bool {
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
    pub(crate) fn close(&self, unmask: impl FnOnce()) -> bool {
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

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use alloc::vec::Vec;
    use loom::sync::Arc;

    /// A window already open; a poll closes it while an interrupt on another CPU opens the next
    /// one, in any interleaving: once both are done, the vector is masked exactly when the window
    /// is open. (Without the try-lock, "closed" - "mask, open" - "unmask" leaves it open and
    /// unmasked, and "closed" - "mask" - "unmask" - "open" the reverse; the model finds both.)
    #[test]
    fn the_vector_is_masked_exactly_while_the_window_is_open() {
        loom::model(|| {
            let window = Arc::new(PollWindow::new());
            let masked = Arc::new(AtomicBool::new(false));
            assert!(window.open(|| masked.store(true, Ordering::Relaxed)));
            let mut handles = Vec::new();
            for opener in [false, true] {
                let (window, masked) = (window.clone(), masked.clone());
                handles.push(loom::thread::spawn(move || {
                    if opener {
                        window.open(|| masked.store(true, Ordering::Relaxed));
                    } else {
                        window.close(|| masked.store(false, Ordering::Relaxed));
                    }
                }));
            }
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(masked.load(Ordering::Relaxed), window.is_open());
        });
    }
}

#[cfg(test)]
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
}
