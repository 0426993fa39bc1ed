//! `nvme.poll_queues=`: polled I/O queue pairs beside interrupt-driven ones on one controller.
//! A polled pair's CQ is created with IEN = 0 and no vector; its completions are found only by
//! the submitting CPU's poll; its entries pass the same checks as every other queue's; and the
//! recovery ladder (Abort, reset) re-creates it polled.

mod common;

use std::collections::BTreeMap;

use blk::{Bio, Completion, Segment, Status};
use common::{Buf, Rig, pattern};
use nvme::IrqMode;
use nvme::blkdev::HostConfig;
use nvme::fake::{FakeCompletion, FakeConfig, Hostile};

const SEC: u64 = 1_000_000_000;

/// 4 CPUs, 4 queue pairs, an MSI-X table of 5 entries, the first `poll_queues` pairs polled.
fn rig(poll_queues: u16, completion: FakeCompletion, timeout_ns: u64) -> Rig {
    let mut cfg = FakeConfig::new(4);
    cfg.completion = completion;
    let hcfg = HostConfig {
        timeout_ns,
        ..HostConfig::default()
    };
    Rig::with_poll_queues(
        cfg,
        4,
        IrqMode::MsiX { vectors: 5 },
        poll_queues,
        hcfg,
        nvme::Config::default(),
    )
}

fn collect(rig: &Rig, seen: &mut BTreeMap<u64, Completion>) {
    for c in rig.platform.take_done() {
        assert!(
            seen.insert(c.cookie, c).is_none(),
            "cookie {} completed twice",
            c.cookie
        );
    }
}

#[test]
fn polled_pairs_are_created_without_interrupt_and_take_no_vector() {
    let rig = rig(2, FakeCompletion::Immediate, 30 * SEC);
    // (qid, IV, IEN) as the device recorded Create I/O CQ.
    assert_eq!(
        rig.fake.io_cqs(),
        vec![(1, 0, false), (2, 0, false), (3, 1, true), (4, 2, true)]
    );
    let plan = rig.host.plan();
    assert_eq!(plan.nr_vectors(), 3, "admin + the two interrupt queues");
    assert_eq!(rig.host.controller().vector_of(0), None);
    assert_eq!(rig.host.controller().vector_of(2), Some(1));
    // The CPUs of the polled queues must poll while they wait; the others may halt.
    assert_eq!(
        (0..4).map(|c| rig.host.must_poll(c)).collect::<Vec<_>>(),
        vec![true, true, false, false]
    );
    assert!(
        (0..4).all(|c| !rig.host.polling_window(c)),
        "no adaptive window is involved"
    );

    // Every queue polled: only the admin vector is left.
    let all = self::rig(4, FakeCompletion::Immediate, 30 * SEC);
    assert!(all.fake.io_cqs().iter().all(|&(_, iv, ien)| iv == 0 && !ien));
    assert_eq!(all.host.plan().nr_vectors(), 1);
    assert!((0..4).all(|c| all.host.must_poll(c)));
}

#[test]
fn a_polled_completion_is_found_only_by_polling() {
    let rig = rig(2, FakeCompletion::Immediate, 30 * SEC);
    rig.fake.take_messages(); // bring-up's admin completions
    let buf = Buf::new(&rig.fake, 4096);
    let seg = [Segment::new(buf.phys, 4096)];
    // cpu1's queue (q2) is polled; the device completes the read at once.
    rig.host
        .queue(0)
        .unwrap()
        .submit(1, &Bio::read(64, 8, &seg, 7))
        .unwrap();
    assert_eq!(rig.fake.stats().cqes_posted - rig.fake.stats().admin_commands, 1);
    assert!(rig.fake.take_messages().is_empty(), "no message for a polled CQ");
    // Interrupt handlers on every vector, and the tick, find nothing of it.
    for v in 0..rig.host.plan().nr_vectors() {
        assert_eq!(rig.host.handle_vector(v, 0), 0, "vector {v}");
    }
    assert!(rig.platform.take_done().is_empty());
    // Another CPU's queue poll does not reap it either: only its own queue's.
    assert_eq!(rig.host.poll(0, 0), 0);
    assert!(rig.platform.take_done().is_empty());
    assert_eq!(rig.host.poll(1, 1), 1);
    let done = rig.platform.take_done();
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].cookie, done[0].status, done[0].complete_cpu),
        (7, Status::Ok, 1)
    );
    let r = rig.host.report();
    assert_eq!(r.polled, 1);
    assert!(r.per_vector.iter().all(|&n| n == 0));

    // The same on an interrupt queue (cpu2, q3, vector 1) comes by its message.
    rig.host
        .queue(0)
        .unwrap()
        .submit(2, &Bio::read(64, 8, &seg, 8))
        .unwrap();
    assert_eq!(rig.fake.take_messages(), vec![1]);
    assert_eq!(rig.host.handle_vector(1, 2), 1);
    assert_eq!(rig.platform.take_done()[0].cookie, 8);
    assert_eq!(rig.fake.stats().msix_per_vector[1], 1);
    rig.assert_no_violations();
}

#[test]
fn bad_entries_on_a_polled_queue_are_refused_as_on_interrupt_queues() {
    for h in [
        Hostile::DuplicateCid,
        Hostile::InventedCid,
        Hostile::WrongSqid,
        Hostile::BadSqhd,
    ] {
        let rig = rig(4, FakeCompletion::Deferred, 30 * SEC);
        rig.fake.set_invented_cid(rig.host.controller().cids_per_queue() as u16);
        rig.fake.set_hostile(h);
        rig.fake.take_messages(); // bring-up's admin completions
        let bufs: Vec<Buf> = (0..16).map(|_| Buf::new(&rig.fake, 4096)).collect();
        for (i, b) in bufs.iter().enumerate() {
            pattern(b.bytes(), i as u64);
            let seg = [Segment::new(b.phys, 4096)];
            rig.host
                .queue(0)
                .unwrap()
                .submit(i % 4, &Bio::write(8 * i as u64, 8, &seg, i as u64))
                .unwrap();
        }
        rig.fake.complete_pending(16, |n| n - 1);
        assert!(rig.fake.take_messages().is_empty(), "{h:?}: every queue is polled");
        let mut seen = BTreeMap::new();
        rig.poll_polled_cpus();
        collect(&rig, &mut seen);
        assert_eq!(seen.len(), 16, "{h:?}");
        assert!(seen.values().all(|c| c.status == Status::Ok), "{h:?}");
        // Nothing more: no completion twice, no late copy taken.
        rig.poll_polled_cpus();
        collect(&rig, &mut seen);
        let r = rig.host.report();
        assert_eq!(
            r.controller.bogus_cqes, 16,
            "{h:?}: one bad entry per completion, each refused"
        );
        assert_eq!(r.controller.bogus_cqes, rig.fake.stats().hostile_cqes);
        assert_eq!((r.polled, r.refused_by_blk), (16, 0), "{h:?}");
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(rig.fake.read_data(1, 8 * 512 * i, 4096), b.bytes().to_vec());
        }
    }
}

#[test]
fn a_held_read_on_a_polled_queue_is_aborted_then_reset_and_the_queue_comes_back_polled() {
    let rig = rig(2, FakeCompletion::Deferred, SEC);
    let mut seen = BTreeMap::new();
    rig.fake.hold(1, 1000);
    let held = Buf::new(&rig.fake, 4096);
    held.bytes().fill(0xEE);
    // cpu0 (polled q1): the held read; cpu1 (polled) and cpu2 (interrupt) have others in flight.
    let q = rig.host.queue(0).unwrap();
    q.submit(0, &Bio::read(1000, 8, &[Segment::new(held.phys, 4096)], 100))
        .unwrap();
    rig.fake.complete_pending(1, |_| 0);
    assert_eq!(rig.fake.held(), 1);
    rig.platform.advance(SEC + 1);
    assert_eq!(rig.host.tick(0).unwrap(), 1);
    assert_eq!(rig.host.report().controller.aborts_sent, 1);
    rig.poll_polled_cpus();
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert!(seen.is_empty(), "QEMU's Abort does not abort");

    let bufs: Vec<Buf> = (0..4).map(|_| Buf::new(&rig.fake, 4096)).collect();
    for (i, b) in bufs.iter().enumerate() {
        pattern(b.bytes(), i as u64);
        let cpu = [1, 2, 1, 2][i];
        q.submit(
            cpu,
            &Bio::write(8 * i as u64, 8, &[Segment::new(b.phys, 4096)], i as u64),
        )
        .unwrap();
    }
    rig.platform.advance(SEC + 1);
    assert_eq!(rig.host.tick(0).unwrap(), 1, "the held read's second expiry");
    let r = rig.host.report();
    assert_eq!(
        (
            r.controller.resets,
            r.controller.reset_failed,
            r.controller.reset_reissued
        ),
        (1, 1, 4)
    );
    // The queues came back as they were: q1-q2 polled (IEN=0, no vector), q3-q4 on vectors 1-2.
    assert_eq!(
        rig.fake.io_cqs(),
        vec![(1, 0, false), (2, 0, false), (3, 1, true), (4, 2, true)]
    );
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[&100].status, Status::Timeout);
    // The re-issued writes complete: cpu1's by its poll only, cpu2's by its interrupt.
    rig.fake.take_messages();
    rig.fake.complete_pending(4, |n| n - 1);
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 3, "only cpu2's two by interrupt");
    rig.poll_polled_cpus();
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 5);
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(seen[&(i as u64)].status, Status::Ok);
        assert_eq!(rig.fake.read_data(1, 8 * 512 * i, 4096), b.bytes().to_vec());
    }
    // The polled queue serves I/O after the reset.
    let buf = Buf::new(&rig.fake, 4096);
    q.submit(0, &Bio::read(3000, 8, &[Segment::new(buf.phys, 4096)], 200))
        .unwrap();
    rig.fake.complete_pending(1, |_| 0);
    assert!(rig.fake.take_messages().is_empty());
    assert_eq!(rig.host.poll(0, 0), 1);
    collect(&rig, &mut seen);
    assert_eq!(seen[&200].status, Status::Ok);
    rig.fake.release_held();
    assert!(
        held.bytes().iter().all(|&x| x == 0xEE),
        "the timed-out read's buffer is never written"
    );
    rig.assert_no_violations();
}

/// The MSI-X mask bit of the fake, as the kernel sets it for `nvme.irq_poll`; counts the writes.
struct Mask {
    fake: std::sync::Arc<nvme::fake::FakeNvme>,
    writes: std::sync::atomic::AtomicUsize,
}

impl nvme::adaptive::VectorMask for Mask {
    fn set_masked(&self, vector: u16, masked: bool) {
        self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.fake.set_vector_masked(vector, masked);
    }
}

#[test]
fn polled_queues_beside_the_interrupt_then_poll_mode() {
    // nvme.poll_queues=1 nvme.irq_poll=on on 2 CPUs: cpu0's queue polled, cpu1's on vector 1
    // with its polling window.
    let mut cfg = FakeConfig::new(2);
    cfg.completion = FakeCompletion::Deferred;
    let hcfg = HostConfig {
        adaptive: Some(nvme::adaptive::AdaptiveConfig::default()),
        ..HostConfig::default()
    };
    let rig = Rig::with_poll_queues(cfg, 2, IrqMode::MsiX { vectors: 3 }, 1, hcfg, nvme::Config::default());
    assert_eq!(rig.fake.io_cqs(), vec![(1, 0, false), (2, 1, true)]);
    let mask = Mask {
        fake: rig.fake.clone(),
        writes: std::sync::atomic::AtomicUsize::new(0),
    };
    rig.fake.take_messages();
    let bufs: Vec<Buf> = (0..2).map(|_| Buf::new(&rig.fake, 4096)).collect();
    for (cpu, b) in bufs.iter().enumerate() {
        let seg = [Segment::new(b.phys, 4096)];
        rig.host
            .queue(0)
            .unwrap()
            .submit(cpu, &Bio::read(8 * cpu as u64, 8, &seg, cpu as u64))
            .unwrap();
    }
    rig.fake.complete_pending(2, |_| 0);
    assert_eq!(rig.fake.take_messages(), vec![1], "only the interrupt queue signals");
    // cpu1's interrupt reaps its read and opens its window; cpu0 has no window, only its poll.
    assert_eq!(rig.host.handle_vector_adaptive(1, 1, &mask), 1);
    assert!(rig.host.polling_window(1) && rig.fake.vector_masked(1));
    assert!(!rig.host.polling_window(0) && rig.host.must_poll(0) && rig.host.must_poll(1));
    assert_eq!(
        rig.host.poll_open_windows(0, &mask),
        0,
        "the polled queue is no window's"
    );
    assert_eq!(rig.host.poll_adaptive(0, 0, &mask), 1);
    assert_eq!(
        mask.writes.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "polling cpu0 touches no mask"
    );
    let done = rig.platform.take_done();
    assert_eq!(done.len(), 2);
    assert!(
        done.iter()
            .all(|c| c.status == Status::Ok && usize::from(c.complete_cpu) == c.cookie as usize)
    );
    // cpu1's window closes after its idle time: unmasked, cpu1 may halt again; cpu0 still polls.
    rig.platform
        .advance(nvme::adaptive::AdaptiveConfig::default().idle_ns + 1);
    assert_eq!(rig.host.poll_adaptive(1, 1, &mask), 0);
    assert!(!rig.host.polling_window(1) && !rig.fake.vector_masked(1));
    assert!(rig.host.must_poll(0) && !rig.host.must_poll(1));
}
