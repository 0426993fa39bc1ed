//! `Queue::submit_deferred` and `Queue::commit`: a burst of submissions rings a batching driver's
//! doorbell once (issue 22), a driver that does not batch sees every request as `last`, and a
//! pass that is turned away still rings at once.

mod common;

use blk::{Bio, CompletionPolicy, Driver, HwCtx, IssueToken, Queue, QueueConfig, QueueRqError, Rq, Status};
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
