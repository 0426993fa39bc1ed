//! Host-wide tags shared by several queues (one per logical drive of a controller).

mod common;

use blk::{Bio, BlkError, CompletionPolicy, Driver, HostTags, HwCtx, Queue, QueueConfig, QueueRqError, Rq, Status};
use common::HostPlatform;
use nullblk::{NullConfig, NullDriver, NullMode};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

const CAP: u64 = 1 << 20;

fn null_on(host: &Arc<HostTags>, ncpus: usize, platform: Arc<HostPlatform>) -> Queue<NullDriver> {
    let null = NullConfig::new(CAP, NullMode::Deferred);
    let mut cfg = null.queue_config(ncpus, 1, host.depth());
    cfg.reserved_tags = host.reserved();
    cfg.host_tags = Some(host.clone());
    cfg.timeout_ns = 0;
    Queue::new(cfg, NullDriver::new(null, 1, host.depth(), true), platform).unwrap()
}

fn read(cookie: u64) -> Bio<'static> {
    Bio::read(cookie * 8 % (CAP - 8), 8, &[], cookie)
}

#[test]
fn host_tags_are_unique_across_queues_and_one_queue_may_take_all() {
    let host = HostTags::new(4, 0).unwrap();
    let pa = Arc::new(HostPlatform::new(1, 64, true));
    let pb = Arc::new(HostPlatform::new(1, 64, true));
    let a = null_on(&host, 1, pa.clone());
    let b = null_on(&host, 1, pb.clone());
    assert_eq!(host.sharers(), 2);
    // A busy drive may use every tag of the controller.
    let tags: BTreeSet<u32> = (0..4).map(|c| a.submit(0, &read(c)).unwrap().tag).collect();
    assert_eq!(tags, BTreeSet::from([0, 1, 2, 3]));
    assert!(matches!(
        b.submit(0, &read(9)),
        Err(BlkError::TagsExhausted { pool: 4, .. })
    ));
    assert_eq!(a.driver().fire_interrupt(&a, 0, 0), 2 + 2);
    let mut both = BTreeSet::new();
    for c in 0..2 {
        both.insert(a.submit(0, &read(c)).unwrap().tag);
        both.insert(b.submit(0, &read(c)).unwrap().tag);
    }
    assert_eq!(both.len(), 4, "a tag is unique controller-wide: {both:?}");
    assert_eq!(host.in_use(), 4);
    drop(b);
    assert_eq!(host.sharers(), 1, "a dropped queue leaves the set");
}

#[test]
fn host_tags_config_must_match_the_set() {
    let host = HostTags::new(8, 1).unwrap();
    let p = Arc::new(HostPlatform::new(1, 1, false));
    let null = NullConfig::new(CAP, NullMode::Inline);
    let mut cfg = null.queue_config(1, 1, 16);
    cfg.host_tags = Some(host.clone());
    let e = Queue::new(cfg.clone(), NullDriver::new(null.clone(), 1, 16, true), p.clone())
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            BlkError::InvalidConfig {
                field: "queue_depth",
                value: 16,
                ..
            }
        ),
        "{e}"
    );
    cfg.queue_depth = 8;
    let e = Queue::new(cfg.clone(), NullDriver::new(null.clone(), 1, 8, true), p.clone())
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            BlkError::InvalidConfig {
                field: "reserved_tags",
                value: 0,
                ..
            }
        ),
        "{e}"
    );
    assert!(HostTags::new(65537, 0).is_err());
    assert!(HostTags::new(4, 4).is_err());
    assert_eq!(host.sharers(), 0, "refused queues do not stay registered");
}

/// A driver whose controller-wide resource (frames) is a shared gate: `Busy` while closed.
struct GateDriver {
    open: Arc<AtomicBool>,
}

impl Driver for GateDriver {
    type Pdu = ();
    fn queue_rq<'a>(&self, _hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, _last: bool) -> Result<(), QueueRqError<'a, Self>> {
        if !self.open.load(Ordering::SeqCst) {
            return Err(QueueRqError::Busy(rq));
        }
        rq.end(Status::Ok);
        Ok(())
    }
}

#[test]
fn a_free_on_one_queue_kicks_a_sharer_holding_turned_away_requests() {
    let host = HostTags::new(4, 0).unwrap();
    let pa = Arc::new(HostPlatform::new(2, 64, true));
    let pb = Arc::new(HostPlatform::new(2, 64, true));
    let a = null_on(&host, 2, pa.clone());
    let open = Arc::new(AtomicBool::new(false));
    let mut cfg = QueueConfig::new(2, 1, 4, CAP);
    cfg.host_tags = Some(host.clone());
    cfg.completion = CompletionPolicy::Irq;
    let b = Queue::new(cfg, GateDriver { open: open.clone() }, pb.clone()).unwrap();

    a.submit(0, &read(1)).unwrap();
    b.submit(1, &read(2)).unwrap();
    assert_eq!(pb.ended(), 0, "turned away: the controller is out of frames");
    assert_eq!(b.counters().requeued, 1);
    // A's completion frees the frame (the gate) and a tag; B has nothing in flight of its own,
    // so only the shared set can tell it to go again.
    open.store(true, Ordering::SeqCst);
    assert_eq!(a.driver().fire_interrupt(&a, 0, 0), 1);
    assert_eq!(
        pb.softirqs_on[0].load(Ordering::SeqCst),
        1,
        "B kicked on the freeing CPU"
    );
    assert!(pb.take_kick(0));
    assert_eq!(pb.ended(), 0, "B runs in its own softirq, not inside A's completion");
    b.run_completions(0);
    assert_eq!(pb.ended(), 1, "the kicked softirq reran B's turned-away request");
    // The request is consumed: a further free kicks nobody.
    a.submit(0, &read(3)).unwrap();
    a.driver().fire_interrupt(&a, 0, 0);
    assert_eq!(pb.softirqs_on[0].load(Ordering::SeqCst), 1);
}

#[test]
fn a_saturating_queue_does_not_starve_its_sharer() {
    const B_REQUESTS: u64 = 300;
    let host = HostTags::new(4, 0).unwrap();
    let pa = Arc::new(HostPlatform::new(1, 1, false));
    let pb = Arc::new(HostPlatform::new(1, 1, false));
    let a = Arc::new(null_on(&host, 1, pa.clone()));
    let b = Arc::new(null_on(&host, 1, pb.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let a_done = Arc::new(AtomicUsize::new(0));
    // A keeps every tag it can get busy: submit until refused, then complete the lot.
    let hog = {
        let (a, stop, a_done) = (a.clone(), stop.clone(), a_done.clone());
        thread::spawn(move || {
            let mut cookie = 0;
            while !stop.load(Ordering::SeqCst) {
                while a.submit(0, &read(cookie)).is_ok() {
                    cookie += 1;
                }
                a_done.fetch_add(a.driver().fire_interrupt(&a, 0, 0), Ordering::SeqCst);
            }
            a.driver().fire_interrupt(&a, 0, 0);
        })
    };
    // Start B only once A has filled the controller and gone round at least once.
    let t0 = Instant::now();
    while a_done.load(Ordering::SeqCst) < 8 {
        assert!(t0.elapsed() < Duration::from_secs(20), "A never ran");
        thread::yield_now();
    }
    let a_before = a_done.load(Ordering::SeqCst);
    for cookie in 0..B_REQUESTS {
        b.submit_wait(0, &read(cookie), Duration::from_secs(20).as_nanos() as u64)
            .unwrap_or_else(|e| {
                panic!(
                    "B starved at request {cookie}: {e}; A did {}",
                    a_done.load(Ordering::SeqCst)
                )
            });
        assert_eq!(b.driver().fire_interrupt(&b, 0, 0), 1);
    }
    // A must not be starved either. Whether the OS scheduled the hog thread during B's quick
    // requests is up to the host, so give A (still sharing, still running) a bounded while to
    // show progress before stopping it, rather than reading its count at once.
    let t1 = Instant::now();
    while a_done.load(Ordering::SeqCst) <= a_before {
        assert!(
            t1.elapsed() < Duration::from_secs(20),
            "A made no progress beside B: A did {}",
            a_done.load(Ordering::SeqCst)
        );
        thread::yield_now();
    }
    stop.store(true, Ordering::SeqCst);
    hog.join().unwrap();
    assert_eq!(pb.ended(), B_REQUESTS as usize);
    assert_eq!(host.in_use(), 0);
    eprintln!(
        "B: {B_REQUESTS} requests in {:?} beside A's {}; B tag waits {}",
        t0.elapsed(),
        a_done.load(Ordering::SeqCst),
        b.counters().tag_waits
    );
}

/// Two contexts of one CPU (a thread and the interrupt handler that preempted it) both wait for
/// the sleeping queue lock: the first to get it must not unregister the other, or no unlock ever
/// wakes it again (the stress tests' freeze that never drained).
#[test]
fn two_waiters_of_one_cpu_both_get_the_sleeping_lock() {
    use blk::sleeplock::SleepLock;
    use std::sync::atomic::Ordering;
    let platform = Arc::new(HostPlatform::new(2, 1, false));
    let lock = Arc::new(SleepLock::new(2));
    assert!(lock.lock_spinning(), "cpu0 takes the free lock");
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let (platform, lock) = (platform.clone(), lock.clone());
            std::thread::spawn(move || {
                lock.lock_sleeping(1, &*platform, 0);
                lock.unlock(1, &*platform);
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while platform.parks.load(Ordering::Relaxed) < 2 {
        assert!(std::time::Instant::now() < deadline, "the two contexts never parked");
        std::thread::yield_now();
    }
    lock.unlock(0, &*platform);
    for w in waiters {
        while !w.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "a context of cpu1 was never woken: a lost wake-up"
            );
            std::thread::yield_now();
        }
        w.join().unwrap();
    }
    assert_eq!(lock.debug_waiters(), 0);
    assert!(!lock.is_locked());
}
