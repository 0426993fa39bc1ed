//! Firmware bring-up, INIT, and discovery against the fake MFI device.

mod common;

use common::*;
use megasas::fake::{FakeConfig, FakeDevice};
use megasas::{Config, Controller, Error, FwState, Model};

#[test]
fn init_reaches_operational_and_reads_controller_info_on_both_models() {
    for (model, fw_cmds, product, fw) in [
        (Model::Sas1078, 1000u16, "LSI MegaRAID SAS 8708EM2", "1.70-QEMU"),
        (Model::Sas2108Gen2, 1008, "LSI MegaRAID SAS 9260-8i", "1.80-QEMU"),
    ] {
        let (dev, ctrl) = bring_up(FakeConfig::new(model));
        assert_eq!(dev.state(), FwState::Operational);
        assert!(ctrl.is_operational());
        let info = ctrl.info();
        assert_eq!(info.product, product);
        assert_eq!(info.firmware, fw);
        assert_eq!(info.package, "2.5+-QEMU");
        assert_eq!(info.serial, "QEMU123456");
        assert_eq!(info.device_id, model.device_id());
        assert_eq!(info.max_cmds, fw_cmds);
        assert_eq!(info.max_sge, 80);
        // The ring is exactly fw_cmds entries and at most fw_cmds - 1 commands are in flight.
        assert_eq!(ctrl.reply_ring_entries(), u32::from(fw_cmds));
        assert_eq!(ctrl.max_inflight(), fw_cmds - 1);
        assert_eq!(ctrl.max_segments(), 80);
        assert_eq!(ctrl.max_transfer_bytes(), 65535 * 512);
        assert_eq!(ctrl.bringup_status().max_cmds(), fw_cmds);
        assert_eq!(ctrl.check_firmware().unwrap().state(), FwState::Operational);
        let s = dev.stats();
        assert_eq!(s.inits, 1);
        assert_clean(&dev);
    }
}

#[test]
fn small_max_sge_property_collapses_to_16_and_the_driver_follows() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_sge = 64; // QEMU turns anything below 80 into 16
    let (_dev, ctrl) = bring_up(cfg);
    assert_eq!(ctrl.max_segments(), 16);
}

#[test]
fn bring_up_from_operational_forces_ready_and_reinitialises() {
    let dev = FakeDevice::new(FakeConfig::new(Model::Sas2108Gen2));
    let first = Controller::new(
        Model::Sas2108Gen2,
        dev.mmio(),
        dev.dma(),
        dev.delay(),
        Config::default(),
    )
    .unwrap();
    assert_eq!(dev.state(), FwState::Operational);
    // A later boot stage finds the controller OPERATIONAL with a stale queue.
    let second = Controller::new(
        Model::Sas2108Gen2,
        dev.mmio(),
        dev.dma(),
        dev.delay(),
        Config::default(),
    )
    .unwrap();
    assert_eq!(dev.stats().inits, 2, "INIT must be redone after the forced reset");
    drop(first);
    let drives = second.discover(0).unwrap();
    assert_eq!(drives.len(), 1);
    assert_clean(&dev);
}

#[test]
fn bring_up_walks_transitional_and_handshake_states() {
    let mut cfg = FakeConfig::new(Model::Sas1078);
    cfg.boot = vec![
        (FwState::FwInit, 5_000),
        (FwState::WaitHandshake, 0),
        (FwState::BootMsgPending, 0),
        (FwState::DeviceScan, 3_000),
    ];
    let dev = FakeDevice::new(cfg);
    let ctrl = Controller::new(Model::Sas1078, dev.mmio(), dev.dma(), dev.delay(), Config::default()).unwrap();
    assert!(ctrl.is_operational());
    assert!(dev.virtual_time_us() >= 8_000, "waited {} us", dev.virtual_time_us());
    assert_clean(&dev);
}

#[test]
fn firmware_that_never_becomes_ready_times_out() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.boot = vec![(FwState::FwInit, u64::MAX)];
    let dev = FakeDevice::new(cfg);
    let config = Config {
        state_timeout_us: 2_000_000,
        ..Config::default()
    };
    let err = Controller::new(Model::Sas2108Gen2, dev.mmio(), dev.dma(), dev.delay(), config).unwrap_err();
    match err {
        Error::FirmwareTimeout { state, waited_us } => {
            assert_eq!(state, FwState::FwInit);
            assert!(waited_us >= 2_000_000);
        }
        other => panic!("expected a timeout, got {other}"),
    }
    // Bounded: the virtual clock moved by about the timeout, not forever.
    assert!(dev.virtual_time_us() < 3_000_000);
}

#[test]
fn fault_state_recovers_through_the_doorbell_reset_like_qemu() {
    let dev = FakeDevice::new(FakeConfig::new(Model::Sas2108Gen2));
    dev.set_state(FwState::Fault);
    let ctrl = Controller::new(
        Model::Sas2108Gen2,
        dev.mmio(),
        dev.dma(),
        dev.delay(),
        Config::default(),
    )
    .unwrap();
    assert!(ctrl.is_operational());
    assert!(dev.stats().resets >= 1);
}

#[test]
fn stuck_fault_is_reported_not_hung() {
    let dev = FakeDevice::new(FakeConfig::new(Model::Sas1078));
    dev.set_state(FwState::Fault);
    dev.set_stuck(true);
    let config = Config {
        state_timeout_us: 100_000,
        ..Config::default()
    };
    let err = Controller::new(Model::Sas1078, dev.mmio(), dev.dma(), dev.delay(), config).unwrap_err();
    match &err {
        Error::FirmwareFault { status } => assert_eq!(status.state(), FwState::Fault),
        other => panic!("expected FirmwareFault, got {other}"),
    }
    assert!(err.to_string().contains("FAULT"), "{err}");
}

#[test]
fn firmware_with_a_single_command_slot_is_rejected() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_cmds = 1;
    let dev = FakeDevice::new(cfg);
    let err = Controller::new(
        Model::Sas2108Gen2,
        dev.mmio(),
        dev.dma(),
        dev.delay(),
        Config::default(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::FirmwareLimits { .. }), "{err}");
}

#[test]
fn runtime_fault_is_detected_and_stops_submissions() {
    let (dev, ctrl, _) = ready(FakeConfig::new(Model::Sas2108Gen2));
    dev.set_state(FwState::Fault);
    assert!(matches!(ctrl.check_firmware(), Err(Error::FirmwareFault { .. })));
    let buf = dev.buffer(512);
    let seg = [buf.segment(0, 512)];
    let req = megasas::IoRequest {
        system_pd: false,
        op: megasas::IoOp::Read,
        target: 0,
        lba: 0,
        blocks: 1,
        sgl: &seg,
    };
    assert_eq!(ctrl.submit(1, &req), Err(Error::NotOperational));
}

#[test]
fn discovery_handles_reverse_order_and_both_block_sizes() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.disks = vec![disk(0, 64 << 20, 512), disk(3, 8 << 30, 4096)];
    let (dev, ctrl) = bring_up(cfg);
    let drives = ctrl.discover(0).unwrap();
    let summary: Vec<_> = drives.iter().map(|d| (d.target, d.blocks, d.block_size)).collect();
    assert_eq!(summary, [(0, 131_072, 512), (3, 2_097_152, 4096)]);
    assert_eq!(drives[0].capacity_bytes(), 64 << 20);
    assert_eq!(drives[1].capacity_bytes(), 8 << 30);
    assert_eq!(drives[1].list_sectors, (8u64 << 30) / 512);
    let info = ctrl.ld_info(0, 3).unwrap();
    assert_eq!((info.target, info.size_sectors), (3, (8u64 << 30) / 512));
    assert!(matches!(ctrl.ld_info(0, 5), Err(Error::CommandFailed { .. })));
    let table = megasas::DriveTable {
        info: ctrl.info(),
        drives: &drives,
    }
    .to_string();
    assert!(table.contains("8192"), "{table}");
    assert_clean(&dev);
}

#[test]
fn read_capacity_retries_a_unit_attention() {
    let (dev, ctrl) = bring_up(FakeConfig::new(Model::Sas1078));
    dev.inject_unit_attention(0);
    let drives = ctrl.discover(0).unwrap();
    assert_eq!(drives[0].blocks, 131_072);
}

#[test]
fn hung_polled_command_times_out_and_quarantines_tag_and_buffer_until_reset() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.completion = megasas::fake::CompletionMode::Deferred;
    let dev = FakeDevice::new(cfg);
    let config = Config {
        command_timeout_us: 50_000,
        ..Config::default()
    };
    let ctrl = Controller::new(Model::Sas2108Gen2, dev.mmio(), dev.dma(), dev.delay(), config).unwrap();
    dev.set_frozen(true);
    let err = ctrl.read_capacity(5, 0).unwrap_err();
    assert!(matches!(err, Error::CommandTimeout { tag: 5, .. }), "{err}");
    // The device still owns tag 5's frame and the admin buffer it points at: neither the tag nor
    // the buffer may be handed to another command, on any tag.
    assert_eq!(ctrl.read_capacity(5, 0).unwrap_err(), Error::AdminQuarantined);
    assert_eq!(ctrl.read_capacity(6, 0).unwrap_err(), Error::AdminQuarantined);
    assert_eq!(ctrl.ld_list(7).unwrap_err(), Error::AdminQuarantined);
    assert_eq!(ctrl.recovery_counters().quarantined, 1);
    assert_eq!(ctrl.command_state(5), megasas::CommandState::Quarantined);
    // Only a controller reset (the device gives every frame up) lifts the quarantine.
    let failed = ctrl.reset(|d| panic!("no I/O was in flight, got {d:?}")).unwrap();
    assert_eq!(failed, 0);
    dev.set_frozen(false);
    assert_eq!(ctrl.command_state(5), megasas::CommandState::Free);
    assert_eq!(ctrl.read_capacity(6, 0).unwrap().blocks, 131_072);
    assert_eq!(ctrl.read_capacity(5, 0).unwrap().blocks, 131_072);
    assert_eq!(dev.stats().inits, 2, "the reset re-sent INIT");
    assert_clean(&dev);
}

#[test]
fn shutdown_returns_to_ready_and_refuses_io() {
    let (dev, ctrl, _) = ready(FakeConfig::new(Model::Sas2108Gen2));
    let status = ctrl.shutdown().unwrap();
    assert_eq!(status.state(), FwState::Ready);
    assert_eq!(dev.state(), FwState::Ready);
    assert_eq!(ctrl.enable_interrupts(), Err(Error::NotOperational));
    assert_clean(&dev);
}

#[test]
fn flush_and_shut_down_sends_cache_flush_then_shutdown_and_stops_io() {
    let (dev, ctrl, _) = ready(FakeConfig::new(Model::Sas2108Gen2));
    let before = dev.stats().dcmds.len();
    ctrl.flush_and_shut_down(megasas::ADMIN_TAG).unwrap();
    // CTRL_CACHE_FLUSH of the controller's and the disks' caches, then CTRL_SHUTDOWN.
    assert_eq!(dev.stats().dcmds[before..], [(0x0110_1000, 0x03), (0x0105_0000, 0)]);
    assert_eq!(dev.state(), FwState::Ready);
    assert!(!ctrl.is_operational());
    assert_eq!(ctrl.enable_interrupts(), Err(Error::NotOperational));
    assert_clean(&dev);
}

/// Firmware alternating FW_INIT / DEVICE_SCAN just under the per-state limit would hold a
/// bring-up bounded only per state for 32 x 60 s. One overall deadline (180 s by default) ends it.
#[test]
fn slow_firmware_hits_the_overall_bringup_deadline() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    let per_state = Config::default().state_timeout_us - 1_000_000;
    cfg.boot = (0..40)
        .map(|i| {
            (
                if i % 2 == 0 {
                    FwState::FwInit
                } else {
                    FwState::DeviceScan
                },
                per_state,
            )
        })
        .collect();
    let dev = FakeDevice::new(cfg);
    let err = Controller::new(
        Model::Sas2108Gen2,
        dev.mmio(),
        dev.dma(),
        dev.delay(),
        Config::default(),
    )
    .unwrap_err();
    let limit = Config::default().bringup_timeout_us;
    assert!(
        matches!(err, Error::BringupTimeout { limit_us, .. } if limit_us == limit),
        "{err}"
    );
    let waited = dev.virtual_time_us();
    assert!(waited >= limit && waited < limit + 1_000_000, "waited {waited} us");
}

#[test]
fn bringup_deadline_is_configurable_and_a_quick_sequence_passes() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.boot = vec![(FwState::FwInit, 2_000_000), (FwState::DeviceScan, 2_000_000)];
    let dev = FakeDevice::new(cfg.clone());
    let tight = Config {
        bringup_timeout_us: 3_000_000,
        ..Config::default()
    };
    let err = Controller::new(Model::Sas2108Gen2, dev.mmio(), dev.dma(), dev.delay(), tight).unwrap_err();
    assert!(matches!(err, Error::BringupTimeout { .. }), "{err}");
    let dev = FakeDevice::new(cfg);
    Controller::new(
        Model::Sas2108Gen2,
        dev.mmio(),
        dev.dma(),
        dev.delay(),
        Config::default(),
    )
    .expect("4 s of boot states");
}
