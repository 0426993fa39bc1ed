//! The device floor (`Host::measure_floor`) against the fake controller: figures that follow
//! from the fake's timing, every floor slot returned, coexistence with block-layer I/O on the
//! same queue, a dropped completion ending in a specific error (and the slot coming back only
//! once the device answers), bogus completion entries refused, and the refusals.

mod common;

use std::collections::BTreeSet;

use blk::{Bio, CompletionPolicy, Segment, Status};
use common::{Buf, Rig, Rng};
use nvme::blkdev::{FLOOR_SLOTS, FloorSpec, HostConfig};
use nvme::fake::{FakeCompletion, FakeConfig, Hostile};
use nvme::{Config, Error, IrqMode};

const US: u64 = 1_000;

fn floor_rig(mode: IrqMode, completion: FakeCompletion, floor_slots: u32) -> Rig {
    let mut fcfg = FakeConfig::new(1);
    fcfg.completion = completion;
    let hcfg = HostConfig {
        completion: if mode == IrqMode::Poll {
            CompletionPolicy::Poll
        } else {
            CompletionPolicy::Irq
        },
        ..HostConfig::default()
    };
    let cfg = Config {
        floor_slots,
        queue_depth: 64,
        ..Config::default()
    };
    Rig::with_config(fcfg, 1, mode, hcfg, cfg)
}

/// The first floor slot's index (slots below it are the block layer's).
fn floor_base(rig: &Rig) -> u32 {
    let c = rig.host.controller();
    c.cids_per_queue() - c.floor_slots()
}

#[test]
fn slots_are_reserved_after_the_block_layers_and_only_when_asked() {
    let rig = floor_rig(IrqMode::Poll, FakeCompletion::Immediate, FLOOR_SLOTS);
    let c = rig.host.controller();
    assert_eq!(c.queue_depth(), 64);
    assert_eq!(c.floor_slots(), FLOOR_SLOTS);
    assert_eq!(c.cids_per_queue(), 64 + FLOOR_SLOTS);
    // Every slot can be outstanding at once: the rings hold them all.
    assert_eq!(c.io_queue_entries(), 64 + FLOOR_SLOTS + 1);
    let plain = floor_rig(IrqMode::Poll, FakeCompletion::Immediate, 0);
    assert_eq!(plain.host.controller().cids_per_queue(), 64);
    assert_eq!(plain.host.controller().io_queue_entries(), 65);
}

/// The fake completes one read per microsecond of the test clock, oldest first: QD 1 sees
/// 1 us per read, QD 32 keeps 32 in flight so each waits 32 us, and both run at 1M IOPS.
#[test]
fn figures_follow_the_devices_timing_and_every_slot_comes_back() {
    let rig = floor_rig(IrqMode::Poll, FakeCompletion::Deferred, FLOOR_SLOTS);
    let buf = Buf::new(&rig.fake, 4096);
    let waits = std::cell::Cell::new(0u64);
    let mut wait = |news: &dyn Fn() -> bool| {
        waits.set(waits.get() + 1);
        assert!(!news(), "the run waits only when nothing is new");
        rig.platform.advance(US);
        rig.fake.complete_pending(1, |_| 0);
        assert!(news(), "a completion in the CQ is news");
    };
    let qd1 = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(1, 200), buf.phys, buf.len, &mut wait)
        .unwrap();
    assert_eq!((qd1.queue_depth, qd1.ios, qd1.failed), (1, 200, 0));
    assert_eq!((qd1.p50_ns, qd1.p99_ns), (US, US));
    assert_eq!(qd1.elapsed_ns, 200 * US);
    assert_eq!(qd1.iops(), 1_000_000);
    let qd32 = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(32, 640), buf.phys, buf.len, &mut wait)
        .unwrap();
    assert_eq!((qd32.queue_depth, qd32.ios, qd32.failed), (32, 640, 0));
    assert_eq!(qd32.p50_ns, 32 * US);
    assert_eq!(qd32.iops(), 1_000_000);
    assert_eq!(waits.get(), 840);
    // A depth above the floor slots is capped; a second full-depth run finds every slot idle.
    let capped = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(100, 64), buf.phys, buf.len, &mut wait)
        .unwrap();
    assert_eq!(capped.queue_depth, FLOOR_SLOTS as u16);
    let report = rig.host.report();
    assert_eq!(report.controller.commands, 904);
    assert_eq!(report.controller.completions, 904);
    assert_eq!(rig.fake.stats().io_commands, 904);
    assert_eq!(report.controller.bogus_cqes, 0);
    assert_eq!(report.refused_by_blk, 0);
    assert_eq!(rig.host.floor_leftovers(0), (0, 0));
    // The block layer never saw any of it.
    assert!(rig.platform.take_done().is_empty());
    assert_eq!(rig.host.queue(0).unwrap().counters().completions_irq, 0);
    rig.assert_no_violations();
}

/// Block-layer requests and floor reads in flight on the same queue at once, completed in
/// random order and delivered by the interrupt handler: each side gets exactly its own.
#[test]
fn floor_and_block_io_share_a_queue_without_a_cid_collision() {
    let rig = floor_rig(IrqMode::MsiX { vectors: 2 }, FakeCompletion::Deferred, FLOOR_SLOTS);
    let floor_buf = Buf::new(&rig.fake, 4096);
    let blk_bufs: Vec<Buf> = (0..64).map(|_| Buf::new(&rig.fake, 4096)).collect();
    let segs: Vec<[Segment; 1]> = blk_bufs.iter().map(|b| [Segment::new(b.phys, 4096)]).collect();
    let queue = rig.host.queue(0).unwrap();
    let mut submitted = 0u64;
    let mut submit = |n: usize| {
        for _ in 0..n {
            if submitted as usize == segs.len() {
                return;
            }
            let i = submitted as usize;
            let bio = Bio::read(i as u64 * 8, 8, &segs[i], 1000 + submitted);
            queue.submit(0, &bio).expect("submit");
            submitted += 1;
        }
    };
    submit(16);
    let mut rng = Rng(0xF1002);
    let mut wait = |_: &dyn Fn() -> bool| {
        rig.platform.advance(US);
        submit(1);
        rig.fake.complete_pending(3, |count| rng.below(count as u64) as usize);
        rig.deliver_interrupts();
    };
    let r = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(32, 500), floor_buf.phys, floor_buf.len, &mut wait)
        .unwrap();
    assert_eq!((r.ios, r.failed, r.queue_depth), (500, 0, 32));
    // The rest of the block-layer requests.
    while rig.fake.pending() > 0 {
        rig.fake.complete_pending(8, |_| 0);
        rig.deliver_interrupts();
    }
    let done = rig.platform.take_done();
    let cookies: BTreeSet<u64> = done.iter().map(|c| c.cookie).collect();
    assert_eq!(done.len() as u64, submitted, "every block request completed once");
    assert_eq!(cookies, (1000..1000 + submitted).collect());
    assert!(done.iter().all(|c| c.status == Status::Ok));
    let report = rig.host.report();
    assert_eq!(report.controller.bogus_cqes, 0);
    assert_eq!(report.refused_by_blk, 0);
    assert_eq!(report.controller.completions, 500 + submitted);
    // The interrupt handler delivered floor completions too (it drained first).
    assert!(report.per_vector[1] > submitted, "{:?}", report.per_vector);
    assert_eq!(rig.host.floor_leftovers(0), (0, 0));
    rig.assert_no_violations();
}

/// A read the device never answers: the run gives up after its stall timeout with a specific
/// error; the slot stays the device's (a full-depth run is refused) until the completion comes.
#[test]
fn a_dropped_completion_times_out_and_its_slot_returns_only_when_the_device_answers() {
    let rig = floor_rig(IrqMode::Poll, FakeCompletion::Immediate, FLOOR_SLOTS);
    let buf = Buf::new(&rig.fake, 4096);
    // The fourth read (reads are as long as the buffer: 4 KiB of whole blocks).
    let blocks_per_read = 4096 / u64::from(rig.host.namespaces()[0].lba_size);
    rig.fake.hold(1, 3 * blocks_per_read);
    let mut waits = 0;
    let mut wait = |_: &dyn Fn() -> bool| {
        waits += 1;
        assert!(waits < 100, "the run must give up");
        rig.platform.advance(100_000 * US);
    };
    let e = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(1, 10), buf.phys, buf.len, &mut wait)
        .unwrap_err();
    assert_eq!(
        e,
        Error::FloorStalled {
            in_flight: 1,
            completed: 3,
            waited_ms: 1100
        }
    );
    assert!(e.to_string().contains("still with the device"), "{e}");
    assert_eq!(waits, 11);
    assert_eq!(rig.host.floor_leftovers(0), (1, 0));
    let mut no_wait = |_: &dyn Fn() -> bool| panic!("nothing to wait for");
    assert_eq!(
        rig.host
            .measure_floor(0, 0, FloorSpec::new(32, 64), buf.phys, buf.len, &mut no_wait),
        Err(Error::FloorBusy { wanted: 32, free: 31 })
    );
    // The device answers at last; a poll delivers it and the slot is free again.
    rig.fake.release_held();
    assert_eq!(rig.host.poll(0, 0), 1, "the late completion is reaped");
    assert!(rig.platform.take_done().is_empty(), "and not handed to the block layer");
    assert_eq!(rig.host.floor_leftovers(0), (0, 0));
    let r = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(32, 64), buf.phys, buf.len, &mut no_wait)
        .unwrap();
    assert_eq!(r.ios, 64);
    assert_eq!(rig.host.report().controller.bogus_cqes, 0);
}

/// A controller reset ends the reads a stalled run left: their slots come back.
#[test]
fn a_reset_ends_abandoned_floor_reads() {
    let rig = floor_rig(IrqMode::Poll, FakeCompletion::Immediate, FLOOR_SLOTS);
    let buf = Buf::new(&rig.fake, 4096);
    rig.fake.hold(1, 0);
    let mut wait = |_: &dyn Fn() -> bool| rig.platform.advance(500_000 * US);
    let e = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(4, 10), buf.phys, buf.len, &mut wait)
        .unwrap_err();
    assert!(matches!(e, Error::FloorStalled { in_flight: 1, .. }), "{e:?}");
    assert_eq!(rig.host.floor_leftovers(0).0, 1);
    let (reissued, failed, ok) = rig.host.reset(0);
    assert!(ok);
    assert_eq!(
        (reissued, failed),
        (1, 0),
        "handed back by the reset, not re-issued to blk"
    );
    assert_eq!(rig.host.floor_leftovers(0), (0, 0));
    assert_eq!(rig.host.report().refused_by_blk, 0);
    rig.fake.release_held();
    let mut no_wait = |_: &dyn Fn() -> bool| panic!("nothing to wait for");
    let r = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(32, 64), buf.phys, buf.len, &mut no_wait)
        .unwrap();
    assert_eq!((r.ios, r.failed), (64, 0));
}

/// Duplicated and invented completion entries naming floor CIDs are refused by the
/// controller's validation and counted; the run counts each read once.
#[test]
fn bogus_completion_entries_are_refused() {
    for hostile in [
        Hostile::DuplicateCid,
        Hostile::InventedCid,
        Hostile::WrongSqid,
        Hostile::BadSqhd,
    ] {
        let rig = floor_rig(IrqMode::Poll, FakeCompletion::Immediate, FLOOR_SLOTS);
        // An invented CID naming the last floor slot, which a QD 1 run never posts.
        rig.fake.set_invented_cid((floor_base(&rig) + FLOOR_SLOTS - 1) as u16);
        rig.fake.set_hostile(hostile);
        let buf = Buf::new(&rig.fake, 4096);
        let mut no_wait = |_: &dyn Fn() -> bool| {};
        let r = rig
            .host
            .measure_floor(0, 0, FloorSpec::new(1, 50), buf.phys, buf.len, &mut no_wait)
            .unwrap();
        assert_eq!((r.ios, r.failed), (50, 0), "{hostile:?}");
        let report = rig.host.report();
        assert_eq!(report.controller.bogus_cqes, 50, "{hostile:?}: one bad entry per read");
        assert_eq!(report.controller.bogus_cqes, rig.fake.stats().hostile_cqes);
        assert_eq!(report.controller.completions, 50);
        assert_eq!(rig.host.floor_leftovers(0), (0, 0), "{hostile:?}");
    }
}

/// Failed reads are counted, not hidden.
#[test]
fn failed_reads_are_counted() {
    let rig = floor_rig(IrqMode::Poll, FakeCompletion::Immediate, FLOOR_SLOTS);
    // Unrecovered read error with DNR: not retried.
    rig.fake.inject_error(1, 2, 0x4281, u32::MAX);
    let buf = Buf::new(&rig.fake, 4096);
    let mut no_wait = |_: &dyn Fn() -> bool| {};
    let r = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(1, 10), buf.phys, buf.len, &mut no_wait)
        .unwrap();
    assert_eq!((r.ios, r.failed), (10, 1));
}

#[test]
fn refusals_are_specific() {
    let mut no_wait = |_: &dyn Fn() -> bool| panic!("a refused run never waits");
    let off = floor_rig(IrqMode::Poll, FakeCompletion::Immediate, 0);
    let buf = Buf::new(&off.fake, 8192);
    let reason = |r: Result<_, Error>| match r {
        Err(Error::FloorUnavailable { reason }) => reason,
        other => panic!("{other:?}"),
    };
    let spec = FloorSpec::new(1, 10);
    assert!(reason(off.host.measure_floor(0, 0, spec, buf.phys, buf.len, &mut no_wait)).contains("nvme.floor"));
    let rig = floor_rig(IrqMode::Poll, FakeCompletion::Immediate, FLOOR_SLOTS);
    let buf = Buf::new(&rig.fake, 8192);
    let h = &rig.host;
    assert!(reason(h.measure_floor(0, 1, spec, buf.phys, buf.len, &mut no_wait)).contains("namespace"));
    assert!(reason(h.measure_floor(1, 0, spec, buf.phys, buf.len, &mut no_wait)).contains("CPU"));
    assert!(reason(h.measure_floor(0, 0, FloorSpec::new(1, 0), buf.phys, buf.len, &mut no_wait)).contains("read"));
    assert!(reason(h.measure_floor(0, 0, FloorSpec::new(0, 1), buf.phys, buf.len, &mut no_wait)).contains("depth"));
    assert!(reason(h.measure_floor(0, 0, spec, buf.phys, 256, &mut no_wait)).contains("block"));
    assert!(matches!(
        h.measure_floor(0, 0, spec, buf.phys + 2, 4096, &mut no_wait),
        Err(Error::PrpMisaligned { .. })
    ));
    // Nothing was posted by any of these.
    assert_eq!(h.report().controller.commands, 0);
    assert_eq!(h.floor_leftovers(0), (0, 0));
}

/// A completion written with the wrong phase tag is invisible: the run never counts it and
/// ends with the stall error instead of a false completion.
#[test]
fn a_wrong_phase_completion_is_never_taken() {
    let rig = floor_rig(IrqMode::Poll, FakeCompletion::Immediate, FLOOR_SLOTS);
    rig.fake.set_hostile(Hostile::WrongPhase);
    let buf = Buf::new(&rig.fake, 4096);
    let mut wait = |news: &dyn Fn() -> bool| {
        assert!(!news(), "a wrong-phase entry is no news");
        rig.platform.advance(300_000 * US);
    };
    let e = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(1, 10), buf.phys, buf.len, &mut wait)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::FloorStalled {
                in_flight: 1,
                completed: 0,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(rig.host.report().controller.completions, 0);
    assert_eq!(rig.host.floor_leftovers(0), (1, 0));
}

/// A floor read is as long as the buffer's whole blocks (the kernel passes the job's block
/// size): an error on the last block of the first 4 KiB fails the first read, and the second
/// read starts right after it.
#[test]
fn reads_cover_the_whole_buffer_in_block_aligned_steps() {
    let rig = floor_rig(IrqMode::Poll, FakeCompletion::Immediate, FLOOR_SLOTS);
    let lba_size = u64::from(rig.host.namespaces()[0].lba_size);
    let blocks_per_read = 4096 / lba_size;
    assert!(blocks_per_read > 1, "the test needs blocks smaller than the buffer");
    let buf = Buf::new(&rig.fake, 4096);
    let mut wait = |_: &dyn Fn() -> bool| rig.platform.advance(US);
    rig.fake.inject_error(1, blocks_per_read - 1, 0x4281, 1);
    let r = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(1, 1), buf.phys, buf.len, &mut wait)
        .unwrap();
    assert_eq!(
        (r.ios, r.failed),
        (1, 1),
        "the first read covered block {}",
        blocks_per_read - 1
    );
    rig.fake.inject_error(1, blocks_per_read, 0x4281, 1);
    let r = rig
        .host
        .measure_floor(0, 0, FloorSpec::new(1, 2), buf.phys, buf.len, &mut wait)
        .unwrap();
    assert_eq!(
        (r.ios, r.failed),
        (2, 1),
        "the second read starts at block {blocks_per_read}"
    );
    assert_eq!(rig.host.floor_leftovers(0), (0, 0));
    rig.assert_no_violations();
}
