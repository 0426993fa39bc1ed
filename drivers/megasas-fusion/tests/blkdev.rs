//! The block-layer binding over the model: several drives on one host-wide tag set, one
//! hardware queue per reply queue, completions in random order on the vectors' CPUs, every
//! request ending exactly once with its data; timeouts and faults through the OCR ladder.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use blk::{Bio, Completion, Platform, Status};
use devhal::DmaRegion;
use megasas_fusion::blkdev::{Host, HostConfig, cpu_map};
use megasas_fusion::fake::{FakeConfig, FakeDelay, FakeFusion, FakeMmio};
use megasas_fusion::{Config, Generation, Report};

const NCPUS: usize = 4;
const BUF: usize = 4096;

struct TestPlatform {
    fake: Arc<FakeFusion>,
    kick: Vec<AtomicBool>,
    ended: Mutex<Vec<Completion>>,
}

impl Platform for TestPlatform {
    fn now_ns(&self) -> u64 {
        self.fake.now_us() * 1000
    }
    fn send_completion_ipi(&self, cpu: usize) {
        self.kick[cpu].store(true, Ordering::Relaxed);
    }
    fn raise_completion_softirq(&self, cpu: usize) {
        self.kick[cpu].store(true, Ordering::Relaxed);
    }
    fn end_io(&self, c: &Completion) {
        self.ended.lock().unwrap().push(*c);
    }
}

type TestHost = Host<FakeMmio, FakeDelay>;

/// Brings a host up on the model (interrupts still masked); a failure panics with the report.
fn host_on(fake: &Arc<FakeFusion>, platform: Arc<dyn Platform>, hc: HostConfig) -> TestHost {
    let mut report = Report::new();
    Host::new(fake.mmio(), &fake.dma(), fake.delay(), platform, hc, &mut report)
        .unwrap_or_else(|e| panic!("{e}\n{report}"))
}

struct Rig {
    fake: Arc<FakeFusion>,
    platform: Arc<TestPlatform>,
    host: TestHost,
    buf: DmaRegion,
    vectors: Vec<usize>,
}

fn rig(fc: FakeConfig, g: Generation, vectors: Vec<usize>) -> Rig {
    rig_with(fc, Config::new(g, vectors))
}

fn rig_with(fc: FakeConfig, mut cc: Config) -> Rig {
    let vectors = cc.vector_cpus.clone();
    let fake = FakeFusion::new(fc);
    let platform = Arc::new(TestPlatform {
        fake: fake.clone(),
        kick: (0..NCPUS).map(|_| AtomicBool::new(false)).collect(),
        ended: Mutex::new(Vec::new()),
    });
    cc.command_timeout_us = 500_000;
    let mut hc = HostConfig::new(NCPUS, cc);
    hc.timeout_ns = 30_000_000_000;
    let host = host_on(&fake, platform.clone(), hc);
    host.start();
    let buf = fake.memory().alloc_zeroed(1024 * BUF, 4096).unwrap();
    Rig {
        fake,
        platform,
        host,
        buf,
        vectors,
    }
}

impl Rig {
    /// Advances the device clock, runs each raised vector's handler on its CPU, then the
    /// kicked completion lists.
    fn service(&self, us: u64) {
        self.fake.advance(us);
        for v in self.fake.take_vectors() {
            let cpu = self.vectors[usize::from(v)];
            self.host.handle_vector(v, cpu);
        }
        self.run_kicked();
    }
    fn run_kicked(&self) {
        for cpu in 0..NCPUS {
            if self.platform.kick[cpu].swap(false, Ordering::Relaxed) {
                for q in self.host.queues() {
                    q.run_completions(cpu);
                }
            }
        }
    }
    fn seg(&self, slot: usize, len: usize) -> Vec<blk::Segment> {
        // Two segments when possible, to exercise the SGL.
        let base = self.buf.phys + (slot * BUF) as u64;
        if len >= 1024 {
            vec![
                blk::Segment::new(base, 512),
                blk::Segment::new(base + 512, (len - 512) as u32),
            ]
        } else {
            vec![blk::Segment::new(base, len as u32)]
        }
    }
    fn fill(&self, slot: usize, byte: u8) {
        // SAFETY: the region outlives the rig; slots are disjoint and the device does not own it.
        unsafe { std::ptr::write_bytes(self.buf.virt.as_ptr().add(slot * BUF), byte, BUF) };
    }
    fn read_slot(&self, slot: usize) -> Vec<u8> {
        let mut v = vec![0u8; BUF];
        // SAFETY: as in `fill`.
        unsafe { std::ptr::copy_nonoverlapping(self.buf.virt.as_ptr().add(slot * BUF), v.as_mut_ptr(), BUF) };
        v
    }
    fn ended(&self) -> Vec<Completion> {
        std::mem::take(&mut *self.platform.ended.lock().unwrap())
    }
}

#[test]
fn cpu_map_sends_each_vector_cpu_to_its_queue() {
    assert_eq!(cpu_map(4, &[0, 1, 2, 3], 4), [0, 1, 2, 3]);
    assert_eq!(cpu_map(4, &[3, 2], 2), [0, 1, 1, 0]);
    assert_eq!(cpu_map(6, &[1, 4], 2), [0, 0, 0, 1, 1, 1]);
    assert_eq!(cpu_map(3, &[], 1), [0, 0, 0]);
}

#[test]
fn many_requests_over_two_drives_shared_tags_and_four_vectors() {
    let r = rig(FakeConfig::aero(), Generation::Aero, vec![0, 1, 2, 3]);
    assert_eq!(r.host.drives().len(), 2);
    assert_eq!(r.host.queues()[0].nr_hw_queues(), 4);
    assert!(r.host.queues()[0].host_tags().is_some());
    // Each "slot" of the buffer belongs to one request at a time; LBAs per slot are disjoint.
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut free: Vec<usize> = (0..1024).collect();
    let mut inflight: HashMap<u64, (usize, usize, bool, u8)> = HashMap::new(); // cookie -> (slot, drive, write, pattern)
    let mut disk: HashMap<(usize, usize), u8> = HashMap::new();
    let mut cookie = 0u64;
    let mut done = 0u64;
    let total = 20_000u64;
    while done < total {
        for _ in 0..(next() % 48) {
            if cookie >= total || free.is_empty() {
                break;
            }
            let slot = free.swap_remove((next() % free.len() as u64) as usize);
            let drive = (next() % 2) as usize;
            let cpu = (next() % NCPUS as u64) as usize;
            let write = next() % 2 == 0;
            let pattern = (cookie as u8).wrapping_mul(13) | 1;
            r.fill(slot, if write { pattern } else { 0 });
            let segs = r.seg(slot, 1024);
            let sector = (slot * 2) as u64;
            let bio = if write {
                Bio::write(sector, 2, &segs, cookie)
            } else {
                Bio::read(sector, 2, &segs, cookie)
            };
            r.host.queues()[drive].submit(cpu, &bio).unwrap();
            inflight.insert(cookie, (slot, drive, write, pattern));
            cookie += 1;
        }
        r.service(next() % 120);
        for c in r.ended() {
            let (slot, drive, write, pattern) = inflight.remove(&c.cookie).expect("ended once");
            assert_eq!(c.status, Status::Ok);
            if write {
                disk.insert((drive, slot), pattern);
            } else {
                let want = disk.get(&(drive, slot)).copied().unwrap_or(0);
                assert!(r.read_slot(slot)[..1024].iter().all(|&b| b == want), "read back");
            }
            free.push(slot);
            done += 1;
        }
    }
    assert!(inflight.is_empty());
    assert_eq!(r.host.counters().refused_completions, 0);
    r.fake.audit();
    assert!(r.fake.violations().is_empty(), "{:?}", r.fake.violations());
}

/// Balanced mode: the hardware queues are the latency queues only (reply queues 8..12, one per
/// CPU), a burst from one CPU overflows onto the high-IOPS queues, whose vectors' handlers
/// complete it back to the submitting hardware queue.
#[test]
fn balanced_mode_hardware_queues_are_the_latency_queues_and_high_iops_replies_come_home() {
    let mut fc = FakeConfig::ventura();
    fc.coalescing = true;
    // Vectors 0..8 (high-IOPS) spread over the CPUs, then one latency vector per CPU.
    let mut cc = Config::new(Generation::Ventura, vec![0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]);
    cc.high_iops_queues = 8;
    let r = rig_with(fc, cc);
    assert_eq!(r.host.queues()[0].nr_hw_queues(), NCPUS);
    assert_eq!(r.host.cpu_map(), [0, 1, 2, 3]);
    r.fake.set_io_delay_us(20_000, 20_000);
    let cpu = 2;
    for i in 0..64u64 {
        r.fill(i as usize, 0x40 + i as u8);
        let segs = r.seg(i as usize, 512);
        r.host.queues()[0].submit(cpu, &Bio::write(i * 8, 1, &segs, i)).unwrap();
    }
    let mut ended = Vec::new();
    for _ in 0..200 {
        r.service(500);
        ended.extend(r.ended());
    }
    assert_eq!(ended.len(), 64);
    assert!(ended.iter().all(|c| c.status == Status::Ok), "{ended:?}");
    let (mask, per_queue) = r.fake.coalescing();
    assert_eq!(mask, 1);
    assert_eq!(per_queue[8 + cpu], 9, "the first 9 on cpu2's latency queue");
    // High-IOPS requests 1..=55 by batches of 16: 15 on queue 0 (besides bring-up's DCMDs), 16,
    // 16, 8 on queues 1-3.
    assert_eq!(&per_queue[1..8], [16, 16, 8, 0, 0, 0, 0]);
    assert_eq!(r.host.counters().high_iops_ios, 55);
    for i in 0..64u64 {
        assert_eq!(r.fake.ld_bytes(0, (i * 8 * 512) as usize, 1)[0], 0x40 + i as u8);
    }
    r.fake.audit();
    assert!(r.fake.violations().is_empty(), "{:?}", r.fake.violations());
}

#[test]
fn a_timeout_resets_the_controller_and_ends_requests_exactly_once() {
    let r = rig(FakeConfig::invader(), Generation::Invader, vec![0, 1]);
    r.fake.hold_next_io(2);
    let mut cookies = Vec::new();
    for i in 0..6u64 {
        let segs = r.seg(i as usize, 512);
        r.host.queues()[0]
            .submit((i % 2) as usize, &Bio::read(i * 8, 1, &segs, i))
            .unwrap();
        cookies.push(i);
    }
    for _ in 0..20 {
        r.service(100);
    }
    let first = r.ended();
    assert_eq!(first.len(), 4, "the two held reads are still out");
    // Past the deadline: the tick's scan marks them; the tick then lets them finish on their
    // own for 180 s (Linux's resetwaittime) before the OCR ends them.
    r.fake.advance(31_000_000);
    assert_eq!(r.host.tick(0), 2);
    r.run_kicked();
    assert!(r.ended().is_empty(), "no reset before the wait is over");
    assert_eq!(r.host.counters().resets, 0);
    r.fake.advance(180_000_000);
    r.host.tick(0);
    r.run_kicked();
    let ended = r.ended();
    assert_eq!(ended.len(), 2);
    assert!(ended.iter().all(|c| c.status == Status::Timeout), "{ended:?}");
    assert_eq!(r.host.counters().resets, 1);
    for c in &ended {
        r.fill(c.cookie as usize, 0x77);
    }
    for _ in 0..50 {
        r.service(10_000);
    }
    for c in &ended {
        assert!(
            r.read_slot(c.cookie as usize).iter().all(|&b| b == 0x77),
            "no DMA after the request ended"
        );
    }
    // I/O goes on.
    let segs = r.seg(10, 512);
    r.host.queues()[1].submit(1, &Bio::read(0, 1, &segs, 99)).unwrap();
    for _ in 0..20 {
        r.service(100);
    }
    assert_eq!(
        r.ended().iter().map(|c| (c.cookie, c.status)).collect::<Vec<_>>(),
        [(99, Status::Ok)]
    );
    r.fake.audit();
    assert!(r.fake.violations().is_empty(), "{:?}", r.fake.violations());
}

/// After the OCR the requests the firmware forgot are requeued and issued again (Linux
/// DID_REQUEUE), not failed (`Status::Aborted`): they all end Ok, with the data the LD holds.
#[test]
fn a_firmware_fault_is_caught_by_the_tick_and_in_flight_requests_are_requeued() {
    let r = rig(FakeConfig::ventura(), Generation::Ventura, vec![0, 1, 2, 3]);
    let ld3: Vec<u8> = (0..8 * 512).map(|i| (i / 512) as u8 ^ 0x5A).collect();
    r.fake.set_ld_bytes(3, 0, &ld3);
    for i in 0..8u64 {
        let segs = r.seg(i as usize, 512);
        r.host.queues()[1]
            .submit((i % 4) as usize, &Bio::read(i, 1, &segs, i))
            .unwrap();
    }
    r.fake.inject_fault(0x42, 1, true);
    r.host.tick(2);
    r.run_kicked();
    assert!(r.ended().is_empty(), "nothing fails: all eight were requeued");
    assert_eq!(r.host.counters().requeued_by_reset, 8);
    assert_eq!(r.host.counters().failed_by_reset, 0);
    for _ in 0..20 {
        r.service(100);
    }
    let ended = r.ended();
    assert_eq!(ended.len(), 8);
    assert!(ended.iter().all(|c| c.status == Status::Ok), "{ended:?}");
    for i in 0..8usize {
        assert!(
            r.read_slot(i).iter().take(512).all(|&b| b == (i as u8 ^ 0x5A)),
            "slot {i}"
        );
    }
    let segs = r.seg(20, 1024);
    r.host.queues()[0].submit(3, &Bio::write(40, 2, &segs, 100)).unwrap();
    for _ in 0..20 {
        r.service(100);
    }
    assert_eq!(r.ended().iter().map(|c| c.status).collect::<Vec<_>>(), [Status::Ok]);
}

#[test]
fn an_unresettable_fault_takes_the_controller_out_of_service() {
    let r = rig(FakeConfig::aero(), Generation::Aero, vec![0]);
    let segs = r.seg(0, 512);
    r.host.queues()[0].submit(0, &Bio::read(0, 1, &segs, 1)).unwrap();
    r.fake.inject_fault(0x99, 0, false);
    r.host.tick(0);
    r.run_kicked();
    assert!(r.host.is_dead());
    // Stopped, yet the request stays the device's until bus mastering is off.
    assert!(r.ended().is_empty(), "handed back before bus mastering was off");
    r.host.tick(0);
    r.run_kicked();
    assert!(r.ended().is_empty(), "a later tick must not hand it back either");
    assert_eq!(r.host.abandon_after_bus_master_off(0), 1);
    r.run_kicked();
    assert_eq!(
        r.ended().iter().map(|c| c.status).collect::<Vec<_>>(),
        [Status::Aborted]
    );
    assert_eq!(r.host.abandon_after_bus_master_off(0), 0, "handed back once");
    r.host.queues()[0].submit(0, &Bio::read(0, 1, &segs, 2)).unwrap();
    r.run_kicked();
    assert_eq!(
        r.ended().iter().map(|c| c.status).collect::<Vec<_>>(),
        [Status::IoError]
    );
}

#[test]
fn flush_is_local_without_fw_sync_cache_and_posted_with_it() {
    for (fc, g, posted) in [
        (FakeConfig::invader(), Generation::Invader, false),
        (FakeConfig::aero(), Generation::Aero, true),
    ] {
        let r = rig(fc, g, vec![0]);
        let before = r.fake.counts().0;
        r.host.queues()[0].submit(0, &Bio::flush(5)).unwrap();
        for _ in 0..20 {
            r.service(100);
        }
        assert_eq!(
            r.ended().iter().map(|c| (c.cookie, c.status)).collect::<Vec<_>>(),
            [(5, Status::Ok)]
        );
        assert_eq!(r.fake.counts().0 - before, u64::from(posted), "{g}");
    }
}

struct ThreadPlatform {
    kick: Vec<AtomicBool>,
    ended: Vec<Mutex<Vec<Completion>>>,
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
        self.ended[usize::from(c.submit_cpu)].lock().unwrap().push(*c);
    }
}

/// Real threads: four "CPUs" submit to two drives sharing the tags, each handling its own
/// vector (and polling the others now and then) while a device thread advances the model's
/// clock. Every request ends exactly once, on its submitter's list, with the right data.
#[test]
fn threads_as_cpus_with_a_device_thread() {
    threaded(false);
}

/// The same with the firmware faulting now and then: a CPU's tick runs the OCR while the other
/// CPUs keep submitting and reaping. Requests end exactly once, all Ok (requeued by the OCR).
#[test]
fn threads_with_faults_and_resets_under_load() {
    threaded(true);
}

fn threaded(faults: bool) {
    let fake = FakeFusion::new(FakeConfig::ventura());
    let platform = Arc::new(ThreadPlatform {
        kick: (0..NCPUS).map(|_| AtomicBool::new(false)).collect(),
        ended: (0..NCPUS).map(|_| Mutex::new(Vec::new())).collect(),
    });
    let mut hc = HostConfig::new(NCPUS, Config::new(Generation::Ventura, vec![0, 1, 2, 3]));
    hc.timeout_ns = 0;
    let host = Arc::new(host_on(&fake, platform.clone(), hc));
    host.start();
    let buf = fake.memory().alloc_zeroed(NCPUS * 64 * BUF, 4096).unwrap();
    let base_virt = buf.virt.as_ptr() as usize;
    let stop = Arc::new(AtomicBool::new(false));
    let device = {
        let (fake, stop) = (fake.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Acquire) {
                fake.advance(20);
                let _ = fake.take_vectors();
                n += 1;
                if faults && n.is_multiple_of(200) && n <= 2_000 {
                    fake.inject_fault(0x10, 0, true);
                }
                std::thread::yield_now();
            }
        })
    };
    const PER_CPU: u64 = 3_000;
    let workers: Vec<_> = (0..NCPUS)
        .map(|cpu| {
            let (host, platform) = (host.clone(), platform.clone());
            let phys = buf.phys;
            std::thread::spawn(move || {
                let slot_addr = |s: usize| (cpu * 64 + s) * BUF;
                let mut free: Vec<usize> = (0..64).collect();
                let mut inflight: HashMap<u64, (usize, usize, bool, u8)> = HashMap::new();
                let mut disk: HashMap<(usize, usize), u8> = HashMap::new();
                let (mut sent, mut done, mut spin) = (0u64, 0u64, 0u64);
                while done < PER_CPU {
                    if sent < PER_CPU
                        && let Some(slot) = free.pop()
                    {
                        let drive = (sent % 2) as usize;
                        let write = (sent / 2) % 3 != 0;
                        let pattern = (sent as u8).wrapping_mul(7) | 1;
                        let p = (base_virt + slot_addr(slot)) as *mut u8;
                        // SAFETY: this thread owns its 64 slots; the device owns one only while
                        // its request is in flight, and the slot is free now.
                        unsafe { std::ptr::write_bytes(p, if write { pattern } else { 0 }, 1024) };
                        let segs = [blk::Segment::new(phys + slot_addr(slot) as u64, 1024)];
                        let sector = ((cpu * 64 + slot) * 2) as u64;
                        let cookie = (cpu as u64) << 32 | sent;
                        let bio = if write {
                            Bio::write(sector, 2, &segs, cookie)
                        } else {
                            Bio::read(sector, 2, &segs, cookie)
                        };
                        match host.queues()[drive].submit(cpu, &bio) {
                            Ok(_) => {
                                inflight.insert(cookie, (slot, drive, write, pattern));
                                sent += 1;
                            }
                            Err(_) => free.push(slot),
                        }
                    }
                    host.handle_vector(cpu as u16, cpu);
                    spin += 1;
                    if spin.is_multiple_of(2_000) {
                        // Whichever CPU gets there first runs the tick (and any reset).
                        host.tick(cpu);
                    }
                    if spin.is_multiple_of(64) {
                        host.poll(cpu);
                    }
                    if platform.kick[cpu].swap(false, Ordering::Acquire) {
                        for q in host.queues() {
                            q.run_completions(cpu);
                        }
                    }
                    let ended: Vec<Completion> = std::mem::take(&mut *platform.ended[cpu].lock().unwrap());
                    for c in ended {
                        let (slot, drive, write, pattern) = inflight.remove(&c.cookie).expect("ended once, on its CPU");
                        // A reset requeues what the firmware forgot, so every
                        // request ends Ok, also under faults, and every write reached the disk:
                        // each read is checked against the last write (no "unknown" sentinel,
                        // which could collide with a real pattern).
                        assert_eq!(c.status, Status::Ok, "cpu {cpu} cookie {:#x}", c.cookie);
                        if write {
                            disk.insert((drive, slot), pattern);
                        } else {
                            let want = disk.get(&(drive, slot)).copied().unwrap_or(0);
                            let p = (base_virt + slot_addr(slot)) as *const u8;
                            // SAFETY: the request ended, so the slot is this thread's again.
                            let got = unsafe { std::slice::from_raw_parts(p, 1024) };
                            assert!(got.iter().all(|&b| b == want), "cpu {cpu} slot {slot}");
                        }
                        free.push(slot);
                        done += 1;
                    }
                    if spin > 50_000_000 {
                        panic!("cpu {cpu}: stuck with {} in flight", inflight.len());
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Release);
    device.join().unwrap();
    for _ in 0..10 {
        fake.advance(1000);
        host.poll(0);
    }
    fake.audit();
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    assert_eq!(host.counters().refused_completions, 0);
    assert_eq!(host.controller().stats.bogus_replies.load(Ordering::Relaxed), 0);
    if faults {
        assert!(host.counters().resets > 0, "the faults were seen and reset");
        assert_eq!(host.counters().failed_by_reset, 0);
        assert!(!host.is_dead());
    }
}

/// JBOD through the blk binding: a JBOD disk gets its own queue beside the LDs, carries data, and
/// its flush goes to the disk even where the firmware does not take SYNCHRONIZE CACHE for LDs
/// (Linux intercepts it only for logical drives).
#[test]
fn a_jbod_disk_is_a_drive_of_its_own() {
    let mut fc = FakeConfig::invader();
    fc.system_pds = vec![(9, 4096)];
    let r = rig(fc, Generation::Invader, vec![0, 1]);
    let drives: Vec<_> = r
        .host
        .drives()
        .iter()
        .map(|d| (d.drive.target, d.drive.system_pd, d.capacity_sectors))
        .collect();
    assert_eq!(drives, [(0, false, 8192), (3, false, 4096), (9, true, 4096)]);
    r.fill(0, 0x3C);
    let segs = r.seg(0, 1024);
    r.host.queues()[2].submit(1, &Bio::write(100, 2, &segs, 7)).unwrap();
    for _ in 0..20 {
        r.service(100);
    }
    assert_eq!(
        r.ended().iter().map(|c| (c.cookie, c.status)).collect::<Vec<_>>(),
        [(7, Status::Ok)]
    );
    assert!(r.fake.pd_bytes(9, 100 * 512, 1024).iter().all(|&b| b == 0x3C));
    let before = r.fake.counts().0;
    r.host.queues()[2].submit(0, &Bio::flush(8)).unwrap();
    for _ in 0..20 {
        r.service(100);
    }
    assert_eq!(
        r.ended().iter().map(|c| (c.cookie, c.status)).collect::<Vec<_>>(),
        [(8, Status::Ok)]
    );
    assert_eq!(r.fake.counts().0 - before, 1, "the JBOD flush was posted");
    r.fake.audit();
    assert!(r.fake.violations().is_empty(), "{:?}", r.fake.violations());
}

/// A request that times out but whose reply is only late is not worth a controller
/// reset. The tick waits (Linux `megasas_wait_for_outstanding_fusion`), the reply arrives, the
/// request ends Ok and no reset happens (rather than a reset at the first tick after the
/// timeout and the request ended with `Timeout`).
#[test]
fn a_late_reply_after_a_timeout_avoids_the_reset() {
    let r = rig(FakeConfig::ventura(), Generation::Ventura, vec![0]);
    r.fake.set_io_delay_us(40_000_000, 40_000_000);
    let segs = r.seg(0, 512);
    r.host.queues()[0].submit(0, &Bio::read(0, 1, &segs, 1)).unwrap();
    r.fake.advance(31_000_000);
    assert_eq!(r.host.tick(0), 1);
    r.run_kicked();
    assert!(r.ended().is_empty());
    r.fake.advance(10_000_000);
    r.host.tick(0);
    r.run_kicked();
    assert_eq!(
        r.ended().iter().map(|c| (c.cookie, c.status)).collect::<Vec<_>>(),
        [(1, Status::Ok)]
    );
    assert_eq!(r.host.counters().resets, 0);
    assert_eq!(r.host.counters().resets_avoided, 1);
    r.fake.audit();
    assert!(r.fake.violations().is_empty(), "{:?}", r.fake.violations());
}

/// A 4 KiB-block drive: blk's 512-byte sectors become LD blocks by a shift (sector 16, 8 sectors
/// is LD block 2), and the data lands there.
#[test]
fn a_4k_block_drive_maps_sectors_to_blocks() {
    let mut fc = FakeConfig::invader();
    fc.block_size = 4096;
    fc.lds = vec![(0, 64)];
    let r = rig(fc, Generation::Invader, vec![0]);
    r.fill(1, 0xC3);
    let base = r.buf.phys + BUF as u64;
    let segs = [blk::Segment::new(base, 4096)];
    r.host.queues()[0].submit(0, &Bio::write(16, 8, &segs, 1)).unwrap();
    for _ in 0..20 {
        r.service(100);
    }
    assert_eq!(r.ended().iter().map(|c| c.status).collect::<Vec<_>>(), [Status::Ok]);
    assert_eq!(r.fake.ld_bytes(0, 2 * 4096, 4096), vec![0xC3; 4096]);
    assert_eq!(r.fake.ld_bytes(0, 4096, 4096), vec![0; 4096], "block 1 untouched");
    assert_eq!(r.fake.ld_bytes(0, 3 * 4096, 4096), vec![0; 4096], "block 3 untouched");
}
