//! The block-layer binding (`megasas::Host`) over real `blk::Queue`s and the fake controller, with
//! a fake `blk::Platform` (a clock the test advances, IPIs and softirqs recorded and delivered).
//! Simulated CPUs interleave submissions, device completions in random (seeded) order,
//! interrupts on random CPUs, completion IPIs and ticks; every request must complete exactly
//! once with the right status and data, and the device must never write into a buffer whose
//! request already ended.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use blk::{Bio, BlkError, Completion, CompletionPolicy, Platform, Status};
use common::{disk, pattern};
use megasas::fake::{CompletionMode, ErrorRule, FakeBuffer, FakeConfig, FakeDelay, FakeDevice, FakeDma, FakeMmio};
use megasas::{Error, Host, HostConfig, IrqMode, Model};

type TestHost = Host<FakeMmio, FakeDma, FakeDelay>;

/// The kernel's side of the block layer, for a test.
struct TestPlatform {
    clock_ns: AtomicU64,
    /// Per CPU: an IPI or softirq asked it to run its completion lists.
    kick: Vec<AtomicBool>,
    ended: Mutex<Vec<Completion>>,
    /// Buffers to retire in the fake when their request ends: cookie -> (phys, len).
    buffers: Mutex<HashMap<u64, (u64, usize)>>,
    dev: Arc<FakeDevice>,
}

impl TestPlatform {
    fn new(dev: &Arc<FakeDevice>, ncpus: usize) -> Arc<Self> {
        Arc::new(Self {
            clock_ns: AtomicU64::new(1),
            kick: (0..ncpus).map(|_| AtomicBool::new(false)).collect(),
            ended: Mutex::new(Vec::new()),
            buffers: Mutex::new(HashMap::new()),
            dev: dev.clone(),
        })
    }

    fn advance(&self, ns: u64) {
        self.clock_ns.fetch_add(ns, Ordering::Relaxed);
    }

    fn take_ended(&self) -> Vec<Completion> {
        std::mem::take(&mut *self.ended.lock().unwrap())
    }
}

impl Platform for TestPlatform {
    fn now_ns(&self) -> u64 {
        self.clock_ns.load(Ordering::Relaxed)
    }
    fn send_completion_ipi(&self, cpu: usize) {
        self.kick[cpu].store(true, Ordering::Relaxed);
    }
    fn raise_completion_softirq(&self, cpu: usize) {
        self.kick[cpu].store(true, Ordering::Relaxed);
    }
    fn end_io(&self, c: &Completion) {
        // From here on the buffer is the submitter's again: a device write into it is a bug.
        if let Some((phys, len)) = self.buffers.lock().unwrap().remove(&c.cookie) {
            self.dev.retire(phys, len);
        }
        self.ended.lock().unwrap().push(*c);
    }
}

/// Runs the completion lists of every CPU that was kicked (the IPI / softirq handlers).
fn run_kicked(host: &TestHost, p: &TestPlatform) {
    for cpu in 0..p.kick.len() {
        if p.kick[cpu].swap(false, Ordering::Relaxed) {
            for q in host.queues() {
                q.run_completions(cpu);
            }
        }
    }
}

fn setup(cfg: FakeConfig, ncpus: usize, policy: CompletionPolicy) -> (Arc<FakeDevice>, Arc<TestPlatform>, TestHost) {
    let model = cfg.model;
    let dev = FakeDevice::new(cfg);
    let platform = TestPlatform::new(&dev, ncpus);
    let mut hc = HostConfig::new(ncpus, IrqMode::Msix);
    hc.completion = policy;
    hc.timeout_ns = 1_000_000_000;
    let host = Host::new(model, dev.mmio(), dev.dma(), dev.delay(), platform.clone(), hc).expect("host");
    host.start().expect("start");
    (dev, platform, host)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One request the test has in flight.
struct Pending {
    drive: usize,
    write: bool,
    lba: u64,
    blocks: u32,
    buf: usize,
    expect: Status,
}

/// What the test believes each block of each drive holds.
type Contents = HashMap<(usize, u64), Vec<u8>>;

fn block_data(model: &Contents, drive: usize, lba: u64, bs: usize) -> Vec<u8> {
    model.get(&(drive, lba)).cloned().unwrap_or_else(|| vec![0; bs])
}

/// The big interleaving: `total` requests over every drive, completions in random order, on
/// random CPUs, with error rules and injected BUSY answers; with `holds > 0`, that many
/// commands are held by the device until their timeout's ABORT (timeouts on, racing everything).
fn run_mixed(seed: u64, total: u64, policy: CompletionPolicy, holds: u32) {
    const NCPUS: usize = 4;
    const BUFS: usize = 64;
    const BLOCKS: u64 = 256;
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_cmds = 24;
    cfg.completion = CompletionMode::Deferred;
    cfg.disks = vec![disk(0, 1 << 20, 512), disk(1, 4 << 20, 4096), disk(2, 1 << 20, 512)];
    let (dev, platform, host) = setup(cfg, NCPUS, policy);
    let bs: Vec<usize> = host.drives().iter().map(|d| d.drive.block_size as usize).collect();
    // Block 200 of drive 2 fails every time with a medium error.
    dev.inject_error(ErrorRule::medium_error(2, 200));
    let bufs: Vec<FakeBuffer> = (0..BUFS).map(|_| dev.buffer(4 * 4096)).collect();
    let mut free_bufs: Vec<usize> = (0..BUFS).collect();
    let mut rng = Rng(seed);
    let mut model: Contents = HashMap::new();
    let mut pending: HashMap<u64, Pending> = HashMap::new();
    let mut busy_blocks: HashSet<(usize, u64)> = HashSet::new();
    let mut done: HashSet<u64> = HashSet::new();
    let (mut next, mut ok, mut failed) = (0u64, 0u64, 0u64);
    let mut busy_injected = 0;
    let (mut holds_injected, mut timeouts) = (0u32, 0u64);
    // Blocks whose contents are unknown: a timed-out write may or may not have reached them.
    let mut unknown: HashSet<(usize, u64)> = HashSet::new();

    let mut check = |ended: Vec<Completion>,
                     pending: &mut HashMap<u64, Pending>,
                     free_bufs: &mut Vec<usize>,
                     busy_blocks: &mut HashSet<(usize, u64)>,
                     model: &mut Contents| {
        for c in ended {
            assert!(done.insert(c.cookie), "request {} completed twice", c.cookie);
            let p = pending
                .remove(&c.cookie)
                .expect("completion of a request not submitted");
            let b = bs[p.drive];
            if c.status == Status::Timeout && holds > 0 {
                timeouts += 1;
                if p.write {
                    for i in 0..u64::from(p.blocks) {
                        unknown.insert((p.drive, p.lba + i));
                    }
                }
            } else {
                assert_eq!(
                    c.status, p.expect,
                    "request {} (drive {} lba {})",
                    c.cookie, p.drive, p.lba
                );
            }
            if c.status == Status::Ok {
                ok += 1;
                for i in 0..u64::from(p.blocks) {
                    let off = i as usize * b;
                    if p.write {
                        unknown.remove(&(p.drive, p.lba + i));
                        model.insert((p.drive, p.lba + i), bufs[p.buf].read(off, b));
                    } else if !unknown.contains(&(p.drive, p.lba + i)) {
                        assert_eq!(
                            bufs[p.buf].read(off, b),
                            block_data(model, p.drive, p.lba + i, b),
                            "drive {} block {} read back wrong",
                            p.drive,
                            p.lba + i
                        );
                    }
                }
            } else {
                failed += 1;
            }
            for i in 0..u64::from(p.blocks) {
                busy_blocks.remove(&(p.drive, p.lba + i));
            }
            free_bufs.push(p.buf);
        }
    };

    while next < total || !pending.is_empty() {
        match rng.below(16) {
            0..=6 if next < total => {
                let Some(bi) = free_bufs.pop() else { continue };
                let drive = rng.below(3) as usize;
                let b = bs[drive];
                let blocks = 1 + rng.below(4) as u32;
                let lba = rng.below(BLOCKS - 4);
                if (0..u64::from(blocks)).any(|i| busy_blocks.contains(&(drive, lba + i))) {
                    free_bufs.push(bi);
                    continue;
                }
                let write = rng.below(2) == 0;
                let len = blocks as usize * b;
                if write {
                    bufs[bi].write(0, &pattern(next, len));
                } else {
                    bufs[bi].write(0, &vec![0xEE; len]);
                }
                let expect = if drive == 2 && (lba..lba + u64::from(blocks)).contains(&200) {
                    Status::IoError
                } else {
                    Status::Ok
                };
                dev.revive(bufs[bi].phys(), bufs[bi].len());
                platform
                    .buffers
                    .lock()
                    .unwrap()
                    .insert(next, (bufs[bi].phys(), bufs[bi].len()));
                let seg = [blk::Segment::new(bufs[bi].phys(), len as u32)];
                let scale = (b / 512) as u64;
                let (sector, nr) = (lba * scale, blocks * (b as u32 / 512));
                let bio = if write {
                    Bio::write(sector, nr, &seg, next)
                } else {
                    Bio::read(sector, nr, &seg, next)
                };
                let cpu = rng.below(NCPUS as u64) as usize;
                pending.insert(
                    next,
                    Pending {
                        drive,
                        write,
                        lba,
                        blocks,
                        buf: bi,
                        expect,
                    },
                );
                match host.queue(drive).unwrap().submit(cpu, &bio) {
                    Ok(_) => {
                        for i in 0..u64::from(blocks) {
                            busy_blocks.insert((drive, lba + i));
                        }
                        next += 1;
                    }
                    Err(BlkError::TagsExhausted { .. }) => {
                        pending.remove(&next);
                        platform.buffers.lock().unwrap().remove(&next);
                        free_bufs.push(bi);
                    }
                    Err(e) => panic!("submit: {e}"),
                }
            }
            7..=9 => {
                let n = dev.pending();
                if n > 0 {
                    dev.complete_at(rng.below(n as u64) as usize);
                }
            }
            10 | 11 => {
                let cpu = rng.below(NCPUS as u64) as usize;
                host.handle_interrupt(cpu);
            }
            12 => {
                if holds_injected < holds && rng.below(8) == 0 {
                    dev.hold_next(1);
                    holds_injected += 1;
                } else if busy_injected < 50 {
                    dev.inject_busy(1);
                    busy_injected += 1;
                }
            }
            13 => {
                platform.advance(1_000_000);
                host.tick(rng.below(NCPUS as u64) as usize);
            }
            _ => run_kicked(&host, &platform),
        }
        check(
            platform.take_ended(),
            &mut pending,
            &mut free_bufs,
            &mut busy_blocks,
            &mut model,
        );
        if next >= total && dev.pending() == 0 && !pending.is_empty() {
            host.handle_interrupt(0);
            run_kicked(&host, &platform);
            host.tick(0);
            check(
                platform.take_ended(),
                &mut pending,
                &mut free_bufs,
                &mut busy_blocks,
                &mut model,
            );
        }
    }
    assert_eq!(done.len() as u64, total, "every request completed");
    assert_eq!(ok + failed, total);
    assert!(failed > 0 && ok > failed, "ok {ok}, failed {failed}");
    let rc = host.controller().recovery_counters();
    if holds > 0 {
        // Each held command timed out, was aborted, and its request ended with Timeout once;
        // the aborts worked, so no reset was needed.
        assert!(timeouts > 0, "no held command timed out (holds {holds_injected})");
        assert_eq!(dev.held(), 0, "a held command was left in the device");
        // Deterministic for the seed: every hold was armed before a later submission used it.
        assert_eq!(timeouts, u64::from(holds_injected));
        assert_eq!(rc.aborts_confirmed, timeouts, "{rc:?}");
        assert_eq!(rc.resets, 0, "{rc:?}");
    } else {
        assert_eq!(rc.aborts_sent, 0, "no request timed out: {rc:?}");
    }
    let c = host.counters();
    assert_eq!(c.refused_completions, 0);
    assert!(c.busy_retries > 0, "BUSY answers were re-posted: {c:?}");
    assert_eq!(host.controller().fault_count(), 0);
    assert_eq!(host.controller().busy_tags(), 0, "every controller tag is free again");
    for q in host.queues() {
        assert_eq!(q.in_flight(), 0);
    }
    let s = dev.stats();
    assert!(s.dma_violations.is_empty(), "{:?}", s.dma_violations);
    assert!(s.writes_after_end.is_empty(), "{:?}", s.writes_after_end);
}

#[test]
fn twenty_thousand_requests_remote_completions() {
    run_mixed(0x5EED_0001, 20_000, CompletionPolicy::Remote, 0);
}

/// Stress with timeouts on: 30 commands held by the device, found by the timeout scan and
/// aborted while the rest of the traffic (errors, BUSY, random order) goes on.
#[test]
fn requests_with_timeouts_and_aborts_under_load() {
    run_mixed(0x5EED_0004, 6_000, CompletionPolicy::Remote, 30);
}

#[test]
fn mixed_requests_irq_and_local_completions() {
    run_mixed(0x5EED_0002, 5_000, CompletionPolicy::Irq, 0);
    run_mixed(0x5EED_0003, 5_000, CompletionPolicy::Local, 0);
}

/// Submits one 512-byte I/O from CPU 0.
fn submit_one(
    host: &TestHost,
    p: &TestPlatform,
    drive: usize,
    buf: &FakeBuffer,
    write: bool,
    lba: u64,
    cookie: u64,
) -> Result<(), BlkError> {
    p.buffers.lock().unwrap().insert(cookie, (buf.phys(), buf.len()));
    p.dev.revive(buf.phys(), buf.len());
    let seg = [blk::Segment::new(buf.phys(), 512)];
    let bio = if write {
        Bio::write(lba, 1, &seg, cookie)
    } else {
        Bio::read(lba, 1, &seg, cookie)
    };
    let r = host.queue(drive).unwrap().submit(0, &bio).map(|_| ());
    if r.is_err() {
        p.buffers.lock().unwrap().remove(&cookie);
    }
    r
}

#[test]
fn drives_share_the_controller_tags() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_cmds = 16;
    cfg.completion = CompletionMode::Deferred;
    cfg.disks = vec![disk(0, 1 << 20, 512), disk(1, 1 << 20, 512)];
    let (dev, p, host) = setup(cfg, 2, CompletionPolicy::Irq);
    let io_tags = usize::from(host.controller().max_inflight()) - 1;
    assert_eq!(io_tags, 14);
    let bufs: Vec<_> = (0..=io_tags).map(|_| dev.buffer(512)).collect();
    // Drive 0 saturates: it gets every I/O tag of the controller, not a half.
    let mut n = 0;
    while submit_one(&host, &p, 0, &bufs[n], true, n as u64, n as u64).is_ok() {
        n += 1;
    }
    assert_eq!(n, io_tags, "one busy drive may use all of the controller's commands");
    assert_eq!(dev.pending(), io_tags);
    assert!(matches!(
        submit_one(&host, &p, 1, &bufs[io_tags], false, 0, 100),
        Err(BlkError::TagsExhausted { .. })
    ));
    // One completion frees a tag, and the other drive progresses on it.
    dev.complete_pending(1);
    host.handle_interrupt(1);
    assert_eq!(p.take_ended().len(), 1);
    submit_one(&host, &p, 1, &bufs[io_tags], false, 0, 100).unwrap();
    dev.complete_pending(usize::MAX);
    host.handle_interrupt(0);
    let ended = p.take_ended();
    assert_eq!(ended.len(), io_tags);
    assert!(ended.iter().all(|c| c.status == Status::Ok));
    assert!(ended.iter().any(|c| c.cookie == 100));
    // Tags are controller-wide: no two requests in flight ever had the same one.
    assert_eq!(host.controller().busy_tags(), 0);
    assert!(dev.stats().dma_violations.is_empty());
}

/// More logical drives than controller tags (`max_cmds = 4`, 5 drives). With host-wide
/// tags every drive works: they share the 2 I/O tags (3 tags, one of them the admin tag), and
/// none of them touches the admin tag.
#[test]
fn five_drives_on_a_four_command_controller_all_work() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_cmds = 4;
    cfg.disks = (0..5).map(|i| disk(i, 1 << 20, 512)).collect();
    let (dev, p, host) = setup(cfg, 1, CompletionPolicy::Irq);
    assert_eq!(host.drives().len(), 5);
    assert_eq!(host.controller().max_inflight(), 3);
    let buf = dev.buffer(512);
    for d in 0..5usize {
        let data = pattern(d as u64 + 1, 512);
        buf.write(0, &data);
        submit_one(&host, &p, d, &buf, true, 7, 2 * d as u64).unwrap();
        host.handle_interrupt(0);
        buf.write(0, &[0; 512]);
        submit_one(&host, &p, d, &buf, false, 7, 2 * d as u64 + 1).unwrap();
        host.handle_interrupt(0);
        assert_eq!(buf.read(0, 512), data, "drive {d}");
        let ended = p.take_ended();
        assert_eq!(ended.len(), 2);
        assert!(ended.iter().all(|c| c.status == Status::Ok && c.tag != 0), "{ended:?}");
    }
    assert!(dev.stats().dma_violations.is_empty());
}

#[test]
fn a_controller_with_only_the_admin_tag_is_refused() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_cmds = 2;
    let dev = FakeDevice::new(cfg);
    let p = TestPlatform::new(&dev, 1);
    let err = Host::new(
        Model::Sas2108Gen2,
        dev.mmio(),
        dev.dma(),
        dev.delay(),
        p,
        HostConfig::new(1, IrqMode::Msix),
    )
    .unwrap_err();
    assert_eq!(err, Error::NoIoTags { tags: 1 });
    assert!(err.to_string().contains("admin tag"), "{err}");
}

/// A request held by the device times out: the tick sends an ABORT, QEMU-style the held command
/// completes with 0x2E, and the request ends once, with `Timeout`; the others are untouched.
#[test]
fn timed_out_request_is_aborted_and_ends_once_with_timeout() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.completion = CompletionMode::Deferred;
    let (dev, p, host) = setup(cfg, 2, CompletionPolicy::Irq);
    let bufs: Vec<_> = (0..3).map(|_| dev.buffer(512)).collect();
    dev.hold_next(1);
    for (i, b) in bufs.iter().enumerate() {
        submit_one(&host, &p, 0, b, false, i as u64, i as u64).unwrap();
    }
    p.advance(500_000_000);
    assert_eq!(host.tick(0), 0, "not yet");
    dev.complete_pending(usize::MAX);
    host.handle_interrupt(1);
    assert_eq!(p.take_ended().len(), 2);
    p.advance(600_000_000);
    assert_eq!(host.tick(0), 1, "the held request timed out");
    assert_eq!(host.controller().recovery_counters().aborts_sent, 1);
    // The tick reaped the device's answer: the held command was cancelled (0x2E) before the
    // request ended, so its buffer came back only after the device gave it up.
    assert_eq!(dev.stats().aborts_done, 1);
    assert_eq!(dev.held(), 0);
    host.handle_interrupt(1);
    let ended = p.take_ended();
    assert_eq!(ended.len(), 1);
    assert_eq!((ended[0].cookie, ended[0].status), (0, Status::Timeout));
    assert_eq!(host.queue(0).unwrap().in_flight(), 0);
    assert_eq!(host.controller().recovery_counters().resets, 0);
    // The tag is usable again.
    submit_one(&host, &p, 0, &bufs[0], false, 0, 10).unwrap();
    dev.complete_pending(usize::MAX);
    host.handle_interrupt(0);
    assert_eq!(p.take_ended()[0].status, Status::Ok);
    let s = dev.stats();
    assert!(s.writes_after_end.is_empty(), "{:?}", s.writes_after_end);
    assert!(s.dma_violations.is_empty());
}

/// The device ignores the ABORT: at the next timeout the host resets the controller; every
/// request in flight (on both drives) ends exactly once, the timed-out one with `Timeout`, the
/// others with `Aborted`, and new I/O works afterwards.
#[test]
fn ignored_abort_escalates_to_a_reset_that_fails_all_in_flight_once() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.completion = CompletionMode::Deferred;
    cfg.disks = vec![disk(0, 1 << 20, 512), disk(1, 1 << 20, 512)];
    let (dev, p, host) = setup(cfg, 2, CompletionPolicy::Remote);
    dev.set_ignore_aborts(true);
    let bufs: Vec<_> = (0..5).map(|_| dev.buffer(512)).collect();
    dev.hold_next(1);
    submit_one(&host, &p, 0, &bufs[0], false, 0, 0).unwrap();
    p.advance(500_000_000);
    for (i, b) in bufs.iter().enumerate().skip(1) {
        submit_one(&host, &p, i % 2, b, true, i as u64, i as u64).unwrap();
    }
    p.advance(600_000_000);
    assert_eq!(host.tick(0), 1);
    host.handle_interrupt(0);
    assert!(p.take_ended().is_empty(), "the abort is ignored: nothing ends");
    p.advance(1_100_000_000);
    // Second timeout of the held request (and first of the others: they get aborts that are
    // ignored too, or wait for the abort slot), then the reset.
    host.tick(0);
    run_kicked(&host, &p);
    let ended = p.take_ended();
    assert_eq!(ended.len(), 5, "{ended:?}");
    let mut seen = HashSet::new();
    for c in &ended {
        assert!(seen.insert(c.cookie), "request {} ended twice", c.cookie);
        let want = if c.cookie == 0 {
            Status::Timeout
        } else {
            Status::Aborted
        };
        assert_eq!(c.status, want, "request {}", c.cookie);
    }
    let rc = host.controller().recovery_counters();
    assert_eq!(rc.resets, 1);
    assert_eq!(rc.reset_failed_commands, 5);
    assert_eq!(host.controller().busy_tags(), 0);
    // Nothing late from the device, and the controller serves I/O again.
    dev.complete_pending(usize::MAX);
    host.handle_interrupt(0);
    run_kicked(&host, &p);
    assert!(p.take_ended().is_empty());
    dev.set_ignore_aborts(false);
    submit_one(&host, &p, 1, &bufs[0], false, 0, 50).unwrap();
    dev.complete_pending(usize::MAX);
    host.handle_interrupt(1);
    run_kicked(&host, &p);
    let ended = p.take_ended();
    assert_eq!((ended[0].cookie, ended[0].status), (50, Status::Ok));
    let s = dev.stats();
    assert!(s.writes_after_end.is_empty(), "{:?}", s.writes_after_end);
    assert!(s.dma_violations.is_empty());
}

/// A completion that arrives for the timed-out request while its abort is pending finishes it
/// with its real status; the late abort reply is harmless.
#[test]
fn completion_racing_the_abort_keeps_its_status() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.completion = CompletionMode::Deferred;
    let (dev, p, host) = setup(cfg, 1, CompletionPolicy::Irq);
    dev.set_ignore_aborts(true);
    let buf = dev.buffer(512);
    dev.set_frozen(true);
    submit_one(&host, &p, 0, &buf, false, 3, 1).unwrap();
    p.advance(1_100_000_000);
    assert_eq!(host.tick(0), 1);
    dev.set_frozen(false);
    dev.complete_pending(usize::MAX);
    host.handle_interrupt(0);
    let ended = p.take_ended();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].status, Status::Ok);
    assert_eq!(host.controller().recovery_counters().resets, 0);
}

/// Hostile replies on the binding: invented and duplicated contexts are counted by the
/// controller and never reach the block layer.
#[test]
fn bogus_replies_never_reach_the_block_layer() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.completion = CompletionMode::Deferred;
    let (dev, p, host) = setup(cfg, 1, CompletionPolicy::Irq);
    let buf = dev.buffer(512);
    submit_one(&host, &p, 0, &buf, false, 0, 1).unwrap();
    let ctx = dev.pending_contexts()[0];
    dev.inject_context(ctx); // posted, but the frame is not finished
    dev.inject_context(0x0001_0005); // tag 5, nothing in flight
    dev.inject_context(0x7FFF_FFFF);
    host.handle_interrupt(0);
    assert!(p.take_ended().is_empty());
    dev.inject_duplicate_next();
    dev.complete_pending(usize::MAX);
    host.handle_interrupt(0);
    let ended = p.take_ended();
    assert_eq!(ended.len(), 1);
    assert_eq!(host.controller().fault_count(), 4);
    assert_eq!(
        host.counters().refused_completions,
        0,
        "refused by the controller already"
    );
}

/// Interrupt work is bounded: with 40 completions waiting and a budget of 8, one interrupt
/// delivers 8, reports a storm, and the rest comes with later interrupts and the tick.
#[test]
fn interrupt_work_is_bounded_and_storms_are_counted() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_cmds = 64;
    cfg.completion = CompletionMode::Deferred;
    let dev = FakeDevice::new(cfg);
    let p = TestPlatform::new(&dev, 1);
    let mut hc = HostConfig::new(1, IrqMode::Msix);
    hc.irq_budget = 8;
    let host = Host::new(Model::Sas2108Gen2, dev.mmio(), dev.dma(), dev.delay(), p.clone(), hc).unwrap();
    host.start().unwrap();
    let bufs: Vec<_> = (0..40).map(|_| dev.buffer(512)).collect();
    for (i, b) in bufs.iter().enumerate() {
        submit_one(&host, &p, 0, b, false, i as u64, i as u64).unwrap();
    }
    dev.complete_pending(usize::MAX);
    let out = host.handle_interrupt(0);
    assert_eq!(out.completed, 8);
    assert!(out.storm);
    assert_eq!(p.take_ended().len(), 8);
    assert_eq!(host.counters().storms, 1);
    // The rest arrives over later invocations, never more than the budget at a time, and the
    // tick picks up whatever an interrupt left.
    let mut total = 8;
    for _ in 0..3 {
        let out = host.handle_interrupt(0);
        assert!(out.completed <= 8);
        total += out.completed as usize;
    }
    assert_eq!(total, 32);
    host.tick(0);
    total += p.take_ended().len() - 24;
    assert_eq!(total, 40);
    assert_eq!(
        host.queue(0).unwrap().in_flight(),
        0,
        "everything was delivered in the end"
    );
}

/// An INTx line that stays asserted with nothing to reap is reported, so the kernel can mask it.
#[test]
fn stuck_intx_is_reported() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.completion = CompletionMode::Deferred;
    let dev = FakeDevice::new(cfg);
    dev.set_irq_mode(megasas::fake::FakeIrq::Intx);
    let p = TestPlatform::new(&dev, 1);
    let host = Host::new(
        Model::Sas2108Gen2,
        dev.mmio(),
        dev.dma(),
        dev.delay(),
        p.clone(),
        HostConfig::new(1, IrqMode::Intx),
    )
    .unwrap();
    host.start().unwrap();
    // A shared line that is not ours is not claimed.
    assert!(host.handle_interrupt(0).not_ours);
    // Real work is claimed and delivered.
    let buf = dev.buffer(512);
    submit_one(&host, &p, 0, &buf, false, 0, 1).unwrap();
    dev.complete_pending(usize::MAX);
    let out = host.handle_interrupt(0);
    assert_eq!((out.not_ours, out.completed, out.intx_stuck), (false, 1, false));
    dev.set_intx_stuck(true);
    let mut reported_at = None;
    for i in 0..2000 {
        if host.handle_interrupt(0).intx_stuck {
            reported_at = Some(i);
            break;
        }
    }
    assert_eq!(reported_at, Some(999), "reported after 1000 empty claims in a row");
    assert!(host.intx_stuck());
    assert!(host.counters().intx_empty >= 1000);
}

/// A platform whose completions are collected per submitting CPU (each thread plays one CPU).
struct ThreadPlatform {
    kick: Vec<AtomicBool>,
    ended: Vec<Mutex<Vec<Completion>>>,
    buffers: Mutex<HashMap<u64, (u64, usize)>>,
    dev: Arc<FakeDevice>,
}

impl Platform for ThreadPlatform {
    fn now_ns(&self) -> u64 {
        1
    }
    fn send_completion_ipi(&self, cpu: usize) {
        self.kick[cpu].store(true, Ordering::Release);
    }
    fn raise_completion_softirq(&self, cpu: usize) {
        self.kick[cpu].store(true, Ordering::Release);
    }
    fn end_io(&self, c: &Completion) {
        if let Some((phys, len)) = self.buffers.lock().unwrap().remove(&c.cookie) {
            self.dev.retire(phys, len);
        }
        self.ended[usize::from(c.submit_cpu)].lock().unwrap().push(*c);
    }
}

/// Real threads: four "CPUs" submit to three drives sharing the tags, take interrupts and run
/// their completion IPIs, while a device thread completes commands in random order. Every
/// request ends exactly once, on its submitter's list, with the right data.
#[test]
fn threads_as_cpus_with_a_device_thread() {
    const NCPUS: usize = 4;
    const PER_CPU: u64 = 1500;
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_cmds = 20;
    cfg.completion = CompletionMode::Deferred;
    cfg.disks = vec![disk(0, 1 << 20, 512), disk(1, 1 << 20, 512), disk(2, 1 << 20, 512)];
    let dev = FakeDevice::new(cfg);
    let platform = Arc::new(ThreadPlatform {
        kick: (0..NCPUS).map(|_| AtomicBool::new(false)).collect(),
        ended: (0..NCPUS).map(|_| Mutex::new(Vec::new())).collect(),
        buffers: Mutex::new(HashMap::new()),
        dev: dev.clone(),
    });
    let mut hc = HostConfig::new(NCPUS, IrqMode::Msix);
    hc.completion = CompletionPolicy::Remote;
    let host = Arc::new(
        Host::new(
            Model::Sas2108Gen2,
            dev.mmio(),
            dev.dma(),
            dev.delay(),
            platform.clone(),
            hc,
        )
        .unwrap(),
    );
    host.start().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let device = {
        let (dev, stop) = (dev.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = Rng(77);
            while !stop.load(Ordering::Relaxed) {
                let n = dev.pending();
                if n > 0 {
                    dev.complete_at(rng.below(n as u64) as usize);
                } else {
                    std::thread::yield_now();
                }
            }
        })
    };
    let cpus: Vec<_> = (0..NCPUS)
        .map(|cpu| {
            let (dev, host, platform) = (dev.clone(), host.clone(), platform.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(1000 + cpu as u64);
                let bufs: Vec<FakeBuffer> = (0..4).map(|_| dev.buffer(512)).collect();
                // buf index -> (cookie, drive, lba, write, data)
                let mut busy: HashMap<usize, (u64, usize, u64, bool, Vec<u8>)> = HashMap::new();
                let mut contents: HashMap<(usize, u64), Vec<u8>> = HashMap::new();
                let mut seen = HashSet::new();
                let (mut issued, mut finished) = (0u64, 0u64);
                while finished < PER_CPU {
                    if issued < PER_CPU
                        && let Some(bi) = (0..bufs.len()).find(|b| !busy.contains_key(b))
                    {
                        let drive = rng.below(3) as usize;
                        // Each CPU owns its own blocks, one request per block at a time.
                        let lba = cpu as u64 * 64 + bi as u64;
                        let write = rng.below(2) == 0;
                        let cookie = (cpu as u64) << 32 | issued;
                        let data = pattern(cookie, 512);
                        bufs[bi].write(0, if write { &data } else { &[0xEE; 512] });
                        platform.buffers.lock().unwrap().insert(cookie, (bufs[bi].phys(), 512));
                        dev.revive(bufs[bi].phys(), 512);
                        let seg = [blk::Segment::new(bufs[bi].phys(), 512)];
                        let bio = if write {
                            Bio::write(lba, 1, &seg, cookie)
                        } else {
                            Bio::read(lba, 1, &seg, cookie)
                        };
                        match host.queue(drive).unwrap().submit(cpu, &bio) {
                            Ok(_) => {
                                busy.insert(bi, (cookie, drive, lba, write, data));
                                issued += 1;
                            }
                            Err(BlkError::TagsExhausted { .. }) => {
                                platform.buffers.lock().unwrap().remove(&cookie);
                            }
                            Err(e) => panic!("submit: {e}"),
                        }
                    }
                    host.handle_interrupt(cpu);
                    if platform.kick[cpu].swap(false, Ordering::Acquire) {
                        for q in host.queues() {
                            q.run_completions(cpu);
                        }
                    }
                    if rng.below(64) == 0 {
                        host.tick(cpu);
                    }
                    let ended = std::mem::take(&mut *platform.ended[cpu].lock().unwrap());
                    for c in ended {
                        assert!(seen.insert(c.cookie), "request {:#x} ended twice", c.cookie);
                        assert_eq!(c.status, Status::Ok);
                        let bi = *busy
                            .iter()
                            .find(|(_, v)| v.0 == c.cookie)
                            .map(|(k, _)| k)
                            .expect("ended a request this CPU did not submit");
                        let (_, drive, lba, write, data) = busy.remove(&bi).unwrap();
                        if write {
                            contents.insert((drive, lba), data);
                        } else {
                            let want = contents.get(&(drive, lba)).cloned().unwrap_or_else(|| vec![0; 512]);
                            assert_eq!(bufs[bi].read(0, 512), want, "cpu {cpu} drive {drive} lba {lba}");
                        }
                        finished += 1;
                    }
                    std::thread::yield_now();
                }
                finished
            })
        })
        .collect();
    let total: u64 = cpus.into_iter().map(|t| t.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    device.join().unwrap();
    assert_eq!(total, NCPUS as u64 * PER_CPU);
    assert_eq!(host.controller().busy_tags(), 0);
    assert_eq!(host.counters().refused_completions, 0);
    let s = dev.stats();
    assert!(s.dma_violations.is_empty(), "{:?}", s.dma_violations);
    assert!(s.writes_after_end.is_empty(), "{:?}", s.writes_after_end);
}

#[test]
fn queue_depth_option_caps_io_commands_across_drives() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.completion = CompletionMode::Deferred;
    cfg.disks = vec![disk(0, 1 << 20, 512), disk(1, 1 << 20, 512)];
    let dev = FakeDevice::new(cfg);
    let p = TestPlatform::new(&dev, 1);
    let mut hc = HostConfig::new(1, IrqMode::Msix);
    hc.apply_options(&megasas::Options::parse("megasas.queue_depth=4 megasas.irq=msix").unwrap());
    let host = Host::new(Model::Sas2108Gen2, dev.mmio(), dev.dma(), dev.delay(), p.clone(), hc).unwrap();
    host.start().unwrap();
    assert_eq!(host.controller().max_inflight(), 5, "4 I/O tags plus the admin tag");
    let bufs: Vec<_> = (0..5).map(|_| dev.buffer(512)).collect();
    for (i, b) in bufs.iter().take(4).enumerate() {
        submit_one(&host, &p, i % 2, b, false, 0, i as u64).unwrap();
    }
    assert!(matches!(
        submit_one(&host, &p, 0, &bufs[4], false, 0, 4),
        Err(BlkError::TagsExhausted { .. })
    ));
    assert_eq!(dev.pending(), 4);
}
