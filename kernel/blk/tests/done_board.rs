//! A platform that names a done board ([`Platform::done_board`], the kernel's) gets every
//! unsplit request delivered there by the queue itself, exactly once, with the submitter's
//! cookie (slot), CPU and status, and no call through the platform; the submitter is woken only
//! from another CPU; a refusal is counted by the board and the tag still freed. A split bio, and
//! every request while stage tracing is on, still ends once, whole, through [`Platform::end_io`].
//! The queue's counters stay exact either way.

use blk::{Bio, Completion, CompletionPolicy, Platform, Queue, Segment, Status};
use done::DoneBoard;
use nullblk::{NullConfig, NullDriver, NullMode};
use std::cell::RefCell;
use std::sync::{Arc, Mutex};

const CAP: u64 = 1 << 20;

thread_local! {
    /// CPUs the board woke, on this test's thread (every completion here runs on it).
    static WOKEN: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

fn record_wake(cpu: usize) {
    WOKEN.with(|w| w.borrow_mut().push(cpu));
}

fn woken() -> Vec<usize> {
    WOKEN.with(|w| w.borrow().clone())
}

/// A platform whose completions go to a done board of 2 CPUs x 8 slots, recording any call of
/// its own end hook.
struct BoardPlatform {
    board: &'static DoneBoard<Status>,
    full: Mutex<Vec<Completion>>,
}

impl BoardPlatform {
    fn new() -> Self {
        let board = DoneBoard::new(2, 8).unwrap().with_waker(record_wake);
        Self {
            board: Box::leak(Box::new(board)),
            full: Mutex::default(),
        }
    }

    /// What CPU `cpu` finds on the board: (slot, status), lowest slot first.
    fn take(&self, cpu: usize) -> Vec<(usize, Status)> {
        let mut found = Vec::new();
        self.board.take(cpu, |slot, status| found.push((slot, status)));
        found
    }

    fn full(&self) -> Vec<Completion> {
        self.full.lock().unwrap().clone()
    }
}

impl Platform for BoardPlatform {
    fn now_ns(&self) -> u64 {
        0
    }
    fn send_completion_ipi(&self, _cpu: usize) {}
    fn raise_completion_softirq(&self, _cpu: usize) {}
    fn end_io(&self, completion: &Completion) {
        self.full.lock().unwrap().push(*completion);
    }
    fn done_board(&self) -> Option<&'static DoneBoard<Status>> {
        Some(self.board)
    }
}

fn board_queue(mode: NullMode, error_one_in: u32) -> (Queue<NullDriver>, Arc<BoardPlatform>) {
    let mut null = NullConfig::new(CAP, mode);
    null.error_one_in = error_one_in;
    let mut cfg = null.queue_config(2, 1, 16);
    cfg.completion = CompletionPolicy::Irq;
    cfg.max_hw_sectors = 8;
    let platform = Arc::new(BoardPlatform::new());
    let q = Queue::new(cfg, NullDriver::new(null, 1, 16, true), platform.clone()).unwrap();
    (q, platform)
}

#[test]
fn completions_land_on_the_done_board_without_the_platforms_hook() {
    let (q, platform) = board_queue(NullMode::Inline, 0);
    for slot in 0..3u64 {
        q.submit(0, &Bio::read(slot * 8, 8, &[], slot)).unwrap();
        q.submit(1, &Bio::read(slot * 8, 8, &[], slot + 4)).unwrap();
    }
    assert_eq!(platform.take(0), [(0, Status::Ok), (1, Status::Ok), (2, Status::Ok)]);
    assert_eq!(platform.take(1), [(4, Status::Ok), (5, Status::Ok), (6, Status::Ok)]);
    assert!(platform.full().is_empty(), "no call through the platform");
    assert!(woken().is_empty(), "each ended on its submitter's CPU");
    assert_eq!(platform.board.bogus(), 0);
    let c = q.counters();
    assert_eq!((c.submitted, c.completed, c.completions_inline), (6, 6, 6));
    assert_eq!(q.in_flight(), 0);
    assert_eq!(q.tags_in_use(), 0);
}

#[test]
fn a_completion_on_another_cpu_wakes_the_submitter_with_its_status() {
    // Every request fails: the status reaches the board unchanged and is counted.
    let (q, platform) = board_queue(NullMode::Deferred, 1);
    q.submit(1, &Bio::read(0, 8, &[], 3)).unwrap();
    q.submit(1, &Bio::read(8, 8, &[], 5)).unwrap();
    assert!(platform.take(1).is_empty(), "nothing ends before its interrupt");
    // CPU 0 takes the interrupt.
    assert_eq!(q.driver().fire_interrupt(&q, 0, 0), 2);
    assert_eq!(platform.take(1), [(3, Status::IoError), (5, Status::IoError)]);
    assert_eq!(woken(), [1, 1]);
    assert!(platform.full().is_empty());
    let c = q.counters();
    assert_eq!((c.completed, c.completions_inline, c.completed_with_error), (2, 0, 2));
}

#[test]
fn a_completion_the_board_refuses_is_counted_and_its_tag_freed() {
    let (q, platform) = board_queue(NullMode::Inline, 0);
    // Slot 8 is past the board's 8 slots per CPU.
    q.submit(0, &Bio::read(0, 8, &[], 8)).unwrap();
    // Slot 2 twice without a reap between: the second finds it done already.
    q.submit(0, &Bio::read(8, 8, &[], 2)).unwrap();
    q.submit(0, &Bio::read(16, 8, &[], 2)).unwrap();
    assert_eq!(platform.board.bogus(), 2);
    assert_eq!(platform.take(0), [(2, Status::Ok)]);
    assert!(platform.full().is_empty());
    assert_eq!(q.counters().completed, 3);
    assert_eq!(q.tags_in_use(), 0, "a refused completion still frees its tag");
}

#[test]
fn a_split_bio_ends_once_whole_through_end_io() {
    let (q, platform) = board_queue(NullMode::Inline, 0);
    // 32 sectors with a device limit of 8: four parts.
    let segments = [Segment::new(0x10_0000, 32 * 512)];
    q.submit(0, &Bio::read(64, 32, &segments, 7)).unwrap();
    assert!(platform.take(0).is_empty(), "a part must not reach the board");
    let full = platform.full();
    assert_eq!(full.len(), 1);
    assert_eq!(
        (full[0].cookie, full[0].sector, full[0].nr_sectors, full[0].status),
        (7, 64, 32, Status::Ok)
    );
    let c = q.counters();
    assert_eq!((c.submitted, c.completed, c.split_bios), (4, 4, 1));
    assert_eq!(q.tags_in_use(), 0);
}

#[test]
fn with_stage_tracing_on_completions_go_through_the_platforms_hook() {
    let (q, platform) = board_queue(NullMode::Inline, 0);
    q.set_stage_trace(true);
    q.submit(0, &Bio::read(0, 8, &[], 5)).unwrap();
    let full = platform.full();
    assert_eq!(
        full.iter()
            .map(|c| (c.cookie, c.submit_cpu, c.status))
            .collect::<Vec<_>>(),
        [(5, 0, Status::Ok)]
    );
    assert!(
        platform.take(0).is_empty(),
        "the platform's hook delivers, not the queue"
    );
    q.set_stage_trace(false);
    q.submit(0, &Bio::read(0, 8, &[], 6)).unwrap();
    assert_eq!(platform.take(0), [(6, Status::Ok)]);
    assert_eq!(platform.full().len(), 1);
}
