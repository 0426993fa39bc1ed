//! A platform that ends requests by cookie ([`Platform::ends_by_cookie`], the kernel's done
//! board) gets every unsplit request through [`Platform::end_io_by_cookie`], exactly once and
//! with the submitter's cookie, CPU and status; a split bio still ends once, whole, through
//! [`Platform::end_io`]. The queue's counters stay exact either way. A platform that
//! names its done board ([`Platform::done_board`]) gets unsplit requests delivered there by the
//! queue itself, the submitter woken only from another CPU, refusals reported, and the
//! platform's own hook back while stage tracing is on.

use blk::done::DoneBoard;
use blk::{Bio, BlkError, Completion, CompletionPolicy, Platform, Queue, Segment, Status};
use nullblk::{NullConfig, NullDriver, NullMode};
use std::sync::{Arc, Mutex};

const CAP: u64 = 1 << 20;

/// Records what each end hook was given.
#[derive(Default)]
struct CookiePlatform {
    brief: Mutex<Vec<(u64, u16, Status)>>,
    full: Mutex<Vec<Completion>>,
}

impl Platform for CookiePlatform {
    fn now_ns(&self) -> u64 {
        0
    }
    fn send_completion_ipi(&self, _cpu: usize) {}
    fn raise_completion_softirq(&self, _cpu: usize) {}
    fn end_io(&self, completion: &Completion) {
        self.full.lock().unwrap().push(*completion);
    }
    fn ends_by_cookie(&self) -> bool {
        true
    }
    fn end_io_by_cookie(&self, cookie: u64, submit_cpu: u16, status: Status) {
        self.brief.lock().unwrap().push((cookie, submit_cpu, status));
    }
}

fn null_queue(ncpus: usize, mode: NullMode, error_one_in: u32) -> (Queue<NullDriver>, Arc<CookiePlatform>) {
    let mut null = NullConfig::new(CAP, mode);
    null.error_one_in = error_one_in;
    let mut cfg = null.queue_config(ncpus, 1, 16);
    cfg.completion = CompletionPolicy::Irq;
    cfg.max_hw_sectors = 8;
    let platform = Arc::new(CookiePlatform::default());
    let q = Queue::new(cfg, NullDriver::new(null, 1, 16, false), platform.clone()).unwrap();
    (q, platform)
}

#[test]
fn inline_completions_end_by_cookie_with_exact_counters() {
    let (q, platform) = null_queue(2, NullMode::Inline, 0);
    for cookie in 0..10u64 {
        let cpu = (cookie % 2) as usize;
        q.submit(cpu, &Bio::read(cookie * 8, 8, &[], 100 + cookie)).unwrap();
    }
    let brief = platform.brief.lock().unwrap().clone();
    let expected: Vec<_> = (0..10u64)
        .map(|cookie| (100 + cookie, (cookie % 2) as u16, Status::Ok))
        .collect();
    assert_eq!(brief, expected);
    assert!(
        platform.full.lock().unwrap().is_empty(),
        "no Completion for an unsplit request"
    );
    let c = q.counters();
    assert_eq!((c.submitted, c.completed, c.completions_inline), (10, 10, 10));
    assert_eq!(q.in_flight(), 0);
    assert_eq!(q.tags_in_use(), 0);
}

#[test]
fn interrupt_completions_and_errors_end_by_cookie() {
    // Every request fails: the status travels unchanged and is counted.
    let (q, platform) = null_queue(1, NullMode::Deferred, 1);
    for cookie in 0..4u64 {
        q.submit(0, &Bio::read(cookie * 8, 8, &[], cookie)).unwrap();
    }
    assert!(
        platform.brief.lock().unwrap().is_empty(),
        "nothing ends before its interrupt"
    );
    assert_eq!(q.driver().fire_interrupt(&q, 0, 0), 4);
    let mut brief = platform.brief.lock().unwrap().clone();
    brief.sort_by_key(|&(cookie, _, _)| cookie);
    let expected: Vec<_> = (0..4u64).map(|cookie| (cookie, 0, Status::IoError)).collect();
    assert_eq!(brief, expected);
    assert!(platform.full.lock().unwrap().is_empty());
    let c = q.counters();
    assert_eq!((c.completed, c.completions_inline, c.completed_with_error), (4, 0, 4));
}

#[test]
fn a_split_bio_still_ends_once_whole_through_end_io() {
    let (q, platform) = null_queue(1, NullMode::Inline, 0);
    // 32 sectors with a device limit of 8: four parts.
    let segments = [Segment::new(0x10_0000, 32 * 512)];
    q.submit(0, &Bio::read(64, 32, &segments, 9)).unwrap();
    assert!(
        platform.brief.lock().unwrap().is_empty(),
        "a part must not end the bio by cookie"
    );
    let full = platform.full.lock().unwrap().clone();
    assert_eq!(full.len(), 1);
    assert_eq!(
        (full[0].cookie, full[0].sector, full[0].nr_sectors, full[0].status),
        (9, 64, 32, Status::Ok)
    );
    let c = q.counters();
    assert_eq!((c.submitted, c.completed, c.split_bios), (4, 4, 1));
    assert_eq!(q.tags_in_use(), 0);
}

/// A platform whose completions go to a done board of 2 CPUs x 8 slots, recording wake-ups,
/// refusals and any call of its own end hooks.
struct BoardPlatform {
    board: &'static DoneBoard,
    brief: Mutex<Vec<(u64, u16, Status)>>,
    woken: Mutex<Vec<usize>>,
    refused: Mutex<Vec<BlkError>>,
}

impl BoardPlatform {
    fn new() -> Self {
        Self {
            board: Box::leak(Box::new(DoneBoard::new(2, 8).unwrap())),
            brief: Mutex::default(),
            woken: Mutex::default(),
            refused: Mutex::default(),
        }
    }

    /// What CPU `cpu` finds on the board: (slot, status), lowest slot first.
    fn take(&self, cpu: usize) -> Vec<(usize, Status)> {
        let mut found = Vec::new();
        self.board.take(cpu, |slot, status| found.push((slot, status)));
        found
    }
}

impl Platform for BoardPlatform {
    fn now_ns(&self) -> u64 {
        0
    }
    fn send_completion_ipi(&self, _cpu: usize) {}
    fn raise_completion_softirq(&self, _cpu: usize) {}
    fn end_io(&self, _completion: &Completion) {
        panic!("an unsplit request must not end through end_io");
    }
    fn ends_by_cookie(&self) -> bool {
        true
    }
    fn end_io_by_cookie(&self, cookie: u64, submit_cpu: u16, status: Status) {
        self.brief.lock().unwrap().push((cookie, submit_cpu, status));
    }
    fn done_board(&self) -> Option<&'static DoneBoard> {
        Some(self.board)
    }
    fn done_refused(&self, error: &BlkError) {
        self.refused.lock().unwrap().push(*error);
    }
    fn wake_submitter(&self, cpu: usize) {
        self.woken.lock().unwrap().push(cpu);
    }
}

fn board_queue(mode: NullMode, error_one_in: u32) -> (Queue<NullDriver>, Arc<BoardPlatform>) {
    let mut null = NullConfig::new(CAP, mode);
    null.error_one_in = error_one_in;
    let mut cfg = null.queue_config(2, 1, 16);
    cfg.completion = CompletionPolicy::Irq;
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
    assert!(
        platform.brief.lock().unwrap().is_empty(),
        "no call through the platform"
    );
    assert!(
        platform.woken.lock().unwrap().is_empty(),
        "each ended on its submitter's CPU"
    );
    assert!(platform.refused.lock().unwrap().is_empty());
    let c = q.counters();
    assert_eq!((c.submitted, c.completed), (6, 6));
    assert_eq!(q.tags_in_use(), 0);
}

#[test]
fn a_completion_on_another_cpu_wakes_the_submitter_with_its_status() {
    // Every request fails: the status reaches the board unchanged.
    let (q, platform) = board_queue(NullMode::Deferred, 1);
    q.submit(1, &Bio::read(0, 8, &[], 3)).unwrap();
    assert!(platform.take(1).is_empty(), "nothing ends before its interrupt");
    // CPU 0 takes the interrupt.
    assert_eq!(q.driver().fire_interrupt(&q, 0, 0), 1);
    assert_eq!(platform.take(1), [(3, Status::IoError)]);
    assert_eq!(*platform.woken.lock().unwrap(), [1]);
}

#[test]
fn a_completion_the_board_refuses_is_reported_and_its_tag_freed() {
    let (q, platform) = board_queue(NullMode::Inline, 0);
    // Slot 8 is past the board's 8 slots per CPU.
    q.submit(0, &Bio::read(0, 8, &[], 8)).unwrap();
    // Slot 2 twice without a reap between: the second finds it done already.
    q.submit(0, &Bio::read(8, 8, &[], 2)).unwrap();
    q.submit(0, &Bio::read(16, 8, &[], 2)).unwrap();
    let refused = platform.refused.lock().unwrap().clone();
    assert!(
        matches!(
            refused[..],
            [
                BlkError::DoneSlotOutOfRange { slot: 8, .. },
                BlkError::DoneSlotBusy { cpu: 0, slot: 2 }
            ]
        ),
        "{refused:?}"
    );
    assert_eq!(platform.board.bogus(), 2);
    assert_eq!(platform.take(0), [(2, Status::Ok)]);
    assert_eq!(q.tags_in_use(), 0, "a refused completion still frees its tag");
}

#[test]
fn with_stage_tracing_on_completions_go_through_the_platforms_hook() {
    let (q, platform) = board_queue(NullMode::Inline, 0);
    q.set_stage_trace(true);
    q.submit(0, &Bio::read(0, 8, &[], 5)).unwrap();
    assert_eq!(*platform.brief.lock().unwrap(), [(5, 0, Status::Ok)]);
    assert!(
        platform.take(0).is_empty(),
        "the platform's hook delivers, not the queue"
    );
    q.set_stage_trace(false);
    q.submit(0, &Bio::read(0, 8, &[], 6)).unwrap();
    assert_eq!(platform.take(0), [(6, Status::Ok)]);
}
