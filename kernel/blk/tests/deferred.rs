//! `Queue::submit_deferred` and `Queue::commit`: a burst of submissions rings a batching driver's
//! doorbell once, a driver that does not batch sees every request as `last`, and a
//! pass that is turned away still rings at once. `Queue::submit_batch`: a burst handed over in
//! one call reaches the driver in order with one `last`, and stops at the first bio it cannot
//! take.

mod common;

use blk::{
    BatchOutcome, Bio, BlkError, CompletionPolicy, Driver, HwCtx, IssueToken, Queue, QueueConfig, QueueRqError, Rq,
    Status,
};
use common::HostPlatform;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const CAP: u64 = 1 << 20;

/// A driver that records `(cookie, last)` per request and counts its doorbells: one per request
/// queued with `last`, one per `commit_rqs` that finds requests waiting for it, as NVMe's does.
#[derive(Default)]
struct Doorbells<const BATCHES: bool> {
    queued: Mutex<Vec<(u64, bool)>>,
    /// Requests posted with `last == false` and not yet rung.
    unrung: AtomicUsize,
    doorbells: AtomicUsize,
    commit_calls: AtomicUsize,
    busy_next: Mutex<VecDeque<bool>>,
    issued: Mutex<Vec<IssueToken>>,
}

impl<const BATCHES: bool> Driver for Doorbells<BATCHES> {
    type Pdu = ();
    const DEFERS_DOORBELL: bool = BATCHES;

    fn queue_rq<'a>(&self, _hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, last: bool) -> Result<(), QueueRqError<'a, Self>> {
        if self.busy_next.lock().unwrap().pop_front() == Some(true) {
            return Err(QueueRqError::Busy(rq));
        }
        self.queued.lock().unwrap().push((rq.cookie(), last));
        self.issued.lock().unwrap().push(rq.issue());
        if last {
            self.unrung.store(0, Ordering::SeqCst);
            self.doorbells.fetch_add(1, Ordering::SeqCst);
        } else {
            self.unrung.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    fn commit_rqs(&self, _hw: &HwCtx<'_, Self>) {
        self.commit_calls.fetch_add(1, Ordering::SeqCst);
        if self.unrung.swap(0, Ordering::SeqCst) != 0 {
            self.doorbells.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn queue<const BATCHES: bool>(depth: u32) -> Queue<Doorbells<BATCHES>> {
    let mut cfg = QueueConfig::new(1, 1, depth, CAP);
    cfg.completion = CompletionPolicy::Irq;
    Queue::new(
        cfg,
        Doorbells::<BATCHES>::default(),
        Arc::new(HostPlatform::manual(1, 1024)),
    )
    .unwrap()
}

fn read(cookie: u64) -> Bio<'static> {
    Bio::read(cookie * 8, 8, &[], cookie)
}

#[test]
fn a_burst_rings_a_batching_drivers_doorbell_once_at_commit() {
    let q = queue::<true>(8);
    for c in 1..=4 {
        q.submit_deferred(0, &read(c)).unwrap();
    }
    let d = q.driver();
    assert_eq!(
        *d.queued.lock().unwrap(),
        [(1, false), (2, false), (3, false), (4, false)],
        "every request reached the driver at once, none as last"
    );
    assert_eq!(d.doorbells.load(Ordering::SeqCst), 0, "nothing rung before the commit");
    q.commit(0);
    assert_eq!(d.doorbells.load(Ordering::SeqCst), 1, "one doorbell for the burst");
    assert_eq!(q.counters().commits, 1);
    q.commit(0);
    assert_eq!(
        d.commit_calls.load(Ordering::SeqCst),
        1,
        "a second commit has nothing to ring"
    );

    // A plain submit still rings at once; a commit after it finds nothing of ours.
    q.submit(0, &read(5)).unwrap();
    assert_eq!(d.queued.lock().unwrap()[4], (5, true));
    assert_eq!(d.doorbells.load(Ordering::SeqCst), 2);
    q.commit(0);
    assert_eq!(d.commit_calls.load(Ordering::SeqCst), 1);

    // The requests complete as usual.
    let tokens = d.issued.lock().unwrap().clone();
    for t in tokens {
        q.complete(0, 0, t, Status::Ok).unwrap();
    }
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn a_driver_that_does_not_batch_sees_every_deferred_request_as_last() {
    let q = queue::<false>(8);
    for c in 1..=3 {
        q.submit_deferred(0, &read(c)).unwrap();
    }
    let d = q.driver();
    assert_eq!(*d.queued.lock().unwrap(), [(1, true), (2, true), (3, true)]);
    assert_eq!(d.doorbells.load(Ordering::SeqCst), 3);
    q.commit(0);
    assert_eq!(
        d.commit_calls.load(Ordering::SeqCst),
        0,
        "no commit_rqs for a driver without one"
    );
    assert_eq!(q.counters().commits, 0);
}

#[test]
fn a_turned_away_request_does_not_lose_the_bursts_doorbell() {
    let q = queue::<true>(8);
    q.submit_deferred(0, &read(1)).unwrap();
    // The device is busy for the second: it waits on the dispatch FIFO.
    q.driver().busy_next.lock().unwrap().extend([true]);
    q.submit_deferred(0, &read(2)).unwrap();
    let d = q.driver();
    assert_eq!(*d.queued.lock().unwrap(), [(1, false)]);
    q.commit(0);
    assert_eq!(d.doorbells.load(Ordering::SeqCst), 1, "the first request is rung");
    // A completion frees resources: the turned-away request goes out and rings itself.
    let first = d.issued.lock().unwrap()[0];
    q.complete(0, 0, first, Status::Ok).unwrap();
    assert_eq!(d.queued.lock().unwrap()[1], (2, true));
    assert_eq!(d.doorbells.load(Ordering::SeqCst), 2);
    assert_eq!(d.unrung.load(Ordering::SeqCst), 0, "nothing left unrung");
}

#[test]
fn commit_on_a_cpu_out_of_range_does_nothing() {
    let q = queue::<true>(8);
    q.submit_deferred(0, &read(1)).unwrap();
    q.commit(7);
    assert_eq!(q.driver().doorbells.load(Ordering::SeqCst), 0);
    q.commit(0);
    assert_eq!(q.driver().doorbells.load(Ordering::SeqCst), 1);
}

fn reads(cookies: std::ops::RangeInclusive<u64>) -> Vec<Bio<'static>> {
    cookies.map(read).collect()
}

fn complete_all<const BATCHES: bool>(q: &Queue<Doorbells<BATCHES>>) {
    let tokens: Vec<IssueToken> = q.driver().issued.lock().unwrap().drain(..).collect();
    for t in tokens {
        q.complete(0, 0, t, Status::Ok).unwrap();
    }
}

#[test]
fn a_batch_reaches_the_driver_in_order_with_one_last_and_one_doorbell() {
    for batches in [true, false] {
        let (queued, doorbells, commits) = if batches {
            let q = queue::<true>(8);
            let outcome = q.submit_batch(0, &reads(1..=5));
            assert_eq!(
                outcome,
                BatchOutcome {
                    accepted: 5,
                    error: None
                }
            );
            let d = q.driver();
            let r = (
                d.queued.lock().unwrap().clone(),
                d.doorbells.load(Ordering::SeqCst),
                q.counters().commits,
            );
            complete_all(&q);
            assert_eq!(q.in_flight(), 0);
            r
        } else {
            let q = queue::<false>(8);
            assert_eq!(q.submit_batch(0, &reads(1..=5)).accepted, 5);
            let d = q.driver();
            (
                d.queued.lock().unwrap().clone(),
                d.doorbells.load(Ordering::SeqCst),
                q.counters().commits,
            )
        };
        assert_eq!(
            queued,
            [(1, false), (2, false), (3, false), (4, false), (5, true)],
            "batches={batches}: in order, only the last as last"
        );
        assert_eq!(doorbells, 1, "batches={batches}: one doorbell for the batch");
        assert_eq!(commits, 0, "batches={batches}: the last request rang; no commit_rqs");
    }
}

#[test]
fn a_batch_longer_than_a_chunk_rings_once_per_chunk_in_order() {
    let q = queue::<true>(64);
    let n = blk::SUBMIT_BATCH_CHUNK as u64 + 8;
    assert_eq!(q.submit_batch(0, &reads(1..=n)).accepted, n as usize);
    let d = q.driver();
    let queued = d.queued.lock().unwrap().clone();
    let cookies: Vec<u64> = queued.iter().map(|&(c, _)| c).collect();
    assert_eq!(cookies, (1..=n).collect::<Vec<_>>());
    let lasts: Vec<u64> = queued.iter().filter(|&&(_, last)| last).map(|&(c, _)| c).collect();
    assert_eq!(lasts, [blk::SUBMIT_BATCH_CHUNK as u64, n]);
    assert_eq!(d.doorbells.load(Ordering::SeqCst), 2);
}

#[test]
fn a_request_turned_away_in_a_batch_waits_with_those_after_it_in_order() {
    let q = queue::<true>(8);
    q.driver().busy_next.lock().unwrap().extend([false, false, true]);
    assert_eq!(q.submit_batch(0, &reads(1..=5)).accepted, 5, "all five have their tags");
    let d = q.driver();
    assert_eq!(*d.queued.lock().unwrap(), [(1, false), (2, false)]);
    assert_eq!(
        d.doorbells.load(Ordering::SeqCst),
        1,
        "what went before is rung at once"
    );
    assert_eq!(q.in_flight(), 5);
    // A completion frees resources: the rest go out in order and ring.
    let first = d.issued.lock().unwrap()[0];
    q.complete(0, 0, first, Status::Ok).unwrap();
    let cookies: Vec<u64> = d.queued.lock().unwrap().iter().map(|&(c, _)| c).collect();
    assert_eq!(cookies, [1, 2, 3, 4, 5]);
    assert_eq!(d.unrung.load(Ordering::SeqCst), 0, "nothing left unrung");
    assert_eq!(q.counters().requeued, 1);
}

#[test]
fn a_batch_stops_at_the_first_bio_without_a_tag() {
    let q = queue::<true>(4);
    let outcome = q.submit_batch(0, &reads(1..=6));
    assert_eq!(outcome.accepted, 4);
    assert!(
        matches!(outcome.error, Some(BlkError::TagsExhausted { .. })),
        "{outcome:?}"
    );
    let d = q.driver();
    assert_eq!(d.queued.lock().unwrap().len(), 4);
    assert_eq!(d.doorbells.load(Ordering::SeqCst), 1, "the four taken are rung");
    complete_all(&q);
    // The rest, retried, go through.
    assert_eq!(q.submit_batch(0, &reads(5..=6)).accepted, 2);
    assert_eq!(d.queued.lock().unwrap().len(), 6);
}

#[test]
fn a_batch_stops_at_an_invalid_bio_and_submits_those_before_it() {
    let q = queue::<true>(8);
    let mut bios = reads(1..=4);
    bios[2] = Bio::read(CAP, 8, &[], 3);
    let outcome = q.submit_batch(0, &bios);
    assert_eq!(outcome.accepted, 2);
    assert!(matches!(outcome.error, Some(BlkError::BeyondEnd { .. })), "{outcome:?}");
    let d = q.driver();
    assert_eq!(*d.queued.lock().unwrap(), [(1, false), (2, true)]);
    assert_eq!(q.counters().rejected, 1);
    assert_eq!(q.in_flight(), 2, "the fourth was not looked at");
}

#[test]
fn a_batch_on_a_bad_cpu_takes_nothing() {
    let q = queue::<true>(8);
    let outcome = q.submit_batch(3, &reads(1..=2));
    assert_eq!(outcome.accepted, 0);
    assert!(
        matches!(outcome.error, Some(BlkError::CpuOutOfRange { .. })),
        "{outcome:?}"
    );
    assert!(q.driver().queued.lock().unwrap().is_empty());
}

#[test]
fn a_batch_on_a_quiesced_queue_waits_in_order_until_unquiesce() {
    let q = queue::<true>(8);
    q.quiesce();
    assert_eq!(q.submit_batch(0, &reads(1..=3)).accepted, 3);
    assert!(
        q.driver().queued.lock().unwrap().is_empty(),
        "nothing reaches a quiesced driver"
    );
    q.unquiesce(0).unwrap();
    let cookies: Vec<u64> = q.driver().queued.lock().unwrap().iter().map(|&(c, _)| c).collect();
    assert_eq!(cookies, [1, 2, 3]);
    assert_eq!(q.driver().unrung.load(Ordering::SeqCst), 0);
}

#[test]
fn a_bio_split_inside_a_batch_goes_after_those_before_it() {
    let mut cfg = QueueConfig::new(1, 1, 16, CAP);
    cfg.completion = CompletionPolicy::Irq;
    cfg.max_hw_sectors = 8;
    let q = Queue::new(
        cfg,
        Doorbells::<true>::default(),
        Arc::new(HostPlatform::manual(1, 1024)),
    )
    .unwrap();
    let bios = [read(1), Bio::read(64, 24, &[], 2), read(3)];
    assert_eq!(q.submit_batch(0, &bios).accepted, 3);
    let d = q.driver();
    let cookies: Vec<u64> = d.queued.lock().unwrap().iter().map(|&(c, _)| c).collect();
    assert_eq!(
        cookies,
        [1, 2, 2, 2, 3],
        "the split bio's three parts between its neighbours"
    );
    assert_eq!(q.in_flight(), 5);
    assert_eq!(d.unrung.load(Ordering::SeqCst), 0, "everything rung");
    complete_all(&q);
    assert_eq!(q.in_flight(), 0);
}
