//! Reads and writes larger than the device's transfer or segment limits are split into several
//! requests (Linux's max_hw_sectors / max_segments split), and the bio ends once, when every
//! part has ended, with the first error.

mod common;

use blk::{
    Bio, BlkError, CompletionPolicy, Driver, HwCtx, IssueToken, Op, Queue, QueueConfig, QueueRqError, Rq, Segment,
    Status,
};
use common::HostPlatform;
use std::sync::{Arc, Mutex};

const CAP: u64 = 1 << 22;

/// One request as the driver saw it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    op: Op,
    sector: u64,
    nr_sectors: u32,
    segments: Vec<(u64, u32)>,
    token: IssueToken,
    hwq: usize,
}

/// Issues every request and leaves its completion to the test.
#[derive(Default)]
struct HoldDriver {
    seen: Mutex<Vec<Seen>>,
}

impl Driver for HoldDriver {
    type Pdu = ();

    fn queue_rq<'a>(&self, _hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, _last: bool) -> Result<(), QueueRqError<'a, Self>> {
        let mut seen = Seen {
            op: rq.op(),
            sector: rq.sector(),
            nr_sectors: rq.nr_sectors(),
            segments: rq.segments().iter().map(|s| (s.phys, s.len)).collect(),
            token: IssueToken::from_bits(0),
            hwq: rq.hwq(),
        };
        seen.token = rq.issue();
        self.seen.lock().unwrap().push(seen);
        Ok(())
    }
}

/// A queue whose device takes at most 128 KiB (256 sectors) and 4 segments per request.
fn queue(depth: u32) -> (Queue<HoldDriver>, Arc<HostPlatform>) {
    let mut cfg = QueueConfig::new(1, 1, depth, CAP);
    cfg.completion = CompletionPolicy::Irq;
    cfg.max_hw_sectors = 256;
    cfg.max_segments = 4;
    cfg.logical_block_size = 4096;
    let platform = Arc::new(HostPlatform::new(1, 64, true));
    let q = Queue::new(cfg, HoldDriver::default(), platform.clone()).unwrap();
    (q, platform)
}

fn complete_all(q: &Queue<HoldDriver>, order: &[usize], statuses: &[Status]) {
    let seen = q.driver().seen.lock().unwrap().clone();
    for (&index, &status) in order.iter().zip(statuses) {
        q.complete(0, seen[index].hwq, seen[index].token, status).unwrap();
    }
}

#[test]
fn a_1_mib_write_becomes_8_requests_and_ends_once() {
    let (q, platform) = queue(16);
    let segments = [Segment::new(0x4000_0000, 1 << 20)];
    let submitted = q.submit(0, &Bio::write(8192, 2048, &segments, 7)).unwrap();
    let seen = q.driver().seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 8);
    for (i, part) in seen.iter().enumerate() {
        assert_eq!(part.op, Op::Write);
        assert_eq!(part.sector, 8192 + 256 * i as u64);
        assert_eq!(part.nr_sectors, 256);
        assert_eq!(part.segments, [(0x4000_0000 + 131_072 * i as u64, 131_072)]);
    }
    assert_eq!(submitted.tag, seen[0].token.tag());
    assert_eq!(q.counters().split_bios, 1);
    // Completed out of order: nothing ends until the last part has.
    let order = [3, 0, 7, 1, 6, 2, 5];
    complete_all(&q, &order, &[Status::Ok; 7]);
    assert_eq!(platform.ended(), 0, "the bio must not end before all parts did");
    let last = q.driver().seen.lock().unwrap()[4].clone();
    q.complete(0, last.hwq, last.token, Status::Ok).unwrap();
    assert_eq!(platform.ended(), 1);
    let log = platform.log();
    assert_eq!(log.len(), 1);
    let end = &log[0];
    assert_eq!(
        (end.cookie, end.op, end.sector, end.nr_sectors, end.status),
        (7, Op::Write, 8192, 2048, Status::Ok)
    );
    // Every part's tag is free again, and every part counted as a device request.
    assert_eq!(q.in_flight(), 0);
    assert_eq!(q.tags_in_use(), 0);
    let c = q.counters();
    assert_eq!((c.submitted, c.completed), (8, 8));
}

#[test]
fn the_first_error_of_any_part_is_the_bios_status() {
    let (q, platform) = queue(16);
    let segments = [Segment::new(0x1000_0000, 512 * 1024)];
    q.submit(0, &Bio::read(0, 1024, &segments, 3)).unwrap();
    complete_all(
        &q,
        &[2, 0, 3, 1],
        &[Status::Ok, Status::IoError, Status::Timeout, Status::Ok],
    );
    let log = platform.log();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (log[0].cookie, log[0].status, log[0].nr_sectors),
        (3, Status::IoError, 1024)
    );
    assert_eq!(q.counters().completed_with_error, 2, "the failed parts themselves");
}

#[test]
fn many_segments_are_split_by_count_on_block_boundaries() {
    let (q, platform) = queue(16);
    // Ten separate 4 KiB pages: at most 4 per request.
    let segments: Vec<Segment> = (0..10).map(|i| Segment::new(0x10_0000 + 0x2000 * i, 4096)).collect();
    q.submit(0, &Bio::read(64, 80, &segments, 9)).unwrap();
    let seen = q.driver().seen.lock().unwrap().clone();
    assert_eq!(seen.iter().map(|s| s.nr_sectors).collect::<Vec<_>>(), [32, 32, 16]);
    assert_eq!(
        seen[2].segments,
        [(0x10_0000 + 0x2000 * 8, 4096), (0x10_0000 + 0x2000 * 9, 4096)]
    );
    complete_all(&q, &[0, 1, 2], &[Status::Ok; 3]);
    assert_eq!(platform.log().len(), 1);
}

#[test]
fn without_enough_tags_nothing_is_submitted() {
    let (q, platform) = queue(8);
    // 5 tags busy, a bio needing 4: refused as a whole, tags untouched, retry works later.
    for cookie in 0..5 {
        q.submit(0, &Bio::read(cookie * 8, 8, &[Segment::new(0x1000, 4096)], cookie))
            .unwrap();
    }
    let big = [Segment::new(0x8000_0000, 512 * 1024)];
    let bio = Bio::read(4096, 1024, &big, 20);
    assert!(matches!(q.submit(0, &bio), Err(BlkError::TagsExhausted { .. })));
    assert_eq!(q.tags_in_use(), 5);
    assert_eq!(q.driver().seen.lock().unwrap().len(), 5);
    complete_all(&q, &[0, 1], &[Status::Ok; 2]);
    q.submit(0, &bio).unwrap();
    assert_eq!(q.driver().seen.lock().unwrap().len(), 9);
    // A bio needing more tags than the queue has can never go: refused with the counts.
    let huge = [Segment::new(0x8000_0000, 4 << 20)];
    let error = q.submit(0, &Bio::read(0, 8192, &huge, 21)).unwrap_err();
    assert_eq!(error, BlkError::TooManySegments { count: 32, max: 8 });
    assert_eq!(platform.log().len(), 2);
}

#[test]
fn small_requests_are_not_touched() {
    let (q, _) = queue(8);
    q.submit(0, &Bio::read(0, 256, &[Segment::new(0x1000, 128 * 1024)], 1))
        .unwrap();
    let seen = q.driver().seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].nr_sectors, 256);
    assert_eq!(q.counters().split_bios, 0);
}

#[test]
fn a_transfer_limit_below_one_block_is_refused() {
    let mut cfg = QueueConfig::new(1, 1, 8, CAP);
    cfg.logical_block_size = 4096;
    cfg.max_hw_sectors = 4;
    let error = Queue::new(cfg, HoldDriver::default(), Arc::new(HostPlatform::new(1, 1, false)))
        .err()
        .unwrap();
    assert!(error.to_string().contains("max_hw_sectors"), "{error}");
}

/// A queue like [`queue`] whose device discards at most `max_discard` sectors per request.
fn discard_queue(max_discard: u32) -> Result<(Queue<HoldDriver>, Arc<HostPlatform>), BlkError> {
    let mut cfg = QueueConfig::new(1, 1, 16, CAP);
    cfg.max_hw_sectors = 256;
    cfg.max_segments = 4;
    cfg.logical_block_size = 4096;
    cfg.max_discard_sectors = max_discard;
    let platform = Arc::new(HostPlatform::new(1, 64, true));
    let q = Queue::new(cfg, HoldDriver::default(), platform.clone())?;
    Ok((q, platform))
}

#[test]
fn a_discard_is_split_by_the_discard_limit_not_the_transfer_limit() {
    // 1003 sectors: not a whole block; the limit is rounded down to 1000 (125 blocks of 8).
    let (q, platform) = discard_queue(1003).unwrap();
    assert_eq!(q.max_discard_sectors(), 1000);
    // 3016 sectors (377 blocks): 1000 + 1000 + 1000 + 16, each without segments, none cut by
    // the 256-sector transfer limit.
    q.submit(0, &Bio::discard(8, 3016, 11)).unwrap();
    let seen = q.driver().seen.lock().unwrap().clone();
    let parts: Vec<(Op, u64, u32, usize)> = seen
        .iter()
        .map(|s| (s.op, s.sector, s.nr_sectors, s.segments.len()))
        .collect();
    assert_eq!(
        parts,
        [
            (Op::Discard, 8, 1000, 0),
            (Op::Discard, 1008, 1000, 0),
            (Op::Discard, 2008, 1000, 0),
            (Op::Discard, 3008, 16, 0)
        ]
    );
    complete_all(&q, &[3, 1, 0, 2], &[Status::Ok; 4]);
    let log = platform.log();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (
            log[0].cookie,
            log[0].op,
            log[0].sector,
            log[0].nr_sectors,
            log[0].status
        ),
        (11, Op::Discard, 8, 3016, Status::Ok)
    );
}

#[test]
fn a_discard_within_the_limit_is_one_request() {
    let (q, platform) = discard_queue(1 << 20).unwrap();
    q.submit(0, &Bio::discard(64, 2048, 5)).unwrap();
    let seen = q.driver().seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].op, seen[0].sector, seen[0].nr_sectors),
        (Op::Discard, 64, 2048)
    );
    complete_all(&q, &[0], &[Status::Ok]);
    assert_eq!((platform.log()[0].op, platform.log()[0].cookie), (Op::Discard, 5));
    assert_eq!(q.counters().split_bios, 0);
}

#[test]
fn a_device_without_discard_refuses_it_and_bad_discards_are_refused() {
    let (q, _) = discard_queue(0).unwrap();
    assert_eq!(q.max_discard_sectors(), 0);
    assert_eq!(q.submit(0, &Bio::discard(0, 8, 1)), Err(BlkError::DiscardNotSupported));
    let (q, _) = discard_queue(1024).unwrap();
    let segments = [Segment::new(0x1000, 4096)];
    let with_data = Bio {
        segments: &segments,
        ..Bio::discard(0, 8, 1)
    };
    assert_eq!(q.submit(0, &with_data), Err(BlkError::DiscardWithData { segments: 1 }));
    assert!(matches!(
        q.submit(0, &Bio::discard(4, 8, 1)),
        Err(BlkError::Misaligned { .. })
    ));
    assert!(matches!(
        q.submit(0, &Bio::discard(CAP - 8, 16, 1)),
        Err(BlkError::BeyondEnd { .. })
    ));
    assert_eq!(q.submit(0, &Bio::discard(0, 0, 1)), Err(BlkError::EmptyIo));
    assert!(q.driver().seen.lock().unwrap().is_empty());
    // A limit below one logical block is a configuration error.
    assert!(matches!(
        discard_queue(4).err(),
        Some(BlkError::InvalidConfig {
            field: "max_discard_sectors",
            ..
        })
    ));
}
