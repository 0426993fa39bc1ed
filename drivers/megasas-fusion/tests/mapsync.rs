//! The pended map sync: after bring-up with a valid RAID map the driver keeps one map sync on
//! the model (its own DCMD slot, not an I/O tag); a configuration change completes it with the
//! new map, which the driver checks and routes FastPath by (the model refuses an old sequence
//! number, so a FastPath request it serves after the change proves the new map is in use). A
//! failed sync or a refused map leaves the LD path; an OCR cancels the sync and pends a new one.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use megasas_fusion::fake::{FakeConfig, FakeRaid0};
use megasas_fusion::raidmap::layout;
use megasas_fusion::{Generation, IoOp, IoOutcome, IoRequest, Segment};

const PDS: [u16; 2] = [4, 7];
const ROWS: u64 = 16;

fn raid0(g: Generation) -> Workload {
    let mut fc = FakeConfig::new(g);
    fc.lds = Vec::new();
    fc.raid0 = Some(FakeRaid0::new(LD, &PDS, ROWS));
    let (fake, ctrl, report) = bring_up(fc, config(g, 2));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("bring-up: {e}\n{report}"));
    ctrl.enable_interrupts();
    Workload::new(fake, ctrl, 0x5EC)
}

/// One request on tag 0, queue 0, polled to its completion.
fn one(w: &mut Workload, op: IoOp, lba: u64, fill: u8) -> IoOutcome {
    w.buf_fill(0, 512, fill);
    let seg = [Segment {
        phys: w.buf.phys,
        len: 512,
    }];
    let req = IoRequest {
        system_pd: false,
        target: LD,
        op,
        lba,
        blocks: 1,
        sgl: &seg,
    };
    w.ctrl.submit(0, 0, &req, 0).unwrap();
    let mut got = None;
    for _ in 0..10_000 {
        w.fake.advance(100);
        let _ = w.fake.take_vectors();
        w.ctrl.reap(0, &mut |c| got = Some(c));
        if let Some(c) = got {
            return c.outcome;
        }
    }
    panic!("no completion");
}

/// Lets the model post the sync's reply and the driver reap it and take the map (the host's
/// tick does the last step).
fn settle(w: &mut Workload) -> bool {
    for _ in 0..100 {
        w.fake.advance(100);
        let _ = w.fake.take_vectors();
        w.ctrl.reap(0, &mut |_| panic!("no I/O is in flight"));
        if w.ctrl.service_map_sync() {
            return true;
        }
    }
    false
}

fn fastpath_served(w: &Workload) -> u64 {
    w.fake.fastpath_counts().0
}

#[test]
fn a_map_sync_is_pended_after_bring_up_on_its_own_slot() {
    for g in [Generation::Ventura, Generation::Aero] {
        let w = raid0(g);
        assert!(w.ctrl.map_sync_pending(), "{g:?}");
        assert!(w.fake.map_sync_held(), "{g:?}: the model holds it");
        assert_eq!(w.fake.map_syncs_held(), 1);
        // The I/O tag space is the one without a map sync: firmware commands less the four
        // DCMD SMIDs, and every tag may be in flight at once beside the sync.
        let l = w.ctrl.limits();
        assert_eq!(l.io_tags, l.max_fw_cmds - 4);
        assert!(!w.ctrl.service_map_sync(), "nothing to take while the sync waits");
        assert_clean(&w.fake);
    }
}

#[test]
fn every_io_tag_runs_beside_the_pended_sync() {
    let mut w = raid0(Generation::Aero);
    let tags = u32::from(w.ctrl.limits().io_tags);
    for tag in 0..tags {
        w.submit(tag, 0, IoOp::Read, 1, 1).unwrap();
    }
    assert!(w.ctrl.map_sync_pending());
    w.run(0, 1);
    assert!(w.ctrl.map_sync_pending());
    assert_clean(&w.fake);
}

#[test]
fn a_config_change_completes_the_sync_and_fastpath_resumes_on_the_new_map() {
    for g in [Generation::Ventura, Generation::Invader] {
        config_change_then_fastpath_on_the_new_map(raid0(g));
    }
    let mut fc = FakeConfig::new(Generation::Invader);
    fc.lds = Vec::new();
    fc.ext_lds = true;
    fc.raid0 = Some(FakeRaid0::new(LD, &PDS, ROWS));
    let (fake, ctrl, report) = bring_up(fc, config(Generation::Invader, 2));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("bring-up: {e}\n{report}"));
    assert!(format!("{report}").contains("extended 256-LD map: 1 LD(s)"), "{report}");
    ctrl.enable_interrupts();
    config_change_then_fastpath_on_the_new_map(Workload::new(fake, ctrl, 0x5EC));
}

fn config_change_then_fastpath_on_the_new_map(mut w: Workload) {
    assert_eq!(w.ctrl.fastpath_lds()[0].seq, 0x101);
    w.run(300, 2);
    let before = fastpath_served(&w);
    assert!(before > 0);
    w.fake.change_raid_config();
    assert!(settle(&mut w), "the sync completed and the map was taken");
    assert_eq!(w.ctrl.map_sync_counts(), (1, 0));
    assert_eq!(w.ctrl.fastpath_lds()[0].seq, 0x102, "the new map's sequence number");
    // The next sync is pended with the new sequence number, and the model holds it.
    assert!(w.ctrl.map_sync_pending());
    assert_eq!(w.fake.map_syncs_held(), 2);
    // A FastPath request after the change: served (the model refuses the old number).
    assert_eq!(one(&mut w, IoOp::Write, 8, 0x3C), IoOutcome::Ok);
    assert_eq!(fastpath_served(&w), before + 1);
    assert_eq!(w.fake.raid0_bytes(8, 1), vec![0x3C; 512]);
    w.written.insert(8, 0x3C);
    w.run(300, 2);
    assert!(fastpath_served(&w) > before + 100);
    assert_eq!(w.fake.fastpath_counts().1, 0, "no request refused as stale");
    assert_eq!(w.ctrl.stats.stale_map_refusals.load(Ordering::Relaxed), 0);
    assert_clean(&w.fake);
}

#[test]
fn fastpath_is_off_between_the_sync_reply_and_the_new_map() {
    let mut w = raid0(Generation::Aero);
    w.fake.change_raid_config();
    // The reply reaped, the map not yet taken: the LD path, never the old map.
    for _ in 0..100 {
        w.fake.advance(100);
        let _ = w.fake.take_vectors();
        w.ctrl.reap(0, &mut |_| {});
        if !w.ctrl.map_sync_pending() {
            break;
        }
    }
    assert!(!w.ctrl.map_sync_pending());
    assert!(w.ctrl.fastpath_lds().is_empty());
    let served = fastpath_served(&w);
    assert_eq!(one(&mut w, IoOp::Write, 16, 0x11), IoOutcome::Ok);
    assert_eq!(fastpath_served(&w), served, "LD path");
    assert!(w.ctrl.service_map_sync());
    assert_eq!(one(&mut w, IoOp::Read, 16, 0), IoOutcome::Ok);
    assert_eq!(fastpath_served(&w), served + 1, "FastPath on the new map");
    assert_eq!(w.buf_read(0)[..512], [0x11; 512]);
    assert_clean(&w.fake);
}

#[test]
fn a_refused_new_map_leaves_the_ld_path_and_is_not_synced_again() {
    let mut w = raid0(Generation::Ventura);
    // The map's total size beyond its buffer: its structure is refused.
    w.fake.damage_raid_map(0, &u32::MAX.to_le_bytes());
    w.fake.change_raid_config();
    assert!(settle(&mut w));
    assert_eq!(w.ctrl.map_sync_counts(), (0, 1));
    assert!(w.ctrl.fastpath_lds().is_empty());
    assert!(!w.ctrl.map_sync_pending(), "not pended again (no loop)");
    let served = fastpath_served(&w);
    w.run(300, 2);
    assert_eq!(fastpath_served(&w), served, "every request on the LD path");
    assert_clean(&w.fake);
}

#[test]
fn a_new_map_with_a_bad_ld_leaves_that_ld_on_the_ld_path_and_syncs_again() {
    let mut w = raid0(Generation::Aero);
    // Strip size out of range in LD 0's span map: the map stands, the LD is refused.
    w.fake.damage_raid_map(layout::LD + 0x12, &[40]);
    w.fake.change_raid_config();
    assert!(settle(&mut w));
    assert_eq!(w.ctrl.map_sync_counts(), (1, 0));
    assert!(w.ctrl.fastpath_lds().is_empty());
    assert!(
        w.ctrl.map_sync_pending(),
        "the map's sequence numbers are current: pended"
    );
    let served = fastpath_served(&w);
    w.run(300, 2);
    assert_eq!(fastpath_served(&w), served);
    assert_clean(&w.fake);
}

#[test]
fn a_failed_sync_is_reported_leaves_the_ld_path_and_is_not_retried() {
    let mut w = raid0(Generation::Ventura);
    w.fake.fail_next_map_sync(0x03);
    w.fake.change_raid_config();
    assert!(settle(&mut w));
    assert_eq!(w.ctrl.map_sync_counts(), (0, 1));
    assert!(w.ctrl.fastpath_lds().is_empty());
    assert!(!w.ctrl.map_sync_pending());
    assert!(!w.fake.map_sync_held());
    assert!(!w.ctrl.service_map_sync(), "nothing more to do");
    let served = fastpath_served(&w);
    w.run(200, 2);
    assert_eq!(fastpath_served(&w), served);
    // An OCR reads the map again and pends a new sync.
    w.reset().unwrap();
    assert_eq!(w.ctrl.fastpath_lds()[0].seq, 0x102);
    assert!(w.ctrl.map_sync_pending());
    assert!(w.fake.map_sync_held());
    assert_clean(&w.fake);
}

#[test]
fn an_ocr_cancels_the_sync_and_pends_a_new_one() {
    let mut w = raid0(Generation::Aero);
    w.run(100, 2);
    w.reset().unwrap();
    assert!(w.ctrl.map_sync_pending(), "pended again after the reset");
    assert!(w.fake.map_sync_held());
    assert_eq!(w.fake.map_syncs_held(), 2);
    assert_eq!(w.ctrl.fastpath_lds().len(), 1);
    // The sync still works after the reset.
    w.fake.change_raid_config();
    assert!(settle(&mut w));
    assert_eq!(w.ctrl.fastpath_lds()[0].seq, 0x102);
    let served = fastpath_served(&w);
    w.run(200, 2);
    assert!(fastpath_served(&w) > served);
    assert_eq!(w.fake.fastpath_counts().1, 0);
    assert_clean(&w.fake);
}

#[test]
fn no_map_sync_without_fastpath() {
    let g = Generation::Ventura;
    let mut fc = FakeConfig::new(g);
    fc.lds = Vec::new();
    fc.raid0 = Some(FakeRaid0::new(LD, &PDS, ROWS));
    let mut cfg = config(g, 2);
    cfg.fastpath = false;
    let (fake, ctrl, _) = bring_up(fc, cfg);
    let ctrl = ctrl.unwrap();
    assert!(!ctrl.map_sync_pending());
    assert!(!fake.map_sync_held());
}
