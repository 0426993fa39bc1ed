//! Adaptive interrupt-then-poll completion (`nvme.irq_poll=`): against the fake controller's
//! MSI-X mask and pending bits, an interrupt that reaped something masks its vector and opens a
//! window; the queue's CPU polls while completions keep coming; an idle or spent window unmasks
//! and reaps once more. Checks that interrupts per I/O drop, that a completion landing at the
//! unmask is reaped (even by a device that drops messages sent while masked), and that nothing is
//! lost over many requests completed in random order on two queues.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use blk::{Bio, Segment, Status};
use common::{Buf, Rig, Rng};
use nvme::IrqMode;
use nvme::adaptive::{AdaptiveConfig, VectorMask};
use nvme::blkdev::HostConfig;
use nvme::fake::{FakeCompletion, FakeConfig, FakeNvme};

/// The kernel's side of the mask: the MSI-X entry's mask bit of the fake. `complete_at_unmask`
/// makes the device finish that many deferred commands right before the unmask reaches it (the
/// race the re-reap exists for).
struct FakeVectors {
    fake: Arc<FakeNvme>,
    complete_at_unmask: AtomicUsize,
}

impl VectorMask for FakeVectors {
    fn set_masked(&self, vector: u16, masked: bool) {
        assert_ne!(
            self.fake.vector_masked(vector),
            masked,
            "vector {vector} set twice to {masked}"
        );
        if !masked {
            let n = self.complete_at_unmask.swap(0, Ordering::Relaxed);
            self.fake.complete_pending(n, |_| 0);
        }
        self.fake.set_vector_masked(vector, masked);
    }
}

fn rig(ncpus: usize, adaptive: Option<AdaptiveConfig>, pending_bits: bool) -> (Rig, FakeVectors) {
    let mut cfg = FakeConfig::new(ncpus as u16);
    cfg.completion = FakeCompletion::Deferred;
    cfg.msix_pending_bits = pending_bits;
    let hcfg = HostConfig {
        adaptive,
        ..HostConfig::default()
    };
    let rig = Rig::new(
        cfg,
        ncpus,
        IrqMode::MsiX {
            vectors: ncpus as u16 + 1,
        },
        hcfg,
    );
    rig.fake.take_messages(); // the admin queue's, from bring-up
    let vectors = FakeVectors {
        fake: rig.fake.clone(),
        complete_at_unmask: AtomicUsize::new(0),
    };
    (rig, vectors)
}

/// Delivers the messages the fake sent, each to the CPU its vector is aimed at, through the
/// adaptive handler. Returns how many.
fn deliver(rig: &Rig, vectors: &FakeVectors) -> usize {
    let msgs = rig.fake.take_messages();
    for &v in &msgs {
        let cpu = rig.host.plan().vector_cpu(usize::from(v)).expect("vector in plan");
        rig.host.handle_vector_adaptive(usize::from(v), cpu, vectors);
    }
    msgs.len()
}

/// What a CPU waiting for its I/O does: poll while its queue's window is open (else it would
/// halt until an interrupt).
fn wait_step(rig: &Rig, vectors: &FakeVectors, cpu: usize) {
    if rig.host.polling_window(cpu) {
        let hwq = rig.host.plan().hwq_of_cpu(cpu).unwrap();
        rig.host.poll_adaptive(hwq, cpu, vectors);
    }
}

/// A stream of `total` 4 KiB reads at queue depth 8 on one CPU; the device completes one or two
/// commands every 3 µs. Returns the I/O vector's messages.
fn stream(adaptive: Option<AdaptiveConfig>) -> (u64, nvme::adaptive::AdaptiveCounters) {
    let (rig, vectors) = rig(1, adaptive, true);
    let buf = Buf::new(&rig.fake, 4096);
    let seg = [Segment::new(buf.phys, 4096)];
    let q = rig.host.queue(0).unwrap();
    let total = 512u64;
    let (mut submitted, mut done) = (0u64, 0usize);
    let mut rng = Rng(7);
    while done < total as usize {
        while submitted < total && submitted - (done as u64) < 8 {
            q.submit(0, &Bio::read(8 * (submitted % 1000), 8, &seg, submitted))
                .expect("submit");
            submitted += 1;
        }
        rig.fake.complete_pending(1 + rng.below(2) as usize, |_| 0);
        rig.platform.advance(3_000);
        deliver(&rig, &vectors);
        wait_step(&rig, &vectors, 0);
        let ended = rig.platform.take_done();
        assert!(ended.iter().all(|c| c.status == Status::Ok), "{ended:?}");
        done += ended.len();
    }
    assert_eq!(done, total as usize);
    rig.assert_no_violations();
    (rig.fake.stats().msix_per_vector[1], rig.host.adaptive_counters())
}

#[test]
fn interrupts_per_io_drop_while_a_stream_runs() {
    let (irq_messages, off) = stream(None);
    let (adaptive_messages, c) = stream(Some(AdaptiveConfig::default()));
    assert_eq!(off, Default::default(), "no window without the mode");
    assert!(irq_messages >= 256, "about one message per device pass: {irq_messages}");
    // A window takes up to 64 completions: one message opens it, at most one more (pending
    // while masked) follows its unmask.
    assert!(
        adaptive_messages * 16 <= 512,
        "{adaptive_messages} messages for 512 reads ({irq_messages} without the mode), {c:?}"
    );
    assert!(c.windows >= 512 / 64 && c.budget_closes >= 1, "{c:?}");
    assert!(c.polled >= 512 - c.windows * 2, "most completions polled: {c:?}");
}

#[test]
fn an_idle_window_unmasks_and_the_next_completion_interrupts_again() {
    let (rig, vectors) = rig(1, Some(AdaptiveConfig::default()), true);
    let buf = Buf::new(&rig.fake, 4096);
    let seg = [Segment::new(buf.phys, 4096)];
    let q = rig.host.queue(0).unwrap();
    for i in 0..3 {
        q.submit(0, &Bio::read(8 * i, 8, &seg, i)).unwrap();
    }
    rig.fake.complete_pending(1, |_| 0);
    assert_eq!(deliver(&rig, &vectors), 1);
    assert!(rig.fake.vector_masked(1) && rig.host.polling_window(0));
    // Completes while masked: no message, the poll reaps it.
    rig.fake.complete_pending(1, |_| 0);
    assert_eq!(deliver(&rig, &vectors), 0);
    rig.platform.advance(10_000);
    assert_eq!(rig.host.poll_adaptive(0, 0, &vectors), 1);
    // 49 µs quiet: still open; 50 µs: unmasked, closed. The pending bit the second completion
    // set is sent on unmask (an interrupt that finds nothing and opens nothing).
    rig.platform.advance(49_000);
    assert_eq!(rig.host.poll_adaptive(0, 0, &vectors), 0);
    assert!(rig.host.polling_window(0));
    rig.platform.advance(1_000);
    assert_eq!(rig.host.poll_adaptive(0, 0, &vectors), 0);
    assert!(!rig.host.polling_window(0) && !rig.fake.vector_masked(1));
    assert_eq!(deliver(&rig, &vectors), 1, "the pending message");
    assert!(!rig.host.polling_window(0), "an empty interrupt opens no window");
    // The last read, with the window closed: an interrupt reaps it and opens the next window.
    rig.fake.complete_pending(1, |_| 0);
    assert_eq!(deliver(&rig, &vectors), 1);
    assert_eq!(rig.platform.take_done().len(), 3);
    let c = rig.host.adaptive_counters();
    assert_eq!((c.windows, c.polled, c.budget_closes, c.unmask_catches), (2, 1, 0, 0));
    assert_eq!(rig.fake.stats().msix_while_masked, 1);
}

#[test]
fn a_completion_landing_during_the_unmask_is_reaped() {
    // A device without pending bits drops the message sent while masked: only the re-reap
    // after the unmask can deliver that completion.
    let (rig, vectors) = rig(1, Some(AdaptiveConfig::default()), false);
    let buf = Buf::new(&rig.fake, 4096);
    let seg = [Segment::new(buf.phys, 4096)];
    let q = rig.host.queue(0).unwrap();
    q.submit(0, &Bio::read(0, 8, &seg, 1)).unwrap();
    q.submit(0, &Bio::read(8, 8, &seg, 2)).unwrap();
    rig.fake.complete_pending(1, |_| 0);
    deliver(&rig, &vectors);
    assert_eq!(rig.platform.take_done().len(), 1);
    vectors.complete_at_unmask.store(1, Ordering::Relaxed);
    rig.platform.advance(AdaptiveConfig::default().idle_ns);
    assert_eq!(rig.host.poll_adaptive(0, 0, &vectors), 1, "reaped by the closing poll");
    assert!(!rig.fake.vector_masked(1) && !rig.host.polling_window(0));
    let done = rig.platform.take_done();
    assert_eq!((done.len(), done[0].cookie), (1, 2));
    assert_eq!(rig.host.adaptive_counters().unmask_catches, 1);
    assert_eq!(rig.fake.stats().msix_while_masked, 1);
    assert!(rig.fake.take_messages().is_empty(), "its message was dropped");
}

#[test]
fn the_mode_needs_msix() {
    let mut cfg = FakeConfig::new(1);
    cfg.msix_enabled = false;
    let fake = FakeNvme::new(cfg);
    let ctrl = common::controller(&fake, nvme::Config::default()).unwrap();
    let plan = nvme::QueuePlan::new(1, None, ctrl.max_io_queues(), IrqMode::Intx).unwrap();
    let hcfg = HostConfig {
        adaptive: Some(AdaptiveConfig::default()),
        ..HostConfig::default()
    };
    let platform: Arc<dyn blk::Platform> = Arc::new(common::TestPlatform::default());
    match nvme::blkdev::Host::new(ctrl, plan, hcfg, |_, _| platform.clone()) {
        Err(e @ nvme::Error::InvalidConfig { .. }) => assert!(e.to_string().contains("nvme.irq_poll"), "{e}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("adaptive mode accepted on INTx"),
    }
}

/// Many reads on two CPUs (one queue and vector each), completed by the device in random order
/// and random batches, with random time passing; the CPUs poll only while their window is open
/// and otherwise wait for an interrupt, as the kernel's job loop does; a tick on a random CPU
/// now and then polls open windows; the device sometimes completes commands right at an unmask. Every request completes exactly once; the mask bit always
/// matches the window; if at any point nothing is in the device, no window is open and no
/// message is on its way while requests are still outstanding, a completion was stranded.
fn random_order(pending_bits: bool, seed: u64) {
    let cfg = AdaptiveConfig {
        idle_ns: 4_000,
        budget: 8,
    };
    let (rig, vectors) = rig(2, Some(cfg), pending_bits);
    let bufs: Vec<Buf> = (0..32).map(|_| Buf::new(&rig.fake, 4096)).collect();
    let total = 3_000u64;
    let mut rng = Rng(seed);
    let mut outstanding: BTreeSet<u64> = BTreeSet::new();
    let mut completed: BTreeSet<u64> = BTreeSet::new();
    let mut free: Vec<usize> = (0..bufs.len()).collect();
    let mut buf_of = std::collections::BTreeMap::new();
    let mut next = 0u64;
    while completed.len() < total as usize {
        for _ in 0..rng.below(4) {
            let Some(b) = free.pop().filter(|_| next < total) else {
                break;
            };
            let cpu = rng.below(2) as usize;
            let seg = [Segment::new(bufs[b].phys, 4096)];
            rig.host
                .queue(0)
                .unwrap()
                .submit(cpu, &Bio::read(8 * rng.below(1000), 8, &seg, next))
                .expect("submit");
            outstanding.insert(next);
            buf_of.insert(next, b);
            next += 1;
        }
        // Sometimes the device finishes commands exactly while a closing poll unmasks.
        vectors
            .complete_at_unmask
            .store(rng.below(3) as usize, Ordering::Relaxed);
        let batch = rng.below(4) as usize;
        rig.fake.complete_pending(batch, |n| rng.below(n as u64) as usize);
        rig.platform.advance(rng.below(3_000));
        if rng.below(3) > 0 {
            deliver(&rig, &vectors);
        }
        for cpu in 0..2 {
            if rng.below(4) > 0 {
                wait_step(&rig, &vectors, cpu);
            }
        }
        if rng.below(20) == 0 {
            rig.host.poll_open_windows(rng.below(2) as usize, &vectors);
        }
        for cpu in 0..2 {
            assert_eq!(
                rig.fake.vector_masked(cpu as u16 + 1),
                rig.host.polling_window(cpu),
                "vector {} mask vs window",
                cpu + 1
            );
        }
        for c in rig.platform.take_done() {
            assert_eq!(c.status, Status::Ok);
            assert!(outstanding.remove(&c.cookie), "completion {} not outstanding", c.cookie);
            assert!(completed.insert(c.cookie));
            free.push(buf_of.remove(&c.cookie).unwrap());
        }
        // Quiet device, windows closed, no message coming: what is outstanding is stranded.
        let quiet = rig.fake.pending() == 0 && !rig.host.polling_window(0) && !rig.host.polling_window(1);
        assert!(
            !(quiet && !outstanding.is_empty() && deliver(&rig, &vectors) == 0),
            "stranded: {outstanding:?} outstanding with no window open and no interrupt coming"
        );
    }
    assert_eq!(completed.len(), total as usize);
    let c = rig.host.adaptive_counters();
    assert!(c.windows > 10 && c.polled > 100 && c.budget_closes > 0, "{c:?}");
    rig.assert_no_violations();
}

#[test]
fn nothing_is_lost_over_many_requests_in_random_completion_order() {
    for seed in [1, 0xBEEF, 0x1234_5678] {
        random_order(true, seed);
    }
}

#[test]
fn nothing_is_lost_even_when_the_device_drops_messages_while_masked() {
    for seed in [3, 0xF00D] {
        random_order(false, seed);
    }
}
