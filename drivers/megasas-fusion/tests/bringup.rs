//! Bring-up on every personality and from every firmware state, with the first-boot report.

mod common;

use std::sync::Arc;

use common::*;
use megasas_fusion::fake::{FakeConfig, StartState, Violation};
use megasas_fusion::{Error, Generation};

const ALL: [Generation; 4] = [
    Generation::Thunderbolt,
    Generation::Invader,
    Generation::Ventura,
    Generation::Aero,
];

#[test]
fn brings_up_every_personality_and_finds_the_drives() {
    for g in ALL {
        let (fake, ctrl, report) = bring_up(FakeConfig::new(g), config(g, 4));
        let ctrl = ctrl.unwrap_or_else(|e| panic!("{g}: {e}\n{report}"));
        assert_eq!(ctrl.generation(), g);
        assert_eq!(ctrl.queues(), 4, "{g}");
        let drives: Vec<_> = ctrl
            .drives()
            .iter()
            .map(|d| (d.target, d.blocks, d.block_size))
            .collect();
        assert_eq!(drives, [(0, 8192, 512), (3, 4096, 512)], "{g}");
        assert_eq!(ctrl.uses_atomic_port(), g == Generation::Aero, "{g}");
        assert_eq!(ctrl.flush_goes_to_firmware(), g == Generation::Aero, "{g}");
        let l = ctrl.limits();
        assert_eq!(
            (l.raw_fw_cmds, l.max_fw_cmds, l.io_tags, l.reply_depth),
            (256, 255, 251, 512)
        );
        assert_eq!(l.max_sge, 64);
        // The model's firmware reports 96 (Invader) or 128 queues: combined mode, decided by
        // that count as Linux does, even with 4 host queues. Thunderbolt never combines.
        assert_eq!(l.combined, g != Generation::Thunderbolt, "{g}");
        assert_eq!(ctrl.info().product, "MegaRAID Fusion model");
        assert!(report.succeeded(), "{report}");
        assert_eq!(fake.fw_state(), 0xC);
        assert_clean(&fake);
    }
}

#[test]
fn brings_up_from_every_firmware_state() {
    for start in [
        StartState::PowerOn,
        StartState::Ready,
        StartState::WaitHandshake,
        StartState::BootMessagePending,
        StartState::Operational,
        StartState::Fault { resettable: true },
    ] {
        for g in [Generation::Invader, Generation::Aero] {
            let mut fc = FakeConfig::new(g);
            fc.start = start;
            let (fake, ctrl, report) = bring_up(fc, config(g, 2));
            assert!(ctrl.is_ok(), "{start:?} {g}: {:?}\n{report}", ctrl.err());
            assert_clean(&fake);
            if let StartState::Fault { .. } = start {
                assert_eq!(fake.counts().2, 1, "one diag reset");
                assert!(report.to_string().contains("fault code 0x0A5"), "{report}");
            }
        }
    }
}

#[test]
fn an_unresettable_fault_fails_with_the_fault_codes_in_the_report() {
    let mut fc = FakeConfig::invader();
    fc.start = StartState::Fault { resettable: false };
    let (fake, ctrl, report) = bring_up(fc, config(Generation::Invader, 1));
    let Err(Error::FirmwareFault { sp0 }) = ctrl else {
        panic!("{:?}", ctrl.err())
    };
    assert_eq!(sp0 >> 28, 0xF);
    assert_eq!(fake.counts().2, 0, "no reset attempted");
    let text = report.to_string();
    assert!(
        text.contains("RESULT: FAILED") && text.contains("not resettable"),
        "{text}"
    );
}

#[test]
fn slow_firmware_hits_the_overall_deadline_not_one_per_state() {
    let mut fc = FakeConfig::ventura();
    // Each state just under the per-state limit: only the overall budget can stop this.
    fc.state_delay_us = 4_000_000;
    let mut cfg = config(Generation::Ventura, 1);
    cfg.bringup_budget_us = 9_000_000;
    let (fake, ctrl, report) = bring_up(fc, cfg);
    assert!(
        matches!(
            ctrl,
            Err(Error::Deadline {
                budget_us: 9_000_000,
                ..
            })
        ),
        "{:?}",
        ctrl.err()
    );
    assert!(fake.now_us() <= 9_100_000, "waited {} us", fake.now_us());
    assert!(report.to_string().contains("deadline"), "{report}");
}

#[test]
fn a_state_that_never_changes_fails_after_the_per_state_limit() {
    let mut fc = FakeConfig::invader();
    fc.state_delay_us = 1 << 40;
    let (_, ctrl, _) = bring_up(fc, config(Generation::Invader, 1));
    assert!(
        matches!(
            ctrl,
            Err(Error::FirmwareStuck {
                waited_us: 5_000_000,
                ..
            })
        ),
        "{:?}",
        ctrl.err()
    );
}

#[test]
fn ioc_init_failure_is_reported() {
    let fake = megasas_fusion::fake::FakeFusion::new(FakeConfig::aero());
    fake.fail_next_init(0x03);
    let mut report = megasas_fusion::Report::new();
    let r = megasas_fusion::Controller::bring_up(
        fake.mmio(),
        &fake.dma(),
        fake.delay(),
        config(Generation::Aero, 1),
        &mut report,
    );
    assert!(matches!(r, Err(Error::InitFailed { status: 3, .. })), "{:?}", r.err());
    assert!(report.to_string().contains("IOC INIT: posting"));
}

#[test]
fn aero_zero_reads_are_retried() {
    let fake = megasas_fusion::fake::FakeFusion::new(FakeConfig::aero());
    fake.zero_reads(3);
    let mut report = megasas_fusion::Report::new();
    let r = megasas_fusion::Controller::bring_up(
        fake.mmio(),
        &fake.dma(),
        fake.delay(),
        config(Generation::Aero, 2),
        &mut report,
    );
    assert!(r.is_ok(), "{:?}", r.err());
    assert!(
        report.steps[0].scratch_pads[0] != 0,
        "the first SP0 read was retried: {report}"
    );
}

#[test]
fn queue_count_follows_vectors_firmware_and_generation() {
    // No vectors: one queue, HostMSIxVectors 0.
    let (_, c, _) = bring_up(FakeConfig::invader(), config(Generation::Invader, 0));
    let c = c.unwrap();
    assert_eq!((c.queues(), c.limits().host_msix_vectors), (1, 0));
    // More vectors than the firmware offers.
    let mut fc = FakeConfig::ventura();
    fc.fw_queues = 6;
    let (_, c, _) = bring_up(fc, config(Generation::Ventura, 16));
    assert_eq!(c.unwrap().queues(), 6);
    // Invader above 8 queues: combined mode.
    let (f, c, _) = bring_up(FakeConfig::invader(), config(Generation::Invader, 12));
    let c = c.unwrap();
    assert!(c.limits().combined);
    assert_eq!(c.queues(), 12);
    assert_clean(&f);
    // Combined mode follows the firmware's count, not the host's: Ventura offering
    // 128 with 16 host queues is combined; offering 16 it is not, even with 16 host queues;
    // Invader offering 8 is not.
    let (f, c, _) = bring_up(FakeConfig::ventura(), config(Generation::Ventura, 16));
    assert!(c.unwrap().limits().combined);
    assert_clean(&f);
    let mut fc = FakeConfig::ventura();
    fc.fw_queues = 16;
    let (f, c, _) = bring_up(fc, config(Generation::Ventura, 16));
    assert!(!c.unwrap().limits().combined);
    assert_clean(&f);
    let mut fc = FakeConfig::invader();
    fc.fw_queues = 8;
    let (f, c, _) = bring_up(fc, config(Generation::Invader, 8));
    assert!(!c.unwrap().limits().combined);
    assert_clean(&f);
    // No MSI-X capability in SP0: one queue whatever the vectors.
    let mut fc = FakeConfig::aero();
    fc.msix_capable = false;
    let (_, c, _) = bring_up(fc, config(Generation::Aero, 8));
    assert_eq!(c.unwrap().limits().host_msix_vectors, 0);
}

#[test]
fn the_report_names_every_step_and_the_limits() {
    let (_, c, report) = bring_up(FakeConfig::aero(), config(Generation::Aero, 2));
    assert!(c.is_ok());
    let text = report.to_string();
    for needle in [
        "first-boot report",
        "Aero",
        "firmware READY",
        "limits",
        "IOC INIT: OPERATIONAL",
        "atomic descriptor port in use",
        "CTRL_GET_INFO",
        "LD_GET_LIST",
        "LD target 3: 4096 blocks",
        "RESULT: OK",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // The model saw no mistakes along the way.
    let _ = Violation::BadSmid;
}

#[test]
fn a_fault_during_a_bring_up_dcmd_fails_fast_not_after_the_timeout() {
    let mut fc = FakeConfig::ventura();
    fc.fault_on_dcmd = Some(megasas_fusion::DCMD_LD_GET_LIST);
    let mut cfg = config(Generation::Ventura, 1);
    cfg.command_timeout_us = 100_000_000;
    let (fake, ctrl, report) = bring_up(fc, cfg);
    let Err(Error::FirmwareFault { sp0 }) = ctrl else {
        panic!("{:?}", ctrl.err())
    };
    assert_eq!((sp0 >> 16) & 0xFFF, 0x0DC);
    assert!(fake.now_us() < 1_000_000, "gave up after {} us", fake.now_us());
    assert!(report.to_string().contains("CTRL_GET_INFO"), "{report}");
}

#[test]
fn rdpq_when_the_firmware_offers_it_one_ring_per_queue_below_4g() {
    for (g, offered) in [
        (Generation::Invader, false),
        (Generation::Ventura, true),
        (Generation::Aero, true),
    ] {
        let mut fc = FakeConfig::new(g);
        fc.rdpq = offered;
        let (fake, ctrl, report) = bring_up(fc, config(g, 4));
        let ctrl = ctrl.unwrap_or_else(|e| panic!("{g}: {e}\n{report}"));
        assert_eq!(
            (ctrl.limits().rdpq_supported, ctrl.limits().rdpq),
            (offered, offered),
            "{g}"
        );
        let (rdpq, rings, depth) = fake.reply_rings().expect("IOC INIT done");
        assert_eq!(rdpq, offered, "{g}");
        assert_eq!((rings.len(), depth), (4, 512), "{g}");
        let bytes = 8 * u64::from(depth);
        for (q, &base) in rings.iter().enumerate() {
            assert!(base + bytes <= 1 << 32, "{g}: ring {q} at {base:#x} not below 4 GiB");
            if !offered {
                assert_eq!(base, rings[0] + q as u64 * bytes, "{g}: contiguous rings");
            }
        }
        assert!(
            report
                .to_string()
                .contains(if offered { "RDPQ" } else { "contiguous rings" }),
            "{report}"
        );
        // I/O completes through every ring, across an OCR that re-sends the array.
        ctrl.enable_interrupts();
        let mut w = Workload::new(Arc::clone(&fake), ctrl, 0xD0);
        w.run(800, 16);
        assert!(w.reset().is_ok());
        w.run(400, 16);
        assert_eq!(
            fake.reply_rings().map(|r| r.1),
            Some(rings),
            "{g}: same rings after OCR"
        );
        assert_clean(&fake);
    }
}

#[test]
fn an_rdpq_array_the_firmware_refuses_stops_bring_up_and_says_why() {
    let g = Generation::Aero;
    let mut fc = FakeConfig::new(g);
    fc.rdpq = true;
    let mut cfg = config(g, 2);
    cfg.rdpq_window_fault = true;
    let (fake, ctrl, report) = bring_up(fc, cfg);
    let e = ctrl.err().expect("IOC INIT refused");
    assert!(matches!(e, megasas_fusion::Error::InitFailed { .. }), "{e}");
    assert!(fake.reply_rings().is_none(), "no IOC INIT accepted");
    let text = report.to_string();
    assert!(text.contains("IOC INIT refused with the RDPQ array"), "{text}");
    assert!(text.contains("megasas.rdpq_fault=window"), "{text}");
    assert!(!fake.violations().is_empty(), "the model saw the broken array");
}

#[test]
fn rdpq_off_keeps_contiguous_rings_on_firmware_that_offers_rdpq() {
    let g = Generation::Aero;
    let mut cfg = config(g, 4);
    cfg.rdpq = false;
    let (fake, ctrl, report) = bring_up(FakeConfig::new(g), cfg);
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    assert_eq!((ctrl.limits().rdpq_supported, ctrl.limits().rdpq), (true, false));
    let (rdpq, rings, depth) = fake.reply_rings().expect("IOC INIT done");
    assert!(!rdpq);
    assert_eq!(rings[3], rings[0] + 3 * 8 * u64::from(depth));
    ctrl.enable_interrupts();
    let mut w = Workload::new(Arc::clone(&fake), ctrl, 0xD1);
    w.run(400, 16);
    assert_clean(&fake);
}

#[test]
fn a_sas39xx_command_count_with_rdpq_and_many_queues() {
    // A SAS39xx reports 5101 commands: 5100 SMIDs, 5096 I/O tags, 10208 replies per ring.
    let g = Generation::Aero;
    let mut fc = FakeConfig::new(g);
    fc.raw_cmds = 5101;
    fc.lds = vec![(0, 1 << 20)];
    let (fake, ctrl, report) = bring_up(fc, config(g, 32));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    let l = ctrl.limits();
    assert_eq!(
        (l.max_fw_cmds, l.io_tags, l.reply_depth, l.queues),
        (5100, 5096, 10208, 32)
    );
    assert!(l.rdpq);
    let (rdpq, rings, depth) = fake.reply_rings().expect("IOC INIT done");
    assert!(rdpq && rings.len() == 32 && depth == 10208);
    ctrl.enable_interrupts();
    let mut w = Workload::new(Arc::clone(&fake), ctrl, 0xD2);
    w.run(2000, 16);
    assert_clean(&fake);
}
