//! A platform that ends requests by cookie ([`Platform::ends_by_cookie`], the kernel's done
//! board) gets every unsplit request through [`Platform::end_io_by_cookie`], exactly once and
//! with the submitter's cookie, CPU and status; a split bio still ends once, whole, through
//! [`Platform::end_io`]. The queue's counters stay exact either way (issue 22).

use blk::null::{NullConfig, NullDriver, NullMode};
use blk::{Bio, Completion, CompletionPolicy, Platform, Queue, Segment, Status};
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
