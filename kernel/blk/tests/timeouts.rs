//! Stress with timeouts on: threads as CPUs submit, a device thread completes requests when
//! they are due, and the timeout handler runs an abort ladder (first timeout: "abort sent",
//! check again later; second: "abort confirmed", then `Done(Timeout)` or `Requeue`). The device
//! completes some requests late (after the verdict) and loses some altogether. Every request
//! must end exactly once, every late completion must be refused as stale and counted, and the
//! counters must balance.

mod common;

use blk::{
    Bio, BlkError, CompletionPolicy, Driver, HwCtx, IssueToken, Platform, Queue, QueueConfig, QueueRqError, Rq, Status,
    TimedOutRq, TimeoutAction,
};
use common::HostPlatform;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const WORKERS: usize = 3;
const PER_WORKER: usize = 2000;
const TOTAL: usize = WORKERS * PER_WORKER;
const CAP: u64 = 1 << 16;
const TIMEOUT_NS: u64 = 300_000;
const WATCHDOG: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fate {
    /// Completes as soon as the device thread gets to it.
    Normal,
    /// Completes long after the timeout ladder gave its verdict: must be stale.
    Late,
    /// Never completes on its own.
    Lost,
}

struct Command {
    token: IssueToken,
    hwq: usize,
    due_ns: u64,
    status: Status,
}

#[derive(Default)]
struct Pdu {
    cookie: u64,
    issues: u32,
    timeouts: u32,
    generation: u16,
}

#[derive(Default)]
struct Tally {
    accepted: AtomicUsize,
    stale: AtomicUsize,
    not_in_flight: AtomicUsize,
    verdict_done: AtomicUsize,
    verdict_requeue: AtomicUsize,
    busy: AtomicUsize,
    late_issued: AtomicUsize,
    lost_issued: AtomicUsize,
}

struct LateDevice {
    platform: Arc<HostPlatform>,
    commands: Mutex<Vec<Command>>,
    decisions: AtomicU64,
    tally: Tally,
}

fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Driver for LateDevice {
    type Pdu = Pdu;

    fn queue_rq<'a>(
        &self,
        hw: &HwCtx<'a, Self>,
        mut rq: Rq<'a, Self>,
        _last: bool,
    ) -> Result<(), QueueRqError<'a, Self>> {
        if mix(self.decisions.fetch_add(1, Ordering::Relaxed)).is_multiple_of(16) {
            self.tally.busy.fetch_add(1, Ordering::Relaxed);
            return Err(QueueRqError::Busy(rq));
        }
        let cookie = rq.cookie();
        let pdu = rq.pdu_mut();
        if pdu.cookie != cookie || pdu.issues == 0 {
            *pdu = Pdu {
                cookie,
                ..Pdu::default()
            };
        }
        pdu.issues += 1;
        // Only a request's first issue may be late or lost, so that requeued ones finish.
        let r = mix(cookie ^ 0x5eed);
        let fate = match (pdu.issues, r % 32) {
            (1, 0) => Fate::Late,
            (1, 1) => Fate::Lost,
            _ => Fate::Normal,
        };
        let status = if (r >> 8).is_multiple_of(29) {
            Status::IoError
        } else {
            Status::Ok
        };
        let hwq = hw.hwq();
        let token = rq.issue();
        let now = self.platform.now_ns();
        let due_ns = match fate {
            Fate::Normal => now,
            Fate::Late => {
                self.tally.late_issued.fetch_add(1, Ordering::Relaxed);
                now + 20 * TIMEOUT_NS
            }
            Fate::Lost => {
                self.tally.lost_issued.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        };
        self.commands.lock().unwrap().push(Command {
            token,
            hwq,
            due_ns,
            status,
        });
        Ok(())
    }

    fn timeout(&self, rq: &mut TimedOutRq<'_, Self>) -> TimeoutAction {
        let token = rq.token();
        let cookie = rq.cookie();
        let pdu = rq.pdu_mut();
        if pdu.generation != token.generation() {
            pdu.generation = token.generation();
            pdu.timeouts = 0;
        }
        pdu.timeouts += 1;
        if pdu.timeouts == 1 {
            // "Abort sent": give it one more timeout before the abort counts as confirmed.
            return TimeoutAction::ResetTimerAfter(TIMEOUT_NS);
        }
        // "Abort confirmed" (this fake device keeps the command, so a late completion can
        // still arrive: the block layer must refuse it).
        if cookie.is_multiple_of(2) {
            self.tally.verdict_done.fetch_add(1, Ordering::Relaxed);
            TimeoutAction::Done(Status::Timeout)
        } else {
            self.tally.verdict_requeue.fetch_add(1, Ordering::Relaxed);
            TimeoutAction::Requeue
        }
    }
}

impl LateDevice {
    /// The device's interrupt on CPU `cpu`: completes every due command.
    fn interrupt(&self, queue: &Queue<Self>, cpu: usize) -> usize {
        let now = self.platform.now_ns();
        let due: Vec<Command> = {
            let mut cmds = self.commands.lock().unwrap();
            let (due, keep) = cmds.drain(..).partition(|c| c.due_ns <= now);
            *cmds = keep;
            due
        };
        for c in &due {
            match queue.complete(cpu, c.hwq, c.token, c.status) {
                Ok(()) => self.tally.accepted.fetch_add(1, Ordering::Relaxed),
                Err(BlkError::StaleCompletion { .. }) => self.tally.stale.fetch_add(1, Ordering::Relaxed),
                Err(BlkError::NotInFlight { .. }) => self.tally.not_in_flight.fetch_add(1, Ordering::Relaxed),
                Err(e) => panic!("unexpected completion error {e}"),
            };
        }
        due.len()
    }

    fn pending(&self) -> usize {
        self.commands.lock().unwrap().len()
    }
}

fn run(name: &str, policy: CompletionPolicy, nr_hw: usize, shared: bool) {
    let ncpus = WORKERS + 1;
    let irq_cpu = WORKERS;
    let mut cfg = QueueConfig::new(ncpus, nr_hw, 16, CAP);
    cfg.shared_tags = shared;
    cfg.timeout_ns = TIMEOUT_NS;
    cfg.completion = policy;
    let platform = Arc::new(HostPlatform::new(ncpus, TOTAL, false));
    let device = LateDevice {
        platform: platform.clone(),
        commands: Mutex::new(Vec::new()),
        decisions: AtomicU64::new(name.len() as u64),
        tally: Tally::default(),
    };
    let queue = Arc::new(Queue::new(cfg, device, platform.clone()).unwrap());
    let all_ended = Arc::new(AtomicBool::new(false));
    let start = Instant::now();

    let help = {
        let (queue, platform) = (queue.clone(), platform.clone());
        move |cpu: usize| {
            if platform.take_kick(cpu) {
                queue.run_completions(cpu);
            }
            queue.tick(cpu).unwrap();
        }
    };
    let mut threads = Vec::new();
    for cpu in 0..WORKERS {
        let (queue, help, all_ended) = (queue.clone(), help.clone(), all_ended.clone());
        threads.push(thread::spawn(move || {
            let mut next = 0;
            while next < PER_WORKER {
                let cookie = (cpu * PER_WORKER + next) as u64;
                match queue.submit(cpu, &Bio::read((cookie * 8) % (CAP - 8), 8, &[], cookie)) {
                    Ok(_) => next += 1,
                    Err(BlkError::TagsExhausted { .. }) => thread::yield_now(),
                    Err(e) => panic!("cpu {cpu}: {e}"),
                }
                help(cpu);
            }
            while !all_ended.load(Ordering::SeqCst) {
                help(cpu);
                thread::yield_now();
            }
        }));
    }
    // The device's interrupt thread (its vector aimed at the last CPU), which also ticks.
    while platform.ended() < TOTAL {
        assert!(
            start.elapsed() < WATCHDOG,
            "{name}: hang: {} of {TOTAL} ended, in flight {}, {:?}",
            platform.ended(),
            queue.in_flight(),
            queue.counters()
        );
        queue.driver().interrupt(&queue, irq_cpu);
        help(irq_cpu);
        thread::yield_now();
    }
    all_ended.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    // Let every late completion arrive: each must be refused.
    while queue.driver().pending() > 0 {
        assert!(start.elapsed() < WATCHDOG, "{name}: device never drained");
        queue.driver().interrupt(&queue, irq_cpu);
        thread::yield_now();
    }

    let c = queue.counters();
    let t = &queue.driver().tally;
    let n = |a: &AtomicUsize| a.load(Ordering::SeqCst) as u64;
    eprintln!(
        "{name}: {:?}; accepted {} stale {} not-in-flight {} done {} requeue {} late {} lost {}: {c:?}",
        start.elapsed(),
        n(&t.accepted),
        n(&t.stale),
        n(&t.not_in_flight),
        n(&t.verdict_done),
        n(&t.verdict_requeue),
        n(&t.late_issued),
        n(&t.lost_issued)
    );
    for (cookie, e) in platform.ends.iter().enumerate() {
        assert_eq!(
            e.load(Ordering::SeqCst),
            1,
            "{name}: cookie {cookie} ended wrong number of times"
        );
    }
    assert_eq!((c.submitted, c.completed), (TOTAL as u64, TOTAL as u64), "{name}");
    assert_eq!(
        c.stale_completions,
        n(&t.stale),
        "{name}: every stale completion is counted"
    );
    assert_eq!(c.spurious_completions, n(&t.not_in_flight), "{name}");
    assert!(
        n(&t.lost_issued) > 0 && n(&t.late_issued) > 0,
        "{name}: fates never drawn"
    );
    assert!(
        c.timeouts > 0 && n(&t.verdict_done) > 0 && n(&t.verdict_requeue) > 0,
        "{name}: {c:?}"
    );
    assert!(n(&t.stale) > 0, "{name}: no late completion came back stale");
    // Each issue has exactly one outcome: accepted device completion, stale, or a verdict.
    let timed_out_ends = platform.errors.load(Ordering::SeqCst) as u64;
    assert!(timed_out_ends >= n(&t.verdict_done), "{name}");
    assert_eq!(c.dispatched, c.completed + c.requeued, "{name}: {c:?}");
    assert_eq!(
        c.timeouts,
        c.timeout_resets + n(&t.verdict_done) + n(&t.verdict_requeue),
        "{name}"
    );
    assert_eq!(queue.in_flight(), 0, "{name}");
    assert_eq!(queue.tags_in_use(), 0, "{name}");
}

#[test]
fn timeouts_on_irq_completions() {
    run("irq", CompletionPolicy::Irq, 1, false);
}

#[test]
fn timeouts_on_remote_completions_shared_tags() {
    run("remote", CompletionPolicy::Remote, 2, true);
}
