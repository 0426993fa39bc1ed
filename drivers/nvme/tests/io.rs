//! I/O through a real `blk::Queue` per namespace against the fake controller: random I/O with
//! data verified and completions on the right vectors, PRP lists at many sizes and offsets,
//! error decoding and retries, INTx and polled queues.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use blk::{Bio, CompletionPolicy, Segment, Status};
use common::{Buf, Rig, Rng, pattern, two_namespaces};
use nvme::blkdev::HostConfig;
use nvme::fake::{FakeCompletion, FakeConfig, FakeNamespace, Hostile};
use nvme::{IrqMode, Report};

/// One request in flight in the random test.
struct InFlight {
    ns: usize,
    write: bool,
    byte_off: usize,
    len: usize,
    buf: usize,
    seed: u64,
    cpu: usize,
}

/// Random reads and writes from `ncpus` simulated CPUs over two namespaces (512 and 4096-byte
/// LBAs), completed by the fake in random order, interrupts delivered to the CPU each vector is
/// aimed at. Checks data, exactly-once completion, and that every completion arrived on the
/// vector of the submitting CPU's queue.
fn random_io(ncpus: usize, ioqpairs: u16, total: usize, seed: u64, hostile: Hostile) -> (Report, Vec<u64>) {
    random_io_polled(ncpus, ioqpairs, 0, total, seed, hostile).0
}

/// [`random_io`] with the first `poll_queues` queue pairs polled (`nvme.poll_queues=`): their
/// CPUs reap them after each device pass, as a waiting CPU does, and their completions must
/// never come by interrupt. Also returns the completions taken by polling.
fn random_io_polled(
    ncpus: usize,
    ioqpairs: u16,
    poll_queues: u16,
    total: usize,
    seed: u64,
    hostile: Hostile,
) -> ((Report, Vec<u64>), u64) {
    let mut cfg = FakeConfig::new(ioqpairs);
    cfg.completion = FakeCompletion::Deferred;
    cfg.namespaces = two_namespaces();
    let rig = Rig::with_poll_queues(
        cfg,
        ncpus,
        IrqMode::MsiX { vectors: ioqpairs + 1 },
        poll_queues,
        HostConfig::default(),
        nvme::Config::default(),
    );
    let plan = rig.host.plan().clone();
    // The admin vector's messages of bring-up: none come after it (no admin command follows).
    let admin_messages = rig.fake.stats().msix_per_vector[0];
    rig.fake.set_invented_cid(rig.host.controller().cids_per_queue() as u16);
    rig.fake.set_hostile(hostile);
    let mut shadow: Vec<Vec<u8>> = vec![vec![0u8; 8192 * 512], vec![0u8; 1024 * 4096]];
    const NBUF: usize = 48;
    const BUF_LEN: usize = 132 * 1024;
    let bufs: Vec<Buf> = (0..NBUF).map(|_| Buf::new(&rig.fake, BUF_LEN)).collect();
    let mut free_bufs: Vec<usize> = (0..NBUF).collect();
    let mut inflight: BTreeMap<u64, InFlight> = BTreeMap::new();
    let mut busy_ranges: BTreeSet<(usize, usize)> = BTreeSet::new(); // (ns, 4 KiB block)
    let mut rng = Rng(seed);
    let mut submitted = 0usize;
    let mut completed = 0usize;
    let mut per_cpu_submitted = vec![0u64; ncpus];
    let mut next_cookie = 1u64;
    while completed < total {
        // Submit a few.
        for _ in 0..rng.below(6) {
            if submitted >= total || free_bufs.is_empty() {
                break;
            }
            let ns = rng.below(2) as usize;
            let lba = if ns == 0 { 512 } else { 4096 };
            let disk_len = shadow[ns].len();
            let len = ((1 + rng.below(32)) as usize * 4096).min(128 * 1024);
            let byte_off = (rng.below(((disk_len - len) / lba) as u64) as usize) * lba;
            let blocks: Vec<(usize, usize)> = (byte_off / 4096..(byte_off + len).div_ceil(4096))
                .map(|b| (ns, b))
                .collect();
            if blocks.iter().any(|b| busy_ranges.contains(b)) {
                continue;
            }
            let write = rng.below(2) == 0;
            let b = free_bufs.pop().unwrap();
            // Offset inside the buffer: a multiple of 512, sometimes split in page-sized pieces.
            let start = (rng.below(8) * 512) as usize;
            let seed = rng.next();
            if write {
                pattern(&mut bufs[b].bytes()[start..start + len], seed);
            } else {
                bufs[b].bytes()[start..start + len].fill(0xEE);
            }
            let phys = bufs[b].phys + start as u64;
            let segs: Vec<Segment> = if start == 0 && rng.below(2) == 0 {
                (0..len / 4096)
                    .map(|i| Segment::new(phys + (i * 4096) as u64, 4096))
                    .collect()
            } else {
                vec![Segment::new(phys, len as u32)]
            };
            let cpu = rng.below(ncpus as u64) as usize;
            let cookie = next_cookie;
            next_cookie += 1;
            let sector = (byte_off / 512) as u64;
            let nr = (len / 512) as u32;
            let bio = if write {
                Bio::write(sector, nr, &segs, cookie)
            } else {
                Bio::read(sector, nr, &segs, cookie)
            };
            match rig.host.queue(ns).unwrap().submit(cpu, &bio) {
                Ok(_) => {}
                Err(e) => panic!("submit failed: {e}"),
            }
            for blk in blocks {
                busy_ranges.insert(blk);
            }
            inflight.insert(
                cookie,
                InFlight {
                    ns,
                    write,
                    byte_off,
                    len,
                    buf: b * BUF_LEN + start,
                    seed,
                    cpu,
                },
            );
            per_cpu_submitted[cpu] += 1;
            submitted += 1;
        }
        // The device completes some, in random order.
        let n = 1 + rng.below(8) as usize;
        rig.fake.complete_pending(n, |count| rng.below(count as u64) as usize);
        rig.deliver_interrupts();
        // What the interrupts delivered: never a polled queue's completion.
        let by_irq = rig.platform.take_done();
        for c in &by_irq {
            assert!(
                !plan.is_polled(usize::from(c.hwq)),
                "cookie {} of a polled queue came by interrupt",
                c.cookie
            );
        }
        rig.poll_polled_cpus();
        let by_poll = rig.platform.take_done();
        for c in by_irq.into_iter().chain(by_poll) {
            let f = inflight
                .remove(&c.cookie)
                .expect("completion of a request in flight, once");
            assert_eq!(c.status, Status::Ok, "cookie {}", c.cookie);
            let hwq = plan.hwq_of_cpu(f.cpu).unwrap();
            assert_eq!(usize::from(c.hwq), hwq);
            match plan.vector_of_hwq(hwq) {
                // Irq policy: finished on the CPU the vector is aimed at, which submits to that
                // queue.
                Some(v) => assert_eq!(usize::from(c.complete_cpu), plan.vector_cpu(usize::from(v)).unwrap()),
                // Polled: reaped by the submitting CPU itself.
                None => assert_eq!(usize::from(c.complete_cpu), f.cpu),
            }
            let (b, start) = (f.buf / BUF_LEN, f.buf % BUF_LEN);
            let data = &bufs[b].bytes()[start..start + f.len];
            if f.write {
                shadow[f.ns][f.byte_off..f.byte_off + f.len].copy_from_slice(data);
            } else {
                assert!(
                    data == &shadow[f.ns][f.byte_off..f.byte_off + f.len],
                    "read of ns {} at {} ({} bytes) returned wrong data",
                    f.ns,
                    f.byte_off,
                    f.len
                );
            }
            let _ = f.seed;
            for blk in f.byte_off / 4096..(f.byte_off + f.len).div_ceil(4096) {
                busy_ranges.remove(&(f.ns, blk));
            }
            free_bufs.push(b);
            completed += 1;
        }
    }
    assert!(inflight.is_empty());
    // The device's copy equals the shadow.
    assert_eq!(rig.fake.read_data(1, 0, 8192 * 512), shadow[0]);
    assert_eq!(rig.fake.read_data(2, 0, 1024 * 4096), shadow[1]);
    rig.assert_no_violations();
    let report = rig.host.report();
    // Every bad entry the device added was refused and counted; no good one was.
    assert_eq!(report.controller.bogus_cqes, rig.fake.stats().hostile_cqes);
    if hostile == Hostile::None {
        assert_eq!(report.controller.bogus_cqes, 0);
    }
    assert_eq!(report.refused_by_blk, 0);
    // Completions per vector = I/Os submitted by the CPUs whose queues are on that vector.
    let mut expected = vec![0u64; plan.nr_vectors()];
    let mut polled = 0;
    for (cpu, n) in per_cpu_submitted.iter().enumerate() {
        match plan.vector_of_hwq(plan.hwq_of_cpu(cpu).unwrap()) {
            Some(v) => expected[usize::from(v)] += n,
            None => polled += n,
        }
    }
    assert_eq!(report.per_vector, expected);
    // Hostile entries are refused before they count; retries of genuine ones do not happen here.
    assert_eq!(
        report.polled, polled,
        "completions taken by polling = I/Os of the polled CPUs"
    );
    let msgs = rig.fake.stats().msix_per_vector;
    // Vector 0 also carries the admin queue's completions (bring-up, queue creation).
    for (v, &n) in expected.iter().enumerate().skip(1) {
        assert_eq!(
            msgs[v] > 0,
            n > 0,
            "vector {v}: {} messages for {n} completions",
            msgs[v]
        );
    }
    // A polled queue's CQ never signals: every message went to an interrupt queue's vector (or
    // the admin vector 0, from bring-up).
    assert_eq!(msgs.len(), ioqpairs as usize + 1);
    if plan.hwqs_of_vector(0).count() == 0 {
        assert_eq!(msgs[0], admin_messages, "no I/O queue signals the admin vector");
    }
    assert!(
        msgs.iter().skip(plan.nr_vectors()).all(|&n| n == 0),
        "messages on table entries no queue uses: {msgs:?}"
    );
    ((report.controller, expected), polled)
}

#[test]
fn random_io_4_cpus_one_queue_each() {
    let (report, per_vector) = random_io(4, 4, 12_000, 0x1234_5678, Hostile::None);
    assert_eq!(report.completions, 12_000);
    assert_eq!(per_vector[0], 0, "nothing on the admin vector");
    assert!(per_vector[1..].iter().all(|&n| n > 2000), "{per_vector:?}");
}

#[test]
fn random_io_8_cpus_and_1_cpu() {
    random_io(8, 8, 8_000, 0xABCD, Hostile::None);
    random_io(1, 1, 3_000, 0x77, Hostile::None);
}

#[test]
fn random_io_fewer_queues_than_cpus() {
    // max_ioqpairs=2 with 4 CPUs: CPUs 0,1 on queue 1 (vector 1), CPUs 2,3 on queue 2 (vector 2).
    let (_, per_vector) = random_io(4, 2, 6_000, 0xFEED, Hostile::None);
    assert_eq!(per_vector.len(), 3);
    assert!(per_vector[1] > 1000 && per_vector[2] > 1000);
}

/// Hostile completion entries (duplicate, invented CID, wrong SQID, bad SQHD) mixed into
/// random I/O for a fixed number of rounds: nothing panics, nothing completes twice or wrongly,
/// every bad entry is counted.
#[test]
fn hostile_cqe_fuzz() {
    for (round, seed) in [0x5EEDu64, 0xBAD, 0xF00D, 0xC0FFEE].into_iter().enumerate() {
        let (report, _) = random_io(4, 4, 2_500, seed, Hostile::Random(seed));
        assert!(
            report.bogus_cqes > 1_000,
            "round {round}: {} bad entries",
            report.bogus_cqes
        );
    }
    for h in [
        Hostile::DuplicateCid,
        Hostile::InventedCid,
        Hostile::WrongSqid,
        Hostile::BadSqhd,
    ] {
        let (report, _) = random_io(2, 2, 1_500, 0x1111, h);
        assert_eq!(report.bogus_cqes, 1_500, "{h:?}: one bad entry per completion");
    }
}

fn simple_rig(mode: IrqMode, ncpus: usize, mut cfg: FakeConfig) -> Rig {
    cfg.namespaces = two_namespaces();
    let hcfg = HostConfig {
        completion: if mode == IrqMode::Poll {
            CompletionPolicy::Poll
        } else {
            CompletionPolicy::Irq
        },
        ..HostConfig::default()
    };
    Rig::new(cfg, ncpus, mode, hcfg)
}

/// Submits one bio and runs the device and interrupts until it completes.
fn run_one(rig: &Rig, ns: usize, cpu: usize, bio: &Bio<'_>) -> Status {
    rig.host.queue(ns).unwrap().submit(cpu, bio).expect("submit");
    rig.deliver_interrupts();
    if rig.host.plan().mode() == IrqMode::Poll {
        let hwq = rig.host.plan().hwq_of_cpu(cpu).unwrap();
        rig.host.queue(ns).unwrap().poll(cpu, hwq).unwrap();
    }
    let done = rig.platform.take_done();
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].cookie, bio.cookie);
    done[0].status
}

#[test]
fn prp_lists_from_4k_to_512k_at_offsets() {
    let rig = simple_rig(IrqMode::MsiX { vectors: 3 }, 2, FakeConfig::new(2));
    let wbuf = Buf::new(&rig.fake, 520 * 1024);
    let rbuf = Buf::new(&rig.fake, 520 * 1024);
    let mut cookie = 0;
    for ns in [0usize, 1] {
        let lba = if ns == 0 { 512 } else { 4096 };
        for kib in [4usize, 8, 12, 16, 60, 64, 128, 256, 384, 508, 512] {
            for off in [0usize, 0x200, 0x800, 0xE00] {
                cookie += 1;
                let len = kib * 1024;
                let disk_off = (cookie * 3 * 4096) % (4 << 20);
                let sector = (disk_off / 512) as u64;
                pattern(&mut wbuf.bytes()[off..off + len], cookie as u64);
                let seg = [Segment::new(wbuf.phys + off as u64, len as u32)];
                let st = run_one(
                    &rig,
                    ns,
                    cookie % 2,
                    &Bio::write(sector, (len / 512) as u32, &seg, cookie as u64),
                );
                assert_eq!(st, Status::Ok, "write {kib} KiB at +{off:#x} ns {ns}");
                let _ = lba;
                rbuf.bytes()[off..off + len].fill(0);
                let seg = [Segment::new(rbuf.phys + off as u64, len as u32)];
                let st = run_one(
                    &rig,
                    ns,
                    cookie % 2,
                    &Bio::read(sector, (len / 512) as u32, &seg, cookie as u64),
                );
                assert_eq!(st, Status::Ok);
                assert!(
                    rbuf.bytes()[off..off + len] == wbuf.bytes()[off..off + len],
                    "{kib} KiB at +{off:#x} ns {ns}"
                );
                assert_eq!(
                    rig.fake.read_data(ns as u32 + 1, disk_off, len),
                    wbuf.bytes()[off..off + len].to_vec()
                );
            }
        }
    }
    // Over MDTS (512 KiB): blk splits a 516 KiB write and read into two commands each (its
    // max_hw_sectors comes from MDTS), and the data goes out and comes back whole.
    let before = rig.fake.stats().io_commands;
    let big = Buf::new(&rig.fake, 516 * 1024);
    pattern(&mut big.bytes()[..516 * 1024], 99);
    let seg = [Segment::new(big.phys, 516 * 1024)];
    assert_eq!(run_one(&rig, 0, 0, &Bio::write(0, 1032, &seg, 1)), Status::Ok);
    assert_eq!(rig.fake.read_data(1, 0, 516 * 1024), big.bytes()[..516 * 1024].to_vec());
    let back = Buf::new(&rig.fake, 516 * 1024);
    let seg = [Segment::new(back.phys, 516 * 1024)];
    assert_eq!(run_one(&rig, 0, 0, &Bio::read(0, 1032, &seg, 1)), Status::Ok);
    assert!(back.bytes()[..516 * 1024] == big.bytes()[..516 * 1024]);
    assert_eq!(rig.fake.stats().io_commands, before + 4, "two commands per direction");
    // Misaligned segments, or not whole 4 KiB blocks: refused before the device.
    let before = rig.fake.stats().io_commands;
    let seg = [
        Segment::new(wbuf.phys, 4096),
        Segment::new(wbuf.phys + 8192 + 512, 4096),
    ];
    assert_eq!(run_one(&rig, 0, 0, &Bio::read(0, 16, &seg, 2)), Status::IoError);
    // (Partial 4 KiB blocks are refused by blk itself, before the driver.)
    let seg = [Segment::new(wbuf.phys, 512)];
    assert!(rig.host.queue(1).unwrap().submit(0, &Bio::read(8, 1, &seg, 3)).is_err());
    assert_eq!(rig.fake.stats().io_commands, before, "nothing reached the device");
    assert_eq!(rig.host.report().rejected, 1);
    rig.assert_no_violations();
}

#[test]
fn errors_are_decoded_and_retried_without_dnr() {
    let rig = simple_rig(IrqMode::MsiX { vectors: 3 }, 2, FakeConfig::new(2));
    let buf = Buf::new(&rig.fake, 8192);
    let seg = [Segment::new(buf.phys, 4096)];
    // Unrecovered read error with DNR: fails at once.
    rig.fake.inject_error(1, 100, 0x4281, u32::MAX);
    assert_eq!(run_one(&rig, 0, 0, &Bio::read(96, 8, &seg, 1)), Status::IoError);
    let r = rig.host.report().controller;
    assert_eq!((r.errors, r.error_retries), (1, 0));
    // The same without DNR, twice: retried twice, then it succeeds.
    rig.fake.inject_error(1, 200, 0x0281, 2);
    assert_eq!(run_one(&rig, 0, 1, &Bio::read(200, 8, &seg, 2)), Status::Ok);
    let r = rig.host.report().controller;
    assert_eq!((r.errors, r.error_retries), (3, 2));
    // Without DNR but persistent: max_retries (3) re-issues, then the error is reported.
    rig.fake.inject_error(1, 300, 0x0280, u32::MAX);
    assert_eq!(run_one(&rig, 0, 0, &Bio::write(296, 8, &seg, 3)), Status::IoError);
    let r = rig.host.report().controller;
    assert_eq!((r.errors, r.error_retries), (7, 5));
    // Invalid opcode maps to NotSupported; LBA out of range to IoError.
    rig.fake.inject_error(2, 5, 0x4001, 1);
    assert_eq!(run_one(&rig, 1, 0, &Bio::read(40, 8, &seg, 4)), Status::NotSupported);
    rig.fake.inject_error(2, 6, 0x4080, 1);
    assert_eq!(run_one(&rig, 1, 0, &Bio::read(48, 8, &seg, 5)), Status::IoError);
    // Flush works on both namespaces.
    assert_eq!(run_one(&rig, 0, 0, &Bio::flush(6)), Status::Ok);
    assert_eq!(run_one(&rig, 1, 1, &Bio::flush(7)), Status::Ok);
    // Only the failing request was affected: a neighbour reads fine.
    assert_eq!(run_one(&rig, 0, 0, &Bio::read(104, 8, &seg, 8)), Status::Ok);
    assert_eq!(rig.host.report().controller.bogus_cqes, 0);
}

#[test]
fn intx_delivers_everything_on_vector_0() {
    let mut cfg = FakeConfig::new(4);
    cfg.msix_enabled = false;
    let rig = simple_rig(IrqMode::Intx, 4, cfg);
    let before = rig.fake.stats().intx_asserts;
    let buf = Buf::new(&rig.fake, 4096);
    let seg = [Segment::new(buf.phys, 4096)];
    for cpu in 0..4 {
        assert_eq!(
            run_one(&rig, 0, cpu, &Bio::read(8 * cpu as u64, 8, &seg, cpu as u64)),
            Status::Ok
        );
    }
    let s = rig.fake.stats();
    // One assertion per I/O (and the admin commands of bring-up before them).
    assert_eq!(s.intx_asserts, before + 4);
    assert!(s.msix_per_vector.iter().all(|&n| n == 0));
    assert_eq!(rig.host.report().per_vector, vec![4]);
}

#[test]
fn polled_queues_raise_no_interrupt() {
    let rig = simple_rig(IrqMode::Poll, 4, FakeConfig::new(4));
    let before = rig.fake.stats().msix_per_vector;
    let buf = Buf::new(&rig.fake, 4096);
    let seg = [Segment::new(buf.phys, 4096)];
    for cpu in 0..4 {
        assert_eq!(
            run_one(&rig, 1, cpu, &Bio::read(8 * cpu as u64, 8, &seg, cpu as u64)),
            Status::Ok
        );
    }
    let s = rig.fake.stats();
    assert_eq!(s.msix_per_vector, before, "no message for polled queues");
    assert_eq!(s.intx_asserts, 0);
    assert_eq!(rig.host.report().polled, 4);
}

#[test]
fn interrupt_work_is_bounded_and_the_tick_finishes_the_rest() {
    let mut cfg = FakeConfig::new(1);
    cfg.completion = FakeCompletion::Deferred;
    let hcfg = HostConfig {
        cq_budget: 4,
        ..HostConfig::default()
    };
    let rig = Rig::new(cfg, 1, IrqMode::MsiX { vectors: 2 }, hcfg);
    let buf = Buf::new(&rig.fake, 4096);
    let seg = [Segment::new(buf.phys, 4096)];
    rig.fake.take_messages(); // the admin queue's, from bring-up
    for i in 0..10u64 {
        rig.host
            .queue(0)
            .unwrap()
            .submit(0, &Bio::read(8 * i, 8, &seg, i))
            .unwrap();
    }
    rig.fake.complete_pending(10, |_| 0);
    assert_eq!(rig.fake.take_messages(), vec![1], "one message for the whole pass");
    assert_eq!(rig.host.handle_vector(1, 0), 4, "bounded by the budget");
    assert_eq!(rig.host.report().controller.budget_exhausted, 1);
    // The device does not signal again for entries already posted: the tick drains them.
    rig.host.tick(0).unwrap();
    rig.host.tick(0).unwrap();
    assert_eq!(rig.platform.take_done().len(), 10);
    assert!(rig.fake.take_messages().is_empty());
}

#[test]
fn two_controllers_and_an_odd_sized_namespace() {
    let mut cfg = FakeConfig::new(2);
    cfg.namespaces = vec![FakeNamespace {
        nsid: 1,
        lba_size: 512,
        blocks: 8191, // odd size: the last block is usable, one past it is not
    }];
    let a = Rig::new(cfg, 2, IrqMode::MsiX { vectors: 3 }, HostConfig::default());
    let b = simple_rig(IrqMode::MsiX { vectors: 3 }, 2, FakeConfig::new(2));
    assert_eq!(a.host.queue(0).unwrap().capacity_sectors(), 8191);
    let abuf = Buf::new(&a.fake, 4096);
    let bbuf = Buf::new(&b.fake, 4096);
    for round in 0..50u64 {
        pattern(&mut abuf.bytes()[..512], round);
        pattern(bbuf.bytes(), round + 1000);
        let aseg = [Segment::new(abuf.phys, 512)];
        let bseg = [Segment::new(bbuf.phys, 4096)];
        // Interleaved: both controllers have commands posted before either is reaped.
        a.host
            .queue(0)
            .unwrap()
            .submit((round % 2) as usize, &Bio::write(8190, 1, &aseg, round))
            .unwrap();
        b.host
            .queue(1)
            .unwrap()
            .submit((round % 2) as usize, &Bio::write(round * 8, 8, &bseg, round))
            .unwrap();
        a.deliver_interrupts();
        b.deliver_interrupts();
        let (da, db) = (a.platform.take_done(), b.platform.take_done());
        assert_eq!((da.len(), db.len()), (1, 1));
        assert!(da[0].status.is_ok() && db[0].status.is_ok());
        assert_eq!(a.fake.read_data(1, 8190 * 512, 512), abuf.bytes()[..512].to_vec());
        assert_eq!(
            b.fake.read_data(2, (round * 4096) as usize, 4096),
            bbuf.bytes().to_vec()
        );
    }
    // One block past the end is refused by blk; the driver never sees it.
    let aseg = [Segment::new(abuf.phys, 1024)];
    assert!(
        a.host
            .queue(0)
            .unwrap()
            .submit(0, &Bio::read(8190, 2, &aseg, 99))
            .is_err()
    );
    a.assert_no_violations();
    b.assert_no_violations();
}

#[test]
fn random_io_with_polled_and_interrupt_queues() {
    // 4 CPUs: queues 1-2 polled, 3-4 on vectors 1-2; then every queue polled.
    let ((report, per_vector), polled) = random_io_polled(4, 4, 2, 6_000, 0x9011, Hostile::None);
    assert_eq!(report.completions, 6_000);
    assert_eq!(per_vector.len(), 3, "admin + two interrupt queues");
    assert!(
        polled > 2000 && per_vector[1] > 1000 && per_vector[2] > 1000,
        "{polled} {per_vector:?}"
    );
    let ((_, per_vector), polled) = random_io_polled(4, 4, 4, 3_000, 0x9012, Hostile::None);
    assert_eq!((per_vector, polled), (vec![0], 3_000));
    // Hostile entries mixed in: refused on polled queues as on interrupt ones.
    let ((report, _), _) = random_io_polled(4, 4, 2, 2_500, 0x9013, Hostile::Random(0x9013));
    assert!(report.bogus_cqes > 1_000, "{} bad entries", report.bogus_cqes);
}
