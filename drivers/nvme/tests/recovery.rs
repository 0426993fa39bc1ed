//! Timeouts (Abort, then controller reset), hostile completion entries, and a controller that
//! does not come back: every request ends exactly once, and never while the device may still
//! write its buffer.

mod common;

use std::collections::BTreeMap;

use blk::{Bio, Completion, Segment, Status};
use common::{Buf, Rig, pattern};
use nvme::IrqMode;
use nvme::blkdev::HostConfig;
use nvme::fake::{FakeCompletion, FakeConfig, Hostile};

const SEC: u64 = 1_000_000_000;

fn rig(completion: FakeCompletion, abort_works: bool) -> Rig {
    let mut cfg = FakeConfig::new(2);
    cfg.completion = completion;
    cfg.abort_works = abort_works;
    let hcfg = HostConfig {
        timeout_ns: SEC,
        ..HostConfig::default()
    };
    Rig::new(cfg, 2, IrqMode::MsiX { vectors: 3 }, hcfg)
}

/// Collects completions by cookie, asserting none arrives twice.
fn collect(rig: &Rig, seen: &mut BTreeMap<u64, Completion>) {
    for c in rig.platform.take_done() {
        assert!(
            seen.insert(c.cookie, c).is_none(),
            "cookie {} completed twice",
            c.cookie
        );
    }
}

fn submit(rig: &Rig, cpu: usize, bio: &Bio<'_>) {
    rig.host.queue(0).unwrap().submit(cpu, bio).expect("submit");
}

#[test]
fn timeout_aborts_then_resets_and_reissues_the_rest_exactly_once() {
    let rig = rig(FakeCompletion::Deferred, false);
    let mut seen = BTreeMap::new();
    // A read held by the backend (QEMU: blkdebug break).
    rig.fake.hold(1, 1000);
    let held = Buf::new(&rig.fake, 4096);
    held.bytes().fill(0xEE);
    submit(&rig, 0, &Bio::read(1000, 8, &[Segment::new(held.phys, 4096)], 100));
    rig.fake.complete_pending(16, |_| 0);
    assert_eq!(rig.fake.held(), 1);

    // First expiry: Abort; QEMU answers "not aborted", so the request keeps waiting.
    rig.platform.advance(SEC + 1);
    assert_eq!(rig.host.tick(0).unwrap(), 1);
    let r = rig.host.report().controller;
    assert_eq!((r.aborts_sent, r.aborts_succeeded, r.resets), (1, 0, 0));
    assert_eq!(rig.fake.stats().aborts, 1);
    collect(&rig, &mut seen);
    assert!(seen.is_empty());

    // Half a timeout later, other I/O is submitted on both queues; it is in flight at the reset.
    rig.platform.advance(SEC / 2);
    let bufs: Vec<Buf> = (0..8).map(|_| Buf::new(&rig.fake, 8192)).collect();
    for (i, b) in bufs.iter().enumerate() {
        let sector = 16 * i as u64;
        let seg = [Segment::new(b.phys, 8192)];
        if i % 2 == 0 {
            pattern(b.bytes(), i as u64);
            submit(&rig, i % 2, &Bio::write(sector, 16, &seg, i as u64));
        } else {
            b.bytes().fill(0);
            submit(&rig, i % 2, &Bio::read(sector, 16, &seg, i as u64));
        }
    }
    assert_eq!(rig.fake.pending(), 8);

    // Second expiry of the held read: controller reset.
    rig.platform.advance(SEC / 4);
    assert_eq!(rig.host.tick(1).unwrap(), 0, "nothing has expired yet");
    rig.platform.advance(SEC / 4);
    assert_eq!(rig.host.tick(1).unwrap(), 1, "only the held read has expired");
    let s = rig.fake.stats();
    assert_eq!(s.disables, 1);
    assert_eq!(s.drained_by_reset, 8, "QEMU drains in-flight I/O inside the CC write");
    assert_eq!(s.held_dropped_by_reset, 1);
    let r = rig.host.report();
    assert_eq!(r.controller.resets, 1);
    assert_eq!(r.controller.reset_reissued, 8);
    assert_eq!(r.controller.reset_failed, 1, "the timed-out read");
    assert_eq!(r.failed_by_recovery, 0);
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[&100].status, Status::Timeout);
    // The drained entries in the old CQ memory were zeroed, not taken as completions.
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 1);

    // The re-issued commands complete normally on the new queues.
    assert_eq!(rig.fake.pending(), 8);
    rig.fake.complete_pending(8, |n| n - 1);
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 9);
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(seen[&(i as u64)].status, Status::Ok);
        let mut expect = vec![0u8; 8192];
        pattern(&mut expect, i as u64);
        if i % 2 == 0 {
            assert_eq!(rig.fake.read_data(1, 16 * 512 * i, 8192), expect);
        } else {
            // Sectors 16i.. were never written: zeros.
            assert!(b.bytes().iter().all(|&x| x == 0));
        }
    }
    // The device no longer owns the timed-out read's buffer: nothing ever writes it.
    rig.fake.release_held();
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 9);
    assert!(held.bytes().iter().all(|&x| x == 0xEE));
    // And the controller works on: the same LBA reads fine now.
    submit(&rig, 0, &Bio::read(1000, 8, &[Segment::new(held.phys, 4096)], 200));
    rig.fake.complete_pending(1, |_| 0);
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen[&200].status, Status::Ok);
    assert_eq!(rig.host.report().controller.bogus_cqes, 0);
    rig.assert_no_violations();
}

#[test]
fn a_request_reissued_by_one_reset_is_failed_by_the_next() {
    let rig = rig(FakeCompletion::Immediate, false);
    let mut seen = BTreeMap::new();
    rig.fake.hold(1, 1000);
    rig.fake.hold(1, 2000);
    rig.fake.hold(1, 3000);
    let b = Buf::new(&rig.fake, 3 * 4096);
    let seg = |i: u64| [Segment::new(b.phys + i * 4096, 4096)];
    submit(&rig, 0, &Bio::read(1000, 8, &seg(0), 0)); // t=0
    submit(&rig, 1, &Bio::read(2000, 8, &seg(1), 1)); // t=0
    rig.platform.advance(SEC + 1); // t=1: both aborted
    assert_eq!(rig.host.tick(0).unwrap(), 2);
    rig.platform.advance(SEC / 2); // t=1.5
    submit(&rig, 0, &Bio::read(3000, 8, &seg(2), 2));
    rig.platform.advance(SEC / 2); // t=2: #0 resets; #1 and #2 re-issued with fresh deadlines
    assert_eq!(
        rig.host.tick(0).unwrap(),
        1,
        "re-issued requests do not expire at the reset"
    );
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[&0].status, Status::Timeout);
    let r = rig.host.report().controller;
    assert_eq!((r.resets, r.reset_reissued, r.aborts_sent), (1, 2, 2));
    assert_eq!(rig.fake.held(), 2, "the re-issued reads are held again");
    rig.platform.advance(SEC / 2); // t=2.5: within the fresh timeout
    assert_eq!(rig.host.tick(0).unwrap(), 0);
    rig.platform.advance(SEC / 2 + 1); // t=3: first expiry since the reset: both aborted
    assert_eq!(rig.host.tick(0).unwrap(), 2);
    let r = rig.host.report().controller;
    assert_eq!((r.resets, r.aborts_sent), (1, 4));
    rig.platform.advance(SEC + 1); // t=4: second expiry: reset #2 fails both, once each
    rig.host.tick(0).unwrap();
    collect(&rig, &mut seen);
    let r = rig.host.report();
    assert_eq!(r.controller.resets, 2);
    assert_eq!(r.controller.reset_reissued, 2, "nothing is re-issued twice");
    assert_eq!(seen.len(), 3, "{seen:?}");
    // The scan meets #2 (queue 1, tag 1) before #1 (queue 2): #2's expiry resets, so #2 ends
    // with Timeout, and #1, re-issued by the first reset and still held, is failed.
    assert_eq!(seen[&2].status, Status::Timeout);
    assert_eq!(seen[&1].status, Status::IoError);
    assert_eq!(r.failed_by_recovery, 1);
    // Nothing left in flight; later ticks find nothing.
    rig.platform.advance(10 * SEC);
    assert_eq!(rig.host.tick(0).unwrap(), 0);
    rig.fake.release_held();
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 3);
    assert_eq!(rig.host.queue(0).unwrap().in_flight(), 0);
    rig.assert_no_violations();
}

#[test]
fn an_abort_that_works_ends_the_request_without_a_reset() {
    let rig = rig(FakeCompletion::Immediate, true);
    let mut seen = BTreeMap::new();
    rig.fake.hold(1, 64);
    let b = Buf::new(&rig.fake, 4096);
    submit(&rig, 1, &Bio::read(64, 8, &[Segment::new(b.phys, 4096)], 5));
    rig.platform.advance(SEC + 1);
    assert_eq!(rig.host.tick(1).unwrap(), 1);
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen[&5].status, Status::Aborted, "Abort Requested (00/07h)");
    let r = rig.host.report().controller;
    assert_eq!((r.aborts_sent, r.aborts_succeeded, r.resets), (1, 1, 0));
}

#[test]
fn wrong_phase_completions_are_invisible_and_recovered_by_reset() {
    let rig = rig(FakeCompletion::Immediate, false);
    let mut seen = BTreeMap::new();
    let b = Buf::new(&rig.fake, 4096);
    pattern(b.bytes(), 9);
    rig.fake.set_hostile(Hostile::WrongPhase);
    submit(&rig, 0, &Bio::write(80, 8, &[Segment::new(b.phys, 4096)], 1));
    assert_eq!(rig.fake.stats().corrupted_cqes, 1);
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert!(seen.is_empty(), "an entry with the wrong phase is not a completion");
    rig.fake.set_hostile(Hostile::None);
    rig.platform.advance(SEC + 1);
    rig.host.tick(0).unwrap(); // abort
    rig.platform.advance(SEC + 1);
    rig.host.tick(0).unwrap(); // reset: the write is the culprit
    collect(&rig, &mut seen);
    assert_eq!(seen[&1].status, Status::Timeout);
    assert_eq!(rig.host.report().controller.resets, 1);
    // The reset zeroed the ring: the queue works again.
    submit(&rig, 0, &Bio::read(80, 8, &[Segment::new(b.phys, 4096)], 2));
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen[&2].status, Status::Ok);
    rig.assert_no_violations();
}

#[test]
fn corrupt_sqhd_is_refused_counted_and_recovered() {
    let rig = rig(FakeCompletion::Immediate, false);
    let mut seen = BTreeMap::new();
    let b = Buf::new(&rig.fake, 4096);
    rig.fake.set_hostile(Hostile::CorruptSqhd);
    submit(&rig, 0, &Bio::read(8, 8, &[Segment::new(b.phys, 4096)], 1));
    submit(&rig, 1, &Bio::read(16, 8, &[Segment::new(b.phys, 4096)], 2));
    rig.fake.set_hostile(Hostile::None);
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert!(seen.is_empty());
    assert_eq!(rig.host.report().controller.bogus_cqes, 2);
    rig.platform.advance(SEC + 1);
    rig.host.tick(0).unwrap(); // aborts for both
    rig.platform.advance(SEC + 1);
    rig.host.tick(0).unwrap(); // first one resets; the second is re-issued and completes
    rig.deliver_interrupts();
    rig.host.tick(0).unwrap();
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[&1].status, Status::Timeout);
    assert_eq!(seen[&2].status, Status::Ok);
    assert_eq!(rig.host.report().controller.resets, 1);
}

#[test]
fn a_controller_that_does_not_come_back_keeps_the_buffers() {
    let rig = rig(FakeCompletion::Immediate, false);
    let mut seen = BTreeMap::new();
    rig.fake.hold(1, 8);
    let b = Buf::new(&rig.fake, 4096);
    submit(&rig, 0, &Bio::read(8, 8, &[Segment::new(b.phys, 4096)], 1));
    rig.fake.set_ready_stuck(true);
    rig.platform.advance(SEC + 1);
    rig.host.tick(0).unwrap(); // abort
    rig.platform.advance(SEC + 1);
    rig.host.tick(0).unwrap(); // reset: the disable never finishes
    collect(&rig, &mut seen);
    assert!(
        seen.is_empty(),
        "the device may still own the buffer: the request must not end"
    );
    let r = rig.host.report().controller;
    assert_eq!((r.resets, r.resets_failed), (1, 1));
    assert!(rig.host.controller().failed());
    // New I/O fails at once instead of hanging.
    let b2 = Buf::new(&rig.fake, 4096);
    submit(&rig, 1, &Bio::read(64, 8, &[Segment::new(b2.phys, 4096)], 2));
    collect(&rig, &mut seen);
    assert_eq!(seen[&2].status, Status::IoError);
    // Once the controller answers again, the next timeout's reset brings it back and the held
    // request finally ends (failed: it was the culprit).
    rig.fake.set_ready_stuck(false);
    rig.platform.advance(SEC + 1);
    rig.host.tick(0).unwrap();
    collect(&rig, &mut seen);
    assert_eq!(seen[&1].status, Status::Timeout);
    assert!(!rig.host.controller().failed());
}

#[test]
fn an_explicit_reset_reissues_what_is_in_flight() {
    let rig = rig(FakeCompletion::Deferred, false);
    let mut seen = BTreeMap::new();
    let b = Buf::new(&rig.fake, 4 * 4096);
    for i in 0..4u64 {
        submit(
            &rig,
            (i % 2) as usize,
            &Bio::read(8 * i, 8, &[Segment::new(b.phys + i * 4096, 4096)], i),
        );
    }
    assert_eq!(rig.host.reset(0), (4, 0, true));
    // Twice: a second reset fails what the first re-issued (exactly once each).
    assert_eq!(rig.host.reset(1), (0, 4, true));
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 4);
    assert!(seen.values().all(|c| c.status == Status::IoError));
    rig.fake.complete_pending(100, |_| 0);
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 4, "nothing completes twice");
    assert_eq!(rig.host.report().failed_by_recovery, 4);
}

/// QEMU found this: requests in flight behind a held one are handed back by the reset, but kept
/// their expired block-layer deadline, so they timed out (Abort) in the same tick as the reset,
/// and the next expiry reset the controller again, failing requests that were fine. A request
/// re-issued after a reset must get a fresh deadline and start the timeout ladder from zero.
#[test]
fn requests_reissued_by_a_reset_get_a_fresh_deadline_and_are_never_failed_by_a_second_reset() {
    const OTHERS: usize = 8;
    let rig = rig(FakeCompletion::Deferred, false);
    let mut seen = BTreeMap::new();
    rig.fake.hold(1, 4000);
    let held = Buf::new(&rig.fake, 4096);
    held.bytes().fill(0xEE);
    submit(&rig, 0, &Bio::read(4000, 8, &[Segment::new(held.phys, 4096)], 100)); // t=0
    rig.fake.complete_pending(16, |_| 0);
    assert_eq!(rig.fake.held(), 1);

    // t=0.5: the others, on both CPUs and queues; the device is slow and keeps them.
    rig.platform.advance(SEC / 2);
    let bufs: Vec<Buf> = (0..OTHERS).map(|_| Buf::new(&rig.fake, 8192)).collect();
    for (i, b) in bufs.iter().enumerate() {
        let seg = [Segment::new(b.phys, 8192)];
        let sector = 16 * i as u64;
        if i % 2 == 0 {
            pattern(b.bytes(), 50 + i as u64);
            submit(&rig, i % 2, &Bio::write(sector, 16, &seg, i as u64));
        } else {
            b.bytes().fill(0xAA);
            submit(&rig, i % 2, &Bio::read(sector, 16, &seg, i as u64));
        }
    }
    assert_eq!(rig.fake.pending(), OTHERS);

    // t=1.01: the held read's first expiry (Abort, "not aborted"); the others are not due yet.
    rig.platform.advance(SEC / 2 + SEC / 100);
    assert_eq!(rig.host.tick(0).unwrap(), 1);
    // t=2.02: the held read's second expiry resets the controller. The others' original
    // deadlines (t=1.5) have passed too, but they are re-issued by the reset with fresh ones:
    // only the held read has expired, and no Abort is sent for a re-issued request.
    rig.platform.advance(SEC + SEC / 100);
    assert_eq!(
        rig.host.tick(0).unwrap(),
        1,
        "only the held read may expire at the reset"
    );
    let r = rig.host.report();
    assert_eq!(r.controller.resets, 1);
    assert_eq!(
        r.controller.aborts_sent, 1,
        "no Abort for requests the reset just re-issued"
    );
    assert_eq!(r.controller.reset_reissued, OTHERS as u64);
    assert_eq!(r.controller.reset_failed, 1);
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[&100].status, Status::Timeout);
    assert_eq!(rig.fake.pending(), OTHERS, "every other request is on the new queues");

    // t=2.9: within the fresh timeout nothing expires.
    rig.platform.advance(SEC * 88 / 100);
    assert_eq!(rig.host.tick(1).unwrap(), 0);
    // Half of them complete; the rest stay slow past the fresh deadline (t=3.02): their first
    // expiry since the reset sends an Abort (stage cleared by the re-issue), it does not reset.
    rig.fake.complete_pending(OTHERS / 2, |n| n - 1);
    rig.deliver_interrupts();
    rig.platform.advance(SEC / 5);
    assert_eq!(rig.host.tick(1).unwrap(), OTHERS / 2);
    let r = rig.host.report();
    assert_eq!(
        r.controller.resets, 1,
        "a re-issued request's first expiry must not reset"
    );
    assert_eq!(r.controller.aborts_sent, 1 + OTHERS as u64 / 2);
    // They complete before their second expiry.
    rig.fake.complete_pending(OTHERS, |n| n - 1);
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), OTHERS + 1, "{seen:?}");
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(seen[&(i as u64)].status, Status::Ok, "request {i}");
        if i % 2 == 0 {
            let mut expect = vec![0u8; 8192];
            pattern(&mut expect, 50 + i as u64);
            assert_eq!(rig.fake.read_data(1, 16 * 512 * i, 8192), expect, "write {i}");
        } else {
            assert!(b.bytes().iter().all(|&x| x == 0), "read {i} got the (zero) data");
        }
    }
    // Much later: nothing is left in flight, nothing expires, nothing was failed by recovery.
    rig.platform.advance(10 * SEC);
    assert_eq!(rig.host.tick(0).unwrap(), 0);
    let r = rig.host.report();
    assert_eq!((r.controller.resets, r.failed_by_recovery), (1, 0));
    assert_eq!(r.controller.bogus_cqes, 0);
    let q = rig.host.queue(0).unwrap();
    assert_eq!(q.in_flight(), 0);
    let c = q.counters();
    assert_eq!(c.timeouts, 2 + OTHERS as u64 / 2, "held read twice, the slow half once");
    rig.fake.release_held();
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), OTHERS + 1);
    assert!(held.bytes().iter().all(|&x| x == 0xEE));
    rig.assert_no_violations();
}

/// Head-of-line blocking: a request posted after the stuck one waits behind it and reaches its
/// second expiry in the same scan, earlier in the scan's order. The reset fails the oldest
/// aborted request (the stuck one) with `Timeout`, whichever handler asked for it, and the
/// other is requeued with a fresh deadline and completes.
#[test]
fn the_reset_fails_the_oldest_aborted_request_not_the_first_one_scanned() {
    let rig = rig(FakeCompletion::Immediate, false);
    let mut seen = BTreeMap::new();
    rig.fake.hold(1, 512);
    rig.fake.hold(1, 640);
    let b = Buf::new(&rig.fake, 2 * 4096);
    // The stuck read on CPU 1 (queue 2, scanned last), the one behind it on CPU 0 (queue 1).
    submit(&rig, 1, &Bio::read(512, 8, &[Segment::new(b.phys, 4096)], 1)); // t=0
    rig.platform.advance(SEC / 10);
    submit(&rig, 0, &Bio::read(640, 8, &[Segment::new(b.phys + 4096, 4096)], 2)); // t=0.1
    rig.platform.advance(SEC);
    assert_eq!(rig.host.tick(0).unwrap(), 2, "t=1.1: both aborted");
    rig.platform.advance(SEC + 1);
    // t=2.1: both at their second expiry; the scan meets #2 first, its handler resets and
    // the reset ends #1 before the scan gets to it.
    assert_eq!(rig.host.tick(0).unwrap(), 1);
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[&1].status,
        Status::Timeout,
        "the oldest aborted request is the culprit"
    );
    let r = rig.host.report();
    assert_eq!(
        (
            r.controller.resets,
            r.controller.reset_reissued,
            r.controller.reset_failed
        ),
        (1, 1, 1)
    );
    assert_eq!(r.failed_by_recovery, 0);
    assert_eq!(rig.host.queue(0).unwrap().counters().requeued, 1);
    // #2 is back on the device with a fresh deadline: nothing expires for a timeout period.
    rig.platform.advance(SEC * 9 / 10);
    assert_eq!(rig.host.tick(0).unwrap(), 0);
    // The backend answers: #2 completes (the reset's copy of #1 was dropped with the reset).
    rig.fake.release_held();
    rig.deliver_interrupts();
    collect(&rig, &mut seen);
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[&2].status, Status::Ok);
    assert_eq!(rig.host.queue(0).unwrap().in_flight(), 0);
    assert_eq!(rig.host.report().controller.bogus_cqes, 0);
    rig.assert_no_violations();
}
