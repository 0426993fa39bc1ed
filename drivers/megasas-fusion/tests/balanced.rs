//! Balanced mode over the model: IOC INIT names the high-IOPS queues (replyqueue_mask), a busy
//! device's requests go to them in batches of 16 as Linux's `megasas_get_msix_index` sends
//! them, a quiet device's stay on the submitting latency queue, the per-device counts come back
//! to zero through replies and resets, and latency mode counts nothing.

mod common;

use std::sync::Arc;

use common::*;
use megasas_fusion::fake::{FakeConfig, FakeFusion};
use megasas_fusion::{Config, Generation, IoOp};

const LATENCY_QUEUES: usize = 4;

fn coalescing_firmware(g: Generation) -> FakeConfig {
    let mut fc = FakeConfig::new(g);
    fc.coalescing = true;
    fc
}

fn balanced_config(g: Generation) -> Config {
    let mut c = config(g, 8 + LATENCY_QUEUES);
    c.high_iops_queues = 8;
    c
}

fn balanced(g: Generation) -> (Arc<FakeFusion>, Workload) {
    let (fake, ctrl, report) = bring_up(coalescing_firmware(g), balanced_config(g));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    ctrl.enable_interrupts();
    let w = Workload::new(Arc::clone(&fake), ctrl, 0xBA1A);
    (fake, w)
}

fn drain(w: &mut Workload) {
    for _ in 0..10_000 {
        if w.inflight.is_empty() {
            return;
        }
        w.service(500);
    }
    panic!("{} requests never completed", w.inflight.len());
}

#[test]
fn ioc_init_names_the_eight_high_iops_queues_and_the_latency_queues_follow() {
    for g in [Generation::Invader, Generation::Ventura, Generation::Aero] {
        let (fake, w) = balanced(g);
        let l = w.ctrl.limits();
        assert_eq!((l.queues, l.high_iops_queues, l.coalescing), (12, 8, true), "{g:?}");
        assert_eq!(w.ctrl.io_queues(), 4);
        assert_eq!(fake.coalescing().0, 0x0001, "{g:?}: one group of 8 coalesced");
        assert_clean(&fake);
    }
}

#[test]
fn a_busy_device_goes_to_the_high_iops_queues_in_batches_of_16() {
    let (fake, mut w) = balanced(Generation::Ventura);
    // Nothing completes while the burst is submitted.
    fake.set_io_delay_us(50_000, 50_000);
    let submit_queue = 9;
    for tag in 0..100 {
        w.submit(tag, submit_queue, IoOp::Write, 1, 1).unwrap();
    }
    assert_eq!(w.ctrl.device_busy(LD, false), 100);
    drain(&mut w);
    let (_, per_queue) = fake.coalescing();
    // Requests 1..=9 had at most 8 outstanding before them: the latency queue. The other 91
    // counted 1..=91 on the high-IOPS counter, queue (n / 16) mod 8: 15, then 16 per queue.
    let mut want = vec![15, 16, 16, 16, 16, 12, 0, 0, 0, 9, 0, 0];
    // The bring-up DCMDs and READ CAPACITYs went to queue 0 before the burst.
    let before_burst = per_queue[0] - 15;
    want[0] += before_burst;
    assert_eq!(per_queue, want);
    assert_eq!(
        w.ctrl.stats.high_iops_ios.load(std::sync::atomic::Ordering::Relaxed),
        91
    );
    assert_eq!(w.ctrl.device_busy(LD, false), 0, "every reply took its count back");
    assert_eq!(w.completed, 100);
    assert_clean(&fake);
}

#[test]
fn a_device_with_at_most_8_outstanding_stays_on_the_latency_queue() {
    let (fake, mut w) = balanced(Generation::Aero);
    let (_, before) = fake.coalescing();
    for round in 0..20u32 {
        fake.set_io_delay_us(10, 200);
        for k in 0..9 {
            w.submit(round * 9 + k, 8 + (round % 4) as u16, IoOp::Write, 1, 1)
                .unwrap();
        }
        drain(&mut w);
    }
    let (_, after) = fake.coalescing();
    assert_eq!(&after[..8], &before[..8], "no request went to a high-IOPS queue");
    assert_eq!(after[8..].iter().sum::<u64>() - before[8..].iter().sum::<u64>(), 180);
    assert_clean(&fake);
}

#[test]
fn random_load_in_balanced_mode_keeps_every_block_and_uses_both_kinds_of_queue() {
    let (fake, mut w) = balanced(Generation::Aero);
    w.run(20_000, 12);
    assert_eq!(w.failed, 0);
    assert!(w.completed > 0);
    let (_, per_queue) = fake.coalescing();
    let high: u64 = per_queue[..8].iter().sum();
    let latency: u64 = per_queue[8..].iter().sum();
    // Bursts of up to 64 keep the device busy most of the time.
    assert!(high > 1000 && latency > 100, "high-IOPS {high}, latency {latency}");
    assert_eq!(w.ctrl.device_busy(LD, false), 0);
    assert_clean(&fake);
}

#[test]
fn a_reset_hands_back_the_device_counts_of_the_requests_it_returns() {
    let (fake, mut w) = balanced(Generation::Ventura);
    fake.hold_next_io(30);
    for tag in 0..30 {
        w.submit(tag, 10, IoOp::Write, 1, 1).unwrap();
    }
    for _ in 0..20 {
        w.service(1000);
    }
    assert_eq!(w.ctrl.device_busy(LD, false), 30);
    w.reset().unwrap();
    assert_eq!(w.reset_returned.len(), 30);
    assert_eq!(w.ctrl.device_busy(LD, false), 0);
    // The layout survives the reset: the same mask in the second IOC INIT, and steering.
    assert_eq!(fake.coalescing().0, 1);
    let (_, before) = fake.coalescing();
    fake.set_io_delay_us(50_000, 50_000);
    for tag in 0..20 {
        w.submit(tag, 11, IoOp::Read, 1, 1).unwrap();
    }
    drain(&mut w);
    let (_, after) = fake.coalescing();
    let new: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    // 9 on the latency queue; the high-IOPS counter goes on from the 21 before the reset:
    // 22..=31 to queue 1, 32 to queue 2.
    assert_eq!(new, [0, 10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
    assert_clean(&fake);
}

#[test]
fn latency_mode_counts_nothing_and_names_no_queue_to_coalesce() {
    // Coalescing offered, but the plan chose latency mode (fewer than 8 CPUs, say).
    let (fake, ctrl, report) = bring_up(coalescing_firmware(Generation::Ventura), config(Generation::Ventura, 4));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    ctrl.enable_interrupts();
    let mut w = Workload::new(Arc::clone(&fake), ctrl, 7);
    assert_eq!((w.ctrl.high_iops_queues(), w.ctrl.io_queues()), (0, 4));
    fake.set_io_delay_us(50_000, 50_000);
    for tag in 0..100 {
        w.submit(tag, 2, IoOp::Write, 1, 1).unwrap();
    }
    assert_eq!(w.ctrl.device_busy(LD, false), 0, "latency mode keeps no device count");
    drain(&mut w);
    let (mask, per_queue) = fake.coalescing();
    assert_eq!(mask, 0);
    assert_eq!(per_queue[2], 100, "every reply on the submitting queue");
    assert_clean(&fake);
}

#[test]
fn planned_balanced_mode_falls_back_to_latency_without_coalescing_at_ready() {
    let (fake, ctrl, report) = bring_up(FakeConfig::ventura(), balanced_config(Generation::Ventura));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    assert_eq!((ctrl.high_iops_queues(), ctrl.io_queues()), (0, 12));
    assert!(
        format!("{report}")
            .contains("balanced mode was planned, but the READY firmware offers no interrupt coalescing"),
        "{report}"
    );
    assert_eq!(fake.coalescing().0, 0);
    assert_clean(&fake);
}

#[test]
fn a_raid0_ld_of_the_map_is_busy_only_past_8_per_data_arm() {
    use megasas_fusion::fake::FakeRaid0;
    let mut fc = coalescing_firmware(Generation::Ventura);
    fc.lds = Vec::new();
    fc.raid0 = Some(FakeRaid0::new(LD, &[4, 7], 16));
    let (fake, ctrl, report) = bring_up(fc, balanced_config(Generation::Ventura));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    ctrl.enable_interrupts();
    let mut w = Workload::new(Arc::clone(&fake), ctrl, 3);
    assert_eq!(w.ctrl.fastpath_lds()[0].data_arms(), 2);
    let (_, before) = fake.coalescing();
    fake.set_io_delay_us(50_000, 50_000);
    for tag in 0..40 {
        w.submit(tag, 8, IoOp::Write, 1, 1).unwrap();
    }
    drain(&mut w);
    let (_, after) = fake.coalescing();
    // Two data arms: 17 requests (at most 16 outstanding before each) on the latency queue.
    assert_eq!(after[8] - before[8], 17);
    assert_eq!(after[..8].iter().sum::<u64>() - before[..8].iter().sum::<u64>(), 23);
    assert!(fake.fastpath_counts().0 >= 40, "the burst went by FastPath");
    assert_clean(&fake);
}

/// IOPS mode (`megasas.perf_mode=iops`): latency mode's queues, one per CPU, with every whole
/// group of 8 named for coalescing.
fn iops(g: Generation, queues: usize) -> (Arc<FakeFusion>, Workload) {
    let mut c = config(g, queues);
    c.coalesce_every_queue = true;
    let (fake, ctrl, report) = bring_up(coalescing_firmware(g), c);
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    ctrl.enable_interrupts();
    let w = Workload::new(Arc::clone(&fake), ctrl, 0x10B5);
    (fake, w)
}

#[test]
fn iops_mode_names_every_whole_group_of_eight_queues_and_steers_as_latency_mode() {
    for g in [Generation::Invader, Generation::Ventura, Generation::Aero] {
        // (queues, coalesced, mask): a partial group is left out, as Linux's msix_vectors / 8.
        for (queues, coalesced, mask) in [(8, 8, 0x1), (12, 8, 0x1), (16, 16, 0x3), (3, 0, 0)] {
            let (fake, mut w) = iops(g, queues);
            let l = w.ctrl.limits();
            assert_eq!(
                (l.queues, l.high_iops_queues, l.coalesced_queues),
                (queues as u16, 0, coalesced),
                "{g:?} {queues} queues"
            );
            assert_eq!(w.ctrl.io_queues(), queues as u16, "every queue a CPU's I/O queue");
            assert_eq!(fake.coalescing().0, mask, "{g:?} {queues} queues");
            // A busy device stays on the submitting queue: no high-IOPS steering, no counts.
            fake.set_io_delay_us(50_000, 50_000);
            let q = (queues - 1) as u16;
            for tag in 0..100 {
                w.submit(tag, q, IoOp::Write, 1, 1).unwrap();
            }
            assert_eq!(w.ctrl.device_busy(LD, false), 0);
            drain(&mut w);
            assert_eq!(
                fake.coalescing().1[usize::from(q)],
                100,
                "{g:?}: every reply on queue {q}"
            );
            fake.set_io_delay_us(0, 0);
            w.run(3000, 12);
            assert_eq!(w.failed, 0);
            assert_eq!(w.ctrl.stats.high_iops_ios.load(std::sync::atomic::Ordering::Relaxed), 0);
            assert_clean(&fake);
        }
    }
}

#[test]
fn iops_mode_sends_the_same_mask_after_a_reset() {
    let (fake, mut w) = iops(Generation::Aero, 16);
    fake.hold_next_io(10);
    for tag in 0..10 {
        w.submit(tag, 3, IoOp::Write, 1, 1).unwrap();
    }
    for _ in 0..20 {
        w.service(1000);
    }
    w.reset().unwrap();
    assert_eq!(w.reset_returned.len(), 10);
    assert_eq!(fake.counts().2, 1, "one adapter reset");
    assert_eq!(fake.coalescing().0, 0x3, "the second IOC INIT names both groups again");
    w.run(2000, 12);
    assert_eq!(w.failed, 0);
    assert_clean(&fake);
}

#[test]
fn planned_iops_mode_falls_back_to_latency_without_coalescing_at_ready() {
    let mut c = config(Generation::Ventura, 8);
    c.coalesce_every_queue = true;
    let (fake, ctrl, report) = bring_up(FakeConfig::ventura(), c);
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    assert_eq!(ctrl.limits().coalesced_queues, 0);
    assert!(
        format!("{report}").contains("IOPS mode was planned, but the READY firmware offers no interrupt coalescing"),
        "{report}"
    );
    assert_eq!(fake.coalescing().0, 0);
    assert_clean(&fake);
}
