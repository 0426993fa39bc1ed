//! Adaptive interrupt-then-poll completion (`Host::handle_interrupt_adaptive`,
//! `Host::poll_adaptive`): an interrupt that reaped something masks the vector and opens a
//! polling window; polls deliver while it is open; an idle or spent window unmasks and reaps once
//! more, so a completion that lands right at the unmask is not left waiting for an interrupt.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use blk::{Bio, Completion, CompletionPolicy, Platform, Status};
use megasas::fake::{CompletionMode, FakeBuffer, FakeConfig, FakeDelay, FakeDevice, FakeDma, FakeMmio};
use megasas::{AdaptiveConfig, Host, HostConfig, IrqMode, Model, VectorMask};

type TestHost = Host<FakeMmio, FakeDma, FakeDelay>;

struct Clock {
    now_ns: AtomicU64,
    ended: Mutex<Vec<Completion>>,
}

impl Platform for Clock {
    fn now_ns(&self) -> u64 {
        self.now_ns.load(Ordering::Relaxed)
    }
    fn send_completion_ipi(&self, _cpu: usize) {}
    fn raise_completion_softirq(&self, _cpu: usize) {}
    fn end_io(&self, c: &Completion) {
        self.ended.lock().unwrap().push(*c);
    }
}

/// The vector's mask bit, as the kernel would flip it; `complete_at_unmask` makes the fake device
/// finish that many pending reads at the moment of the unmask (the race).
struct Vector {
    masked: AtomicBool,
    masks: AtomicU32,
    unmasks: AtomicU32,
    dev: Arc<FakeDevice>,
    complete_at_unmask: AtomicU32,
}

impl VectorMask for Vector {
    fn set_masked(&self, masked: bool) {
        assert_ne!(
            self.masked.swap(masked, Ordering::Relaxed),
            masked,
            "mask state flipped twice"
        );
        if masked {
            self.masks.fetch_add(1, Ordering::Relaxed);
        } else {
            self.unmasks.fetch_add(1, Ordering::Relaxed);
            let n = self.complete_at_unmask.swap(0, Ordering::Relaxed);
            self.dev.complete_pending(n as usize);
        }
    }
}

struct Rig {
    dev: Arc<FakeDevice>,
    clock: Arc<Clock>,
    host: TestHost,
    vector: Vector,
    bufs: Vec<FakeBuffer>,
}

impl Rig {
    fn new(adaptive: Option<AdaptiveConfig>) -> Self {
        let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
        cfg.completion = CompletionMode::Deferred;
        let dev = FakeDevice::new(cfg);
        let clock = Arc::new(Clock {
            now_ns: AtomicU64::new(1_000),
            ended: Mutex::new(Vec::new()),
        });
        let mut hc = HostConfig::new(1, IrqMode::Msix);
        hc.completion = CompletionPolicy::Irq;
        hc.adaptive = adaptive;
        let host = Host::new(
            Model::Sas2108Gen2,
            dev.mmio(),
            dev.dma(),
            dev.delay(),
            clock.clone(),
            hc,
        )
        .expect("host");
        host.start().expect("start");
        let vector = Vector {
            masked: AtomicBool::new(false),
            masks: AtomicU32::new(0),
            unmasks: AtomicU32::new(0),
            dev: dev.clone(),
            complete_at_unmask: AtomicU32::new(0),
        };
        let bufs = (0..16).map(|_| dev.buffer(512)).collect();
        Self {
            dev,
            clock,
            host,
            vector,
            bufs,
        }
    }

    fn submit(&self, n: usize) {
        let q = self.host.queue(0).expect("queue");
        for i in 0..n {
            let seg = [blk::Segment::new(self.bufs[i].phys(), 512)];
            q.submit(0, &Bio::read(i as u64, 1, &seg, i as u64)).expect("submit");
        }
    }

    fn advance(&self, ns: u64) {
        self.clock.now_ns.fetch_add(ns, Ordering::Relaxed);
    }

    fn ended_ok(&self) -> usize {
        let ended = self.clock.ended.lock().unwrap();
        assert!(ended.iter().all(|c| c.status == Status::Ok), "{ended:?}");
        ended.len()
    }
}

#[test]
fn an_interrupt_opens_a_window_that_polls_deliver_and_idleness_closes() {
    let rig = Rig::new(Some(AdaptiveConfig {
        idle_ns: 50_000,
        budget: 64,
    }));
    rig.submit(3);
    rig.dev.complete_pending(1);
    let msi_before = rig.dev.stats().msi_messages;
    assert_eq!(rig.host.handle_interrupt_adaptive(0, &rig.vector).completed, 1);
    assert!(
        rig.vector.masked.load(Ordering::Relaxed),
        "vector masked after a productive interrupt"
    );
    assert!(rig.host.polling_window());
    // While the window is open, completions are reaped by polling.
    rig.dev.complete_pending(1);
    rig.advance(10_000);
    assert_eq!(rig.host.poll_adaptive(0, &rig.vector), 1);
    assert_eq!(rig.ended_ok(), 2);
    // Quiet, but not for long enough: the window stays open.
    rig.advance(49_000);
    assert_eq!(rig.host.poll_adaptive(0, &rig.vector), 0);
    assert!(rig.host.polling_window());
    // Quiet for idle_ns since the last completion: unmasked, closed.
    rig.advance(1_000);
    assert_eq!(rig.host.poll_adaptive(0, &rig.vector), 0);
    assert!(!rig.host.polling_window());
    assert!(!rig.vector.masked.load(Ordering::Relaxed));
    let c = rig.host.adaptive_counters();
    assert_eq!((c.windows, c.polled, c.budget_closes, c.unmask_catches), (1, 1, 0, 0));
    // The last read finishes with the window closed: an interrupt reaps it.
    rig.dev.complete_pending(1);
    assert!(rig.dev.stats().msi_messages > msi_before);
    assert_eq!(rig.host.handle_interrupt_adaptive(0, &rig.vector).completed, 1);
    assert_eq!(rig.ended_ok(), 3);
    assert_eq!(
        rig.host.adaptive_counters().windows,
        2,
        "a productive interrupt opens the next window"
    );
}

#[test]
fn a_completion_landing_at_the_unmask_is_reaped_by_the_closing_poll() {
    let rig = Rig::new(Some(AdaptiveConfig::default()));
    rig.submit(2);
    rig.dev.complete_pending(1);
    rig.host.handle_interrupt_adaptive(0, &rig.vector);
    assert!(rig.host.polling_window());
    // The second read completes after the last empty reap, exactly while the vector is unmasked.
    rig.vector.complete_at_unmask.store(1, Ordering::Relaxed);
    rig.advance(AdaptiveConfig::default().idle_ns);
    assert_eq!(
        rig.host.poll_adaptive(0, &rig.vector),
        1,
        "delivered without an interrupt"
    );
    assert_eq!(rig.ended_ok(), 2);
    assert!(!rig.host.polling_window());
    assert_eq!(rig.host.adaptive_counters().unmask_catches, 1);
    assert_eq!(rig.vector.unmasks.load(Ordering::Relaxed), 1);
}

#[test]
fn a_spent_budget_closes_the_window_while_completions_still_flow() {
    let rig = Rig::new(Some(AdaptiveConfig {
        idle_ns: 1_000_000,
        budget: 4,
    }));
    rig.submit(8);
    rig.dev.complete_pending(1);
    rig.host.handle_interrupt_adaptive(0, &rig.vector);
    rig.dev.complete_pending(3);
    assert_eq!(rig.host.poll_adaptive(0, &rig.vector), 3);
    assert!(rig.host.polling_window(), "3 of 4");
    rig.dev.complete_pending(2);
    assert_eq!(rig.host.poll_adaptive(0, &rig.vector), 2);
    assert!(!rig.host.polling_window(), "budget spent: unmasked");
    assert_eq!(rig.host.adaptive_counters().budget_closes, 1);
    assert_eq!(rig.ended_ok(), 6);
    assert_eq!(
        (
            rig.vector.masks.load(Ordering::Relaxed),
            rig.vector.unmasks.load(Ordering::Relaxed)
        ),
        (1, 1)
    );
}

#[test]
fn without_the_adaptive_mode_the_vector_is_never_touched() {
    let rig = Rig::new(None);
    rig.submit(2);
    rig.dev.complete_pending(2);
    assert_eq!(rig.host.handle_interrupt_adaptive(0, &rig.vector).completed, 2);
    rig.advance(1_000_000);
    assert_eq!(rig.host.poll_adaptive(0, &rig.vector), 0);
    assert!(!rig.host.polling_window() && !rig.host.is_adaptive());
    assert_eq!(rig.vector.masks.load(Ordering::Relaxed), 0);
    assert_eq!(rig.ended_ok(), 2);
}

#[test]
fn an_empty_interrupt_opens_no_window() {
    let rig = Rig::new(Some(AdaptiveConfig::default()));
    assert_eq!(rig.host.handle_interrupt_adaptive(0, &rig.vector).completed, 0);
    assert!(!rig.host.polling_window());
    assert_eq!(rig.vector.masks.load(Ordering::Relaxed), 0);
}

#[test]
fn an_interrupt_after_a_large_transfer_opens_no_window() {
    let rig = Rig::new(Some(AdaptiveConfig::default()));
    let q = rig.host.queue(0).expect("queue");
    let big_len = megasas::MAX_POLLED_TRANSFER_BYTES + 512;
    let big = rig.dev.buffer(big_len as usize);
    let seg = [blk::Segment::new(big.phys(), big_len)];
    q.submit(0, &Bio::read(64, big_len / 512, &seg, 100)).expect("submit");
    rig.dev.complete_pending(1);
    assert_eq!(rig.host.handle_interrupt_adaptive(0, &rig.vector).completed, 1);
    assert!(!rig.host.polling_window(), "no window after a large transfer");
    assert_eq!(rig.vector.masks.load(Ordering::Relaxed), 0);
    let c = rig.host.adaptive_counters();
    assert_eq!((c.windows, c.large_transfer_skips), (0, 1));
    // A transfer of exactly the limit is polled for again.
    let limit = megasas::MAX_POLLED_TRANSFER_BYTES;
    let seg = [blk::Segment::new(big.phys(), limit)];
    q.submit(0, &Bio::read(64, limit / 512, &seg, 101)).expect("submit");
    rig.dev.complete_pending(1);
    assert_eq!(rig.host.handle_interrupt_adaptive(0, &rig.vector).completed, 1);
    assert!(rig.host.polling_window(), "the last transfer is small again");
    let c = rig.host.adaptive_counters();
    assert_eq!((c.windows, c.large_transfer_skips), (1, 1));
    assert_eq!(rig.ended_ok(), 2);
}
