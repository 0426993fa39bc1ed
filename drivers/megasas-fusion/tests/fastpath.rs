//! FastPath over the RAID map: a RAID-0 LD of the model (two member disks, 64 KiB strips)
//! described by a dynamic map (Ventura, Aero) or by the legacy 64-LD or extended 256-LD map
//! (Invader). Reads and writes inside one strip go to the member disk; the
//! model checks each against its own striping and refuses a stale sequence number; the blocks
//! must sit where the firmware stripes them. A map with out-of-range values, a stale map and
//! `fastpath = false` keep every request on the firmware LD path, and the data stays right.
//! A RAID-1 LD (two mirrored disks): reads go FastPath to either disk, balanced; writes take
//! the LD path (the model mirrors them); a wrong map entry or a stale one means the LD path.

mod common;

use std::sync::Arc;

use common::*;
use megasas_fusion::fake::{FakeConfig, FakeFusion, FakeRaid0};
use megasas_fusion::raidmap::layout;
use megasas_fusion::{Generation, IoOp, IoOutcome, IoRequest, Segment};

/// Member PD ids (device handles 0x104 and 0x107).
const PDS: [u16; 2] = [4, 7];
/// Strips per arm: 2 × 16 × 128 = 4096 blocks, past every tag's blocks (tag × 8 + 4).
const ROWS: u64 = 16;
const STRIP: u64 = 128;

fn raid0_config(g: Generation, tweak: impl FnOnce(&mut FakeRaid0)) -> FakeConfig {
    let mut fc = FakeConfig::new(g);
    fc.lds = Vec::new();
    let mut r = FakeRaid0::new(LD, &PDS, ROWS);
    tweak(&mut r);
    fc.raid0 = Some(r);
    fc
}

fn workload(fc: FakeConfig, fastpath: bool) -> (Workload, String) {
    let g = fc.generation;
    let mut cfg = config(g, 2);
    cfg.fastpath = fastpath;
    let (fake, ctrl, report) = bring_up(fc, cfg);
    let ctrl = ctrl.unwrap_or_else(|e| panic!("bring-up: {e}\n{report}"));
    ctrl.enable_interrupts();
    (Workload::new(fake, ctrl, 0xFA57), alloc_report(&report))
}

fn alloc_report(r: &megasas_fusion::Report) -> String {
    format!("{r}")
}

/// Every block the workload wrote reads back from the model's arms, placed by its striping.
fn assert_blocks_where_the_firmware_stripes(w: &Workload) {
    assert!(!w.written.is_empty());
    for (&lba, &pattern) in &w.written {
        let got = w.fake.raid0_bytes(lba, 1);
        assert!(
            got.iter().all(|&b| b == pattern),
            "LD block {lba}: {:x?}.., want {pattern:#x}",
            &got[..8]
        );
        // Independently of the model's helper: strip k of the LD is strip k / 2 of arm k % 2.
        let strip = lba / STRIP;
        let on_arm = (strip / 2) * STRIP + lba % STRIP;
        let raw = w.fake.arm_bytes((strip % 2) as usize, on_arm as usize * 512, 512);
        assert!(raw.iter().all(|&b| b == pattern), "arm {} block {on_arm}", strip % 2);
    }
}

#[test]
fn raid0_reads_and_writes_go_fastpath_and_land_where_the_firmware_stripes() {
    for (g, ext, format) in [
        (Generation::Ventura, false, "dynamic"),
        (Generation::Aero, false, "dynamic"),
        (Generation::Invader, false, "legacy 64-LD"),
        (Generation::Invader, true, "extended 256-LD"),
    ] {
        let mut fc = raid0_config(g, |_| {});
        fc.ext_lds = ext;
        let (mut w, report) = workload(fc, true);
        assert!(
            report.contains(&format!(
                "| {format} map: 1 LD(s); LD 0: RAID-0 over 2 arms (handles [104, 107]), strip 64 KiB, sequence 0x101, FastPath reads and writes"
            )),
            "{report}"
        );
        assert_eq!(w.ctrl.fastpath_lds().len(), 1);
        w.run(2000, 12);
        let (served, stale) = w.fake.fastpath_counts();
        let sent = w.ctrl.stats.fastpath_ios.load(std::sync::atomic::Ordering::Relaxed);
        assert!(served > 1000, "{g:?}: {served} FastPath requests served");
        assert_eq!(
            (served, stale),
            (sent, 0),
            "{g:?}: every FastPath request the driver sent was served"
        );
        assert_eq!(w.failed, 0);
        assert_blocks_where_the_firmware_stripes(&w);
        assert_clean(&w.fake);
    }
}

/// One request on tag 0, serviced to completion.
fn one(w: &mut Workload, op: IoOp, lba: u64, blocks: u32, fill: u8) -> (IoOutcome, Vec<u8>) {
    let len = blocks as usize * 512;
    w.buf_fill(0, len, fill);
    let seg = [Segment {
        phys: w.buf.phys,
        len: len as u32,
    }];
    let req = IoRequest {
        system_pd: false,
        target: LD,
        op,
        lba,
        blocks,
        sgl: &seg,
    };
    w.ctrl.submit(0, 0, &req, 0).unwrap();
    let mut got = None;
    for _ in 0..10_000 {
        w.fake.advance(100);
        let _ = w.fake.take_vectors();
        w.ctrl.reap(0, &mut |c| got = Some(c));
        if got.is_some() {
            break;
        }
    }
    let c = got.expect("no completion");
    (c.outcome, w.buf_read(0)[..len].to_vec())
}

#[test]
fn a_request_across_a_strip_takes_the_ld_path_and_reads_back_by_fastpath() {
    let (mut w, _) = workload(raid0_config(Generation::Aero, |_| {}), true);
    // Blocks 126..=129: the end of strip 0 (arm 0) and the start of strip 1 (arm 1).
    let (o, _) = one(&mut w, IoOp::Write, 126, 4, 0x5A);
    assert_eq!(o, IoOutcome::Ok);
    assert_eq!(w.fake.fastpath_counts().0, 0, "a write across strips is not FastPath");
    assert_eq!(w.fake.arm_bytes(0, 126 * 512, 1024), vec![0x5A; 1024]);
    assert_eq!(w.fake.arm_bytes(1, 0, 1024), vec![0x5A; 1024]);
    // Each half read inside its strip: FastPath, from the right disk.
    let (o, data) = one(&mut w, IoOp::Read, 128, 2, 0);
    assert_eq!((o, data), (IoOutcome::Ok, vec![0x5A; 1024]));
    let (o, data) = one(&mut w, IoOp::Read, 126, 2, 0);
    assert_eq!((o, data), (IoOutcome::Ok, vec![0x5A; 1024]));
    assert_eq!(w.fake.fastpath_counts().0, 2);
    assert_clean(&w.fake);
}

#[test]
fn fastpath_off_keeps_every_request_on_the_ld_path() {
    let (mut w, report) = workload(raid0_config(Generation::Ventura, |_| {}), false);
    assert!(w.ctrl.fastpath_lds().is_empty());
    assert!(!report.contains("RAID map"), "the map is not even read: {report}");
    w.run(1000, 8);
    assert_eq!(w.fake.fastpath_counts(), (0, 0));
    assert_eq!(w.ctrl.stats.fastpath_ios.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_blocks_where_the_firmware_stripes(&w);
    assert_clean(&w.fake);
}

#[test]
fn a_stale_sequence_number_is_refused_and_the_request_goes_again_on_the_ld_path() {
    let (mut w, _) = workload(raid0_config(Generation::Ventura, |_| {}), true);
    w.run(300, 4);
    assert!(w.fake.fastpath_counts().0 > 0);
    w.fake.change_raid_config();
    // The next FastPath request carries the old sequence number.
    let (o, _) = one(&mut w, IoOp::Write, 8 * 300, 2, 0x77);
    assert_eq!(o, IoOutcome::StaleMap);
    assert_eq!(w.fake.fastpath_counts().1, 1, "the model refused it");
    assert_eq!(
        w.fake.arm_bytes(0, 8 * 300 * 512 % (ROWS as usize * 128 * 512), 512)[0],
        0,
        "nothing moved"
    );
    assert!(
        w.ctrl.fastpath_lds().is_empty(),
        "FastPath is off after a stale refusal"
    );
    assert_eq!(
        w.ctrl
            .stats
            .stale_map_refusals
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // Issued again (as the blk binding requeues it): the LD path, and the data lands.
    let served = w.fake.fastpath_counts().0;
    let (o, _) = one(&mut w, IoOp::Write, 8 * 300, 2, 0x77);
    assert_eq!(o, IoOutcome::Ok);
    assert_eq!(w.fake.raid0_bytes(8 * 300, 2), vec![0x77; 1024]);
    w.written.insert(8 * 300, 0x77);
    w.written.insert(8 * 300 + 1, 0x77);
    w.run(500, 4);
    assert_eq!(
        w.fake.fastpath_counts().0,
        served,
        "no FastPath after the map went stale"
    );
    assert_blocks_where_the_firmware_stripes(&w);
    assert_clean(&w.fake);
}

#[test]
fn an_ocr_reads_the_map_again_and_routes_by_the_map_it_reads() {
    let (mut w, _) = workload(raid0_config(Generation::Aero, |_| {}), true);
    w.run(200, 4);
    w.reset().unwrap();
    assert_eq!(w.ctrl.fastpath_lds().len(), 1, "same map after the reset");
    // The change completes the pended sync, whose reply the reset drains; the map read again
    // after the reset is the new one either way.
    w.fake.change_raid_config();
    w.reset().unwrap();
    assert_eq!(w.ctrl.fastpath_lds()[0].seq, 0x102, "the changed map is in use");
    let served = w.fake.fastpath_counts().0;
    w.run(300, 4);
    assert!(w.fake.fastpath_counts().0 > served);
    assert_eq!(w.fake.fastpath_counts().1, 0, "nothing routed by the old map");
    assert_blocks_where_the_firmware_stripes(&w);
    assert_clean(&w.fake);
}

#[test]
fn a_map_with_out_of_range_values_is_refused_and_the_ld_path_serves_the_ld() {
    let ld = layout::LD;
    let damages: [(&str, usize, Vec<u8>); 9] = [
        ("strip size 2^16 blocks", ld + 0x12, vec![16]),
        ("no arms", ld + 0x13, vec![0]),
        ("33 arms", ld + 0x13, vec![33]),
        ("RAID level 5", ld + 0x11, vec![5]),
        ("data arm twice", ld + 0x81, vec![0]),
        ("array beyond the arrays", ld + 0xA0 + 0x18, vec![9, 0]),
        ("PD without a handle", layout::HANDLES + 7 * 8, vec![0xFF, 0xFF]),
        ("LD larger than its arms", ld + 0x08, vec![0xFF; 8]),
        ("descriptor table count", 0x0C, vec![40, 0, 0, 0]),
    ];
    for (what, at, bytes) in damages {
        let fc = raid0_config(Generation::Ventura, |r| r.damage = Some((at, bytes)));
        let (mut w, report) = workload(fc, true);
        assert!(w.ctrl.fastpath_lds().is_empty(), "{what}");
        assert!(report.contains("RAID map refused"), "{what}: {report}");
        w.run(400, 4);
        assert_eq!(w.fake.fastpath_counts(), (0, 0), "{what}");
        assert_eq!(w.failed, 0, "{what}");
        assert_blocks_where_the_firmware_stripes(&w);
        assert_clean(&w.fake);
    }
}

#[test]
fn a_firmware_without_raid_ld_gives_an_empty_map_and_no_fastpath() {
    let (fake, ctrl, report) = bring_up(FakeConfig::ventura(), config(Generation::Ventura, 2));
    let ctrl = ctrl.unwrap();
    assert!(ctrl.fastpath_lds().is_empty());
    assert!(format!("{report}").contains("RAID map"), "{report}");
    drop(ctrl);
    assert_clean(&Arc::clone(&fake) as &FakeFusion);
    // Invader reads the legacy map (the model answers an empty one), Thunderbolt no map.
    let (fake, ctrl, report) = bring_up(FakeConfig::invader(), config(Generation::Invader, 2));
    assert!(ctrl.unwrap().fastpath_lds().is_empty());
    assert!(format!("{report}").contains("| legacy 64-LD map: 0 LD(s)"), "{report}");
    assert_clean(&fake);
    let g = Generation::Thunderbolt;
    let (fake, ctrl, report) = bring_up(FakeConfig::new(g), config(g, 2));
    assert!(ctrl.unwrap().fastpath_lds().is_empty());
    assert!(!format!("{report}").contains("RAID map"), "{report}");
    assert_clean(&fake);
}

#[test]
fn no_memory_for_the_map_means_the_ld_path_not_a_failed_bring_up() {
    // Where the IOC INIT frame lands (the allocations before the map's are the same every
    // time), from a first bring-up's report.
    let (_, ctrl, report) = bring_up(
        raid0_config(Generation::Ventura, |_| {}),
        config(Generation::Ventura, 2),
    );
    assert!(ctrl.is_ok());
    let text = format!("{report}");
    let init = text
        .split(" init 0x")
        .nth(1)
        .and_then(|rest| u64::from_str_radix(rest.split(|c: char| !c.is_ascii_hexdigit()).next()?, 16).ok())
        .expect("the memory step names the IOC INIT frame");
    // Room for the IOC INIT frame and the DCMD frames, not for the 64 KiB map.
    let fake = FakeFusion::new(raid0_config(Generation::Ventura, |_| {}));
    fake.memory().set_limit(Some(init + 4096 + 4 * (256 + 8192) + 4096));
    let mut report = megasas_fusion::Report::new();
    let ctrl = megasas_fusion::Controller::bring_up(
        fake.mmio(),
        &fake.dma(),
        fake.delay(),
        config(Generation::Ventura, 2),
        &mut report,
    )
    .unwrap_or_else(|e| panic!("bring-up failed: {e}\n{report}"));
    assert!(ctrl.fastpath_lds().is_empty());
    assert!(format!("{report}").contains("no buffer for 65536 bytes"), "{report}");
    fake.memory().set_limit(None);
    ctrl.enable_interrupts();
    let mut w = Workload::new(Arc::clone(&fake), ctrl, 5);
    w.run(300, 4);
    assert_eq!(w.fake.fastpath_counts(), (0, 0));
    assert_blocks_where_the_firmware_stripes(&w);
    assert_clean(&fake);
}

/// The RAID-1 LD's PD ids (handles 0x104 and 0x107), and strips per arm (32 × 128 = 4096
/// blocks, past every tag's blocks).
const MIRROR_PDS: [u16; 2] = [4, 7];
const MIRROR_ROWS: u64 = 32;

fn raid1_config(g: Generation, tweak: impl FnOnce(&mut FakeRaid0)) -> FakeConfig {
    let mut fc = FakeConfig::new(g);
    fc.lds = Vec::new();
    let mut r = FakeRaid0::mirror(LD, MIRROR_PDS, MIRROR_ROWS);
    tweak(&mut r);
    fc.raid0 = Some(r);
    fc
}

/// Every block the workload wrote is on both disks of the mirror, at its LD block.
fn assert_blocks_on_both_mirrors(w: &Workload) {
    assert!(!w.written.is_empty());
    for (&lba, &pattern) in &w.written {
        for arm in 0..2 {
            let raw = w.fake.arm_bytes(arm, lba as usize * 512, 512);
            assert!(
                raw.iter().all(|&b| b == pattern),
                "arm {arm} block {lba}: {:x?}..",
                &raw[..8]
            );
        }
    }
}

fn raid1_reads(w: &Workload) -> [u64; 2] {
    let r = &w.ctrl.stats.raid1_reads;
    [0, 1].map(|i| r[i].load(std::sync::atomic::Ordering::Relaxed))
}

#[test]
fn raid1_reads_go_fastpath_to_both_disks_balanced_and_writes_take_the_ld_path() {
    for g in [Generation::Ventura, Generation::Aero, Generation::Invader] {
        let (mut w, report) = workload(raid1_config(g, |_| {}), true);
        assert!(
            report.contains(
                "LD 0: RAID-1 over 2 arms (handles [104, 107]), strip 64 KiB, sequence 0x101, FastPath reads"
            ),
            "{report}"
        );
        w.run(3000, 12);
        let by_arm = w.fake.fastpath_by_arm();
        let sent = raid1_reads(&w);
        let (served, stale) = w.fake.fastpath_counts();
        assert_eq!(
            by_arm,
            sent.to_vec(),
            "{g:?}: each arm served the reads the driver sent it"
        );
        assert_eq!(stale, 0);
        assert_eq!(
            served,
            w.ctrl.stats.fastpath_ios.load(std::sync::atomic::Ordering::Relaxed),
            "{g:?}: every FastPath request is a read the model served (a FastPath write is a violation)"
        );
        // Half the requests are reads: all of them FastPath, neither disk taking most.
        assert!(served > 1000, "{g:?}: {served} FastPath reads");
        assert!(sent.iter().all(|&n| n * 3 > served), "{g:?}: reads per arm {sent:?}");
        assert_eq!(w.failed, 0);
        for pd in MIRROR_PDS {
            assert_eq!(
                w.ctrl.raid1_reads_outstanding(pd),
                0,
                "{g:?}: PD {pd}: every read handed back"
            );
        }
        assert_blocks_on_both_mirrors(&w);
        assert_clean(&w.fake);
    }
}

#[test]
fn a_raid1_map_with_a_wrong_entry_leaves_reads_and_writes_on_the_ld_path() {
    let ld = layout::LD;
    let damages: [(&str, usize, Vec<u8>); 4] = [
        ("degraded (not optimal)", ld + 0x1A, vec![2]),
        ("two data arms", ld + 0x14, vec![2]),
        ("data arm 5", ld + 0x80, vec![5]),
        ("mirror PD without a handle", layout::HANDLES + 7 * 8, vec![0xFF, 0xFF]),
    ];
    for (what, at, bytes) in damages {
        let (mut w, report) = workload(raid1_config(Generation::Aero, |r| r.damage = Some((at, bytes))), true);
        assert!(w.ctrl.fastpath_lds().is_empty(), "{what}");
        assert!(report.contains("RAID map refused"), "{what}: {report}");
        w.run(600, 4);
        assert_eq!(w.fake.fastpath_counts(), (0, 0), "{what}");
        assert_eq!(raid1_reads(&w), [0, 0], "{what}");
        assert_eq!(w.failed, 0, "{what}");
        assert_blocks_on_both_mirrors(&w);
        assert_clean(&w.fake);
    }
}

#[test]
fn fastpath_off_keeps_raid1_reads_on_the_ld_path() {
    let (mut w, _) = workload(raid1_config(Generation::Aero, |_| {}), false);
    assert!(w.ctrl.fastpath_lds().is_empty());
    w.run(600, 4);
    assert_eq!(w.fake.fastpath_counts(), (0, 0));
    assert_eq!(raid1_reads(&w), [0, 0]);
    assert_blocks_on_both_mirrors(&w);
    assert_clean(&w.fake);
}

#[test]
fn a_stale_raid1_read_is_refused_handed_back_uncounted_and_read_again_on_the_ld_path() {
    let (mut w, _) = workload(raid1_config(Generation::Ventura, |_| {}), true);
    let (o, _) = one(&mut w, IoOp::Write, 640, 4, 0x3C);
    assert_eq!(o, IoOutcome::Ok);
    assert_eq!(w.fake.fastpath_counts().0, 0, "a RAID-1 write is not FastPath");
    assert_eq!(
        w.fake.arm_bytes(0, 640 * 512, 2048),
        w.fake.arm_bytes(1, 640 * 512, 2048)
    );
    let (o, data) = one(&mut w, IoOp::Read, 640, 4, 0);
    assert_eq!((o, data), (IoOutcome::Ok, vec![0x3C; 2048]));
    assert_eq!(w.fake.fastpath_counts(), (1, 0));
    w.fake.change_raid_config();
    let (o, _) = one(&mut w, IoOp::Read, 640, 4, 0);
    assert_eq!(o, IoOutcome::StaleMap);
    assert_eq!(w.fake.fastpath_counts(), (1, 1), "the model refused it");
    assert!(
        w.ctrl.fastpath_lds().is_empty(),
        "FastPath is off after a stale refusal"
    );
    for pd in MIRROR_PDS {
        assert_eq!(
            w.ctrl.raid1_reads_outstanding(pd),
            0,
            "PD {pd}: the refused read is not outstanding"
        );
    }
    // Issued again: the LD path, the data right.
    let (o, data) = one(&mut w, IoOp::Read, 640, 4, 0);
    assert_eq!((o, data), (IoOutcome::Ok, vec![0x3C; 2048]));
    assert_eq!(w.fake.fastpath_counts(), (1, 1));
    assert_clean(&w.fake);
}

#[test]
fn a_reset_hands_back_outstanding_raid1_reads_and_their_counts() {
    let (mut w, _) = workload(raid1_config(Generation::Aero, |_| {}), true);
    // Reads the firmware holds: the reset returns them, and no arm keeps them counted.
    w.fake.hold_next_io(6);
    for tag in 0..6 {
        w.submit(tag, 0, IoOp::Read, 2, 1).unwrap();
    }
    w.service(1000);
    let outstanding: u32 = MIRROR_PDS.iter().map(|&pd| w.ctrl.raid1_reads_outstanding(pd)).sum();
    assert_eq!(outstanding, 6, "six held reads counted");
    assert!(
        MIRROR_PDS.iter().all(|&pd| w.ctrl.raid1_reads_outstanding(pd) == 3),
        "balanced 3 and 3"
    );
    w.reset().unwrap();
    assert_eq!(w.reset_returned.len(), 6);
    for pd in MIRROR_PDS {
        assert_eq!(w.ctrl.raid1_reads_outstanding(pd), 0, "PD {pd}");
    }
    assert_eq!(w.ctrl.fastpath_lds().len(), 1, "the same map after the reset");
    w.run(300, 4);
    assert_blocks_on_both_mirrors(&w);
    assert_clean(&w.fake);
}

/// The RAID-1 LD with FastPath writes in its capabilities, as shipped Ventura and Aero firmware
/// gives it.
fn raid1_fp_writes(g: Generation) -> FakeConfig {
    raid1_config(g, |r| r.caps = megasas_fusion::raidmap::CAPS_FP_READ_WRITE)
}

fn raid1_write_pairs(w: &Workload) -> u64 {
    w.ctrl
        .stats
        .raid1_write_pairs
        .load(std::sync::atomic::Ordering::Relaxed)
}

const MEDIUM_ERROR: megasas_fusion::fake::Failure = megasas_fusion::fake::Failure {
    status: 0x2D,
    scsi_status: 0x02,
    sense: Some((0x3, 0x11, 0x00)),
};

#[test]
fn raid1_writes_go_fastpath_as_pairs_one_per_disk_and_land_on_both() {
    for g in [Generation::Ventura, Generation::Aero] {
        let (mut w, report) = workload(raid1_fp_writes(g), true);
        assert!(report.contains("sequence 0x101, FastPath reads and writes"), "{report}");
        w.run(3000, 12);
        let pairs = raid1_write_pairs(&w);
        assert!(
            pairs > 1000,
            "{g:?}: {pairs} write pairs (half the requests are writes)"
        );
        assert_eq!(
            w.fake.raid1_write_pairs(),
            pairs,
            "{g:?}: the model saw both halves of every pair the driver sent"
        );
        assert_eq!(w.fake.raid1_halves_waiting(), 0, "{g:?}: no half left alone");
        let (served, stale) = w.fake.fastpath_counts();
        assert_eq!(stale, 0);
        let reads: u64 = raid1_reads(&w).iter().sum();
        assert_eq!(
            served,
            reads + 2 * pairs,
            "{g:?}: every write went to both disks by FastPath"
        );
        assert_eq!(w.failed, 0);
        assert!(w.inflight.is_empty());
        assert_blocks_on_both_mirrors(&w);
        assert_clean(&w.fake);
    }
}

#[test]
fn fastpath_writes_carry_the_cache_bypass_marks_exactly_when_the_map_offers_them() {
    use megasas_fusion::raidmap::CAP_CACHE_BYPASS;
    for g in [Generation::Ventura, Generation::Aero] {
        for (mirror, bypass) in [(false, true), (true, true), (false, false), (true, false)] {
            let caps = megasas_fusion::raidmap::CAPS_FP_READ_WRITE | if bypass { CAP_CACHE_BYPASS } else { 0 };
            let fc = if mirror {
                raid1_config(g, |r| r.caps = caps)
            } else {
                raid0_config(g, |r| r.caps = caps)
            };
            let (mut w, report) = workload(fc, true);
            assert_eq!(
                report.contains("FastPath reads and writes, writes bypassing the controller cache (SLD)"),
                bypass,
                "{g:?} mirror {mirror}: {report}"
            );
            w.run(1500, 12);
            let (served, _) = w.fake.fastpath_counts();
            let marked = w.fake.cache_bypass_writes();
            // The model refuses an unmarked write to a capable LD and a marked request anywhere
            // else (`assert_clean` below): these counts show both kinds really went by FastPath.
            if bypass {
                assert!(
                    marked > 300,
                    "{g:?} mirror {mirror}: {marked} marked writes of {served}"
                );
                assert!(marked + 300 < served, "{g:?} mirror {mirror}: reads are never marked");
                if mirror {
                    assert_eq!(
                        marked,
                        2 * raid1_write_pairs(&w),
                        "{g:?}: both halves of every pair marked"
                    );
                }
            } else {
                assert_eq!(marked, 0, "{g:?} mirror {mirror}");
                assert!(served > 600, "{g:?} mirror {mirror}: {served} FastPath requests");
            }
            assert_eq!(w.failed, 0);
            assert_clean(&w.fake);
        }
    }
}

/// Writes `blocks` blocks at tag `tag`'s LBA and waits for them: which way the write went, as
/// (FastPath pairs, PCIe-bandwidth LD-path writes, LD-path writes marked LDIO_BW_LIMIT) added.
fn one_raid1_write(w: &mut Workload, tag: u32, blocks: u32) -> (u64, u64, u64) {
    let count = |w: &Workload| {
        (
            w.fake.raid1_write_pairs(),
            w.ctrl
                .stats
                .raid1_bw_limited_ld_writes
                .load(std::sync::atomic::Ordering::Relaxed),
            w.fake.ldio_bw_limit_writes(),
        )
    };
    let before = count(w);
    if blocks <= 8 {
        w.submit(tag, 0, IoOp::Write, blocks, 1).unwrap();
    } else {
        w.submit_large_write(tag, u64::from(tag) * 8, blocks).unwrap();
    }
    for _ in 0..50 {
        w.service(1000);
    }
    assert!(w.inflight.is_empty(), "the write completed");
    let after = count(w);
    (after.0 - before.0, after.1 - before.1, after.2 - before.2)
}

#[test]
fn a_pcie_bandwidth_limited_controller_sends_large_raid1_writes_and_the_three_after_them_on_the_ld_path() {
    const PAIR: (u64, u64, u64) = (1, 0, 0);
    const HINTED: (u64, u64, u64) = (0, 1, 0);
    const LARGE: (u64, u64, u64) = (0, 1, 1);
    // Tag 16: LBA 128, the start of strip 1, so 128 blocks (64 KiB) lie inside one strip and
    // could go as a pair; tag 1: one block at LBA 8.
    for (g, limited) in [
        (Generation::Ventura, true),
        (Generation::Aero, true),
        (Generation::Aero, false),
    ] {
        let mut fc = raid1_fp_writes(g);
        fc.pcie_bw_limited = limited;
        let mut cfg = config(g, 2);
        cfg.pcie_bw_limited = limited;
        let (fake, ctrl, report) = bring_up(fc, cfg);
        let ctrl = ctrl.unwrap_or_else(|e| panic!("bring-up: {e}\n{report}"));
        ctrl.enable_interrupts();
        let mut w = Workload::new(fake, ctrl, 0xB0);
        let ways: Vec<_> = [1, 1, 1, 1, 1, 128, 1, 1, 1, 1, 128, 128, 1]
            .into_iter()
            .map(|blocks| one_raid1_write(&mut w, if blocks == 1 { 1 } else { 16 }, blocks))
            .collect();
        let want = if limited {
            // The hint starts at 4 (three small writes on the LD path), each large write goes
            // on the LD path marked and sets it to 4 again.
            vec![
                HINTED, HINTED, HINTED, PAIR, PAIR, LARGE, HINTED, HINTED, HINTED, PAIR, LARGE, LARGE, HINTED,
            ]
        } else {
            vec![PAIR; 13]
        };
        assert_eq!(ways, want, "{g:?}, PCIe bandwidth limited: {limited}");
        assert_blocks_on_both_mirrors(&w);
        assert_eq!(w.failed, 0);
        assert_clean(&w.fake);
    }
}

#[test]
fn a_failing_arm_fails_the_raid1_write_once_both_halves_answered() {
    for arm in [0, 1] {
        let (mut w, _) = workload(raid1_fp_writes(Generation::Aero), true);
        w.fake.fail_next_write_on_arm(arm, MEDIUM_ERROR);
        let (o, _) = one(&mut w, IoOp::Write, 256, 8, 0x5A);
        let IoOutcome::Failed(e) = o else {
            panic!("arm {arm} failed, the write reported {o:?}");
        };
        assert_eq!(e.mfi_status.0, 0x2D, "arm {arm}: the failing half's status");
        // One completion for the pair: nothing else comes, and the tag is free again.
        w.service(10_000);
        assert!(!w.ctrl.tag_in_flight(0));
        assert_eq!(w.fake.raid1_write_pairs(), 1);
        // The other arm took the write; written again, both disks hold it.
        let (o, _) = one(&mut w, IoOp::Write, 256, 8, 0x5A);
        assert_eq!(o, IoOutcome::Ok, "arm {arm}");
        for a in 0..2 {
            assert_eq!(w.fake.arm_bytes(a, 256 * 512, 4096), vec![0x5A; 4096], "arm {a}");
        }
        assert_clean(&w.fake);
    }
}

#[test]
fn a_raid1_write_completes_only_when_both_halves_answered_and_a_reset_hands_it_back_once() {
    // The first half (the data arm's) is held by the model; the mirror's answers. An Aero at
    // 16 GT/s: a Ventura's first small writes take the LD path (its PCIe-bandwidth hint).
    for held in [1u32, 2] {
        let (mut w, _) = workload(raid1_fp_writes(Generation::Aero), true);
        w.fake.hold_next_io(held);
        w.submit(3, 0, IoOp::Write, 8, 1).unwrap();
        for _ in 0..50 {
            w.service(1000);
        }
        assert!(
            w.inflight.contains_key(&3),
            "held {held}: no completion with a half outstanding"
        );
        assert!(w.ctrl.tag_in_flight(3));
        assert_eq!(w.fake.raid1_write_pairs(), 1);
        w.reset().unwrap();
        assert_eq!(w.reset_returned.len(), 1, "held {held}: the pair handed back once");
        assert!(!w.ctrl.tag_in_flight(3));
        // Issued again (as the blk binding requeues it), then the workload goes on.
        w.submit(3, 0, IoOp::Write, 8, 1).unwrap();
        for _ in 0..50 {
            w.service(1000);
        }
        assert!(w.inflight.is_empty());
        w.run(300, 4);
        assert_eq!(w.failed, 0);
        assert_blocks_on_both_mirrors(&w);
        assert_clean(&w.fake);
    }
}

#[test]
fn raid1_writes_stay_on_the_ld_path_with_fastpath_off_or_without_the_write_capability() {
    for (fc, fastpath) in [
        (raid1_fp_writes(Generation::Aero), false),
        (raid1_config(Generation::Aero, |_| {}), true),
    ] {
        let (mut w, _) = workload(fc, fastpath);
        w.run(600, 4);
        assert_eq!(raid1_write_pairs(&w), 0);
        assert_eq!(w.fake.raid1_write_pairs(), 0);
        assert_eq!(w.failed, 0);
        assert_blocks_on_both_mirrors(&w);
        assert_clean(&w.fake);
    }
}

#[test]
fn a_stale_raid1_write_pair_is_refused_once_and_written_again_on_the_ld_path() {
    let (mut w, _) = workload(raid1_fp_writes(Generation::Aero), true);
    w.fake.change_raid_config();
    let (o, _) = one(&mut w, IoOp::Write, 512, 8, 0x77);
    assert_eq!(
        o,
        IoOutcome::StaleMap,
        "both halves refused: one StaleMap for the write"
    );
    assert_eq!(w.fake.raid1_write_pairs(), 1);
    assert_eq!(w.fake.fastpath_counts().1, 2, "the model refused both halves");
    assert!(
        w.ctrl.fastpath_lds().is_empty(),
        "FastPath is off after a stale refusal"
    );
    let (o, _) = one(&mut w, IoOp::Write, 512, 8, 0x77);
    assert_eq!(o, IoOutcome::Ok);
    assert_eq!(w.fake.raid1_write_pairs(), 1, "issued again on the LD path");
    for a in 0..2 {
        assert_eq!(w.fake.arm_bytes(a, 512 * 512, 4096), vec![0x77; 4096], "arm {a}");
    }
    assert_clean(&w.fake);
}

#[test]
fn a_raid1_write_goes_on_the_ld_path_when_its_pair_would_pass_the_firmware_queue_depth() {
    let (mut w, _) = workload(raid1_fp_writes(Generation::Aero), true);
    let tags = u32::from(w.ctrl.limits().io_tags);
    // Every tag but two held on the firmware as reads: a write pair still fits.
    w.fake.hold_next_io(tags - 2);
    for tag in 0..tags - 2 {
        w.submit(tag, 0, IoOp::Read, 1, 1).unwrap();
    }
    w.service(1000);
    assert_eq!(w.ctrl.requests_on_firmware(), tags - 2);
    w.submit(tags - 2, 0, IoOp::Write, 8, 1).unwrap();
    assert_eq!(
        raid1_write_pairs(&w),
        1,
        "a pair: tags - 2 + 2 requests on the firmware"
    );
    assert_eq!(w.ctrl.requests_on_firmware(), tags);
    for _ in 0..50 {
        w.service(1000);
    }
    assert!(!w.inflight.contains_key(&(tags - 2)));
    assert_eq!(w.ctrl.requests_on_firmware(), tags - 2);
    // With one tag left, a pair would put tags + 1 requests on the firmware: the LD path.
    w.fake.hold_next_io(1);
    w.submit(tags - 2, 0, IoOp::Read, 1, 1).unwrap();
    w.service(1000);
    w.submit(tags - 1, 0, IoOp::Write, 8, 1).unwrap();
    assert_eq!(raid1_write_pairs(&w), 1, "no second pair");
    let over = w
        .ctrl
        .stats
        .raid1_pairs_over_depth
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(over, 1);
    assert_eq!(w.ctrl.requests_on_firmware(), tags);
    for _ in 0..50 {
        w.service(1000);
    }
    assert!(
        !w.inflight.contains_key(&(tags - 1)),
        "the write completed on the LD path"
    );
    w.reset().unwrap();
    assert_eq!(
        w.ctrl.requests_on_firmware(),
        0,
        "the reset took every held read off the count"
    );
    assert_eq!(w.failed, 0);
    assert_blocks_on_both_mirrors(&w);
    assert_clean(&w.fake);
}
