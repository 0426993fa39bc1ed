//! The device floor (`Host::measure_floor`): reads posted straight to the controller, reaped by
//! polling, timed with the platform clock; tags borrowed from the drives' pool and handed back
//! only once the device is done with them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use blk::{Bio, Completion, CompletionPolicy, Platform, Status};
use megasas::fake::{CompletionMode, FakeConfig, FakeDelay, FakeDevice, FakeDma, FakeMmio};
use megasas::{Error, FloorSpec, Host, HostConfig, IrqMode, Model, Segment};

type TestHost = Host<FakeMmio, FakeDma, FakeDelay>;

/// A clock that advances 1 µs per reading; each reading also lets the fake device complete its
/// oldest pending read once `depth` reads are pending (or after 50 readings with fewer), unless
/// the device is hung.
struct DevicePlatform {
    clock_ns: AtomicU64,
    dev: Arc<FakeDevice>,
    depth: usize,
    idle_readings: AtomicU64,
    hung: AtomicBool,
    ended: Mutex<Vec<Completion>>,
}

impl Platform for DevicePlatform {
    fn now_ns(&self) -> u64 {
        if !self.hung.load(Ordering::Relaxed) {
            let pending = self.dev.pending();
            let waited = self.idle_readings.fetch_add(1, Ordering::Relaxed);
            if pending > 0 && (pending >= self.depth || waited >= 50) {
                self.dev.complete_pending(1);
                self.idle_readings.store(0, Ordering::Relaxed);
            }
        }
        self.clock_ns.fetch_add(1_000, Ordering::Relaxed)
    }
    fn send_completion_ipi(&self, _cpu: usize) {}
    fn raise_completion_softirq(&self, _cpu: usize) {}
    fn end_io(&self, c: &Completion) {
        self.ended.lock().unwrap().push(*c);
    }
}

fn setup(depth: usize, max_cmds: u16) -> (Arc<FakeDevice>, Arc<DevicePlatform>, TestHost) {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.completion = CompletionMode::Deferred;
    cfg.max_cmds = max_cmds;
    let dev = FakeDevice::new(cfg);
    let platform = Arc::new(DevicePlatform {
        clock_ns: AtomicU64::new(1),
        dev: dev.clone(),
        depth,
        idle_readings: AtomicU64::new(0),
        hung: AtomicBool::new(false),
        ended: Mutex::new(Vec::new()),
    });
    let mut hc = HostConfig::new(1, IrqMode::Msix);
    hc.completion = CompletionPolicy::Irq;
    let host = Host::new(
        Model::Sas2108Gen2,
        dev.mmio(),
        dev.dma(),
        dev.delay(),
        platform.clone(),
        hc,
    )
    .expect("host");
    host.start().expect("start");
    (dev, platform, host)
}

fn tags_in_use(host: &TestHost) -> u32 {
    host.queue(0).and_then(|q| q.host_tags()).expect("shared tags").in_use()
}

#[test]
fn floor_keeps_the_queue_depth_in_flight_and_times_every_read() {
    for depth in [1u16, 8] {
        let (dev, _p, host) = setup(usize::from(depth), 64);
        let buf = dev.buffer(4096);
        let posted_before = dev.stats().frames_posted;
        let r = host
            .measure_floor(
                0,
                0,
                FloorSpec::new(depth, 200),
                Segment {
                    phys: buf.phys(),
                    len: 4096,
                },
                &mut |_| {},
            )
            .expect("floor");
        assert_eq!(r.ios, 200);
        assert_eq!(r.failed, 0);
        assert_eq!(r.queue_depth, depth);
        assert_eq!(
            dev.stats().frames_posted - posted_before,
            200,
            "one frame per read, nothing else"
        );
        assert_eq!(
            dev.stats().max_outstanding,
            usize::from(depth),
            "the depth asked for, no more"
        );
        assert!(r.elapsed_ns > 0 && r.iops() > 0);
        // Each read waits for `depth` readings of the clock at least (1 µs each).
        assert!(r.p50_ns >= 1_000 && r.p99_ns >= r.p50_ns, "{r:?}");
        assert_eq!(tags_in_use(&host), 0, "every tag back in the pool");
        assert_eq!(host.counters().refused_completions, 0);
    }
}

#[test]
fn floor_depth_is_capped_at_the_io_tags() {
    let (dev, _p, host) = setup(4, 5);
    let buf = dev.buffer(512);
    let io_tags = host.controller().max_inflight() - 1;
    let r = host
        .measure_floor(
            0,
            0,
            FloorSpec::new(32, 50),
            Segment {
                phys: buf.phys(),
                len: 512,
            },
            &mut |_| {},
        )
        .expect("floor");
    assert_eq!(r.queue_depth, io_tags);
    assert_eq!(r.ios, 50);
}

#[test]
fn floor_refuses_bad_arguments() {
    let (dev, _p, host) = setup(1, 64);
    let posted_before = dev.stats().frames_posted;
    let small = dev.buffer(256);
    let seg = Segment {
        phys: small.phys(),
        len: 256,
    };
    assert!(matches!(
        host.measure_floor(0, 0, FloorSpec::new(1, 10), seg, &mut |_| {}),
        Err(Error::InvalidRequest { .. })
    ));
    let buf = dev.buffer(512);
    let seg = Segment {
        phys: buf.phys(),
        len: 512,
    };
    assert!(matches!(
        host.measure_floor(0, 0, FloorSpec::new(1, 0), seg, &mut |_| {}),
        Err(Error::InvalidRequest { .. })
    ));
    assert!(matches!(
        host.measure_floor(0, 7, FloorSpec::new(1, 10), seg, &mut |_| {}),
        Err(Error::NoSuchDrive { .. })
    ));
    assert_eq!(dev.stats().frames_posted, posted_before, "nothing reached the device");
    assert_eq!(tags_in_use(&host), 0);
}

#[test]
fn floor_refuses_to_share_tags_with_block_io() {
    let (dev, p, host) = setup(1000, 4); // two I/O tags
    let q = host.queue(0).expect("queue");
    let bufs: Vec<_> = (0..2).map(|_| dev.buffer(512)).collect();
    for (i, b) in bufs.iter().enumerate() {
        let seg = [blk::Segment::new(b.phys(), 512)];
        q.submit(0, &Bio::read(i as u64, 1, &seg, i as u64)).expect("submit");
    }
    assert_eq!(dev.pending(), 2);
    let floor_buf = dev.buffer(512);
    let err = host
        .measure_floor(
            0,
            0,
            FloorSpec::new(1, 10),
            Segment {
                phys: floor_buf.phys(),
                len: 512,
            },
            &mut |_| {},
        )
        .unwrap_err();
    assert_eq!(err, Error::FloorTagsBusy { wanted: 1, got: 0 });
    // The block requests are untouched and finish normally.
    dev.complete_pending(2);
    host.poll(0);
    let ended = p.ended.lock().unwrap().clone();
    assert_eq!(ended.len(), 2);
    assert!(ended.iter().all(|c| c.status == Status::Ok));
}

#[test]
fn a_stalled_floor_keeps_its_tags_until_the_device_answers() {
    let (dev, p, host) = setup(4, 64);
    p.hung.store(true, Ordering::Relaxed);
    let buf = dev.buffer(512);
    let mut spec = FloorSpec::new(4, 100);
    spec.stall_timeout_ns = 100_000;
    let err = host
        .measure_floor(
            0,
            0,
            spec,
            Segment {
                phys: buf.phys(),
                len: 512,
            },
            &mut |_| {},
        )
        .unwrap_err();
    assert_eq!(
        err,
        Error::FloorStalled {
            in_flight: 4,
            completed: 0
        }
    );
    // The device still owns four reads: their tags stay out of the pool.
    assert_eq!(tags_in_use(&host), 4);
    assert_eq!(dev.complete_pending(usize::MAX), 4);
    host.poll(0);
    assert_eq!(tags_in_use(&host), 0, "freed by the reaper once the device answered");
    assert_eq!(host.counters().refused_completions, 0);
    assert!(p.ended.lock().unwrap().is_empty(), "nothing reached the block layer");
}

/// A floor read is as long as the buffer's whole blocks (the kernel passes the job's block
/// size): an error on the last block of the first 4 KiB fails the first read, and the second
/// read starts right after it.
#[test]
fn floor_reads_cover_the_whole_buffer_in_block_aligned_steps() {
    let (dev, _p, host) = setup(1, 64);
    let block = host.drives()[0].drive.block_size;
    let blocks_per_read = u64::from(4096 / block);
    assert!(blocks_per_read > 1, "the test needs blocks smaller than the buffer");
    let buf = dev.buffer(4096);
    let seg = Segment {
        phys: buf.phys(),
        len: 4096,
    };
    let mut rule = megasas::fake::ErrorRule::medium_error(0, blocks_per_read - 1);
    rule.persistent = false;
    dev.inject_error(rule);
    let r = host
        .measure_floor(0, 0, FloorSpec::new(1, 1), seg, &mut |_| {})
        .expect("floor");
    assert_eq!(
        (r.ios, r.failed),
        (1, 1),
        "the first read covered block {}",
        blocks_per_read - 1
    );
    let mut rule = megasas::fake::ErrorRule::medium_error(0, blocks_per_read);
    rule.persistent = false;
    dev.inject_error(rule);
    let r = host
        .measure_floor(0, 0, FloorSpec::new(1, 2), seg, &mut |_| {})
        .expect("floor");
    assert_eq!(
        (r.ios, r.failed),
        (2, 1),
        "the second read starts at block {blocks_per_read}"
    );
    assert_eq!(tags_in_use(&host), 0, "every tag back in the pool");
}

#[test]
fn floor_reads_spread_over_their_buffers() {
    let (dev, _p, host) = setup(2, 64);
    let bufs = [dev.buffer(512), dev.buffer(512)];
    for b in &bufs {
        b.write(0, &[0xEE; 512]);
    }
    let segs: Vec<Segment> = bufs.iter().map(|b| b.segment(0, 512)).collect();
    let r = host
        .measure_floor_into(0, 0, FloorSpec::new(2, 20), &segs, &mut |_| {})
        .expect("floor");
    assert_eq!((r.ios, r.failed), (20, 0));
    for (i, b) in bufs.iter().enumerate() {
        assert_ne!(b.read(0, 512), vec![0xEE; 512], "buffer {i} took reads");
    }
    // Buffers of different lengths, or none, are refused before any read.
    let odd = [bufs[0].segment(0, 512), bufs[1].segment(0, 256)];
    assert!(
        host.measure_floor_into(0, 0, FloorSpec::new(2, 20), &odd, &mut |_| {})
            .is_err()
    );
    assert!(
        host.measure_floor_into(0, 0, FloorSpec::new(2, 20), &[], &mut |_| {})
            .is_err()
    );
    assert_eq!(tags_in_use(&host), 0);
}
