//! Adaptive interrupt-then-poll completion (`nvme.irq_poll=`), one polling window per MSI-X
//! vector (one vector per I/O queue pair, so per queue and per CPU in the usual plan).
//!
//! An interrupt that reaped something masks its vector (the MSI-X entry's mask bit, through
//! [`VectorMask`]) and opens the vector's window; while it is open the CPUs submitting to the
//! vector's queues poll their completion queues instead of waiting for an interrupt. The window
//! closes after [`AdaptiveConfig::idle_ns`] without a completion or after
//! [`AdaptiveConfig::budget`] completions (so a busy queue still gets an interrupt now and then
//! and one window never holds the vector masked for good): unmask, then reap once more.
//!
//! No lost wake-up. A completion entry the device writes while the vector is masked either
//! (a) is written before the unmask takes effect: the device finds the vector masked and sets
//! the entry's pending bit (PCI: mandatory for MSI-X; QEMU's `msix_notify` does it), which sends
//! the message on unmask, and the re-reap after the unmask ([`VectorWindow::poll_done`] returns
//! true, the caller re-reaps after a `SeqCst` fence) usually finds it first; or (b) is written
//! after the unmask: the device sees the vector unmasked and sends the message. The fence orders
//! the unmask (an MMIO store) before the re-reap's loads of the queue, so against a device that
//! checks the mask after writing the entry, the two sides form a store-then-load pair on each
//! side: at least one sees the other, even without a pending bit. The loom model below checks it
//! with a device that drops a message sent while masked.
//!
//! Opening (mask, then mark open) and closing (mark closed, then unmask) each run under a
//! try-lock that is never spun on: an interrupt that finds a switch in progress opens no window,
//! a poll that finds one tries again on its next pass. Without it, an interrupt opening a window
//! on one CPU and a tick closing it on another could interleave "closed, unmask" between "mask"
//! and "open" and leave the vector masked with the window closed: nobody polls, no interrupt
//! comes. That protocol is `drvkit::window`, the MegaRAID driver's window too.

#[cfg(not(all(loom, test)))]
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(all(loom, test))]
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use drvkit::window::PollWindow;

use drvkit::adaptive::WindowCounters;
/// Interrupt-then-poll settings (`nvme.irq_poll=on|N`), shared with MegaRAID.
pub use drvkit::adaptive::{AdaptiveConfig, AdaptiveCounters, DEFAULT_BUDGET, DEFAULT_IDLE_US};

/// How the kernel masks and unmasks one MSI-X vector (table entry) of the controller. A message
/// the device sends while its vector is masked is held pending and sent on unmask (PCI); the
/// driver re-reaps after every unmask anyway, so correctness does not rest on that alone.
pub trait VectorMask {
    /// Masks (`true`) or unmasks MSI-X table entry `vector`.
    fn set_masked(&self, vector: u16, masked: bool);
}

/// The polling window of one vector and its counters: the shared open/close protocol
/// ([`PollWindow`]) with this driver's idle clock and budget.
pub(crate) struct VectorWindow {
    /// Open: the vector is masked and its queues' CPUs poll.
    window: PollWindow,
    last_completion_ns: AtomicU64,
    /// Completions reaped in the current window (the budget).
    in_window: AtomicU32,
    counters: WindowCounters,
}

impl VectorWindow {
    pub(crate) fn new() -> Self {
        Self {
            window: PollWindow::new(),
            last_completion_ns: AtomicU64::new(0),
            in_window: AtomicU32::new(0),
            counters: WindowCounters::default(),
        }
    }

    /// Whether the window is open (a poller that sees it open also sees the mask write).
    pub(crate) fn is_open(&self) -> bool {
        self.window.is_open()
    }

    /// After an interrupt on this vector reaped `reaped` completions at `now_ns`: a productive
    /// interrupt with no window open masks the vector (through `mask`) and opens one. Returns
    /// whether it opened one (false: nothing reaped, already open, or a switch in progress).
    pub(crate) fn after_interrupt(&self, reaped: usize, now_ns: u64, mask: impl FnOnce()) -> bool {
        if reaped == 0 {
            return false;
        }
        let opened = self.window.open(|| {
            // Set before the window shows open, so its first poll starts a fresh idle period
            // and budget.
            self.last_completion_ns.store(now_ns, Ordering::Relaxed);
            self.in_window.store(0, Ordering::Relaxed);
            mask();
        });
        if opened {
            self.counters.windows.fetch_add(1, Ordering::Relaxed);
        }
        opened
    }

    /// After a poll of one of this vector's queues reaped `reaped` completions at `now_ns`: while
    /// the window is open, counts them and closes the window (unmask through `unmask`) when its
    /// budget is spent or nothing completed for `config.idle_ns`. Returns true when this call
    /// closed the window: the caller must then fence (`SeqCst`) and reap the vector's queues once
    /// more, and report what that found with [`Self::caught`].
    pub(crate) fn poll_done(&self, config: &AdaptiveConfig, reaped: usize, now_ns: u64, unmask: impl FnOnce()) -> bool {
        if !self.is_open() {
            return false;
        }
        let mut by_budget = false;
        let close = if reaped > 0 {
            let n = u32::try_from(reaped).unwrap_or(u32::MAX);
            self.counters.polled.fetch_add(u64::from(n), Ordering::Relaxed);
            self.last_completion_ns.store(now_ns, Ordering::Relaxed);
            by_budget = self.in_window.fetch_add(n, Ordering::Relaxed).saturating_add(n) >= config.budget;
            by_budget
        } else {
            now_ns.saturating_sub(self.last_completion_ns.load(Ordering::Relaxed)) >= config.idle_ns
        };
        // Closed before the unmask: an interrupt right after the unmask may open the next
        // window at once.
        let closed = close && self.window.close(unmask);
        if closed && by_budget {
            self.counters.budget_closes.fetch_add(1, Ordering::Relaxed);
        }
        closed
    }

    /// Records what the re-reap after an unmask found.
    pub(crate) fn caught(&self, n: usize) {
        self.counters.unmask_catches.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// The windows of every vector of a controller.
pub(crate) struct Windows {
    pub(crate) config: AdaptiveConfig,
    /// Index: MSI-X table entry.
    pub(crate) vectors: alloc::vec::Vec<VectorWindow>,
}

impl Windows {
    pub(crate) fn new(config: AdaptiveConfig, nr_vectors: usize) -> Self {
        Self {
            config,
            vectors: (0..nr_vectors).map(|_| VectorWindow::new()).collect(),
        }
    }

    pub(crate) fn counters(&self) -> AdaptiveCounters {
        let mut c = AdaptiveCounters::default();
        for w in &self.vectors {
            w.counters.add_to(&mut c);
        }
        c
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const CFG: AdaptiveConfig = AdaptiveConfig {
        idle_ns: 1000,
        budget: 4,
    };

    #[test]
    fn an_empty_interrupt_opens_nothing_and_a_productive_one_opens_once() {
        let w = VectorWindow::new();
        let mut masks = 0;
        assert!(!w.after_interrupt(0, 0, || masks += 1));
        assert!(w.after_interrupt(2, 0, || masks += 1));
        assert!(!w.after_interrupt(2, 0, || masks += 1), "already open");
        assert_eq!(masks, 1);
        assert!(w.is_open());
    }

    #[test]
    fn idleness_closes_at_exactly_idle_ns_and_completions_restart_it() {
        let w = VectorWindow::new();
        w.after_interrupt(1, 100, || {});
        let mut unmasks = 0;
        assert!(!w.poll_done(&CFG, 0, 1099, || unmasks += 1), "999 ns quiet");
        assert!(
            !w.poll_done(&CFG, 1, 1099, || unmasks += 1),
            "a completion restarts the idle time"
        );
        assert!(!w.poll_done(&CFG, 0, 2098, || unmasks += 1));
        assert!(w.poll_done(&CFG, 0, 2099, || unmasks += 1), "idle_ns quiet");
        assert!(!w.is_open());
        assert!(!w.poll_done(&CFG, 0, 9999, || unmasks += 1), "closed already");
        assert_eq!(unmasks, 1);
        let c = w.counters.snapshot();
        assert_eq!((c.windows, c.polled, c.budget_closes), (1, 1, 0));
    }

    #[test]
    fn the_budget_closes_a_busy_window_and_the_next_interrupt_reopens_with_a_fresh_one() {
        let w = VectorWindow::new();
        w.after_interrupt(1, 0, || {});
        assert!(!w.poll_done(&CFG, 3, 1, || {}));
        assert!(w.poll_done(&CFG, 1, 2, || {}), "4 of 4");
        assert!(w.after_interrupt(1, 3, || {}));
        assert!(!w.poll_done(&CFG, 3, 4, || {}), "the budget restarted");
        w.caught(2);
        let c = w.counters.snapshot();
        assert_eq!(
            c,
            AdaptiveCounters {
                windows: 2,
                polled: 7,
                budget_closes: 1,
                unmask_catches: 2,
                large_transfer_skips: 0
            }
        );
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::{AtomicBool, fence};
    use loom::sync::{Arc, Mutex};

    /// A completion queue: entries posted by the device, entries consumed by the host (under
    /// the CQ lock, as the driver's drain), and the vector's mask bit.
    struct Model {
        posted: AtomicU32,
        consumed: Mutex<u32>,
        masked: AtomicBool,
        window: VectorWindow,
    }

    impl Model {
        fn reap(&self) -> usize {
            let mut c = self.consumed.lock().unwrap();
            let p = self.posted.load(Ordering::SeqCst);
            let n = p - *c;
            *c = p;
            n as usize
        }

        /// The interrupt handler: reap, open a window if productive.
        fn interrupt(&self) {
            let n = self.reap();
            self.window
                .after_interrupt(n, 0, || self.masked.store(true, Ordering::SeqCst));
        }

        /// One pass of a polling CPU (idle at once: `idle_ns` 0).
        fn poll(&self, cfg: &AdaptiveConfig) {
            if !self.window.is_open() {
                return;
            }
            let n = self.reap();
            if self
                .window
                .poll_done(cfg, n, 0, || self.masked.store(false, Ordering::SeqCst))
            {
                fence(Ordering::SeqCst);
                let caught = self.reap();
                self.window.caught(caught);
            }
        }
    }

    /// The device posts two completions while a CPU polls an open window that closes when idle
    /// (or after 2 completions). The device checks the mask after writing each entry and, if
    /// masked, drops the message (no pending bit: the worst case); unmasked, the interrupt runs.
    /// Whatever the interleaving, once the pollers stop with the window closed, everything
    /// posted has been consumed and the vector is unmasked: no completion waits for an
    /// interrupt that will never come.
    #[test]
    fn a_completion_racing_the_unmask_is_never_stranded() {
        loom::model(|| {
            let cfg = AdaptiveConfig { idle_ns: 0, budget: 2 };
            let m = Arc::new(Model {
                posted: AtomicU32::new(0),
                consumed: Mutex::new(0),
                masked: AtomicBool::new(false),
                window: VectorWindow::new(),
            });
            // A first interrupt opened the window.
            m.posted.store(1, Ordering::SeqCst);
            m.interrupt();
            assert!(m.window.is_open() && m.masked.load(Ordering::SeqCst));
            let device = {
                let m = m.clone();
                loom::thread::spawn(move || {
                    for _ in 0..2 {
                        m.posted.fetch_add(1, Ordering::SeqCst);
                        if !m.masked.load(Ordering::SeqCst) {
                            m.interrupt();
                        }
                    }
                })
            };
            let poller = {
                let m = m.clone();
                loom::thread::spawn(move || {
                    for _ in 0..2 {
                        m.poll(&cfg);
                    }
                })
            };
            device.join().unwrap();
            poller.join().unwrap();
            // The polling CPU keeps polling while the window is open.
            for _ in 0..4 {
                m.poll(&cfg);
            }
            assert!(!m.window.is_open(), "a quiet window closes");
            assert!(!m.masked.load(Ordering::SeqCst), "closed means unmasked");
            assert_eq!(*m.consumed.lock().unwrap(), 3, "nothing stranded");
        });
    }

    /// A window open; a tick on one CPU closes it while an interrupt on another opens the next
    /// one, in any interleaving: afterwards the vector is masked exactly when the window is open.
    #[test]
    fn the_vector_is_masked_exactly_while_the_window_is_open() {
        loom::model(|| {
            let cfg = AdaptiveConfig { idle_ns: 0, budget: 64 };
            let w = Arc::new(VectorWindow::new());
            let masked = Arc::new(AtomicBool::new(false));
            assert!(w.after_interrupt(1, 0, || masked.store(true, Ordering::Relaxed)));
            let closer = {
                let (w, masked) = (w.clone(), masked.clone());
                loom::thread::spawn(move || {
                    w.poll_done(&cfg, 0, 0, || masked.store(false, Ordering::Relaxed));
                })
            };
            let opener = {
                let (w, masked) = (w.clone(), masked.clone());
                loom::thread::spawn(move || {
                    w.after_interrupt(1, 0, || masked.store(true, Ordering::Relaxed));
                })
            };
            closer.join().unwrap();
            opener.join().unwrap();
            assert_eq!(masked.load(Ordering::Relaxed), w.is_open());
        });
    }
}
