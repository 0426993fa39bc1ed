//! Shared helpers for the fake-device tests.

#![allow(dead_code)]

use std::sync::Arc;

use megasas::fake::{FakeConfig, FakeDelay, FakeDevice, FakeDiskSpec, FakeDma, FakeMmio};
use megasas::{Config, Controller, IoStatus, LogicalDrive};

pub type Ctrl = Controller<FakeMmio, FakeDma, FakeDelay>;

pub fn bring_up(cfg: FakeConfig) -> (Arc<FakeDevice>, Ctrl) {
    let model = cfg.model;
    let dev = FakeDevice::new(cfg);
    let ctrl = Controller::new(model, dev.mmio(), dev.dma(), dev.delay(), Config::default()).expect("bring-up");
    (dev, ctrl)
}

/// Bring-up, discovery and interrupts enabled: ready for I/O.
pub fn ready(cfg: FakeConfig) -> (Arc<FakeDevice>, Ctrl, Vec<LogicalDrive>) {
    let (dev, ctrl) = bring_up(cfg);
    let drives = ctrl.discover(0).expect("discover");
    ctrl.enable_interrupts().expect("enable interrupts");
    (dev, ctrl, drives)
}

pub fn disk(scsi_id: u8, bytes: u64, block_size: u32) -> FakeDiskSpec {
    FakeDiskSpec {
        scsi_id,
        bytes,
        block_size,
    }
}

/// Deterministic, position-dependent pattern so misplaced or stale blocks are caught.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Reaps until `want` completions arrived, returning them in arrival order.
pub fn reap_n(ctrl: &Ctrl, want: usize) -> Vec<(u16, IoStatus)> {
    let mut got = Vec::new();
    for _ in 0..10_000 {
        let r = ctrl.reap(|tag, st| got.push((tag, st)));
        assert_eq!(r.faults, 0, "unexpected fault: {:?}", r.first_fault);
        if got.len() >= want {
            break;
        }
    }
    assert_eq!(got.len(), want, "completions");
    got
}

pub fn assert_clean(dev: &FakeDevice) {
    let s = dev.stats();
    assert!(s.dma_violations.is_empty(), "DMA violations: {:?}", s.dma_violations);
}
