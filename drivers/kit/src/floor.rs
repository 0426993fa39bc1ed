//! The device floor, shared by the drivers that measure one (`megasas::Host::measure_floor`,
//! `nvme::blkdev::Host::measure_floor`): reads posted straight to the controller with no block
//! layer, whose figures the kernel prints beside each job. This module holds the request, the
//! result, the per-slot states and the measuring loop ([`run`]); a driver brings its command
//! slots, its way to post a read and to reap ([`FloorPort`]), and its completion side, which
//! moves a slot from [`slot::IN_FLIGHT`] to a `DONE` state (or frees an [`slot::ABANDONED`] one).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU8, Ordering};

/// The state of one floor command slot, shared by the run and whoever reaps completions.
pub mod slot {
    /// Free for a run.
    pub const IDLE: u8 = 0;
    /// Posted; the device may still write the run's buffer.
    pub const IN_FLIGHT: u8 = 1;
    /// Completed without error (set by the reaper, taken by the run).
    pub const DONE_OK: u8 = 2;
    /// Completed with an error.
    pub const DONE_FAILED: u8 = 3;
    /// The run gave up waiting: whoever reaps the completion makes the slot free again.
    pub const ABANDONED: u8 = 4;
}

/// A driver's side of a floor run over `slots` command slots (indices `0..slots`).
pub trait FloorPort {
    /// The driver's error (a refused post, or [`FloorPort::stalled`]).
    type Error;
    /// The state word of slot `i`.
    fn state(&self, i: usize) -> &AtomicU8;
    /// Posts read number `n` (counting from 0) on slot `i`, whose state is already
    /// [`slot::IN_FLIGHT`].
    fn post(&self, i: usize, n: u32) -> Result<(), Self::Error>;
    /// Reaps what the device completed (the completion side sets the slots' `DONE` states).
    fn reap(&self);
    /// Floor completions delivered so far, by anyone (Acquire): what a waiting run watches.
    fn completions(&self) -> u64;
    /// The device holds completions nobody has reaped yet.
    fn replies_pending(&self) -> bool;
    /// The clock, ns.
    fn now_ns(&self) -> u64;
    /// The error of a run that saw nothing complete for `waited_ns` with `in_flight` reads
    /// still posted and `completed` done.
    fn stalled(&self, in_flight: u16, completed: u32, waited_ns: u64) -> Self::Error;
}

/// What [`run`] leaves behind: the outcome, and which slots the device still holds.
pub struct FloorRun<E> {
    /// The measurement, or the first error (a refused post, a stall).
    pub result: Result<FloorResult, E>,
    /// `true` for a slot whose read was still with the device when the run ended: it is
    /// [`slot::ABANDONED`], and its completion (or a controller reset) frees it, never the run.
    /// Every other slot is [`slot::IDLE`] again.
    pub left_with_device: Vec<bool>,
}

/// Keeps up to `slots` reads in flight until `spec.ios` have completed, timing each from its
/// post to when this loop sees it done. `wait(news)` runs whenever a pass over the slots found
/// nothing; `news()` says whether a completion arrived since (delivered by anyone, or waiting in
/// the device), so a kernel may halt only when it is false and lose no wake-up.
///
/// The slots must be [`slot::IDLE`] and the driver's. The run posts no more than `spec.ios`
/// reads, stops at the first refused post, and gives up after `spec.stall_timeout_ns` without a
/// completion.
pub fn run<P: FloorPort>(
    port: &P,
    slots: usize,
    spec: FloorSpec,
    wait: &mut dyn FnMut(&dyn Fn() -> bool),
) -> FloorRun<P::Error> {
    let mut issued: u32 = 0;
    let mut completed: u32 = 0;
    let mut failed: u32 = 0;
    let mut latencies: Vec<u64> = Vec::with_capacity(spec.ios as usize);
    let mut posted_at = alloc::vec![0u64; slots];
    let mut in_flight = alloc::vec![false; slots];
    let post = |i: usize, issued: &mut u32, posted_at: &mut [u64], in_flight: &mut [bool]| {
        // Release pairs with the completion side's Acquire: the slot shows IN_FLIGHT before the
        // doorbell can produce its completion.
        port.state(i).store(slot::IN_FLIGHT, Ordering::Release);
        posted_at[i] = port.now_ns();
        if let Err(e) = port.post(i, *issued) {
            port.state(i).store(slot::IDLE, Ordering::Relaxed);
            return Err(e);
        }
        in_flight[i] = true;
        *issued += 1;
        Ok(())
    };
    let mut result = Ok(());
    let start = port.now_ns();
    let mut last_seen = start;
    for i in 0..slots.min(spec.ios as usize) {
        if let Err(e) = post(i, &mut issued, &mut posted_at, &mut in_flight) {
            result = Err(e);
            break;
        }
    }
    let mut last_progress = start;
    while result.is_ok() && completed < issued {
        // Taken before reaping, so that a completion delivered after the reap is news.
        let seen = port.completions();
        port.reap();
        let mut progressed = false;
        for i in 0..slots {
            if !in_flight[i] {
                continue;
            }
            // Acquire pairs with the completion side's Release of the DONE state.
            let s = port.state(i).load(Ordering::Acquire);
            if s != slot::DONE_OK && s != slot::DONE_FAILED {
                continue;
            }
            let t = port.now_ns();
            last_seen = t;
            latencies.push(t.saturating_sub(posted_at[i]));
            completed += 1;
            failed += u32::from(s == slot::DONE_FAILED);
            progressed = true;
            in_flight[i] = false;
            port.state(i).store(slot::IDLE, Ordering::Relaxed);
            if issued < spec.ios
                && let Err(e) = post(i, &mut issued, &mut posted_at, &mut in_flight)
            {
                result = Err(e);
                break;
            }
        }
        let t = port.now_ns();
        if progressed {
            last_progress = t;
        } else if t.saturating_sub(last_progress) > spec.stall_timeout_ns {
            let still = in_flight.iter().filter(|f| **f).count().min(usize::from(u16::MAX)) as u16;
            result = Err(port.stalled(still, completed, t.saturating_sub(last_progress)));
        } else {
            wait(&|| port.completions() != seen || port.replies_pending());
        }
    }
    // A read still with the device keeps its slot until its completion arrives (or a reset
    // ends it): neither the slot nor the buffer is reused before that.
    let left_with_device: Vec<bool> = (0..slots)
        .map(|i| {
            in_flight[i]
                && port
                    .state(i)
                    .compare_exchange(slot::IN_FLIGHT, slot::ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
        })
        .collect();
    for (i, left) in left_with_device.iter().enumerate() {
        if !left {
            // Completed (perhaps just now, after the last pass) or never posted.
            port.state(i).store(slot::IDLE, Ordering::Relaxed);
        }
    }
    let depth = slots.min(usize::from(u16::MAX)) as u16;
    FloorRun {
        result: result.map(|()| FloorResult::from_latencies(depth, latencies, failed, last_seen.saturating_sub(start))),
        left_with_device,
    }
}

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloorSpec {
    /// Reads kept in flight (each driver caps it at what it can keep: I/O tags, floor slots,
    /// `ios`).
    pub queue_depth: u16,
    /// Reads to complete in all.
    pub ios: u32,
    /// Give up (with the driver's "floor stalled" error) when nothing completes for this long.
    pub stall_timeout_ns: u64,
}

impl FloorSpec {
    /// `ios` reads at `queue_depth`, giving up after 1 s without a completion.
    pub const fn new(queue_depth: u16, ios: u32) -> Self {
        Self {
            queue_depth,
            ios,
            stall_timeout_ns: 1_000_000_000,
        }
    }
}

/// One floor measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloorResult {
    /// Reads that were kept in flight.
    pub queue_depth: u16,
    /// Reads completed (successfully or not).
    pub ios: u32,
    /// Reads the device failed.
    pub failed: u32,
    /// From the first doorbell to the last completion seen, ns.
    pub elapsed_ns: u64,
    /// Median doorbell-to-reaped latency, ns.
    pub p50_ns: u64,
    /// 99th percentile latency, ns.
    pub p99_ns: u64,
}

impl FloorResult {
    /// The result of a run that kept `queue_depth` reads in flight and saw the per-read
    /// `latencies` (ns, any order; sorted here), `failed` of them failed, in `elapsed_ns`.
    pub fn from_latencies(queue_depth: u16, mut latencies: Vec<u64>, failed: u32, elapsed_ns: u64) -> Self {
        latencies.sort_unstable();
        Self {
            queue_depth,
            ios: latencies.len().min(u32::MAX as usize) as u32,
            failed,
            elapsed_ns,
            p50_ns: quantile(&latencies, 500),
            p99_ns: quantile(&latencies, 990),
        }
    }

    /// Completions per second (0 when no time elapsed).
    pub fn iops(&self) -> u64 {
        if self.elapsed_ns == 0 {
            return 0;
        }
        (u128::from(self.ios) * 1_000_000_000 / u128::from(self.elapsed_ns)) as u64
    }
}

/// The `q_permille`/1000 quantile of sorted latencies (0 for none).
fn quantile(sorted: &[u64], q_permille: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(sorted.len() - 1) * q_permille / 1000]
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::VecDeque;
    use core::cell::{Cell, RefCell};
    use core::sync::atomic::AtomicU64;

    /// A device that completes what was posted when reaped, failing or holding reads on request.
    struct FakePort {
        states: Vec<AtomicU8>,
        posted: RefCell<VecDeque<(usize, u32)>>,
        posts: RefCell<Vec<u32>>,
        delivered: AtomicU64,
        clock: Cell<u64>,
        fail_every: u32,
        refuse_post: Option<u32>,
        hold_all: bool,
    }

    #[derive(Debug, PartialEq)]
    enum FakeError {
        Refused(u32),
        Stalled { in_flight: u16, completed: u32 },
    }

    impl FakePort {
        fn new(slots: usize) -> Self {
            Self {
                states: (0..slots).map(|_| AtomicU8::new(slot::IDLE)).collect(),
                posted: RefCell::new(VecDeque::new()),
                posts: RefCell::new(Vec::new()),
                delivered: AtomicU64::new(0),
                clock: Cell::new(0),
                fail_every: 0,
                refuse_post: None,
                hold_all: false,
            }
        }

        /// The completion side: what a driver's reaper does for a floor command.
        fn deliver(&self, i: usize, ok: bool) {
            let done = if ok { slot::DONE_OK } else { slot::DONE_FAILED };
            match self.states[i].compare_exchange(slot::IN_FLIGHT, done, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.delivered.fetch_add(1, Ordering::Release);
                }
                Err(slot::ABANDONED) => self.states[i].store(slot::IDLE, Ordering::Release),
                Err(other) => panic!("completion of slot {i} in state {other}"),
            }
        }

        fn state_of(&self, i: usize) -> u8 {
            self.states[i].load(Ordering::Relaxed)
        }
    }

    impl FloorPort for FakePort {
        type Error = FakeError;
        fn state(&self, i: usize) -> &AtomicU8 {
            &self.states[i]
        }
        fn post(&self, i: usize, n: u32) -> Result<(), FakeError> {
            assert_eq!(
                self.state_of(i),
                slot::IN_FLIGHT,
                "posted on slot {i} not marked in flight"
            );
            if self.refuse_post == Some(n) {
                return Err(FakeError::Refused(n));
            }
            self.posts.borrow_mut().push(n);
            self.posted.borrow_mut().push_back((i, n));
            Ok(())
        }
        fn reap(&self) {
            if self.hold_all {
                return;
            }
            while let Some((i, n)) = self.posted.borrow_mut().pop_front() {
                let ok = self.fail_every == 0 || n % self.fail_every != 0;
                self.deliver(i, ok);
            }
        }
        fn completions(&self) -> u64 {
            self.delivered.load(Ordering::Acquire)
        }
        fn replies_pending(&self) -> bool {
            !self.hold_all && !self.posted.borrow().is_empty()
        }
        fn now_ns(&self) -> u64 {
            self.clock.set(self.clock.get() + 1_000);
            self.clock.get()
        }
        fn stalled(&self, in_flight: u16, completed: u32, _waited_ns: u64) -> FakeError {
            FakeError::Stalled { in_flight, completed }
        }
    }

    fn spec(queue_depth: u16, ios: u32) -> FloorSpec {
        FloorSpec {
            stall_timeout_ns: 1_000_000,
            ..FloorSpec::new(queue_depth, ios)
        }
    }

    #[test]
    fn run_completes_every_read_once_and_frees_every_slot() {
        let port = FakePort::new(4);
        let run = run(&port, 4, spec(4, 100), &mut |_| {
            panic!("a device that always has news never waits")
        });
        let r = run.result.expect("clean run");
        assert_eq!((r.queue_depth, r.ios, r.failed), (4, 100, 0));
        assert!(r.elapsed_ns > 0 && r.p50_ns > 0);
        assert_eq!(*port.posts.borrow(), (0..100).collect::<Vec<u32>>());
        assert!(run.left_with_device.iter().all(|l| !l));
        assert!((0..4).all(|i| port.state_of(i) == slot::IDLE));
    }

    #[test]
    fn run_counts_failed_reads_and_posts_no_more_than_asked() {
        let mut port = FakePort::new(8);
        port.fail_every = 10;
        let r = run(&port, 8, spec(8, 5), &mut |_| {}).result.expect("run");
        assert_eq!((r.ios, r.failed), (5, 1), "read 0 of 5 fails");
        assert_eq!(port.posts.borrow().len(), 5);
    }

    #[test]
    fn refused_post_ends_the_run_and_leaves_posted_reads_with_the_device() {
        let mut port = FakePort::new(4);
        port.refuse_post = Some(2);
        let run = run(&port, 4, spec(4, 100), &mut |_| {});
        assert_eq!(run.result.unwrap_err(), FakeError::Refused(2));
        // Reads 0 and 1 were posted and not reaped: their slots stay the device's.
        assert_eq!(run.left_with_device, [true, true, false, false]);
        assert_eq!(
            (0..4).map(|i| port.state_of(i)).collect::<Vec<_>>(),
            [slot::ABANDONED, slot::ABANDONED, slot::IDLE, slot::IDLE]
        );
        // Their late completions free them.
        port.reap();
        assert!((0..4).all(|i| port.state_of(i) == slot::IDLE));
        assert_eq!(port.completions(), 0, "an abandoned read is not news for anyone");
    }

    #[test]
    fn silent_device_stalls_with_every_read_left_with_it() {
        let mut port = FakePort::new(3);
        port.hold_all = true;
        let mut waits = 0;
        let run = run(&port, 3, spec(3, 10), &mut |news| {
            assert!(!news(), "nothing arrived");
            waits += 1;
        });
        assert_eq!(
            run.result.unwrap_err(),
            FakeError::Stalled {
                in_flight: 3,
                completed: 0
            }
        );
        assert!(waits > 0);
        assert_eq!(run.left_with_device, [true; 3]);
        assert!((0..3).all(|i| port.state_of(i) == slot::ABANDONED));
    }

    #[test]
    fn completion_delivered_by_someone_else_is_news_and_is_taken() {
        // The run's own reap finds nothing; an "interrupt handler" delivers while it waits.
        let mut port = FakePort::new(2);
        port.hold_all = true;
        let mut delivered_by_handler = 0;
        let run = run(&port, 2, spec(2, 6), &mut |news| {
            assert!(!news());
            let next = port.posted.borrow_mut().pop_front();
            if let Some((i, _)) = next {
                port.deliver(i, true);
                delivered_by_handler += 1;
                assert!(news(), "a delivery since the pass is news");
            }
        });
        assert_eq!(run.result.expect("run").ios, 6);
        assert_eq!(delivered_by_handler, 6);
    }

    #[test]
    fn result_sorts_latencies_and_counts_every_read() {
        let r = FloorResult::from_latencies(4, alloc::vec![40, 10, 30, 20, 1000], 1, 5_000);
        assert_eq!((r.queue_depth, r.ios, r.failed), (4, 5, 1));
        assert_eq!((r.p50_ns, r.p99_ns), (30, 40));
        assert_eq!(r.iops(), 1_000_000);
        let none = FloorResult::from_latencies(1, Vec::new(), 0, 0);
        assert_eq!((none.ios, none.p50_ns, none.p99_ns, none.iops()), (0, 0, 0, 0));
    }
}
