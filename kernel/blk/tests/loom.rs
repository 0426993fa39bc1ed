//! loom models of the lock-free core. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p blk --release --target-dir target/loom --test loom`.
#![cfg(loom)]

use blk::list::{Links, TagStack};
use blk::tags::TagBitmap;
use blk::{
    Bio, BlkError, Completion, Driver, HostTags, HwCtx, Platform, Queue, QueueConfig, QueueRqError, QuiesceCheck, Rq,
    Status, UsageCounter,
};
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicUsize as LoomUsize;
use loom::thread;
use nullblk::{NullConfig, NullDriver, NullMode};
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
    queue_of_depth(check, 2)
}

fn queue_of_depth(check: QuiesceCheck, depth: u32) -> (Arc<Queue<NullDriver>>, Arc<CountingPlatform>) {
    let null = NullConfig::new(64, NullMode::Inline);
    let mut cfg = null.queue_config(2, 1, depth);
    cfg.timeout_ns = 0;
    cfg.run_queue_on_completion = false;
    cfg.quiesce_check = check;
    let platform = Arc::new(CountingPlatform::default());
    let queue = Queue::new(cfg, NullDriver::new(null, 1, depth, false), platform.clone()).unwrap();
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

/// (4a) Freeze waits for in-flight users: once the freezer sees the per-CPU counts drained,
/// the user's accesses happen-before the freezer's. The user enters on CPU 1 and, with
/// `exit_elsewhere`, exits on CPU 0 (a completion on another CPU): its entry's count and its
/// exit's are then two CPUs' counts, and the freezer's sum must still not read zero early.
fn freeze_waits_for(exit_elsewhere: bool) {
    loom::model(move || {
        let usage = Arc::new(UsageCounter::new());
        let counts: Arc<[LoomUsize; 2]> = Arc::new([LoomUsize::new(0), LoomUsize::new(0)]);
        let data = Arc::new(UnsafeCell::new(0u32));
        let user = {
            let (usage, counts, data) = (usage.clone(), counts.clone(), data.clone());
            thread::spawn(move || {
                if usage.try_enter(&counts[1]) {
                    data.with_mut(|p| unsafe { *p += 1 });
                    usage.exit(&counts[if exit_elsewhere { 0 } else { 1 }]);
                    true
                } else {
                    false
                }
            })
        };
        usage.set_frozen();
        while !usage.is_drained(counts.iter()) {
            thread::yield_now();
        }
        let seen = data.with_mut(|p| unsafe {
            *p += 10;
            *p
        });
        let entered = user.join().unwrap();
        assert_eq!(seen, if entered { 11 } else { 10 });
        assert!(!usage.try_enter(&counts[0]), "frozen counter admitted a user");
        assert_eq!(usage.in_flight(counts.iter()), 0);
    });
}

#[test]
fn freeze_waits_for_in_flight_users() {
    freeze_waits_for(false);
}

#[test]
fn freeze_waits_for_a_user_that_exits_on_another_cpu() {
    freeze_waits_for(true);
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

/// (4) Host-wide tags, free vs wait: queue B's request is turned away for lack of a frame
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

/// A device with one command slot per tag whose tokens the test reads after `join` (plain std
/// atomics: written before they are read across a join, and kept out of the model).
struct TokenDriver {
    /// Token of the latest issue of each tag, plus one (0: never issued).
    tokens: [std::sync::atomic::AtomicU32; 2],
    issues: AtomicUsize,
    verdict: blk::TimeoutAction,
    /// Controller frames (Busy when none is free); given back in `complete`.
    frames: loom::sync::atomic::AtomicUsize,
}

impl TokenDriver {
    fn new(verdict: blk::TimeoutAction, frames: usize) -> Self {
        Self {
            tokens: Default::default(),
            issues: AtomicUsize::new(0),
            verdict,
            frames: loom::sync::atomic::AtomicUsize::new(frames),
        }
    }

    fn token(&self, tag: u32) -> Option<blk::IssueToken> {
        let bits = self.tokens[tag as usize].load(Ordering::Relaxed);
        (bits != 0).then(|| blk::IssueToken::from_bits(bits - 1))
    }
}

impl Driver for TokenDriver {
    type Pdu = ();
    fn queue_rq<'a>(&self, _hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, _last: bool) -> Result<(), QueueRqError<'a, Self>> {
        // Acquire pairs with the Release `fetch_add` in `complete`.
        if self
            .frames
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |f| f.checked_sub(1))
            .is_err()
        {
            return Err(QueueRqError::Busy(rq));
        }
        let tag = rq.tag();
        let token = rq.issue();
        self.tokens[tag as usize].store(token.to_bits() + 1, Ordering::Relaxed);
        self.issues.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    const HAS_COMPLETE: bool = true;

    fn complete(&self, rq: Rq<'_, Self>) {
        // The frame goes back before the tag is freed (inside `end`).
        self.frames.fetch_add(1, Ordering::Release);
        let status = rq.status();
        rq.end(status);
    }

    fn timeout(&self, _rq: &mut blk::TimedOutRq<'_, Self>) -> blk::TimeoutAction {
        if matches!(self.verdict, blk::TimeoutAction::Done(_) | blk::TimeoutAction::Requeue) {
            // The device gave the tag up (abort confirmed): so is its frame.
            self.frames.fetch_add(1, Ordering::Release);
        }
        self.verdict
    }
}

/// Platform with a settable clock that records every finished request.
#[derive(Default)]
struct ClockPlatform {
    now: std::sync::atomic::AtomicU64,
    ended: std::sync::Mutex<Vec<(u64, Status)>>,
}

impl Platform for ClockPlatform {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
    fn send_completion_ipi(&self, _cpu: usize) {}
    fn raise_completion_softirq(&self, _cpu: usize) {}
    fn end_io(&self, c: &Completion) {
        self.ended.lock().unwrap().push((c.cookie, c.status));
    }
}

fn token_queue(
    verdict: blk::TimeoutAction,
    depth: u32,
    frames: usize,
) -> (Arc<Queue<TokenDriver>>, Arc<ClockPlatform>) {
    let mut cfg = QueueConfig::new(2, 1, depth, 64);
    cfg.timeout_ns = 10;
    cfg.run_queue_on_completion = false;
    let platform = Arc::new(ClockPlatform::default());
    let queue = Queue::new(cfg, TokenDriver::new(verdict, frames), platform.clone()).unwrap();
    (Arc::new(queue), platform)
}

/// (5) A completion racing the timeout check (another CPU's `tick`), for each verdict. Exactly
/// one outcome per request, whatever the interleaving:
/// - `ResetTimer`: the request always ends once, with the device's status (a completion that
///   lands while the handler runs is applied after it);
/// - `Done(Timeout)`: it ends once, with `Ok` if the completion claimed it first, otherwise
///   with `Timeout`; a completion that comes after the verdict is refused as stale (counted);
/// - `Requeue`: either the completion wins (ends `Ok`, never issued again), or the request is
///   issued again with a new generation and the late completion is stale.
#[test]
fn completion_races_the_timeout_check() {
    use blk::TimeoutAction::{Done, Requeue, ResetTimer};
    for verdict in [ResetTimer, Done(Status::Timeout), Requeue] {
        loom::model(move || {
            let (queue, platform) = token_queue(verdict, 1, 1);
            queue.submit(0, &Bio::read(0, 1, &[], 7)).unwrap();
            let token = queue.driver().token(0).expect("issued");
            assert_eq!(queue.tick(0).unwrap(), 0, "not expired yet");
            platform.now.store(1_000, Ordering::Relaxed);
            let completer = {
                let queue = queue.clone();
                thread::spawn(move || queue.complete(1, 0, token, Status::Ok))
            };
            let expired = queue.tick(0).unwrap();
            let result = completer.join().unwrap();
            let stale = queue.counters().stale_completions;
            let ended = platform.ended.lock().unwrap().clone();
            match verdict {
                ResetTimer => {
                    assert_eq!(result, Ok(()));
                    assert_eq!(ended, [(7, Status::Ok)]);
                }
                Done(_) => {
                    assert_eq!(ended.len(), 1, "{ended:?}");
                    match result {
                        Ok(()) if expired == 0 => assert_eq!(ended[0].1, Status::Ok),
                        // Claimed during the handler: the verdict stands.
                        Ok(()) => assert_eq!(ended[0].1, Status::Timeout),
                        Err(BlkError::StaleCompletion { .. }) => {
                            assert_eq!(ended[0].1, Status::Timeout);
                            assert_eq!(stale, 1);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                Requeue => match result {
                    Ok(()) => {
                        assert_eq!(ended, [(7, Status::Ok)]);
                        assert_eq!(queue.driver().issues.load(Ordering::Relaxed), 1);
                    }
                    Err(BlkError::StaleCompletion { .. }) => {
                        assert!(ended.is_empty(), "{ended:?}");
                        assert_eq!(queue.driver().issues.load(Ordering::Relaxed), 2);
                        let again = queue.driver().token(0).unwrap();
                        assert_ne!(again, token);
                        queue.complete(0, 0, again, Status::Ok).unwrap();
                        assert_eq!(*platform.ended.lock().unwrap(), [(7, Status::Ok)]);
                    }
                    Err(e) => panic!("{e}"),
                },
                _ => unreachable!(),
            }
            assert_eq!(queue.in_flight(), 0);
        });
    }
}

/// (6) The Busy-restart protocol: the driver turns request 2 away (its only frame is held by
/// request 1) while, on another CPU, request 1's completion gives the frame back. The queue is
/// not rerun on every completion and no tick runs: either the completer sees the turned-away
/// request and reruns the queue, or the dispatcher sees the completion's "freed" bump and goes
/// round again. Request 2 is always issued: none is stranded.
#[test]
fn busy_restart_never_strands_a_request() {
    loom::model(|| {
        let (queue, platform) = token_queue(blk::TimeoutAction::ResetTimer, 2, 1);
        queue.submit(0, &Bio::read(0, 1, &[], 1)).unwrap();
        let first = (0..2).find_map(|t| queue.driver().token(t)).expect("request 1 issued");
        let completer = {
            let queue = queue.clone();
            thread::spawn(move || queue.complete(1, 0, first, Status::Ok).unwrap())
        };
        queue.submit(0, &Bio::read(8, 1, &[], 2)).unwrap();
        completer.join().unwrap();
        assert_eq!(
            queue.driver().issues.load(Ordering::Relaxed),
            2,
            "request 2 was stranded after Busy: {:?}",
            queue.counters()
        );
        let mut second = None;
        queue.for_each_issued(|hwq, t| second = Some((hwq, t)));
        let (hwq, second) = second.expect("request 2 in flight");
        queue.complete(0, hwq, second, Status::Ok).unwrap();
        assert_eq!(platform.ended.lock().unwrap().len(), 2);
    });
}

/// A platform whose `wait_for_wake` really blocks: loom's `thread::park`, woken by `unpark`
/// (an `unpark` before the `park` makes it return at once: the pending-flag contract). A lost
/// wake-up leaves a thread parked forever, which loom reports as a deadlock.
#[derive(Default)]
struct WakePlatform {
    /// The loom thread playing each CPU (registered by the thread before it touches the lock;
    /// a std mutex, outside the model).
    threads: std::sync::Mutex<[Option<loom::thread::Thread>; 3]>,
}

impl Platform for WakePlatform {
    fn now_ns(&self) -> u64 {
        0
    }
    fn send_completion_ipi(&self, _cpu: usize) {}
    fn raise_completion_softirq(&self, _cpu: usize) {}
    fn end_io(&self, _c: &Completion) {}
    fn wait_for_wake(&self, _cpu: usize) {
        thread::park();
    }
    fn wake(&self, cpu: usize) {
        let t = self.threads.lock().unwrap()[cpu].clone();
        t.expect("a CPU with its waiter bit set has registered").unpark();
    }
}

/// (7) The sleeping lock (`QuiesceCheck::Sleeping`): two CPUs take it the sleeping way while a
/// third takes it spinning. Mutual exclusion holds (each holder increments a loom cell), and no
/// waiter stays parked: a waiter registers, fences, and retries before parking, and every
/// unlock fences and wakes a registered waiter, so the last unlock never misses one. Removing
/// the unlock's wake-up makes it fail (deadlock).
#[test]
fn sleeping_lock_never_loses_a_wake_up() {
    use blk::sleeplock::SleepLock;
    loom::model(|| {
        let platform = Arc::new(WakePlatform::default());
        let lock = Arc::new(SleepLock::new(3));
        let cell = Arc::new(UnsafeCell::new(0u32));
        let sleeper = |cpu: usize| {
            let (platform, lock, cell) = (platform.clone(), lock.clone(), cell.clone());
            thread::spawn(move || {
                platform.threads.lock().unwrap()[cpu] = Some(thread::current());
                lock.lock_sleeping(cpu, &*platform, 0);
                cell.with_mut(|p| unsafe { *p += 1 });
                lock.unlock(cpu, &*platform);
            })
        };
        let a = sleeper(1);
        let b = sleeper(2);
        lock.lock_spinning();
        cell.with_mut(|p| unsafe { *p += 1 });
        lock.unlock(0, &*platform);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(cell.with_mut(|p| unsafe { *p }), 3);
        assert!(!lock.is_locked());
    });
}

/// A split bio ends exactly once, whichever of its parts ends last, and with an error of one of
/// its failed parts, never `Ok` (the error is stored before the part's decrement, which the last
/// decrement acquires).
#[test]
fn split_parent_ends_once_with_the_first_error() {
    use blk::split::SplitTable;
    loom::model(|| {
        let table = Arc::new(SplitTable::new(1, 3));
        let id = table.begin(0, 3, 42, 100, 24, blk::Op::Write).unwrap();
        let spawn = |cpu: usize, status: Status| {
            let table = table.clone();
            thread::spawn(move || table.part_done(id, status).map(|done| (cpu, done)))
        };
        let a = spawn(1, Status::IoError);
        let b = spawn(2, Status::Timeout);
        let mine = table.part_done(id, Status::Ok).map(|done| (0, done));
        let ends: Vec<_> = [mine, a.join().unwrap(), b.join().unwrap()]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(ends.len(), 1, "the bio must end exactly once");
        let (cpu, done) = ends[0];
        assert!(
            matches!(done.status, Status::IoError | Status::Timeout),
            "{:?}",
            done.status
        );
        assert_eq!(
            (done.cookie, done.sector, done.nr_sectors, done.op),
            (42, 100, 24, blk::Op::Write)
        );
        table.release(cpu, id);
    });
}

/// (8) Two CPUs submit to the same hardware queue at once. The one that takes the run token
/// issues its request directly, without collecting other CPUs' software queues in that pass;
/// the other finds the token taken, queues its request and asks for a rerun. Whatever the
/// interleaving, both requests are dispatched (and, with the inline null driver, ended), and
/// nothing is left on a software queue or the FIFO.
#[test]
fn direct_issue_racing_an_insert_never_strands_a_request() {
    loom::model(|| {
        let (queue, platform) = small_queue(QuiesceCheck::LockFree);
        let q = queue.clone();
        let other = thread::spawn(move || {
            q.submit(1, &Bio::read(16, 1, &[], 2)).unwrap();
        });
        queue.submit(0, &Bio::read(8, 1, &[], 1)).unwrap();
        other.join().unwrap();
        assert_eq!(
            platform.ended.load(Ordering::Relaxed),
            2,
            "a request submitted while another CPU issued directly was never dispatched"
        );
        assert_eq!(queue.in_flight(), 0);
    });
}

/// Model 12. `Queue::submit_batch` takes the run token once for a burst and issues it directly
/// while another CPU submits: whatever the interleaving, every request of the burst
/// and the other CPU's are dispatched and ended, none is stranded on a software queue or the
/// FIFO.
#[test]
fn a_batch_issued_directly_racing_an_insert_never_strands_a_request() {
    loom::model(|| {
        // Three tags: the burst holds two before it dispatches them.
        let (queue, platform) = queue_of_depth(QuiesceCheck::LockFree, 3);
        let q = queue.clone();
        let other = thread::spawn(move || {
            q.submit(1, &Bio::read(24, 1, &[], 3)).unwrap();
        });
        let burst = [Bio::read(8, 1, &[], 1), Bio::read(16, 1, &[], 2)];
        assert_eq!(queue.submit_batch(0, &burst).accepted, 2);
        other.join().unwrap();
        assert_eq!(
            platform.ended.load(Ordering::Relaxed),
            3,
            "a request was never dispatched while a burst was issued directly"
        );
        assert_eq!(queue.in_flight(), 0);
    });
}
