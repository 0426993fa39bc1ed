//! The JBOD sequence map over the model: with the map offered, system PDs take every request
//! by device handle and the map's sequence number (the model checks handle, target id + 255,
//! flags and number), a pended sync follows a configuration change, a stale number is refused
//! and the request issued again, an OCR reads the map again; without the offer, or with
//! `jbod_map = false`, system PDs go by device id as before.

mod common;

use std::sync::Arc;

use common::*;
use megasas_fusion::fake::{FakeConfig, FakeFusion};
use megasas_fusion::{Completion, Generation, IoOp, IoOutcome, IoRequest, JbodRoute};

const PD_A: u8 = 3;
const PD_B: u8 = 9;

fn jbod_firmware(g: Generation, offered: bool) -> FakeConfig {
    let mut fc = FakeConfig::new(g);
    fc.system_pds = vec![(u16::from(PD_A), 4096), (u16::from(PD_B), 2048)];
    fc.jbod_map = offered;
    fc
}

fn up(fc: FakeConfig, use_map: bool) -> (Arc<FakeFusion>, Workload, String) {
    let g = fc.generation;
    let mut cfg = config(g, 2);
    cfg.jbod_map = use_map;
    let (fake, ctrl, report) = bring_up(fc, cfg);
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    ctrl.enable_interrupts();
    (
        Arc::clone(&fake),
        Workload::new(fake, ctrl, 0x7B0D),
        format!("{report}"),
    )
}

/// Submits one request to system PD `pd` (tag `tag`, 4 blocks at `lba`); writes carry `byte`.
fn submit_pd(w: &mut Workload, tag: u32, pd: u8, op: IoOp, lba: u64, byte: u8) {
    w.buf_fill(tag, 2048, if op == IoOp::Write { byte } else { 0 });
    let segs = w.segments(tag, 2048, 1);
    let req = IoRequest {
        system_pd: true,
        target: pd,
        op,
        lba,
        blocks: 4,
        sgl: &segs,
    };
    w.ctrl.submit(tag, 0, &req, u64::from(tag)).unwrap();
}

/// Runs the model and reaps every queue until `n` completions came.
fn complete(w: &mut Workload, n: usize) -> Vec<Completion> {
    let mut done = Vec::new();
    for _ in 0..2000 {
        w.fake.advance(200);
        for q in 0..w.ctrl.queues() {
            w.ctrl.reap(q, &mut |c| done.push(c));
        }
        if done.len() >= n {
            return done;
        }
    }
    panic!("{} of {n} completions", done.len());
}

fn routes(seq: u16) -> Vec<JbodRoute> {
    vec![
        JbodRoute {
            device: PD_A,
            handle: 0x100 + u16::from(PD_A),
            seq,
        },
        JbodRoute {
            device: PD_B,
            handle: 0x100 + u16::from(PD_B),
            seq,
        },
    ]
}

#[test]
fn offered_the_map_system_pds_go_by_handle_and_sequence_number() {
    for g in [Generation::Invader, Generation::Ventura, Generation::Aero] {
        let (fake, mut w, report) = up(jbod_firmware(g, true), true);
        assert!(report.contains("JBOD sequence map offered"), "{report}");
        assert!(
            report.contains("2 of 2 system PD(s) by device handle and sequence number"),
            "{report}"
        );
        assert_eq!(w.ctrl.jbod_map_routes(), routes(0x201), "{g:?}");
        assert!(w.ctrl.jbod_sync_pending(), "{g:?}: a sync is pended after bring-up");
        for (tag, pd) in [(0, PD_A), (1, PD_B), (2, PD_A)] {
            submit_pd(&mut w, tag, pd, IoOp::Write, 8 * u64::from(tag), 0x40 + tag as u8);
        }
        let done = complete(&mut w, 3);
        assert!(done.iter().all(|c| c.outcome == IoOutcome::Ok), "{done:?}");
        submit_pd(&mut w, 5, PD_B, IoOp::Read, 8, 0);
        let done = complete(&mut w, 1);
        assert_eq!(done[0].outcome, IoOutcome::Ok);
        assert!(
            w.buf_read(5)[..2048].iter().all(|&b| b == 0x41),
            "{g:?}: read back by the map"
        );
        assert_eq!(fake.pd_bytes(PD_A, 16 * 512, 2048), vec![0x42; 2048]);
        assert_eq!(fake.jbod_map_counts(), (4, 0), "{g:?}: every request by the map");
        assert_eq!(w.ctrl.jbod_map_counts(), (0, 0, 0, 4));
        assert_clean(&fake);
    }
}

#[test]
fn without_the_offer_or_turned_off_system_pds_go_by_device_id() {
    for (offered, use_map, words) in [
        (false, true, "JBOD sequence map not offered"),
        (true, false, "offered, not used (megasas.jbod_map=off)"),
    ] {
        let (fake, mut w, report) = up(jbod_firmware(Generation::Ventura, offered), use_map);
        assert!(report.contains(words), "{report}");
        assert!(w.ctrl.jbod_map_routes().is_empty());
        assert!(!w.ctrl.jbod_sync_pending());
        submit_pd(&mut w, 0, PD_A, IoOp::Write, 0, 0x33);
        assert_eq!(complete(&mut w, 1)[0].outcome, IoOutcome::Ok);
        assert_eq!(fake.pd_bytes(PD_A, 0, 2048), vec![0x33; 2048]);
        assert_eq!(fake.jbod_map_counts(), (0, 0));
        assert_clean(&fake);
    }
}

#[test]
fn a_configuration_change_brings_the_new_map_through_the_pended_sync() {
    let (fake, mut w, _) = up(jbod_firmware(Generation::Aero, true), true);
    fake.change_raid_config();
    // The sync's reply turns the map off; the tick's service takes the new one and pends again.
    complete_dcmd(&mut w);
    assert!(
        w.ctrl.jbod_map_routes().is_empty(),
        "off between the reply and the new map"
    );
    submit_pd(&mut w, 0, PD_A, IoOp::Write, 0, 0x51);
    assert_eq!(complete(&mut w, 1)[0].outcome, IoOutcome::Ok);
    assert_eq!(fake.jbod_map_counts(), (0, 0), "meanwhile by device id");
    assert!(w.ctrl.service_jbod_sync());
    assert_eq!(w.ctrl.jbod_map_routes(), routes(0x202));
    assert!(w.ctrl.jbod_sync_pending());
    submit_pd(&mut w, 1, PD_B, IoOp::Write, 0, 0x52);
    assert_eq!(complete(&mut w, 1)[0].outcome, IoOutcome::Ok);
    assert_eq!(fake.jbod_map_counts(), (1, 0));
    assert_eq!(w.ctrl.jbod_map_counts().0, 1, "one map taken from a sync");
    assert_clean(&fake);
}

/// Reaps queue 0 until the pended sync's reply has been consumed.
fn complete_dcmd(w: &mut Workload) {
    for _ in 0..100 {
        w.fake.advance(1000);
        w.ctrl.reap(0, &mut |_| {});
        if !w.ctrl.jbod_sync_pending() {
            return;
        }
    }
    panic!("the JBOD sync was never answered");
}

#[test]
fn a_stale_sequence_number_is_refused_and_the_request_goes_again_by_device_id() {
    let (fake, mut w, _) = up(jbod_firmware(Generation::Ventura, true), true);
    // The firmware's map moves on before the driver has seen the sync's reply: the next request
    // still carries 0x201.
    fake.change_raid_config();
    submit_pd(&mut w, 0, PD_A, IoOp::Write, 0, 0x61);
    let done = complete(&mut w, 1);
    assert_eq!(done[0].outcome, IoOutcome::StaleMap);
    assert_eq!(fake.jbod_map_counts(), (0, 1));
    assert_eq!(w.ctrl.jbod_map_counts().2, 1);
    assert!(w.ctrl.jbod_map_routes().is_empty(), "the map is off");
    assert_eq!(fake.pd_bytes(PD_A, 0, 512), vec![0; 512], "nothing moved");
    // Issued again: by device id, then by the new map once the tick took it.
    submit_pd(&mut w, 0, PD_A, IoOp::Write, 0, 0x61);
    assert_eq!(complete(&mut w, 1)[0].outcome, IoOutcome::Ok);
    assert_eq!(fake.pd_bytes(PD_A, 0, 2048), vec![0x61; 2048]);
    assert!(w.ctrl.service_jbod_sync());
    submit_pd(&mut w, 1, PD_A, IoOp::Read, 0, 0);
    assert_eq!(complete(&mut w, 1)[0].outcome, IoOutcome::Ok);
    assert!(w.buf_read(1)[..2048].iter().all(|&b| b == 0x61));
    assert_eq!(fake.jbod_map_counts(), (1, 1));
    assert_clean(&fake);
}

#[test]
fn an_ocr_reads_the_map_again_and_pends_a_new_sync() {
    let (fake, mut w, _) = up(jbod_firmware(Generation::Aero, true), true);
    fake.hold_next_io(1);
    submit_pd(&mut w, 0, PD_B, IoOp::Write, 0, 0x71);
    w.fake.advance(5_000);
    let mut returned = Vec::new();
    let mut report = megasas_fusion::Report::new();
    w.ctrl.reset(&mut |c| returned.push(c), &mut report).unwrap();
    assert_eq!(returned.len(), 1);
    assert_eq!(returned[0].outcome, IoOutcome::Reset);
    assert!(format!("{report}").contains("OCR: JBOD map"), "{report}");
    assert_eq!(w.ctrl.jbod_map_routes(), routes(0x201));
    assert!(w.ctrl.jbod_sync_pending(), "a new sync after the reset");
    submit_pd(&mut w, 1, PD_B, IoOp::Write, 0, 0x72);
    assert_eq!(complete(&mut w, 1)[0].outcome, IoOutcome::Ok);
    assert_eq!(fake.pd_bytes(PD_B, 0, 2048), vec![0x72; 2048]);
    assert_clean(&fake);
}

/// Firmware without a JBOD map whose RAID map (dynamic on Ventura and Aero, legacy on Invader)
/// lists the system PDs' handles.
fn raid_map_handles_firmware(g: Generation) -> FakeConfig {
    let mut fc = jbod_firmware(g, false);
    fc.raid_map_jbod_handles = true;
    fc
}

#[test]
fn without_a_jbod_map_system_pds_go_by_the_raid_maps_handle() {
    for g in [Generation::Ventura, Generation::Aero, Generation::Invader] {
        let (fake, mut w, report) = up(raid_map_handles_firmware(g), true);
        assert!(
            report.contains(
                "2 of 2 system PD(s) by the RAID map's device handle: [PD 3 handle 0x103, PD 9 handle 0x109]"
            ),
            "{report}"
        );
        assert!(w.ctrl.jbod_by_raid_map(), "{g:?}");
        assert_eq!(w.ctrl.jbod_map_routes(), routes(0), "{g:?}: no sequence number");
        assert!(!w.ctrl.jbod_sync_pending(), "{g:?}: no JBOD map to sync");
        for (tag, pd) in [(0, PD_A), (1, PD_B)] {
            submit_pd(&mut w, tag, pd, IoOp::Write, 8, 0x80 + tag as u8);
        }
        assert!(complete(&mut w, 2).iter().all(|c| c.outcome == IoOutcome::Ok));
        submit_pd(&mut w, 2, PD_B, IoOp::Read, 8, 0);
        assert_eq!(complete(&mut w, 1)[0].outcome, IoOutcome::Ok);
        assert!(w.buf_read(2)[..2048].iter().all(|&b| b == 0x81), "{g:?}");
        assert_eq!(fake.pd_bytes(PD_A, 8 * 512, 2048), vec![0x80; 2048]);
        // The model checks target = device id, no sequence number or flags, the FastPath IoFlag.
        assert_eq!(fake.jbod_raid_map_served(), 3, "{g:?}");
        assert_eq!(w.ctrl.jbod_raid_map_ios(), 3);
        assert_eq!(fake.jbod_map_counts(), (0, 0));
        assert_eq!(w.ctrl.jbod_map_counts().3, 0, "none counted as by the JBOD map");
        assert_clean(&fake);
    }
}

#[test]
fn an_offered_jbod_map_turned_off_keeps_system_pds_off_the_raid_maps_handles() {
    // Linux then sends by device id too: the RAID map's handles stand in only without the offer.
    let mut fc = raid_map_handles_firmware(Generation::Ventura);
    fc.jbod_map = true;
    let (fake, mut w, report) = up(fc, false);
    assert!(!report.contains("by the RAID map's device handle"), "{report}");
    assert!(w.ctrl.jbod_map_routes().is_empty());
    submit_pd(&mut w, 0, PD_A, IoOp::Write, 0, 0x35);
    assert_eq!(complete(&mut w, 1)[0].outcome, IoOutcome::Ok);
    assert_eq!(fake.pd_bytes(PD_A, 0, 2048), vec![0x35; 2048]);
    assert_eq!(fake.jbod_raid_map_served(), 0);
    assert_clean(&fake);
}

#[test]
fn a_raid_map_change_moves_system_pds_to_the_new_maps_handles() {
    let (fake, mut w, _) = up(raid_map_handles_firmware(Generation::Aero), true);
    assert!(w.ctrl.map_sync_pending());
    fake.change_raid_config();
    for _ in 0..100 {
        w.fake.advance(1000);
        w.ctrl.reap(0, &mut |_| {});
        if !w.ctrl.map_sync_pending() {
            break;
        }
    }
    assert!(!w.ctrl.map_sync_pending(), "the map sync was answered");
    assert!(
        w.ctrl.jbod_map_routes().is_empty(),
        "off between the reply and the new map"
    );
    submit_pd(&mut w, 0, PD_A, IoOp::Write, 0, 0x91);
    assert_eq!(complete(&mut w, 1)[0].outcome, IoOutcome::Ok);
    assert_eq!(fake.jbod_raid_map_served(), 0, "meanwhile by device id");
    assert!(w.ctrl.service_map_sync());
    assert_eq!(w.ctrl.jbod_map_routes(), routes(0));
    submit_pd(&mut w, 1, PD_A, IoOp::Read, 0, 0);
    assert_eq!(complete(&mut w, 1)[0].outcome, IoOutcome::Ok);
    assert!(w.buf_read(1)[..2048].iter().all(|&b| b == 0x91));
    assert_eq!(fake.jbod_raid_map_served(), 1);
    assert_clean(&fake);
}
