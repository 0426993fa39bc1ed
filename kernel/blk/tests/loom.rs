//! loom models of the lock-free core. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p blk --release --target-dir target/loom --test loom`.
#![cfg(loom)]

use blk::list::{Links, TagStack};
use blk::null::{NullConfig, NullDriver, NullMode};
use blk::tags::TagBitmap;
use blk::{Bio, BlkError, Completion, Platform, Queue, QuiesceCheck, UsageCounter};
use loom::cell::UnsafeCell;
use loom::thread;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Platform that only counts finished requests (a plain std atomic: it is read after `join`,
/// and it must not add states to the model).
#[derive(Default)]
struct CountingPlatform {
    ended: AtomicUsize,
}

impl Platform for CountingPlatform {
    fn now_ns(&self) -> u64 {
        0
    }
    fn send_completion_ipi(&self, _cpu: usize) {}
    fn raise_completion_softirq(&self, _cpu: usize) {}
    fn end_io(&self, _c: &Completion) {
        self.ended.fetch_add(1, Ordering::Relaxed);
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
