//! The LD read/write frame composed word by word equals, byte for byte, the frame the general
//! builder composes field by field: two controllers over two identical models, one of them
//! held to the general builder, get the same requests in lockstep (reads and writes of 1 to 12
//! segments on the same tags, so each SMID changes kind, SGL length and path), and after every
//! submission the SMID's frame (and a RAID-1 pair's peer frame) must be identical; the same
//! after an online controller reset. Every generation, the LD path, FastPath to RAID-0 and
//! RAID-1 (write pairs, cache-bypass marks) and a PCIe-bandwidth-limited RAID-1.

mod common;

use common::*;
use megasas_fusion::fake::{FakeConfig, FakeRaid0};
use megasas_fusion::raidmap::{CAP_CACHE_BYPASS, CAPS_FP_READ_WRITE};
use megasas_fusion::{Generation, IoOp};

fn pair(fc: &FakeConfig, limited: bool) -> (Workload, Workload) {
    let make = |general: bool| {
        let g = fc.generation;
        let mut cfg = config(g, 2);
        cfg.general_frames = general;
        cfg.pcie_bw_limited = limited;
        let (fake, ctrl, report) = bring_up(fc.clone(), cfg);
        let ctrl = ctrl.unwrap_or_else(|e| panic!("bring-up: {e}\n{report}"));
        ctrl.enable_interrupts();
        Workload::new(fake, ctrl, 0xF4A3)
    };
    (make(false), make(true))
}

fn same_frames(a: &Workload, b: &Workload, tag: u32, what: &str) {
    let smid = tag as u16 + 1;
    let peer = smid + a.ctrl.limits().max_fw_cmds;
    for s in [smid, peer] {
        let (Some(fa), Some(fb)) = (a.ctrl.frame_bytes(s), b.ctrl.frame_bytes(s)) else {
            assert!(s == peer && a.ctrl.frame_bytes(s).is_none() && b.ctrl.frame_bytes(s).is_none());
            continue;
        };
        if fa != fb {
            let diff: Vec<_> = (0..fa.len())
                .filter(|&i| fa[i] != fb[i])
                .map(|i| format!("{i:#04x}: {:#04x} != {:#04x}", fa[i], fb[i]))
                .collect();
            panic!("{what}: SMID {s} frame differs from the general builder's: {diff:?}");
        }
    }
}

fn lockstep(fc: FakeConfig, limited: bool, what: &str) {
    let (mut a, mut b) = pair(&fc, limited);
    let tags = a.ctrl.limits().io_tags.min(64) as u32;
    let mut rng = Rng(0x5EED);
    for step in 0..3000u32 {
        if step == 1500 {
            // Drain, then an online controller reset: the frames stay in memory across it.
            for _ in 0..200 {
                a.service(200);
                b.service(200);
            }
            a.reset().unwrap();
            b.reset().unwrap();
        }
        if limited && step % 100 == 50 {
            // A large RAID-1 write (128 blocks inside strip 1), which the PCIe limit keeps on
            // the LD path with its mark, and the hint it leaves for the next small writes.
            for _ in 0..400 {
                a.service(200);
                b.service(200);
                if a.inflight.is_empty() && b.inflight.is_empty() {
                    break;
                }
            }
            assert!(a.inflight.is_empty() && b.inflight.is_empty(), "{what}: drained");
            a.submit_large_write(16, 128, 128).unwrap();
            b.submit_large_write(16, 128, 128).unwrap();
            same_frames(&a, &b, 16, what);
            // Its data spans the buffers of the tags after it: done before they are used.
            for _ in 0..400 {
                a.service(200);
                b.service(200);
                if a.inflight.is_empty() && b.inflight.is_empty() {
                    break;
                }
            }
            continue;
        }
        let tag = rng.below(u64::from(tags)) as u32;
        if a.inflight.contains_key(&tag) || b.inflight.contains_key(&tag) {
            a.service(50);
            b.service(50);
            continue;
        }
        let queue = rng.below(u64::from(a.ctrl.io_queues())) as u16 + a.ctrl.high_iops_queues();
        let op = if rng.below(2) == 0 { IoOp::Read } else { IoOp::Write };
        let blocks = 1 + rng.below(8) as u32;
        let nseg = 1 + rng.below(12) as usize;
        let ra = a.submit(tag, queue, op, blocks, nseg);
        let rb = b.submit(tag, queue, op, blocks, nseg);
        assert_eq!(ra.is_ok(), rb.is_ok(), "{what}: the same verdict");
        same_frames(&a, &b, tag, what);
        if rng.below(4) == 0 {
            a.service(100);
            b.service(100);
        }
    }
    for _ in 0..400 {
        a.service(200);
        b.service(200);
    }
    assert!(a.inflight.is_empty() && b.inflight.is_empty(), "{what}: all completed");
    assert_eq!((a.completed, a.failed), (b.completed, b.failed), "{what}");
    assert!(a.completed > 2000, "{what}: {} completed", a.completed);
    for s in ["fastpath_ios", "raid1_write_pairs"] {
        let get = |w: &Workload| match s {
            "fastpath_ios" => w.ctrl.stats.fastpath_ios.load(std::sync::atomic::Ordering::Relaxed),
            _ => w
                .ctrl
                .stats
                .raid1_write_pairs
                .load(std::sync::atomic::Ordering::Relaxed),
        };
        assert_eq!(get(&a), get(&b), "{what}: {s}");
    }
    assert_clean(&a.fake);
    assert_clean(&b.fake);
}

#[test]
fn the_ld_path_frame_equals_the_general_builders_in_every_generation() {
    for g in [
        Generation::Thunderbolt,
        Generation::Invader,
        Generation::Ventura,
        Generation::Aero,
    ] {
        lockstep(FakeConfig::new(g), false, &format!("{g:?} LD path"));
    }
}

#[test]
fn the_fastpath_frames_equal_the_general_builders() {
    let raid = |g: Generation, r: FakeRaid0| {
        let mut fc = FakeConfig::new(g);
        fc.lds = Vec::new();
        fc.raid0 = Some(r);
        fc
    };
    for g in [Generation::Invader, Generation::Ventura, Generation::Aero] {
        lockstep(
            raid(g, FakeRaid0::new(LD, &[4, 7], 16)),
            false,
            &format!("{g:?} RAID-0"),
        );
        lockstep(
            raid(g, FakeRaid0::mirror(LD, [4, 7], 16)),
            false,
            &format!("{g:?} RAID-1 reads"),
        );
    }
    for g in [Generation::Ventura, Generation::Aero] {
        let mut bypass = FakeRaid0::new(LD, &[4, 7], 16);
        bypass.caps = CAPS_FP_READ_WRITE | CAP_CACHE_BYPASS;
        lockstep(raid(g, bypass), false, &format!("{g:?} RAID-0 cache bypass"));
        let mut pairs = FakeRaid0::mirror(LD, [4, 7], 16);
        pairs.caps = CAPS_FP_READ_WRITE | CAP_CACHE_BYPASS;
        lockstep(raid(g, pairs), false, &format!("{g:?} RAID-1 write pairs"));
        let mut limited = FakeRaid0::mirror(LD, [4, 7], 16);
        limited.caps = CAPS_FP_READ_WRITE;
        let mut fc = raid(g, limited);
        fc.pcie_bw_limited = true;
        lockstep(fc, true, &format!("{g:?} RAID-1 PCIe-limited"));
    }
}
