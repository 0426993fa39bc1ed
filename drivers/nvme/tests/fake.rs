//! The fake controller is strict where QEMU 7.2 is (bring-up, commands, completions, errors): driven here with raw
//! register writes and hand-built entries, independently of the driver.

mod common;

use std::sync::Arc;

use common::Buf;
use devhal::Mmio;
use nvme::fake::{FakeConfig, FakeMmio, FakeNvme};

/// A hand-driven queue pair (admin when `qid` is 0).
struct RawQueue {
    qid: u16,
    sq: Buf,
    cq: Buf,
    entries: u32,
    tail: u32,
    head: u32,
    phase: bool,
}

impl RawQueue {
    fn new(fake: &FakeNvme, qid: u16, entries: u32) -> Self {
        Self {
            qid,
            sq: Buf::new(fake, entries as usize * 64),
            cq: Buf::new(fake, entries as usize * 16),
            entries,
            tail: 0,
            head: 0,
            phase: true,
        }
    }

    /// Posts `dw` (CID = tail) and returns (status field, DW0, SQID, SQHD) of its completion.
    fn cmd(&mut self, mmio: &FakeMmio, mut dw: [u32; 16]) -> (u16, u32, u16, u16) {
        dw[0] = (dw[0] & 0xFFFF) | (self.tail << 16);
        for (i, d) in dw.iter().enumerate() {
            let off = self.tail as usize * 64 + i * 4;
            self.sq.bytes()[off..off + 4].copy_from_slice(&d.to_le_bytes());
        }
        self.tail = (self.tail + 1) % self.entries;
        mmio.write32(0x1000 + 8 * u32::from(self.qid), self.tail);
        let off = self.head as usize * 16;
        let rd = |o: usize| u32::from_le_bytes(self.cq.bytes()[off + o..off + o + 4].try_into().unwrap());
        let dw3 = rd(12);
        assert_eq!(dw3 & (1 << 16) != 0, self.phase, "no completion posted");
        assert_eq!(
            dw3 & 0xFFFF,
            (self.tail + self.entries - 1) % self.entries,
            "CID echoed"
        );
        let (dw0, dw2) = (rd(0), rd(8));
        self.head += 1;
        if self.head == self.entries {
            self.head = 0;
            self.phase = !self.phase;
        }
        mmio.write32(0x1004 + 8 * u32::from(self.qid), self.head);
        ((dw3 >> 17) as u16, dw0, (dw2 >> 16) as u16, dw2 as u16)
    }
}

fn enabled(cfg: FakeConfig) -> (Arc<FakeNvme>, FakeMmio, RawQueue) {
    let fake = FakeNvme::new(cfg);
    let mmio = fake.mmio();
    let admin = RawQueue::new(&fake, 0, 16);
    mmio.write32(0x24, 15 << 16 | 15);
    mmio.write32(0x28, admin.sq.phys as u32);
    mmio.write32(0x2C, (admin.sq.phys >> 32) as u32);
    mmio.write32(0x30, admin.cq.phys as u32);
    mmio.write32(0x34, (admin.cq.phys >> 32) as u32);
    mmio.write32(0x14, 0x0046_0001);
    assert_eq!(mmio.read32(0x1C), 1);
    (fake, mmio, admin)
}

fn create_cq(qid: u16, qsize: u32, base: u64, iv: u16, flags: u32) -> [u32; 16] {
    let mut dw = [0u32; 16];
    dw[0] = 0x05;
    dw[6] = base as u32;
    dw[7] = (base >> 32) as u32;
    dw[10] = qsize << 16 | u32::from(qid);
    dw[11] = u32::from(iv) << 16 | flags;
    dw
}

fn create_sq(qid: u16, qsize: u32, base: u64, cqid: u16, flags: u32) -> [u32; 16] {
    let mut dw = create_cq(qid, qsize, base, 0, flags);
    dw[0] = 0x01;
    dw[11] = u32::from(cqid) << 16 | flags;
    dw
}

#[test]
fn bad_enables_set_cfs_and_disable_clears_it() {
    let fake = FakeNvme::new(FakeConfig::new(1));
    let mmio = fake.mmio();
    let q = RawQueue::new(&fake, 0, 4);
    mmio.write32(0x24, 3 << 16 | 3);
    mmio.write32(0x28, q.sq.phys as u32);
    mmio.write32(0x2C, (q.sq.phys >> 32) as u32);
    mmio.write32(0x30, q.cq.phys as u32);
    mmio.write32(0x34, (q.cq.phys >> 32) as u32);
    for bad_cc in [
        0x0047_0001u32,       // IOSQES 7
        0x0036_0001,          // IOCQES 3
        0x0046_0001 | 5 << 7, // MPS 128 KiB > MPSMAX
        0x0046_0001 | 1 << 4, // CSS 001b
    ] {
        mmio.write32(0x14, bad_cc);
        assert_eq!(mmio.read32(0x1C) & 3, 2, "CC {bad_cc:#x}: CFS, not ready");
        mmio.write32(0x14, 0);
        assert_eq!(mmio.read32(0x1C) & 3, 0, "EN=0 clears CFS");
    }
    // A misaligned admin queue, or a zero-sized one.
    mmio.write32(0x28, q.sq.phys as u32 + 64);
    mmio.write32(0x14, 0x0046_0001);
    assert_eq!(mmio.read32(0x1C) & 3, 2);
    mmio.write32(0x14, 0);
    mmio.write32(0x28, q.sq.phys as u32);
    mmio.write32(0x24, 3 << 16);
    mmio.write32(0x14, 0x0046_0001);
    assert_eq!(mmio.read32(0x1C) & 3, 2);
    mmio.write32(0x14, 0);
    mmio.write32(0x24, 3 << 16 | 3);
    mmio.write32(0x14, 0x0046_0001);
    assert_eq!(mmio.read32(0x1C) & 3, 1);
}

#[test]
fn queue_creation_errors_in_qemu_order() {
    let mut cfg = FakeConfig::new(4);
    cfg.msix_qsize = 3;
    let (fake, mmio, mut a) = enabled(cfg);
    let cq = Buf::new(&fake, 4096);
    let sq = Buf::new(&fake, 4096 * 4);
    let st = |a: &mut RawQueue, dw| a.cmd(&mmio, dw).0;
    assert_eq!(st(&mut a, create_cq(0, 63, cq.phys, 1, 3)), 0x4101, "QID 0");
    assert_eq!(
        st(&mut a, create_cq(5, 63, cq.phys, 1, 3)),
        0x4101,
        "QID > max_ioqpairs"
    );
    assert_eq!(st(&mut a, create_cq(1, 0, cq.phys, 1, 3)), 0x4102, "one entry");
    assert_eq!(st(&mut a, create_cq(1, 2048, cq.phys, 1, 3)), 0x4102, "2049 entries");
    assert_eq!(st(&mut a, create_cq(1, 63, cq.phys + 512, 1, 3)), 0x4013, "unaligned");
    assert_eq!(
        st(&mut a, create_cq(1, 63, cq.phys, 3, 3)),
        0x4108,
        "IV beyond the table"
    );
    assert_eq!(st(&mut a, create_cq(1, 63, cq.phys, 3, 1)), 0x4108, "even with IEN=0");
    assert_eq!(st(&mut a, create_cq(1, 63, cq.phys, 1, 2)), 0x4002, "PC=0");
    assert_eq!(st(&mut a, create_cq(1, 63, cq.phys, 1, 3)), 0);
    assert_eq!(st(&mut a, create_cq(1, 63, cq.phys, 1, 3)), 0x4101, "in use");
    assert_eq!(st(&mut a, create_sq(1, 63, sq.phys, 0, 1)), 0x4100, "CQID 0");
    assert_eq!(st(&mut a, create_sq(1, 63, sq.phys, 2, 1)), 0x4100, "missing CQ");
    assert_eq!(st(&mut a, create_sq(1, 0, sq.phys, 1, 1)), 0x4102);
    assert_eq!(st(&mut a, create_sq(1, 63, sq.phys + 8, 1, 1)), 0x4013);
    assert_eq!(st(&mut a, create_sq(1, 63, sq.phys, 1, 0)), 0x4002);
    assert_eq!(st(&mut a, create_sq(1, 63, sq.phys, 1, 1)), 0);
    // Number of Queues after a CQ exists: command sequence error; 0xFFFF: invalid field.
    let mut nq = [0u32; 16];
    nq[0] = 0x09;
    nq[10] = 0x07;
    nq[11] = 0x0003_0003;
    assert_eq!(st(&mut a, nq), 0x400C);
    // Deleting a CQ that still has an SQ; unknown admin opcode.
    let mut del = [0u32; 16];
    del[0] = 0x04;
    del[10] = 1;
    assert_eq!(st(&mut a, del), 0x010C);
    let mut bad = [0u32; 16];
    bad[0] = 0xC1;
    assert_eq!(st(&mut a, bad), 0x4001);
    // Identify of NSID 0.
    let page = Buf::new(&fake, 4096);
    let mut id = [0u32; 16];
    id[0] = 0x06;
    id[6] = page.phys as u32;
    id[7] = (page.phys >> 32) as u32;
    assert_eq!(st(&mut a, id), 0x400B);
    // After a reset, Number of Queues works again.
    mmio.write32(0x14, 0);
    mmio.write32(0x14, 0x0046_0001);
    let mut a = RawQueue {
        tail: 0,
        head: 0,
        phase: true,
        ..a
    };
    a.sq.bytes().fill(0);
    a.cq.bytes().fill(0);
    let (s, dw0, _, _) = a.cmd(&mmio, nq);
    assert_eq!((s, dw0), (0, 0x0003_0003), "QEMU grants max_ioqpairs");
    nq[11] = 0xFFFF;
    assert_eq!(a.cmd(&mmio, nq).0, 0x4002);
    assert!(fake.memory().violations().is_empty());
}

#[test]
fn io_errors_prp_rules_and_abort() {
    let (fake, mmio, mut a) = enabled(FakeConfig::new(2));
    let mut io = RawQueue::new(&fake, 1, 8);
    assert_eq!(a.cmd(&mmio, create_cq(1, 7, io.cq.phys, 1, 3)).0, 0);
    assert_eq!(a.cmd(&mmio, create_sq(1, 7, io.sq.phys, 1, 1)).0, 0);
    let data = Buf::new(&fake, 3 * 4096);
    let rw = |op: u32, nsid: u32, slba: u64, nlb: u32, prp1: u64, prp2: u64| {
        let mut dw = [0u32; 16];
        dw[0] = op;
        dw[1] = nsid;
        dw[6] = prp1 as u32;
        dw[7] = (prp1 >> 32) as u32;
        dw[8] = prp2 as u32;
        dw[9] = (prp2 >> 32) as u32;
        dw[10] = slba as u32;
        dw[11] = (slba >> 32) as u32;
        dw[12] = nlb - 1;
        dw
    };
    // 8 KiB at a page: PRP2 is a data page and must be aligned.
    let (s, _, sqid, sqhd) = io.cmd(&mmio, rw(2, 1, 0, 16, data.phys, data.phys + 4096));
    assert_eq!((s, sqid, sqhd), (0, 1, 1), "SQHD follows the fetched tail");
    assert_eq!(
        io.cmd(&mmio, rw(2, 1, 0, 16, data.phys, data.phys + 4096 + 512)).0,
        0x4013
    );
    // Beyond the namespace; MDTS (512 KiB); NSID 0; inactive NSID; bad opcode.
    assert_eq!(io.cmd(&mmio, rw(2, 1, 131071, 2, data.phys, 0)).0, 0x4080);
    assert_eq!(io.cmd(&mmio, rw(2, 1, 0, 1032, data.phys, 0)).0, 0x4002);
    assert_eq!(io.cmd(&mmio, rw(2, 0, 0, 1, data.phys, 0)).0, 0x400B);
    assert_eq!(io.cmd(&mmio, rw(2, 7, 0, 1, data.phys, 0)).0, 0x4002);
    assert_eq!(io.cmd(&mmio, rw(0x7F, 1, 0, 1, data.phys, 0)).0, 0x4001);
    // Injected media errors: 0x281 on read.
    fake.inject_error(1, 9, 0x0281, 1);
    assert_eq!(io.cmd(&mmio, rw(2, 1, 8, 2, data.phys, 0)).0, 0x0281);
    // Abort: "not aborted" (DW0 bit 0 = 1) for any CID; bad SQID is an invalid field.
    let mut abort = [0u32; 16];
    abort[0] = 0x08;
    abort[10] = 777 << 16 | 1;
    let (s, dw0, _, _) = a.cmd(&mmio, abort);
    assert_eq!((s, dw0 & 1), (0, 1));
    abort[10] = 777 << 16 | 9;
    assert_eq!(a.cmd(&mmio, abort).0, 0x4002);
    // Data outside DMA memory is refused and recorded, never written.
    assert_eq!(io.cmd(&mmio, rw(2, 1, 0, 1, 0x10, 0)).0, 0x4004);
    let v = fake.memory().violations();
    assert_eq!(v.len(), 1, "{v:?}");
    // One message per CQ pass on the CQ's vector (admin completions on vector 0).
    let s = fake.stats();
    assert_eq!(s.msix_per_vector[1], 9, "nine I/O commands, one doorbell pass each");
    assert!(s.msix_per_vector[0] >= 2);
}
