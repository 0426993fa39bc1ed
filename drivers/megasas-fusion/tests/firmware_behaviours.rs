//! Firmware behaviours that Linux's `megaraid_sas` and FreeBSD's `mrsas` are written to
//! survive, each with the model set to show it: SP0 lagging behind IOC INIT, combined reply mode
//! decided by the firmware's queue count, Aero zero reads, READ CAPACITY fallbacks and underruns,
//! the DCMD buffer sizes and forms Linux uses, JBOD disks, FAULTs around a reset, a slow diag
//! reset, the IOC INIT capability bits and a doorbell left busy by a previous driver. Each test
//! names what a driver that ignored the behaviour would do.

mod common;

use common::*;
use megasas_fusion::fake::FakeConfig;
use megasas_fusion::{Generation, Health, IoOp, IoOutcome, IoRequest};

fn workload(fc: FakeConfig, g: Generation, vectors: usize) -> Workload {
    let (fake, ctrl, report) = bring_up(fc, config(g, vectors));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    ctrl.enable_interrupts();
    Workload::new(fake, ctrl, 7)
}

/// SP0 shows OPERATIONAL 2 s after IOC INIT's cmd_status 0. Linux and FreeBSD never look; a
/// driver that reads SP0 once would fail with NotOperational.
#[test]
fn sp0_lagging_behind_ioc_init_is_waited_for() {
    let mut fc = FakeConfig::invader();
    fc.operational_lag_us = 2_000_000;
    let (fake, ctrl, report) = bring_up(fc, config(Generation::Invader, 2));
    assert!(ctrl.is_ok(), "{:?}\n{report}", ctrl.err());
    assert!(
        report.to_string().contains("reached OPERATIONAL after cmd_status"),
        "{report}"
    );
    assert_clean(&fake);
}

/// Ventura/Aero firmware reporting 128 queues is in combined mode whatever the host count; with
/// 12 host queues, queues 8-11 must use 0x31C, never 0x6C (where a driver that decides the mode
/// from the host count writes MSIxIndex 8-11). Invader reporting 96 with 4 host queues uses 0x30C.
#[test]
fn combined_mode_follows_the_firmware_count() {
    let mut w = workload(FakeConfig::aero(), Generation::Aero, 12);
    assert!(w.ctrl.limits().combined);
    w.run(4_000, 4);
    assert_clean(&w.fake);
    let mut w = workload(FakeConfig::invader(), Generation::Invader, 4);
    assert!(w.ctrl.limits().combined);
    w.run(2_000, 4);
    assert_clean(&w.fake);
}

/// Aero zero reads up to Linux's 30 retries are absorbed, and only FAULT asks for a reset, not
/// any state other than OPERATIONAL.
#[test]
fn aero_zero_reads_and_non_fault_states_do_not_reset() {
    let w = workload(FakeConfig::aero(), Generation::Aero, 2);
    w.fake.zero_reads(25);
    assert_eq!(w.ctrl.health(), Health::Ok);
    // A glitch longer than the retries reads as state 0 (UNDEFINED): not FAULT, so no reset.
    w.fake.zero_reads(40);
    assert_eq!(w.ctrl.health(), Health::Ok);
    w.fake.zero_reads(0);
    w.fake.inject_fault(0x77, 3, true);
    w.fake.zero_reads(29);
    let Health::NeedsReset(sp0) = w.ctrl.health() else {
        panic!("FAULT not seen through 29 zero reads")
    };
    assert_eq!(sp0 >> 28, 0xF);
}

/// READ CAPACITY(16) refused; the driver asks READ CAPACITY(10) and gets the real 4 KiB block
/// size, where a guess from the LD list would give 512-byte blocks.
#[test]
fn capacity_falls_back_to_read_capacity_10_not_a_guess() {
    let mut fc = FakeConfig::ventura();
    fc.no_read_capacity16 = true;
    fc.block_size = 4096;
    let (fake, ctrl, report) = bring_up(fc, config(Generation::Ventura, 1));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    let drives: Vec<_> = ctrl
        .drives()
        .iter()
        .map(|d| (d.target, d.blocks, d.block_size))
        .collect();
    assert_eq!(drives, [(0, 8192, 4096), (3, 4096, 4096)]);
    assert_clean(&fake);
}

/// READ CAPACITY(16) answered with 12 of 32 bytes, status 0x2D + GOOD (an underrun with a
/// residual): a success, not a failure.
#[test]
fn underrun_with_good_status_is_success() {
    let mut fc = FakeConfig::invader();
    fc.capacity16_bytes = 12;
    fc.block_size = 4096;
    // No READ CAPACITY(10) to fall back on: the underrun must be taken as the answer.
    fc.no_read_capacity10 = true;
    let (fake, ctrl, report) = bring_up(fc, config(Generation::Invader, 1));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    let drives: Vec<_> = ctrl
        .drives()
        .iter()
        .map(|d| (d.target, d.blocks, d.block_size))
        .collect();
    assert_eq!(drives, [(0, 8192, 4096), (3, 4096, 4096)]);
    assert!(!report.to_string().contains("READ CAPACITY failed"), "{report}");
    assert_clean(&fake);
}

/// A flush goes out as SYNCHRONIZE CACHE(10) with a zeroed read/write RAID context (no CUDA type,
/// no SQN), on both context layouts. The model refuses (16), like an LD that does not know it.
#[test]
fn flush_is_sync_cache_10_without_rw_context() {
    for (fc, g) in [
        (FakeConfig::aero(), Generation::Aero),
        (
            FakeConfig {
                bit24: true,
                ..FakeConfig::invader()
            },
            Generation::Invader,
        ),
    ] {
        let w = workload(fc, g, 1);
        let req = IoRequest {
            system_pd: false,
            target: 0,
            op: IoOp::Flush,
            lba: 0,
            blocks: 0,
            sgl: &[],
        };
        w.ctrl.submit(0, 0, &req, 1).unwrap();
        let mut got = None;
        for _ in 0..100 {
            w.fake.advance(100);
            w.ctrl.reap(0, &mut |c| got = Some(c));
        }
        assert_eq!(got.map(|c| c.outcome), Some(IoOutcome::Ok), "{g}");
        assert_clean(&w.fake);
    }
}

/// 256-VD firmware (max_lds 255) lists an LD with target 200 only when LD_GET_LIST is sent with
/// Linux's 4104-byte buffer and mbox b[0] = 1. The model refuses QEMU's MFI sizes (a 1032-byte
/// LD_GET_LIST, a 2048-byte CTRL_GET_INFO).
#[test]
fn dcmd_sizes_and_256_vd_mode_as_linux() {
    let mut fc = FakeConfig::ventura();
    fc.max_lds = 255;
    fc.lds = vec![(0, 1024), (200, 2048)];
    let (fake, ctrl, report) = bring_up(fc, config(Generation::Ventura, 1));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    let targets: Vec<u8> = ctrl.drives().iter().map(|d| d.target).collect();
    assert_eq!(targets, [0, 200]);
    assert_clean(&fake);
}

/// CACHE_FLUSH and SHUTDOWN go out with sge_count 0 and DIR_NONE, not one zero-length SGE with
/// DIR_READ; the model records an SGE on a no-data DCMD.
#[test]
fn no_data_dcmds_carry_no_sge() {
    for (fc, g) in [
        (FakeConfig::invader(), Generation::Invader),
        (FakeConfig::aero(), Generation::Aero),
    ] {
        let w = workload(fc, g, 1);
        w.ctrl.shutdown().unwrap();
        assert_clean(&w.fake);
    }
}

/// JBOD. The firmware exposes two system PDs (device ids 0 and 5, the first sharing its number
/// with LD 0) besides the LDs. Bring-up finds them through PD_LIST_QUERY and I/O reaches them
/// through the system-PD path (FastPath SCSI IO, DevHandle 0xFFFF, device id in the RAID
/// context), on the legacy and the G35 RAID context.
#[test]
fn jbod_disks_are_found_and_carry_io() {
    for (fc, g) in [
        (FakeConfig::invader(), Generation::Invader),
        (FakeConfig::aero(), Generation::Aero),
    ] {
        let mut fc = fc;
        fc.system_pds = vec![(0, 2048), (5, 1024)];
        let mut w = workload(fc, g, 2);
        let drives: Vec<_> = w
            .ctrl
            .drives()
            .iter()
            .map(|d| (d.target, d.system_pd, d.blocks))
            .collect();
        assert_eq!(
            drives,
            [(0, false, 8192), (3, false, 4096), (0, true, 2048), (5, true, 1024)],
            "{g}"
        );
        for (tag, device) in [(0u32, 0u8), (1, 5)] {
            let segs = w.segments(tag, 1024, 2);
            w.buf_fill(tag, 1024, 0xA0 + device);
            let req = IoRequest {
                target: device,
                system_pd: true,
                op: IoOp::Write,
                lba: 7,
                blocks: 2,
                sgl: &segs,
            };
            w.ctrl.submit(tag, 1, &req, u64::from(tag)).unwrap();
            let mut done = Vec::new();
            for _ in 0..50 {
                w.fake.advance(100);
                for q in 0..2 {
                    w.ctrl.reap(q, &mut |c| done.push(c));
                }
            }
            assert_eq!(done.len(), 1, "{g}");
            assert_eq!(done[0].outcome, IoOutcome::Ok, "{g}");
            assert!(
                w.fake
                    .pd_bytes(device, 7 * 512, 1024)
                    .iter()
                    .all(|&b| b == 0xA0 + device)
            );
        }
        // LD 0 was not touched by the write to PD 0.
        assert!(w.fake.ld_bytes(0, 7 * 512, 1024).iter().all(|&b| b == 0));
        assert_clean(&w.fake);
    }
}

/// After an OCR's diag reset the firmware shows FAULT for 6 s before it restarts (the driver
/// looks 3 s after the reset, so it sees it); the driver waits it out (Linux
/// `transition_to_ready(ocr=1)`) instead of failing the attempt, which would fail all three
/// attempts and stop the adapter.
#[test]
fn a_fault_while_the_firmware_restarts_after_ocr_is_waited_out() {
    let mut fc = FakeConfig::ventura();
    fc.fault_while_restarting_us = 6_000_000;
    let mut w = workload(fc, Generation::Ventura, 2);
    w.run(500, 4);
    w.fake.inject_fault(0x55, 0, true);
    w.reset().unwrap();
    assert_eq!(w.ctrl.health(), Health::Ok);
    w.run(500, 4);
    assert_clean(&w.fake);
}

/// At probe a failed IOC INIT that leaves a resettable FAULT gets one diag reset and one more
/// IOC INIT (Linux `megasas_init_adapter_fusion`) rather than failing bring-up.
#[test]
fn ioc_init_is_retried_once_after_a_resettable_fault_at_probe() {
    let mut fc = FakeConfig::invader();
    fc.fault_on_failed_init = true;
    let fake = megasas_fusion::fake::FakeFusion::new(fc);
    fake.fail_next_init(0x01);
    let mut report = megasas_fusion::Report::new();
    let r = megasas_fusion::Controller::bring_up(
        fake.mmio(),
        &fake.dma(),
        fake.delay(),
        config(Generation::Invader, 1),
        &mut report,
    );
    assert!(r.is_ok(), "{:?}\n{report}", r.err());
    assert!(report.to_string().contains("one diag reset and retry"), "{report}");
    assert_clean(&fake);
}

/// A diag reset that takes 30 s to reach READY (real cards take seconds to minutes) still
/// completes within the OCR's budget.
#[test]
fn a_slow_diag_reset_still_recovers() {
    let mut fc = FakeConfig::aero();
    fc.reset_to_ready_us = 30_000_000;
    // The driver's real limits (180 s per state, 240 s overall), not the tests' short ones.
    let defaults = megasas_fusion::Config::new(Generation::Aero, vec![0, 1]);
    let mut cfg = config(Generation::Aero, 2);
    cfg.state_timeout_us = defaults.state_timeout_us;
    cfg.bringup_budget_us = defaults.bringup_budget_us;
    let (fake, ctrl, report) = bring_up(fc, cfg);
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    ctrl.enable_interrupts();
    let mut w = Workload::new(fake, ctrl, 9);
    w.fake.inject_fault(0x10, 0, true);
    w.reset().unwrap();
    w.run(300, 4);
    assert_clean(&w.fake);
}

/// IOC INIT's additional_msix capability (bit 1) on Invader and later always, never on
/// Thunderbolt, as Linux and FreeBSD, whatever the queue count.
#[test]
fn additional_msix_by_generation_not_queue_count() {
    for (g, vectors, want) in [
        (Generation::Thunderbolt, 12, false),
        (Generation::Invader, 2, true),
        (Generation::Aero, 1, true),
    ] {
        let (fake, ctrl, report) = bring_up(FakeConfig::new(g), config(g, vectors));
        assert!(ctrl.is_ok(), "{g}: {report}");
        let caps = fake.init_capabilities().expect("IOC INIT seen");
        assert_eq!(caps & 2 != 0, want, "{g}: capabilities {caps:#x}");
        // max_255lds, as Linux sets it on every generation (the map format follows the offer).
        assert_ne!(caps & (1 << 3), 0, "{g}: capabilities {caps:#x}");
    }
}

/// The other side of the underrun: a READ answered 0x2D + GOOD with DataLength 0 moved nothing,
/// so it is not a success (blk has no partial completion): it fails instead of handing back an unfilled
/// buffer.
#[test]
fn a_short_read_with_good_status_is_not_success() {
    let mut w = workload(FakeConfig::ventura(), Generation::Ventura, 1);
    w.fake.fail_next_io(megasas_fusion::fake::Failure {
        status: 0x2D,
        scsi_status: 0,
        sense: None,
    });
    let segs = w.segments(0, 512, 1);
    let req = IoRequest {
        target: 0,
        system_pd: false,
        op: IoOp::Read,
        lba: 0,
        blocks: 1,
        sgl: &segs,
    };
    w.ctrl.submit(0, 0, &req, 1).unwrap();
    let mut got = None;
    for _ in 0..50 {
        w.fake.advance(100);
        w.ctrl.reap(0, &mut |c| got = Some(c));
    }
    let c = got.expect("completed");
    assert!(matches!(c.outcome, IoOutcome::Failed(_)), "{c:?}");
    assert_eq!(c.bytes_done, 0);
    assert_clean(&w.fake);
}

/// Doorbell bit 0 reads 1 for 12 s after power-on (left set by a previous driver) in
/// WAIT_HANDSHAKE. Linux writes 0x18 without looking and goes on; a driver that waits for the
/// bit first gives up after 10 s with DoorbellBusy. IOC INIT still waits for the bit (the model
/// requires it), which the doorbell write has cleared by then.
#[test]
fn handshake_doorbell_is_written_without_waiting_for_bit_0() {
    let mut fc = FakeConfig::ventura();
    fc.start = megasas_fusion::fake::StartState::WaitHandshake;
    fc.doorbell_busy_at_start_us = 12_000_000;
    let (fake, ctrl, report) = bring_up(fc, config(Generation::Ventura, 1));
    assert!(ctrl.is_ok(), "{:?}\n{report}", ctrl.err());
    assert!(fake.now_us() < 2_000_000, "waited {} us", fake.now_us());
    assert_clean(&fake);
}
