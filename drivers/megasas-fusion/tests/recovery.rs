//! Faults during I/O and online controller resets with requests in flight: every request ends
//! exactly once, nothing is lost, and the device never writes a buffer after its request ended.

mod common;

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use common::*;
use megasas_fusion::fake::{FakeConfig, StartState};
use megasas_fusion::{Error, Generation, Health, IoOp, IoOutcome};

fn workload(fc: FakeConfig, g: Generation, vectors: usize, seed: u64) -> Workload {
    let (fake, ctrl, report) = bring_up(fc, config(g, vectors));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    ctrl.enable_interrupts();
    Workload::new(fake, ctrl, seed)
}

/// Submits `n` reads on fresh tags (starting at `first`) and returns the tags.
fn submit_reads(w: &mut Workload, first: u32, n: u32) -> Vec<u32> {
    (first..first + n)
        .inspect(|&t| {
            w.submit(t, (t % u32::from(w.ctrl.queues())) as u16, IoOp::Read, 1, 3)
                .unwrap();
        })
        .collect()
}

/// After a reset, the returned requests' buffers get a canary; time passes; the canary must
/// survive (the model forgot those commands, so it never DMAs into them).
fn assert_no_late_dma(w: &mut Workload, tags: &[u32]) {
    for &t in tags {
        w.buf_fill(t, BUF, 0x5C);
    }
    for _ in 0..100 {
        w.service(10_000);
    }
    for &t in tags {
        assert!(
            w.buf_read(t).iter().all(|&b| b == 0x5C),
            "tag {t}: device wrote after its request ended"
        );
    }
}

#[test]
fn ocr_with_requests_in_flight_returns_each_once_and_io_resumes() {
    for g in [Generation::Invader, Generation::Ventura, Generation::Aero] {
        let mut w = workload(FakeConfig::new(g), g, 4, 21);
        w.run(2_000, 12);
        // Five reads the firmware holds forever, plus 20 whose replies have not come yet.
        w.fake.hold_next_io(5);
        let held = submit_reads(&mut w, 0, 5);
        let pending = submit_reads(&mut w, 100, 20);
        w.service(0);
        assert_eq!(w.inflight.len(), 25);
        w.reset().unwrap();
        assert!(
            w.inflight.is_empty(),
            "every in-flight request ended: {:?}",
            w.inflight.keys()
        );
        let returned: HashSet<u32> = w.reset_returned.iter().map(|c| c.tag).collect();
        assert_eq!(w.reset_returned.len(), returned.len(), "no request returned twice");
        for t in &held {
            assert!(returned.contains(t), "held tag {t} returned by the reset");
        }
        assert_eq!(
            returned.len(),
            25,
            "none completed: the model delays replies past the reset"
        );
        assert!(w.reset_returned.iter().all(|c| c.outcome == IoOutcome::Reset));
        assert_eq!(w.ctrl.stats.resets.load(Ordering::Relaxed), 1);
        assert!(!held.iter().chain(&pending).any(|&t| w.ctrl.tag_in_flight(t)));
        let all: Vec<u32> = returned.iter().copied().collect();
        assert_no_late_dma(&mut w, &all);
        // Re-issue each exactly once; then more load.
        for &t in &all {
            w.submit(t, 0, IoOp::Read, 1, 1).unwrap();
        }
        let before = w.completed;
        w.run(2_000, 12);
        assert_eq!(w.completed - before, 2_000 + all.len() as u64);
        assert_clean(&w.fake);
    }
}

#[test]
fn replies_that_arrived_before_the_reset_complete_normally() {
    let mut w = workload(FakeConfig::aero(), Generation::Aero, 2, 5);
    let tags = submit_reads(&mut w, 0, 10);
    w.fake.advance(10_000); // all replies posted, none reaped
    w.reset().unwrap();
    assert!(w.inflight.is_empty());
    assert!(
        w.reset_returned.is_empty(),
        "harvested, not reset: {:?}",
        w.reset_returned
    );
    assert_eq!(w.completed, tags.len() as u64);
    assert_clean(&w.fake);
}

#[test]
fn fault_during_io_is_seen_by_the_watchdog_and_recovered() {
    let mut w = workload(FakeConfig::ventura(), Generation::Ventura, 8, 3);
    w.run(3_000, 12);
    let tags = submit_reads(&mut w, 0, 40);
    w.fake.inject_fault(0x123, 0x45, true);
    assert_eq!(w.ctrl.health(), Health::NeedsReset(0xF123_4502));
    // The dead firmware answers nothing; the driver still accepts requests until the reset.
    w.service(100_000);
    assert_eq!(w.inflight.len(), 40);
    w.reset().unwrap();
    assert_eq!(w.ctrl.health(), Health::Ok);
    assert_eq!(w.reset_returned.len(), 40);
    assert_no_late_dma(&mut w, &tags);
    w.run(3_000, 12);
    assert_clean(&w.fake);
}

/// The firmware faults between one CPU's 0xC0 and 0xC4 writes (another CPU cannot interleave:
/// the pair is posted under one lock). The 0xC4 that follows is the driver doing its job, not a
/// protocol error; the faulted firmware just drops the descriptor. (A model that forgot the
/// latched low dword at the fault would record `HighWithoutFreshLow`, and
/// `threads_with_faults_and_resets_under_load` would fail now and then.)
#[test]
fn a_fault_between_the_two_descriptor_halves_is_not_a_driver_error() {
    use devhal::Mmio;
    let mut w = workload(FakeConfig::ventura(), Generation::Ventura, 2, 5);
    w.run(500, 4);
    let mmio = w.fake.mmio();
    // SCSI IO descriptor (type 0) for SMID 1 on queue 0, as the driver's post would write it.
    let d: u64 = 1 << 16;
    mmio.write32(0xC0, d as u32);
    w.fake.inject_fault(0x10, 0, true);
    mmio.write32(0xC4, (d >> 32) as u32);
    assert!(w.fake.violations().is_empty(), "{:#?}", w.fake.violations());
    w.reset().unwrap();
    w.run(500, 4);
    assert_clean(&w.fake);
}

#[test]
fn repeated_resets_under_load_lose_nothing() {
    let mut w = workload(FakeConfig::invader(), Generation::Invader, 4, 77);
    let mut total = 0u64;
    for round in 0..8 {
        w.run(500, 12);
        total += 500;
        let extra = submit_reads(&mut w, 0, 8 + round);
        total += extra.len() as u64;
        w.fake.advance(50 * u64::from(round));
        w.reset().unwrap();
        // Requests returned by the reset are re-issued once.
        let again: Vec<u32> = w.reset_returned.drain(..).map(|c| c.tag).collect();
        total -= again.len() as u64;
        for t in again {
            w.submit(t, 1, IoOp::Read, 1, 2).unwrap();
            total += 1;
        }
        assert!(w.ctrl.queues() == 4);
    }
    w.run(0, 1);
    assert_eq!(w.completed, total);
    assert_eq!(w.ctrl.stats.resets.load(Ordering::Relaxed), 8);
    assert_eq!(w.fake.counts().2, 8, "eight diag resets");
    assert_clean(&w.fake);
}

#[test]
fn an_unresettable_fault_stops_the_adapter_and_fails_everything() {
    let mut w = workload(FakeConfig::aero(), Generation::Aero, 2, 9);
    let tags = submit_reads(&mut w, 0, 6);
    w.fake.inject_fault(0x7, 0, false);
    let r = w.reset();
    assert!(matches!(r, Err(Error::ResetNotPossible { .. })), "{r:?}");
    assert!(w.ctrl.is_dead());
    assert_eq!(w.ctrl.health(), Health::Dead);
    // Stopped, but the requests stay the device's until bus mastering is off.
    assert_eq!(w.reset_returned.len(), 0, "handed back before bus mastering was off");
    assert_eq!(w.abandon_after_bus_master_off(), 6);
    assert_eq!(w.reset_returned.len(), 6);
    assert_eq!(w.abandon_after_bus_master_off(), 0, "each request is handed back once");
    assert_no_late_dma(&mut w, &tags);
    let segs = w.segments(0, 512, 1);
    assert_eq!(w.ctrl.submit(0, 0, &read_block0(&segs), 0), Err(Error::Dead));
}

#[test]
fn ocr_disabled_in_controller_info_means_no_reset() {
    let mut fc = FakeConfig::invader();
    fc.ocr_disabled = true;
    let mut w = workload(fc, Generation::Invader, 1, 1);
    submit_reads(&mut w, 0, 3);
    assert!(matches!(w.reset(), Err(Error::ResetNotPossible { .. })));
    assert_eq!(w.reset_returned.len(), 0, "held until bus mastering is off");
    assert_eq!(w.abandon_after_bus_master_off(), 3);
    assert_eq!(w.reset_returned.len(), 3);
    assert_eq!(w.fake.counts().2, 0, "no diag reset tried");
}

#[test]
fn a_hostile_device_cannot_complete_what_was_not_issued() {
    let mut w = workload(FakeConfig::ventura(), Generation::Ventura, 2, 13);
    let tags = submit_reads(&mut w, 0, 4);
    // Replies for a SMID never issued, for SMID 0, beyond the pool, for an idle DCMD SMID.
    w.fake.inject_bogus_reply(0, 200);
    w.fake.inject_bogus_reply(1, 0);
    w.fake.inject_bogus_reply(1, 0xFFFE);
    w.fake.inject_bogus_reply(0, 252);
    w.run(0, 1);
    assert_eq!(w.completed, tags.len() as u64, "only the real requests completed");
    assert_eq!(w.ctrl.stats.bogus_replies.load(Ordering::Relaxed), 4);
    w.fake.audit();
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
}

#[test]
fn a_spontaneous_fault_at_power_on_is_diag_reset_once() {
    let mut fc = FakeConfig::aero();
    fc.start = StartState::Fault { resettable: true };
    let mut w = workload(fc, Generation::Aero, 2, 2);
    w.run(1_000, 12);
    assert_eq!(w.completed, 1_000);
    assert_clean(&w.fake);
}
