//! loom models of the lock-free core. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p blk --release --target-dir target/loom --test loom`.
#![cfg(loom)]

use blk::done::DoneBoard;
use blk::list::{Links, TagStack};
use blk::null::{NullConfig, NullDriver, NullMode};
use blk::tags::TagBitmap;
use blk::{
    Bio, BlkError, Completion, Driver, HostTags, HwCtx, Platform, Queue, QueueConfig, QueueRqError, QuiesceCheck, Rq,
    Status, UsageCounter,
};
use loom::cell::UnsafeCell;
use loom::thread;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Platform that counts finished requests and records softirq/IPI kicks per CPU (plain std
/// atomics: they are read after `join`, and they must not add states to the model).
#[derive(Default)]
struct CountingPlatform {
    ended: AtomicUsize,
    kicked: [AtomicBool; 2],
}

impl Platform for CountingPlatform {
    fn now_ns(&self) -> u64 {
        0
    }
    fn send_completion_ipi(&self, cpu: usize) {
        self.kicked[cpu].store(true, Ordering::Relaxed);
    }
    fn raise_completion_softirq(&self, cpu: usize) {
        self.kicked[cpu].store(true, Ordering::Relaxed);
    }
    fn end_io(&self, _c: &Completion) {
        self.ended.fetch_add(1, Ordering::Relaxed);
    }
}

impl CountingPlatform {
    /// Runs `queue`'s completion softirq on every CPU that was kicked, as the kernel would.
    fn run_kicked<D: Driver>(&self, queue: &Queue<D>) {
        for cpu in 0..2 {
            if self.kicked[cpu].swap(false, Ordering::Relaxed) {
                queue.run_completions(cpu);
            }
        }
    }
}

fn small_queue(check: QuiesceCheck) -> (Arc<Queue<NullDriver>>, Arc<CountingPlatform>) {
    let null = NullConfig::new(64, NullMode::Inline);
    let mut cfg = null.queue_config(2, 1, 2);
    cfg.timeout_ns = 0;
    cfg.run_queue_on_completion = false;
    cfg.quiesce_check = check;
    let platform = Arc::new(CountingPlatform::default());
    let queue = Queue::new(cfg, NullDriver::new(null, 1, 2, false), platform.clone()).unwrap();
    (Arc::new(queue), platform)
}

/// (1) A request inserted while the queue is quiesced is dispatched once `unquiesce` runs,
/// whatever the interleaving: the re-check after a full fence never misses the rerun.
#[test]
fn insert_vs_unquiesce_never_loses_a_queue_run() {
    for check in [QuiesceCheck::LockFree, QuiesceCheck::Locked] {
        loom::model(move || {
            let (queue, platform) = small_queue(check);
            queue.quiesce_nowait();
            let q = queue.clone();
            let submitter = thread::spawn(move || {
                q.submit(0, &Bio::read(8, 1, &[], 42)).unwrap();
            });
            queue.unquiesce(1).unwrap();
            submitter.join().unwrap();
            assert_eq!(
                platform.ended.load(Ordering::Relaxed),
                1,
                "{check:?}: request inserted during quiesce was never dispatched"
            );
            assert_eq!(queue.in_flight(), 0);
        });
    }
}

/// (2) The completion list: two producers, one concurrent consumer. Every entry comes out
/// exactly once, each producer's entries in push order, and exactly one push per non-empty
/// batch reports "was empty" (so one IPI per batch).
#[test]
fn completion_list_two_producers_one_consumer() {
    loom::model(|| {
        let links = Arc::new(Links::new(4));
        let stack = Arc::new(TagStack::new());
        let producer = |first: u32| {
            let (links, stack) = (links.clone(), stack.clone());
            thread::spawn(move || {
                let a = stack.push(first, &links);
                let b = stack.push(first + 1, &links);
                usize::from(a) + usize::from(b)
            })
        };
        let p0 = producer(0);
        let p1 = producer(2);
        let consumer = {
            let (links, stack) = (links.clone(), stack.clone());
            thread::spawn(move || {
                let first: Vec<u32> = stack.take_all(&links).collect();
                let second: Vec<u32> = stack.take_all(&links).collect();
                vec![first, second]
            })
        };
        let empties = p0.join().unwrap() + p1.join().unwrap();
        let mut batches = consumer.join().unwrap();
        batches.push(stack.take_all(&links).collect());
        let all: Vec<u32> = batches.iter().flatten().copied().collect();
        let mut sorted = all.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 1, 2, 3], "batches {batches:?}");
        let pos = |x: u32| all.iter().position(|&y| y == x).unwrap();
        assert!(pos(0) < pos(1) && pos(2) < pos(3), "order lost: {all:?}");
        let nonempty = batches.iter().filter(|b| !b.is_empty()).count();
        assert_eq!(empties, nonempty, "one 'was empty' per batch: {batches:?}");
    });
}

/// (3) Tag allocation never hands one tag to two owners: three CPUs contend for two tags, and
/// each owner writes the tag's cell (loom flags any concurrent access).
#[test]
fn tag_allocation_never_hands_out_a_tag_twice() {
    loom::model(|| {
        let tags = Arc::new(TagBitmap::new(0, 2, 3));
        let cells: Arc<[UnsafeCell<u32>; 2]> = Arc::new([UnsafeCell::new(0), UnsafeCell::new(0)]);
        let worker = |cpu: usize| {
            let (tags, cells) = (tags.clone(), cells.clone());
            move || {
                if let Some(t) = tags.alloc(cpu) {
                    cells[t as usize].with_mut(|p| unsafe { *p += 1 });
                    assert!(tags.free(cpu, t), "tag {t} was not allocated");
                }
            }
        };
        let a = thread::spawn(worker(0));
        let b = thread::spawn(worker(1));
        worker(2)();
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(tags.in_use(), 0);
    });
}

/// (4a) Freeze waits for in-flight users: once the freezer sees the counter drained, the
/// user's accesses happen-before the freezer's.
#[test]
fn freeze_waits_for_in_flight_users() {
    loom::model(|| {
        let usage = Arc::new(UsageCounter::new());
        let data = Arc::new(UnsafeCell::new(0u32));
        let user = {
            let (usage, data) = (usage.clone(), data.clone());
            thread::spawn(move || {
                if usage.try_enter() {
                    data.with_mut(|p| unsafe { *p += 1 });
                    usage.exit();
                    true
                } else {
                    false
                }
            })
        };
        usage.set_frozen();
        while !usage.is_drained() {
            thread::yield_now();
        }
        let seen = data.with_mut(|p| unsafe {
            *p += 10;
            *p
        });
        let entered = user.join().unwrap();
        assert_eq!(seen, if entered { 11 } else { 10 });
        assert!(!usage.try_enter(), "frozen counter admitted a user");
    });
}

/// (4b) The same through the queue: a freeze that returns has no request left inside, and a
/// submission racing with it either finished before or was refused.
#[test]
fn queue_freeze_drains_racing_submission() {
    loom::model(|| {
        let (queue, platform) = small_queue(QuiesceCheck::LockFree);
        let q = queue.clone();
        let submitter = thread::spawn(move || q.submit(0, &Bio::write(0, 1, &[], 1)));
        queue.freeze(1, u64::MAX).unwrap();
        let ended_at_freeze = platform.ended.load(Ordering::Relaxed);
        let result = submitter.join().unwrap();
        match result {
            Ok(_) => assert_eq!(ended_at_freeze, 1, "freeze returned before the request ended"),
            Err(BlkError::Frozen) => assert_eq!(ended_at_freeze, 0),
            Err(e) => panic!("unexpected {e}"),
        }
        // A refused entry backs out of the counter; after the join nothing is left inside.
        assert_eq!(queue.in_flight(), 0);
        queue.unfreeze().unwrap();
    });
}

/// (5) The done board: two CPUs deliver completions for CPU 0's two slots while CPU 0 takes
/// concurrently. Every completion is reported exactly once, with the status it was delivered
/// with (the Release `fetch_or` / Acquire `swap` pairing makes the status visible with its bit).
#[test]
fn done_board_two_cpus_deliver_one_takes() {
    loom::model(|| {
        let board = Arc::new(DoneBoard::new(2, 2).unwrap());
        let deliverer = |slot: usize, status: Status| {
            let board = board.clone();
            thread::spawn(move || board.deliver(0, slot, status).unwrap())
        };
        let d0 = deliverer(0, Status::IoError);
        let d1 = deliverer(1, Status::Timeout);
        let mut seen = Vec::new();
        board.take(0, |slot, st| seen.push((slot, st)));
        d0.join().unwrap();
        d1.join().unwrap();
        board.take(0, |slot, st| seen.push((slot, st)));
        seen.sort_by_key(|&(slot, _)| slot);
        assert_eq!(seen, [(0, Status::IoError), (1, Status::Timeout)]);
        assert_eq!(board.bogus(), 0);
        assert!(!board.has_pending(0));
    });
}

/// A controller-wide resource (frames): `queue_rq` turns requests away while it is closed.
struct GateDriver {
    open: Arc<loom::sync::atomic::AtomicBool>,
}

impl Driver for GateDriver {
    type Pdu = ();
    fn queue_rq<'a>(&self, _hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, _last: bool) -> Result<(), QueueRqError<'a, Self>> {
        if !self.open.load(Ordering::Acquire) {
            return Err(QueueRqError::Busy(rq));
        }
        rq.end(Status::Ok);
        Ok(())
    }
}

/// (6) Host-wide tags, free vs wait: queue B's request is turned away for lack of a frame
/// while, on another CPU, queue A's completion frees the frame and a tag of the shared set. B
/// has nothing of its own in flight, so no completion of B's will rerun it, and no tick runs
/// in this model: either B's restart protocol sees the free and reruns itself, or A's free sees
/// B's restart bit and kicks B's softirq. B's request always ends: no lost wake-up.
#[test]
fn host_tags_free_wakes_a_busy_sharer() {
    loom::model(|| {
        let host = HostTags::new(2, 0).unwrap();
        let null = NullConfig::new(64, NullMode::Deferred);
        let mut cfg = null.queue_config(2, 1, 2);
        cfg.host_tags = Some(host.clone());
        cfg.timeout_ns = 0;
        cfg.run_queue_on_completion = false;
        let pa = Arc::new(CountingPlatform::default());
        let a = Arc::new(Queue::new(cfg, NullDriver::new(null, 1, 2, true), pa.clone()).unwrap());
        let open = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let mut cfg = QueueConfig::new(2, 1, 2, 64);
        cfg.host_tags = Some(host);
        cfg.timeout_ns = 0;
        cfg.run_queue_on_completion = false;
        let pb = Arc::new(CountingPlatform::default());
        let b = Queue::new(cfg, GateDriver { open: open.clone() }, pb.clone()).unwrap();
        a.submit(0, &Bio::read(0, 1, &[], 1)).unwrap();

        let completer = {
            let (a, open) = (a.clone(), open.clone());
            thread::spawn(move || {
                // The driver's completion path gives the frame back, then blk frees the tag.
                open.store(true, Ordering::Release);
                assert_eq!(a.driver().fire_interrupt(&a, 0, 0), 1);
            })
        };
        b.submit(1, &Bio::read(8, 1, &[], 2)).unwrap();
        completer.join().unwrap();
        pb.run_kicked(&b);
        assert_eq!(pa.ended.load(Ordering::Relaxed), 1);
        assert_eq!(
            pb.ended.load(Ordering::Relaxed),
            1,
            "B's turned-away request was stranded: lost wake-up"
        );
    });
}
