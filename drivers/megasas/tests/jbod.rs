//! JBOD (QEMU `megasas-gen2,use_jbod=on`): the disks are system PDs. LD_GET_LIST is empty, so a
//! driver that only lists LDs finds nothing; PD_LIST_QUERY (exposed to host) finds them and I/O
//! goes through PD SCSI pass-through (READ/WRITE(16)), as Linux does.

mod common;

use common::*;
use megasas::fake::FakeConfig;
use megasas::{IoOp, IoRequest, IoStatus, Model, Segment};

fn pd_rw(op: IoOp, target: u8, lba: u64, blocks: u32, sgl: &[Segment]) -> IoRequest<'_> {
    IoRequest {
        system_pd: true,
        op,
        target,
        lba,
        blocks,
        sgl,
    }
}

#[test]
fn jbod_disks_are_found_as_system_pds_and_carry_io() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.use_jbod = true;
    cfg.disks = vec![disk(0, 64 << 20, 512), disk(2, 8 << 20, 4096)];
    let (dev, ctrl, drives) = ready(cfg);
    let found: Vec<_> = drives
        .iter()
        .map(|d| (d.target, d.system_pd, d.blocks, d.block_size))
        .collect();
    assert_eq!(found, [(0, true, 131072, 512), (2, true, 2048, 4096)]);
    // The LD path finds nothing in JBOD mode.
    assert!(ctrl.ld_list(0).unwrap().is_empty());
    for (i, d) in drives.iter().enumerate() {
        let bs = d.block_size as usize;
        let len = bs * 3;
        let lba = d.blocks - 4;
        let data = pattern(40 + i as u64, len);
        let wbuf = dev.buffer(len);
        wbuf.write(0, &data);
        let wsgl = [wbuf.segment(0, 700), wbuf.segment(700, (len - 700) as u32)];
        ctrl.submit(3, &pd_rw(IoOp::Write, d.target, lba, 3, &wsgl)).unwrap();
        assert_eq!(reap_n(&ctrl, 1), [(3, IoStatus::Success)]);
        assert_eq!(dev.disk_read(d.target, lba, 3), data, "device contents");
        let rbuf = dev.buffer(len);
        let rsgl = [rbuf.segment(0, len as u32)];
        ctrl.submit(4, &pd_rw(IoOp::Read, d.target, lba, 3, &rsgl)).unwrap();
        assert_eq!(reap_n(&ctrl, 1), [(4, IoStatus::Success)]);
        assert_eq!(rbuf.read(0, len), data, "read back");
        // Flush through PD pass-through too.
        let before = dev.stats().sync_caches;
        ctrl.submit(5, &pd_rw(IoOp::Flush, d.target, 0, 0, &[])).unwrap();
        assert_eq!(reap_n(&ctrl, 1), [(5, IoStatus::Success)]);
        assert_eq!(dev.stats().sync_caches, before + 1);
    }
    // A PD request is checked against the PD table: beyond the end, unknown target, and an LD
    // request for a disk that is only a PD.
    let buf = dev.buffer(512);
    let sgl = [buf.segment(0, 512)];
    assert!(ctrl.submit(6, &pd_rw(IoOp::Read, 0, 131072, 1, &sgl)).is_err());
    assert!(ctrl.submit(6, &pd_rw(IoOp::Read, 1, 0, 1, &sgl)).is_err());
    let mut as_ld = pd_rw(IoOp::Read, 0, 0, 1, &sgl);
    as_ld.system_pd = false;
    assert!(ctrl.submit(6, &as_ld).is_err());
    assert_clean(&dev);
}

#[test]
fn raid_mode_lists_each_disk_once_as_an_ld() {
    // Without use_jbod, PD_LIST_QUERY(exposed to host) answers OK with nothing written, so the
    // disk is only an LD (no second block device for the same disk).
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.disks = vec![disk(0, 64 << 20, 512)];
    let (dev, _ctrl, drives) = ready(cfg);
    let found: Vec<_> = drives.iter().map(|d| (d.target, d.system_pd)).collect();
    assert_eq!(found, [(0, false)]);
    assert!(
        dev.stats()
            .dcmds
            .iter()
            .any(|&(op, mbox0)| op == 0x0201_0100 && mbox0 == 5)
    );
    assert_clean(&dev);
}

#[test]
fn a_firmware_refusing_the_pd_query_still_serves_its_lds() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.refused_dcmds = vec![0x0201_0100];
    cfg.disks = vec![disk(0, 64 << 20, 512)];
    let (dev, _ctrl, drives) = ready(cfg);
    let found: Vec<_> = drives.iter().map(|d| (d.target, d.system_pd)).collect();
    assert_eq!(found, [(0, false)]);
    assert!(dev.stats().dcmds.iter().any(|&(op, _)| op == 0x0201_0100));
    assert_clean(&dev);
}
